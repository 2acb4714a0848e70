/* Slots and the control channel (src/shm/shm.h), meshd's side against
 * forked workers: libmeshworker itself, a slow one, and hostile ones. */
#include "base/clock.h"
#include "base/err.h"
#include "mesh/worker.h"
#include "runner/t.h"
#include "shm/shm.h"
#include "unit/shm_t.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC MESH_NS_PER_S
#define MS MESH_NS_PER_MS

TEST(ctl_parse_table)
{
	static const struct {
		const char *in;
		int rc;
		enum mesh_ctl_kind kind;
		uint32_t gen;
	} rows[] = {
		{"ready", 0, MESH_CTL_READY, 0},
		{"online 1", 0, MESH_CTL_ONLINE, 1},
		{"online 4294967295", 0, MESH_CTL_ONLINE, 4294967295u},
		{"halted 7", 0, MESH_CTL_HALTED, 7},
		{"halted 0", 0, MESH_CTL_HALTED, 0},
		{"fail no such slot", 0, MESH_CTL_FAIL, 0},
		{"online 0", MESH_E_PROTO, 0, 0},
		{"online 4294967296", MESH_E_PROTO, 0, 0},
		{"online 01", MESH_E_PROTO, 0, 0},
		{"online +1", MESH_E_PROTO, 0, 0},
		{"online -1", MESH_E_PROTO, 0, 0},
		{"online", MESH_E_PROTO, 0, 0},
		{"online ", MESH_E_PROTO, 0, 0},
		{"online 1 2", MESH_E_PROTO, 0, 0},
		{"online  1", MESH_E_PROTO, 0, 0},
		{"ready ", MESH_E_PROTO, 0, 0},
		{"ready now", MESH_E_PROTO, 0, 0},
		{"READY", MESH_E_PROTO, 0, 0},
		{"fail", MESH_E_PROTO, 0, 0},
		{"fail ", MESH_E_PROTO, 0, 0},
		{"run 1 2", MESH_E_PROTO, 0, 0},
		{"", MESH_E_PROTO, 0, 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_ctl_msg m;
		int rc = mesh_ctl_parse(rows[i].in, strlen(rows[i].in), &m);
		EXPECT_EQ(rc, rows[i].rc);
		if (rc == 0) {
			EXPECT_EQ(m.kind, rows[i].kind);
			EXPECT_UEQ(m.gen, rows[i].gen);
		} else {
			EXPECT_GT(strlen(m.text), 0);
		}
	}
	struct mesh_ctl_msg m;
	EXPECT_EQ(mesh_ctl_parse("fail bad\x01\xff", 10, &m), 0);
	EXPECT_STREQ(m.text, "bad??");
	EXPECT_EQ(mesh_ctl_parse("online\0 1", 9, &m), MESH_E_PROTO);
	EXPECT_CONTAINS(m.text, "\\x00");
	char big[MESH_CTL_MAX + 2];
	memset(big, 'a', sizeof big);
	memcpy(big, "fail ", 5);
	EXPECT_EQ(mesh_ctl_parse(big, sizeof big, &m), MESH_E_PROTO);
	EXPECT_EQ(mesh_ctl_parse(big, MESH_CTL_MAX, &m), 0);
}

TEST(worker_command_parse_table)
{
	static const struct {
		const char *in;
		int rc;
		enum mesh_wcmd_kind kind;
		uint32_t gen, slot;
	} rows[] = {
		{"run 1 0", 0, MESH_WCMD_RUN, 1, 0},
		{"run 4294967295 4294967295", 0, MESH_WCMD_RUN, 4294967295u, 4294967295u},
		{"halt", 0, MESH_WCMD_HALT, 0, 0},
		{"exit", 0, MESH_WCMD_EXIT, 0, 0},
		{"run 0 0", MESH_E_PROTO, 0, 0, 0},
		{"run 1", MESH_E_PROTO, 0, 0, 0},
		{"run 1 ", MESH_E_PROTO, 0, 0, 0},
		{"run 1 2 3", MESH_E_PROTO, 0, 0, 0},
		{"run  1 2", MESH_E_PROTO, 0, 0, 0},
		{"run 1 02", MESH_E_PROTO, 0, 0, 0},
		{"halt ", MESH_E_PROTO, 0, 0, 0},
		{"exits", MESH_E_PROTO, 0, 0, 0},
		{"", MESH_E_PROTO, 0, 0, 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_wcmd c;
		int rc = mesh__wcmd_parse(rows[i].in, strlen(rows[i].in), &c);
		EXPECT_EQ(rc, rows[i].rc);
		if (rc == 0) {
			EXPECT_EQ(c.kind, rows[i].kind);
			EXPECT_UEQ(c.gen, rows[i].gen);
			EXPECT_UEQ(c.slot, rows[i].slot);
		}
	}
}

TEST(slot_create_geometry_and_seals)
{
	struct mesh_slot *s;
	EXPECT_EQ(mesh_slot_create(&s, 0, 3000), MESH_E_RANGE);
	EXPECT_EQ(mesh_slot_create(&s, 0, 2048), MESH_E_RANGE);
	ASSERT_EQ(mesh_slot_create(&s, 5, 8192), 0);
	EXPECT_EQ(mesh_slot_index(s), 5);
	EXPECT_EQ(mesh_slot_ring_cap(s), 8192);
	/* Messages are not bounded by the ring: they travel in pieces. */
	EXPECT_EQ(mesh_slot_max_msg(s), MESH_MSG_MAX);
	int fd = mesh_slot_fd(s);
	EXPECT_EQ(lseek(fd, 0, SEEK_END), 4096 + 2 * 8192);
	/* A worker holding the fd cannot shrink it under meshd's mapping. */
	EXPECT_EQ(ftruncate(fd, 100), -1);
	EXPECT_EQ(errno, EPERM);
	EXPECT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	struct mesh_slot_map m;
	EXPECT_EQ(mesh__slot_map(fd, -1, 4, &m), MESH_E_CORRUPT);
	ASSERT_EQ(mesh__slot_map(fd, -1, 5, &m), 0);
	EXPECT_UEQ(m.req.cap, 8192);
	mesh__slot_unmap(&m);
	mesh_slot_free(s);
	/* Not a slot at all. */
	int other = memfd_create("x", MFD_CLOEXEC);
	ASSERT_EQ(ftruncate(other, 4096 + 2 * 4096), 0);
	EXPECT_EQ(mesh__slot_map(other, -1, 0, &m), MESH_E_FOREIGN);
	close(other);
}

static void expect_msg(struct mesh_ctl *ctl, enum mesh_ctl_kind kind, uint32_t gen)
{
	struct mesh_ctl_msg m;
	int rc = mesh_ctl_wait(ctl, &m, 10 * SEC);
	EXPECT_EQ(rc, 0);
	EXPECT_EQ(m.kind, kind);
	EXPECT_UEQ(m.gen, gen);
}

static int upper(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *len)
{
	const char *q = req;
	if (n >= 4 && memcmp(q, "fail", 4) == 0) {
		*len = (size_t)snprintf(reply, cap, "cannot do '%.*s'", (int)n, q);
		return -1;
	}
	if (n >= 5 && memcmp(q, "quiet", 5) == 0)
		return -EINVAL;
	if (n >= 4 && memcmp(q, "long", 4) == 0) {
		*len = cap + 1;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		((char *)reply)[i] = (char)(q[i] >= 'a' && q[i] <= 'z' ? q[i] - 32 : q[i]);
	*len = n;
	return 0;
}

TEST(slot_call_through_libmeshworker)
{
	struct mesh_ctl *ctl;
	pid_t pid = shm_t_fork_worker(&ctl, upper, 0);
	expect_msg(ctl, MESH_CTL_READY, 0);
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 3, 4096), 0);
	ASSERT_EQ(mesh_ctl_run(ctl, s, 1), 0);
	expect_msg(ctl, MESH_CTL_ONLINE, 1);

	void *rep;
	size_t n;
	ASSERT_EQ(mesh_slot_call(s, "hello", 5, &rep, &n, 5 * SEC, 10000), 0);
	EXPECT_EQ(n, 5);
	EXPECT_STREQ(rep, "HELLO");
	free(rep);
	EXPECT_EQ(mesh_slot_call(s, "fail me", 7, &rep, &n, 5 * SEC, 0), MESH_E_REFUSED);
	EXPECT_STREQ(rep, "cannot do 'fail me'");
	free(rep);
	EXPECT_EQ(mesh_slot_call(s, "quiet", 5, &rep, &n, 5 * SEC, 0), MESH_E_REFUSED);
	EXPECT_CONTAINS(rep, "handler failed");
	free(rep);
	EXPECT_EQ(mesh_slot_call(s, "long", 4, &rep, &n, 5 * SEC, 0), MESH_E_REFUSED);
	EXPECT_CONTAINS(rep, "longer than the message limit");
	free(rep);
	/* Zero-length and the largest request, which wraps in the ring. */
	EXPECT_EQ(mesh_slot_call(s, "", 0, &rep, &n, 5 * SEC, 0), 0);
	EXPECT_EQ(n, 0);
	free(rep);
	size_t max = mesh_slot_max_msg(s);
	char *big = malloc(max + 1);
	memset(big, 'q', max + 1);
	EXPECT_EQ(mesh_slot_call(s, big, max + 1, &rep, &n, 5 * SEC, 0), MESH_E_TOOBIG);
	EXPECT_TRUE(rep == NULL);
	ASSERT_EQ(mesh_slot_call(s, big, max, &rep, &n, 5 * SEC, 0), 0);
	EXPECT_EQ(n, max);
	EXPECT_EQ(((char *)rep)[max - 1], 'Q');
	free(rep);
	free(big);

	struct mesh_slot_stats st;
	ASSERT_EQ(mesh_slot_stats(s, &st), 0);
	EXPECT_EQ(st.state, MESH_SLOT_RUNNING);
	EXPECT_EQ(st.online, 1);
	EXPECT_UEQ(st.requests, 6);
	EXPECT_UEQ(st.replies, 3);
	EXPECT_UEQ(st.errors, 3);
	EXPECT_GT(st.heartbeat_ns, 0);

	/* HALT: the worker stops, says halted, and takes the next run on another slot. */
	EXPECT_EQ(mesh_ctl_halt(ctl, s), 0);
	expect_msg(ctl, MESH_CTL_HALTED, 1);
	EXPECT_EQ(mesh_slot_call(s, "x", 1, &rep, &n, SEC, 0), MESH_E_STATE);
	ASSERT_EQ(mesh_slot_stats(s, &st), 0);
	EXPECT_EQ(st.state, MESH_SLOT_HALTED);
	EXPECT_EQ(st.online, 0);
	struct mesh_slot *s2;
	ASSERT_EQ(mesh_slot_create(&s2, 4, 0), 0);
	ASSERT_EQ(mesh_ctl_run(ctl, s2, 2), 0);
	expect_msg(ctl, MESH_CTL_ONLINE, 2);
	ASSERT_EQ(mesh_slot_call(s2, "again", 5, &rep, &n, 5 * SEC, 0), 0);
	EXPECT_STREQ(rep, "AGAIN");
	free(rep);
	/* A run while running is refused, and the worker keeps serving. */
	ASSERT_EQ(mesh_ctl_run(ctl, s, 3), 0);
	struct mesh_ctl_msg m;
	ASSERT_EQ(mesh_ctl_wait(ctl, &m, 10 * SEC), 0);
	EXPECT_EQ(m.kind, MESH_CTL_FAIL);
	EXPECT_CONTAINS(m.text, "while gen 2 runs");
	ASSERT_EQ(mesh_slot_call(s2, "still", 5, &rep, &n, 5 * SEC, 0), 0);
	free(rep);

	EXPECT_EQ(mesh_ctl_exit(ctl, s2), 0);
	EXPECT_EQ(shm_t_reap(pid), 0);
	EXPECT_EQ(mesh_ctl_wait(ctl, &m, SEC), MESH_E_CLOSED);
	mesh_ctl_free(ctl);
	mesh_slot_free(s);
	mesh_slot_free(s2);
}

/* A raw worker mapping the slot itself: answers request 1 late, then 2 on time. */
TEST(slot_call_times_out_and_skips_late_replies)
{
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 0, 4096), 0);
	mesh_slot_arm(s, 1);
	pid_t pid = fork();
	if (pid == 0) {
		struct mesh_slot_map m;
		if (mesh__slot_map(mesh_slot_fd(s), mesh_slot_bell(s), 0, &m) < 0)
			_exit(2);
		for (int i = 0; i < 2; i++) {
			struct mesh_msg msg;
			if (mesh_ring_wait_data(&m.req, 0, 10 * SEC, NULL) != 0 || mesh_ring_peek(&m.req, &msg) != 0)
				_exit(3);
			uint32_t seq = msg.seq;
			mesh_ring_pop(&m.req);
			if (i == 0)
				usleep(300000);
			char r[16];
			snprintf(r, sizeof r, "reply %u", seq);
			mesh_ring_put(&m.rep, MESH_MSG_REP, seq, r, strlen(r));
		}
		_exit(0);
	}
	void *rep;
	size_t n;
	uint64_t t0 = mesh_mono_ns();
	EXPECT_EQ(mesh_slot_call(s, "a", 1, &rep, &n, 100 * MS, 0), MESH_E_TIMEOUT);
	uint64_t el = mesh_mono_ns() - t0;
	EXPECT_GE(el, 100 * MS);
	EXPECT_LT(el, 3 * SEC);
	EXPECT_TRUE(rep == NULL);
	usleep(400000); /* the late reply 1 is now in the ring */
	ASSERT_EQ(mesh_slot_call(s, "b", 1, &rep, &n, 5 * SEC, 0), 0);
	EXPECT_STREQ(rep, "reply 2");
	free(rep);
	EXPECT_TRUE(mesh_slot_failed(s) == NULL);
	EXPECT_EQ(shm_t_reap(pid), 0);
	mesh_slot_free(s);
}

