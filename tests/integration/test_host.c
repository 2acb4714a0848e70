/* The host with real worker processes (tests/workers/host_worker.c). */
#include "base/asan.h"
#include "base/clock.h"
#include "base/err.h"
#include "host/host.h"
#include "proc/proc.h"
#include "integration/host_t.h"
#include "runner/t.h"
#include "shm/shm.h"

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
#define ALL_UP (1u << MESH_IS_IDLE | 1u << MESH_IS_RUNNING)

/* A loop thread, as meshd runs one, for tests that block elsewhere. */
static volatile int loop_stop;
static void *loop_main(void *arg)
{
	while (!loop_stop)
		mesh_host_poll(arg, 50 * MESH_NS_PER_MS);
	return NULL;
}

/* A catalog "cat" with program w running host_worker in mode, and a host on it. */
static void setup(struct host_t_fx *f, const char *mode, const char *extra)
{
	char m[1024];
	snprintf(m, sizeof m,
		 "args = [\"%s\", \"child.pid\"]\n[env]\nHW_FLAG = \"yes\"\nMESH_WORKER_SPIN_US = \"50\"\n[lifecycle]\nready_timeout = \"20s\"\n%s", mode,
		 extra ? extra : "");
	host_t_program("w", m);
	static char *env[] = {"MESH_SERVICE_BASE=/svc", "MESH_MODELS=/models", "MESH_SYSTEM=test", NULL};
	struct mesh_host_cfg cfg = {.logs = "logs", .env = env};
	host_t_open(&cfg, "w", f);
}

static void call_ok(struct mesh_slot *s, const char *msg)
{
	void *rep = NULL;
	size_t n = 0;
	int rc = mesh_slot_call(s, msg, strlen(msg), &rep, &n, S(10), 0);
	if (rc)
		FAIL("call: %s", mesh_strerror(rc));
	ASSERT_EQ(n, strlen(msg));
	EXPECT_EQ(memcmp(rep, msg, n), 0);
	free(rep);
}

TEST(spawn_ready_run_halt_run_exit)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "echo", NULL);
	struct mesh_slot *s0, *s1;
	ASSERT_EQ(mesh_slot_create(&s0, 0, 0), 0);
	ASSERT_EQ(mesh_slot_create(&s1, 1, 0), 0);
	host_t_warm(&f);
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_IDLE);
	pid_t pid = mesh_instance_pid(f.w);
	EXPECT_GT(pid, 0);
	/* The worker got its environment. */
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/environ", (int)pid);
	size_t n;
	char *env = t_read_file(p, &n);
	ASSERT_TRUE(env != NULL);
	for (size_t i = 0; i < n; i++)
		if (!env[i])
			env[i] = '\n';
	EXPECT_CONTAINS(env, "MESH_SERVICE_BASE=/svc\n");
	EXPECT_CONTAINS(env, "MESH_MODELS=/models\n");
	EXPECT_CONTAINS(env, "MESH_SYSTEM=test\n");
	EXPECT_CONTAINS(env, "MESH_CONTROL_FD=3\n");
	EXPECT_CONTAINS(env, "HW_FLAG=yes\n");
	EXPECT_CONTAINS(env, "MESH_WORKER_SPIN_US=50\n"); /* the worker library's own setting, from the catalog */
	free(env);
	/* Its own session and process group; meshd's pdeathsig is set. */
	EXPECT_EQ(getpgid(pid), pid);
	EXPECT_EQ(getsid(pid), pid);

	ASSERT_EQ(mesh_instance_launch(f.w, s0, &err), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_RUNNING, S(10), &err), 0);
	call_ok(s0, "hello");
	ASSERT_EQ(mesh_instance_halt(f.w), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_IDLE, S(10), &err), 0);
	EXPECT_EQ(mesh_instance_pid(f.w), pid); /* the process stayed */
	/* A second run, on another slot. */
	ASSERT_EQ(mesh_instance_launch(f.w, s1, &err), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_RUNNING, S(10), &err), 0);
	call_ok(s1, "again");
	EXPECT_EQ(mesh_instance_launch(f.w, s0, &err), MESH_E_STATE); /* already on a slot */
	EXPECT_CONTAINS(err, "cannot launch while RUNNING");
	free(err);
	ASSERT_EQ(mesh_instance_exit(f.w), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err), 0);
	struct mesh_instance_stats st = mesh_instance_stats(f.w);
	EXPECT_EQ(st.last_exit, 0);
	EXPECT_EQ(st.spawns, 1);
	EXPECT_EQ(st.crashes, 0);
	EXPECT_TRUE(mesh_instance_crashed(f.w) == NULL);
	EXPECT_EQ(kill(pid, 0), -1);
	char *log = t_read_file("logs/w.log", NULL);
	EXPECT_CONTAINS(log, "host_worker echo: ready");
	EXPECT_CONTAINS(log, "exited with status 0");
	free(log);
	host_t_close(&f);
	mesh_slot_free(s0);
	mesh_slot_free(s1);
}

