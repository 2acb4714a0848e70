/* meshd's calls (core_int.h): one request through a worker's slot.
 *
 * A worker serves one call at a time (its slot is one request ring): a call
 * takes a free worker, else starts one more while the autoscale policy's
 * replica count (mesh_as_plan) allows, up to max_workers, else waits -- all
 * within the call's own timeout.  When every slot is taken, the least
 * recently used idle worker of any program is halted off its slot. */
#include "meshd/core/core_int.h"

#include "autoscale/policy.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A call without a timeout of its own. */
#define CALL_TIMEOUT_DEFAULT_NS (30ull * MESH_NS_PER_S)
/* Waits are cut in steps this long so a loop-less core still moves. */
#define WAIT_STEP_NS (50ull * MESH_NS_PER_MS)

/* A call to p ended with rc after ns. */
static void count_call(struct meshd_core *d, struct program *p, int rc, uint64_t ns)
{
	pthread_mutex_lock(&d->metrics_mu);
	p->calls[meshd_call_result_of(rc)]++;
	mesh_hist_observe(&p->call, &meshd_call_bounds, ns);
	pthread_mutex_unlock(&d->metrics_mu);
}

/* Why no worker could take a call by its deadline. */
static int acquire_timeout(struct program *p, int coming, unsigned busy, uint64_t timeout_ns, char **err)
{
	unsigned long long ms = (unsigned long long)(timeout_ns / MESH_NS_PER_MS);
	if (coming >= 0)
		return mesh_errf(err, MESH_E_TIMEOUT, "'%s' did not come online within the call's %llu ms", p->img.name, ms);
	return mesh_errf(err, MESH_E_TIMEOUT,
			 "no worker of '%s' was free within the call's %llu ms (%u busy, max_workers %u, %u calls waiting)",
			 p->img.name, ms, busy, p->img.m.max_workers, p->waiting);
}

/* What a call sees of p's workers, the jobs' left out.  d->mu held. */
struct survey {
	int best;     /* the warm worker free longest, or -1 */
	int coming;   /* a worker on its way up on a slot, or -1 */
	int stopping; /* a worker on its way out, or -1 */
	unsigned warm, starting, busy;
};

static void survey(const struct program *p, struct survey *v)
{
	*v = (struct survey){-1, -1, -1, 0, 0, 0};
	for (unsigned i = 0; i < p->nw; i++) {
		const struct worker *wk = &p->w[i];
		if (wk->job)
			continue; /* a job's (meshd_job_worker_get) */
		enum mesh_istate st = mesh_instance_state(wk->inst);
		v->busy += wk->busy;
		if (mesh_istate_stopping(st))
			v->stopping = (int)i;
		if (st == MESH_IS_RUNNING && wk->slot >= 0) {
			v->warm++;
			if (!wk->busy && !wk->stuck_since && (v->best < 0 || wk->last_used < p->w[v->best].last_used))
				v->best = (int)i;
		} else if ((st == MESH_IS_STARTING || st == MESH_IS_LAUNCHING) && wk->slot >= 0) {
			v->starting++;
			v->coming = (int)i;
		}
	}
}

/* The policy wants one more worker of p for calls: an idle process first
 * (no spawn), else a DOWN record, else a new one, launched onto a free
 * slot (v->coming then).  No free slot: the least recently used idle
 * worker is halted off one (*vp, its program referenced, and *victim).
 * d->mu held throughout.  0; 1 when GPU memory was waited for with d->mu
 * dropped (look again); or a negative code. */
