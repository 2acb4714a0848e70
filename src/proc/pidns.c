/* mesh-init: a program in a PID namespace of its own (proc.h, "Containment").
 *
 * Two halves.  Before its exec, mesh-init is a clone of the spawner thread
 * (CLONE_VM | CLONE_VFORK | CLONE_NEWPID): system calls only, like the
 * program's child in spawn.c, which it makes the same way.  Then it execs
 * the mesh-init binary beside this one (src/proc/init_main.c, libc alone),
 * or where there is none this binary again (/proc/self/exe), whose main
 * never runs: the constructor below recognises its argv.  Either runs the
 * init loop, mesh__proc_init_main. */
#include "proc/proc.h"
#include "proc/spawn_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;


/* The binary mesh-init execs (find_init, below). */
static char init_path[4096] = "/proc/self/exe";

const char *mesh_proc_how_name(enum mesh_proc_how how)
{
	return how == MESH_PROC_HOW_PIDNS ? "pid-namespace" : "process-group";
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = strlen(text);
	ssize_t w = write(fd, text, n);
	int e = errno;
	close(fd);
	errno = e;
	return w == (ssize_t)n ? 0 : -1;
}

/* In the new user namespace: this process's own uid and gid map to
 * themselves (the one mapping an unprivileged process may write), so the
 * program sees its real ids, not the overflow uid. */
static int write_maps(const char *const maps[3])
{
	/* A non-dumpable process's /proc files belong to root, which this
	 * process's user namespace cannot map: no one could write its maps.
	 * The flag belongs to the memory, which this clone shares with meshd
	 * (made non-dumpable so that no process of its uid opens its fds),
	 * so meshd is dumpable for these three writes.  Only an unprivileged
	 * meshd comes here, whose workers all share its uid anyway. */
	int was = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
	if (was == 0 && prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0)
		return -1;
	int rc = 0;
	if (write_file("/proc/self/setgroups", maps[0]) < 0 || write_file("/proc/self/uid_map", maps[1]) < 0 ||
	    write_file("/proc/self/gid_map", maps[2]) < 0)
		rc = -1;
	int e = errno;
	if (was == 0)
		prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	errno = e;
	return rc;
}

void mesh__proc_ns_maps(char bufs[3][32], const char *maps[3])
{
	snprintf(bufs[0], 32, "deny");
	snprintf(bufs[1], 32, "%u %u 1\n", (unsigned)geteuid(), (unsigned)geteuid());
	snprintf(bufs[2], 32, "%u %u 1\n", (unsigned)getegid(), (unsigned)getegid());
	for (int i = 0; i < 3; i++)
		maps[i] = bufs[i];
}

/* Reads a pid into dec (NUL-terminated), no libc formatting. */
static void fmt_pid(char dec[16], pid_t v)
{
	char t[16];
	int n = 0, k = 0;
	do
		t[n++] = (char)('0' + v % 10);
	while ((v /= 10) > 0 && n < 15);
	while (n)
		dec[k++] = t[--n];
	dec[k] = 0;
}

