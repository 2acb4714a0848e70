/* What meshd keeps of the jobs that ended (jobs.h, struct meshd_jobs_keep;
 * docs/jobs.md, "Running meshd for months"): the janitor thread, which
 * joins the drivers that returned, closes the files of ended jobs once
 * they are idle, and removes the jobs past the retention; and `mesh rm`.
 *
 * The janitor sleeps on jan_cv (with j->mu) for TICK_NS, or until kicked:
 * a driver returned, a reader opened an ended job's files, meshd stops.
 * Locks: j->mu, then a job's mu (never the other way round). */
#include "meshd/jobs/jobs.h"
#include "meshd/jobs/jobs_int.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "base/thread.h"
#include "job/home.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* An ended job's files stay open this long after their last use (the next
 * page of `mesh results` finds them), for at most FILES_CACHED jobs. */
#define FILES_IDLE_NS (2 * MESH_NS_PER_S)
#define FILES_CACHED 4
#define TICK_NS MESH_NS_PER_S

void mesh__jobs_kick(struct meshd_jobs *j)
{
	pthread_mutex_lock(&j->mu);
	j->jan_kick = 1;
	pthread_cond_signal(&j->jan_cv);
	pthread_mutex_unlock(&j->mu);
}

/* ---- removal ---- */

/* Takes jb off the list (j->mu held): the list's reference is now the
 * caller's; its counts go to the removed jobs' sums. */
static void unlink_locked(struct meshd_jobs *j, struct job *jb)
{
	struct job **pp = &j->list;
	while (*pp && *pp != jb)
		pp = &(*pp)->next;
	if (*pp)
		*pp = jb->next;
	jb->linked = 0;
	jb->next = NULL;
	j->gone_done += jb->sum.st.done;
	j->gone_duplicates += jb->sum.st.duplicates;
	j->gone_wins += jb->sum.st.speculative_wins;
}

/* Removes jb (taken off the list, marked removed) from its home, for
 * good.  Puts the reference the caller took over.  0 or an error with
 * *err. */
static int remove_job(struct job *jb, char **err)
{
	/* Its handles, open or in use, go with the job's last reference. */
	struct mesh_home_job *hj = jb->hj;
	int rc = hj->home->ops->remove(hj, err);
	mesh__job_put(jb);
	return rc;
}

int meshd_jobs_remove(struct meshd_jobs *j, uint64_t id, char **err)
{
	if (err)
		*err = NULL;
	struct job *jb = mesh__jobs_find(&j->homes[0], id);
	if (!jb)
		return mesh_errf(err, MESH_E_NOTFOUND, "no job %" PRIu64, id);
	pthread_mutex_lock(&jb->mu);
	int running = jb->state == MESH_HOME_RUNNING, gone = jb->removed;
	if (!running)
		jb->removed = 1;
	pthread_mutex_unlock(&jb->mu);
	if (running || gone) {
		mesh__job_put(jb);
		if (gone)
			return mesh_errf(err, MESH_E_NOTFOUND, "no job %" PRIu64, id);
		return mesh_errf(err, MESH_E_STATE,
				 "job %" PRIu64 " is running: `mesh cancel %" PRIu64 "` stops it for good (what is DONE "
				 "stays), then `mesh rm %" PRIu64 "` removes it",
				 id, id, id);
	}
	pthread_mutex_lock(&j->mu);
	int mine = jb->linked;
	if (mine)
		unlink_locked(j, jb);
	pthread_mutex_unlock(&j->mu);
	mesh__job_put(jb); /* the find's */
	if (!mine)
		return mesh_errf(err, MESH_E_NOTFOUND, "no job %" PRIu64, id);
	char *why = NULL;
	int rc = remove_job(jb, &why);
	if (rc < 0)
		rc = mesh_errf(err, rc, "job %" PRIu64 " is forgotten, but %s", id, why ? why : mesh_strerror(rc));
	else
		mesh_info("job=%" PRIu64 " removed", id);
	free(why);
	return rc;
}

