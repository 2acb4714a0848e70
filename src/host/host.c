#include "host/host.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/thread.h"
#include "host/limits.h"
#include "host/probing.h"
#include "host/wlog.h"
#include "proc/proc.h"
#include "shm/shm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
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

/* An epoll event's data word: the instance's id above TAG_BITS, what the
 * fd is below (id 0: the host's wake fd). */
enum { TAG_CTL = 1, TAG_PID = 2, TAG_OUT = 3, TAG_PROBE = 4 };
#define TAG_BITS 3
#define TAG_MASK ((1u << TAG_BITS) - 1)
/* Changes of state kept for a notify callback not yet called. */
#define NOTIFY_MAX 16

struct mesh_host {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int polling;
	int driven;	/* an event loop dispatches (mesh_host_set_driven) */
	uint32_t fired, fired_seen; /* events fed to the table (but probe steps that moved nothing), ever; as of the last dispatch */
	int epfd, wakefd;
	struct mesh_proc_spawner *sp;
	struct mesh_limits_caps caps;
	unsigned contain; /* MESH_CONTAIN_* used for workers */
	struct mesh_run_as def_user; /* for programs without `user` */
	char *logs;
	uint64_t log_max;
	char **env;
	enum mesh_gpu_access gpu;
	char *mps_dir;
	int (*check_gpu_client)(void *, pid_t, char **);
	int (*stop_gpu_client)(void *, pid_t, char **);
	void *gpu_ctx;
	uint64_t ready_ns, online_ns;
	void (*on_ready)(void *, const struct mesh_image *, uint64_t);
	void *on_ready_ctx;
	struct mesh_instance *list;
	uint64_t next_id;
	uint32_t spawns, crashes;
	uint64_t last_cg; /* the last retry of the cgroups left to remove */
	/* Instances with changes to tell their notify callback (chained by
	 * notify_next), told by one thread at a time (notifying), to
	 * telling (mesh_instance_free waits while it is the one). */
	struct mesh_instance *notify_head, *notify_tail;
	int notifying;
	struct mesh_instance *telling;
	/* The sampler: its own thread, so that a read of all of /proc (its
	 * cost grows with the processes on the machine: docs/host.md, "Stats")
	 * holds neither h->mu nor the thread that dispatches the workers'
	 * events (a cold start's `ready`). */
	pthread_t sampler;
	pthread_cond_t sampler_cv;
	int sampler_quit;
};

struct mesh_instance {
	struct mesh_host *h;
	const struct mesh_image *img;
	struct mesh_instance *next;
	uint64_t id;
	enum mesh_istate state;
	pid_t pid; /* the program's (child.pid) */
	struct mesh_proc_child child;
	int pidfd, outfd;
	struct mesh__wlog log;
	struct mesh_ctl *ctl;
	struct mesh_proc_tail tail;
	struct mesh_slot *slot, *pending, *failed_slot;
	struct mesh_slot *armed; /* the pending slot, armed at the launch for gen (arm_pending) */
	/* armed's `run` went out before `ready` (send_run_early): the worker
	 * is on that slot (slot) from then until it halts or is reaped. */
	int run_early;
	uint32_t gen;
	uint64_t deadline, closed_deadline, stop_start;
	int exit_requested;
	char *fail_reason; /* why meshd failed it (timeout, protocol); NULL if not */
	int fail_code;
	char *report, *last_report;
	int last_code;
	uint32_t fails;	    /* failures ever */
	uint32_t req_fails; /* fails at the last request: a waiter reports any newer one */
	uint32_t spawns, crashes;
	uint32_t unready;   /* processes that ended (or failed to start) before `ready` */
	int was_ready;	    /* the current process said `ready` */
	int last_exit;
	unsigned enforced;
	char cgdir[600];
	int cg_busy; /* cgdir killed, its rmdir still to do */
	char *extra_env; /* mesh_instance_set_env: "K=V" or NULL */
	uint64_t cpu_ns, rss, prev_cpu, prev_at;
	unsigned nprocs; /* processes in its tree at the last sample */
	double cpu_pct;
	uint64_t spawned_at, alive_ns; /* this process's spawn; past processes' lifetimes */
	int ready_told;		       /* on_ready called for this process */
	int last_sig;		       /* the signal that ended its last process (0: none) */
	char limits_note[512];	       /* its last end's "; its limits: ..." (mesh_instance_http) */
	/* An HTTP program (img->m.backend == MESH_BACKEND_HTTP): this spawn's
	 * {port}, and its readiness and liveness (probing.h). */
	int http, port;
	pid_t last_pid; /* the last spawn's, kept after its end */
	struct mesh__probing pr;
	/* mesh_instance_set_notify: the callback, its changes not yet told
	 * (from, to), and its place in the host's list of those to tell. */
	void (*notify)(void *, struct mesh_instance *, enum mesh_istate, enum mesh_istate);
	void *notify_arg;
	uint8_t nq_from[NOTIFY_MAX], nq_to[NOTIFY_MAX];
	unsigned nq;
	int notify_listed;
	struct mesh_instance *notify_next;
};

static void *sampler_main(void *arg);

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
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = id << TAG_BITS | (uint64_t)tag};
	epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void ep_del(struct mesh_host *h, int fd)
{
	epoll_ctl(h->epfd, EPOLL_CTL_DEL, fd, NULL);
}

static void log_line(struct mesh_instance *w, const char *f, ...) __attribute__((format(printf, 2, 3)));
static void log_line(struct mesh_instance *w, const char *f, ...)
{
	if (w->log.fd < 0)
		return;
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	mesh_buf_adds(&b, "[meshd] ");
	va_start(ap, f);
	mesh_buf_vaddf(&b, f, ap);
	va_end(ap);
	mesh_buf_adds(&b, "\n");
	if (b.p)
		mesh__wlog_write(&w->log, b.p, b.len);
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
		mesh__wlog_write(&w->log, buf, (size_t)n);
		mesh_proc_tail_feed(&w->tail, buf, (size_t)n);
	}
}

static void kill_group(struct mesh_instance *w, int sig)
{
	/* Only while the reaped one (the leader, or mesh-init) is not reaped:
	 * its pid cannot have been reused.  SIGKILL also ends the cgroup:
	 * what left the group (setsid) is still in it. */
	if (w->pid > 0)
		mesh_proc_child_kill(&w->child, sig);
	if (sig == SIGKILL && w->cgdir[0])
		mesh_limits_cgroup_kill(w->cgdir);
}

/* A worker's cgroup goes once all of it is gone. */
static void cgroup_done(struct mesh_instance *w)
{
	if (!w->cgdir[0])
		return;
	if (mesh_limits_cgroup_remove(w->cgdir, 1) == -EBUSY) {
		w->cg_busy = 1; /* SIGKILLed, not yet gone: the sampler retries */
		return;
	}
	w->cgdir[0] = 0;
	w->cg_busy = 0;
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

/* An HTTP program's environment: its manifest's [env] first (getenv finds
 * the first), then meshd's. */
static char **http_env(const struct mesh_manifest *m)
{
	size_t n = 0, k = 0;
	while (environ && environ[n])
		n++;
	char **e = calloc(m->nenv + n + 1, sizeof *e);
	for (size_t i = 0; e && i < m->nenv + n; i++)
		if (!(e[k++] = strdup(i < m->nenv ? m->env[i] : environ[i - m->nenv]))) {
			while (k)
				free(e[--k]);
			free(e);
			return NULL;
		}
	return e;
}

/* A native worker's environment: meshd's but its MESH_* names, the host's
 * (MESH_SERVICE_BASE, ...), the manifest's [env], the instance's extra
 * "K=V", its control fd, name and slot, MPS's pipe directory. */
static char **build_env(struct mesh_instance *w)
{
	const struct mesh_host *h = w->h;
	const struct mesh_manifest *m = &w->img->m;
	size_t n = 0, cap = 8;
	if (w->http)
		return http_env(m);
	for (char **e = environ; e && *e; e++)
		cap++;
	for (char *const *e = h->env; e && *e; e++)
		cap++;
	cap += m->nenv;
	char **env = calloc(cap, sizeof *env);
	if (!env)
		return NULL;
	size_t xl = w->extra_env ? strcspn(w->extra_env, "=") + 1 : 0; /* "K=" of the extra one */
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "MESH_", 5) == 0 || strncmp(*e, "CUDA_MPS_PIPE_DIRECTORY=", 24) == 0 ||
		    (xl && strncmp(*e, w->extra_env, xl) == 0))
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
		if (!(xl && strncmp(m->env[i], w->extra_env, xl) == 0) && !(env[n++] = strdup(m->env[i])))
			goto nomem;
	if (w->extra_env && !(env[n++] = strdup(w->extra_env)))
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