int mesh__proc_init_child(void *arg)
{
	struct mesh__proc_cargs *a = arg;
	const struct mesh_proc_opts *o = a->o;
	int err, errfd = a->errfd;
	/* Out of meshd's session: a terminal's ^C reaches meshd, not workers. */
	if (setsid() < 0)
		goto fail;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		goto fail;
	/* getppid() is 0 in a new namespace: meshd's pidfd says whether it
	 * died between clone and prctl. */
	if (a->alivefd >= 0) {
		struct pollfd pf = {.fd = a->alivefd, .events = POLLIN};
		if (poll(&pf, 1, 0) != 0)
			_exit(127);
	}
	if (a->maps[0] && write_maps(a->maps) < 0)
		goto fail;
	/* mesh-init joins the cgroup first: the whole namespace is in it. */
	if (o->cgroup_procs_fd >= 0 && write(o->cgroup_procs_fd, "0", 1) != 1)
		goto fail;
	a->parent = 1;
	pid_t pid = clone(mesh__proc_child_main, (char *)a->stack2 + MESH__PROC_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
	if (pid < 0)
		goto fail;
	if (a->failed) {
		/* The program's child reported its errno already. */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		_exit(127);
	}
	/* The program runs: "started" (0) answers the spawn now; the spawner
	 * leaves a and this stack alone until this exec (the pipe's end). */
	err = 0;
	while (write(errfd, &err, sizeof err) < 0 && errno == EINTR)
		;
	/* Become the init: stdio on /dev/null, nothing else of meshd's open
	 * past the exec, every signal blocked (the loop waits for them) and
	 * none ignored. */
	if (errfd <= 2 && (errfd = fcntl(errfd, F_DUPFD_CLOEXEC, 3)) < 0)
		goto fail;
	for (int i = 0; i < 3; i++)
		if (dup2(a->devnull, i) < 0)
			goto fail;
	if (syscall(SYS_close_range, 3u, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		for (int fd = 3; fd < 65536; fd++)
			fcntl(fd, F_SETFD, FD_CLOEXEC);
	mesh__proc_child_signals(0, ~0ull);
	char num[16];
	fmt_pid(num, pid);
	char *const argv[] = {"mesh-init", MESH__PROC_INIT_FLAG, num, NULL};
	syscall(SYS_execve, init_path, argv, environ);
fail:
	err = errno;
	while (write(errfd, &err, sizeof err) < 0 && errno == EINTR)
		;
	_exit(127); /* and the namespace with it */
}

static int probe_child(void *arg)
{
	const char *const *maps = arg;
	_exit(maps && maps[0] && write_maps(maps) < 0 ? 1 : 0);
}

/* 0 when a clone with flags works (and exits 0), else an errno. */
static int try_clone(int flags, const char *const *maps)
{
	void *stack = mmap(NULL, 64 * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return errno;
	/* The probe child shares this memory but not its lock: keep it to
	 * system calls, like the spawner's children. */
	pid_t pid = clone(probe_child, (char *)stack + 64 * 1024, CLONE_VM | CLONE_VFORK | SIGCHLD | flags, (void *)maps);
	int e = pid < 0 ? errno : 0, st = 0;
	if (pid > 0) {
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			e = EPERM;
	}
	munmap(stack, 64 * 1024);
	return e;
}

/* What mesh-init execs: the mesh-init binary beside this one (libc only:
 * an exec of meshd itself, with its 29 shared libraries, cost several
 * times a small program's at every spawn: docs/DESIGN.md, "Figures behind
 * the code"), else this binary
 * (/proc/self/exe: its constructor below runs the init loop; test
 * binaries, a meshd without its mesh-init).  Chosen once, before any
 * clone (init_path, above). */

static void find_init(void)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return;
	self[n] = 0;
	char *slash = strrchr(self, '/');
	if (!slash || (size_t)(slash - self) + sizeof "/mesh-init" > sizeof init_path)
		return;
	char cand[4096];
	snprintf(cand, sizeof cand, "%.*s/mesh-init", (int)(slash - self), self);
	if (access(cand, X_OK) == 0 && strcmp(cand, self) != 0)
		snprintf(init_path, sizeof init_path, "%s", cand);
}

static pthread_once_t find_once = PTHREAD_ONCE_INIT;

const char *mesh__proc_init_path(void)
{
	pthread_once(&find_once, find_init);
	return init_path;
}

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_flags;
static char probe_why[200];

static void probe(void)
{
	mesh__proc_init_path();
	int e1 = try_clone(CLONE_NEWPID, NULL);
	if (e1 == 0) {
		probe_flags = CLONE_NEWPID;
		return;
	}
	char bufs[3][32];
	const char *maps[3];
	mesh__proc_ns_maps(bufs, maps);
	int e2 = try_clone(CLONE_NEWUSER | CLONE_NEWPID, maps);
	if (e2 == 0) {
		probe_flags = CLONE_NEWUSER | CLONE_NEWPID;
		return;
	}
	snprintf(probe_why, sizeof probe_why,
		 "no PID namespace: clone(CLONE_NEWPID): %s; with a user namespace: %s", strerror(e1), strerror(e2));
}

int mesh__proc_ns_flags(void)
{
	pthread_once(&probe_once, probe);
	return probe_flags;
}

enum mesh_proc_how mesh_proc_pidns_probe(char *why, size_t cap)
{
	int f = mesh__proc_ns_flags();
	if (why && cap)
		snprintf(why, cap, "%s", f ? "" : probe_why);
	return f ? MESH_PROC_HOW_PIDNS : MESH_PROC_HOW_GROUP;
}

int mesh_proc_child_kill(const struct mesh_proc_child *c, int sig)
{
	if (c->how != MESH_PROC_HOW_PIDNS)
		return mesh_proc_kill_group(c->pid, sig);
	if (c->init <= 1)
		return -EINVAL;
	return kill(c->init, sig) < 0 ? -errno : 0;
}

int mesh_proc_child_exit_code(const struct mesh_proc_child *c, const siginfo_t *si, int *sig)
{
	int code = mesh_proc_exit_code_si(si);
	*sig = si->si_code == CLD_KILLED || si->si_code == CLD_DUMPED ? si->si_status : 0;
	if (c->how == MESH_PROC_HOW_PIDNS && si->si_code == CLD_EXITED && code > 128 && code - 128 < NSIG)
		*sig = code - 128;
	return code;
}

/* The init loop.  Signals come from outside the namespace (meshd's stop
 * signal) or from inside; all are blocked and waited for -- a namespace's
 * init gets no signal it has no handler for, unless it is blocked -- and
 * passed on to the program's group.  Every child is reaped (orphans of the
 * namespace come here); the program's end is ours. */
void mesh__proc_init_main(pid_t prog)
{
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	prctl(PR_SET_NAME, "mesh-init");
	for (;;) {
		int st;
		pid_t p;
		while ((p = waitpid(-1, &st, WNOHANG)) > 0)
			if (p == prog)
				_exit(mesh_proc_exit_code(st));
		if (p < 0 && errno == ECHILD)
			_exit(255); /* no program: cannot happen */
		siginfo_t si;
		int sig = sigwaitinfo(&all, &si);
		if (sig <= 0 || sig == SIGCHLD)
			continue;
		if (kill(-prog, sig) < 0)
			kill(prog, sig);
	}
}

/* glibc passes main's arguments to ELF constructors. */
__attribute__((constructor)) static void init_hook(int argc, char **argv, char **envp)
{
	(void)envp;
	if (argc == 3 && argv && strcmp(argv[0], "mesh-init") == 0 && strcmp(argv[1], MESH__PROC_INIT_FLAG) == 0) {
		pid_t prog = (pid_t)atoi(argv[2]);
		if (prog > 1)
			mesh__proc_init_main(prog);
		_exit(255);
	}
	if (argc == 2 && argv && strcmp(argv[0], "mesh-init") == 0 && strcmp(argv[1], MESH__PROC_KEEP_FLAG) == 0)
		mesh__proc_keep_main();
}
