/* Spawning one chunk process, the libuv/git way but with vfork for speed:
 * the parent is suspended until the child has exec'd or failed, so a
 * failed exec is known when mesh__spawn returns.
 *
 * The child: its own process group (setpgid 0 0), PR_SET_PDEATHSIG SIGKILL
 * (it dies with the spawning thread), niceness raised by s->nice (set it
 * after mesh__spawner_init), default SIGPIPE, the signal mask the
 * spawner was created with, stdin/stdout/stderr from the given fds, every
 * other fd of ours closed by O_CLOEXEC.  An exec error is reported as errno
 * over a close-on-exec pipe, and the child _exits 127. */
#ifndef MESH_EXEC_SPAWN_H
#define MESH_EXEC_SPAWN_H

#include <signal.h>
#include <sys/types.h>

struct mesh__spawner {
	int err_r, err_w;	/* the errno pipe (both O_CLOEXEC; err_r non-blocking) */
	sigset_t child_mask;	/* the mask the child starts with */
	int reset[8];		/* signals reset to SIG_DFL in the child, 0-terminated */
	int nice;		/* added to the child's niceness (--nice); 0 = inherit */
};

/* Creates a spawner; child_mask is the mask children get (NULL = the
 * calling thread's current mask).  0 or -errno. */
int mesh__spawner_init(struct mesh__spawner *s, const sigset_t *child_mask);
void mesh__spawner_release(struct mesh__spawner *s);

/* Starts path with argv and envp, fds 0/1/2 taken from in/out/err (each
 * must be >= 3).  Returns 0 with *pid set; or the child's exec errno
 * negated (-ENOENT, -EACCES, ...), in which case the child is already
 * reaped; or -errno of vfork.  The caller's fds stay open either way. */
int mesh__spawn(struct mesh__spawner *s, const char *path, char *const argv[], char *const envp[], int in, int out,
		int err, pid_t *pid);

/* Exit code convention: exit status k -> k; signal s -> 128 + s. */
int mesh__exit_code(int wstatus);

/* Resolves a command name like execvp (PATH, default
 * "/usr/local/bin:/usr/bin:/bin") into a malloc'd path of an executable
 * regular file.  A name with '/' is taken as is (checked).  0, -ENOENT,
 * -EACCES, -ENOMEM. */
int mesh__resolve_cmd(const char *name, char **out);

#endif
