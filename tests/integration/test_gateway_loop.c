/* meshd --http's front (src/gateway/gw_loop.c: event loops, non-blocking
 * sockets): requests to a program that is already warm, on connections the
 * loops serve from their first byte; requests that wait for a cold start
 * wait on the loops too, holding no thread.  Most tests warm their
 * programs first on a connection of their own. */
#include "runner/t.h"
#include "integration/gw_t.h"

#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>

/* The program's log has n "req POST" lines (its output reaches the log
 * through meshd's supervisor, maybe after the answer reached here). */
static int log_has_n(const char *file, int n)
{
	struct has_n h = {file, "req POST", n};
	return t_wait_for(has_n_cond, &h, 3000);
}

/* One warm-up request on its own connection. */
static void warm(int port, const char *model)
{
	char resp[8192];
	ASSERT_EQ(post_chat(port, model, "hi", 0, resp, sizeof resp), 200);
}

/* Reads responses from fd until n of them have ended (Content-Length or
 * chunked), each into its own slot (cap bytes each); their statuses. */
static void read_n(int fd, int n, char (*resp)[8192], int *status)
{
	static char buf[1 << 16];
	size_t have = 0;
	for (int k = 0; k < n; k++) {
		status[k] = 0;
		for (;;) {
			buf[have] = 0;
			char *end = strstr(buf, "\r\n\r\n");
			size_t len = 0;
			if (end) {
				size_t head = (size_t)(end + 4 - buf);
				char *cl = strcasestr(buf, "content-length:");
				char *z = strstr(end, "\r\n0\r\n\r\n");
				if (cl && cl < end && have >= head + (size_t)atol(cl + 15))
					len = head + (size_t)atol(cl + 15);
				else if (!(cl && cl < end) && z)
					len = (size_t)(z + 7 - buf);
			}
			if (len) {
				snprintf(resp[k], 8192, "%.*s", (int)len, buf);
				sscanf(buf, "HTTP/1.1 %d", &status[k]);
				memmove(buf, buf + len, have - len);
				have -= len;
				break;
			}
			ssize_t r = recv(fd, buf + have, sizeof buf - 1 - have, 0);
			if (r <= 0)
				return;
			have += (size_t)r;
		}
	}
}

/* Three requests pipelined in one write on one keep-alive connection, for
 * two programs: each answered in order by its own program, and the
 * connection goes on. */
TEST_TIMEOUT(gateway_pipelined_requests_two_models, 30)
{
	static char resp[4][8192];
	char a[2048], b[2048], all[8192];
	int st[4];
	add_oa("pa", "\"m-a\"", ", \"--models\", \"m-a\"", "");
	add_oa("pb", "\"m-b\"", ", \"--models\", \"m-b\"", "");
	struct gw g = start_gw("");
	warm(g.port, "m-a");
	warm(g.port, "m-b");
	int fd = connect_to(g.port);
	ASSERT_GE(fd, 0);
	chat_request(a, sizeof a, "m-a", "one", 0, 1);
	chat_request(b, sizeof b, "m-b", "two", 1, 1);
	snprintf(all, sizeof all, "%s%s%s", a, b, a);
	ASSERT_EQ(send_str(fd, all), 0);
	read_n(fd, 3, resp, st);
	EXPECT_EQ(st[0], 200);
	EXPECT_EQ(st[1], 200);
	EXPECT_EQ(st[2], 200);
	EXPECT_CONTAINS(resp[0], "\"model\": \"m-a\"");
	EXPECT_CONTAINS(resp[1], "text/event-stream");
	EXPECT_CONTAINS(resp[1], "\"model\": \"m-b\"");
	EXPECT_CONTAINS(resp[1], "data: [DONE]");
	EXPECT_CONTAINS(resp[2], "\"model\": \"m-a\"");
	EXPECT_FALSE(strstr(resp[2], "\"model\": \"m-b\"") != NULL);
	/* And the next one on the same connection. */
	ASSERT_EQ(send_str(fd, b), 0);
	read_n(fd, 1, resp + 3, st + 3);
	EXPECT_EQ(st[3], 200);
	EXPECT_CONTAINS(resp[3], "\"model\": \"m-b\"");
	close(fd);
	EXPECT_TRUE(log_has_n("logs/pa.log", 3));
	EXPECT_TRUE(log_has_n("logs/pb.log", 3));
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 2);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A client that sends its request one byte at a time (head and body) is
 * answered once the body is whole; then its next request too. */
