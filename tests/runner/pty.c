#include "runner/pty.h"

#include <errno.h>
#include <fcntl.h>
#include <pty.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int t_pty_start(struct t_pty *p, const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	struct winsize ws = {.ws_row = 50, .ws_col = 200};
	p->pid = forkpty(&p->master, NULL, NULL, &ws);
	if (p->pid < 0)
		return -1;
	if (p->pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	fcntl(p->master, F_SETFD, FD_CLOEXEC);
	return 0;
}

int t_pty_finish(struct t_pty *p, char *out, size_t cap)
{
	size_t k = 0;
	char buf[4096];
	for (;;) {
		ssize_t n = read(p->master, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; /* EIO: the command's side is closed */
		for (ssize_t i = 0; i < n && k + 1 < cap; i++)
			out[k++] = buf[i];
	}
	if (cap)
		out[k] = 0;
	close(p->master);
	p->master = -1;
	int ws;
	while (waitpid(p->pid, &ws, 0) < 0)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(ws) ? WEXITSTATUS(ws) : WIFSIGNALED(ws) ? 128 + WTERMSIG(ws) : -1;
}
