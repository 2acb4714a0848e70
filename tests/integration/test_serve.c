/* mesh serve end to end: the real `mesh` binary in front of the real
 * examples/cold_http_server, over loopback. */
#include "runner/t.h"
#include "integration/serve_t.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

struct client {
	int port, fd, status;
	char body[256];
};

static void *client_send(void *arg)
{
	struct client *c = arg;
	static const char req[] = "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	char resp[1024];
	if (send(c->fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)sizeof req - 1)
		return NULL;
	if (read_all(c->fd, resp, sizeof resp) > 0) {
		sscanf(resp, "HTTP/1.1 %d", &c->status);
		char *b = strstr(resp, "\r\n\r\n");
		if (b)
			snprintf(c->body, sizeof c->body, "%s", b + 4);
	}
	close(c->fd);
	return NULL;
}

TEST_TIMEOUT(serve_cold_start_50_concurrent_all_served, 40)
{
	char up[8];
	snprintf(up, sizeof up, "%d", free_port());
	char ups[32];
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	const char *args[] = {"--upstream", ups, "--idle", "30", "--", t_bin("examples/cold_http_server"), "--port", up,
			      "--listen-delay", "0.8", "--ready-delay", "0.4", "--ready-file", "ready.txt", NULL};
	struct serve s = start_serve(args);
	enum { N = 50 };
	static struct client cl[N];
	pthread_t th[N];
	/* All 50 connect while the upstream is cold (not yet ready). */
	for (int i = 0; i < N; i++) {
		cl[i].port = s.port;
		cl[i].fd = connect_to(s.port);
		ASSERT_GE(cl[i].fd, 0);
	}
	EXPECT_EQ(access("ready.txt", F_OK), -1);
	for (int i = 0; i < N; i++)
		pthread_create(&th[i], NULL, client_send, &cl[i]);
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	int ok = 0;
	for (int i = 0; i < N; i++) {
		ok += cl[i].status == 200;
		EXPECT_EQ(cl[i].status, 200);
		EXPECT_CONTAINS(cl[i].body, "hello from ");
		EXPECT_STREQ(cl[i].body, cl[0].body); /* one server, started once */
	}
	EXPECT_EQ(ok, N);
	EXPECT_EQ(stop_serve(&s), 0);
	char *out = t_read_file("out.txt", NULL);
	EXPECT_CONTAINS(out, "spawns=1 ");
	EXPECT_CONTAINS(out, "served=50 ");
	EXPECT_CONTAINS(out, "rejected=0 ");
	EXPECT_CONTAINS(out, "queued_max=50 ");
	free(out);
}

TEST_TIMEOUT(serve_idle_reap_leaves_no_process_then_respawns, 40)
{
	char up[8], ups[32];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	/* The upstream ignores SIGTERM and has a child of its own: only the
	 * grace and a SIGKILL to the whole group leave zero processes. */
	const char *args[] = {"--upstream", ups, "--idle", "0.5", "--grace", "0.3", "--", t_bin("examples/cold_http_server"),
			      "--port", up, "--pid-file", "up.pid", "--fork-helper", "--ignore-term", NULL};
	struct serve s = start_serve(args);
	char resp[1024];
	ASSERT_EQ(http_get(s.port, "/hello", resp, sizeof resp), 200);
	pid_t pid = read_pid_file("up.pid");
	ASSERT_GT(pid, 1);
	EXPECT_EQ(kill(-pid, 0), 0); /* its group exists */
	EXPECT_TRUE(t_wait_for(gone, &pid, 8000));
	ASSERT_TRUE(wait_file_has("err.txt", "reaped pid=", 3000));
	EXPECT_EQ(kill(-pid, 0), -1); /* the helper went too */
	EXPECT_EQ(errno, ESRCH);
	EXPECT_TRUE(file_has("err.txt", "grace over, SIGKILL"));
	EXPECT_TRUE(file_has("err.txt", "status=137"));
	/* The next connection starts it again. */
	ASSERT_EQ(http_get(s.port, "/hello", resp, sizeof resp), 200);
	pid_t pid2 = read_pid_file("up.pid");
	EXPECT_NE(pid2, pid);
	EXPECT_EQ(stop_serve(&s), 0);
	EXPECT_TRUE(gone(&pid2));
	EXPECT_EQ(kill(-pid2, 0), -1);
	char *out = t_read_file("out.txt", NULL);
	EXPECT_CONTAINS(out, "spawns=2 ");
	EXPECT_CONTAINS(out, "reaps=2 ");
	free(out);
}

