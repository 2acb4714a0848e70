#include "http/relay.h"
#include "base/crc.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

/* A connected loopback TCP pair: *a is the connecting end, *b the accepted. */
static void tcp_pair(int *a, int *b)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_GE(l, 0);
	ASSERT_EQ(bind(l, (struct sockaddr *)&sa, sizeof sa), 0);
	ASSERT_EQ(listen(l, 4), 0);
	ASSERT_EQ(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
	*a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ASSERT_EQ(connect(*a, (struct sockaddr *)&sa, sizeof sa), 0);
	*b = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	ASSERT_GE(*b, 0);
	close(l);
}

static void nonblock(int fd)
{
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* The relay's loop: epoll over both relay fds until pump ends or the
 * deadline passes.  Returns pump's final code, or -ETIMEDOUT; *loops
 * counts wakeups. */
static int drive(struct mesh_relay *r, unsigned timeout_ms, long *loops)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	uint32_t mask[2] = {0, 0};
	uint64_t end = t_now_ms() + timeout_ms;
	int rc = 0;
	for (int s = 0; s < 2; s++) {
		struct epoll_event ev = {.events = mesh_relay_events(r, s), .data.u32 = (uint32_t)s};
		mask[s] = ev.events;
		epoll_ctl(ep, EPOLL_CTL_ADD, r->fd[s], &ev);
	}
	for (;;) {
		struct epoll_event evs[2];
		uint64_t now = t_now_ms();
		if (now >= end) {
			rc = -ETIMEDOUT;
			break;
		}
		int n = epoll_wait(ep, evs, 2, (int)(end - now));
		if (n < 0 && errno == EINTR)
			continue;
		if (loops)
			(*loops)++;
		rc = mesh_relay_pump(r);
		if (rc != 0)
			break;
		for (int s = 0; s < 2; s++) {
			uint32_t m = mesh_relay_events(r, s);
			if (m != mask[s]) {
				struct epoll_event ev = {.events = m, .data.u32 = (uint32_t)s};
				epoll_ctl(ep, EPOLL_CTL_MOD, r->fd[s], &ev);
				mask[s] = m;
			}
		}
	}
	close(ep);
	return rc;
}

struct peer {
	int fd;
	size_t send_n;   /* bytes to send, then shutdown(SHUT_WR) */
	uint32_t seed;
	uint32_t crc_out, crc_in;
	size_t got;
	int close_after_send; /* close (not just shut down) once sent and all read */
};

static void fill(unsigned char *p, size_t n, uint32_t *state)
{
	for (size_t i = 0; i < n; i++) {
		*state = *state * 1103515245u + 12345u;
		p[i] = (unsigned char)(*state >> 16);
	}
}

/* Sends its bytes in one thread, reads to EOF in another. */
static void *peer_send(void *arg)
{
	struct peer *p = arg;
	static __thread unsigned char buf[65536];
	uint32_t st = p->seed;
	size_t left = p->send_n;
	while (left) {
		size_t n = left < sizeof buf ? left : sizeof buf;
		fill(buf, n, &st);
		p->crc_out = mesh_crc32c(p->crc_out, buf, n);
		for (size_t off = 0; off < n;) {
			ssize_t w = write(p->fd, buf + off, n - off);
			if (w <= 0)
				return NULL;
			off += (size_t)w;
		}
		left -= n;
	}
	shutdown(p->fd, SHUT_WR);
	return NULL;
}

static void *peer_recv(void *arg)
{
	struct peer *p = arg;
	static __thread unsigned char buf[65536];
	for (;;) {
		ssize_t n = read(p->fd, buf, sizeof buf);
		if (n <= 0)
			break;
		p->crc_in = mesh_crc32c(p->crc_in, buf, (size_t)n);
		p->got += (size_t)n;
	}
	return NULL;
}

