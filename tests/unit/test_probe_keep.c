/* The loop-driven probe (mesh_probe_begin/read/expire/end) over a
 * connection the caller already has (an HTTP program's start keeps the
 * listen test's connection for the probe, and the probe's for the first
 * request).  Each case writes the
 * server's answer into one end of a socket pair before the probe runs on
 * the other (the pair's buffers hold both directions), then reads what the
 * probe sent. */
#include "autoscale/probe.h"
#include "base/err.h"
#include "runner/t.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char listed[] = "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}";

/* Probes over a pair whose peer answers answer (then closes its side when
 * eof); *keep and the request the probe sent (into req). */
static struct mesh_probe_result probe_pair(const char *answer, int eof, int *keep, char *req, size_t cap)
{
	int sv[2];
	struct mesh_probe_target t;
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	struct mesh_probe_result r;
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	ASSERT_EQ((size_t)write(sv[1], answer, strlen(answer)), strlen(answer));
	if (eof)
		shutdown(sv[1], SHUT_WR);
	mesh_probe_target_default(&t);
	t.port = 4242;
	o.model = "m";
	o.response_timeout_ns = 2000000000ull;
	struct mesh_probe_conn p;
	int done = mesh_probe_begin(&p, sv[0], &t, &o, 1, &r);
	ASSERT_GE(done, 0);
	while (!done) {
		struct pollfd pf = {sv[0], POLLIN, 0};
		if (poll(&pf, 1, 2000) == 0) {
			mesh_probe_expire(&p, &r);
			break;
		}
		done = mesh_probe_read(&p, &r);
	}
	*keep = p.keep;
	mesh_probe_end(&p);
	ssize_t n = read(sv[1], req, cap - 1);
	req[n > 0 ? n : 0] = 0;
	close(sv[0]);
	close(sv[1]);
	return r;
}

static const char *ok_with(char *buf, size_t cap, const char *version, const char *extra, const char *body)
{
	snprintf(buf, cap, "HTTP/%s 200 OK\r\n%sContent-Length: %zu\r\n\r\n%s", version, extra, strlen(body), body);
	return buf;
}

TEST(probe_conn_keeps_a_framed_http11_answer)
{
	char a[512], req[4096];
	int keep = -1;
	struct mesh_probe_result r = probe_pair(ok_with(a, sizeof a, "1.1", "", listed), 0, &keep, req, sizeof req);
	EXPECT_EQ(r.warm, 1);
	EXPECT_EQ(r.status, 200);
	EXPECT_EQ(keep, 1);
	EXPECT_CONTAINS(req, "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:4242\r\n");
	EXPECT_TRUE(strstr(req, "Connection: close") == NULL);
	EXPECT_TRUE(strstr(req, "\r\n\r\n") != NULL);
	/* A chunked answer is framed too. */
	snprintf(a, sizeof a, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n", strlen(listed),
		 listed);
	r = probe_pair(a, 0, &keep, req, sizeof req);
	EXPECT_EQ(r.warm, 1);
	EXPECT_EQ(keep, 1);
	/* "Not yet" (a model loading) on a kept connection: cold, and the
	 * connection stays for the next probe. */
	r = probe_pair("HTTP/1.1 503 Loading\r\nContent-Length: 0\r\n\r\n", 0, &keep, req, sizeof req);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(r.status, 503);
	EXPECT_EQ(keep, 1);
}

TEST(probe_conn_does_not_keep_what_cannot_carry_a_next_request)
{
	char a[512], req[4096];
	int keep = -1;
	/* The server said it closes. */
	struct mesh_probe_result r =
		probe_pair(ok_with(a, sizeof a, "1.1", "Connection: close\r\n", listed), 0, &keep, req, sizeof req);
	EXPECT_EQ(r.warm, 1);
	EXPECT_EQ(keep, 0);
	/* HTTP/1.0. */
	r = probe_pair(ok_with(a, sizeof a, "1.0", "", listed), 0, &keep, req, sizeof req);
	EXPECT_EQ(r.warm, 1);
	EXPECT_EQ(keep, 0);
	/* A body delimited by the close. */
	snprintf(a, sizeof a, "HTTP/1.1 200 OK\r\n\r\n%s", listed);
	r = probe_pair(a, 1, &keep, req, sizeof req);
	EXPECT_EQ(r.warm, 1);
	EXPECT_EQ(keep, 0);
	/* Closed before a whole answer. */
	r = probe_pair("HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{", 1, &keep, req, sizeof req);
	EXPECT_EQ(r.warm, 0);
	EXPECT_EQ(keep, 0);
	EXPECT_CONTAINS(r.reason, "cold: incomplete response");
	/* Refused arguments. */
	struct mesh_probe_target t;
	mesh_probe_target_default(&t);
	struct mesh_probe_conn p;
	EXPECT_EQ(mesh_probe_begin(&p, -1, &t, NULL, 1, &r), MESH_E_RANGE);
	mesh_probe_end(&p);
	t.port = 0;
	EXPECT_EQ(mesh_probe_begin(&p, 0, &t, NULL, 1, &r), MESH_E_RANGE);
	mesh_probe_end(&p);
}
