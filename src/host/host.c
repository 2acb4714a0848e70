#include "host/host.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "host/limits.h"
#include "proc/proc.h"
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

extern char **environ;

/* The worker's control fd number in its process. */
#define CHILD_CTL_FD 3
/* After its control channel closes, a worker has this long to be gone. */
#define CLOSED_GRACE_NS (1000ull * MESH_NS_PER_MS)
#define SAMPLE_EVERY_NS MESH_NS_PER_S

enum { TAG_CTL = 1, TAG_PID = 2, TAG_OUT = 3 };

struct mesh_host {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int polling;
	int epfd, wakefd;
	struct mesh_proc_spawner *sp;
	struct mesh_limits_caps caps;
	char *logs;
	char **env;
	enum mesh_gpu_access gpu;
	char *mps_dir;
	int (*check_gpu_client)(void *, pid_t, char **);
	int (*stop_gpu_client)(void *, pid_t, char **);
	void *gpu_ctx;
	uint64_t ready_ns, online_ns;
	struct mesh_instance *list;
	uint64_t next_id;
	uint32_t spawns, crashes;
	uint64_t last_sample;
};

struct mesh_instance {
	struct mesh_host *h;
	const struct mesh_image *img;
	struct mesh_instance *next;
	uint64_t id;
	enum mesh_istate state;
	pid_t pid;
	int pidfd, outfd, logfd;
	struct mesh_ctl *ctl;
	struct mesh_proc_tail tail;
	struct mesh_slot *slot, *pending, *failed_slot;
	uint32_t gen;
	uint64_t deadline, closed_deadline, stop_start;
	int stop_phase; /* 1 exit sent, 2 stop signal sent, 3 SIGKILL sent */
	int exit_requested;
	char *fail_reason; /* why meshd failed it (timeout, protocol); NULL if not */
	int fail_code;
	char *report, *last_report;
	int last_code;
	uint32_t fails;	    /* failures ever */
	uint32_t req_fails; /* fails at the last request: a waiter reports any newer one */
	uint32_t spawns, crashes;
	int last_exit;
	unsigned enforced;
	char cgdir[600];
	uint64_t cpu_ns, rss, prev_cpu, prev_at;
	double cpu_pct;
};

/* The table.  Rows are states, columns events; an empty cell is NOP/stay. */
#define T(a, n) {MESH_A_##a, MESH_IS_##n}
const struct mesh_transition mesh_lifecycle[MESH_IS__N][MESH_EV__N] = {
	[MESH_IS_DOWN] = {
		[MESH_EV_WARM] = T(SPAWN, STARTING),   [MESH_EV_LAUNCH] = T(SPAWN, STARTING),
		[MESH_EV_HALT] = T(NOP, DOWN),	       [MESH_EV_EXIT] = T(NOP, DOWN),
		[MESH_EV_READY] = T(NOP, DOWN),	       [MESH_EV_ONLINE] = T(NOP, DOWN),
		[MESH_EV_HALTED] = T(NOP, DOWN),       [MESH_EV_REFUSED] = T(NOP, DOWN),
		[MESH_EV_BROKEN] = T(NOP, DOWN),       [MESH_EV_TIMEOUT] = T(NOP, DOWN),
		[MESH_EV_DIED] = T(NOP, DOWN),
	},
	[MESH_IS_STARTING] = {
		[MESH_EV_WARM] = T(NOP, STARTING),     [MESH_EV_LAUNCH] = T(PEND, STARTING),
		[MESH_EV_HALT] = T(NOP, STARTING),     [MESH_EV_EXIT] = T(STOP, STOPPING),
		[MESH_EV_READY] = T(READY, IDLE),      [MESH_EV_ONLINE] = T(FAIL, STOPPING),
		[MESH_EV_HALTED] = T(FAIL, STOPPING),  [MESH_EV_REFUSED] = T(FAIL, STOPPING),
		[MESH_EV_BROKEN] = T(FAIL, STOPPING),  [MESH_EV_TIMEOUT] = T(FAIL, STOPPING),
		[MESH_EV_DIED] = T(REAP, DOWN),
	},
	[MESH_IS_IDLE] = {
		[MESH_EV_WARM] = T(NOP, IDLE),	       [MESH_EV_LAUNCH] = T(RUN, LAUNCHING),
		[MESH_EV_HALT] = T(NOP, IDLE),	       [MESH_EV_EXIT] = T(STOP, STOPPING),
		[MESH_EV_READY] = T(FAIL, STOPPING),   [MESH_EV_ONLINE] = T(FAIL, STOPPING),
		[MESH_EV_HALTED] = T(NOP, IDLE),       [MESH_EV_REFUSED] = T(NOP, IDLE),
		[MESH_EV_BROKEN] = T(FAIL, STOPPING),  [MESH_EV_TIMEOUT] = T(NOP, IDLE),
		[MESH_EV_DIED] = T(REAP, DOWN),
	},
	[MESH_IS_LAUNCHING] = {
		[MESH_EV_WARM] = T(NOP, LAUNCHING),    [MESH_EV_LAUNCH] = T(DENY, LAUNCHING),
		[MESH_EV_HALT] = T(HALT, HALTING),     [MESH_EV_EXIT] = T(STOP, STOPPING),
		[MESH_EV_READY] = T(FAIL, STOPPING),   [MESH_EV_ONLINE] = T(ONLINE, RUNNING),
		[MESH_EV_HALTED] = T(FAIL, STOPPING),  [MESH_EV_REFUSED] = T(REFUSE, IDLE),
		[MESH_EV_BROKEN] = T(FAIL, STOPPING),  [MESH_EV_TIMEOUT] = T(FAIL, STOPPING),
		[MESH_EV_DIED] = T(REAP, DOWN),
	},
	[MESH_IS_RUNNING] = {
		[MESH_EV_WARM] = T(NOP, RUNNING),      [MESH_EV_LAUNCH] = T(DENY, RUNNING),
		[MESH_EV_HALT] = T(HALT, HALTING),     [MESH_EV_EXIT] = T(STOP, STOPPING),
		[MESH_EV_READY] = T(FAIL, STOPPING),   [MESH_EV_ONLINE] = T(FAIL, STOPPING),
		[MESH_EV_HALTED] = T(FAIL, STOPPING),  [MESH_EV_REFUSED] = T(NOP, RUNNING),
		[MESH_EV_BROKEN] = T(FAIL, STOPPING),  [MESH_EV_TIMEOUT] = T(NOP, RUNNING),
		[MESH_EV_DIED] = T(REAP, DOWN),
	},
	[MESH_IS_HALTING] = {
		[MESH_EV_WARM] = T(NOP, HALTING),      [MESH_EV_LAUNCH] = T(DENY, HALTING),
		[MESH_EV_HALT] = T(NOP, HALTING),      [MESH_EV_EXIT] = T(STOP, STOPPING),
		[MESH_EV_READY] = T(FAIL, STOPPING),   [MESH_EV_ONLINE] = T(NOP, HALTING),
		[MESH_EV_HALTED] = T(HALTED, IDLE),    [MESH_EV_REFUSED] = T(NOP, HALTING),
		[MESH_EV_BROKEN] = T(FAIL, STOPPING),  [MESH_EV_TIMEOUT] = T(FAIL, STOPPING),
		[MESH_EV_DIED] = T(REAP, DOWN),
	},
	[MESH_IS_STOPPING] = {
		[MESH_EV_WARM] = T(DENY, STOPPING),    [MESH_EV_LAUNCH] = T(DENY, STOPPING),
		[MESH_EV_HALT] = T(NOP, STOPPING),     [MESH_EV_EXIT] = T(NOP, STOPPING),
		[MESH_EV_READY] = T(NOP, STOPPING),    [MESH_EV_ONLINE] = T(NOP, STOPPING),
		[MESH_EV_HALTED] = T(NOP, STOPPING),   [MESH_EV_REFUSED] = T(NOP, STOPPING),
		[MESH_EV_BROKEN] = T(NOP, STOPPING),   [MESH_EV_TIMEOUT] = T(ESCALATE, STOPPING),
		[MESH_EV_DIED] = T(REAP, DOWN),
	},
};
#undef T

