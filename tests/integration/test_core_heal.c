/* meshd's core heals itself (issue 9): a worker that breaks its slot, hangs
 * a call past its limit or stops beating is killed and replaced; a call
 * never waits past its own timeout; a crash loop is backed off and ends
 * FAILED.  The core (meshd/core/ops.h) driven directly, its loop on a thread. */
#include "base/clock.h"
#include "base/err.h"
#include "meshd/core/ops.h"
#include "host/image.h"
#include "integration/core_t.h"
#include "integration/host_t.h"
#include "runner/t.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)
#define MS(x) ((uint64_t)(x) * MESH_NS_PER_MS)

/* cat/<name>.toml running tests-workers/host_worker with args. */
static void program(const char *name, const char *args, const char *extra)
{
	char m[2048];
	snprintf(m, sizeof m, "args = [%s]\n%s", args, extra ? extra : "");
	host_t_program(name, m);
}

/* The pid of the first worker of the first program (0 if none), and the
 * program's FAILED reason (copied into failed, "" if none). */
static pid_t first_pid(struct meshd_core *d, uint32_t *spawns, char *failed, size_t cap)
{
	struct meshd_ps ps;
	pid_t pid = 0;
	if (meshd_op_ps(d, &ps) != 0)
		return 0;
	if (ps.nprograms && ps.programs[0].nworkers)
		pid = ps.programs[0].workers[0].st.pid;
	if (spawns)
		*spawns = ps.nprograms ? ps.programs[0].spawns : 0;
	if (failed)
		snprintf(failed, cap, "%s", ps.nprograms && ps.programs[0].failed ? ps.programs[0].failed : "");
	meshd_ps_release(&ps);
	return pid;
}

static int call(struct meshd_core *d, const char *name, const char *req, uint64_t timeout, char **err)
{
	void *rep = NULL;
	size_t n = 0;
	int rc = meshd_op_call(d, name, req, strlen(req), &rep, &n, timeout, err);
	if (rc == 0 && (n != strlen(req) || memcmp(rep, req, n) != 0))
		rc = -EBADMSG;
	free(rep);
	return rc;
}

static int gone(pid_t pid)
{
	return kill(pid, 0) != 0 && errno == ESRCH;
}

/* A worker writes a reply ring head far out of range: the call fails with
 * the slot's reason at once, the worker's group is killed (not left
 * RUNNING on a dead slot), and the next call gets a fresh worker. */
TEST(core_bad_reply_kills_the_worker_and_the_next_call_gets_a_fresh_one)
{
	char cwd[PATH_MAX], args[PATH_MAX + 64];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(args, sizeof args, "\"bad-reply\", \"%s/bad.once\"", cwd);
	program("bad", args, NULL);
	struct core_t c;
	struct meshd_config cfg = {.slots = 2};
	core_t_up(&c, cfg);
	char *err = NULL;
	ASSERT_EQ(call(c.d, "bad", "warm", S(10), &err), MESH_E_CORRUPT);
	EXPECT_CONTAINS(err, "reply ring");
	EXPECT_CONTAINS(err, "killed");
	free(err);
	err = NULL;
	pid_t old = 0;
	{
		/* The reap is an event of the loop: wait for it. */
		uint64_t until = t_now_ms() + 5000;
		struct meshd_ps ps;
		while (t_now_ms() < until) {
			ASSERT_EQ(meshd_op_ps(c.d, &ps), 0);
			int down = ps.programs[0].workers[0].st.state == MESH_IS_DOWN;
			old = ps.programs[0].workers[0].st.last_exit;
			meshd_ps_release(&ps);
			if (down)
				break;
			usleep(10000);
		}
		EXPECT_EQ(old, 137); /* SIGKILLed, the table's way */
	}
	uint64_t t0 = t_now_ms();
	int rc = call(c.d, "bad", "after", S(10), &err);
	if (rc)
		FAIL("the call after a bad reply failed: %s: %s", mesh_strerror(rc), err ? err : "");
	EXPECT_LT(t_now_ms() - t0, 5000);
	uint32_t spawns = 0;
	EXPECT_GT(first_pid(c.d, &spawns, NULL, 0), 0);
	EXPECT_EQ(spawns, 2);
	core_t_down(&c);
}

struct bg_call {
	struct meshd_core *d;
	const char *name, *req;
	uint64_t timeout;
	int rc;
	char *err;
};

