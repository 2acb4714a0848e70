/* Messages larger than the ring (pieces) and streamed replies, meshd's side
 * (src/shm/slot.c) against forked libmeshworker workers. */
#include "base/clock.h"
#include "base/err.h"
#include "mesh/worker.h"
#include "runner/t.h"
#include "shm/shm.h"
#include "unit/shm_t.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC MESH_NS_PER_S
#define MS MESH_NS_PER_MS

static void expect_msg(struct mesh_ctl *ctl, enum mesh_ctl_kind kind, uint32_t gen)
{
	struct mesh_ctl_msg m;
	ASSERT_EQ(mesh_ctl_wait(ctl, &m, 10 * SEC), 0);
	EXPECT_EQ(m.kind, kind);
	EXPECT_UEQ(m.gen, gen);
}

/* A worker on a fresh slot of ring bytes, online with gen 1. */
static pid_t start(struct mesh_ctl **ctl, struct mesh_slot **s, size_t ring, mesh_worker_handler handler)
{
	/* The child first checks that reply_part outside a handler is refused;
	 * the handler gets the worker as its ctx. */
	pid_t pid = shm_t_fork_worker(ctl, handler, SHM_T_CTX_WORKER | SHM_T_CHECK_PART);
	expect_msg(*ctl, MESH_CTL_READY, 0);
	ASSERT_EQ(mesh_slot_create(s, 0, ring), 0);
	ASSERT_EQ(mesh_ctl_run(*ctl, *s, 1), 0);
	expect_msg(*ctl, MESH_CTL_ONLINE, 1);
	return pid;
}

static unsigned char pattern(size_t i)
{
	return (unsigned char)(i * 31 + (i >> 12));
}

/* Replies with the request, each byte xor 0x5a; "sleep" sleeps 300 ms first. */
static int xor_handler(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *len)
{
	(void)ctx;
	if (n == 5 && !memcmp(req, "sleep", 5))
		usleep(300 * 1000);
	if (n > cap)
		return -1;
	for (size_t i = 0; i < n; i++)
		((unsigned char *)reply)[i] = ((const unsigned char *)req)[i] ^ 0x5a;
	*len = n;
	return 0;
}

TEST(pieces_requests_and_replies_larger_than_the_ring)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	pid_t pid = start(&ctl, &s, 4096, xor_handler);
	/* Around the one-record limit (4080), a few pieces, many pieces. */
	static const size_t sizes[] = {0, 1, 2031, 2032, 4080, 4081, 6097, 300001, (1u << 20) + 5};
	size_t nsizes = sizeof sizes / sizeof sizes[0];
	unsigned char *req = malloc((1u << 20) + 5);
	ASSERT_TRUE(req != NULL);
	for (size_t i = 0; i < (1u << 20) + 5; i++)
		req[i] = pattern(i);
	for (size_t k = 0; k < nsizes; k++) {
		void *rep = NULL;
		size_t n = 0;
		ASSERT_EQ(mesh_slot_call(s, req, sizes[k], &rep, &n, 10 * SEC, 0), 0);
		ASSERT_EQ(n, sizes[k]);
		size_t bad = 0;
		for (size_t i = 0; i < n; i++)
			bad += ((unsigned char *)rep)[i] != (pattern(i) ^ 0x5a);
		EXPECT_EQ(bad, 0);
		free(rep);
	}
	/* One request each, however many pieces it took. */
	struct mesh_slot_stats st;
	ASSERT_EQ(mesh_slot_stats(s, &st), 0);
	EXPECT_UEQ(st.requests, nsizes);
	EXPECT_UEQ(st.replies, nsizes);
	free(req);
	shm_t_stop(ctl, s, pid);
}

/* meshd gives up on a request half-sent (its call timed out while the ring
 * was full): the worker drops those pieces when the next request begins. */
