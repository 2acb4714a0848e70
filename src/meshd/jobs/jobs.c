/* meshd's job runner (jobs.h): the homes it drives (job/home.h), one
 * driver thread a running job with its hooks, the stop.
 *
 * What the two homes make differ is theirs, behind home.h's calls: the
 * spec and input (a state directory's files, a store's row), the results
 * kept (results.bin synced before DONE; one transaction of replies then a
 * NOTIFY), the end (the end file; the store's counts), the cancels (the
 * API's, recorded in the end file first; the store's, seen by its
 * follower), which jobs there are (every one of the state directory at
 * the start, each the runner's; a store's, offered at each of its
 * follower's looks, served when this catalog has the program). */
#include "meshd/jobs/jobs.h"
#include "meshd/jobs/jobs_int.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "base/thread.h"
#include "exec/input.h"
#include "exec/loop.h"
#include "exec/runner.h"
#include "meshd/core/feed.h"
#include "meshd/core/ops.h"
#include "meshd/jobs/job_exec.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* A job's progress goes to the feed at most this often, while someone follows. */
#define PROGRESS_EVERY_NS (250ull * MESH_NS_PER_MS)

int meshd_state_default(char *buf, size_t n)
{
	const char *x = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	int k;
	if (x && x[0] == '/')
		k = snprintf(buf, n, "%s/mesh", x);
	else if (home && home[0] == '/')
		k = snprintf(buf, n, "%s/.local/state/mesh", home);
	else
		return -ENOENT;
	return k < 0 || (size_t)k >= n ? -ENAMETOOLONG : 0;
}

/* ---- a job ---- */

void mesh__job_driver_join(struct job *jb)
{
	pthread_mutex_lock(&jb->mu);
	struct mesh_thread *th = jb->th_on ? jb->th : NULL;
	while (th && !atomic_load(&jb->driver_done))
		pthread_cond_wait(&jb->cv, &jb->mu);
	int efd = th ? jb->cancel_efd : -1;
	jb->th_on = 0;
	if (th)
		jb->cancel_efd = -1;
	pthread_mutex_unlock(&jb->mu);
	if (th)
		mesh_thread_join(th, NULL);
	if (efd >= 0)
		close(efd);
}

/* The driver ended (its end recorded): joiners are told, the janitor
 * kicked.  The last touch of jb by its driver. */
static void driver_finished(struct job *jb)
{
	pthread_mutex_lock(&jb->mu);
	atomic_store(&jb->driver_done, 1);
	pthread_cond_broadcast(&jb->cv);
	pthread_mutex_unlock(&jb->mu);
	mesh__jobs_kick(jb->rh->j);
}

static void job_free(struct job *jb)
{
	if (!jb)
		return;
	mesh__job_driver_join(jb); /* one that ended (or ends now), not joined yet */
	if (jb->cancel_efd >= 0)
		close(jb->cancel_efd);
	meshd_job_ahead_drop(jb->ahead);
	if (jb->hj)
		jb->hj->home->ops->job_free(jb->hj);
	free(jb->error);
	pthread_mutex_destroy(&jb->mu);
	pthread_cond_destroy(&jb->cv);
	free(jb);
}

int mesh__job_new(struct rhome *rh, struct mesh_home_job *hj, struct job **out)
{
	struct job *jb = calloc(1, sizeof *jb);
	*out = NULL;
	if (!jb)
		return -ENOMEM;
	jb->rh = rh;
	jb->hj = hj;
	jb->id = hj->spec.id;
	jb->max_workers = hj->spec.max_workers;
	jb->refs = 1;
	jb->cancel_efd = -1; /* made when a driver starts: a job that ended holds no fd */
	pthread_mutex_init(&jb->mu, NULL);
	/* Readers wait with CLOCK_MONOTONIC deadlines. */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&jb->cv, &ca);
	pthread_condattr_destroy(&ca);
	*out = jb;
	return 0;
}

struct job *mesh__jobs_find(struct rhome *rh, uint64_t id)
{
	struct meshd_jobs *j = rh->j;
	pthread_mutex_lock(&j->mu);
	struct job *jb = j->list;
	while (jb && (jb->id != id || jb->rh != rh))
		jb = jb->next;
	if (jb)
		jb->refs++;
	pthread_mutex_unlock(&j->mu);
	return jb;
}

void mesh__job_put(struct job *jb)
{
	struct meshd_jobs *j = jb->rh->j;
	pthread_mutex_lock(&j->mu);
	int last = --jb->refs == 0;
	pthread_mutex_unlock(&j->mu);
	if (last)
		job_free(jb); /* unlinked: nobody can find it */
}

int mesh__job_files_get(struct job *jb, int open, char **err)
{
	int rc = 0, opened = 0;
	pthread_mutex_lock(&jb->mu);
	while (jb->files_opening)
		pthread_cond_wait(&jb->cv, &jb->mu);
	if (jb->removed) {
		pthread_mutex_unlock(&jb->mu);
		return mesh_errf(err, MESH_E_NOTFOUND, "no job %" PRIu64 " (removed)", jb->id);
	}
	if (!atomic_load(&jb->hj->jh) && !jb->driver_files && open && jb->state != MESH_HOME_RUNNING) {
		jb->files_opening = 1;
		pthread_mutex_unlock(&jb->mu);
		rc = jb->hj->home->ops->open(jb->hj, 0, err);
		pthread_mutex_lock(&jb->mu);
		jb->files_opening = 0;
		jb->run_files = 0;
		pthread_cond_broadcast(&jb->cv);
		opened = rc == 0;
	}
	if (rc == 0)
		jb->files_users++;
	pthread_mutex_unlock(&jb->mu);
	if (opened)
		mesh__jobs_kick(jb->rh->j); /* it keeps FILES_CACHED jobs' files at most */
	return rc;
}

void mesh__job_files_put(struct job *jb)
{
	pthread_mutex_lock(&jb->mu);
	if (--jb->files_users == 0)
		jb->files_idle_ns = mesh_mono_ns();
	pthread_mutex_unlock(&jb->mu);
}

/* ---- the driver's hooks ---- */

/* A reply over the home's limit: never DONE without its result, and no
 * use trying again, so its chunk is buried with the reason; the error
 * stops this run, and the driver drives the job again at once. */
static int too_big(struct job *jb, uint64_t cid, uint32_t attempt, size_t whole)
{
	char why[200];
	snprintf(why, sizeof why, "attempt %u: the reply of %zu bytes is over the store's limit of %zu bytes\n",
		 (unsigned)attempt, whole, jb->hj->result_max);
	int rc = jb->hj->home->ops->bury(jb->hj, cid, why);
	if (rc == 0) {
		mesh_warn("%sjob=%" PRIu64 " chunk=%" PRIu64 " buried: %.*s", jb->rh->tag, jb->id, cid,
			  (int)strlen(why) - 1, why);
		atomic_store(&jb->toobig, 1);
	} else {
		mesh_error("%sjob=%" PRIu64 " chunk=%" PRIu64 " could not be buried (%s): %.*s", jb->rh->tag, jb->id, cid,
			   mesh_strerror(rc), (int)strlen(why) - 1, why);
	}
	return MESH_E_TOOBIG;
}

static int hook_result(void *arg, uint64_t cid, uint32_t attempt, const void *p, size_t n)
{
	struct job *jb = arg;
	size_t whole = jb->over_len ? jb->over_len : n;
	jb->over_len = 0;
	if (n > jb->hj->result_max)
		return too_big(jb, cid, attempt, whole);
	return jb->hj->home->ops->keep(jb->hj, cid, p, n);
}

/* Between the slot executor and the runner, for a home with a result
 * limit: a reply over it goes on cut to limit + 1 bytes, enough for
 * hook_result to bury its chunk.  Whole, a reply over the runner's 4 MiB
 * in-memory bound would spill to a file, which the result hook is never
 * given: the run would stop (MESH_E_OUTPUT) on every try of that chunk.
 * The slot executor hands a reply over in one piece, in the status call
 * right before the runner ends that attempt and calls hook_result (both on
 * the loop thread), so over_len is that reply's. */
static int cap_output(void *arg, unsigned slot, int out, const void *p, size_t n)
{
	struct job *jb = arg;
	if (out && n > jb->hj->result_max) {
		jb->over_len = n;
		n = jb->hj->result_max + 1;
	}
	return jb->inner.output(jb->inner.arg, slot, out, p, n);
}

static int make_capped(void *arg, const struct mesh_exec_opts *o, unsigned nslots, const struct mesh__exec_sink *sink,
		       struct mesh__executor **out)
{
	struct job *jb = arg;
	struct mesh__exec_sink mine = {cap_output, jb};
	jb->inner = *sink;
	return meshd_job_exec_make(jb->xa, o, nslots, &mine, out);
}

static int hook_commit(void *arg)
{
	struct job *jb = arg;
	return jb->hj->home->ops->sync(jb->hj);
}

static double ms_since(uint64_t t, uint64_t t0)
{
	return t && t0 && t >= t0 ? (double)(t - t0) / 1e6 : -1;
}

void mesh__job_note_first(struct job *jb)
{
	uint64_t done = atomic_load(&jb->t_first_done), stored = atomic_load(&jb->t_stored);
	if (!done || (jb->t_submit && !stored) || atomic_exchange(&jb->first_logged, 1))
		return;
	uint64_t t0 = jb->t_submit ? jb->t_submit : jb->t_driver, end = stored > done ? stored : done;
	mesh_info("%sjob=%" PRIu64 " first result durable after %.3f ms (since the %s): journal durable %.3f, stored %.3f, "
		  "driver %.3f, worker asked %.3f, first lease %.3f, worker joined %.3f, chunk sent %.3f, worker online %.3f, "
		  "reply %.3f, results file %.3f, DONE durable %.3f",
		  jb->rh->tag, jb->id, ms_since(end, t0), jb->t_submit ? "submit" : "driver's start",
		  ms_since(atomic_load(&jb->t_journal), t0), ms_since(stored, t0),
		  ms_since(jb->t_driver, t0), ms_since(atomic_load(&jb->xs.first_ask_ns), t0),
		  ms_since(atomic_load(&jb->xs.first_start_ns), t0), ms_since(atomic_load(&jb->xs.first_worker_ns), t0),
		  ms_since(atomic_load(&jb->xs.first_sent_ns), t0), ms_since(atomic_load(&jb->xs.first_online_ns), t0),
		  ms_since(atomic_load(&jb->xs.first_reply_ns), t0), ms_since(atomic_load(&jb->hj->t_results), t0),
		  ms_since(done, t0));
}

/* The first DONE is durable: its time (docs/jobs.md, "The first result"). */
static void note_first_done(struct job *jb)
{
	struct mesh_job_status js;
	uint64_t now = mesh_mono_ns(); /* durable from here (the batch returned), whatever the status costs */
	if (atomic_load(&jb->t_first_done) || mesh_job_status(atomic_load(&jb->hj->jh), &js) < 0 || js.done <= jb->done0)
		return;
	atomic_store(&jb->t_first_done, now);
	mesh__job_note_first(jb);
}

/* A job event for the feed (meshd/core/feed.h): word is its state, or
 * "progress"; st its counts (NULL: none). */
