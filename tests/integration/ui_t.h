/* `mesh ui` started by a test (test_cli_ui.c, test_ui_browser.c): on a
 * free loopback port in front of the meshd at SOCK, its stdout in ui.out
 * and stderr in ui.err (in the test's directory), its URL read back. */
#ifndef MESH_TESTS_UI_T_H
#define MESH_TESTS_UI_T_H

#include "integration/meshd_t.h"
#include "runner/t.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct ui_t {
	pid_t pid;
	int port;
	char url[256];	 /* as printed: http://127.0.0.1:PORT/?token=... */
	char token[80];
};

/* ui.out holds the URL line: a t_wait_for condition. */
static inline int ui_t_url_printed(void *arg)
{
	(void)arg;
	char *s = t_read_file("ui.out", NULL);
	int ok = s && strstr(s, "?token=") && strchr(strstr(s, "?token="), '\n');
	free(s);
	return ok;
}

/* Starts `mesh ui --listen 127.0.0.1:0 --socket SOCK` and waits (10 s) for
 * its URL; fails the test when none comes. */
static inline struct ui_t ui_t_start(void)
{
	struct ui_t u = {0};
	u.pid = fork();
	if (u.pid == 0) {
		char cmd[1024];
		snprintf(cmd, sizeof cmd, "exec '%s' ui --listen 127.0.0.1:0 --socket " SOCK " > ui.out 2> ui.err",
			 t_bin("mesh"));
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	if (!t_wait_for(ui_t_url_printed, NULL, 10000)) {
		char *e = t_read_file("ui.err", NULL);
		kill(u.pid, SIGKILL);
		FAIL("mesh ui printed no URL; stderr: %s", e ? e : "");
	}
	char *s = t_read_file("ui.out", NULL);
	const char *p = strstr(s, "http://127.0.0.1:");
	if (p) {
		sscanf(p, "%255s", u.url);
		u.port = atoi(p + 17);
		sscanf(strstr(p, "?token=") + 7, "%79[0-9a-f]", u.token);
	}
	free(s);
	return u;
}

/* SIGTERM, and its exit status (128 + a signal that killed it; -1). */
static inline int ui_t_stop(struct ui_t *u)
{
	int st;
	kill(u->pid, SIGTERM);
	if (waitpid(u->pid, &st, 0) != u->pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif
