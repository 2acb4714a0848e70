/* The warmth probe against real loopback servers of every bad kind, each
 * started by the test in a forked child.  Bounds are asserted with generous
 * margins (the machine is shared); nothing leaves the loopback interface. */
#include "autoscale/probe.h"
#include "base/clock.h"
#include "base/err.h"
#include "runner/t.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum kind {
	K_WARM,        /* 200 with a model list holding "llama" */
	K_MODEL_LATER, /* first answer lists no model, later ones list "llama" */
	K_SILENT,      /* accepts, reads, never answers */
	K_DRIBBLE,     /* a valid response, one byte every 50 ms */
	K_OVERSIZED,   /* a 2 MiB body */
	K_ENDLESS,     /* a close-delimited body that never ends */
	K_MALFORMED,   /* "HTTP/1.1 200\r\n" (no reason separator) */
	K_SEED_TRAP,   /* a 500 whose reason holds "200" */
	K_503,
	K_CLOSE,       /* accepts and closes at once */
	K_NOT_JSON,    /* 200 with a text body */
	K_OLLAMA,      /* 200 with {"models":[{"name":"llama"}]} */
	K_CHUNKED,     /* 200, chunked, model listed */
};

struct server {
	pid_t pid;
	uint16_t port;
};

static int write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static void reply(int c, enum kind kind, int nth)
{
	char buf[4096];
	static const char with_model[] = "{\"object\":\"list\",\"data\":[{\"id\":\"other\"},{\"id\":\"llama\"}]}";
	static const char without_model[] = "{\"object\":\"list\",\"data\":[{\"id\":\"other\"}]}";
	if (kind == K_CLOSE)
		return;
	/* Read the request head (the probe sends it in one piece). */
	ssize_t k = read(c, buf, sizeof buf);
	if (k <= 0)
		return;
	switch (kind) {
	case K_WARM:
	case K_MODEL_LATER: {
		const char *body = kind == K_MODEL_LATER && nth == 0 ? without_model : with_model;
		int n = snprintf(buf, sizeof buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
						  "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
		write_all(c, buf, (size_t)n);
		break;
	}
	case K_SILENT:
		pause();
		break;
	case K_DRIBBLE: {
		const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
		for (size_t i = 0; i < strlen(r) + 100; i++) {
			if (write_all(c, i < strlen(r) ? r + i : "x", 1))
				return;
			usleep(50 * 1000);
		}
		break;
	}
	case K_OVERSIZED: {
		const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 2097152\r\n\r\n";
		write_all(c, r, strlen(r));
		memset(buf, 'x', sizeof buf);
		for (int i = 0; i < 512; i++)
			if (write_all(c, buf, sizeof buf))
				return;
		break;
	}
	case K_ENDLESS: {
		const char *r = "HTTP/1.1 200 OK\r\n\r\n";
		write_all(c, r, strlen(r));
		memset(buf, 'x', sizeof buf);
		while (write_all(c, buf, sizeof buf) == 0)
			;
		break;
	}
	case K_MALFORMED:
		write_all(c, "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", 36);
		break;
	case K_SEED_TRAP: {
		const char *r = "HTTP/1.1 500 Internal 200 Error\r\nContent-Length: 0\r\n\r\n";
		write_all(c, r, strlen(r));
		break;
	}
	case K_503: {
		const char *r = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 7\r\n\r\nloading";
		write_all(c, r, strlen(r));
		break;
	}
	case K_NOT_JSON: {
		const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
		write_all(c, r, strlen(r));
		break;
	}
	case K_OLLAMA: {
		const char *r = "HTTP/1.1 200 OK\r\nContent-Length: 43\r\n\r\n{\"models\":[{\"name\":\"llama\",\"size\":1}]}\n    ";
		write_all(c, r, strlen(r));
		break;
	}
	case K_CHUNKED: {
		const char *r = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
				"10\r\n{\"data\":[{\"id\":\"\r\n"
				"8\r\nllama\"}]\r\n1\r\n}\r\n0\r\n\r\n";
		write_all(c, r, strlen(r));
		break;
	}
	case K_CLOSE:
		break;
	}
}

/* A listener on 127.0.0.1 (or ::1) with an ephemeral port, served by a
 * forked child, one connection at a time.  Returns 0, or -1 when the family
 * is unavailable. */
static int start_server(struct server *s, enum kind kind, int family)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	int l = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l < 0)
		return -1;
	int one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (family == AF_INET6) {
		struct sockaddr_in6 *a = (void *)&ss;
		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		sl = sizeof *a;
	} else {
		struct sockaddr_in *a = (void *)&ss;
		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		sl = sizeof *a;
	}
	if (bind(l, (void *)&ss, sl) < 0 || listen(l, 16) < 0 || getsockname(l, (void *)&ss, &sl) < 0) {
		close(l);
		return -1;
	}
	s->port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					   : ((struct sockaddr_in *)&ss)->sin_port);
	s->pid = fork();
	if (s->pid < 0)
		FAIL("fork: %s", strerror(errno));
	if (s->pid == 0) {
		signal(SIGPIPE, SIG_IGN);
		for (int nth = 0;; nth++) {
			int c = accept(l, NULL, NULL);
			if (c < 0)
				continue;
			reply(c, kind, nth);
			close(c);
		}
	}
	close(l);
	return 0;
}

