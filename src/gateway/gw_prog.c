/* The gateway's programs: the catalog's HTTP programs, a request's place
 * (acquire/release, the cold-start wait, the memory budget), their numbers.
 * Each running program's supervisor thread is gw_sup.c.  See gw.h for the
 * behaviour, gw_prog.h for the locking. */
#include "gateway/gw_prog.h"

#include "autoscale/probe.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/thread.h"
#include "host/host.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <jansson.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void mesh__gw_log(struct mesh_gw *g, int level, const char *fmt, ...)
{
	char line[4096];
	va_list ap;
	if (!g->c.on_log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	g->c.on_log(g->c.ctx, level, line);
}

void mesh__gw_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct mesh__gw_prog *)a)->m.name, ((const struct mesh__gw_prog *)b)->m.name);
}

/* Who p runs as and how its [limits] are enforced, as for a native
 * program (host/limits.h): a limit this machine cannot enforce, or a user
 * that cannot be, leaves p unfit: it stays in the catalog (its models are
 * known), shown failed with the reason, and each request for it is answered
 * 502 with it.  0 or -ENOMEM. */
static int fit(struct mesh_gw *g, struct mesh__gw_prog *p)
{
	char *e = NULL;
	const char *user = p->m.user ? p->m.user : mesh_limits_default_user();
	int rc = mesh_limits_plan(&p->m.limits, &g->caps, &p->enforced, &e), by_user = 0;
	if (rc == 0 && user)
		by_user = (rc = mesh_limits_run_as(user, &p->run_as, &e)) != 0;
	if (rc == 0)
		return 0;
	p->unfit = mesh_strf("program '%s' cannot start: %s%s", p->m.name, e ? e : mesh_strerror(rc),
			     by_user && !p->m.user ? " (meshd's default user: the manifest names no `user`)" : "");
	free(e);
	if (!p->unfit)
		return -ENOMEM;
	snprintf(p->fail_msg, sizeof p->fail_msg, "%s", p->unfit);
	p->gen = p->fail_gen = 1;
	p->fail_code = 502;
	mesh__gw_log(g, MESH_GW_WARN, "%s", p->unfit);
	return 0;
}

int mesh__gw_catalog(struct mesh_gw *g, char **err)
{
	DIR *d = opendir(g->catalog);
	struct dirent *e;
	size_t cap = 0;
	if (!d)
		return mesh_errf(err, -errno, "cannot read the catalog '%s': %s", g->catalog, strerror(errno));
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		char name[80], path[4096];
		if (n <= 5 || n - 5 >= sizeof name || strcmp(e->d_name + n - 5, ".toml"))
			continue;
		memcpy(name, e->d_name, n - 5);
		name[n - 5] = 0;
		if (!mesh_manifest_name_ok(name) || snprintf(path, sizeof path, "%s/%s", g->catalog, e->d_name) >= (int)sizeof path)
			continue;
		char *text = NULL, *perr = NULL;
		size_t len = 0;
		struct mesh_manifest m;
		int rc = mesh_read_file(path, 1 << 20, &text, &len);
		if (rc == 0)
			rc = mesh_manifest_parse(path, text, len, name, &m, &perr);
		free(text);
		if (rc) {
			mesh__gw_log(g, MESH_GW_WARN, "skipping %s: %s", path, perr ? perr : mesh_strerror(rc));
			free(perr);
			continue;
		}
		if (m.backend != MESH_BACKEND_HTTP) {
			mesh_manifest_release(&m);
			continue;
		}
		if (g->nprogs == cap) {
			size_t nc = cap ? cap * 2 : 8;
			struct mesh__gw_prog *np = realloc(g->progs, nc * sizeof *np);
			if (!np) {
				mesh_manifest_release(&m);
				closedir(d);
				return mesh_errf(err, -ENOMEM, "out of memory");
			}
			g->progs = np;
			cap = nc;
		}
		struct mesh__gw_prog *p = &g->progs[g->nprogs++];
		memset(p, 0, sizeof *p);
		p->m = m;
		p->evfd = -1;
		p->log = (struct mesh__wlog)MESH__WLOG_INIT;
	}
	closedir(d);
	if (g->nprogs)
		qsort(g->progs, g->nprogs, sizeof *g->progs, cmp_name);
	mesh_limits_detect(&g->caps, NULL);
	/* NVML (gpu/nvml.h: $MESH_NVML_LIB or libnvidia-ml.so.1) for the
	 * programs' VRAM; without it the budget measures resident memory only. */
	char *nwhy = NULL;
	if (g->nprogs && mesh_nvml_open(NULL, &g->nvml, &nwhy) == 0)
		mesh__gw_log(g, MESH_GW_INFO, "gateway: VRAM measured through NVML (%s, %u GPUs)", mesh_nvml_path(g->nvml),
			     mesh_nvml_count(g->nvml));
	else if (g->nprogs)
		mesh__gw_log(g, MESH_GW_INFO, "gateway: no VRAM measured (%s); resident memory only",
			     nwhy ? nwhy : "no NVML");
	free(nwhy);
	for (size_t i = 0; i < g->nprogs; i++)
		if (fit(g, &g->progs[i]) == -ENOMEM)
			return mesh_errf(err, -ENOMEM, "out of memory");
	for (size_t i = 0; i < g->nprogs; i++) {
		struct mesh__gw_prog *p = &g->progs[i];
		p->g = g;
		for (size_t k = 0; k < p->m.nmodels; k++)
			for (size_t j = 0; j < i; j++)
				for (size_t l = 0; l < g->progs[j].m.nmodels; l++)
					if (!strcmp(p->m.models[k], g->progs[j].m.models[l]))
						return mesh_errf(err, MESH_E_PARSE, "model '%s' is served by both '%s' and '%s'",
								 p->m.models[k], g->progs[j].m.name, p->m.name);
	}
	return 0;
}

