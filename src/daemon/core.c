/* meshd's core: the catalog's loaded programs, their worker instances, the
 * shared-memory slots, and the loop (daemon/ops.h).
 *
 * A worker serves one call at a time (its slot is one request ring): a call
 * takes a free worker, else starts one more while the autoscale policy's
 * replica count (mesh_as_plan) allows, up to max_workers, else waits -- all
 * within the call's own timeout.  When every slot is taken, the least
 * recently used idle worker of any program is halted off its slot.
 *
 * Healing: a worker that breaks its slot (a bad reply), runs a call past its
 * manifest's call_timeout, or whose heartbeat stops while a request waits
 * for it, is failed through the lifecycle table (mesh_instance_fail: its
 * group is killed, its slot replaced); the next call gets a fresh worker.  A
 * program whose workers die before `ready` is backed off (exponentially,
 * capped); after CRASH_FAIL_AFTER such deaths in CRASH_WINDOW_NS it is
 * FAILED until `start`.
 *
 * Upgrade (a load of a changed image) and rollback: a new struct program
 * of the same name takes the old one's place; the old one is retired (gone
 * to find(), so nothing new reaches it): its workers finish the call or the
 * job chunks they hold, then exit, and the tick frees it once unused.
 * swap_mu serializes swaps; swap_mu is taken before d->mu, never under it.
 *
 * Locks: d->mu guards programs and slots; the host has its own lock.  Order:
 * d->mu may be held while calling a host function that does not wait
 * (warm, launch, halt, exit, fail, state, stats); never across a wait. */
#include "daemon/ops.h"

#include "daemon/images.h"
#include "daemon/metrics.h"
#include "autoscale/policy.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "base/utf8.h"
#include "daemon/core_gpu.h"
#include "host/host.h"
#include "host/image.h"
#include "shm/shm.h"

#include <event2/event.h>
#include <event2/thread.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_SLOTS 8u
#define MAX_SLOTS 4096u
#define LOGS_CAP (1u << 20)
/* A caller waits this long for a worker that is already STOPPING to go. */
#define STOP_WAIT_NS (15ull * MESH_NS_PER_S)
/* A call without a timeout of its own. */
#define CALL_TIMEOUT_DEFAULT_NS (30ull * MESH_NS_PER_S)
/* The worker library beats every 250 ms outside a handler: a request
 * waiting this long for a worker whose heartbeat stopped means it hangs. */
#define HEARTBEAT_STALE_NS (10ull * MESH_NS_PER_S)
/* Crash-loop backoff: the first retry after this, doubling, capped. */
#define CRASH_BACKOFF_NS (200ull * MESH_NS_PER_MS)
#define CRASH_BACKOFF_CAP_NS (10ull * MESH_NS_PER_S)
#define CRASH_FAIL_AFTER 5u
#define CRASH_WINDOW_NS (60ull * MESH_NS_PER_S)
/* Waits are cut in steps this long so a loop-less core still moves. */
#define WAIT_STEP_NS (50ull * MESH_NS_PER_MS)
/* While a worker serves a call or a job, the loop looks at its heartbeat
 * this often at most (a quarter of the stale age, capped): a request sent
 * to it does not wake the loop. */
#define HEAL_EVERY_MAX_NS (500ull * MESH_NS_PER_MS)
/* With NVML, its events are logged at least this often. */
#define GPU_LOG_EVERY_NS MESH_NS_PER_S

struct worker {
	struct mesh_instance *inst;
	int slot;	      /* index into d->slots while on a slot, else -1 */
	int busy;	      /* a call runs on its slot */
	uint64_t last_used;
	uint64_t sent;	      /* requests sent on its slot since its run began */
	uint64_t stuck_since; /* a call its caller gave up on may still run; 0: none */
	uint32_t seen_unready; /* the host's unready count already noted */
	int job;	      /* held by a job (meshd_job_worker_get): no call uses it */
	uint64_t gpu_res, gpu_prev; /* its GPU reservation (core_gpu.h), and the last one's */
};

struct program {
	struct program *next;
	struct mesh_image img;
	struct worker w[MESH_MAX_WORKERS_CAP];
	unsigned nw;
	unsigned refs; /* ops using it; unload waits for 0 */
	unsigned stops; /* stop_all calls: a call cut by one says so */
	unsigned waiting; /* calls looking for a worker */
	int gone;
	/* Metrics, under d->metrics_mu. */
	uint64_t loaded_at;
	struct meshd_hist cold_start, call;
	uint64_t calls[MESHD_CALL__N];
	/* crash-loop backoff */
	unsigned streak;		    /* deaths before ready in a row */
	uint64_t crash_at[CRASH_FAIL_AFTER]; /* the last ones' times (a ring) */
	unsigned ncrash;
	uint64_t retry_at;		    /* no spawn before this */
	char *crash_report;		    /* the last such death's report */
	char *failed;			    /* FAILED: why; NULL if not */
	/* Upgrade and rollback: a retired program (an image replaced by
	 * load or rollback) is also gone; its workers finish what they hold
	 * and exit, then the tick frees it.  keep_dir: this image's kept
	 * copy (daemon/images.h), prev_dir the previous image's; NULL: none. */
	atomic_int retired;
	char *keep_dir, *prev_dir;
	uint64_t prev_id; /* mesh_image_id of the previous image (0: none) */
};

/* One image swap (upgrade, rollback) at a time. */
static pthread_mutex_t swap_mu = PTHREAD_MUTEX_INITIALIZER;

struct meshd_core {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* CLOCK_MONOTONIC; a program unref'd, a worker freed */
	struct mesh_host *h;
	char *catalog, *logs;
	char *env[4];
	struct program *progs;
	struct mesh_slot **slots;
	unsigned nslots;
	unsigned *slot_busy; /* calls in flight on it */
	int *slot_taken;     /* given to a worker */
	atomic_int stop;
	enum mesh_gpu_access gpu;
	char *mps_dir; /* --isolation mps: CUDA_MPS_PIPE_DIRECTORY */
	/* A leaf lock for the programs' metrics: the host's loop records cold
	 * starts with the host's lock held, which d->mu may not be taken under. */
	pthread_mutex_t metrics_mu;
	uint64_t heartbeat_ns, backoff_ns;
	struct meshd__gpu G; /* NVML, placement, MPS (core_gpu.h) */
	/* The event loop (meshd_core_run): the host's fd, one timer armed for
	 * the earliest deadline (the host's and the core's), and a kick that
	 * other threads activate when they make an earlier core deadline (a
	 * worker that went idle) or retire a program.  armed: the timer's
	 * time (UINT64_MAX: none), read by kick() to skip needless wake-ups. */
	struct event_base *base;
	struct event *host_ev, *timer_ev, *kick_ev;
	_Atomic uint64_t armed;
	uint64_t core_next; /* loop thread: tick()'s answer */
	int in_loop;	    /* loop thread: inside event_base_loop proper */
	pthread_mutex_t loop_mu; /* looping, and meshd_core_on_loop's queue */
	int looping;
	pthread_t loop_th;
};

static void kick(struct meshd_core *d, uint64_t t);

/* How often heal() looks at a worker that serves a call or a job. */
static uint64_t heal_every(const struct meshd_core *d)
{
	uint64_t e = d->heartbeat_ns / 4 < HEAL_EVERY_MAX_NS ? d->heartbeat_ns / 4 : HEAL_EVERY_MAX_NS;
	return e ? e : 1;
}

/* The host's on_ready: a cold start of a worker of img, which is the image
 * inside its struct program (alive while the program has instances). */
static void on_ready(void *ctx, const struct mesh_image *img, uint64_t ns)
{
	struct meshd_core *d = ctx;
	struct program *p = (struct program *)((char *)img - offsetof(struct program, img));
	pthread_mutex_lock(&d->metrics_mu);
	meshd_hist_observe(&p->cold_start, MESHD_HIST_COLD_START, ns);
	pthread_mutex_unlock(&d->metrics_mu);
}

