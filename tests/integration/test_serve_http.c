/* mesh serve --http end to end: demand is requests, not sockets; SIGTERM
 * drains; the probe's reason reaches the client; real clients (the official
 * openai npm package) and real servers (tests/workers/openai_server.py,
 * nginx) over loopback. */
#include "runner/t.h"
#include "integration/serve_t.h"

#include <pthread.h>
#include <sys/stat.h>

struct up {
	char port[8], addr[32];
};

static struct up pick_up(void)
{
	struct up u;
	snprintf(u.port, sizeof u.port, "%d", free_port());
	snprintf(u.addr, sizeof u.addr, "127.0.0.1:%s", u.port);
	return u;
}

/* The OpenAI-compatible test server's script (a stable copy: t_src's
 * buffers rotate). */
static const char *oa_server(void)
{
	static char p[4096];
	snprintf(p, sizeof p, "%s", t_src("tests/workers/openai_server.py"));
	return p;
}

static int connection_closed(int fd)
{
	char b;
	return recv(fd, &b, 1, 0) == 0;
}

/* Idle keep-alive connections, a bare connect and a half-closed socket that
 * sent nothing do not keep the server up: the reap comes --idle after the
 * end of the last response while all three are still open. */
TEST_TIMEOUT(serve_http_idle_keepalive_and_bare_connects_do_not_hold_server, 30)
{
	struct up u = pick_up();
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "0.4", "--", "python3", oa_server(),
			      "--port", u.port, "--pid-file", "up.pid", NULL};
	struct serve s = start_serve(args);
	char resp[4096];
	int ka = connect_to(s.port);
	ASSERT_GE(ka, 0);
	ASSERT_EQ(send_str(ka, "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
	ASSERT_EQ(read_response(ka, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "test-model");
	uint64_t t_end = t_now_ms();
	int bare = connect_to(s.port), half = connect_to(s.port);
	ASSERT_GE(bare, 0);
	ASSERT_GE(half, 0);
	shutdown(half, SHUT_WR);
	pid_t up = read_pid_file("up.pid");
	ASSERT_GT(up, 1);
	ASSERT_TRUE(wait_file_has("err.txt", "reaped pid=", 6000));
	uint64_t waited = t_now_ms() - t_end;
	EXPECT_GE(waited, 350);  /* the idle TTL ran from the end of the response */
	EXPECT_LT(waited, 4000);
	EXPECT_TRUE(gone(&up));
	EXPECT_TRUE(file_has("err.txt", "reaping pid="));
	/* The keep-alive connection went with the server. */
	EXPECT_TRUE(connection_closed(ka));
	close(ka);
	close(bare);
	close(half);
	/* The next request starts it again. */
	EXPECT_EQ(http_get(s.port, "/health", resp, sizeof resp), 200);
	EXPECT_EQ(stop_serve(&s), 0);
	char *out = t_read_file("out.txt", NULL);
	EXPECT_CONTAINS(out, "spawns=2 ");
	EXPECT_CONTAINS(out, "requests=2");
	free(out);
}

/* A connect-only health check does not start a cold server; the first byte
 * of a request does; --start-on-connect starts it on the connect. */
TEST_TIMEOUT(serve_http_connect_only_does_not_start_cold_server, 30)
{
	struct up u = pick_up();
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "30", "--", "python3", oa_server(), "--port",
			      u.port, NULL};
	struct serve s = start_serve(args);
	int probe = connect_to(s.port); /* a TCP health check: connect, close */
	ASSERT_GE(probe, 0);
	close(probe);
	int held = connect_to(s.port);
	ASSERT_GE(held, 0);
	/* Nothing to wait for: nothing must happen.  300 ms is far past the
	 * few ms a spawn decision takes. */
	usleep(300000);
	EXPECT_FALSE(file_has("err.txt", "spawned pid="));
	ASSERT_EQ(send_str(held, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
	char resp[4096];
	EXPECT_EQ(read_response(held, resp, sizeof resp), 200);
	EXPECT_TRUE(file_has("err.txt", "spawned pid="));
	close(held);
	EXPECT_EQ(stop_serve(&s), 0);

	const char *args2[] = {"--http", "--start-on-connect", "--upstream", u.addr, "--idle", "30", "--", "python3",
			       oa_server(), "--port", u.port, NULL};
	s = start_serve(args2);
	held = connect_to(s.port);
	ASSERT_GE(held, 0);
	EXPECT_TRUE(wait_file_has("err.txt", "spawned pid=", 3000));
	close(held);
	EXPECT_EQ(stop_serve(&s), 0);
}

struct stream_arg {
	int port;
	const char *extra; /* a header line or "" */
	char body[16384];
	int status;
	uint64_t t_end;
};

/* POSTs a streamed chat completion (Connection: close) and reads it all. */
static void *stream_chat(void *arg)
{
	struct stream_arg *a = arg;
	static const char json[] = "{\"model\":\"test-model\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
	char req[512];
	snprintf(req, sizeof req,
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
		 "Content-Length: %zu\r\nConnection: close\r\n%s\r\n%s",
		 strlen(json), a->extra, json);
	int fd = connect_to(a->port);
	if (fd < 0)
		return NULL;
	if (send_str(fd, req) == 0 && read_all(fd, a->body, sizeof a->body) > 0)
		sscanf(a->body, "HTTP/1.1 %d", &a->status);
	a->t_end = t_now_ms();
	close(fd);
	return NULL;
}

/* A streaming response is in flight until its last byte, however long the
 * gaps between tokens are next to --idle. */
TEST_TIMEOUT(serve_http_stream_is_demand_until_it_ends, 30)
{
	struct up u = pick_up();
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "0.25", "--", "python3", oa_server(), "--port",
			      u.port, "--token-delay", "0.15", "--tokens", "8", NULL};
	struct serve s = start_serve(args);
	struct stream_arg a = {.port = s.port, .extra = ""};
	stream_chat(&a);
	EXPECT_EQ(a.status, 200);
	EXPECT_CONTAINS(a.body, "tok7");
	EXPECT_CONTAINS(a.body, "data: [DONE]");
	ASSERT_TRUE(wait_file_has("err.txt", "reaped pid=", 5000));
	EXPECT_EQ(stop_serve(&s), 0);
	char *out = t_read_file("out.txt", NULL);
	EXPECT_CONTAINS(out, "spawns=1 ");
	free(out);
}

/* SIGTERM drains: the listener closes, idle keep-alive connections close,
 * the stream in flight runs to its end, then the server is stopped and
 * mesh serve exits 0.  TCP mode waits for the connection instead. */
TEST_TIMEOUT(serve_sigterm_drains_in_flight_then_stops, 40)
{
	for (int http = 0; http < 2; http++) {
		struct up u = pick_up();
		/* The default drain timeout (30 s) is far longer than the stream. */
		const char *args[] = {http ? "--http" : "--json", "--upstream", u.addr, "--idle", "30", "--", "python3", oa_server(), "--port", u.port, "--token-delay", "0.1", "--tokens",
				      "10", "--pid-file", "up.pid", NULL};
		unlink("mesh-serve.log");
		struct serve s = start_serve(args);
		char resp[4096];
		int ka = -1;
		if (http) {
			ka = connect_to(s.port);
			ASSERT_GE(ka, 0);
			ASSERT_EQ(send_str(ka, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
			ASSERT_EQ(read_response(ka, resp, sizeof resp), 200);
		}
		struct stream_arg a = {.port = s.port, .extra = ""};
		pthread_t th;
		pthread_create(&th, NULL, stream_chat, &a);
		ASSERT_TRUE(wait_file_has("mesh-serve.log", "req POST /v1/chat/completions", 5000 * t_slack()));
		pid_t up = read_pid_file("up.pid");
		uint64_t t_term = t_now_ms();
		kill(s.pid, SIGTERM);
		EXPECT_TRUE(wait_file_has("err.txt", "draining:", 3000));
		if (http) {
			/* The idle one is closed at once, not at the drain's end. */
			EXPECT_TRUE(connection_closed(ka));
			EXPECT_LT(t_now_ms() - t_term, 3000); /* the drain lasts 30 s */
			close(ka);
		}
		/* No new connection is taken. */
		EXPECT_EQ(connect_to(s.port), -1);
		pthread_join(th, NULL);
		EXPECT_EQ(a.status, 200);
		EXPECT_CONTAINS(a.body, "tok9");
		EXPECT_CONTAINS(a.body, "data: [DONE]");
		EXPECT_EQ(stop_serve(&s), 0);
		EXPECT_TRUE(gone(&up));
		EXPECT_TRUE(file_has("err.txt", "reaping pid="));
		EXPECT_TRUE(file_has("err.txt", "(shutdown)"));
	}
}

/* A request that never ends: the drain ends at --drain-timeout, then the
 * server gets --stop-signal (INT here: Python dies of it, status 130), and
 * the request, which had no byte of an answer, gets 502 before the close. */
TEST_TIMEOUT(serve_drain_timeout_then_stop_signal, 30)
{
	struct up u = pick_up();
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "30", "--drain-timeout", "0.4", "--stop-signal",
			      "INT", "--", "python3", oa_server(), "--port", u.port, NULL};
	struct serve s = start_serve(args);
	static const char json[] = "{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hang\"}]}";
	char req[512];
	snprintf(req, sizeof req, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n%s",
		 strlen(json), json);
	int fd = connect_to(s.port);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(send_str(fd, req), 0);
	ASSERT_TRUE(wait_file_has("mesh-serve.log", "req POST", 5000 * t_slack()));
	uint64_t t0 = t_now_ms();
	kill(s.pid, SIGTERM);
	int st = -1;
	while (waitpid(s.pid, &st, 0) < 0 && errno == EINTR)
		;
	uint64_t took = t_now_ms() - t0;
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	EXPECT_GE(took, 350);
	EXPECT_LT(took, 4000);
	EXPECT_TRUE(file_has("err.txt", "status=130"));
	char resp[4096];
	EXPECT_GT(read_all(fd, resp, sizeof resp), 0); /* to the close */
	EXPECT_EQ(strncmp(resp, "HTTP/1.1 502 ", 13), 0);
	EXPECT_CONTAINS(resp, "answered\n");
	close(fd);
	char out[256];
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s serve --listen 127.0.0.1:0 --upstream 127.0.0.1:1 --idle 1 "
					   "--stop-signal KILLME -- true",
		       t_bin("mesh")),
		  64);
}

/* The probe's reason reaches the 504: a server that answers 200 without
 * the model. */
TEST_TIMEOUT(serve_start_timeout_504_says_why, 30)
{
	struct up u = pick_up();
	const char *args[] = {"--upstream", u.addr, "--idle", "30", "--model", "llama-70b", "--start-timeout",
			      "0.6", "--grace", "0.3", "--", t_bin("examples/cold_http_server"), "--port", u.port,
			      "--model", "demo", NULL};
	struct serve s = start_serve(args);
	char resp[4096];
	EXPECT_EQ(http_get(s.port, "/v1/chat/completions", resp, sizeof resp), 504);
	EXPECT_CONTAINS(resp, "start timeout");
	EXPECT_CONTAINS(resp, "HTTP 200 but model 'llama-70b' not listed");
	EXPECT_EQ(stop_serve(&s), 0);
}

/* mesh autoscale tick --model M against a running server that lacks M:
 * "warm but wrong model" (exit 7) whatever the demand, never HOLD. */
TEST_TIMEOUT(autoscale_tick_reports_warm_but_wrong_model, 30)
{
	struct up u = pick_up();
	pid_t p = fork();
	ASSERT_GE(p, 0);
	if (p == 0) {
		int null = open("/dev/null", O_WRONLY);
		dup2(null, 1);
		execl(t_bin("examples/cold_http_server"), "cold_http_server", "--port", u.port, "--model", "demo",
		      "--ready-file", "ready.txt", (char *)NULL);
		_exit(127);
	}
	ASSERT_TRUE(wait_file_has("ready.txt", " ", 5000));
	char out[1024];
	for (int demand = 0; demand < 2; demand++) {
		EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale tick %d 0 60 --url http://%s --model llama-70b",
			       t_bin("mesh"), demand, u.addr),
			  7);
		EXPECT_CONTAINS(out, "WRONG_MODEL: warm but wrong model");
		EXPECT_CONTAINS(out, "not listed");
	}
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale tick 1 0 60 --url http://%s --model llama-70b --json",
		       t_bin("mesh"), u.addr),
		  7);
	EXPECT_CONTAINS(out, "\"action\":\"WRONG_MODEL\"");
	/* The right model: SERVE, as before. */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale tick 1 0 60 --url http://%s --model demo", t_bin("mesh"), u.addr),
		  2);
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
	/* Nothing listening: cold, SPAWN, as before. */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s autoscale tick 1 0 60 --url http://%s --model demo", t_bin("mesh"), u.addr),
		  1);
}