void mesh__gw_progs_free(struct mesh_gw *g)
{
	for (size_t i = 0; i < g->nprogs; i++) {
		mesh_manifest_release(&g->progs[i].m);
		mesh__wlog_close(&g->progs[i].log);
		free(g->progs[i].unfit);
	}
	free(g->progs);
	g->progs = NULL;
	g->nprogs = 0;
	mesh_nvml_close(g->nvml);
	g->nvml = NULL;
}

struct mesh__gw_prog *mesh__gw_find(struct mesh_gw *g, const char *model)
{
	for (size_t i = 0; i < g->nprogs; i++)
		for (size_t k = 0; k < g->progs[i].m.nmodels; k++)
			if (!strcmp(g->progs[i].m.models[k], model))
				return &g->progs[i];
	return NULL;
}

const char *mesh__gw_state_name(const struct mesh__gw_prog *p)
{
	static const char *const n[] = {"cold", "starting", "warm", "stopping"};
	if (p->state == GW_COLD && p->fail_gen && p->fail_gen == p->gen)
		return "failed";
	return n[p->state];
}

void mesh__gw_wake(struct mesh__gw_prog *p)
{
	uint64_t one = 1;
	if (p->evfd >= 0 && write(p->evfd, &one, sizeof one) < 0) {
		/* the counter is full: it is readable anyway */
	}
}

void mesh__gw_abs_deadline(struct timespec *ts, uint64_t mono_deadline)
{
	/* cv's clock is CLOCK_MONOTONIC (set in open) */
	ts->tv_sec = (time_t)(mono_deadline / 1000000000ull);
	ts->tv_nsec = (long)(mono_deadline % 1000000000ull);
}

/* Under mu: a new start; the supervisor thread owns it from here (it
 * lives as long as the program's process, and ends by itself: detached). */
static int start(struct mesh__gw_prog *p)
{
	pthread_t th;
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (efd < 0)
		return -errno;
	p->gen++;
	p->state = GW_STARTING;
	p->evfd = efd;
	p->pid = 0;
	int rc = mesh_thread_start(&th, mesh__gw_sup_main, p);
	if (rc) {
		close(efd);
		p->evfd = -1;
		p->state = GW_COLD;
		return rc;
	}
	pthread_detach(th);
	p->g->nsup++;
	return 0;
}

void mesh__gw_look(struct mesh_gw *g)
{
	if (g->nwaiting && g->look)
		g->look(g);
}

static const char *group_of(const struct mesh__gw_prog *p)
{
	return p->m.group ? p->m.group : p->m.name;
}

