/* meshd on one event loop (daemon/ops.h, docs/DESIGN.md): timers armed for
 * the real deadlines instead of a fixed tick, and the control API and the
 * metrics listener on the same loop as the workers' events. */
#include "base/clock.h"
#include "base/err.h"
#include "daemon/ops.h"
#include "integration/host_t.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)

static char out[1 << 16];

static void *run_main(void *d)
{
	meshd_core_run(d);
	return NULL;
}

static unsigned procs_of(struct meshd_core *d)
{
	struct meshd_ps ps;
	unsigned n = ~0u;
	if (meshd_op_ps(d, &ps) == 0) {
		n = ps.host.procs;
		meshd_ps_release(&ps);
	}
	return n;
}

/* A worker idle for its idle_ttl is reaped then, not at the next pass of a
 * 500 ms tick: from the end of its last call to zero worker processes is
 * the TTL plus the exit itself.  Three rounds: a tick's phase could land
 * within the bound once by chance, not three times. */
TEST_TIMEOUT(core_loop_reaps_an_idle_worker_within_ttl_plus_150ms, 30)
{
	host_t_program("echo", "args = [\"echo\"]\nidle_ttl = \"200ms\"\n");
	struct meshd_config cfg = {.catalog = "cat", .logs = "logs", .slots = 1};
	struct meshd_core *d;
	char *err = NULL;
	ASSERT_EQ(meshd_core_new(&d, &cfg, &err), 0);
	pthread_t th;
	pthread_create(&th, NULL, run_main, d);
	uint64_t worst = 0, best = UINT64_MAX;
	for (int round = 0; round < 3; round++) {
		void *rep = NULL;
		size_t n;
		ASSERT_EQ(meshd_op_call(d, "echo", "a", 1, &rep, &n, S(10), &err), 0);
		free(rep);
		uint64_t t0 = mesh_mono_ns(), t = t0;
		while (procs_of(d) != 0 && (t = mesh_mono_ns()) < t0 + S(5))
			usleep(2000);
		t = mesh_mono_ns();
		ASSERT_EQ(procs_of(d), 0u);
		uint64_t ms = (t - t0) / MESH_NS_PER_MS;
		printf("round %d: last call -> zero workers %llu ms (idle_ttl 200 ms)\n", round, (unsigned long long)ms);
		if (ms > worst)
			worst = ms;
		if (ms < best)
			best = ms;
	}
	EXPECT_LE(worst, 350u);
	EXPECT_GE(best, 190u); /* and never before the TTL */
	meshd_core_stop(d);
	pthread_join(th, NULL);
	meshd_core_free(d);
}

/* A worker held by a job, then given back: reaped its TTL later, whatever
 * the loop's timer was armed for before (it was not armed at all). */
TEST_TIMEOUT(core_loop_reaps_a_job_worker_given_back, 30)
{
	host_t_program("echo", "args = [\"echo\"]\nidle_ttl = \"100ms\"\n");
	struct meshd_config cfg = {.catalog = "cat", .logs = "logs", .slots = 1};
	struct meshd_core *d;
	char *err = NULL;
	ASSERT_EQ(meshd_core_new(&d, &cfg, &err), 0);
	pthread_t th;
	pthread_create(&th, NULL, run_main, d);
	struct meshd_job_worker w;
	if (meshd_job_worker_get(d, "echo", &w, &err) != 0)
		FAIL("worker_get: %s", err ? err : "?");
	/* Held: never reaped, however long past its TTL. */
	usleep(300000);
	EXPECT_EQ(procs_of(d), 1u);
	meshd_job_worker_put(d, &w, 0);
	uint64_t t0 = mesh_mono_ns();
	while (procs_of(d) != 0 && mesh_mono_ns() < t0 + S(5))
		usleep(2000);
	uint64_t ms = (mesh_mono_ns() - t0) / MESH_NS_PER_MS;
	EXPECT_EQ(procs_of(d), 0u);
	EXPECT_LE(ms, 250u);
	meshd_core_stop(d);
	pthread_join(th, NULL);
	meshd_core_free(d);
}

/* The loop stops with no worker and nothing armed, and the host still
 * works without it (its waiters drive it themselves again). */