static int start_one(struct meshd_core *d, struct program *p, struct survey *v, uint64_t now, struct program **vp,
		     struct mesh_instance **victim, char **err)
{
	int cand = -1;
	for (unsigned i = 0; i < p->nw && cand < 0; i++)
		if (!p->w[i].job && mesh_instance_state(p->w[i].inst) == MESH_IS_IDLE && p->w[i].slot < 0)
			cand = (int)i;
	if (cand < 0 && now < p->retry_at && v->warm + v->starting == 0)
		/* Backing off a crash loop: answer with the last crash. */
		return mesh_errf(err, MESH_E_CRASHED, "%s%s(the next start of '%s' in %llu ms)",
				 p->crash_report ? p->crash_report : "",
				 p->crash_report && !strchr(p->crash_report, '\n') ? "\n" : "", p->img.name,
				 (unsigned long long)((p->retry_at - now) / MESH_NS_PER_MS));
	for (unsigned i = 0; i < p->nw && cand < 0 && now >= p->retry_at; i++)
		if (!p->w[i].job && mesh_instance_state(p->w[i].inst) == MESH_IS_DOWN && p->w[i].slot < 0)
			cand = (int)i;
	if (cand < 0 && now >= p->retry_at && p->nw < p->img.m.max_workers) {
		cand = meshd__new_worker(d, p);
		if (cand < 0)
			return cand;
	}
	if (cand < 0)
		return 0;
	int s = meshd__take_slot(d, p->img.m.ring_bytes);
	if (s < 0) {
		*vp = meshd__evict_lru(d, victim);
		if (!*vp && v->warm + v->starting == 0)
			return mesh_errf(err, MESH_E_STATE, "no free slot for '%s' (all %u serve calls)", p->img.name,
					 d->nslots);
		return 0;
	}
	struct worker *wk = &p->w[cand];
	uint64_t res = 0;
	int rc = 0;
	if (mesh_instance_state(wk->inst) == MESH_IS_DOWN &&
	    (rc = meshd__gpu_before_spawn(&d->G, &d->mu, 1, &p->img, (unsigned)cand, wk->inst, &res, err))) {
		d->slot_taken[s] = 0;
		return rc;
	}
	rc = mesh_instance_launch(wk->inst, d->slots[s], err);
	meshd__spawned(d, wk, res, rc);
	if (rc) {
		d->slot_taken[s] = 0;
		return rc;
	}
	wk->slot = s;
	wk->stuck_since = 0;
	wk->last_used = now;
	v->coming = cand;
	return 0;
}

/* One step of acquire's wait, at most WAIT_STEP_NS and never past
 * deadline: for the worker evicted for us (victim), else the one coming
 * up, else one on its way out when all are, else for a call to end.
 * d->mu held, released here; vp's reference dropped.  0 (look again), or
 * the answer: the worker coming up for us died or failed. */
static int wait_step(struct meshd_core *d, struct program *p, const struct survey *v, struct mesh_instance *wait_inst,
		     struct program *vp, uint64_t now, uint64_t deadline, char **err)
{
	int own = 0;
	if (!wait_inst && v->coming >= 0) {
		wait_inst = p->w[v->coming].inst;
		own = 1;
	}
	if (!wait_inst && v->stopping >= 0 && v->warm + v->starting == 0)
		wait_inst = p->w[v->stopping].inst; /* all of them on their way out */
	uint64_t until = deadline - now < WAIT_STEP_NS ? deadline : now + WAIT_STEP_NS;
	if (!wait_inst) {
		/* Every worker serves a call: one ends (d->cv) or the step. */
		struct timespec ts = {(time_t)(until / MESH_NS_PER_S), (long)(until % MESH_NS_PER_S)};
		pthread_cond_timedwait(&d->cv, &d->mu, &ts);
		pthread_mutex_unlock(&d->mu);
		return 0;
	}
	pthread_mutex_unlock(&d->mu);
	char *e = NULL;
	int rc = mesh_instance_wait(wait_inst, 1u << MESH_IS_RUNNING | 1u << MESH_IS_IDLE | 1u << MESH_IS_DOWN,
				until - now, &e);
	if (vp)
		meshd__unref(d, vp);
	if (own && rc == MESH_E_TIMEOUT) {
		/* The step ran out, or the worker missed its ready or online
		 * timeout (it is failed then: on its way out or gone). */
		enum mesh_istate st = mesh_instance_state(wait_inst);
		if (st != MESH_IS_DOWN && !mesh_istate_stopping(st))
			rc = 0;
	}
	if (own && rc) {
		if (err)
			*err = e;
		else
			free(e);
		return rc; /* it died or failed on its way up: that is the answer */
	}
	free(e);
	return 0;
}

/* A worker of p on a slot with no call on it, marked busy (the caller
 * clears it); its index, or a negative code.  Starts one more worker
 * (start_one) while the policy's replica count for the demand (calls
 * waiting + calls running, one a worker) is above the workers up or
 * coming; else waits for one to come free.  Never past deadline. */
