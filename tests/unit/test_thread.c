/* base/thread.h: the pool of parked threads behind mesh_thread_run. */
#include "base/clock.h"
#include "base/thread.h"
#include "runner/t.h"

#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static void *tid_of(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)gettid();
}

/* Parked threads show in mesh_thread_parked a moment after their run ends. */
static int wait_parked(unsigned n)
{
	uint64_t end = mesh_mono_ns() + 2000000000ull;
	while (mesh_thread_parked() < n && mesh_mono_ns() < end)
		usleep(1000);
	return mesh_thread_parked() >= n;
}

TEST(a_run_gives_its_value_and_the_next_reuses_the_parked_thread)
{
	struct mesh_thread *t;
	void *a = NULL, *b = NULL;
	ASSERT_EQ(mesh_thread_run(&t, tid_of, NULL, 0), 0);
	mesh_thread_join(t, &a);
	ASSERT_TRUE(a != NULL);
	EXPECT_NE((pid_t)(intptr_t)a, gettid());
	ASSERT_TRUE(wait_parked(1));
	ASSERT_EQ(mesh_thread_run(&t, tid_of, NULL, 0), 0);
	mesh_thread_join(t, &b);
	/* The same kernel thread: woken, not created. */
	EXPECT_EQ((pid_t)(intptr_t)a, (pid_t)(intptr_t)b);
}

struct sum_arg {
	unsigned i;
	uint64_t out;
};

static void *square(void *arg)
{
	struct sum_arg *s = arg;
	usleep(1000 * (s->i % 3));
	s->out = (uint64_t)s->i * s->i;
	return arg;
}

TEST(many_runs_at_once_each_end_with_their_own_result)
{
	enum { N = 80 };
	struct mesh_thread *t[N];
	struct sum_arg a[N];
	for (unsigned i = 0; i < N; i++) {
		a[i].i = i;
		a[i].out = 0;
		ASSERT_EQ(mesh_thread_run(&t[i], square, &a[i], i % 2 ? MESH_THREAD_BG : 0), 0);
	}
	for (unsigned i = 0; i < N; i++) {
		void *r = NULL;
		mesh_thread_join(t[i], &r);
		EXPECT_TRUE(r == &a[i]);
		EXPECT_UEQ(a[i].out, (uint64_t)i * i);
	}
	/* At most MESH_THREAD_PARK_MAX stay parked; the rest ended. */
	EXPECT_LE(mesh_thread_parked(), MESH_THREAD_PARK_MAX);
}

static void *policy_of(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)sched_getscheduler(0);
}

TEST(a_background_run_is_sched_batch_and_the_next_run_is_not)
{
	struct mesh_thread *t;
	void *p = NULL;
	/* A new thread for a background run, then a parked one. */
	for (int round = 0; round < 2; round++) {
		ASSERT_TRUE(round == 0 || wait_parked(1));
		ASSERT_EQ(mesh_thread_run(&t, policy_of, NULL, MESH_THREAD_BG), 0);
		mesh_thread_join(t, &p);
		EXPECT_EQ((int)(intptr_t)p, SCHED_BATCH);
		ASSERT_TRUE(wait_parked(1));
		ASSERT_EQ(mesh_thread_run(&t, policy_of, NULL, 0), 0);
		mesh_thread_join(t, &p);
		EXPECT_EQ((int)(intptr_t)p, SCHED_OTHER);
	}
}

/* From a background run: a long-lived thread's policy, as it begins. */
static void *start_then_policy(void *arg)
{
	(void)arg;
	pthread_t th;
	void *p = (void *)(intptr_t)-1;
	if (mesh_thread_start(&th, policy_of, NULL) == 0)
		pthread_join(th, &p);
	return p;
}

/* A thread that lives as long as its owner (a job loop, a store's beat),
 * made by a background run, does not keep that run's SCHED_BATCH for its
 * whole life. */
TEST(a_long_lived_thread_made_by_a_background_run_is_not_background)
{
	struct mesh_thread *t;
	void *p = NULL;
	ASSERT_EQ(mesh_thread_run(&t, start_then_policy, NULL, MESH_THREAD_BG), 0);
	mesh_thread_join(t, &p);
	EXPECT_EQ((int)(intptr_t)p, SCHED_OTHER);
}

