/* mesh_hframe_request (http/hframe.h): a request the caller framed
 * itself, counted without its bytes; the response side ends its answer as
 * if the request had been fed. */
#include "base/err.h"
#include "http/hframe.h"
#include "runner/t.h"

#include <string.h>

static int feed(struct mesh_hframe *f, const char *s)
{
	return mesh_hframe_feed(f, 1, s, strlen(s));
}

TEST(hframe_request_counted_without_its_bytes)
{
	struct mesh_hframe f;
	mesh_hframe_init(&f);
	ASSERT_EQ(mesh_hframe_request(&f, 0, 0), 0);
	EXPECT_EQ(f.inflight, 1u);
	EXPECT_EQ(feed(&f, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nab"), 0);
	EXPECT_EQ(f.inflight, 1u);
	EXPECT_EQ(feed(&f, "c"), 0);
	EXPECT_EQ(f.inflight, 0u);
	/* A HEAD's answer has no body, whatever its Content-Length says. */
	ASSERT_EQ(mesh_hframe_request(&f, 1, 0), 0);
	EXPECT_EQ(feed(&f, "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"), 0);
	EXPECT_EQ(f.inflight, 0u);
	/* Two in a row (pipelined): a chunked answer, then one to its close. */
	ASSERT_EQ(mesh_hframe_request(&f, 0, 0), 0);
	ASSERT_EQ(mesh_hframe_request(&f, 0, 0), 0);
	EXPECT_EQ(feed(&f, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"), 0);
	EXPECT_EQ(f.inflight, 1u);
	EXPECT_EQ(feed(&f, "HTTP/1.1 200 OK\r\n\r\nuntil the end"), 0);
	EXPECT_EQ(mesh_hframe_eof(&f, 1), 0);
	EXPECT_EQ(f.inflight, 0u);
	EXPECT_EQ(f.requests, 4u);
	EXPECT_EQ(f.responses, 4u);
}

TEST(hframe_request_connect_tunnels_and_the_pipeline_is_bounded)
{
	struct mesh_hframe f;
	mesh_hframe_init(&f);
	ASSERT_EQ(mesh_hframe_request(&f, 0, 1), 0);
	EXPECT_EQ(feed(&f, "HTTP/1.1 200 Connection established\r\n\r\n"), 0);
	EXPECT_EQ(f.tunnel, 1);
	mesh_hframe_init(&f);
	for (int i = 0; i < MESH_HFRAME_MAX_PIPELINE; i++)
		ASSERT_EQ(mesh_hframe_request(&f, 0, 0), 0);
	EXPECT_EQ(mesh_hframe_request(&f, 0, 0), MESH_E_TOOBIG);
}

/* mesh_hframe_answer_begun: between responses (an interim one whole
 * included) 0, inside one 1: what a proxy that loses the server asks. */
TEST(hframe_answer_begun_inside_a_response_only)
{
	struct mesh_hframe f;
	mesh_hframe_init(&f);
	ASSERT_EQ(mesh_hframe_request(&f, 0, 0), 0);
	EXPECT_EQ(mesh_hframe_answer_begun(&f), 0);
	EXPECT_EQ(feed(&f, "HTTP/1.1 100 Continue\r\n\r\n"), 0);
	EXPECT_EQ(mesh_hframe_answer_begun(&f), 0);
	EXPECT_EQ(feed(&f, "H"), 0);
	EXPECT_EQ(mesh_hframe_answer_begun(&f), 1);
	EXPECT_EQ(feed(&f, "TTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\no"), 0);
	EXPECT_EQ(mesh_hframe_answer_begun(&f), 1);
	EXPECT_EQ(feed(&f, "k"), 0);
	EXPECT_EQ(f.inflight, 0u);
	EXPECT_EQ(mesh_hframe_answer_begun(&f), 0);
}
