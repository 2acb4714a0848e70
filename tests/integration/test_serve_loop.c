/* mesh serve's event loop sleeps when nothing happens: clients that left
 * the cold-start queue (a reset, a close, no byte sent) are gone from it and
 * leave no readiness behind that wakes the loop for ever (a hang-up is
 * level-triggered: a registration that never reads it would spin), and
 * idle relayed keep-alive connections cost no CPU. */
#include "runner/t.h"
#include "integration/serve_t.h"

#include <sys/socket.h>

/* user + system CPU of pid so far, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	char *s = t_read_file(path, NULL);
	if (!s)
		return -1;
	unsigned long ut = 0, st = 0;
	char *p = strrchr(s, ')');
	int ok = p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2;
	free(s);
	return ok ? (long)(ut + st) : -1;
}

/* CPU ticks pid spends over ms milliseconds of wall time. */
static long cpu_over(pid_t pid, unsigned ms)
{
	long c0 = cpu_ticks(pid);
	usleep(ms * 1000u);
	return cpu_ticks(pid) - c0;
}

struct open_arg {
	pid_t pid;
	const char *want;
};
/* Asks for a status line (SIGUSR1) and looks for want in the output. */
static int status_has(void *arg)
{
	struct open_arg *a = arg;
	kill(a->pid, SIGUSR1);
	usleep(20000);
	return file_has("out.txt", a->want);
}

TEST_TIMEOUT(serve_loop_sleeps_after_queued_clients_leave_and_when_idle, 40)
{
	enum { N = 10 };
	char up[8], ups[32];
	snprintf(up, sizeof up, "%d", free_port());
	snprintf(ups, sizeof ups, "127.0.0.1:%s", up);
	/* The server listens only after 3 s: the clients wait in the queue. */
	const char *args[] = {"--json", "--upstream", ups, "--idle", "30", "--", t_bin("examples/cold_http_server"),
			      "--port", up, "--listen-delay", "3", NULL};
	struct serve s = start_serve(args);
	int fds[2 * N];
	for (int i = 0; i < 2 * N; i++) {
		fds[i] = connect_to(s.port);
		ASSERT_GE(fds[i], 0);
	}
	ASSERT_TRUE(wait_file_has("out.txt", "\"event\":\"spawned\"", 5000));
	/* Half reset (SO_LINGER 0: an RST), half closed; none sent a byte. */
	for (int i = 0; i < 2 * N; i++) {
		if (i < N) {
			struct linger lg = {1, 0};
			setsockopt(fds[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
		}
		close(fds[i]);
	}
	struct open_arg oa = {s.pid, "\"open\":0,"};
	ASSERT_TRUE(t_wait_for(status_has, &oa, 2000));
	ASSERT_FALSE(file_has("out.txt", "\"event\":\"warm\""));
	/* The probe has backed off by now (2 ms for the first second, then
	 * slower): what is left is the loop. */
	long c = cpu_over(s.pid, 1000);
	fprintf(stderr, "    starting, the queue emptied by resets and closes: %ld CPU ticks in 1 s\n", c);
	EXPECT_LE(c, 15);
	ASSERT_FALSE(file_has("out.txt", "\"event\":\"warm\""));

	/* Warm: N keep-alive connections, one request each, then idle. */
	char resp[1024];
	int ok = 0;
	for (int i = 0; i < N; i++) {
		fds[i] = connect_to(s.port);
		ASSERT_GE(fds[i], 0);
		ASSERT_EQ(send_str(fds[i], "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"), 0);
		ok += read_response(fds[i], resp, sizeof resp) == 200;
	}
	EXPECT_EQ(ok, N);
	c = cpu_over(s.pid, 1000);
	fprintf(stderr, "    warm, %d idle keep-alive connections: %ld CPU ticks in 1 s\n", N, c);
	EXPECT_LE(c, 15);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	EXPECT_EQ(stop_serve(&s), 0);
}