TEST_TIMEOUT(gateway_request_in_one_byte_pieces, 30)
{
	char req[2048], resp[8192];
	add_oa("p1", "\"test-model\"", "", "");
	struct gw g = start_gw("");
	warm(g.port, "test-model");
	int fd = connect_to(g.port), one = 1;
	ASSERT_GE(fd, 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	int n = chat_request(req, sizeof req, "test-model", "bytewise", 0, 1);
	for (int i = 0; i < n; i++) {
		ASSERT_EQ(send(fd, req + i, 1, MSG_NOSIGNAL), 1);
		if (i % 8 == 0)
			usleep(500); /* pacing, so that the pieces arrive apart */
	}
	EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "tok4");
	EXPECT_FALSE(strstr(resp, "X-Mesh-Cold-Start") != NULL);
	ASSERT_EQ(send_str(fd, req), 0);
	EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
	close(fd);
	EXPECT_TRUE(log_has_n("logs/p1.log", 3));
	EXPECT_EQ(stop_gw(&g), 0);
}

/* 200 keep-alive connections at once, each with a request in flight: all
 * answered, and each answers a second request. */
TEST_TIMEOUT(gateway_200_keepalive_connections_answered, 60)
{
	enum { N = 200 };
	static int fds[N];
	char req[2048], resp[8192];
	add_oa("p2", "\"test-model\"", "", "");
	struct gw g = start_gw("");
	warm(g.port, "test-model");
	chat_request(req, sizeof req, "test-model", "hi", 0, 1);
	for (int i = 0; i < N; i++) {
		fds[i] = connect_to(g.port);
		ASSERT_GE(fds[i], 0);
	}
	for (int round = 0; round < 2; round++) {
		int ok = 0;
		for (int i = 0; i < N; i++)
			ASSERT_EQ(send_str(fds[i], req), 0);
		for (int i = 0; i < N; i++)
			ok += read_response(fds[i], resp, sizeof resp) == 200;
		EXPECT_EQ(ok, N);
	}
	for (int i = 0; i < N; i++)
		close(fds[i]);
	EXPECT_TRUE(log_has_n("logs/p2.log", 2 * N + 1));
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 1);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A client that does not read a large answer for a while (nginx sends a
 * 24 MiB file at once): its socket fills, meshd stops reading the program
 * meanwhile (its own buffer stays one read), and once the client reads it
 * gets every byte in order, then its next answer on the connection. */