const char *mesh_istate_name(enum mesh_istate s)
{
	static const char *const n[] = {"DOWN", "STARTING", "IDLE", "LAUNCHING", "RUNNING", "HALTING", "STOPPING"};
	return (unsigned)s < MESH_IS__N ? n[s] : "?";
}

const char *mesh_ievent_name(enum mesh_ievent e)
{
	static const char *const n[] = {"warm",	  "launch",  "halt",   "exit",	  "ready", "online",
					"halted", "refused", "broken", "timeout", "died"};
	return (unsigned)e < MESH_EV__N ? n[e] : "?";
}

const char *mesh_iaction_name(enum mesh_iaction a)
{
	static const char *const n[] = {"nop",	  "deny",   "spawn",  "pend", "ready",    "run",  "online",
					"halt",	  "halted", "refuse", "stop", "escalate", "fail", "reap"};
	return (unsigned)a < MESH_A__N ? n[a] : "?";
}

int mesh_lifecycle_describe(struct mesh_buf *out)
{
	int rc = mesh_buf_addf(out, "%-10s %-8s %-9s %s\n", "STATE", "EVENT", "ACTION", "NEXT");
	for (int s = 0; s < MESH_IS__N && !rc; s++)
		for (int e = 0; e < MESH_EV__N && !rc; e++) {
			const struct mesh_transition *t = &mesh_lifecycle[s][e];
			rc = mesh_buf_addf(out, "%-10s %-8s %-9s %s\n", mesh_istate_name((enum mesh_istate)s),
					   mesh_ievent_name((enum mesh_ievent)e), mesh_iaction_name(t->action),
					   mesh_istate_name(t->next));
		}
	return rc;
}


static uint64_t ready_ns(const struct mesh_instance *w)
{
	return w->h->ready_ns ? w->h->ready_ns : w->img->m.ready_timeout_ns;
}

static uint64_t online_ns(const struct mesh_instance *w)
{
	return w->h->online_ns ? w->h->online_ns : w->img->m.online_timeout_ns;
}