/* A call to p ended with rc after ns. */
static void count_call(struct meshd_core *d, struct program *p, int rc, uint64_t ns)
{
	pthread_mutex_lock(&d->metrics_mu);
	p->calls[meshd_call_result_of(rc)]++;
	meshd_hist_observe(&p->call, MESHD_HIST_CALL, ns);
	pthread_mutex_unlock(&d->metrics_mu);
}

static int loop_new(struct meshd_core *d);

int meshd_core_new(struct meshd_core **out, const struct meshd_config *cfg, char **err)
{
	struct stat st;
	char *e = NULL;
	int rc;
	if (err)
		*err = NULL;
	if (!cfg->catalog || stat(cfg->catalog, &st) != 0 || !S_ISDIR(st.st_mode))
		return mesh_errf(err, MESH_E_NOTFOUND, "cannot use catalog '%s': %s", cfg->catalog ? cfg->catalog : "",
			   cfg->catalog && stat(cfg->catalog, &st) != 0 ? strerror(errno) : "not a directory");
	if (!cfg->logs || stat(cfg->logs, &st) != 0 || !S_ISDIR(st.st_mode))
		return mesh_errf(err, MESH_E_NOTFOUND, "cannot use logs directory '%s': %s", cfg->logs ? cfg->logs : "",
			   cfg->logs && stat(cfg->logs, &st) != 0 ? strerror(errno) : "not a directory");
	unsigned n = cfg->slots ? cfg->slots : DEFAULT_SLOTS;
	if (n > MAX_SLOTS)
		return mesh_errf(err, MESH_E_RANGE, "--slots %u is over %u", n, MAX_SLOTS);
	if (cfg->isolation && strcmp(cfg->isolation, "mps") != 0 && strcmp(cfg->isolation, "none") != 0)
		return mesh_errf(err, MESH_E_PARSE, "unknown isolation '%s' (none or mps)", cfg->isolation);

	struct meshd_core *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&d->metrics_mu, NULL);
	pthread_mutex_init(&d->loop_mu, NULL);
	atomic_store(&d->armed, UINT64_MAX);
	d->core_next = UINT64_MAX;
	d->heartbeat_ns = cfg->heartbeat_timeout_ns ? cfg->heartbeat_timeout_ns : HEARTBEAT_STALE_NS;
	d->backoff_ns = cfg->crash_backoff_ns ? cfg->crash_backoff_ns : CRASH_BACKOFF_NS;
	d->nslots = n;
	char abs[PATH_MAX];
	d->catalog = strdup(realpath(cfg->catalog, abs) ? abs : cfg->catalog);
	d->logs = strdup(cfg->logs);
	const char *base = getenv("MESH_SERVICE_BASE"), *models = getenv("MESH_MODELS"), *sys = getenv("MESH_SYSTEM");
	d->env[0] = mesh_strf("MESH_SERVICE_BASE=%s", base ? base : d->catalog ? d->catalog : "");
	d->env[1] = models ? mesh_strf("MESH_MODELS=%s", models) : mesh_strf("MESH_MODELS=%s/models", d->catalog ? d->catalog : "");
	d->env[2] = mesh_strf("MESH_SYSTEM=%s", sys ? sys : mesh_target_triple());
	d->slots = calloc(n, sizeof *d->slots);
	d->slot_busy = calloc(n, sizeof *d->slot_busy);
	d->slot_taken = calloc(n, sizeof *d->slot_taken);
	if (!d->catalog || !d->logs || !d->env[0] || !d->env[1] || !d->env[2] || !d->slots || !d->slot_busy ||
	    !d->slot_taken) {
		rc = -ENOMEM;
		goto bad;
	}
	for (unsigned i = 0; i < n; i++)
		if ((rc = mesh_slot_create(&d->slots[i], i, 0))) {
			mesh_errf(err, rc, "cannot create slot %u: %s", i, mesh_strerror(rc));
			goto bad;
		}
	if ((rc = meshd__gpu_new(&d->G, cfg->isolation, d->logs, err)))
		goto bad;
	d->gpu = d->G.access;
	struct mesh_host_cfg hc = {
		.logs = d->logs,
		.env = d->env,
		.ready_timeout_ns = cfg->ready_timeout_ns,
		.online_timeout_ns = cfg->online_timeout_ns,
		.log_max = cfg->log_max,
		.on_ready = on_ready,
		.on_ready_ctx = d,
		/* As root: programs without `user` run unprivileged. */
		.default_user = mesh_limits_default_user(),
	};
	meshd__gpu_host_cfg(&d->G, &hc);
	if ((rc = mesh_host_new(&d->h, &hc, &e))) {
		if (err)
			*err = e;
		else
			free(e);
		goto bad;
	}
	if ((rc = loop_new(d))) {
		mesh_errf(err, rc, "cannot set up the event loop: %s", mesh_strerror(rc));
		goto bad;
	}
	*out = d;
	return 0;
bad:
	meshd_core_free(d); /* copes with a half-built core: no host, NULL slots */
	return rc;
}

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
static void reconcile(struct meshd_core *d, struct program *p)
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

static void reconcile_all(struct meshd_core *d)
{
	for (struct program *p = d->progs; p; p = p->next)
		reconcile(d, p);
}

/* A free slot whose rings are ring bytes (the program's manifest): one of
 * another size, or one that failed, is replaced by a fresh one.  d->mu held. */
static int take_slot(struct meshd_core *d, uint64_t ring)
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
 * `halted`; the process stays, IDLE, until its idle TTL.  The program the
 * victim belongs to, with a reference held (unref it), and its instance in
 * *victim; NULL when every slot serves a call.  d->mu held. */
static struct program *evict_lru(struct meshd_core *d, struct mesh_instance **victim)
{
	struct program *vp = NULL;
	struct worker *vw = NULL;
	for (struct program *p = d->progs; p; p = p->next)
		for (unsigned i = 0; i < p->nw; i++) {
			struct worker *wk = &p->w[i];
			if (wk->slot < 0 || wk->busy || wk->stuck_since || d->slot_busy[wk->slot] ||
			    mesh_instance_state(wk->inst) != MESH_IS_RUNNING)
				continue;
			if (!vw || wk->last_used < vw->last_used) {
				vp = p;
				vw = wk;
			}
		}
	if (!vw)
		return NULL;
	mesh_info("evict name=%s slot=%d: every slot is taken; the least recently used idle worker is halted",
		  vp->img.name, vw->slot);
	mesh_instance_halt(vw->inst);
	vp->refs++;
	*victim = vw->inst;
	return vp;
}

static struct program *find(struct meshd_core *d, const char *name)
{
	for (struct program *p = d->progs; p; p = p->next)
		if (!p->gone && strcmp(p->img.name, name) == 0)
			return p;
	return NULL;
}

/* The image's fields of pi; the strings are copies.  0 or -ENOMEM. */
static int image_info(const struct mesh_image *img, struct meshd_program_info *pi)
{
	memset(pi, 0, sizeof *pi);
	pi->name = strdup(img->name);
	pi->binary = strdup(img->bin_path);
	if (!pi->name || !pi->binary) {
		meshd_program_info_release(pi);
		return -ENOMEM;
	}
	pi->gpu = img->m.device == MESH_DEVICE_GPU;
	pi->image_hash = img->image_hash;
	pi->bin_hash = img->bin_hash;
	pi->image_id = mesh_image_id(img);
	pi->bin_bytes = img->bin_bytes;
	pi->max_workers = img->m.max_workers;
	pi->limits = img->enforced;
	return 0;
}

void meshd_program_info_release(struct meshd_program_info *pi)
{
	if (!pi)
		return;
	free(pi->name);
	free(pi->binary);
	free(pi->workers);
	free(pi->failed);
	memset(pi, 0, sizeof *pi);
}

void meshd_ps_release(struct meshd_ps *ps)
{
	if (!ps)
		return;
	for (unsigned i = 0; i < ps->nprograms; i++)
		meshd_program_info_release(&ps->programs[i]);
	free(ps->programs);
	ps->programs = NULL;
	ps->nprograms = 0;
	free(ps->gpu_none);
	ps->gpu_none = NULL;
	free(ps->gpus);
	ps->gpus = NULL;
	ps->ngpus = 0;
}