TEST_TIMEOUT(core_loop_stop_then_ops_without_a_loop, 30)
{
	host_t_program("echo", "args = [\"echo\"]\n");
	struct meshd_config cfg = {.catalog = "cat", .logs = "logs", .slots = 1};
	struct meshd_core *d;
	char *err = NULL;
	ASSERT_EQ(meshd_core_new(&d, &cfg, &err), 0);
	pthread_t th;
	pthread_create(&th, NULL, run_main, d);
	uint64_t t0 = mesh_mono_ns();
	meshd_core_stop(d);
	pthread_join(th, NULL);
	EXPECT_LT((mesh_mono_ns() - t0) / MESH_NS_PER_MS, 200u);
	void *rep = NULL;
	size_t n;
	ASSERT_EQ(meshd_op_call(d, "echo", "b", 1, &rep, &n, S(10), &err), 0);
	EXPECT_EQ(n, 1u);
	free(rep);
	meshd_core_free(d);
}

static int slow_call_began(void *arg)
{
	(void)arg;
	char *log = t_read_file("logs/slow.log", NULL);
	int began = log && strstr(log, "slow call begins");
	free(log);
	return began;
}

/* The control API and GET /metrics share the loop with the workers' events:
 * both answer at once while a call waits on a worker (the call's op runs on
 * a thread of its own), and SIGTERM still stops meshd cleanly, cutting
 * that call. */
TEST_TIMEOUT(meshd_loop_api_and_metrics_answer_during_a_call, 60)
{
	meshd_t_add_program(out, sizeof out, "slow", t_bin("tests-workers/host_worker"), "args = [\"slow-call\"]\n");
	pid_t pid = meshd_t_start_notified("--metrics 127.0.0.1:0", NULL, 0);
	int port = 0;
	ASSERT_TRUE(t_wait_for(meshd_t_metrics_port, &port, 10000));
	pid_t caller = fork();
	ASSERT_GE(caller, 0);
	if (caller == 0) {
		char cmd[8192];
		snprintf(cmd, sizeof cmd, "exec '%s' call slow --socket " SOCK " x >call.out 2>&1", t_bin("mesh"));
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	ASSERT_TRUE(t_wait_for(slow_call_began, NULL, 15000));
	for (int i = 0; i < 3; i++) {
		uint64_t t0 = t_now_ms();
		ASSERT_EQ(t_sh(out, sizeof out, 1, "curl -sS -o ps.json -w '%%{http_code}' --unix-socket " SOCK
						   " http://x/v1/ps"),
			  0);
		uint64_t t1 = t_now_ms();
		EXPECT_STREQ(out, "200");
		ASSERT_EQ(t_sh(out, sizeof out, 1, "curl -sS -o m.txt -w '%%{http_code}' http://127.0.0.1:%d/metrics", port),
			  0);
		uint64_t t2 = t_now_ms();
		EXPECT_STREQ(out, "200");
		EXPECT_LT(t1 - t0, 1000u);
		EXPECT_LT(t2 - t1, 1000u);
	}
	char *m = t_read_file("m.txt", NULL), *ps = t_read_file("ps.json", NULL);
	ASSERT_TRUE(m && ps);
	EXPECT_CONTAINS(m, "mesh_slots_in_use 1");
	EXPECT_CONTAINS(ps, "\"slow\"");
	free(m);
	free(ps);
	/* The call is still in flight. */
	EXPECT_EQ(waitpid(caller, NULL, WNOHANG), 0);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(meshd_t_stop(pid), 0);
	EXPECT_LT(t_now_ms() - t0, 10000u);
	int st;
	EXPECT_EQ(waitpid(caller, &st, 0), caller);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0); /* cut by the stop */
	struct stat sb;
	EXPECT_NE(stat(SOCK, &sb), 0); /* its socket is gone */
}

/* SIGTERM to an idle meshd: the loop's thread and the main thread's
 * shutdown end at once (no tick or poll timeout to wait out). */
TEST_TIMEOUT(meshd_loop_sigterm_stops_an_idle_meshd_at_once, 30)
{
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	pid_t pid = meshd_t_start_notified("--metrics 127.0.0.1:0", NULL, 0);
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "call echo hi"), 0);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(meshd_t_stop(pid), 0);
	uint64_t ms = t_now_ms() - t0;
	printf("SIGTERM -> exit with one warm worker: %llu ms\n", (unsigned long long)ms);
	EXPECT_LT(ms, 2000u);
	char *e = t_read_file("meshd.err", NULL);
	EXPECT_CONTAINS(e, "stopped");
	free(e);
}