static void ep_add(struct mesh_host *h, int fd, uint64_t id, int tag)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = id << 2 | (uint64_t)tag};
	epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void ep_del(struct mesh_host *h, int fd)
{
	epoll_ctl(h->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static void log_line(struct mesh_instance *w, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void log_line(struct mesh_instance *w, const char *f, ...)
{
	if (w->logfd < 0)
		return;
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	mesh_buf_adds(&b, "[meshd] ");
	va_start(ap, f);
	mesh_buf_vaddf(&b, f, ap);
	va_end(ap);
	mesh_buf_adds(&b, "\n");
	if (b.p)
		mesh_write_all(w->logfd, b.p, b.len);
	mesh_buf_release(&b);
}

/* Reads what the worker wrote so far: into its log and its tail. */
static void drain(struct mesh_instance *w)
{
	char buf[16384];
	while (w->outfd >= 0) {
		ssize_t n = read(w->outfd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return; /* EAGAIN: all there is */
		if (n == 0) {
			ep_del(w->h, w->outfd);
			close(w->outfd);
			w->outfd = -1;
			return;
		}
		if (w->logfd >= 0)
			mesh_write_all(w->logfd, buf, (size_t)n);
		mesh_proc_tail_feed(&w->tail, buf, (size_t)n);
	}
}

static void kill_group(struct mesh_instance *w, int sig)
{
	/* Only while the leader is not reaped: its pid (= the group's id)
	 * cannot have been reused. */
	if (w->pid > 0)
		kill(-w->pid, sig);
}

static void new_failure(struct mesh_instance *w, int code, char *report)
{
	free(w->report);
	free(w->last_report);
	w->report = report;
	w->last_report = report ? strdup(report) : NULL;
	w->last_code = code;
	w->fails++;
}

static char **build_env(struct mesh_instance *w)
{
	const struct mesh_host *h = w->h;
	const struct mesh_manifest *m = &w->img->m;
	size_t n = 0, cap = 8;
	for (char **e = environ; e && *e; e++)
		cap++;
	for (char *const *e = h->env; e && *e; e++)
		cap++;
	cap += m->nenv;
	char **env = calloc(cap, sizeof *env);
	if (!env)
		return NULL;
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "MESH_", 5) == 0 || strncmp(*e, "CUDA_MPS_PIPE_DIRECTORY=", 24) == 0)
			continue;
		size_t kl = strcspn(*e, "=");
		int shadowed = 0;
		for (size_t i = 0; i < m->nenv && !shadowed; i++)
			shadowed = strncmp(m->env[i], *e, kl + 1) == 0;
		if (!shadowed && !(env[n++] = strdup(*e)))
			goto nomem;
	}
	for (char *const *e = h->env; e && *e; e++)
		if (!(env[n++] = strdup(*e)))
			goto nomem;
	for (size_t i = 0; i < m->nenv; i++)
		if (!(env[n++] = strdup(m->env[i])))
			goto nomem;
	if (!(env[n++] = mesh_strf("MESH_CONTROL_FD=%d", CHILD_CTL_FD)) || !(env[n++] = mesh_strf("MESH_NAME=%s", m->name)))
		goto nomem;
	if (w->pending && !(env[n++] = mesh_strf("MESH_SLOT=%u", mesh_slot_index(w->pending))))
		goto nomem;
	if (m->device == MESH_DEVICE_GPU && h->gpu == MESH_GPU_MPS && h->mps_dir &&
	    !(env[n++] = mesh_strf("CUDA_MPS_PIPE_DIRECTORY=%s", h->mps_dir)))
		goto nomem;
	env[n] = NULL;
	return env;
nomem:
	for (size_t i = 0; i < n; i++)
		free(env[i]);
	free(env);
	return NULL;
}

static void free_strv(char **v)
{
	for (size_t i = 0; v && v[i]; i++)
		free(v[i]);
	free(v);
}

static int do_spawn(struct mesh_instance *w, char **err)
{
	struct mesh_host *h = w->h;
	const struct mesh_image *img = w->img;
	int child_ctl = -1, out[2] = {-1, -1}, procs = -1, rc;
	struct mesh_ctl *ctl = NULL;
	char **env = NULL, **argv = NULL;
	w->cgdir[0] = 0;
	if ((rc = mesh_ctl_pair(&ctl, &child_ctl)))
		goto bad;
	if (pipe2(out, O_CLOEXEC) < 0) {
		rc = -errno;
		goto bad;
	}
	fcntl(out[0], F_SETFL, O_NONBLOCK);
	char *lp = mesh_strf("%s/%s.log", h->logs, img->name);
	w->logfd = lp ? open(lp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
	if (w->logfd < 0) {
		rc = lp ? -errno : -ENOMEM;
		if (err)
			*err = mesh_strf("cannot open '%s': %s", lp ? lp : "log", mesh_strerror(rc));
		free(lp);
		goto bad;
	}
	free(lp);
	if (!(env = build_env(w)) || !(argv = calloc(img->m.nargs + 2, sizeof *argv))) {
		rc = -ENOMEM;
		goto bad;
	}
	argv[0] = img->bin_path;
	for (size_t i = 0; i < img->m.nargs; i++)
		argv[i + 1] = img->m.args[i];
	if (img->enforced & (MESH_LIM_MEMORY_CGROUP | MESH_LIM_CPU_CGROUP | MESH_LIM_PIDS_CGROUP)) {
		char tag[128];
		snprintf(tag, sizeof tag, "%s-%llu-%u", img->name, (unsigned long long)w->id, w->spawns);
		rc = mesh_limits_cgroup_create(&h->caps, tag, &img->m.limits, img->enforced, w->cgdir, sizeof w->cgdir,
					       &procs);
		if (rc) {
			if (err)
				*err = mesh_strf("cannot create the cgroup for '%s': %s", img->name, mesh_strerror(rc));
			w->cgdir[0] = 0;
			goto bad;
		}
	}
	struct mesh_proc_fd map[1] = {{child_ctl, CHILD_CTL_FD}};
	struct mesh_proc_rlimit rl[MESH_PROC_RLIMITS_MAX];
	struct mesh_proc_opts o = MESH_PROC_OPTS_INIT;
	o.path = img->bin_path, o.argv = argv, o.envp = env, o.out_fd = out[1], o.fds = map, o.nfds = 1;
	o.rlimits = rl, o.nrlimits = mesh_limits_rlimits(&img->m.limits, img->enforced, rl);
	o.cgroup_procs_fd = procs, o.flags = MESH_PROC_SESSION;
	pid_t pid;
	int pidfd;
	rc = mesh_proc_spawn(h->sp, &o, &pid, &pidfd);
	if (rc) {
		if (err)
			*err = mesh_strf("cannot start '%s': %s", img->bin_path, mesh_strerror(rc));
		goto bad;
	}
	close(child_ctl);
	close(out[1]);
	if (procs >= 0)
		close(procs);
	free_strv(env);
	free(argv);
	w->pid = pid;
	w->pidfd = pidfd;
	w->outfd = out[0];
	w->ctl = ctl;
	w->exit_requested = 0;
	w->stop_phase = 0;
	w->closed_deadline = 0;
	free(w->fail_reason);
	w->fail_reason = NULL;
	mesh_proc_tail_reset(&w->tail);
	w->spawns++;
	h->spawns++;
	w->enforced = img->enforced;
	w->prev_cpu = 0;
	w->prev_at = mesh_mono_ns();
	w->cpu_pct = 0;
	w->cpu_ns = w->rss = 0;
	ep_add(h, mesh_ctl_fd(ctl), w->id, TAG_CTL);
	ep_add(h, pidfd, w->id, TAG_PID);
	ep_add(h, w->outfd, w->id, TAG_OUT);
	log_line(w, "started pid %d", (int)pid);
	return 0;
bad:
	if (child_ctl >= 0)
		close(child_ctl);
	mesh_ctl_free(ctl);
	if (out[0] >= 0)
		close(out[0]);
	if (out[1] >= 0)
		close(out[1]);
	if (procs >= 0)
		close(procs);
	if (w->cgdir[0])
		mesh_limits_cgroup_remove(w->cgdir);
	w->cgdir[0] = 0;
	if (w->logfd >= 0)
		close(w->logfd);
	w->logfd = -1;
	free_strv(env);
	free(argv);
	if (err && !*err)
		*err = mesh_strf("cannot start '%s': %s", img->name, mesh_strerror(rc));
	return rc;
}

static void close_ctl(struct mesh_instance *w)
{
	if (w->ctl) {
		ep_del(w->h, mesh_ctl_fd(w->ctl));
		mesh_ctl_free(w->ctl);
		w->ctl = NULL;
	}
}

static const char *signame(int sig)
{
	static char buf[16];
	const char *s = sigabbrev_np(sig);
	if (s)
		return s;
	snprintf(buf, sizeof buf, "%d", sig);
	return buf;
}

/* The process ended: reap it, keep its last words, report it. */
static void do_reap(struct mesh_instance *w, enum mesh_istate was)
{
	struct mesh_host *h = w->h;
	siginfo_t si;
	memset(&si, 0, sizeof si);
	/* Its output is all in the pipe now; a child of it may still hold the
	 * pipe, so read what is there rather than wait for end of file. */
	drain(w);
	kill_group(w, SIGKILL);
	int r;
	do
		r = waitid((idtype_t)P_PIDFD, (id_t)w->pidfd, &si, WEXITED);
	while (r < 0 && errno == EINTR);
	int status = r == 0 ? mesh_proc_exit_code_si(&si) : 255;
	int sig = r == 0 && si.si_code != CLD_EXITED ? si.si_status : 0;
	w->last_exit = status;
	ep_del(h, w->pidfd);
	close(w->pidfd);
	w->pidfd = -1;
	close_ctl(w);
	drain(w);
	if (w->outfd >= 0) {
		ep_del(h, w->outfd);
		close(w->outfd);
		w->outfd = -1;
	}
	if (sig)
		log_line(w, "pid %d exited with status %d (signal %s)", (int)w->pid, status, signame(sig));
	else
		log_line(w, "pid %d exited with status %d", (int)w->pid, status);
	char *tail = mesh_proc_tail_text(&w->tail);
	struct mesh_buf b = MESH_BUF_INIT;
	const char *name = w->img->name;
	if (!w->exit_requested || w->fail_reason) {
		if (w->fail_reason)
			mesh_buf_addf(&b, "worker '%s' (pid %d) failed: %s; exit status %d", name, (int)w->pid,
				      w->fail_reason, status);
		else
			mesh_buf_addf(&b, "worker '%s' (pid %d) crashed %s: exit status %d", name, (int)w->pid,
				      was == MESH_IS_STARTING ? "before ready"
				      : w->slot		       ? "while running"
							       : "while idle",
				      status);
		if (sig)
			mesh_buf_addf(&b, " (killed by SIG%s)", signame(sig));
		mesh_buf_addf(&b, "\n--- last %u lines of output ---\n%s", MESH_TAIL_LINES, tail ? tail : "");
		if (!w->fail_reason) {
			w->crashes++;
			h->crashes++;
		}
		int code = w->fail_reason ? w->fail_code : MESH_E_CRASHED;
		if (w->slot) {
			if (!mesh_slot_failed(w->slot))
				mesh_slot_fail(w->slot, "worker '%s' %s: exit status %d", name,
					       w->fail_reason ? "failed" : "crashed", status);
			w->failed_slot = w->slot;
		}
		new_failure(w, code, b.p ? mesh_buf_detach(&b, NULL) : NULL);
	}
	mesh_buf_release(&b);
	free(tail);
	w->slot = NULL;
	w->pending = NULL;
	w->pid = 0;
	w->deadline = w->closed_deadline = 0;
	w->stop_phase = 0;
	if (w->logfd >= 0)
		close(w->logfd);
	w->logfd = -1;
	if (w->cgdir[0])
		mesh_limits_cgroup_remove(w->cgdir);
	w->cgdir[0] = 0;
	w->cpu_pct = 0;
}

static void begin_stop(struct mesh_instance *w)
{
	struct mesh_host *h = w->h;
	uint64_t now = mesh_mono_ns(), grace = w->img->m.stop_grace_ns;
	w->exit_requested = 1;
	w->pending = NULL;
	if (w->img->m.device == MESH_DEVICE_GPU && h->gpu == MESH_GPU_MPS && h->stop_gpu_client) {
		char *e = NULL;
		if (h->stop_gpu_client(h->gpu_ctx, w->pid, &e) != 0)
			log_line(w, "MPS terminate_client of pid %d failed: %s", (int)w->pid, e ? e : "?");
		free(e);
	}
	w->stop_start = now;
	int sent = w->ctl && mesh_ctl_exit(w->ctl, w->slot) == 0;
	if (grace == 0) {
		kill_group(w, SIGKILL);
		w->stop_phase = 3;
		w->deadline = 0;
		return;
	}
	if (!sent) {
		/* No channel to ask through: the stop signal now. */
		kill_group(w, w->img->m.stop_signal);
		w->stop_phase = 2;
		w->deadline = now + grace;
		return;
	}
	w->stop_phase = 1;
	w->deadline = now + grace / 2;
}

static void fail_now(struct mesh_instance *w, int code, char *why)
{
	free(w->fail_reason);
	w->fail_reason = why ? why : strdup("failed");
	w->fail_code = code;
	w->exit_requested = 1;
	w->pending = NULL;
	kill_group(w, SIGKILL);
	w->stop_phase = 3;
	w->deadline = 0;
	if (w->slot && !mesh_slot_failed(w->slot))
		mesh_slot_fail(w->slot, "worker '%s' failed: %s", w->img->name, w->fail_reason ? w->fail_reason : "?");
}

struct evarg {
	struct mesh_slot *slot; /* LAUNCH */
	uint32_t gen;		/* ONLINE, HALTED */
	const char *text;	/* REFUSED, BROKEN */
};

/* The dispatcher: one table lookup, one action.  Called with h->mu held. */
static int fire(struct mesh_instance *w, enum mesh_ievent ev, const struct evarg *a, char **err)
{
	enum mesh_istate was = w->state;
	struct mesh_transition t = mesh_lifecycle[was][ev];
	uint64_t now = mesh_mono_ns();
	int rc = 0;
	switch (t.action) {
	case MESH_A_NOP:
		return 0;
	case MESH_A_DENY:
		if (err)
			*err = mesh_strf("'%s' cannot %s while %s", w->img->name, mesh_ievent_name(ev), mesh_istate_name(was));
		return MESH_E_STATE;
	case MESH_A_SPAWN:
		w->pending = ev == MESH_EV_LAUNCH ? a->slot : NULL;
		rc = do_spawn(w, err);
		if (rc) {
			w->pending = NULL;
			new_failure(w, rc, err && *err ? strdup(*err) : mesh_strf("cannot start: %s", mesh_strerror(rc)));
			return rc;
		}
		w->deadline = now + ready_ns(w);
		break;
	case MESH_A_PEND:
		w->pending = a->slot;
		break;
	case MESH_A_READY:
		w->deadline = 0;
		if (w->img->m.device == MESH_DEVICE_GPU && w->h->gpu == MESH_GPU_MPS && w->h->check_gpu_client) {
			char *e = NULL;
			if (w->h->check_gpu_client(w->h->gpu_ctx, w->pid, &e) != 0) {
				fail_now(w, MESH_E_REFUSED, mesh_strf("not a client of meshd's MPS server: %s", e ? e : "?"));
				free(e);
				w->state = MESH_IS_STOPPING;
				return 0;
			}
			free(e);
		}
		w->state = t.next;
		if (w->pending) {
			struct evarg la = {.slot = w->pending};
			w->pending = NULL;
			return fire(w, MESH_EV_LAUNCH, &la, err);
		}
		return 0;
	case MESH_A_RUN:
		w->gen++;
		if (w->gen == 0)
			w->gen = 1;
		rc = mesh_ctl_run(w->ctl, a->slot, w->gen);
		if (rc) {
			if (err)
				*err = mesh_strf("cannot send run to '%s': %s", w->img->name, mesh_strerror(rc));
			fail_now(w, MESH_E_PROTO, mesh_strf("cannot send run: %s", mesh_strerror(rc)));
			w->state = MESH_IS_STOPPING;
			return rc;
		}
		w->slot = a->slot;
		w->deadline = now + online_ns(w);
		break;
	case MESH_A_ONLINE:
		if (a->gen != w->gen) {
			fail_now(w, MESH_E_PROTO, mesh_strf("online for gen %u, expected %u", a->gen, w->gen));
			w->state = MESH_IS_STOPPING;
			return 0;
		}
		w->deadline = 0;
		break;
	case MESH_A_HALT:
		mesh_ctl_halt(w->ctl, w->slot);
		w->deadline = now + online_ns(w);
		break;
	case MESH_A_HALTED:
		w->slot = NULL;
		w->deadline = 0;
		break;
	case MESH_A_REFUSE:
		new_failure(w, MESH_E_REFUSED, mesh_strf("worker '%s' refused run: %s", w->img->name, a && a->text ? a->text : "?"));
		w->slot = NULL;
		w->deadline = 0;
		break;
	case MESH_A_STOP:
		begin_stop(w);
		break;
	case MESH_A_ESCALATE:
		if (w->stop_phase == 1) {
			kill_group(w, w->img->m.stop_signal);
			w->stop_phase = 2;
			w->deadline = w->stop_start + w->img->m.stop_grace_ns;
		} else if (w->stop_phase == 2) {
			kill_group(w, SIGKILL);
			w->stop_phase = 3;
			w->deadline = 0;
		}
		break;
	case MESH_A_FAIL: {
		int code = MESH_E_PROTO;
		char *why;
		if (ev == MESH_EV_TIMEOUT) {
			code = MESH_E_TIMEOUT;
			uint64_t lim = was == MESH_IS_STARTING ? ready_ns(w) : online_ns(w);
			why = mesh_strf("no '%s' within %llu ms",
				  was == MESH_IS_STARTING ? "ready" : was == MESH_IS_LAUNCHING ? "online" : "halted",
				  (unsigned long long)(lim / MESH_NS_PER_MS));
		} else if (ev == MESH_EV_BROKEN) {
			why = mesh_strf("%s", a && a->text ? a->text : "protocol violation");
		} else {
			why = mesh_strf("unexpected '%s' while %s%s%s", mesh_ievent_name(ev), mesh_istate_name(was),
				  a && a->text ? ": " : "", a && a->text ? a->text : "");
		}
		fail_now(w, code, why);
		break;
	}
	case MESH_A_REAP:
		do_reap(w, was);
		break;
	case MESH_A__N:
		break;
	}
	w->state = t.next;
	return rc;
}

static void wake_all(struct mesh_host *h)
{
	pthread_cond_broadcast(&h->cv);
}

int mesh_host_new(struct mesh_host **out, const struct mesh_host_cfg *cfg, char **err)
{
	struct mesh_host *h = calloc(1, sizeof *h);
	int rc;
	if (err)
		*err = NULL;
	if (!h)
		return -ENOMEM;
	h->epfd = h->wakefd = -1;
	pthread_mutex_init(&h->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cv, &ca);
	pthread_condattr_destroy(&ca);
	h->next_id = 1;
	if (access(cfg->logs, W_OK | X_OK) != 0) {
		rc = -errno;
		if (err)
			*err = mesh_strf("cannot use logs directory '%s': %s", cfg->logs, strerror(errno));
		goto bad;
	}
	if (!(h->logs = strdup(cfg->logs)) || (cfg->mps_pipe_dir && !(h->mps_dir = strdup(cfg->mps_pipe_dir)))) {
		rc = -ENOMEM;
		goto bad;
	}
	size_t n = 0;
	while (cfg->env && cfg->env[n])
		n++;
	if (!(h->env = calloc(n + 1, sizeof *h->env))) {
		rc = -ENOMEM;
		goto bad;
	}
	for (size_t i = 0; i < n; i++)
		if (!(h->env[i] = strdup(cfg->env[i]))) {
			rc = -ENOMEM;
			goto bad;
		}
	h->gpu = cfg->gpu;
	h->check_gpu_client = cfg->check_gpu_client;
	h->stop_gpu_client = cfg->stop_gpu_client;
	h->gpu_ctx = cfg->gpu_ctx;
	h->ready_ns = cfg->ready_timeout_ns;
	h->online_ns = cfg->online_timeout_ns;
	mesh_limits_detect(&h->caps, cfg->limits_proc_root);
	h->epfd = epoll_create1(EPOLL_CLOEXEC);
	h->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (h->epfd < 0 || h->wakefd < 0) {
		rc = -errno;
		goto bad;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
	epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->wakefd, &ev);
	if ((rc = mesh_proc_spawner_new(&h->sp))) {
		if (err)
			*err = mesh_strf("cannot start the spawner thread: %s", mesh_strerror(rc));
		goto bad;
	}
	*out = h;
	return 0;
bad:
	if (h->epfd >= 0)
		close(h->epfd);
	if (h->wakefd >= 0)
		close(h->wakefd);
	free_strv(h->env);
	free(h->logs);
	free(h->mps_dir);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->cv);
	free(h);
	return rc;
}

const struct mesh_limits_caps *mesh_host_caps(const struct mesh_host *h)
{
	return &h->caps;
}

void mesh_host_wake(struct mesh_host *h)
{
	uint64_t one = 1;
	ssize_t r = write(h->wakefd, &one, sizeof one);
	(void)r;
}

static struct mesh_instance *by_id(struct mesh_host *h, uint64_t id)
{
	for (struct mesh_instance *w = h->list; w; w = w->next)
		if (w->id == id)
			return w;
	return NULL;
}

static void on_ctl(struct mesh_instance *w)
{
	struct mesh_ctl_msg m;
	while (w->ctl) {
		memset(&m, 0, sizeof m);
		int rc = mesh_ctl_recv(w->ctl, &m);
		if (rc == -EAGAIN || rc == -EINTR)
			return;
		if (rc == MESH_E_CLOSED) {
			/* A worker that exits closes the channel just before its
			 * pidfd fires: wait a moment for the death. */
			close_ctl(w);
			w->closed_deadline = mesh_mono_ns() + CLOSED_GRACE_NS;
			return;
		}
		struct evarg a = {.gen = m.gen, .text = m.text};
		if (rc) {
			char why[MESH_CTL_MAX + 64];
			snprintf(why, sizeof why, "protocol violation: %s", m.text[0] ? m.text : mesh_strerror(rc));
			a.text = why;
			fire(w, MESH_EV_BROKEN, &a, NULL);
			return;
		}
		enum mesh_ievent ev = m.kind == MESH_CTL_READY	  ? MESH_EV_READY
				      : m.kind == MESH_CTL_ONLINE ? MESH_EV_ONLINE
				      : m.kind == MESH_CTL_HALTED ? MESH_EV_HALTED
								  : MESH_EV_REFUSED;
		fire(w, ev, &a, NULL);
	}
}

static void sample(struct mesh_host *h, uint64_t now)
{
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		if (w->pid <= 0)
			continue;
		uint64_t cpu, rss;
		if (mesh_proc_sample(w->pid, &cpu, &rss) != 0)
			continue;
		if (now > w->prev_at && cpu >= w->prev_cpu)
			w->cpu_pct = (double)(cpu - w->prev_cpu) * 100.0 / (double)(now - w->prev_at);
		w->prev_cpu = cpu;
		w->prev_at = now;
		w->cpu_ns = cpu;
		w->rss = rss;
	}
	h->last_sample = now;
}

