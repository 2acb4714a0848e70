/* bench_serve: `mesh serve` against a direct connection to the same
 * upstream (examples/cold_http_server), in one run, over loopback.
 *
 *   relay throughput  GET /bytes/N through mesh serve vs directly (target >= 0.9x)
 *   added p50 latency small keep-alive request/response round trips (target <= 50 us added)
 *   relayed requests  keep-alive GET /ping over 1 and 16 connections at once:
 *                     mesh serve's CPU per request (user + system) and the rate
 *                     (the loop's cost per relayed request, for A/B runs)
 *   cold-start overhead  connect to first byte through mesh serve while the
 *                     upstream is cold, minus the upstream's own start-to-ready
 *                     time that it stamps in its ready file (target <= 20 ms)
 *
 * Environment: MESH_BUILD (the build dir), BENCH_SERVE_BYTES (default 1 GiB),
 * BENCH_SERVE_ONLY=requests (only the relayed requests, for A/B runs of two
 * builds), BENCH_SERVE_REQUESTS (default 100000 a case). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256], build[1024];

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int free_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	bind(fd, (struct sockaddr *)&sa, sizeof sa);
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	close(fd);
	return ntohs(sa.sin_port);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *b = calloc(1, 1 << 20);
	size_t n = fread(b, 1, (1 << 20) - 1, f);
	b[n] = 0;
	fclose(f);
	return b;
}

/* Starts mesh serve (extra options, then the upstream's arguments), returns
 * its pid and the port it listens on. */
static pid_t start_serve(const char *errfile, const char *const *extra, int *port)
{
	const char *argv[64];
	char mesh[1100], up[1100];
	int n = 0;
	snprintf(mesh, sizeof mesh, "%s/mesh", build);
	snprintf(up, sizeof up, "%s/examples/cold_http_server", build);
	argv[n++] = mesh;
	argv[n++] = "serve";
	argv[n++] = "--listen";
	argv[n++] = "127.0.0.1:0";
	for (int i = 0; extra[i]; i++) {
		argv[n++] = extra[i];
		if (!strcmp(extra[i], "--"))
			argv[n++] = up;
	}
	argv[n] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		int e = open(errfile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int o = open("/dev/null", O_WRONLY);
		dup2(e, 2);
		dup2(o, 1);
		execv(mesh, (char *const *)argv);
		_exit(127);
	}
	*port = 0;
	for (int i = 0; i < 500 && !*port; i++) {
		usleep(10000);
		char *s = slurp(errfile);
		char *p = s ? strstr(s, "listening addr=") : NULL;
		if (p) {
			char *nl = strchr(p, '\n');
			if (nl) {
				*nl = 0;
				*port = atoi(strrchr(p, ':') + 1);
			}
		}
		free(s);
	}
	return pid;
}

static void stop(pid_t pid)
{
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
}