TEST(pieces_a_half_sent_request_is_dropped)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	pid_t pid = start(&ctl, &s, 4096, xor_handler);
	void *rep = NULL;
	size_t n = 0;
	/* The worker sleeps 300 ms in this one; the call gives up after 50. */
	EXPECT_EQ(mesh_slot_call(s, "sleep", 5, &rep, &n, 50 * MS, 0), MESH_E_TIMEOUT);
	/* Meanwhile the request ring fills after two pieces of 20000 bytes. */
	static unsigned char big[20000];
	EXPECT_EQ(mesh_slot_call(s, big, sizeof big, &rep, &n, 50 * MS, 0), MESH_E_TIMEOUT);
	/* The next call gets its own reply, neither the late one nor a mix. */
	ASSERT_EQ(mesh_slot_call(s, "\x5a\x5b", 2, &rep, &n, 5 * SEC, 0), 0);
	EXPECT_EQ(n, 2);
	EXPECT_EQ(memcmp(rep, "\x00\x01", 2), 0);
	free(rep);
	struct mesh_slot_stats st;
	ASSERT_EQ(mesh_slot_stats(s, &st), 0);
	EXPECT_UEQ(st.requests, 2); /* "sleep" and the last: the cut one never reached the handler */
	shm_t_stop(ctl, s, pid);
}

/* "N": N parts "part <i>;" 100 ms apart, one of 100000 bytes ('b') after
 * the first, then the reply "end".  "fail": a part, then a handler error. */
static int stream_handler(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *len)
{
	struct mesh_worker *w = ctx;
	char text[64];
	if (n == 4 && !memcmp(req, "fail", 4)) {
		if (mesh_worker_reply_part(w, "before;", 7) != 0)
			return -1;
		*len = (size_t)snprintf(reply, cap, "failed after a part");
		return -1;
	}
	int parts = n ? atoi(req) : 0;
	for (int i = 0; i < parts; i++) {
		int k = snprintf(text, sizeof text, "part %d;", i);
		if (i)
			usleep(600 * 1000);
		if (mesh_worker_reply_part(w, text, (size_t)k) != 0)
			return -1;
		if (i == 0) {
			static char b[100000];
			memset(b, 'b', sizeof b);
			if (mesh_worker_reply_part(w, b, sizeof b) != 0)
				return -1;
		}
	}
	/* A part over the message limit is refused, and nothing is sent. */
	if (mesh_worker_reply_part(w, "", (size_t)MESH_MSG_MAX + 1) != MESH_E_TOOBIG)
		return -1;
	memcpy(reply, "end", 3);
	*len = 3;
	return 0;
}

struct got {
	char text[256];
	unsigned nparts;
	size_t bytes;
	uint64_t first_ms;
};

static int on_part(void *arg, const void *p, size_t n)
{
	struct got *g = arg;
	if (!g->nparts++)
		g->first_ms = t_now_ms();
	g->bytes += n;
	if (n < 64)
		snprintf(g->text + strlen(g->text), sizeof g->text - strlen(g->text), "%.*s", (int)n, (const char *)p);
	else
		snprintf(g->text + strlen(g->text), sizeof g->text - strlen(g->text), "[%zu %c]", n, *(const char *)p);
	return 0;
}

