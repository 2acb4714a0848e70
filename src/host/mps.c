#include "host/mps.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "host/procfile.h"
#include "proc/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;


/* The tool's environment: ours, with CUDA_MPS_PIPE_DIRECTORY and, when
 * log_dir, CUDA_MPS_LOG_DIRECTORY in place of any we have.  envp points
 * into environ and into pipe and log, which hold the two set here. */
struct tool_env {
	char **envp;
	struct mesh_buf pipe, log;
};
#define TOOL_ENV_INIT {NULL, MESH_BUF_INIT, MESH_BUF_INIT}

/* Fills e (from TOOL_ENV_INIT) for pipe_dir and log_dir (NULL: none).
 * 0 or -ENOMEM; tool_env_release frees e either way. */
static int tool_env_init(struct tool_env *e, const char *pipe_dir, const char *log_dir)
{
	size_t n = 0;
	while (environ && environ[n])
		n++;
	if (!(e->envp = calloc(n + 3, sizeof *e->envp)) || mesh_buf_addf(&e->pipe, "CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir) ||
	    (log_dir && mesh_buf_addf(&e->log, "CUDA_MPS_LOG_DIRECTORY=%s", log_dir)))
		return -ENOMEM;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "CUDA_MPS_PIPE_DIRECTORY=", 24) != 0 &&
		    (!log_dir || strncmp(environ[i], "CUDA_MPS_LOG_DIRECTORY=", 23) != 0))
			e->envp[k++] = environ[i];
	e->envp[k++] = e->pipe.p;
	if (log_dir)
		e->envp[k++] = e->log.p;
	return 0;
}

/* Frees what tool_env_init made. */
static void tool_env_release(struct tool_env *e)
{
	mesh_buf_release(&e->pipe);
	mesh_buf_release(&e->log);
	free(e->envp);
}

/* Writes cmd and a newline to the tool's stdin, fd (no memory to run out
 * of: the line was once built in a buffer, and not sent when that
 * failed).  A tool that does not read its stdin must not wedge us: the
 * pipe holds far more than one command. */
static void tool_send(int fd, const char *cmd)
{
	if (mesh_write_all(fd, cmd, strlen(cmd)) == 0)
		(void)mesh_write_all(fd, "\n", 1);
}

/* Reads the tool's output from fd into *res (up to about 64 KiB kept)
 * until it exits (its pidfd fires) -- not until the pipe's end -- or the
 * deadline passes.  0, or MESH_E_TIMEOUT (or a poll error) with the tool
 * still running: the caller kills it. */
static int tool_read(int fd, int pidfd, uint64_t deadline, struct mesh_buf *res)
{
	int eof = 0, exited = 0, rc = 0;
	while (!exited) {
		uint64_t now = mesh_mono_ns();
		if (now >= deadline) {
			rc = MESH_E_TIMEOUT;
			break;
		}
		struct pollfd pfd[2] = {{.fd = eof ? -1 : fd, .events = POLLIN}, {.fd = pidfd, .events = POLLIN}};
		int pr = poll(pfd, 2, (int)((deadline - now) / MESH_NS_PER_MS) + 1);
		if (pr < 0 && errno != EINTR) {
			rc = -errno; /* not a spin until the deadline */
			break;
		}
		if (pr <= 0)
			continue;
		if (pfd[0].revents) {
			char buf[4096];
			ssize_t r = read(fd, buf, sizeof buf);
			if (r == 0 || (r < 0 && errno != EINTR))
				eof = 1;
			else if (r > 0 && res->len < 65536)
				mesh_buf_add(res, buf, (size_t)r);
		}
		exited = pfd[1].revents != 0;
	}
	/* What it wrote before it exited is in the pipe still. */
	if (exited && !eof && fcntl(fd, F_SETFL, O_NONBLOCK) == 0) {
		char buf[4096];
		ssize_t r;
		while ((r = read(fd, buf, sizeof buf)) > 0 && res->len < 65536)
			mesh_buf_add(res, buf, (size_t)r);
	}
	return rc;
}

/* Reaps the tool, SIGKILLed first (its group) when kill_it: its shell
 * exit code. */
static int tool_reap(pid_t pid, int kill_it)
{
	if (kill_it)
		mesh_proc_kill_group(pid, SIGKILL);
	int st = 0;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return mesh_proc_exit_code(st);
}

