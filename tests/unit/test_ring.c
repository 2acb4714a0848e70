/* The SPSC ring (src/shm/ring.h): boundaries, validation, wake-ups, and a
 * two-process stress over a memfd with a checksum on every message. */
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "runner/t.h"
#include "shm/ring.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* A ring in anonymous shared memory: ctl page, then data. */
struct shared_ring {
	void *mem;
	size_t size;
	struct mesh_ring_ctl *ctl;
	uint8_t *data;
	uint64_t cap;
};

static struct shared_ring make_ring(uint64_t cap)
{
	struct shared_ring s;
	s.cap = cap;
	s.size = 4096 + cap;
	s.mem = mmap(NULL, s.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (s.mem == MAP_FAILED)
		FAIL("mmap: %s", strerror(errno));
	s.ctl = s.mem;
	s.data = (uint8_t *)s.mem + 4096;
	return s;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

/* Producer and consumer views over one ring, in this process. */
static void views(struct shared_ring *s, struct mesh_ring *prod, struct mesh_ring *cons)
{
	mesh_ring_init(prod, s->ctl, s->data, s->cap);
	mesh_ring_attach(cons, s->ctl, s->data, s->cap, 0);
}

TEST(ring_empty_and_zero_length)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p, c;
	views(&s, &p, &c);
	struct mesh_msg m;
	EXPECT_EQ(mesh_ring_peek(&c, &m), -EAGAIN);
	ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 7, NULL, 0), 0);
	ASSERT_EQ(mesh_ring_peek(&c, &m), 0);
	EXPECT_EQ(m.len, 0);
	EXPECT_EQ(m.kind, MESH_MSG_REQ);
	EXPECT_EQ(m.seq, 7);
	EXPECT_EQ(m.n1 + m.n2, 0);
	mesh_ring_pop(&c);
	EXPECT_EQ(mesh_ring_peek(&c, &m), -EAGAIN);
	EXPECT_UEQ(atomic_load(&s.ctl->tail), 16);
}

TEST(ring_full_then_room_again)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p, c;
	views(&s, &p, &c);
	uint8_t buf[100];
	fill(buf, sizeof buf, 1);
	int n = 0;
	while (mesh_ring_put(&p, MESH_MSG_REQ, (uint32_t)n, buf, sizeof buf) == 0)
		n++;
	/* 100 bytes -> 16 + 112 = 128-byte records: exactly 32 fit in 4096. */
	EXPECT_EQ(n, 32);
	EXPECT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 99, NULL, 0), -EAGAIN);
	struct mesh_msg m;
	ASSERT_EQ(mesh_ring_peek(&c, &m), 0);
	EXPECT_EQ(m.seq, 0);
	mesh_ring_pop(&c);
	EXPECT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 32, buf, sizeof buf), 0);
	for (int i = 1; i <= 32; i++) {
		ASSERT_EQ(mesh_ring_peek(&c, &m), 0);
		EXPECT_EQ(m.seq, (uint32_t)i);
		uint8_t out[100];
		mesh_msg_copy(&m, out);
		EXPECT_EQ(memcmp(out, buf, sizeof buf), 0);
		mesh_ring_pop(&c);
	}
	EXPECT_EQ(mesh_ring_peek(&c, &m), -EAGAIN);
}

TEST(ring_wraps_around_with_split_copies)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p, c;
	views(&s, &p, &c);
	uint8_t in[3000], out[3000];
	int split = 0;
	/* Sizes chosen so records straddle the end at many offsets. */
	for (uint32_t i = 0; i < 2000; i++) {
		size_t n = (i * 397u) % 3000u;
		fill(in, n, i);
		ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, i, in, n), 0);
		struct mesh_msg m;
		ASSERT_EQ(mesh_ring_peek(&c, &m), 0);
		ASSERT_EQ(m.len, n);
		ASSERT_EQ(m.seq, i);
		ASSERT_EQ(m.n1 + m.n2, n);
		split += m.n2 > 0;
		mesh_msg_copy(&m, out);
		ASSERT_EQ(memcmp(in, out, n), 0);
		mesh_ring_pop(&c);
	}
	EXPECT_GT(split, 100);
	EXPECT_GT(atomic_load(&s.ctl->head), 4096ull * 100);
}