static void *fg_then_policy(void *arg)
{
	(void)arg;
	mesh_thread_fg();
	return (void *)(intptr_t)sched_getscheduler(0);
}

TEST(a_background_run_can_come_to_the_foreground)
{
	struct mesh_thread *t;
	void *p = NULL;
	ASSERT_EQ(mesh_thread_run(&t, fg_then_policy, NULL, MESH_THREAD_BG), 0);
	mesh_thread_join(t, &p);
	EXPECT_EQ((int)(intptr_t)p, SCHED_OTHER);
}

static void *unblock_usr1(void *arg)
{
	(void)arg;
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	pthread_sigmask(SIG_UNBLOCK, &s, NULL);
	return (void *)(intptr_t)gettid();
}

static void *usr1_blocked(void *arg)
{
	(void)arg;
	sigset_t s;
	pthread_sigmask(SIG_SETMASK, NULL, &s);
	return (void *)(intptr_t)(sigismember(&s, SIGUSR1) == 1 && sigismember(&s, SIGTERM) == 1);
}

TEST(every_run_starts_with_every_signal_blocked)
{
	struct mesh_thread *t;
	void *r = NULL;
	ASSERT_EQ(mesh_thread_run(&t, unblock_usr1, NULL, 0), 0);
	mesh_thread_join(t, NULL);
	ASSERT_TRUE(wait_parked(1));
	ASSERT_EQ(mesh_thread_run(&t, usr1_blocked, NULL, 0), 0);
	mesh_thread_join(t, &r);
	EXPECT_EQ((int)(intptr_t)r, 1);
}

TEST(kept_threads_are_parked_before_any_run)
{
	ASSERT_EQ(mesh_thread_keep(6), 0);
	EXPECT_TRUE(wait_parked(6));
}

static void *forty_two(void *arg)
{
	(void)arg;
	return (void *)(intptr_t)42;
}

TEST(a_forked_child_runs_threads_of_its_own)
{
	/* Threads parked in the parent do not exist in the child. */
	struct mesh_thread *t;
	ASSERT_EQ(mesh_thread_run(&t, forty_two, NULL, 0), 0);
	mesh_thread_join(t, NULL);
	ASSERT_TRUE(wait_parked(1));
	pid_t pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		void *r = NULL;
		if (mesh_thread_parked() != 0 || mesh_thread_run(&t, forty_two, NULL, 0) != 0)
			_exit(2);
		mesh_thread_join(t, &r);
		_exit((intptr_t)r == 42 ? 0 : 3);
	}
	int st = -1;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	EXPECT_TRUE(WIFEXITED(st));
	EXPECT_EQ(WEXITSTATUS(st), 0);
}

static void *run_nested(void *arg)
{
	(void)arg;
	struct mesh_thread *t;
	void *p = NULL;
	if (mesh_thread_run(&t, policy_of, NULL, 0) < 0)
		return (void *)(intptr_t)-1;
	mesh_thread_join(t, &p);
	return p;
}

TEST(a_run_asked_for_by_a_background_run_is_not_background)
{
	/* Several at once, so that some of the nested runs need new threads. */
	enum { N = 8 };
	struct mesh_thread *t[N];
	for (int i = 0; i < N; i++)
		ASSERT_EQ(mesh_thread_run(&t[i], run_nested, NULL, MESH_THREAD_BG), 0);
	for (int i = 0; i < N; i++) {
		void *p = NULL;
		mesh_thread_join(t[i], &p);
		EXPECT_EQ((int)(intptr_t)p, SCHED_OTHER);
	}
}

/* A detached run: nobody joins it, its handle goes when it ends, and its
 * thread parks again for the next run. */
static _Atomic int detached_ran;
static void *count_run(void *arg)
{
	(void)arg;
	detached_ran++;
	return NULL;
}

TEST(a_detached_run_is_freed_when_it_ends_and_its_thread_parks)
{
	for (int i = 0; i < 50; i++)
		ASSERT_EQ(mesh_thread_run(NULL, count_run, NULL, MESH_THREAD_DETACHED), 0);
	uint64_t end = mesh_mono_ns() + 5000000000ull;
	while (detached_ran < 50 && mesh_mono_ns() < end)
		usleep(1000);
	EXPECT_EQ(detached_ran, 50);
	EXPECT_TRUE(wait_parked(1));
}
