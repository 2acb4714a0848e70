/* Benchmark of the warmth probe, each figure beside a reference measured in
 * the same run:
 *   1. a refused port: mesh_probe vs a bare blocking connect (target <= 5 ms)
 *   2. a black-holed connect (a full backlog-0 listener on loopback): the
 *      probe ends at its bound (target: within bound + 20%)
 *   3. a warm local server: mesh_probe vs a hand-written connect + GET + read
 * Everything stays on loopback. */
#include "autoscale/probe.h"
#include "base/clock.h"
#include "base/err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, size_t n, double p)
{
	qsort(v, n, sizeof *v, cmp_u64);
	size_t i = (size_t)(p * (double)(n - 1));
	return v[i];
}

static void row(const char *what, double mesh_ms, double ref_ms, const char *target, int met)
{
	printf("   %-40s mesh %9.3f ms   reference %9.3f ms   ratio %6.2f   target %-18s %s\n", what, mesh_ms, ref_ms,
	       ref_ms > 0 ? mesh_ms / ref_ms : 0.0, target, met ? "MET" : "MISSED");
}

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a = {0};
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(port);
	return a;
}

static uint16_t closed_port(void)
{
	struct sockaddr_in a = loopback(0);
	socklen_t sl = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(l, (void *)&a, sizeof a) || getsockname(l, (void *)&a, &sl))
		exit(1);
	close(l);
	return ntohs(a.sin_port);
}

static void bench_refused(void)
{
	enum { N = 300 };
	static uint64_t m[N], r[N];
	uint16_t port = closed_port();
	struct mesh_probe_target t;
	struct mesh_probe_result res;
	mesh_probe_target_default(&t);
	t.port = port;
	for (int i = 0; i < N; i++) {
		uint64_t t0 = mesh_mono_ns();
		mesh_probe(&t, NULL, &res);
		m[i] = mesh_mono_ns() - t0;
		if (res.err != -ECONNREFUSED) {
			printf("   refused port: unexpected probe result: %s\n", res.reason);
			return;
		}
		struct sockaddr_in a = loopback(port);
		t0 = mesh_mono_ns();
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		int rc = connect(fd, (void *)&a, sizeof a);
		close(fd);
		r[i] = mesh_mono_ns() - t0;
		if (rc == 0)
			printf("   refused port: reference connect succeeded?\n");
	}
	double mp50 = (double)pct(m, N, 0.5) / 1e6, rp50 = (double)pct(r, N, 0.5) / 1e6;
	double mp99 = (double)pct(m, N, 0.99) / 1e6, rp99 = (double)pct(r, N, 0.99) / 1e6;
	row("refused port, p50", mp50, rp50, "<= 5 ms", mp50 <= 5.0);
	row("refused port, p99", mp99, rp99, "<= 5 ms", mp99 <= 5.0);
}

static void bench_black_hole(void)
{
	struct sockaddr_in a = loopback(0);
	socklen_t sl = sizeof a;
	int held[16], nheld = 0, full = 0;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(l, (void *)&a, sizeof a) || listen(l, 0) || getsockname(l, (void *)&a, &sl))
		return;
	while (nheld < 16 && !full) {
		int c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		held[nheld++] = c;
		connect(c, (void *)&a, sizeof a);
		struct pollfd p = {c, POLLOUT, 0};
		full = poll(&p, 1, 100) == 0;
	}
	if (!full) {
		printf("   black hole: could not fill a backlog-0 listener; skipped\n");
	} else {
		static const uint64_t bounds_ms[] = {100, 300, 1000};
		for (size_t i = 0; i < 3; i++) {
			struct mesh_probe_target t;
			struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
			struct mesh_probe_result res;
			char what[64];
			mesh_probe_target_default(&t);
			t.port = ntohs(a.sin_port);
			o.connect_timeout_ns = bounds_ms[i] * MESH_NS_PER_MS;
			mesh_probe(&t, &o, &res);
			double got = (double)res.elapsed_ns / 1e6;
			snprintf(what, sizeof what, "black-holed connect, bound %llu ms", (unsigned long long)bounds_ms[i]);
			/* The reference is the bound itself: a blocking connect would wait out the SYN retries (minutes). */
			row(what, got, (double)bounds_ms[i], "bound..bound+20%",
			    res.err == MESH_E_TIMEOUT && got >= (double)bounds_ms[i] * 0.98 &&
				    got <= (double)bounds_ms[i] * 1.2);
		}
	}
	for (int i = 0; i < nheld; i++)
		close(held[i]);
	close(l);
}