void meshd_jobs_gone(struct meshd_jobs *j, uint64_t *done, uint64_t *duplicates, uint64_t *wins)
{
	pthread_mutex_lock(&j->mu);
	*done = j->gone_done;
	*duplicates = j->gone_duplicates;
	*wins = j->gone_wins;
	pthread_mutex_unlock(&j->mu);
}

/* ---- the janitor's rounds ---- */

/* Joins every driver that returned (its thread back to the pool, its
 * cancel eventfd closed): how many. */
static unsigned join_drivers(struct meshd_jobs *j)
{
	unsigned n = 0;
	for (;; n++) {
		struct job *jb;
		pthread_mutex_lock(&j->mu);
		for (jb = j->list; jb; jb = jb->next)
			if (atomic_load(&jb->driver_done) && jb->th_on)
				break;
		if (jb)
			jb->refs++;
		pthread_mutex_unlock(&j->mu);
		if (!jb)
			return n;
		mesh__job_driver_join(jb);
		mesh__job_put(jb);
	}
}

/* Closes the files of ended jobs that no one uses: those idle for
 * FILES_IDLE_NS, and the least recently used beyond FILES_CACHED.  How
 * many jobs' files it closed. */
static unsigned close_idle_files(struct meshd_jobs *j)
{
	for (unsigned n = 0;; n++) {
		struct job *oldest = NULL;
		uint64_t oldest_ns = UINT64_MAX, now = mesh_mono_ns();
		unsigned cached = 0;
		pthread_mutex_lock(&j->mu);
		for (struct job *jb = j->list; jb; jb = jb->next) {
			pthread_mutex_lock(&jb->mu);
			if (atomic_load(&jb->hj->jh) && !jb->driver_files) {
				cached++;
				if (!jb->files_users && !jb->files_opening && jb->files_idle_ns < oldest_ns)
					oldest = jb, oldest_ns = jb->files_idle_ns;
			}
			pthread_mutex_unlock(&jb->mu);
		}
		if (!oldest || (cached <= FILES_CACHED && now - oldest_ns < FILES_IDLE_NS)) {
			pthread_mutex_unlock(&j->mu);
			return n;
		}
		pthread_mutex_lock(&oldest->mu);
		/* Marked opening while it closes: no reader takes them meanwhile. */
		oldest->files_opening = 1;
		oldest->run_files = 0;
		oldest->refs++;
		pthread_mutex_unlock(&oldest->mu);
		pthread_mutex_unlock(&j->mu);
		oldest->hj->home->ops->close_job(oldest->hj);
		pthread_mutex_lock(&oldest->mu);
		oldest->files_opening = 0;
		pthread_cond_broadcast(&oldest->cv);
		pthread_mutex_unlock(&oldest->mu);
		mesh__job_put(oldest);
	}
}

struct aged {
	int64_t ended;
	uint64_t id;
	struct job *jb;
};

/* Newest first. */
static int by_age(const void *a, const void *b)
{
	const struct aged *x = a, *y = b;
	if (x->ended != y->ended)
		return x->ended > y->ended ? -1 : 1;
	return x->id > y->id ? -1 : x->id < y->id;
}

/* 1 when jb, of a home under retention, ended for good (its end says so:
 * a job in `error` runs again at the next start) and its driver was
 * joined: retention may take it.  jb->mu held. */
static int ended_locked(const struct job *jb)
{
	return jb->rh->keep && (jb->state == MESH_HOME_COMPLETE || jb->state == MESH_HOME_FAILED || jb->state == MESH_HOME_CANCELLED) &&
	       jb->have_sum && !jb->th_on && !jb->removed;
}

/* Removes the ended jobs past the retention: beyond the newest keep_jobs,
 * or ended more than keep_for ago. */
