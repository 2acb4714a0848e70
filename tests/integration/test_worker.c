/* The control protocol end to end with the real example workers
 * (build/examples/echo_worker, sha256_worker), spawned the way the host
 * does: the control socket inherited as fd 10, MESH_CONTROL_FD=10. */
#include "base/clock.h"
#include "base/err.h"
#include "runner/t.h"
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEC MESH_NS_PER_S

/* Spawns prog with its output in log; env_extra is "K=V" or NULL. */
static pid_t spawn(const char *prog, struct mesh_ctl **ctl, const char *log, const char *env_extra)
{
	int child_fd = -1;
	if (ctl && mesh_ctl_pair(ctl, &child_fd) < 0)
		FAIL("mesh_ctl_pair");
	pid_t pid = fork();
	if (pid < 0)
		FAIL("fork: %s", strerror(errno));
	if (pid == 0) {
		int out = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(out, 1);
		dup2(out, 2);
		unsetenv(MESH_CONTROL_FD_ENV);
		if (child_fd >= 0) {
			dup2(child_fd, 10);
			setenv(MESH_CONTROL_FD_ENV, "10", 1);
		}
		if (env_extra)
			putenv((char *)env_extra);
		execl(prog, prog, (char *)NULL);
		_exit(127);
	}
	if (child_fd >= 0)
		close(child_fd);
	return pid;
}

