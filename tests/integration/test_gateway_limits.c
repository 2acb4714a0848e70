/* meshd --http's per-request limits (request, response start, idle stream)
 * and the periodic probe of a warm program (a hung one is killed and
 * started again), end to end with tests/workers/openai_server.py. */
#include "runner/t.h"
#include "integration/gw_t.h"

#include <pthread.h>

/* /metrics through the control socket into metrics.txt; its text. */
static char *metrics(void)
{
	char out[4096];
	if (t_sh(out, sizeof out, 1, "curl -sS -o metrics.txt --unix-socket run/meshd.sock http://x/metrics") != 0)
		return NULL;
	return t_read_file("metrics.txt", NULL);
}

/* A program that sends nothing within the response timeout: 504 at the
 * timeout (not at the program's own pace), counted; the next request on a
 * fresh connection is served by the same warm program. */
TEST_TIMEOUT(gateway_response_timeout_504, 30)
{
	char resp[8192];
	add_oa("s", "\"test-model\"", "", "");
	struct gw g = start_gw("--http-response-timeout 0.5");
	EXPECT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(post_chat(g.port, "test-model", "slow:5", 0, resp, sizeof resp), 504);
	uint64_t took = t_now_ms() - t0;
	EXPECT_GE(took, 450);
	EXPECT_LT(took, 3000);
	EXPECT_CONTAINS(resp, "program 's' sent no byte of its response within the response timeout");
	EXPECT_CONTAINS(resp, "(0.5 s)");
	EXPECT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 1);
	char *m = metrics();
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_timeouts_total{program=\"s\",limit=\"response\"}"), 1);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_timeouts_total{program=\"s\",limit=\"idle_stream\"}"), 0);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_requests_total{program=\"s\",model=\"test-model\",code=\"5xx\"}"), 1);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_requests_total{program=\"s\",model=\"test-model\",code=\"2xx\"}"), 2);
	free(m);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A stream that goes silent longer than the idle stream timeout is cut:
 * the client has the first token, then its connection ends without the
 * stream's end. */
TEST_TIMEOUT(gateway_idle_stream_timeout_cuts, 30)
{
	char resp[16384];
	add_oa("i", "\"test-model\"", ", \"--token-delay\", \"30\"", "");
	struct gw g = start_gw("--http-idle-timeout 0.4");
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(post_chat(g.port, "test-model", "hi", 1, resp, sizeof resp), 200);
	/* a cold start, then cut: not the 30 s to the next token */
	EXPECT_LT(t_now_ms() - t0, 8000u * t_slack());
	EXPECT_CONTAINS(resp, "tok0");
	EXPECT_TRUE(strstr(resp, "tok1") == NULL);
	EXPECT_TRUE(strstr(resp, "\r\n0\r\n\r\n") == NULL);
	EXPECT_TRUE(file_has("meshd.err", "sent nothing more of its response within the idle stream timeout"));
	char *m = metrics();
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_timeouts_total{program=\"i\",limit=\"idle_stream\"}"), 1);
	free(m);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A stream that keeps flowing but runs past the request timeout is cut at
 * the timeout; a short one is not. */
TEST_TIMEOUT(gateway_request_timeout_cuts_long_stream, 30)
{
	char resp[16384];
	add_oa("r", "\"test-model\"", ", \"--token-delay\", \"0.1\", \"--tokens\", \"100\"", "");
	struct gw g = start_gw("--http-request-timeout 0.8 --http-idle-timeout 0.5");
	/* Warm it first: on a loaded machine the cold start alone may pass
	 * the 0.8 s (a 504 counted as a request timeout, then, too). */
	(void)post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp);
	ASSERT_TRUE(wait_file_has("meshd.err", "program=r warm", 10000));
	char *m0 = metrics();
	ASSERT_TRUE(m0 != NULL);
	double before = meshd_t_sample(m0, "mesh_gateway_timeouts_total{program=\"r\",limit=\"request\"}");
	free(m0);
	EXPECT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(post_chat(g.port, "test-model", "hi", 1, resp, sizeof resp), 200);
	uint64_t took = t_now_ms() - t0;
	EXPECT_GE(took, 700);
	EXPECT_LT(took, 3000);
	EXPECT_CONTAINS(resp, "tok2");
	EXPECT_TRUE(strstr(resp, "tok99") == NULL);
	EXPECT_TRUE(strstr(resp, "[DONE]") == NULL);
	EXPECT_TRUE(file_has("meshd.err", "did not end its response within the request timeout"));
	char *m = metrics();
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_timeouts_total{program=\"r\",limit=\"request\"}"), before + 1);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_timeouts_total{program=\"r\",limit=\"idle_stream\"}"), 0);
	free(m);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* The pid of the program itself: the spawned pid's only child when it is
 * mesh-init (a PID namespace of its own), else the spawned pid. */