static void expect_tail(const char *report, const char *what, int first, int last)
{
	char l[64];
	snprintf(l, sizeof l, "\n%s line %d\n", what, first);
	EXPECT_CONTAINS(report, l);
	snprintf(l, sizeof l, "\n%s line %d\n", what, last);
	EXPECT_CONTAINS(report, l);
	snprintf(l, sizeof l, "\n%s line %d\n", what, first - 1);
	if (report && strstr(report, l))
		t__fail(__FILE__, __LINE__, "report holds more than 30 lines: \"%s\"", l);
}

TEST(crash_before_ready_is_a_crash_not_a_timeout)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "crash-before-ready", NULL);
	uint64_t t0 = t_now_ms();
	ASSERT_EQ(mesh_instance_warm(f.w, &err), 0);
	int rc = mesh_instance_wait(f.w, ALL_UP, S(20), &err);
	EXPECT_EQ(rc, MESH_E_CRASHED);
	EXPECT_LT(t_now_ms() - t0, 10000); /* not the 20 s ready timeout */
	EXPECT_CONTAINS(err, "crashed before ready: exit status 134 (killed by SIGABRT)");
	/* 30 lines: the 40 it printed, last 30 of them. */
	expect_tail(err, "setup", 11, 40);
	free(err);
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_DOWN);
	struct mesh_instance_stats st = mesh_instance_stats(f.w);
	EXPECT_EQ(st.last_exit, 134);
	EXPECT_EQ(st.crashes, 1);
	char *once = mesh_instance_crashed(f.w);
	EXPECT_CONTAINS(once, "before ready");
	free(once);
	EXPECT_TRUE(mesh_instance_crashed(f.w) == NULL); /* reported once */
	host_t_close(&f);
}

TEST(exit_before_ready_reports_status)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "exit-before-ready", NULL);
	ASSERT_EQ(mesh_instance_warm(f.w, &err), 0);
	EXPECT_EQ(mesh_instance_wait(f.w, ALL_UP, S(20), &err), MESH_E_CRASHED);
	EXPECT_CONTAINS(err, "crashed before ready: exit status 3\n");
	expect_tail(err, "setup", 11, 40);
	free(err);
	host_t_close(&f);
}