static void post_job(struct job *jb, const char *word, const struct mesh_job_status *st)
{
	struct meshd_event e = {.kind = MESHD_EV_JOB, .id = jb->id};
	snprintf(e.name, sizeof e.name, "%.64s", jb->hj->spec.program);
	snprintf(e.word, sizeof e.word, "%s", word);
	e.n[2] = jb->hj->spec.n;
	if (st) {
		e.n[0] = st->done;
		e.n[1] = st->buried;
	}
	meshd_feed_post(meshd_core_feed(jb->rh->j->core), &e);
}

/* While someone follows the feed: the job's counts, at most every
 * PROGRESS_EVERY_NS (any completer thread; the first to claim the time
 * posts). */
static void post_progress(struct job *jb)
{
	if (!meshd_feed_live(meshd_core_feed(jb->rh->j->core)))
		return; /* nobody follows: not even a clock read on the completion path */
	uint64_t now = mesh_mono_ns(), at = atomic_load(&jb->ev_at);
	struct mesh_job_status js;
	if (now - at < PROGRESS_EVERY_NS || !atomic_compare_exchange_strong(&jb->ev_at, &at, now))
		return;
	struct mesh_job *jh = atomic_load(&jb->hj->jh);
	if (jh && mesh_job_status(jh, &js) == 0)
		post_job(jb, "progress", &js);
}

static void hook_committed(void *arg)
{
	struct job *jb = arg;
	if (jb->hj->home->ops->synced)
		jb->hj->home->ops->synced(jb->hj);
	note_first_done(jb);
	post_progress(jb);
	pthread_mutex_lock(&jb->mu);
	pthread_cond_broadcast(&jb->cv);
	pthread_mutex_unlock(&jb->mu);
}

static void hook_lease_lost(void *arg, uint64_t cid, uint64_t since_ns, uint64_t ttl_ns)
{
	struct job *jb = arg;
	mesh_warn("%sjob=%" PRIu64 " chunk=%" PRIu64 " lease taken over while it ran (last renewed %" PRIu64
		  " ms ago, lease %" PRIu64 " ms): it may run twice",
		  jb->rh->tag, jb->id, cid, (uint64_t)(since_ns / MESH_NS_PER_MS), (uint64_t)(ttl_ns / MESH_NS_PER_MS));
}

static void hook_failed(void *arg, uint64_t cid, uint32_t attempt, int code, const void *err, size_t n, int buried)
{
	struct job *jb = arg;
	struct mesh_buf b = MESH_BUF_INIT;
	if (code > 128 && code < 128 + 65)
		mesh_buf_addf(&b, "attempt %u: signal %d (status %d)\n", (unsigned)attempt, code - 128, code);
	else
		mesh_buf_addf(&b, "attempt %u: exit %d\n", (unsigned)attempt, code);
	mesh_buf_add(&b, err, n);
	/* The report is for people: losing it loses no chunk. */
	if (b.p && jb->hj->home->ops->report(jb->hj, cid, b.p, b.len, buried) < 0)
		mesh_warn("%sjob=%" PRIu64 " cannot keep the failure report of chunk %" PRIu64, jb->rh->tag, jb->id, cid);
	mesh_buf_release(&b);
	if (buried) {
		pthread_mutex_lock(&jb->mu);
		pthread_cond_broadcast(&jb->cv);
		pthread_mutex_unlock(&jb->mu);
		mesh_info("%sjob=%" PRIu64 " chunk=%" PRIu64 " buried status=%d", jb->rh->tag, jb->id, cid, code);
	}
}

/* ---- the driver ---- */

/* The driver ended (st; error owned, or NULL): its counts in sum (may be
 * NULL); its handles are no longer its own (the janitor closes them once
 * idle). */
static void driver_end(struct job *jb, enum mesh_home_state st, char *error, const struct mesh_home_sum *sum)
{
	post_job(jb, mesh_home_state_name(st), sum ? &sum->st : NULL);
	pthread_mutex_lock(&jb->mu);
	jb->state = st;
	free(jb->error);
	jb->error = error;
	if (sum) {
		jb->sum = *sum;
		jb->have_sum = 1;
	}
	jb->driver_files = 0;
	jb->files_idle_ns = mesh_mono_ns();
	pthread_cond_broadcast(&jb->cv);
	pthread_mutex_unlock(&jb->mu);
}

/* The driver's counts now, for its end. */
static void make_sum(struct job *jb, struct mesh_home_sum *sum)
{
	uint64_t t_end = atomic_load(&jb->t_end);
	struct mesh_job *jh = atomic_load(&jb->hj->jh);
	memset(sum, 0, sizeof *sum);
	if (jh)
		mesh_job_status(jh, &sum->st);
	if (jb->t0 && t_end > jb->t0)
		sum->elapsed_s = (double)(t_end - jb->t0) / 1e9;
	if (sum->elapsed_s > 0 && sum->st.done > jb->done0)
		sum->rate = (double)(sum->st.done - jb->done0) / sum->elapsed_s;
	sum->ended = (int64_t)time(NULL);
}

/* What a run needs from its home: the handles open for a run (a previous
 * run's are taken as they are; a reader's are closed first), the input.
 * 0, or an error with *err. */
