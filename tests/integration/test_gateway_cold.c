/* meshd --http's cold start (issue 13, "Cold start"; benchmark "Cold
 * start: first byte minus the program's own spawn-to-ready <= 5 ms"): the
 * start's wait follows the program closely whether nothing listens yet (a
 * bare connect at a 0.25 ms pace early, no HTTP) or it listens but says "not yet"
 * (a model loading: the probe does not back off to 100 ms steps), and the
 * first request goes the moment the probe passes. */
#include "runner/t.h"
#include "integration/gw_t.h"
#include "base/clock.h"

#include <sys/stat.h>
#include <dirent.h>
#include <fcntl.h>

/* A server whose steps the test drives with files in its directory: it
 * listens once "listen" exists, answers GET /v1/models 503 until "go"
 * exists, then lists "cold-model"; a POST gets a small JSON answer.  Each
 * GET is one "probe" line on stdout (the program's log), each POST one
 * "post" line, each connection it accepts one "accept" line. */
static const char server_py[] =
	"import http.server, os, socketserver, sys, time\n"
	"port = int(sys.argv[1])\n"
	"while not os.path.exists('listen'):\n"
	"    time.sleep(0.0005)\n"
	"class H(http.server.BaseHTTPRequestHandler):\n"
	"    protocol_version = 'HTTP/1.1'\n"
	"    def log_message(self, *a):\n"
	"        pass\n"
	"    def answer(self, code, body):\n"
	"        self.send_response(code)\n"
	"        self.send_header('Content-Type', 'application/json')\n"
	"        self.send_header('Content-Length', str(len(body)))\n"
	"        self.end_headers()\n"
	"        self.wfile.write(body)\n"
	"    def do_GET(self):\n"
	"        print('probe', flush=True)\n"
	"        if not os.path.exists('go'):\n"
	"            return self.answer(503, b'{\"error\":\"loading\"}')\n"
	"        self.answer(200, b'{\"object\":\"list\",\"data\":[{\"id\":\"cold-model\",\"object\":\"model\"}]}')\n"
	"    def do_POST(self):\n"
	"        self.rfile.read(int(self.headers.get('Content-Length', '0')))\n"
	"        print('post', flush=True)\n"
	"        self.answer(200, b'{\"object\":\"chat.completion\",\"choices\":[]}')\n"
	"class S(socketserver.ThreadingMixIn, http.server.HTTPServer):\n"
	"    daemon_threads = True\n"
	"    def get_request(self):\n"
	"        r = super().get_request()\n"
	"        print('accept', flush=True)\n"
	"        return r\n"
	"S(('127.0.0.1', port), H).serve_forever()\n";

static void add_stepped(void)
{
	char text[4096], cwd[2048];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	t_write_file("server.py", server_py);
	mkdir("catalog", 0755);
	snprintf(text, sizeof text,
		 "name = \"c\"\nbackend = \"http\"\ncommand = [\"sh\", \"-c\", \"cd %s && exec python3 server.py {port}\"]\n"
		 "models = [\"cold-model\"]\n",
		 cwd);
	t_write_file("catalog/c.toml", text);
}

static int logged(void *arg)
{
	return file_has("meshd.err", arg);
}

/* The number in meshd's log after "label" (0 when absent). */
static double logged_num(const char *label)
{
	char *s = t_read_file("meshd.err", NULL);
	const char *p = s ? strstr(s, label) : NULL;
	double v = p ? strtod(p + strlen(label), NULL) : 0;
	free(s);
	return v;
}

/* How many listen tests the warm line counts ("(N listen tests"). */
static int logged_listen_tests(void)
{
	char *s = t_read_file("meshd.err", NULL);
	const char *p = s ? strstr(s, " listen tests,") : NULL;
	int n = 0;
	while (p && p > s && p[-1] >= '0' && p[-1] <= '9')
		p--;
	if (p)
		n = atoi(p);
	free(s);
	return n;
}

/* Nothing listens for 0.4 s, then it listens and loads for 1.2 s: while
 * nothing listens only bare connects (no HTTP request reaches it before it
 * listens: one probe at most per 2 ms afterwards, never a 100 ms step);
 * the first byte comes within a few ms of its "go".  Early in a start the
 * bare connects come every 0.25 ms (at 1 ms the listen was seen 0.5 ms
 * late on average, at worst 1 ms: a fifth of the cold start's 5 ms): 4
 * per ms for the first second (3.2 per ms on average if it listens at
 * 2.3 s, as python's start made it on a loaded machine), where the old
 * pace made at most 1 per ms (so more than 1.3, for a loaded machine);
 * meshd's warm line says when the listen was seen, how late at most, and
 * how long the spawn took to the program's exec. */