/* The official OpenAI client (npm `openai`, pinned; `make test` installs it
 * into the build tree) through mesh serve --http to a cold test server:
 * a chat completion, a streamed one, the model list. */
TEST_TIMEOUT(serve_http_openai_node_client, 60)
{
	char pkg[4096], out[8192];
	snprintf(pkg, sizeof pkg, "%s", t_bin("node/node_modules/openai/package.json"));
	if (access(pkg, R_OK) != 0) {
		char *log = t_read_file(t_bin("node/npm.log"), NULL);
		SKIP_TOOL("the openai npm package is not installed (make node-openai): %s", log ? log : "no npm log");
	}
	struct up u = pick_up();
	/* --idle 2: the client's three requests on one start (spawns=1) even
	 * with a loaded machine's pause between two (a run of the whole suite
	 * saw one past 0.5 s: reaped, started again). */
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "2", "--", "python3", oa_server(), "--port",
			      u.port, "--start-delay", "0.3", "--token-delay", "0.02", NULL};
	struct serve s = start_serve(args);
	int rc = t_sh(out, sizeof out, 1, "NODE_PATH=%s node %s http://127.0.0.1:%d/v1 test-model", t_bin("node/node_modules"),
		      t_src("tests/workers/openai_client.cjs"), s.port);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "plain: tok0 tok1 tok2 tok3 tok4\n");
	EXPECT_CONTAINS(out, "stream: tok0 tok1 tok2 tok3 tok4 chunks: 6\n");
	EXPECT_CONTAINS(out, "models: test-model\n");
	ASSERT_TRUE(wait_file_has("err.txt", "reaped pid=", 10000));
	EXPECT_EQ(stop_serve(&s), 0);
	char *o = t_read_file("out.txt", NULL);
	EXPECT_CONTAINS(o, "spawns=1 ");
	EXPECT_CONTAINS(o, "requests=3");
	free(o);
}