static void keep_retention(struct meshd_jobs *j)
{
	int64_t cutoff = (int64_t)time(NULL) - (int64_t)(j->keep.keep_for_ns / MESH_NS_PER_S);
	size_t n = 0, old = 0;
	pthread_mutex_lock(&j->mu);
	for (struct job *jb = j->list; jb; jb = jb->next) {
		pthread_mutex_lock(&jb->mu);
		if (ended_locked(jb)) {
			n++;
			old += jb->sum.ended < cutoff;
		}
		pthread_mutex_unlock(&jb->mu);
	}
	struct aged *v = n > j->keep.keep_jobs || old ? calloc(n, sizeof *v) : NULL;
	size_t k = 0;
	for (struct job *jb = j->list; v && jb && k < n; jb = jb->next) {
		pthread_mutex_lock(&jb->mu);
		if (ended_locked(jb))
			v[k++] = (struct aged){jb->sum.ended, jb->id, jb};
		pthread_mutex_unlock(&jb->mu);
	}
	if (k)
		qsort(v, k, sizeof *v, by_age);
	size_t gone = 0;
	for (size_t i = 0; i < k; i++) {
		if (i < j->keep.keep_jobs && v[i].ended >= cutoff)
			continue;
		pthread_mutex_lock(&v[i].jb->mu);
		v[i].jb->removed = 1;
		pthread_mutex_unlock(&v[i].jb->mu);
		unlink_locked(j, v[i].jb);
		v[gone++] = v[i];
	}
	pthread_mutex_unlock(&j->mu);
	for (size_t i = 0; i < gone; i++) {
		uint64_t id = v[i].id;
		char *why = NULL;
		int rc = remove_job(v[i].jb, &why);
		if (rc < 0)
			mesh_warn("job=%" PRIu64 " past the retention, but %s", id, why ? why : mesh_strerror(rc));
		free(why);
	}
	if (gone)
		mesh_info("removed %zu jobs past the retention (newest %" PRIu64 " kept, ended within %" PRIu64 " s)",
			  gone, j->keep.keep_jobs, (uint64_t)(j->keep.keep_for_ns / MESH_NS_PER_S));
	free(v);
}

static void *janitor_main(void *arg)
{
	struct meshd_jobs *j = arg;
	uint64_t trimmed = 0;
	int trim = 0;
	pthread_mutex_lock(&j->mu);
	while (!j->stopping) {
		j->jan_kick = 0;
		pthread_mutex_unlock(&j->mu);
		trim |= join_drivers(j) > 0;
		trim |= close_idle_files(j) > 0;
		keep_retention(j);
		/* What a job's run freed goes back to the system, at most once a
		 * TICK_NS: the allocator keeps freed memory in each thread's
		 * arena (a 200,000-chunk job left 2-3 MB of RSS an arena,
		 * though meshd's heap held 146 KB). */
		if (trim && mesh_mono_ns() - trimmed >= TICK_NS) {
			malloc_trim(0);
			trimmed = mesh_mono_ns();
			trim = 0;
		}
		pthread_mutex_lock(&j->mu);
		if (!j->jan_kick && !j->stopping) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			uint64_t ns = (uint64_t)ts.tv_nsec + TICK_NS;
			ts.tv_sec += (time_t)(ns / MESH_NS_PER_S);
			ts.tv_nsec = (long)(ns % MESH_NS_PER_S);
			pthread_cond_timedwait(&j->jan_cv, &j->mu, &ts);
		}
	}
	pthread_mutex_unlock(&j->mu);
	return NULL;
}

int mesh__jobs_keep_start(struct meshd_jobs *j)
{
	if (!j->keep.keep_jobs)
		j->keep.keep_jobs = MESHD_KEEP_JOBS_DEFAULT;
	if (!j->keep.keep_for_ns)
		j->keep.keep_for_ns = MESHD_KEEP_FOR_DEFAULT_NS;
	int rc = mesh_thread_start(&j->jan, janitor_main, j);
	if (rc == 0)
		j->jan_on = 1;
	return rc;
}

void mesh__jobs_keep_stop(struct meshd_jobs *j)
{
	pthread_mutex_lock(&j->mu);
	j->stopping = 1;
	pthread_cond_signal(&j->jan_cv);
	pthread_mutex_unlock(&j->mu);
	if (j->jan_on) {
		pthread_join(j->jan, NULL);
		j->jan_on = 0;
	}
}