TEST_TIMEOUT(gateway_slow_reader_gets_whole_answer, 60)
{
	enum { BIG = 24 << 20 };
	static char big[BIG + 65536];
	char cwd[512], text[4096], resp[8192];
	int rcv = 16384;
	if (access("/usr/sbin/nginx", X_OK) != 0)
		SKIP_TOOL("nginx is not installed (mk/deps.sh test installs it)");
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	mkdir("tmp", 0755);
	mkdir("www", 0755);
	for (size_t i = 0; i < BIG; i++)
		big[i] = (char)('a' + (i * 7 + i / 4096) % 26);
	FILE *f = fopen("www/big.bin", "w");
	ASSERT_TRUE(f != NULL);
	ASSERT_EQ(fwrite(big, 1, BIG, f), (size_t)BIG);
	fclose(f);
	snprintf(text, sizeof text,
		 "daemon off; master_process on; worker_processes 1; pid nginx.pid;\n"
		 /* the test's directory is its owner's alone: run as root, the
		  * worker reads the file as root too (ignored when not root) */
		 "user root;\nerror_log error.log notice;\nevents { worker_connections 64; }\n"
		 "http { access_log off; client_body_temp_path tmp; proxy_temp_path tmp;\n"
		 "  fastcgi_temp_path tmp; uwsgi_temp_path tmp; scgi_temp_path tmp;\n"
		 "  server { listen 127.0.0.1:@PORT@; root %s/www; location = / { return 200 \"up\\n\"; } } }\n",
		 cwd);
	t_write_file("nginx.conf.in", text);
	snprintf(text, sizeof text,
		 "name = \"web\"\nbackend = \"http\"\nmodels = [\"web\"]\nprobe_path = \"/\"\nprobe_status = 200\n"
		 "upstream_paths = [\"*\"]\n"
		 "command = [\"sh\", \"-c\", \"sed s/@PORT@/{port}/ nginx.conf.in > nginx.conf && "
		 "exec /usr/sbin/nginx -p %s -e %s/error.log -c %s/nginx.conf\"]\n"
		 "[lifecycle]\nstop_signal = \"QUIT\"\n",
		 cwd, cwd, cwd);
	mkdir("catalog", 0755);
	t_write_file("catalog/web.toml", text);
	struct gw g = start_gw("");
	EXPECT_EQ(http_get(g.port, "/upstream/web/", resp, sizeof resp), 200);
	/* A small receive buffer, set before the connect (after it, the
	 * kernel's window shrinks to a crawl). */
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {10, 0};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_GE(fd, 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	ASSERT_EQ(send_str(fd, "GET /upstream/web/big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n"), 0);
	usleep(300 * 1000); /* not reading: the answer is held up meanwhile */
	static char got[BIG + 65536];
	size_t have = 0, head = 0;
	while (!head || have < head + BIG) {
		ASSERT_LT(have, sizeof got - 1);
		ssize_t n = recv(fd, got + have, sizeof got - 1 - have, 0);
		ASSERT_GT(n, 0);
		have += (size_t)n;
		if (!head) {
			got[have] = 0;
			char *e = strstr(got, "\r\n\r\n");
			head = e ? (size_t)(e + 4 - got) : 0;
		}
	}
	EXPECT_EQ(have, head + BIG);
	EXPECT_TRUE(!strncmp(got, "HTTP/1.1 200", 12));
	EXPECT_TRUE(!memcmp(got + head, big, BIG));
	ASSERT_EQ(send_str(fd, "GET /upstream/web/ HTTP/1.1\r\nHost: localhost\r\n\r\n"), 0);
	EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "up");
	close(fd);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* A warm program's client that leaves before its answer takes its request
 * with it (499, the program idle again and stopped after its TTL); one
 * that half-closes too. */
TEST_TIMEOUT(gateway_warm_client_gone_ends_its_request, 30)
{
	char req[2048];
	add_oa("h2", "\"test-model\"", "", "idle_ttl = \"1s\"\n");
	struct gw g = start_gw("");
	warm(g.port, "test-model");
	chat_request(req, sizeof req, "test-model", "hang", 0, 1);
	for (int k = 0; k < 2; k++) {
		int fd = connect_to(g.port);
		ASSERT_GE(fd, 0);
		ASSERT_EQ(send_str(fd, req), 0);
		struct has_n h = {"logs/h2.log", "req POST", 2 + k};
		ASSERT_TRUE(t_wait_for(has_n_cond, &h, 10000));
		if (k == 0)
			close(fd);
		else
			shutdown(fd, SHUT_WR);
		struct has_n w = {"meshd.err", "program=h2 client went away after 0 bytes", 1 + k};
		ASSERT_TRUE(t_wait_for(has_n_cond, &w, 3000));
		if (k == 1)
			close(fd);
	}
	EXPECT_EQ(count_in("meshd.err", "status=499"), 2);
	/* The hung requests no longer count: the program is idle and stopped
	 * (a kill of its hung handlers is its stop's business). */
	EXPECT_TRUE(wait_file_has("meshd.err", "program=h2 stopped", 8000));
	EXPECT_EQ(stop_gw(&g), 0);
}

struct stream_arg {
	int port, status;
	char resp[16384];
};

static void *stream_main(void *arg)
{
	struct stream_arg *a = arg;
	char req[2048];
	int fd = connect_to(a->port);
	if (fd < 0)
		return NULL;
	chat_request(req, sizeof req, "test-model", "hi", 1, 1);
	if (send_str(fd, req) == 0)
		a->status = read_response(fd, a->resp, sizeof a->resp);
	close(fd);
	return NULL;
}

/* SIGTERM while a warm stream is relayed: it ends whole, an idle
 * keep-alive connection is closed at once, meshd exits 0. */
TEST_TIMEOUT(gateway_sigterm_drains_warm_stream, 30)
{
	static struct stream_arg a;
	pthread_t th;
	char resp[256];
	add_oa("d2", "\"test-model\"", ", \"--token-delay\", \"0.1\", \"--tokens\", \"8\"", "");
	struct gw g = start_gw("");
	warm(g.port, "test-model");
	int idle = connect_to(g.port);
	ASSERT_GE(idle, 0);
	a.port = g.port;
	ASSERT_EQ(pthread_create(&th, NULL, stream_main, &a), 0);
	struct has_n h = {"logs/d2.log", "req POST", 2};
	ASSERT_TRUE(t_wait_for(has_n_cond, &h, 10000));
	kill(g.pid, SIGTERM);
	struct pollfd pf = {idle, POLLIN, 0};
	EXPECT_EQ(poll(&pf, 1, 3000), 1);
	EXPECT_EQ(recv(idle, resp, sizeof resp, 0), 0); /* closed, not answered */
	close(idle);
	pthread_join(th, NULL);
	EXPECT_EQ(a.status, 200);
	EXPECT_CONTAINS(a.resp, "tok7");
	EXPECT_CONTAINS(a.resp, "\r\n0\r\n\r\n");
	EXPECT_EQ(stop_gw(&g), 0);
	EXPECT_TRUE(file_has("meshd.err", "gateway draining: requests=1 in flight"));
}

/* A connection whose first request waited for a cold start goes on with
 * warm requests. */
TEST_TIMEOUT(gateway_cold_then_warm_on_one_connection, 30)
{
	char req[2048], resp[8192];
	add_oa("p4", "\"test-model\"", "", "");
	struct gw g = start_gw("");
	int fd = connect_to(g.port);
	ASSERT_GE(fd, 0);
	chat_request(req, sizeof req, "test-model", "hi", 0, 1);
	ASSERT_EQ(send_str(fd, req), 0);
	EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "X-Mesh-Cold-Start: 1");
	for (int i = 0; i < 3; i++) {
		ASSERT_EQ(send_str(fd, req), 0);
		EXPECT_EQ(read_response(fd, resp, sizeof resp), 200);
		EXPECT_FALSE(strstr(resp, "X-Mesh-Cold-Start") != NULL);
	}
	close(fd);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* meshd's threads (/proc/PID/status). */
static int threads_of(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	char *s = t_read_file(path, NULL);
	const char *p = s ? strstr(s, "\nThreads:") : NULL;
	int n = p ? atoi(p + 9) : -1;
	free(s);
	return n;
}

struct few_threads {
	pid_t pid;
	int max;
};
static int few_threads_cond(void *arg)
{
	struct few_threads *f = arg;
	int n = threads_of(f->pid);
	return n > 0 && n <= f->max;
}

/* Connections whose requests meshd answers itself (GET /v1/models) are
 * answered on the loops: 50 of them kept open hold no thread, and each is
 * answered again. */
TEST_TIMEOUT(gateway_answered_connections_go_back_to_a_loop, 30)
{
	enum { N = 50 };
	static int fds[N];
	char resp[8192];
	static const char get[] = "GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n";
	add_oa("p5", "\"test-model\"", "", "");
	struct gw g = start_gw("");
	int before = threads_of(g.pid);
	ASSERT_GT(before, 0);
	for (int i = 0; i < N; i++) {
		fds[i] = connect_to(g.port);
		ASSERT_GE(fds[i], 0);
		ASSERT_EQ(send_str(fds[i], get), 0);
	}
	for (int i = 0; i < N; i++) {
		EXPECT_EQ(read_response(fds[i], resp, sizeof resp), 200);
		EXPECT_CONTAINS(resp, "\"state\":\"cold\"");
	}
	struct few_threads f = {g.pid, before + 5};
	EXPECT_TRUE(t_wait_for(few_threads_cond, &f, 5000));
	for (int i = 0; i < N; i++) {
		ASSERT_EQ(send_str(fds[i], get), 0);
		EXPECT_EQ(read_response(fds[i], resp, sizeof resp), 200);
	}
	for (int i = 0; i < N; i++)
		close(fds[i]);
	EXPECT_EQ(stop_gw(&g), 0);
}

/* 50 requests at once for a cold program wait for its start on the loops,
 * each an event: meshd's threads grow by the start's supervisor, not by one
 * a waiting request; all 50 are answered once it is warm. */
TEST_TIMEOUT(gateway_cold_waiters_hold_no_thread, 60)
{
	enum { N = 50 };
	static int fds[N];
	char req[2048], resp[8192];
	add_oa("s", "\"slow-start\"", ", \"--models\", \"slow-start\", \"--start-delay\", \"1.5\"", "");
	struct gw g = start_gw("");
	int before = threads_of(g.pid), most = before;
	ASSERT_GT(before, 0);
	chat_request(req, sizeof req, "slow-start", "hi", 0, 0);
	for (int i = 0; i < N; i++) {
		fds[i] = connect_to(g.port);
		ASSERT_GE(fds[i], 0);
		ASSERT_EQ(send_str(fds[i], req), 0);
	}
	/* Until the first answer: they all wait meanwhile. */
	for (;;) {
		int n = threads_of(g.pid);
		most = n > most ? n : most;
		struct pollfd pf = {fds[0], POLLIN, 0};
		if (poll(&pf, 1, 10) > 0 || n < 0)
			break;
	}
	int ok = 0;
	for (int i = 0; i < N; i++) {
		ok += read_all(fds[i], resp, sizeof resp) > 0 && !strncmp(resp, "HTTP/1.1 200", 12);
		close(fds[i]);
	}
	printf("meshd's threads: %d before, at most %d while %d requests waited for a cold start\n", before, most, N);
	EXPECT_EQ(ok, N);
	EXPECT_LE(most, before + 5);
	EXPECT_EQ(count_in("meshd.err", "spawned pid="), 1);
	EXPECT_EQ(stop_gw(&g), 0);
}