int mesh_host_poll(struct mesh_host *h, uint64_t timeout_ns)
{
	uint64_t now = mesh_mono_ns(), until = now + timeout_ns;
	pthread_mutex_lock(&h->mu);
	if (h->polling) {
		struct timespec ts = {(time_t)(until / MESH_NS_PER_S), (long)(until % MESH_NS_PER_S)};
		pthread_cond_timedwait(&h->cv, &h->mu, &ts);
		pthread_mutex_unlock(&h->mu);
		return 0;
	}
	h->polling = 1;
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		if (w->deadline && w->deadline < until)
			until = w->deadline;
		if (w->closed_deadline && w->closed_deadline < until)
			until = w->closed_deadline;
	}
	if (h->last_sample + SAMPLE_EVERY_NS < until)
		until = h->last_sample + SAMPLE_EVERY_NS;
	pthread_mutex_unlock(&h->mu);

	int ms = until > now ? (int)((until - now + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS) : 0;
	struct epoll_event evs[32];
	int n = epoll_wait(h->epfd, evs, 32, ms);

	pthread_mutex_lock(&h->mu);
	/* Deaths first: a crash report then holds every line written before it. */
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < n; i++) {
			uint64_t id = evs[i].data.u64 >> 2;
			int tag = (int)(evs[i].data.u64 & 3);
			if (id == 0) {
				if (pass == 0) {
					uint64_t v;
					ssize_t r = read(h->wakefd, &v, sizeof v);
					(void)r;
				}
				continue;
			}
			struct mesh_instance *w = by_id(h, id);
			if (!w)
				continue;
			if (pass == 0 && tag == TAG_OUT)
				drain(w);
			else if (pass == 0 && tag == TAG_CTL)
				on_ctl(w);
			else if (pass == 1 && tag == TAG_PID && w->pidfd >= 0)
				fire(w, MESH_EV_DIED, NULL, NULL);
		}
	now = mesh_mono_ns();
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		if (w->deadline && now >= w->deadline) {
			w->deadline = 0;
			fire(w, MESH_EV_TIMEOUT, NULL, NULL);
		}
		if (w->closed_deadline && now >= w->closed_deadline) {
			w->closed_deadline = 0;
			struct evarg a = {.text = "closed its control channel and did not exit"};
			if (w->pid > 0)
				fire(w, MESH_EV_BROKEN, &a, NULL);
		}
	}
	if (now >= h->last_sample + SAMPLE_EVERY_NS)
		sample(h, now);
	h->polling = 0;
	wake_all(h);
	pthread_mutex_unlock(&h->mu);
	return 0;
}

