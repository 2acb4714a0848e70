#include "base/asan.h"
#include "base/thread.h"
#include "proc/proc.h"
#include "proc/spawn_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

struct mesh_proc_spawner {
	pthread_mutex_t mu; /* one spawn at a time */
	pthread_mutex_t jmu;
	pthread_cond_t jcv;
	pthread_t th;
	int quit;
	const struct mesh_proc_opts *job;
	int want_pidfd;
	struct mesh_proc_child res;
	int rc;
	int done;
	int devnull;
	int alivefd;	       /* a pidfd of this process, for mesh-init's check; -1: none */
	uint64_t inherit_mask; /* the creator's mask, for MESH_PROC_INHERIT */
	void *stack;	       /* the child's stack while it runs up to execve */
	void *stack2;	       /* under mesh-init: the program's, while mesh-init waits */
	/* A mesh-init that has started the program but not yet exec'd itself:
	 * it still runs on stack, reads ca and maps; the spawner waits for
	 * its exec (the pipe's end, initfd) after answering the spawn and
	 * before the next one (-1: none). */
	int initfd;
	struct mesh__proc_cargs ca;
	char maps[3][32];
};

#define SPAWN_STACK MESH__PROC_STACK

#ifdef MESH_UNDER_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* A child's frames never return (exec or _exit): under ASan their scope
 * poisoning stays on the stack's shadow and the next child, on the same
 * stack, would trip over it.  Clean before each use. */
static void fresh_stack(void *stack)
{
#ifdef MESH_UNDER_ASAN
	ASAN_UNPOISON_MEMORY_REGION(stack, SPAWN_STACK);
#else
	(void)stack;
#endif
}

/* The kernel's struct sigaction, for raw rt_sigaction. */
struct ksigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};

/* Raw system calls: the child shares the parent's memory (CLONE_VM), so no
 * libc or sanitizer bookkeeping of signal handlers may run here. */
void mesh__proc_child_signals(unsigned flags, uint64_t mask)
{
	struct ksigaction dfl = {0}, cur;
	for (int sig = 1; sig < NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		/* A shell keeps an ignored signal ignored in its children, but
		 * an ignored SIGPIPE breaks `cmd | head` and an ignored SIGCHLD
		 * breaks wait(). */
		if ((flags & MESH_PROC_INHERIT) && sig != SIGPIPE && sig != SIGCHLD &&
		    syscall(SYS_rt_sigaction, sig, NULL, &cur, sizeof(uint64_t)) == 0 && cur.handler == (void *)SIG_IGN)
			continue;
		syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(uint64_t));
	}
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &mask, NULL, sizeof mask);
}

/* Moves in/out/err and the extra fds into place.  Every source goes above
 * every target first, so no dup2 clobbers a source still needed.  0 or -1
 * with errno; *errfd may move up. */