/* nginx as an ordinary HTTP upstream: it drains on SIGQUIT (SIGTERM is its
 * fast exit), so --stop-signal QUIT. */
TEST_TIMEOUT(serve_http_nginx_upstream_stops_with_sigquit, 30)
{
	const char *nginx = access("/usr/sbin/nginx", X_OK) == 0 ? "/usr/sbin/nginx" : NULL;
	if (!nginx)
		SKIP_TOOL("nginx is not installed (mk/deps.sh test installs it)");
	struct up u = pick_up();
	char conf[1024], cwd[512];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	mkdir("tmp", 0755);
	/* Relative paths are under the prefix (-p, the test's directory). */
	snprintf(conf, sizeof conf,
		 "daemon off; master_process on; worker_processes 1; pid nginx.pid;\n"
		 "error_log error.log notice;\nevents { worker_connections 64; }\n"
		 "http { access_log off; client_body_temp_path tmp; proxy_temp_path tmp;\n"
		 "  fastcgi_temp_path tmp; uwsgi_temp_path tmp; scgi_temp_path tmp;\n"
		 "  server { listen 127.0.0.1:%s; location / { return 200 \"hello from nginx\\n\"; } } }\n",
		 u.port);
	t_write_file("nginx.conf", conf);
	char confpath[1100], errlog[1100];
	snprintf(confpath, sizeof confpath, "%s/nginx.conf", cwd);
	snprintf(errlog, sizeof errlog, "%s/error.log", cwd);
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "0.3", "--probe", "/", "--stop-signal", "QUIT", "--",
			      nginx, "-p", cwd, "-e", errlog, "-c", confpath, NULL};
	struct serve s = start_serve(args);
	char resp[4096];
	EXPECT_EQ(http_get(s.port, "/", resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "hello from nginx");
	ASSERT_TRUE(wait_file_has("err.txt", "reaped pid=", 8000));
	EXPECT_TRUE(file_has("error.log", "SIGQUIT"));
	EXPECT_FALSE(file_has("error.log", "SIGTERM"));
	EXPECT_FALSE(file_has("err.txt", "grace over"));
	EXPECT_EQ(stop_serve(&s), 0);
}