static int open_run(struct job *jb, struct mesh_exec_input *in, char **err)
{
	struct mesh_home_job *hj = jb->hj;
	const struct mesh_home_ops *ops = hj->home->ops;
	char *data = NULL;
	size_t len = 0;
	int rc = 0;
	pthread_mutex_lock(&jb->mu);
	while (jb->files_opening) /* the janitor closing a previous run's */
		pthread_cond_wait(&jb->cv, &jb->mu);
	int reuse = jb->run_files && atomic_load(&hj->jh);
	pthread_mutex_unlock(&jb->mu);
	if (!reuse) {
		ops->close_job(hj);
		rc = ops->open(hj, 1, err);
		pthread_mutex_lock(&jb->mu);
		jb->run_files = rc == 0;
		pthread_mutex_unlock(&jb->mu);
	}
	if (rc == 0 && hj->spec.has_input && (rc = ops->input(hj, &data, &len, err)) == 0) {
		rc = mesh_exec_input_from_mem(data, len, in, NULL);
		if (rc == 0 && in->n != hj->spec.n)
			rc = MESH_E_MISMATCH;
		if (rc < 0)
			rc = mesh_errf(err, rc, "cannot load the input of %" PRIu64 " chunks: %s", hj->spec.n,
				       mesh_strerror(rc));
	}
	free(data);
	return rc;
}

/* The state a run's outcome rc leaves the job in (RUNNING: meshd is
 * stopping, it is unfinished and resumed at the next start). */
static enum mesh_home_state end_state(struct job *jb, int rc)
{
	pthread_mutex_lock(&jb->mu);
	int cancelled = jb->cancelled;
	pthread_mutex_unlock(&jb->mu);
	return rc == MESH_EXEC_COMPLETE		   ? MESH_HOME_COMPLETE
	       : rc == MESH_EXEC_FAILED		   ? MESH_HOME_FAILED
	       : rc == MESH_EXEC_INTERRUPTED && cancelled ? MESH_HOME_CANCELLED
	       : rc == MESH_EXEC_INTERRUPTED	   ? MESH_HOME_RUNNING
						   : MESH_HOME_ERROR;
}

/* Records how the run ended (rc, its stats st): the job's state, its
 * error, its end in its home. */
static void run_ended(struct job *jb, int rc, const struct mesh_exec_stats *st)
{
	struct mesh_home_job *hj = jb->hj;
	enum mesh_home_state end = end_state(jb, rc);
	struct mesh_home_sum sum;
	char *why = NULL, *err = NULL;
	make_sum(jb, &sum);
	if (end == MESH_HOME_ERROR) {
		/* Which file or store and why, where the home knows. */
		why = hj->home->ops->why ? hj->home->ops->why(hj, rc) : NULL;
		mesh_error("%sjob=%" PRIu64 " stopped: %s", jb->rh->tag, jb->id, why ? why : mesh_strerror(rc));
		if (rc == MESH_E_OUTPUT) {
			/* It would stop again on the same chunk: not driven again. */
			pthread_mutex_lock(&jb->mu);
			jb->no_retry = 1;
			pthread_mutex_unlock(&jb->mu);
			if (jb->offer)
				mesh_error("%sjob=%" PRIu64 " no longer served here: an output could not be kept", jb->rh->tag,
					   jb->id);
		}
		if (!why)
			why = strdup(mesh_strerror(rc));
	}
	if (end != MESH_HOME_RUNNING && hj->home->ops->end(hj, end, &sum, &err) < 0)
		mesh_error("%sjob=%" PRIu64 " %s", jb->rh->tag, jb->id, err ? err : "cannot record its end");
	free(err);
	if (end != MESH_HOME_RUNNING)
		driver_end(jb, end, why, &sum);
	mesh_info("%sjob=%" PRIu64 " driver ended: %s state=%s attempts=%" PRIu64 " done=%" PRIu64 " failed=%" PRIu64
		  " buried=%" PRIu64,
		  jb->rh->tag, jb->id,
		  rc == MESH_EXEC_COMPLETE	  ? "complete"
		  : rc == MESH_EXEC_FAILED	  ? "failed"
		  : rc == MESH_EXEC_INTERRUPTED ? "stopped"
						: mesh_strerror(rc),
		  end == MESH_HOME_RUNNING ? "running (meshd is stopping)" : mesh_home_state_name(end), st->started,
		  st->done, st->failed, st->buried);
}

/* A run of a job's driver: what its runner reads while it runs (its
 * options point here), from driver_main to drive_done. */
struct drive {
	struct job *jb;
	struct mesh_exec_input in;
	struct mesh_exec_hooks hooks;
	char *argv[2];
	struct mesh_exec_opts o;
	struct meshd_job_exec_arg xa;
	struct mesh_exec_stats st;
	struct mesh__drive *d; /* the runner, from open to close */
};

/* The run ended (rc): the job's end recorded, dr freed, and the driver
 * done (the last touch of jb: from here it may be joined and freed). */
static void drive_done(struct drive *dr, int rc)
{
	struct job *jb = dr->jb;
	meshd_job_ahead_drop(dr->xa.ahead); /* the driver stopped before its executor took it */
	jb->xa = NULL;
	atomic_store(&jb->t_end, mesh_mono_ns());
	mesh_exec_input_release(&dr->in);
	run_ended(jb, rc, &dr->st);
	free(dr);
	driver_finished(jb);
}

/* The loop of jb's home that drives the fewest runs (a new one while
 * there are fewer than MAX_LOOPS and each has a run), or NULL when none
 * can be made. */
