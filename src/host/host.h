/* The host: instances of prepared images, their processes, and the one
 * state x event table that drives them.
 *
 * Two kinds of program, one supervisor (docs/host.md, "Kinds of program"):
 * a native worker (image.h's mesh_image_prepare) says `ready` on its
 * control channel and serves a shared-memory slot; an HTTP program
 * (mesh_image_http: the gateway's model servers, mesh serve's server) is
 * ready when its port listens and its warmth probe passes (probing.h), and
 * is stopped by its stop signal.  Both are spawned through the same path
 * (proc/: PID namespace or process group, cgroup, rlimits, user), their
 * output goes to the same per-program log and 30-line tail, their ends
 * are reaped and reported the same way.
 *
 * An instance (struct mesh_instance) owns at most one process at a time.
 * Requests (warm, launch, halt, exit) and what the loop observes (the
 * worker's control messages, an HTTP program's probe, its death, a
 * deadline) are all events fed to the same table,
 * mesh_lifecycle[state][event] = {action, next state}; the loop only waits
 * and dispatches.  The table is printable (mesh_lifecycle_describe) and
 * docs/host.md shows it.  Its changes of state reach the instance's owner
 * through mesh_instance_set_notify's callback, called by the thread that
 * dispatches the host's events (the loop's: no thread per program).
 *
 * Threads: every function is thread-safe (one mutex per host).  Nothing
 * here blocks on a worker except the *_wait functions, which the control
 * API's threads call; the loop (mesh_host_poll) never waits on a worker.
 * When no thread is running the loop, a waiter drives it itself, so a test
 * or a simple program needs no loop thread.
 *
 * Caller protocol:
 *   1. mesh_host_new(&h, &cfg, &err)
 *   2. mesh_image_prepare(...) (image.h) for a program; then
 *      mesh_instance_new(h, &img, &w) for each worker of it
 *   3. drive mesh_host_poll(h, timeout) from one loop thread (or let the
 *      waiters drive it; or an event loop: mesh_host_dispatch below);
 *      mesh_instance_warm / _launch / _halt / _exit from
 *      any thread, mesh_instance_wait to wait for a state
 *   4. mesh_instance_free(w) (exits it first when it has a process)
 *   5. mesh_host_free(h): every remaining instance asked to exit, then its
 *      process group killed after the grace, reaped. */
#ifndef MESH_HOST_HOST_H
#define MESH_HOST_HOST_H

#include "base/buf.h"
#include "host/image.h"
#include "host/limits.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mesh_slot;

/* What every worker of this host is started with. */
#define MESH_HOST_LOG_MAX (16ull << 20)

struct mesh_host_cfg {
	const char *logs;	/* <logs>/<name>.log per program; must exist */
	char *const *env;	/* extra "K=V" (MESH_SERVICE_BASE, MESH_MODELS, MESH_SYSTEM), NULL-terminated or NULL */
	enum mesh_gpu_access gpu;
	const char *mps_pipe_dir; /* MPS: CUDA_MPS_PIPE_DIRECTORY for GPU workers */
	/* MPS: after `ready`, checks that GPU worker pid is a client of meshd's
	 * MPS server; 0 or a negative code with *err malloc'd.  NULL: none.
	 * Untested: no GPU was at hand when this was written. */
	int (*check_gpu_client)(void *ctx, pid_t pid, char **err);
	/* MPS: asks the MPS control tool to terminate GPU worker pid (its
	 * per-client terminate) before it is signalled; NULL: signals only.
	 * Untested, like the above. */
	int (*stop_gpu_client)(void *ctx, pid_t pid, char **err);
	void *gpu_ctx; /* passed to both hooks (src/host/mps.h: the pipe directory) */
	/* Override the manifests' ready and online timeouts when not 0. */
	uint64_t ready_timeout_ns, online_timeout_ns;
	/* <name>.log past this many bytes becomes <name>.log.1 (the one kept)
	 * and a new one starts; 0 = MESH_HOST_LOG_MAX. */
	uint64_t log_max;
	/* Tests: replaces /proc/self for the limits detection; NULL normally. */
	const char *limits_proc_root;
	/* Called once per spawn when a native worker says `ready`, with the time
	 * from its spawn (the cold start).  It runs on the loop thread with the
	 * host's lock held: it must not call into the host nor take a lock that
	 * is held around host calls.  NULL: none. */
	void (*on_ready)(void *ctx, const struct mesh_image *img, uint64_t spawn_to_ready_ns);
	void *on_ready_ctx;
	/* MESH_CONTAIN_* means not to use even where this machine allows
	 * them (tests; 0 normally: the best it allows, as
	 * mesh_host_caps()->contain then says). */
	unsigned contain_off;
	/* The user of programs without `user` when meshd runs as root
	 * (mesh_limits_default_user() gives the documented one); NULL: they
	 * run as meshd does. */
	const char *default_user;
};