/* The armed slot's `run` goes into the worker's channel before the
 * process exists (do_spawn, right after the channel is made): the worker
 * reads it right after its `ready` (a worker reads no command before,
 * docs/worker-protocol.md), maps the slot and takes the chunks waiting
 * there without a round trip through this loop, which sent `run` only once
 * it had read `ready`.  Sent when the spawn returned, it still came after
 * the `ready` in some runs: with a pid namespace the spawn returns once
 * mesh-init says the program is exec'd (the times of both are in
 * docs/worker-protocol.md and docs/jobs.md).  Once the process is up the worker is
 * on the slot (w->slot): a stop or a failure before `ready` leaves it there
 * until the process is gone, so the slot is never handed on while the
 * worker may still map it.  A spawn that fails closes the channel with the
 * `run` unread; a send that fails is tried again when the spawn has
 * returned (send_run_early), then at `ready` (act_run). */
static int run_early_into(struct mesh_instance *w, struct mesh_ctl *ctl)
{
	return w->armed && mesh_ctl_run_armed(ctl, w->armed, w->gen) == 0;
}

/* A free loopback port (bound, read, closed: the program binds it next). */
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

/* What a spawn makes and hands on (do_spawn's steps). */
struct spawn {
	struct mesh_ctl *ctl; /* a native worker's control channel */
	int child_ctl, out[2], procs, port;
	char **argv, **env, *path;
	uint64_t t0;
	struct mesh_proc_child c;
};

/* An HTTP program's command with {port} in place (argv and the resolved
 * path into sp).  0, or a code with *err. */
static int http_command(struct mesh_instance *w, struct spawn *sp, char **err)
{
	const struct mesh_manifest *m = &w->img->m;
	char ps[16];
	int rc = mesh_proc_resolve(m->command[0], &sp->path);
	if (rc) {
		*err = mesh_strf("program '%s' cannot run '%s': %s", w->img->name, m->command[0], mesh_strerror(rc));
		return rc;
	}
	snprintf(ps, sizeof ps, "%d", sp->port);
	if (!(sp->argv = calloc(m->ncommand + 1, sizeof *sp->argv)))
		return -ENOMEM;
	for (size_t i = 0; i < m->ncommand; i++) {
		struct mesh_buf b = MESH_BUF_INIT;
		const char *a = m->command[i], *q;
		while ((q = strstr(a, "{port}"))) {
			mesh_buf_add(&b, a, (size_t)(q - a));
			mesh_buf_adds(&b, ps);
			a = q + 6;
		}
		mesh_buf_adds(&b, a);
		if (!(sp->argv[i] = mesh_buf_detach(&b, NULL))) {
			mesh_buf_release(&b);
			return -ENOMEM;
		}
	}
	return 0;
}

/* A native worker's binary and arguments (argv and path into sp). */
static int native_command(struct mesh_instance *w, struct spawn *sp)
{
	const struct mesh_image *img = w->img;
	if (!(sp->path = strdup(img->bin_path)) || !(sp->argv = calloc(img->m.nargs + 2, sizeof *sp->argv)) ||
	    !(sp->argv[0] = strdup(img->argv0 ? img->argv0 : img->bin_path)))
		return -ENOMEM;
	for (size_t i = 0; i < img->m.nargs; i++)
		if (!(sp->argv[i + 1] = strdup(img->m.args[i])))
			return -ENOMEM;
	return 0;
}

/* Where an HTTP program's probe goes this spawn: the image's addresses, or
 * 127.0.0.1 on the port its command was given. */
static void http_target(struct mesh_instance *w, int port)
{
	const struct mesh_image *img = w->img;
	struct mesh__probing *pr = &w->pr;
	pr->t = img->probe;
	pr->o = (struct mesh_probe_opts)MESH_PROBE_OPTS_INIT;
	pr->o.connect_timeout_ns = 500 * MESH_NS_PER_MS;
	pr->o.model = img->probe_model;
	pr->want_status = img->m.probe_status;
	pr->naddrs = img->naddrs;
	memcpy(pr->addrs, img->addrs, sizeof pr->addrs);
	memcpy(pr->lens, img->lens, sizeof pr->lens);
	if (img->naddrs)
		return;
	struct sockaddr_in *a = (struct sockaddr_in *)&pr->addrs[0];
	memset(a, 0, sizeof *a);
	a->sin_family = AF_INET;
	a->sin_port = htons((uint16_t)port);
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	pr->lens[0] = sizeof *a;
	pr->naddrs = 1;
	snprintf(pr->t.host, sizeof pr->t.host, "127.0.0.1");
	pr->t.port = (uint16_t)port;
}

/* The spawn's makings: its channel (native) or port (HTTP), its output
 * pipe, command, environment and cgroup.  0, or a code with *err. */
static int spawn_prepare(struct mesh_instance *w, struct spawn *sp, char **err)
{
	struct mesh_host *h = w->h;
	const struct mesh_image *img = w->img;
	int rc;
	if (w->http && !img->naddrs && (sp->port = free_port()) < 0) {
		*err = mesh_strf("program '%s': no free loopback port: %s", img->name, mesh_strerror(sp->port));
		return sp->port;
	}
	if (!w->http && (rc = mesh_ctl_pair(&sp->ctl, &sp->child_ctl)))
		return rc;
	if (pipe2(sp->out, O_CLOEXEC) < 0)
		return -errno;
	fcntl(sp->out[0], F_SETFL, O_NONBLOCK);
	if ((rc = w->http ? http_command(w, sp, err) : native_command(w, sp)))
		return rc;
	if (!(sp->env = build_env(w)))
		return -ENOMEM;
	if (!mesh_limits_want_cgroup(img->enforced, h->contain))
		return 0;
	/* meshd's pid in the name: several meshds may share a parent group. */
	char tag[160];
	snprintf(tag, sizeof tag, "%d-%s-%llu-%u", (int)getpid(), img->name, (unsigned long long)w->id, w->spawns);
	rc = mesh_limits_cgroup_create(&h->caps, tag, &img->m.limits, img->enforced, w->cgdir, sizeof w->cgdir,
				       &sp->procs);
	if (rc) {
		*err = mesh_strf("cannot create the cgroup for '%s': %s", img->name, mesh_strerror(rc));
		w->cgdir[0] = 0;
	}
	return rc;
}

/* Why a spawn failed, for *err: a user that cannot reach the program is
 * named (the usual cause: a catalog or command under a directory only
 * meshd's user may enter, /root, a 0700 temp dir). */
static char *spawn_why(struct mesh_instance *w, const struct spawn *sp, const struct mesh_run_as *ra, int rc)
{
	const char *what = w->http ? "the command" : "the binary";
	char *why = rc == -EACCES && ra->set
			    ? mesh_strf("cannot %s '%s': %s as user '%s' (%s): that user must be able to reach %s and "
					"every directory above it",
					w->http ? "run" : "start", sp->path, mesh_strerror(rc), ra->name,
					w->img->m.user ? "the manifest's `user`"
						       : "meshd runs as root and the manifest names no `user`",
					what)
			    : mesh_strf("cannot %s '%s': %s", w->http ? "run" : "start", sp->path, mesh_strerror(rc));
	if (!w->http || !why)
		return why;
	char *p = mesh_strf("program '%s' %s", w->img->name, why);
	free(why);
	return p;
}

/* The process, through proc/: its session (and PID namespace where this
 * host contains with one), cgroup, rlimits, user; output into the pipe. */
static int spawn_run(struct mesh_instance *w, struct spawn *sp, char **err)
{
	struct mesh_host *h = w->h;
	const struct mesh_image *img = w->img;
	struct mesh_proc_fd map[1] = {{sp->child_ctl, CHILD_CTL_FD}};
	struct mesh_proc_rlimit rl[MESH_PROC_RLIMITS_MAX];
	struct mesh_proc_opts o = MESH_PROC_OPTS_INIT;
	o.path = sp->path, o.argv = sp->argv, o.envp = sp->env, o.out_fd = sp->out[1];
	o.fds = w->http ? NULL : map, o.nfds = w->http ? 0 : 1;
	o.rlimits = rl, o.nrlimits = mesh_limits_rlimits(&img->m.limits, img->enforced, rl);
	o.cgroup_procs_fd = sp->procs, o.flags = MESH_PROC_SESSION;
	if (h->contain & MESH_CONTAIN_PIDNS)
		o.flags |= MESH_PROC_PIDNS;
	const struct mesh_run_as *ra = mesh_host_run_as(h, img);
	if (ra->set) {
		o.flags |= MESH_PROC_SETUID;
		o.uid = ra->uid, o.gid = ra->gid, o.groups = ra->groups, o.ngroups = ra->ngroups;
	}
	int rc = mesh_proc_spawn_child(h->sp, &o, 1, &sp->c);
	if (rc)
		*err = spawn_why(w, sp, ra, rc);
	return rc;
}

/* Its log, opened once the process runs (its output waits in the pipe),
 * off the cold start's path (docs/host.md, "Spawning", has why).  Without
 * its log the process is not kept: SIGKILLed and reaped here. */