static int acquire(struct meshd_core *d, struct program *p, unsigned stops, uint64_t deadline, uint64_t timeout_ns,
		   const atomic_int *cancel, int *slot_out, char **err)
{
	for (;;) {
		if (cancel && atomic_load(cancel))
			return mesh_errf(err, MESH_E_STOPPED, "the client went away while the call waited for a worker");
		struct mesh_instance *wait_inst = NULL;
		struct program *vp = NULL; /* the program of a worker evicted for us */
		pthread_mutex_lock(&d->mu);
		meshd__reconcile_all(d);
		uint64_t now = mesh_mono_ns();
		/* stop, unload or meshd's exit: not a reason to start another. */
		int rc = p->stops != stops || p->gone ? mesh_errf(err, MESH_E_STOPPED,
								  "'%s' was stopped while the call waited for a worker "
								  "(stop, unload or meshd stopping)",
								  p->img.name)
						      : meshd__failed(p, err);
		if (rc) {
			pthread_mutex_unlock(&d->mu);
			return rc;
		}
		struct survey v;
		survey(p, &v);
		if (v.best >= 0) {
			struct worker *wk = &p->w[v.best];
			wk->busy = 1;
			wk->last_used = now;
			meshd__kick(d, now + meshd__heal_every(d)); /* heal checks while it serves */
			d->slot_busy[wk->slot]++;
			*slot_out = wk->slot;
			pthread_mutex_unlock(&d->mu);
			return v.best;
		}
		struct mesh_as_config c = {0, p->img.m.max_workers, 1, 1, 1, 0};
		struct mesh_as_obs o = {v.warm, v.starting, (uint64_t)p->waiting + v.busy, 0, 0, 0};
		struct mesh_as_plan plan;
		if (mesh_as_plan(&c, &o, &plan) == 0 && plan.action == MESH_AS_SPAWN)
			rc = start_one(d, p, &v, now, &vp, &wait_inst, err);
		if (rc) {
			pthread_mutex_unlock(&d->mu);
			if (rc == 1)
				continue; /* GPU memory was waited for: look again */
			return rc;
		}
		if (now >= deadline) {
			rc = acquire_timeout(p, v.coming, v.busy, timeout_ns, err);
			pthread_mutex_unlock(&d->mu);
			if (vp)
				meshd__unref(d, vp);
			return rc;
		}
		if ((rc = wait_step(d, p, &v, wait_inst, vp, now, deadline, err)))
			return rc;
	}
}

/* After a failed slot call: the caller's code and message.  d->mu not held. */
static int call_failed(struct meshd_core *d, struct program *p, int wi, int s, struct mesh_slot *slot, int rc,
		       unsigned stops, uint64_t t, int by_limit, void *rep, size_t rl, char **err)
{
	const char *name = p->img.name;
	struct mesh_instance *inst = p->w[wi].inst;
	if (rc == MESH_E_REFUSED) {
		if (err)
			*err = rep ? mesh_strf("the worker's handler failed: %.*s", (int)rl, (char *)rep) : NULL;
		return MESH_E_HANDLER;
	}
	if (rc == MESH_E_TIMEOUT && by_limit) {
		/* Past the manifest's limit: the worker hangs; a fresh one serves next. */
		pid_t pid = mesh_instance_pid(inst);
		char *why = mesh_strf("a call ran past call_timeout (%llu ms)", (unsigned long long)(t / MESH_NS_PER_MS));
		mesh_instance_fail(inst, why ? why : "a call ran past call_timeout");
		free(why);
		mesh_instance_wait(inst, 1u << MESH_IS_DOWN, 5 * MESH_NS_PER_S, NULL);
		return mesh_errf(err, MESH_E_TIMEOUT,
				 "'%s' did not reply within its call_timeout of %llu ms: its worker (pid %d) was killed; "
				 "the next call gets a fresh one",
				 name, (unsigned long long)(t / MESH_NS_PER_MS), (int)pid);
	}
	if (rc == MESH_E_TIMEOUT)
		return mesh_errf(err, rc, "'%s' did not reply within %llu ms", name, (unsigned long long)(t / MESH_NS_PER_MS));
	if (rc == MESH_E_CORRUPT) {
		/* The worker broke its slot: fail it through the table (its group
		 * is killed, the slot replaced at the reap). */
		const char *why = mesh_slot_failed(slot);
		char *msg = mesh_strf("it broke its slot: %s", why ? why : "bad reply");
		pid_t pid = mesh_instance_pid(inst);
		mesh_instance_fail(inst, msg ? msg : "it broke its slot");
		mesh_instance_wait(inst, 1u << MESH_IS_DOWN, 5 * MESH_NS_PER_S, NULL);
		rc = mesh_errf(err, rc, "worker of '%s' (pid %d) broke its slot: %s; it was killed and the next call gets "
			       "a fresh worker", name, (int)pid, why ? why : "bad reply");
		free(msg);
		return rc;
	}
	if (rc != MESH_E_STATE)
		return mesh_errf(err, rc, "call to '%s' failed: %s", name, mesh_strerror(rc));
	/* The slot failed: most likely its worker died.  Give the host a
	 * moment to reap it and write the report. */
	mesh_instance_wait(inst, 1u << MESH_IS_DOWN, 5 * MESH_NS_PER_S, NULL);
	char *r = mesh_instance_last_report(inst);
	pthread_mutex_lock(&d->mu);
	int stopped = p->stops != stops;
	pthread_mutex_unlock(&d->mu);
	int down = mesh_instance_state(inst) == MESH_IS_DOWN;
	if (stopped && down) {
		/* Asked to exit (mesh stop, unload, meshd stopping): no crash. */
		rc = mesh_errf(err, MESH_E_STOPPED,
			       "worker of '%s' stopped while the call ran (stop, unload or meshd stopping); the call may "
			       "not have completed",
			       name);
	} else if (down && r) {
		rc = MESH_E_CRASHED;
		if (err)
			*err = r, r = NULL;
	} else {
		const char *why = mesh_slot_failed(slot);
		rc = mesh_errf(err, rc, "slot %d failed: %s", s, why ? why : mesh_strerror(rc));
	}
	free(r);
	return rc;
}

