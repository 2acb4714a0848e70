/* The process executor: one attempt = one process group, its stdout and
 * stderr read through pipes, its end seen through a pidfd (executor.h has
 * the protocol, runner.h the rules a chunk's process follows). */
#include "exec/executor.h"
#include "exec/runner.h"

#include "base/clock.h"
#include "proc/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* After the leader exits, how long its pipes may stay open (a background
 * grandchild holding them) before we stop waiting for their end. */
#define PIPE_GRACE (1 * MESH_NS_PER_S)

struct unit {
	int busy;
	pid_t pid;
	int pidfd, fd_out, fd_err;
	int exited, wstatus, start_err;
	uint64_t t_exit;
	char env_chunk[48], env_attempt[48], env_slot[48];
	char **envp;
};

struct proc_ex {
	struct mesh__executor base; /* first: the driver's handle */
	struct mesh_proc_spawner *sp;
	/* Kills the attempts' groups if this process dies (proc.h): a
	 * chunk's background children are not PR_SET_PDEATHSIG's. */
	struct mesh_proc_keeper *keeper;
	int nice;
	char *path; /* resolved argv[0], NULL when argv[0] holds a placeholder */
	int nullfd;
	char **env_base;
	size_t env_n;
	struct unit *u; /* [nslots], by slot - 1 */
};