static int spawn_log(struct mesh_instance *w, struct spawn *sp, char **err)
{
	const struct mesh_image *img = w->img;
	int rc = img->log_path ? mesh__wlog_open_path(&w->log, img->log_path, w->h->log_max, err)
			       : mesh__wlog_open(&w->log, w->h->logs, img->name, w->h->log_max, err);
	if (rc == 0)
		return 0;
	siginfo_t si;
	mesh_proc_child_kill(&sp->c, SIGKILL);
	while (waitid((idtype_t)P_PIDFD, (id_t)sp->c.pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
	close(sp->c.pidfd);
	return rc;
}

/* The spawned process is the instance's: its fds in the loop, its log's
 * first line, an HTTP program's start's wait begun. */
static void spawn_adopt(struct mesh_instance *w, struct spawn *sp)
{
	struct mesh_host *h = w->h;
	w->pid = sp->c.pid;
	w->child = sp->c;
	w->pidfd = sp->c.pidfd;
	pthread_cond_signal(&h->sampler_cv); /* its first sample a period from now */
	w->outfd = sp->out[0];
	sp->out[0] = -1;
	w->ctl = sp->ctl;
	sp->ctl = NULL;
	w->port = sp->port;
	w->last_pid = sp->c.pid;
	w->exit_requested = w->was_ready = w->ready_told = 0;
	w->closed_deadline = 0;
	free(w->fail_reason);
	w->fail_reason = NULL;
	mesh_proc_tail_reset(&w->tail);
	w->spawns++;
	if (!w->http)
		h->spawns++; /* the host's totals are its workers' (the gateway counts its programs') */
	w->enforced = w->img->enforced;
	w->spawned_at = sp->t0;
	w->prev_cpu = 0;
	w->prev_at = mesh_mono_ns();
	w->cpu_pct = 0;
	w->cpu_ns = w->rss = 0;
	w->nprocs = 0;
	if (w->ctl)
		ep_add(h, mesh_ctl_fd(w->ctl), w->id, TAG_CTL);
	ep_add(h, w->pidfd, w->id, TAG_PID);
	ep_add(h, w->outfd, w->id, TAG_OUT);
	if (w->http) {
		http_target(w, sp->port);
		mesh__probing_start(&w->pr, sp->t0, mesh_mono_ns());
	}
	char port[32] = "";
	if (sp->port)
		snprintf(port, sizeof port, " on port %d", sp->port);
	if (sp->c.how == MESH_PROC_HOW_PIDNS)
		log_line(w, "started pid %d%s (in a pid namespace under mesh-init, pid %d)", (int)sp->c.pid, port,
			 (int)sp->c.init);
	else
		log_line(w, "started pid %d%s", (int)sp->c.pid, port);
}

static void spawn_release(struct spawn *sp)
{
	int fds[] = {sp->child_ctl, sp->out[0], sp->out[1], sp->procs};
	for (size_t i = 0; i < sizeof fds / sizeof *fds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	mesh_ctl_free(sp->ctl);
	free_strv(sp->argv);
	free_strv(sp->env);
	free(sp->path);
}

/* 0, or a code with *err (malloc'd) saying why. */
static int do_spawn(struct mesh_instance *w, char **err)
{
	/* The cold start counts from here, its setup (cgroup, pipes) included:
	 * with a pid namespace the spawn returns only once mesh-init has
	 * re-executed itself, by which time the program may have said `ready`
	 * already. */
	struct spawn sp = {.child_ctl = -1, .out = {-1, -1}, .procs = -1, .t0 = mesh_mono_ns()};
	char *why = NULL;
	int rc, early = 0;
	if (w->cg_busy)
		cgroup_done(w);
	if (w->cg_busy) {
		*err = mesh_strf("cannot start '%s': its last processes are still on their way out", w->img->name);
		return -EBUSY;
	}
	w->cgdir[0] = 0;
	rc = spawn_prepare(w, &sp, &why);
	if (rc == 0 && sp.ctl)
		early = run_early_into(w, sp.ctl);
	if (rc == 0)
		rc = spawn_run(w, &sp, &why);
	close(sp.out[1]);
	sp.out[1] = -1;
	if (rc == 0)
		rc = spawn_log(w, &sp, &why);
	if (rc) {
		if (w->cgdir[0])
			mesh_limits_cgroup_remove(w->cgdir, 1);
		w->cgdir[0] = 0;
		spawn_release(&sp);
		*err = why ? why : mesh_strf("cannot start '%s': %s", w->img->name, mesh_strerror(rc));
		return rc;
	}
	spawn_adopt(w, &sp);
	w->run_early = early;
	if (early)
		w->slot = w->armed;
	spawn_release(&sp);
	return 0;
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

/* No launch pending any more (a stop, a failure, a reap); a slot whose
 * `run` went out early stays w->slot until the process is gone. */
static void forget_pending(struct mesh_instance *w)
{
	w->pending = w->armed = NULL;
	w->run_early = 0;
}

/* "; its limits: ..." for a report of its end, when [limits] were in force
 * (an end by going over one reads as a crash: the reason is near), after
 * "; the kernel's OOM killer ended it: ..." when its cgroup says so; ""
 * else.  Before its cgroup goes. */
static void limits_note(struct mesh_instance *w)
{
	const struct mesh_limits *l = &w->img->m.limits;
	char how[256], oom[128] = "";
	w->limits_note[0] = 0;
	if (!w->enforced)
		return;
	if (w->cgdir[0] && (w->enforced & MESH_LIM_MEMORY_CGROUP)) {
		char path[700], *ev = NULL;
		size_t n = 0;
		snprintf(path, sizeof path, "%s/memory.events", w->cgdir);
		const char *k = mesh_read_file(path, 1 << 16, &ev, &n) == 0 ? strstr(ev, "oom_kill ") : NULL;
		if (k && strtoull(k + 9, NULL, 10) > 0)
			snprintf(oom, sizeof oom, "; the kernel's OOM killer ended it: over limits.memory");
		free(ev);
	}
	mesh_limits_describe(w->enforced, how, sizeof how);
	snprintf(w->limits_note, sizeof w->limits_note,
		 "%s; its limits: memory=%llu open_files=%llu processes=%llu cpu=%u.%03u (%s)", oom,
		 (unsigned long long)l->memory, (unsigned long long)l->open_files, (unsigned long long)l->processes,
		 l->cpu_milli / 1000, l->cpu_milli % 1000, how);
}

/* Reaps the ended process (its output read first: a child of it may still
 * hold the pipe, so what is there, not its end), SIGKILLs what is left of
 * its group, closes its fds; its exit status, and *sig the signal. */
static int reap_process(struct mesh_instance *w, int *sig)
{
	struct mesh_host *h = w->h;
	siginfo_t si;
	memset(&si, 0, sizeof si);
	drain(w);
	kill_group(w, SIGKILL);
	int r;
	do
		r = waitid((idtype_t)P_PIDFD, (id_t)w->pidfd, &si, WEXITED);
	while (r < 0 && errno == EINTR);
	*sig = 0;
	int status = r == 0 ? mesh_proc_child_exit_code(&w->child, &si, sig) : 255;
	ep_del(h, w->pidfd);
	close(w->pidfd);
	w->pidfd = -1;
	close_ctl(w);
	if (w->http)
		mesh__probing_close(&w->pr);
	drain(w);
	if (w->outfd >= 0) {
		ep_del(h, w->outfd);
		close(w->outfd);
		w->outfd = -1;
	}
	if (*sig)
		log_line(w, "pid %d exited with status %d (signal %s)", (int)w->pid, status, signame(*sig));
	else
		log_line(w, "pid %d exited with status %d", (int)w->pid, status);
	return status;
}

/* The exception line of the last Python traceback in tail ("ValueError:
 * empty request"): into out, or NULL when tail has none. */
static const char *py_exception(const char *tail, char *out, size_t cap)
{
	const char *tb = NULL, *line = NULL;
	for (const char *p = tail; p && (p = strstr(p, "Traceback (most recent call last):")); p++)
		tb = p;
	if (!tb)
		return NULL;
	/* The last line after it that is not indented: the exception. */
	for (const char *p = strchr(tb, '\n'); p && p[1]; p = strchr(p + 1, '\n'))
		if (p[1] != ' ' && p[1] != '\t' && p[1] != '\n')
			line = p + 1;
	if (!line)
		return NULL;
	size_t n = strcspn(line, "\n");
	snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), line);
	return out;
}

/* A native worker's report of an end nobody asked for, or of a failure. */
static void native_report(struct mesh_instance *w, struct mesh_buf *b, enum mesh_istate was, int status, int sig,
			  const char *tail)
{
	const char *name = w->img->name,
		   *when = was == MESH_IS_STARTING ? "before ready" : w->slot ? "while running" : "while idle";
	char exc[256];
	if (w->fail_reason)
		mesh_buf_addf(b, "worker '%s' (pid %d) failed: %s; exit status %d", name, (int)w->pid, w->fail_reason,
			      status);
	else if (!status && !sig)
		/* Not a crash: it ended on its own (a program that is not a
		 * mesh worker, or one that returned from its serve loop). */
		mesh_buf_addf(b, "worker '%s' (pid %d) exited %s with status 0 without being asked to: %s", name,
			      (int)w->pid, when,
			      was == MESH_IS_STARTING ? "it never said ready (a mesh worker calls mesh_worker_ready: is it one?)"
						      : "a worker serves until meshd tells it to exit");
	else
		mesh_buf_addf(b, "worker '%s' (pid %d) crashed %s: exit status %d", name, (int)w->pid, when, status);
	if (sig)
		mesh_buf_addf(b, " (killed by SIG%s)", signame(sig));
	if (status && py_exception(tail, exc, sizeof exc))
		mesh_buf_addf(b, " (Python: %s)", exc);
	mesh_buf_addf(b, "\n--- last %u lines of output ---\n%s", MESH_TAIL_LINES, tail ? tail : "");
}

/* An HTTP program's (docs/gateway.md's words: the gateway answers with it). */
static void http_report(struct mesh_instance *w, struct mesh_buf *b, enum mesh_istate was, int status,
			const char *tail)
{
	const char *name = w->img->name;
	if (w->fail_reason)
		mesh_buf_addf(b, "program '%s' %s", name, w->fail_reason);
	else if (was == MESH_IS_PROBING)
		mesh_buf_addf(b, "program '%s' exited with status %d before it was warm (last probe: %s)%s", name, status,
			      w->pr.last, w->limits_note);
	else
		mesh_buf_addf(b, "program '%s' exited with status %d while warm%s", name, status, w->limits_note);
	if (tail && *tail)
		mesh_buf_addf(b, "; its last lines:\n%s", tail);
}

/* The process ended: reap it, keep its last words, report it. */
static void do_reap(struct mesh_instance *w, enum mesh_istate was)
{
	struct mesh_host *h = w->h;
	int sig;
	int status = reap_process(w, &sig);
	w->last_exit = status;
	w->last_sig = sig;
	limits_note(w);
	char *tail = mesh_proc_tail_text(&w->tail);
	struct mesh_buf b = MESH_BUF_INIT;
	/* A death before `ready` that nobody asked for: the core's crash-loop
	 * backoff counts these. */
	if (!w->was_ready && (!w->exit_requested || w->fail_reason))
		w->unready++;
	if (!w->exit_requested || w->fail_reason) {
		if (w->http)
			http_report(w, &b, was, status, tail);
		else
			native_report(w, &b, was, status, sig, tail);
		if (!w->fail_reason) {
			w->crashes++;
			if (!w->http)
				h->crashes++;
		}
		int code = w->fail_reason ? w->fail_code : MESH_E_CRASHED;
		if (w->slot) {
			if (!mesh_slot_failed(w->slot))
				mesh_slot_fail(w->slot, "worker '%s' %s: exit status %d", w->img->name,
					       w->fail_reason ? "failed" : "crashed", status);
			w->failed_slot = w->slot;
		}
		new_failure(w, code, b.p ? mesh_buf_detach(&b, NULL) : NULL);
	}
	mesh_buf_release(&b);
	free(tail);
	w->slot = NULL;
	forget_pending(w);
	w->pid = 0;
	w->alive_ns += mesh_mono_ns() - w->spawned_at;
	w->deadline = w->closed_deadline = 0;
	mesh__wlog_close(&w->log);
	cgroup_done(w);
	w->cpu_pct = 0;
}

struct evarg {
	struct mesh_slot *slot; /* LAUNCH */
	void (*armed)(void *);	/* LAUNCH: told once slot is armed (mesh_instance_launch_armed) */
	void *armed_arg;
	uint32_t gen;		/* ONLINE, STALE, HALTED */
	const char *text;	/* REJECTED, STALE, REFUSED, BROKEN, UNSTARTED: why */
	int code;		/* UNSTARTED: the spawn's error */
};

/* What an action leaves for the dispatcher: the requester's code, and at
 * most one event it raises (MESH_EV__N: none). */
struct outcome {
	int rc;
	enum mesh_ievent raise;
	struct evarg arg;
	char text[1024];
};

static void raise_ev(struct outcome *o, enum mesh_ievent ev)
{
	o->raise = ev;
}

static void raise_text(struct outcome *o, enum mesh_ievent ev, const char *f, ...) __attribute__((format(printf, 3, 4)));
static void raise_text(struct outcome *o, enum mesh_ievent ev, const char *f, ...)
{
	va_list ap;
	va_start(ap, f);
	vsnprintf(o->text, sizeof o->text, f, ap);
	va_end(ap);
	o->raise = ev;
	o->arg.text = o->text;
}

/* The generation of the instance's next run (never 0). */
static void next_gen(struct mesh_instance *w)
{
	w->gen++;
	if (w->gen == 0)
		w->gen = 1;
}

/* A slot given with a launch is armed at once, for the generation its
 * `run` will name: a job queues its first chunks there while the worker
 * starts, and the worker's first read after `run` finds them (`run`, at
 * `ready`, then arms nothing: act_run). */
static void arm_pending(struct mesh_instance *w, const struct evarg *a)
{
	w->armed = NULL;
	if (!w->pending)
		return;
	next_gen(w);
	mesh_slot_arm(w->pending, w->gen);
	w->armed = w->pending;
	if (a->armed)
		a->armed(a->armed_arg); /* mesh_instance_launch_armed's caller */
}

static void send_run_early(struct mesh_instance *w)
{
	if (!w->ctl || w->run_early || !run_early_into(w, w->ctl))
		return;
	w->run_early = 1;
	w->slot = w->armed;
}

/* An event the state does not take: the requester's MESH_E_STATE. */
static void act_deny(struct mesh_instance *w, enum mesh_istate was, enum mesh_ievent ev, char **err, struct outcome *o)
{
	if (err)
		*err = mesh_strf("'%s' cannot %s while %s", w->img->name, mesh_ievent_name(ev), mesh_istate_name(was));
	o->rc = MESH_E_STATE;
}

static void act_spawn(struct mesh_instance *w, enum mesh_ievent ev, const struct evarg *a, char **err,
		      struct outcome *o)
{
	char *why = NULL;
	w->pending = ev == MESH_EV_LAUNCH ? a->slot : NULL;
	arm_pending(w, a);
	int rc = do_spawn(w, &why);
	if (rc) {
		o->rc = rc;
		o->arg.code = rc;
		raise_text(o, MESH_EV_UNSTARTED, "%s", why ? why : mesh_strerror(rc));
		if (err)
			*err = why;
		else
			free(why);
		return;
	}
	w->deadline = mesh_mono_ns() + (w->http ? w->img->m.start_timeout_ns : ready_ns(w));
	send_run_early(w);
}

/* A spawn that failed (UNSTARTED, a->code and a->text): its launch is
 * dropped and the failure kept as the instance's last. */
static void act_abort(struct mesh_instance *w, const struct evarg *a)
{
	forget_pending(w);
	w->deadline = 0;
	w->unready++;
	new_failure(w, a->code, strdup(a->text ? a->text : mesh_strerror(a->code)));
}

/* A launch for a starting instance: its slot is armed and, where the
 * channel is up, its `run` sent before `ready`.  Once a `run` is out,
 * only the same slot is taken (another: MESH_E_STATE). */
static void act_pend(struct mesh_instance *w, const struct evarg *a, char **err, struct outcome *o)
{
	if (w->run_early) {
		/* Its `run` is out: it cannot be sent elsewhere. */
		if (a->slot != w->slot) {
			if (err)
				*err = mesh_strf("'%s' is starting for another slot", w->img->name);
			o->rc = MESH_E_STATE;
		}
		return;
	}
	w->pending = a->slot;
	arm_pending(w, a);
	send_run_early(w);
}

/* A launch withdrawn while the instance starts: forgotten, or, once its
 * `run` is out, the instance is broken. */
static void act_unpend(struct mesh_instance *w, struct outcome *o)
{
	if (w->run_early) {
		/* Its `run` cannot be taken back: the worker would map
		 * the slot after its `ready`.  Not done by meshd today. */
		raise_text(o, MESH_EV_BROKEN, "its launch was withdrawn after its run was sent");
		return;
	}
	forget_pending(w);
}

static void http_fill(const struct mesh_instance *w, struct mesh_instance_http *out);

static void act_ready(struct mesh_instance *w, struct outcome *o)
{
	w->deadline = 0;
	if (w->http) {
		/* Warm: from here its probe, with an interval, is the periodic one. */
		struct mesh_instance_http hi;
		char wait[400];
		w->was_ready = 1;
		http_fill(w, &hi);
		mesh_instance_http_wait_text(&hi, wait, sizeof wait);
		log_line(w, "warm pid %d in %.1f ms (%s; waited with %s)", (int)w->pid,
			 (double)(mesh_mono_ns() - w->spawned_at) / 1e6, w->pr.last, wait);
		return;
	}
	if (w->h->on_ready && !w->ready_told)
		w->h->on_ready(w->h->on_ready_ctx, w->img, mesh_mono_ns() - w->spawned_at);
	w->ready_told = 1;
	w->was_ready = 1;
	if (w->pending) {
		o->arg.slot = w->pending;
		w->pending = NULL; /* armed stays: act_run sends its `run` */
		raise_ev(o, MESH_EV_LAUNCH);
	}
}

static void act_run(struct mesh_instance *w, const struct evarg *a, char **err, struct outcome *o)
{
	int armed = w->armed && w->armed == a->slot, sent = armed && w->run_early;
	w->armed = NULL;
	w->run_early = 0;
	if (!armed)
		next_gen(w);
	int rc = sent ? 0 : armed ? mesh_ctl_run_armed(w->ctl, a->slot, w->gen) : mesh_ctl_run(w->ctl, a->slot, w->gen);
	if (rc) {
		if (err)
			*err = mesh_strf("cannot send run to '%s': %s", w->img->name, mesh_strerror(rc));
		o->rc = rc;
		raise_text(o, MESH_EV_BROKEN, "cannot send run: %s", mesh_strerror(rc));
		return;
	}
	w->slot = a->slot;
	w->deadline = mesh_mono_ns() + online_ns(w);
}

static void act_stop(struct mesh_instance *w, struct outcome *o)
{
	struct mesh_host *h = w->h;
	uint64_t grace = w->img->m.stop_grace_ns;
	w->exit_requested = 1;
	forget_pending(w);
	if (w->http)
		mesh__probing_close(&w->pr); /* an idle connection must not hold up its graceful stop */
	if (w->img->m.device == MESH_DEVICE_GPU && h->gpu == MESH_GPU_MPS && h->stop_gpu_client) {
		char *e = NULL;
		if (h->stop_gpu_client(h->gpu_ctx, w->pid, &e) != 0)
			log_line(w, "MPS terminate_client of pid %d failed: %s", (int)w->pid, e ? e : "?");
		free(e);
	}
	w->stop_start = mesh_mono_ns();
	int sent = w->ctl && mesh_ctl_exit(w->ctl, w->slot) == 0;
	if (!sent || grace == 0) {
		/* No channel to ask through, or no time to wait: on at once. */
		w->deadline = 0;
		raise_ev(o, MESH_EV_TIMEOUT);
		return;
	}
	w->deadline = w->stop_start + grace / 2;
}

static void act_term(struct mesh_instance *w, struct outcome *o)
{
	uint64_t grace = w->img->m.stop_grace_ns;
	if (grace == 0) {
		/* A grace of 0 is SIGKILL at once: no stop signal before it. */
		w->deadline = 0;
		raise_ev(o, MESH_EV_TIMEOUT);
		return;
	}
	kill_group(w, w->img->m.stop_signal);
	w->deadline = w->stop_start + grace;
}

static void act_fail(struct mesh_instance *w, enum mesh_istate was, enum mesh_ievent ev, const struct evarg *a)
{
	int code = ev == MESH_EV_TIMEOUT || ev == MESH_EV_HUNG ? MESH_E_TIMEOUT
		   : ev == MESH_EV_REJECTED			 ? MESH_E_REFUSED
								 : MESH_E_PROTO;
	char *why;
	if (ev == MESH_EV_TIMEOUT) {
		uint64_t lim = was == MESH_IS_STARTING ? ready_ns(w) : online_ns(w);
		why = mesh_strf("no '%s' within %llu ms",
				was == MESH_IS_STARTING ? "ready" : was == MESH_IS_LAUNCHING ? "online" : "halted",
				(unsigned long long)(lim / MESH_NS_PER_MS));
	} else if (ev == MESH_EV_BROKEN || ev == MESH_EV_REJECTED || ev == MESH_EV_STALE || ev == MESH_EV_HUNG) {
		why = mesh_strf("%s", a->text ? a->text : "protocol violation");
	} else {
		why = mesh_strf("unexpected '%s' while %s%s%s", mesh_ievent_name(ev), mesh_istate_name(was),
				a->text ? ": " : "", a->text ? a->text : "");
	}
	free(w->fail_reason);
	w->fail_reason = why ? why : strdup("failed");
	w->fail_code = code;
	w->exit_requested = 1;
	forget_pending(w);
	if (w->http) {
		mesh__probing_close(&w->pr);
		log_line(w, "failed: %s", w->fail_reason ? w->fail_reason : "?");
	}
	kill_group(w, SIGKILL);
	w->deadline = 0;
	if (w->slot && !mesh_slot_failed(w->slot))
		mesh_slot_fail(w->slot, "worker '%s' failed: %s", w->img->name, w->fail_reason ? w->fail_reason : "?");
}

/* An HTTP program's start or warm probe: a step (its socket's event, or
 * its time); the start's raises ready once its probe passed, the warm
 * one's hung after the failures in a row. */
static void act_probe(struct mesh_instance *w, struct outcome *o)
{
	int rc = mesh__probing_step(&w->pr, mesh_mono_ns());
	if (rc == MESH__PROBING_WARM)
		raise_ev(o, MESH_EV_READY);
	else if (rc == MESH__PROBING_HUNG)
		raise_text(o, MESH_EV_HUNG, "hung: %u probes in a row failed (last: %s)", w->pr.fails, w->pr.last);
}

/* Not warm by its start deadline: that is its failure (the waiters' 504,
 * the report), then it is stopped as an exit would (stop signal, grace,
 * SIGKILL): a loading model server is let go gracefully. */
static void act_expire(struct mesh_instance *w, struct outcome *o)
{
	free(w->fail_reason);
	w->fail_reason = mesh_strf("was not warm within %.1f s (last probe: %s)",
				   (double)w->img->m.start_timeout_ns / 1e9, w->pr.last);
	w->fail_code = MESH_E_TIMEOUT;
	log_line(w, "%s", w->fail_reason ? w->fail_reason : "start timeout");
	act_stop(w, o);
}

/* Runs one action; what it raises is in *o.  h->mu held. */
static void act(struct mesh_instance *w, enum mesh_iaction action, enum mesh_istate was, enum mesh_ievent ev,
		const struct evarg *a, char **err, struct outcome *o)
{
	switch (action) {
	case MESH_A_NOP:
	case MESH_A__N:
		break;
	case MESH_A_DENY:
		act_deny(w, was, ev, err, o);
		break;
	case MESH_A_SPAWN:
		act_spawn(w, ev, a, err, o);
		break;
	case MESH_A_ABORT:
		act_abort(w, a);
		break;
	case MESH_A_PEND:
		act_pend(w, a, err, o);
		break;
	case MESH_A_UNPEND:
		act_unpend(w, o);
		break;
	case MESH_A_READY:
		act_ready(w, o);
		break;
	case MESH_A_RUN:
		act_run(w, a, err, o);
		break;
	case MESH_A_ONLINE:
		w->deadline = 0;
		break;
	case MESH_A_HALT:
		mesh_ctl_halt(w->ctl, w->slot);
		w->deadline = mesh_mono_ns() + online_ns(w);
		break;
	case MESH_A_HALTED:
		w->slot = NULL;
		w->deadline = 0;
		break;
	case MESH_A_REFUSE:
		new_failure(w, MESH_E_REFUSED, mesh_strf("worker '%s' refused run: %s", w->img->name, a->text ? a->text : "?"));
		w->slot = NULL;
		w->deadline = 0;
		break;
	case MESH_A_STOP:
		act_stop(w, o);
		break;
	case MESH_A_TERM:
		act_term(w, o);
		break;
	case MESH_A_KILL:
		kill_group(w, SIGKILL);
		w->deadline = 0;
		break;
	case MESH_A_FAIL:
		act_fail(w, was, ev, a);
		break;
	case MESH_A_HANGUP:
		/* A worker that exits closes the channel just before its pidfd
		 * fires: give it a moment to die before calling it broken. */
		close_ctl(w);
		w->closed_deadline = mesh_mono_ns() + CLOSED_GRACE_NS;
		break;
	case MESH_A_REAP:
		do_reap(w, was);
		break;
	case MESH_A_PROBE:
	case MESH_A_CHECK:
		act_probe(w, o);
		break;
	case MESH_A_EXPIRE:
		act_expire(w, o);
		break;
	}
}

/* Keeps a change of w's state for its notify callback (notify_flush).
 * h->mu held. */
static void notify_note(struct mesh_instance *w, enum mesh_istate from, enum mesh_istate to)
{
	struct mesh_host *h = w->h;
	if (!w->notify)
		return;
	if (w->nq == NOTIFY_MAX) {
		/* Never seen (a flush follows each dispatch): the last change
		 * goes on to the newest state. */
		w->nq_to[w->nq - 1] = (uint8_t)to;
	} else {
		w->nq_from[w->nq] = (uint8_t)from;
		w->nq_to[w->nq++] = (uint8_t)to;
	}
	if (w->notify_listed)
		return;
	w->notify_listed = 1;
	w->notify_next = NULL;
	if (h->notify_tail)
		h->notify_tail->notify_next = w;
	else
		h->notify_head = w;
	h->notify_tail = w;
}

/* The dispatcher: the cell's action, then the cell's next state; an event
 * the action raised is dispatched the same way from there.  Returns the
 * first non-zero code an action left for the requester.  h->mu held. */
static int fire(struct mesh_instance *w, enum mesh_ievent ev, const struct evarg *a, char **err)
{
	static const struct evarg none;
	enum mesh_istate was = w->state;
	struct mesh_transition t = mesh_lifecycle[was][ev];
	struct outcome o = {.raise = MESH_EV__N};
	act(w, t.action, was, ev, a ? a : &none, err, &o);
	w->state = t.next;
	/* An HTTP program's probe steps (thousands a second in a start's
	 * first moments) count only when they move it. */
	if (t.next != was || ev != MESH_EV_PROBE)
		w->h->fired++;
	if (t.next != was)
		notify_note(w, was, t.next);
	if (o.raise == MESH_EV__N)
		return o.rc;
	int rc = fire(w, o.raise, &o.arg, err);
	return o.rc ? o.rc : rc;
}

/* Calls the notify callbacks of the changes kept, in order, with h->mu
 * not held; one thread at a time (another that finds one at it leaves its
 * changes to it).  h->mu not held on entry. */
static void notify_flush(struct mesh_host *h)
{
	pthread_mutex_lock(&h->mu);
	if (h->notifying) {
		pthread_mutex_unlock(&h->mu);
		return;
	}
	h->notifying = 1;
	while (h->notify_head) {
		struct mesh_instance *w = h->notify_head;
		uint8_t from[NOTIFY_MAX], to[NOTIFY_MAX];
		unsigned n = w->nq;
		h->notify_head = w->notify_next;
		if (!h->notify_head)
			h->notify_tail = NULL;
		w->notify_listed = 0;
		memcpy(from, w->nq_from, n);
		memcpy(to, w->nq_to, n);
		w->nq = 0;
		void (*fn)(void *, struct mesh_instance *, enum mesh_istate, enum mesh_istate) = w->notify;
		void *arg = w->notify_arg;
		h->telling = w;
		pthread_mutex_unlock(&h->mu);
		for (unsigned i = 0; fn && i < n; i++)
			fn(arg, w, (enum mesh_istate)from[i], (enum mesh_istate)to[i]);
		pthread_mutex_lock(&h->mu);
		h->telling = NULL;
		pthread_cond_broadcast(&h->cv);
	}
	h->notifying = 0;
	pthread_mutex_unlock(&h->mu);
}

static void wake_all(struct mesh_host *h)
{
	pthread_cond_broadcast(&h->cv);
}

/* The host's lock and its conditions (waits on them time out by the
 * monotonic clock). */
static void sync_init(struct mesh_host *h)
{
	pthread_mutex_init(&h->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&h->cv, &ca);
	pthread_cond_init(&h->sampler_cv, &ca);
	pthread_condattr_destroy(&ca);
}

/* What this machine can contain workers with, less what cfg turns off
 * (said in caps.contain_why); that is what workers get. */
static void detect_caps(struct mesh_host *h, const struct mesh_host_cfg *cfg)
{
	mesh_limits_detect(&h->caps, cfg->limits_proc_root);
	if (h->caps.contain & cfg->contain_off) {
		h->caps.contain &= ~cfg->contain_off;
		snprintf(h->caps.contain_why, sizeof h->caps.contain_why, "%s turned off", cfg->contain_off & MESH_CONTAIN_PIDNS ?
			 (cfg->contain_off & MESH_CONTAIN_CGROUP ? "pid namespace and cgroup" : "pid namespace") : "cgroup");
	}
	h->contain = h->caps.contain;
}

/* Starts the spawner and the sampler thread.  Returns 0, or a negative
 * code with *err set (when err) and neither running. */
static int start_threads(struct mesh_host *h, char **err)
{
	int rc;
	if ((rc = mesh_proc_spawner_new(&h->sp))) {
		if (err)
			*err = mesh_strf("cannot start the spawner thread: %s", mesh_strerror(rc));
		return rc;
	}
	if ((rc = mesh_thread_start(&h->sampler, sampler_main, h))) {
		if (err)
			*err = mesh_strf("cannot start the sampler thread: %s", mesh_strerror(rc));
		mesh_proc_spawner_free(h->sp);
	}
	return rc;
}

/* Frees h and what it holds, its threads stopped (or never started) and
 * its instances gone: what mesh_host_new failed after and what
 * mesh_host_free ends with. */
static void free_host(struct mesh_host *h)
{
	if (h->epfd >= 0)
		close(h->epfd);
	if (h->wakefd >= 0)
		close(h->wakefd);
	free_strv(h->env);
	free(h->logs);
	free(h->mps_dir);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->cv);
	pthread_cond_destroy(&h->sampler_cv);
	free(h);
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
	sync_init(h);
	h->next_id = 1;
	if (access(cfg->logs, W_OK | X_OK) != 0) {
		rc = -errno;
		if (err)
			*err = mesh_strf("cannot use logs directory '%s': %s", cfg->logs, strerror(errno));
		goto bad;
	}
	h->log_max = cfg->log_max ? cfg->log_max : MESH_HOST_LOG_MAX;
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
	h->on_ready = cfg->on_ready;
	h->on_ready_ctx = cfg->on_ready_ctx;
	detect_caps(h, cfg);
	if (cfg->default_user && (rc = mesh_limits_run_as(cfg->default_user, &h->def_user, err)))
		goto bad;
	h->epfd = epoll_create1(EPOLL_CLOEXEC);
	h->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (h->epfd < 0 || h->wakefd < 0) {
		rc = -errno;
		goto bad;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};
	if (epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->wakefd, &ev) < 0) {
		rc = -errno; /* a loop that could never be woken */
		goto bad;
	}
	if ((rc = start_threads(h, err)))
		goto bad;
	*out = h;
	return 0;
bad:
	free_host(h);
	return rc;
}