static pid_t program_pid(pid_t spawned)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)spawned, (int)spawned);
	char *s = t_read_file(path, NULL);
	pid_t child = s ? atoi(s) : 0;
	free(s);
	return child > 0 ? child : spawned;
}

struct chat_arg {
	int port, status;
	char resp[8192];
};

static void *chat_main(void *arg)
{
	struct chat_arg *a = arg;
	a->status = post_chat(a->port, "test-model", "hi", 0, a->resp, sizeof a->resp);
	return NULL;
}

/* A warm program that stops answering (SIGSTOP: hung, its socket still
 * accepts) fails its periodic probes; after two in a row it is killed, the
 * request it held is answered 502, and the next request starts it again. */
TEST_TIMEOUT(gateway_hung_program_restarted, 30)
{
	char resp[8192];
	add_oa("h", "\"test-model\"", "", "");
	struct gw g = start_gw("--http-probe-interval 0.2 --http-probe-failures 2");
	EXPECT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	pid_t spawned = spawned_pid();
	ASSERT_GT(spawned, 1);
	/* A few periodic probes pass while it is well. */
	usleep(700 * 1000);
	EXPECT_FALSE(file_has("meshd.err", "hung:"));
	pid_t prog = program_pid(spawned);
	ASSERT_EQ(kill(prog, SIGSTOP), 0);
	struct chat_arg a = {.port = g.port};
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, chat_main, &a), 0);
	ASSERT_TRUE(wait_file_has("meshd.err", "program=h pid=", 5000));
	ASSERT_TRUE(wait_file_has("meshd.err", "hung: 2 probes in a row failed", 5000));
	pthread_join(th, NULL);
	EXPECT_EQ(a.status, 502);
	EXPECT_TRUE(t_wait_for(gone, &spawned, 3000));
	EXPECT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "X-Mesh-Cold-Start: 1");
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 2);
	char *m = metrics();
	ASSERT_TRUE(m != NULL);
	EXPECT_EQ(meshd_t_sample(m, "mesh_gateway_hung_restarts_total{program=\"h\"}"), 1);
	free(m);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A chat request for test-model on a connection of its own (kept alive,
 * then closed by us): its status, or -1. */
static int chat_on_new_connection(int port, int stream)
{
	char req[2048], resp[8192];
	int fd = connect_to(port);
	if (fd < 0)
		return -1;
	chat_request(req, sizeof req, "test-model", "hi", stream, 1);
	int st = send_str(fd, req) == 0 ? read_response(fd, resp, sizeof resp) : -1;
	close(fd);
	return st;
}

/* Keep-alive requests on different client connections, one after another,
 * reach the program on one kept connection (no connect per request); after
 * the program's restart a new one is made.  (A request with Connection:
 * close asks the program to close too: that one is not kept.) */
