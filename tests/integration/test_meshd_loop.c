/* meshd on one event loop (meshd/core/ops.h, docs/DESIGN.md): timers armed for
 * the real deadlines instead of a fixed tick, and the control API and the
 * metrics listener on the same loop as the workers' events. */
#include "base/clock.h"
#include "base/err.h"
#include "meshd/core/ops.h"
#include "integration/core_t.h"
#include "integration/host_t.h"
#include "integration/meshd_t.h"
#include "runner/t.h"
#include "shm/shm.h"

#include <dirent.h>
#include <errno.h>
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

/* The tests' core: one slot. */
static const struct meshd_config LOOP_CFG = {.slots = 1};

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

/* A worker idle for its idle_ttl is reaped after it, never before: from
 * the end of its last call to zero worker processes is the TTL plus the
 * exit itself.  How soon after the TTL is bench_jobs.sh's "last chunk ->
 * zero workers" figure (1.003 to 1.013 s for an idle_ttl of 1 s); here, as
 * issue 34 asks of timing checks tighter than 1 s, only that every round
 * is reaped, within 1 s a step of slack (a bound of 350 ms on the
 * fourth of five rounds failed CI runs under ASan at 401, 438 and 519
 * ms). */
static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

TEST_TIMEOUT(core_loop_reaps_an_idle_worker_after_its_ttl, 30)
{
	host_t_program("echo", "args = [\"echo\"]\nidle_ttl = \"200ms\"\n");
	struct core_t c;
	core_t_up(&c, LOOP_CFG);
	struct meshd_core *d = c.d;
	char *err = NULL;
	enum { ROUNDS = 5 };
	uint64_t ms[ROUNDS];
	for (int round = 0; round < ROUNDS; round++) {
		void *rep = NULL;
		size_t n;
		ASSERT_EQ(meshd_op_call(d, "echo", "a", 1, &rep, &n, S(10), &err), 0);
		free(rep);
		uint64_t t0 = mesh_mono_ns(), t = t0;
		while (procs_of(d) != 0 && (t = mesh_mono_ns()) < t0 + S(5))
			usleep(2000);
		t = mesh_mono_ns();
		ASSERT_EQ(procs_of(d), 0u);
		ms[round] = (t - t0) / MESH_NS_PER_MS;
		printf("round %d: last call -> zero workers %llu ms (idle_ttl 200 ms)\n", round,
		       (unsigned long long)ms[round]);
	}
	qsort(ms, ROUNDS, sizeof ms[0], cmp_u64);
	EXPECT_LE(ms[ROUNDS - 1], 200u + 1000u * t_slack());
	EXPECT_GE(ms[0], 190u); /* and never before the TTL */
	core_t_down(&c);
}

/* A worker held by a job, then given back: reaped its TTL later, whatever
 * the loop's timer was armed for before (it was not armed at all).  The
 * loop has no periodic pass, so the defect this guards is a put that arms
 * nothing: the worker is never reaped.  The bound says only that (1 s a
 * step of slack); how soon after the TTL is bench_jobs.sh's figure.  At
 * 250 ms it failed a CI run under ASan, 4 binaries at a time (420 ms). */
TEST_TIMEOUT(core_loop_reaps_a_job_worker_given_back, 30)
{
	host_t_program("echo", "args = [\"echo\"]\nidle_ttl = \"100ms\"\n");
	struct core_t c;
	core_t_up(&c, LOOP_CFG);
	struct meshd_core *d = c.d;
	char *err = NULL;
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
	printf("given back -> zero workers %llu ms (idle_ttl 100 ms)\n", (unsigned long long)ms);
	EXPECT_EQ(procs_of(d), 0u);
	EXPECT_GE(ms, 90u); /* not before its TTL */
	EXPECT_LE(ms, 1000u * t_slack());
	core_t_down(&c);
}

/* The loop stops with no worker and nothing armed, and the host still
 * works without it (its waiters drive it themselves again). */