TEST_TIMEOUT(gateway_cold_start_follows_listen_and_load_closely, 30)
{
	char req[2048], resp[8192];
	add_stepped();
	struct gw g = start_gw("");
	chat_request(req, sizeof req, "cold-model", "hi", 0, 0);
	int fd = connect_to(g.port);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(send_str(fd, req), 0);
	ASSERT_TRUE(t_wait_for(logged, "program=c spawned pid=", 5000));
	usleep(400000);
	t_write_file("listen", "");
	/* It loads for 1.2 s (503s); by then the old back-off probed every 100 ms. */
	ASSERT_TRUE(wait_file_has("logs/c.log", "probe\n", 5000));
	usleep(1200000);
	int loading_probes = count_in("logs/c.log", "probe\n");
	uint64_t go = mesh_mono_ns();
	t_write_file("go", "");
	int n = read_all(fd, resp, sizeof resp);
	uint64_t lag_us = (mesh_mono_ns() - go) / 1000;
	close(fd);
	ASSERT_GT(n, 0);
	EXPECT_CONTAINS(resp, "HTTP/1.1 200");
	EXPECT_CONTAINS(resp, "X-Mesh-Cold-Start: 1");
	/* At most a probe every 2 ms while it loads (1.2 s: about 600 on an
	 * idle machine; the 2 ms..100 ms back-off made about 30; at load 8,
	 * with the pace a thousandth of the time since the spawn and python
	 * slow to start, 110-140 were seen). */
	EXPECT_GT(loading_probes, 60);
	EXPECT_LT(loading_probes, 700);
	/* The first byte follows the readiness (the 2 ms pace, the probe,
	 * the relay): how closely is bench_gateway.sh's "cold start" figure
	 * (first byte minus the program's spawn-to-ready, target 5 ms); the
	 * back-off it replaced is caught by the probes' count above.  Here
	 * only that it comes, within 1 s a step of slack (40 ms failed a
	 * loaded run at 64.7 ms). */
	printf("first byte %.1f ms after the program's readiness; %d probes while it loaded\n", (double)lag_us / 1e3,
	       loading_probes);
	EXPECT_LT(lag_us, 1000000u * t_slack());
	/* The wait's own numbers: listen tests before it listened, its CPU,
	 * its steps.  meshd logs them once the first request is on its way
	 * (the probe's answer sends it), so the answer can come first. */
	ASSERT_TRUE(t_wait_for(logged, "the probe answered in ", 5000));
	int tests = logged_listen_tests();
	double seen = logged_num("its listen seen at ");
	printf("%d listen tests before its listen, seen at %.1f ms (within %.2f ms); the spawn %.2f ms\n", tests, seen,
	       logged_num("(within "), logged_num("; spawn "));
	EXPECT_GT((int)seen, 350);
	EXPECT_GT(tests * 10, (int)(seen * 13)); /* more than 1.3 per ms */
	EXPECT_TRUE(file_has("meshd.err", "ms of CPU; spawn "));
	EXPECT_TRUE(file_has("meshd.err", "ms to the program's exec, its listen seen at "));
	EXPECT_TRUE(file_has("meshd.err", "the probe answered in "));
	EXPECT_EQ(stop_gw(&g), 0);
}

/* The first request after a cold start rides the connection the start's
 * wait made: the listen test that found the port listening is the probe's
 * connection (kept alive), and the warm probe's connection carries the
 * first request.  The program accepts one connection, not three (a bare
 * connect it had to accept and see closed, the probe's, the request's),
 * each of which cost it an accept and a handler thread on the cold
 * start's path. */