static void stop_server(struct server *s)
{
	kill(s->pid, SIGKILL);
	waitpid(s->pid, NULL, 0);
}

static uint64_t ms_of(uint64_t ns)
{
	return ns / MESH_NS_PER_MS;
}

static void target_local(struct mesh_probe_target *t, const char *host, uint16_t port)
{
	mesh_probe_target_default(t);
	snprintf(t->host, sizeof t->host, "%s", host);
	t->port = port;
}

static struct mesh_probe_result probe_kind(enum kind kind, const char *model, uint64_t response_ms)
{
	struct server s;
	struct mesh_probe_target t;
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	struct mesh_probe_result res;
	if (start_server(&s, kind, AF_INET))
		FAIL("cannot listen on 127.0.0.1");
	target_local(&t, "127.0.0.1", s.port);
	o.model = model;
	o.response_timeout_ns = response_ms * MESH_NS_PER_MS;
	int fds = t_count_fds();
	int rc = mesh_probe(&t, &o, &res);
	EXPECT_EQ(rc, 0);
	EXPECT_EQ(t_count_fds(), fds);
	printf("  kind %d: %s (%llu ms)\n", (int)kind, res.reason, (unsigned long long)ms_of(res.elapsed_ns));
	stop_server(&s);
	return res;
}

TEST(probe_warm_server)
{
	struct mesh_probe_result r = probe_kind(K_WARM, NULL, 2000);
	EXPECT_EQ(r.warm, 1);
	EXPECT_EQ(r.err, 0);
	EXPECT_EQ(r.status, 200);
	EXPECT_EQ(r.phase, MESH_PROBE_JUDGE);
	EXPECT_CONTAINS(r.reason, "warm: HTTP 200");
	EXPECT_LT(ms_of(r.elapsed_ns), 1000);

	r = probe_kind(K_WARM, "llama", 2000);
	EXPECT_EQ(r.warm, 1);
	EXPECT_CONTAINS(r.reason, "model 'llama' listed");
	r = probe_kind(K_OLLAMA, "llama", 2000);
	EXPECT_EQ(r.warm, 1);
	r = probe_kind(K_CHUNKED, "llama", 2000);
	EXPECT_EQ(r.warm, 1);
}

TEST(probe_model_not_yet_loaded_then_loaded)
{
	struct server s;
	struct mesh_probe_target t;
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	struct mesh_probe_result r;
	ASSERT_EQ(start_server(&s, K_MODEL_LATER, AF_INET), 0);
	target_local(&t, "127.0.0.1", s.port);
	o.model = "llama";
	ASSERT_EQ(mesh_probe(&t, &o, &r), 0);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.status, 200);
	EXPECT_EQ(r.err, MESH_E_NOTFOUND);
	EXPECT_CONTAINS(r.reason, "not listed");
	ASSERT_EQ(mesh_probe(&t, &o, &r), 0);
	EXPECT_EQ(r.warm, 1);
	/* Without --model the same server is warm on any 2xx. */
	o.model = NULL;
	ASSERT_EQ(mesh_probe(&t, &o, &r), 0);
	EXPECT_EQ(r.warm, 1);
	stop_server(&s);
}