/* Each way a worker can break its slot: the call or stats fail the slot
 * with a reason naming the problem, and later calls refuse at once. */
TEST(slot_hostile_words_fail_the_slot_with_a_reason)
{
	static const struct {
		int what;
		const char *why;
	} rows[] = {
		{0, "head"}, {1, "length"}, {2, "kind"}, {3, "never sent"}, {4, "reserved"},
		{5, "state word"}, {6, "online word"}, {7, "future"}, {8, "replies"}, {9, "tail"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_slot *s;
		ASSERT_EQ(mesh_slot_create(&s, 9, 4096), 0);
		mesh_slot_arm(s, 1);
		struct mesh_slot_map m;
		ASSERT_EQ(mesh__slot_map(mesh_slot_fd(s), mesh_slot_bell(s), 9, &m), 0);
		struct mesh_slot_hdr *h = m.hdr;
		uint32_t *rec = (uint32_t *)((uint8_t *)h + MESH_SLOT_HDR_SIZE + 4096);
		int rc = 0;
		void *rep = NULL;
		size_t n;
		struct mesh_slot_stats st;
		if (rows[i].what <= 4) {
			mesh_ring_put(&m.rep, MESH_MSG_REP, 1, "ok", 2);
			switch (rows[i].what) {
			case 0: atomic_store(&h->rep.head, 1ull << 40); break;
			case 1: rec[0] = 0xfffffff0u; break;
			case 2: rec[1] = MESH_MSG_REQ; break;
			case 3: rec[2] = 5; break;
			case 4: rec[3] = 0xdead; break;
			}
			rc = mesh_slot_call(s, "q", 1, &rep, &n, SEC, 0);
		} else if (rows[i].what == 9) {
			/* Fill the request ring so meshd must read tail, then break it. */
			char big[2000] = {0};
			for (int k = 0; k < 2; k++)
				EXPECT_EQ(mesh_slot_call(s, big, sizeof big, &rep, &n, 10 * MS, 0), MESH_E_TIMEOUT);
			atomic_store(&h->req.tail, 1ull << 50);
			rc = mesh_slot_call(s, big, sizeof big, &rep, &n, SEC, 0);
		} else {
			switch (rows[i].what) {
			case 5: atomic_store(&h->state, 99); break;
			case 6: atomic_store(&h->online, 2); break;
			case 7: atomic_store(&h->heartbeat_ns, UINT64_MAX - 5); break;
			case 8: atomic_store(&h->replies, 3); break;
			}
			rc = mesh_slot_stats(s, &st);
		}
		EXPECT_EQ(rc, MESH_E_CORRUPT);
		EXPECT_TRUE(rep == NULL);
		const char *why = mesh_slot_failed(s);
		ASSERT_TRUE(why != NULL);
		EXPECT_CONTAINS(why, "slot 9");
		EXPECT_CONTAINS(why, rows[i].why);
		EXPECT_EQ(mesh_slot_call(s, "q", 1, &rep, &n, SEC, 0), MESH_E_STATE);
		/* Re-arming for a new run clears the failure. */
		mesh_slot_arm(s, 2);
		EXPECT_TRUE(mesh_slot_failed(s) == NULL);
		mesh__slot_unmap(&m);
		mesh_slot_free(s);
	}
}

/* A hostile worker process scribbles random bytes over its whole slot while
 * meshd calls and reads stats: the slot ends failed with a reason, every call
 * returns a clean error, and this process is unharmed. */
TEST(slot_scribbling_worker_fails_its_slot_only)
{
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 1, 4096), 0);
	int corrupt = 0, other = 0, ok = 0;
	for (int round = 0; round < 20; round++) {
		mesh_slot_arm(s, (uint32_t)round + 1);
		pid_t pid = fork();
		if (pid == 0) {
			struct mesh_slot_map m;
			if (mesh__slot_map(mesh_slot_fd(s), mesh_slot_bell(s), 1, &m) < 0)
				_exit(2);
			uint8_t *b = (uint8_t *)m.hdr;
			uint32_t x = (uint32_t)round * 2654435761u + 1;
			for (;;) {
				x ^= x << 13, x ^= x >> 17, x ^= x << 5;
				/* Mostly the words meshd reads, sometimes anywhere. */
				size_t off = (x & 3) ? 64 + (x >> 8) % 512 : (x >> 8) % m.size;
				b[off] = (uint8_t)(x >> 24);
				if ((x & 0xff) == 0)
					atomic_store(&m.hdr->rep.head, (uint64_t)x << (x & 31));
			}
		}
		for (int k = 0; k < 10 && !mesh_slot_failed(s); k++) {
			void *rep;
			size_t n;
			struct mesh_slot_stats st;
			int rc = mesh_slot_call(s, "req", 3, &rep, &n, 20 * MS, 0);
			if (rc == 0 || rc == MESH_E_REFUSED) {
				ok++;
				free(rep);
			} else if (rc == MESH_E_CORRUPT) {
				corrupt++;
			} else {
				EXPECT_TRUE(rc == MESH_E_TIMEOUT || rc == MESH_E_STATE);
				other++;
			}
			mesh_slot_stats(s, &st);
		}
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		EXPECT_TRUE(mesh_slot_failed(s) != NULL);
		if (mesh_slot_failed(s))
			EXPECT_CONTAINS(mesh_slot_failed(s), "slot 1");
	}
	EXPECT_GT(corrupt, 0);
	/* A random scribble is not a valid reply to the right request. */
	EXPECT_EQ(ok, 0);
	mesh_slot_free(s);
}