/* An upstream that reads a request, then per its path: /fin closes, /reset
 * resets (SO_LINGER 0), /partial sends part of an answer and closes; the
 * probe (GET /v1/models) is answered. */
static const char conn_py[] =
	"import socket, struct, sys\n"
	"l = socket.socket()\n"
	"l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
	"l.bind(('127.0.0.1', int(sys.argv[1])))\n"
	"l.listen(64)\n"
	"while True:\n"
	"    s, _ = l.accept()\n"
	"    b = b''\n"
	"    while b'\\r\\n\\r\\n' not in b:\n"
	"        d = s.recv(65536)\n"
	"        if not d:\n"
	"            break\n"
	"        b += d\n"
	"    line = b.split(b'\\r\\n')[0]\n"
	"    if line.startswith(b'GET /v1/models'):\n"
	"        s.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{}')\n"
	"    elif b' /reset ' in line:\n"
	"        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n"
	"    elif b' /partial ' in line:\n"
	"        s.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 100\\r\\n\\r\\nhalf')\n"
	"    s.close()\n";

/* curl's exit code and the status it got (-w %{http_code}) for a request;
 * the body in body.txt. */
static int curl_status(int port, const char *extra, const char *path, int *status)
{
	char out[256];
	int rc = t_sh(out, sizeof out, 0, "curl -sS -o body.txt -w '%%{http_code}' %s http://127.0.0.1:%d%s 2>curl.err", extra,
		      port, path);
	*status = atoi(out);
	return rc;
}