TEST(probe_cold_statuses_and_bodies)
{
	struct mesh_probe_result r = probe_kind(K_503, NULL, 2000);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.status, 503);
	EXPECT_EQ(r.err, MESH_E_STATE);
	EXPECT_CONTAINS(r.reason, "HTTP 503");

	/* The seed searched the first line for "200": a 500 is cold. */
	r = probe_kind(K_SEED_TRAP, NULL, 2000);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.status, 500);

	r = probe_kind(K_MALFORMED, NULL, 2000);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, MESH_E_PROTO);
	EXPECT_CONTAINS(r.reason, "malformed");

	r = probe_kind(K_NOT_JSON, "llama", 2000);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, MESH_E_PARSE);

	r = probe_kind(K_CLOSE, NULL, 2000);
	EXPECT_EQ(r.warm, 0);
	EXPECT_TRUE(r.err == MESH_E_CLOSED || r.err == -ECONNRESET);
	EXPECT_LT(ms_of(r.elapsed_ns), 1000);
}

TEST(probe_oversized_is_cut_early)
{
	struct mesh_probe_result r = probe_kind(K_OVERSIZED, NULL, 2000);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, MESH_E_TOOBIG);
	EXPECT_CONTAINS(r.reason, "oversized");
	EXPECT_LT(ms_of(r.elapsed_ns), 1000);

	r = probe_kind(K_ENDLESS, NULL, 2000);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, MESH_E_TOOBIG);
	EXPECT_LT(ms_of(r.elapsed_ns), 1500);
}

TEST(probe_silent_and_dribbling_servers_end_at_the_bound)
{
	struct mesh_probe_result r = probe_kind(K_SILENT, NULL, 300);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, MESH_E_TIMEOUT);
	EXPECT_EQ(r.phase, MESH_PROBE_RESPONSE);
	EXPECT_GE(ms_of(r.elapsed_ns), 250);
	EXPECT_LE(ms_of(r.elapsed_ns), 1500);

	r = probe_kind(K_DRIBBLE, NULL, 300);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, MESH_E_TIMEOUT);
	EXPECT_GE(ms_of(r.elapsed_ns), 250);
	EXPECT_LE(ms_of(r.elapsed_ns), 1500);
}

TEST(probe_refused_port_is_fast)
{
	/* A port nobody listens on: bind one, learn it, close it. */
	struct sockaddr_in a = {0};
	socklen_t sl = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ASSERT_EQ(bind(l, (void *)&a, sizeof a), 0);
	ASSERT_EQ(getsockname(l, (void *)&a, &sl), 0);
	close(l);
	struct mesh_probe_target t;
	struct mesh_probe_result r;
	target_local(&t, "127.0.0.1", ntohs(a.sin_port));
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	o.connect_timeout_ns = 5ull * 1000000000ull; /* a refusal must not wait for it */
	ASSERT_EQ(mesh_probe(&t, &o, &r), 0);
	printf("  %s\n", r.reason);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, -ECONNREFUSED);
	EXPECT_EQ(r.phase, MESH_PROBE_CONNECT);
	EXPECT_CONTAINS(r.reason, "refused");
	EXPECT_LT(ms_of(r.elapsed_ns), 2000);
}

/* A loopback black hole: a listener with backlog 0 that never accepts,
 * filled until a connect no longer completes; the kernel then drops SYNs. */
static int black_hole(uint16_t *port, int *held, int nheld)
{
	struct sockaddr_in a = {0};
	socklen_t sl = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(l, (void *)&a, sizeof a) || listen(l, 0) || getsockname(l, (void *)&a, &sl))
		return -1;
	*port = ntohs(a.sin_port);
	for (int i = 0; i < nheld; i++) {
		int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		held[i] = c;
		if (connect(c, (void *)&a, sizeof a) < 0 && errno != EINPROGRESS)
			return -1;
		struct pollfd p = {c, POLLOUT, 0};
		if (poll(&p, 1, 100) == 0)
			return l; /* this one hangs: the queue is full */
	}
	return -1;
}

TEST(probe_black_hole_ends_at_the_connect_bound)
{
	int held[16];
	for (int i = 0; i < 16; i++)
		held[i] = -1;
	uint16_t port;
	int l = black_hole(&port, held, 16);
	if (l < 0)
		FAIL("could not fill a backlog-0 listener on loopback");
	struct mesh_probe_target t;
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	struct mesh_probe_result r;
	target_local(&t, "127.0.0.1", port);
	o.connect_timeout_ns = 300 * MESH_NS_PER_MS;
	ASSERT_EQ(mesh_probe(&t, &o, &r), 0);
	printf("  %s (%llu ms)\n", r.reason, (unsigned long long)ms_of(r.elapsed_ns));
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, MESH_E_TIMEOUT);
	EXPECT_EQ(r.phase, MESH_PROBE_CONNECT);
	EXPECT_GE(ms_of(r.elapsed_ns), 250);
	EXPECT_LE(ms_of(r.elapsed_ns), 1500);

	/* The default bound is 1 s. */
	ASSERT_EQ(mesh_probe(&t, NULL, &r), 0);
	EXPECT_EQ(r.err, MESH_E_TIMEOUT);
	EXPECT_GE(ms_of(r.elapsed_ns), 950);
	EXPECT_LE(ms_of(r.elapsed_ns), 2500);
	for (int i = 0; i < 16; i++)
		if (held[i] >= 0)
			close(held[i]);
	close(l);
}

