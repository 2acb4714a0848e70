/* meshd's core: its life (new, run, stop, free), the event loop that
 * drives the host and the core's timer, and the loop's pass (tick: scale
 * to zero, healing, retired images freed).  The rest of the core is in
 * core_programs.c, core_workers.c and core_call.c (core_int.h; the
 * contract is meshd/core/ops.h).
 *
 * Healing: a worker that breaks its slot (a bad reply), runs a call past its
 * manifest's call_timeout, or whose heartbeat stops while a request waits
 * for it, is failed through the lifecycle table (mesh_instance_fail: its
 * group is killed, its slot replaced); the next call gets a fresh worker.  A
 * program whose workers die before `ready` is backed off (exponentially,
 * capped); after CRASH_FAIL_AFTER such deaths in CRASH_WINDOW_NS it is
 * FAILED until `start`. */
#include "meshd/core/core_int.h"

#include "autoscale/policy.h"
#include "base/err.h"
#include "base/log.h"
#include "base/utf8.h"

#include <event2/thread.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DEFAULT_SLOTS 8u
#define MAX_SLOTS 4096u
/* The worker library beats every 250 ms outside a handler: a request
 * waiting this long for a worker whose heartbeat stopped means it hangs. */
#define HEARTBEAT_STALE_NS (10ull * MESH_NS_PER_S)
/* While a worker serves a call or a job, the loop looks at its heartbeat
 * this often at most (a quarter of the stale age, capped): a request sent
 * to it does not wake the loop. */
#define HEAL_EVERY_MAX_NS (500ull * MESH_NS_PER_MS)
/* With NVML, its events are logged at least this often. */
#define GPU_LOG_EVERY_NS MESH_NS_PER_S
/* The events kept for a follower that reconnects (GET /v1/events). */
#define FEED_KEEP 4096u

/* How often heal() looks at a worker that serves a call or a job. */
uint64_t meshd__heal_every(const struct meshd_core *d)
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
	mesh_hist_observe(&p->cold_start, &meshd_cold_start_bounds, ns);
	p->cold_last_ns = ns;
	pthread_mutex_unlock(&d->metrics_mu);
}

static int loop_new(struct meshd_core *d);

/* The configuration's directories and values, checked before anything is
 * made.  0 or the error. */
static int check_config(const struct meshd_config *cfg, char **err)
{
	struct stat st;
	if (!cfg->catalog || stat(cfg->catalog, &st) != 0 || !S_ISDIR(st.st_mode))
		return mesh_errf(err, MESH_E_NOTFOUND, "cannot use catalog '%s': %s", cfg->catalog ? cfg->catalog : "",
			   cfg->catalog && stat(cfg->catalog, &st) != 0 ? strerror(errno) : "not a directory");
	if (!cfg->logs || stat(cfg->logs, &st) != 0 || !S_ISDIR(st.st_mode))
		return mesh_errf(err, MESH_E_NOTFOUND, "cannot use logs directory '%s': %s", cfg->logs ? cfg->logs : "",
			   cfg->logs && stat(cfg->logs, &st) != 0 ? strerror(errno) : "not a directory");
	if (cfg->slots > MAX_SLOTS)
		return mesh_errf(err, MESH_E_RANGE, "--slots %u is over %u", cfg->slots, MAX_SLOTS);
	if (cfg->isolation && strcmp(cfg->isolation, "mps") != 0 && strcmp(cfg->isolation, "none") != 0)
		return mesh_errf(err, MESH_E_PARSE, "unknown isolation '%s' (none or mps)", cfg->isolation);
	return 0;
}

/* A core with its locks, settings, paths and workers' environment, its n
 * slots to be made; NULL when out of memory, else *rc is 0 or -ENOMEM
 * when a part of it could not be made (the core is for meshd_core_free). */
static struct meshd_core *core_alloc(const struct meshd_config *cfg, unsigned n, int *rc)
{
	struct meshd_core *d = calloc(1, sizeof *d);
	*rc = -ENOMEM;
	if (!d)
		return NULL;
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
	d->pass_pause_ns = cfg->test_pass_pause_ns;
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
	*rc = !d->catalog || !d->logs || !d->env[0] || !d->env[1] || !d->env[2] || !d->slots || !d->slot_busy ||
			      !d->slot_taken
		      ? -ENOMEM
		      : 0;
	return d;
}

int meshd_core_new(struct meshd_core **out, const struct meshd_config *cfg, char **err)
{
	char *e = NULL;
	if (err)
		*err = NULL;
	int rc = check_config(cfg, err);
	if (rc)
		return rc;
	unsigned n = cfg->slots ? cfg->slots : DEFAULT_SLOTS;
	struct meshd_core *d = core_alloc(cfg, n, &rc);
	if (!d)
		return rc;
	if (rc)
		goto bad;
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
	if ((rc = meshd_feed_new(&d->feed, FEED_KEEP))) {
		mesh_errf(err, rc, "cannot keep its events: %s", mesh_strerror(rc));
		goto bad;
	}
	*out = d;
	return 0;
bad:
	meshd_core_free(d); /* copes with a half-built core: no host, NULL slots */
	return rc;
}