int mesh_instance_new(struct mesh_host *h, const struct mesh_image *img, struct mesh_instance **out)
{
	struct mesh_instance *w = calloc(1, sizeof *w);
	if (!w)
		return -ENOMEM;
	w->h = h;
	w->img = img;
	w->pidfd = w->outfd = w->logfd = -1;
	w->last_exit = -1;
	mesh_proc_tail_reset(&w->tail);
	pthread_mutex_lock(&h->mu);
	w->id = h->next_id++;
	w->next = h->list;
	h->list = w;
	pthread_mutex_unlock(&h->mu);
	*out = w;
	return 0;
}

static int request(struct mesh_instance *w, enum mesh_ievent ev, struct mesh_slot *s, char **err)
{
	struct evarg a = {.slot = s};
	if (err)
		*err = NULL;
	pthread_mutex_lock(&w->h->mu);
	/* A failure from here on answers this request, even one that comes
	 * before the caller starts to wait. */
	w->req_fails = w->fails;
	if (ev == MESH_EV_HALT || ev == MESH_EV_EXIT)
		w->pending = NULL;
	int rc = fire(w, ev, &a, err);
	wake_all(w->h);
	pthread_mutex_unlock(&w->h->mu);
	mesh_host_wake(w->h);
	return rc;
}