TEST(probe_ipv6_loopback)
{
	struct server s;
	if (start_server(&s, K_WARM, AF_INET6))
		SKIP("::1 is not available on this machine (no IPv6 loopback)");
	struct mesh_probe_target t;
	struct mesh_probe_result r;
	char url[64];
	snprintf(url, sizeof url, "http://[::1]:%u/v1/models", s.port);
	ASSERT_EQ(mesh_probe_target_parse(&t, url), 0);
	EXPECT_STREQ(t.host, "::1");
	ASSERT_EQ(mesh_probe(&t, NULL, &r), 0);
	EXPECT_EQ(r.warm, 1);
	EXPECT_CONTAINS(r.addr, "[::1]:");
	stop_server(&s);
}

TEST(probe_host_name_localhost)
{
	struct server s;
	struct mesh_probe_target t;
	struct mesh_probe_result r;
	char url[64];
	ASSERT_EQ(start_server(&s, K_WARM, AF_INET), 0);
	snprintf(url, sizeof url, "localhost:%u", s.port);
	ASSERT_EQ(mesh_probe_target_parse(&t, url), 0);
	ASSERT_EQ(mesh_probe(&t, NULL, &r), 0);
	printf("  %s\n", r.reason);
	/* localhost may resolve to ::1 first (refused there), then 127.0.0.1. */
	EXPECT_EQ(r.warm, 1);
	stop_server(&s);
}

static atomic_int slow_done;

static int slow_resolver(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res)
{
	usleep(1500 * 1000);
	int rc = getaddrinfo("127.0.0.1", service, hints, res);
	atomic_store(&slow_done, 1);
	return rc;
}

static int is_slow_done(void *arg)
{
	(void)arg;
	return atomic_load(&slow_done);
}

TEST(probe_slow_resolver_is_bounded)
{
	struct mesh_probe_target t;
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	struct mesh_probe_result r;
	mesh__probe_set_resolver(slow_resolver);
	ASSERT_EQ(mesh_probe_target_parse(&t, "http://model-server.invalid:8080/v1/models"), 0);
	o.resolve_timeout_ns = 300 * MESH_NS_PER_MS;
	ASSERT_EQ(mesh_probe(&t, &o, &r), 0);
	printf("  %s (%llu ms)\n", r.reason, (unsigned long long)ms_of(r.elapsed_ns));
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, MESH_E_TIMEOUT);
	EXPECT_EQ(r.phase, MESH_PROBE_RESOLVE);
	EXPECT_GE(ms_of(r.elapsed_ns), 250);
	EXPECT_LE(ms_of(r.elapsed_ns), 1200);
	/* The abandoned lookup finishes on its own and frees what it got. */
	EXPECT_TRUE(t_wait_for(is_slow_done, NULL, 5000));
	usleep(50 * 1000);
	mesh__probe_set_resolver(NULL);
}

static int failing_resolver(const char *node, const char *service, const struct addrinfo *hints,
			    struct addrinfo **res)
{
	return EAI_NONAME;
}

TEST(probe_unknown_name)
{
	struct mesh_probe_target t;
	struct mesh_probe_result r;
	mesh__probe_set_resolver(failing_resolver);
	ASSERT_EQ(mesh_probe_target_parse(&t, "nosuchhost"), 0);
	ASSERT_EQ(mesh_probe(&t, NULL, &r), 0);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.err, MESH_E_NOTFOUND);
	EXPECT_CONTAINS(r.reason, "cannot resolve 'nosuchhost'");
	mesh__probe_set_resolver(NULL);
}