static void *bg_main(void *arg)
{
	struct bg_call *b = arg;
	b->rc = call(b->d, b->name, b->req, b->timeout, &b->err);
	return NULL;
}

static void wait_log(const char *path, const char *text)
{
	uint64_t until = t_now_ms() + 10000;
	for (;;) {
		char *s = t_read_file(path, NULL);
		int found = s && strstr(s, text);
		free(s);
		if (found)
			return;
		if (t_now_ms() > until)
			FAIL("'%s' never appeared in %s", text, path);
		usleep(10000);
	}
}

/* A call queued behind a hung call on the program's only worker returns
 * when its own timeout (1 s) is up, not when the hung call ends. */
TEST(core_call_behind_a_hung_call_honours_its_timeout)
{
	program("hang", "\"hang-on-hang\"", NULL);
	struct core_t c;
	struct meshd_config cfg = {.slots = 2};
	core_t_up(&c, cfg);
	struct bg_call b = {c.d, "hang", "hang", S(8), 0, NULL};
	pthread_t th;
	pthread_create(&th, NULL, bg_main, &b);
	wait_log("logs/hang.log", "hanging\n");
	char *err = NULL;
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(call(c.d, "hang", "x", S(1), &err), MESH_E_TIMEOUT);
	uint64_t took = t_now_ms() - t0;
	EXPECT_GE(took, 900);
	EXPECT_LT(took, 2000);
	EXPECT_CONTAINS(err, "no worker of 'hang' was free within the call's 1000 ms");
	free(err);
	EXPECT_EQ(meshd_op_stop(c.d, "hang", NULL), 0);
	pthread_join(th, NULL);
	EXPECT_EQ(b.rc, MESH_E_STOPPED);
	free(b.err);
	core_t_down(&c);
}

/* call_timeout (manifest): a call past it kills the worker, the caller
 * hears why, and the next call gets a fresh worker. */
TEST(core_call_past_call_timeout_kills_and_replaces_the_worker)
{
	program("hang", "\"hang-on-hang\"", "[lifecycle]\ncall_timeout = \"300ms\"\n");
	struct core_t c;
	struct meshd_config cfg = {.slots = 2};
	core_t_up(&c, cfg);
	char *err = NULL;
	ASSERT_EQ(call(c.d, "hang", "a", S(10), &err), 0);
	pid_t pid = first_pid(c.d, NULL, NULL, 0);
	ASSERT_GT(pid, 0);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(call(c.d, "hang", "hang", S(10), &err), MESH_E_TIMEOUT);
	EXPECT_LT(t_now_ms() - t0, 3000);
	EXPECT_CONTAINS(err, "did not reply within its call_timeout of 300 ms");
	EXPECT_CONTAINS(err, "was killed");
	free(err);
	err = NULL;
	EXPECT_TRUE(gone(pid));
	int rc = call(c.d, "hang", "b", S(10), &err);
	if (rc)
		FAIL("the call after: %s: %s", mesh_strerror(rc), err ? err : "");
	pid_t fresh = first_pid(c.d, NULL, NULL, 0);
	EXPECT_GT(fresh, 0);
	EXPECT_NE(fresh, pid);
	core_t_down(&c);
}

/* Stops echo's worker pid (SIGSTOP: no heartbeat) and calls it with body:
 * the call fails within 5 s saying why, and the worker is killed. */
static void call_heals_a_stopped_worker(struct meshd_core *d, pid_t pid, const char *body)
{
	char *err = NULL;
	ASSERT_EQ(kill(pid, SIGSTOP), 0);
	uint64_t t0 = t_now_ms();
	int rc = call(d, "echo", body, S(10), &err);
	EXPECT_NE(rc, 0);
	EXPECT_LT(t_now_ms() - t0, 5000);
	EXPECT_CONTAINS(err, "heartbeat stopped");
	free(err);
	EXPECT_TRUE(gone(pid));
}

/* A worker whose node loop stops (SIGSTOP: no heartbeat) while a request
 * waits for it is killed after the heartbeat bound, the caller gets the
 * reason, and the next call is served by a fresh worker. */
