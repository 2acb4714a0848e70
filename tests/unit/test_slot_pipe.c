/* The pipelined slot API (shm.h: mesh_slot_send / recv / wait_reply) and
 * libmeshworker's CHUNK messages, against a forked libmeshworker. */
#include "base/clock.h"
#include "base/err.h"
#include "mesh/worker.h"
#include "runner/t.h"
#include "shm/shm.h"
#include "unit/shm_t.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC MESH_NS_PER_S
#define MS MESH_NS_PER_MS

/* Replies "<chunk id>:<input>" ("-" for a plain request's id). */
static int tagger(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *len)
{
	uint64_t cid = mesh_worker_chunk_id(shm_t_worker);
	int k = cid == UINT64_MAX ? snprintf(reply, cap, "-:") : snprintf(reply, cap, "%" PRIu64 ":", cid);
	if ((size_t)k + n > cap)
		return -1;
	memcpy((char *)reply + k, req, n);
	*len = (size_t)k + n;
	if (n == 5 && !memcmp(req, "crash", 5))
		kill(getpid(), SIGKILL);
	if (n == 3 && !memcmp(req, "big", 3)) { /* larger than the ring: sent in pieces */
		if (cap < 20000)
			return -1;
		memset(reply, 'z', 20000);
		*len = 20000;
	}
	if (n == 5 && !memcmp(req, "parts", 5)) { /* a streamed reply: two parts, then the last */
		if (mesh_worker_reply_part(shm_t_worker, "p1-", 3) < 0 || mesh_worker_reply_part(shm_t_worker, "p2-", 3) < 0)
			return -1;
		memcpy(reply, "end", 3);
		*len = 3;
	}
	return 0;
}

static void expect_msg(struct mesh_ctl *ctl, enum mesh_ctl_kind kind)
{
	struct mesh_ctl_msg m;
	ASSERT_EQ(mesh_ctl_wait(ctl, &m, 10 * SEC), 0);
	ASSERT_EQ(m.kind, kind);
}

/* A tagger worker on a fresh slot (index, ring bytes as mesh_slot_create
 * takes them), online with gen 1. */
static pid_t start(struct mesh_ctl **ctl, struct mesh_slot **s, uint32_t index, size_t ring)
{
	pid_t pid = shm_t_fork_worker(ctl, tagger, 0);
	expect_msg(*ctl, MESH_CTL_READY);
	ASSERT_EQ(mesh_slot_create(s, index, ring), 0);
	ASSERT_EQ(mesh_ctl_run(*ctl, *s, 1), 0);
	expect_msg(*ctl, MESH_CTL_ONLINE);
	return pid;
}

static void chunk_hdr(uint8_t h[MESH_CHUNK_HDR], uint64_t cid, uint32_t attempt)
{
	for (int i = 0; i < 8; i++)
		h[i] = (uint8_t)(cid >> (8 * i));
	for (int i = 0; i < 4; i++)
		h[8 + i] = (uint8_t)(attempt >> (8 * i));
}

static int recv_wait(struct mesh_slot *s, struct mesh_slot_reply *r)
{
	for (int i = 0; i < 1000; i++) {
		int rc = mesh_slot_recv(s, r);
		if (rc != -EAGAIN)
			return rc;
		rc = mesh_slot_wait_reply(s, 5 * SEC, NULL);
		if (rc == MESH_E_TIMEOUT)
			return rc;
	}
	return MESH_E_TIMEOUT;
}

