/* meshd's workers (core_int.h): a program's worker records, the slots
 * they take, the crash-loop backoff of deaths before `ready`, start, and
 * the workers held by jobs (meshd/jobs/job_exec.c). */
#include "meshd/core/core_int.h"

#include "base/err.h"
#include "base/io.h"
#include "base/log.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

/* A worker of p died (or failed to start) before `ready`: the next spawn
 * waits (exponential backoff), and CRASH_FAIL_AFTER of them within
 * CRASH_WINDOW_NS make p FAILED.  d->mu held. */
static void note_unready(struct meshd_core *d, struct program *p, struct worker *wk, uint64_t now)
{
	char *r = mesh_instance_last_report(wk->inst);
	if (r) {
		free(p->crash_report);
		p->crash_report = r;
	}
	p->streak++;
	p->crash_at[p->ncrash++ % CRASH_FAIL_AFTER] = now;
	unsigned shift = p->streak - 1 < 16 ? p->streak - 1 : 16;
	uint64_t wait = d->backoff_ns << shift;
	p->retry_at = now + (wait < CRASH_BACKOFF_CAP_NS ? wait : CRASH_BACKOFF_CAP_NS);
	uint64_t oldest = p->crash_at[p->ncrash % CRASH_FAIL_AFTER];
	if (p->failed || p->ncrash < CRASH_FAIL_AFTER || now - oldest > CRASH_WINDOW_NS)
		return;
	const char *nl = p->crash_report ? strchr(p->crash_report, '\n') : NULL;
	int hl = p->crash_report ? (int)(nl ? nl - p->crash_report : (long)strlen(p->crash_report)) : 0;
	p->failed = mesh_strf("%u starts died before 'ready' within %llu s; the last: %.*s", CRASH_FAIL_AFTER,
			      (unsigned long long)((now - oldest) / MESH_NS_PER_S + 1), hl,
			      p->crash_report ? p->crash_report : "");
	if (p->failed)
		mesh_warn("failed name=%s: program FAILED: %s (mesh start %s clears it)", p->img.name, p->failed,
			  p->img.name);
}

/* Gives back the slots of workers that left them, replaces a slot that a
 * crash failed (no old process may still map it), and notes deaths before
 * `ready` for the backoff.  d->mu held. */
void meshd__reconcile(struct meshd_core *d, struct program *p)
{
	uint64_t now = mesh_mono_ns();
	for (unsigned i = 0; i < p->nw; i++) {
		struct worker *wk = &p->w[i];
		struct mesh_instance_stats st = mesh_instance_stats(wk->inst);
		if (st.unready != wk->seen_unready) {
			wk->seen_unready = st.unready;
			note_unready(d, p, wk, now);
		} else if (st.state == MESH_IS_IDLE || st.state == MESH_IS_RUNNING) {
			p->streak = 0;
		}
		struct mesh_slot *bad = mesh_instance_take_failed_slot(wk->inst);
		if (wk->slot < 0)
			continue;
		if (mesh_instance_slot(wk->inst) == d->slots[wk->slot] && !bad)
			continue;
		enum mesh_istate ist = mesh_instance_state(wk->inst);
		if (ist == MESH_IS_LAUNCHING || ist == MESH_IS_RUNNING || ist == MESH_IS_HALTING ||
		    (ist == MESH_IS_STARTING && !bad))
			continue; /* a launch on it is pending */
		unsigned s = (unsigned)wk->slot;
		if ((bad || mesh_slot_failed(d->slots[s])) && d->slot_busy[s] == 0) {
			struct mesh_slot *fresh = NULL;
			if (mesh_slot_create(&fresh, s, mesh_slot_ring_cap(d->slots[s])) == 0) {
				mesh_slot_free(d->slots[s]);
				d->slots[s] = fresh;
			}
		}
		d->slot_taken[s] = 0;
		wk->slot = -1;
	}
}

void meshd__reconcile_all(struct meshd_core *d)
{
	for (struct program *p = d->progs; p; p = p->next)
		meshd__reconcile(d, p);
}

/* A free slot whose rings are ring bytes (the program's manifest): one of
 * another size, or one that failed, is replaced by a fresh one.  d->mu held. */