TEST(pieces_streamed_parts_arrive_as_they_are_sent)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	pid_t pid = start(&ctl, &s, 16384, stream_handler);
	struct got g = {0};
	void *rep = NULL;
	size_t n = 0;
	uint64_t t0 = t_now_ms();
	ASSERT_EQ(mesh_slot_call_stream(s, "3", 1, on_part, &g, &rep, &n, 10 * SEC, 0), 0);
	uint64_t t_end = t_now_ms();
	EXPECT_STREQ(g.text, "part 0;[100000 b]part 1;part 2;");
	EXPECT_EQ(g.nparts, 4);
	EXPECT_STREQ(rep, "end");
	free(rep);
	/* The first part came before the handler slept its 1.2 s. */
	EXPECT_LT(g.first_ms - t0, 1000);
	EXPECT_GE(t_end - g.first_ms, 1000);
	fprintf(stderr, "    first part after %llu ms, reply complete after %llu ms\n",
		(unsigned long long)(g.first_ms - t0), (unsigned long long)(t_end - t0));

	/* Taken whole (mesh_slot_call), the parts and the last are joined. */
	ASSERT_EQ(mesh_slot_call(s, "2", 1, &rep, &n, 10 * SEC, 0), 0);
	EXPECT_EQ(n, 7 + 100000 + 7 + 3);
	EXPECT_EQ(memcmp(rep, "part 0;b", 8), 0);
	EXPECT_STREQ((char *)rep + 7 + 100000, "part 1;end");
	free(rep);

	/* A handler that fails after a part: the part went out, the call fails. */
	memset(&g, 0, sizeof g);
	EXPECT_EQ(mesh_slot_call_stream(s, "fail", 4, on_part, &g, &rep, &n, 10 * SEC, 0), MESH_E_REFUSED);
	EXPECT_STREQ(g.text, "before;");
	EXPECT_STREQ(rep, "failed after a part");
	free(rep);
	struct mesh_slot_stats st;
	ASSERT_EQ(mesh_slot_stats(s, &st), 0);
	EXPECT_UEQ(st.requests, 3);
	EXPECT_UEQ(st.replies, 2);
	EXPECT_UEQ(st.errors, 1);
	shm_t_stop(ctl, s, pid);
}

static int cancel_after_one(void *arg, const void *p, size_t n)
{
	(void)p;
	(void)n;
	return ++*(int *)arg >= 1 ? MESH_E_CLOSED : 0;
}

/* A caller that stops reading (its client went away) ends the call; the
 * rest of that reply is skipped by the next call. */
TEST(pieces_a_cancelled_stream_leaves_the_slot_usable)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	pid_t pid = start(&ctl, &s, 16384, stream_handler);
	int seen = 0;
	void *rep = NULL;
	size_t n = 0;
	EXPECT_EQ(mesh_slot_call_stream(s, "3", 1, cancel_after_one, &seen, &rep, &n, 10 * SEC, 0), MESH_E_CLOSED);
	EXPECT_EQ(seen, 1);
	EXPECT_TRUE(rep == NULL);
	ASSERT_EQ(mesh_slot_call(s, "1", 1, &rep, &n, 10 * SEC, 0), 0);
	EXPECT_EQ(n, 7 + 100000 + 3);
	EXPECT_STREQ((char *)rep + 7 + 100000, "end");
	free(rep);
	EXPECT_TRUE(mesh_slot_failed(s) == NULL);
	shm_t_stop(ctl, s, pid);
}

/* A worker that sends MORE pieces past the 16 MiB message limit fails its
 * slot (meshd never buffers more than the limit for one part). */
TEST(pieces_a_reply_over_the_limit_fails_the_slot)
{
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 0, 65536), 0);
	mesh_slot_arm(s, 1);
	pid_t pid = fork();
	if (pid == 0) {
		struct mesh_slot_map m;
		if (mesh__slot_map(mesh_slot_fd(s), mesh_slot_bell(s), 0, &m) < 0)
			_exit(2);
		struct mesh_msg msg;
		if (mesh_ring_wait_data(&m.req, 0, 10 * SEC, NULL) != 0 || mesh_ring_peek(&m.req, &msg) != 0)
			_exit(3);
		uint32_t seq = msg.seq;
		mesh_ring_pop(&m.req);
		static char piece[32768 - 16];
		for (;;) {
			int rc = mesh_ring_put(&m.rep, MESH_MSG_MORE, seq, piece, sizeof piece);
			if (rc == -EAGAIN)
				rc = mesh_ring_wait_space(&m.rep, sizeof piece, 0, 200 * MS, NULL);
			if (rc < 0)
				_exit(0); /* meshd stopped reading */
		}
	}
	void *rep = NULL;
	size_t n = 0;
	EXPECT_EQ(mesh_slot_call(s, "q", 1, &rep, &n, 10 * SEC, 0), MESH_E_CORRUPT);
	EXPECT_TRUE(rep == NULL);
	EXPECT_CONTAINS(mesh_slot_failed(s), "message limit");
	EXPECT_EQ(shm_t_reap(pid), 0);
	mesh_slot_free(s);
}