TEST(slot_pipeline_many_chunks_in_flight_answered_in_order)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	pid_t pid = start(&ctl, &s, 2, 4096);

	/* A plain call first: the pipeline's seqs follow it. */
	void *rep;
	size_t n;
	ASSERT_EQ(mesh_slot_call(s, "x", 1, &rep, &n, 5 * SEC, 0), 0);
	EXPECT_STREQ(rep, "-:x");
	free(rep);

	/* 16 chunks in flight at once, then until the ring is full. */
	uint32_t seqs[400];
	int sent = 0, got = 0;
	char in[64];
	uint8_t h[MESH_CHUNK_HDR];
	for (; sent < 16; sent++) {
		snprintf(in, sizeof in, "input-%d", sent);
		chunk_hdr(h, 1000 + (uint64_t)sent, 1);
		ASSERT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, in, strlen(in), &seqs[sent]), 0);
	}
	EXPECT_UEQ(mesh_slot_in_flight(s), 16);
	while (got < 16) {
		struct mesh_slot_reply r;
		ASSERT_EQ(recv_wait(s, &r), 0);
		char want[80];
		snprintf(want, sizeof want, "%d:input-%d", 1000 + got, got);
		EXPECT_EQ(r.kind, MESH_MSG_REP);
		EXPECT_UEQ(r.seq, seqs[got]);
		EXPECT_STREQ(r.data, want);
		free(r.data);
		got++;
	}
	EXPECT_UEQ(mesh_slot_in_flight(s), 0);
	/* A full ring says -EAGAIN, never blocks. */
	int rc;
	char big[1000];
	memset(big, 'b', sizeof big);
	chunk_hdr(h, 7, 2);
	while (sent < 400 && (rc = mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, big, sizeof big, &seqs[sent])) == 0)
		sent++;
	EXPECT_LT(sent, 400);
	/* Larger than a record: in pieces, but only behind no other request. */
	EXPECT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, big, 5000, &seqs[0]), -EAGAIN);
	/* Over the message limit: never. */
	EXPECT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, big, MESH_CHUNK_INPUT_MAX + 1, &seqs[0]), MESH_E_TOOBIG);
	while (got < sent) {
		struct mesh_slot_reply r;
		ASSERT_EQ(recv_wait(s, &r), 0);
		EXPECT_UEQ(r.len, 2 + sizeof big);
		free(r.data);
		got++;
	}
	/* Plain calls work again once the pipeline is empty. */
	ASSERT_EQ(mesh_slot_call(s, "y", 1, &rep, &n, 5 * SEC, 0), 0);
	EXPECT_STREQ(rep, "-:y");
	free(rep);

	shm_t_stop(ctl, s, pid);
}

/* The replies to chunks 10 + i for i in [from, to), sent as "<word>-<i>",
 * in order, with their seqs. */
static void expect_tagged(struct mesh_slot *s, const uint32_t *seqs, int from, int to, const char *word)
{
	for (int i = from; i < to; i++) {
		struct mesh_slot_reply r;
		ASSERT_EQ(recv_wait(s, &r), 0);
		char want[32];
		snprintf(want, sizeof want, "%d:%s-%d", 10 + i, word, i);
		EXPECT_UEQ(r.seq, seqs[i]);
		EXPECT_STREQ(r.data, want);
		free(r.data);
	}
}

/* Held requests (mesh_slot_send_held) reach the worker only when
 * published, all at once and in order; a plain send publishes what was
 * held before it. */