TEST(core_stopped_heartbeat_with_a_request_waiting_kills_the_worker)
{
	program("echo", "\"echo\"", NULL);
	struct core_t c;
	struct meshd_config cfg = {.slots = 2, .heartbeat_timeout_ns = MS(300)};
	core_t_up(&c, cfg);
	char *err = NULL;
	ASSERT_EQ(call(c.d, "echo", "a", S(10), &err), 0);
	pid_t pid = first_pid(c.d, NULL, NULL, 0);
	ASSERT_GT(pid, 0);
	call_heals_a_stopped_worker(c.d, pid, "b");
	int rc = call(c.d, "echo", "c", S(10), &err);
	if (rc)
		FAIL("the call after: %s: %s", mesh_strerror(rc), err ? err : "");
	EXPECT_NE(first_pid(c.d, NULL, NULL, 0), pid);
	core_t_down(&c);
}

/* A call that begins while the loop is in a pass (the loop's kick lands
 * between its look at the workers and its timer) still gets heal checks:
 * the kick is never dropped for the pass's sake.  The pass is slowed (the
 * test seam) so that the call's kick lands inside the second pass after
 * the first call: before the fix the worker, stopped, was healed only when
 * the caller gave up 10 s later. */
TEST(core_call_begun_during_a_pass_still_gets_heal_checks)
{
	program("echo", "\"echo\"", NULL);
	struct core_t c;
	struct meshd_config cfg = {.slots = 2, .heartbeat_timeout_ns = MS(300), .test_pass_pause_ns = MS(200)};
	core_t_up(&c, cfg);
	char *err = NULL;
	ASSERT_EQ(call(c.d, "echo", "a", S(10), &err), 0);
	pid_t pid = first_pid(c.d, NULL, NULL, 0);
	ASSERT_GT(pid, 0);
	/* Let the loop settle (its passes for the start), then one call and
	 * into the pass that follows it. */
	usleep(1000000);
	ASSERT_EQ(call(c.d, "echo", "b", S(10), &err), 0);
	usleep(250000);
	call_heals_a_stopped_worker(c.d, pid, "c");
	core_t_down(&c);
}

struct storm {
	struct meshd_core *d;
	int crashed, other;
};

static void *storm_main(void *arg)
{
	struct storm *s = arg;
	for (int i = 0; i < 25; i++) {
		char *err = NULL;
		int rc = call(s->d, "crashy", "x", S(5), &err);
		if (rc == MESH_E_CRASHED && err && strstr(err, "crashed before ready"))
			__atomic_fetch_add(&s->crashed, 1, __ATOMIC_RELAXED);
		else
			__atomic_fetch_add(&s->other, 1, __ATOMIC_RELAXED);
		free(err);
	}
	return NULL;
}

/* 200 calls to a worker that dies before `ready` are answered with its
 * crash report from a few spawns (backoff), not a spawn each; more deaths
 * make the program FAILED with the reason in ps; start clears it. */
TEST(core_crash_loop_backs_off_then_fails_until_start)
{
	program("crashy", "\"crash-before-ready\"", NULL);
	struct core_t c;
	struct meshd_config cfg = {.slots = 2, .crash_backoff_ns = MS(50)};
	core_t_up(&c, cfg);
	struct storm s = {c.d, 0, 0};
	pthread_t th[8];
	for (int i = 0; i < 8; i++)
		pthread_create(&th[i], NULL, storm_main, &s);
	for (int i = 0; i < 8; i++)
		pthread_join(th[i], NULL);
	uint32_t spawns = 0;
	char failed[1024];
	first_pid(c.d, &spawns, failed, sizeof failed);
	EXPECT_EQ(s.crashed + s.other, 200);
	EXPECT_GE(s.crashed, 1);
	EXPECT_LE(spawns, 5);
	/* More calls as the backoff lets them spawn: FAILED after 5 deaths. */
	uint64_t until = t_now_ms() + 10000;
	char *err = NULL;
	while (!failed[0] && t_now_ms() < until) {
		call(c.d, "crashy", "x", S(5), &err);
		free(err);
		err = NULL;
		usleep(20000);
		first_pid(c.d, &spawns, failed, sizeof failed);
	}
	EXPECT_CONTAINS(failed, "5 starts died before 'ready'");
	EXPECT_CONTAINS(failed, "crashed before ready");
	EXPECT_EQ(spawns, 5);
	EXPECT_EQ(call(c.d, "crashy", "x", S(5), &err), MESH_E_CRASHED);
	EXPECT_CONTAINS(err, "'crashy' is FAILED");
	free(err);
	err = NULL;
	first_pid(c.d, &spawns, NULL, 0);
	EXPECT_EQ(spawns, 5); /* FAILED: no more spawns */
	/* start clears FAILED (and spawns: this one crashes too). */
	struct mesh_instance_stats st;
	EXPECT_EQ(meshd_op_start(c.d, "crashy", &st, &err), MESH_E_CRASHED);
	free(err);
	first_pid(c.d, &spawns, failed, sizeof failed);
	EXPECT_STREQ(failed, "");
	EXPECT_EQ(spawns, 6);
	core_t_down(&c);
}

