/* meshd end to end under stress (issue 9): control requests get through
 * whatever calls are queued, a client that goes away cancels its queued
 * call, a crash loop ends FAILED in `mesh ps`, and running out of file
 * descriptors does not make meshd spin.  The real meshd and mesh binaries. */
#include "base/exit.h"
#include "host/image.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[65536];
static pid_t meshd_pid;

static int sock_connect(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	strcpy(sa.sun_path, SOCK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* In meshd's child: at most 40 fds. */
static void forty_fds(void)
{
	struct rlimit rl = {40, 40};
	setrlimit(RLIMIT_NOFILE, &rl);
}

static int mesh(const char *args)
{
	return t_sh(out, sizeof out, 1, "'%s' %s --socket " SOCK, t_bin("mesh"), args);
}

/* A call sent on a connection of its own, its answer not read. */
static int raw_call(const char *name, const char *body, unsigned timeout_s)
{
	char req[512];
	int fd = sock_connect();
	if (fd < 0)
		return -1;
	int n = snprintf(req, sizeof req,
			 "POST /v1/programs/%s/call?timeout=%u HTTP/1.1\r\nHost: meshd\r\nContent-Length: %zu\r\n\r\n%s",
			 name, timeout_s, strlen(body), body);
	if (write(fd, req, (size_t)n) != n) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The answer's status line on fd within ms, or "" (buf holds it). */
static const char *answer(int fd, unsigned ms, char *buf, size_t cap)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	buf[0] = 0;
	if (poll(&p, 1, (int)ms) == 1) {
		ssize_t n = read(fd, buf, cap - 1);
		buf[n > 0 ? n : 0] = 0;
	}
	return buf;
}

/* utime + stime of pid, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
	if (f)
		fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	unsigned long ut = 0, stt = 0;
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &stt) != 2)
		return -1;
	return (long)(ut + stt);
}

static void wait_for(const char *file, const char *text, unsigned ms)
{
	uint64_t until = t_now_ms() + ms;
	for (;;) {
		char *s = t_read_file(file, NULL);
		int found = s && strstr(s, text);
		free(s);
		if (found)
			return;
		if (t_now_ms() > until)
			FAIL("'%s' never appeared in %s", text, file);
		usleep(10000);
	}
}

/* The calls meshd's API runs now (waiting for a worker included), from
 * its /metrics; -1 when that cannot be read. */
static long calls_running(void)
{
	char body[65536];
	if (t_sh(body, sizeof body, 1, "curl -sS --max-time 5 --unix-socket " SOCK " http://x/metrics") != 0)
		return -1;
	const char *p = strstr(body, "mesh_api_ops_running{kind=\"call\"} ");
	return p ? strtol(p + strlen("mesh_api_ops_running{kind=\"call\"} "), NULL, 10) : -1;
}

static void wait_calls(long at_least)
{
	uint64_t until = t_now_ms() + 10000;
	while (calls_running() < at_least)
		if (t_now_ms() > until)
			FAIL("meshd never ran %ld calls at once (runs %ld)", at_least, calls_running());
		else
			usleep(10000);
}

/* 70 calls queued behind a hung call: ps, stop and unload still answer
 * (they do not wait for the calls' threads), and then every call does. */
TEST_TIMEOUT(meshd_control_gets_through_70_queued_calls, 60)
{
	meshd_t_add_program(out, sizeof out, "hang", t_bin("tests-workers/host_worker"), "args = [\"hang-on-hang\"]\n");
	meshd_pid = meshd_t_start(.args = "--slots 2", .wait_accept = 1);
	ASSERT_EQ(mesh("call hang warm"), 0);
	int fds[71];
	fds[0] = raw_call("hang", "hang", 30);
	ASSERT_GE(fds[0], 0);
	wait_for("logs/hang.log", "hanging\n", 10000);
	for (int i = 1; i < 71; i++) {
		fds[i] = raw_call("hang", "q", 30);
		ASSERT_GE(fds[i], 0);
	}
	wait_calls(60); /* (nearly) all the calls run */
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(mesh("ps"), 0);
	EXPECT_CONTAINS(out, "hang");
	EXPECT_LT(t_now_ms() - t0, 2000);
	t0 = t_now_ms();
	EXPECT_EQ(mesh("stop hang"), 0);
	EXPECT_LT(t_now_ms() - t0, 6000);
	/* Every call is answered now (stopped, or refused when over the bound). */
	char buf[512];
	int answered = 0;
	for (int i = 0; i < 71; i++) {
		answered += !strncmp(answer(fds[i], 5000, buf, sizeof buf), "HTTP/1.1 ", 9);
		close(fds[i]);
	}
	EXPECT_EQ(answered, 71);
	EXPECT_EQ(mesh("unload hang"), 0);
	meshd_t_stop(meshd_pid);
}

/* A client that closes its connection while its call waits for a worker
 * cancels that call: it ends now, not at its 20 s timeout. */
TEST_TIMEOUT(meshd_client_gone_cancels_its_queued_call, 60)
{
	meshd_t_add_program(out, sizeof out, "hang", t_bin("tests-workers/host_worker"), "args = [\"hang-on-hang\"]\n");
	meshd_pid = meshd_t_start(.args = "--slots 2", .wait_accept = 1);
	ASSERT_EQ(mesh("call hang warm"), 0);
	int busy = raw_call("hang", "hang", 30);
	ASSERT_GE(busy, 0);
	wait_for("logs/hang.log", "hanging\n", 10000);
	wait_calls(1);
	int fd = raw_call("hang", "q", 20);
	ASSERT_GE(fd, 0);
	wait_calls(2);
	uint64_t t0 = t_now_ms();
	close(fd);
	wait_for("meshd.err", "aborted=1", 5000);
	EXPECT_LT(t_now_ms() - t0, 3000);
	char *err = t_read_file("meshd.err", NULL);
	EXPECT_CONTAINS(err, "request=\"POST /v1/programs/hang/call\" status=");
	free(err);
	close(busy);
	meshd_t_stop(meshd_pid);
}

/* Calls name (a worker that dies before `ready`) until `mesh ps` shows it
 * FAILED, for at most 15 s; 1 when it does (out holds that `mesh ps`). */
static int crash_loop_to_failed(const char *name)
{
	char call[128];
	uint64_t until = t_now_ms() + 15000;
	snprintf(call, sizeof call, "call %s x", name);
	while (t_now_ms() < until) {
		mesh(call);
		if (mesh("ps") == 0 && strstr(out, "FAILED: 5 starts died before 'ready'"))
			return 1;
		usleep(100000);
	}
	return 0;
}

/* A worker that dies before `ready` again and again: calls are answered
 * with its crash report, then the program is FAILED with the reason in
 * `mesh ps` (and its JSON); `mesh start` clears it. */
TEST_TIMEOUT(meshd_crash_loop_is_failed_in_ps_until_start, 60)
{
	meshd_t_add_program(out, sizeof out, "crashy", t_bin("tests-workers/host_worker"), "args = [\"crash-before-ready\"]\n");
	meshd_pid = meshd_t_start(.args = "--slots 2", .wait_accept = 1);
	EXPECT_NE(mesh("call crashy x"), 0);
	EXPECT_CONTAINS(out, "crashed before ready");
	EXPECT_TRUE(crash_loop_to_failed("crashy"));
	EXPECT_CONTAINS(out, "crashed before ready");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "'%s' ps --json --socket " SOCK, t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "\"failed\":\"5 starts died before 'ready'");
	EXPECT_NE(mesh("call crashy x"), 0);
	EXPECT_CONTAINS(out, "'crashy' is FAILED");
	EXPECT_NE(mesh("start crashy"), 0); /* it crashes again, but is not FAILED any more */
	ASSERT_EQ(mesh("ps"), 0);
	EXPECT_FALSE(strstr(out, "FAILED:") != NULL);
	meshd_t_stop(meshd_pid);
}

/* A job whose program is FAILED (a crash loop) cannot move until `mesh
 * start`: its JSON says why (program_failed) and `mesh wait` says so and
 * exits 75 (temporary: `mesh start`, then wait again).  Before, the job
 * sat `running` and `mesh wait` said nothing at all; then it said so once
 * and waited on for good (issue 31, item 4: a rollback that left the
 * program FAILED hung every `mesh wait`). */
TEST_TIMEOUT(meshd_job_of_a_failed_program_says_why_it_waits, 60)
{
	meshd_t_add_program(out, sizeof out, "crashy", t_bin("tests-workers/host_worker"), "args = [\"crash-before-ready\"]\n");
	meshd_pid = meshd_t_start(.args = "--slots 2", .wait_accept = 1);
	ASSERT_TRUE(crash_loop_to_failed("crashy"));
	ASSERT_EQ(mesh("submit crashy --chunks 3"), 0);
	char id[32];
	snprintf(id, sizeof id, "%.31s", out);
	id[strcspn(id, " \n")] = 0;
	ASSERT_EQ(mesh("jobs --json"), 0);
	EXPECT_CONTAINS(out, "\"state\":\"running\"");
	EXPECT_CONTAINS(out, "\"program_failed\":\"5 starts died before 'ready'");
	/* mesh wait: the line once, and exit 75 (a timeout would say 124) */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "timeout 10 '%s' wait %s --socket " SOCK, t_bin("mesh"), id),
		  MESH_EXIT_TEMPFAIL);
	EXPECT_CONTAINS(out, "waits: its program 'crashy' is FAILED: 5 starts died before 'ready'");
	EXPECT_CONTAINS(out, "`mesh start crashy` clears it");
	const char *first = strstr(out, "is FAILED");
	EXPECT_TRUE(first && !strstr(first + 1, "is FAILED")); /* once */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "timeout 10 '%s' wait %s --quiet --socket " SOCK, t_bin("mesh"), id),
		  MESH_EXIT_TEMPFAIL);
	EXPECT_CONTAINS(out, "is FAILED");
	/* The Python client's wait too: E_STATE at once, not a wait for good. */
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "PYTHONPATH='%s' timeout 10 python3 -c \"\n"
		       "from mesh.client import Client, MeshError\n"
		       "try: Client('" SOCK "').job('%s').wait()\n"
		       "except MeshError as e: print('raised', e.code, e)\"",
		       t_src("sdk/python"), id),
		  0);
	EXPECT_CONTAINS(out, "raised E_STATE job");
	EXPECT_CONTAINS(out, "is FAILED: 5 starts died before 'ready'");
	meshd_t_stop(meshd_pid);
}