const struct mesh_limits_caps *mesh_host_caps(const struct mesh_host *h)
{
	return &h->caps;
}

const struct mesh_run_as *mesh_host_run_as(const struct mesh_host *h, const struct mesh_image *img)
{
	return img->m.user ? &img->run_as : &h->def_user;
}

void mesh_host_wake(struct mesh_host *h)
{
	mesh_efd_ring(h->wakefd);
}

static struct mesh_instance *by_id(struct mesh_host *h, uint64_t id)
{
	for (struct mesh_instance *w = h->list; w; w = w->next)
		if (w->id == id)
			return w;
	return NULL;
}

/* Under MPS, a GPU worker's `ready` counts only from a client of meshd's
 * MPS server; 1 (with why) when it is not one. */
static int mps_rejects(struct mesh_instance *w, char *why, size_t cap)
{
	struct mesh_host *h = w->h;
	if (w->img->m.device != MESH_DEVICE_GPU || h->gpu != MESH_GPU_MPS || !h->check_gpu_client)
		return 0;
	char *e = NULL;
	int bad = h->check_gpu_client(h->gpu_ctx, w->pid, &e) != 0;
	if (bad)
		snprintf(why, cap, "not a client of meshd's MPS server: %s", e ? e : "?");
	free(e);
	return bad;
}

