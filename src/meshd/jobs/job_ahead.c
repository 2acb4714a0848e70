/* The workers a job's slot executor asks the core for (job_exec_int.h): a
 * helper thread per worker asked, since the core's start blocks; and the
 * worker a submit asks for ahead of its driver (job_exec.h). */
#include "meshd/jobs/job_exec_int.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/thread.h"
#include "shm/ring.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

void mesh__jx_stamp_first(_Atomic uint64_t *stamp)
{
	uint64_t zero = 0;
	/* Once set, no clock read: it is asked at every start and send. */
	if (!atomic_load_explicit(stamp, memory_order_relaxed))
		atomic_compare_exchange_strong(stamp, &zero, mesh_mono_ns());
}

/* The core armed the slot of the worker it spawns for g, before the
 * spawn: g is got from here (its pid comes with the spawn's return). */
static void getter_armed(void *arg, const struct meshd_job_worker *h)
{
	struct meshd_job_ahead *g = arg;
	pthread_mutex_lock(&g->mu);
	g->rc = 0;
	g->h = *h;
	g->got = 1;
	int fd = g->kick_fd;
	pthread_mutex_unlock(&g->mu);
	if (fd >= 0)
		mesh_efd_ring(fd);
}

/* Asks the core for g's worker and says what came (got, or done when it
 * failed or is online already).  1 when its `online` is still to come. */
static int getter_get(struct meshd_job_ahead *g)
{
	struct meshd_job_worker h;
	char *err = NULL;
	int called = 0;
	int rc = meshd_job_worker_get_armed(g->core, g->program, &h, getter_armed, g, &called, &err);
	if (rc == 0 && h.online)
		mesh__jx_stamp_first(&g->st->first_online_ns);
	pthread_mutex_lock(&g->mu);
	if (called && rc != 0) {
		/* Got at the arming, then its spawn failed: a start that
		 * failed, its hold the executor's to put back. */
		g->launch_rc = rc;
		g->online_rc = rc;
		g->online_err = err;
	} else {
		g->rc = rc;
		g->err = err;
		g->h = h;
	}
	g->got = 1;
	g->done = rc != 0 || h.online;
	int fd = g->kick_fd;
	pthread_mutex_unlock(&g->mu);
	if (fd >= 0)
		mesh_efd_ring(fd); /* the executor joins us before it closes fd */
	return rc == 0 && !h.online;
}

/* Armed, not online yet: its chunks may be in its ring already. */
static void *getter_online(void *arg)
{
	struct meshd_job_ahead *g = arg;
	char *err = NULL;
	int rc = meshd_job_worker_online(g->core, &g->h, &err);
	if (rc == 0)
		mesh__jx_stamp_first(&g->st->first_online_ns);
	pthread_mutex_lock(&g->mu);
	g->online_rc = rc;
	g->online_err = err;
	g->done = 1;
	int fd = g->kick_fd;
	pthread_mutex_unlock(&g->mu);
	if (fd >= 0)
		mesh_efd_ring(fd);
	return NULL;
}

static void *getter_main(void *arg)
{
	struct meshd_job_ahead *g = arg;
	if (getter_get(g))
		getter_online(g);
	return NULL;
}

static struct meshd_job_ahead *getter_new(struct meshd_core *core, const char *program,
					   struct meshd_job_exec_stats *st, int kick_fd)
{
	struct meshd_job_ahead *g = calloc(1, sizeof *g);
	if (!g)
		return NULL;
	g->core = core;
	g->program = program;
	g->st = st;
	g->kick_fd = kick_fd;
	g->counted = 1;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	mesh__jx_stamp_first(&st->first_ask_ns);
	atomic_fetch_add_explicit(&st->starting, 1, memory_order_relaxed);
	return g;
}

int mesh__jx_getter_start(struct meshd_core *core, const char *program, struct meshd_job_exec_stats *st, int kick_fd,
			  struct meshd_job_ahead **out)
{
	struct meshd_job_ahead *g = getter_new(core, program, st, kick_fd);
	if (!g)
		return -ENOMEM;
	int rc = mesh_thread_run(&g->th, getter_main, g, 0);
	if (rc < 0) {
		atomic_fetch_sub_explicit(&st->starting, 1, memory_order_relaxed);
		mesh__jx_getter_free(g);
		return rc;
	}
	*out = g;
	return 0;
}

int mesh__jx_getter_state(struct meshd_job_ahead *g)
{
	pthread_mutex_lock(&g->mu);
	int st = g->done ? 2 : g->got;
	pthread_mutex_unlock(&g->mu);
	return st;
}

/* It no longer counts as starting (its worker joined, or it ended). */
static void getter_uncount(struct meshd_job_ahead *g)
{
	if (g->counted)
		atomic_fetch_sub_explicit(&g->st->starting, 1, memory_order_relaxed);
	g->counted = 0;
}

void mesh__jx_getter_join(struct meshd_job_ahead *g)
{
	pthread_mutex_lock(&g->mu);
	while (g->busy)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	if (!g->joined)
		mesh_thread_join(g->th, NULL);
	g->joined = 1;
	getter_uncount(g);
}

void mesh__jx_getter_free(struct meshd_job_ahead *g)
{
	free(g->err);
	free(g->online_err);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	free(g);
}

int meshd_job_ahead_new(struct meshd_core *core, const char *program, struct meshd_job_exec_stats *st,
			struct meshd_job_ahead **out)
{
	struct meshd_job_ahead *g = getter_new(core, program, st, -1);
	if (!g)
		return -ENOMEM;
	g->busy = 1;   /* until meshd_job_ahead_run */
	g->joined = 1; /* no thread yet */
	*out = g;
	return 0;
}

void meshd_job_ahead_run(struct meshd_job_ahead *g, int want)
{
	int more = 0;
	if (want) {
		more = getter_get(g);
	} else {
		pthread_mutex_lock(&g->mu);
		g->rc = MESH_E_STATE;
		g->got = g->done = 1;
		pthread_mutex_unlock(&g->mu);
	}
	/* Whoever joins g reads th and joined after busy ends (mu). */
	pthread_mutex_lock(&g->mu);
	if (more && mesh_thread_run(&g->th, getter_online, g, 0) == 0) {
		g->joined = 0;
	} else if (more) {
		/* No thread to wait for its `online`: a start that failed. */
		g->online_rc = -ENOMEM;
		g->done = 1;
	}
	g->busy = 0;
	int fd = more && g->joined ? g->kick_fd : -1;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	if (fd >= 0)
		mesh_efd_ring(fd);
}

void meshd_job_ahead_drop(struct meshd_job_ahead *a)
{
	if (!a)
		return;
	mesh__jx_getter_join(a);
	if (a->rc == 0)
		meshd_job_worker_put(a->core, &a->h, 0); /* nothing was sent into its slot */
	mesh__jx_getter_free(a);
}