/* The server's connection ends (its process died, or it closed or reset
 * the connection) after it read a request and before it answered: the
 * client gets 502 with a short body, not an empty reply (curl's exit 52).
 * An answer already under way is cut: the connection ends without its
 * end (curl's exit 18). */
TEST_TIMEOUT(serve_http_upstream_gone_before_answer_502, 40)
{
	char *body;
	int st;
	/* A process that dies (openai_server.py exits at "crash"). */
	struct up u = pick_up();
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "30", "--", "python3", oa_server(),
			      "--port", u.port, NULL};
	struct serve s = start_serve(args);
	static const char crash[] = "-H 'Content-Type: application/json' "
				    "-d '{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"crash\"}]}'";
	static const char crash_stream[] = "-N -H 'Content-Type: application/json' "
					   "-d '{\"model\":\"test-model\",\"stream\":true,"
					   "\"messages\":[{\"role\":\"user\",\"content\":\"crash\"}]}'";
	for (int i = 0; i < 3; i++) {
		EXPECT_EQ(curl_status(s.port, crash, "/v1/chat/completions", &st), 0);
		EXPECT_EQ(st, 502);
		body = t_read_file("body.txt", NULL);
		EXPECT_CONTAINS(body, "mesh serve: ");
		EXPECT_LT(strlen(body ? body : ""), 512);
		free(body);
	}
	EXPECT_EQ(curl_status(s.port, crash_stream, "/v1/chat/completions", &st), 18);
	EXPECT_EQ(st, 200);
	body = t_read_file("body.txt", NULL);
	EXPECT_CONTAINS(body, "tok1");
	free(body);
	EXPECT_EQ(stop_serve(&s), 0);
	/* A process that stays, and closes or resets the connection. */
	u = pick_up();
	t_write_file("conn.py", conn_py);
	const char *args2[] = {"--http", "--upstream", u.addr, "--idle", "30", "--", "python3", "conn.py", u.port, NULL};
	s = start_serve(args2);
	EXPECT_EQ(curl_status(s.port, "", "/fin", &st), 0);
	EXPECT_EQ(st, 502);
	EXPECT_EQ(curl_status(s.port, "", "/reset", &st), 0);
	EXPECT_EQ(st, 502);
	body = t_read_file("body.txt", NULL);
	EXPECT_CONTAINS(body, "mesh serve: ");
	free(body);
	EXPECT_EQ(curl_status(s.port, "", "/partial", &st), 18);
	EXPECT_EQ(st, 200);
	EXPECT_EQ(stop_serve(&s), 0);
}

