/* The gateway's programs: the catalog's HTTP programs, each an instance of
 * the host's (the host spawns, probes, stops and reaps it: one supervisor;
 * its changes of state come to on_change); a request's place (acquire and
 * release, the cold-start wait, the memory budget); the programs' tick
 * (the idle stop, the measured memory, the wait for a dead program's VRAM);
 * their numbers.  See gw.h for the behaviour, gw_prog.h for the locking. */
#include "gateway/gw_prog.h"

#include "autoscale/policy.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static uint64_t counted(const struct mesh__gw_prog *p);
static void pool_drop(struct mesh__gw_prog *p);

#define BACKOFF_MAX_NS (30ull * 1000000000ull)
/* The programs' memory is measured this often (and soon after warm); a dead
 * program's VRAM is awaited this long, looked at this often. */
#define MEASURE_EVERY_NS 1000000000ull
#define VRAM_GRACE_NS (10ull * 1000000000ull)
#define VRAM_POLL_NS 10000000ull
#define TREE_PIDS_MAX 256

static void on_change(void *arg, struct mesh_instance *w, enum mesh_istate from, enum mesh_istate to);

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
	return strcmp((*(struct mesh__gw_prog *const *)a)->img.name, (*(struct mesh__gw_prog *const *)b)->img.name);
}

/* p cannot start at all (its image's limits or user): it stays in the
 * catalog (its models are known), shown failed with the reason, and each
 * request for it is answered 502 with it.  0 or -ENOMEM. */
static int unfit(struct mesh_gw *g, struct mesh__gw_prog *p, const char *why)
{
	p->unfit = mesh_strf("program '%s' cannot start: %s", p->img.name, why);
	if (!p->unfit)
		return -ENOMEM;
	snprintf(p->fail_msg, sizeof p->fail_msg, "%s", p->unfit);
	snprintf(p->fail_short, sizeof p->fail_short, "%s", p->unfit);
	p->gen = p->fail_gen = 1;
	p->fail_code = 502;
	mesh__gw_log(g, MESH_GW_WARN, "%s", p->unfit);
	return 0;
}
/* One entry of the catalog as read: its name, and its HTTP program (a
 * new one, no instance yet; NULL: the manifest is not an HTTP program's,
 * or it does not read: err, "file:line:col: ..." malloc'd). */
struct entry {
	char name[80];
	struct mesh__gw_prog *p;
	char *err;
	int same; /* the program of that name has these very bytes already */
};

static void prog_free(struct mesh__gw_prog *p)
{
	if (!p)
		return;
	if (p->inst) {
		/* Nobody is told any more; a process left (a drain past its
		 * bounds) is stopped, reaped. */
		mesh_instance_set_notify(p->inst, NULL, NULL);
		mesh_instance_free(p->inst);
	}
	pool_drop(p);
	mesh_image_release(&p->img);
	free(p->unfit);
	free(p->mcounts);
	free(p);
}

/* One manifest file into e (e->name set): its program when it is an HTTP
 * program's, its error when it does not read.  Its image_hash is that of
 * the file's bytes (a reload compares it).  0 or -ENOMEM. */
static int read_one(struct mesh_gw *g, struct entry *e, const char *path)
{
	char *text = NULL, *perr = NULL, *why = NULL;
	size_t len = 0;
	struct mesh_manifest m;
	int rc = mesh_read_file(path, 1 << 20, &text, &len);
	if (rc == 0)
		rc = mesh_manifest_parse(path, text, len, e->name, &m, &perr);
	uint64_t hash = mesh_fnv1a64(MESH_FNV1A64_INIT, text ? text : "", len);
	free(text);
	if (rc == -ENOMEM)
		return rc;
	if (rc) {
		e->err = perr ? perr : mesh_strf("%s: %s", path, mesh_strerror(rc));
		return e->err ? 0 : -ENOMEM;
	}
	if (m.backend != MESH_BACKEND_HTTP) {
		mesh_manifest_release(&m);
		return 0;
	}
	struct mesh__gw_prog *p = calloc(1, sizeof *p);
	if (!p) {
		mesh_manifest_release(&m);
		return -ENOMEM;
	}
	p->g = g;
	/* Its limits planned and its user resolved as a native program's. */
	rc = mesh_image_http(&p->img, &m, mesh_host_caps(g->host), &why);
	p->img.image_hash = hash;
	if (rc == -ENOMEM || (rc && unfit(g, p, why ? why : mesh_strerror(rc)) < 0)) {
		free(why);
		prog_free(p);
		return -ENOMEM;
	}
	free(why);
	if (p->img.m.nmodels && !(p->mcounts = calloc(p->img.m.nmodels, sizeof *p->mcounts))) {
		prog_free(p);
		return -ENOMEM;
	}
	e->p = p;
	return 0;
}

static int cmp_entry(const void *a, const void *b)
{
	return strcmp(((const struct entry *)a)->name, ((const struct entry *)b)->name);
}

static void entries_free(struct entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		prog_free(v[i].p);
		free(v[i].err);
	}
	free(v);
}

/* The catalog's manifests (<catalog>/<name>.toml), by name.  0, or a code
 * with *err (the catalog does not read, -ENOMEM). */
static int read_catalog(struct mesh_gw *g, struct entry **out, size_t *nout, char **err)
{
	DIR *d = opendir(g->catalog);
	struct dirent *de;
	struct entry *v = NULL;
	size_t n = 0, cap = 0;
	*out = NULL;
	*nout = 0;
	if (!d)
		return mesh_errf(err, -errno, "cannot read the catalog '%s': %s", g->catalog, strerror(errno));
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		char path[4096];
		if (len <= 5 || len - 5 >= sizeof v->name || strcmp(de->d_name + len - 5, ".toml"))
			continue;
		struct entry *nv = mesh_grow(v, &cap, n + 1, sizeof *v);
		if (!nv)
			goto oom;
		v = nv;
		struct entry *e = memset(&v[n], 0, sizeof *v);
		memcpy(e->name, de->d_name, len - 5);
		e->name[len - 5] = 0;
		if (!mesh_manifest_name_ok(e->name) ||
		    snprintf(path, sizeof path, "%s/%s", g->catalog, de->d_name) >= (int)sizeof path)
			continue;
		n++;
		if (read_one(g, e, path) < 0)
			goto oom;
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof *v, cmp_entry);
	*out = v;
	*nout = n;
	return 0;
oom:
	closedir(d);
	entries_free(v, n);
	return mesh_errf(err, -ENOMEM, "out of memory");
}

/* p's instance of the host, told to on_change, probed every
 * probe_interval while warm (none when it is unfit).  0 or -ENOMEM. */
static int instance(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	if (p->unfit)
		return 0;
	if (mesh_instance_new(g->host, &p->img, &p->inst))
		return -ENOMEM;
	mesh_instance_set_check(p->inst, g->c.probe_interval_ns, g->c.probe_failures);
	mesh_instance_set_notify(p->inst, on_change, p);
	return 0;
}

/* A model p serves that another program of v (n of them; NULL entries
 * skipped) serves too, or NULL; *other that program. */
static const char *model_clash(struct mesh__gw_prog *const *v, size_t n, const struct mesh__gw_prog *p,
			       const struct mesh__gw_prog **other)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] && v[i] != p)
			for (size_t k = 0; k < mesh__gw_nnames(p); k++)
				for (size_t l = 0; l < mesh__gw_nnames(v[i]); l++)
					if (!strcmp(mesh__gw_name(p, k), mesh__gw_name(v[i], l))) {
						*other = v[i];
						return mesh__gw_name(p, k);
					}
	return NULL;
}

/* NVML (gpu/nvml.h: $MESH_NVML_LIB or libnvidia-ml.so.1) for the programs'
 * VRAM, once there is a program; without it the budget measures resident
 * memory only. */
static void nvml_open(struct mesh_gw *g)
{
	char *nwhy = NULL;
	static const char none[] = "no NVML";
	if (g->nvml || !g->nprogs)
		return;
	if (mesh_nvml_open(NULL, &g->nvml, &nwhy) == 0)
		mesh__gw_log(g, MESH_GW_INFO, "gateway: VRAM measured through NVML (%s, %u GPUs)", mesh_nvml_path(g->nvml),
			     mesh_nvml_count(g->nvml));
	else
		mesh__gw_log(g, MESH_GW_INFO, "gateway: no VRAM measured (%s); resident memory only", nwhy ? nwhy : none);
	free(nwhy);
}

int mesh__gw_catalog(struct mesh_gw *g, char **err)
{
	struct entry *v;
	size_t n;
	int rc = read_catalog(g, &v, &n, err);
	if (rc)
		return rc;
	if (!(g->progs = calloc(n ? n : 1, sizeof *g->progs))) {
		entries_free(v, n);
		return mesh_errf(err, -ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		const struct mesh__gw_prog *o;
		const char *clash;
		if (v[i].err)
			mesh__gw_log(g, MESH_GW_WARN, "skipping %s", v[i].err);
		if (!v[i].p)
			continue;
		if ((clash = model_clash(g->progs, g->nprogs, v[i].p, &o))) {
			rc = mesh_errf(err, MESH_E_PARSE, "model '%s' is served by both '%s' and '%s'", clash, o->img.name,
				       v[i].p->img.name);
			break;
		}
		g->progs[g->nprogs++] = v[i].p;
		v[i].p = NULL;
		if (instance(g->progs[g->nprogs - 1])) {
			rc = mesh_errf(err, -ENOMEM, "out of memory");
			break;
		}
	}
	entries_free(v, n);
	if (rc == 0)
		nvml_open(g);
	return rc;
}

void mesh__gw_progs_free(struct mesh_gw *g)
{
	for (size_t i = 0; i < g->nprogs; i++)
		prog_free(g->progs[i]);
	while (g->retired) {
		struct mesh__gw_prog *p = g->retired;
		g->retired = p->rnext;
		prog_free(p);
	}
	free(g->progs);
	g->progs = NULL;
	g->nprogs = 0;
	mesh_nvml_close(g->nvml);
	g->nvml = NULL;
}

size_t mesh__gw_nnames(const struct mesh__gw_prog *p)
{
	return p->img.m.nmodels + p->img.m.naliases;
}

const char *mesh__gw_name(const struct mesh__gw_prog *p, size_t k)
{
	return k < p->img.m.nmodels ? p->img.m.models[k] : p->img.m.aliases[k - p->img.m.nmodels];
}

struct mesh__gw_prog *mesh__gw_find(struct mesh_gw *g, const char *model)
{
	struct mesh__gw_prog *found = NULL;
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; !found && i < g->nprogs; i++)
		for (size_t k = 0; !g->progs[i]->retired && k < mesh__gw_nnames(g->progs[i]); k++)
			if (!strcmp(mesh__gw_name(g->progs[i], k), model)) {
				found = g->progs[i];
				break;
			}
	if (found)
		mesh__gw_hold(found);
	pthread_mutex_unlock(&g->mu);
	return found;
}