/* A program's own memory (its instances freed or never made). */
static void program_free(struct program *p)
{
	mesh_image_release(&p->img);
	free(p->crash_report);
	free(p->failed);
	free(p->keep_dir);
	free(p->prev_dir);
	free(p);
}

/* p's image gets a kept copy (for a later rollback to it); without one
 * (a full disk, the catalog changed meanwhile) it cannot be rolled back
 * to, which is said in the log.  Off d->mu: it copies files. */
static void keep_image(struct meshd_core *d, struct program *p)
{
	char *e = NULL;
	if (meshd_image_keep(d->logs, &p->img, mesh_host_caps(d->h), d->gpu, &p->keep_dir, &e) != 0)
		mesh_warn("load name=%s: no copy of its image kept, so no rollback to it: %s", p->img.name,
			  e ? e : "out of memory");
	free(e);
}

/* Records p's image as current, with its previous one (images.h). */
static void record_history(struct meshd_core *d, const struct program *p)
{
	int rc = meshd_image_history_save(d->logs, p->img.name, mesh_image_id(&p->img), p->prev_id);
	if (rc)
		mesh_warn("load name=%s: cannot record its image history (a rollback after a restart finds none): %s",
			  p->img.name, mesh_strerror(rc));
}

/* Finds or loads name, with a reference held (unref when done). */
static int get_program(struct meshd_core *d, const char *name, struct program **out, char **err)
{
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	if (p) {
		p->refs++;
		pthread_mutex_unlock(&d->mu);
		*out = p;
		return 0;
	}
	pthread_mutex_unlock(&d->mu);
	/* Prepare off the lock: it reads and hashes files. */
	struct program *np = calloc(1, sizeof *np);
	if (!np)
		return -ENOMEM;
	int rc = mesh_image_prepare(d->catalog, name, mesh_host_caps(d->h), d->gpu, &np->img, err);
	int grc = meshd__gpu_load(&d->G, &np->img, rc, err);
	if (grc && !rc)
		mesh_image_release(&np->img);
	if ((rc = grc)) {
		free(np);
		return rc;
	}
	keep_image(d, np);
	/* The previous image recorded for this one (before meshd restarted). */
	if (np->keep_dir &&
	    meshd_image_history_prev(d->logs, name, mesh_image_id(&np->img), &np->prev_id, &np->prev_dir) != 0)
		np->prev_id = 0;
	pthread_mutex_lock(&d->mu);
	p = find(d, name);
	if (p) { /* loaded meanwhile by another caller */
		program_free(np);
	} else {
		p = np;
		p->loaded_at = mesh_mono_ns();
		p->next = d->progs;
		d->progs = p;
	}
	p->refs++;
	pthread_mutex_unlock(&d->mu);
	if (p == np && p->keep_dir) {
		/* Copies of other images from before (a restart, an unload) are
		 * no previous image of this one. */
		meshd_image_prune(d->logs, name, p->keep_dir, p->prev_dir);
		record_history(d, p);
	}
	*out = p;
	return 0;
}

static void unref(struct meshd_core *d, struct program *p)
{
	pthread_mutex_lock(&d->mu);
	p->refs--;
	int freeable = p->refs == 0 && atomic_load(&p->retired);
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	if (freeable)
		kick(d, 0); /* the loop frees it once its workers are down */
}

/* Workers of a retired p that hold nothing (no call, no job) are asked
 * to exit; the others are when they let go (call end, job_unhold).  The
 * number still holding something.  d->mu held. */
static unsigned retire_sweep(struct meshd_core *d, struct program *p)
{
	unsigned held = 0;
	reconcile(d, p);
	for (unsigned i = 0; i < p->nw; i++) {
		struct worker *wk = &p->w[i];
		enum mesh_istate st = mesh_instance_state(wk->inst);
		if (st == MESH_IS_DOWN || mesh_istate_stopping(st))
			continue;
		if (wk->job || wk->busy)
			held++;
		else
			mesh_instance_exit(wk->inst);
	}
	return held;
}

/* np, a new image of *pp's program (a reference held on each), becomes
 * the program: new calls and job workers find it; *pp retires (its
 * workers finish what they hold, then exit; the tick frees it) and its
 * reference is dropped; *pp = np.  swap_mu held. */
static int replace(struct meshd_core *d, struct program **pp, struct program *np, const char *why, char **err)
{
	struct program *old = *pp;
	pthread_mutex_lock(&d->mu);
	if (old->gone) {
		pthread_mutex_unlock(&d->mu);
		program_free(np);
		return mesh_errf(err, MESH_E_STATE, "'%s' was unloaded meanwhile", old->img.name);
	}
	np->loaded_at = mesh_mono_ns();
	np->refs = 1;
	np->next = d->progs;
	d->progs = np;
	old->gone = 1;
	atomic_store(&old->retired, 1);
	unsigned held = retire_sweep(d, old);
	pthread_mutex_unlock(&d->mu);
	kick(d, 0);
	mesh_info("%s name=%s image=%012" PRIx64 " -> %012" PRIx64 ": new work goes to the new image; %u worker(s) of the "
		  "old one finish what they hold, then exit",
		  why, np->img.name, mesh_image_id(&old->img) >> 16, mesh_image_id(&np->img) >> 16, held);
	meshd_image_prune(d->logs, np->img.name, np->keep_dir, np->prev_dir);
	if (np->keep_dir)
		record_history(d, np);
	unref(d, old);
	*pp = np;
	return 0;
}

/* A load of a loaded program: the catalog is read again; an image that
 * changed (manifest or binary) replaces the running one (replace); the
 * same image changes nothing; one that does not load leaves the running
 * one as it is. */
static int upgrade(struct meshd_core *d, struct program **pp, char **err)
{
	struct program *p = *pp, *np = calloc(1, sizeof *np);
	if (!np)
		return -ENOMEM;
	int rc = mesh_image_prepare(d->catalog, p->img.name, mesh_host_caps(d->h), d->gpu, &np->img, err);
	rc = meshd__gpu_load(&d->G, &np->img, rc, err);
	if (rc || mesh_image_id(&np->img) == mesh_image_id(&p->img)) {
		program_free(np);
		return rc;
	}
	keep_image(d, np);
	if (p->keep_dir && !(np->prev_dir = strdup(p->keep_dir))) {
		program_free(np);
		return -ENOMEM;
	}
	np->prev_id = p->keep_dir ? mesh_image_id(&p->img) : 0;
	return replace(d, pp, np, "upgrade", err);
}

int meshd_op_load(struct meshd_core *d, const char *name, struct meshd_program_info *out, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	pthread_mutex_lock(&swap_mu);
	pthread_mutex_lock(&d->mu);
	int loaded = find(d, name) != NULL;
	pthread_mutex_unlock(&d->mu);
	int rc = get_program(d, name, &p, err);
	if (rc) {
		pthread_mutex_unlock(&swap_mu);
		return rc;
	}
	struct program *was = p;
	if (loaded)
		rc = upgrade(d, &p, err);
	pthread_mutex_unlock(&swap_mu);
	if (rc == 0 && out) {
		rc = image_info(&p->img, out);
		out->prev_id = p->prev_id;
		out->replaced = p != was;
	}
	unref(d, p);
	return rc;
}