struct mesh_host;

/* 0, or a negative code with *err malloc'd (logs dir missing, no thread). */
int mesh_host_new(struct mesh_host **out, const struct mesh_host_cfg *cfg, char **err);
/* Every instance exits (EXIT, grace, SIGKILL of its group) and is reaped;
 * instances not freed are freed.  NULL is fine. */
void mesh_host_free(struct mesh_host *h);
/* What this machine can enforce (found once at mesh_host_new). */
const struct mesh_limits_caps *mesh_host_caps(const struct mesh_host *h);
/* Who a worker of img runs as: its manifest's `user`, else the host's
 * default user; set = 0 (as meshd itself) when neither applies.  Owned by
 * img or h. */
const struct mesh_run_as *mesh_host_run_as(const struct mesh_host *h, const struct mesh_image *img);

/* Waits up to timeout_ns for worker events (control messages, output,
 * deaths) and deadlines, and dispatches them.  When another thread is
 * polling, it waits for that thread's round instead.  Returns 0. */
int mesh_host_poll(struct mesh_host *h, uint64_t timeout_ns);
/* Makes a running mesh_host_poll return early, or the fd below readable
 * (async-signal-safe). */
void mesh_host_wake(struct mesh_host *h);

/* An event loop instead of mesh_host_poll (meshd's: meshd/core/core.c):
 *   1. mesh_host_set_driven(h, 1): from now on mesh_host_poll (and so the
 *      *_wait functions) sleeps until the loop's next round instead of
 *      waiting on the worker fds itself;
 *   2. the loop watches mesh_host_fd (readable, level-triggered: a worker
 *      event, or a request / mesh_host_wake) and calls mesh_host_dispatch
 *      then, and again when the deadline it returned in *next is due;
 *   3. mesh_host_set_driven(h, 0) before the loop ends: waiters drive the
 *      host themselves again (and mesh_host_free does).
 * mesh_host_dispatch never blocks; it returns how many lifecycle events
 * were fed to the table since its last call (by it or by requests from
 * other threads): 0 means no state changed.  *next is the monotonic time
 * (mesh_mono_ns) of the earliest deadline (a state's, or the 1 s sampler). */
int mesh_host_fd(const struct mesh_host *h);
void mesh_host_set_driven(struct mesh_host *h, int on);
unsigned mesh_host_dispatch(struct mesh_host *h, uint64_t *next);

/* The lifecycle.  STARTING to HALTING are a native worker's, PROBING and
 * WARM an HTTP program's; DOWN and the STOPPING_* states both kinds'. */