TEST(ring_largest_message_fits_at_every_offset)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p, c;
	views(&s, &p, &c);
	size_t max = MESH_RING_MAX_MSG(4096);
	EXPECT_EQ(max, 4080);
	uint8_t *in = malloc(max + 1), *out = malloc(max + 1);
	EXPECT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, in, max + 1), MESH_E_TOOBIG);
	for (uint32_t k = 0; k < 4096 / 16; k++) {
		/* Move both indices by one 16-byte step, then send the largest. */
		struct mesh_msg m;
		ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, NULL, 0), 0);
		ASSERT_EQ(mesh_ring_peek(&c, &m), 0);
		mesh_ring_pop(&c);
		fill(in, max, k);
		ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REP, k, in, max), 0);
		EXPECT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, NULL, 0), -EAGAIN);
		ASSERT_EQ(mesh_ring_peek(&c, &m), 0);
		ASSERT_EQ(m.len, max);
		mesh_msg_copy(&m, out);
		ASSERT_EQ(memcmp(in, out, max), 0);
		mesh_ring_pop(&c);
	}
	free(in);
	free(out);
}

/* Each broken index or header: peek reports MESH_E_CORRUPT with a reason and
 * does not move. */
TEST(ring_consumer_rejects_impossible_input)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p, c;
	struct mesh_msg m;
	static const struct {
		int what;
		const char *why;
	} rows[] = {
		{0, "outside"}, {1, "16-aligned"}, {2, "length"}, {3, "kind"}, {4, "reserved"}, {5, "length"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		views(&s, &p, &c);
		ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REP, 1, "hello", 5), 0);
		uint32_t *h = (uint32_t *)s.data;
		switch (rows[i].what) {
		case 0: atomic_store(&s.ctl->head, 4096 + 32); break;
		case 1: atomic_store(&s.ctl->head, 24); break;
		case 2: h[0] = 4096; break;
		case 3: h[1] = 77; break;
		case 4: h[3] = 1; break;
		case 5: h[0] = 17; break; /* record of 48 > the 32 written */
		}
		EXPECT_EQ(mesh_ring_peek(&c, &m), MESH_E_CORRUPT);
		EXPECT_CONTAINS(c.why, rows[i].why);
		EXPECT_UEQ(c.pos, 0);
	}
}

TEST(ring_producer_rejects_impossible_tail)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p;
	uint8_t buf[1000] = {0};
	mesh_ring_init(&p, s.ctl, s.data, s.cap);
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, buf, sizeof buf), 0);
	/* Full: the producer must look at tail.  A tail past head is impossible. */
	atomic_store(&s.ctl->tail, p.pos + 4096);
	EXPECT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, buf, sizeof buf), MESH_E_CORRUPT);
	EXPECT_CONTAINS(p.why, "tail");
	atomic_store(&s.ctl->tail, 8);
	EXPECT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, buf, sizeof buf), MESH_E_CORRUPT);
	EXPECT_CONTAINS(p.why, "16-aligned");
	atomic_store(&s.ctl->tail, 1024);
	EXPECT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, buf, sizeof buf), 0);
}

TEST(ring_wait_times_out_and_honours_stop)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p, c;
	views(&s, &p, &c);
	uint64_t t0 = mesh_mono_ns();
	EXPECT_EQ(mesh_ring_wait_data(&c, 10000, 50 * MESH_NS_PER_MS, NULL), MESH_E_TIMEOUT);
	uint64_t el = mesh_mono_ns() - t0;
	EXPECT_GE(el, 50 * MESH_NS_PER_MS);
	EXPECT_LT(el, 2 * MESH_NS_PER_S);
	_Atomic uint32_t stop = 1;
	EXPECT_EQ(mesh_ring_wait_data(&c, 0, MESH_NS_PER_S, &stop), 1);
	ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, NULL, 0), 0);
	EXPECT_EQ(mesh_ring_wait_data(&c, 0, MESH_NS_PER_S, NULL), 0);
}