static int wait_exit(pid_t pid, unsigned ms)
{
	int st;
	uint64_t t0 = t_now_ms();
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (t_now_ms() - t0 > ms) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(2000);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void expect_msg(struct mesh_ctl *ctl, enum mesh_ctl_kind kind, uint32_t gen)
{
	struct mesh_ctl_msg m;
	int rc = mesh_ctl_wait(ctl, &m, 10 * SEC);
	ASSERT_EQ(rc, 0);
	EXPECT_EQ(m.kind, kind);
	EXPECT_UEQ(m.gen, gen);
	if (m.kind == MESH_CTL_FAIL)
		FAIL("worker said: fail %s", m.text);
}

static void call_ok(struct mesh_slot *s, const char *req, const char *want)
{
	void *rep;
	size_t n;
	int rc = mesh_slot_call(s, req, strlen(req), &rep, &n, 10 * SEC, 20000);
	EXPECT_EQ(rc, 0);
	if (rc == 0) {
		EXPECT_STREQ(rep, want);
		EXPECT_EQ(n, strlen(want));
	}
	free(rep);
}

static void lifecycle(const char *env_extra)
{
	struct mesh_ctl *ctl;
	pid_t pid = spawn(t_bin("examples/echo_worker"), &ctl, "echo.log", env_extra);
	expect_msg(ctl, MESH_CTL_READY, 0);
	struct mesh_slot *s0, *s1;
	ASSERT_EQ(mesh_slot_create(&s0, 0, 0), 0);
	ASSERT_EQ(mesh_slot_create(&s1, 1, 0), 0);

	ASSERT_EQ(mesh_ctl_run(ctl, s0, 1), 0);
	expect_msg(ctl, MESH_CTL_ONLINE, 1);
	for (int i = 0; i < 100; i++) {
		char buf[32];
		snprintf(buf, sizeof buf, "ping %d", i);
		call_ok(s0, buf, buf);
	}
	struct mesh_slot_stats st;
	ASSERT_EQ(mesh_slot_stats(s0, &st), 0);
	EXPECT_UEQ(st.requests, 100);
	EXPECT_UEQ(st.replies, 100);
	EXPECT_EQ(st.online, 1);

	ASSERT_EQ(mesh_ctl_halt(ctl, s0), 0);
	expect_msg(ctl, MESH_CTL_HALTED, 1);
	EXPECT_EQ(kill(pid, 0), 0); /* HALT: the process stays */

	ASSERT_EQ(mesh_ctl_run(ctl, s1, 2), 0);
	expect_msg(ctl, MESH_CTL_ONLINE, 2);
	call_ok(s1, "second run", "second run");

	/* Halt and run again on the first slot: a slot is reusable. */
	ASSERT_EQ(mesh_ctl_halt(ctl, s1), 0);
	expect_msg(ctl, MESH_CTL_HALTED, 2);
	ASSERT_EQ(mesh_ctl_run(ctl, s0, 3), 0);
	expect_msg(ctl, MESH_CTL_ONLINE, 3);
	call_ok(s0, "third", "third");

	int rc = mesh_ctl_exit(ctl, s0);
	EXPECT_TRUE(rc == 0 || rc == MESH_E_CLOSED);
	EXPECT_EQ(wait_exit(pid, 10000), 0);
	struct mesh_ctl_msg m;
	EXPECT_EQ(mesh_ctl_wait(ctl, &m, SEC), MESH_E_CLOSED);
	ASSERT_EQ(mesh_slot_stats(s0, &st), 0);
	EXPECT_EQ(st.state, MESH_SLOT_EXITED);
	mesh_ctl_free(ctl);
	mesh_slot_free(s0);
	mesh_slot_free(s1);
}

TEST(echo_worker_ready_run_halt_run_exit)
{
	lifecycle(NULL);
}

/* The same with a worker that never spins: every request crosses a futex wake-up. */
TEST(echo_worker_sleeping_on_the_futex)
{
	lifecycle("MESH_WORKER_SPIN_US=0");
}

TEST(echo_worker_exit_while_waiting_for_run)
{
	struct mesh_ctl *ctl;
	pid_t pid = spawn(t_bin("examples/echo_worker"), &ctl, "echo.log", NULL);
	expect_msg(ctl, MESH_CTL_READY, 0);
	/* A halt with nothing running is ignored; exit ends it. */
	EXPECT_EQ(mesh_ctl_halt(ctl, NULL), 0);
	EXPECT_EQ(mesh_ctl_exit(ctl, NULL), 0);
	EXPECT_EQ(wait_exit(pid, 10000), 0);
	mesh_ctl_free(ctl);
}

TEST(worker_exits_when_meshd_goes_away)
{
	/* Idle (waiting for run) and running: both notice the closed channel. */
	for (int running = 0; running < 2; running++) {
		struct mesh_ctl *ctl;
		struct mesh_slot *s;
		ASSERT_EQ(mesh_slot_create(&s, 0, 0), 0);
		pid_t pid = spawn(t_bin("examples/echo_worker"), &ctl, "echo.log", NULL);
		expect_msg(ctl, MESH_CTL_READY, 0);
		if (running) {
			ASSERT_EQ(mesh_ctl_run(ctl, s, 1), 0);
			expect_msg(ctl, MESH_CTL_ONLINE, 1);
		}
		mesh_ctl_free(ctl);
		EXPECT_EQ(wait_exit(pid, 10000), 1);
		mesh_slot_free(s);
		char *log = t_read_file("echo.log", NULL);
		EXPECT_CONTAINS(log, "peer closed");
		free(log);
	}
}

TEST(worker_refuses_to_start_without_meshd)
{
	pid_t pid = spawn(t_bin("examples/echo_worker"), NULL, "echo.log", NULL);
	EXPECT_EQ(wait_exit(pid, 10000), 1);
	char *log = t_read_file("echo.log", NULL);
	EXPECT_CONTAINS(log, "start me from meshd");
	free(log);
	pid = spawn(t_bin("examples/echo_worker"), NULL, "echo.log", "MESH_CONTROL_FD=0");
	EXPECT_EQ(wait_exit(pid, 10000), 1);
	log = t_read_file("echo.log", NULL);
	EXPECT_CONTAINS(log, "echo_worker: ");
	free(log);
}

/* stdout into a file is block-buffered by default; the library makes it
 * line-buffered, so a worker SIGKILLed right after printing keeps its line. */
TEST(worker_output_survives_a_kill)
{
	struct mesh_ctl *ctl;
	pid_t pid = spawn(t_bin("examples/echo_worker"), &ctl, "echo.log", NULL);
	expect_msg(ctl, MESH_CTL_READY, 0);
	kill(pid, SIGKILL);
	EXPECT_EQ(wait_exit(pid, 10000), 128 + SIGKILL);
	char *log = t_read_file("echo.log", NULL);
	EXPECT_CONTAINS(log, "echo_worker: ready\n");
	free(log);
	struct mesh_ctl_msg m;
	EXPECT_EQ(mesh_ctl_wait(ctl, &m, SEC), MESH_E_CLOSED);
	mesh_ctl_free(ctl);
}

TEST(sha256_worker_matches_sha256sum)
{
	struct mesh_ctl *ctl;
	pid_t pid = spawn(t_bin("examples/sha256_worker"), &ctl, "sha.log", NULL);
	expect_msg(ctl, MESH_CTL_READY, 0);
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 2, 2u << 20), 0);
	ASSERT_EQ(mesh_ctl_run(ctl, s, 1), 0);
	expect_msg(ctl, MESH_CTL_ONLINE, 1);
	call_ok(s, "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	call_ok(s, "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	call_ok(s, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
		"248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	/* Sizes around the 64-byte block and padding boundaries, and 1 MiB, against sha256sum. */
	static const size_t sizes[] = {55, 56, 63, 64, 65, 119, 120, 1000, 1u << 20};
	char *buf = malloc(1u << 20);
	for (size_t i = 0; i < (1u << 20); i++)
		buf[i] = (char)('a' + (i * 7919u) % 26);
	for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
		FILE *f = fopen("in.bin", "wb");
		fwrite(buf, 1, sizes[k], f);
		fclose(f);
		char want[128];
		ASSERT_EQ(t_sh(want, sizeof want, 0, "sha256sum in.bin | cut -c1-64"), 0);
		want[64] = 0;
		void *rep;
		size_t n;
		ASSERT_EQ(mesh_slot_call(s, buf, sizes[k], &rep, &n, 10 * SEC, 0), 0);
		EXPECT_STREQ(rep, want);
		free(rep);
	}
	free(buf);
	int rc = mesh_ctl_exit(ctl, s);
	EXPECT_TRUE(rc == 0 || rc == MESH_E_CLOSED);
	EXPECT_EQ(wait_exit(pid, 10000), 0);
	mesh_ctl_free(ctl);
	mesh_slot_free(s);
}