enum mesh_istate {
	MESH_IS_DOWN,	       /* no process */
	MESH_IS_STARTING,      /* spawned; waiting for `ready` (ready deadline) */
	MESH_IS_IDLE,	       /* ready; on no slot, waiting for `run` */
	MESH_IS_LAUNCHING,     /* `run <gen> <slot>` sent; waiting for `online` */
	MESH_IS_RUNNING,       /* serving its slot */
	MESH_IS_HALTING,       /* `halt` sent; waiting for `halted` */
	MESH_IS_STOPPING_EXIT, /* `exit` sent; the stop signal at half the grace */
	MESH_IS_STOPPING_TERM, /* the stop signal sent; SIGKILL at the grace */
	MESH_IS_STOPPING_KILL, /* SIGKILL sent to its group; waiting for its death */
	MESH_IS_PROBING,       /* HTTP: spawned; its listen tests and probe until warm (start deadline) */
	MESH_IS_WARM,	       /* HTTP: its probe passed: it serves (probed every interval when set) */
	MESH_IS__N
};
/* True for the three STOPPING_* states: its process is on its way out. */
static inline int mesh_istate_stopping(enum mesh_istate s)
{
	return s == MESH_IS_STOPPING_EXIT || s == MESH_IS_STOPPING_TERM || s == MESH_IS_STOPPING_KILL;
}
enum mesh_ievent {
	/* requests */
	MESH_EV_WARM,	   /* start a process now */
	MESH_EV_LAUNCH,	   /* run on a slot (a process is spawned if none) */
	MESH_EV_HALT,	   /* nodes halt, the process stays */
	MESH_EV_EXIT,	   /* the process exits */
	MESH_EV_START,	   /* an HTTP program's warm: start a process now, its readiness probed */
	/* the worker's control channel (an HTTP program's probe raises ready) */
	MESH_EV_READY,	   /* `ready` */
	MESH_EV_REJECTED,  /* `ready`, from a GPU worker that is not a client of meshd's MPS server */
	MESH_EV_ONLINE,	   /* `online <gen>` for the current run */
	MESH_EV_STALE,	   /* `online <gen>` for another run */
	MESH_EV_HALTED,	   /* `halted <gen>` */
	MESH_EV_REFUSED,   /* `fail <text>` */
	MESH_EV_BROKEN,	   /* a protocol violation, a message that could not be sent, or
			    * the channel closed 1 s ago and the process still lives */
	MESH_EV_CLOSED,	   /* the channel closed (the process may be exiting) */
	/* the loop */
	MESH_EV_TIMEOUT,   /* the state's deadline passed (or an action ended its wait at once) */
	MESH_EV_DIED,	   /* its process ended (pidfd) */
	MESH_EV_UNSTARTED, /* the spawn failed: there is no process */
	MESH_EV_PROBE,	   /* HTTP: a listen test or probe is due, or its socket is ready */
	MESH_EV_HUNG,	   /* HTTP: warm, its probe failed the set number of times in a row */
	MESH_EV__N
};
enum mesh_iaction {
	MESH_A_NOP,	/* nothing; stay */
	MESH_A_DENY,	/* a request refused here: MESH_E_STATE */
	MESH_A_SPAWN,	/* spawn a process; ready deadline (a failed spawn raises unstarted) */
	MESH_A_ABORT,	/* the spawn failed: its error is the failure; nothing to reap */
	MESH_A_PEND,	/* remember the slot; run it once ready */
	MESH_A_UNPEND,	/* forget a remembered slot */
	MESH_A_READY,	/* raises launch for a remembered slot, if any */
	MESH_A_RUN,	/* send `run <gen> <slot>`; online deadline (a failed send raises broken) */
	MESH_A_ONLINE,	/* the slot is served */
	MESH_A_HALT,	/* send `halt`; halt deadline */
	MESH_A_HALTED,	/* the slot is free again */
	MESH_A_REFUSE,	/* the worker refused `run`: fail that slot */
	MESH_A_STOP,	/* (MPS terminate_client) send `exit`; deadline half the grace, or
			 * raises timeout when it could not be sent or the grace is 0 */
	MESH_A_TERM,	/* the stop signal to the group, deadline the grace; raises timeout when the grace is 0 */
	MESH_A_KILL,	/* SIGKILL to the group */
	MESH_A_FAIL,	/* record why, SIGKILL the group, fail its slot */
	MESH_A_HANGUP,	/* close the channel; broken unless the process dies within 1 s */
	MESH_A_REAP,	/* reap, drain output, SIGKILL the rest of the group; crash report if unasked */
	MESH_A_PROBE,	/* HTTP: a step of the start's wait; raises ready once the probe passes */
	MESH_A_CHECK,	/* HTTP: a step of the warm probe; raises hung after the failures in a row */
	MESH_A_EXPIRE,	/* HTTP: not warm by the start deadline: recorded as its failure, then stop */
	MESH_A__N
};
/* An action may raise one follow-up event, which the dispatcher feeds to
 * the table in the new state: the next state always comes from the table. */
struct mesh_transition {
	enum mesh_iaction action;
	enum mesh_istate next;
};
extern const struct mesh_transition mesh_lifecycle[MESH_IS__N][MESH_EV__N];

const char *mesh_istate_name(enum mesh_istate s);
const char *mesh_ievent_name(enum mesh_ievent e);
const char *mesh_iaction_name(enum mesh_iaction a);
/* The whole table, one "STATE EVENT ACTION NEXT" row per line (a header
 * first).  0 or -ENOMEM. */
