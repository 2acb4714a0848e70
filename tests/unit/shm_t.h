/* Helpers shared by the slot and control-channel tests (test_shm.c,
 * test_shm_pieces.c, test_slot_pipe.c): a forked libmeshworker child on the
 * child end of a control pair, its reaping, its stop.  Header-only (static
 * inline). */
#ifndef MESH_TESTS_SHM_T_H
#define MESH_TESTS_SHM_T_H

#include "base/err.h"
#include "mesh/worker.h"
#include "runner/t.h"
#include "shm/shm.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* In the forked child: its worker, for handlers that need it (chunk ids,
 * reply parts) and get no ctx. */
static struct mesh_worker *shm_t_worker;

/* shm_t_fork_worker flags. */
enum {
	SHM_T_CTX_WORKER = 1, /* the handler's ctx is the worker (else NULL) */
	SHM_T_CHECK_PART = 2, /* first check that reply_part outside a handler is refused (else _exit(92)) */
};

/* Forks a child that runs libmeshworker with handler on the child end of a
 * control pair, as a spawned worker would (MESH_CONTROL_FD); the child
 * exits 0 when serve ends cleanly, 90 when open fails, 91 when serve fails.
 * The child's pid; *ctl: our end. */
static inline pid_t shm_t_fork_worker(struct mesh_ctl **ctl, mesh_worker_handler handler, int flags)
{
	int child_fd;
	if (mesh_ctl_pair(ctl, &child_fd) < 0)
		FAIL("mesh_ctl_pair");
	pid_t pid = fork();
	if (pid == 0) {
		dup2(child_fd, 10);
		setenv(MESH_CONTROL_FD_ENV, "10", 1);
		if (mesh_worker_open(&shm_t_worker) < 0)
			_exit(90);
		if ((flags & SHM_T_CHECK_PART) && mesh_worker_reply_part(shm_t_worker, "x", 1) != MESH_E_STATE)
			_exit(92);
		int rc = mesh_worker_serve(shm_t_worker, handler, (flags & SHM_T_CTX_WORKER) ? shm_t_worker : NULL);
		mesh_worker_close(shm_t_worker);
		_exit(rc < 0 ? 91 : 0);
	}
	close(child_fd);
	return pid;
}

/* Waits up to 10 s for pid (then SIGKILLs it and says -1): its exit status,
 * or 128 + the signal that ended it. */
static inline int shm_t_reap(pid_t pid)
{
	int st;
	uint64_t t0 = t_now_ms();
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (t_now_ms() - t0 > 10000) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(2000);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Tells the worker on ctl to exit, expects it to exit 0, frees ctl and s. */
static inline void shm_t_stop(struct mesh_ctl *ctl, struct mesh_slot *s, pid_t pid)
{
	EXPECT_EQ(mesh_ctl_exit(ctl, s), 0);
	EXPECT_EQ(shm_t_reap(pid), 0);
	mesh_ctl_free(ctl);
	mesh_slot_free(s);
}

#endif