TEST_TIMEOUT(serve_crash_reported_and_restarted, 40)
{
	char up[8], ups[32];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	const char *args[] = {"--upstream", ups, "--idle", "30", "--", t_bin("examples/cold_http_server"), "--port", up,
			      "--pid-file", "up.pid", NULL};
	struct serve s = start_serve(args);
	char resp[1024];
	ASSERT_EQ(http_get(s.port, "/hello", resp, sizeof resp), 200);
	pid_t p1 = read_pid_file("up.pid");
	/* It exits on request: no answer, the connection closes. */
	EXPECT_EQ(http_get(s.port, "/crash", resp, sizeof resp), 0);
	/* The report is a line per write, the tail last: wait for its last line. */
	ASSERT_TRUE(wait_file_has("err.txt", "| crashing on request", 5000));
	EXPECT_TRUE(file_has("err.txt", "crashed pid="));
	EXPECT_TRUE(file_has("err.txt", "status=42"));
	EXPECT_TRUE(t_wait_for(gone, &p1, 3000));
	ASSERT_EQ(http_get(s.port, "/hello", resp, sizeof resp), 200);
	pid_t p2 = read_pid_file("up.pid");
	EXPECT_NE(p2, p1);
	/* Killed from outside: 128 + SIGKILL. */
	kill(p2, SIGKILL);
	ASSERT_TRUE(wait_file_has("err.txt", "status=137", 5000));
	ASSERT_EQ(http_get(s.port, "/hello", resp, sizeof resp), 200);
	EXPECT_NE(read_pid_file("up.pid"), p2);
	EXPECT_EQ(stop_serve(&s), 0);
	char *out = t_read_file("out.txt", NULL);
	EXPECT_CONTAINS(out, "crashes=2 ");
	EXPECT_CONTAINS(out, "spawns=3 ");
	free(out);
	/* The server's output went to the log file. */
	EXPECT_TRUE(file_has("mesh-serve.log", "crashing on request"));
}

TEST_TIMEOUT(serve_crash_during_start_fails_queued_with_502, 30)
{
	const char *args[] = {"--upstream", "127.0.0.1:9", "--idle", "30", "--", "/bin/sh", "-c",
			      "echo loading weights; echo out of memory >&2; exit 3", NULL};
	struct serve s = start_serve(args);
	char resp[1024];
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(http_get(s.port, "/v1/chat", resp, sizeof resp), 502);
	EXPECT_LT(t_now_ms() - t0, 5000);
	ASSERT_TRUE(wait_file_has("err.txt", "| out of memory", 3000)); /* the report's last line */
	EXPECT_TRUE(file_has("err.txt", "crashed pid="));
	EXPECT_TRUE(file_has("err.txt", "status=3 "));
	/* The next demand tries again. */
	EXPECT_EQ(http_get(s.port, "/v1/chat", resp, sizeof resp), 502);
	EXPECT_EQ(stop_serve(&s), 0);
	char *out = t_read_file("out.txt", NULL);
	EXPECT_CONTAINS(out, "spawns=2 ");
	EXPECT_CONTAINS(out, "crashes=2 ");
	free(out);
}