uint64_t mesh__gw_counted(const struct mesh__gw_prog *p)
{
	uint64_t m = p->rss + p->vram;
	return m > p->m.memory ? m : p->m.memory;
}

/* Under mu: what a start of p is counted at: max(`memory`, what its last
 * run was seen to hold). */
static uint64_t need_of(const struct mesh__gw_prog *p)
{
	return p->last_peak > p->m.memory ? p->last_peak : p->m.memory;
}

/* Under mu, p cold and counted in the budget: 0 when it fits beside the
 * running programs now; 1 when it must wait (the least recently used idle
 * programs of other groups were asked to stop, or none is idle yet);
 * MESH_E_RANGE when it can never fit.  A running program counts for
 * max(declared, measured) (mesh__gw_counted); one stopping counts until
 * its supervisor has reaped it and NVML lists none of its pids. */
static int make_room(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	uint64_t used = 0, freeing = 0, budget = g->c.memory_budget, need = need_of(p);
	if (need > budget)
		return MESH_E_RANGE;
	for (size_t i = 0; i < g->nprogs; i++) {
		const struct mesh__gw_prog *q = &g->progs[i];
		if (q != p && q->state != GW_COLD) {
			used += mesh__gw_counted(q);
			if (q->state == GW_STOPPING)
				freeing += mesh__gw_counted(q);
		}
	}
	if (used + need <= budget)
		return 0;
	while (used - freeing + need > budget) {
		struct mesh__gw_prog *lru = NULL;
		for (size_t i = 0; i < g->nprogs; i++) {
			struct mesh__gw_prog *q = &g->progs[i];
			if (q == p || q->state != GW_WARM || q->inflight || q->waiting || !mesh__gw_counted(q) ||
			    !strcmp(group_of(q), group_of(p)))
				continue;
			if (!lru || q->last_end < lru->last_end)
				lru = q;
		}
		if (!lru)
			break;
		lru->state = GW_STOPPING;
		lru->evictions++;
		snprintf(lru->evict_for, sizeof lru->evict_for, "evicted for %.64s", p->m.name);
		mesh__gw_wake(lru);
		freeing += mesh__gw_counted(lru);
		mesh__gw_log(g, MESH_GW_INFO, "program=%s evicting %s: needs %llu bytes, %llu of %llu in use", p->m.name,
			     lru->m.name, (unsigned long long)need, (unsigned long long)used, (unsigned long long)budget);
	}
	return 1;
}

/* Under mu: the place of w's request, or why it waits (the rules of
 * mesh__gw_acquire).  0 placed, 1 waits, or an HTTP status (*why set). */
static int place(struct mesh__gw_wait *w, char **why, unsigned *retry_after)
{
	struct mesh__gw_prog *p = w->p;
	struct mesh_gw *g = p->g;
	w->until = 0;
	for (;;) {
		if (w->first.fd >= 0) {
			/* Its start sent it, and took its place (gw_sup.c). */
			w->port = w->first.port;
			w->cold = 1;
			return 0;
		}
		if (g->draining) {
			*retry_after = 5;
			*why = strdup("meshd is shutting down");
			return 503;
		}
		if (p->state == GW_WARM && (!p->m.max_concurrency || p->inflight < p->m.max_concurrency)) {
			p->inflight++;
			p->requests++;
			w->port = p->port;
			return 0;
		}
		if (p->state != GW_WARM)
			w->cold = 1;
		if (!w->queued) {
			if (p->waiting >= g->c.max_queue) {
				*retry_after = 5;
				mesh_errf(why, 0, "the queue of program '%s' is full (%u waiting)", p->m.name, p->waiting);
				return 503;
			}
			p->waiting++;
			g->nwaiting++;
			w->queued = 1;
		}
		if (w->gen && p->fail_gen == w->gen) {
			*why = strdup(p->fail_msg);
			return p->fail_code;
		}
		if (p->state == GW_STARTING && !w->gen)
			w->gen = p->gen;
		if (w->first.line && !p->first && p->state == GW_STARTING && p->gen == w->gen)
			p->first = &w->first;
		if (p->state == GW_COLD && p->unfit) {
			*why = strdup(p->unfit);
			return 502;
		}
		if (p->state != GW_COLD)
			return 1; /* starting, stopping, or warm without a place: its change wakes it */
		if (mesh_mono_ns() < p->backoff_until) {
			w->until = p->backoff_until;
			return 1;
		}
		if (g->c.memory_budget && need_of(p)) {
			int room = make_room(p);
			if (room < 0) {
				mesh_errf(why, 0,
					  "program '%s' needs %llu bytes of memory (declared %llu, its last run held %llu), "
					  "more than the budget (%llu)",
					  p->m.name, (unsigned long long)need_of(p), (unsigned long long)p->m.memory,
					  (unsigned long long)p->last_peak, (unsigned long long)g->c.memory_budget);
				return 502;
			}
			if (room) {
				w->cold = 1;
				return 1; /* a program going cold or idle wakes it */
			}
		}
		int rc = start(p);
		if (rc) {
			mesh_errf(why, 0, "cannot start program '%s': %s", p->m.name, mesh_strerror(rc));
			return 502;
		}
		w->gen = p->gen;
	}
}