int mesh_instance_warm(struct mesh_instance *w, char **err)
{
	return request(w, MESH_EV_WARM, NULL, err);
}

int mesh_instance_launch(struct mesh_instance *w, struct mesh_slot *s, char **err)
{
	return request(w, MESH_EV_LAUNCH, s, err);
}

int mesh_instance_halt(struct mesh_instance *w)
{
	return request(w, MESH_EV_HALT, NULL, NULL);
}

int mesh_instance_exit(struct mesh_instance *w)
{
	return request(w, MESH_EV_EXIT, NULL, NULL);
}

int mesh_instance_wait(struct mesh_instance *w, unsigned mask, uint64_t timeout_ns, char **err)
{
	struct mesh_host *h = w->h;
	uint64_t deadline = mesh_mono_ns() + timeout_ns;
	if (err)
		*err = NULL;
	pthread_mutex_lock(&h->mu);
	for (;;) {
		if (w->fails != w->req_fails) {
			int code = w->last_code ? w->last_code : MESH_E_CRASHED;
			if (err)
				*err = w->last_report ? strdup(w->last_report) : NULL;
			pthread_mutex_unlock(&h->mu);
			return code;
		}
		if (mask & (1u << w->state)) {
			pthread_mutex_unlock(&h->mu);
			return 0;
		}
		uint64_t now = mesh_mono_ns();
		if (now >= deadline) {
			if (err)
				*err = mesh_strf("'%s' is still %s after %llu ms", w->img->name, mesh_istate_name(w->state),
					   (unsigned long long)(timeout_ns / MESH_NS_PER_MS));
			pthread_mutex_unlock(&h->mu);
			return MESH_E_TIMEOUT;
		}
		uint64_t step = deadline - now < 100 * MESH_NS_PER_MS ? deadline - now : 100 * MESH_NS_PER_MS;
		pthread_mutex_unlock(&h->mu);
		mesh_host_poll(h, step);
		pthread_mutex_lock(&h->mu);
	}
}

