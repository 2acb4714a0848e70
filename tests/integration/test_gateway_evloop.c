/* meshd --http's warm path on libevent (src/gateway/gw_loop.c): what the
 * port to raw events added to watch.  A client that resets its connection
 * (an error, not a FIN: libevent reports it as readable and writable, not
 * EV_CLOSED) takes its request with it; the connections a loop keeps to a
 * program (in its events from connect to close) do not hold up the
 * program's graceful stop. */
#include "runner/t.h"
#include "integration/gw_t.h"

#include <netinet/in.h>

/* A warm program's client that resets its connection before its answer
 * takes its request with it (499); the program is idle again. */
TEST_TIMEOUT(gateway_warm_client_reset_ends_its_request, 30)
{
	char req[2048], resp[8192];
	add_oa("r", "\"test-model\"", "", "idle_ttl = \"1s\"\n");
	struct gw g = start_gw("");
	ASSERT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	chat_request(req, sizeof req, "test-model", "hang", 0, 1);
	int fd = connect_to(g.port);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(send_str(fd, req), 0);
	struct has_n h = {"logs/r.log", "req POST", 2};
	ASSERT_TRUE(t_wait_for(has_n_cond, &h, 10000));
	struct linger lg = {1, 0}; /* close sends a RST */
	ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
	close(fd);
	struct has_n w = {"meshd.err", "program=r client went away after 0 bytes", 1};
	ASSERT_TRUE(t_wait_for(has_n_cond, &w, 3000));
	EXPECT_EQ(count_in("meshd.err", "status=499"), 1);
	EXPECT_TRUE(wait_file_has("meshd.err", "program=r stopped", 8000));
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A program whose graceful stop waits until every client connection to it
 * is closed (Python's ThreadingHTTPServer joining its handlers): the
 * connection the loop kept after a warm request is closed when the program
 * goes idle and stops, well before the grace's SIGKILL. */
TEST_TIMEOUT(gateway_loop_kept_connection_does_not_hold_up_stop, 30)
{
	char text[4096], resp[8192];
	t_write_file("waiter.py",
		     "import http.server, json, signal, sys, threading\n"
		     "class H(http.server.BaseHTTPRequestHandler):\n"
		     "    protocol_version = 'HTTP/1.1'\n"
		     "    def log_message(self, *a): pass\n"
		     "    def reply(self, o):\n"
		     "        b = json.dumps(o).encode()\n"
		     "        self.send_response(200)\n"
		     "        self.send_header('Content-Type', 'application/json')\n"
		     "        self.send_header('Content-Length', str(len(b)))\n"
		     "        self.end_headers()\n"
		     "        self.wfile.write(b)\n"
		     "    def do_GET(self): self.reply({'object': 'list', 'data': [{'id': 'kw', 'object': 'model'}]})\n"
		     "    def do_POST(self):\n"
		     "        self.rfile.read(int(self.headers.get('Content-Length', 0)))\n"
		     "        print('req POST', flush=True)\n"
		     "        self.reply({'object': 'chat.completion', 'choices': []})\n"
		     "s = http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H)\n"
		     "s.daemon_threads = False\n"
		     "signal.signal(signal.SIGTERM, lambda *a: threading.Thread(target=s.shutdown).start())\n"
		     "s.serve_forever()\n"
		     "s.server_close()  # joins every connection's thread: waits for the clients to close\n"
		     "print('all connections closed', flush=True)\n");
	mkdir("catalog", 0755);
	snprintf(text, sizeof text,
		 "name = \"kw\"\nbackend = \"http\"\nmodels = [\"kw\"]\n"
		 "command = [\"python3\", \"waiter.py\", \"{port}\"]\nidle_ttl = \"300ms\"\n"
		 "[lifecycle]\nstop_grace = \"5s\"\n");
	t_write_file("catalog/kw.toml", text);
	struct gw g = start_gw("");
	/* The cold start, then warm requests on the loops, each on a new
	 * client connection: the loop keeps the program's connection. */
	char req[2048];
	chat_request(req, sizeof req, "kw", "hi", 0, 1); /* keep-alive: its connection to the program is kept */
	for (int i = 0; i < 3; i++) {
		int fd = connect_to(g.port);
		ASSERT_GE(fd, 0);
		ASSERT_EQ(send_str(fd, req), 0);
		ASSERT_EQ(read_response(fd, resp, sizeof resp), 200);
		close(fd);
	}
	uint64_t t_end = t_now_ms();
	ASSERT_TRUE(wait_file_has("meshd.err", "program=kw stopped", 8000));
	EXPECT_LT(t_now_ms() - t_end, 3000);
	EXPECT_FALSE(file_has("meshd.err", "SIGKILL after the grace"));
	EXPECT_TRUE(wait_file_has("logs/kw.log", "all connections closed", 1000));
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A request's end does not wake the program's supervisor (it looks again an
 * idle TTL after it saw the program busy): the idle stop still comes its
 * TTL after the last of many back-to-back requests, not later. */
TEST_TIMEOUT(gateway_idle_stop_at_ttl_after_busy, 30)
{
	char req[2048], resp[8192];
	add_oa("b", "\"test-model\"", "", "idle_ttl = \"400ms\"\n");
	struct gw g = start_gw("");
	ASSERT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	chat_request(req, sizeof req, "test-model", "hi", 0, 1);
	int fd = connect_to(g.port);
	ASSERT_GE(fd, 0);
	uint64_t t0 = t_now_ms();
	while (t_now_ms() - t0 < 1000) { /* busy across two of its TTLs */
		ASSERT_EQ(send_str(fd, req), 0);
		ASSERT_EQ(read_response(fd, resp, sizeof resp), 200);
	}
	uint64_t t_end = t_now_ms();
	ASSERT_TRUE(wait_file_has("meshd.err", "program=b stopped", 5000));
	uint64_t dt = t_now_ms() - t_end;
	EXPECT_GE(dt, 350);
	EXPECT_LT(dt, 400 + 600); /* its stop (SIGTERM, exit, reap) included */
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 1);
	close(fd);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* The access line of a request (formatted by hand on the warm path): its
 * method, target, model, status, cold flag, bytes and time. */
TEST_TIMEOUT(gateway_access_line, 30)
{
	char resp[8192];
	add_oa("al", "\"test-model\"", "", "");
	struct gw g = start_gw("");
	ASSERT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	ASSERT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	const char *body = strstr(resp, "\r\n\r\n");
	ASSERT_TRUE(body != NULL);
	char want[256];
	snprintf(want, sizeof want, "access POST /v1/chat/completions model=test-model status=200 cold=0 bytes=%zu ms=",
		 strlen(resp));
	ASSERT_TRUE(wait_file_has("meshd.err", want, 3000));
	EXPECT_TRUE(file_has("meshd.err", "access POST /v1/chat/completions model=test-model status=200 cold=1 bytes="));
	char *log = t_read_file("meshd.err", NULL);
	const char *ms = strstr(strstr(log, want), " ms=") + 4;
	EXPECT_TRUE(ms[0] >= '0' && ms[0] <= '9' && strchr(ms, '.') && strchr(ms, '.')[1] >= '0');
	free(log);
	EXPECT_EQ(stop_gw(&g), 0);
}