/* The table's event for a control message (a->text may point into why). */
static enum mesh_ievent classify(struct mesh_instance *w, const struct mesh_ctl_msg *m, struct evarg *a, char *why,
				 size_t cap)
{
	switch (m->kind) {
	case MESH_CTL_READY:
		if (!mps_rejects(w, why, cap))
			return MESH_EV_READY;
		a->text = why;
		return MESH_EV_REJECTED;
	case MESH_CTL_ONLINE:
		if (m->gen == w->gen)
			return MESH_EV_ONLINE;
		snprintf(why, cap, "online for gen %u, expected %u", m->gen, w->gen);
		a->text = why;
		return MESH_EV_STALE;
	case MESH_CTL_HALTED:
		return MESH_EV_HALTED;
	default:
		return MESH_EV_REFUSED;
	}
}

static void on_ctl(struct mesh_instance *w)
{
	struct mesh_ctl_msg m;
	char why[MESH_CTL_MAX + 128];
	while (w->ctl) {
		memset(&m, 0, sizeof m);
		int rc = mesh_ctl_recv(w->ctl, &m);
		if (rc == -EAGAIN || rc == -EINTR)
			return;
		if (rc == MESH_E_CLOSED) {
			fire(w, MESH_EV_CLOSED, NULL, NULL);
			return;
		}
		struct evarg a = {.gen = m.gen, .text = m.text};
		if (rc) {
			snprintf(why, sizeof why, "protocol violation: %s", m.text[0] ? m.text : mesh_strerror(rc));
			a.text = why;
			fire(w, MESH_EV_BROKEN, &a, NULL);
			return;
		}
		fire(w, classify(w, &m, &a, why, sizeof why), &a, NULL);
	}
}