struct fan {
	struct meshd_core *d;
	const char *name;
	int ok;
};

static void *fan_main(void *arg)
{
	struct fan *f = arg;
	char *err = NULL;
	if (call(f->d, f->name, "x", S(60), &err) == 0)
		__atomic_fetch_add(&f->ok, 1, __ATOMIC_RELAXED);
	else
		fprintf(stderr, "    call to %s: %s\n", f->name, err ? err : "?");
	free(err);
	return NULL;
}

/* 50 concurrent calls of a 200 ms handler, in ms. */
static uint64_t fan_out(struct meshd_core *d, const char *name)
{
	struct fan f = {d, name, 0};
	pthread_t th[50];
	uint64_t t0 = t_now_ms();
	for (int i = 0; i < 50; i++)
		pthread_create(&th[i], NULL, fan_main, &f);
	for (int i = 0; i < 50; i++)
		pthread_join(th[i], NULL);
	EXPECT_EQ(f.ok, 50);
	return t_now_ms() - t0;
}

/* max_workers > 1: demand beyond one worker starts more (the policy's
 * replica count), up to max_workers; 50 calls of 200 ms take well under
 * what they take with one worker. */
TEST_TIMEOUT(core_max_workers_scales_out_under_concurrent_calls, 90)
{
	program("one", "\"slow-200ms\"", "max_workers = 1\n");
	program("four", "\"slow-200ms\"", "max_workers = 4\n");
	struct core_t c;
	struct meshd_config cfg = {.slots = 8};
	core_t_up(&c, cfg);
	uint64_t t1 = fan_out(c.d, "one");
	uint64_t t4 = fan_out(c.d, "four");
	fprintf(stderr, "    50 calls of 200 ms: %llu ms with max_workers 1, %llu ms with 4 (%.2fx)\n",
		(unsigned long long)t1, (unsigned long long)t4, (double)t4 / (double)t1);
	EXPECT_GE(t1, 10000);
	EXPECT_LT(t4 * 10, t1 * 6); /* < 0.6x */
	struct meshd_ps ps;
	ASSERT_EQ(meshd_op_ps(c.d, &ps), 0);
	for (unsigned i = 0; i < ps.nprograms; i++) {
		const struct meshd_program_info *pi = &ps.programs[i];
		unsigned running = 0;
		for (unsigned k = 0; k < pi->nworkers; k++)
			running += pi->workers[k].st.state == MESH_IS_RUNNING;
		if (!strcmp(pi->name, "four")) {
			EXPECT_EQ(pi->spawns, 4);
			EXPECT_EQ(running, 4);
		} else {
			EXPECT_EQ(pi->spawns, 1);
		}
	}
	meshd_ps_release(&ps);
	core_t_down(&c);
}

static const struct meshd_worker_info *worker_of(const struct meshd_ps *ps, const char *name)
{
	for (unsigned i = 0; i < ps->nprograms; i++)
		if (!strcmp(ps->programs[i].name, name) && ps->programs[i].nworkers)
			return &ps->programs[i].workers[0];
	return NULL;
}

/* Every slot is taken by an idle worker: a call of a third program halts
 * the least recently used one off its slot (no 409 "no free slot"); the
 * halted process serves again later without a new spawn. */
