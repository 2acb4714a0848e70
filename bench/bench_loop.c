/* What libevent would cost the two hand-written loops that stay (docs/DESIGN.md,
 * "Why two loops are not on libevent"), measured in the same run against
 * them:
 *
 *   dispatch: one ready fd among N (pipes; one byte written, the loop wakes,
 *     the callback reads it), per event: poll() over an array rebuilt each
 *     round (exec/driver.c's way: its executor lists the fds every round),
 *     epoll_wait on a set registered once (serve/front.c's way), and a
 *     libevent event_base (epoll backend) with one persistent event a fd;
 *   churn: what a chunk of `mesh run` changes in the wait set (a process:
 *     its pidfd, stdout and stderr, added, then removed): nothing for poll
 *     (the array is rebuilt anyway), epoll_ctl ADD + DEL, libevent
 *     event_assign + event_add + event_del.
 *
 * N: the fds of 2, 8, 32 and 128 slots (3 a slot).  Single-threaded: the
 * cost of the dispatch itself, not of a wake-up across threads.
 * Usage: bench_loop [events]   (MESH_BENCH_QUICK=1: fewer) */
#include "base/clock.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define MAXFD 384

static int rd[MAXFD], wr[MAXFD];
static unsigned got;

static void pipes(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		int p[2];
		if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
			perror("pipe2");
			exit(1);
		}
		rd[i] = p[0];
		wr[i] = p[1];
	}
}

static void unpipes(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		close(rd[i]);
		close(wr[i]);
	}
}

static void poke(unsigned i)
{
	if (write(wr[i], "x", 1) != 1) {
		perror("write");
		exit(1);
	}
}

static void drain(int fd)
{
	char b[16];
	if (read(fd, b, sizeof b) > 0)
		got++;
}

static double per_event_poll(unsigned n, unsigned events)
{
	struct pollfd pf[MAXFD];
	uint64_t t0 = mesh_mono_ns();
	for (unsigned e = 0; e < events; e++) {
		poke(e % n);
		for (unsigned i = 0; i < n; i++)
			pf[i] = (struct pollfd){rd[i], POLLIN, 0};
		if (poll(pf, n, -1) < 1)
			exit(1);
		for (unsigned i = 0; i < n; i++)
			if (pf[i].revents & POLLIN)
				drain(pf[i].fd);
	}
	return (double)(mesh_mono_ns() - t0) / events;
}

static double per_event_epoll(unsigned n, unsigned events)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	for (unsigned i = 0; i < n; i++) {
		struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
		epoll_ctl(ep, EPOLL_CTL_ADD, rd[i], &ev);
	}
	struct epoll_event evs[64];
	uint64_t t0 = mesh_mono_ns();
	for (unsigned e = 0; e < events; e++) {
		poke(e % n);
		int k = epoll_wait(ep, evs, 64, -1);
		for (int i = 0; i < k; i++)
			drain(rd[evs[i].data.u32]);
	}
	double r = (double)(mesh_mono_ns() - t0) / events;
	close(ep);
	return r;
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	(void)arg;
	drain(fd);
}

static double per_event_libevent(unsigned n, unsigned events)
{
	struct event_base *b = event_base_new();
	struct event *ev[MAXFD];
	for (unsigned i = 0; i < n; i++) {
		ev[i] = event_new(b, rd[i], EV_READ | EV_PERSIST, on_read, NULL);
		event_add(ev[i], NULL);
	}
	uint64_t t0 = mesh_mono_ns();
	for (unsigned e = 0; e < events; e++) {
		poke(e % n);
		event_base_loop(b, EVLOOP_ONCE);
	}
	double r = (double)(mesh_mono_ns() - t0) / events;
	for (unsigned i = 0; i < n; i++)
		event_free(ev[i]);
	event_base_free(b);
	return r;
}

/* Per chunk: 3 fds into the wait set and out again. */
static double churn_epoll(unsigned rounds)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	uint64_t t0 = mesh_mono_ns();
	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned i = 0; i < 3; i++) {
			struct epoll_event ev = {.events = EPOLLIN, .data.u32 = i};
			epoll_ctl(ep, EPOLL_CTL_ADD, rd[i], &ev);
		}
		for (unsigned i = 0; i < 3; i++)
			epoll_ctl(ep, EPOLL_CTL_DEL, rd[i], NULL);
	}
	double ns = (double)(mesh_mono_ns() - t0) / rounds;
	close(ep);
	return ns;
}

static double churn_libevent(unsigned rounds)
{
	struct event_base *b = event_base_new();
	struct event *ev = calloc(3, event_get_struct_event_size());
	uint64_t t0 = mesh_mono_ns();
	for (unsigned r = 0; r < rounds; r++) {
		for (unsigned i = 0; i < 3; i++) {
			struct event *e = (struct event *)((char *)ev + i * event_get_struct_event_size());
			event_assign(e, b, rd[i], EV_READ | EV_PERSIST, on_read, NULL);
			event_add(e, NULL);
		}
		/* The changes reach the kernel at the next dispatch: make one. */
		event_base_loop(b, EVLOOP_NONBLOCK);
		for (unsigned i = 0; i < 3; i++)
			event_del((struct event *)((char *)ev + i * event_get_struct_event_size()));
		event_base_loop(b, EVLOOP_NONBLOCK);
	}
	double ns = (double)(mesh_mono_ns() - t0) / rounds;
	free(ev);
	event_base_free(b);
	return ns;
}

int main(int argc, char **argv)
{
	unsigned events = argc > 1 ? (unsigned)atoi(argv[1]) : 200000;
	if (getenv("MESH_BENCH_QUICK"))
		events = 20000;
	static const unsigned slots[] = {2, 8, 32, 128};
	printf("   dispatch, ns per event (one ready fd among N):\n");
	printf("   %6s %6s %10s %10s %10s   %s\n", "slots", "fds", "poll", "epoll", "libevent", "libevent vs poll / epoll");
	for (size_t k = 0; k < sizeof slots / sizeof slots[0]; k++) {
		unsigned n = 3 * slots[k];
		pipes(n);
		/* A warm-up round each, then the measured ones. */
		per_event_poll(n, events / 10);
		double p = per_event_poll(n, events);
		per_event_epoll(n, events / 10);
		double e = per_event_epoll(n, events);
		per_event_libevent(n, events / 10);
		double l = per_event_libevent(n, events);
		printf("   %6u %6u %10.0f %10.0f %10.0f   %+.0f ns / %+.0f ns\n", slots[k], n, p, e, l, l - p, l - e);
		unpipes(n);
	}
	pipes(3);
	unsigned rounds = events / 4;
	double ce = churn_epoll(rounds), cl = churn_libevent(rounds);
	printf("   churn per chunk (3 fds in and out of the wait set): poll 0 ns, epoll_ctl %.0f ns, libevent %.0f ns\n", ce,
	       cl);
	unpipes(3);
	if (got == 0)
		return 1;
	return 0;
}