/* Under mu: w's wait is over (code: 0 placed, else its answer). */
static void settle(struct mesh__gw_wait *w, int code)
{
	struct mesh__gw_prog *p = w->p;
	struct mesh_gw *g = p->g;
	if (p->first == &w->first)
		p->first = NULL;
	if (code && w->first.fd >= 0) {
		/* Sent, but not to be answered (the client left, meshd drains):
		 * the program's answer goes nowhere. */
		close(w->first.fd);
		w->first.fd = -1;
		p->inflight--;
		mesh__gw_look(g);
	}
	if (w->queued) {
		w->queued = 0;
		p->waiting--;
		g->nwaiting--;
		if (!p->waiting && !p->inflight) {
			mesh__gw_wake(p);
			mesh__gw_look(g); /* idle now: a start waiting for room may evict it */
		}
	}
}

int mesh__gw_acquire(struct mesh__gw_wait *w, char **why, unsigned *retry_after)
{
	struct mesh_gw *g = w->p->g;
	*why = NULL;
	*retry_after = 0;
	pthread_mutex_lock(&g->mu);
	int code = place(w, why, retry_after);
	if (code != 1)
		settle(w, code);
	pthread_mutex_unlock(&g->mu);
	if (code > 1 && !*why)
		*why = strdup("out of memory");
	return code;
}

void mesh__gw_acquire_cancel(struct mesh__gw_wait *w)
{
	pthread_mutex_lock(&w->p->g->mu);
	settle(w, 499);
	pthread_mutex_unlock(&w->p->g->mu);
}

void mesh__gw_release(struct mesh__gw_prog *p)
{
	pthread_mutex_lock(&p->g->mu);
	p->inflight--;
	if (!p->inflight) {
		p->last_end = mesh_mono_ns();
		/* Its supervisor looks again an idle TTL after it saw it busy
		 * (gw_sup.c): no wake-up a request, but for a TTL of 0. */
		if (!p->m.idle_ttl_ns)
			mesh__gw_wake(p);
	}
	mesh__gw_look(p->g); /* a place is free (or, idle, room for a start) */
	pthread_mutex_unlock(&p->g->mu);
}

void mesh__gw_count(struct mesh__gw_prog *p, int ok, uint64_t queued_ns)
{
	pthread_mutex_lock(&p->g->mu);
	if (ok)
		p->req_ok++;
	else
		p->req_err++;
	if (queued_ns) {
		p->queue_ns_sum += queued_ns;
		p->queue_count++;
	}
	pthread_mutex_unlock(&p->g->mu);
}

int mesh__gw_pool_get(struct mesh__gw_prog *p, int port)
{
	int fd = -1;
	pthread_mutex_lock(&p->g->mu);
	if (p->npool && p->state == GW_WARM && p->port == port)
		fd = p->pool[--p->npool];
	pthread_mutex_unlock(&p->g->mu);
	return fd;
}

void mesh__gw_pool_drop(struct mesh__gw_prog *p)
{
	while (p->npool)
		close(p->pool[--p->npool]);
}