TEST(ctl_recv_closes_passed_fds_and_sees_eof)
{
	struct mesh_ctl *ctl;
	int child;
	ASSERT_EQ(mesh_ctl_pair(&ctl, &child), 0);
	struct mesh_ctl_msg m;
	EXPECT_EQ(mesh_ctl_recv(ctl, &m), -EAGAIN);
	int before = t_count_fds();
	/* A worker passing an fd back: refused, and the fd does not leak. */
	int pipefd[2];
	ASSERT_EQ(pipe(pipefd), 0);
	ASSERT_EQ(mesh__ctl_send(child, "ready", pipefd[0]), 0);
	close(pipefd[0]);
	close(pipefd[1]);
	EXPECT_EQ(mesh_ctl_recv(ctl, &m), MESH_E_PROTO);
	EXPECT_CONTAINS(m.text, "file descriptors");
	EXPECT_EQ(t_count_fds(), before);
	char big[600];
	memset(big, 'x', sizeof big);
	ASSERT_EQ(send(child, big, sizeof big, 0), (ssize_t)sizeof big);
	EXPECT_EQ(mesh_ctl_recv(ctl, &m), MESH_E_PROTO);
	EXPECT_CONTAINS(m.text, "too long");
	ASSERT_EQ(mesh__ctl_send(child, "ready", -1), 0);
	EXPECT_EQ(mesh_ctl_recv(ctl, &m), 0);
	EXPECT_EQ(m.kind, MESH_CTL_READY);
	EXPECT_EQ(mesh_ctl_wait(ctl, &m, 50 * MS), MESH_E_TIMEOUT);
	close(child);
	EXPECT_EQ(mesh_ctl_recv(ctl, &m), MESH_E_CLOSED);
	/* Sending to a gone worker is an error, not a SIGPIPE. */
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 0, 4096), 0);
	EXPECT_EQ(mesh_ctl_run(ctl, s, 1), MESH_E_CLOSED);
	EXPECT_EQ(mesh_ctl_exit(ctl, NULL), MESH_E_CLOSED);
	mesh_slot_free(s);
	mesh_ctl_free(ctl);
}

