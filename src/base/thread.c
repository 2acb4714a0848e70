#include "base/thread.h"

#include "base/clock.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>


/* One run: what its joiner waits on. */
struct mesh_thread {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	void *(*fn)(void *);
	void *arg, *ret;
	int done, bg, detached;
};

/* A thread of the pool.  Parked ones are on pool_idle, each waiting on its
 * own cv for a run (job); all under pool_mu. */
struct parked {
	pthread_cond_t cv;
	struct mesh_thread *job;
	struct parked *next;
	pid_t tid;
	int bg; /* under SCHED_BATCH now */
};

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct parked *pool_idle;
static unsigned pool_nidle, pool_keep;
static int pool_policy = -1; /* the process's own, when the pool began */
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* A forked child has only the thread that forked: the parked ones are
 * gone, and so is whoever held the lock. */
static void pool_after_fork(void)
{
	pthread_mutex_init(&pool_mu, NULL);
	pool_idle = NULL;
	pool_nidle = pool_keep = 0;
}

static void pool_init(void)
{
	pool_policy = sched_getscheduler(0);
	pthread_atfork(NULL, NULL, pool_after_fork);
}

int mesh_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
	pthread_once(&pool_once, pool_init);
	pthread_attr_t at;
	pthread_attr_init(&at);
	/* It lives as long as its owner: not under the SCHED_BATCH of a
	 * background run that made it, which pthread_create would pass on
	 * for its whole life.  (meshd's driver comes to the foreground before
	 * it opens its run and may make a job loop; this holds whoever
	 * calls.) */
	if (pool_policy == SCHED_OTHER) {
		struct sched_param sp = {0};
		pthread_attr_setinheritsched(&at, PTHREAD_EXPLICIT_SCHED);
		pthread_attr_setschedpolicy(&at, SCHED_OTHER);
		pthread_attr_setschedparam(&at, &sp);
	}
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(t, &at, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	return -rc;
}

/* SCHED_BATCH or back to SCHED_OTHER; nothing when the process runs under
 * another policy (chrt): that is its user's choice.  A failure only costs
 * the preemption it would have spared. */
static void set_bg(pid_t tid, int bg)
{
	struct sched_param sp = {0};
	if (pool_policy == SCHED_OTHER)
		(void)sched_setscheduler(tid, bg ? SCHED_BATCH : SCHED_OTHER, &sp);
}

static void run_free(struct mesh_thread *t)
{
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
}

static void finish(struct mesh_thread *t, void *ret)
{
	if (t->detached) {
		run_free(t); /* nobody joins it */
		return;
	}
	pthread_mutex_lock(&t->mu);
	t->ret = ret;
	t->done = 1;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu); /* its joiner may free t from here */
}

/* Takes p off the parked list (pool_mu held). */
static void unpark(struct parked *p)
{
	struct parked **pp = &pool_idle;
	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = p->next;
		pool_nidle--;
	}
}

/* Parks p until it is given a run (1) or its time is up (0); pool_mu held. */
static int park(struct parked *p)
{
	p->next = pool_idle;
	pool_idle = p;
	pool_nidle++;
	uint64_t end = mesh_mono_ns() + MESH_THREAD_PARK_NS;
	struct timespec until = {(time_t)(end / 1000000000ull), (long)(end % 1000000000ull)};
	int rc = 0;
	while (!p->job) {
		if (pool_nidle <= pool_keep)
			rc = pthread_cond_wait(&p->cv, &pool_mu);
		else if (rc == ETIMEDOUT)
			break;
		else
			rc = pthread_cond_timedwait(&p->cv, &pool_mu, &until);
	}
	if (p->job)
		return 1;
	unpark(p);
	return 0;
}

