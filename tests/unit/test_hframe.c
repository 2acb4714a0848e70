/* The HTTP/1.1 framer that counts requests in flight (http/hframe.h). */
#include "base/err.h"
#include "http/hframe.h"
#include "runner/t.h"

#include <stdio.h>
#include <string.h>

/* A script: each step feeds one direction ('>' client to server, '<' server
 * to client, 'c' the server closes) and states the in-flight count after. */
struct step {
	char dir;
	const char *bytes;
	int inflight; /* expected after the step; -1: an error is expected */
};

/* Runs the script twice: each step whole, and each step byte by byte; the
 * counts must agree with the script both times. */
static void run(const char *what, const struct step *st)
{
	for (int bytewise = 0; bytewise < 2; bytewise++) {
		struct mesh_hframe f;
		mesh_hframe_init(&f);
		for (int i = 0; st[i].dir; i++) {
			int d = st[i].dir == '>' ? 0 : 1, rc = 0;
			if (st[i].dir == 'c') {
				rc = mesh_hframe_eof(&f, 1);
			} else if (bytewise) {
				for (size_t k = 0; st[i].bytes[k] && rc == 0; k++)
					rc = mesh_hframe_feed(&f, d, st[i].bytes + k, 1);
			} else {
				rc = mesh_hframe_feed(&f, d, st[i].bytes, strlen(st[i].bytes));
			}
			if (st[i].inflight < 0) {
				if (rc >= 0)
					fprintf(stderr, "    %s step %d: wanted an error\n", what, i);
				EXPECT_LT(rc, 0);
				EXPECT_TRUE(*mesh_hframe_why(&f, d));
				break;
			}
			if (rc != 0 || (int)f.inflight != st[i].inflight)
				fprintf(stderr, "    %s step %d (%s): rc %d (%s) inflight %u\n", what, i,
					bytewise ? "bytewise" : "whole", rc, mesh_hframe_why(&f, d), f.inflight);
			EXPECT_EQ(rc, 0);
			EXPECT_EQ((int)f.inflight, st[i].inflight);
		}
	}
}

TEST(hframe_request_in_flight_until_response_ends)
{
	run("simple", (const struct step[]){{'>', "G", 1},
					    {'>', "ET / HTTP/1.1\r\nHost: x\r\n\r\n", 1},
					    {'<', "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", 1},
					    {'<', "lo", 0},
					    {0, NULL, 0}});
	/* Idle keep-alive between requests is zero; the next request counts. */
	run("keep-alive", (const struct step[]){{'>', "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 1},
						{'<', "HTTP/1.1 204 No Content\r\n\r\n", 0},
						{'>', "\r\n", 0},
						{'>', "GET /b HTTP/1.1\r\n\r\n", 1},
						{'<', "HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", 0},
						{0, NULL, 0}});
}

TEST(hframe_streaming_responses_end_at_their_end)
{
	run("chunked", (const struct step[]){{'>', "POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 1},
					     {'>', "3;x=y\r\nabc\r\n0\r\n\r\n", 1},
					     {'<', "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 1},
					     {'<', "12\r\ndata: {\"t\":\"hi\"}\n\n\r\n", 1},
					     {'<', "0\r\nX-Trailer: 1\r\n", 1},
					     {'<', "\r\n", 0},
					     {0, NULL, 0}});
	run("close-delimited", (const struct step[]){{'>', "GET /events HTTP/1.0\r\n\r\n", 1},
						     {'<', "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n", 1},
						     {'<', "data: 1\n\ndata: 2\n\n", 1},
						     {'c', "", 0},
						     {0, NULL, 0}});
	run("interim 100", (const struct step[]){{'>', "PUT /x HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n", 1},
						 {'<', "HTTP/1.1 100 Continue\r\n\r\n", 1},
						 {'>', "ok", 1},
						 {'<', "HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n", 0},
						 {0, NULL, 0}});
	run("upgrade", (const struct step[]){{'>', "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n", 1},
					     {'<', "HTTP/1.1 101 Switching Protocols\r\n\r\n\x81\x05hello", 1},
					     {'>', "\x81\x85garbage GET / HTTP/1.1\r\n\r\n", 1},
					     {0, NULL, 0}});
}

TEST(hframe_pipelined_and_head)
{
	run("pipeline", (const struct step[]){{'>', "HEAD / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n", 3},
					      {'<', "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", 2},
					      {'<', "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n", 1},
					      {'<', "Content-Length: 1\r\n\r\nx", 0},
					      {0, NULL, 0}});
	/* A response nobody asked for (a 408 on an idle connection) counts nothing. */
	run("unsolicited", (const struct step[]){{'<', "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n", 0},
						 {0, NULL, 0}});
	/* A response's bare LF line ends are read too; a request's are
	 * refused (the framing of a request must not be read two ways). */
	run("lf", (const struct step[]){{'>', "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 1},
					{'<', "HTTP/1.1 200 OK\nContent-Length: 1\n\nx", 0},
					{0, NULL, 0}});
	run("lf request", (const struct step[]){{'>', "GET / HTTP/1.1\nHost: x\n\n", -1}, {0, NULL, 0}});
}

TEST(hframe_malformed_is_an_error)
{
	static const char *const bad_requests[] = {
		"GET / HTTP/2.0\r\n\r\n",
		"GET /\r\n\r\n",
		" GET / HTTP/1.1\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
		"GET / HTTP/1.1\r\n folded\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
		"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\nb\r\n\r\n",
		"GET  / HTTP/1.1\r\n\r\n",
		"GET / http/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\nx\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\n0\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof bad_requests / sizeof bad_requests[0]; i++) {
		struct step st[] = {{'>', bad_requests[i], -1}, {0, NULL, 0}};
		run(bad_requests[i], st);
	}
	run("bad status", (const struct step[]){{'>', "GET / HTTP/1.1\r\n\r\n", 1}, {'<', "HTTP/1.1 2000 OK\r\n\r\n", -1}, {0, NULL, 0}});
	run("bad status version", (const struct step[]){{'>', "GET / HTTP/1.1\r\n\r\n", 1}, {'<', "ICY 200 OK\r\n\r\n", -1}, {0, NULL, 0}});
	/* A head past the bound. */
	struct mesh_hframe f;
	mesh_hframe_init(&f);
	static char big[MESH_HFRAME_MAX_HEAD + 64];
	memset(big, 'a', sizeof big);
	memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
	EXPECT_EQ(mesh_hframe_feed(&f, 0, big, sizeof big), MESH_E_TOOBIG);
	/* Too many pipelined requests. */
	mesh_hframe_init(&f);
	int rc = 0;
	for (int i = 0; i <= MESH_HFRAME_MAX_PIPELINE && rc == 0; i++)
		rc = mesh_hframe_feed(&f, 0, "GET / HTTP/1.1\r\n\r\n", 18);
	EXPECT_EQ(rc, MESH_E_TOOBIG);
}

/* mesh_hframe_step over a chunked request body cut into every pair of
 * pieces: the chunks' data comes out whole and in order, the end where the
 * body ends (the next request's bytes are not taken), each chunk's size
 * before its data. */
TEST(hframe_step_decodes_a_chunked_body_in_any_pieces)
{
	static const char head[] = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
	static const char body[] = "5;x=1\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nGET";
	size_t n = strlen(body), end = n - 3;
	for (size_t a = 0; a <= n; a++)
		for (size_t b = a; b <= n; b++) {
			struct mesh_hframe f;
			struct mesh_hframe_ev ev;
			char got[32] = "";
			size_t ng = 0, pos = 0, cuts[3] = {a, b, n}, ended = 0;
			unsigned chunks = 0;
			mesh_hframe_init(&f);
			ASSERT_EQ(mesh_hframe_feed(&f, 0, head, strlen(head)), 0);
			for (int k = 0; k < 3 && !ended; k++)
				while (pos < cuts[k] && !ended) {
					long took = mesh_hframe_step(&f, 0, body + pos, cuts[k] - pos, &ev);
					ASSERT_GT(took, 0);
					pos += (size_t)took;
					if (ev.what & MESH_HFRAME_EV_CHUNK)
						chunks++;
					if (ev.what & MESH_HFRAME_EV_DATA) {
						ASSERT_TRUE(ng + ev.n < sizeof got);
						memcpy(got + ng, ev.p, ev.n);
						ng += ev.n;
					}
					if (ev.what & MESH_HFRAME_EV_END)
						ended = pos;
				}
			got[ng] = 0;
			if (strcmp(got, "hello world") || ended != end || chunks != 3) {
				printf("pieces %zu/%zu: '%s' ended at %zu (want %zu), %u chunks\n", a, b, got, ended, end, chunks);
				EXPECT_TRUE(0);
				return;
			}
		}
}

/* A strict reader of responses (a client's) refuses what a relay lets by:
 * a bare LF, a status without its space, a coding other than chunked. */
TEST(hframe_strict_responses)
{
	static const char *const lenient_ok[] = {
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
		"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof lenient_ok / sizeof lenient_ok[0]; i++)
		for (int strict = 0; strict < 2; strict++) {
			struct mesh_hframe f;
			mesh_hframe_init(&f);
			mesh_hframe_limits(&f, 1, strict, 0, 0);
			ASSERT_EQ(mesh_hframe_request(&f, 0, 0), 0);
			int rc = mesh_hframe_feed(&f, 1, lenient_ok[i], strlen(lenient_ok[i]));
			EXPECT_EQ(rc, strict ? MESH_E_PROTO : 0);
			if (!strict)
				EXPECT_UEQ(f.inflight, 0);
		}
}

/* Where a side is (mesh serve's read timeouts): in a head from its first
 * byte to its blank line, in a body until its end, else between. */
TEST(hframe_reading_says_head_body_or_between)
{
	static const struct {
		const char *bytes;
		int reading;
	} steps[] = {
		{"\r\n", 0}, /* blank lines between requests are skipped */
		{"G", 1},
		{"ET / HTTP/1.1\r\nHost: x\r\n", 1},
		{"\r\n", 0}, /* no body */
		{"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\n", 2},
		{"ab", 2},
		{"c", 0},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 2},
		{"1\r\nx\r\n0\r\n", 2}, /* the trailer block is still to come */
		{"\r\n", 0},
	};
	struct mesh_hframe f;
	mesh_hframe_init(&f);
	EXPECT_EQ(mesh_hframe_reading(&f, 0), 0);
	EXPECT_EQ(mesh_hframe_reading(&f, 1), 0);
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		EXPECT_EQ(mesh_hframe_feed(&f, 0, steps[i].bytes, strlen(steps[i].bytes)), 0);
		if (mesh_hframe_reading(&f, 0) != steps[i].reading)
			fprintf(stderr, "    after step %zu\n", i);
		EXPECT_EQ(mesh_hframe_reading(&f, 0), steps[i].reading);
	}
	EXPECT_EQ(mesh_hframe_feed(&f, 1, "HTTP/1.1 200 OK\r\n", 17), 0);
	EXPECT_EQ(mesh_hframe_reading(&f, 1), 1);
	/* in error: between, for good */
	EXPECT_EQ(mesh_hframe_feed(&f, 0, "GET / HTTP/1.1\n", 15), MESH_E_PROTO);
	EXPECT_EQ(mesh_hframe_reading(&f, 0), 0);
}