void mesh__gw_hold(struct mesh__gw_prog *p)
{
	__atomic_add_fetch(&p->holds, 1, __ATOMIC_RELAXED);
}

void mesh__gw_unhold(struct mesh__gw_prog *p)
{
	/* Release: what this thread did with p comes before the free, which
	 * reads the count with acquire (retired_unheld). */
	if (p)
		__atomic_sub_fetch(&p->holds, 1, __ATOMIC_RELEASE);
}

const char *mesh__gw_state_name(const struct mesh__gw_prog *p)
{
	static const char *const n[] = {"cold", "starting", "warm", "stopping"};
	if (p->state == GW_COLD && p->fail_gen && p->fail_gen == p->gen)
		return "failed";
	return n[p->state];
}

/* A monotonic time as a timespec for the condition variables here. */
static void abs_deadline(struct timespec *ts, uint64_t mono_deadline)
{
	/* cv's clock is CLOCK_MONOTONIC (set in open) */
	ts->tv_sec = (time_t)(mono_deadline / 1000000000ull);
	ts->tv_nsec = (long)(mono_deadline % 1000000000ull);
}

/* ---- The programs' runs, through the host ---- */

/* Under mu: the programs' tick is wanted at (or before) at. */
static void arm(struct mesh_gw *g, uint64_t at)
{
	if (g->arm)
		g->arm(g, at);
}

/* Under mu: the start failed; waiting requests of this start get code and
 * brief (what a client is told), meshd's log msg (the host's report, or the
 * spawn's error), the next start waits out a backoff (doubling per failed
 * start in a row, up to 30 s). */
static void fail_start(struct mesh__gw_prog *p, int code, const char *brief, const char *msg)
{
	snprintf(p->fail_msg, sizeof p->fail_msg, "%s", msg);
	snprintf(p->fail_short, sizeof p->fail_short, "%.*s", (int)strcspn(brief, "\n"), brief);
	p->fail_gen = p->gen;
	p->fail_code = code;
	p->start_failures++;
	p->backoff_ns = p->backoff_ns ? p->backoff_ns * 2 : p->g->c.backoff_ns;
	if (p->backoff_ns > BACKOFF_MAX_NS)
		p->backoff_ns = BACKOFF_MAX_NS;
	p->backoff_until = mesh_mono_ns() + p->backoff_ns;
}

/* Under mu: p has no process any more and is another start's to make. */
static void cold(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	pool_drop(p);
	p->state = GW_COLD;
	p->pid = 0;
	p->stop_why[0] = 0;
	p->stop_t0 = p->vram_since = 0;
	p->killed = 0;
	if (p->peak)
		p->last_peak = p->peak;
	p->peak = p->rss = p->vram = p->logged_peak = 0;
	p->measured = p->exit_due = 0;
	p->held_for = 0;
	p->ngpu = 0;
	g->nlive--;
	if (p->retired)
		arm(g, mesh_mono_ns()); /* it leaves the table (the tick) */
	pthread_cond_broadcast(&g->cv_all);
	mesh__gw_look(g);
}

/* Under mu: the host spawned p's process since the last look (its pid and
 * port, its "spawned" line): from the requester that asked, or from the
 * host's first word of it, whichever comes first. */
static void note_spawn(struct mesh__gw_prog *p)
{
	struct mesh_instance_http hi;
	uint32_t n = mesh_instance_stats(p->inst).spawns;
	if (n == p->spawns_seen || mesh_instance_http(p->inst, &hi))
		return;
	p->spawns_seen = n;
	p->spawned_gen = p->gen;
	p->pid = hi.pid;
	p->port = hi.port;
	p->spawns++;
	mesh__gw_log(p->g, MESH_GW_INFO, "program=%s spawned pid=%d port=%d", p->img.name, (int)hi.pid, hi.port);
}

/* A start p's place began (the requester's thread, mu not held: the spawn
 * takes milliseconds): the host spawns it and probes it; its warmth, or its
 * end, come to on_change. */
static void start(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	char *err = NULL;
	int rc = mesh_instance_warm(p->inst, &err);
	pthread_mutex_lock(&g->mu);
	if (rc == 0) {
		note_spawn(p);
	} else if (p->state == GW_STARTING) {
		/* No process: the waiters get the reason at once. */
		fail_start(p, 502, err ? err : mesh_strerror(rc), err ? err : mesh_strerror(rc));
		mesh__gw_log(g, MESH_GW_WARN, "program=%s start failed: %s", p->img.name, p->fail_msg);
		cold(p);
	}
	pthread_mutex_unlock(&g->mu);
	free(err);
}

/* Under mu: p's process is asked to stop (its stop signal, the grace, then
 * SIGKILL of all it contains: the host's) for why.  measure_first: it is
 * measured once more first, on the programs' tick (armed now), so that its
 * peak is known however soon after warm it goes; else at once (meshd
 * stops). */
static void stop(struct mesh__gw_prog *p, const char *why, int measure_first)
{
	if (p->state != GW_STARTING && p->state != GW_WARM)
		return;
	p->state = GW_STOPPING;
	p->held_for = 0;
	p->keep_until = 0; /* a keep_alive held that process, not the next */
	p->keep_unload = 0;
	snprintf(p->stop_why, sizeof p->stop_why, "%s", why);
	p->stop_t0 = mesh_mono_ns();
	/* An idle connection must not hold up its graceful stop. */
	pool_drop(p);
	mesh__gw_log(p->g, MESH_GW_INFO, "program=%s stopping pid=%d (%s) signal=%s", p->img.name, (int)p->pid, why,
		     mesh_signal_name(p->img.m.stop_signal));
	if (measure_first && p->pid) {
		p->exit_due = 1;
		arm(p->g, mesh_mono_ns());
		return;
	}
	mesh_instance_exit(p->inst);
}

/* Under mu, p just warm: the first waiter's request goes on the probe's
 * connection fd now, from this thread (the one that dispatched the probe's
 * answer), so the program works on it while the waiter's loop wakes (on a
 * loaded machine a wake-up costs milliseconds).  At most 64 KiB of it,
 * without blocking (mu is held); the waiter sends the rest.  It takes the
 * request's place (as acquire would), and fd becomes the waiter's (*fd -1).
 * When it went: its time; else 0. */
static uint64_t send_first(struct mesh__gw_prog *p, int *fd)
{
	struct mesh__gw_first *f = p->first;
	if (!f || *fd < 0 || (p->img.m.max_concurrency && p->inflight >= p->img.m.max_concurrency))
		return 0;
	size_t cap = 65536, nl = f->nline < cap ? f->nline : cap, nr = f->nrest < cap - nl ? f->nrest : cap - nl;
	struct iovec iov[2] = {{(void *)f->line, nl}, {(void *)f->rest, nr}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = nr ? 2 : 1};
	ssize_t n = sendmsg(*fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n <= 0)
		return 0; /* the waiter sends it (on this connection, from the pool, or a new one) */
	p->first = NULL;
	f->fd = *fd;
	f->sent = (size_t)n;
	f->port = p->port;
	f->t_sent = mesh_mono_ns();
	*fd = -1;
	p->inflight++;
	p->requests++;
	return f->t_sent;
}

/* The warm line: what the start's wait cost (the host's CPU on its tests
 * and probes) and where its time went (the host's words), and when the
 * first request went on the probe's connection. */
static void warm_line(struct mesh__gw_prog *p, const struct mesh_instance_http *hi, uint64_t t_first)
{
	char wait[400], first[96] = "";
	if (t_first)
		snprintf(first, sizeof first, ", the first request sent on its connection %.3f ms after",
			 (double)(t_first - hi->t_warm) / 1e6);
	mesh_instance_http_wait_text(hi, wait, sizeof wait);
	mesh__gw_log(p->g, MESH_GW_INFO, "program=%s warm pid=%d in %.1f ms (%s%s)", p->img.name, (int)p->pid,
		     (double)(hi->t_warm - hi->t_spawn) / 1e6, wait, first);
}

/* Under mu: the host's probe passed: the first request goes, every waiter
 * looks again, its memory is measured soon. */
static void became_warm(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	struct mesh_instance_http hi;
	int fd = mesh_instance_take_conn(p->inst);
	if (p->state != GW_STARTING || mesh_instance_http(p->inst, &hi)) {
		if (fd >= 0)
			close(fd);
		return;
	}
	uint64_t now = mesh_mono_ns();
	p->state = GW_WARM;
	p->last_end = now;
	uint64_t t_first = send_first(p, &fd);
	if (fd >= 0 && p->npool < GW_POOL_MAX)
		p->pool[p->npool++] = fd; /* the first request rides it: no connect, no accept for the program */
	else if (fd >= 0)
		close(fd);
	p->backoff_ns = 0;
	mesh_hist_observe(&p->warm, &mesh_gw_seconds_bounds, hi.t_warm - hi.t_spawn);
	p->next_measure = now + MEASURE_EVERY_NS / 10; /* the first requests' output first */
	arm(g, p->next_measure);
	mesh__gw_look(g); /* each waiter relays its request now */
	warm_line(p, &hi, t_first);
}

/* Under mu: not warm by its start timeout: the waiters answer now (504),
 * not after the stop the host began. */