TEST_TIMEOUT(gateway_upstream_connection_reused, 30)
{
	char resp[8192];
	/* Idle past 1.5 s: stopped, below.  (At 300 ms a loaded machine once
	 * stopped it between two of the three requests: 2 vs 3.) */
	add_oa("u", "\"test-model\"", "", "idle_ttl = \"1500ms\"\n");
	/* One loop: one kept connection (each loop keeps its own: below). */
	struct gw g = start_gw("--http-threads 1");
	for (int i = 0; i < 3; i++)
		EXPECT_EQ(chat_on_new_connection(g.port, i == 1), 200);
	/* The program's output reaches its log through meshd's reader thread,
	 * after the answers: wait for its three lines. */
	struct has_n three = {"logs/u.log", "req POST", 3};
	ASSERT_TRUE(t_wait_for(has_n_cond, &three, 3000));
	char *log = t_read_file("logs/u.log", NULL);
	ASSERT_TRUE(log != NULL);
	const char *a = strstr(log, "req POST /v1/chat/completions from ");
	ASSERT_TRUE(a != NULL);
	int port = atoi(a + 35);
	char want[96];
	snprintf(want, sizeof want, "req POST /v1/chat/completions from %d\n", port);
	free(log);
	EXPECT_EQ(count_in("logs/u.log", want), 3);
	EXPECT_EQ(count_in("logs/u.log", "req POST"), 3);
	/* Idle-stopped (its kept connection closed first), started again. */
	ASSERT_TRUE(wait_file_has("meshd.err", "program=u stopped", 5000));
	EXPECT_FALSE(file_has("meshd.err", "SIGKILL after the grace"));
	EXPECT_EQ(post_chat(g.port, "test-model", "hi", 0, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "X-Mesh-Cold-Start: 1");
	struct has_n four = {"logs/u.log", "req POST", 4};
	EXPECT_TRUE(t_wait_for(has_n_cond, &four, 3000));
	EXPECT_EQ(count_in("logs/u.log", want), 3);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* With two loops (--http-threads 2: the default on 2 or 3 CPUs) each loop
 * keeps its own connection to the program: client connections, given to the
 * loops in turn, reach it on two kept connections, used in turn. */
TEST_TIMEOUT(gateway_upstream_connection_kept_per_loop, 30)
{
	add_oa("u", "\"test-model\"", "", "");
	struct gw g = start_gw("--http-threads 2");
	for (int i = 0; i < 6; i++)
		EXPECT_EQ(chat_on_new_connection(g.port, 0), 200);
	struct has_n six = {"logs/u.log", "req POST", 6};
	ASSERT_TRUE(t_wait_for(has_n_cond, &six, 3000));
	char *log = t_read_file("logs/u.log", NULL);
	ASSERT_TRUE(log != NULL);
	/* The program's source port of each request, in order. */
	int ports[6], n = 0;
	for (const char *a = log; n < 6 && (a = strstr(a, "req POST /v1/chat/completions from ")); a += 35)
		ports[n++] = atoi(a + 35);
	free(log);
	ASSERT_EQ(n, 6);
	/* The first (the cold start's, on the probe's connection) aside, the
	 * five reach the program on two connections, one a loop (the clients
	 * are given to the loops in turn, the cold start's first). */
	int distinct[5], nd = 0;
	for (int i = 1; i < 6; i++) {
		int seen = 0;
		for (int k = 0; k < nd; k++)
			seen |= distinct[k] == ports[i];
		if (!seen)
			distinct[nd++] = ports[i];
	}
	EXPECT_EQ(nd, 2);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* The program closes a kept connection (nginx's keepalive_timeout): the
 * next request, which finds it closed with nothing answered, goes on a new
 * connection and is served. */
TEST_TIMEOUT(gateway_kept_connection_closed_by_program, 30)
{
	char cwd[512], text[4096], req[1024], resp[4096];
	if (access("/usr/sbin/nginx", X_OK) != 0)
		SKIP_TOOL("nginx is not installed (mk/deps.sh test installs it)");
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	mkdir("tmp", 0755);
	t_write_file("nginx.conf.in",
		     "daemon off; master_process on; worker_processes 1; pid nginx.pid;\n"
		     "error_log error.log notice;\nevents { worker_connections 64; }\n"
		     "http { access_log off; client_body_temp_path tmp; proxy_temp_path tmp; keepalive_timeout 200ms;\n"
		     "  fastcgi_temp_path tmp; uwsgi_temp_path tmp; scgi_temp_path tmp;\n"
		     "  server { listen 127.0.0.1:@PORT@; location / { return 200 \"hello from nginx\\n\"; } } }\n");
	mkdir("catalog", 0755);
	snprintf(text, sizeof text,
		 "name = \"web\"\nbackend = \"http\"\nmodels = [\"nginx-hello\"]\nprobe_path = \"/\"\nprobe_status = 200\n"
		 "upstream_paths = [\"/\"]\n"
		 "command = [\"sh\", \"-c\", \"sed s/@PORT@/{port}/ nginx.conf.in > nginx.conf && "
		 "exec /usr/sbin/nginx -p %s -e %s/error.log -c %s/nginx.conf\"]\n"
		 "[lifecycle]\nstop_signal = \"QUIT\"\n",
		 cwd, cwd, cwd);
	t_write_file("catalog/web.toml", text);
	struct gw g = start_gw("");
	snprintf(req, sizeof req, "GET /upstream/nginx-hello/ HTTP/1.1\r\nHost: localhost\r\n\r\n");
	for (int i = 0; i < 3; i++) {
		int fd = connect_to(g.port);
		ASSERT_GE(fd, 0);
		ASSERT_EQ(send_str(fd, req), 0);
		EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
		EXPECT_CONTAINS(resp, "hello from nginx");
		close(fd);
		if (i == 1)
			usleep(600 * 1000); /* past nginx's keepalive_timeout: it closes the kept one */
	}
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 1);
	EXPECT_FALSE(file_has("meshd.err", "status=502"));
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A chunked request body (chunks split anywhere, an extension, a trailer)
 * is read whole, routed by its model and passed on with Content-Length; the
 * request after it on the same keep-alive connection is served too. */
TEST_TIMEOUT(gateway_chunked_request_body, 30)
{
	char req[4096], resp[8192];
	const char *json = "{\"model\":\"test-model\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
	size_t n = strlen(json);
	add_oa("c", "\"test-model\"", "", "");
	struct gw g = start_gw("");
	int fd = connect_to(g.port);
	ASSERT_GE(fd, 0);
	snprintf(req, sizeof req,
		 "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "a;ext=1\r\n%.10s\r\n%zx\r\n%s\r\n0\r\nX-Trailer: t\r\n\r\n",
		 json, n - 10, json + 10);
	ASSERT_EQ(send_str(fd, req), 0);
	EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "tok0 tok1 tok2");
	chat_request(req, sizeof req, "test-model", "again", 0, 1);
	ASSERT_EQ(send_str(fd, req), 0);
	EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "tok0 tok1 tok2");
	close(fd);
	struct has_n reqs = {"logs/c.log", "req POST /v1/chat/completions", 2}; /* written by meshd's reader thread */
	EXPECT_TRUE(t_wait_for(has_n_cond, &reqs, 3000));
	struct has_n two = {"meshd.err", "status=200", 2}; /* access lines come after the answers */
	EXPECT_TRUE(t_wait_for(has_n_cond, &two, 3000));
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A client that leaves before its answer (curl --max-time against a
 * program that takes its time): the access line says 499, nginx's word for
 * it, whether it left while the program worked on the request, while it
 * was being started, or after the answer's head (a stream cut by the
 * client), and the program is no longer counted busy. */
TEST_TIMEOUT(gateway_access_line_says_499_for_a_client_that_left, 90)
{
	char out[4096];
	add_oa("s", "\"slow-model\"", ", \"--models\", \"slow-model\", \"--token-delay\", \"1\", \"--tokens\", \"20\"", "");
	add_oa("c", "\"cold-model\"", ", \"--models\", \"cold-model\", \"--start-delay\", \"3\"", "");
	struct gw g = start_gw("");
	/* Warm first (a cold start is not what is timed here). */
	char resp[8192];
	ASSERT_EQ(post_chat(g.port, "slow-model", "hi", 0, resp, sizeof resp), 200);
	/* 1: the program answers after 5 s; the client gives up after 1. */
	EXPECT_NE(t_sh(out, sizeof out, 1,
		       "curl -sS --max-time 1 -d '{\"model\":\"slow-model\",\"messages\":[{\"role\":\"user\",\"content\":"
		       "\"slow:5\"}]}' http://127.0.0.1:%d/v1/chat/completions",
		       g.port),
		  0);
	ASSERT_TRUE(wait_file_has("meshd.err", "model=slow-model status=499", 3000));
	/* 2: a stream the client leaves after its head and first token. */
	EXPECT_NE(t_sh(out, sizeof out, 1,
		       "curl -sS -N --max-time 1.5 -d '{\"model\":\"slow-model\",\"stream\":true,\"messages\":[{\"role\":"
		       "\"user\",\"content\":\"hi\"}]}' http://127.0.0.1:%d/v1/chat/completions",
		       g.port),
		  0);
	struct has_n two = {"meshd.err", "model=slow-model status=499", 2};
	EXPECT_TRUE(t_wait_for(has_n_cond, &two, 3000));
	/* 3: during a cold start. */
	EXPECT_NE(t_sh(out, sizeof out, 1,
		       "curl -sS --max-time 1 -d '{\"model\":\"cold-model\"}' http://127.0.0.1:%d/v1/chat/completions",
		       g.port),
		  0);
	EXPECT_TRUE(wait_file_has("meshd.err", "model=cold-model status=499", 3000));
	EXPECT_EQ(count_in("meshd.err", "status=200 cold=0"), 0); /* none of the three logged as served */
	EXPECT_EQ(stop_gw(&g), 0);
}
