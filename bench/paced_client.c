/* paced_client: an open-loop HTTP load at a fixed offered rate, for the
 * latency a proxy adds below saturation (bench_gateway.sh, issue 13).
 *
 *   paced_client PORT RATE CONNECTIONS SECONDS MODEL
 *
 * CONNECTIONS keep-alive connections to 127.0.0.1:PORT share one schedule:
 * request k is due at start + k / RATE, on connection k % CONNECTIONS, each
 * a `POST /v1/chat/completions` whose body names MODEL.  A request's
 * latency runs from its due time (not from when it was sent) to the last
 * byte of its response: when a response comes late, the requests due
 * meanwhile are sent as soon as their connection is free and their wait
 * counts, so a stall is not hidden by the client's own slowing down (the
 * "coordinated omission" of a closed loop: wrk, and wrk's Lua `delay()`,
 * which also has only millisecond steps and times each request from its
 * actual send).  The first 10 % of the run is a warm-up, not counted.
 *
 * One line on stdout:
 *   PACED offered done p50 p90 p99 p999 max late errors
 * (rates in requests/s, latencies in us; late: requests sent more than
 * 100 us after their due time, a sign that the client or a connection was
 * behind).  One thread, ppoll with nanosecond timeouts and a 1 ns timer
 * slack; loopback only. */
#include "bench_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 256

struct conn {
	int fd;
	int busy;
	uint64_t due; /* of the request in flight */
	char buf[16384];
	size_t have;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The length of the whole response at the start of b (a head with
 * Content-Length, as nginx's answers have), 0 when more bytes are needed,
 * -1 when it cannot be framed here. */
static long response_len(const char *b, size_t n)
{
	const char *end = memmem(b, n, "\r\n\r\n", 4), *p;
	if (!end)
		return n >= 8192 ? -1 : 0;
	size_t head = (size_t)(end - b) + 4;
	for (p = b; p && p < end; p = memchr(p, '\n', (size_t)(end - p))) {
		p++;
		if (!strncasecmp(p, "content-length:", 15)) {
			size_t body = strtoul(p + 15, NULL, 10);
			return head + body <= n ? (long)(head + body) : 0;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: paced_client PORT RATE CONNECTIONS SECONDS MODEL\n");
		return 2;
	}
	int port = atoi(argv[1]), nc = atoi(argv[3]);
	double rate = atof(argv[2]), secs = atof(argv[4]);
	if (port <= 0 || rate <= 0 || nc <= 0 || nc > MAX_CONNS || secs <= 0)
		return 2;
	prctl(PR_SET_TIMERSLACK, 1UL); /* ppoll's timeouts to the microsecond */
	char body[256], req[1024];
	int bl = snprintf(body, sizeof body, "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
			  argv[5]);
	int rl = snprintf(req, sizeof req,
			  "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
			  "Content-Length: %d\r\n\r\n%s",
			  bl, body);
	static struct conn c[MAX_CONNS];
	for (int i = 0; i < nc; i++)
		if ((c[i].fd = bench_connect_loopback(port)) < 0) {
			perror("connect");
			return 1;
		}
	uint64_t total = (uint64_t)(rate * secs), warm = total / 10, sent = 0, nlat = 0, late = 0, errors = 0;
	uint64_t *lat = calloc(total + 1, sizeof *lat);
	double step = 1e9 / rate;
	if (!lat)
		return 1;
	uint64_t t0 = now_ns() + 1000000;
	uint64_t done = 0;
	struct pollfd pf[MAX_CONNS];
	while (done < total) {
		uint64_t now = now_ns();
		/* Every request now due whose connection is free goes. */
		while (sent < total) {
			uint64_t due = t0 + (uint64_t)((double)sent * step);
			struct conn *k = &c[sent % (uint64_t)nc];
			if (due > now || k->busy)
				break;
			if (send(k->fd, req, (size_t)rl, MSG_NOSIGNAL) != rl) {
				fprintf(stderr, "send: %s\n", strerror(errno));
				return 1;
			}
			if (now - due > 100000 && sent >= warm)
				late++;
			k->busy = 1;
			k->due = due;
			k->have = 0;
			sent++;
		}
		int np = 0;
		for (int i = 0; i < nc; i++)
			if (c[i].busy) {
				pf[np].fd = c[i].fd;
				pf[np].events = POLLIN;
				pf[np].revents = 0;
				np++;
			}
		uint64_t next = sent < total ? t0 + (uint64_t)((double)sent * step) : now + 1000000000ull;
		uint64_t wait = next > now ? next - now : 0;
		/* The next due request's connection busy: its answer frees it. */
		if (sent < total && c[sent % (uint64_t)nc].busy && wait == 0)
			wait = 1000000000ull;
		struct timespec ts = {(time_t)(wait / 1000000000ull), (long)(wait % 1000000000ull)};
		if (np == 0 && wait == 0)
			continue;
		int n = ppoll(pf, (nfds_t)np, &ts, NULL);
		if (n < 0 && errno != EINTR) {
			perror("ppoll");
			return 1;
		}
		for (int j = 0; n > 0 && j < np; j++) {
			if (!pf[j].revents)
				continue;
			struct conn *k = NULL;
			for (int i = 0; i < nc && !k; i++)
				if (c[i].fd == pf[j].fd)
					k = &c[i];
			ssize_t r = recv(k->fd, k->buf + k->have, sizeof k->buf - k->have, 0);
			if (r <= 0) {
				fprintf(stderr, "the server closed a connection\n");
				return 1;
			}
			k->have += (size_t)r;
			long len = response_len(k->buf, k->have);
			if (len < 0) {
				fprintf(stderr, "a response without Content-Length\n");
				return 1;
			}
			if (len == 0)
				continue;
			uint64_t end = now_ns();
			if (strncmp(k->buf, "HTTP/1.1 200", 12))
				errors++;
			if (k->due >= t0 + (uint64_t)((double)warm * step))
				lat[nlat++] = end - k->due;
			k->busy = 0;
			k->have = 0;
			done++;
		}
	}
	uint64_t t1 = now_ns();
	qsort(lat, nlat, sizeof *lat, cmp_u64);
#define P(q) (nlat ? (double)lat[(size_t)((q) * (double)(nlat - 1))] / 1e3 : 0.0)
	printf("PACED %.0f %.0f %.0f %.0f %.0f %.0f %.0f %llu %llu\n", rate, (double)done / ((double)(t1 - t0) / 1e9), P(0.5),
	       P(0.9), P(0.99), P(0.999), nlat ? (double)lat[nlat - 1] / 1e3 : 0.0, (unsigned long long)late,
	       (unsigned long long)errors);
	return 0;
}