static void start_timed_out(struct mesh__gw_prog *p)
{
	struct mesh_instance_http hi;
	char *tail = mesh_instance_tail(p->inst), msg[8192];
	mesh_instance_http(p->inst, &hi);
	snprintf(msg, sizeof msg, "program '%s' was not warm within %.1f s (last probe: %s)%s%s", p->img.name,
		 (double)p->img.m.start_timeout_ns / 1e9, hi.last_probe, tail && *tail ? "; its last lines:\n" : "",
		 tail ? tail : "");
	free(tail);
	char brief[200];
	snprintf(brief, sizeof brief, "program '%s' was not warm within %.1f s", p->img.name,
		 (double)p->img.m.start_timeout_ns / 1e9);
	fail_start(p, 504, brief, msg);
	mesh__gw_log(p->g, MESH_GW_WARN, "program=%s start timeout: %.*s", p->img.name, (int)strcspn(msg, "\n"), msg);
	p->state = GW_STOPPING;
	snprintf(p->stop_why, sizeof p->stop_why, "start timeout");
	p->stop_t0 = mesh_mono_ns();
	mesh__gw_log(p->g, MESH_GW_INFO, "program=%s stopping pid=%d (start timeout) signal=%s", p->img.name,
		     (int)p->pid, mesh_signal_name(p->img.m.stop_signal));
	mesh__gw_look(p->g);
}

/* Under mu: warm, its probe failed probe_failures times in a row: the host
 * SIGKILLs it (a hung server drains nothing). */
static void hung(struct mesh__gw_prog *p)
{
	struct mesh_instance_http hi;
	mesh_instance_http(p->inst, &hi);
	mesh__gw_log(p->g, MESH_GW_WARN, "program=%s pid=%d hung: %u probes in a row failed (last: %s)", p->img.name,
		     (int)p->pid, p->g->c.probe_failures, hi.last_probe);
	p->state = GW_STOPPING;
	pool_drop(p);
	p->hung++;
	snprintf(p->stop_why, sizeof p->stop_why, "hung");
	p->stop_t0 = mesh_mono_ns();
	p->killed = 1;
}

/* Under mu: its process ended (the host reaped it, from state from). */
static void ended(struct mesh__gw_prog *p, enum mesh_istate from)
{
	struct mesh_gw *g = p->g;
	struct mesh_instance_http hi;
	mesh_instance_http(p->inst, &hi);
	if (from == MESH_IS_PROBING) {
		if (p->state != GW_STARTING || p->spawned_gen != p->gen)
			return; /* a spawn that failed: its requester says so */
		char *r = mesh_instance_last_report(p->inst), brief[768];
		snprintf(brief, sizeof brief, "program '%s' exited with status %d before it was warm%s", p->img.name,
			 hi.status, hi.limits);
		fail_start(p, 502, brief, r ? r : brief);
		free(r);
		mesh__gw_log(g, MESH_GW_WARN, "program=%s crashed while starting: status=%d", p->img.name, hi.status);
	} else if (from == MESH_IS_WARM) {
		char *tail = mesh_instance_tail(p->inst);
		mesh__gw_log(g, MESH_GW_WARN, "program=%s crashed pid=%d status=%d%s; its last lines:\n%s", p->img.name,
			     (int)p->pid, hi.status, hi.limits, tail ? tail : "");
		free(tail);
		p->crashes++;
	} else {
		mesh__gw_log(g, MESH_GW_INFO, "program=%s stopped pid=%d status=%d%s in %.1f ms", p->img.name, (int)p->pid,
			     hi.status, p->killed ? " (SIGKILL after the grace)" : "",
			     (double)(mesh_mono_ns() - p->stop_t0) / 1e6);
		if (!strcmp(p->stop_why, "idle"))
			p->reaps++;
	}
	pool_drop(p);
	if (p->ngpu && g->nvml) {
		/* Its processes are gone; its GPU memory may not be yet: it
		 * counts in the budget (stopping) until NVML lists none of them. */
		p->state = GW_STOPPING;
		p->vram_since = mesh_mono_ns();
		arm(g, p->vram_since);
		return;
	}
	cold(p);
}

/* The host's word of a change of p's instance (the thread that dispatched
 * it, without the host's lock). */
static void on_change(void *arg, struct mesh_instance *w, enum mesh_istate from, enum mesh_istate to)
{
	struct mesh__gw_prog *p = arg;
	(void)w;
	pthread_mutex_lock(&p->g->mu);
	note_spawn(p);
	if (to == MESH_IS_WARM)
		became_warm(p);
	else if (to == MESH_IS_STOPPING_KILL && from == MESH_IS_WARM)
		hung(p);
	else if (to == MESH_IS_STOPPING_KILL)
		p->killed = 1;
	else if (from == MESH_IS_PROBING && to == MESH_IS_STOPPING_EXIT && p->state == GW_STARTING)
		start_timed_out(p);
	else if (to == MESH_IS_DOWN)
		ended(p, from);
	pthread_mutex_unlock(&p->g->mu);
}

/* ---- The programs' tick: the idle stop, the measured memory, the VRAM ---- */

static void sooner(uint64_t *next, uint64_t t)
{
	if (t && (!*next || t < *next))
		*next = t;
}

/* Under mu, warm: stopped when idle for its TTL by the policy table (as
 * for mesh serve: one worker, no floor, the last one lingers for the idle
 * TTL) but while a keep_alive holds it, when idle after a keep_alive of 0,
 * or when meshd stops; else when to look again.  Busy, it looks again
 * an idle TTL from now (a request's end does not arm the tick, but with a
 * TTL of 0). */
static void idle_check(struct mesh__gw_prog *p, uint64_t now, uint64_t *next)
{
	uint64_t ttl = p->img.m.idle_ttl_ns;
	int idle = !p->inflight && !p->waiting, kept = p->keep_until > now;
	struct mesh_as_config pol = {.min_workers = 0, .max_workers = 1, .target_concurrency = 1,
				     .idle_ttl = (int64_t)ttl, .linger = (int64_t)ttl};
	struct mesh_as_obs o = {.warm = 1,
				.demand = (uint64_t)p->inflight + p->waiting,
				.idle = idle && now > p->last_end ? (int64_t)(now - p->last_end) : 0};
	struct mesh_as_plan plan;
	if (p->g->stopping || (idle && p->keep_unload) ||
	    (!kept && mesh_as_plan(&pol, &o, &plan) == 0 && plan.action == MESH_AS_REAP)) {
		stop(p, p->g->stopping ? "shutdown" : p->keep_unload ? "keep_alive 0" : "idle", !p->g->stopping);
		return;
	}
	if (idle && kept)
		sooner(next, p->keep_until == UINT64_MAX ? 0 : p->keep_until);
	else if (idle)
		sooner(next, p->last_end + ttl > now ? p->last_end + ttl : now + MESH_NS_PER_MS);
	else if (ttl)
		sooner(next, now + ttl);
}

/* 1 when NVML lists one of the pids p used the GPU with. */
static int vram_listed(struct mesh__gw_prog *p)
{
	struct mesh_nvml *nv = p->g->nvml;
	int listed = 0;
	for (unsigned i = 0; !listed && i < mesh_nvml_count(nv); i++) {
		struct mesh_nvml_proc *np = NULL;
		size_t nn = 0;
		if (mesh_nvml_procs(nv, i, &np, &nn) != 0)
			continue;
		for (size_t k = 0; !listed && k < nn; k++)
			for (size_t j = 0; !listed && j < p->ngpu; j++)
				listed = (pid_t)np[k].pid == p->gpu_pids[j];
		free(np);
	}
	return listed;
}

/* Under mu, reaped, its VRAM awaited: cold once NVML lists none of its pids,
 * or after VRAM_GRACE_NS (then named and counted free), or when meshd stops. */
static void vram_check(struct mesh__gw_prog *p, uint64_t now, uint64_t *next)
{
	struct mesh_gw *g = p->g;
	double ms = (double)(now - p->vram_since) / 1e6;
	if (!vram_listed(p)) {
		mesh__gw_log(g, MESH_GW_INFO, "program=%s GPU memory free %.1f ms after its end (NVML lists none of its %zu pids)",
			     p->img.name, ms, p->ngpu);
	} else if (now - p->vram_since >= VRAM_GRACE_NS || g->stopping) {
		mesh__gw_log(g, MESH_GW_WARN, "program=%s NVML still lists a pid of it %.1f ms after its end; counted as free",
			     p->img.name, ms);
	} else {
		sooner(next, now + VRAM_POLL_NS);
		return;
	}
	cold(p);
}

static void gpu_pid_add(struct mesh__gw_prog *p, pid_t pid)
{
	for (size_t i = 0; i < p->ngpu; i++)
		if (p->gpu_pids[i] == pid)
			return;
	if (p->ngpu < GW_GPU_PIDS_MAX)
		p->gpu_pids[p->ngpu++] = pid;
}

/* The GPU memory NVML lists for pids (each pid it lists into *found, at
 * most GW_GPU_PIDS_MAX). */
static uint64_t vram_of(struct mesh_nvml *nv, const pid_t *pids, size_t n, pid_t *found, size_t *nfound)
{
	uint64_t vram = 0;
	*nfound = 0;
	for (unsigned i = 0; n && i < mesh_nvml_count(nv); i++) {
		struct mesh_nvml_proc *np = NULL;
		size_t nn = 0;
		if (mesh_nvml_procs(nv, i, &np, &nn) != 0)
			continue;
		for (size_t k = 0; k < nn; k++)
			for (size_t j = 0; j < n; j++)
				if ((pid_t)np[k].pid == pids[j]) {
					if (np[k].used != MESH_NVML_UNKNOWN)
						vram += np[k].used;
					if (*nfound < GW_GPU_PIDS_MAX)
						found[(*nfound)++] = pids[j];
					break;
				}
		free(np);
	}
	return vram;
}

static double mib(uint64_t bytes)
{
	return (double)bytes / (1024.0 * 1024.0);
}

static void enforce(struct mesh_gw *g);