int meshd__take_slot(struct meshd_core *d, uint64_t ring)
{
	for (unsigned i = 0; i < d->nslots; i++)
		if (!d->slot_taken[i] && d->slot_busy[i] == 0) {
			if (mesh_slot_failed(d->slots[i]) || mesh_slot_ring_cap(d->slots[i]) != ring) {
				struct mesh_slot *fresh = NULL;
				if (mesh_slot_create(&fresh, i, ring) != 0)
					continue;
				mesh_slot_free(d->slots[i]);
				d->slots[i] = fresh;
			}
			d->slot_taken[i] = 1;
			return (int)i;
		}
	return -1;
}

/* Every slot is taken: halts the least recently used worker that serves no
 * call (of any program) off its slot, which comes free once it says
 * `halted`; the process stays, IDLE, until its idle TTL.  While a worker
 * is being halted off its slot already (this caller's last eviction, or
 * another's; or killed, a halt that timed out), that one is the answer and
 * no other is halted: a halt that took longer than a caller's wait step
 * evicted one more warm worker each step.  The program the victim belongs to, with a reference held (unref
 * it), and its instance in *victim; NULL when every slot serves a call.
 * d->mu held. */
struct program *meshd__evict_lru(struct meshd_core *d, struct mesh_instance **victim)
{
	struct program *vp = NULL;
	struct worker *vw = NULL;
	int halting = 0;
	for (struct program *p = d->progs; p && !halting; p = p->next)
		for (unsigned i = 0; i < p->nw && !halting; i++) {
			struct worker *wk = &p->w[i];
			enum mesh_istate st = mesh_instance_state(wk->inst);
			if (wk->slot >= 0 && (st == MESH_IS_HALTING || st == MESH_IS_STOPPING_KILL)) {
				halting = 1;
			} else if (wk->slot < 0 || wk->busy || wk->stuck_since || d->slot_busy[wk->slot] ||
				   st != MESH_IS_RUNNING || (vw && wk->last_used >= vw->last_used)) {
				continue;
			}
			vp = p;
			vw = wk;
		}
	if (!vw)
		return NULL;
	if (!halting) {
		mesh_info("evict name=%s slot=%d: every slot is taken; the least recently used idle worker is halted",
			  vp->img.name, vw->slot);
		mesh_instance_halt(vw->inst);
	}
	vp->refs++;
	*victim = vw->inst;
	return vp;
}

static uint64_t start_wait_ns(const struct program *p, const struct meshd_core *d)
{
	(void)d;
	return p->img.m.ready_timeout_ns + p->img.m.online_timeout_ns + STOP_WAIT_NS;
}

/* A new worker record of p with its instance; its index or a negative
 * code.  d->mu held; p->nw < max_workers. */
int meshd__new_worker(struct meshd_core *d, struct program *p)
{
	struct worker *wk = &p->w[p->nw];
	memset(wk, 0, sizeof *wk);
	wk->slot = -1;
	int rc = mesh_instance_new(d->h, &p->img, &wk->inst);
	return rc ? rc : (int)p->nw++;
}

/* After a spawn of wk (rc: how it went) that meshd__gpu_before_spawn
 * reserved res for (0: nothing): the reservation settled, and the worker's
 * own kept (and its last one, for ps). */
void meshd__spawned(struct meshd_core *d, struct worker *wk, uint64_t res, int rc)
{
	meshd__gpu_after_spawn(&d->G, res, wk->inst, rc);
	if (res)
		wk->gpu_prev = wk->gpu_res, wk->gpu_res = res;
}

/* A worker of p that is up or coming up, or a new one warmed; d->mu held.
 * Returns its index or a negative code. */
static int pick_or_warm(struct meshd_core *d, struct program *p, char **err)
{
	int down = -1;
	for (unsigned i = 0; i < p->nw; i++) {
		enum mesh_istate st = mesh_instance_state(p->w[i].inst);
		if (st != MESH_IS_DOWN && !mesh_istate_stopping(st)) {
			/* A no-op on a live worker, but it makes this the request
			 * whose failures the caller's wait reports. */
			int rc = mesh_instance_warm(p->w[i].inst, err);
			return rc ? rc : (int)i;
		}
		if (st == MESH_IS_DOWN && down < 0)
			down = (int)i;
	}
	if (down < 0) {
		if (p->nw >= p->img.m.max_workers)
			return mesh_errf(err, MESH_E_STATE, "'%s' has %u workers stopping; try again", p->img.name, p->nw);
		int rc = meshd__new_worker(d, p);
		if (rc < 0)
			return rc;
		down = rc;
	}
	struct worker *wk = &p->w[down];
	uint64_t res;
	int rc = meshd__gpu_before_spawn(&d->G, &d->mu, 0, &p->img, (unsigned)down, wk->inst, &res, err);
	if (rc)
		return rc;
	rc = mesh_instance_warm(wk->inst, err);
	meshd__spawned(d, wk, res, rc);
	return rc ? rc : down;
}