TEST_TIMEOUT(serve_queue_bounds_give_clear_errors, 30)
{
	char up[8], ups[32];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	/* The upstream takes far longer than the queue timeout. */
	const char *args[] = {"--upstream", ups, "--idle", "30", "--max-queue", "2", "--queue-timeout", "0.5", "--",
			      t_bin("examples/cold_http_server"), "--port", up, "--listen-delay", "20", NULL};
	struct serve s = start_serve(args);
	static const char req[] = "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n";
	int a = connect_to(s.port), b = connect_to(s.port);
	ASSERT_GE(a, 0);
	ASSERT_GE(b, 0);
	send(a, req, sizeof req - 1, MSG_NOSIGNAL); /* an HTTP client */
	/* b says nothing: not HTTP, it just gets closed. */
	usleep(100000);
	char resp[1024];
	uint64_t t0 = t_now_ms();
	/* The third finds the queue full at once. */
	EXPECT_EQ(http_get(s.port, "/hello", resp, sizeof resp), 503);
	EXPECT_CONTAINS(resp, "Retry-After:");
	EXPECT_CONTAINS(resp, "queue of connections waiting for the server is full");
	EXPECT_LT(t_now_ms() - t0, 3000);
	/* The queued ones get their answer at the timeout, not a hang. */
	EXPECT_GT(read_all(a, resp, sizeof resp), 0);
	EXPECT_CONTAINS(resp, "HTTP/1.1 503 Service Unavailable");
	EXPECT_CONTAINS(resp, "Retry-After: 5");
	EXPECT_CONTAINS(resp, "queue timeout");
	{
		/* A well-formed answer: the body is exactly Content-Length long. */
		char *cl = strstr(resp, "Content-Length: "), *body = strstr(resp, "\r\n\r\n");
		ASSERT_TRUE(cl && body);
		EXPECT_EQ(atoi(cl + 16), (int)strlen(body + 4));
	}
	EXPECT_EQ(read_all(b, resp, sizeof resp), 0);
	uint64_t waited = t_now_ms() - t0;
	EXPECT_LT(waited, 3000);
	close(a);
	close(b);
	EXPECT_EQ(stop_serve(&s), 0);
	char *out = t_read_file("out.txt", NULL);
	EXPECT_CONTAINS(out, "rejected=3 ");
	EXPECT_CONTAINS(out, "served=0 ");
	free(out);
}

TEST_TIMEOUT(serve_sigusr1_prints_savings_json, 30)
{
	char up[8], ups[32];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	const char *args[] = {"--upstream", ups, "--idle", "0.3", "--grace", "1", "--json", "--",
			      t_bin("examples/cold_http_server"), "--port", up, NULL};
	struct serve s = start_serve(args);
	char resp[1024];
	ASSERT_EQ(http_get(s.port, "/ping", resp, sizeof resp), 200);
	ASSERT_TRUE(wait_file_has("out.txt", "\"event\":\"reaped\"", 5000));
	usleep(300000); /* some time at zero */
	kill(s.pid, SIGUSR1);
	ASSERT_TRUE(wait_file_has("out.txt", "\"event\":\"status\"", 3000));
	EXPECT_EQ(stop_serve(&s), 0);
	char *out = t_read_file("out.txt", NULL);
	ASSERT_TRUE(out != NULL);
	int lines = 0, statuses = 0, exits = 0;
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		json_error_t je;
		json_t *o = json_loads(line, 0, &je);
		EXPECT_TRUE(o != NULL); /* every stdout line is one JSON object */
		if (!o)
			continue;
		lines++;
		const char *ev = json_string_value(json_object_get(o, "event"));
		json_t *st = json_object_get(o, "stats");
		EXPECT_TRUE(json_is_object(st));
		if (ev && (!strcmp(ev, "status") || !strcmp(ev, "exit"))) {
			double sav = json_real_value(json_object_get(st, "savings"));
			double warm = json_real_value(json_object_get(st, "warm_s"));
			double win = json_real_value(json_object_get(st, "window_s"));
			EXPECT_GT(sav * 1000, 0);
			EXPECT_LT(sav * 1000, 1000);
			EXPECT_GT(win * 1000, warm * 1000);
			EXPECT_EQ(json_integer_value(json_object_get(st, "spawns")), 1);
			EXPECT_EQ(json_integer_value(json_object_get(st, "reaps")), 1);
			EXPECT_EQ(json_integer_value(json_object_get(st, "served")), 1);
			statuses += !strcmp(ev, "status");
			exits += !strcmp(ev, "exit");
			/* savings = (window - warm) / window, to the permil */
			EXPECT_LE((int)(sav * 1000 + 0.5) - (int)((win - warm) / win * 1000), 1);
			EXPECT_GE((int)(sav * 1000 + 0.5) - (int)((win - warm) / win * 1000), -1);
		}
		json_decref(o);
	}
	EXPECT_EQ(statuses, 1);
	EXPECT_EQ(exits, 1);
	EXPECT_GE(lines, 6); /* listening, spawned, warm, reaping, reaped, status, exit */
	free(out);
}