/* A request head a server could read another way gets 400 from mesh serve
 * (the gateway's reading: http/hframe.h), and the connection ends. */
TEST_TIMEOUT(serve_http_malformed_request_400, 30)
{
	static const char *const bad[] = {
		"GET /v1/models HTTP/1.1\nHost: x\n\n",
		"POST /v1/models HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
		"GET /v1/models HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n",
	};
	struct up u = pick_up();
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "30", "--", "python3", oa_server(),
			      "--port", u.port, NULL};
	struct serve s = start_serve(args);
	char resp[4096];
	EXPECT_EQ(http_get(s.port, "/v1/models", resp, sizeof resp), 200); /* warm */
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int fd = connect_to(s.port), st = 0;
		ASSERT_GE(fd, 0);
		ASSERT_EQ(send_str(fd, bad[i]), 0);
		if (read_all(fd, resp, sizeof resp) > 0)
			sscanf(resp, "HTTP/1.1 %d", &st);
		close(fd);
		if (st != 400)
			fprintf(stderr, "    %zu: got \"%s\"\n", i, resp);
		EXPECT_EQ(st, 400);
	}
	EXPECT_EQ(stop_serve(&s), 0);
}

/* A client that stops halfway through a request, in its head or in its
 * body, gets 408 at the header or body timeout and its request stops
 * being demand: the server is reaped --idle after, though both
 * connections stay open.  Without the timeouts a stalled request kept the
 * server warm for as long as its client kept the socket. */