int meshd_op_start(struct meshd_core *d, const char *name, struct mesh_instance_stats *out, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	int rc = meshd__get_program(d, name, &p, err);
	if (rc)
		return rc;
	meshd__gpu_settle(&d->G, &p->img);
	pthread_mutex_lock(&d->mu);
	/* An explicit start clears FAILED and the crash-loop backoff. */
	meshd__reconcile(d, p);
	if (p->failed)
		mesh_info("start name=%s: FAILED cleared", p->img.name);
	free(p->failed);
	p->failed = NULL;
	p->streak = 0;
	p->ncrash = 0;
	p->retry_at = 0;
	int i = pick_or_warm(d, p, err);
	struct mesh_instance *inst = i >= 0 ? p->w[i].inst : NULL;
	if (i >= 0) {
		p->w[i].last_used = mesh_mono_ns();
		meshd__kick(d, p->w[i].last_used + p->img.m.idle_ttl_ns);
	}
	pthread_mutex_unlock(&d->mu);
	if (i < 0) {
		meshd__unref(d, p);
		return i;
	}
	rc = mesh_instance_wait(inst, 1u << MESH_IS_IDLE | 1u << MESH_IS_RUNNING | 1u << MESH_IS_LAUNCHING,
				start_wait_ns(p, d), err);
	if (rc == 0 && out)
		*out = mesh_instance_stats(inst);
	meshd__unref(d, p);
	return rc;
}

/* ---- workers held by jobs (meshd/jobs/job_exec.c; ops.h) ---- */

/* The free worker of p a job may take, or a new one; d->mu held.  Its
 * index, or -1 when all max_workers are in use. */
static int job_candidate(struct meshd_core *d, struct program *p)
{
	static const enum mesh_istate pref[] = {MESH_IS_RUNNING, MESH_IS_IDLE, MESH_IS_STARTING, MESH_IS_DOWN};
	for (unsigned k = 0; k < sizeof pref / sizeof pref[0]; k++)
		for (unsigned i = 0; i < p->nw; i++) {
			struct worker *wk = &p->w[i];
			if (wk->job || wk->busy || wk->stuck_since || mesh_instance_state(wk->inst) != pref[k] ||
			    (pref[k] == MESH_IS_RUNNING && wk->slot < 0))
				continue;
			return (int)i;
		}
	if (p->nw >= p->img.m.max_workers || mesh_instance_new(d->h, &p->img, &p->w[p->nw].inst) != 0)
		return -1;
	p->w[p->nw].slot = -1;
	return (int)p->nw++;
}

static void job_unhold(struct meshd_core *d, struct program *p, unsigned i, int slot)
{
	struct worker *wk = &p->w[i];
	wk->job = 0;
	wk->last_used = mesh_mono_ns();
	meshd__kick(d, wk->last_used + p->img.m.idle_ttl_ns); /* idle from now */
	if (slot >= 0)
		d->slot_busy[slot]--;
	if (atomic_load(&p->retired))
		meshd__retire_sweep(d, p); /* an old image's: it exits */
	meshd__reconcile(d, p);
}

/* A launch's armed callback (meshd_job_worker_get_armed): the caller's,
 * with the handle the worker will have. */
struct armed_ctx {
	void (*fn)(void *arg, const struct meshd_job_worker *h);
	void *arg;
	struct meshd_job_worker h;
	int called;
};

static void core_armed(void *arg)
{
	struct armed_ctx *ac = arg;
	ac->called = 1;
	ac->fn(ac->arg, &ac->h);
}

/* One job_worker_get: what it was asked and what it did so far. */
struct get {
	struct meshd_core *d;
	struct program *p; /* referenced */
	unsigned i;	   /* the worker, marked wk->job */
	int early;
	void (*armed)(void *arg, const struct meshd_job_worker *h);
	void *arg;
	int held;     /* slot_busy and the online wait's reference taken before the launch */
	int called;   /* armed told: the caller has the hold whatever follows */
	int launched; /* launched here */
};