TEST(crash_while_running_fails_the_slot_with_tail)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "crash-on-call", NULL);
	struct mesh_slot *s;
	ASSERT_EQ(mesh_slot_create(&s, 3, 0), 0);
	/* Launch with no process: it is spawned and run once ready. */
	ASSERT_EQ(mesh_instance_launch(f.w, s, &err), 0);
	int rc = mesh_instance_wait(f.w, 1u << MESH_IS_RUNNING, S(20), &err);
	if (rc)
		FAIL("launch: %s", err);
	EXPECT_EQ(mesh_instance_slot(f.w) == s, 1);
	void *rep = NULL;
	size_t n;
	pthread_t th;
	loop_stop = 0;
	pthread_create(&th, NULL, loop_main, f.h);
	uint64_t t0 = t_now_ms();
	rc = mesh_slot_call(s, "x", 1, &rep, &n, S(20), 0);
	EXPECT_NE(rc, 0);
	EXPECT_TRUE(rc != MESH_E_TIMEOUT);
	EXPECT_LT(t_now_ms() - t0, 10000); /* the crash ended the call, not its timeout */
	loop_stop = 1;
	pthread_join(th, NULL);
	free(rep);
	/* The failure since the launch is what the wait reports. */
	rc = mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err);
	EXPECT_EQ(rc, MESH_E_CRASHED);
	EXPECT_CONTAINS(err, "exit status 139");
	free(err);
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_DOWN);
	char *rep2 = mesh_instance_crashed(f.w);
	EXPECT_CONTAINS(rep2, "crashed while running: exit status 139 (killed by SIGSEGV)");
	expect_tail(rep2, "call", 12, 40);
	EXPECT_CONTAINS(rep2, "about to crash\n");
	free(rep2);
	EXPECT_TRUE(mesh_slot_failed(s) != NULL);
	EXPECT_CONTAINS(mesh_slot_failed(s), "exit status 139");
	EXPECT_TRUE(mesh_instance_take_failed_slot(f.w) == s);
	struct mesh_instance_stats st = mesh_instance_stats(f.w);
	EXPECT_EQ(st.last_exit, 139);
	EXPECT_EQ(st.crashes, 1);
	/* The log has all 40 lines, not only the tail. */
	char *log = t_read_file("logs/w.log", NULL);
	EXPECT_CONTAINS(log, "call line 1\n");
	free(log);
	host_t_close(&f);
	mesh_slot_free(s);
}

TEST(ignoring_sigterm_gets_sigkill_after_grace)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "ignore-term", "stop_grace = \"600ms\"\n");
	host_t_warm(&f);
	uint64_t t0 = t_now_ms();
	ASSERT_EQ(mesh_instance_exit(f.w), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err), 0);
	uint64_t took = t_now_ms() - t0;
	EXPECT_GE(took, 550);
	EXPECT_LT(took, 5000);
	struct mesh_instance_stats st = mesh_instance_stats(f.w);
	EXPECT_EQ(st.last_exit, 128 + SIGKILL);
	EXPECT_EQ(st.crashes, 0); /* asked to exit: not a crash */
	EXPECT_TRUE(mesh_instance_crashed(f.w) == NULL);
	host_t_close(&f);
}

/* The stop sub-machine is the table's: exit sent, then the stop signal at
 * half the grace, then SIGKILL at the grace, each a state a waiter sees. */
TEST(stop_walks_exit_term_kill_states)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "ignore-term", "stop_grace = \"400ms\"\n");
	host_t_warm(&f);
	ASSERT_EQ(mesh_instance_exit(f.w), 0);
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_STOPPING_EXIT);
	/* A stopping worker takes no new work. */
	EXPECT_EQ(mesh_instance_warm(f.w, &err), MESH_E_STATE);
	EXPECT_CONTAINS(err, "cannot warm while STOPPING_EXIT");
	free(err);
	uint64_t t0 = t_now_ms();
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_STOPPING_TERM, S(10), &err), 0);
	EXPECT_GE(t_now_ms() - t0, 150);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_STOPPING_KILL | 1u << MESH_IS_DOWN, S(10), &err), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err), 0);
	EXPECT_GE(t_now_ms() - t0, 350);
	EXPECT_EQ(mesh_instance_stats(f.w).last_exit, 128 + SIGKILL);
	host_t_close(&f);
}

