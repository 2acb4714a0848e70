#include "host/spawn.h"

#include "base/err.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

struct mesh_spawner {
	pthread_mutex_t mu;	/* one spawn at a time */
	pthread_mutex_t jmu;
	pthread_cond_t jcv;
	pthread_t th;
	int quit;
	const struct mesh_spawn_opts *job;
	pid_t pid;
	int pidfd;
	int rc;
	int done;
	int devnull;
	void *stack; /* the child's stack while it runs up to execve */
};

#define SPAWN_STACK (256u * 1024)

static int sys_pidfd_open(pid_t pid)
{
	return (int)syscall(SYS_pidfd_open, pid, 0);
}

/* The child: only system calls from here to execve or _exit. */
static void __attribute__((noreturn)) child(const struct mesh_spawn_opts *o, pid_t parent, int errfd, int devnull)
{
	int err;
	if (setsid() < 0)
		goto fail;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		goto fail;
	/* meshd may have died between fork and prctl. */
	if (getppid() != parent)
		_exit(127);
	if (o->cgroup_procs_fd >= 0 && write(o->cgroup_procs_fd, "0", 1) != 1)
		goto fail;
	if (o->limits) {
		struct rlimit rl;
		if (o->enforced & MESH_LIM_MEMORY_RLIMIT) {
			rl.rlim_cur = rl.rlim_max = o->limits->memory;
			if (setrlimit(RLIMIT_DATA, &rl) < 0)
				goto fail;
		}
		if (o->enforced & MESH_LIM_NOFILE_RLIMIT) {
			rl.rlim_cur = rl.rlim_max = o->limits->open_files;
			if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
				goto fail;
		}
		if (o->enforced & MESH_LIM_NPROC_RLIMIT) {
			rl.rlim_cur = rl.rlim_max = o->limits->processes;
			if (setrlimit(RLIMIT_NPROC, &rl) < 0)
				goto fail;
		}
	}
	/* Move every source above every target first, so no dup2 clobbers a
	 * source that is still needed. */
	int top = 2;
	for (size_t i = 0; i < o->nfds; i++)
		if (o->fds[i].to > top)
			top = o->fds[i].to;
	int hi_out = fcntl(o->out_fd, F_DUPFD_CLOEXEC, top + 1);
	int hi_null = fcntl(devnull, F_DUPFD_CLOEXEC, top + 1);
	if (hi_out < 0 || hi_null < 0)
		goto fail;
	int hi[16];
	if (o->nfds > 16) {
		errno = E2BIG;
		goto fail;
	}
	for (size_t i = 0; i < o->nfds; i++)
		if ((hi[i] = fcntl(o->fds[i].from, F_DUPFD_CLOEXEC, top + 1)) < 0)
			goto fail;
	if (errfd <= top) {
		int e2 = fcntl(errfd, F_DUPFD_CLOEXEC, top + 1);
		if (e2 < 0)
			goto fail;
		errfd = e2;
	}
	if (dup2(hi_null, 0) < 0 || dup2(hi_out, 1) < 0 || dup2(hi_out, 2) < 0)
		goto fail;
	for (size_t i = 0; i < o->nfds; i++)
		if (dup2(hi[i], o->fds[i].to) < 0)
			goto fail;
	if (syscall(SYS_close_range, (unsigned)top + 1, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		/* Older kernels: mark them one by one. */
		for (int fd = top + 1; fd < 65536; fd++)
			if (fd != errfd)
				fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	/* Raw system calls: the child shares meshd's memory (CLONE_VM), so no
	 * libc or sanitizer bookkeeping of signal handlers may run here. */
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		uint64_t mask;
	} dfl = {0};
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(uint64_t));
	uint64_t none = 0;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, NULL, sizeof none);
	syscall(SYS_execve, o->path, o->argv, o->envp);
fail:
	err = errno;
	while (write(errfd, &err, sizeof err) < 0 && errno == EINTR)
		;
	_exit(127);
}

struct child_args {
	const struct mesh_spawn_opts *o;
	pid_t parent;
	int errfd, devnull;
};

static int child_main(void *arg)
{
	struct child_args *a = arg;
	child(a->o, a->parent, a->errfd, a->devnull);
}