int meshd_op_rollback(struct meshd_core *d, const char *name, struct meshd_program_info *out, char **err)
{
	if (err)
		*err = NULL;
	pthread_mutex_lock(&swap_mu);
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	char *prev = p && p->prev_dir ? strdup(p->prev_dir) : NULL;
	if (p)
		p->refs++;
	pthread_mutex_unlock(&d->mu);
	int rc = 0;
	struct program *np = NULL;
	if (!p)
		rc = mesh_errf(err, MESH_E_NOTFOUND, "'%s' is not loaded", name);
	else if (!prev)
		rc = mesh_errf(err, MESH_E_NOTFOUND,
			       "'%s' has no previous image to roll back to (meshd keeps the one before the last `mesh "
			       "load` that changed it)",
			       name);
	else if (!(np = calloc(1, sizeof *np)))
		rc = -ENOMEM;
	char *e = NULL;
	if (np && (rc = meshd__gpu_load(&d->G, &np->img,
					mesh_image_prepare(prev, name, mesh_host_caps(d->h), d->gpu, &np->img, &e), &e)) != 0) {
		rc = mesh_errf(err, rc, "the previous image of '%s' (kept in '%s') does not load: %s", name, prev,
			       e ? e : mesh_strerror(rc));
		program_free(np);
		np = NULL;
	}
	free(e);
	if (np) {
		np->keep_dir = prev, prev = NULL;
		np->prev_id = p->keep_dir ? mesh_image_id(&p->img) : 0;
		if (p->keep_dir && !(np->prev_dir = strdup(p->keep_dir)))
			np->prev_id = 0;
		rc = replace(d, &p, np, "rollback", err);
	}
	pthread_mutex_unlock(&swap_mu);
	free(prev);
	if (rc == 0 && out) {
		rc = image_info(&p->img, out);
		out->prev_id = p->prev_id;
		out->replaced = 1;
	}
	if (p)
		unref(d, p);
	return rc;
}

static uint64_t start_wait_ns(const struct program *p, const struct meshd_core *d)
{
	(void)d;
	return p->img.m.ready_timeout_ns + p->img.m.online_timeout_ns + STOP_WAIT_NS;
}

/* A new worker record of p with its instance; its index or a negative
 * code.  d->mu held; p->nw < max_workers. */
static int new_worker(struct meshd_core *d, struct program *p)
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
static void spawned(struct meshd_core *d, struct worker *wk, uint64_t res, int rc)
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
		int rc = new_worker(d, p);
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
	spawned(d, wk, res, rc);
	return rc ? rc : down;
}

int meshd_op_start(struct meshd_core *d, const char *name, struct mesh_instance_stats *out, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	int rc = get_program(d, name, &p, err);
	if (rc)
		return rc;
	meshd__gpu_settle(&d->G, &p->img);
	pthread_mutex_lock(&d->mu);
	/* An explicit start clears FAILED and the crash-loop backoff. */
	reconcile(d, p);
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
		kick(d, p->w[i].last_used + p->img.m.idle_ttl_ns);
	}
	pthread_mutex_unlock(&d->mu);
	if (i < 0) {
		unref(d, p);
		return i;
	}
	rc = mesh_instance_wait(inst, 1u << MESH_IS_IDLE | 1u << MESH_IS_RUNNING | 1u << MESH_IS_LAUNCHING,
				start_wait_ns(p, d), err);
	if (rc == 0 && out)
		*out = mesh_instance_stats(inst);
	unref(d, p);
	return rc;
}

/* Every worker of p exits and is waited for (off d->mu). */
static void stop_all(struct meshd_core *d, struct program *p)
{
	pthread_mutex_lock(&d->mu);
	p->stops++;
	unsigned n = p->nw;
	struct mesh_instance *list[MESH_MAX_WORKERS_CAP];
	for (unsigned i = 0; i < n; i++) {
		list[i] = p->w[i].inst;
		mesh_instance_exit(list[i]);
	}
	pthread_mutex_unlock(&d->mu);
	for (unsigned i = 0; i < n; i++)
		mesh_instance_wait(list[i], 1u << MESH_IS_DOWN, p->img.m.stop_grace_ns + STOP_WAIT_NS, NULL);
	pthread_mutex_lock(&d->mu);
	reconcile(d, p);
	pthread_mutex_unlock(&d->mu);
}

int meshd_op_stop(struct meshd_core *d, const char *name, char **err)
{
	if (err)
		*err = NULL;
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	if (p)
		p->refs++;
	pthread_mutex_unlock(&d->mu);
	if (!p)
		return mesh_errf(err, MESH_E_NOTFOUND, "'%s' is not loaded", name);
	stop_all(d, p);
	unref(d, p);
	return 0;
}