TEST(slot_pipeline_held_requests_go_out_when_published)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	pid_t pid = start(&ctl, &s, 3, 4096);
	uint32_t seqs[6];
	uint8_t h[MESH_CHUNK_HDR];
	char in[16];
	for (int i = 0; i < 3; i++) {
		snprintf(in, sizeof in, "held-%d", i);
		chunk_hdr(h, 10 + (uint64_t)i, 1);
		ASSERT_EQ(mesh_slot_send_held(s, MESH_MSG_CHUNK, h, sizeof h, in, strlen(in), &seqs[i]), 0);
	}
	EXPECT_UEQ(mesh_slot_in_flight(s), 3);
	/* The worker (spinning or asleep) sees none of them yet. */
	usleep(100 * 1000);
	EXPECT_UEQ(mesh_slot_taken(s), 0);
	struct mesh_slot_reply r;
	EXPECT_EQ(mesh_slot_recv(s, &r), -EAGAIN);
	mesh_slot_publish(s);
	expect_tagged(s, seqs, 0, 3, "held");
	EXPECT_UEQ(mesh_slot_taken(s), 3);
	/* Two held, then a plain send: all three go, in order. */
	for (int i = 3; i < 6; i++) {
		snprintf(in, sizeof in, "next-%d", i);
		chunk_hdr(h, 10 + (uint64_t)i, 1);
		if (i < 5)
			ASSERT_EQ(mesh_slot_send_held(s, MESH_MSG_CHUNK, h, sizeof h, in, strlen(in), &seqs[i]), 0);
		else
			ASSERT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, in, strlen(in), &seqs[i]), 0);
	}
	expect_tagged(s, seqs, 3, 6, "next");
	EXPECT_UEQ(mesh_slot_in_flight(s), 0);
	shm_t_stop(ctl, s, pid);
}

/* A chunk's reply larger than the ring comes as MORE pieces, and a worker
 * that streams parts sends PART records before its REP: a pipelined
 * receiver gets each reply whole, in order (it failed the slot on the
 * first MORE record before). */
TEST(slot_pipeline_joins_pieces_and_streamed_parts)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	pid_t pid = start(&ctl, &s, 2, 4096);
	static const char *const in[] = {"big", "parts", "x", "big"};
	uint32_t seqs[4];
	uint8_t h[MESH_CHUNK_HDR];
	for (int i = 0; i < 4; i++) {
		chunk_hdr(h, (uint64_t)i, 1);
		ASSERT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, in[i], strlen(in[i]), &seqs[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		struct mesh_slot_reply r;
		ASSERT_EQ(recv_wait(s, &r), 0);
		EXPECT_EQ(r.kind, MESH_MSG_REP);
		EXPECT_UEQ(r.seq, seqs[i]);
		if (!strcmp(in[i], "big")) {
			ASSERT_UEQ(r.len, 20000);
			size_t z = 0;
			while (z < r.len && ((char *)r.data)[z] == 'z')
				z++;
			EXPECT_UEQ(z, 20000);
		} else if (!strcmp(in[i], "parts")) {
			EXPECT_STREQ(r.data, "p1-p2-end");
		} else {
			EXPECT_STREQ(r.data, "2:x");
		}
		free(r.data);
	}
	EXPECT_UEQ(mesh_slot_in_flight(s), 0);
	EXPECT_FALSE(mesh_slot_failed(s));
	shm_t_stop(ctl, s, pid);
}

TEST(slot_pipeline_replies_before_a_crash_are_kept)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	pid_t pid = start(&ctl, &s, 0, 0);
	const char *ins[] = {"a", "b", "crash", "c"};
	uint32_t seq;
	uint8_t h[MESH_CHUNK_HDR];
	for (int i = 0; i < 4; i++) {
		chunk_hdr(h, (uint64_t)i, 1);
		ASSERT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, ins[i], strlen(ins[i]), &seq), 0);
	}
	int st;
	waitpid(pid, &st, 0);
	EXPECT_TRUE(WIFSIGNALED(st));
	/* The worker took three requests: the third killed it. */
	EXPECT_UEQ(mesh_slot_taken(s), 3);
	mesh_slot_fail(s, "worker died");
	struct mesh_slot_reply r;
	ASSERT_EQ(mesh_slot_recv(s, &r), 0);
	EXPECT_STREQ(r.data, "0:a");
	free(r.data);
	ASSERT_EQ(mesh_slot_recv(s, &r), 0);
	EXPECT_STREQ(r.data, "1:b");
	free(r.data);
	EXPECT_EQ(mesh_slot_recv(s, &r), MESH_E_STATE);
	EXPECT_EQ(mesh_slot_wait_reply(s, SEC, NULL), 1);
	EXPECT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, "d", 1, &seq), MESH_E_STATE);
	mesh_ctl_free(ctl);
	mesh_slot_free(s);
}

