/* The gateway's programs: the catalog's HTTP programs, a request's place
 * (acquire/release, the cold-start wait), and the supervisor thread of each
 * running program (spawn through proc/, its output, the warmth probe, the
 * idle stop, the reap).  See gw.h for the behaviour, gw_int.h for the
 * locking. */
#include "gateway/gw_int.h"

#include "autoscale/probe.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "host/host.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define BACKOFF_MAX_NS (30ull * 1000000000ull)
#define PROBE_FIRST_NS 2000000ull
#define PROBE_MAX_NS 100000000ull

static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct mesh__gw_prog *)a)->m.name, ((const struct mesh__gw_prog *)b)->m.name);
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
	for (size_t i = 0; i < g->nprogs; i++) {
		struct mesh__gw_prog *p = &g->progs[i];
		p->g = g;
		mesh__gw_cond_init(&p->cv);
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
		if (g->progs[i].g)
			pthread_cond_destroy(&g->progs[i].cv);
		mesh_manifest_release(&g->progs[i].m);
		mesh__wlog_close(&g->progs[i].log);
	}
	free(g->progs);
	g->progs = NULL;
	g->nprogs = 0;
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

static void wake(struct mesh__gw_prog *p)
{
	uint64_t one = 1;
	if (p->evfd >= 0 && write(p->evfd, &one, sizeof one) < 0) {
		/* the counter is full: it is readable anyway */
	}
}

static void abs_deadline(struct timespec *ts, uint64_t mono_deadline)
{
	/* cv's clock is CLOCK_MONOTONIC (set in open) */
	ts->tv_sec = (time_t)(mono_deadline / 1000000000ull);
	ts->tv_nsec = (long)(mono_deadline % 1000000000ull);
}

static void *sup_main(void *arg);

/* Under mu: a new start; the supervisor thread owns it from here. */
static int start(struct mesh__gw_prog *p)
{
	pthread_t th;
	pthread_attr_t at;
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (efd < 0)
		return -errno;
	p->gen++;
	p->state = GW_STARTING;
	p->evfd = efd;
	p->pid = 0;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 1 << 20);
	int rc = pthread_create(&th, &at, sup_main, p);
	pthread_attr_destroy(&at);
	if (rc) {
		close(efd);
		p->evfd = -1;
		p->state = GW_COLD;
		return -rc;
	}
	p->g->nsup++;
	return 0;
}

static const char *group_of(const struct mesh__gw_prog *p)
{
	return p->m.group ? p->m.group : p->m.name;
}

/* Under mu, p cold and counted in the budget: 0 when it fits beside the
 * running programs now; 1 when it must wait (the least recently used idle
 * programs of other groups were asked to stop, or none is idle yet);
 * MESH_E_RANGE when it can never fit. */
