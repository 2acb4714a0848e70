#include "exec/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int mesh__spawner_init(struct mesh__spawner *s, const sigset_t *child_mask)
{
	int p[2];
	memset(s, 0, sizeof *s);
	s->err_r = s->err_w = -1;
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	if (fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		int e = -errno;
		close(p[0]);
		close(p[1]);
		return e;
	}
	s->err_r = p[0];
	s->err_w = p[1];
	if (child_mask)
		s->child_mask = *child_mask;
	else
		pthread_sigmask(SIG_SETMASK, NULL, &s->child_mask);
	/* Caught signals revert to default at exec by themselves; ignored ones
	 * are inherited.  SIGPIPE ignored by a parent breaks `cmd | head` in
	 * the child, so that one is reset; the others follow the caller. */
	struct sigaction sa;
	int k = 0;
	static const int sigs[] = {SIGPIPE, SIGINT, SIGTERM, SIGQUIT, SIGCHLD, SIGTSTP};
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		if (sigaction(sigs[i], NULL, &sa) < 0)
			continue;
		/* A handler must not run in the vfork child (it shares our
		 * memory) between unblocking and exec: reset those too. */
		if (sa.sa_handler != SIG_DFL && (sa.sa_handler != SIG_IGN || sigs[i] == SIGPIPE || sigs[i] == SIGCHLD))
			s->reset[k++] = sigs[i];
	}
	s->reset[k] = 0;
	return 0;
}

void mesh__spawner_release(struct mesh__spawner *s)
{
	if (s->err_r >= 0)
		close(s->err_r);
	if (s->err_w >= 0)
		close(s->err_w);
	s->err_r = s->err_w = -1;
}

/* Runs in the vfork child: only system calls, no allocation, no stdio. */
static void __attribute__((noreturn)) child(struct mesh__spawner *s, const char *path, char *const argv[],
					       char *const envp[], int in, int out, int err, pid_t parent)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	for (int i = 0; s->reset[i]; i++)
		sigaction(s->reset[i], &dfl, NULL);
	if (s->nice)
		setpriority(PRIO_PROCESS, 0, getpriority(PRIO_PROCESS, 0) + s->nice);
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		goto fail;
	sigprocmask(SIG_SETMASK, &s->child_mask, NULL);
	execve(path, argv, envp);
fail:;
	int e = errno;
	while (write(s->err_w, &e, sizeof e) < 0 && errno == EINTR)
		;
	_exit(127);
}

int mesh__spawn(struct mesh__spawner *s, const char *path, char *const argv[], char *const envp[], int in, int out,
		int err, pid_t *pid)
{
	sigset_t all, old;
	pid_t parent = getpid();
	/* No signal may reach a handler in the child before it resets it. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pid_t p = vfork();
	if (p == 0)
		child(s, path, argv, envp, in, out, err, parent);
	int vfork_errno = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (p < 0)
		return -vfork_errno;
	/* vfork returned: the child has exec'd (nothing in the pipe) or wrote
	 * its errno and exited. */
	int e = 0;
	ssize_t r;
	do
		r = read(s->err_r, &e, sizeof e);
	while (r < 0 && errno == EINTR);
	if (r == (ssize_t)sizeof e) {
		int st;
		while (waitpid(p, &st, 0) < 0 && errno == EINTR)
			;
		return e > 0 ? -e : -EIO;
	}
	*pid = p;
	return 0;
}

int mesh__exit_code(int wstatus)
{
	if (WIFEXITED(wstatus))
		return WEXITSTATUS(wstatus);
	if (WIFSIGNALED(wstatus))
		return 128 + WTERMSIG(wstatus);
	return 255;
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

int mesh__resolve_cmd(const char *name, char **out)
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