static int child_fds(const struct mesh_proc_opts *o, int devnull, int *errfd)
{
	int top = 2;
	for (size_t i = 0; i < o->nfds; i++)
		if (o->fds[i].to > top)
			top = o->fds[i].to;
	int src[3] = {o->in_fd, o->out_fd, o->err_fd >= 0 ? o->err_fd : o->out_fd}, hi[3 + MESH_PROC_FDS_MAX];
	for (int i = 0; i < 3; i++)
		if ((hi[i] = fcntl(src[i] >= 0 ? src[i] : devnull, F_DUPFD_CLOEXEC, top + 1)) < 0)
			return -1;
	for (size_t i = 0; i < o->nfds; i++)
		if ((hi[3 + i] = fcntl(o->fds[i].from, F_DUPFD_CLOEXEC, top + 1)) < 0)
			return -1;
	if (*errfd <= top) {
		int e2 = fcntl(*errfd, F_DUPFD_CLOEXEC, top + 1);
		if (e2 < 0)
			return -1;
		*errfd = e2;
	}
	for (int i = 0; i < 3; i++)
		if (dup2(hi[i], i) < 0)
			return -1;
	for (size_t i = 0; i < o->nfds; i++)
		if (dup2(hi[3 + i], o->fds[i].to) < 0)
			return -1;
	if (o->flags & MESH_PROC_INHERIT)
		return 0;
	if (syscall(SYS_close_range, (unsigned)top + 1, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		/* Older kernels: mark them one by one. */
		for (int fd = top + 1; fd < 65536; fd++)
			fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	return 0;
}

/* The pid /proc/self names: the process's pid in /proc's namespace (this
 * process's), also from inside a child PID namespace.  0 if unknown. */
static pid_t proc_self_pid(void)
{
	char b[16];
	ssize_t n = readlink("/proc/self", b, sizeof b - 1);
	pid_t v = 0;
	for (ssize_t i = 0; i < n; i++) {
		if (b[i] < '0' || b[i] > '9')
			return 0;
		v = v * 10 + (b[i] - '0');
	}
	return v;
}

static int child_ids(const struct mesh_proc_opts *o)
{
	if (!(o->flags & MESH_PROC_SETUID))
		return 0;
	if (o->ngroups > MESH_PROC_GROUPS_MAX) {
		errno = E2BIG;
		return -1;
	}
	/* Raw calls: glibc's wrappers broadcast the change to every thread of
	 * the process, and this child shares meshd's memory, not its threads. */
	if (syscall(SYS_setgroups, o->ngroups, o->groups) < 0 || syscall(SYS_setresgid, o->gid, o->gid, o->gid) < 0 ||
	    syscall(SYS_setresuid, o->uid, o->uid, o->uid) < 0)
		return -1;
	return 0;
}

/* The program's child: every step up to execve, only system calls; a
 * failure writes errno to a->errfd, sets a->failed, _exit(127). */
__attribute__((noreturn)) static void proc_child(struct mesh__proc_cargs *a)
{
	const struct mesh_proc_opts *o = a->o;
	int err, errfd = a->errfd;
	if (a->stack2)
		a->outer = proc_self_pid();
	if ((o->flags & MESH_PROC_SESSION) ? setsid() < 0 : setpgid(0, 0) < 0)
		goto fail;
	/* Registered before anything of the program runs (proc.h, keeper). */
	if (o->keeper && !a->stack2)
		mesh__proc_keep_register(o->keeper);
	/* Before PR_SET_PDEATHSIG: a change of credentials clears it. */
	if (!a->stack2 && o->cgroup_procs_fd >= 0 && write(o->cgroup_procs_fd, "0", 1) != 1)
		goto fail;
	if (child_ids(o) < 0)
		goto fail;
	if (!(o->flags & MESH_PROC_OUTLIVE)) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
			goto fail;
		/* The parent may have died between clone and prctl. */
		if (getppid() != a->parent)
			_exit(127);
	}
	for (size_t i = 0; i < o->nrlimits; i++) {
		struct rlimit rl = {.rlim_cur = o->rlimits[i].value, .rlim_max = o->rlimits[i].value};
		if (setrlimit(o->rlimits[i].resource, &rl) < 0)
			goto fail;
	}
	if (o->flags & MESH_PROC_NICE)
		(void)setpriority(PRIO_PROCESS, 0, o->nice); /* refused: the inherited one (proc.h) */
	if (child_fds(o, a->devnull, &errfd) < 0)
		goto fail;
	mesh__proc_child_signals(o->flags, (o->flags & MESH_PROC_INHERIT) ? a->mask : 0);
	syscall(SYS_execve, o->path, o->argv, o->envp);
fail:
	err = errno;
	a->failed = 1;
	while (write(errfd, &err, sizeof err) < 0 && errno == EINTR)
		;
	_exit(127);
}

int mesh__proc_child_main(void *arg)
{
	proc_child(arg);
}

static void reap(pid_t pid)
{
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* After a spawn under mesh-init was answered: its exec (or its end)
 * closes its end of the pipe; only then are its stack and arguments free
 * for the next spawn.  What it reports past its "started" (its own exec
 * failed: the namespace ends, the caller sees mesh-init exit 127) has no
 * one to go to. */
static void await_init_exec(struct mesh_proc_spawner *sp)
{
	int e;
	ssize_t r;
	if (sp->initfd < 0)
		return;
	do
		r = read(sp->initfd, &e, sizeof e);
	while (r > 0 || (r < 0 && errno == EINTR));
	close(sp->initfd);
	sp->initfd = -1;
}

static int do_spawn(struct mesh_proc_spawner *sp)
{
	const struct mesh_proc_opts *o = sp->job;
	struct mesh_proc_child *c = &sp->res;
	int p[2], ns = 0;
	*c = (struct mesh_proc_child){.pidfd = -1, .how = MESH_PROC_HOW_GROUP};
	if (o->nfds > MESH_PROC_FDS_MAX || o->nrlimits > MESH_PROC_RLIMITS_MAX ||
	    ((o->flags & MESH_PROC_SETUID) && o->ngroups > MESH_PROC_GROUPS_MAX))
		return -E2BIG;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	/* Like posix_spawn: the child borrows this thread's memory on its own
	 * stack and this thread sleeps until it has exec'd or failed -- no copy
	 * of the parent's page tables.  Under mesh-init the same holds for
	 * the program's child, which mesh-init (the clone) makes the same way;
	 * but the spawn is answered once the program has exec'd (mesh-init's
	 * "started" on the pipe), not after mesh-init's own exec: that one,
	 * after a child of its own, was most of a spawn's time (docs/DESIGN.md,
	 * "Figures behind the code") and holds up nothing of the program's.  So mesh-init is no
	 * vfork child: it runs beside this thread, which touches none of its
	 * stack or arguments (sp->ca) until the pipe's end says it exec'd. */
	struct mesh__proc_cargs *ca = &sp->ca;
	*ca = (struct mesh__proc_cargs){.o = o, .parent = getpid(), .errfd = p[1], .devnull = sp->devnull,
					.mask = sp->inherit_mask, .alivefd = -1};
	int (*fn)(void *) = mesh__proc_child_main, vfork = CLONE_VFORK;
	if ((o->flags & MESH_PROC_PIDNS) && (ns = mesh__proc_ns_flags()) != 0) {
		fn = mesh__proc_init_child;
		vfork = 0;
		ca->stack2 = sp->stack2;
		ca->alivefd = sp->alivefd;
		if (ns & CLONE_NEWUSER)
			mesh__proc_ns_maps(sp->maps, ca->maps);
	}
	fresh_stack(sp->stack);
	fresh_stack(sp->stack2);
	pid_t pid = clone(fn, (char *)sp->stack + SPAWN_STACK, CLONE_VM | vfork | SIGCHLD | ns, ca);
	if (pid < 0) {
		int e = -errno;
		close(p[0]);
		close(p[1]);
		return e;
	}
	close(p[1]);
	int cerr = 0;
	ssize_t r;
	do
		r = read(p[0], &cerr, sizeof cerr);
	while (r < 0 && errno == EINTR);
	if (ns && r == (ssize_t)sizeof cerr && cerr == 0) {
		sp->initfd = p[0]; /* started; mesh-init's exec is awaited after the answer */
	} else {
		close(p[0]);
		if (ns || r == (ssize_t)sizeof cerr) {
			/* Under mesh-init an end without "started" is a failure too. */
			reap(pid);
			if (!ns)
				mesh_proc_keeper_forget(o->keeper, pid);
			return r == (ssize_t)sizeof cerr && cerr ? -cerr : -EIO;
		}
	}
	if (sp->want_pidfd) {
		/* The child is not reaped yet, so its pid cannot be reused. */
		int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (pidfd < 0) {
			int e = -errno;
			kill(pid, SIGKILL);
			await_init_exec(sp);
			reap(pid);
			return e;
		}
		fcntl(pidfd, F_SETFD, FD_CLOEXEC);
		c->pidfd = pidfd;
	}
	c->init = c->pid = pid;
	if (ns) {
		c->how = MESH_PROC_HOW_PIDNS;
		if (ca->outer > 0)
			c->pid = ca->outer;
	}
	return 0;
}

static void *spawner_main(void *arg)
{
	struct mesh_proc_spawner *sp = arg;
	pthread_mutex_lock(&sp->jmu);
	for (;;) {
		while (!sp->job && !sp->quit)
			pthread_cond_wait(&sp->jcv, &sp->jmu);
		if (sp->quit)
			break;
		sp->rc = do_spawn(sp);
		sp->job = NULL;
		sp->done = 1;
		pthread_cond_broadcast(&sp->jcv);
		if (sp->initfd >= 0) {
			pthread_mutex_unlock(&sp->jmu);
			await_init_exec(sp);
			pthread_mutex_lock(&sp->jmu);
		}
	}
	pthread_mutex_unlock(&sp->jmu);
	return NULL;
}

static void spawner_destroy(struct mesh_proc_spawner *sp)
{
	if (sp->stack && sp->stack != MAP_FAILED)
		munmap(sp->stack, SPAWN_STACK);
	if (sp->stack2 && sp->stack2 != MAP_FAILED)
		munmap(sp->stack2, SPAWN_STACK);
	if (sp->devnull >= 0)
		close(sp->devnull);
	if (sp->alivefd >= 0)
		close(sp->alivefd);
	pthread_mutex_destroy(&sp->mu);
	pthread_mutex_destroy(&sp->jmu);
	pthread_cond_destroy(&sp->jcv);
	free(sp);
}

int mesh_proc_spawner_new(struct mesh_proc_spawner **out)
{
	struct mesh_proc_spawner *sp = calloc(1, sizeof *sp);
	if (!sp)
		return -ENOMEM;
	pthread_mutex_init(&sp->mu, NULL);
	pthread_mutex_init(&sp->jmu, NULL);
	pthread_cond_init(&sp->jcv, NULL);
	sp->initfd = -1;
	sp->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	sp->stack = mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	sp->stack2 = mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	/* Without pidfds (Linux < 5.3) mesh-init skips its check of this
	 * process's life and relies on PR_SET_PDEATHSIG alone. */
	sp->alivefd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (sp->alivefd >= 0)
		fcntl(sp->alivefd, F_SETFD, FD_CLOEXEC);
	if (sp->devnull < 0 || sp->stack == MAP_FAILED || sp->stack2 == MAP_FAILED) {
		int e = -errno;
		spawner_destroy(sp);
		return e;
	}
	/* The thread blocks every signal: the child starts with them blocked
	 * (no handler of the parent's can run in it) and sets its mask after
	 * the reset. */
	sigset_t old;
	pthread_sigmask(SIG_SETMASK, NULL, &old);
	sp->inherit_mask = 0;
	for (int sig = 1; sig < NSIG && sig <= 64; sig++)
		if (sigismember(&old, sig) == 1)
			sp->inherit_mask |= 1ull << (sig - 1);
	int rc = mesh_thread_start(&sp->th, spawner_main, sp);
	if (rc) {
		spawner_destroy(sp);
		return rc;
	}
	*out = sp;
	return 0;
}

void mesh_proc_spawner_free(struct mesh_proc_spawner *sp)
{
	if (!sp)
		return;
	pthread_mutex_lock(&sp->jmu);
	sp->quit = 1;
	pthread_cond_broadcast(&sp->jcv);
	pthread_mutex_unlock(&sp->jmu);
	pthread_join(sp->th, NULL);
	spawner_destroy(sp);
}

int mesh_proc_spawn_child(struct mesh_proc_spawner *sp, const struct mesh_proc_opts *o, int want_pidfd,
			  struct mesh_proc_child *c)
{
	int rc;
	pthread_mutex_lock(&sp->mu);
	pthread_mutex_lock(&sp->jmu);
	sp->job = o;
	sp->want_pidfd = want_pidfd;
	sp->done = 0;
	pthread_cond_broadcast(&sp->jcv);
	while (!sp->done)
		pthread_cond_wait(&sp->jcv, &sp->jmu);
	rc = sp->rc;
	if (rc == 0)
		*c = sp->res;
	pthread_mutex_unlock(&sp->jmu);
	pthread_mutex_unlock(&sp->mu);
	return rc;
}

int mesh_proc_spawn(struct mesh_proc_spawner *sp, const struct mesh_proc_opts *o, pid_t *pid, int *pidfd)
{
	struct mesh_proc_opts plain = *o;
	struct mesh_proc_child c;
	plain.flags &= ~(unsigned)MESH_PROC_PIDNS;
	int rc = mesh_proc_spawn_child(sp, &plain, pidfd != NULL, &c);
	if (rc == 0) {
		*pid = c.pid;
		if (pidfd)
			*pidfd = c.pidfd;
	}
	return rc;
}

static int check_exec(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EACCES;
	if (access(path, X_OK) < 0)
		return -errno;
	return 0;
}

int mesh_proc_resolve(const char *name, char **out)
{
	*out = NULL;
	if (!name[0])
		return -ENOENT;
	if (strchr(name, '/')) {
		int rc = check_exec(name);
		if (rc < 0)
			return rc;
		*out = strdup(name);
		return *out ? 0 : -ENOMEM;
	}
	const char *path = getenv("PATH");
	if (!path || !path[0])
		path = "/usr/local/bin:/usr/bin:/bin";
	int seen_eacces = 0;
	size_t nl = strlen(name);
	for (const char *p = path;;) {
		const char *c = strchr(p, ':');
		size_t dl = c ? (size_t)(c - p) : strlen(p);
		char *cand = malloc(dl + nl + 3);
		if (!cand)
			return -ENOMEM;
		if (dl == 0) {
			memcpy(cand, "./", 2);
			dl = 2;
		} else {
			memcpy(cand, p, dl);
			cand[dl++] = '/';
		}
		memcpy(cand + dl, name, nl + 1);
		int rc = check_exec(cand);
		if (rc == 0) {
			*out = cand;
			return 0;
		}
		free(cand);
		if (rc == -EACCES)
			seen_eacces = 1;
		if (!c)
			break;
		p = c + 1;
	}
	return seen_eacces ? -EACCES : -ENOENT;
}
