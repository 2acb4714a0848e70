/* Helpers shared by the meshd --http tests: a catalog of
 * tests/workers/openai_server.py programs, the real meshd --http on a free
 * loopback port, raw chat completions, /metrics samples.  Header-only
 * (static inline), included by each tests/integration/test_gateway*.c. */
#ifndef MESH_TESTS_GW_T_H
#define MESH_TESTS_GW_T_H

#include "integration/meshd_t.h"
#include "integration/serve_t.h"

#include <sys/stat.h>

struct gw {
	pid_t pid;
	int port;
};

static inline const char *oa_server(void)
{
	static char p[4096];
	snprintf(p, sizeof p, "%s", t_src("tests/workers/openai_server.py"));
	return p;
}

/* catalog/<name>.toml: openai_server.py on {port} with more arguments
 * (srv: a TOML array's tail, starting with ", "), the models it is routed
 * (a TOML array's inside), and more keys. */
static inline void add_oa(const char *name, const char *models, const char *srv, const char *extra)
{
	char path[256], text[8192];
	mkdir("catalog", 0755);
	snprintf(text, sizeof text,
		 "name = \"%s\"\nbackend = \"http\"\ncommand = [\"python3\", \"%s\", \"--port\", \"{port}\"%s]\n"
		 "models = [%s]\n%s",
		 name, oa_server(), srv, models, extra);
	snprintf(path, sizeof path, "catalog/%s.toml", name);
	t_write_file(path, text);
}

static inline int logged_port(void *arg)
{
	int *port = arg;
	char *err = t_read_file("meshd.err", NULL);
	const char *p = err ? strstr(err, "serving http=") : NULL;
	p = p ? strstr(p, "port=") : NULL;
	if (p)
		*port = atoi(p + 5);
	free(err);
	return p && *port > 0;
}

/* meshd --http 127.0.0.1:0 [more], stderr to meshd.err. */
static inline struct gw start_gw(const char *more)
{
	struct gw g = {0, 0};
	mkdir("logs", 0755);
	mkdir("catalog", 0755);
	unlink("meshd.err");
	g.pid = fork();
	ASSERT_GE(g.pid, 0);
	if (g.pid == 0) {
		char cmd[4096];
		snprintf(cmd, sizeof cmd,
			 "exec \"$0\" --catalog catalog --logs logs --socket run/meshd.sock --state state "
			 "--http 127.0.0.1:0 %s 2>>meshd.err",
			 more);
		execl("/bin/sh", "sh", "-c", cmd, t_bin("meshd"), (char *)NULL);
		_exit(127);
	}
	if (!t_wait_for(logged_port, &g.port, 10000)) {
		char *err = t_read_file("meshd.err", NULL);
		FAIL("meshd --http did not come up; its stderr: %s", err ? err : "");
	}
	return g;
}

static inline int stop_gw(struct gw *g)
{
	int st = -1;
	kill(g->pid, SIGTERM);
	for (int i = 0; i < 1500; i++) {
		if (waitpid(g->pid, &st, WNOHANG) == g->pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(10000);
	}
	kill(g->pid, SIGKILL);
	waitpid(g->pid, &st, 0);
	return -1;
}

static inline int count_in(const char *file, const char *needle)
{
	char *s = t_read_file(file, NULL);
	int n = 0;
	for (const char *p = s; p && (p = strstr(p, needle)); p += strlen(needle))
		n++;
	free(s);
	return n;
}

struct has_n {
	const char *file, *needle;
	int n;
};
static inline int has_n_cond(void *arg)
{
	struct has_n *h = arg;
	return count_in(h->file, h->needle) == h->n;
}

/* The pid of the last "program=NAME spawned pid=" line (name NULL: of any
 * program), as seen from here. */
static inline pid_t spawned_pid_of(const char *name)
{
	char needle[128], *s = t_read_file("meshd.err", NULL);
	const char *p = s, *last = NULL;
	int n = name ? snprintf(needle, sizeof needle, "program=%s spawned pid=", name)
		     : snprintf(needle, sizeof needle, "spawned pid=");
	while (p && (p = strstr(p, needle)))
		last = p++;
	pid_t pid = last ? atoi(last + n) : 0;
	free(s);
	return pid;
}

static inline pid_t spawned_pid(void)
{
	return spawned_pid_of(NULL);
}

static inline int chat_request(char *req, size_t cap, const char *model, const char *content, int stream, int keep)
{
	char body[1024];
	int n = snprintf(body, sizeof body,
			 "{\"model\":\"%s\",\"stream\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}", model,
			 stream ? "true" : "false", content);
	return snprintf(req, cap,
			"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
			"Content-Length: %d\r\n%s\r\n%s",
			n, keep ? "" : "Connection: close\r\n", body);
}

/* The request req (with Connection: close) on a new connection; the whole
 * response in resp; its status (-1: no connection). */
static inline int exchange(int port, const char *req, char *resp, size_t cap)
{
	int fd = connect_to(port), status = 0;
	resp[0] = 0;
	if (fd < 0)
		return -1;
	if (send_str(fd, req) == 0 && read_all(fd, resp, cap) > 0)
		sscanf(resp, "HTTP/1.1 %d", &status);
	close(fd);
	return status;
}

/* One chat completion on a new connection; the whole response in resp; its status. */
static inline int post_chat(int port, const char *model, const char *content, int stream, char *resp, size_t cap)
{
	char req[2048];
	chat_request(req, sizeof req, model, content, stream, 0);
	return exchange(port, req, resp, cap);
}

#endif