/* A get that failed: all it took is put back, or, when the caller was
 * told armed, the hold h is the caller's to put back (the online wait's
 * reference goes, the get's own stays).  slot: the slot it holds busy
 * (-1: none).  d->mu held, released here. */
static int get_failed(struct get *g, int slot, const struct meshd_job_worker *h, struct meshd_job_worker *out,
		      int *armed_called, int rc)
{
	struct meshd_core *d = g->d;
	struct program *p = g->p;
	if (g->held)
		p->refs--;
	if (g->called) {
		*out = *h;
		*armed_called = 1;
		pthread_mutex_unlock(&d->mu);
		return rc;
	}
	job_unhold(d, p, g->i, slot);
	pthread_mutex_unlock(&d->mu);
	meshd__unref(d, p);
	return rc;
}

/* The get's worker, not running on a slot, gets one and is launched when
 * it has none (armed told as soon as the slot is armed).  d->mu held: 0
 * with it held still, or a code with it released (get_failed). */
static int get_slot(struct get *g, struct meshd_job_worker *out, int *armed_called, char **err)
{
	struct meshd_core *d = g->d;
	struct program *p = g->p;
	struct worker *wk = &p->w[g->i];
	int s = wk->slot >= 0 ? wk->slot : meshd__take_slot(d, p->img.m.ring_bytes);
	if (s < 0) {
		/* Full: the least recently used idle worker is halted off its
		 * slot (its process stays, to be run again later); the job
		 * asks again shortly. */
		struct mesh_instance *victim = NULL;
		struct program *vp = meshd__evict_lru(d, &victim);
		/* Said before p's reference goes: the loop may free a retired p. */
		int rc = mesh_errf(err, -EAGAIN, "no free slot for '%s' (all %u are in use%s)", p->img.name, d->nslots,
				   vp ? "; an idle worker is being halted off one" : "");
		job_unhold(d, p, g->i, -1);
		pthread_mutex_unlock(&d->mu);
		if (vp)
			meshd__unref(d, vp);
		meshd__unref(d, p);
		return rc;
	}
	if (wk->slot >= 0)
		return 0;
	uint64_t res = 0;
	int rc = 0;
	if (mesh_instance_state(wk->inst) == MESH_IS_DOWN &&
	    (rc = meshd__gpu_before_spawn(&d->G, &d->mu, 1, &p->img, g->i, wk->inst, &res, err)) == 1)
		rc = mesh_errf(err, -EAGAIN, "'%s' waited for GPU memory; asking again", p->img.name);
	struct armed_ctx ac = {g->armed, g->arg, {p, g->i, s, d->slots[s], wk->inst, 0, 0}, 0};
	if (rc == 0 && g->armed) {
		wk->slot = s;
		d->slot_busy[s]++;
		p->refs++; /* meshd_job_worker_online's */
		g->held = 1;
		rc = mesh_instance_launch_armed(wk->inst, d->slots[s], core_armed, &ac, err);
		g->called = ac.called;
		meshd__spawned(d, wk, res, rc);
		g->launched = rc == 0;
	} else if (rc == 0) {
		rc = mesh_instance_launch(wk->inst, d->slots[s], err);
		meshd__spawned(d, wk, res, rc);
		g->launched = rc == 0;
	}
	if (rc && !g->called) {
		if (g->held) {
			wk->slot = -1;
			d->slot_busy[s]--;
		}
		d->slot_taken[s] = 0;
	}
	if (rc)
		return get_failed(g, -1, &ac.h, out, armed_called, rc);
	wk->slot = s;
	return 0;
}

/* The get's worker holds its slot: it is held busy, and waited for until
 * it is online (early: armed, or LAUNCHING).  d->mu held, released here:
 * 0 with *out filled (the program's reference stays until put), or a
 * code (get_failed). */
static int get_online(struct get *g, uint64_t deadline, struct meshd_job_worker *out, int *armed_called, char **err)
{
	struct meshd_core *d = g->d;
	struct program *p = g->p;
	struct worker *wk = &p->w[g->i];
	int rc = 0;
	/* Held: reconcile never frees or hands on this slot meanwhile. */
	int s = wk->slot;
	if (!g->held)
		d->slot_busy[s]++;
	meshd__kick(d, mesh_mono_ns() + meshd__heal_every(d)); /* heal checks while the job holds it */
	struct mesh_instance *inst = wk->inst;
	pthread_mutex_unlock(&d->mu);
	if (g->early && g->launched)
		mesh_fault_pause("core.launched"); /* the getter late: the worker may be gone */
	uint64_t now = mesh_mono_ns();
	unsigned mask = 1u << MESH_IS_RUNNING | 1u << MESH_IS_DOWN | 1u << MESH_IS_IDLE;
	/* Launched here, early: its slot is armed already (or the launch
	 * failed at once, DOWN: that is for the wait below to say). */
	int now_armed = g->early && g->launched && mesh_instance_state(inst) != MESH_IS_DOWN;
	if (!now_armed)
		rc = mesh_instance_wait(inst, mask | (g->early ? 1u << MESH_IS_LAUNCHING : 0),
					now < deadline ? deadline - now : 0, err);
	enum mesh_istate ist = mesh_instance_state(inst);
	if (rc == 0 && !now_armed && ist != MESH_IS_RUNNING && !(g->early && ist == MESH_IS_LAUNCHING)) {
		char *r = mesh_instance_last_report(inst);
		rc = MESH_E_CRASHED;
		if (err)
			*err = r ? r : mesh_strf("'%s' exited before it came online", p->img.name);
		else
			free(r);
	}
	pthread_mutex_lock(&d->mu);
	if (rc == 0 && !now_armed && d->slots[s] != mesh_instance_slot(inst))
		rc = mesh_errf(err, MESH_E_STATE, "'%s' left its slot while it came online", p->img.name);
	if (rc)
		return get_failed(g, s, &(struct meshd_job_worker){p, g->i, s, d->slots[s], inst, 0, 0}, out,
				  armed_called, rc);
	*out = (struct meshd_job_worker){p, g->i, s, d->slots[s], inst, mesh_instance_pid(inst), ist == MESH_IS_RUNNING};
	if (g->held && out->online)
		p->refs--; /* online already: no wait for it */
	else if (!g->held && !out->online)
		p->refs++; /* meshd_job_worker_online's, apart from the hold's */
	if (armed_called)
		*armed_called = g->called;
	pthread_mutex_unlock(&d->mu);
	return 0;
}

/* meshd_job_worker_get(_early, _armed): early returns a worker once its
 * slot is armed: at once when this call launched it (the host arms the
 * slot of a launch before the worker is ready, arm_pending in host.c: its
 * first chunks wait in the ring while it starts), else once it is
 * LAUNCHING (the host armed the slot and sent `run` before it set that
 * state, under its lock).  With armed, a launch that spawns tells it as
 * soon as the slot is armed, before the spawn, which can take ms (the
 * worker's exec answers it): the hold and the online wait's reference
 * are taken before the launch for that. */
static int job_worker_get(struct meshd_core *d, const char *name, struct meshd_job_worker *out, int early,
			  void (*armed)(void *arg, const struct meshd_job_worker *h), void *arg, int *armed_called,
			  char **err)
{
	if (armed_called)
		*armed_called = 0;
	if (err)
		*err = NULL;
	memset(out, 0, sizeof *out);
	struct get g = {d, NULL, 0, early, armed, arg, 0, 0, 0};
	int rc = meshd__get_program(d, name, &g.p, err);
	if (rc)
		return rc;
	struct program *p = g.p;
	uint64_t deadline = mesh_mono_ns() + start_wait_ns(p, d);
	pthread_mutex_lock(&d->mu);
	meshd__reconcile(d, p);
	int i = (rc = meshd__failed(p, err)) ? -1 : job_candidate(d, p);
	if (i < 0) {
		/* Said before p's reference goes: the loop may free a retired p. */
		if (!rc)
			rc = mesh_errf(err, -EAGAIN, "all %u workers of '%s' are in use", p->img.m.max_workers, name);
		pthread_mutex_unlock(&d->mu);
		meshd__unref(d, p);
		return rc;
	}
	g.i = (unsigned)i;
	struct worker *wk = &p->w[i];
	wk->job = 1;
	if ((mesh_instance_state(wk->inst) != MESH_IS_RUNNING || wk->slot < 0) && (rc = get_slot(&g, out, armed_called, err)))
		return rc;
	return get_online(&g, deadline, out, armed_called, err);
}

int meshd_job_worker_get(struct meshd_core *d, const char *name, struct meshd_job_worker *out, char **err)
{
	return job_worker_get(d, name, out, 0, NULL, NULL, NULL, err);
}


int meshd_job_worker_get_armed(struct meshd_core *d, const char *name, struct meshd_job_worker *out,
			       void (*armed)(void *arg, const struct meshd_job_worker *h), void *arg, int *armed_called,
			       char **err)
{
	return job_worker_get(d, name, out, 1, armed, arg, armed_called, err);
}

int meshd_job_worker_online(struct meshd_core *d, struct meshd_job_worker *w, char **err)
{
	struct program *p = w->prog;
	if (err)
		*err = NULL;
	if (w->online)
		return 0;
	/* The reference taken for us keeps p and its instances alive, even
	 * once the hold was put back. */
	/* From a launch: its start, its `run` and its `online` (the host's
	 * own deadlines end each sooner). */
	int rc = mesh_instance_wait(w->inst, 1u << MESH_IS_RUNNING | 1u << MESH_IS_DOWN | 1u << MESH_IS_IDLE,
				    start_wait_ns(p, d), err);
	enum mesh_istate ist = mesh_instance_state(w->inst);
	if (rc == 0 && ist == MESH_IS_RUNNING) {
		w->online = 1;
	} else {
		char *r = mesh_instance_last_report(w->inst);
		if (err) {
			free(*err);
			*err = r ? r : mesh_strf("'%s' %s before it came online", p->img.name,
						 ist == MESH_IS_IDLE ? "refused its run" : "exited");
		} else {
			free(r);
		}
		rc = ist == MESH_IS_IDLE ? MESH_E_REFUSED : MESH_E_CRASHED;
	}
	meshd__unref(d, p);
	return rc;
}

void meshd_job_worker_put(struct meshd_core *d, struct meshd_job_worker *w, int kill_it)
{
	struct program *p = w->prog;
	if (!p)
		return;
	pthread_mutex_lock(&d->mu);
	if (kill_it) {
		/* Hung or broken: asked to exit (so its death is no crash),
		 * then its group killed at once rather than after the grace. */
		mesh_instance_exit(w->inst);
		pid_t pid = mesh_instance_pid(w->inst);
		if (pid > 0 && mesh_istate_stopping(mesh_instance_state(w->inst)))
			kill(-pid, SIGKILL);
	}
	job_unhold(d, p, w->idx, w->slot_index);
	pthread_mutex_unlock(&d->mu);
	meshd__unref(d, p);
	memset(w, 0, sizeof *w);
}

int meshd_job_worker_halt(struct meshd_core *d, struct meshd_job_worker *w, uint64_t *grace_ns)
{
	(void)d;
	const struct program *p = w->prog;
	if (!p)
		return MESH_E_STATE;
	*grace_ns = p->img.m.stop_grace_ns;
	return mesh_instance_halt(w->inst);
}

int meshd_job_worker_halted(struct meshd_core *d, struct meshd_job_worker *w, uint64_t timeout_ns)
{
	(void)d;
	int rc = mesh_instance_wait(w->inst, 1u << MESH_IS_IDLE | 1u << MESH_IS_DOWN, timeout_ns, NULL);
	if (rc == 0 && mesh_instance_state(w->inst) != MESH_IS_IDLE)
		rc = MESH_E_CRASHED;
	return rc;
}

int meshd_job_worker_down(struct meshd_core *d, struct meshd_job_worker *w, uint64_t timeout_ns, int *status,
			  char **report)
{
	(void)d;
	*status = -1;
	if (report)
		*report = NULL;
	int rc = mesh_instance_wait(w->inst, 1u << MESH_IS_DOWN, timeout_ns, NULL);
	if (mesh_instance_state(w->inst) != MESH_IS_DOWN)
		return rc < 0 && rc != MESH_E_CRASHED ? rc : MESH_E_TIMEOUT;
	*status = mesh_instance_stats(w->inst).last_exit;
	if (report)
		*report = mesh_instance_last_report(w->inst);
	return 0;
}

int meshd_job_worker_stale(const struct meshd_job_worker *w)
{
	struct program *p = w->prog;
	return p && atomic_load(&p->retired);
}

uint64_t meshd_job_worker_call_timeout(const struct meshd_job_worker *w)
{
	const struct program *p = w->prog;
	return p ? p->img.m.call_timeout_ns : 0;
}