TEST(serve_text_sigusr1_and_ipv6)
{
	int v6 = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	int have_v6 = v6 >= 0 && bind(v6, (struct sockaddr *)&sa, sizeof sa) == 0;
	if (v6 >= 0)
		close(v6);
	char up[8], ups[32];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	const char *args[] = {"--upstream", ups, "--idle", "30", "--", t_bin("examples/cold_http_server"), "--port", up, NULL};
	struct serve s = start_serve(args);
	kill(s.pid, SIGUSR1);
	ASSERT_TRUE(wait_file_has("out.txt", "mesh serve status: savings ", 3000));
	EXPECT_TRUE(file_has("out.txt", "state=cold spawns=0 "));
	EXPECT_EQ(stop_serve(&s), 0);
	if (!have_v6) {
		fprintf(stderr, "    (no IPv6 loopback here: the [::1] listener is not tested)\n");
		return;
	}
	char out[2048];
	char cmd[1024];
	snprintf(cmd, sizeof cmd,
		 "%s serve --listen '[::1]:0' --upstream 127.0.0.1:%s --idle 30 -- %s --port %s 2>err6.txt & P=$!; "
		 "for i in $(seq 100); do grep -q 'listening addr=' err6.txt 2>/dev/null && break; sleep 0.05; done; "
		 "port=$(sed -n 's/.*listening addr=\\[::1\\]:\\([0-9]*\\).*/\\1/p' err6.txt); "
		 "curl -s -g \"http://[::1]:$port/ping\"; kill $P; wait $P; echo rc=$?",
		 t_bin("mesh"), up, t_bin("examples/cold_http_server"), up);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s", cmd), 0);
	EXPECT_CONTAINS(out, "pong");
	EXPECT_CONTAINS(out, "rc=0");
}

TEST(serve_bad_arguments_exit_64)
{
	static const char *const bad[] = {
		"",
		"--upstream 127.0.0.1:1 --idle 1 -- true",
		"--listen 127.0.0.1:0 --idle 1 -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle 1",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle abc -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle 0 -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle -1 -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle 1 --max-queue 0 -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle 1 --grace x -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle 1 --bogus -- true",
		"--listen nope --upstream 127.0.0.1:1 --idle 1 -- true",
		"--listen 127.0.0.1:99999 --upstream 127.0.0.1:1 --idle 1 -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1 --idle 1 -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:0 --idle 1 -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle 1 --probe nopath -- true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle 1 true",
		"--listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle",
	};
	char out[2048];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = t_sh(out, sizeof out, 1, "%s serve %s", t_bin("mesh"), bad[i]);
		if (rc != 64)
			fprintf(stderr, "    case: mesh serve %s\n", bad[i]);
		EXPECT_EQ(rc, 64);
		EXPECT_CONTAINS(out, "mesh: ");
	}
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s serve --help", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "usage: mesh serve");
	/* A command that cannot be found: 66, before anything listens. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s serve --listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle 1 -- "
					   "/nonexistent/server",
		       t_bin("mesh")),
		  66);
	EXPECT_CONTAINS(out, "cannot run '/nonexistent/server'");
	/* The listen address in use: 71 (OSERR), a clear message. */
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT_EQ(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
	ASSERT_EQ(listen(l, 1), 0);
	getsockname(l, (struct sockaddr *)&sa, &sl);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s serve --listen 127.0.0.1:%d --upstream 127.0.0.1:1 --idle 1 -- true",
		       t_bin("mesh"), ntohs(sa.sin_port)),
		  71);
	EXPECT_CONTAINS(out, "cannot listen on");
	EXPECT_CONTAINS(out, "Address already in use");
	close(l);
}

