/* The one way to start and stop a process: spawn, its output tail, its exit
 * status, its process group's stop.
 *
 * Caller protocol:
 *   1. mesh_proc_spawner_new() on a thread whose signal mask children of
 *      MESH_PROC_INHERIT should get.  It starts the spawner thread; every
 *      fork happens there.  PR_SET_PDEATHSIG fires when the *thread* that
 *      forked a child exits, not the process, so a child forked from a
 *      short-lived thread would die with that thread: this one lives until
 *      step 5.
 *   2. Fill a struct mesh_proc_opts from MESH_PROC_OPTS_INIT and call
 *      mesh_proc_spawn() (from any thread; spawns are serialised).  The
 *      child is its own process group leader (pgid = pid).
 *   3. Feed the child's output to a struct mesh_proc_tail as it is read;
 *      mesh_proc_tail_lines() / mesh_proc_tail_text() for a crash report.
 *   4. Stop it: mesh_proc_stop_begin() signals the whole group, then
 *      mesh_proc_stop_step() from the caller's loop sends SIGKILL to the
 *      group once the grace is over.  Reap the leader with waitpid/waitid
 *      and turn its status into a shell's code with mesh_proc_exit_code().
 *   5. mesh_proc_spawner_free(): joins the thread; children still alive get
 *      SIGKILL from PR_SET_PDEATHSIG at that moment, so free it after they
 *      are reaped (or when they ought to die).
 *
 * The child is made like posix_spawn makes it, clone(CLONE_VM |
 * CLONE_VFORK) on a stack of the spawner's: it shares the caller's memory
 * until execve, so it makes system calls only, never logs or allocates.  In
 * the child, in order: its own process group (setpgid, or setsid with
 * MESH_PROC_SESSION), that group registered with opts.keeper, join the cgroup when one is given, the user
 * (MESH_PROC_SETUID), PR_SET_PDEATHSIG(SIGKILL) and a re-check of getppid()
 * (the parent may have died before the prctl; neither with
 * MESH_PROC_OUTLIVE), each rlimit, the niceness, fds 0/1/2 and the extra fds moved into
 * place, every other fd made close-on-exec (not with MESH_PROC_INHERIT),
 * signal dispositions reset to SIG_DFL and the mask set, execve.  Any
 * failure writes errno over a close-on-exec pipe and _exit(127)s; the
 * parent reaps such a child and returns the errno. */
#ifndef MESH_PROC_PROC_H
#define MESH_PROC_PROC_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mesh_proc_spawner;

/* Starts the spawner thread; records the calling thread's signal mask for
 * MESH_PROC_INHERIT children.  0 or -errno. */
int mesh_proc_spawner_new(struct mesh_proc_spawner **out);
/* Stops and joins the thread.  NULL is fine. */
void mesh_proc_spawner_free(struct mesh_proc_spawner *sp);

#define MESH_PROC_FDS_MAX 16
struct mesh_proc_fd {
	int from, to; /* to >= 3 */
};

struct mesh_proc_rlimit {
	int resource; /* RLIMIT_* */
	uint64_t value; /* soft and hard */
};
#define MESH_PROC_RLIMITS_MAX 8

enum {
	/* setsid instead of setpgid: no controlling terminal either. */
	MESH_PROC_SESSION = 1u << 0,
	/* Start like a shell's child: ignored signals other than SIGPIPE and
	 * SIGCHLD stay ignored, the mask is the one recorded by
	 * mesh_proc_spawner_new, and fds without close-on-exec stay open.
	 * Without it every disposition is SIG_DFL, nothing is blocked and
	 * only fds 0/1/2 and opts.fds reach the program. */
	MESH_PROC_INHERIT = 1u << 1,
	/* Contain the program in a PID namespace of its own behind mesh-init
	 * (see "Containment" below), where this machine allows one; else it
	 * is started as without the flag (mesh_proc_child.how says which).
	 * Only through mesh_proc_spawn_child. */
	MESH_PROC_PIDNS = 1u << 2,
	/* Run the program under opts.uid / opts.gid / opts.groups: setgroups,
	 * setgid, setuid in the child, before PR_SET_PDEATHSIG (a change of
	 * credentials clears it) and exec. */
	MESH_PROC_SETUID = 1u << 3,
	/* No PR_SET_PDEATHSIG: the child may outlive this process (a keeper,
	 * below, which must act when this process dies). */
	MESH_PROC_OUTLIVE = 1u << 4,
	/* Run the program at niceness opts.nice (setpriority, absolute, as
	 * GNU parallel's --nice).  A refusal (an unprivileged user asking for
	 * a lower niceness than it has) is ignored, as GNU parallel does: the
	 * program runs at the niceness it inherits. */
	MESH_PROC_NICE = 1u << 5,
};