/* A reply out of order, or to a request never sent, fails the slot. */
TEST(slot_pipeline_out_of_order_reply_fails_the_slot)
{
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 0, 4096), 0);
	mesh_slot_arm(s, 1);
	uint32_t a, b;
	ASSERT_EQ(mesh_slot_send(s, MESH_MSG_REQ, NULL, 0, "a", 1, &a), 0);
	ASSERT_EQ(mesh_slot_send(s, MESH_MSG_REQ, NULL, 0, "b", 1, &b), 0);
	struct mesh_slot_map m;
	ASSERT_EQ(mesh__slot_map(mesh_slot_fd(s), mesh_slot_bell(s), 0, &m), 0);
	ASSERT_EQ(mesh_ring_put(&m.rep, MESH_MSG_REP, b, "B", 1), 0);
	struct mesh_slot_reply r;
	EXPECT_EQ(mesh_slot_recv(s, &r), MESH_E_CORRUPT);
	EXPECT_CONTAINS(mesh_slot_failed(s), "where 1 was next");
	mesh__slot_unmap(&m);
	mesh_slot_free(s);
}

/* A reply waiter told to quit (its own word, then mesh_slot_kick_reply)
 * returns at once, not at its timeout; the slot is not failed by it. */
struct quit_arg {
	struct mesh_slot *s;
	_Atomic uint32_t quit;
	int rc;
	uint64_t ns;
};

static void *wait_quit(void *p)
{
	struct quit_arg *a = p;
	uint64_t t0 = mesh_mono_ns();
	a->rc = mesh_slot_wait_reply(a->s, 10 * SEC, &a->quit);
	a->ns = mesh_mono_ns() - t0;
	return NULL;
}

TEST(slot_pipeline_reply_waiter_quits_when_told)
{
	struct quit_arg a = {.rc = -1};
	ASSERT_EQ(mesh_slot_create(&a.s, 0, 4096), 0);
	mesh_slot_arm(a.s, 1);
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, wait_quit, &a), 0);
	usleep(100 * 1000); /* asleep on the reply ring by now */
	atomic_store(&a.quit, 1);
	mesh_slot_kick_reply(a.s);
	pthread_join(th, NULL);
	EXPECT_EQ(a.rc, 1);
	EXPECT_TRUE(a.ns < 5 * SEC);
	EXPECT_TRUE(mesh_slot_failed(a.s) == NULL);
	/* A kick alone (no quit) is not an answer: the wait goes on to its timeout. */
	atomic_store(&a.quit, 0);
	uint64_t t0 = mesh_mono_ns();
	mesh_slot_kick_reply(a.s);
	EXPECT_EQ(mesh_slot_wait_reply(a.s, 50 * 1000 * 1000ull, &a.quit), MESH_E_TIMEOUT);
	EXPECT_TRUE(mesh_mono_ns() - t0 >= 50 * 1000 * 1000ull);
	mesh_slot_free(a.s);
}

/* A chunk whose input is larger than the ring goes in pieces, as a call's
 * request does (the pipeline refused it, MESH_E_TOOBIG, before): not
 * behind another request, nothing else taken while it goes in, its
 * pieces put by the reply waiter as the worker takes them; the worker's
 * handler sees the input whole and its reply (larger than the ring too)
 * comes back whole. */
