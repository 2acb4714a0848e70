#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "http/http.h"
#include "runner/t.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SMALL 1 /* use the small limits {64, 4, 256, 32} */

struct resp_case {
	const char *what;
	const char *in;
	int small;
	int want;         /* 1 done, MESH_E_* error; with eof: the result after eof */
	int eof;          /* the stream closes after `in` */
	int status;       /* when done */
	const char *body; /* when done */
};

static const struct resp_case cases[] = {
	{"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 0, 1, 0, 200, "hello"},
	{"http/1.0 204", "HTTP/1.0 204 No Content\r\nServer: x\r\n\r\n", 0, 1, 0, 204, ""},
	{"chunked with extension and trailer",
	 "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\nA\r\n0123456789\r\n"
	 "0\r\nX-Trailer: a\r\n\r\n",
	 0, 1, 0, 200, "hello world0123456789"},
	{"chunked, te case-insensitive", "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", 0, 1,
	 0, 200, "x"},
	{"close-delimited body", "HTTP/1.1 200 OK\r\nX: y\r\n\r\nabc", 0, 1, 1, 200, "abc"},
	{"close-delimited empty body", "HTTP/1.1 200 OK\r\n\r\n", 0, 1, 1, 200, ""},
	{"interim 100 then 201", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", 0,
	 1, 0, 201, "ok"},
	{"empty reason", "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", 0, 1, 0, 200, ""},
	{"304 has no body", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", 0, 1, 0, 304, ""},
	{"ows around value", "HTTP/1.1 200 OK\r\ncontent-length: \t 3  \r\n\r\nabc", 0, 1, 0, 200, "abc"},
	{"repeated equal content-length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi", 0, 1, 0,
	 200, "hi"},
	{"500 whose reason says 200", "HTTP/1.1 500 Error 200\r\nContent-Length: 0\r\n\r\n", 0, 1, 0, 500, ""},
	{"obs-text in reason", "HTTP/1.1 404 Nicht gef\xc3\xbcnden\r\nContent-Length: 1\r\n\r\nx", 0, 1, 0, 404, "x"},
	{"body at the small limit", "HTTP/1.1 200 OK\r\nContent-Length: 32\r\n\r\n01234567890123456789012345678901", SMALL,
	 1, 0, 200, "01234567890123456789012345678901"},

	{"http/2 version", "HTTP/2 200 OK\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"lower-case version", "http/1.1 200 OK\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"no space after status", "HTTP/1.1 200\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"two-digit status", "HTTP/1.1 20 OK\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"four-digit status", "HTTP/1.1 2000 OK\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"status below 100", "HTTP/1.1 099 x\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"status above 599", "HTTP/1.1 600 x\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"200 somewhere on the line", "garbage 200 OK HTTP/1.1\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"bare LF status", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"bare CR in header", "HTTP/1.1 200 OK\r\nX: a\rb\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"control byte in reason", "HTTP/1.1 200 O\x01K\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nx", 0, MESH_E_PROTO, 0, 0, NULL},
	{"folded header", "HTTP/1.1 200 OK\r\nX: a\r\n b\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"no colon", "HTTP/1.1 200 OK\r\nNoColon\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"NUL in value", "HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"content-length not a number", "HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"content-length list", "HTTP/1.1 200 OK\r\nContent-Length: 5, 5\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"negative content-length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, MESH_E_PROTO, 0, 0, NULL},
	{"conflicting content-length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", 0,
	 MESH_E_PROTO, 0, 0, NULL},
	{"huge content-length", "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n", 0, MESH_E_TOOBIG, 0,
	 0, NULL},
	{"content-length over the body limit", "HTTP/1.1 200 OK\r\nContent-Length: 33\r\n\r\n", SMALL, MESH_E_TOOBIG, 0,
	 0, NULL},
	{"gzip transfer-encoding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 0, MESH_E_PROTO, 0, 0,
	 NULL},
	{"te and content-length", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 0,
	 MESH_E_PROTO, 0, 0, NULL},
	{"chunk size not hex", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, MESH_E_PROTO, 0, 0,
	 NULL},
	{"chunk size too long", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000000000000000\r\n", 0,
	 MESH_E_TOOBIG, 0, 0, NULL},
	{"chunk longer than its size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", 0,
	 MESH_E_PROTO, 0, 0, NULL},
	{"chunked over the body limit",
	 "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n11\r\n", SMALL, MESH_E_TOOBIG,
	 0, 0, NULL},
	{"close-delimited over the body limit", "HTTP/1.1 200 OK\r\n\r\n0123456789012345678901234567890123", SMALL,
	 MESH_E_TOOBIG, 0, 0, NULL},
	{"line over the limit", "HTTP/1.1 200 OK\r\nX-Long: 0123456789012345678901234567890123456789012345678901234567\r\n",
	 SMALL, MESH_E_TOOBIG, 0, 0, NULL},
	{"status line over the limit (no newline ever)",
	 "HTTP/1.1 200 OKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOKOK", SMALL, MESH_E_TOOBIG, 0, 0,
	 NULL},
	{"too many headers", "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\n\r\n", SMALL, MESH_E_TOOBIG, 0, 0,
	 NULL},
	{"head over the limit",
	 "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
	 "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
	 "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n",
	 SMALL, MESH_E_TOOBIG, 0, 0, NULL},
	{"closed in the body", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", 0, MESH_E_CLOSED, 1, 0, NULL},
	{"closed in the head", "HTTP/1.1 200 OK\r\nContent-Le", 0, MESH_E_CLOSED, 1, 0, NULL},
	{"closed in a chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe", 0, MESH_E_CLOSED, 1, 0,
	 NULL},
	{"closed before a byte", "", 0, MESH_E_CLOSED, 1, 0, NULL},
};

static size_t case_len(const struct resp_case *c)
{
	/* One case carries a NUL inside; its length runs to the end of the literal. */
	if (strstr(c->what, "NUL"))
		return strlen(c->in) + 1 + strlen(c->in + strlen(c->in) + 1);
	return strlen(c->in);
}

static void init_for(struct mesh_http_response *r, const struct resp_case *c)
{
	const struct mesh_http_limits small = {64, 4, 256, 32};
	mesh_http_response_init(r, c->small ? &small : NULL);
}

/* Feeds c->in in the pieces [0, cut1) [cut1, cut2) [cut2, n), then eof when
 * asked; returns the final code. */
static int run_pieces(const struct resp_case *c, size_t cut1, size_t cut2, struct mesh_http_response *r)
{
	size_t n = case_len(c);
	size_t cuts[4] = {0, cut1, cut2, n};
	int rc = 0;
	init_for(r, c);
	for (int k = 0; k < 3 && rc == 0; k++)
		rc = mesh_http_response_feed(r, c->in + cuts[k], cuts[k + 1] - cuts[k], NULL);
	if (rc == 0 && c->eof)
		rc = mesh_http_response_eof(r);
	return rc;
}

static int check_result(const struct resp_case *c, struct mesh_http_response *r, int rc)
{
	int ok = rc == c->want;
	if (ok && rc == 1) {
		ok = r->status == c->status && r->body.p && strcmp(r->body.p, c->body) == 0 &&
		     r->body.len == strlen(c->body);
	}
	if (ok && rc < 0)
		ok = *mesh_http_response_why(r) != 0;
	return ok;
}

TEST(http_response_table_whole_and_split)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct resp_case *c = &cases[i];
		size_t n = case_len(c);
		struct mesh_http_response r;
		int rc = run_pieces(c, n, n, &r);
		if (!check_result(c, &r, rc)) {
			printf("case '%s' whole: rc %d (%s) status %d body '%s'\n", c->what, rc, mesh_http_response_why(&r),
			       r.status, r.body.p ? r.body.p : "(null)");
			EXPECT_EQ(rc, c->want);
			EXPECT_TRUE(0);
		}
		mesh_http_response_release(&r);
		/* Every single split point and every pair of split points within the first 64 bytes. */
		for (size_t a = 0; a <= n; a++)
			for (size_t b = a; b <= n; b += (a < 64 ? 1 : n + 1)) {
				rc = run_pieces(c, a, b, &r);
				if (!check_result(c, &r, rc)) {
					printf("case '%s' split %zu/%zu: rc %d (%s)\n", c->what, a, b, rc,
					       mesh_http_response_why(&r));
					EXPECT_TRUE(0);
					a = b = n + 1;
				}
				mesh_http_response_release(&r);
			}
	}
}

TEST(http_response_byte_at_a_time)
{
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const struct resp_case *c = &cases[i];
		size_t n = case_len(c);
		struct mesh_http_response r;
		int rc = 0;
		init_for(&r, c);
		for (size_t k = 0; k < n && rc == 0; k++)
			rc = mesh_http_response_feed(&r, c->in + k, 1, NULL);
		if (rc == 0 && c->eof)
			rc = mesh_http_response_eof(&r);
		if (!check_result(c, &r, rc)) {
			printf("case '%s' bytewise: rc %d (%s)\n", c->what, rc, mesh_http_response_why(&r));
			EXPECT_TRUE(0);
		}
		mesh_http_response_release(&r);
	}
}

TEST(http_response_error_is_sticky_and_incomplete_is_not_done)
{
	struct mesh_http_response r;
	mesh_http_response_init(&r, NULL);
	EXPECT_EQ(mesh_http_response_feed(&r, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nab", 41, NULL), 0);
	EXPECT_FALSE(r.done);
	EXPECT_TRUE(r.head_done);
	EXPECT_EQ(mesh_http_response_feed(&r, "", 0, NULL), 0);
	EXPECT_EQ(mesh_http_response_eof(&r), MESH_E_CLOSED);
	EXPECT_EQ(mesh_http_response_feed(&r, "cd", 2, NULL), MESH_E_CLOSED);
	EXPECT_STREQ(mesh_http_response_why(&r), "closed before the body was complete");
	mesh_http_response_release(&r);
}

TEST(http_response_pipelined_bytes_and_headers)
{
	const char *in = "HTTP/1.1 200 OK\r\nServer: t\r\nX-Empty:\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 500 Next\r\n";
	struct mesh_http_response r;
	size_t used = 0;
	const char *name, *value;
	mesh_http_response_init(&r, NULL);
	ASSERT_EQ(mesh_http_response_feed(&r, in, strlen(in), &used), 1);
	EXPECT_UEQ(used, strlen(in) - strlen("HTTP/1.1 500 Next\r\n"));
	EXPECT_TRUE(mesh_http_status_is_2xx(&r));
	EXPECT_EQ(r.version_minor, 1);
	EXPECT_EQ(r.content_length, 2);
	EXPECT_STREQ(mesh_http_response_header(&r, "server"), "t");
	EXPECT_STREQ(mesh_http_response_header(&r, "X-EMPTY"), "");
	EXPECT_TRUE(mesh_http_response_header(&r, "Missing") == NULL);
	ASSERT_UEQ(mesh_http_response_nheaders(&r), 3);
	ASSERT_EQ(mesh_http_response_header_at(&r, 2, &name, &value), 0);
	EXPECT_STREQ(name, "Content-Length");
	EXPECT_STREQ(value, "2");
	EXPECT_EQ(mesh_http_response_header_at(&r, 3, &name, &value), MESH_E_RANGE);
	/* Feeding a done parser consumes nothing. */
	EXPECT_EQ(mesh_http_response_feed(&r, "x", 1, &used), 1);
	EXPECT_UEQ(used, 0);
	mesh_http_response_release(&r);

	/* A HEAD response: Content-Length describes a body that is not sent. */
	mesh_http_response_init(&r, NULL);
	r.no_body = 1;
	in = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
	EXPECT_EQ(mesh_http_response_feed(&r, in, strlen(in), NULL), 1);
	EXPECT_UEQ(r.body.len, 0);
	mesh_http_response_release(&r);
}

TEST(http_request_build)
{
	struct mesh_buf b = MESH_BUF_INIT;
	ASSERT_EQ(mesh_http_request_get(&b, "127.0.0.1:7861", "/v1/models"), 0);
	EXPECT_STREQ(b.p, "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:7861\r\nConnection: close\r\n\r\n");
	mesh_buf_reset(&b);
	ASSERT_EQ(mesh_http_request_build(&b, "POST", "localhost", "/v1/call?x=1", "Content-Type: application/json\r\n",
					  "{}", 2),
		  0);
	EXPECT_STREQ(b.p, "POST /v1/call?x=1 HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
			  "Content-Length: 2\r\nConnection: close\r\n\r\n{}");
	size_t len = b.len;
	static const struct {
		const char *method, *host, *path, *extra;
	} bad[] = {
		{"GE T", "h", "/", NULL},	    {"", "h", "/", NULL},	    {"GET", "", "/", NULL},
		{"GET", "h h", "/", NULL},	    {"GET", "h\r\nX: y", "/", NULL}, {"GET", "h", "x", NULL},
		{"GET", "h", "/a b", NULL},	    {"GET", "h", "/\r\n", NULL},	    {"GET", "h", "/", "X: y"},
		{"GET", "h", "/", "X: y\r\n\r\n"}, {"GET", "h", "/", "X y\r\n"},	    {"GET", "h", "/", "X: a\nb\r\n"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		EXPECT_EQ(mesh_http_request_build(&b, bad[i].method, bad[i].host, bad[i].path, bad[i].extra, NULL, 0),
			  MESH_E_PARSE);
		EXPECT_UEQ(b.len, len);
	}
	mesh_buf_release(&b);
}

/* A peer on the other end of a socketpair: reads the request, then writes
 * `reply` in pieces of `piece` bytes every `gap_ms`, then closes (or stays
 * silent when reply is NULL). */
static pid_t peer(int fd, const char *reply, size_t piece, unsigned gap_ms)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	char buf[4096];
	ssize_t k = read(fd, buf, sizeof buf);
	(void)k;
	if (!reply) {
		pause();
		_exit(0);
	}
	for (size_t off = 0, n = strlen(reply); off < n; off += piece) {
		size_t m = n - off < piece ? n - off : piece;
		if (write(fd, reply + off, m) < 0)
			_exit(1);
		if (gap_ms)
			usleep(gap_ms * 1000);
	}
	_exit(0);
}

TEST(http_exchange_complete_timeout_and_close)
{
	int sv[2];
	struct mesh_http_response r;
	struct mesh_buf req = MESH_BUF_INIT;
	ASSERT_EQ(mesh_http_request_get(&req, "localhost", "/"), 0);

	/* A complete response, dribbled in 7-byte pieces. */
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid_t pid = peer(sv[1], "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world", 7, 1);
	close(sv[1]);
	mesh_http_response_init(&r, NULL);
	EXPECT_EQ(mesh_http_exchange(sv[0], req.p, req.len, &r, mesh_mono_ns() + 5 * MESH_NS_PER_S), 0);
	EXPECT_EQ(r.status, 200);
	EXPECT_STREQ(r.body.p, "hello world");
	mesh_http_response_release(&r);
	close(sv[0]);
	waitpid(pid, NULL, 0);

	/* A silent peer: the exchange ends at its deadline, not later. */
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid = peer(sv[1], NULL, 0, 0);
	close(sv[1]);
	mesh_http_response_init(&r, NULL);
	uint64_t t0 = mesh_mono_ns();
	EXPECT_EQ(mesh_http_exchange(sv[0], req.p, req.len, &r, t0 + 200 * MESH_NS_PER_MS), MESH_E_TIMEOUT);
	uint64_t el = (mesh_mono_ns() - t0) / MESH_NS_PER_MS;
	EXPECT_GE(el, 190);
	EXPECT_LE(el, 1500);
	mesh_http_response_release(&r);
	close(sv[0]);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);

	/* A peer that closes mid-body. */
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid = peer(sv[1], "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", 1000, 0);
	close(sv[1]);
	mesh_http_response_init(&r, NULL);
	EXPECT_EQ(mesh_http_exchange(sv[0], req.p, req.len, &r, mesh_mono_ns() + 5 * MESH_NS_PER_S), MESH_E_CLOSED);
	mesh_http_response_release(&r);
	close(sv[0]);
	waitpid(pid, NULL, 0);
	mesh_buf_release(&req);
}

static int sink_into(void *arg, const void *p, size_t n)
{
	struct mesh_buf *b = arg;
	if (b->len + n > 12)
		return -EPIPE; /* the reader stops */
	return mesh_buf_add(b, p, n);
}

/* A sink takes a 2xx body chunk by chunk as it is decoded, past max_body;
 * an error answer's body is read whole as before; a sink error stops the parse. */
TEST(http_response_body_sink)
{
	static const char chunked[] = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
				      "4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n";
	struct mesh_http_limits lim = {0, 0, 0, 3};
	struct mesh_http_response r;
	struct mesh_buf got = MESH_BUF_INIT;
	mesh_http_response_init(&r, &lim);
	r.sink = sink_into;
	r.sink_arg = &got;
	size_t head = strlen(chunked) - strlen("4\r\nabcd\r\n3\r\nefg\r\n0\r\n\r\n");
	EXPECT_EQ(mesh_http_response_feed(&r, chunked, head + 9, NULL), 0);
	EXPECT_STREQ(got.p, "abcd"); /* the first chunk, before the rest came */
	EXPECT_EQ(mesh_http_response_feed(&r, chunked + head + 9, strlen(chunked) - head - 9, NULL), 1);
	EXPECT_STREQ(got.p, "abcdefg"); /* 7 bytes: over max_body, a stream is not bounded by it */
	EXPECT_EQ(r.body.len, 0);
	mesh_http_response_release(&r);

	static const char err[] = "HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\n\r\nnop";
	mesh_buf_reset(&got);
	mesh_http_response_init(&r, NULL);
	r.sink = sink_into;
	r.sink_arg = &got;
	EXPECT_EQ(mesh_http_response_feed(&r, err, strlen(err), NULL), 1);
	EXPECT_STREQ(r.body.p, "nop");
	EXPECT_EQ(got.len, 0);
	mesh_http_response_release(&r);

	static const char lots[] = "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n01234567890123456789";
	mesh_buf_reset(&got);
	mesh_http_response_init(&r, NULL);
	r.sink = sink_into;
	r.sink_arg = &got;
	EXPECT_EQ(mesh_http_response_feed(&r, lots, strlen(lots), NULL), -EPIPE);
	EXPECT_STREQ(mesh_http_response_why(&r), "the body's reader stopped");
	mesh_http_response_release(&r);
	mesh_buf_release(&got);
}