enum mesh_istate mesh_instance_state(struct mesh_instance *w)
{
	pthread_mutex_lock(&w->h->mu);
	enum mesh_istate s = w->state;
	pthread_mutex_unlock(&w->h->mu);
	return s;
}

pid_t mesh_instance_pid(struct mesh_instance *w)
{
	pthread_mutex_lock(&w->h->mu);
	pid_t p = w->pid;
	pthread_mutex_unlock(&w->h->mu);
	return p;
}

struct mesh_slot *mesh_instance_slot(struct mesh_instance *w)
{
	pthread_mutex_lock(&w->h->mu);
	struct mesh_slot *s = w->slot;
	pthread_mutex_unlock(&w->h->mu);
	return s;
}

char *mesh_instance_crashed(struct mesh_instance *w)
{
	pthread_mutex_lock(&w->h->mu);
	char *r = w->report;
	w->report = NULL;
	pthread_mutex_unlock(&w->h->mu);
	return r;
}

char *mesh_instance_last_report(struct mesh_instance *w)
{
	pthread_mutex_lock(&w->h->mu);
	char *r = w->last_report ? strdup(w->last_report) : NULL;
	pthread_mutex_unlock(&w->h->mu);
	return r;
}

struct mesh_slot *mesh_instance_take_failed_slot(struct mesh_instance *w)
{
	pthread_mutex_lock(&w->h->mu);
	struct mesh_slot *s = w->failed_slot;
	w->failed_slot = NULL;
	pthread_mutex_unlock(&w->h->mu);
	return s;
}

