/* mesh_hframe_feed's run of a header value it ignores (taken at once, not
 * byte by byte): the framing headers still read after it, a control
 * character in it still refused, its bytes still counted in the head's
 * bound -- wherever the reads split it. */
#include "base/err.h"
#include "http/hframe.h"
#include "runner/t.h"

#include <stdio.h>
#include <string.h>

/* Feeds s to a response side in pieces of k bytes; the last result. */
static int feed_in(struct mesh_hframe *f, const char *s, size_t k)
{
	size_t n = strlen(s);
	int rc = 0;
	for (size_t i = 0; i < n && !rc; i += k)
		rc = mesh_hframe_feed(f, 1, s + i, n - i < k ? n - i : k);
	return rc;
}

TEST(hframe_ignored_values_in_any_pieces)
{
	static const char ok[] = "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Tue, 01 Dec 2026 11:00:00 GMT\r\n"
				 "X-Tab: a\tb\r\nContent-Length: 5\r\nConnection: keep-alive\r\n\r\nhello";
	for (size_t k = 1; k <= sizeof ok; k++) {
		struct mesh_hframe f;
		mesh_hframe_init(&f);
		ASSERT_EQ(mesh_hframe_request(&f, 0, 0), 0);
		EXPECT_EQ(feed_in(&f, ok, k), 0);
		EXPECT_EQ(f.inflight, 0u); /* Content-Length after them was read */
		struct mesh_hframe g;
		mesh_hframe_init(&g);
		ASSERT_EQ(mesh_hframe_request(&g, 0, 0), 0);
		EXPECT_EQ(feed_in(&g, "HTTP/1.1 200 OK\r\nServer: ngi\x01nx\r\nContent-Length: 0\r\n\r\n", k), MESH_E_PROTO);
	}
	/* A value that crosses the head's bound is refused there. */
	static char big[MESH_HFRAME_MAX_HEAD + 64];
	size_t at = (size_t)snprintf(big, sizeof big, "HTTP/1.1 200 OK\r\nX-Big: ");
	memset(big + at, 'v', sizeof big - at - 1);
	struct mesh_hframe f;
	mesh_hframe_init(&f);
	ASSERT_EQ(mesh_hframe_request(&f, 0, 0), 0);
	EXPECT_EQ(feed_in(&f, big, 4096), MESH_E_TOOBIG);
}