/* Under mu, p just measured: its "holds" line, once warm, when its peak
 * is new or grew by a quarter since the last (a loading server is told a
 * few times, not every second), then the budget is enforced. */
static void budget_note(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	if (p->state != GW_STARTING && p->peak && p->peak > p->logged_peak + p->logged_peak / 4) {
		uint64_t used = 0;
		for (size_t i = 0; i < g->nprogs; i++)
			if (g->progs[i]->state != GW_COLD)
				used += counted(g->progs[i]);
		p->logged_peak = p->peak;
		mesh__gw_log(g, MESH_GW_INFO,
			     "program=%s holds %.1f MiB (resident %.1f MiB, GPU %.1f MiB; declared %.1f MiB): "
			     "%.1f of %.1f MiB counted against the budget",
			     p->img.name, mib(p->rss + p->vram), mib(p->rss), mib(p->vram), mib(p->img.m.memory), mib(used),
			     mib(g->c.memory_budget));
	}
	enforce(g);
}

/* Measures p now (mu not held: /proc and NVML take a while): the resident
 * bytes of its processes (one read of /proc: its PID namespace's, or its
 * group's and session's) and, with NVML, the GPU memory NVML lists for
 * their pids; under a budget, what it holds is logged and the budget
 * enforced.  A measure that p's end (or a new start) overtook is dropped;
 * without a process nothing changes. */
static void measure(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	pid_t pids[TREE_PIDS_MAX], found[GW_GPU_PIDS_MAX];
	size_t n = 0, nfound = 0;
	uint64_t vram = 0, rss = 0;
	pthread_mutex_lock(&g->mu);
	uint64_t gen = p->gen;
	pthread_mutex_unlock(&g->mu);
	if (mesh_instance_pids(p->inst, pids, TREE_PIDS_MAX, &n, &rss) != 0)
		return; /* no process (any more), or /proc unreadable: what was measured stays */
	if (g->nvml)
		vram = vram_of(g->nvml, pids, n < TREE_PIDS_MAX ? n : TREE_PIDS_MAX, found, &nfound);
	pthread_mutex_lock(&g->mu);
	if (p->gen == gen && p->state != GW_COLD && !p->vram_since) {
		p->rss = rss;
		p->vram = vram;
		p->measured = 1;
		if (rss + vram > p->peak)
			p->peak = rss + vram;
		for (size_t i = 0; i < nfound; i++)
			gpu_pid_add(p, found[i]);
		if (g->c.memory_budget)
			budget_note(p);
	}
	pthread_mutex_unlock(&g->mu);
}

/* Under mu, p retired by a reload and warm: stopped once nothing is in
 * flight or waiting, or drain_timeout after the reload (what is left is
 * cut); else when to look again. */
static void retired_check(struct mesh__gw_prog *p, uint64_t now, uint64_t *next)
{
	uint64_t until = p->retired_t0 + p->g->c.drain_timeout_ns;
	if ((!p->inflight && !p->waiting) || now >= until || p->g->stopping) {
		char why[80];
		snprintf(why, sizeof why, "%s by a reload", p->retired_why);
		stop(p, why, !p->g->stopping);
		return;
	}
	sooner(next, until);
}

/* Under mu: the retired programs gone cold leave the table for g->retired. */
static void retired_drop(struct mesh_gw *g)
{
	size_t k = 0;
	for (size_t i = 0; i < g->nprogs; i++) {
		struct mesh__gw_prog *p = g->progs[i];
		if (p->retired && p->state == GW_COLD && !p->waiting && !p->inflight) {
			p->rnext = g->retired;
			g->retired = p;
		} else {
			g->progs[k++] = p;
		}
	}
	g->nprogs = k;
}

/* Under mu, q (cold) about to be freed, in list (rnext) with the others
 * that go: a definition that waits for q's process to be gone waits for
 * what q waited for instead. */
static void prev_skip(struct mesh_gw *g, struct mesh__gw_prog *list, const struct mesh__gw_prog *q)
{
	for (size_t i = 0; i < g->nprogs; i++)
		if (g->progs[i]->prev == q)
			g->progs[i]->prev = q->prev;
	for (int k = 0; k < 2; k++)
		for (struct mesh__gw_prog *x = k ? list : g->retired; x; x = x->rnext)
			if (x->prev == q)
				x->prev = q->prev;
}

/* Under mu: the retired programs that nothing holds any more leave
 * g->retired (none can be held again: no request finds a retired one);
 * the caller frees them (rnext), without mu (the host may be telling one
 * of them a change, which takes mu). */
static struct mesh__gw_prog *retired_unheld(struct mesh_gw *g)
{
	struct mesh__gw_prog *gone = NULL;
	for (struct mesh__gw_prog **pp = &g->retired; *pp;) {
		struct mesh__gw_prog *x = *pp;
		if (!__atomic_load_n(&x->holds, __ATOMIC_ACQUIRE)) {
			*pp = x->rnext;
			x->rnext = gone;
			gone = x;
		} else {
			pp = &x->rnext;
		}
	}
	for (struct mesh__gw_prog *q = gone; q; q = q->rnext)
		prev_skip(g, gone, q);
	return gone;
}

uint64_t mesh__gw_progs_tick(struct mesh_gw *g)
{
	uint64_t now = mesh_mono_ns(), next = 0;
	for (size_t i = 0;; i++) {
		pthread_mutex_lock(&g->mu);
		if (i >= g->nprogs) {
			pthread_mutex_unlock(&g->mu);
			break;
		}
		struct mesh__gw_prog *p = g->progs[i];
		/* stopped: its last measure, then the host stops it */
		int last = p->exit_due;
		uint64_t gen = p->gen;
		p->exit_due = 0;
		int due = last || (p->pid && p->state != GW_COLD && !p->vram_since && now >= p->next_measure);
		if (due && !last)
			p->next_measure = now + MEASURE_EVERY_NS;
		pthread_mutex_unlock(&g->mu);
		if (due)
			measure(p); /* a loading server grows: others' starts count it */
		if (last) {
			pthread_mutex_lock(&g->mu);
			if (p->gen == gen && p->state == GW_STOPPING && !p->vram_since)
				mesh_instance_exit(p->inst);
			pthread_mutex_unlock(&g->mu);
		}
	}
	pthread_mutex_lock(&g->mu);
	retired_drop(g);
	struct mesh__gw_prog *gone = retired_unheld(g);
	for (size_t i = 0; i < g->nprogs; i++) {
		struct mesh__gw_prog *p = g->progs[i];
		if (p->state == GW_WARM && p->retired)
			retired_check(p, now, &next);
		else if (p->state == GW_WARM)
			idle_check(p, now, &next);
		else if (p->state == GW_STOPPING && p->vram_since)
			vram_check(p, now, &next);
		if (p->state != GW_COLD && p->pid && !p->vram_since)
			sooner(&next, p->next_measure);
	}
	if (g->retired)
		sooner(&next, now + MEASURE_EVERY_NS); /* held yet: a look again */
	pthread_mutex_unlock(&g->mu);
	while (gone) {
		struct mesh__gw_prog *p = gone;
		gone = p->rnext;
		mesh__gw_log(g, MESH_GW_INFO, "program=%s its definition of before a reload is freed", p->img.name);
		prog_free(p);
	}
	return next;
}