TEST_TIMEOUT(gateway_cold_start_first_request_rides_the_probes_connection, 30)
{
	char resp[8192];
	add_stepped();
	t_write_file("listen", "");
	t_write_file("go", "");
	struct gw g = start_gw("");
	EXPECT_EQ(post_chat(g.port, "cold-model", "hi", 0, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "X-Mesh-Cold-Start: 1");
	ASSERT_TRUE(wait_file_has("logs/c.log", "post\n", 5000));
	EXPECT_EQ(count_in("logs/c.log", "probe\n"), 1);
	EXPECT_EQ(count_in("logs/c.log", "accept\n"), 1);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* mesh ps --json says the program has nothing in flight. */
static int none_in_flight(void *arg)
{
	char out[16384];
	(void)arg;
	return t_sh(out, sizeof out, 1, "%s ps --json --socket run/meshd.sock", t_bin("mesh")) == 0 &&
	       strstr(out, "\"in_flight\":0") != NULL;
}

/* The first waiter's request goes from the supervisor's thread the moment
 * the probe passes, on the probe's connection (the program works on it
 * while the waiter's loop wakes: a wake-up is milliseconds on a loaded
 * machine); the warm line says when.  The start takes that request's place:
 * with max_concurrency = 1 three requests waiting for the start are each
 * answered, one at a time, and none is left counted in flight. */
TEST_TIMEOUT(gateway_cold_start_sends_the_first_request_with_the_probes_answer, 30)
{
	char req[2048], resp[8192], text[4096], cwd[2048];
	int fd[3];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	add_stepped();
	snprintf(text, sizeof text,
		 "name = \"c\"\nbackend = \"http\"\ncommand = [\"sh\", \"-c\", \"cd %s && exec python3 server.py {port}\"]\n"
		 "models = [\"cold-model\"]\nmax_concurrency = 1\n",
		 cwd);
	t_write_file("catalog/c.toml", text);
	t_write_file("go", "");
	struct gw g = start_gw("");
	chat_request(req, sizeof req, "cold-model", "hi", 0, 0);
	for (int i = 0; i < 3; i++) {
		fd[i] = connect_to(g.port);
		ASSERT_GE(fd[i], 0);
		ASSERT_EQ(send_str(fd[i], req), 0);
	}
	ASSERT_TRUE(t_wait_for(logged, "program=c spawned pid=", 5000));
	usleep(100000); /* all three wait for the start */
	t_write_file("listen", "");
	for (int i = 0; i < 3; i++) {
		int n = read_all(fd[i], resp, sizeof resp);
		close(fd[i]);
		ASSERT_GT(n, 0);
		EXPECT_CONTAINS(resp, "HTTP/1.1 200");
		EXPECT_CONTAINS(resp, "X-Mesh-Cold-Start: 1");
	}
	ASSERT_TRUE(t_wait_for(logged, "the first request sent on its connection ", 2000));
	printf("the first request sent %.3f ms after the probe's answer\n",
	       logged_num("the first request sent on its connection "));
	EXPECT_EQ(count_in("meshd.err", "the first request sent on its connection "), 1);
	struct has_n posts = {"logs/c.log", "post\n", 3};
	ASSERT_TRUE(t_wait_for(has_n_cond, &posts, 5000));
	/* Each request's place was given back (the supervisor's too). */
	ASSERT_TRUE(t_wait_for(none_in_flight, NULL, 2000));
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A /proc/N/cmdline holding text, N not this process: a t_wait_for
 * condition's negation (the program left nothing running). */
static int none_runs(void *arg)
{
	const char *text = arg;
	DIR *d = opendir("/proc");
	struct dirent *de;
	int found = 0;
	while (d && !found && (de = readdir(d))) {
		char p[300], buf[4096];
		if (de->d_name[0] < '1' || de->d_name[0] > '9' || atoi(de->d_name) == (int)getpid())
			continue;
		snprintf(p, sizeof p, "/proc/%s/cmdline", de->d_name);
		int fd = open(p, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
		if (fd >= 0)
			close(fd);
		for (ssize_t i = 0; i < n; i++)
			if (!buf[i])
				buf[i] = ' ';
		if (n > 0) {
			buf[n] = 0;
			found = strstr(buf, text) != NULL;
		}
	}
	if (d)
		closedir(d);
	return !found;
}

/* The program's log is opened after its spawn (off the cold start's
 * path): one that cannot be (a symlink) still fails the start with the
 * reason, and the program already spawned is not left running. */
TEST(gateway_cold_start_without_its_log_leaves_nothing_running)
{
	char text[4096], cwd[2048], resp[8192];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	mkdir("catalog", 0755);
	mkdir("logs", 0755);
	snprintf(text, sizeof text,
		 "name = \"c\"\nbackend = \"http\"\ncommand = [\"sh\", \"-c\", \"cd %s && exec sleep 30.4711 {port}\"]\n"
		 "models = [\"cold-model\"]\n",
		 cwd);
	t_write_file("catalog/c.toml", text);
	ASSERT_EQ(symlink("../elsewhere", "logs/c.log"), 0);
	struct gw g = start_gw("");
	EXPECT_EQ(post_chat(g.port, "cold-model", "hi", 0, resp, sizeof resp), 502);
	EXPECT_CONTAINS(resp, "refusing log");
	EXPECT_TRUE(t_wait_for(none_runs, "30.4711", 5000));
	EXPECT_EQ(stop_gw(&g), 0);
}