struct mesh_proc_keeper;

struct mesh_proc_opts {
	const char *path; /* an executable's path (mesh_proc_resolve for a name) */
	char *const *argv;
	char *const *envp;
	int in_fd;  /* stdin; -1: /dev/null */
	int out_fd; /* stdout; -1: /dev/null */
	int err_fd; /* stderr; -1: the same as stdout */
	const struct mesh_proc_fd *fds; /* at most MESH_PROC_FDS_MAX */
	size_t nfds;
	const struct mesh_proc_rlimit *rlimits; /* at most MESH_PROC_RLIMITS_MAX */
	size_t nrlimits;
	int cgroup_procs_fd; /* -1, or a cgroup.procs the child joins before exec
			      * (with MESH_PROC_PIDNS: mesh-init joins it, so
			      * the whole namespace is in it) */
	int nice;	     /* with MESH_PROC_NICE: the child's niceness */
	unsigned flags;	     /* MESH_PROC_* */
	uid_t uid;	     /* MESH_PROC_SETUID: the ids the program runs as */
	gid_t gid;
	const gid_t *groups; /* supplementary groups (at most MESH_PROC_GROUPS_MAX) */
	size_t ngroups;
	/* NULL, or a keeper (below) with which the child registers its
	 * process group before its exec (not under MESH_PROC_PIDNS, whose
	 * namespace holds the program's processes already); borrowed. */
	const struct mesh_proc_keeper *keeper;
};
#define MESH_PROC_GROUPS_MAX 64
#define MESH_PROC_OPTS_INIT {.in_fd = -1, .out_fd = -1, .err_fd = -1, .cgroup_procs_fd = -1}

/* Forks (on the spawner thread) and execs.  0 with *pid, and with *pidfd
 * (a close-on-exec pidfd the caller owns) when pidfd is not NULL, once
 * execve succeeded; or -errno: the child's failure (-ENOENT, -EACCES,
 * -ENOEXEC, ...; the child is already reaped) or the parent's (clone,
 * pipe, pidfd_open; -E2BIG for too many fds or rlimits).  The fds in opts
 * stay the caller's either way. */
int mesh_proc_spawn(struct mesh_proc_spawner *sp, const struct mesh_proc_opts *o, pid_t *pid, int *pidfd);

/* Containment: how a program's processes are held together, so that a
 * stop or meshd's death leaves none behind.
 *
 * MESH_PROC_HOW_GROUP: the program leads its own process group (and
 * session); stops signal the group.  A child that calls setsid() leaves
 * the group and survives; PR_SET_PDEATHSIG reaches the program only.
 *
 * MESH_PROC_HOW_PIDNS: the spawner's child is mesh-init, pid 1 of a new
 * PID namespace (clone(CLONE_NEWPID); where that needs privileges this
 * process lacks, in a new user namespace too, mapping only this process's
 * own uid and gid).  mesh-init starts the program as pid 2 (its own session),
 * then execs the mesh-init binary beside this one (else this binary) as the init, which
 * a constructor of proc/ recognises before main runs: it blocks every
 * signal and waits for them, forwards each one to the program's process
 * group, reaps every orphan of the namespace, and when the program ends
 * exits with its status (a death by signal s as 128 + s).  When mesh-init
 * ends, however it ends, the kernel SIGKILLs everything left in the
 * namespace, setsid'd and double-forked grandchildren included, before
 * mesh-init's pidfd becomes readable; PR_SET_PDEATHSIG(SIGKILL) from the
 * spawner thread ties mesh-init to this process.
 *
 * Pids: mesh_proc_child.pid is the program's pid as seen from here (what
 * ps shows; inside its namespace the program sees itself as pid 2);
 * .init is mesh-init's, the one to reap and the pidfd's.  The program's
 * own children see pids of the namespace: a program that reports a pid
 * to the outside should read it from /proc/self (the mount is this
 * namespace's). */
enum mesh_proc_how {
	MESH_PROC_HOW_GROUP = 0,
	MESH_PROC_HOW_PIDNS = 1,
};
/* "process-group" / "pid-namespace". */
const char *mesh_proc_how_name(enum mesh_proc_how how);

struct mesh_proc_child {
	pid_t pid;	      /* the program's pid, as seen here */
	pid_t init;	      /* mesh-init's pid (PIDNS), else == pid: reap this one */
	int pidfd;	      /* of .init, close-on-exec, the caller's; -1 if not asked */
	enum mesh_proc_how how;
};

/* Like mesh_proc_spawn, and with MESH_PROC_PIDNS honoured: 0 with *c
 * filled (c->pidfd when want_pidfd), or -errno (the child's failure, or
 * mesh-init's before the program's exec).  Under mesh-init the answer
 * comes once the program has exec'd, while mesh-init's own exec of
 * /proc/self/exe may still be under way (the spawner awaits it before
 * its next spawn); should that exec fail, the namespace ends and mesh-init
 * exits 127.  When a namespace cannot be made here the program is started
 * as a process group (c->how). */
int mesh_proc_spawn_child(struct mesh_proc_spawner *sp, const struct mesh_proc_opts *o, int want_pidfd,
			  struct mesh_proc_child *c);

/* What this machine allows for MESH_PROC_PIDNS, found by trying it (a
 * clone that exits at once; cached for the process): MESH_PROC_HOW_PIDNS,
 * or MESH_PROC_HOW_GROUP with why (when not NULL) saying why not. */
enum mesh_proc_how mesh_proc_pidns_probe(char *why, size_t cap);

/* Sends sig to what c contains: to mesh-init (PIDNS), which forwards it to
 * the program's process group, SIGKILL ending the whole namespace; else to
 * the program's process group.  Only while c->init is not reaped (its pid
 * cannot have been reused).  0 or -errno. */
int mesh_proc_child_kill(const struct mesh_proc_child *c, int sig);

/* The program's exit code from the reaped c->init's siginfo, as a shell's
 * (exit k -> k, signal s -> 128 + s), and in *sig the signal that ended
 * it (0 if it exited): for PIDNS, mesh-init's exit 128 + s is read back as
 * signal s -- so a program that itself exits with 129..192 is reported as
 * killed by a signal, as a shell would. */
int mesh_proc_child_exit_code(const struct mesh_proc_child *c, const siginfo_t *si, int *sig);

/* A keeper: a small process of its own that outlives this one so that the
 * process groups this one starts do not.  When this process ends, however
 * it ends (SIGKILL included: the keeper sees its end of a socket close),
 * the keeper sends SIGKILL to every process group still registered with it
 * and exits.  PR_SET_PDEATHSIG reaches a group's leader only; a shell's
 * background child, still in the group, is the keeper's.  It is the
 * mesh-init binary in its other mode (mesh__proc_init_path), out of this
 * process's group and blind to terminal signals.
 *
 * Caller protocol:
 *   1. mesh_proc_keeper_new(sp, &k) once the spawner exists.
 *   2. spawn children with opts.keeper = k: each registers its own group
 *      before it execs (one send on the keeper's socket, in the child), so
 *      no instant exists when it runs unregistered.  A spawn that fails
 *      forgets its group itself.
 *   3. once a group is done with (its leader reaped; what is left of it is
 *      no longer this process's business): mesh_proc_keeper_forget(k,
 *      pgid): one send.  Forget before the group's id could be reused:
 *      the keeper kills by id.
 *   4. mesh_proc_keeper_free(k): the keeper kills what is still
 *      registered, exits and is reaped.
 * The keeper's pid shows in ps as "mesh-keep".  Calls from one thread at a
 * time (the spawner's children write on their own). */
/* 0 with *out, or -errno (socketpair, the spawn of the keeper). */
int mesh_proc_keeper_new(struct mesh_proc_spawner *sp, struct mesh_proc_keeper **out);
/* k NULL: nothing. */
void mesh_proc_keeper_forget(const struct mesh_proc_keeper *k, pid_t pgid);
/* NULL is fine. */
void mesh_proc_keeper_free(struct mesh_proc_keeper *k);

/* Resolves a command name like execvp (PATH, default
 * "/usr/local/bin:/usr/bin:/bin") into a malloc'd path of an executable
 * regular file.  A name with '/' is taken as is (checked).  0 with *out the
 * caller's, -ENOENT, -EACCES, -ENOMEM. */