static void both_ways(unsigned flags)
{
	int ca, cb, ua, ub; /* client <-> relay side 0; relay side 1 <-> upstream */
	tcp_pair(&ca, &cb);
	tcp_pair(&ua, &ub);
	nonblock(cb);
	nonblock(ua);
	struct mesh_relay r;
	ASSERT_EQ(mesh_relay_init(&r, cb, ua, flags), 0);
	EXPECT_EQ(r.dir[0].copy, !!(flags & MESH_RELAY_NO_SPLICE));
	/* Different sizes so that one direction ends first: half-close. */
	struct peer cl = {.fd = ca, .send_n = 3u << 20, .seed = 7}, up = {.fd = ub, .send_n = 5u << 20, .seed = 9};
	pthread_t t[4];
	pthread_create(&t[0], NULL, peer_send, &cl);
	pthread_create(&t[1], NULL, peer_recv, &cl);
	pthread_create(&t[2], NULL, peer_send, &up);
	pthread_create(&t[3], NULL, peer_recv, &up);
	int rc = drive(&r, 20000, NULL);
	EXPECT_EQ(rc, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	EXPECT_UEQ(up.got, cl.send_n);
	EXPECT_UEQ(cl.got, up.send_n);
	EXPECT_UEQ(up.crc_in, cl.crc_out);
	EXPECT_UEQ(cl.crc_in, up.crc_out);
	EXPECT_UEQ(r.dir[0].bytes, cl.send_n);
	EXPECT_UEQ(r.dir[1].bytes, up.send_n);
	mesh_relay_release(&r);
	close(ca), close(cb), close(ua), close(ub);
}

static int count_watch(void *ctx, int dir, const char *p, size_t n)
{
	uint64_t *seen = ctx;
	if (p)
		seen[dir] += n;
	else
		seen[2 + dir] = 1;
	return 0;
}

/* With a pool, a relay holds a pipe (splice) or a buffer (copy, watched)
 * only while bytes move: idle before and after, and every pipe is given
 * back; a watcher sees every byte of both directions, and both EOFs.
 * Mode 2 copies through small send buffers: writes come up short, the
 * rest waits in a buffer of its own, and the next reads must not land in
 * it. */
TEST(relay_pool_holds_nothing_when_idle)
{
	for (int mode = 0; mode < 3; mode++) {
		int ca, cb, ua, ub;
		tcp_pair(&ca, &cb);
		tcp_pair(&ua, &ub);
		nonblock(cb);
		nonblock(ua);
		if (mode == 2) {
			int small = 4096;
			setsockopt(cb, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
			setsockopt(ua, SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
		}
		struct mesh_relay_pool pool;
		mesh_relay_pool_init(&pool, 4);
		uint64_t seen[4] = {0, 0, 0, 0};
		struct mesh_relay_opts o = {mode == 2 ? MESH_RELAY_NO_SPLICE : 0, &pool, mode == 1 ? count_watch : NULL, seen};
		struct mesh_relay r;
		ASSERT_EQ(mesh_relay_init_opts(&r, cb, ua, &o), 0);
		EXPECT_FALSE(mesh_relay_busy(&r));
		struct peer cl = {.fd = ca, .send_n = 1u << 20, .seed = 3}, up = {.fd = ub, .send_n = 2u << 20, .seed = 5};
		pthread_t t[4];
		pthread_create(&t[0], NULL, peer_send, &cl);
		pthread_create(&t[1], NULL, peer_recv, &cl);
		pthread_create(&t[2], NULL, peer_send, &up);
		pthread_create(&t[3], NULL, peer_recv, &up);
		EXPECT_EQ(drive(&r, 20000, NULL), 1);
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
		EXPECT_UEQ(up.crc_in, cl.crc_out);
		EXPECT_UEQ(cl.crc_in, up.crc_out);
		EXPECT_UEQ(up.got, cl.send_n);
		EXPECT_UEQ(cl.got, up.send_n);
		EXPECT_FALSE(mesh_relay_busy(&r));
		EXPECT_UEQ(pool.pipes_out, 0);
		if (mode == 1) {
			EXPECT_UEQ(seen[0], cl.send_n);
			EXPECT_UEQ(seen[1], up.send_n);
			EXPECT_UEQ(seen[2] + seen[3], 2);
			EXPECT_UEQ(pool.pipes_made, 0);
		} else if (mode == 0) {
			EXPECT_GT(pool.pipes_made, 0);
			EXPECT_LE(pool.nspare, 4);
			/* A spare pipe's size is kept with it, not asked again. */
			for (size_t i = 0; i < pool.nspare; i++)
				EXPECT_EQ((long)pool.spare_cap[i], (long)fcntl(pool.spare[i][1], F_GETPIPE_SZ));
		}
		mesh_relay_release(&r);
		mesh_relay_pool_release(&pool);
		close(ca), close(cb), close(ua), close(ub);
	}
}

TEST(relay_splice_both_ways_half_close)
{
	both_ways(0);
}

TEST(relay_copy_both_ways_half_close)
{
	both_ways(MESH_RELAY_NO_SPLICE);
}

/* The client half-closes at once (a request then EOF); the upstream answers
 * after seeing EOF: the answer must still arrive. */
TEST(relay_half_close_then_answer)
{
	int ca, cb, ua, ub;
	tcp_pair(&ca, &cb);
	tcp_pair(&ua, &ub);
	nonblock(cb);
	nonblock(ua);
	struct mesh_relay r;
	mesh_relay_init(&r, cb, ua, 0);
	ASSERT_EQ(write(ca, "ping", 4), 4);
	shutdown(ca, SHUT_WR);
	ASSERT_EQ(drive(&r, 300, NULL), -ETIMEDOUT); /* upstream has not answered yet */
	char buf[16] = {0};
	ASSERT_EQ(read(ub, buf, sizeof buf), 4);
	EXPECT_EQ(read(ub, buf + 4, sizeof buf - 4), 0); /* EOF passed on */
	ASSERT_EQ(write(ub, "pong", 4), 4);
	close(ub);
	EXPECT_EQ(drive(&r, 5000, NULL), 1);
	memset(buf, 0, sizeof buf);
	EXPECT_EQ(read(ca, buf, sizeof buf), 4);
	EXPECT_STREQ(buf, "pong");
	EXPECT_EQ(read(ca, buf, sizeof buf), 0);
	mesh_relay_release(&r);
	close(ca), close(cb), close(ua);
}

/* An upstream that never reads: the relay holds at most its bound and does
 * not spin while the pipe is full. */
TEST(relay_backpressure_bounded_no_spin)
{
	for (int mode = 0; mode < 3; mode++) {
		int ca, cb, ua, ub;
		tcp_pair(&ca, &cb);
		tcp_pair(&ua, &ub);
		nonblock(cb);
		nonblock(ua);
		nonblock(ca);
		struct mesh_relay r;
		/* mode 2: pooled and watched (mesh serve --http) */
		struct mesh_relay_pool pool;
		uint64_t seen[4] = {0, 0, 0, 0};
		mesh_relay_pool_init(&pool, 4);
		struct mesh_relay_opts o = {0, &pool, count_watch, seen};
		if (mode == 2)
			mesh_relay_init_opts(&r, cb, ua, &o);
		else
			mesh_relay_init(&r, cb, ua, mode ? MESH_RELAY_NO_SPLICE : 0);
		static char junk[1 << 16];
		size_t sent = 0;
		int saturated = 0;
		/* Fill the client side until the relay itself is blocked (the
		 * loopback buffers on both sides hold megabytes first). */
		for (int round = 0; round < 100 && !saturated; round++) {
			for (;;) {
				ssize_t w = write(ca, junk, sizeof junk);
				if (w <= 0)
					break;
				sent += (size_t)w;
			}
			long loops = 0;
			EXPECT_EQ(drive(&r, 100, &loops), -ETIMEDOUT);
			/* A spinning level-triggered loop makes tens of thousands of
			 * wakeups in 100 ms; a blocked one a handful. */
			EXPECT_LT(loops, 100);
			EXPECT_LE(r.dir[0].pending, r.dir[0].cap);
			saturated = !(mesh_relay_events(&r, 0) & EPOLLIN);
		}
		EXPECT_TRUE(saturated);
		EXPECT_GT(r.dir[0].pending, 0);
		EXPECT_GT(sent, 0);
		mesh_relay_release(&r);
		mesh_relay_pool_release(&pool);
		close(ca), close(cb), close(ua), close(ub);
	}
}

/* A peer that resets ends the relay with an error, not a hang. */
TEST(relay_reset_is_an_error)
{
	int ca, cb, ua, ub;
	tcp_pair(&ca, &cb);
	tcp_pair(&ua, &ub);
	nonblock(cb);
	nonblock(ua);
	struct mesh_relay r;
	mesh_relay_init(&r, cb, ua, 0);
	struct linger lg = {1, 0};
	setsockopt(ub, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	close(ub); /* RST */
	signal(SIGPIPE, SIG_IGN);
	static char junk[1 << 16];
	for (int i = 0; i < 4; i++)
		(void)!write(ca, junk, sizeof junk);
	int rc = drive(&r, 5000, NULL);
	EXPECT_LT(rc, 0);
	EXPECT_NE(rc, -ETIMEDOUT);
	EXPECT_EQ(r.failed_side, 1); /* the reset side, not the client's */
	mesh_relay_release(&r);
	close(ca), close(cb), close(ua);
}