int meshd_op_unload(struct meshd_core *d, const char *name, char **err)
{
	if (err)
		*err = NULL;
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	if (!p) {
		pthread_mutex_unlock(&d->mu);
		return mesh_errf(err, MESH_E_NOTFOUND, "'%s' is not loaded", name);
	}
	p->gone = 1;
	p->refs++;
	pthread_mutex_unlock(&d->mu);
	stop_all(d, p);
	pthread_mutex_lock(&d->mu);
	p->refs--;
	while (p->refs)
		pthread_cond_wait(&d->cv, &d->mu);
	for (struct program **pp = &d->progs; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	reconcile(d, p);
	pthread_mutex_unlock(&d->mu);
	for (unsigned i = 0; i < p->nw; i++)
		mesh_instance_free(p->w[i].inst);
	program_free(p);
	return 0;
}

/* pi's ps fields: its workers and their counts; d->mu held.  0 or -ENOMEM. */
static int program_ps(struct meshd_core *d, struct program *p, struct meshd_program_info *pi)
{
	reconcile(d, p);
	int rc = image_info(&p->img, pi);
	if (rc)
		return rc;
	if (p->nw && !(pi->workers = calloc(p->nw, sizeof *pi->workers)))
		return -ENOMEM;
	pi->nworkers = p->nw;
	if (p->failed && !(pi->failed = strdup(p->failed)))
		return -ENOMEM;
	for (unsigned i = 0; i < p->nw; i++) {
		struct meshd_worker_info *wi = &pi->workers[i];
		wi->st = mesh_instance_stats(p->w[i].inst);
		wi->slot = p->w[i].slot;
		wi->ring = wi->slot >= 0 ? mesh_slot_ring_cap(d->slots[wi->slot]) : 0;
		meshd__gpu_worker(&d->G, p->w[i].gpu_res, p->w[i].gpu_prev, wi);
		wi->image_id = pi->image_id;
		pi->spawns += wi->st.spawns;
		pi->crashes += wi->st.crashes;
		pi->warm += wi->st.state == MESH_IS_IDLE || wi->st.state == MESH_IS_RUNNING;
		pi->warm_ns += wi->st.alive_ns;
	}
	uint64_t now = mesh_mono_ns();
	pi->window_ns = now > p->loaded_at ? now - p->loaded_at : 0;
	pi->prev_id = p->prev_id;
	return 0;
}

/* The workers of retired images of p's program that are still up (they
 * finish what they hold) join pi's, each with its own image.  d->mu held.
 * 0 or -ENOMEM. */
static int retired_ps(struct meshd_core *d, const struct program *p, struct meshd_program_info *pi)
{
	for (struct program *q = d->progs; q; q = q->next) {
		if (!atomic_load(&q->retired) || strcmp(q->img.name, p->img.name))
			continue;
		reconcile(d, q);
		for (unsigned i = 0; i < q->nw; i++) {
			struct mesh_instance_stats st = mesh_instance_stats(q->w[i].inst);
			if (st.state == MESH_IS_DOWN)
				continue;
			struct meshd_worker_info *nw = realloc(pi->workers, (pi->nworkers + 1) * sizeof *nw);
			if (!nw)
				return -ENOMEM;
			pi->workers = nw;
			struct meshd_worker_info *wi = &nw[pi->nworkers++];
			memset(wi, 0, sizeof *wi);
			wi->st = st;
			wi->slot = q->w[i].slot;
			wi->ring = wi->slot >= 0 ? mesh_slot_ring_cap(d->slots[wi->slot]) : 0;
			wi->image_id = mesh_image_id(&q->img);
			wi->retired = 1;
		}
	}
	return 0;
}

/* How many programs are loaded and not being unloaded; d->mu held. */
static unsigned live_programs(const struct meshd_core *d)
{
	unsigned n = 0;
	for (const struct program *p = d->progs; p; p = p->next)
		n += !p->gone;
	return n;
}

int meshd_op_ps(struct meshd_core *d, struct meshd_ps *out)
{
	memset(out, 0, sizeof *out);
	out->host = mesh_host_totals(d->h);
	out->caps = *mesh_host_caps(d->h);
	out->slots = d->nslots;
	int rc = meshd__gpu_ps(&d->G, out);
	pthread_mutex_lock(&d->mu);
	unsigned n = live_programs(d);
	if (n && !(out->programs = calloc(n, sizeof *out->programs)))
		rc = -ENOMEM;
	for (struct program *p = d->progs; p && !rc; p = p->next)
		if (!p->gone && !(rc = program_ps(d, p, &out->programs[out->nprograms++])))
			rc = retired_ps(d, p, &out->programs[out->nprograms - 1]);
	pthread_mutex_unlock(&d->mu);
	if (rc)
		meshd_ps_release(out);
	return rc;
}

/* p's metrics into pm; d->mu held.  0 or -ENOMEM. */
static int program_metrics(struct meshd_core *d, struct program *p, uint64_t now, struct meshd_program_metrics *pm)
{
	if (!(pm->name = strdup(p->img.name)))
		return -ENOMEM;
	pm->max_workers = p->img.m.max_workers;
	for (unsigned i = 0; i < p->nw; i++) {
		struct mesh_instance_stats st = mesh_instance_stats(p->w[i].inst);
		if ((unsigned)st.state < MESH_IS__N)
			pm->workers[st.state]++;
		pm->spawns += st.spawns;
		pm->crashes += st.crashes;
		pm->warm_ns += st.alive_ns;
	}
	pm->window_ns = now > p->loaded_at ? now - p->loaded_at : 0;
	pthread_mutex_lock(&d->metrics_mu);
	pm->cold_start = p->cold_start;
	pm->call = p->call;
	memcpy(pm->calls, p->calls, sizeof pm->calls);
	pthread_mutex_unlock(&d->metrics_mu);
	return 0;
}

int meshd_op_metrics(struct meshd_core *d, struct meshd_metrics *out)
{
	memset(out, 0, sizeof *out);
	struct mesh_host_totals t = mesh_host_totals(d->h);
	out->spawns = t.spawns;
	out->crashes = t.crashes;
	out->processes = t.procs;
	out->slots = d->nslots;
	uint64_t now = mesh_mono_ns();
	int rc = 0;
	pthread_mutex_lock(&d->mu);
	for (unsigned i = 0; i < d->nslots; i++)
		out->slots_in_use += !!d->slot_taken[i];
	unsigned n = live_programs(d);
	if (n && !(out->programs = calloc(n, sizeof *out->programs)))
		rc = -ENOMEM;
	for (struct program *p = d->progs; p && !rc; p = p->next)
		if (!p->gone)
			rc = program_metrics(d, p, now, &out->programs[out->nprograms++]);
	pthread_mutex_unlock(&d->mu);
	if (rc) {
		meshd_metrics_release(out);
		return rc;
	}
	out->have_jobs = meshd_jobs_metrics(d, &out->jobs) == 0;
	return 0;
}

int meshd_op_logs(struct meshd_core *d, const char *name, size_t tail_bytes, char **text, size_t *len, char **err)
{
	if (err)
		*err = NULL;
	if (!mesh_manifest_name_ok(name))
		return mesh_errf(err, MESH_E_PATH, "'%s' is not a program name", name);
	char *path = mesh_strf("%s/%s.log", d->logs, name);
	if (!path)
		return -ENOMEM;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		int rc = e == ENOENT ? mesh_errf(err, MESH_E_NOTFOUND, "no log for '%s' yet", name)
				     : mesh_errf(err, -e, "cannot open '%s': %s", path, strerror(e));
		free(path);
		return rc;
	}
	free(path);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	size_t want = tail_bytes == 0 || tail_bytes > LOGS_CAP ? LOGS_CAP : tail_bytes;
	off_t off = st.st_size > (off_t)want ? st.st_size - (off_t)want : 0;
	size_t n = (size_t)(st.st_size - off);
	char *buf = malloc(n + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	ssize_t r = mesh_pread_full(fd, buf, n, off);
	close(fd);
	if (r < 0) {
		free(buf);
		return (int)r;
	}
	buf[r] = 0;
	*text = buf;
	*len = (size_t)r;
	return 0;
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

/* A worker of p on a slot with no call on it, marked busy (the caller
 * clears it); its index, or a negative code.  Starts one more worker
 * (launching an idle one, else spawning) while the policy's replica count
 * for the demand (calls waiting + calls running, one a worker) is above
 * the workers up or coming; else waits for one to come free.  Never past
 * deadline. */
static int acquire(struct meshd_core *d, struct program *p, unsigned stops, uint64_t deadline, uint64_t timeout_ns,
		   const atomic_int *cancel, int *slot_out, char **err)
{
	for (;;) {
		if (cancel && atomic_load(cancel))
			return mesh_errf(err, MESH_E_STOPPED, "the client went away while the call waited for a worker");
		struct mesh_instance *wait_inst = NULL;
		struct program *vp = NULL; /* the program of a worker evicted for us */
		pthread_mutex_lock(&d->mu);
		reconcile_all(d);
		uint64_t now = mesh_mono_ns();
		if (p->stops != stops || p->gone) {
			/* stop, unload or meshd's exit: not a reason to start another. */
			int rc = mesh_errf(err, MESH_E_STOPPED,
					   "'%s' was stopped while the call waited for a worker (stop, unload or meshd "
					   "stopping)",
					   p->img.name);
			pthread_mutex_unlock(&d->mu);
			return rc;
		}
		if (p->failed) {
			int rc = mesh_errf(err, MESH_E_CRASHED, "'%s' is FAILED: %s; `mesh start %s` clears it", p->img.name,
					   p->failed, p->img.name);
			pthread_mutex_unlock(&d->mu);
			return rc;
		}
		int best = -1, coming = -1, stopping = -1;
		unsigned warm = 0, starting = 0, busy = 0;
		for (unsigned i = 0; i < p->nw; i++) {
			struct worker *wk = &p->w[i];
			if (wk->job)
				continue; /* a job's (meshd_job_worker_get) */
			enum mesh_istate st = mesh_instance_state(wk->inst);
			busy += wk->busy;
			if (mesh_istate_stopping(st))
				stopping = (int)i;
			if (st == MESH_IS_RUNNING && wk->slot >= 0) {
				warm++;
				if (!wk->busy && !wk->stuck_since && (best < 0 || wk->last_used < p->w[best].last_used))
					best = (int)i;
			} else if ((st == MESH_IS_STARTING || st == MESH_IS_LAUNCHING) && wk->slot >= 0) {
				starting++;
				coming = (int)i;
			}
		}
		if (best >= 0) {
			struct worker *wk = &p->w[best];
			wk->busy = 1;
			wk->sent++;
			wk->last_used = now;
			kick(d, now + heal_every(d)); /* heal checks while it serves */
			d->slot_busy[wk->slot]++;
			*slot_out = wk->slot;
			pthread_mutex_unlock(&d->mu);
			return best;
		}
		struct mesh_as_config c = {0, p->img.m.max_workers, 1, 1, 1, 0};
		struct mesh_as_obs o = {warm, starting, (uint64_t)p->waiting + busy, 0, 0, 0};
		struct mesh_as_plan plan;
		if (mesh_as_plan(&c, &o, &plan) == 0 && plan.action == MESH_AS_SPAWN) {
			/* One more: an idle process first (no spawn), else a new one. */
			int cand = -1;
			for (unsigned i = 0; i < p->nw && cand < 0; i++)
				if (!p->w[i].job && mesh_instance_state(p->w[i].inst) == MESH_IS_IDLE && p->w[i].slot < 0)
					cand = (int)i;
			if (cand < 0 && now < p->retry_at && warm + starting == 0) {
				/* Backing off a crash loop: answer with the last crash. */
				int rc = mesh_errf(err, MESH_E_CRASHED, "%s%s(the next start of '%s' in %llu ms)",
						   p->crash_report ? p->crash_report : "",
						   p->crash_report && !strchr(p->crash_report, '\n') ? "\n" : "", p->img.name,
						   (unsigned long long)((p->retry_at - now) / MESH_NS_PER_MS));
				pthread_mutex_unlock(&d->mu);
				return rc;
			}
			for (unsigned i = 0; i < p->nw && cand < 0 && now >= p->retry_at; i++)
				if (!p->w[i].job && mesh_instance_state(p->w[i].inst) == MESH_IS_DOWN && p->w[i].slot < 0)
					cand = (int)i;
			if (cand < 0 && now >= p->retry_at && p->nw < p->img.m.max_workers) {
				int rc = new_worker(d, p);
				if (rc < 0) {
					pthread_mutex_unlock(&d->mu);
					return rc;
				}
				cand = rc;
			}
			if (cand >= 0) {
				int s = take_slot(d, p->img.m.ring_bytes);
				if (s < 0)
					vp = evict_lru(d, &wait_inst);
				if (s >= 0) {
					struct worker *wk = &p->w[cand];
					uint64_t res = 0;
					int rc = 0;
					if (mesh_instance_state(wk->inst) == MESH_IS_DOWN &&
					    (rc = meshd__gpu_before_spawn(&d->G, &d->mu, 1, &p->img, (unsigned)cand, wk->inst, &res,
									  err))) {
						d->slot_taken[s] = 0;
						pthread_mutex_unlock(&d->mu);
						if (rc == 1)
							continue; /* waited for GPU memory with d->mu dropped: look again */
						return rc;
					}
					rc = mesh_instance_launch(wk->inst, d->slots[s], err);
					spawned(d, wk, res, rc);
					if (rc) {
						d->slot_taken[s] = 0;
						pthread_mutex_unlock(&d->mu);
						return rc;
					}
					wk->slot = s;
					wk->sent = 0;
					wk->stuck_since = 0;
					wk->last_used = now;
					coming = cand;
				} else if (!vp && warm + starting == 0) {
					int rc = mesh_errf(err, MESH_E_STATE, "no free slot for '%s' (all %u serve calls)",
							   p->img.name, d->nslots);
					pthread_mutex_unlock(&d->mu);
					return rc;
				}
			}
		}
		if (now >= deadline) {
			int rc = acquire_timeout(p, coming, busy, timeout_ns, err);
			pthread_mutex_unlock(&d->mu);
			if (vp)
				unref(d, vp);
			return rc;
		}
		int own = 0;
		if (!wait_inst && coming >= 0) {
			wait_inst = p->w[coming].inst;
			own = 1;
		}
		if (!wait_inst && stopping >= 0 && warm + starting == 0)
			wait_inst = p->w[stopping].inst; /* all of them on their way out */
		uint64_t until = deadline - now < WAIT_STEP_NS ? deadline : now + WAIT_STEP_NS;
		if (!wait_inst) {
			/* Every worker serves a call: one ends (d->cv) or the step. */
			struct timespec ts = {(time_t)(until / MESH_NS_PER_S), (long)(until % MESH_NS_PER_S)};
			pthread_cond_timedwait(&d->cv, &d->mu, &ts);
			pthread_mutex_unlock(&d->mu);
			continue;
		}
		pthread_mutex_unlock(&d->mu);
		char *e = NULL;
		int rc = mesh_instance_wait(wait_inst, 1u << MESH_IS_RUNNING | 1u << MESH_IS_IDLE | 1u << MESH_IS_DOWN,
					    until - now, &e);
		if (vp)
			unref(d, vp);
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

int meshd_op_call_stream(struct meshd_core *d, const char *name, const void *req, size_t n, meshd_part_fn on_part,
			 void *arg, void **reply, size_t *reply_len, uint64_t timeout_ns, char **err)
{
	return meshd_op_call_ex(d, name, req, n, on_part, arg, reply, reply_len, timeout_ns, NULL, err);
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
	if ((rc = get_program(d, name, &p, err)) != 0)
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
		unref(d, p);
		if (err) {
			free(*err);
			*err = NULL;
		}
		goto again;
	}
	if (wi < 0) {
		pthread_mutex_unlock(&d->mu);
		count_call(d, p, wi, mesh_mono_ns() - start);
		unref(d, p);
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
	if (rc == MESH_E_TOOBIG)
		wk->sent--; /* refused before it was sent */
	if (rc == MESH_E_TIMEOUT && !by_limit && !wk->stuck_since)
		wk->stuck_since = t0; /* the worker may still run it */
	wk->busy = 0;
	wk->last_used = mesh_mono_ns();
	/* Idle from now (or still checked: a call its caller gave up on). */
	kick(d, wk->last_used + (wk->stuck_since ? heal_every(d) : p->img.m.idle_ttl_ns));
	d->slot_busy[s]--;
	if (atomic_load(&p->retired))
		retire_sweep(d, p); /* an old image's: it exits */
	reconcile(d, p);
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	count_call(d, p, rc, mesh_mono_ns() - start);
	unref(d, p);
	if (rc == 0) {
		*reply = rep;
		*reply_len = rl;
	} else {
		free(rep);
	}
	return rc;
}

/* One line of a report for the log: control bytes as '?', valid UTF-8. */
static char *log_text(const char *s, size_t n)
{
	char *t = mesh_utf8_sanitize(s, n, NULL);
	for (char *c = t; c && *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	return t;
}

/* Logs a failure report (reported once, taken from the host): its first
 * line (who, how, the exit status) and the last line of output before it,
 * so a crash that no caller saw -- while idle -- is in meshd's own log. */
static void log_report(const char *name, char *r)
{
	const char *nl = strchr(r, '\n');
	size_t head = nl ? (size_t)(nl - r) : strlen(r);
	const char *tail = nl ? strstr(nl, "---\n") : NULL;
	const char *last = NULL;
	size_t lastn = 0;
	if (tail) {
		/* The last non-empty line of the output tail. */
		const char *e = r + strlen(r);
		while (e > tail + 4 && e[-1] == '\n')
			e--;
		const char *b = e;
		while (b > tail + 4 && b[-1] != '\n')
			b--;
		if (b < e) {
			last = b;
			lastn = (size_t)(e - b);
		}
	}
	char *h = log_text(r, head), *l = last ? log_text(last, lastn) : NULL;
	mesh_warn("failed name=%s: %s; last output: %s", name, h ? h : "?", l ? l : "(none)");
	free(h);
	free(l);
	free(r);
}

/* A worker on a slot that hangs or broke it: failed through the table
 * (killed, its slot replaced) so that the next call gets a fresh one.
 * A request waiting for a worker whose heartbeat stopped outside a handler
 * (the library beats every 250 ms there); a call its caller gave up on
 * still running past the manifest's call_timeout; control words that
 * cannot be.  d->mu held. */
static void heal(struct meshd_core *d, struct program *p, struct worker *wk, uint64_t now)
{
	struct mesh_slot_stats ss;
	char why[160];
	why[0] = 0;
	if (mesh_slot_stats(d->slots[wk->slot], &ss) != 0) {
		const char *f = mesh_slot_failed(d->slots[wk->slot]);
		snprintf(why, sizeof why, "it broke its slot: %s", f ? f : "bad control words");
	} else {
		uint64_t done = ss.replies + ss.errors, ct = p->img.m.call_timeout_ns;
		if (wk->stuck_since && done >= wk->sent)
			wk->stuck_since = 0; /* it answered the call its caller gave up on */
		if (wk->stuck_since && ct && now > wk->stuck_since + ct)
			snprintf(why, sizeof why, "a call ran past call_timeout (%llu ms)",
				 (unsigned long long)(ct / MESH_NS_PER_MS));
		else if (wk->sent > ss.requests && ss.requests == done && ss.heartbeat_ns &&
			 now > ss.heartbeat_ns + d->heartbeat_ns)
			snprintf(why, sizeof why, "its heartbeat stopped %llu ms ago while a request waited for it",
				 (unsigned long long)((now - ss.heartbeat_ns) / MESH_NS_PER_MS));
	}
	if (!why[0])
		return;
	mesh_warn("heal name=%s pid=%d: %s; killed, the next call gets a fresh worker", p->img.name,
		  (int)mesh_instance_pid(wk->inst), why);
	mesh_instance_fail(wk->inst, why);
}

/* Retired programs (upgrade, rollback): workers that let go exit; one
 * with no reference left and every worker down and off its slot is
 * unlinked into *done (freed by the caller, off d->mu).  d->mu held. */
static void tick_retired(struct meshd_core *d, struct program **done)
{
	for (struct program **pp = &d->progs; *pp;) {
		struct program *p = *pp;
		if (!atomic_load(&p->retired)) {
			pp = &p->next;
			continue;
		}
		retire_sweep(d, p);
		int idle = p->refs == 0;
		for (unsigned i = 0; i < p->nw; i++) {
			char *r = mesh_instance_crashed(p->w[i].inst);
			if (r)
				log_report(p->img.name, r);
			idle &= mesh_instance_state(p->w[i].inst) == MESH_IS_DOWN && p->w[i].slot < 0;
		}
		if (!idle) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		p->next = *done;
		*done = p;
	}
}

/* The earliest of *next and t. */
static void sooner(uint64_t *next, uint64_t t)
{
	if (t < *next)
		*next = t;
}

/* When heal() must look at a worker on a slot again; UINT64_MAX: only
 * when something about it changes (a call or a job begins: kick()). */
static uint64_t heal_next(struct meshd_core *d, struct program *p, struct worker *wk, uint64_t now)
{
	uint64_t next = UINT64_MAX, ct = p->img.m.call_timeout_ns;
	if (wk->stuck_since && ct)
		sooner(&next, wk->stuck_since + ct + 1);
	if (wk->busy || wk->job || wk->stuck_since)
		/* A request may be sent at any time without a word to the loop. */
		sooner(&next, now + heal_every(d));
	return next;
}

/* Scale to zero: each warm worker is put to the autoscale policy with its
 * own demand (a call on it) and idle time; REAP makes it exit.  Workers
 * that hang are healed.  Retired programs' workers exit and the programs
 * are freed once unused.  Returns when the next pass is due (monotonic;
 * UINT64_MAX: only on a kick or a host event): the earliest idle TTL
 * expiry, heal check, or GPU event poll. */
static uint64_t tick(struct meshd_core *d, uint64_t now)
{
	uint64_t next = UINT64_MAX;
	meshd__gpu_log(&d->G);
	if (d->G.g)
		sooner(&next, now + GPU_LOG_EVERY_NS);
	struct program *done = NULL;
	pthread_mutex_lock(&d->mu);
	tick_retired(d, &done);
	for (struct program *p = d->progs; p; p = p->next) {
		if (p->gone)
			continue;
		reconcile(d, p);
		for (unsigned i = 0; i < p->nw; i++) {
			struct worker *wk = &p->w[i];
			char *r = mesh_instance_crashed(wk->inst);
			if (r)
				log_report(p->img.name, r);
			enum mesh_istate st = mesh_instance_state(wk->inst);
			if (st == MESH_IS_RUNNING && wk->slot >= 0) {
				heal(d, p, wk, now);
				sooner(&next, heal_next(d, p, wk, now));
			}
			if ((st != MESH_IS_IDLE && st != MESH_IS_RUNNING) || !wk->last_used)
				continue;
			/* Used after now (a call ended while this pass waited for
			 * d->mu): not idle at all, never a wrapped difference. */
			uint64_t since = now > wk->last_used ? now - wk->last_used : 0;
			int64_t idle = (int64_t)(since / MESH_NS_PER_MS);
			int64_t ttl = (int64_t)(p->img.m.idle_ttl_ns / MESH_NS_PER_MS);
			int demand = wk->busy || wk->stuck_since || wk->job;
			if (mesh_as_decide(1, demand, idle, ttl) == MESH_AS_REAP)
				mesh_instance_exit(wk->inst);
			else if (!demand)
				/* The policy's to-zero row: idle >= idle_ttl; never
				 * now again (a policy that holds a little longer
				 * is asked again 1 ms later, not in a spin). */
				sooner(&next, wk->last_used + (uint64_t)ttl * MESH_NS_PER_MS > now
						      ? wk->last_used + (uint64_t)ttl * MESH_NS_PER_MS
						      : now + MESH_NS_PER_MS);
		}
	}
	pthread_mutex_unlock(&d->mu);
	while (done) {
		struct program *p = done;
		done = p->next;
		for (unsigned i = 0; i < p->nw; i++)
			mesh_instance_free(p->w[i].inst);
		program_free(p);
	}
	return next;
}

void meshd__tick(struct meshd_core *d, uint64_t now)
{
	tick(d, now);
}

/* ---- the event loop ----
 * One libevent event_base for all of meshd's long-running parts: the
 * host's worker fds (one epoll fd, level-triggered), the core's timer, the
 * control API's evhttp (daemon/api.c) and the metrics listener
 * (daemon/metrics.c).  Nothing on it blocks on a worker: calls, job
 * drivers and the API's ops run on threads of their own, which wake the
 * loop (a host request writes the host's wake fd; kick() activates an
 * event) rather than being polled. */

/* Arms the timer for next (monotonic ns); loop thread. */
static void arm(struct meshd_core *d, uint64_t next)
{
	atomic_store(&d->armed, next);
	if (next == UINT64_MAX) {
		evtimer_del(d->timer_ev);
		return;
	}
	uint64_t now = mesh_mono_ns(), us = next > now ? (next - now + 999) / 1000 : 0;
	struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
	evtimer_add(d->timer_ev, &tv);
}

/* One round: the host's events and deadlines, then the core's pass when
 * the host's table moved, a kick came, or the core's deadline is due;
 * the timer is armed for whichever deadline is next.  Loop thread. */
static void turn(struct meshd_core *d, int pass)
{
	uint64_t next;
	/* A change another thread makes from here on may be one this pass
	 * does not see: its kick() must not be skipped for the old timer. */
	atomic_store(&d->armed, 0);
	if (mesh_host_dispatch(d->h, &next) > 0)
		pass = 1;
	if (atomic_load(&d->stop)) {
		/* Not in the flush after the loop: what was queued there runs. */
		if (d->in_loop)
			event_base_loopbreak(d->base);
		return;
	}
	uint64_t now = mesh_mono_ns();
	if (pass || now >= d->core_next)
		d->core_next = tick(d, now);
	sooner(&next, d->core_next);
	arm(d, next);
}

static void on_host(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	turn(arg, 0);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	turn(arg, 0);
}

static void on_kick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	turn(arg, 1);
}

/* Another thread made a core deadline at t (a worker idle from now, a
 * call or job that needs heal checks; 0: at once, a retired program):
 * the loop recomputes unless its timer already fires by then. */
static void kick(struct meshd_core *d, uint64_t t)
{
	if (t < atomic_load(&d->armed) && d->kick_ev)
		event_active(d->kick_ev, 0, 0);
}

static void use_pthreads(void)
{
	evthread_use_pthreads();
}

static int loop_new(struct meshd_core *d)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	/* Other threads add events and activate the kick: libevent must lock,
	 * and that is decided before the base exists. */
	pthread_once(&once, use_pthreads);
	if (!(d->base = event_base_new()))
		return -ENOMEM;
	d->host_ev = event_new(d->base, mesh_host_fd(d->h), EV_READ | EV_PERSIST, on_host, d);
	d->timer_ev = evtimer_new(d->base, on_timer, d);
	d->kick_ev = event_new(d->base, -1, 0, on_kick, d);
	if (!d->host_ev || !d->timer_ev || !d->kick_ev || event_add(d->host_ev, NULL) < 0)
		return -ENOMEM;
	return 0;
}

struct event_base *meshd_core_base(struct meshd_core *d)
{
	return d->base;
}

struct on_loop {
	void (*fn)(void *);
	void *arg;
	int done;
	pthread_mutex_t mu;
	pthread_cond_t cv;
};

static void on_loop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct on_loop *o = arg;
	(void)fd;
	(void)what;
	o->fn(o->arg);
	pthread_mutex_lock(&o->mu);
	o->done = 1;
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->mu);
}

int meshd_core_on_loop(struct meshd_core *d, void (*fn)(void *), void *arg)
{
	struct on_loop o = {fn, arg, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
	pthread_mutex_lock(&d->loop_mu);
	if (!d->looping || pthread_equal(d->loop_th, pthread_self())) {
		/* No loop runs it (before meshd_core_run, after it), or we are it. */
		pthread_mutex_unlock(&d->loop_mu);
		fn(arg);
		return 0;
	}
	/* Queued under loop_mu: the loop's exit takes loop_mu, then runs
	 * what was queued before it (meshd_core_run). */
	int rc = event_base_once(d->base, -1, EV_TIMEOUT, on_loop_cb, &o, NULL);
	pthread_mutex_unlock(&d->loop_mu);
	if (rc < 0)
		return -ENOMEM;
	pthread_mutex_lock(&o.mu);
	while (!o.done)
		pthread_cond_wait(&o.cv, &o.mu);
	pthread_mutex_unlock(&o.mu);
	pthread_mutex_destroy(&o.mu);
	pthread_cond_destroy(&o.cv);
	return 0;
}

int meshd_core_run(struct meshd_core *d)
{
	int rc = 0;
	pthread_mutex_lock(&d->loop_mu);
	d->loop_th = pthread_self();
	d->looping = 1;
	pthread_mutex_unlock(&d->loop_mu);
	mesh_host_set_driven(d->h, 1);
	/* The first round: what happened before the loop ran. */
	event_active(d->kick_ev, 0, 0);
	d->in_loop = 1;
	if (!atomic_load(&d->stop) && event_base_loop(d->base, EVLOOP_NO_EXIT_ON_EMPTY) < 0)
		rc = -EIO;
	d->in_loop = 0;
	pthread_mutex_lock(&d->loop_mu);
	d->looping = 0;
	pthread_mutex_unlock(&d->loop_mu);
	/* Work queued on the loop before it ended runs now, on this thread. */
	event_base_loop(d->base, EVLOOP_NONBLOCK);
	evtimer_del(d->timer_ev);
	atomic_store(&d->armed, UINT64_MAX);
	/* Waiters drive the host themselves from here on. */
	mesh_host_set_driven(d->h, 0);
	return rc;
}

void meshd_core_stop(struct meshd_core *d)
{
	atomic_store(&d->stop, 1);
	/* The loop's host event sees it (a write: async-signal-safe). */
	mesh_host_wake(d->h);
}

void meshd_core_free(struct meshd_core *d)
{
	if (!d)
		return;
	/* The loop's events first: they refer to the host's fd. */
	if (d->host_ev)
		event_free(d->host_ev);
	if (d->timer_ev)
		event_free(d->timer_ev);
	if (d->kick_ev)
		event_free(d->kick_ev);
	d->kick_ev = NULL;
	if (d->base)
		event_base_free(d->base);
	/* The host exits every worker (grace, SIGKILL of the group) and reaps. */
	mesh_host_free(d->h);
	while (d->progs) {
		struct program *p = d->progs;
		d->progs = p->next;
		program_free(p);
	}
	for (unsigned i = 0; d->slots && i < d->nslots; i++)
		mesh_slot_free(d->slots[i]);
	free(d->slots);
	free(d->slot_busy);
	free(d->slot_taken);
	for (int i = 0; i < 3; i++)
		free(d->env[i]);
	free(d->catalog);
	free(d->logs);
	meshd__gpu_free(&d->G);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->metrics_mu);
	pthread_mutex_destroy(&d->loop_mu);
	free(d);
}

/* ---- workers held by jobs (daemon/job_exec.c; ops.h) ---- */

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
	kick(d, wk->last_used + p->img.m.idle_ttl_ns); /* idle from now */
	if (slot >= 0)
		d->slot_busy[slot]--;
	if (atomic_load(&p->retired))
		retire_sweep(d, p); /* an old image's: it exits */
	reconcile(d, p);
}

