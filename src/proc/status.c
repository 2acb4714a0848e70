#include "proc/proc.h"

#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

static int shell_code(int exited, int value)
{
	return exited ? value & 0xff : 128 + value;
}

int mesh_proc_exit_code(int wstatus)
{
	if (WIFEXITED(wstatus))
		return shell_code(1, WEXITSTATUS(wstatus));
	if (WIFSIGNALED(wstatus))
		return shell_code(0, WTERMSIG(wstatus));
	return 255;
}

int mesh_proc_exit_code_si(const siginfo_t *si)
{
	if (si->si_code == CLD_EXITED)
		return shell_code(1, si->si_status);
	if (si->si_code == CLD_KILLED || si->si_code == CLD_DUMPED)
		return shell_code(0, si->si_status);
	return 255;
}

int mesh_proc_kill_group(pid_t pgid, int sig)
{
	/* kill(-1) would signal every process we may signal. */
	if (pgid <= 1)
		return -EINVAL;
	return kill(-pgid, sig) < 0 ? -errno : 0;
}

int mesh_proc_group_gone(pid_t pgid)
{
	return mesh_proc_kill_group(pgid, 0) == -ESRCH;
}

void mesh_proc_stop_begin(struct mesh_proc_stop *st, pid_t pgid, int sig, uint64_t grace_ns, uint64_t now)
{
	st->pgid = pgid;
	st->deadline = now + grace_ns;
	st->killed = sig == SIGKILL;
	mesh_proc_kill_group(pgid, sig);
}

int mesh_proc_stop_step(struct mesh_proc_stop *st, uint64_t now)
{
	if (st->killed || now < st->deadline)
		return 0;
	st->killed = 1;
	mesh_proc_kill_group(st->pgid, SIGKILL);
	return 1;
}