TEST_TIMEOUT(serve_start_timeout_gives_504_and_stops_server, 30)
{
	char up[8], ups[32];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	const char *args[] = {"--upstream", ups, "--idle", "30", "--start-timeout", "0.4", "--grace", "0.2", "--",
			      t_bin("examples/cold_http_server"), "--port", up, "--listen-delay", "20", "--pid-file",
			      "up.pid", NULL};
	struct serve s = start_serve(args);
	char resp[1024];
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(http_get(s.port, "/hello", resp, sizeof resp), 504);
	EXPECT_CONTAINS(resp, "start timeout");
	EXPECT_LT(t_now_ms() - t0, 4000);
	pid_t pid = read_pid_file("up.pid");
	ASSERT_GT(pid, 1);
	EXPECT_TRUE(t_wait_for(gone, &pid, 3000));
	EXPECT_TRUE(wait_file_has("err.txt", "start timeout pid=", 2000));
	EXPECT_EQ(stop_serve(&s), 0);
	char *out = t_read_file("out.txt", NULL);
	EXPECT_CONTAINS(out, "start_timeouts=1 ");
	free(out);
}

TEST_TIMEOUT(serve_model_must_be_listed_to_be_warm, 30)
{
	char up[8], ups[32];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	/* The server answers /v1/models with 200 but lists another model. */
	const char *args[] = {"--upstream", ups, "--idle", "30", "--model", "llama-70b", "--queue-timeout", "0.6", "--",
			      t_bin("examples/cold_http_server"), "--port", up, "--model", "demo", NULL};
	struct serve s = start_serve(args);
	char resp[1024];
	EXPECT_EQ(http_get(s.port, "/hello", resp, sizeof resp), 503);
	EXPECT_FALSE(file_has("err.txt", "warm pid="));
	EXPECT_EQ(stop_serve(&s), 0);
	/* Listed: warm. */
	const char *args2[] = {"--upstream", ups, "--idle", "30", "--model", "llama-70b", "--",
			       t_bin("examples/cold_http_server"), "--port", up, "--model", "llama-70b", NULL};
	s = start_serve(args2);
	EXPECT_EQ(http_get(s.port, "/hello", resp, sizeof resp), 200);
	EXPECT_EQ(stop_serve(&s), 0);
}

struct echo_arg {
	int fd;
	size_t n;
};
static void *echo_send(void *arg)
{
	struct echo_arg *a = arg;
	char head[128];
	int h = snprintf(head, sizeof head, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", a->n);
	send(a->fd, head, (size_t)h, MSG_NOSIGNAL);
	static __thread char block[65536];
	for (size_t off = 0; off < a->n;) {
		size_t k = a->n - off < sizeof block ? a->n - off : sizeof block;
		for (size_t i = 0; i < k; i++)
			block[i] = (char)('a' + (off + i) % 23);
		if (send(a->fd, block, k, MSG_NOSIGNAL) != (ssize_t)k)
			break;
		off += k;
	}
	shutdown(a->fd, SHUT_WR); /* half-close: the answer must still come */
	return NULL;
}

/* 8 MiB up and back through the relay, both the splice and the copy path,
 * with the client half-closing after its request. */
TEST_TIMEOUT(serve_relays_bytes_intact_with_half_close, 40)
{
	for (int mode = 0; mode < 2; mode++) {
		char up[8], ups[32];
		snprintf(up, sizeof up, "%d", free_port());
		snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
		const char *args[] = {"--upstream", ups, "--idle", "30", mode ? "--no-splice" : "--json", "--",
				      t_bin("examples/cold_http_server"), "--port", up, NULL};
		struct serve s = start_serve(args);
		struct echo_arg a = {connect_to(s.port), 8u << 20};
		ASSERT_GE(a.fd, 0);
		pthread_t th;
		pthread_create(&th, NULL, echo_send, &a);
		size_t cap = a.n + 4096, got = 0;
		char *buf = malloc(cap);
		for (;;) {
			ssize_t r = recv(a.fd, buf + got, cap - got, 0);
			if (r <= 0)
				break;
			got += (size_t)r;
		}
		pthread_join(th, NULL);
		close(a.fd);
		char *body = memmem(buf, got, "\r\n\r\n", 4);
		ASSERT_TRUE(body != NULL);
		body += 4;
		size_t blen = got - (size_t)(body - buf), bad = 0;
		EXPECT_UEQ(blen, a.n);
		for (size_t i = 0; i < blen && i < a.n; i++)
			bad += body[i] != (char)('a' + i % 23);
		EXPECT_UEQ(bad, 0);
		free(buf);
		EXPECT_EQ(stop_serve(&s), 0);
	}
}