TEST(slot_pipeline_sends_a_request_larger_than_the_ring_in_pieces)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	pid_t pid = start(&ctl, &s, 3, 4096);
	enum { BIG = 20000 };
	static char in[BIG];
	for (size_t i = 0; i < BIG; i++)
		in[i] = (char)('a' + i % 23);
	uint8_t h[MESH_CHUNK_HDR];
	uint32_t seq[4];
	chunk_hdr(h, 1, 1);
	ASSERT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, "small", 5, &seq[0]), 0);
	chunk_hdr(h, 2, 1);
	EXPECT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, in, BIG, &seq[1]), -EAGAIN);
	struct mesh_slot_reply r;
	ASSERT_EQ(recv_wait(s, &r), 0);
	EXPECT_STREQ(r.data, "1:small");
	free(r.data);
	ASSERT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, in, BIG, &seq[1]), 0);
	EXPECT_EQ(mesh_slot_sending(s), 1);
	chunk_hdr(h, 3, 1);
	EXPECT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, "after", 5, &seq[2]), -EAGAIN);
	ASSERT_EQ(recv_wait(s, &r), 0);
	EXPECT_EQ(r.kind, MESH_MSG_REP);
	EXPECT_UEQ(r.seq, seq[1]);
	ASSERT_UEQ(r.len, 2 + BIG);
	EXPECT_TRUE(!memcmp(r.data, "2:", 2) && !memcmp((char *)r.data + 2, in, BIG));
	free(r.data);
	EXPECT_EQ(mesh_slot_sending(s), 0);
	/* The pipeline goes on as before, and a call too. */
	ASSERT_EQ(mesh_slot_send(s, MESH_MSG_CHUNK, h, sizeof h, "after", 5, &seq[2]), 0);
	ASSERT_EQ(recv_wait(s, &r), 0);
	EXPECT_STREQ(r.data, "3:after");
	free(r.data);
	void *rep;
	size_t n;
	ASSERT_EQ(mesh_slot_call(s, "y", 1, &rep, &n, 5 * SEC, 0), 0);
	EXPECT_STREQ(rep, "-:y");
	free(rep);
	EXPECT_FALSE(mesh_slot_failed(s));
	shm_t_stop(ctl, s, pid);
}

/* The waiter that puts a request's pieces waits for room like it waits
 * for a reply: its quit word and the slot's failure end that wait at once
 * (no worker here takes the pieces). */
TEST(slot_pipeline_a_send_in_pieces_waits_as_a_reply_does)
{
	struct quit_arg a = {.rc = -1};
	ASSERT_EQ(mesh_slot_create(&a.s, 0, 4096), 0);
	mesh_slot_arm(a.s, 1);
	static char in[20000];
	memset(in, 'p', sizeof in);
	uint8_t h[MESH_CHUNK_HDR];
	uint32_t seq;
	chunk_hdr(h, 5, 1);
	ASSERT_EQ(mesh_slot_send(a.s, MESH_MSG_CHUNK, h, sizeof h, in, sizeof in, &seq), 0);
	EXPECT_EQ(mesh_slot_sending(a.s), 1);
	uint64_t t0 = mesh_mono_ns();
	EXPECT_EQ(mesh_slot_wait_reply(a.s, 50 * MS, NULL), MESH_E_TIMEOUT);
	EXPECT_TRUE(mesh_mono_ns() - t0 >= 50 * MS);
	EXPECT_EQ(mesh_slot_sending(a.s), 1);
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, wait_quit, &a), 0);
	usleep(100 * 1000); /* asleep on the request ring's room by now */
	atomic_store(&a.quit, 1);
	mesh_slot_kick_reply(a.s);
	pthread_join(th, NULL);
	EXPECT_EQ(a.rc, 1);
	EXPECT_TRUE(a.ns < 5 * SEC);
	atomic_store(&a.quit, 0);
	a.rc = -1;
	ASSERT_EQ(pthread_create(&th, NULL, wait_quit, &a), 0);
	usleep(100 * 1000);
	mesh_slot_fail(a.s, "its worker died");
	pthread_join(th, NULL);
	EXPECT_EQ(a.rc, 1);
	EXPECT_TRUE(a.ns < 5 * SEC);
	/* A new run forgets the half-sent request. */
	mesh_slot_arm(a.s, 2);
	EXPECT_EQ(mesh_slot_sending(a.s), 0);
	mesh_slot_free(a.s);
}