struct sleeper {
	struct mesh_ring *r;
	_Atomic uint32_t *stop;
	int rc;
	uint64_t woke_ns;
};

static void *sleep_thread(void *arg)
{
	struct sleeper *sl = arg;
	sl->rc = mesh_ring_wait_data(sl->r, 0, 20 * MESH_NS_PER_S, sl->stop);
	sl->woke_ns = mesh_mono_ns();
	return NULL;
}

/* A consumer asleep on the futex is woken by a put, and by a kick after a stop word is set. */
TEST(ring_sleeping_consumer_is_woken)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p, c;
	views(&s, &p, &c);
	_Atomic uint32_t stop = 0;
	struct sleeper sl = {&c, &stop, -999, 0};
	pthread_t th;
	pthread_create(&th, NULL, sleep_thread, &sl);
	/* Until the sleeper flag is up, it is not asleep yet. */
	uint64_t t0 = t_now_ms();
	while (!atomic_load(&s.ctl->data_sleeping) && t_now_ms() - t0 < 5000)
		usleep(1000);
	EXPECT_EQ(atomic_load(&s.ctl->data_sleeping), 1);
	usleep(20000);
	uint64_t put_ns = mesh_mono_ns();
	ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, "x", 1), 0);
	pthread_join(th, NULL);
	EXPECT_EQ(sl.rc, 0);
	EXPECT_LT(sl.woke_ns - put_ns, 2 * MESH_NS_PER_S);
	EXPECT_GE(atomic_load(&s.ctl->data_futex), 1);

	struct mesh_msg m;
	ASSERT_EQ(mesh_ring_peek(&c, &m), 0);
	mesh_ring_pop(&c);
	sl.rc = -999;
	pthread_create(&th, NULL, sleep_thread, &sl);
	t0 = t_now_ms();
	while (!atomic_load(&s.ctl->data_sleeping) && t_now_ms() - t0 < 5000)
		usleep(1000);
	atomic_store(&stop, 1);
	mesh_ring_kick(s.ctl);
	pthread_join(th, NULL);
	EXPECT_EQ(sl.rc, 1);
}

static uint32_t word(_Atomic uint32_t *w)
{
	return atomic_load(w);
}

/* A peer asleep (its flag up) is woken once however many publishes come
 * before it runs again: the waker takes the flag down with its wake-up
 * (each publish paid a FUTEX_WAKE system call while the woken side had not
 * run yet: half a wake-up a chunk from each echo worker of a warm job).
 * Both directions: data (put, flush) and space (pop). */
TEST(ring_one_wake_up_for_many_publishes)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p, c;
	views(&s, &p, &c);
	/* As a consumer does right before its FUTEX_WAIT. */
	atomic_store(&s.ctl->data_sleeping, 1);
	for (int i = 0; i < 5; i++)
		ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, "x", 1), 0);
	EXPECT_UEQ(word(&s.ctl->data_futex), 1);
	EXPECT_UEQ(word(&s.ctl->data_sleeping), 0);
	/* Held puts and their flush: one wake-up too. */
	atomic_store(&s.ctl->data_sleeping, 1);
	ASSERT_EQ(mesh_ring_put_nopub(&p, MESH_MSG_REQ, 0, "y", 1), 0);
	ASSERT_EQ(mesh_ring_put_nopub(&p, MESH_MSG_REQ, 0, "z", 1), 0);
	EXPECT_UEQ(word(&s.ctl->data_futex), 1);
	mesh_ring_flush(&p);
	mesh_ring_flush(&p);
	EXPECT_UEQ(word(&s.ctl->data_futex), 2);
	/* Nobody asleep: no bump at all. */
	ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, "w", 1), 0);
	EXPECT_UEQ(word(&s.ctl->data_futex), 2);
	/* A producer asleep for room: the consumer's pops wake it once. */
	atomic_store(&s.ctl->space_sleeping, 1);
	struct mesh_msg m;
	for (int i = 0; i < 8; i++) {
		ASSERT_EQ(mesh_ring_peek(&c, &m), 0);
		mesh_ring_pop(&c);
	}
	EXPECT_EQ(mesh_ring_peek(&c, &m), -EAGAIN);
	EXPECT_UEQ(word(&s.ctl->space_futex), 1);
	EXPECT_UEQ(word(&s.ctl->space_sleeping), 0);
}

