/* A request head read whole by a proxy (http/hframe.h): where it ends
 * (mesh_hframe_head_end), the strict parse (mesh_hframe_parse_request: the
 * framer's own reading, row by row of a table), and what goes on to the
 * server (mesh_hframe_head_forward). */
#include "base/err.h"
#include "http/hframe.h"
#include "runner/t.h"

#include <stdio.h>
#include <string.h>

struct row {
	const char *head;
	int rc; /* 0, MESH_E_PROTO, MESH_E_TOOBIG */
};

/* Heads RFC 9112 says a server must refuse (400), or that a proxy must not
 * pass on because a server could read them another way. */
static const struct row refused[] = {
	{"POST / HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n", MESH_E_PROTO},	/* space before the colon */
	{"POST / HTTP/1.1\r\nContent-Length : 5\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nTransfer-Encoding\t: chunked\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\nX: a\x01" "b\r\n\r\n", MESH_E_PROTO},			/* a CTL in a value */
	{"GET / HTTP/1.1\r\nX: a\x7f" "b\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\nX: a\x1b" "b\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", MESH_E_PROTO},				/* a CR alone */
	{"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", MESH_E_PROTO},			/* obs-fold */
	{"GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: 0x5\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: 5 5\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nTransfer-Encoding: \r\n\r\n", MESH_E_PROTO},
	{"POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\nHost: x\n\n", MESH_E_PROTO},					/* bare LF */
	{"GET / HTTP/1.1\r\nHost: x\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\nHost: x\r\n\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\nX@Y: 1\r\n\r\n", MESH_E_PROTO},				/* a name not a token */
	{"GET / HTTP/1.1\r\nX Y: 1\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\n(X): 1\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\nX\x01: 1\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\n: 1\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\nNo colon\r\n\r\n", MESH_E_PROTO},
	{"GET  / HTTP/1.1\r\n\r\n", MESH_E_PROTO},					/* the request line */
	{"GET /  HTTP/1.1\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1 \r\n\r\n", MESH_E_PROTO},
	{"GET\t/ HTTP/1.1\r\n\r\n", MESH_E_PROTO},
	{" / HTTP/1.1\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/2.0\r\n\r\n", MESH_E_PROTO},
	{"GET / http/1.1\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.\r\n\r\n", MESH_E_PROTO},
	{"GET /a\x01 HTTP/1.1\r\n\r\n", MESH_E_PROTO},
	{"GET /\r\n\r\n", MESH_E_PROTO},
	{"G@T / HTTP/1.1\r\n\r\n", MESH_E_PROTO},
	{"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n", MESH_E_PROTO},		/* not one head */
	{"GET / HTTP/1.1\r\nHost: x\r\n", MESH_E_PROTO},				/* no end */
};

TEST(hframe_head_refuses_each_malformed_head)
{
	for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
		struct mesh_hframe_head h;
		int rc = mesh_hframe_parse_request(refused[i].head, strlen(refused[i].head), &h);
		if (rc != refused[i].rc)
			fprintf(stderr, "    row %zu: %d (%s) for \"%s\"\n", i, rc, h.why ? h.why : "", refused[i].head);
		EXPECT_EQ(rc, refused[i].rc);
		EXPECT_TRUE(h.why && *h.why);
	}
	/* A NUL in a value (the table's strings cannot hold one). */
	static const char nul[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
	struct mesh_hframe_head h;
	EXPECT_EQ(mesh_hframe_parse_request(nul, sizeof nul - 1, &h), MESH_E_PROTO);
	/* Past the bounds: 431 for the gateway. */
	static char big[MESH_HFRAME_MAX_HEAD + 64];
	size_t at = (size_t)snprintf(big, sizeof big, "GET / HTTP/1.1\r\nX: ");
	memset(big + at, 'v', sizeof big - at - 4);
	memcpy(big + sizeof big - 4, "\r\n\r\n", 4);
	EXPECT_EQ(mesh_hframe_parse_request(big, sizeof big, &h), MESH_E_TOOBIG);
	at = (size_t)snprintf(big, sizeof big, "GET / HTTP/1.1\r\n");
	for (int k = 0; k <= MESH_HFRAME_MAX_FIELDS; k++)
		at += (size_t)snprintf(big + at, sizeof big - at, "X%d: %d\r\n", k, k);
	at += (size_t)snprintf(big + at, sizeof big - at, "\r\n");
	EXPECT_EQ(mesh_hframe_parse_request(big, at, &h), MESH_E_TOOBIG);
	EXPECT_STREQ(h.why, "too many header fields");
}

TEST(hframe_head_reads_what_a_proxy_needs)
{
	struct mesh_hframe_head h;
	static const char a[] = "GET /v1/models?x=1 HTTP/1.1\r\nHost: x\r\nX-Tab: a\tb\r\nX-Empty:\r\nX-Obs: \xc3\xa9t\xc3\xa9\r\n"
				"X-Ows:   v  \r\n\r\n";
	ASSERT_EQ(mesh_hframe_parse_request(a, sizeof a - 1, &h), 0);
	EXPECT_EQ(h.len, sizeof a - 1);
	EXPECT_EQ(h.line_off, 0);
	EXPECT_EQ(h.line_len, strlen("GET /v1/models?x=1 HTTP/1.1\r\n"));
	EXPECT_EQ(h.method_len, 3);
	EXPECT_EQ(h.target_off, 4);
	EXPECT_EQ(h.target_len, strlen("/v1/models?x=1"));
	EXPECT_EQ(h.minor, 1);
	EXPECT_EQ(h.close, 0);
	EXPECT_EQ(h.chunked, 0);
	EXPECT_UEQ(h.content_length, 0);
	EXPECT_EQ(h.expect, 0);
	EXPECT_EQ(h.nfields, 5u);
	/* Empty lines before the request line (RFC 9112 2.2); HTTP/1.0 closes. */
	static const char b[] = "\r\n\r\nPOST /x HTTP/1.0\r\nContent-Length: 12\r\n\r\n";
	ASSERT_EQ(mesh_hframe_parse_request(b, sizeof b - 1, &h), 0);
	EXPECT_EQ(h.line_off, 4);
	EXPECT_EQ(h.method_len, 4);
	EXPECT_EQ(h.minor, 0);
	EXPECT_EQ(h.close, 1);
	EXPECT_UEQ(h.content_length, 12);
	static const char c[] = "POST /x HTTP/1.1\r\ntransfer-encoding: Chunked\r\nEXPECT: 100-Continue\r\n"
				"Connection: keep-alive, Close\r\n\r\n";
	ASSERT_EQ(mesh_hframe_parse_request(c, sizeof c - 1, &h), 0);
	EXPECT_EQ(h.chunked, 1);
	EXPECT_EQ(h.expect, 1);
	EXPECT_EQ(h.close, 1);
	static const char d[] = "PUT /x HTTP/1.1\r\nExpect: 100-continue\r\nExpect: x-other\r\nContent-Length: 0\r\n\r\n";
	ASSERT_EQ(mesh_hframe_parse_request(d, sizeof d - 1, &h), 0);
	EXPECT_EQ(h.expect, 2); /* 417 */
	EXPECT_UEQ(h.content_length, 0);
}

TEST(hframe_head_end_in_any_pieces)
{
	static const struct {
		const char *bytes;
		size_t end; /* 0: none */
	} rows[] = {
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody", 27},
		{"GET / HTTP/1.1\r\nHost: x\r\n", 0},
		{"\r\n\r\nGET / HTTP/1.1\r\n\r\n", 22},
		{"GET / HTTP/1.1\nHost: x\n\nbody", 24}, /* found, to be refused */
		{"GET / HTTP/1.1\r\nHost: x\n\r\nbody", 26},
		{"GET / HTTP/1.1\r\rHost: x\r\r", 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		size_t n = strlen(rows[i].bytes), sc = 0, got = 0;
		EXPECT_EQ(mesh_hframe_head_end(rows[i].bytes, n, &sc), rows[i].end);
		/* The same as the bytes come one by one (scanned carried on). */
		sc = 0;
		for (size_t k = 1; k <= n && !got; k++)
			got = mesh_hframe_head_end(rows[i].bytes, k, &sc);
		if (got != rows[i].end)
			fprintf(stderr, "    row %zu: %zu bytewise\n", i, got);
		EXPECT_EQ(got, rows[i].end);
	}
}

TEST(hframe_head_forward_drops_hop_by_hop_fields)
{
	char buf[1024];
	struct mesh_hframe_head h;
	static const char in[] = "POST /x HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Drop, content-length, HOST\r\n"
				 "Keep-Alive: 5\r\nX-Drop: 1\r\nX-Keep: 2\r\nTE: trailers\r\nUpgrade: h2c\r\n"
				 "Proxy-Connection: x\r\nTrailer: y\r\nExpect: 100-continue\r\nx-drop: 3\r\n"
				 "Content-Length: 2\r\n\r\nhi";
	memcpy(buf, in, sizeof in);
	ASSERT_EQ(mesh_hframe_parse_request(buf, sizeof in - 3, &h), 0);
	size_t off = mesh_hframe_head_forward(buf, &h);
	ASSERT_LE(off, h.len);
	EXPECT_EQ(strncmp(buf + off, "Host: h\r\nX-Keep: 2\r\nContent-Length: 2\r\n\r\nhi", h.len - off + 2), 0);
	EXPECT_EQ(h.len - off, strlen("Host: h\r\nX-Keep: 2\r\nContent-Length: 2\r\n\r\n"));
	/* The request line stays where it was; the body after the head. */
	EXPECT_EQ(strncmp(buf, "POST /x HTTP/1.1\r\n", 18), 0);
	EXPECT_STREQ(buf + h.len, "hi");
	/* Nothing to drop: nothing moves. */
	static const char plain[] = "GET / HTTP/1.1\r\nHost: h\r\nAccept: */*\r\n\r\n";
	memcpy(buf, plain, sizeof plain);
	ASSERT_EQ(mesh_hframe_parse_request(buf, sizeof plain - 1, &h), 0);
	EXPECT_EQ(mesh_hframe_head_forward(buf, &h), strlen("GET / HTTP/1.1\r\n"));
	EXPECT_STREQ(buf, plain);
	/* All dropped: the blank line alone goes on. */
	static const char all[] = "GET / HTTP/1.1\r\nConnection: close\r\nUpgrade: x\r\n\r\n";
	memcpy(buf, all, sizeof all);
	ASSERT_EQ(mesh_hframe_parse_request(buf, sizeof all - 1, &h), 0);
	off = mesh_hframe_head_forward(buf, &h);
	EXPECT_EQ(off, h.len - 2);
	EXPECT_STREQ(buf + off, "\r\n");
}