static struct mesh_exec_loop *pick_loop(struct rhome *rh)
{
	struct meshd_jobs *j = rh->j;
	struct mesh_exec_loop *best = NULL;
	unsigned least = UINT32_MAX;
	if (!j->max_loops)
		return NULL; /* MESHD_JOB_LOOPS=0: the run is driven where it was opened */
	pthread_mutex_lock(&j->mu);
	for (unsigned i = 0; i < rh->nloops; i++) {
		unsigned k = mesh_exec_loop_runs(rh->loops[i]);
		if (k < least) {
			least = k;
			best = rh->loops[i];
		}
	}
	if ((!best || least) && rh->nloops < j->max_loops) {
		char name[16];
		snprintf(name, sizeof name, "meshd-%sjobs%u", rh == &j->homes[0] ? "" : "s", rh->nloops + 1);
		if (mesh_exec_loop_new(name, &rh->loops[rh->nloops]) == 0)
			best = rh->loops[rh->nloops++];
	}
	pthread_mutex_unlock(&j->mu);
	return best;
}

static void *finish_main(void *arg);

/* 1 when the run that ended rc was stopped by a reply over its home's
 * limit (too_big buried its chunk): the job is driven again at once, and
 * the log says so. */
static int stopped_by_too_big(struct drive *dr, int rc)
{
	struct job *jb = dr->jb;
	if (rc != MESH_E_OUTPUT || !atomic_exchange(&jb->toobig, 0))
		return 0;
	mesh_info("%sjob=%" PRIu64 " run stopped by a reply over the limit (its chunk buried): driven again", jb->rh->tag,
		  jb->id);
	return 1;
}

/* On the loop's thread: dr's run is over; its close and end go to a run
 * of the pool (they may block: a store's round trips, a worker reaped). */
static void run_over(void *arg, struct mesh__drive *d)
{
	struct drive *dr = arg;
	struct meshd_jobs *j = dr->jb->rh->j;
	dr->d = d;
	pthread_mutex_lock(&j->mu);
	j->finishing++;
	pthread_mutex_unlock(&j->mu);
	if (mesh_thread_run(NULL, finish_main, dr, MESH_THREAD_DETACHED) < 0)
		finish_main(dr);
}

/* Opens dr's run and hands it to a loop of its home (on this thread when
 * no loop can be had).  0: it runs; else the open's error. */
static int drive_start(struct drive *dr)
{
	struct job *jb = dr->jb;
	int capped = jb->hj->result_max != SIZE_MAX; /* the replies go through cap_output */
	struct mesh_job *jh = atomic_load(&jb->hj->jh);
	int rc = mesh__exec_open(jh, &dr->o, capped ? make_capped : meshd_job_exec_make, capped ? (void *)jb : &dr->xa,
				 &dr->st, &dr->d);
	if (rc < 0)
		return rc;
	struct mesh_exec_loop *l = pick_loop(jb->rh);
	if (l && mesh_exec_loop_add(l, dr->d, run_over, dr) == 0)
		return 0;
	if (jb->rh->j->max_loops)
		mesh_warn("%sjob=%" PRIu64 " driven on a thread of its own: no loop for it", jb->rh->tag, jb->id);
	rc = mesh__exec_go(dr->d);
	dr->d = NULL;
	if (stopped_by_too_big(dr, rc))
		return drive_start(dr);
	drive_done(dr, rc);
	return 0;
}

/* A pool run (detached; j->finishing counts it): closes a run that is
 * over and records its end, or opens it again after a reply too big. */
static void *finish_main(void *arg)
{
	struct drive *dr = arg;
	struct job *jb = dr->jb;
	struct meshd_jobs *j = jb->rh->j;
	int rc = mesh__exec_close(dr->d);
	dr->d = NULL;
	if (!(stopped_by_too_big(dr, rc) && (rc = drive_start(dr)) == 0))
		drive_done(dr, rc);
	pthread_mutex_lock(&j->mu);
	if (!--j->finishing)
		pthread_cond_broadcast(&j->jan_cv);
	pthread_mutex_unlock(&j->mu);
	return NULL;
}

/* A pool run: opens jb's files, then hands its run to a loop. */
static void *driver_main(void *arg)
{
	struct job *jb = arg;
	struct meshd_jobs *j = jb->rh->j;
	struct mesh_home_job *hj = jb->hj;
	struct drive *dr = calloc(1, sizeof *dr);
	char *err = NULL;
	int rc = dr ? 0 : -ENOMEM;
	if (dr) {
		dr->in = (struct mesh_exec_input)MESH_EXEC_INPUT_INIT;
		rc = open_run(jb, &dr->in, &err);
	}
	if (rc < 0) {
		mesh_error("%sjob=%" PRIu64 " cannot run: %s", jb->rh->tag, jb->id, err ? err : mesh_strerror(rc));
		if (dr)
			mesh_exec_input_release(&dr->in);
		free(dr);
		meshd_job_ahead_drop(jb->ahead);
		jb->ahead = NULL;
		driver_end(jb, MESH_HOME_ERROR, err ? err : strdup(mesh_strerror(rc)), NULL);
		driver_finished(jb);
		return NULL;
	}
	struct mesh_job *jh = atomic_load(&hj->jh);
	struct mesh_job_status js;
	pthread_mutex_lock(&jb->mu);
	int known = jb->have_found_done;
	jb->done0 = jb->found_done;
	pthread_mutex_unlock(&jb->mu);
	if (!known)
		jb->done0 = mesh_job_status(jh, &js) == 0 ? js.done : 0;
	jb->t0 = mesh_mono_ns();
	atomic_store(&jb->t_end, 0);
	dr->jb = jb;
	dr->hooks = (struct mesh_exec_hooks){
		.result = hook_result,
		.commit = hook_commit,
		.committed = hook_committed,
		.failed = hook_failed,
		.lease_lost = hook_lease_lost,
		.cancel_fd = jb->cancel_efd,
		.results_in_done = hj->home->ops->results_in_done,
		.arg = jb,
	};
	dr->argv[0] = hj->spec.program;
	dr->o = (struct mesh_exec_opts)MESH_EXEC_OPTS_INIT;
	dr->o.argv = dr->argv;
	dr->o.slots = jb->max_workers * j->depth;
	dr->o.input = hj->spec.has_input ? &dr->in : NULL;
	dr->o.speculate = hj->spec.speculate;
	dr->o.spec_job = atomic_load(&hj->sjh);
	dr->o.ttl_ns = hj->ttl_ns;
	dr->o.out_fd = dr->o.err_fd = dr->o.note_fd = dr->o.progress_fd = -1;
	dr->o.handle_signals = 0;
	dr->o.hooks = &dr->hooks;
	dr->xa = (struct meshd_job_exec_arg){
		.cfg = {j->core, hj->spec.program, jb->max_workers, j->depth, hj->spec.timeout_ns, &jb->leave},
		.stats = &jb->xs,
		.ahead = jb->ahead,
	};
	jb->ahead = NULL;
	jb->xa = &dr->xa;
	mesh_info("%sjob=%" PRIu64 " running program=%s chunks=%" PRIu64 " done=%" PRIu64, jb->rh->tag, jb->id,
		  hj->spec.program, hj->spec.n, jb->done0);
	post_job(jb, "running", &(struct mesh_job_status){.n = hj->spec.n, .done = jb->done0});
	mesh_thread_fg(); /* its files are open: the chunks' path from here */
	if ((rc = drive_start(dr)) < 0)
		drive_done(dr, rc);
	return NULL;
}