struct meshd_feed *meshd_core_feed(struct meshd_core *d)
{
	return d->feed;
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
 * so a crash that no caller saw -- while idle -- is in meshd's own log; the
 * whole report goes to the feed (r is taken). */
static void log_report(struct meshd_core *d, const char *name, char *r)
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
	struct meshd_event e = {.kind = MESHD_EV_CRASH, .text = r};
	snprintf(e.name, sizeof e.name, "%s", name);
	meshd_feed_post(d->feed, &e);
}

/* A worker on a slot that hangs or broke it: failed through the table
 * (killed, its slot replaced) so that the next call, or its job's chunks,
 * get a fresh one.  A request (a call's, or a job's chunk) waiting for a
 * worker whose heartbeat stopped outside a handler (the library beats
 * every 250 ms there); a call its caller gave up on
 * still running past the manifest's call_timeout; control words that
 * cannot be.  d->mu held. */
static void heal(struct meshd_core *d, struct program *p, struct worker *wk, uint64_t now)
{
	struct mesh_slot *slot = d->slots[wk->slot];
	struct mesh_slot_stats ss;
	char why[160];
	why[0] = 0;
	if (mesh_slot_stats(slot, &ss) != 0) {
		const char *f = mesh_slot_failed(slot);
		snprintf(why, sizeof why, "it broke its slot: %s", f ? f : "bad control words");
	} else {
		/* Sent by a call or by a job's executor alike (after the words:
		 * every request the worker took was sent before). */
		uint64_t done = ss.replies + ss.errors, ct = p->img.m.call_timeout_ns, sent = mesh_slot_sent(slot);
		if (wk->stuck_since && done >= sent)
			wk->stuck_since = 0; /* it answered the call its caller gave up on */
		if (wk->stuck_since && ct && now > wk->stuck_since + ct)
			snprintf(why, sizeof why, "a call ran past call_timeout (%llu ms)",
				 (unsigned long long)(ct / MESH_NS_PER_MS));
		else if (sent > ss.requests && ss.requests == done && ss.heartbeat_ns &&
			 now > ss.heartbeat_ns + d->heartbeat_ns)
			snprintf(why, sizeof why, "its heartbeat stopped %llu ms ago while a request waited for it",
				 (unsigned long long)((now - ss.heartbeat_ns) / MESH_NS_PER_MS));
	}
	if (!why[0])
		return;
	mesh_warn("heal name=%s pid=%d: %s; killed, a fresh worker serves %s", p->img.name,
		  (int)mesh_instance_pid(wk->inst), why, wk->job ? "its job's chunks" : "the next call");
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
		meshd__retire_sweep(d, p);
		int idle = p->refs == 0;
		for (unsigned i = 0; i < p->nw; i++) {
			char *r = mesh_instance_crashed(p->w[i].inst);
			if (r)
				log_report(d, p->img.name, r);
			idle &= mesh_instance_state(p->w[i].inst) == MESH_IS_DOWN && p->w[i].slot < 0;
		}
		if (!idle) {
			pp = &p->next;
			continue;
		}
		*pp = p->next;
		meshd__ledger_forget(d, p);
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
 * when something about it changes (a call or a job begins: meshd__kick()). */
static uint64_t heal_next(struct meshd_core *d, struct program *p, struct worker *wk, uint64_t now)
{
	uint64_t next = UINT64_MAX, ct = p->img.m.call_timeout_ns;
	if (wk->stuck_since && ct)
		sooner(&next, wk->stuck_since + ct + 1);
	if (wk->busy || wk->job || wk->stuck_since)
		/* A request may be sent at any time without a word to the loop. */
		sooner(&next, now + meshd__heal_every(d));
	return next;
}

/* p's warm/cold history gets a change when warm differs from the last
 * (d->mu held). */
static void warm_note(struct program *p, int warm)
{
	if (p->warm_n && p->warm_was == warm)
		return;
	p->warm_was = warm;
	unsigned i = (p->warm_at + p->warm_n) % WARM_HIST;
	if (p->warm_n == WARM_HIST)
		p->warm_at = (p->warm_at + 1) % WARM_HIST;
	else
		p->warm_n++;
	p->warm_hist[i] = (struct meshd_warm_change){(int64_t)(mesh_wall_ns() / MESH_NS_PER_MS), warm};
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
	unsigned up = 0; /* workers with a process: the savings are written when it changes */
	pthread_mutex_lock(&d->mu);
	tick_retired(d, &done);
	for (struct program *p = d->progs; p; p = p->next) {
		if (p->gone)
			continue;
		meshd__reconcile(d, p);
		int warm = 0;
		for (unsigned i = 0; i < p->nw; i++) {
			struct worker *wk = &p->w[i];
			char *r = mesh_instance_crashed(wk->inst);
			if (r)
				log_report(d, p->img.name, r);
			enum mesh_istate st = mesh_instance_state(wk->inst);
			up += st != MESH_IS_DOWN;
			warm |= st == MESH_IS_STARTING || st == MESH_IS_LAUNCHING || st == MESH_IS_RUNNING ||
				st == MESH_IS_IDLE || st == MESH_IS_HALTING;
			pid_t pid = mesh_instance_pid(wk->inst);
			if (pid > 0)
				wk->seen_pid = pid;
			if (st != wk->seen) {
				wk->seen = st;
				struct meshd_event e = {.kind = MESHD_EV_WORKER, .id = (uint64_t)wk->seen_pid, .n = {i}};
				snprintf(e.name, sizeof e.name, "%s", p->img.name);
				snprintf(e.word, sizeof e.word, "%s", mesh_istate_name(st));
				meshd_feed_post(d->feed, &e);
			}
			if (st == MESH_IS_RUNNING && wk->slot >= 0) {
				heal(d, p, wk, now);
				sooner(&next, heal_next(d, p, wk, now));
			}
			if ((st != MESH_IS_IDLE && st != MESH_IS_RUNNING) || !wk->last_used)
				continue;
			/* Used after now (a call ended while this pass waited for
			 * d->mu): not idle at all, never a wrapped difference. */
			uint64_t since = mesh_ns_since(now, wk->last_used);
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
		warm_note(p, warm);
	}
	int changed = up != d->ledger_up;
	d->ledger_up = up;
	pthread_mutex_unlock(&d->mu);
	sooner(&next, meshd__ledger_flush(d, changed));
	while (done) {
		struct program *p = done;
		done = p->next;
		for (unsigned i = 0; i < p->nw; i++)
			mesh_instance_free(p->w[i].inst);
		meshd__program_free(p);
	}
	return next;
}

/* ---- the event loop ----
 * One libevent event_base for all of meshd's long-running parts: the
 * host's worker fds (one epoll fd, level-triggered), the core's timer, the
 * control API's evhttp (meshd/api/api.c) and the metrics listener
 * (meshd/api/metrics.c).  Nothing on it blocks on a worker: calls, job
 * drivers and the API's ops run on threads of their own, which wake the
 * loop (a host request writes the host's wake fd; meshd__kick() activates an
 * event) rather than being polled. */

/* Arms the timer for next (monotonic ns) and publishes the core's own
 * deadline for meshd__kick(): a kick for a time before it wakes the loop.
 * Not next, which may be the host's: a timer for a host deadline runs no
 * core pass, so a kick skipped for it would be lost.  Loop thread. */
static void arm(struct meshd_core *d, uint64_t next)
{
	atomic_store(&d->armed, d->core_next);
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
	 * does not see: its meshd__kick() must not be skipped, for the old
	 * timer or for this pass (UINT64_MAX: every kick wakes the loop). */
	atomic_store(&d->armed, UINT64_MAX);
	if (mesh_host_dispatch(d->h, &next) > 0)
		pass = 1;
	if (atomic_load(&d->stop)) {
		/* Not in the flush after the loop: what was queued there runs. */
		if (d->in_loop)
			event_base_loopbreak(d->base);
		return;
	}
	uint64_t now = mesh_mono_ns();
	if (pass || now >= d->core_next) {
		d->core_next = tick(d, now);
		if (d->pass_pause_ns)
			mesh_sleep_ns(d->pass_pause_ns);
	}
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
void meshd__kick(struct meshd_core *d, uint64_t t)
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
	/* Its timer to the microsecond (epoll's timerfd): the host's deadlines
	 * are an HTTP program's listen tests too, 0.25 ms apart early in its
	 * start (host/probing.h); epoll_wait's own timeout is whole ms. */
	struct event_config *cfg = event_config_new();
	if (cfg && event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER) == 0)
		d->base = event_base_new_with_config(cfg);
	if (cfg)
		event_config_free(cfg);
	if (!d->base && !(d->base = event_base_new()))
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

struct mesh_host *meshd_core_host(struct meshd_core *d)
{
	return d->h;
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
	/* The savings windows as they stand (the workers are still counted). */
	if (d->ledgers)
		meshd__ledger_flush(d, 1);
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
		meshd__program_free(p);
	}
	for (unsigned i = 0; d->slots && i < d->nslots; i++)
		mesh_slot_free(d->slots[i]);
	free(d->slots);
	free(d->slot_busy);
	free(d->slot_taken);
	for (int i = 0; i < 3; i++)
		free(d->env[i]);
	free(d->catalog);
	meshd__ledgers_free(d);
	free(d->logs);
	meshd__gpu_free(&d->G);
	meshd_feed_free(d->feed);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->cv);
	pthread_mutex_destroy(&d->metrics_mu);
	pthread_mutex_destroy(&d->loop_mu);
	free(d);
}