/* Applies a read of /proc made at `at` to the instances: cpu and memory
 * of each worker's whole tree (its namespace, or its group and session).
 * A process started since the read is not in it and keeps its figures.
 * h->mu held. */
static void sample_apply(struct mesh_host *h, const struct mesh_proc_table *t, uint64_t at)
{
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		struct mesh_proc_usage u;
		if (w->pid <= 0 || mesh_proc_table_sum(t, &w->child, &u) != 0)
			continue;
		if (at > w->prev_at && u.cpu_ns >= w->prev_cpu)
			w->cpu_pct = (double)(u.cpu_ns - w->prev_cpu) * 100.0 / (double)(at - w->prev_at);
		w->prev_cpu = u.cpu_ns;
		w->prev_at = at;
		w->cpu_ns = u.cpu_ns;
		w->rss = u.rss;
		w->nprocs = u.procs;
	}
}

static int any_process(const struct mesh_host *h)
{
	for (const struct mesh_instance *w = h->list; w; w = w->next)
		if (w->pid > 0)
			return 1;
	return 0;
}

/* Once a second while a worker's process lives (asleep while none does:
 * a spawn wakes it, and the first read comes a period later, not on the
 * cold start's way): one read of /proc for all of them, made without
 * h->mu. */
static void *sampler_main(void *arg)
{
	struct mesh_host *h = arg;
	pthread_mutex_lock(&h->mu);
	while (!h->sampler_quit) {
		if (!any_process(h)) {
			pthread_cond_wait(&h->sampler_cv, &h->mu);
			continue;
		}
		struct timespec ts;
		uint64_t until = mesh_mono_ns() + SAMPLE_EVERY_NS;
		ts.tv_sec = (time_t)(until / MESH_NS_PER_S);
		ts.tv_nsec = (long)(until % MESH_NS_PER_S);
		pthread_cond_timedwait(&h->sampler_cv, &h->mu, &ts);
		if (h->sampler_quit || !any_process(h))
			continue;
		pthread_mutex_unlock(&h->mu);
		struct mesh_proc_table *t = NULL;
		uint64_t at = mesh_mono_ns();
		int rc = mesh_proc_table_read(&t);
		pthread_mutex_lock(&h->mu);
		if (rc == 0)
			sample_apply(h, t, at);
		mesh_proc_table_free(t);
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

/* The earliest deadline of any instance, and of the retry of the cgroups
 * left to remove while there are any: an idle host has none (UINT64_MAX).
 * h->mu held. */
/* An HTTP program's next probe step without an event (0: none). */
static uint64_t probe_due(const struct mesh_instance *w)
{
	return w->http && (w->state == MESH_IS_PROBING || w->state == MESH_IS_WARM) ? mesh__probing_next(&w->pr) : 0;
}

static uint64_t next_deadline(struct mesh_host *h)
{
	uint64_t until = UINT64_MAX;
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		uint64_t pd = probe_due(w);
		if (pd && pd < until)
			until = pd;
		if (w->cg_busy && w->pid <= 0 && h->last_cg + SAMPLE_EVERY_NS < until)
			until = h->last_cg + SAMPLE_EVERY_NS;
		if (w->deadline && w->deadline < until)
			until = w->deadline;
		if (w->closed_deadline && w->closed_deadline < until)
			until = w->closed_deadline;
	}
	return until;
}

/* Dispatches n epoll events, then the deadlines due and the retry of the
 * cgroups left to remove.  h->mu held. */
static void handle(struct mesh_host *h, const struct epoll_event *evs, int n)
{
	/* Deaths first: a crash report then holds every line written before it. */
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < n; i++) {
			uint64_t id = evs[i].data.u64 >> TAG_BITS;
			int tag = (int)(evs[i].data.u64 & TAG_MASK);
			if (id == 0) {
				if (pass == 0)
					mesh_efd_quiet(h->wakefd);
				continue;
			}
			struct mesh_instance *w = by_id(h, id);
			if (!w)
				continue;
			if (pass == 0 && tag == TAG_OUT)
				drain(w);
			else if (pass == 0 && tag == TAG_CTL)
				on_ctl(w);
			else if (pass == 0 && tag == TAG_PROBE)
				fire(w, MESH_EV_PROBE, NULL, NULL);
			else if (pass == 1 && tag == TAG_PID && w->pidfd >= 0)
				fire(w, MESH_EV_DIED, NULL, NULL);
		}
	uint64_t now = mesh_mono_ns();
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		uint64_t pd = probe_due(w);
		if (pd && now >= pd)
			fire(w, MESH_EV_PROBE, NULL, NULL);
		if (w->deadline && now >= w->deadline) {
			w->deadline = 0;
			fire(w, MESH_EV_TIMEOUT, NULL, NULL);
		}
		if (w->closed_deadline && now >= w->closed_deadline) {
			w->closed_deadline = 0;
			struct evarg a = {.text = "closed its control channel and did not exit"};
			fire(w, MESH_EV_BROKEN, &a, NULL);
		}
	}
	if (now >= h->last_cg + SAMPLE_EVERY_NS) {
		h->last_cg = now;
		for (struct mesh_instance *w = h->list; w; w = w->next)
			if (w->cg_busy && w->pid <= 0)
				cgroup_done(w);
	}
}