void mesh__job_start_failed(struct job *jb, int rc)
{
	pthread_mutex_lock(&jb->mu);
	jb->state = MESH_HOME_ERROR;
	free(jb->error);
	jb->error = mesh_strf("cannot start its driver: %s", mesh_strerror(rc));
	pthread_mutex_unlock(&jb->mu);
}

int mesh__job_start(struct job *jb)
{
	int rc = 0;
	jb->t_driver = mesh_mono_ns(); /* before the thread: read by others after */
	pthread_mutex_lock(&jb->mu);
	if (jb->cancel_efd < 0 && (jb->cancel_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		rc = -errno;
		jb->cancel_efd = -1;
	}
	jb->driver_files = rc == 0;
	if (rc == 0) {
		jb->state = MESH_HOME_RUNNING;
		free(jb->error);
		jb->error = NULL;
		atomic_store(&jb->driver_done, 0);
	}
	pthread_mutex_unlock(&jb->mu);
	if (rc < 0)
		return rc;
	/* Background until its files are open (driver_main) while a submit
	 * spawns the job's first worker (jb->ahead): woken as an ordinary
	 * thread it took the CPU from that spawn, which then began later
	 * (docs/DESIGN.md, "Figures behind the code"; docs/jobs.md, "Threads
	 * from a pool").  With no spawn ahead (a job resumed, a store's job found by
	 * its follower) it is not: a SCHED_BATCH thread woken at each of its
	 * opening's round trips to a store would wait for a free CPU each
	 * time, on the way to the job's first lease. */
	rc = mesh_thread_run(&jb->th, driver_main, jb, jb->ahead ? MESH_THREAD_BG : 0);
	pthread_mutex_lock(&jb->mu);
	if (rc < 0)
		jb->driver_files = 0;
	else
		jb->th_on = 1;
	pthread_mutex_unlock(&jb->mu);
	return rc;
}

/* ---- what the homes tell ---- */

/* A job that ended for good, or that a driver runs now: not started again. */
static int settled_locked(const struct job *jb)
{
	return (jb->th_on && !atomic_load(&jb->driver_done)) || jb->no_retry || jb->cancelled ||
	       (jb->state != MESH_HOME_RUNNING && jb->state != MESH_HOME_ERROR);
}

/* Drives jb when it is not settled: a store's offer once this catalog has
 * its program (its workers: the spec's, at most the manifest's), else
 * said once and left to other hosts until a later look (a program loaded
 * meanwhile wakes the store's follower at once).  A driver that ended on
 * an error is joined and started again. */
static void serve(struct job *jb)
{
	struct meshd_jobs *j = jb->rh->j;
	pthread_mutex_lock(&jb->mu);
	int skip = settled_locked(jb);
	pthread_mutex_unlock(&jb->mu);
	if (skip)
		return;
	if (jb->offer) {
		char *lerr = NULL;
		const struct mesh_home_spec *s = &jb->hj->spec;
		unsigned mw = meshd_program_max_workers(j->core, s->program, &lerr);
		if (!mw) {
			if (!jb->told++)
				mesh_info("%sjob=%" PRIu64 " program=%s not served here: %s", jb->rh->tag, jb->id, s->program,
					  lerr ? lerr : "cannot load it");
			free(lerr);
			return;
		}
		jb->max_workers = s->max_workers && s->max_workers < mw ? s->max_workers : mw;
	}
	pthread_mutex_lock(&jb->mu);
	struct mesh_thread *old = jb->th_on ? jb->th : NULL;
	jb->th_on = 0;
	pthread_mutex_unlock(&jb->mu);
	if (old)
		mesh_thread_join(old, NULL);
	pthread_mutex_lock(&j->mu);
	int rc = j->stopping ? 1 : mesh__job_start(jb);
	pthread_mutex_unlock(&j->mu);
	if (rc < 0) {
		mesh__job_start_failed(jb, rc);
	} else if (rc == 0 && jb->told) {
		mesh_info("%sjob=%" PRIu64 " program=%s served here now", jb->rh->tag, jb->id, jb->hj->spec.program);
	}
}

/* ev.found: a job of home rh; a new one is listed (an ended one as its
 * home says, no handle of it opened) and, unless it ended, driven. */
static int on_found(void *arg, struct mesh_home_job *hj, const struct mesh_home_found *f)
{
	struct rhome *rh = arg;
	struct meshd_jobs *j = rh->j;
	struct job *jb = mesh__jobs_find(rh, hj->spec.id);
	if (jb) {
		hj->home->ops->job_free(hj);
		pthread_mutex_lock(&jb->mu);
		jb->found_done = f->sum.st.done;
		jb->have_found_done = f->have_counts;
		pthread_mutex_unlock(&jb->mu);
	} else {
		int rc = mesh__job_new(rh, hj, &jb);
		if (rc < 0) {
			hj->home->ops->job_free(hj);
			return rc;
		}
		jb->state = f->state;
		jb->offer = f->offer;
		jb->have_sum = f->have_sum;
		jb->sum = f->sum;
		jb->found_done = f->sum.st.done;
		jb->have_found_done = f->have_counts;
		if (f->error && !(jb->error = strdup(f->error))) {
			job_free(jb);
			return -ENOMEM;
		}
		if (f->state == MESH_HOME_RUNNING && !f->offer)
			mesh_info("%sjob=%" PRIu64 " resuming program=%s", rh->tag, jb->id, hj->spec.program);
		pthread_mutex_lock(&j->mu);
		jb->next = j->list;
		j->list = jb;
		jb->linked = 1;
		jb->refs++; /* the list's */
		pthread_mutex_unlock(&j->mu);
	}
	if (f->state == MESH_HOME_RUNNING)
		serve(jb);
	mesh__job_put(jb);
	return 0;
}

/* ev.cancelled: the store has the cancel; its driver stops. */
static void on_cancelled(void *arg, uint64_t id)
{
	struct job *jb = mesh__jobs_find(arg, id);
	if (!jb)
		return;
	pthread_mutex_lock(&jb->mu);
	atomic_store(&jb->leave, MESHD_JOB_LEAVE_HALT); /* before the driver can see the cancel */
	if (jb->th_on && !jb->cancelled && mesh_efd_ring(jb->cancel_efd) == 0)
		jb->cancelled = 1;
	pthread_mutex_unlock(&jb->mu);
	mesh__job_put(jb);
}

/* ev.driving: the jobs of rh whose drivers run. */
static int on_driving(void *arg, uint64_t **ids, size_t *n)
{
	struct rhome *rh = arg;
	struct meshd_jobs *j = rh->j;
	size_t k = 0, cap = 0;
	int rc = 0;
	*ids = NULL;
	pthread_mutex_lock(&j->mu);
	for (struct job *jb = j->list; jb; jb = jb->next)
		cap += jb->rh == rh;
	if (cap && !(*ids = malloc(cap * sizeof **ids)))
		rc = -ENOMEM;
	for (struct job *jb = j->list; *ids && jb; jb = jb->next) {
		if (jb->rh != rh)
			continue;
		pthread_mutex_lock(&jb->mu);
		if (jb->th_on && !atomic_load(&jb->driver_done))
			(*ids)[k++] = jb->id;
		pthread_mutex_unlock(&jb->mu);
	}
	pthread_mutex_unlock(&j->mu);
	*n = k;
	return rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ev.programs: the catalog's programs (<name>.toml), sorted, joined by
 * commas into buf (cut at cap, ending "..."): what the node's row says
 * this host runs. */
static void on_programs(void *arg, char *buf, size_t cap)
{
	struct rhome *rh = arg;
	char *names[256];
	size_t n = 0, len = 0;
	DIR *dp = rh->j->catalog ? opendir(rh->j->catalog) : NULL;
	struct dirent *de;
	buf[0] = 0;
	while (dp && n < sizeof names / sizeof *names && (de = readdir(dp))) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] != '.' && l > 5 && !strcmp(de->d_name + l - 5, ".toml") &&
		    (names[n] = strndup(de->d_name, l - 5)))
			n++;
	}
	if (dp)
		closedir(dp);
	qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; i < n; i++) {
		int k = snprintf(buf + len, cap - len, "%s%s", i ? "," : "", names[i]);
		if (k < 0 || (size_t)k >= cap - len) {
			snprintf(buf + (cap > 4 ? cap - 4 : 0), cap > 4 ? 4 : 0, "...");
			len = cap - 1;
		} else {
			len += (size_t)k;
		}
		free(names[i]);
	}
}