/* Out of fds with idle clients holding them: meshd pauses accepting
 * instead of spinning, logs it once, and serves again once they go. */
TEST_TIMEOUT(meshd_out_of_fds_does_not_spin, 60)
{
	meshd_t_add_program(out, sizeof out, "echo", t_bin("tests-workers/host_worker"), "args = [\"echo\"]\n");
	meshd_pid = meshd_t_start(.args = "--slots 2", .child = forty_fds, .wait_accept = 1);
	int fds[80];
	for (int i = 0; i < 80; i++)
		fds[i] = sock_connect();
	wait_for("meshd.err", "Too many open files", 5000);
	long c0 = cpu_ticks(meshd_pid);
	usleep(1000000); /* the measurement itself: meshd's CPU over 1 s */
	long c1 = cpu_ticks(meshd_pid);
	ASSERT_GE(c0, 0);
	fprintf(stderr, "    meshd cpu over 1 s with 80 idle clients and 40 fds: %ld ticks of %ld\n", c1 - c0,
		sysconf(_SC_CLK_TCK));
	EXPECT_LT(c1 - c0, sysconf(_SC_CLK_TCK) / 10);
	char *err = t_read_file("meshd.err", NULL);
	int lines = 0;
	for (const char *p = err; p && (p = strstr(p, "Too many open files")); p++)
		lines++;
	EXPECT_LE(lines, 2);
	free(err);
	for (int i = 0; i < 80; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	uint64_t until = t_now_ms() + 5000;
	int rc;
	while ((rc = mesh("ps")) != 0 && t_now_ms() < until)
		usleep(50000);
	EXPECT_EQ(rc, 0);
	EXPECT_EQ(mesh("call echo hi"), 0);
	meshd_t_stop(meshd_pid);
}