/* Runs the control tool: argv1 (NULL: none) as its argument, cmd (NULL:
 * none) and a newline on its stdin, CUDA_MPS_PIPE_DIRECTORY=pipe_dir and,
 * when log_dir, CUDA_MPS_LOG_DIRECTORY=log_dir in its environment.  Its
 * stdout (and its stderr too with with_err) is collected into *out until
 * it exits -- not until the pipe's end: `-d` leaves a daemon behind that
 * may hold it.  *status: its shell exit code.  0, -errno, MESH_E_TIMEOUT. */
static int tool_run(const char *pipe_dir, const char *log_dir, const char *argv1, const char *cmd, int with_err,
		    char **out, int *status, uint64_t timeout_ns)
{
	int in[2] = {-1, -1}, op[2] = {-1, -1}, pidfd = -1, rc = 0;
	struct tool_env env = TOOL_ENV_INIT;
	struct mesh_buf res = MESH_BUF_INIT;
	struct mesh_proc_spawner *sp = NULL;
	char *path = NULL;
	*out = NULL;
	*status = -1;
	if ((cmd && pipe2(in, O_CLOEXEC) < 0) || pipe2(op, O_CLOEXEC) < 0) {
		rc = -errno;
		goto done;
	}
	if ((rc = tool_env_init(&env, pipe_dir, log_dir)))
		goto done;
	char *argv[] = {MESH_MPS_CONTROL, (char *)argv1, NULL};
	pid_t pid;
	/* A spawner of its own: the tool is reaped before it is freed. */
	if ((rc = mesh_proc_resolve(MESH_MPS_CONTROL, &path)) || (rc = mesh_proc_spawner_new(&sp)))
		goto done;
	struct mesh_proc_opts po = MESH_PROC_OPTS_INIT;
	po.path = path, po.argv = argv, po.envp = env.envp, po.in_fd = in[0], po.out_fd = op[1], po.err_fd = with_err ? -1 : 2;
	if ((rc = mesh_proc_spawn(sp, &po, &pid, &pidfd)))
		goto done;
	close(op[1]);
	op[1] = -1;
	if (cmd) {
		close(in[0]);
		in[0] = -1;
		tool_send(in[1], cmd);
		close(in[1]);
		in[1] = -1;
	}
	rc = tool_read(op[0], pidfd, mesh_mono_ns() + timeout_ns, &res);
	*status = tool_reap(pid, rc != 0);
	*out = res.p ? mesh_buf_detach(&res, NULL) : strdup("");
	if (!*out && !rc)
		rc = -ENOMEM;
done:
	for (int i = 0; i < 2; i++) {
		if (in[i] >= 0)
			close(in[i]);
		if (op[i] >= 0)
			close(op[i]);
	}
	if (pidfd >= 0)
		close(pidfd);
	mesh_proc_spawner_free(sp);
	free(path);
	mesh_buf_release(&res);
	tool_env_release(&env);
	return rc;
}

int mesh_mps_control(const char *pipe_dir, const char *cmd, char **out, uint64_t timeout_ns)
{
	int st;
	int rc = tool_run(pipe_dir, NULL, NULL, cmd, 0, out, &st, timeout_ns);
	if (!rc && st != 0)
		rc = MESH_E_REFUSED;
	if (rc) {
		free(*out);
		*out = NULL;
	}
	return rc;
}

/* A control daemon serves pipe_dir: its socket is there and it answers. */
static int daemon_answers(const char *pipe_dir)
{
	struct mesh_buf ctl = MESH_BUF_INIT;
	char *o = NULL;
	mesh_buf_addf(&ctl, "%s/control", pipe_dir);
	int ok = ctl.p && access(ctl.p, F_OK) == 0 && mesh_mps_control(pipe_dir, "get_server_list", &o, MESH_NS_PER_S) == 0;
	free(o);
	mesh_buf_release(&ctl);
	return ok;
}