/* epoll_wait to the nanosecond where the kernel can (an HTTP program's
 * listen tests are 0.25 ms apart), else to the millisecond, rounded up. */
static int wait_ns(int epfd, struct epoll_event *evs, int max, uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / MESH_NS_PER_S), (long)(ns % MESH_NS_PER_S)};
	int n = epoll_pwait2(epfd, evs, max, &ts, NULL);
	if (n < 0 && errno == ENOSYS)
		n = epoll_wait(epfd, evs, max, (int)((ns + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS));
	return n;
}

int mesh_host_poll(struct mesh_host *h, uint64_t timeout_ns)
{
	uint64_t now = mesh_mono_ns(), until = now + timeout_ns;
	pthread_mutex_lock(&h->mu);
	if (h->polling || h->driven) {
		/* Another thread's round (or the loop's dispatch) wakes us. */
		struct timespec ts = {(time_t)(until / MESH_NS_PER_S), (long)(until % MESH_NS_PER_S)};
		pthread_cond_timedwait(&h->cv, &h->mu, &ts);
		pthread_mutex_unlock(&h->mu);
		return 0;
	}
	h->polling = 1;
	uint64_t next = next_deadline(h);
	if (next < until)
		until = next;
	pthread_mutex_unlock(&h->mu);

	struct epoll_event evs[32];
	int n = wait_ns(h->epfd, evs, 32, until > now ? until - now : 0);

	pthread_mutex_lock(&h->mu);
	handle(h, evs, n);
	h->polling = 0;
	wake_all(h);
	pthread_mutex_unlock(&h->mu);
	notify_flush(h);
	return 0;
}

int mesh_host_fd(const struct mesh_host *h)
{
	return h->epfd;
}

void mesh_host_set_driven(struct mesh_host *h, int on)
{
	pthread_mutex_lock(&h->mu);
	h->driven = on;
	/* Waiters asleep for the loop's rounds drive the host themselves now. */
	wake_all(h);
	pthread_mutex_unlock(&h->mu);
}

unsigned mesh_host_dispatch(struct mesh_host *h, uint64_t *next)
{
	struct epoll_event evs[32];
	pthread_mutex_lock(&h->mu);
	if (!h->polling) {
		/* Never blocks: the loop calls it when the fd is readable or a
		 * deadline it was given is due. */
		int n = epoll_wait(h->epfd, evs, 32, 0);
		handle(h, evs, n > 0 ? n : 0);
		wake_all(h);
	}
	*next = next_deadline(h);
	unsigned fired = h->fired - h->fired_seen;
	h->fired_seen = h->fired;
	pthread_mutex_unlock(&h->mu);
	notify_flush(h);
	return fired;
}

int mesh_instance_new(struct mesh_host *h, const struct mesh_image *img, struct mesh_instance **out)
{
	struct mesh_instance *w = calloc(1, sizeof *w);
	if (!w)
		return -ENOMEM;
	w->h = h;
	w->img = img;
	w->pidfd = w->outfd = -1;
	w->log = (struct mesh__wlog)MESH__WLOG_INIT;
	w->last_exit = -1;
	w->http = img->m.backend == MESH_BACKEND_HTTP;
	mesh_proc_tail_reset(&w->tail);
	pthread_mutex_lock(&h->mu);
	w->id = h->next_id++;
	mesh__probing_init(&w->pr, h->epfd, w->id << TAG_BITS | TAG_PROBE);
	w->next = h->list;
	h->list = w;
	pthread_mutex_unlock(&h->mu);
	*out = w;
	return 0;
}

static int request_arg(struct mesh_instance *w, enum mesh_ievent ev, struct evarg a, char **err)
{
	if (err)
		*err = NULL;
	pthread_mutex_lock(&w->h->mu);
	/* A failure from here on answers this request, even one that comes
	 * before the caller starts to wait. */
	w->req_fails = w->fails;
	int rc = fire(w, ev, &a, err);
	wake_all(w->h);
	pthread_mutex_unlock(&w->h->mu);
	mesh_host_wake(w->h); /* its changes are told from there (notify_flush) */
	return rc;
}

static int request(struct mesh_instance *w, enum mesh_ievent ev, struct mesh_slot *s, char **err)
{
	return request_arg(w, ev, (struct evarg){.slot = s}, err);
}