TEST(probe_target_parse_table)
{
	static const struct {
		const char *in;
		int rc;
		const char *host;
		unsigned port;
		const char *path;
	} rows[] = {
		{"127.0.0.1", 0, "127.0.0.1", 7861, "/v1/models"},
		{"127.0.0.1:8000", 0, "127.0.0.1", 8000, "/v1/models"},
		{"localhost:11434", 0, "localhost", 11434, "/v1/models"},
		{"[::1]:8080", 0, "::1", 8080, "/v1/models"},
		{"[::1]", 0, "::1", 7861, "/v1/models"},
		{"::1", 0, "::1", 7861, "/v1/models"},
		{"http://127.0.0.1:8080", 0, "127.0.0.1", 8080, "/v1/models"},
		{"http://127.0.0.1:8080/", 0, "127.0.0.1", 8080, "/"},
		{"http://localhost:11434/api/tags", 0, "localhost", 11434, "/api/tags"},
		{"HTTP://[::1]:9/health?x=1", 0, "::1", 9, "/health?x=1"},
		{"http://h?x=1", 0, "h", 7861, "/?x=1"},
		{"https://127.0.0.1:443/", MESH_E_PARSE, NULL, 0, NULL},
		{"ftp://h/", MESH_E_PARSE, NULL, 0, NULL},
		{"http://user@h/", MESH_E_PARSE, NULL, 0, NULL},
		{"http://h/#frag", MESH_E_PARSE, NULL, 0, NULL},
		{"http:///path", MESH_E_PARSE, NULL, 0, NULL},
		{"h:0", MESH_E_PARSE, NULL, 0, NULL},
		{"h:65536", MESH_E_PARSE, NULL, 0, NULL},
		{"h:80x", MESH_E_PARSE, NULL, 0, NULL},
		{"h:", MESH_E_PARSE, NULL, 0, NULL},
		{":80", MESH_E_PARSE, NULL, 0, NULL},
		{"", MESH_E_PARSE, NULL, 0, NULL},
		{"h h", MESH_E_PARSE, NULL, 0, NULL},
		{"[::1", MESH_E_PARSE, NULL, 0, NULL},
		{"[::1]x", MESH_E_PARSE, NULL, 0, NULL},
		{"[nothex]:80", MESH_E_PARSE, NULL, 0, NULL},
		{"1::2::3", MESH_E_PARSE, NULL, 0, NULL},
		{"h/path", MESH_E_PARSE, NULL, 0, NULL},
		{"http://h:80/a b", MESH_E_PARSE, NULL, 0, NULL},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_probe_target t;
		int rc = mesh_probe_target_parse(&t, rows[i].in);
		if (rc != rows[i].rc)
			printf("  '%s': rc %d\n", rows[i].in, rc);
		EXPECT_EQ(rc, rows[i].rc);
		if (rc == 0 && rows[i].rc == 0) {
			EXPECT_STREQ(t.host, rows[i].host);
			EXPECT_EQ(t.port, rows[i].port);
			EXPECT_STREQ(t.path, rows[i].path);
		}
	}
	struct mesh_probe_target t;
	mesh_probe_target_default(&t);
	EXPECT_STREQ(t.host, "127.0.0.1");
	mesh_probe_target_ipv4(&t, 10, 0, 0, 7);
	EXPECT_STREQ(t.host, "10.0.0.7");
	EXPECT_EQ(t.port, 7861);
	t.port = 0;
	struct mesh_probe_result r;
	EXPECT_EQ(mesh_probe(&t, NULL, &r), MESH_E_RANGE);
}

TEST(probe_model_listed_shapes)
{
	static const struct {
		const char *body;
		int rc;
	} rows[] = {
		{"{\"data\":[{\"id\":\"a\"},{\"id\":\"llama\"}]}", 0},
		{"{\"data\":[]}", MESH_E_NOTFOUND},
		{"{\"data\":[{\"id\":\"llama-2\"}]}", MESH_E_NOTFOUND},
		{"{\"data\":[{\"name\":\"llama\"}]}", MESH_E_NOTFOUND},
		{"{\"models\":[{\"name\":\"llama\"}]}", 0},
		{"{\"models\":[{\"model\":\"llama\"}]}", 0},
		{"{\"models\":[\"llama\"]}", MESH_E_NOTFOUND},
		{"{\"data\":{\"id\":\"llama\"}}", MESH_E_PARSE},
		{"[{\"id\":\"llama\"}]", MESH_E_PARSE},
		{"{}", MESH_E_PARSE},
		{"llama", MESH_E_PARSE},
		{"{\"data\":[{\"id\":\"llama\"}]", MESH_E_PARSE},
		{"", MESH_E_PARSE},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		EXPECT_EQ(mesh_probe_model_listed(rows[i].body, strlen(rows[i].body), "llama"), rows[i].rc);
}