TEST(core_full_slots_evict_the_least_recently_used_idle_worker)
{
	program("a", "\"echo\"", NULL);
	program("b", "\"echo\"", NULL);
	program("c", "\"echo\"", NULL);
	struct core_t c;
	struct meshd_config cfg = {.slots = 2};
	core_t_up(&c, cfg);
	char *err = NULL;
	ASSERT_EQ(call(c.d, "a", "1", S(10), &err), 0);
	ASSERT_EQ(call(c.d, "b", "2", S(10), &err), 0);
	int rc = call(c.d, "c", "3", S(10), &err);
	if (rc)
		FAIL("a third program with 2 slots: %s: %s", mesh_strerror(rc), err ? err : "");
	struct meshd_ps ps;
	ASSERT_EQ(meshd_op_ps(c.d, &ps), 0);
	const struct meshd_worker_info *wa = worker_of(&ps, "a"), *wb = worker_of(&ps, "b"), *wc = worker_of(&ps, "c");
	ASSERT_TRUE(wa && wb && wc);
	EXPECT_STREQ(mesh_istate_name(wa->st.state), "IDLE"); /* the least recently used: halted */
	EXPECT_EQ(wa->slot, -1);
	EXPECT_GT(wa->st.pid, 0); /* its process stays */
	EXPECT_STREQ(mesh_istate_name(wb->st.state), "RUNNING");
	EXPECT_STREQ(mesh_istate_name(wc->st.state), "RUNNING");
	pid_t pa = wa->st.pid;
	meshd_ps_release(&ps);
	/* a again: b is now the least recently used; a's process comes back. */
	rc = call(c.d, "a", "4", S(10), &err);
	if (rc)
		FAIL("a again: %s: %s", mesh_strerror(rc), err ? err : "");
	ASSERT_EQ(meshd_op_ps(c.d, &ps), 0);
	wa = worker_of(&ps, "a");
	wb = worker_of(&ps, "b");
	ASSERT_TRUE(wa && wb);
	EXPECT_EQ(wa->st.pid, pa);
	EXPECT_EQ(wa->st.spawns, 1);
	EXPECT_STREQ(mesh_istate_name(wa->st.state), "RUNNING");
	EXPECT_STREQ(mesh_istate_name(wb->st.state), "IDLE");
	meshd_ps_release(&ps);
	core_t_down(&c);
}

/* One halt at a time frees a slot: a call that halted an idle worker off
 * its slot waits for that halt however long it takes, and halts no second
 * one.  Here b is stopped (SIGSTOP), so its halt ends only at its online
 * timeout (400 ms), killed; before, the call's every 50 ms wait step
 * halted one more (c), and ran on c's slot. */
TEST(core_a_slow_halt_evicts_no_second_worker)
{
	program("a", "\"echo\"", NULL);
	program("b", "\"echo\"", "[lifecycle]\nonline_timeout = \"400ms\"\n");
	program("c", "\"echo\"", NULL);
	struct core_t c;
	struct meshd_config cfg = {.slots = 2};
	core_t_up(&c, cfg);
	char *err = NULL;
	const char *first[] = {"b", "c"};
	for (int i = 0; i < 2; i++) {
		int rc = call(c.d, first[i], "1", S(10), &err);
		if (rc)
			FAIL("%s: %s: %s", first[i], mesh_strerror(rc), err ? err : "");
	}
	struct meshd_ps ps;
	ASSERT_EQ(meshd_op_ps(c.d, &ps), 0);
	const struct meshd_worker_info *wb = worker_of(&ps, "b");
	ASSERT_TRUE(wb != NULL);
	pid_t pb = wb->st.pid;
	meshd_ps_release(&ps);
	ASSERT_EQ(kill(pb, SIGSTOP), 0);
	uint64_t t0 = t_now_ms();
	int rc = call(c.d, "a", "3", S(10), &err);
	if (rc)
		FAIL("a, with b's halt stuck: %s: %s", mesh_strerror(rc), err ? err : "");
	uint64_t took = t_now_ms() - t0;
	ASSERT_EQ(meshd_op_ps(c.d, &ps), 0);
	const struct meshd_worker_info *wa = worker_of(&ps, "a"), *wc = worker_of(&ps, "c");
	ASSERT_TRUE(wa && wc);
	EXPECT_STREQ(mesh_istate_name(wa->st.state), "RUNNING");
	EXPECT_STREQ(mesh_istate_name(wc->st.state), "RUNNING"); /* not halted too */
	EXPECT_GE(wc->slot, 0);
	meshd_ps_release(&ps);
	EXPECT_GE(took, 350); /* it waited for b's halt to time out */
	kill(pb, SIGCONT);
	core_t_down(&c);
}