int meshd_op_call(struct meshd_core *d, const char *name, const void *req, size_t n, void **reply, size_t *reply_len,
		  uint64_t timeout_ns, char **err)
{
	return meshd_op_call_ex(d, name, req, n, NULL, NULL, reply, reply_len, timeout_ns, NULL, err);
}

int meshd_op_call_ex(struct meshd_core *d, const char *name, const void *req, size_t n, meshd_part_fn on_part,
		     void *arg, void **reply, size_t *reply_len, uint64_t timeout_ns, const atomic_int *cancel, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	*reply = NULL;
	*reply_len = 0;
	uint64_t start = mesh_mono_ns();
	uint64_t t = timeout_ns ? timeout_ns : CALL_TIMEOUT_DEFAULT_NS;
	uint64_t deadline = mesh_mono_ns() + t;
	int s = -1, wi, rc;
	unsigned stops, swaps = 0;
again:
	if ((rc = meshd__get_program(d, name, &p, err)) != 0)
		return rc;
	pthread_mutex_lock(&d->mu);
	p->waiting++;
	stops = p->stops;
	pthread_mutex_unlock(&d->mu);
	wi = acquire(d, p, stops, deadline, t, cancel, &s, err);
	pthread_mutex_lock(&d->mu);
	p->waiting--;
	if (wi == MESH_E_STOPPED && atomic_load(&p->retired) && p->stops == stops && swaps++ < 8) {
		/* Its image was replaced while it waited: the new one serves it. */
		pthread_mutex_unlock(&d->mu);
		meshd__unref(d, p);
		if (err) {
			free(*err);
			*err = NULL;
		}
		goto again;
	}
	if (wi < 0) {
		pthread_mutex_unlock(&d->mu);
		count_call(d, p, wi, mesh_mono_ns() - start);
		meshd__unref(d, p);
		return wi;
	}
	struct mesh_slot *slot = d->slots[s];
	struct worker *wk = &p->w[wi];
	uint64_t now = mesh_mono_ns(), t0 = now;
	pthread_mutex_unlock(&d->mu);
	/* The call's own time left, or the manifest's limit when that is less. */
	uint64_t left = deadline > now ? deadline - now : 1, ct = p->img.m.call_timeout_ns;
	int by_limit = ct && ct <= left;
	void *rep = NULL;
	size_t rl = 0;
	rc = mesh_slot_call_stream(slot, req, n, on_part, arg, &rep, &rl, by_limit ? ct : left, MESH_SLOT_CALL_SPIN_NS);
	if (rc)
		rc = call_failed(d, p, wi, s, slot, rc, stops, by_limit ? ct : t, by_limit, rep, rl, err);
	pthread_mutex_lock(&d->mu);
	if (rc == MESH_E_TIMEOUT && !by_limit && !wk->stuck_since)
		wk->stuck_since = t0; /* the worker may still run it */
	wk->busy = 0;
	wk->last_used = mesh_mono_ns();
	/* Idle from now (or still checked: a call its caller gave up on). */
	meshd__kick(d, wk->last_used + (wk->stuck_since ? meshd__heal_every(d) : p->img.m.idle_ttl_ns));
	d->slot_busy[s]--;
	if (atomic_load(&p->retired))
		meshd__retire_sweep(d, p); /* an old image's: it exits */
	meshd__reconcile(d, p);
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	count_call(d, p, rc, mesh_mono_ns() - start);
	meshd__unref(d, p);
	if (rc == 0) {
		*reply = rep;
		*reply_len = rl;
	} else {
		free(rep);
	}
	return rc;
}