static void *pool_main(void *arg)
{
	struct parked *p = arg;
	sigset_t all;
	sigfillset(&all);
	p->tid = gettid();
	/* Not its creator's name (a named loop's, meshd-jobs1): top -H and
	 * the tests tell the pool's threads from the loops. */
	prctl(PR_SET_NAME, "mesh-pool");
	if (!p->bg)
		set_bg(0, 0); /* its creator may have been background */
	pthread_mutex_lock(&pool_mu);
	for (;;) {
		if (!p->job && !park(p))
			break;
		struct mesh_thread *t = p->job;
		p->job = NULL;
		pthread_mutex_unlock(&pool_mu);
		finish(t, t->fn(t->arg));
		/* A run may have changed these; the next one gets them whole. */
		pthread_sigmask(SIG_SETMASK, &all, NULL);
		if (p->bg)
			set_bg(p->tid, 0);
		p->bg = 0;
		pthread_mutex_lock(&pool_mu);
		if (pool_nidle >= MESH_THREAD_PARK_MAX)
			break;
	}
	pthread_mutex_unlock(&pool_mu);
	pthread_cond_destroy(&p->cv);
	free(p);
	return NULL;
}

/* A new thread of the pool, with job t (NULL: parked at once). */
static int pool_grow(struct mesh_thread *t)
{
	struct parked *p = calloc(1, sizeof *p);
	if (!p)
		return -ENOMEM;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* park's deadline: mesh_mono_ns */
	pthread_cond_init(&p->cv, &ca);
	pthread_condattr_destroy(&ca);
	p->job = t;
	p->bg = t && t->bg;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	sigset_t all, old;
	pthread_t th;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* A new thread takes its creator's policy, and the kernel decides at
	 * its first wake-up whether it preempts us: the creator is SCHED_BATCH
	 * for that moment (glibc's attributes know no SCHED_BATCH). */
	int was = p->bg ? sched_getscheduler(0) : -1;
	if (was == SCHED_OTHER)
		set_bg(0, 1);
	int rc = pthread_create(&th, &at, pool_main, p);
	if (was == SCHED_OTHER)
		set_bg(0, 0);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&at);
	if (rc) {
		pthread_cond_destroy(&p->cv);
		free(p);
	}
	return -rc;
}

int mesh_thread_run(struct mesh_thread **out, void *(*fn)(void *), void *arg, int flags)
{
	if (out)
		*out = NULL;
	pthread_once(&pool_once, pool_init);
	struct mesh_thread *t = calloc(1, sizeof *t);
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	t->fn = fn;
	t->arg = arg;
	t->bg = (flags & MESH_THREAD_BG) != 0;
	int detached = t->detached = (flags & MESH_THREAD_DETACHED) != 0;
	pthread_mutex_lock(&pool_mu);
	struct parked *p = pool_idle;
	if (p) {
		pool_idle = p->next;
		pool_nidle--;
		/* Its policy before the wake-up, which is where the kernel
		 * decides whether it preempts us. */
		if (t->bg)
			set_bg(p->tid, 1);
		p->bg = t->bg;
		p->job = t;
		pthread_cond_signal(&p->cv);
	}
	pthread_mutex_unlock(&pool_mu);
	int rc = p ? 0 : pool_grow(t);
	if (rc < 0) {
		run_free(t);
		return rc;
	}
	if (!detached) /* a detached run may be over and t freed by now */
		*out = t;
	return 0;
}

void mesh_thread_fg(void)
{
	pthread_once(&pool_once, pool_init);
	set_bg(0, 0);
}

void mesh_thread_join(struct mesh_thread *t, void **ret)
{
	pthread_mutex_lock(&t->mu);
	while (!t->done)
		pthread_cond_wait(&t->cv, &t->mu);
	pthread_mutex_unlock(&t->mu);
	if (ret)
		*ret = t->ret;
	run_free(t);
}

int mesh_thread_keep(unsigned n)
{
	pthread_once(&pool_once, pool_init);
	pthread_mutex_lock(&pool_mu);
	unsigned have = pool_nidle;
	pool_keep = n < MESH_THREAD_PARK_MAX ? n : MESH_THREAD_PARK_MAX;
	pthread_mutex_unlock(&pool_mu);
	for (; have < n; have++) {
		int rc = pool_grow(NULL);
		if (rc < 0)
			return rc;
	}
	return 0;
}

unsigned mesh_thread_parked(void)
{
	pthread_mutex_lock(&pool_mu);
	unsigned n = pool_nidle;
	pthread_mutex_unlock(&pool_mu);
	return n;
}