void mesh__gw_count_timeout(struct mesh__gw_prog *p, int kind)
{
	pthread_mutex_lock(&p->g->mu);
	if (kind == 1)
		p->to_request++;
	else if (kind == 2)
		p->to_response++;
	else
		p->to_idle++;
	pthread_mutex_unlock(&p->g->mu);
}

int mesh_gw_stats(struct mesh_gw *g, struct mesh_gw_prog_stats **out, size_t *n)
{
	struct mesh_gw_prog_stats *st = calloc(g->nprogs ? g->nprogs : 1, sizeof *st);
	*out = NULL;
	*n = 0;
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; i < g->nprogs; i++) {
		const struct mesh__gw_prog *p = &g->progs[i];
		struct mesh_gw_prog_stats *o = &st[i];
		snprintf(o->name, sizeof o->name, "%s", p->m.name);
		snprintf(o->state, sizeof o->state, "%s", mesh__gw_state_name(p));
		o->memory = p->m.memory;
		o->inflight = p->inflight;
		o->queued = p->waiting;
		o->requests_ok = p->req_ok;
		o->requests_error = p->req_err;
		o->cold_starts = p->spawns;
		o->start_failures = p->start_failures;
		o->crashes = p->crashes;
		o->idle_stops = p->reaps;
		o->evictions = p->evictions;
		o->hung_restarts = p->hung;
		o->timeouts_request = p->to_request;
		o->timeouts_response = p->to_response;
		o->timeouts_idle = p->to_idle;
		o->pid = p->pid;
		o->port = p->state == GW_COLD ? 0 : p->port;
		if (p->fail_gen)
			snprintf(o->last_error, sizeof o->last_error, "%.*s", (int)strcspn(p->fail_msg, "\n"),
				 p->fail_msg);
		o->warm_ns_sum = p->warm_ns_sum;
		o->warm_count = p->warm_count;
		o->queue_ns_sum = p->queue_ns_sum;
		o->queue_count = p->queue_count;
	}
	pthread_mutex_unlock(&g->mu);
	*out = st;
	*n = g->nprogs;
	return 0;
}

json_t *mesh_gw_ps_json(struct mesh_gw *g)
{
	json_t *a = json_array();
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; a && i < g->nprogs; i++) {
		const struct mesh__gw_prog *p = &g->progs[i];
		json_t *models = json_array(), *o;
		for (size_t k = 0; models && k < p->m.nmodels; k++)
			json_array_append_new(models, json_string(p->m.models[k]));
		int has = p->state != GW_COLD && p->pid > 0;
		o = json_pack("{s:s, s:s, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:o, s:{s:I, s:I, s:I, s:I, s:I}}", "name",
			      p->m.name, "state", mesh__gw_state_name(p), "pid", has ? json_integer(p->pid) : json_null(),
			      "port", has ? json_integer(p->port) : json_null(), "models", models ? models : json_array(),
			      "in_flight", (json_int_t)p->inflight, "queued", (json_int_t)p->waiting, "cold_starts",
			      (json_int_t)p->spawns, "crashes", (json_int_t)p->crashes, "hung_restarts", (json_int_t)p->hung,
			      "last_error", p->fail_gen ? json_string(p->fail_msg) : json_null(), "memory", "declared",
			      (json_int_t)p->m.memory, "rss", (json_int_t)p->rss, "vram", (json_int_t)p->vram, "counted",
			      (json_int_t)(p->state == GW_COLD ? 0 : mesh__gw_counted(p)), "last_peak",
			      (json_int_t)p->last_peak);
		if (!o || json_array_append_new(a, o)) {
			json_decref(a);
			a = NULL;
		}
	}
	pthread_mutex_unlock(&g->mu);
	return a;
}

void mesh__gw_stop_all(struct mesh_gw *g, uint64_t deadline)
{
	pthread_mutex_lock(&g->mu);
	g->stopping = 1;
	for (size_t i = 0; i < g->nprogs; i++)
		mesh__gw_wake(&g->progs[i]);
	mesh__gw_look(g);
	while (g->nsup) {
		struct timespec ts;
		mesh__gw_abs_deadline(&ts, deadline);
		if (pthread_cond_timedwait(&g->cv_all, &g->mu, &ts) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&g->mu);
}