static struct unit *unit_of(struct mesh__executor *ex, unsigned slot)
{
	return &((struct proc_ex *)ex)->u[slot - 1];
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static int proc_start(struct mesh__executor *ex, const struct mesh__exec_chunk *c, struct mesh__exec_result *res)
{
	struct proc_ex *p = (struct proc_ex *)ex;
	struct unit *u = unit_of(ex, c->slot);
	int rc, pout[2] = {-1, -1}, perr[2] = {-1, -1};
	char *path = p->path, *own_path = NULL;
	snprintf(u->env_chunk, sizeof u->env_chunk, "MESH_CHUNK=%" PRIu64, c->cid);
	snprintf(u->env_attempt, sizeof u->env_attempt, "MESH_ATTEMPT=%" PRIu32, c->attempt);
	if (pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0) {
		rc = -errno;
		for (int i = 0; i < 2; i++) {
			close_fd(&pout[i]);
			close_fd(&perr[i]);
		}
		return rc;
	}
	if (!path) {
		rc = mesh_proc_resolve(c->argv[0], &own_path);
		path = own_path;
	}
	if (path) {
		struct mesh_proc_opts po = MESH_PROC_OPTS_INIT;
		po.path = path, po.argv = c->argv, po.envp = u->envp, po.nice = p->nice;
		po.in_fd = c->stdin_fd > 2 ? c->stdin_fd : p->nullfd, po.out_fd = pout[1], po.err_fd = perr[1];
		po.flags = MESH_PROC_INHERIT | (p->nice != MESH_EXEC_NICE_INHERIT ? MESH_PROC_NICE : 0);
		po.keeper = p->keeper;
		rc = mesh_proc_spawn(p->sp, &po, &u->pid, NULL);
	}
	free(own_path);
	close(pout[1]);
	close(perr[1]);
	if (rc < 0) {
		close(pout[0]);
		close(perr[0]);
		u->pid = 0;
		if (rc == -ENOMEM)
			return rc;
		/* Cannot exec: the attempt ends here, as a shell's would. */
		u->busy = 1;
		u->exited = 1;
		u->start_err = rc;
		*res = (struct mesh__exec_result){.code = rc == -ENOENT ? 127 : 126, .signal = 0, .start_err = rc};
		return 1;
	}
	u->pidfd = (int)syscall(SYS_pidfd_open, u->pid, 0);
	if (u->pidfd < 0) {
		rc = -errno;
		kill(-u->pid, SIGKILL);
		while (waitpid(u->pid, &u->wstatus, 0) < 0 && errno == EINTR)
			;
		mesh_proc_keeper_forget(p->keeper, u->pid);
		close(pout[0]);
		close(perr[0]);
		u->pid = 0;
		return rc;
	}
	u->busy = 1;
	u->fd_out = pout[0];
	u->fd_err = perr[0];
	return 0;
}

static unsigned proc_events(struct mesh__executor *ex, unsigned slot, struct pollfd *pf, unsigned cap,
			    uint64_t *wake)
{
	struct unit *u = unit_of(ex, slot);
	unsigned n = 0;
	int fds[3] = {u->pidfd, u->fd_out, u->fd_err};
	for (int i = 0; i < 3 && n < cap; i++)
		if (fds[i] >= 0)
			pf[n++] = (struct pollfd){.fd = fds[i], .events = POLLIN};
	if (u->exited && (u->fd_out >= 0 || u->fd_err >= 0) && u->t_exit + PIPE_GRACE < *wake)
		*wake = u->t_exit + PIPE_GRACE;
	return n;
}

/* Reaps the leader if it exited. */
static void reap(struct unit *u)
{
	int st;
	pid_t p;
	do
		p = waitpid(u->pid, &st, WNOHANG);
	while (p < 0 && errno == EINTR);
	if (p != u->pid)
		return;
	u->exited = 1;
	u->wstatus = st;
	u->t_exit = mesh_mono_ns();
	close_fd(&u->pidfd);
}

static void read_stream(struct mesh__executor *ex, unsigned slot, int *fd, int out)
{
	char tmp[65536];
	ssize_t n;
	do
		n = read(*fd, tmp, sizeof tmp);
	while (n < 0 && errno == EINTR);
	if (n < 0 && errno == EAGAIN)
		return;
	if (n <= 0 || ex->sink.output(ex->sink.arg, slot, out, tmp, (size_t)n) < 0)
		close_fd(fd);
}

static void proc_dispatch(struct mesh__executor *ex, unsigned slot, const struct pollfd *pf)
{
	struct unit *u = unit_of(ex, slot);
	/* An fd closed earlier in this round is no longer ours: skip it. */
	if (pf->fd < 0)
		return;
	if (pf->fd == u->pidfd)
		reap(u);
	else if (pf->fd == u->fd_out)
		read_stream(ex, slot, &u->fd_out, 1);
	else if (pf->fd == u->fd_err)
		read_stream(ex, slot, &u->fd_err, 0);
}

static int proc_status(struct mesh__executor *ex, unsigned slot, uint64_t now, struct mesh__exec_result *res)
{
	struct unit *u = unit_of(ex, slot);
	if (!u->exited)
		return MESH__EXEC_RUNNING;
	if (u->start_err)
		*res = (struct mesh__exec_result){u->start_err == -ENOENT ? 127 : 126, 0, u->start_err};
	else
		*res = (struct mesh__exec_result){mesh_proc_exit_code(u->wstatus),
						  WIFSIGNALED(u->wstatus) ? WTERMSIG(u->wstatus) : 0, 0};
	if ((u->fd_out >= 0 || u->fd_err >= 0) && now < u->t_exit + PIPE_GRACE)
		return MESH__EXEC_EXITED;
	return MESH__EXEC_ENDED;
}

static void proc_signal(struct mesh__executor *ex, unsigned slot, int sig)
{
	struct unit *u = unit_of(ex, slot);
	if (u->busy && !u->exited && u->pid > 0)
		kill(-u->pid, sig);
}

static void proc_release(struct mesh__executor *ex, unsigned slot)
{
	struct unit *u = unit_of(ex, slot);
	if (u->busy && !u->exited && u->pid > 0) {
		kill(-u->pid, SIGKILL);
		while (waitpid(u->pid, &u->wstatus, 0) < 0 && errno == EINTR)
			;
	}
	/* Its leader is reaped: what is left of the group (a background
	 * child) outlives the attempt, as a shell's would. */
	if (u->busy && u->pid > 0)
		mesh_proc_keeper_forget(((struct proc_ex *)ex)->keeper, u->pid);
	close_fd(&u->pidfd);
	close_fd(&u->fd_out);
	close_fd(&u->fd_err);
	u->busy = u->exited = u->start_err = 0;
	u->pid = 0;
}

static void proc_free(struct mesh__executor *ex)
{
	struct proc_ex *p = (struct proc_ex *)ex;
	if (p->u) {
		for (unsigned i = 0; i < ex->nslots; i++) {
			proc_release(ex, i + 1);
			free(p->u[i].envp);
		}
		free(p->u);
	}
	if (p->nullfd >= 0)
		close(p->nullfd);
	mesh_proc_keeper_free(p->keeper);
	mesh_proc_spawner_free(p->sp);
	free(p->env_base);
	free(p->path);
	free(p);
}

static const struct mesh__executor_ops proc_ops = {
	.start = proc_start,
	.events = proc_events,
	.dispatch = proc_dispatch,
	.status = proc_status,
	.signal = proc_signal,
	.release = proc_release,
	.free = proc_free,
};

/* The parent's environment without our own MESH_* variables, then per
 * slot three entries that each start fills in. */
static int setup_env(struct proc_ex *p)
{
	extern char **environ;
	size_t n = 0;
	for (char **e = environ; e && *e; e++)
		n++;
	p->env_base = calloc(n + 1, sizeof *p->env_base);
	if (!p->env_base)
		return -ENOMEM;
	for (char **e = environ; e && *e; e++) {
		if (!strncmp(*e, "MESH_CHUNK=", 11) || !strncmp(*e, "MESH_ATTEMPT=", 13) ||
		    !strncmp(*e, "MESH_SLOT=", 10))
			continue;
		p->env_base[p->env_n++] = *e;
	}
	for (unsigned i = 0; i < p->base.nslots; i++) {
		struct unit *u = &p->u[i];
		u->envp = calloc(p->env_n + 4, sizeof *u->envp);
		if (!u->envp)
			return -ENOMEM;
		memcpy(u->envp, p->env_base, p->env_n * sizeof *u->envp);
		snprintf(u->env_slot, sizeof u->env_slot, "MESH_SLOT=%u", i + 1);
		u->envp[p->env_n] = u->env_chunk;
		u->envp[p->env_n + 1] = u->env_attempt;
		u->envp[p->env_n + 2] = u->env_slot;
	}
	return 0;
}

int mesh__exec_proc_new(const char *argv0, unsigned nslots, int nice, const struct mesh__exec_sink *sink,
			struct mesh__executor **out)
{
	int rc;
	struct proc_ex *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	p->base.ops = &proc_ops;
	p->base.sink = *sink;
	p->base.nslots = nslots;
	p->nullfd = -1;
	p->u = calloc(nslots, sizeof *p->u);
	if (!p->u) {
		rc = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < nslots; i++)
		p->u[i].pidfd = p->u[i].fd_out = p->u[i].fd_err = -1;
	if (!strstr(argv0, "{}") && !strstr(argv0, "{#}") && (rc = mesh_proc_resolve(argv0, &p->path)) < 0)
		goto fail;
	p->nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (p->nullfd < 0) {
		rc = -errno;
		goto fail;
	}
	if ((rc = setup_env(p)) < 0 || (rc = mesh_proc_spawner_new(&p->sp)) < 0 ||
	    (rc = mesh_proc_keeper_new(p->sp, &p->keeper)) < 0)
		goto fail;
	p->nice = nice;
	*out = &p->base;
	return 0;
fail:
	proc_free(&p->base);
	return rc;
}
