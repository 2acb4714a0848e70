/* Spawning worker processes the proven way, and the pieces around a live one:
 * its output tail and its /proc numbers.
 *
 * Every fork happens on the spawner's own thread, which lives until
 * mesh_spawner_free: PR_SET_PDEATHSIG fires when the thread that forked a
 * child exits, not the process, so a child forked from a short-lived API
 * thread would be killed when that thread ends.
 *
 * The child is made like posix_spawn makes it, clone(CLONE_VM | CLONE_VFORK)
 * on a stack of the spawner's: it shares meshd's memory until execve, so it
 * makes system calls only.  In the child, in order: setsid (its own session and process group, pgid =
 * pid), PR_SET_PDEATHSIG(SIGKILL) and a re-check of getppid() (meshd may
 * have died before the prctl), join the cgroup when one is given, setrlimit
 * for each enforced rlimit, move the fds into place (stdin /dev/null,
 * stdout and stderr the output fd, then the extra fds) and mark every other
 * fd close-on-exec, reset every signal disposition to SIG_DFL and unblock
 * all signals, execve.  Any failure writes errno over a close-on-exec pipe
 * and calls _exit(127); the child never logs or allocates. */
#ifndef MESH_HOST_SPAWN_H
#define MESH_HOST_SPAWN_H

#include "host/limits.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mesh_spawner;

/* Starts the spawner thread.  0 or -errno. */
int mesh_spawner_new(struct mesh_spawner **out);
/* Stops and joins the thread.  NULL is fine. */
void mesh_spawner_free(struct mesh_spawner *sp);

struct mesh_fd_map {
	int from, to; /* to >= 3 */
};

struct mesh_spawn_opts {
	const char *path;
	char *const *argv;
	char *const *envp;
	int out_fd;	/* becomes stdout and stderr */
	const struct mesh_fd_map *fds;
	size_t nfds;
	const struct mesh_limits *limits; /* with enforced: which rlimits to set */
	unsigned enforced;
	int cgroup_procs_fd; /* -1, or cgroup.procs the child joins before exec */
};

/* Forks (on the spawner thread) and execs.  0 with *pid and *pidfd (a
 * close-on-exec pidfd the caller owns) once execve succeeded; or -errno:
 * the child's failure (ENOENT, EACCES, ENOEXEC...; the child is reaped) or
 * the parent's (fork, pipe, pidfd_open).  The caller's fds in opts stay
 * the caller's either way. */
int mesh_spawn(struct mesh_spawner *sp, const struct mesh_spawn_opts *o, pid_t *pid, int *pidfd);

/* The last lines of a process's output, for crash reports.  Lines longer
 * than MESH_TAIL_LINE_MAX bytes keep their first MESH_TAIL_LINE_MAX bytes. */
#define MESH_TAIL_LINE_MAX 512u
struct mesh_tail {
	char *line[64];
	unsigned keep;	/* lines kept, <= 64 */
	unsigned head;	/* index of the oldest line */
	unsigned n;	/* lines held */
	char part[MESH_TAIL_LINE_MAX + 1];
	size_t partlen;
	int part_long; /* the partial line is over the cap */
};
void mesh_tail_init(struct mesh_tail *t, unsigned keep);
void mesh_tail_feed(struct mesh_tail *t, const char *data, size_t n);
/* The kept lines (and an unfinished last one), each ending in '\n';
 * malloc'd, "" if none; NULL on ENOMEM. */
char *mesh_tail_text(const struct mesh_tail *t);
void mesh_tail_release(struct mesh_tail *t);

/* CPU time (user + system) and resident bytes of pid from /proc/<pid>/stat.
 * 0 or -errno (-ENOENT: gone). */
int mesh_proc_sample(pid_t pid, uint64_t *cpu_ns, uint64_t *rss);

/* An exit status (from waitid's si_code/si_status) as a shell would show it:
 * the code, or 128 + the signal. */
int mesh_exit_code(int code, int status);

#endif