struct mesh_instance_stats mesh_instance_stats(struct mesh_instance *w)
{
	struct mesh_instance_stats st;
	pthread_mutex_lock(&w->h->mu);
	st.pid = w->pid;
	st.state = w->state;
	st.cpu_pct = w->pid ? w->cpu_pct : 0;
	st.rss = w->pid ? w->rss : 0;
	st.cpu_ns = w->cpu_ns;
	st.spawns = w->spawns;
	st.crashes = w->crashes;
	st.last_exit = w->last_exit;
	st.limits = w->pid ? w->enforced : 0;
	st.gen = w->gen;
	pthread_mutex_unlock(&w->h->mu);
	return st;
}

struct mesh_host_totals mesh_host_totals(struct mesh_host *h)
{
	struct mesh_host_totals t = {0};
	pthread_mutex_lock(&h->mu);
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		if (w->pid <= 0)
			continue;
		t.procs++;
		t.cpu_pct += w->cpu_pct;
		t.rss += w->rss;
	}
	t.spawns = h->spawns;
	t.crashes = h->crashes;
	pthread_mutex_unlock(&h->mu);
	return t;
}

static void unlink_instance(struct mesh_host *h, struct mesh_instance *w)
{
	for (struct mesh_instance **p = &h->list; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
}

static void destroy(struct mesh_instance *w)
{
	/* Only a DOWN instance owns no fd; one that would not die (a process
	 * stuck in the kernel) is cut loose rather than leaked into a loop. */
	if (w->pidfd >= 0) {
		ep_del(w->h, w->pidfd);
		close(w->pidfd);
	}
	close_ctl(w);
	if (w->outfd >= 0) {
		ep_del(w->h, w->outfd);
		close(w->outfd);
	}
	if (w->logfd >= 0)
		close(w->logfd);
	free(w->fail_reason);
	free(w->report);
	free(w->last_report);
	free(w);
}

void mesh_instance_free(struct mesh_instance *w)
{
	if (!w)
		return;
	struct mesh_host *h = w->h;
	if (mesh_instance_state(w) != MESH_IS_DOWN) {
		mesh_instance_exit(w);
		mesh_instance_wait(w, 1u << MESH_IS_DOWN, w->img->m.stop_grace_ns + 10 * MESH_NS_PER_S, NULL);
	}
	pthread_mutex_lock(&h->mu);
	/* A poller may be between epoll_wait and its dispatch: it looks
	 * instances up by id, so an unlinked one is never touched. */
	unlink_instance(h, w);
	destroy(w);
	pthread_mutex_unlock(&h->mu);
}

void mesh_host_free(struct mesh_host *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	uint64_t grace = 0;
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		struct evarg a = {0};
		w->pending = NULL;
		fire(w, MESH_EV_EXIT, &a, NULL);
		if (w->img->m.stop_grace_ns > grace)
			grace = w->img->m.stop_grace_ns;
	}
	pthread_mutex_unlock(&h->mu);
	uint64_t until = mesh_mono_ns() + grace + 10 * MESH_NS_PER_S;
	for (;;) {
		pthread_mutex_lock(&h->mu);
		int live = 0;
		for (struct mesh_instance *w = h->list; w; w = w->next)
			live += w->state != MESH_IS_DOWN;
		pthread_mutex_unlock(&h->mu);
		if (!live || mesh_mono_ns() >= until)
			break;
		mesh_host_poll(h, 50 * MESH_NS_PER_MS);
	}
	/* Wait for a poller of another thread to leave. */
	pthread_mutex_lock(&h->mu);
	while (h->polling)
		pthread_cond_wait(&h->cv, &h->mu);
	while (h->list) {
		struct mesh_instance *w = h->list;
		h->list = w->next;
		if (w->pid > 0)
			kill_group(w, SIGKILL);
		destroy(w);
	}
	pthread_mutex_unlock(&h->mu);
	mesh_proc_spawner_free(h->sp);
	close(h->epfd);
	close(h->wakefd);
	free_strv(h->env);
	free(h->logs);
	free(h->mps_dir);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->cv);
	free(h);
}