TEST_TIMEOUT(core_loop_stop_then_ops_without_a_loop, 30)
{
	host_t_program("echo", "args = [\"echo\"]\n");
	struct core_t c;
	core_t_up(&c, LOOP_CFG);
	struct meshd_core *d = c.d;
	char *err = NULL;
	uint64_t t0 = mesh_mono_ns();
	meshd_core_stop(d);
	pthread_join(c.th, NULL);
	EXPECT_LT((mesh_mono_ns() - t0) / MESH_NS_PER_MS, 1000u * t_slack()); /* it waits for nothing */
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
	pid_t pid = meshd_t_start(.args = "--metrics 127.0.0.1:0");
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
	pid_t pid = meshd_t_start(.args = "--metrics 127.0.0.1:0");
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

/* What the armed callback of a job's worker get saw (test below). */
struct armed_rec {
	int called;
	int kids_at_arm;
	int send_rc;
	uint32_t seq;
};

/* This process's children (the core spawns its workers from a thread of
 * its own: every thread's list). */
static int count_children(void)
{
	int n = 0;
	DIR *dir = opendir("/proc/self/task");
	struct dirent *e;
	while (dir && (e = readdir(dir))) {
		char path[300], buf[4096];
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%s/children", e->d_name);
		FILE *f = fopen(path, "r");
		while (f && fscanf(f, "%4095s", buf) == 1)
			n++;
		if (f)
			fclose(f);
	}
	if (dir)
		closedir(dir);
	return n;
}

/* Runs with the core's and the host's locks held: no host calls. */
static void rec_armed(void *arg, const struct meshd_job_worker *h)
{
	struct armed_rec *r = arg;
	r->called++;
	r->kids_at_arm = count_children();
	/* A job's first chunk, sent the moment the slot is armed. */
	r->send_rc = mesh_slot_send(h->slot, MESH_MSG_REQ, NULL, 0, "hi", 2, &r->seq);
}

/* A job's worker spawned from zero is the job's once its slot is armed,
 * before the spawn (meshd_job_worker_get_armed): no process existed when
 * the callback ran, what it sent into the slot's ring is the worker's
 * first request, answered once the worker is up.  Before, the worker was
 * returned only after its spawn had returned (1-7 ms on a loaded 2-CPU VM:
 * the worker's exec answers it), and the first chunk waited for that. */
TEST_TIMEOUT(core_job_worker_is_armed_before_its_spawn, 30)
{
	host_t_program("echo", "args = [\"echo\"]\n");
	struct core_t c;
	core_t_up(&c, LOOP_CFG);
	struct meshd_core *d = c.d;
	char *err = NULL;
	struct meshd_job_worker w;
	struct armed_rec r = {0};
	int called = 0;
	if (meshd_job_worker_get_armed(d, "echo", &w, rec_armed, &r, &called, &err) != 0)
		FAIL("worker_get_armed: %s", err ? err : "?");
	EXPECT_EQ(called, 1);
	EXPECT_EQ(r.called, 1);
	EXPECT_EQ(r.kids_at_arm, 0); /* armed before the spawn */
	EXPECT_GT(w.pid, 0);
	EXPECT_EQ(count_children(), 1);
	/* w.online is usually 0 here (the call does not wait for it), but a
	 * worker that comes up before the call returns may have set it. */
	EXPECT_EQ(r.send_rc, 0);
	ASSERT_EQ(meshd_job_worker_online(d, &w, &err), 0);
	struct mesh_slot_reply rep = {0};
	int rc = -EAGAIN;
	uint64_t t0 = mesh_mono_ns();
	while ((rc = mesh_slot_recv(w.slot, &rep)) == -EAGAIN && mesh_mono_ns() < t0 + S(5))
		usleep(1000);
	ASSERT_EQ(rc, 0);
	EXPECT_EQ(rep.kind, (uint32_t)MESH_MSG_REP);
	EXPECT_EQ(rep.seq, r.seq);
	EXPECT_EQ(rep.len, 2u);
	EXPECT_TRUE(rep.data && memcmp(rep.data, "hi", 2) == 0);
	free(rep.data);
	meshd_job_worker_put(d, &w, 0);
	core_t_down(&c);
}

/* A spawn that fails after the slot was armed for it: the get says so,
 * the hold is the caller's (armed told it), and once put back the slot is
 * free for the next worker (one slot here: a leak would say "no free
 * slot"). */
TEST_TIMEOUT(core_job_worker_spawn_failing_after_its_arm_gives_the_slot_back, 30)
{
	host_t_program("echo", "args = [\"echo\"]\n");
	struct core_t c;
	core_t_up(&c, LOOP_CFG);
	struct meshd_core *d = c.d;
	char *err = NULL;
	char *lerr = NULL;
	ASSERT_GT(meshd_program_max_workers(d, "echo", &lerr), 0u); /* loaded */
	free(lerr);
	char path[512];
	snprintf(path, sizeof path, "cat/%s/echo", mesh_target_triple());
	ASSERT_EQ(unlink(path), 0); /* gone before the spawn */
	struct meshd_job_worker w;
	struct armed_rec r = {0};
	int called = 0;
	int rc = meshd_job_worker_get_armed(d, "echo", &w, rec_armed, &r, &called, &err);
	EXPECT_LT(rc, 0);
	EXPECT_EQ(called, 1);
	EXPECT_EQ(r.called, 1);
	EXPECT_CONTAINS(err ? err : "", "cannot start");
	free(err);
	err = NULL;
	EXPECT_TRUE(w.prog != NULL);
	meshd_job_worker_put(d, &w, 0);
	/* Back, and the one slot free again. */
	ASSERT_EQ(symlink(t_bin("tests-workers/host_worker"), path), 0);
	memset(&r, 0, sizeof r);
	if (meshd_job_worker_get_armed(d, "echo", &w, rec_armed, &r, &called, &err) != 0)
		FAIL("worker_get_armed after the failure: %s", err ? err : "?");
	EXPECT_EQ(r.called, 1);
	ASSERT_EQ(meshd_job_worker_online(d, &w, &err), 0);
	meshd_job_worker_put(d, &w, 0);
	core_t_down(&c);
}
