/* mesh serve under many connections: an idle connection costs its two
 * sockets and nothing more (relay pipes only while bytes move), and a flood
 * past --max-conns is answered (503), never left hanging. */
#include "runner/t.h"
#include "integration/serve_t.h"

#include <dirent.h>
#include <poll.h>
#include <sys/resource.h>

static void raise_nofile(rlim_t want)
{
	struct rlimit rl;
	ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
		FAIL("RLIMIT_NOFILE hard limit %llu is below the %llu this test needs", (unsigned long long)rl.rlim_max,
		     (unsigned long long)want);
	rl.rlim_cur = rl.rlim_max;
	ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

/* Open fds of pid, and how many of them are pipes. */
static int count_fds(pid_t pid, int *pipes)
{
	char dir[64], link[384], target[128];
	snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	*pipes = 0;
	for (struct dirent *e; (e = readdir(d));) {
		if (e->d_name[0] == '.')
			continue;
		n++;
		snprintf(link, sizeof link, "%s/%s", dir, e->d_name);
		ssize_t k = readlink(link, target, sizeof target - 1);
		if (k > 0) {
			target[k] = 0;
			*pipes += !strncmp(target, "pipe:", 5);
		}
	}
	closedir(d);
	return n;
}

/* N idle keep-alive connections (each made one request): mesh serve holds
 * about 2 fds per connection, and no pipe per connection. */
TEST_TIMEOUT(serve_idle_connections_cost_two_fds_each, 60)
{
	enum { N = 500 };
	raise_nofile(4 * N);
	for (int http = 0; http < 2; http++) {
		char up[8], ups[32];
		snprintf(up, sizeof up, "%d", free_port());
		snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
		const char *args[] = {http ? "--http" : "--json", "--upstream", ups, "--idle", "30", "--",
				      t_bin("examples/cold_http_server"), "--port", up, NULL};
		struct serve s = start_serve(args);
		static int fds[N];
		char resp[1024];
		int ok = 0;
		for (int i = 0; i < N; i++) {
			fds[i] = connect_to(s.port);
			ASSERT_GE(fds[i], 0);
			ASSERT_EQ(send_str(fds[i], "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
			ok += read_response(fds[i], resp, sizeof resp) == 200;
		}
		EXPECT_EQ(ok, N);
		int pipes = 0, n = count_fds(s.pid, &pipes);
		fprintf(stderr, "    %s: %d idle connections -> %d fds in mesh serve, %d of them pipes\n",
			http ? "--http" : "tcp", N, n, pipes);
		EXPECT_LE(n, (int)(2.2 * N + 50));
		EXPECT_LE(pipes, 30);
		for (int i = 0; i < N; i++)
			close(fds[i]);
		EXPECT_EQ(stop_serve(&s), 0);
	}
}

/* NCONN connections at once (MESH_SERVE_CONNS, default 2000) against
 * --max-conns of three quarters of that: every one gets an answer, a 200
 * or a 503, none hangs. */
TEST_TIMEOUT(serve_connection_flood_all_answered, 120)
{
	const char *env = getenv("MESH_SERVE_CONNS");
	int n = env ? atoi(env) : 2000, max = n * 3 / 4;
	ASSERT_GT(n, 3);
	raise_nofile((rlim_t)n + 256);
	char up[8], ups[32], maxs[16];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	snprintf(maxs, sizeof maxs, "%d", max);
	const char *args[] = {"--upstream", ups, "--idle", "30", "--max-conns", maxs, "--",
			      t_bin("examples/cold_http_server"), "--port", up, NULL};
	struct serve s = start_serve(args);
	char resp[2048];
	ASSERT_EQ(http_get(s.port, "/ping", resp, sizeof resp), 200); /* warm */
	struct pollfd *p = calloc((size_t)n, sizeof *p);
	char (*buf)[256] = calloc((size_t)n, sizeof *buf);
	size_t *got = calloc((size_t)n, sizeof *got);
	int *fds = calloc((size_t)n, sizeof *fds);
	ASSERT_TRUE(p && buf && got && fds);
	uint64_t t0 = t_now_ms();
	for (int i = 0; i < n; i++) {
		p[i].fd = connect_to(s.port);
		ASSERT_GE(p[i].fd, 0);
		p[i].events = POLLIN;
		ASSERT_EQ(send_str(p[i].fd, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
	}
	int left = n, st200 = 0, st503 = 0, other = 0;
	while (left > 0 && t_now_ms() - t0 < 60000) {
		int r = poll(p, (nfds_t)n, 1000);
		if (r <= 0)
			continue;
		for (int i = 0; i < n; i++) {
			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ssize_t k = recv(p[i].fd, buf[i] + got[i], sizeof buf[i] - 1 - got[i], MSG_DONTWAIT);
			if (k > 0)
				got[i] += (size_t)k;
			buf[i][got[i]] = 0;
			if (k == 0 || (k < 0 && errno != EAGAIN) || strstr(buf[i], "\r\n\r\n")) {
				int code = 0;
				sscanf(buf[i], "HTTP/1.1 %d", &code);
				st200 += code == 200;
				st503 += code == 503;
				other += code != 200 && code != 503;
				/* Held open: a relayed one keeps its place under the limit. */
				fds[i] = p[i].fd;
				p[i].fd = -1;
				left--;
			}
		}
	}
	uint64_t took = t_now_ms() - t0;
	fprintf(stderr, "    %d connections, --max-conns %d: %d x 200, %d x 503, %d other, %d unanswered, %llu ms\n", n,
		max, st200, st503, other, left, (unsigned long long)took);
	EXPECT_EQ(left, 0);
	EXPECT_EQ(other, 0);
	EXPECT_EQ(st200 + st503, n);
	EXPECT_GE(st200, max - 16);
	EXPECT_LE(st200, max);
	EXPECT_GE(st503, n - max);
	for (int i = 0; i < n; i++)
		close(p[i].fd >= 0 ? p[i].fd : fds[i]);
	free(fds);
	free(p);
	free(buf);
	free(got);
	EXPECT_EQ(stop_serve(&s), 0);
}