/* A grace of 0: SIGKILL at once, straight to STOPPING_KILL. */
TEST(stop_with_no_grace_kills_at_once)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "ignore-term", "stop_grace = \"0s\"\n");
	host_t_warm(&f);
	ASSERT_EQ(mesh_instance_exit(f.w), 0);
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_STOPPING_KILL);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err), 0);
	EXPECT_EQ(mesh_instance_stats(f.w).last_exit, 128 + SIGKILL);
	host_t_close(&f);
}

static int child_dead(pid_t c)
{
	if (kill(c, 0) != 0)
		return 1;
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/stat", (int)c);
	char *s = t_read_file(p, NULL);
	int z = !s || (strstr(s, ") Z") != NULL);
	free(s);
	return z;
}

static pid_t read_child(void)
{
	char *s = NULL;
	for (int i = 0; i < 400 && !s; i++) {
		s = t_read_file("child.pid", NULL);
		if (!s)
			usleep(5000);
	}
	ASSERT_TRUE(s != NULL);
	pid_t c = atoi(s);
	free(s);
	return c;
}

TEST(forked_child_dies_with_the_group)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "fork", "stop_grace = \"2s\"\n");
	host_t_warm(&f);
	pid_t c = read_child();
	ASSERT_GT(c, 0);
	EXPECT_EQ(getpgid(c), mesh_instance_pid(f.w));
	ASSERT_EQ(mesh_instance_exit(f.w), 0);
	ASSERT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err), 0);
	int dead = 0;
	for (int i = 0; i < 200 && !dead; i++) {
		dead = child_dead(c);
		if (!dead)
			usleep(10000);
	}
	EXPECT_TRUE(dead);
	/* And when the leader is killed from outside: a crash, and the group dies. */
	unlink("child.pid");
	host_t_warm(&f);
	c = read_child();
	kill(mesh_instance_pid(f.w), SIGKILL);
	EXPECT_EQ(mesh_instance_wait(f.w, 1u << MESH_IS_DOWN, S(10), &err), MESH_E_CRASHED);
	free(err);
	dead = 0;
	for (int i = 0; i < 200 && !dead; i++) {
		dead = child_dead(c);
		if (!dead)
			usleep(10000);
	}
	EXPECT_TRUE(dead);
	char *r = mesh_instance_crashed(f.w);
	EXPECT_CONTAINS(r, "crashed while idle: exit status 137 (killed by SIGKILL)");
	free(r);
	host_t_close(&f);
}

TEST(ready_timeout_fails_the_start)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "never-ready", NULL);
	/* The manifest's 20 s is overridden by a fresh manifest with 300 ms. */
	host_t_close(&f);
	t_write_file("cat/w.toml", "name = \"w\"\nbackends = [\"native\"]\nargs = [\"never-ready\"]\n"
				   "[lifecycle]\nready_timeout = \"300ms\"\n");
	struct mesh_host_cfg cfg = {.logs = "logs"};
	ASSERT_EQ(mesh_host_new(&f.h, &cfg, &err), 0);
	struct mesh_limits_caps caps = *mesh_host_caps(f.h);
	ASSERT_EQ(mesh_image_prepare("cat", "w", &caps, MESH_GPU_NONE, &f.img, &err), 0);
	ASSERT_EQ(mesh_instance_new(f.h, &f.img, &f.w), 0);
	ASSERT_EQ(mesh_instance_warm(f.w, &err), 0);
	int rc = mesh_instance_wait(f.w, ALL_UP, S(10), &err);
	EXPECT_EQ(rc, MESH_E_TIMEOUT);
	EXPECT_CONTAINS(err, "no 'ready' within 300 ms");
	free(err);
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_DOWN);
	host_t_close(&f);
}