static void on_note(void *arg, int level, const char *msg)
{
	(void)arg;
	mesh_log(level >= 2 ? MESH_LOG_ERROR : level ? MESH_LOG_WARN : MESH_LOG_INFO, "%s", msg);
}

/* The events home rh's jobs come through. */
static struct mesh_home_events events(struct rhome *rh)
{
	return (struct mesh_home_events){on_found, on_cancelled, on_driving, on_programs, on_note, rh};
}

/* ---- open, the store, stop ---- */

int meshd_jobs_open(struct meshd_jobs **out, struct meshd_core *core, const char *state_dir,
		    const struct meshd_jobs_keep *keep, char **err)
{
	struct meshd_jobs *j = calloc(1, sizeof *j);
	if (!j)
		return -ENOMEM;
	pthread_mutex_init(&j->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&j->jan_cv, &ca);
	pthread_condattr_destroy(&ca);
	j->core = core;
	j->depth = DEFAULT_DEPTH;
	if (keep)
		j->keep = *keep;
	const char *d = getenv("MESHD_JOB_DEPTH");
	if (d && atoi(d) > 0 && atoi(d) <= 1024)
		j->depth = (unsigned)atoi(d);
	/* Two a CPU, 1 to MAX_LOOPS: a turn blocks on its store (a journal
	 * append, a PostgreSQL round trip), and with one a CPU eight jobs of
	 * echo chunks ran at 0.85x of a thread each on 2 CPUs; with two, at
	 * 0.93x to 1.02x (docs/jobs.md, "Job loops"). */
	long cpus = sysconf(_SC_NPROCESSORS_ONLN), want = cpus > 0 ? 2 * cpus : 2;
	j->max_loops = want < MAX_LOOPS ? (unsigned)want : MAX_LOOPS;
	const char *nl = getenv("MESHD_JOB_LOOPS"); /* 0: none, each run on the pool run that opened it */
	if (nl && *nl)
		j->max_loops = atoi(nl) > 0 ? (unsigned)atoi(nl) : 0;
	if (j->max_loops > MAX_LOOPS)
		j->max_loops = MAX_LOOPS;
	struct rhome *rh = &j->homes[0];
	*rh = (struct rhome){.j = j, .tag = "", .keep = 1};
	struct mesh_home_events ev = events(rh);
	/* Locked before anything in it is read; then its jobs, each read one
	 * at a time (an ended one keeps no fd), the unfinished resumed. */
	int rc = mesh_home_file_open(&rh->h, state_dir, &ev, err);
	if (rc == 0)
		rc = rh->h->ops->watch(rh->h, err);
	if (rc == 0 && (rc = mesh__jobs_keep_start(j)) < 0)
		rc = mesh_errf(err, rc, "cannot start the jobs' janitor: %s", mesh_strerror(rc));
	if (rc < 0) {
		meshd_jobs_stop(j);
		meshd_jobs_free(j);
		return rc;
	}
	*out = j;
	return 0;
}