/* mesh_slot_fail from another thread (the host saw the worker die) wakes a
 * call that sleeps on the slot. */
static void *fail_later(void *arg)
{
	usleep(100000);
	mesh_slot_fail(arg, "slot 0: worker died (exit status %d)", 137);
	return NULL;
}

TEST(slot_fail_wakes_a_waiting_call)
{
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 0, 4096), 0);
	mesh_slot_arm(s, 1);
	pthread_t th;
	pthread_create(&th, NULL, fail_later, s);
	void *rep;
	size_t n;
	uint64_t t0 = mesh_mono_ns();
	EXPECT_EQ(mesh_slot_call(s, "x", 1, &rep, &n, 20 * SEC, 0), MESH_E_STATE);
	EXPECT_LT(mesh_mono_ns() - t0, 5 * SEC);
	pthread_join(th, NULL);
	EXPECT_STREQ(mesh_slot_failed(s), "slot 0: worker died (exit status 137)");
	mesh_slot_free(s);
}

struct later {
	struct mesh_slot *s;
	int what;
};

static void *act_later(void *arg)
{
	struct later *l = arg;
	usleep(100000);
	if (l->what == 0)
		mesh_slot_set_shutdown(l->s, MESH_SHUTDOWN_HALT);
	else
		mesh_slot_arm(l->s, 2);
	return NULL;
}

/* A HALT, or re-arming the slot for another run, cancels a call that waits
 * on a worker that will never answer: neither waits out the call's timeout. */
TEST(slot_shutdown_and_rearm_cancel_a_waiting_call)
{
	for (int what = 0; what < 2; what++) {
		struct mesh_slot *s;
		ASSERT_EQ(mesh_slot_create(&s, 0, 4096), 0);
		mesh_slot_arm(s, 1);
		struct later l = {s, what};
		pthread_t th;
		pthread_create(&th, NULL, act_later, &l);
		void *rep;
		size_t n;
		uint64_t t0 = mesh_mono_ns();
		EXPECT_EQ(mesh_slot_call(s, "x", 1, &rep, &n, 20 * SEC, 0), MESH_E_STATE);
		EXPECT_LT(mesh_mono_ns() - t0, 5 * SEC);
		pthread_join(th, NULL);
		EXPECT_TRUE(mesh_slot_failed(s) == NULL);
		mesh_slot_free(s);
	}
}