void mesh__gw_stop_all(struct mesh_gw *g, uint64_t deadline)
{
	pthread_mutex_lock(&g->mu);
	g->stopping = 1;
	for (size_t i = 0; i < g->nprogs; i++) {
		struct mesh__gw_prog *p = g->progs[i];
		if (p->state == GW_STARTING) {
			char msg[160];
			snprintf(msg, sizeof msg, "program '%s' was stopped: meshd is shutting down", p->img.name);
			fail_start(p, 503, msg, msg);
		}
		stop(p, "shutdown", 0);
		if (p->exit_due) {
			/* stopped for another reason, its last measure not taken yet */
			p->exit_due = 0;
			mesh_instance_exit(p->inst);
		}
	}
	mesh__gw_look(g);
	arm(g, mesh_mono_ns()); /* a VRAM wait ends now */
	while (g->nlive) {
		struct timespec ts;
		abs_deadline(&ts, deadline);
		if (pthread_cond_timedwait(&g->cv_all, &g->mu, &ts) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&g->mu);
}

void mesh__gw_look(struct mesh_gw *g)
{
	if (g->nwaiting && g->look)
		g->look(g);
}

static const char *group_of(const struct mesh__gw_prog *p)
{
	return p->img.m.group ? p->img.m.group : p->img.m.name;
}

/* Under mu: what a start of p is counted at: max(`memory`, what its last
 * run was seen to hold). */
static uint64_t need_of(const struct mesh__gw_prog *p)
{
	return p->last_peak > p->img.m.memory ? p->last_peak : p->img.m.memory;
}

/* Under mu: what p counts for in the memory budget while it has a process:
 * max(its manifest's `memory`, its measured rss + vram); until it is warm
 * and measured, at least what its start was counted at (max(`memory`, its
 * last run's peak): a loading server is not counted at its first bytes). */
static uint64_t counted(const struct mesh__gw_prog *p)
{
	uint64_t m = p->measured ? p->rss + p->vram : 0, need = need_of(p);
	if (p->state == GW_STARTING || !p->measured)
		return m > need ? m : need;
	return m > p->img.m.memory ? m : p->img.m.memory;
}

/* Under mu: the memory the running programs (starting, warm, stopping) are
 * counted at, but p's; *freeing: of it, the stopping ones'. */
static uint64_t used_by_others(struct mesh_gw *g, const struct mesh__gw_prog *p, uint64_t *freeing)
{
	uint64_t used = 0;
	*freeing = 0;
	for (size_t i = 0; i < g->nprogs; i++) {
		const struct mesh__gw_prog *q = g->progs[i];
		if (q != p && q->state != GW_COLD) {
			used += counted(q);
			if (q->state == GW_STOPPING)
				*freeing += counted(q);
		}
	}
	return used;
}

/* Under mu: p is warm with nothing in flight or waiting. */
static int idle(const struct mesh__gw_prog *p)
{
	return p->state == GW_WARM && !p->inflight && !p->waits.head;
}

/* ---- The one FIFO of swaps ----
 * A cold program whose start does not fit in the budget takes a place in
 * the FIFO (swap_seq, from the same count as the requests' seq).  Only its
 * head makes room: the least recently used idle programs of other groups
 * are stopped; when they are not enough, busy ones are held for it (held_for):
 * a request for a held program that came after the swap waits behind it,
 * those before it (and those in flight) end first, then it is stopped.  A
 * start behind the head goes first only when it fits beside the running
 * programs and every swap ahead of it. */

/* Under mu: the head of the FIFO (its oldest swap), or NULL. */
static struct mesh__gw_prog *swap_head(struct mesh_gw *g)
{
	struct mesh__gw_prog *h = NULL;
	for (size_t i = 0; i < g->nprogs; i++)
		if (g->progs[i]->swap_seq && (!h || g->progs[i]->swap_seq < h->swap_seq))
			h = g->progs[i];
	return h;
}

/* Under mu: what the swaps ahead of p are counted at (every swap's when p
 * has none). */
static uint64_t ahead_of(const struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	uint64_t sum = 0;
	for (size_t i = 0; i < g->nprogs; i++) {
		const struct mesh__gw_prog *q = g->progs[i];
		if (q != p && q->swap_seq && (!p->swap_seq || q->swap_seq < p->swap_seq))
			sum += need_of(q);
	}
	return sum;
}

/* Under mu: p's swap leaves the FIFO (it starts, or nothing waits for it
 * any more); the programs held for it are let go, and every waiter looks
 * again (the next swap's turn). */
static void swap_leave(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	uint64_t seq = p->swap_seq;
	if (!seq)
		return;
	p->swap_seq = 0;
	for (size_t i = 0; i < g->nprogs; i++)
		if (g->progs[i]->held_for == seq)
			g->progs[i]->held_for = 0;
	mesh__gw_look(g);
}

/* Under mu: q (warm, held for the swap seq) may be stopped for it: nothing
 * in flight, no request waiting that came before the swap. */
static int done_for(const struct mesh__gw_prog *q, uint64_t seq)
{
	return !q->inflight && (!q->waits.head || q->waits.head->seq > seq);
}

/* Under mu, the FIFO's head p: makes room for it.  The least recently used
 * idle programs of other groups first, then busy ones, until what is left
 * and p's need fit: each stopped now when done_for, else held for p (its
 * new requests wait); a program held no more is let go. */
static void make_room(struct mesh__gw_prog *p, uint64_t used, uint64_t freeing, uint64_t need)
{
	struct mesh_gw *g = p->g;
	uint64_t budget = g->c.memory_budget;
	int let_go = 0;
	while (used - freeing + need > budget) {
		struct mesh__gw_prog *v = NULL;
		for (size_t i = 0; i < g->nprogs; i++) {
			struct mesh__gw_prog *q = g->progs[i];
			if (q == p || q->state != GW_WARM || q->pick || !counted(q) ||
			    !strcmp(group_of(q), group_of(p)))
				continue;
			if (!v || idle(q) > idle(v) || (idle(q) == idle(v) && q->last_end < v->last_end))
				v = q;
		}
		if (!v)
			break;
		v->pick = 1;
		freeing += counted(v);
	}
	for (size_t i = 0; i < g->nprogs; i++) {
		struct mesh__gw_prog *q = g->progs[i];
		if (!q->pick) {
			if (q->held_for == p->swap_seq) {
				q->held_for = 0;
				let_go = 1;
			}
			continue;
		}
		q->pick = 0;
		if (done_for(q, p->swap_seq)) {
			char why[80];
			q->evict_swap++;
			mesh__gw_log(g, MESH_GW_INFO, "program=%s evicting %s: needs %llu bytes, %llu of %llu in use",
				     p->img.m.name, q->img.m.name, (unsigned long long)need, (unsigned long long)used,
				     (unsigned long long)budget);
			snprintf(why, sizeof why, "evicted for %.64s", p->img.m.name);
			stop(q, why, 1);
		} else if (q->held_for != p->swap_seq) {
			q->held_for = p->swap_seq;
			mesh__gw_log(g, MESH_GW_INFO,
				     "program=%s waits for %s to end %u requests in flight, then evicts it (new requests for "
				     "%s wait behind %s)",
				     p->img.m.name, q->img.m.name, q->inflight, q->img.m.name, p->img.m.name);
		}
	}
	if (let_go)
		mesh__gw_look(g);
}

/* Under mu, p cold, a budget set: 0 when it may start now (it fits beside
 * the running programs and the swaps ahead of it); 1 when it waits (in the
 * FIFO of swaps; its head makes room); MESH_E_RANGE when it can never fit.
 * A running program counts for counted(); one stopping counts until
 * the host has reaped it and NVML lists none of its pids. */
static int room_for(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	uint64_t freeing, budget = g->c.memory_budget, need = need_of(p);
	if (need > budget)
		return MESH_E_RANGE;
	uint64_t used = used_by_others(g, p, &freeing);
	if (used + need + ahead_of(p) <= budget) {
		swap_leave(p);
		return 0;
	}
	if (!p->swap_seq) {
		p->swap_seq = ++g->seq;
		mesh__gw_log(g, MESH_GW_INFO, "program=%s waits for room: needs %llu bytes, %llu of %llu in use%s",
			     p->img.m.name, (unsigned long long)need, (unsigned long long)used, (unsigned long long)budget,
			     swap_head(g) == p ? "" : " (behind other swaps)");
	}
	if (swap_head(g) == p)
		make_room(p, used, freeing, need);
	return 1;
}

/* Under mu, p cold and waiting for room past its wait's bound: 1 when the
 * room is on its way anyway (programs stopping for it free enough: their
 * reap, or their GPU memory's release, wakes it). */
static int room_coming(struct mesh__gw_prog *p)
{
	uint64_t freeing, used = used_by_others(p->g, p, &freeing);
	return used - freeing + need_of(p) + ahead_of(p) <= p->g->c.memory_budget;
}

/* Under mu: why p's start found no room (malloc'd, one line, for the
 * client and meshd's log): the budget, what the programs with a process
 * hold, and which (busy: in flight or waiting; idle ones are of p's group,
 * never evicted for it), and the swaps ahead of it. */
static char *no_room(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	char busy[512] = "", idle_ones[256] = "", ahead[96] = "";
	size_t nb = 0, ni = 0;
	uint64_t freeing, used = used_by_others(g, p, &freeing), before = ahead_of(p);
	for (size_t i = 0; i < g->nprogs; i++) {
		const struct mesh__gw_prog *q = g->progs[i];
		if (q == p || q->state == GW_COLD)
			continue;
		if (idle(q) && ni < sizeof idle_ones)
			ni += (size_t)snprintf(idle_ones + ni, sizeof idle_ones - ni, "%s%s", ni ? ", " : "", q->img.m.name);
		else if (!idle(q) && nb < sizeof busy)
			nb += (size_t)snprintf(busy + nb, sizeof busy - nb, "%s%s%s", nb ? ", " : "", q->img.m.name,
					       q->state == GW_STOPPING ? " (stopping)" : "");
	}
	if (before)
		snprintf(ahead, sizeof ahead, "; the starts waiting ahead of it need %.1f MiB", mib(before));
	return mesh_strf("memory budget %.1f MiB: %.1f MiB held by busy programs %s%s%s%s; program '%s' needs %.1f MiB "
			 "and no room came within its start_timeout (%.1f s): send it again later",
			 mib(g->c.memory_budget), mib(used), nb ? busy : "(none)", ni ? " and idle programs of its group " : "",
			 ni ? idle_ones : "", ahead, p->img.m.name, mib(need_of(p)), (double)p->img.m.start_timeout_ns / 1e9);
}

/* Under mu: the budget after a measure or a request's end.  While the
 * running programs hold more than it (a program without `memory` counts 0
 * until it is measured), the least recently used idle ones are stopped
 * (logged: how much is counted, whose, and which goes); with none idle it
 * is said once (starts wait for room meanwhile) and the next that is idle
 * at a measure or at its last request's end goes. */
static void enforce(struct mesh_gw *g)
{
	uint64_t freeing, budget = g->c.memory_budget, used = used_by_others(g, NULL, &freeing);
	if (!budget || used - freeing <= budget) {
		g->over_said = 0;
		return;
	}
	while (used - freeing > budget) {
		struct mesh__gw_prog *v = NULL;
		char whose[512] = "";
		size_t off = 0;
		for (size_t i = 0; i < g->nprogs; i++) {
			struct mesh__gw_prog *q = g->progs[i];
			if (q->state != GW_COLD && q->state != GW_STOPPING && off < sizeof whose)
				off += (size_t)snprintf(whose + off, sizeof whose - off, "%s%s %.1f MiB", off ? ", " : "",
							q->img.m.name, mib(counted(q)));
			if (idle(q) && counted(q) && (!v || q->last_end < v->last_end))
				v = q;
		}
		if (!v) {
			if (!g->over_said)
				mesh__gw_log(g, MESH_GW_WARN,
					     "gateway: over the memory budget: %.1f of %.1f MiB counted (%s); none idle: "
					     "starts wait for room, and the first program idle is stopped",
					     mib(used - freeing), mib(budget), whose);
			g->over_said = 1;
			return;
		}
		mesh__gw_log(g, MESH_GW_WARN, "gateway: over the memory budget: %.1f of %.1f MiB counted (%s); evicting %s (idle)",
			     mib(used - freeing), mib(budget), whose, v->img.m.name);
		v->evict_budget++;
		freeing += counted(v);
		stop(v, "over the memory budget", 1);
	}
	g->over_said = 0;
}

/* Under mu: w's request joins p's queue of waits, if not in it yet.  0, or
 * 503 (*why, *retry_after set): the queue is full. */
static int enqueue(struct mesh__gw_wait *w, char **why, unsigned *retry_after)
{
	struct mesh__gw_prog *p = w->p;
	struct mesh_gw *g = p->g;
	if (w->queued)
		return 0;
	if (p->waiting >= g->c.max_queue) {
		*retry_after = 5;
		mesh_errf(why, 0, "the queue of program '%s' is full (%u waiting)", p->img.m.name, p->waiting);
		return 503;
	}
	p->waiting++;
	g->nwaiting++;
	w->queued = 1;
	mesh_list_push(&p->waits, w, link);
	return 0;
}

/* Under mu, the start w's request waited for failed: its answer,
 * p->fail_code, and *why the report.  The report and the program's last
 * lines go to meshd's log once a failed start, with the first request told
 * of it; the others are told that request's id. */
static int start_failed(struct mesh__gw_wait *w, char **why)
{
	struct mesh__gw_prog *p = w->p;
	if (p->fail_told != p->fail_gen) {
		p->fail_told = p->fail_gen;
		snprintf(p->fail_rid, sizeof p->fail_rid, "%s", w->rid ? w->rid : "-");
		*why = mesh_strf("%s\n%s", p->fail_short, p->fail_msg);
	} else {
		*why = mesh_strf("%s\n(its output is in the log line of request=%s)", p->fail_short, p->fail_rid);
	}
	return p->fail_code;
}

/* Under mu, p cold: 0 when it may be started for w's request, else the
 * answer (*why set): 503 a reload retired it while the request waited, 502
 * it cannot run (p->unfit). */
static int never_starts(struct mesh__gw_wait *w, char **why, unsigned *retry_after)
{
	struct mesh__gw_prog *p = w->p;
	if (p->retired) {
		*retry_after = 1;
		*why = mesh_strf("program '%s' was %s by a reload while this request waited: send it again",
				 p->img.m.name, p->retired_why);
		return 503;
	}
	if (p->unfit) {
		*why = strdup(p->unfit);
		return 502;
	}
	return 0;
}

/* Under mu, p cold, a budget set: room for w's request to start it (the
 * rules of room_for).  It waits for room at most its start_timeout (busy
 * programs held for it may end their requests, idle ones be stopped),
 * longer only while programs stopping free enough; then 503: never a
 * start over the budget.  0 it may start, 1 it waits (w->until: when its
 * wait ends, 0: a change wakes it), or an HTTP status (*why set). */
static int wait_room(struct mesh__gw_wait *w, char **why, unsigned *retry_after)
{
	struct mesh__gw_prog *p = w->p;
	struct mesh_gw *g = p->g;
	int room = room_for(p);
	if (room < 0) {
		mesh_errf(why, 0,
			  "program '%s' needs %llu bytes of memory (declared %llu, its last run held %llu), "
			  "more than the budget (%llu)",
			  p->img.m.name, (unsigned long long)need_of(p), (unsigned long long)p->img.m.memory,
			  (unsigned long long)p->last_peak, (unsigned long long)g->c.memory_budget);
		return 502;
	}
	if (!room)
		return 0;
	uint64_t now = mesh_mono_ns(), end;
	if (!w->room_t0)
		w->room_t0 = now;
	end = w->room_t0 + p->img.m.start_timeout_ns;
	w->cold = 1;
	if (now < end) {
		w->until = end;
		return 1; /* a program going cold or idle wakes it sooner */
	}
	if (room_coming(p))
		return 1; /* their stop's end wakes it */
	*retry_after = 5;
	*why = no_room(p);
	mesh__gw_log(g, MESH_GW_WARN, "program=%s request=%s answered 503: %s", p->img.m.name, w->rid ? w->rid : "-",
		     *why);
	return 503;
}

/* Under mu, p cold and free to start: w's request starts it, exactly one
 * start however many come (its acquire asks the host once mu is let go). */
static void start_for(struct mesh__gw_wait *w)
{
	struct mesh__gw_prog *p = w->p;
	p->gen++;
	p->state = GW_STARTING;
	p->pid = 0;
	p->keep_until = 0; /* a keep_alive held the last process (a crash ends none in stop) */
	p->keep_unload = 0;
	p->g->nlive++;
	w->start = 1;
	w->gen = p->gen;
}

/* Under mu: the place of w's request, or why it waits (the rules of
 * mesh__gw_acquire).  0 placed, 1 waits, or an HTTP status (*why set). */
static int place(struct mesh__gw_wait *w, char **why, unsigned *retry_after)
{
	struct mesh__gw_prog *p = w->p;
	struct mesh_gw *g = p->g;
	int rc;
	w->until = 0;
	if (!w->seq)
		w->seq = ++g->seq;
	for (;;) {
		if (w->first.fd >= 0) {
			/* Its start sent it, and took its place (send_first). */
			w->port = w->first.port;
			w->cold = 1;
			return 0;
		}
		if (g->draining) {
			*retry_after = 5;
			*why = strdup("meshd is shutting down");
			return 503;
		}
		/* Held for a swap, it serves only what came before the swap. */
		if (p->state == GW_WARM && !(p->held_for && w->seq > p->held_for) &&
		    (!p->img.m.max_concurrency || p->inflight < p->img.m.max_concurrency)) {
			p->inflight++;
			p->requests++;
			w->port = p->port;
			return 0;
		}
		if (p->state != GW_WARM)
			w->cold = 1;
		if ((rc = enqueue(w, why, retry_after)))
			return rc;
		if (w->gen && p->fail_gen == w->gen)
			return start_failed(w, why);
		if (p->state == GW_STARTING && !w->gen)
			w->gen = p->gen;
		if (w->first.line && !p->first && p->state == GW_STARTING && p->gen == w->gen)
			p->first = &w->first;
		if (p->state == GW_COLD && (rc = never_starts(w, why, retry_after)))
			return rc;
		if (p->state != GW_COLD)
			return 1; /* starting, stopping, held, or warm without a place: its change wakes it */
		for (struct mesh__gw_prog *q = p->prev; q; q = q->prev)
			if (q->state != GW_COLD) {
				w->cold = 1;
				return 1; /* the definition it replaced ends first: its cold() wakes it */
			}
		p->prev = NULL;
		if (mesh_mono_ns() < p->backoff_until) {
			w->until = p->backoff_until;
			return 1;
		}
		if (g->c.memory_budget && (rc = wait_room(w, why, retry_after)))
			return rc;
		start_for(w);
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
		mesh_list_remove(&p->waits, w, link);
		p->waiting--;
		g->nwaiting--;
		if (!p->waiting)
			swap_leave(p); /* nobody waits for its start any more */
		if (!p->waiting && !p->inflight) {
			arm(g, mesh_mono_ns()); /* idle from now */
			mesh__gw_look(g);	/* idle now: a start waiting for room may evict it */
		} else if (p->held_for && !p->inflight && (!p->waits.head || p->waits.head->seq > p->held_for)) {
			mesh__gw_look(g); /* held, done with what came before: its swap may stop it */
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
	if (w->start) {
		w->start = 0;
		start(w->p);
	}
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

void mesh__gw_release(struct mesh__gw_prog *p, int64_t keep)
{
	uint64_t now = mesh_mono_ns();
	pthread_mutex_lock(&p->g->mu);
	p->inflight--;
	if (keep != MESH__GW_KEEP_ABSENT) {
		/* The last keep_alive said decides 0 and forever; a duration
		 * never shortens a longer hold. */
		p->keep_unload = keep == 0;
		if (keep == 0)
			p->keep_until = 0;
		else if (keep == MESH__GW_KEEP_FOREVER)
			p->keep_until = UINT64_MAX;
		else if (now + (uint64_t)keep > p->keep_until)
			p->keep_until = now + (uint64_t)keep;
	}
	if (!p->inflight) {
		p->last_end = now;
		/* The tick looks again an idle TTL after it saw it busy
		 * (idle_check): no wake-up a request, but for a TTL of 0,
		 * a retired program and a keep_alive (its hold's end, or its
		 * unload). */
		if (!p->img.m.idle_ttl_ns || p->retired || keep != MESH__GW_KEEP_ABSENT || p->keep_unload)
			arm(p->g, p->last_end);
		enforce(p->g); /* over the budget, an idle program goes */
	}
	mesh__gw_look(p->g); /* a place is free (or, idle, room for a start) */
	pthread_mutex_unlock(&p->g->mu);
}

const char *mesh_gw_code_name(enum mesh_gw_code c)
{
	static const char *const n[MESH_GW_CODE__N] = {"1xx", "2xx", "3xx", "4xx", "5xx", "499"};
	return (unsigned)c < MESH_GW_CODE__N ? n[c] : "5xx";
}

/* The class of an HTTP status (0 or one out of range: 5xx, meshd's 502). */
static enum mesh_gw_code code_of(int status)
{
	if (status == 499)
		return MESH_GW_499;
	if (status < 100 || status > 599)
		return MESH_GW_5XX;
	return (enum mesh_gw_code)(MESH_GW_1XX + status / 100 - 1);
}

/* From a warm relay's time (the lowest bound) to a generation's or a
 * model server's start (seconds to minutes).  The `le` texts as Prometheus clients print them. */
static const struct mesh_hist_bound gw_bounds[] = {
	{100000, "0.0001"},	  {250000, "0.00025"},	   {500000, "0.0005"},	    {1000000, "0.001"},
	{2500000, "0.0025"},	  {5000000, "0.005"},	   {10000000, "0.01"},	    {25000000, "0.025"},
	{50000000, "0.05"},	  {100000000, "0.1"},	   {250000000, "0.25"},	    {500000000, "0.5"},
	{1000000000, "1"},	  {2500000000ull, "2.5"},  {5000000000ull, "5"},    {10000000000ull, "10"},
	{30000000000ull, "30"},	  {60000000000ull, "60"},  {300000000000ull, "300"},
};
_Static_assert(sizeof gw_bounds / sizeof gw_bounds[0] < MESH_HIST_BUCKETS, "gateway buckets fit");
const struct mesh_hist_bounds mesh_gw_seconds_bounds = {gw_bounds, sizeof gw_bounds / sizeof gw_bounds[0]};

void mesh__gw_count(struct mesh__gw_prog *p, const char *model, int status, uint64_t t0, uint64_t t_first, uint64_t now,
		    uint64_t queued_ns, int cut)
{
	const struct mesh_hist_bounds *b = &mesh_gw_seconds_bounds;
	pthread_mutex_lock(&p->g->mu);
	/* An alias counts for the model it stands for (its first: alias_of). */
	for (size_t k = 0; p->mcounts && p->img.m.nmodels && k < mesh__gw_nnames(p); k++) {
		if (strcmp(mesh__gw_name(p, k), model))
			continue;
		struct mesh_gw_model_counts *c = &p->mcounts[k < p->img.m.nmodels ? k : 0];
		c->requests[code_of(status)]++;
		mesh_hist_observe(&c->latency, b, now > t0 ? now - t0 : 0);
		if (t_first)
			mesh_hist_observe(&c->ttfb, b, t_first > t0 ? t_first - t0 : 0);
		break;
	}
	if (queued_ns)
		mesh_hist_observe(&p->queue, b, queued_ns);
	p->cuts += cut != 0;
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

/* Under mu: closes the pool (the process is stopping or gone: an idle
 * connection must not hold up a graceful stop). */
static void pool_drop(struct mesh__gw_prog *p)
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

uint64_t mesh_gw_memory_budget(const struct mesh_gw *g)
{
	return g->c.memory_budget;
}

void mesh_gw_stats_free(struct mesh_gw_prog_stats *st, size_t n)
{
	for (size_t i = 0; st && i < n; i++) {
		for (size_t k = 0; k < st[i].nmodels; k++)
			free(st[i].models[k].model);
		free(st[i].models);
	}
	free(st);
}

int mesh_gw_stats(struct mesh_gw *g, struct mesh_gw_prog_stats **out, size_t *n)
{
	size_t m = 0;
	int rc = 0;
	*out = NULL;
	*n = 0;
	pthread_mutex_lock(&g->mu);
	struct mesh_gw_prog_stats *st = calloc(g->nprogs ? g->nprogs : 1, sizeof *st);
	for (size_t i = 0; st && i < g->nprogs; i++) {
		const struct mesh__gw_prog *p = g->progs[i];
		if (p->retired)
			continue; /* its successor's, or gone: once a name */
		struct mesh_gw_prog_stats *o = &st[m++];
		snprintf(o->name, sizeof o->name, "%s", p->img.m.name);
		snprintf(o->state, sizeof o->state, "%s", mesh__gw_state_name(p));
		o->memory = p->img.m.memory;
		o->counted = p->state == GW_COLD ? 0 : counted(p);
		o->inflight = p->inflight;
		o->queued = p->waiting;
		o->models = p->img.m.nmodels ? calloc(p->img.m.nmodels, sizeof *o->models) : NULL;
		for (size_t k = 0; o->models && k < p->img.m.nmodels; k++) {
			struct mesh_gw_model_stats *ms = &o->models[o->nmodels];
			if (!(ms->model = strdup(p->img.m.models[k])))
				break;
			if (p->mcounts)
				ms->c = p->mcounts[k];
			o->nmodels++;
		}
		if (o->nmodels < p->img.m.nmodels)
			rc = -ENOMEM;
		o->cold_starts = p->spawns;
		o->start_failures = p->start_failures;
		o->crashes = p->crashes;
		o->evict_idle = p->reaps;
		o->evict_budget = p->evict_budget;
		o->evict_swap = p->evict_swap;
		o->hung_restarts = p->hung;
		o->cuts = p->cuts;
		o->timeouts_request = p->to_request;
		o->timeouts_response = p->to_response;
		o->timeouts_idle = p->to_idle;
		o->pid = p->pid;
		o->port = p->state == GW_COLD ? 0 : p->port;
		if (p->fail_gen)
			snprintf(o->last_error, sizeof o->last_error, "%.*s", (int)strcspn(p->fail_msg, "\n"),
				 p->fail_msg);
		o->warm = p->warm;
		o->queue = p->queue;
	}
	pthread_mutex_unlock(&g->mu);
	if (!st)
		return -ENOMEM;
	if (rc) {
		mesh_gw_stats_free(st, m);
		return rc;
	}
	*out = st;
	*n = m;
	return 0;
}

json_t *mesh_gw_ps_json(struct mesh_gw *g)
{
	json_t *a = json_array();
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; a && i < g->nprogs; i++) {
		const struct mesh__gw_prog *p = g->progs[i];
		if (p->retired)
			continue;
		json_t *models = json_array(), *o;
		for (size_t k = 0; models && k < p->img.m.nmodels; k++)
			json_array_append_new(models, json_string(p->img.m.models[k]));
		int has = p->state != GW_COLD && p->pid > 0;
		o = json_pack("{s:s, s:s, s:o, s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:o, s:{s:I, s:I, s:I, s:I, s:I}}", "name",
			      p->img.m.name, "state", mesh__gw_state_name(p), "pid", has ? json_integer(p->pid) : json_null(),
			      "port", has ? json_integer(p->port) : json_null(), "models", models ? models : json_array(),
			      "in_flight", (json_int_t)p->inflight, "queued", (json_int_t)p->waiting, "cold_starts",
			      (json_int_t)p->spawns, "crashes", (json_int_t)p->crashes, "hung_restarts", (json_int_t)p->hung,
			      "last_error", p->fail_gen ? json_string(p->fail_msg) : json_null(), "memory", "declared",
			      (json_int_t)p->img.m.memory, "rss", (json_int_t)p->rss, "vram", (json_int_t)p->vram, "counted",
			      (json_int_t)(p->state == GW_COLD ? 0 : counted(p)), "last_peak",
			      (json_int_t)p->last_peak);
		if (!o || json_array_append_new(a, o)) {
			json_decref(a);
			a = NULL;
		}
	}
	pthread_mutex_unlock(&g->mu);
	return a;
}


/* ---- mesh start / mesh stop of an HTTP program ---- */

/* How often a blocking start or stop looks at the program. */
#define OP_POLL_NS 5000000ull

/* The program of that name in the catalog (not one a reload retired), or
 * NULL.  Under mu. */
static struct mesh__gw_prog *current(struct mesh_gw *g, const char *name)
{
	for (size_t i = 0; i < g->nprogs; i++)
		if (!g->progs[i]->retired && !strcmp(g->progs[i]->img.m.name, name))
			return g->progs[i];
	return NULL;
}

/* The program of that name in the catalog, held, or NULL. */
static struct mesh__gw_prog *by_name(struct mesh_gw *g, const char *name)
{
	pthread_mutex_lock(&g->mu);
	struct mesh__gw_prog *p = current(g, name);
	if (p)
		mesh__gw_hold(p);
	pthread_mutex_unlock(&g->mu);
	return p;
}

int mesh_gw_has_program(struct mesh_gw *g, const char *name)
{
	pthread_mutex_lock(&g->mu);
	int has = current(g, name) != NULL;
	pthread_mutex_unlock(&g->mu);
	return has;
}

/* mesh_gw_program_start's wait, p held. */
static int program_start(struct mesh_gw *g, struct mesh__gw_prog *p, const char *name, pid_t *pid, char **err)
{
	/* A request that sends nothing (first.line NULL): its place, as any
	 * request's, starts the program or waits for its start. */
	struct mesh__gw_wait w = {.p = p, .first = {.fd = -1}, .rid = "mesh-start"};
	uint64_t deadline = mesh_mono_ns() + p->img.m.start_timeout_ns + 10000000000ull;
	for (;;) {
		char *why = NULL;
		unsigned retry = 0;
		int code = mesh__gw_acquire(&w, &why, &retry);
		if (code == 0) {
			pthread_mutex_lock(&g->mu);
			*pid = p->pid;
			pthread_mutex_unlock(&g->mu);
			mesh__gw_release(p, MESH__GW_KEEP_ABSENT);
			return 0;
		}
		if (code > 1) {
			/* The operator's answer: the whole report (the program's
			 * last lines too), logged as a request's would be. */
			const char *nl = strchr(why, '\n');
			if (nl)
				mesh__gw_log(g, MESH_GW_WARN, "program=%s request=mesh-start answered %d: %s", name, code, nl + 1);
			int rc = mesh_errf(err, code == 504 ? MESH_E_TIMEOUT : code == 502 ? MESH_E_CRASHED : MESH_E_STATE, "%s",
					   nl ? nl + 1 : why);
			free(why);
			return rc;
		}
		uint64_t now = mesh_mono_ns();
		if (now >= deadline) {
			mesh__gw_acquire_cancel(&w);
			return mesh_errf(err, MESH_E_TIMEOUT, "program '%s' was not warm within %.1f s", name,
					 (double)(p->img.m.start_timeout_ns + 10000000000ull) / 1e9);
		}
		mesh_sleep_ns(w.until > now && w.until - now < OP_POLL_NS ? w.until - now : OP_POLL_NS);
	}
}

/* mesh_gw_program_stop's wait, p held. */
static int program_stop(struct mesh_gw *g, struct mesh__gw_prog *p, const char *name, char **err)
{
	uint64_t t0 = mesh_mono_ns(), drain_until = t0 + g->c.drain_timeout_ns,
		 deadline = drain_until + p->img.m.stop_grace_ns + VRAM_GRACE_NS + 10000000000ull;
	int rc = 0;
	pthread_mutex_lock(&g->mu);
	for (;;) {
		uint64_t now = mesh_mono_ns();
		if (p->state == GW_COLD || g->stopping)
			break; /* cold, or meshd's drain stops it */
		/* Its requests in flight end first (the stop cuts those left at
		 * drain_timeout); a start under way is stopped at once. */
		if ((p->state == GW_WARM && (!p->inflight || now >= drain_until)) || p->state == GW_STARTING)
			stop(p, "mesh stop", 1);
		if (now >= deadline) {
			rc = mesh_errf(err, MESH_E_TIMEOUT, "program '%s' is still %s after %.1f s", name,
				       mesh__gw_state_name(p), (double)(now - t0) / 1e9);
			break;
		}
		pthread_mutex_unlock(&g->mu);
		mesh_sleep_ns(OP_POLL_NS);
		pthread_mutex_lock(&g->mu);
	}
	pthread_mutex_unlock(&g->mu);
	return rc;
}

int mesh_gw_program_start(struct mesh_gw *g, const char *name, pid_t *pid, char **err)
{
	struct mesh__gw_prog *p = by_name(g, name);
	*err = NULL;
	*pid = 0;
	if (!p)
		return mesh_errf(err, MESH_E_NOTFOUND, "'%s' is not an HTTP program of meshd --http", name);
	int rc = program_start(g, p, name, pid, err);
	mesh__gw_unhold(p);
	return rc;
}

int mesh_gw_program_stop(struct mesh_gw *g, const char *name, char **err)
{
	struct mesh__gw_prog *p = by_name(g, name);
	*err = NULL;
	if (!p)
		return mesh_errf(err, MESH_E_NOTFOUND, "'%s' is not an HTTP program of meshd --http", name);
	int rc = program_stop(g, p, name, err);
	mesh__gw_unhold(p);
	return rc;
}

/* ---- Reload: the catalog read again ---- */

/* The entry of v (n, by name) for name, or NULL. */
static struct entry *entry_of(struct entry *v, size_t n, const char *name)
{
	struct entry key;
	snprintf(key.name, sizeof key.name, "%s", name);
	return n ? bsearch(&key, v, n, sizeof *v, cmp_entry) : NULL;
}

/* Under mu: the catalog as it would be after the reload into fin (room for
 * g->nprogs + n): the current programs that stay (unchanged, or their new
 * manifest refused), and the new definitions.  How many. */
static size_t would_be(struct mesh_gw *g, struct entry *v, size_t n, struct mesh__gw_prog **fin)
{
	size_t nf = 0;
	for (size_t i = 0; i < g->nprogs; i++) {
		struct entry *e = g->progs[i]->retired ? NULL : entry_of(v, n, g->progs[i]->img.m.name);
		if (e && !e->p && (e->err || e->same))
			fin[nf++] = g->progs[i];
	}
	for (size_t i = 0; i < n; i++)
		if (v[i].p)
			fin[nf++] = v[i].p;
	return nf;
}

static void list_add(struct mesh_buf *b, const char *name, const char *why)
{
	mesh_buf_addf(b, "%s%s%s%s", b->len ? ", " : "", name, why ? ": " : "", why ? why : "");
}

static void summary_part(struct mesh_buf *s, size_t n, const char *what, const struct mesh_buf *names)
{
	if (n)
		mesh_buf_addf(s, "%s%zu %s (%s)", s->len > 10 ? ", " : " ", n, what, names->p);
}

/* Under mu: each entry of v (n, read from the catalog) judged: the same
 * bytes as its program's (p freed, same set), refused (p freed, err set),
 * or a new definition with its instance (p).  fin: room for g->nprogs + n
 * (would_be's). */
static void judge(struct mesh_gw *g, struct entry *v, size_t n, struct mesh__gw_prog **fin)
{
	/* What each manifest is to the program of its name. */
	for (size_t i = 0; i < n; i++) {
		struct mesh__gw_prog *cur = current(g, v[i].name);
		if (cur && v[i].p && cur->img.image_hash == v[i].p->img.image_hash) {
			prog_free(v[i].p);
			v[i].p = NULL;
			v[i].same = 1;
		}
	}
	/* A new definition that would serve a model another one serves is
	 * refused (the program keeps its old one), until none clashes. */
	for (int again = 1; again;) {
		size_t nf = would_be(g, v, n, fin);
		again = 0;
		for (size_t i = 0; !again && i < n; i++) {
			const struct mesh__gw_prog *o;
			const char *clash = v[i].p ? model_clash(fin, nf, v[i].p, &o) : NULL;
			if (clash) {
				v[i].err = mesh_strf("model '%s' is served by '%s' already", clash, o->img.name);
				prog_free(v[i].p);
				v[i].p = NULL;
				again = 1;
			}
		}
	}
	for (size_t i = 0; i < n; i++)
		if (v[i].p && instance(v[i].p) < 0) {
			prog_free(v[i].p);
			v[i].p = NULL;
			v[i].err = strdup("out of memory");
		}
}

/* Under mu, v judged: the current programs, each into table (room for
 * g->nprogs + n); those that go are retired at now (their requests end,
 * then they stop: the tick), each new definition after its predecessor,
 * the removed ones counted in out and named in names[2].  How many. */
static size_t retire_gone(struct mesh_gw *g, struct entry *v, size_t n, uint64_t now, struct mesh__gw_prog **table,
			  struct mesh_gw_reload *out, struct mesh_buf *names)
{
	size_t nt = 0;
	for (size_t i = 0; i < g->nprogs; i++) {
		struct mesh__gw_prog *p = g->progs[i];
		struct entry *e = p->retired ? NULL : entry_of(v, n, p->img.m.name);
		table[nt++] = p;
		if (p->retired || (e && (e->err || e->same)))
			continue;
		p->retired = 1;
		p->retired_t0 = now;
		p->retired_why = e && e->p ? "changed" : "removed";
		swap_leave(p); /* a start of it that waited for room waits no more */
		if (e && e->p)
			e->p->prev = p;
		else {
			out->removed++;
			list_add(&names[2], p->img.m.name, NULL);
		}
	}
	return nt;
}

/* Under mu, the gone retired: each entry of v counted in out and named in
 * names (0 changed, 1 added, 3 refused: logged); its new definition (taken
 * from v) into table after its nt first.  How many in table then. */
static size_t add_new(struct mesh_gw *g, struct entry *v, size_t n, struct mesh__gw_prog **table, size_t nt,
		      struct mesh_gw_reload *out, struct mesh_buf *names)
{
	for (size_t i = 0; i < n; i++) {
		if (v[i].err) {
			out->refused++;
			list_add(&names[3], v[i].name, v[i].err);
			mesh__gw_log(g, MESH_GW_WARN, "gateway reload: program '%s' keeps %s: %s", v[i].name,
				     current(g, v[i].name) ? "its definition" : "out of the catalog", v[i].err);
		} else if (v[i].same) {
			out->unchanged++;
		} else if (v[i].p) {
			if (v[i].p->prev) {
				out->changed++;
				list_add(&names[0], v[i].name, NULL);
			} else {
				/* Removed by an earlier reload and back: after that one. */
				for (size_t k = 0; k < g->nprogs; k++)
					if (g->progs[k]->retired && !strcmp(g->progs[k]->img.m.name, v[i].name))
						v[i].p->prev = g->progs[k];
				out->added++;
				list_add(&names[1], v[i].name, NULL);
			}
			table[nt++] = v[i].p;
			v[i].p = NULL;
		}
	}
	return nt;
}

/* Under mu: table (nt programs, g->progs' and the new) becomes the
 * programs', sorted by name; the retired ones idle stop now, and a request
 * waiting for one looks again. */
static void install(struct mesh_gw *g, struct mesh__gw_prog **table, size_t nt, uint64_t now)
{
	qsort(table, nt, sizeof *table, cmp_name);
	free(g->progs);
	g->progs = table;
	g->nprogs = nt;
	nvml_open(g);
	arm(g, now);
	mesh__gw_look(g);
}

/* The reload's summary (out->summary, malloc'd) from its counts in out
 * and the names (names[4]: changed, added, removed, refused; released
 * here), logged.  0, MESH_E_PARSE when a manifest was refused (*err: the
 * summary), or -ENOMEM. */
static int summarize(struct mesh_gw *g, struct mesh_gw_reload *out, struct mesh_buf *names, char **err)
{
	struct mesh_buf s = MESH_BUF_INIT;
	mesh_buf_adds(&s, "reloaded:");
	summary_part(&s, out->changed, "changed", &names[0]);
	summary_part(&s, out->added, "added", &names[1]);
	summary_part(&s, out->removed, "removed", &names[2]);
	summary_part(&s, out->refused, "refused", &names[3]);
	mesh_buf_addf(&s, "%s%zu unchanged", s.len > 10 ? ", " : " ", out->unchanged);
	for (int i = 0; i < 4; i++)
		mesh_buf_release(&names[i]);
	out->summary = mesh_buf_detach(&s, NULL);
	if (!out->summary)
		return mesh_errf(err, -ENOMEM, "out of memory");
	mesh__gw_log(g, out->refused ? MESH_GW_WARN : MESH_GW_INFO, "gateway %s", out->summary);
	return out->refused ? mesh_errf(err, MESH_E_PARSE, "%s", out->summary) : 0;
}

int mesh_gw_reload(struct mesh_gw *g, struct mesh_gw_reload *out, char **err)
{
	struct entry *v;
	size_t n;
	struct mesh_buf names[4] = {MESH_BUF_INIT, MESH_BUF_INIT, MESH_BUF_INIT, MESH_BUF_INIT};
	memset(out, 0, sizeof *out);
	*err = NULL;
	int rc = read_catalog(g, &v, &n, err);
	if (rc)
		return rc;
	pthread_mutex_lock(&g->mu);
	struct mesh__gw_prog **fin = calloc(g->nprogs + n + 1, sizeof *fin), **table = NULL;
	if (!fin || g->draining) {
		pthread_mutex_unlock(&g->mu);
		free(fin);
		entries_free(v, n);
		return fin ? mesh_errf(err, MESH_E_STATE, "meshd is shutting down") : mesh_errf(err, -ENOMEM, "out of memory");
	}
	judge(g, v, n, fin);
	uint64_t now = mesh_mono_ns();
	table = calloc(g->nprogs + n + 1, sizeof *table);
	if (table) {
		size_t nt = retire_gone(g, v, n, now, table, out, names);
		install(g, table, add_new(g, v, n, table, nt, out, names), now);
	}
	pthread_mutex_unlock(&g->mu);
	free(fin);
	entries_free(v, n);
	if (!table) {
		for (int i = 0; i < 4; i++)
			mesh_buf_release(&names[i]);
		return mesh_errf(err, -ENOMEM, "out of memory");
	}
	return summarize(g, out, names, err);
}