static int make_room(struct mesh__gw_prog *p)
{
	struct mesh_gw *g = p->g;
	uint64_t used = 0, freeing = 0, budget = g->c.memory_budget, need = p->m.memory;
	if (need > budget)
		return MESH_E_RANGE;
	for (size_t i = 0; i < g->nprogs; i++) {
		const struct mesh__gw_prog *q = &g->progs[i];
		if (q != p && q->state != GW_COLD) {
			used += q->m.memory;
			if (q->state == GW_STOPPING)
				freeing += q->m.memory;
		}
	}
	if (used + need <= budget)
		return 0;
	while (used - freeing + need > budget) {
		struct mesh__gw_prog *lru = NULL;
		for (size_t i = 0; i < g->nprogs; i++) {
			struct mesh__gw_prog *q = &g->progs[i];
			if (q == p || q->state != GW_WARM || q->inflight || q->waiting || !q->m.memory ||
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
		wake(lru);
		freeing += lru->m.memory;
		mesh__gw_log(g, MESH_GW_INFO, "program=%s evicting %s: needs %llu bytes, %llu of %llu in use", p->m.name,
			     lru->m.name, (unsigned long long)need, (unsigned long long)used, (unsigned long long)budget);
	}
	return 1;
}

/* Under mu: waits on cv for at most a look interval; 1 when the client
 * (fd) has gone meanwhile.  A waiting request has nothing to read from its
 * client, so a close (or half-close) is the only thing poll can report. */
#define CLIENT_LOOK_NS 200000000ull
static int wait_or_gone(pthread_cond_t *cv, pthread_mutex_t *mu, int fd)
{
	struct timespec ts;
	abs_deadline(&ts, mesh_mono_ns() + CLIENT_LOOK_NS);
	if (pthread_cond_timedwait(cv, mu, &ts) != ETIMEDOUT || fd < 0)
		return 0;
	struct pollfd pf = {fd, POLLRDHUP, 0};
	return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

int mesh__gw_acquire(struct mesh__gw_prog *p, int client_fd, int *port, int *cold, char **why, unsigned *retry_after)
{
	struct mesh_gw *g = p->g;
	uint64_t mygen = 0;
	int queued = 0, code = 0;
	*cold = 0;
	*retry_after = 0;
	*why = NULL;
	pthread_mutex_lock(&g->mu);
	for (;;) {
		if (g->draining) {
			code = 503;
			*why = strdup("meshd is shutting down");
			*retry_after = 5;
			break;
		}
		if (p->state == GW_WARM && (!p->m.max_concurrency || p->inflight < p->m.max_concurrency)) {
			p->inflight++;
			p->requests++;
			*port = p->port;
			break;
		}
		if (p->state != GW_WARM)
			*cold = 1;
		if (!queued) {
			if (p->waiting >= g->c.max_queue) {
				code = 503;
				*retry_after = 5;
				mesh_errf(why, 0, "the queue of program '%s' is full (%u waiting)", p->m.name, p->waiting);
				break;
			}
			p->waiting++;
			queued = 1;
		}
		if (mygen && p->fail_gen == mygen) {
			code = p->fail_code;
			*why = strdup(p->fail_msg);
			break;
		}
		if (p->state == GW_STARTING && !mygen)
			mygen = p->gen;
		if (p->state == GW_COLD) {
			uint64_t now = mesh_mono_ns();
			if (now < p->backoff_until) {
				struct timespec ts;
				abs_deadline(&ts, p->backoff_until);
				pthread_cond_timedwait(&p->cv, &g->mu, &ts);
				continue;
			}
			if (g->c.memory_budget && p->m.memory) {
				int room = make_room(p);
				if (room < 0) {
					code = 502;
					mesh_errf(why, 0, "program '%s' needs %llu bytes of memory, more than the budget (%llu)",
						  p->m.name, (unsigned long long)p->m.memory,
						  (unsigned long long)g->c.memory_budget);
					break;
				}
				if (room) {
					*cold = 1;
					if (wait_or_gone(&g->cv_budget, &g->mu, client_fd))
						goto gone;
					continue;
				}
			}
			int rc = start(p);
			if (rc) {
				code = 502;
				mesh_errf(why, 0, "cannot start program '%s': %s", p->m.name, mesh_strerror(rc));
				break;
			}
			mygen = p->gen;
			continue;
		}
		if (wait_or_gone(&p->cv, &g->mu, client_fd))
			goto gone;
		continue;
	gone:
		code = 499;
		mesh_errf(why, 0, "the client went away while it waited for program '%s'", p->m.name);
		break;
	}
	if (queued) {
		p->waiting--;
		if (!p->waiting && !p->inflight) {
			wake(p);
			pthread_cond_broadcast(&g->cv_budget);
		}
	}
	pthread_mutex_unlock(&g->mu);
	if (code && !*why)
		*why = strdup("out of memory");
	return code;
}

void mesh__gw_release(struct mesh__gw_prog *p)
{
	pthread_mutex_lock(&p->g->mu);
	p->inflight--;
	if (!p->inflight) {
		p->last_end = mesh_mono_ns();
		wake(p);
		pthread_cond_broadcast(&p->g->cv_budget);
	}
	pthread_cond_broadcast(&p->cv);
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

/* The supervisor. */

struct sup {
	struct mesh__gw_prog *p;
	struct mesh_proc_child c;
	int out, evfd, port, reaped, status;
	struct mesh_proc_tail tail;
	char last_probe[256];
};

static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -errno;
	if (fd < 0)
		return port;
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
		port = ntohs(sa.sin_port);
	else
		port = -errno;
	close(fd);
	return port;
}

static void marker(struct sup *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void marker(struct sup *s, const char *fmt, ...)
{
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	mesh_buf_adds(&b, "--- meshd gateway: ");
	va_start(ap, fmt);
	mesh_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	mesh_buf_adds(&b, "\n");
	if (b.p)
		mesh__wlog_write(&s->p->log, b.p, b.len);
	mesh_buf_release(&b);
}

/* Reads what the program wrote (non-blocking) into its log and tail. */
static void drain_output(struct sup *s)
{
	char buf[16384];
	while (s->out >= 0) {
		ssize_t n = read(s->out, buf, sizeof buf);
		if (n > 0) {
			mesh__wlog_write(&s->p->log, buf, (size_t)n);
			mesh_proc_tail_feed(&s->tail, buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || errno != EAGAIN) {
			close(s->out);
			s->out = -1;
		}
		return;
	}
}

/* Waits until deadline (0: forever) for output, the process's end or a
 * wake.  Returns 1 when the process ended (reaped: s->status). */
static int wait_events(struct sup *s, uint64_t deadline)
{
	struct pollfd pf[3] = {{s->c.pidfd, POLLIN, 0}, {s->evfd, POLLIN, 0}, {s->out, POLLIN, 0}};
	int timeout = -1;
	if (deadline) {
		uint64_t now = mesh_mono_ns();
		timeout = now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
	}
	if (poll(pf, s->out >= 0 ? 3 : 2, timeout) < 0 && errno != EINTR)
		return 0;
	if (pf[2].revents && s->out >= 0)
		drain_output(s);
	if (pf[1].revents) {
		uint64_t v;
		if (read(s->evfd, &v, sizeof v) < 0) {
			/* EAGAIN: someone else read it */
		}
	}
	if (pf[0].revents) {
		siginfo_t si;
		memset(&si, 0, sizeof si);
		if (waitid((idtype_t)P_PIDFD, (id_t)s->c.pidfd, &si, WEXITED) == 0) {
			int sig;
			drain_output(s);
			s->status = mesh_proc_child_exit_code(&s->c, &si, &sig);
			s->reaped = 1;
			return 1;
		}
	}
	return 0;
}

/* Stop signal, the grace, SIGKILL, the reap. */
static void stop_child(struct sup *s, const char *why)
{
	struct mesh__gw_prog *p = s->p;
	uint64_t t0 = mesh_mono_ns(), deadline = t0 + p->m.stop_grace_ns;
	int killed = 0;
	mesh__gw_log(p->g, MESH_GW_INFO, "program=%s stopping pid=%d (%s) signal=%s", p->m.name, (int)s->c.pid, why,
		     mesh_signal_name(p->m.stop_signal));
	marker(s, "stopping pid=%d (%s)", (int)s->c.pid, why);
	mesh_proc_child_kill(&s->c, p->m.stop_signal);
	while (!s->reaped) {
		if (!killed && mesh_mono_ns() >= deadline) {
			mesh_proc_child_kill(&s->c, SIGKILL);
			killed = 1;
		}
		wait_events(s, killed ? 0 : deadline);
	}
	mesh__gw_log(p->g, MESH_GW_INFO, "program=%s stopped pid=%d status=%d%s in %.1f ms", p->m.name, (int)s->c.pid,
		     s->status, killed ? " (SIGKILL after the grace)" : "", (double)(mesh_mono_ns() - t0) / 1e6);
}

/* Under mu: the start failed; waiting requests of this start get code. */
static void fail_start(struct sup *s, int code, const char *reason)
{
	struct mesh__gw_prog *p = s->p;
	char *tail = mesh_proc_tail_text(&s->tail);
	snprintf(p->fail_msg, sizeof p->fail_msg, "program '%s' %s%s%s", p->m.name, reason,
		 tail && *tail ? "; its last lines:\n" : "", tail ? tail : "");
	free(tail);
	p->fail_gen = p->gen;
	p->fail_code = code;
	p->start_failures++;
	p->backoff_ns = p->backoff_ns ? p->backoff_ns * 2 : p->g->c.backoff_ns;
	if (p->backoff_ns > BACKOFF_MAX_NS)
		p->backoff_ns = BACKOFF_MAX_NS;
	p->backoff_until = mesh_mono_ns() + p->backoff_ns;
}

static char **build_argv(const struct mesh_manifest *m, int port)
{
	char **v = calloc(m->ncommand + 1, sizeof *v);
	char ps[16];
	snprintf(ps, sizeof ps, "%d", port);
	for (size_t i = 0; v && i < m->ncommand; i++) {
		struct mesh_buf b = MESH_BUF_INIT;
		const char *a = m->command[i], *q;
		while ((q = strstr(a, "{port}"))) {
			mesh_buf_add(&b, a, (size_t)(q - a));
			mesh_buf_adds(&b, ps);
			a = q + 6;
		}
		mesh_buf_adds(&b, a);
		if (!(v[i] = mesh_buf_detach(&b, NULL))) {
			mesh_buf_release(&b);
			for (size_t k = 0; k < i; k++)
				free(v[k]);
			free(v);
			return NULL;
		}
	}
	return v;
}

static void free_strv(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

/* The manifest's [env] first (getenv finds the first), then meshd's. */
static char **build_env(const struct mesh_manifest *m)
{
	size_t n = 0;
	while (environ && environ[n])
		n++;
	char **e = calloc(m->nenv + n + 1, sizeof *e);
	if (!e)
		return NULL;
	memcpy(e, m->env, m->nenv * sizeof *e);
	if (n)
		memcpy(e + m->nenv, environ, n * sizeof *e);
	return e;
}

static int spawn(struct sup *s, char *why, size_t cap)
{
	struct mesh__gw_prog *p = s->p;
	char *path = NULL, **argv = NULL, **envp = NULL, *lerr = NULL;
	int pipefd[2] = {-1, -1}, rc;
	if (p->log.fd < 0 && mesh__wlog_open(&p->log, p->g->logs, p->m.name, p->g->c.log_max, &lerr) < 0) {
		snprintf(why, cap, "%s", lerr ? lerr : "cannot open its log");
		free(lerr);
		return -EIO;
	}
	s->port = free_port();
	if (s->port < 0) {
		snprintf(why, cap, "no free loopback port: %s", strerror(-s->port));
		return s->port;
	}
	rc = mesh_proc_resolve(p->m.command[0], &path);
	if (rc) {
		snprintf(why, cap, "cannot run '%s': %s", p->m.command[0], strerror(-rc));
		return rc;
	}
	argv = build_argv(&p->m, s->port);
	envp = build_env(&p->m);
	if (!argv || !envp || pipe2(pipefd, O_CLOEXEC) < 0) {
		rc = argv && envp ? -errno : -ENOMEM;
		snprintf(why, cap, "cannot start: %s", strerror(-rc));
		goto out;
	}
	struct mesh_proc_opts o = MESH_PROC_OPTS_INIT;
	o.path = path;
	o.argv = argv;
	o.envp = envp;
	o.out_fd = pipefd[1];
	o.flags = MESH_PROC_PIDNS;
	rc = mesh_proc_spawn_child(p->g->sp, &o, 1, &s->c);
	close(pipefd[1]);
	if (rc) {
		close(pipefd[0]);
		snprintf(why, cap, "cannot run '%s': %s", path, strerror(-rc));
		goto out;
	}
	s->out = pipefd[0];
	fcntl(s->out, F_SETFL, fcntl(s->out, F_GETFL) | O_NONBLOCK);
out:
	free(path);
	free_strv(argv);
	free(envp);
	return rc;
}

/* One probe of the program: 1 warm, 0 not yet (s->last_probe says why). */
static int probe(struct sup *s)
{
	const struct mesh_manifest *m = &s->p->m;
	struct mesh_probe_target t;
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	struct mesh_probe_result r;
	mesh_probe_target_default(&t);
	t.port = (uint16_t)s->port;
	snprintf(t.path, sizeof t.path, "%s", m->probe_path ? m->probe_path : MESH_PROBE_DEFAULT_PATH);
	o.connect_timeout_ns = 500000000ull;
	o.response_timeout_ns = 1000000000ull;
	o.model = m->probe_path ? NULL : m->models[0];
	if (mesh_probe(&t, &o, &r) < 0)
		return 0;
	int warm = r.warm;
	if (m->probe_status) {
		warm = r.status == (int)m->probe_status && (r.warm || r.phase == MESH_PROBE_JUDGE);
		if (!warm && r.status)
			snprintf(r.reason, sizeof r.reason, "cold: HTTP %d, not %u, from GET %.180s", r.status,
				 m->probe_status, t.path);
	}
	snprintf(s->last_probe, sizeof s->last_probe, "%s", r.reason);
	return warm;
}

static void *sup_main(void *arg)
{
	struct sup s;
	struct mesh__gw_prog *p = arg;
	struct mesh_gw *g = p->g;
	char why[512];
	memset(&s, 0, sizeof s);
	s.p = p;
	s.out = -1;
	s.c.pidfd = -1;
	pthread_mutex_lock(&g->mu);
	s.evfd = p->evfd;
	pthread_mutex_unlock(&g->mu);

	uint64_t t0 = mesh_mono_ns();
	int rc = spawn(&s, why, sizeof why);
	pthread_mutex_lock(&g->mu);
	if (rc) {
		fail_start(&s, 502, why);
		mesh__gw_log(g, MESH_GW_WARN, "program=%s start failed: %s", p->m.name, why);
		goto cold_locked;
	}
	p->pid = s.c.pid;
	p->port = s.port;
	p->spawns++;
	pthread_mutex_unlock(&g->mu);
	marker(&s, "spawned pid=%d port=%d (%s)", (int)s.c.pid, s.port, mesh_proc_how_name(s.c.how));
	mesh__gw_log(g, MESH_GW_INFO, "program=%s spawned pid=%d port=%d", p->m.name, (int)s.c.pid, s.port);

	/* Starting: probe until warm, the process ends, or the start timeout. */
	uint64_t deadline = t0 + p->m.start_timeout_ns, interval = PROBE_FIRST_NS, next = t0 + interval / 2;
	snprintf(s.last_probe, sizeof s.last_probe, "no probe yet");
	for (;;) {
		uint64_t until = next < deadline ? next : deadline;
		if (wait_events(&s, until)) {
			snprintf(why, sizeof why, "exited with status %d before it was warm (last probe: %s)", s.status,
				 s.last_probe);
			pthread_mutex_lock(&g->mu);
			fail_start(&s, 502, why);
			mesh__gw_log(g, MESH_GW_WARN, "program=%s crashed while starting: status=%d", p->m.name, s.status);
			goto cold_locked;
		}
		pthread_mutex_lock(&g->mu);
		int stopping = g->stopping;
		pthread_mutex_unlock(&g->mu);
		if (stopping) {
			stop_child(&s, "shutdown");
			pthread_mutex_lock(&g->mu);
			fail_start(&s, 503, "was stopped: meshd is shutting down");
			goto cold_locked;
		}
		uint64_t now = mesh_mono_ns();
		if (now >= deadline) {
			snprintf(why, sizeof why, "was not warm within %.1f s (last probe: %s)",
				 (double)p->m.start_timeout_ns / 1e9, s.last_probe);
			mesh__gw_log(g, MESH_GW_WARN, "program=%s start timeout: %s", p->m.name, why);
			pthread_mutex_lock(&g->mu);
			fail_start(&s, 504, why);
			pthread_cond_broadcast(&p->cv); /* the waiters answer now, not after the stop */
			p->state = GW_STOPPING;
			pthread_mutex_unlock(&g->mu);
			stop_child(&s, "start timeout");
			pthread_mutex_lock(&g->mu);
			goto cold_locked;
		}
		if (now < next)
			continue;
		if (probe(&s))
			break;
		interval = interval + interval / 4 > PROBE_MAX_NS ? PROBE_MAX_NS : interval + interval / 4;
		next = mesh_mono_ns() + interval;
	}
	pthread_mutex_lock(&g->mu);
	p->state = GW_WARM;
	p->last_end = mesh_mono_ns();
	p->backoff_ns = 0;
	p->warm_ns_sum += p->last_end - t0;
	p->warm_count++;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&g->mu);
	marker(&s, "warm pid=%d in %.1f ms (%s)", (int)s.c.pid, (double)(mesh_mono_ns() - t0) / 1e6, s.last_probe);
	mesh__gw_log(g, MESH_GW_INFO, "program=%s warm pid=%d in %.1f ms", p->m.name, (int)s.c.pid,
		     (double)(mesh_mono_ns() - t0) / 1e6);

	/* Warm: until it ends, is idle for its TTL, or meshd stops. */
	for (;;) {
		pthread_mutex_lock(&g->mu);
		int idle = !p->inflight && !p->waiting, stopping = g->stopping;
		uint64_t idle_at = p->last_end + p->m.idle_ttl_ns;
		if (!stopping && idle && mesh_mono_ns() >= idle_at)
			p->state = GW_STOPPING;
		if (stopping)
			p->state = GW_STOPPING;
		int stop = p->state == GW_STOPPING;
		pthread_mutex_unlock(&g->mu);
		if (stop) {
			char r[96];
			pthread_mutex_lock(&g->mu);
			snprintf(r, sizeof r, "%s", stopping ? "shutdown" : p->evict_for[0] ? p->evict_for : "idle");
			pthread_mutex_unlock(&g->mu);
			stop_child(&s, r);
			pthread_mutex_lock(&g->mu);
			if (!stopping && !p->evict_for[0])
				p->reaps++; /* an idle stop */
			goto cold_locked;
		}
		if (wait_events(&s, idle ? idle_at : 0)) {
			char *tail = mesh_proc_tail_text(&s.tail);
			mesh__gw_log(g, MESH_GW_WARN, "program=%s crashed pid=%d status=%d; its last lines:\n%s", p->m.name,
				     (int)s.c.pid, s.status, tail ? tail : "");
			free(tail);
			marker(&s, "crashed pid=%d status=%d", (int)s.c.pid, s.status);
			pthread_mutex_lock(&g->mu);
			p->crashes++;
			goto cold_locked;
		}
	}

cold_locked:
	/* mu held.  From here the program is another supervisor's to start. */
	p->state = GW_COLD;
	p->pid = 0;
	p->evfd = -1;
	p->evict_for[0] = 0;
	pthread_cond_broadcast(&p->cv);
	pthread_cond_broadcast(&g->cv_budget);
	pthread_mutex_unlock(&g->mu);
	if (s.c.pidfd >= 0) {
		if (!s.reaped) {
			mesh_proc_child_kill(&s.c, SIGKILL);
			siginfo_t si;
			waitid((idtype_t)P_PIDFD, (id_t)s.c.pidfd, &si, WEXITED);
		}
		close(s.c.pidfd);
	}
	if (s.out >= 0)
		close(s.out);
	close(s.evfd);
	pthread_mutex_lock(&g->mu);
	g->nsup--;
	pthread_cond_broadcast(&g->cv_all);
	pthread_mutex_unlock(&g->mu);
	return NULL;
}

void mesh__gw_stop_all(struct mesh_gw *g, uint64_t deadline)
{
	pthread_mutex_lock(&g->mu);
	g->stopping = 1;
	pthread_cond_broadcast(&g->cv_budget);
	for (size_t i = 0; i < g->nprogs; i++) {
		wake(&g->progs[i]);
		pthread_cond_broadcast(&g->progs[i].cv);
	}
	while (g->nsup) {
		struct timespec ts;
		abs_deadline(&ts, deadline);
		if (pthread_cond_timedwait(&g->cv_all, &g->mu, &ts) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&g->mu);
}