int mesh_instance_warm(struct mesh_instance *w, char **err)
{
	/* An HTTP program's warm is the table's `start` (its kind's rows). */
	return request(w, w->http ? MESH_EV_START : MESH_EV_WARM, NULL, err);
}

int mesh_instance_launch(struct mesh_instance *w, struct mesh_slot *s, char **err)
{
	return request(w, MESH_EV_LAUNCH, s, err);
}

int mesh_instance_launch_armed(struct mesh_instance *w, struct mesh_slot *s, void (*armed)(void *), void *arg,
			       char **err)
{
	return request_arg(w, MESH_EV_LAUNCH, (struct evarg){.slot = s, .armed = armed, .armed_arg = arg}, err);
}

int mesh_instance_halt(struct mesh_instance *w)
{
	return request(w, MESH_EV_HALT, NULL, NULL);
}

int mesh_instance_exit(struct mesh_instance *w)
{
	return request(w, MESH_EV_EXIT, NULL, NULL);
}

int mesh_instance_fail(struct mesh_instance *w, const char *why)
{
	struct evarg a = {.text = why ? why : "failed by its host"};
	pthread_mutex_lock(&w->h->mu);
	/* Not a request: a waiter still hears of the failure this causes. */
	int rc = fire(w, MESH_EV_BROKEN, &a, NULL);
	wake_all(w->h);
	pthread_mutex_unlock(&w->h->mu);
	mesh_host_wake(w->h); /* its changes are told from there (notify_flush) */
	return rc;
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
	st.procs = w->pid ? w->nprocs : 0;
	st.containment = w->pid ? (w->child.how == MESH_PROC_HOW_PIDNS ? MESH_CONTAIN_PIDNS : 0) |
					  (w->cgdir[0] && !w->cg_busy ? MESH_CONTAIN_CGROUP : 0)
				: 0;
	st.cpu_ns = w->cpu_ns;
	st.spawns = w->spawns;
	st.crashes = w->crashes;
	st.unready = w->unready;
	st.last_exit = w->last_exit;
	st.limits = w->pid ? w->enforced : 0;
	st.gen = w->gen;
	st.alive_ns = w->alive_ns + (w->pid ? mesh_mono_ns() - w->spawned_at : 0);
	pthread_mutex_unlock(&w->h->mu);
	return st;
}

struct mesh_host_totals mesh_host_totals(struct mesh_host *h)
{
	struct mesh_host_totals t = {0};
	pthread_mutex_lock(&h->mu);
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		if (w->pid <= 0 || w->http)
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

/* w leaves the list of those with changes to tell.  h->mu held. */
static void notify_unlist(struct mesh_host *h, struct mesh_instance *w)
{
	struct mesh_instance *prev = NULL;
	w->nq = 0;
	if (!w->notify_listed)
		return;
	for (struct mesh_instance *q = h->notify_head; q; prev = q, q = q->notify_next)
		if (q == w) {
			if (prev)
				prev->notify_next = w->notify_next;
			else
				h->notify_head = w->notify_next;
			if (h->notify_tail == w)
				h->notify_tail = prev;
			break;
		}
	w->notify_listed = 0;
}

void mesh_instance_set_notify(struct mesh_instance *w,
			      void (*fn)(void *arg, struct mesh_instance *w, enum mesh_istate from, enum mesh_istate to),
			      void *arg)
{
	pthread_mutex_lock(&w->h->mu);
	if (!fn)
		notify_unlist(w->h, w);
	w->notify = fn;
	w->notify_arg = arg;
	pthread_mutex_unlock(&w->h->mu);
}

/* mesh_instance_http's facts of w, an HTTP program.  h->mu held. */
static void http_fill(const struct mesh_instance *w, struct mesh_instance_http *out)
{
	const struct mesh__probing *pr = &w->pr;
	memset(out, 0, sizeof *out);
	out->pid = w->last_pid;
	out->port = w->port;
	snprintf(out->addr, sizeof out->addr, "%s", pr->addr);
	snprintf(out->last_probe, sizeof out->last_probe, "%s", pr->last);
	out->t_spawn = pr->t0;
	out->t_exec = pr->t_exec;
	out->t_refused = pr->t_refused;
	out->t_listen = pr->t_listen;
	out->t_probe = pr->t_probe;
	out->t_warm = pr->t_warm;
	out->listen_tests = pr->listen_tests;
	out->probes = pr->probes;
	out->wait_cpu_ns = pr->cpu_ns;
	out->status = w->last_exit;
	out->sig = w->last_sig;
	snprintf(out->limits, sizeof out->limits, "%s", w->limits_note);
}

int mesh_instance_http(struct mesh_instance *w, struct mesh_instance_http *out)
{
	memset(out, 0, sizeof *out);
	if (!w->http)
		return MESH_E_STATE;
	pthread_mutex_lock(&w->h->mu);
	http_fill(w, out);
	pthread_mutex_unlock(&w->h->mu);
	return 0;
}

void mesh_instance_http_wait_text(const struct mesh_instance_http *hi, char *out, size_t cap)
{
	uint64_t t0 = hi->t_spawn, before = hi->t_refused > hi->t_exec ? hi->t_refused : hi->t_exec;
	snprintf(out, cap,
		 "%u listen tests, %u probes, %.2f ms of CPU; spawn %.2f ms to the program's exec, its listen seen at "
		 "%.1f ms (within %.2f ms), the probe answered in %.2f ms",
		 hi->listen_tests, hi->probes, (double)hi->wait_cpu_ns / 1e6, (double)(hi->t_exec - t0) / 1e6,
		 hi->t_listen ? (double)(hi->t_listen - t0) / 1e6 : 0.0,
		 hi->t_listen > before ? (double)(hi->t_listen - before) / 1e6 : 0.0,
		 (double)(hi->t_warm - hi->t_probe) / 1e6);
}

int mesh_instance_take_conn(struct mesh_instance *w)
{
	pthread_mutex_lock(&w->h->mu);
	int fd = w->http && w->state == MESH_IS_WARM ? mesh__probing_take(&w->pr) : -1;
	pthread_mutex_unlock(&w->h->mu);
	return fd;
}

void mesh_instance_set_check(struct mesh_instance *w, uint64_t interval_ns, unsigned failures)
{
	pthread_mutex_lock(&w->h->mu);
	w->pr.interval = interval_ns;
	w->pr.failures = failures ? failures : 1;
	pthread_mutex_unlock(&w->h->mu);
}

int mesh_instance_pids(struct mesh_instance *w, pid_t *out, size_t cap, size_t *n, uint64_t *rss)
{
	struct mesh_proc_table *t = NULL;
	struct mesh_proc_usage u;
	pthread_mutex_lock(&w->h->mu);
	struct mesh_proc_child c = w->child;
	int live = w->pid > 0;
	pthread_mutex_unlock(&w->h->mu);
	*n = 0;
	if (rss)
		*rss = 0;
	if (!live)
		return MESH_E_STATE;
	int rc = mesh_proc_table_read(&t);
	if (rc == 0)
		rc = mesh_proc_table_pids(t, &c, out, cap, n);
	if (rc == 0 && rss && mesh_proc_table_sum(t, &c, &u) == 0)
		*rss = u.rss;
	mesh_proc_table_free(t);
	return rc;
}

char *mesh_instance_tail(struct mesh_instance *w)
{
	pthread_mutex_lock(&w->h->mu);
	char *t = mesh_proc_tail_text(&w->tail);
	pthread_mutex_unlock(&w->h->mu);
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
	mesh__probing_close(&w->pr);
	if (w->outfd >= 0) {
		ep_del(w->h, w->outfd);
		close(w->outfd);
	}
	mesh__wlog_close(&w->log);
	/* Its cgroup: what is left is SIGKILLed; gone within a second. */
	for (int i = 0; w->cgdir[0] && i < 100; i++) {
		if (mesh_limits_cgroup_remove(w->cgdir, 1) != -EBUSY)
			break;
		usleep(10000);
	}
	free(w->fail_reason);
	free(w->report);
	free(w->last_report);
	free(w->extra_env);
	free(w);
}

int mesh_instance_set_env(struct mesh_instance *w, const char *kv)
{
	char *c = kv ? strdup(kv) : NULL;
	if (kv && !c)
		return -ENOMEM;
	pthread_mutex_lock(&w->h->mu);
	free(w->extra_env);
	w->extra_env = c;
	pthread_mutex_unlock(&w->h->mu);
	return 0;
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
	notify_unlist(h, w);
	while (h->telling == w)
		pthread_cond_wait(&h->cv, &h->mu);
	destroy(w);
	pthread_mutex_unlock(&h->mu);
}

void mesh_host_free(struct mesh_host *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->sampler_quit = 1;
	pthread_cond_signal(&h->sampler_cv);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->sampler, NULL);
	pthread_mutex_lock(&h->mu);
	uint64_t grace = 0;
	/* Their owners are done with them: nobody is told any more. */
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		notify_unlist(h, w);
		w->notify = NULL;
	}
	for (struct mesh_instance *w = h->list; w; w = w->next) {
		fire(w, MESH_EV_EXIT, NULL, NULL);
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
	free_host(h);
}