static int connect_to(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		return -1;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

/* GET /bytes/n; returns seconds to the last byte, or -1. */
static double stream(int port, uint64_t n)
{
	static char buf[1 << 18];
	char req[128];
	uint64_t t0 = now_ns(), got = 0;
	int fd = connect_to(port);
	if (fd < 0)
		return -1;
	int k = snprintf(req, sizeof req, "GET /bytes/%llu HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n",
			 (unsigned long long)n);
	if (send(fd, req, (size_t)k, MSG_NOSIGNAL) != k) {
		close(fd);
		return -1;
	}
	for (;;) {
		ssize_t r = recv(fd, buf, sizeof buf, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (uint64_t)r;
	}
	close(fd);
	if (got < n)
		return -1;
	return (double)(now_ns() - t0) / 1e9;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* n keep-alive round trips of GET /ping; fills the p50 and p99 in ns. */
static int pingpong(int port, int n, uint64_t *p50, uint64_t *p99)
{
	static const char req[] = "GET /ping HTTP/1.1\r\nHost: b\r\n\r\n";
	char buf[4096];
	uint64_t *lat = calloc((size_t)n, sizeof *lat);
	int fd = connect_to(port);
	ssize_t resp_len = 0;
	if (fd < 0 || !lat)
		return -1;
	for (int i = -500; i < n; i++) {
		uint64_t t0 = now_ns();
		if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)sizeof req - 1)
			return -1;
		ssize_t got = 0;
		do {
			ssize_t r = recv(fd, buf + got, sizeof buf - (size_t)got, 0);
			if (r <= 0)
				return -1;
			got += r;
			/* The answer has a fixed size: learn it from the first. */
			if (!resp_len && memmem(buf, (size_t)got, "pong\n", 5))
				resp_len = got;
		} while (!resp_len || got < resp_len);
		if (i >= 0)
			lat[i] = now_ns() - t0;
	}
	close(fd);
	qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
	*p50 = lat[n / 2];
	*p99 = lat[n * 99 / 100];
	free(lat);
	return 0;
}

/* n keep-alive GET /ping round trips spread over nconn connections at once
 * (each sends its next request when its answer is in); seconds, or -1. */
static double load(int port, int nconn, long n)
{
	static const char req[] = "GET /ping HTTP/1.1\r\nHost: b\r\n\r\n";
	enum { MAXC = 64 };
	struct pollfd pf[MAXC];
	size_t got[MAXC], resp_len = 0;
	char buf[4096];
	long sent = 0, done = 0;
	if (nconn > MAXC)
		nconn = MAXC;
	for (int i = 0; i < nconn; i++) {
		pf[i].fd = connect_to(port);
		pf[i].events = POLLIN;
		got[i] = 0;
		if (pf[i].fd < 0)
			return -1;
	}
	/* Every answer has the same size: learn it from one (which may come
	 * in pieces). */
	if (send(pf[0].fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)sizeof req - 1)
		return -1;
	while (!resp_len) {
		ssize_t r = recv(pf[0].fd, buf + got[0], sizeof buf - got[0], 0);
		if (r <= 0)
			return -1;
		got[0] += (size_t)r;
		char *e = memmem(buf, got[0], "pong\n", 5);
		if (e)
			resp_len = (size_t)(e + 5 - buf);
	}
	if (got[0] != resp_len)
		return -1;
	got[0] = 0;
	uint64_t t0 = now_ns();
	for (int i = 0; i < nconn && sent < n; i++, sent++)
		if (send(pf[i].fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)sizeof req - 1)
			return -1;
	while (done < n) {
		if (poll(pf, (nfds_t)nconn, 5000) <= 0)
			return -1;
		for (int i = 0; i < nconn; i++) {
			if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t r = recv(pf[i].fd, buf, sizeof buf, 0);
			if (r <= 0)
				return -1;
			got[i] += (size_t)r;
			while (got[i] >= resp_len) {
				got[i] -= resp_len;
				done++;
				if (sent < n) {
					if (send(pf[i].fd, req, sizeof req - 1, MSG_NOSIGNAL) != (ssize_t)sizeof req - 1)
						return -1;
					sent++;
				}
			}
		}
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	for (int i = 0; i < nconn; i++)
		close(pf[i].fd);
	return secs;
}

/* user and system CPU seconds of a process so far (either may be NULL). */
static void cpu_split(pid_t pid, double *user, double *sys);

/* user + system CPU seconds of a process so far. */
static double cpu_s(pid_t pid)
{
	double u, k;
	cpu_split(pid, &u, &k);
	return u + k;
}

static void cpu_split(pid_t pid, double *user, double *sys)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	*user = *sys = 0;
	if (!f)
		return;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	unsigned long ut = 0, st = 0;
	/* fields after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return;
	*user = (double)ut / (double)sysconf(_SC_CLK_TCK);
	*sys = (double)st / (double)sysconf(_SC_CLK_TCK);
}

/* Relayed requests through the warm mesh serve m on port mport: its CPU
 * per request and the rate, over 1 and 16 connections. */
static void requests_part(pid_t m, int mport)
{
	long n = 100000;
	if (getenv("BENCH_SERVE_REQUESTS"))
		n = strtol(getenv("BENCH_SERVE_REQUESTS"), NULL, 10);
	const int conns[] = {1, 16};
	for (int k = 0; k < 2; k++) {
		double u0, k0, u1, k1;
		cpu_split(m, &u0, &k0);
		double secs = load(mport, conns[k], n);
		cpu_split(m, &u1, &k1);
		if (secs <= 0) {
			printf("relayed requests over %d connection(s): failed\n", conns[k]);
			continue;
		}
		printf("relayed requests (%ld keep-alive GET /ping over %d connection(s)): %.0f requests/s, "
		       "mesh serve CPU %.2f us a request (user %.2f, system %.2f)\n",
		       n, conns[k], (double)n / secs, (u1 - u0 + k1 - k0) / (double)n * 1e6, (u1 - u0) / (double)n * 1e6,
		       (k1 - k0) / (double)n * 1e6);
	}
}

static void verdict(int met)
{
	printf("   %s\n", met ? "MET" : "MISSED");
}

static int read_pid(const char *path)
{
	char *s = slurp(path);
	int p = s ? atoi(s) : 0;
	free(s);
	return p;
}

int main(void)
{
	const char *b = getenv("MESH_BUILD");
	snprintf(build, sizeof build, "%s", b ? b : "build");
	uint64_t bytes = 1ull << 30;
	if (getenv("BENCH_SERVE_BYTES"))
		bytes = strtoull(getenv("BENCH_SERVE_BYTES"), NULL, 10);
	snprintf(dir, sizeof dir, "/tmp/bench-serve.XXXXXX");
	if (!mkdtemp(dir) || chdir(dir) < 0) {
		perror("bench_serve: temp dir");
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	{
		/* The figures depend on how busy the machine is: say it. */
		char *la = slurp("/proc/loadavg");
		if (la) {
			char *sp = strchr(la, ' ');
			if (sp)
				*sp = 0;
			printf("(load average %s on %ld cores at start)\n", la, sysconf(_SC_NPROCESSORS_ONLN));
			free(la);
		}
	}

	/* One warm upstream, reached both directly and through mesh serve. */
	char up[16], ups[32];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	const char *warm_args[] = {"--upstream", ups, "--idle", "600", "--log", "up.log", "--", "--port", up, NULL};
	int mport;
	pid_t m = start_serve("serve1.err", warm_args, &mport);
	if (!mport) {
		fprintf(stderr, "bench_serve: mesh serve did not start\n");
		return 1;
	}
	int uport = atoi(up);
	/* The first request makes it warm. */
	if (stream(mport, 1) < 0) {
		fprintf(stderr, "bench_serve: no answer through mesh serve\n");
		stop(m);
		return 1;
	}
	if (getenv("BENCH_SERVE_ONLY") && !strcmp(getenv("BENCH_SERVE_ONLY"), "requests")) {
		char rm[300];
		requests_part(m, mport);
		stop(m);
		snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
		return system(rm) != 0;
	}

	double best_d = 1e9, best_m = 1e9, c0 = cpu_s(m), relayed = 0;
	for (int i = 0; i < 3; i++) {
		double d = stream(uport, bytes), r = stream(mport, bytes);
		if (d > 0 && d < best_d)
			best_d = d;
		if (r > 0 && r < best_m)
			best_m = r;
		relayed += r > 0 ? (double)bytes : 0;
	}
	double cpu_splice = (cpu_s(m) - c0) / (relayed / (1 << 30));
	double gd = (double)bytes / best_d / (1 << 30), gm = (double)bytes / best_m / (1 << 30);
	printf("relay throughput (%.2f GiB, best of 3): mesh serve %.2f GiB/s, direct %.2f GiB/s, ratio %.2f, "
	       "target >= 0.90",
	       (double)bytes / (1 << 30), gm, gd, gm / gd);
	verdict(gm / gd >= 0.90);
	uint64_t d50, d99, m50, m99;
	int n = 20000;
	if (pingpong(uport, n, &d50, &d99) < 0 || pingpong(mport, n, &m50, &m99) < 0) {
		fprintf(stderr, "bench_serve: round trips failed\n");
	} else {
		/* Again, in the other order, to spread the noise of a shared machine. */
		uint64_t m50b, m99b, d50b, d99b;
		if (pingpong(mport, n, &m50b, &m99b) == 0 && pingpong(uport, n, &d50b, &d99b) == 0) {
			m50 = m50 < m50b ? m50 : m50b;
			d50 = d50 < d50b ? d50 : d50b;
			m99 = m99 < m99b ? m99 : m99b;
			d99 = d99 < d99b ? d99 : d99b;
		}
		double added = ((double)m50 - (double)d50) / 1e3;
		printf("round trip p50 (%d keep-alive GET /ping): mesh serve %.1f us, direct %.1f us, added %.1f us "
		       "(p99 %.1f vs %.1f us), target added <= 50 us",
		       n, (double)m50 / 1e3, (double)d50 / 1e3, added, (double)m99 / 1e3, (double)d99 / 1e3);
		verdict(added <= 50.0);
	}
	requests_part(m, mport);
	stop(m);

	/* The same through the copy path, for comparison: CPU mesh serve spends per GiB. */
	{
		char up3[16], ups3[32];
		snprintf(up3, sizeof up3, "%d", free_port());
		snprintf(ups3, sizeof ups3, "127.0.0.1:%s", up3);
		const char *copy_args[] = {"--upstream", ups3, "--idle", "600", "--log", "up3.log", "--no-splice",
					   "--", "--port", up3, NULL};
		int cport;
		pid_t mc = start_serve("serve3.err", copy_args, &cport);
		double best_c = 1e9, moved = 0, cc0;
		stream(cport, 1);
		cc0 = cpu_s(mc);
		for (int i = 0; i < 2 && cport; i++) {
			double r = stream(cport, bytes);
			if (r > 0 && r < best_c)
				best_c = r;
			moved += r > 0 ? (double)bytes : 0;
		}
		double cpu_copy = moved > 0 ? (cpu_s(mc) - cc0) / (moved / (1 << 30)) : 0;
		stop(mc);
		printf("relay CPU of mesh serve per GiB: splice %.3f s, copy path %.3f s (copy path %.2f GiB/s); "
		       "the relay adds a process and a loopback hop, so on a machine with fewer than 3 idle cores "
		       "throughput is CPU-bound (this one: %ld cores)\n",
		       cpu_splice, cpu_copy, best_c < 1e9 ? (double)bytes / best_c / (1 << 30) : 0.0,
		       sysconf(_SC_NPROCESSORS_ONLN));
	}

	/* Cold starts: a fresh upstream each time (idle reap in between). */
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	const char *cold_args[] = {"--upstream", ups,   "--idle", "0.2",        "--grace",      "1",
				   "--log",      "up2.log", "--",   "--port",       up,             "--listen-delay",
				   "0.2",        "--ready-file", "ready.txt", "--pid-file", "up.pid", NULL};
	m = start_serve("serve2.err", cold_args, &mport);
	enum { TRIALS = 5 };
	uint64_t over[TRIALS], first[TRIALS], own[TRIALS];
	int done = 0;
	for (int t = 0; t < TRIALS; t++) {
		unlink("ready.txt");
		uint64_t t0 = now_ns();
		int fd = connect_to(mport);
		static const char req[] = "GET /ping HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n";
		char c;
		if (fd < 0 || send(fd, req, sizeof req - 1, MSG_NOSIGNAL) < 0 || recv(fd, &c, 1, 0) != 1)
			break;
		uint64_t t1 = now_ns();
		close(fd);
		/* The upstream stamps the file from another thread: it may land
		 * a moment after the first answer. */
		for (int i = 0; i < 200 && access("ready.txt", F_OK) != 0; i++)
			usleep(10000);
		char *s = slurp("ready.txt");
		unsigned long long st = 0, rd = 0;
		if (!s || sscanf(s, "%llu %llu", &st, &rd) != 2) {
			free(s);
			break;
		}
		free(s);
		first[t] = t1 - t0;
		own[t] = rd - st;
		over[t] = first[t] > own[t] ? first[t] - own[t] : 0;
		done++;
		/* Wait for the reap before the next cold start. */
		int pid = read_pid("up.pid");
		for (int i = 0; i < 500 && pid > 0 && kill(pid, 0) == 0; i++)
			usleep(10000);
		usleep(50000);
	}
	stop(m);
	if (done == TRIALS) {
		qsort(over, TRIALS, sizeof over[0], cmp_u64);
		qsort(first, TRIALS, sizeof first[0], cmp_u64);
		qsort(own, TRIALS, sizeof own[0], cmp_u64);
		double o50 = (double)over[TRIALS / 2] / 1e6;
		printf("cold-start overhead (median of %d): first byte %.1f ms, upstream start-to-ready %.1f ms, "
		       "overhead %.1f ms (min %.1f, max %.1f), target <= 20 ms",
		       TRIALS, (double)first[TRIALS / 2] / 1e6, (double)own[TRIALS / 2] / 1e6, o50,
		       (double)over[0] / 1e6, (double)over[TRIALS - 1] / 1e6);
		verdict(o50 <= 20.0);
	} else {
		printf("cold-start overhead: only %d of %d trials completed   MISSED\n", done, TRIALS);
	}
	char cmd[300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "bench_serve: could not remove %s\n", dir);
	return 0;
}
