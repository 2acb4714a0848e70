/* The supervisor thread of one running HTTP program, from its spawn to its
 * reap: spawn through proc/ on a free loopback port, its output into its
 * log and tail, the warmth probe, the start timeout, the idle stop (or an
 * eviction, or meshd's stop), a crash; then the program is cold again.
 * See gw.h for the behaviour, gw_prog.h for the locking. */
#include "gateway/gw_sup_int.h"

#include "autoscale/policy.h"
#include "autoscale/probe.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define BACKOFF_MAX_NS (30ull * 1000000000ull)

/* The program's memory is measured this often (and at warm, and before a
 * stop); a dead program's VRAM is awaited this long, looked at this often. */
#define MEASURE_EVERY_NS 1000000000ull
#define VRAM_GRACE_NS (10ull * 1000000000ull)
#define VRAM_POLL_NS 10000000ull

#define TREE_PIDS_MAX 256



static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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

static void marker(struct mesh__gw_sup *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void marker(struct mesh__gw_sup *s, const char *fmt, ...)
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
static void drain_output(struct mesh__gw_sup *s)
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
static int wait_events(struct mesh__gw_sup *s, uint64_t deadline)
{
	struct pollfd pf[3] = {{s->c.pidfd, POLLIN, 0}, {s->evfd, POLLIN, 0}, {s->out, POLLIN, 0}};
	struct timespec ts, *tp = NULL;
	if (deadline) {
		/* To the nanosecond: poll's milliseconds, rounded up, would add
		 * up to 1 ms to each step of the start's 1 ms cadence. */
		uint64_t now = mesh_mono_ns(), left = now >= deadline ? 0 : deadline - now;
		ts.tv_sec = (time_t)(left / 1000000000ull);
		ts.tv_nsec = (long)(left % 1000000000ull);
		tp = &ts;
	}
	if (ppoll(pf, s->out >= 0 ? 3 : 2, tp, NULL) < 0 && errno != EINTR)
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

static void gpu_pid_add(struct mesh__gw_sup *s, pid_t pid)
{
	for (size_t i = 0; i < s->ngpu; i++)
		if (s->gpu_pids[i] == pid)
			return;
	if (s->ngpu < GPU_PIDS_MAX)
		s->gpu_pids[s->ngpu++] = pid;
}

/* Measures the program into p (mu): the resident bytes of its processes
 * (proc/'s sampler: the PID namespace's processes, or its group's and
 * session's) and, with NVML, the GPU memory NVML lists for their pids
 * (each remembered: its memory is back only when NVML lists it no more). */
static void measure(struct mesh__gw_sup *s)
{
	struct mesh__gw_prog *p = s->p;
	struct mesh_nvml *nv = p->g->nvml;
	struct mesh_proc_table *t = NULL;
	struct mesh_proc_usage u = {0};
	pid_t pids[TREE_PIDS_MAX];
	size_t npids = 0;
	uint64_t vram = 0;
	s->next_measure = mesh_mono_ns() + MEASURE_EVERY_NS;
	/* Its output first: reading /proc takes a while, the log should not. */
	drain_output(s);
	if (s->reaped || s->c.pidfd < 0 || mesh_proc_table_read(&t) != 0)
		return;
	if (mesh_proc_table_sum(t, &s->c, &u) != 0)
		u.rss = 0;
	if (nv && mesh_proc_table_pids(t, &s->c, pids, TREE_PIDS_MAX, &npids) != 0)
		npids = 0;
	mesh_proc_table_free(t);
	if (npids > TREE_PIDS_MAX)
		npids = TREE_PIDS_MAX;
	for (unsigned i = 0; npids && i < mesh_nvml_count(nv); i++) {
		struct mesh_nvml_proc *np = NULL;
		size_t nn = 0;
		if (mesh_nvml_procs(nv, i, &np, &nn) != 0)
			continue;
		for (size_t k = 0; k < nn; k++)
			for (size_t j = 0; j < npids; j++)
				if ((pid_t)np[k].pid == pids[j]) {
					if (np[k].used != MESH_NVML_UNKNOWN)
						vram += np[k].used;
					gpu_pid_add(s, pids[j]);
					break;
				}
		free(np);
	}
	pthread_mutex_lock(&p->g->mu);
	p->rss = u.rss;
	p->vram = vram;
	if (u.rss + vram > p->peak)
		p->peak = u.rss + vram;
	pthread_mutex_unlock(&p->g->mu);
}

/* 1 when NVML lists one of the pids the program used the GPU with. */
static int vram_listed(struct mesh__gw_sup *s)
{
	struct mesh_nvml *nv = s->p->g->nvml;
	int listed = 0;
	for (unsigned i = 0; !listed && i < mesh_nvml_count(nv); i++) {
		struct mesh_nvml_proc *np = NULL;
		size_t nn = 0;
		if (mesh_nvml_procs(nv, i, &np, &nn) != 0)
			continue;
		for (size_t k = 0; !listed && k < nn; k++)
			for (size_t j = 0; !listed && j < s->ngpu; j++)
				listed = (pid_t)np[k].pid == s->gpu_pids[j];
		free(np);
	}
	return listed;
}

/* After the reap: the driver frees a dead process's GPU memory after its
 * end; the program counts in the budget (STOPPING) until NVML lists none
 * of its pids, or VRAM_GRACE_NS (then it is named and counted free). */
static void wait_vram(struct mesh__gw_sup *s)
{
	struct mesh__gw_prog *p = s->p;
	uint64_t t0 = mesh_mono_ns();
	for (;;) {
		int listed = vram_listed(s);
		double ms = (double)(mesh_mono_ns() - t0) / 1e6;
		pthread_mutex_lock(&p->g->mu);
		int stopping = p->g->stopping;
		pthread_mutex_unlock(&p->g->mu);
		if (!listed) {
			mesh__gw_log(p->g, MESH_GW_INFO, "program=%s GPU memory free %.1f ms after its end (NVML lists none of its %zu pids)",
				     p->m.name, ms, s->ngpu);
			return;
		}
		if (ms * 1e6 >= (double)VRAM_GRACE_NS || stopping) {
			mesh__gw_log(p->g, MESH_GW_WARN, "program=%s NVML still lists a pid of it %.1f ms after its end; counted as free",
				     p->m.name, ms);
			return;
		}
		usleep(VRAM_POLL_NS / 1000);
	}
}

/* sig to what the program contains; SIGKILL ends its cgroup too (what
 * left its process group is still in it). */
static void kill_child(struct mesh__gw_sup *s, int sig)
{
	if (!s->reaped)
		mesh_proc_child_kill(&s->c, sig);
	if (sig == SIGKILL && s->cgdir[0])
		mesh_limits_cgroup_kill(s->cgdir);
}

/* "; its limits: ..." for a report of its end, when [limits] are in force
 * (an end by going over one reads as a crash: the reason is near); "" else.
 * A cgroup's OOM kill is said outright. */
static void limits_note(const struct mesh__gw_sup *s, char *out, size_t cap)
{
	const struct mesh__gw_prog *p = s->p;
	const struct mesh_limits *l = &p->m.limits;
	char how[256], oom[128] = "";
	out[0] = 0;
	if (!p->enforced)
		return;
	if (s->cgdir[0] && (p->enforced & MESH_LIM_MEMORY_CGROUP)) {
		char path[700], *ev = NULL;
		size_t n = 0;
		snprintf(path, sizeof path, "%s/memory.events", s->cgdir);
		const char *k = mesh_read_file(path, 1 << 16, &ev, &n) == 0 ? strstr(ev, "oom_kill ") : NULL;
		if (k && strtoull(k + 9, NULL, 10) > 0)
			snprintf(oom, sizeof oom, "; the kernel's OOM killer ended it: over limits.memory");
		free(ev);
	}
	mesh_limits_describe(p->enforced, how, sizeof how);
	snprintf(out, cap, "%s; its limits: memory=%llu open_files=%llu processes=%llu cpu=%u.%03u (%s)", oom,
		 (unsigned long long)l->memory, (unsigned long long)l->open_files, (unsigned long long)l->processes,
		 l->cpu_milli / 1000, l->cpu_milli % 1000, how);
}

/* Stop signal (hard: SIGKILL at once), the grace, SIGKILL, the reap. */
static void stop_child(struct mesh__gw_sup *s, const char *why, int hard)
{
	struct mesh__gw_prog *p = s->p;
	uint64_t t0 = mesh_mono_ns(), deadline = t0 + p->m.stop_grace_ns;
	int killed = hard, sig = hard ? SIGKILL : p->m.stop_signal;
	if (p->g->nvml)
		measure(s); /* its GPU pids, to await their memory after the reap */
	mesh__gw_log(p->g, MESH_GW_INFO, "program=%s stopping pid=%d (%s) signal=%s", p->m.name, (int)s->c.pid, why,
		     mesh_signal_name(sig));
	marker(s, "stopping pid=%d (%s)", (int)s->c.pid, why);
	kill_child(s, sig);
	while (!s->reaped) {
		if (!killed && mesh_mono_ns() >= deadline) {
			kill_child(s, SIGKILL);
			killed = 1;
		}
		wait_events(s, killed ? 0 : deadline);
	}
	mesh__gw_log(p->g, MESH_GW_INFO, "program=%s stopped pid=%d status=%d%s in %.1f ms", p->m.name, (int)s->c.pid,
		     s->status, killed ? " (SIGKILL after the grace)" : "", (double)(mesh_mono_ns() - t0) / 1e6);
}

/* Under mu: the start failed; waiting requests of this start get code. */
static void fail_start(struct mesh__gw_sup *s, int code, const char *reason)
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

/* The program's process, as a native worker's (host.c): its PID
 * namespace, rlimits, cgroup (procs: its cgroup.procs, -1: none), user;
 * output to out_fd.  0, or a negative code with why set. */
static int spawn_child(struct mesh__gw_sup *s, const char *path, char **argv, char **envp, int out_fd, int procs,
		       char *why, size_t cap)
{
	struct mesh__gw_prog *p = s->p;
	struct mesh_proc_rlimit rl[MESH_PROC_RLIMITS_MAX];
	struct mesh_proc_opts o = MESH_PROC_OPTS_INIT;
	o.path = path;
	o.argv = argv;
	o.envp = envp;
	o.out_fd = out_fd;
	o.flags = MESH_PROC_PIDNS;
	o.rlimits = rl;
	o.nrlimits = mesh_limits_rlimits(&p->m.limits, p->enforced, rl);
	o.cgroup_procs_fd = procs;
	const struct mesh_run_as *ra = &p->run_as;
	if (ra->set) {
		o.flags |= MESH_PROC_SETUID;
		o.uid = ra->uid, o.gid = ra->gid, o.groups = ra->groups, o.ngroups = ra->ngroups;
	}
	int rc = mesh_proc_spawn_child(p->g->sp, &o, 1, &s->c);
	if (rc == -EACCES && ra->set)
		/* The usual cause: a command under a directory only meshd's
		 * user may enter (/root, a 0700 directory). */
		snprintf(why, cap,
			 "cannot run '%s': %s as user '%s' (%s): that user must be able to reach the command and "
			 "every directory above it",
			 path, strerror(-rc), ra->name,
			 p->m.user ? "the manifest's `user`" : "meshd runs as root and the manifest names no `user`");
	else if (rc)
		snprintf(why, cap, "cannot run '%s': %s", path, strerror(-rc));
	return rc;
}

static int spawn(struct mesh__gw_sup *s, char *why, size_t cap)
{
	struct mesh__gw_prog *p = s->p;
	char *path = NULL, **argv = NULL, **envp = NULL, *lerr = NULL;
	int pipefd[2] = {-1, -1}, rc;
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
	/* As a native worker (host.c): its cgroup (only where one is wanted),
	 * its rlimits, its user. */
	int procs = -1;
	const struct mesh_limits_caps *caps = &p->g->caps;
	if (mesh_limits_want_cgroup(p->enforced, caps->contain)) {
		char tag[160];
		snprintf(tag, sizeof tag, "%d-http-%s-%llu", (int)getpid(), p->m.name, (unsigned long long)s->gen);
		rc = mesh_limits_cgroup_create(caps, tag, &p->m.limits, p->enforced, s->cgdir, sizeof s->cgdir, &procs);
		if (rc) {
			s->cgdir[0] = 0;
			close(pipefd[0]);
			close(pipefd[1]);
			snprintf(why, cap, "cannot create its cgroup: %s", mesh_strerror(rc));
			goto out;
		}
	}
	rc = spawn_child(s, path, argv, envp, pipefd[1], procs, why, cap);
	close(pipefd[1]);
	if (procs >= 0)
		close(procs);
	if (rc) {
		close(pipefd[0]);
		if (s->cgdir[0])
			mesh_limits_cgroup_remove(s->cgdir, 1);
		s->cgdir[0] = 0;
		goto out;
	}
	s->out = pipefd[0];
	fcntl(s->out, F_SETFL, fcntl(s->out, F_GETFL) | O_NONBLOCK);
	/* Its log once it runs (its output waits in the pipe): creating the
	 * file at a first start took 0.7-16 ms here (a busy disk), all of it
	 * on the cold start's path.  Without a log it is not kept: the
	 * caller's clean-up kills and reaps it. */
	if (p->log.fd < 0 && mesh__wlog_open(&p->log, p->g->logs, p->m.name, p->g->c.log_max, &lerr) < 0) {
		snprintf(why, cap, "%s", lerr ? lerr : "cannot open its log");
		free(lerr);
		rc = -EIO;
	}
out:
	free(path);
	free_strv(argv);
	free(envp);
	return rc;
}

/* Spawns the program.  0, or 1: the start failed (recorded; mu held). */
static int sup_spawn(struct mesh__gw_sup *s, char *why, size_t cap)
{
	struct mesh__gw_prog *p = s->p;
	struct mesh_gw *g = p->g;
	int rc = spawn(s, why, cap);
	pthread_mutex_lock(&g->mu);
	if (rc) {
		fail_start(s, 502, why);
		mesh__gw_log(g, MESH_GW_WARN, "program=%s start failed: %s", p->m.name, why);
		return 1;
	}
	s->t_exec = mesh_mono_ns();
	p->pid = s->c.pid;
	p->port = s->port;
	p->spawns++;
	pthread_mutex_unlock(&g->mu);
	marker(s, "spawned pid=%d port=%d (%s)", (int)s->c.pid, s->port, mesh_proc_how_name(s->c.how));
	mesh__gw_log(g, MESH_GW_INFO, "program=%s spawned pid=%d port=%d", p->m.name, (int)s->c.pid, s->port);
	return 0;
}

static int probe_step(struct mesh__gw_sup *s, uint64_t t0, uint64_t now, int *listens, uint64_t *next);

/* Starting: the listen tests and the probe until warm (0), or the process
 * ends, meshd stops, or the start timeout passes (1: recorded; mu held). */
static int sup_start(struct mesh__gw_sup *s, uint64_t t0, char *why, size_t cap)
{
	struct mesh__gw_prog *p = s->p;
	struct mesh_gw *g = p->g;
	uint64_t deadline = t0 + p->m.start_timeout_ns, next = s->t_exec + LISTEN_MIN_NS;
	s->next_measure = t0 + MEASURE_EVERY_NS;
	int listens = 0; /* the port was seen listening: the HTTP probe's turn */
	snprintf(s->last_probe, sizeof s->last_probe, "no probe yet");
	for (;;) {
		uint64_t until = next < deadline ? next : deadline;
		if (wait_events(s, until)) {
			char note[512];
			limits_note(s, note, sizeof note);
			snprintf(why, cap, "exited with status %d before it was warm (last probe: %s)%s", s->status,
				 s->last_probe, note);
			pthread_mutex_lock(&g->mu);
			fail_start(s, 502, why);
			mesh__gw_log(g, MESH_GW_WARN, "program=%s crashed while starting: status=%d", p->m.name, s->status);
			return 1;
		}
		pthread_mutex_lock(&g->mu);
		int stopping = g->stopping;
		pthread_mutex_unlock(&g->mu);
		if (stopping) {
			stop_child(s, "shutdown", 0);
			pthread_mutex_lock(&g->mu);
			fail_start(s, 503, "was stopped: meshd is shutting down");
			return 1;
		}
		uint64_t now = mesh_mono_ns();
		if (now >= deadline) {
			snprintf(why, cap, "was not warm within %.1f s (last probe: %s)", (double)p->m.start_timeout_ns / 1e9,
				 s->last_probe);
			mesh__gw_log(g, MESH_GW_WARN, "program=%s start timeout: %s", p->m.name, why);
			pthread_mutex_lock(&g->mu);
			fail_start(s, 504, why);
			mesh__gw_look(g); /* the waiters answer now, not after the stop */
			p->state = GW_STOPPING;
			pthread_mutex_unlock(&g->mu);
			stop_child(s, "start timeout", 0);
			pthread_mutex_lock(&g->mu);
			return 1;
		}
		if (now >= s->next_measure)
			measure(s); /* a loading server grows: others' starts count it */
		if (now < next)
			continue;
		if (probe_step(s, t0, now, &listens, &next))
			return 0;
	}
}

/* One step of a start's wait at its due time: a listen test, or (once the
 * port listens) the HTTP probe.  1 warm; else 0 and *next its next step. */
static int probe_step(struct mesh__gw_sup *s, uint64_t t0, uint64_t now, int *listens, uint64_t *next)
{
	if (!*listens && !(*listens = mesh__gw_sup_listening(s))) {
		/* From the last step's due time: a cadence that does not drift
		 * by the test's own time. */
		*next += mesh__gw_sup_pace(now - t0, LISTEN_DIV, LISTEN_MIN_NS, LISTEN_MAX_NS);
		if (*next < now)
			*next = now + LISTEN_MIN_NS;
		return 0;
	}
	if (!s->t_listen)
		s->t_listen = mesh_mono_ns();
	/* A probe before this one closed its connection (the program did not
	 * keep it alive): a new one, by the listen test's connect (a refusal:
	 * it stopped listening, back to the bare connects). */
	if (s->pfd < 0 && !mesh__gw_sup_listening(s)) {
		*listens = 0;
		s->t_listen = 0;
		*next = mesh_mono_ns() + LISTEN_MIN_NS;
		return 0;
	}
	s->http_probes++;
	s->t_probe = mesh_mono_ns();
	if (mesh__gw_sup_probe(s, 1000000000ull))
		return 1;
	now = mesh_mono_ns();
	if (s->refused) {
		/* It stopped listening (a server that restarts its listener):
		 * back to the bare connects. */
		*listens = 0;
		s->t_listen = 0;
		*next = now + LISTEN_MIN_NS;
		return 0;
	}
	*next = now + mesh__gw_sup_pace(now - t0, 1000, PROBE_MIN_NS, PROBE_MAX_NS);
	return 0;
}

/* The program just warm: the first waiter's request sent, the others told,
 * the warm line (what the wait cost and where its time went). */
static void sup_warm(struct mesh__gw_sup *s, uint64_t t0, uint64_t cpu0)
{
	struct mesh__gw_prog *p = s->p;
	struct mesh_gw *g = p->g;
	uint64_t t_warm = mesh_mono_ns();
	if (s->pfd >= 0) {
		/* For the first request (a loop's, non-blocking as made). */
		int one = 1;
		setsockopt(s->pfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	pthread_mutex_lock(&g->mu);
	p->state = GW_WARM;
	p->last_end = t_warm;
	uint64_t t_first = mesh__gw_sup_send_first(s);
	if (s->pfd >= 0 && p->npool < GW_POOL_MAX) {
		/* The first waiter's request rides the probe's connection: no
		 * connect, no accept for the program. */
		p->pool[p->npool++] = s->pfd;
		s->pfd = -1;
	}
	p->backoff_ns = 0;
	p->warm_ns_sum += p->last_end - t0;
	p->warm_count++;
	mesh__gw_look(g); /* each waiter relays its request now */
	pthread_mutex_unlock(&g->mu);
	/* What the wait cost meshd (this thread's CPU, the spawn included) and
	 * its steps: the spawn to the program's exec, how late the listen was
	 * seen at most (since the last refused test), the probe's answer. */
	double wait_cpu_ms = (double)(thread_cpu_ns() - cpu0) / 1e6;
	char steps[400], first[96] = "";
	uint64_t before = s->t_refused > s->t_exec ? s->t_refused : s->t_exec;
	if (t_first)
		snprintf(first, sizeof first, ", the first request sent on its connection %.3f ms after",
			 (double)(t_first - t_warm) / 1e6);
	snprintf(steps, sizeof steps,
		 "spawn %.2f ms to the program's exec, its listen seen at %.1f ms (within %.2f ms), the probe answered in "
		 "%.2f ms%s",
		 (double)(s->t_exec - t0) / 1e6, s->t_listen ? (double)(s->t_listen - t0) / 1e6 : 0.0,
		 s->t_listen > before ? (double)(s->t_listen - before) / 1e6 : 0.0, (double)(t_warm - s->t_probe) / 1e6,
		 first);
	marker(s, "warm pid=%d in %.1f ms (%s; waited with %u listen tests, %u probes, %.2f ms of CPU; %s)", (int)s->c.pid,
	       (double)(t_warm - t0) / 1e6, s->last_probe, s->listen_tests, s->http_probes, wait_cpu_ms, steps);
	mesh__gw_log(g, MESH_GW_INFO, "program=%s warm pid=%d in %.1f ms (%u listen tests, %u probes, %.2f ms of CPU; %s)",
		     p->m.name, (int)s->c.pid, (double)(t_warm - t0) / 1e6, s->listen_tests, s->http_probes, wait_cpu_ms,
		     steps);
}

/* Warm, the periodic probe due: 0 it answered, or not yet probe_failures
 * times in a row; 1 hung: killed (mu held). */
static int sup_probe_warm(struct mesh__gw_sup *s, uint64_t answer_ns, unsigned *fails, char *why, size_t cap)
{
	struct mesh__gw_prog *p = s->p;
	struct mesh_gw *g = p->g;
	if (mesh__gw_sup_probe(s, answer_ns)) {
		*fails = 0;
		return 0;
	}
	if (++*fails < g->c.probe_failures)
		return 0;
	snprintf(why, cap, "hung: %u probes in a row failed (last: %s)", *fails, s->last_probe);
	mesh__gw_log(g, MESH_GW_WARN, "program=%s pid=%d %s", p->m.name, (int)s->c.pid, why);
	marker(s, "%s", why);
	pthread_mutex_lock(&g->mu);
	p->state = GW_STOPPING;
	mesh__gw_pool_drop(p);
	p->hung++;
	pthread_mutex_unlock(&g->mu);
	stop_child(s, "hung", 1);
	pthread_mutex_lock(&g->mu);
	return 1;
}

/* Under mu, warm: whether to stop it now (idle for its TTL by the policy
 * table, as for mesh serve: one worker, no floor, the last one lingers for
 * the idle TTL; evicted; meshd stops).  Sets *idle, *idle_at. */
static int sup_should_stop(struct mesh__gw_prog *p, int stopping, int *idle, uint64_t *idle_at)
{
	uint64_t now = mesh_mono_ns();
	*idle = !p->inflight && !p->waiting;
	*idle_at = p->last_end + p->m.idle_ttl_ns;
	struct mesh_as_config pol = {.min_workers = 0, .max_workers = 1, .target_concurrency = 1,
				     .idle_ttl = (int64_t)p->m.idle_ttl_ns, .linger = (int64_t)p->m.idle_ttl_ns};
	struct mesh_as_obs o = {.warm = 1,
				.demand = (uint64_t)p->inflight + p->waiting,
				.idle = *idle && now > p->last_end ? (int64_t)(now - p->last_end) : 0};
	struct mesh_as_plan plan;
	if (!stopping && p->state == GW_WARM && mesh_as_plan(&pol, &o, &plan) == 0 && plan.action == MESH_AS_REAP)
		p->state = GW_STOPPING;
	if (stopping)
		p->state = GW_STOPPING;
	if (p->state == GW_STOPPING)
		mesh__gw_pool_drop(p);
	return p->state == GW_STOPPING;
}

/* Warm: until it ends, is idle for its TTL, is hung (the periodic probe
 * failed probe_failures times in a row), or meshd stops; returns with mu
 * held, the program stopped or gone.  The probe's answer is awaited at most
 * an interval (at least 200 ms, at most 1 s). */
static void sup_run(struct mesh__gw_sup *s, char *why, size_t cap)
{
	struct mesh__gw_prog *p = s->p;
	struct mesh_gw *g = p->g;
	/* Measured soon, not at once: the first requests' output first. */
	s->next_measure = mesh_mono_ns() + MEASURE_EVERY_NS / 10;
	uint64_t pint = g->c.probe_interval_ns, next_probe = mesh_mono_ns() + pint;
	uint64_t pans = pint < 200000000ull ? 200000000ull : pint > 1000000000ull ? 1000000000ull : pint;
	unsigned pfails = 0;
	for (;;) {
		if (mesh_mono_ns() >= next_probe) {
			if (sup_probe_warm(s, pans, &pfails, why, cap))
				return;
			next_probe = mesh_mono_ns() + pint;
		}
		int idle;
		uint64_t idle_at;
		pthread_mutex_lock(&g->mu);
		int stopping = g->stopping, stop = sup_should_stop(p, stopping, &idle, &idle_at);
		uint64_t now = mesh_mono_ns();
		pthread_mutex_unlock(&g->mu);
		if (stop) {
			char r[96];
			pthread_mutex_lock(&g->mu);
			snprintf(r, sizeof r, "%s", stopping ? "shutdown" : p->evict_for[0] ? p->evict_for : "idle");
			pthread_mutex_unlock(&g->mu);
			stop_child(s, r, 0);
			pthread_mutex_lock(&g->mu);
			if (!stopping && !p->evict_for[0])
				p->reaps++; /* an idle stop */
			return;
		}
		/* Busy: look again an idle TTL from now (a request's end does not
		 * wake this thread: mesh__gw_release), when an idle TTL from its
		 * last end is at least as far. */
		uint64_t until = idle ? idle_at : p->m.idle_ttl_ns ? now + p->m.idle_ttl_ns : next_probe;
		if (until > next_probe)
			until = next_probe;
		if (mesh_mono_ns() >= s->next_measure)
			measure(s);
		if (wait_events(s, s->next_measure < until ? s->next_measure : until)) {
			char *tail = mesh_proc_tail_text(&s->tail), note[512];
			limits_note(s, note, sizeof note);
			mesh__gw_log(g, MESH_GW_WARN, "program=%s crashed pid=%d status=%d%s; its last lines:\n%s", p->m.name,
				     (int)s->c.pid, s->status, note, tail ? tail : "");
			free(tail);
			marker(s, "crashed pid=%d status=%d%s", (int)s->c.pid, s->status, note);
			pthread_mutex_lock(&g->mu);
			p->crashes++;
			return;
		}
	}
}

/* Entered with mu held: the program's process is killed and reaped if it
 * is not yet, its GPU memory awaited, its resources closed; the program is
 * cold again, another supervisor's to start; this thread ends. */
static void sup_cold(struct mesh__gw_sup *s)
{
	struct mesh__gw_prog *p = s->p;
	struct mesh_gw *g = p->g;
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->pfd >= 0)
		close(s->pfd);
	mesh__gw_pool_drop(p);
	if (s->c.pidfd >= 0 && !s->reaped) {
		pthread_mutex_unlock(&g->mu);
		kill_child(s, SIGKILL);
		siginfo_t si;
		waitid((idtype_t)P_PIDFD, (id_t)s->c.pidfd, &si, WEXITED);
		s->reaped = 1;
		pthread_mutex_lock(&g->mu);
	}
	if (s->ngpu && g->nvml) {
		/* Its processes are gone; its GPU memory may not be yet. */
		p->state = GW_STOPPING;
		pthread_mutex_unlock(&g->mu);
		wait_vram(s);
		pthread_mutex_lock(&g->mu);
	}
	/* From here the program is another supervisor's to start. */
	p->state = GW_COLD;
	p->pid = 0;
	p->evfd = -1;
	p->evict_for[0] = 0;
	if (p->peak)
		p->last_peak = p->peak;
	p->peak = p->rss = p->vram = 0;
	mesh__gw_look(g);
	pthread_mutex_unlock(&g->mu);
	if (s->c.pidfd >= 0)
		close(s->c.pidfd);
	/* Its cgroup goes once what it held is gone (SIGKILLed processes
	 * take a moment). */
	for (int i = 0; s->cgdir[0] && mesh_limits_cgroup_remove(s->cgdir, 1) == -EBUSY && i < 100; i++)
		usleep(10000);
	if (s->out >= 0)
		close(s->out);
	close(s->evfd);
	pthread_mutex_lock(&g->mu);
	g->nsup--;
	pthread_cond_broadcast(&g->cv_all);
	pthread_mutex_unlock(&g->mu);
}

void *mesh__gw_sup_main(void *arg)
{
	struct mesh__gw_sup s;
	struct mesh__gw_prog *p = arg;
	struct mesh_gw *g = p->g;
	char why[1536];
	memset(&s, 0, sizeof s);
	s.p = p;
	s.out = -1;
	s.lfd = -1;
	s.pfd = -1;
	s.c.pidfd = -1;
	pthread_mutex_lock(&g->mu);
	s.evfd = p->evfd;
	s.gen = p->gen;
	pthread_mutex_unlock(&g->mu);
	uint64_t t0 = mesh_mono_ns(), cpu0 = thread_cpu_ns();
	if (!sup_spawn(&s, why, sizeof why) && !sup_start(&s, t0, why, sizeof why)) {
		sup_warm(&s, t0, cpu0);
		sup_run(&s, why, sizeof why);
	}
	sup_cold(&s);
	return NULL;
}