TEST(stats_sampled_and_counted)
{
	struct host_t_fx f;
	setup(&f, "echo", NULL);
	host_t_warm(&f);
	/* Let the host sample (about once a second). */
	uint64_t until = mesh_mono_ns() + S(1) + 300 * MESH_NS_PER_MS;
	while (mesh_mono_ns() < until)
		mesh_host_poll(f.h, 100 * MESH_NS_PER_MS);
	struct mesh_instance_stats st = mesh_instance_stats(f.w);
	EXPECT_EQ(st.pid, mesh_instance_pid(f.w));
	EXPECT_GT(st.rss, 100 * 1024);
	EXPECT_EQ(st.spawns, 1);
	EXPECT_GE(st.cpu_pct, 0);
	struct mesh_host_totals t = mesh_host_totals(f.h);
	EXPECT_EQ(t.procs, 1);
	EXPECT_EQ(t.spawns, 1);
	EXPECT_EQ(t.crashes, 0);
	EXPECT_UEQ(t.rss, st.rss);
	host_t_close(&f);
}

/* The sampler reads all of /proc (about 10 us a process) once a second.
 * It did so on the thread that dispatches the host's events and under
 * the host's lock: on a machine with many processes every call into the
 * host (a cold start's `ready`, `mesh ps`) waited for it, once a second.
 * With 1,500 more processes here: a thread asking for the stats every
 * 0.2 ms while the test thread polls the host must not stall for the
 * length of a read of /proc, and the figures are still sampled. */
struct stall_ctx {
	struct mesh_instance *w;
	uint64_t min_ns;
	volatile int stop;
	int stalls;
	uint64_t worst;
};

static void *stats_asker(void *arg)
{
	struct stall_ctx *c = arg;
	while (!c->stop) {
		uint64_t t0 = mesh_mono_ns();
		(void)mesh_instance_stats(c->w);
		uint64_t d = mesh_mono_ns() - t0;
		if (d > c->worst)
			c->worst = d;
		c->stalls += d >= c->min_ns;
		usleep(200);
	}
	return NULL;
}

/* Built with AddressSanitizer (make check): its timing is the scheduler's. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

TEST(sampling_does_not_hold_the_host)
{
	enum { SLEEPERS = 1500 };
	/* A check of waits a /proc read long (about 26 ms): under ASan, four
	 * tests at once on 2 cores, calls waited up to 31 ms for the CPU
	 * alone (CI at f601935 and 093f7a0).  make test runs it. */
	if (SANITIZED)
		SKIP("a timing check, not meaningful in the sanitizer build (make test runs it)");
	static pid_t kids[SLEEPERS];
	int nk = 0;
	for (; nk < SLEEPERS; nk++) {
		pid_t k = fork();
		if (k == 0) {
			for (;;)
				pause();
		}
		if (k < 0)
			break;
		kids[nk] = k;
	}
	ASSERT_GE(nk, 1000);
	/* How long one read of /proc takes now (the best of three). */
	uint64_t scan = UINT64_MAX;
	for (int i = 0; i < 3; i++) {
		struct mesh_proc_table *t = NULL;
		uint64_t t0 = mesh_mono_ns();
		ASSERT_EQ(mesh_proc_table_read(&t), 0);
		uint64_t d = mesh_mono_ns() - t0;
		mesh_proc_table_free(t);
		if (d < scan)
			scan = d;
	}
	struct host_t_fx f;
	setup(&f, "echo", NULL);
	host_t_warm(&f);
	struct stall_ctx c = {.w = f.w, .min_ns = scan / 2};
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, stats_asker, &c), 0);
	/* Five samples' worth. */
	uint64_t until = mesh_mono_ns() + S(5) + 300 * MESH_NS_PER_MS;
	while (mesh_mono_ns() < until)
		mesh_host_poll(f.h, 100 * MESH_NS_PER_MS);
	c.stop = 1;
	pthread_join(th, NULL);
	struct mesh_instance_stats st = mesh_instance_stats(f.w);
	for (int i = 0; i < nk; i++)
		kill(kids[i], SIGKILL);
	for (int i = 0; i < nk; i++)
		waitpid(kids[i], NULL, 0);
	/* Before: a stall of about `scan` at each of the five samples.  Two
	 * are allowed for a thread the 2 shared cores did not run in time
	 * (with three samples and one allowed, a CI run under ASan had two:
	 * 18.4 ms at worst against a scan of 25.8 ms). */
	if (c.stalls > 2)
		FAIL("%d calls waited %.1f ms or more (the worst %.1f ms): a read of /proc takes %.1f ms", c.stalls,
		     (double)c.min_ns / 1e6, (double)c.worst / 1e6, (double)scan / 1e6);
	EXPECT_GT(st.rss, 100 * 1024);
	EXPECT_EQ(st.procs, 1);
	host_t_close(&f);
}