static void catalog_changed(void *arg)
{
	struct rhome *rh = arg;
	rh->h->ops->kick(rh->h);
}

int meshd_jobs_store(struct meshd_jobs *j, const char *url, const char *catalog, char **err)
{
	char dir[PATH_MAX], *why = NULL;
	struct rhome *rh = &j->homes[1];
	if (rh->h)
		return mesh_errf(err, MESH_E_STATE, "already following a store");
	if (!j->catalog && !(j->catalog = strdup(realpath(catalog, dir) ? dir : catalog)))
		return -ENOMEM;
	*rh = (struct rhome){.j = j, .tag = "store "};
	struct mesh_home_events ev = events(rh);
	if (!mesh_job_is_store_url(url)) {
		char safe[512];
		mesh_job_url_safe(url, safe, sizeof safe);
		return mesh_errf(err, MESH_E_PARSE, "--store wants a postgresql:// URL, not '%s'", safe);
	}
	int rc = mesh_home_pg_open(&rh->h, url, &ev, &why);
	if (rc < 0) {
		rc = mesh_errf(err, rc, "cannot use the store %s", why ? why : mesh_strerror(rc));
		free(why);
		return rc;
	}
	if ((rc = rh->h->ops->watch(rh->h, err)) < 0) {
		rh->h->ops->close(rh->h);
		rh->h = NULL;
		return rc;
	}
	meshd_on_catalog_change(j->core, catalog_changed, rh);
	return 0;
}

void meshd_jobs_stop(struct meshd_jobs *j)
{
	if (!j)
		return;
	if (j->homes[1].h) {
		meshd_on_catalog_change(j->core, NULL, NULL);
		j->homes[1].h->ops->stop(j->homes[1].h); /* no job is found from here */
	}
	mesh__jobs_keep_stop(j); /* sets stopping: no submit starts a driver from here */
	/* The jobs now, each held: an API thread may still remove one. */
	size_t n = 0, k = 0;
	pthread_mutex_lock(&j->mu);
	for (struct job *jb = j->list; jb; jb = jb->next)
		n++;
	struct job **v = calloc(n ? n : 1, sizeof *v);
	for (struct job *jb = j->list; jb; jb = jb->next) {
		pthread_mutex_lock(&jb->mu);
		if (jb->th_on && jb->cancel_efd >= 0)
			mesh_efd_ring(jb->cancel_efd);
		pthread_mutex_unlock(&jb->mu);
		if (v) {
			jb->refs++;
			v[k++] = jb;
		}
	}
	pthread_mutex_unlock(&j->mu);
	for (size_t i = 0; i < k; i++) {
		struct job *jb = v[i];
		mesh__job_driver_join(jb);
		pthread_mutex_lock(&jb->mu);
		pthread_cond_broadcast(&jb->cv);
		pthread_mutex_unlock(&jb->mu);
		mesh__job_put(jb);
	}
	free(v);
	/* Every run is over: the loops end, then the runs closing them. */
	for (size_t h = 0; h < sizeof j->homes / sizeof j->homes[0]; h++) {
		struct rhome *rh = &j->homes[h];
		for (unsigned i = 0; i < rh->nloops; i++)
			mesh_exec_loop_free(rh->loops[i]);
		rh->nloops = 0;
	}
	pthread_mutex_lock(&j->mu);
	while (j->finishing)
		pthread_cond_wait(&j->jan_cv, &j->mu);
	pthread_mutex_unlock(&j->mu);
}

void meshd_jobs_free(struct meshd_jobs *j)
{
	if (!j)
		return;
	while (j->list) {
		struct job *jb = j->list;
		j->list = jb->next;
		job_free(jb);
	}
	/* Last: the state directory is free for the next meshd. */
	for (size_t i = sizeof j->homes / sizeof j->homes[0]; i-- > 0;)
		if (j->homes[i].h)
			j->homes[i].h->ops->close(j->homes[i].h);
	free(j->catalog);
	pthread_cond_destroy(&j->jan_cv);
	pthread_mutex_destroy(&j->mu);
	free(j);
}