static void do_spawn(struct mesh_spawner *sp)
{
	const struct mesh_spawn_opts *o = sp->job;
	int p[2];
	sp->pid = 0;
	sp->pidfd = -1;
	if (pipe2(p, O_CLOEXEC) < 0) {
		sp->rc = -errno;
		return;
	}
	pid_t parent = getpid();
	/* Like posix_spawn: the child borrows this thread's memory on its own
	 * stack and this thread sleeps until it has exec'd or failed -- no copy
	 * of meshd's page tables. */
	struct child_args ca = {o, parent, p[1], sp->devnull};
	pid_t pid = clone(child_main, (char *)sp->stack + SPAWN_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &ca);
	if (pid < 0) {
		sp->rc = -errno;
		close(p[0]);
		close(p[1]);
		return;
	}
	close(p[1]);
	int cerr = 0;
	ssize_t r;
	do
		r = read(p[0], &cerr, sizeof cerr);
	while (r < 0 && errno == EINTR);
	close(p[0]);
	if (r == (ssize_t)sizeof cerr) {
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		sp->rc = cerr ? -cerr : -EIO;
		return;
	}
	/* The child is not reaped yet, so its pid cannot be reused: pidfd_open is safe. */
	int pidfd = sys_pidfd_open(pid);
	if (pidfd < 0) {
		sp->rc = -errno;
		kill(pid, SIGKILL);
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		return;
	}
	fcntl(pidfd, F_SETFD, FD_CLOEXEC);
	sp->pid = pid;
	sp->pidfd = pidfd;
	sp->rc = 0;
}

static void *spawner_main(void *arg)
{
	struct mesh_spawner *sp = arg;
	pthread_mutex_lock(&sp->jmu);
	for (;;) {
		while (!sp->job && !sp->quit)
			pthread_cond_wait(&sp->jcv, &sp->jmu);
		if (sp->quit)
			break;
		do_spawn(sp);
		sp->job = NULL;
		sp->done = 1;
		pthread_cond_broadcast(&sp->jcv);
	}
	pthread_mutex_unlock(&sp->jmu);
	return NULL;
}

int mesh_spawner_new(struct mesh_spawner **out)
{
	struct mesh_spawner *sp = calloc(1, sizeof *sp);
	if (!sp)
		return -ENOMEM;
	sp->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (sp->devnull < 0) {
		int e = -errno;
		free(sp);
		return e;
	}
	sp->stack = mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (sp->stack == MAP_FAILED) {
		int e = -errno;
		close(sp->devnull);
		free(sp);
		return e;
	}
	pthread_mutex_init(&sp->mu, NULL);
	pthread_mutex_init(&sp->jmu, NULL);
	pthread_cond_init(&sp->jcv, NULL);
	/* The thread blocks every signal: the child starts with them blocked
	 * (no handler of meshd's can run in it) and unblocks after reset. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&sp->th, NULL, spawner_main, sp);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		munmap(sp->stack, SPAWN_STACK);
		close(sp->devnull);
		free(sp);
		return -rc;
	}
	*out = sp;
	return 0;
}

void mesh_spawner_free(struct mesh_spawner *sp)
{
	if (!sp)
		return;
	pthread_mutex_lock(&sp->jmu);
	sp->quit = 1;
	pthread_cond_broadcast(&sp->jcv);
	pthread_mutex_unlock(&sp->jmu);
	pthread_join(sp->th, NULL);
	munmap(sp->stack, SPAWN_STACK);
	close(sp->devnull);
	pthread_mutex_destroy(&sp->mu);
	pthread_mutex_destroy(&sp->jmu);
	pthread_cond_destroy(&sp->jcv);
	free(sp);
}

int mesh_spawn(struct mesh_spawner *sp, const struct mesh_spawn_opts *o, pid_t *pid, int *pidfd)
{
	int rc;
	pthread_mutex_lock(&sp->mu);
	pthread_mutex_lock(&sp->jmu);
	sp->job = o;
	sp->done = 0;
	pthread_cond_broadcast(&sp->jcv);
	while (!sp->done)
		pthread_cond_wait(&sp->jcv, &sp->jmu);
	rc = sp->rc;
	if (rc == 0) {
		*pid = sp->pid;
		*pidfd = sp->pidfd;
	}
	pthread_mutex_unlock(&sp->jmu);
	pthread_mutex_unlock(&sp->mu);
	return rc;
}

void mesh_tail_init(struct mesh_tail *t, unsigned keep)
{
	memset(t, 0, sizeof *t);
	t->keep = keep > 64 ? 64 : keep ? keep : 1;
}

static void tail_push(struct mesh_tail *t, const char *s, size_t n)
{
	char *l = malloc(n + 1);
	if (!l)
		return; /* a lost line in a crash report beats a dead meshd */
	memcpy(l, s, n);
	l[n] = 0;
	if (t->n == t->keep) {
		free(t->line[t->head]);
		t->line[t->head] = l;
		t->head = (t->head + 1) % t->keep;
	} else {
		t->line[(t->head + t->n) % t->keep] = l;
		t->n++;
	}
}