static uint64_t bell_count(int bell)
{
	uint64_t v = 0;
	return read(bell, &v, sizeof v) == (ssize_t)sizeof v ? v : 0;
}

/* A sleeper that asks for the bell (a job's driver polls it with its other
 * fds) is rung once, however many publishes come before it looks again, and
 * its futex word does not move; a futex sleeper is not rung; a peer that
 * asked for a bell this side lacks gets the futex.  The same for room. */
TEST(ring_bell_rings_once_for_a_sleeper_that_asked_for_it)
{
	struct shared_ring s = make_ring(4096);
	struct mesh_ring p, c;
	views(&s, &p, &c);
	int bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ASSERT_TRUE(bell >= 0);
	p.bell = c.bell = bell;
	EXPECT_EQ(mesh_ring_bell_data(&c), 0); /* empty: armed */
	EXPECT_UEQ(word(&s.ctl->data_sleeping), MESH_RING_SLEEP_BELL);
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, "x", 1), 0);
	EXPECT_UEQ(bell_count(bell), 1);
	EXPECT_UEQ(word(&s.ctl->data_futex), 0);
	EXPECT_UEQ(word(&s.ctl->data_sleeping), 0);
	/* Data there already: no arming, no ring. */
	EXPECT_EQ(mesh_ring_bell_data(&c), 1);
	EXPECT_UEQ(word(&s.ctl->data_sleeping), 0);
	/* A futex sleeper: woken by the futex, not the bell. */
	atomic_store(&s.ctl->data_sleeping, MESH_RING_SLEEP_FUTEX);
	ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, "y", 1), 0);
	EXPECT_UEQ(bell_count(bell), 0);
	EXPECT_UEQ(word(&s.ctl->data_futex), 1);
	/* A bell asked of a side without one: the futex. */
	p.bell = -1;
	atomic_store(&s.ctl->data_sleeping, MESH_RING_SLEEP_BELL);
	ASSERT_EQ(mesh_ring_put(&p, MESH_MSG_REQ, 0, "z", 1), 0);
	EXPECT_UEQ(word(&s.ctl->data_futex), 2);
	/* Room: fill the ring, ask for the bell, then pops ring it once. */
	while (mesh_ring_put(&p, MESH_MSG_REQ, 0, "fill", 4) == 0)
		;
	EXPECT_EQ(mesh_ring_bell_space(&p, 4), 0);
	EXPECT_UEQ(word(&s.ctl->space_sleeping), MESH_RING_SLEEP_BELL);
	struct mesh_msg m;
	for (int i = 0; i < 4; i++) {
		ASSERT_EQ(mesh_ring_peek(&c, &m), 0);
		mesh_ring_pop(&c);
	}
	EXPECT_UEQ(bell_count(bell), 1);
	EXPECT_UEQ(word(&s.ctl->space_futex), 0);
	EXPECT_EQ(mesh_ring_bell_space(&p, 4), 1);
	EXPECT_EQ(mesh_ring_bell_space(&p, 5000), MESH_E_TOOBIG);
	close(bell);
}

/* Ping-pong between two processes with no spinning at all: every hand-over
 * needs a futex wake-up, and one lost wake-up shows as a 5 s timeout. */