int mesh_proc_resolve(const char *name, char **out);

/* The exit code a shell would show: exit status k -> k, death by signal s
 * -> 128 + s, anything else 255.  From a wait status or from waitid's
 * siginfo (the same mapping). */
int mesh_proc_exit_code(int wstatus);
int mesh_proc_exit_code_si(const siginfo_t *si);

/* Sends sig to the process group pgid (> 0).  0 or -errno (-ESRCH: the
 * group is empty). */
int mesh_proc_kill_group(pid_t pgid, int sig);
/* 1 when no process is left in the group pgid (reaped or not yet). */
int mesh_proc_group_gone(pid_t pgid);

/* Stopping a group: the signal now, SIGKILL when the grace is over. */
struct mesh_proc_stop {
	pid_t pgid;
	uint64_t deadline; /* monotonic ns */
	int killed;	   /* SIGKILL was sent */
};
/* Sends sig (SIGKILL counts as killed) to the group; grace from now. */
void mesh_proc_stop_begin(struct mesh_proc_stop *st, pid_t pgid, int sig, uint64_t grace_ns, uint64_t now);
/* At or after the deadline, sends SIGKILL to the group once.  1 when this
 * call sent it, else 0. */
int mesh_proc_stop_step(struct mesh_proc_stop *st, uint64_t now);


/* One read of every process's /proc/<pid>/stat, to sum process trees. */
struct mesh_proc_table;
/* 0 with *out the caller's, or -errno (/proc unreadable), -ENOMEM. */
int mesh_proc_table_read(struct mesh_proc_table **out);
void mesh_proc_table_free(struct mesh_proc_table *t);
struct mesh_proc_usage {
	uint64_t rss;	 /* bytes resident, summed over the processes */
	uint64_t cpu_ns; /* their user + system time, and that of their reaped children */
	unsigned procs;	 /* how many */
};
/* Sums what c contains as of the table: PIDNS: every process of the
 * namespace (mesh-init's descendants) except mesh-init itself; GROUP: the
 * program, its descendants and the members of its session (a setsid'd
 * orphan that left both is not seen).  Shared pages count in each process
 * that maps them, as in ps.  0, or -ESRCH when the program is not there. */
int mesh_proc_table_sum(const struct mesh_proc_table *t, const struct mesh_proc_child *c, struct mesh_proc_usage *u);
/* The pids of the same processes (to match what another tool lists by
 * pid, NVML's GPU users): the first cap into pids, how many there are in
 * *n.  0, -ESRCH (as above), -ENOMEM. */
int mesh_proc_table_pids(const struct mesh_proc_table *t, const struct mesh_proc_child *c, pid_t *pids, size_t cap,
			 size_t *n);

/* The last lines of a process's output, for crash reports.  A line keeps
 * its first MESH_PROC_TAIL_LINE_MAX bytes; control bytes other than tab
 * become '?' so that a report stays one line a line.  Plain data: zero it
 * (or mesh_proc_tail_reset) to start; nothing to release. */
#define MESH_PROC_TAIL_LINES 30
#define MESH_PROC_TAIL_LINE_MAX 512
struct mesh_proc_tail {
	char line[MESH_PROC_TAIL_LINES][MESH_PROC_TAIL_LINE_MAX + 1];
	unsigned start, n; /* ring of whole lines */
	char cur[MESH_PROC_TAIL_LINE_MAX + 1];
	size_t cur_len; /* the unfinished line; > 0 counts as a line */
};
void mesh_proc_tail_reset(struct mesh_proc_tail *t);
void mesh_proc_tail_feed(struct mesh_proc_tail *t, const char *data, size_t n);
/* Points view[0..k-1] at the last k <= MESH_PROC_TAIL_LINES lines, oldest
 * first, an unfinished last line counted as one; view[k] = NULL.  The
 * pointers live until the next feed or reset.  Returns k. */
size_t mesh_proc_tail_lines(const struct mesh_proc_tail *t, const char *view[MESH_PROC_TAIL_LINES + 1]);
/* The same lines, each ending in '\n'; malloc'd, "" if none; NULL on ENOMEM. */
char *mesh_proc_tail_text(const struct mesh_proc_tail *t);

#endif