TEST_TIMEOUT(serve_http_stalled_request_408_and_does_not_hold_server, 30)
{
	struct up u = pick_up();
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "0.4", "--header-timeout", "1",
			      "--body-timeout", "1.5", "--", "python3", oa_server(), "--port", u.port, NULL};
	struct serve s = start_serve(args);
	char resp[4096];
	EXPECT_EQ(http_get(s.port, "/v1/models", resp, sizeof resp), 200); /* warm */
	int head = connect_to(s.port), body = connect_to(s.port);
	ASSERT_GE(head, 0);
	ASSERT_GE(body, 0);
	uint64_t t0 = t_now_ms();
	ASSERT_EQ(send_str(head, "GET /v1/models HTTP/1.1\r\nHost: x\r\n"), 0);
	ASSERT_EQ(send_str(body, "POST /v1/models HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"), 0);
	/* a byte of the head does not put its timeout off */
	usleep(500000);
	ASSERT_EQ(send_str(head, "X-A: 1\r\n"), 0);
	int st = 0;
	ASSERT_GT(read_all(head, resp, sizeof resp), 0);
	uint64_t t_head = t_now_ms() - t0;
	sscanf(resp, "HTTP/1.1 %d", &st);
	EXPECT_EQ(st, 408);
	EXPECT_CONTAINS(resp, "header timeout (1.0 s)");
	st = 0;
	ASSERT_GT(read_all(body, resp, sizeof resp), 0);
	uint64_t t_body = t_now_ms() - t0;
	sscanf(resp, "HTTP/1.1 %d", &st);
	EXPECT_EQ(st, 408);
	EXPECT_CONTAINS(resp, "body timeout (1.5 s)");
	fprintf(stderr, "    408 after %llu ms (head), %llu ms (body)\n", (unsigned long long)t_head,
		(unsigned long long)t_body);
	EXPECT_GE(t_head, 950);
	EXPECT_GE(t_body, 1450);
	EXPECT_LT(t_body, 6000);
	EXPECT_TRUE(wait_file_has("err.txt", "reaped pid=", 6000));
	EXPECT_TRUE(file_has("err.txt", "header timeout"));
	close(head);
	close(body);
	EXPECT_EQ(stop_serve(&s), 0);
}

/* The body timeout is the client's: a server slow to take a big body
 * (2.5 s before it reads, the client blocked on full buffers meanwhile)
 * does not get its client a 408 under a 1 s body timeout. */
TEST_TIMEOUT(serve_http_body_timeout_does_not_count_the_servers_wait, 30)
{
	struct up u = pick_up();
	const char *args[] = {"--http", "--upstream", u.addr, "--idle", "30", "--body-timeout", "1", "--",
			      "python3", oa_server(), "--port", u.port, NULL};
	struct serve s = start_serve(args);
	char resp[4096];
	EXPECT_EQ(http_get(s.port, "/v1/models", resp, sizeof resp), 200); /* warm */
	const size_t pad = 8u << 20;
	char *body = malloc(pad + 128), head[256];
	ASSERT_TRUE(body != NULL);
	int n = snprintf(body, 128, "{\"messages\":[{\"content\":\"hi\"}],\"pad\":\"");
	memset(body + n, 'a', pad);
	memcpy(body + n + pad, "\"}", 2);
	size_t len = (size_t)n + pad + 2;
	snprintf(head, sizeof head,
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Read-Delay: 2.5\r\nContent-Length: %zu\r\n"
		 "Connection: close\r\n\r\n",
		 len);
	int fd = connect_to(s.port);
	ASSERT_GE(fd, 0);
	uint64_t t0 = t_now_ms();
	ASSERT_EQ(send_str(fd, head), 0);
	size_t off = 0;
	while (off < len) {
		ssize_t k = send(fd, body + off, len - off, MSG_NOSIGNAL);
		if (k <= 0)
			break;
		off += (size_t)k;
	}
	EXPECT_EQ(off, len);
	int st = 0;
	ASSERT_GT(read_all(fd, resp, sizeof resp), 0);
	sscanf(resp, "HTTP/1.1 %d", &st);
	fprintf(stderr, "    answered %d after %llu ms\n", st, (unsigned long long)(t_now_ms() - t0));
	EXPECT_EQ(st, 200);
	EXPECT_CONTAINS(resp, "tok0");
	close(fd);
	free(body);
	EXPECT_EQ(stop_serve(&s), 0);
}