static pid_t warm_server(uint16_t *port)
{
	struct sockaddr_in a = loopback(0);
	socklen_t sl = sizeof a;
	int l = socket(AF_INET, SOCK_STREAM, 0);
	if (bind(l, (void *)&a, sizeof a) || listen(l, 128) || getsockname(l, (void *)&a, &sl))
		exit(1);
	*port = ntohs(a.sin_port);
	pid_t pid = fork();
	if (pid == 0) {
		static const char body[] = "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}\n";
		char resp[256];
		int rn = snprintf(resp, sizeof resp,
				  "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
				  strlen(body), body);
		signal(SIGPIPE, SIG_IGN);
		for (;;) {
			char buf[4096];
			int c = accept(l, NULL, NULL);
			if (c < 0)
				continue;
			if (read(c, buf, sizeof buf) > 0 && write(c, resp, (size_t)rn) < 0)
				_exit(1);
			close(c);
		}
	}
	close(l);
	return pid;
}

/* The reference: a plain blocking connect, one write of the request, read to EOF. */
static int bare_get(uint16_t port)
{
	struct sockaddr_in a = loopback(port);
	char req[128], buf[4096];
	int fd = socket(AF_INET, SOCK_STREAM, 0), n;
	if (connect(fd, (void *)&a, sizeof a) < 0) {
		close(fd);
		return -1;
	}
	n = snprintf(req, sizeof req, "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1:%u\r\nConnection: close\r\n\r\n", port);
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	int got = 0;
	while ((n = (int)read(fd, buf, sizeof buf)) > 0)
		got += n;
	close(fd);
	return got > 12 && memcmp(buf, "HTTP/1.1 200", 12) == 0 ? 0 : -1;
}

static void bench_warm(void)
{
	enum { N = 400 };
	static uint64_t m[N], mm[N], r[N];
	uint16_t port;
	pid_t pid = warm_server(&port);
	struct mesh_probe_target t;
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	struct mesh_probe_result res;
	mesh_probe_target_default(&t);
	t.port = port;
	for (int i = 0; i < N; i++) {
		uint64_t t0 = mesh_mono_ns();
		mesh_probe(&t, NULL, &res);
		m[i] = mesh_mono_ns() - t0;
		if (!res.warm) {
			printf("   warm server: probe said %s; skipped\n", res.reason);
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			return;
		}
		o.model = "m";
		t0 = mesh_mono_ns();
		mesh_probe(&t, &o, &res);
		mm[i] = mesh_mono_ns() - t0;
		o.model = NULL;
		t0 = mesh_mono_ns();
		if (bare_get(port))
			printf("   warm server: reference GET failed\n");
		r[i] = mesh_mono_ns() - t0;
	}
	double rp50 = (double)pct(r, N, 0.5) / 1e6;
	double mp50 = (double)pct(m, N, 0.5) / 1e6, mmp50 = (double)pct(mm, N, 0.5) / 1e6;
	row("warm server probe, p50", mp50, rp50, "<= 2x reference", mp50 <= 2 * rp50);
	row("warm server probe --model, p50", mmp50, rp50, "<= 2x reference", mmp50 <= 2 * rp50);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	bench_refused();
	bench_black_hole();
	bench_warm();
	return 0;
}