int mesh_lifecycle_describe(struct mesh_buf *out);

struct mesh_instance;

/* A worker of img (which must outlive it).  0 or -ENOMEM. */
int mesh_instance_new(struct mesh_host *h, const struct mesh_image *img, struct mesh_instance **out);
/* Exits its process if any (waiting for the grace and the kill) and frees. */
void mesh_instance_free(struct mesh_instance *w);

/* One more "K=V" for the environment of its next spawns (meshd's GPU
 * placement: CUDA_VISIBLE_DEVICES=...), over meshd's and the manifest's
 * value of K; NULL: none.  0 or -ENOMEM. */
int mesh_instance_set_env(struct mesh_instance *w, const char *kv);

/* Requests.  0, or MESH_E_STATE when the table refuses it in this state
 * (*err says why), or the spawn's error (-ENOENT, ...).  None waits for
 * the worker.  warm is the event `warm` for a native worker, `start` for
 * an HTTP program (the two kinds' rows of the table). */
int mesh_instance_warm(struct mesh_instance *w, char **err);
/* s stays the caller's; it must not be used by another instance meanwhile. */
int mesh_instance_launch(struct mesh_instance *w, struct mesh_slot *s, char **err);
/* mesh_instance_launch, and armed(arg) once s is armed for the worker's
 * run before the process is spawned (a DOWN instance) or while it starts
 * (a STARTING one), with the host's lock held: what the caller puts into
 * s's request ring from then on is the worker's first read, whether the
 * spawn has returned or not.  armed must only publish and wake. */
int mesh_instance_launch_armed(struct mesh_instance *w, struct mesh_slot *s, void (*armed)(void *), void *arg,
			       char **err);
int mesh_instance_halt(struct mesh_instance *w);
int mesh_instance_exit(struct mesh_instance *w);
/* The worker broke a promise the host cannot see (a bad reply in its slot,
 * a call past its limit, a heartbeat that stopped): the table's `broken`
 * event with why as the reason, so its group is SIGKILLed, its slot
 * FAILED and the report (`failed: why`) made at the reap.  A no-op where
 * the table says so (DOWN, stopping).  Returns 0. */
int mesh_instance_fail(struct mesh_instance *w, const char *why);

/* Waits until the state is one of mask (bits 1u << state), at most
 * timeout_ns.  0; or, when a failure happened since the last request
 * (warm, launch, halt, exit) -- also before this call began --
 * MESH_E_CRASHED when its process died unasked (*err: the crash report),
 * MESH_E_TIMEOUT / MESH_E_REFUSED / MESH_E_PROTO when it was failed (*err
 * says why), or the spawn's error; MESH_E_TIMEOUT when time ran out.  A
 * failure is checked before the state, so it is reported even when mask
 * holds DOWN. */
int mesh_instance_wait(struct mesh_instance *w, unsigned mask, uint64_t timeout_ns, char **err);

enum mesh_istate mesh_instance_state(struct mesh_instance *w);
pid_t mesh_instance_pid(struct mesh_instance *w);
/* The slot it runs on (LAUNCHING, RUNNING, HALTING), or NULL. */
struct mesh_slot *mesh_instance_slot(struct mesh_instance *w);
/* The last failure's report (malloc'd, caller frees), reported once; NULL if none new. */
char *mesh_instance_crashed(struct mesh_instance *w);
/* A copy of the last failure's report, kept until the next one; NULL if none. */
char *mesh_instance_last_report(struct mesh_instance *w);
/* A slot that its crash failed and that must not be reused (the core
 * frees it), handed over once; NULL if none. */
struct mesh_slot *mesh_instance_take_failed_slot(struct mesh_instance *w);

struct mesh_instance_stats {
	pid_t pid;		/* 0 if no process */
	enum mesh_istate state;
	double cpu_pct;		/* over the last sample interval (~1 s) */
	uint64_t rss, cpu_ns;	/* sampled from /proc: summed over its whole tree (its
				 * namespace, else its group and session), not the
				 * program's process alone; mesh-init not counted */
	unsigned procs;		/* how many processes that tree held */
	unsigned containment;	/* MESH_CONTAIN_* of its process (0: process group) */
	uint32_t spawns, crashes;
	uint32_t unready;	/* processes that died or failed to start before `ready`, ever */
	int last_exit;		/* exit status of its last process (128+signal), -1 if none */
	unsigned limits;	/* MESH_LIM_* bits enforced on its process */
	uint32_t gen;		/* the last run's generation */
	uint64_t alive_ns;	/* time it has had a process, over all its spawns (warm time) */
};
struct mesh_instance_stats mesh_instance_stats(struct mesh_instance *w);