int mesh_mps_daemon_up(const char *pipe_dir, const char *log_dir, uint64_t timeout_ns, int *started, char **err)
{
	char *path = NULL, *o = NULL;
	int st;
	*started = 0;
	int rc = mesh_proc_resolve(MESH_MPS_CONTROL, &path);
	free(path);
	if (rc == -ENOMEM)
		return rc;
	if (rc)
		return mesh_errf(err, MESH_E_NOGPU, "--isolation mps: %s is not in PATH (%s): install NVIDIA's MPS control "
				 "tool or run meshd without --isolation mps", MESH_MPS_CONTROL, mesh_strerror(rc));
	if (daemon_answers(pipe_dir))
		return 0;
	/* The daemon makes neither directory. */
	if ((mkdir(pipe_dir, 0755) < 0 && errno != EEXIST) || (mkdir(log_dir, 0755) < 0 && errno != EEXIST))
		return mesh_errf(err, MESH_E_NOGPU, "--isolation mps: cannot make the MPS directory '%s' or '%s': %s",
				 pipe_dir, log_dir, strerror(errno));
	rc = tool_run(pipe_dir, log_dir, "-d", NULL, 1, &o, &st, timeout_ns);
	if (rc || st != 0) {
		/* Its exit code and the first line it wrote: why, in its words. */
		char why[96];
		size_t l = o ? strcspn(o, "\n") : 0;
		if (rc)
			snprintf(why, sizeof why, "%s", mesh_strerror(rc));
		else
			snprintf(why, sizeof why, "exit %d%s", st, l ? ": " : "");
		if (rc != -ENOMEM)
			rc = mesh_errf(err, MESH_E_NOGPU, "--isolation mps: %s -d (pipe directory '%s') failed: %s%.*s",
				       MESH_MPS_CONTROL, pipe_dir, why, rc ? 0 : (int)l, o ? o : "");
		free(o);
		return rc;
	}
	free(o);
	/* It forks the daemon and returns: the socket comes a moment later. */
	uint64_t deadline = mesh_mono_ns() + timeout_ns;
	while (!daemon_answers(pipe_dir)) {
		if (mesh_mono_ns() >= deadline)
			return mesh_errf(err, MESH_E_NOGPU,
					 "--isolation mps: %s -d started but no control daemon answers in '%s' after %llu ms (its "
					 "log: '%s')",
					 MESH_MPS_CONTROL, pipe_dir, (unsigned long long)(timeout_ns / MESH_NS_PER_MS), log_dir);
		struct timespec ts = {0, 20 * 1000000};
		nanosleep(&ts, NULL);
	}
	*started = 1;
	return 0;
}

int mesh_mps_daemon_quit(const char *pipe_dir, char **err)
{
	char *o = NULL;
	int rc = mesh_mps_control(pipe_dir, "quit", &o, 5 * MESH_NS_PER_S);
	free(o);
	return rc ? mesh_errf(err, rc, "%s quit: %s", MESH_MPS_CONTROL, mesh_strerror(rc)) : 0;
}

int mesh_mps_check_client(void *ctx, pid_t pid, char **err)
{
	const char *dir = ctx ? ctx : "";
	char p[64], *env = NULL;
	size_t len = 0;
	snprintf(p, sizeof p, "/proc/%d/environ", (int)pid);
	if (mesh__read_proc(p, 1 << 20, &env, &len) != 0)
		return mesh_errf(err, MESH_E_REFUSED, "cannot read the environment of pid %d", (int)pid);
	struct mesh_buf want = MESH_BUF_INIT;
	mesh_buf_addf(&want, "CUDA_MPS_PIPE_DIRECTORY=%s", dir);
	int found = 0;
	for (size_t i = 0; want.p && i < len; i += strlen(env + i) + 1)
		if (strcmp(env + i, want.p) == 0)
			found = 1;
	mesh_buf_release(&want);
	free(env);
	if (!found)
		return mesh_errf(err, MESH_E_REFUSED, "pid %d does not use meshd's MPS pipe directory '%s'", (int)pid, dir);
	struct mesh_buf ctl = MESH_BUF_INIT;
	mesh_buf_addf(&ctl, "%s/control", dir);
	int ok = ctl.p && access(ctl.p, F_OK) == 0;
	mesh_buf_release(&ctl);
	if (!ok)
		return mesh_errf(err, MESH_E_REFUSED, "no MPS control socket in '%s' (is %s -d running?)", dir,
			   MESH_MPS_CONTROL);
	return 0;
}

int mesh_mps_terminate_client(void *ctx, pid_t pid, char **err)
{
	const char *dir = ctx ? ctx : "";
	char *list = NULL;
	int rc = mesh_mps_control(dir, "get_server_list", &list, MESH_NS_PER_S);
	if (rc)
		return mesh_errf(err, rc, "%s get_server_list: %s", MESH_MPS_CONTROL, mesh_strerror(rc));
	int first = 0;
	char *save = NULL;
	for (char *tok = strtok_r(list, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
		char *end;
		long sp = strtol(tok, &end, 10);
		if (*end || sp <= 0)
			continue;
		char cmd[96], *o = NULL;
		snprintf(cmd, sizeof cmd, "terminate_client %ld %d", sp, (int)pid);
		int r = mesh_mps_control(dir, cmd, &o, MESH_NS_PER_S);
		free(o);
		if (r && !first)
			first = r;
	}
	free(list);
	if (first)
		return mesh_errf(err, first, "%s terminate_client for pid %d: %s", MESH_MPS_CONTROL, (int)pid,
			   mesh_strerror(first));
	return 0;
}