int meshd_job_worker_get(struct meshd_core *d, const char *name, struct meshd_job_worker *out, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	memset(out, 0, sizeof *out);
	int rc = get_program(d, name, &p, err);
	if (rc)
		return rc;
	uint64_t deadline = mesh_mono_ns() + start_wait_ns(p, d);
	pthread_mutex_lock(&d->mu);
	reconcile(d, p);
	if (p->failed) {
		rc = mesh_errf(err, MESH_E_CRASHED, "'%s' is FAILED: %s; `mesh start %s` clears it", name, p->failed,
			       name);
		pthread_mutex_unlock(&d->mu);
		unref(d, p);
		return rc;
	}
	int i = job_candidate(d, p);
	if (i < 0) {
		pthread_mutex_unlock(&d->mu);
		unref(d, p);
		return mesh_errf(err, -EAGAIN, "all %u workers of '%s' are in use", p->img.m.max_workers, name);
	}
	struct worker *wk = &p->w[i];
	wk->job = 1;
	if (mesh_instance_state(wk->inst) != MESH_IS_RUNNING || wk->slot < 0) {
		int s = wk->slot >= 0 ? wk->slot : take_slot(d, p->img.m.ring_bytes);
		if (s < 0) {
			/* Full: the least recently used idle worker is halted off
			 * its slot (its process stays, to be run again later); the
			 * job asks again shortly. */
			struct mesh_instance *victim = NULL;
			struct program *vp = evict_lru(d, &victim);
			job_unhold(d, p, (unsigned)i, -1);
			pthread_mutex_unlock(&d->mu);
			if (vp)
				unref(d, vp);
			unref(d, p);
			return mesh_errf(err, -EAGAIN, "no free slot for '%s' (all %u are in use%s)", name, d->nslots,
					 vp ? "; an idle worker is being halted off one" : "");
		}
		if (wk->slot < 0) {
			uint64_t res = 0;
			rc = 0;
			if (mesh_instance_state(wk->inst) == MESH_IS_DOWN &&
			    (rc = meshd__gpu_before_spawn(&d->G, &d->mu, 1, &p->img, (unsigned)i, wk->inst, &res, err)) == 1)
				rc = mesh_errf(err, -EAGAIN, "'%s' waited for GPU memory; asking again", name);
			if (rc == 0) {
				rc = mesh_instance_launch(wk->inst, d->slots[s], err);
				spawned(d, wk, res, rc);
			}
			if (rc) {
				d->slot_taken[s] = 0;
				job_unhold(d, p, (unsigned)i, -1);
				pthread_mutex_unlock(&d->mu);
				unref(d, p);
				return rc;
			}
		}
		wk->slot = s;
	}
	/* Held: reconcile never frees or hands on this slot meanwhile. */
	int s = wk->slot;
	d->slot_busy[s]++;
	kick(d, mesh_mono_ns() + heal_every(d)); /* heal checks while the job holds it */
	struct mesh_instance *inst = wk->inst;
	pthread_mutex_unlock(&d->mu);
	uint64_t now = mesh_mono_ns();
	rc = mesh_instance_wait(inst, 1u << MESH_IS_RUNNING | 1u << MESH_IS_DOWN | 1u << MESH_IS_IDLE,
				now < deadline ? deadline - now : 0, err);
	if (rc == 0 && mesh_instance_state(inst) != MESH_IS_RUNNING) {
		char *r = mesh_instance_last_report(inst);
		rc = MESH_E_CRASHED;
		if (err)
			*err = r ? r : mesh_strf("'%s' exited before it came online", name);
		else
			free(r);
	}
	pthread_mutex_lock(&d->mu);
	if (rc == 0 && d->slots[s] != mesh_instance_slot(inst))
		rc = mesh_errf(err, MESH_E_STATE, "'%s' left its slot while it came online", name);
	if (rc) {
		job_unhold(d, p, (unsigned)i, s);
		pthread_mutex_unlock(&d->mu);
		unref(d, p);
		return rc;
	}
	out->prog = p;
	out->idx = (unsigned)i;
	out->slot_index = s;
	out->slot = d->slots[s];
	out->inst = inst;
	out->pid = mesh_instance_pid(inst);
	pthread_mutex_unlock(&d->mu);
	return 0; /* the program's reference stays until put */
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
	unref(d, p);
	memset(w, 0, sizeof *w);
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

unsigned meshd_program_max_workers(struct meshd_core *d, const char *name, char **err)
{
	struct program *p;
	if (get_program(d, name, &p, err))
		return 0;
	unsigned n = p->img.m.max_workers;
	unref(d, p);
	return n;
}