/* Tells fn each change of w's state, in order (from, to), from the host's
 * dispatch (mesh_host_poll or mesh_host_dispatch: the loop's thread, or a
 * waiter's), after the host's lock is released -- never from within a
 * request (mesh_instance_warm, _exit, _fail, ...: a requester may hold its
 * own lock around one that fn takes; a request wakes the loop, which tells
 * its changes): fn may call into the host, but not free w; it is never
 * called for w from two threads at once.  NULL: none (pending changes are
 * dropped).  mesh_instance_free waits for a call in progress. */
void mesh_instance_set_notify(struct mesh_instance *w,
			      void (*fn)(void *arg, struct mesh_instance *w, enum mesh_istate from, enum mesh_istate to),
			      void *arg);

/* An HTTP program's start and its last end, as the host saw them. */
struct mesh_instance_http {
	pid_t pid;		/* its last spawn's pid (kept after its end); 0: none yet */
	int port;		/* the port its last spawn's command was given ({port}); 0: none */
	char addr[64];		/* where its warm probe got through ("ip:port"; "" not yet) */
	char last_probe[256];	/* the last probe's (or listen test's) reason */
	/* Its last start's wait (mesh_mono_ns; 0: not reached): the spawn
	 * began, the program exec'd, the last refused listen test, the first
	 * that connected, the last probe's start, warm; how many tests and
	 * probes, and the host's CPU spent on them. */
	uint64_t t_spawn, t_exec, t_refused, t_listen, t_probe, t_warm;
	unsigned listen_tests, probes;
	uint64_t wait_cpu_ns;
	int status;		/* its last process's exit status (128+signal); -1: none ended */
	int sig;		/* the signal that ended it; 0: none */
	/* "; its limits: memory=... (how)" when [limits] were in force for its
	 * last process (and "; the kernel's OOM killer ended it: ..." before it
	 * when its cgroup says so), else "". */
	char limits[512];
};
/* 0, or MESH_E_STATE for a native worker. */
int mesh_instance_http(struct mesh_instance *w, struct mesh_instance_http *out);
/* Its last start's wait in words, for a warm line (meshd's log, the
 * program's): "N listen tests, N probes, X ms of CPU; spawn A ms to the
 * program's exec, its listen seen at B ms (within C ms), the probe answered
 * in D ms" ("within": since the last refused test, how late the listen was
 * seen at most). */
void mesh_instance_http_wait_text(const struct mesh_instance_http *hi, char *out, size_t cap);
/* The connection an HTTP program's start probe was answered on, kept for
 * a first request (non-blocking, TCP_NODELAY) while it is WARM and nobody
 * took it, or -1: the caller's from here. */
int mesh_instance_take_conn(struct mesh_instance *w);
/* A warm HTTP program is probed every interval_ns (0: never, the default);
 * failures in a row (at least 1) make the table's `hung`. */
void mesh_instance_set_check(struct mesh_instance *w, uint64_t interval_ns, unsigned failures);
/* The pids of its process's tree now (its PID namespace's, else its
 * group's and session's; mesh-init not counted): up to cap into out, *n
 * how many there are; rss (NULL: not wanted): their resident bytes, from
 * the same read (now, not the sampler's last).  0, MESH_E_STATE without a
 * process, or the error of reading /proc (all of it: about 10 us a
 * process on the machine; not for a loop that must not wait). */
int mesh_instance_pids(struct mesh_instance *w, pid_t *out, size_t cap, size_t *n, uint64_t *rss);
/* The last lines of output of its process, or of its last one (malloc'd,
 * at most MESH_TAIL_LINES lines; NULL when there are none or no memory). */
char *mesh_instance_tail(struct mesh_instance *w);

struct mesh_host_totals {
	uint32_t procs;		/* live worker processes */
	double cpu_pct;
	uint64_t rss;
	uint32_t spawns, crashes;
};
struct mesh_host_totals mesh_host_totals(struct mesh_host *h);

#endif