TEST(ring_no_lost_wakeups_ping_pong)
{
	struct shared_ring a = make_ring(4096), b = make_ring(4096);
	mesh_ring_init(&(struct mesh_ring){0}, a.ctl, a.data, a.cap);
	mesh_ring_init(&(struct mesh_ring){0}, b.ctl, b.data, b.cap);
	const int rounds = 20000;
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		struct mesh_ring in, out;
		mesh_ring_attach(&in, a.ctl, a.data, a.cap, 0);
		mesh_ring_attach(&out, b.ctl, b.data, b.cap, 1);
		for (int i = 0; i < rounds; i++) {
			struct mesh_msg m;
			if (mesh_ring_wait_data(&in, 0, 5 * MESH_NS_PER_S, NULL) != 0 || mesh_ring_peek(&in, &m) != 0 ||
			    m.seq != (uint32_t)i)
				_exit(2);
			mesh_ring_pop(&in);
			if (mesh_ring_put(&out, MESH_MSG_REP, (uint32_t)i, NULL, 0) != 0)
				_exit(3);
		}
		_exit(0);
	}
	struct mesh_ring out, in;
	mesh_ring_attach(&out, a.ctl, a.data, a.cap, 1);
	mesh_ring_attach(&in, b.ctl, b.data, b.cap, 0);
	int i;
	for (i = 0; i < rounds; i++) {
		if (mesh_ring_put(&out, MESH_MSG_REQ, (uint32_t)i, NULL, 0) != 0)
			break;
		struct mesh_msg m;
		if (mesh_ring_wait_data(&in, 0, 5 * MESH_NS_PER_S, NULL) != 0 || mesh_ring_peek(&in, &m) != 0 ||
		    m.seq != (uint32_t)i)
			break;
		mesh_ring_pop(&in);
	}
	EXPECT_EQ(i, rounds);
	int st;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* Both sides really slept: wake-ups went through the futex words. */
	EXPECT_GT(atomic_load(&a.ctl->data_futex), 0);
	EXPECT_GT(atomic_load(&b.ctl->data_futex), 0);
}

/* A forked child consumes a few hundred thousand messages of random sizes
 * (0..3000 bytes) through a 64 KiB memfd ring, checking each one's crc32c
 * (carried in seq) and running counter; the producer blocks when full. */
TEST_TIMEOUT(ring_two_process_stress_with_checksums, 60)
{
	uint64_t cap = 65536;
	int fd = memfd_create("ring-stress", MFD_CLOEXEC);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(ftruncate(fd, 4096 + (off_t)cap), 0);
	uint8_t *mem = mmap(NULL, 4096 + cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ASSERT_TRUE(mem != MAP_FAILED);
	struct mesh_ring p;
	mesh_ring_init(&p, (struct mesh_ring_ctl *)mem, mem + 4096, cap);
	const uint32_t total = 300000;
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		/* Its own mapping of the memfd, as a worker would have. */
		uint8_t *cm = mmap(NULL, 4096 + cap, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		struct mesh_ring c;
		mesh_ring_attach(&c, (struct mesh_ring_ctl *)cm, cm + 4096, cap, 0);
		uint8_t buf[3000];
		for (uint32_t i = 0; i < total; i++) {
			struct mesh_msg m;
			int rc;
			while ((rc = mesh_ring_peek(&c, &m)) == -EAGAIN)
				if (mesh_ring_wait_data(&c, 2000, 10 * MESH_NS_PER_S, NULL) != 0)
					_exit(2);
			if (rc != 0 || m.len > sizeof buf || m.len < 4)
				_exit(3);
			mesh_msg_copy(&m, buf);
			uint32_t counter;
			memcpy(&counter, buf, 4);
			if (counter != i || mesh_crc32c(0, buf, m.len) != m.seq)
				_exit(4);
			mesh_ring_pop(&c);
		}
		_exit(0);
	}
	uint8_t buf[3000];
	uint32_t rnd = 12345;
	uint32_t sent;
	for (sent = 0; sent < total; sent++) {
		rnd = rnd * 1664525u + 1013904223u;
		size_t n = 4 + (rnd >> 8) % (sizeof buf - 4);
		memcpy(buf, &sent, 4);
		fill(buf + 4, n - 4, rnd);
		uint32_t crc = mesh_crc32c(0, buf, n);
		int rc;
		while ((rc = mesh_ring_put(&p, MESH_MSG_REQ, crc, buf, n)) == -EAGAIN)
			if (mesh_ring_wait_space(&p, n, 2000, 10 * MESH_NS_PER_S, NULL) != 0)
				break;
		if (rc != 0)
			break;
	}
	EXPECT_EQ(sent, total);
	int st;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(WEXITSTATUS(st), 0);
	EXPECT_GT(atomic_load(&((struct mesh_ring_ctl *)mem)->head), cap * 100);
}