TEST(exec_failure_is_reported)
{
	struct host_t_fx f;
	char *err = NULL;
	setup(&f, "echo", NULL);
	char path[256];
	snprintf(path, sizeof path, "cat/%s/w", mesh_target_triple());
	/* Swap the binary for one that is gone after the prepare. */
	unlink(path);
	int rc = mesh_instance_warm(f.w, &err);
	EXPECT_EQ(rc, -ENOENT);
	EXPECT_CONTAINS(err, "cannot start");
	free(err);
	EXPECT_EQ(mesh_instance_state(f.w), MESH_IS_DOWN);
	host_t_close(&f);
}

#ifdef MESH_UNDER_ASAN
static const int under_asan = 1;
#else
static const int under_asan = 0;
#endif

TEST(limits_are_really_applied)
{
	struct host_t_fx f;
	/* An ASan worker reserves terabytes of shadow memory, which RLIMIT_DATA
	 * (really enforced) refuses: the memory limit is checked in normal builds. */
	setup(&f, "echo", under_asan ? "[limits]\nopen_files = 64\n" : "[limits]\nmemory = \"256M\"\nopen_files = 64\n");
	host_t_warm(&f);
	struct mesh_instance_stats st = mesh_instance_stats(f.w);
	EXPECT_UEQ(st.limits, MESH_LIM_NOFILE_RLIMIT | (under_asan ? 0 : MESH_LIM_MEMORY_RLIMIT));
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/limits", (int)st.pid);
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "grep -E '^Max (open files|data size)' %s", p), 0);
	if (!under_asan)
		EXPECT_CONTAINS(out, "Max data size             268435456            268435456");
	EXPECT_CONTAINS(out, "Max open files            64                   64");
	host_t_close(&f);
}

/* meshd SIGKILLed: its worker dies too (PR_SET_PDEATHSIG from the spawner thread). */
TEST(worker_dies_with_a_killed_host)
{
	pid_t host = fork();
	ASSERT_GE(host, 0);
	if (host == 0) {
		struct host_t_fx f;
		setup(&f, "echo", NULL);
		host_t_warm(&f);
		char b[32];
		snprintf(b, sizeof b, "%d\n", (int)mesh_instance_pid(f.w));
		t_write_file("worker.pid.tmp", b);
		rename("worker.pid.tmp", "worker.pid");
		for (;;)
			pause();
	}
	char *s = NULL;
	for (int i = 0; i < 2000 && !s; i++) {
		s = t_read_file("worker.pid", NULL);
		if (!s)
			usleep(5000);
	}
	ASSERT_TRUE(s != NULL);
	pid_t w = atoi(s);
	free(s);
	ASSERT_GT(w, 0);
	EXPECT_EQ(kill(w, 0), 0);
	kill(host, SIGKILL);
	waitpid(host, NULL, 0);
	int gone = 0;
	for (int i = 0; i < 400 && !gone; i++) {
		char p[64];
		snprintf(p, sizeof p, "/proc/%d/stat", (int)w);
		char *st = t_read_file(p, NULL);
		gone = !st || strstr(st, ") Z") != NULL;
		free(st);
		if (!gone)
			usleep(10000);
	}
	EXPECT_TRUE(gone);
}