void mesh_tail_feed(struct mesh_tail *t, const char *data, size_t n)
{
	while (n) {
		const char *nl = memchr(data, '\n', n);
		size_t take = nl ? (size_t)(nl - data) : n;
		size_t room = MESH_TAIL_LINE_MAX - t->partlen;
		size_t c = take < room ? take : room;
		memcpy(t->part + t->partlen, data, c);
		t->partlen += c;
		if (take > c)
			t->part_long = 1;
		if (!nl)
			return;
		tail_push(t, t->part, t->partlen);
		t->partlen = 0;
		t->part_long = 0;
		data += take + 1;
		n -= take + 1;
	}
}

char *mesh_tail_text(const struct mesh_tail *t)
{
	size_t total = 1;
	for (unsigned i = 0; i < t->n; i++)
		total += strlen(t->line[(t->head + i) % t->keep]) + 1;
	total += t->partlen + 1;
	char *out = malloc(total), *w = out;
	if (!out)
		return NULL;
	/* An unfinished last line counts as one of the kept lines. */
	unsigned skip = t->partlen && t->n == t->keep ? 1 : 0;
	for (unsigned i = skip; i < t->n; i++) {
		const char *l = t->line[(t->head + i) % t->keep];
		size_t k = strlen(l);
		memcpy(w, l, k);
		w += k;
		*w++ = '\n';
	}
	if (t->partlen) {
		memcpy(w, t->part, t->partlen);
		w += t->partlen;
		*w++ = '\n';
	}
	*w = 0;
	return out;
}

void mesh_tail_release(struct mesh_tail *t)
{
	for (unsigned i = 0; i < t->n; i++)
		free(t->line[(t->head + i) % t->keep]);
	t->n = 0;
	t->head = 0;
	t->partlen = 0;
}

int mesh_proc_sample(pid_t pid, uint64_t *cpu_ns, uint64_t *rss)
{
	char p[64], buf[1024];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n;
	do
		n = read(fd, buf, sizeof buf - 1);
	while (n < 0 && errno == EINTR);
	int e = errno;
	close(fd);
	if (n <= 0)
		return n < 0 ? -e : -ENOENT;
	buf[n] = 0;
	/* The command name may hold spaces and ')': fields start after the last ')'. */
	char *s = strrchr(buf, ')');
	if (!s)
		return MESH_E_PARSE;
	s += 2;
	/* s is field 3 (state); utime is 14, stime 15, rss 24 (pages). */
	unsigned long long utime = 0, stime = 0, rsspages = 0;
	int field = 3;
	char *save = NULL;
	for (char *tok = strtok_r(s, " ", &save); tok; tok = strtok_r(NULL, " ", &save), field++) {
		if (field == 14)
			utime = strtoull(tok, NULL, 10);
		else if (field == 15)
			stime = strtoull(tok, NULL, 10);
		else if (field == 24) {
			rsspages = strtoull(tok, NULL, 10);
			break;
		}
	}
	if (field != 24)
		return MESH_E_PARSE;
	static long tick, page;
	if (!tick)
		tick = sysconf(_SC_CLK_TCK);
	if (!page)
		page = sysconf(_SC_PAGESIZE);
	*cpu_ns = (utime + stime) * (1000000000ull / (unsigned long long)(tick > 0 ? tick : 100));
	*rss = rsspages * (unsigned long long)(page > 0 ? page : 4096);
	return 0;
}

int mesh_exit_code(int code, int status)
{
	if (code == CLD_EXITED)
		return status & 0xff;
	return 128 + status;
}
