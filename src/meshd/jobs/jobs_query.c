/* meshd's jobs (jobs.h): submit, status, cancel and results. */
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "base/thread.h"
#include "meshd/jobs/jobs.h"
#include "meshd/jobs/jobs_int.h"
#include "meshd/core/ops.h"
#include "exec/input.h"
#include "job/home.h"
#include "job/job.h"
#include "shm/ring.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int not_found(char **err, uint64_t id)
{
	return mesh_errf(err, MESH_E_NOTFOUND, "no job %" PRIu64, id);
}

static int name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > NAME_MAX_LEN)
		return 0;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* The spec of a job whose driver may run could not be written: the driver
 * is cancelled and waited for, and the job ends as an error (why, owned). */
static void stop_unstored(struct job *jb, char *why)
{
	pthread_mutex_lock(&jb->mu);
	jb->cancelled = 1; /* its driver ends it CANCELLED, not unfinished */
	if (jb->th_on && jb->cancel_efd >= 0)
		mesh_efd_ring(jb->cancel_efd);
	while (jb->th_on && jb->state == MESH_HOME_RUNNING)
		pthread_cond_wait(&jb->cv, &jb->mu);
	jb->state = MESH_HOME_ERROR;
	free(jb->error);
	jb->error = why;
	pthread_cond_broadcast(&jb->cv);
	pthread_mutex_unlock(&jb->mu);
}

struct store_arg {
	struct job *jb;
	int rc;
	char *err;
};

/* The home makes the job durable (its persist), on a thread of its own
 * while the submit's thread spawns the job's first worker. */
static void *store_main(void *arg)
{
	struct store_arg *a = arg;
	struct mesh_home_job *hj = a->jb->hj;
	a->rc = hj->home->ops->persist ? hj->home->ops->persist(hj, &a->err) : 0;
	if (a->rc == 0)
		atomic_store(&a->jb->t_journal, mesh_mono_ns());
	return NULL;
}

/* Every chunk's input goes to a worker in one CHUNK message (in pieces
 * when larger than its ring): one that cannot is refused here, not tried
 * and buried.  0 or MESH_E_TOOBIG (*err names the chunk and the limit). */
static int input_fits(const struct mesh_exec_input *in, char **err)
{
	for (uint64_t i = 0; i < in->n; i++) {
		size_t len;
		mesh_exec_input_line(in, i, &len);
		if (len > MESH_CHUNK_INPUT_MAX)
			return mesh_errf(err, MESH_E_TOOBIG,
					 "chunk %" PRIu64 "'s input (line %" PRIu64 ") is %zu bytes: a chunk's input is at "
					 "most %u bytes (the %u-byte message limit less the chunk's %u-byte header)",
					 i, i + 1, len, (unsigned)MESH_CHUNK_INPUT_MAX, (unsigned)MESH_MSG_MAX,
					 (unsigned)MESH_CHUNK_HDR);
	}
	return 0;
}

/* The spec a submit asks for, checked: its chunks counted from the input
 * (s->chunks, or the input's lines), the program loaded (as `mesh load`
 * would) for its max_workers.  0, or an error with *err. */
static int check_spec(struct meshd_jobs *j, const struct meshd_job_spec *s, struct mesh_home_spec *out, char **err)
{
	struct mesh_exec_input in = MESH_EXEC_INPUT_INIT;
	uint64_t n = s->chunks;
	int rc;
	if (!s->program || !*s->program)
		return mesh_errf(err, MESH_E_PARSE, "no program given");
	if (s->name && !name_ok(s->name))
		return mesh_errf(err, MESH_E_PARSE, "a job name is 1 to %u printable characters", NAME_MAX_LEN);
	if (s->chunks && s->input)
		return mesh_errf(err, MESH_E_PARSE, "either a chunk count or an input, not both");
	if (n > MESH_JOB_MAX_CHUNKS)
		return mesh_errf(err, MESH_E_RANGE, "%" PRIu64 " chunks is over the most a job may have (%llu)", n,
				 (unsigned long long)MESH_JOB_MAX_CHUNKS);
	if (!n) {
		uint64_t bad = 0;
		rc = s->input_len ? mesh_exec_input_from_mem(s->input, s->input_len, &in, &bad) : MESH_E_RANGE;
		if (rc == MESH_E_PARSE)
			rc = mesh_errf(err, rc, "input line %" PRIu64 " holds a NUL byte", bad);
		else if (rc == MESH_E_RANGE)
			rc = mesh_errf(err, rc, "no chunks: give a chunk count or at least one input line");
		else if (rc < 0)
			rc = mesh_errf(err, rc, "cannot read the input: %s", mesh_strerror(rc));
		if (rc == 0)
			rc = input_fits(&in, err);
		n = in.n;
		mesh_exec_input_release(&in);
		if (rc < 0)
			return rc;
		if (n > MESH_JOB_MAX_CHUNKS)
			return mesh_errf(err, MESH_E_RANGE, "too many chunks");
	}
	char *lerr = NULL;
	unsigned mw = meshd_program_max_workers(j->core, s->program, &lerr);
	if (!mw) {
		rc = lerr ? MESH_E_NOTFOUND : MESH_E_STATE;
		if (err)
			*err = lerr ? lerr : mesh_strf("cannot load '%s'", s->program);
		else
			free(lerr);
		/* The load's own code is in the message; not found is the common case. */
		return rc;
	}
	if (s->max_workers > MESH_MAX_WORKERS_CAP)
		return mesh_errf(err, MESH_E_RANGE, "--max-workers %u is over %u", s->max_workers, MESH_MAX_WORKERS_CAP);
	memset(out, 0, sizeof *out);
	snprintf(out->program, sizeof out->program, "%s", s->program);
	snprintf(out->name, sizeof out->name, "%s", s->name ? s->name : "");
	out->n = n;
	out->has_input = s->chunks == 0;
	out->max_workers = s->max_workers ? s->max_workers : mw;
	out->retries = s->retries ? s->retries : DEFAULT_RETRIES;
	out->timeout_ns = s->timeout_ns;
	out->speculate = s->speculate;
	return 0;
}

/* Makes the submitted job jb durable while its driver already runs, the
 * first worker asked for ahead (may be NULL) spawned meanwhile on this
 * thread (meshd_job_ahead_run); started: its driver did start.  0, or
 * the persist's error with *err (the job is then listed as an error). */
static int store_job(struct job *jb, struct meshd_job_ahead *ahead, int started, char **err)
{
	struct store_arg sa = {jb, 0, NULL};
	struct mesh_thread *sth;
	/* Background: its wake-up must not take the CPU from this spawn. */
	int store_th = mesh_thread_run(&sth, store_main, &sa, MESH_THREAD_BG) == 0;
	if (ahead) {
		meshd_job_ahead_run(ahead, started);
		if (!started) {
			/* No driver adopted it. */
			meshd_job_ahead_drop(ahead);
			jb->ahead = NULL;
		}
	}
	if (store_th)
		mesh_thread_join(sth, NULL);
	else
		store_main(&sa);
	if (sa.rc == 0) {
		atomic_store(&jb->t_stored, mesh_mono_ns());
		mesh__job_note_first(jb);
		return 0;
	}
	/* Not stored: its driver stops, and the job stays listed as an
	 * error (until `mesh rm`); a restart will not see it. */
	char *why = sa.err ? sa.err : mesh_strf("cannot store job %" PRIu64 ": %s", jb->id, mesh_strerror(sa.rc));
	stop_unstored(jb, why);
	if (err)
		*err = why ? strdup(why) : NULL;
	return sa.rc;
}

int meshd_jobs_submit(struct meshd_jobs *j, const struct meshd_job_spec *s, uint64_t *id, char **err)
{
	struct rhome *rh = &j->homes[0];
	struct mesh_home_spec spec;
	struct mesh_home_job *hj = NULL;
	struct job *jb = NULL;
	uint64_t t_submit = mesh_mono_ns();
	if (err)
		*err = NULL;
	int rc = check_spec(j, s, &spec, err);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&j->mu);
	int stopping = j->stopping;
	pthread_mutex_unlock(&j->mu);
	if (stopping)
		return mesh_errf(err, MESH_E_STATE, "meshd is stopping");
	/* Written, not durable yet (store_job). */
	if ((rc = rh->h->ops->create(rh->h, &spec, s->input, s->input_len, &hj, err)) < 0)
		return rc;
	if ((rc = mesh__job_new(rh, hj, &jb)) < 0) {
		rh->h->ops->job_free(hj);
		return mesh_errf(err, rc, "cannot take job %" PRIu64 ": %s", spec.id, mesh_strerror(rc));
	}
	jb->t_submit = t_submit;
	/* Its first worker: from zero, the spawn is the long pole, and it
	 * runs while the job is stored, its driver starts and its first chunks
	 * are leased (the driver's executor adopts it).  Not having it costs
	 * only time: the executor asks for its own. */
	struct meshd_job_ahead *ahead = NULL;
	if (meshd_job_ahead_new(j->core, hj->spec.program, &jb->xs, &ahead) == 0)
		jb->ahead = ahead;
	/* Its driver now, while the job is made durable: it needs the
	 * journal's bytes, not their fsyncs, which would only delay its first
	 * lease.  The job is durable once its spec is (first_result_s counts
	 * from then at the earliest); a crash before leaves a directory that
	 * open ignores, and the submit unanswered.  Listed first: a stop must
	 * find its driver. */
	pthread_mutex_lock(&j->mu);
	jb->next = j->list;
	j->list = jb;
	jb->linked = 1;
	jb->refs++; /* this submit's, to its end */
	/* Stopping meanwhile: it stays on disk, unfinished, for the next start. */
	rc = j->stopping ? 1 : mesh__job_start(jb);
	pthread_mutex_unlock(&j->mu);
	int src = store_job(jb, ahead, rc == 0, err);
	if (src < 0) {
		mesh__job_put(jb);
		return src;
	}
	if (rc < 0)
		mesh__job_start_failed(jb, rc);
	mesh_info("job=%" PRIu64 " submitted program=%s chunks=%" PRIu64 " max_workers=%u", jb->id, hj->spec.program,
		  hj->spec.n, jb->max_workers);
	*id = jb->id;
	mesh__job_put(jb);
	return 0;
}

/* ---- status ---- */

struct fail_ctx {
	struct meshd_job_failure *v;
	size_t n, cap;
	int oom;
};

static void add_failure(void *arg, const struct mesh_home_failure *f)
{
	struct fail_ctx *c = arg;
	struct meshd_job_failure *v = mesh_grow(c->v, &c->cap, c->n + 1, sizeof *v);
	if (!v) {
		c->oom = 1;
		return;
	}
	c->v = v;
	struct meshd_job_failure *d = &c->v[c->n++];
	d->cid = f->cid;
	d->attempts = f->attempts;
	d->status = f->status;
	d->buried = f->buried;
	d->report = f->report_len ? strndup(f->report, f->report_len) : NULL;
}

static void status_counts(const struct mesh_job_status *st, struct meshd_job_info *ji)
{
	ji->done = st->done;
	ji->leased = st->leased;
	ji->pending = st->pending;
	ji->buried = st->buried;
	ji->duplicates = st->duplicates;
	ji->failed_attempts = st->failed_attempts;
	ji->speculative_wins = st->speculative_wins;
}

/* The counts of an ended job: what its end left (no file opened). */
static void sum_counts(const struct mesh_home_sum *sum, struct meshd_job_info *ji)
{
	status_counts(&sum->st, ji);
	ji->elapsed_s = sum->elapsed_s;
	ji->rate = sum->rate;
}

/* A running job's counts from its journal, its times from this driver's
 * run. */
static void live_counts(struct job *jb, struct mesh_job *jh, struct meshd_job_info *ji)
{
	struct mesh_job_status js;
	if (jh && mesh_job_status(jh, &js) == 0)
		status_counts(&js, ji);
	if (!jb->t0)
		return;
	uint64_t now = atomic_load(&jb->t_end);
	if (!now)
		now = mesh_mono_ns();
	ji->elapsed_s = (double)(now - jb->t0) / 1e9;
	if (ji->elapsed_s > 0 && ji->done > jb->done0)
		ji->rate = (double)(ji->done - jb->done0) / ji->elapsed_s;
	if (ji->rate > 0 && ji->state == MESH_HOME_RUNNING)
		ji->eta_s = (double)(ji->n - ji->done - ji->buried) / ji->rate;
}

/* Honest: from the submit (the driver's start for a job resumed by this
 * meshd) to the first DONE that is durable. */
static void first_result(struct job *jb, struct meshd_job_info *ji)
{
	uint64_t first = atomic_load(&jb->t_first_done), from = jb->t_submit ? jb->t_submit : jb->t_driver;
	uint64_t stored = atomic_load(&jb->t_stored);
	if (jb->t_submit && first && stored > first)
		first = stored; /* DONE before the job itself was durable */
	if (jb->t_submit && !stored)
		first = 0;
	if (first && from && first >= from)
		ji->first_result_s = (double)(first - from) / 1e9;
}

/* What jb is, as the API tells it: its spec, where it lives, its state
 * and the executor's counts (no lock held). */
static int fill_spec(struct job *jb, struct meshd_job_info *ji)
{
	const struct mesh_home_spec *s = &jb->hj->spec;
	struct mesh_home_where w;
	jb->hj->home->ops->where(jb->hj, &w);
	ji->id = jb->id;
	ji->eta_s = -1;
	ji->first_result_s = -1;
	ji->program = strdup(s->program);
	ji->name = strdup(s->name);
	ji->dir = strdup(w.dir);
	ji->journal = strdup(w.journal);
	ji->lockdir = strdup(w.lockdir);
	ji->lease_name = strdup(w.lease_name);
	ji->n = s->n;
	ji->pending = s->n;
	ji->max_workers = jb->max_workers;
	ji->retries = s->retries;
	ji->timeout_ns = s->timeout_ns;
	ji->speculate = s->speculate;
	ji->workers = atomic_load(&jb->xs.workers);
	ji->starting = atomic_load(&jb->xs.starting);
	ji->worker_deaths = atomic_load(&jb->xs.worker_deaths);
	ji->worker_kills = atomic_load(&jb->xs.worker_kills);
	ji->ignored_replies = atomic_load(&jb->xs.ignored_replies);
	ji->requeued = atomic_load(&jb->xs.requeued);
	if (!ji->program || !ji->name || !ji->dir || !ji->journal || !ji->lockdir || !ji->lease_name)
		return -ENOMEM;
	return 0;
}

static int fill_info(struct job *jb, int details, struct meshd_job_info *ji)
{
	memset(ji, 0, sizeof *ji);
	pthread_mutex_lock(&jb->mu);
	ji->state = jb->state;
	ji->error = jb->error ? strdup(jb->error) : NULL;
	int have_sum = jb->have_sum && jb->state != MESH_HOME_RUNNING;
	struct mesh_home_sum sum = jb->sum;
	pthread_mutex_unlock(&jb->mu);
	if (fill_spec(jb, ji) < 0)
		return -ENOMEM;
	/* A job can only wait while its program is FAILED: say why. */
	if (ji->state == MESH_HOME_RUNNING)
		ji->program_failed = meshd_core_program_failed(jb->rh->j->core, jb->hj->spec.program);
	first_result(jb, ji);
	/* Its files only for failures to report: an ended job's are opened
	 * for that, and closed again once idle (a list opens none). */
	int want = details && (!have_sum || sum.st.failed_attempts > 0);
	int files = mesh__job_files_get(jb, want, NULL) == 0;
	if (have_sum)
		sum_counts(&sum, ji);
	else
		live_counts(jb, files ? atomic_load(&jb->hj->jh) : NULL, ji);
	int rc = 0;
	if (want && files) {
		struct fail_ctx c = {0};
		jb->hj->home->ops->failures(jb->hj, add_failure, &c);
		ji->failures = c.v;
		ji->nfailures = c.n;
		if (c.oom)
			rc = -ENOMEM;
	}
	if (files)
		mesh__job_files_put(jb);
	return rc;
}

void meshd_job_info_release(struct meshd_job_info *ji)
{
	if (!ji)
		return;
	free(ji->program);
	free(ji->program_failed);
	free(ji->name);
	free(ji->error);
	free(ji->dir);
	free(ji->journal);
	free(ji->lockdir);
	free(ji->lease_name);
	for (size_t i = 0; i < ji->nfailures; i++)
		free(ji->failures[i].report);
	free(ji->failures);
	memset(ji, 0, sizeof *ji);
}

static void deadline_ts(struct timespec *ts, uint64_t wait_ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	uint64_t ns = (uint64_t)ts->tv_nsec + wait_ns % MESH_NS_PER_S;
	ts->tv_sec += (time_t)(wait_ns / MESH_NS_PER_S + ns / MESH_NS_PER_S);
	ts->tv_nsec = (long)(ns % MESH_NS_PER_S);
}

/* Waits on the job's progress (jb->mu held), at most until ts.  0 when
 * woken, 1 when the time is up or meshd is stopping. */
static int wait_progress(struct job *jb, const struct timespec *ts)
{
	if (jb->rh->j->stopping)
		return 1;
	return pthread_cond_timedwait(&jb->cv, &jb->mu, ts) != 0 || jb->rh->j->stopping;
}

int meshd_jobs_get(struct meshd_jobs *j, uint64_t id, int details, uint64_t wait_ns, struct meshd_job_info *out,
		   char **err)
{
	if (err)
		*err = NULL;
	struct job *jb = mesh__jobs_find(&j->homes[0], id);
	if (!jb)
		return not_found(err, id);
	if (wait_ns) {
		struct timespec ts;
		deadline_ts(&ts, wait_ns);
		pthread_mutex_lock(&jb->mu);
		while (jb->state == MESH_HOME_RUNNING && !wait_progress(jb, &ts))
			;
		pthread_mutex_unlock(&jb->mu);
	}
	int rc = fill_info(jb, details, out);
	if (rc < 0)
		meshd_job_info_release(out);
	mesh__job_put(jb);
	return rc;
}

static int by_id(const void *a, const void *b)
{
	const struct job *x = *(struct job *const *)a, *y = *(struct job *const *)b;
	return x->id < y->id ? -1 : x->id > y->id;
}

int meshd_jobs_list(struct meshd_jobs *j, size_t recent, struct meshd_job_info **out, size_t *n, size_t *older)
{
	*out = NULL;
	*n = 0;
	if (older)
		*older = 0;
	/* The state directory's jobs: the API's. */
	struct rhome *rh = &j->homes[0];
	pthread_mutex_lock(&j->mu);
	size_t cnt = 0;
	for (struct job *jb = j->list; jb; jb = jb->next)
		cnt += jb->rh == rh;
	struct job **v = calloc(cnt ? cnt : 1, sizeof *v);
	size_t k = 0;
	for (struct job *jb = j->list; v && jb; jb = jb->next) {
		if (jb->rh != rh)
			continue;
		jb->refs++;
		v[k++] = jb;
	}
	pthread_mutex_unlock(&j->mu);
	if (!v)
		return -ENOMEM;
	/* By id: the list is in no order (newest first, then as a directory
	 * read them). */
	qsort(v, cnt, sizeof *v, by_id);
	/* Without all: the running ones and the newest `recent` of the rest. */
	size_t keep = 0, ended = 0;
	for (size_t i = cnt; i-- > 0;) {
		pthread_mutex_lock(&v[i]->mu);
		int running = v[i]->state == MESH_HOME_RUNNING;
		pthread_mutex_unlock(&v[i]->mu);
		if (!recent || running || ended++ < recent)
			continue;
		mesh__job_put(v[i]);
		v[i] = NULL;
		if (older)
			++*older;
	}
	for (size_t i = 0; i < cnt; i++)
		if (v[i])
			v[keep++] = v[i];
	struct meshd_job_info *list = calloc(keep ? keep : 1, sizeof *list);
	int rc = list ? 0 : -ENOMEM;
	for (size_t i = 0; i < keep && rc == 0; i++)
		rc = fill_info(v[i], 0, &list[i]);
	for (size_t i = 0; i < keep; i++)
		mesh__job_put(v[i]);
	free(v);
	if (rc < 0) {
		meshd_jobs_list_release(list, keep);
		return rc;
	}
	*out = list;
	*n = keep;
	return 0;
}

void meshd_jobs_list_release(struct meshd_job_info *list, size_t n)
{
	for (size_t i = 0; list && i < n; i++)
		meshd_job_info_release(&list[i]);
	free(list);
}

int meshd_jobs_cancel(struct meshd_jobs *j, uint64_t id, int kill_workers, char **err)
{
	if (err)
		*err = NULL;
	struct job *jb = mesh__jobs_find(&j->homes[0], id);
	if (!jb)
		return not_found(err, id);
	struct mesh_home_job *hj = jb->hj;
	pthread_mutex_lock(&jb->mu);
	if (jb->state != MESH_HOME_RUNNING) {
		enum mesh_home_state st = jb->state;
		pthread_mutex_unlock(&jb->mu);
		mesh__job_put(jb);
		return mesh_errf(err, MESH_E_STATE, "job %" PRIu64 " is not running (it is %s)", id,
				 mesh_home_state_name(st));
	}
	/* Recorded first (a restart must not resume it); its driver's end
	 * records it again with the counts. */
	int rc = hj->home->ops->cancel(hj, err);
	if (rc == 0) {
		jb->cancelled = 1;
		atomic_store(&jb->leave, kill_workers ? MESHD_JOB_LEAVE_KILL : MESHD_JOB_LEAVE_HALT);
		if (jb->cancel_efd >= 0)
			mesh_efd_ring(jb->cancel_efd);
		if (!jb->th_on) {
			/* No driver (meshd is stopping): it ends here, as recorded. */
			jb->state = MESH_HOME_CANCELLED;
			jb->sum.ended = (int64_t)time(NULL);
			jb->have_sum = 1;
			hj->home->ops->end(hj, MESH_HOME_CANCELLED, NULL, NULL);
		}
	}
	pthread_mutex_unlock(&jb->mu);
	if (rc == 0)
		mesh_info("job=%" PRIu64 " cancelled%s", id, kill_workers ? " workers=killed" : "");
	if (rc == 0 && kill_workers)
		meshd_op_stop_idle(j->core, hj->spec.program);
	mesh__job_put(jb);
	return rc;
}

/* ---- results ---- */

/* A page of results being made (results_of's, for the home's results). */
struct page {
	struct mesh_buf *out;
	size_t max_bytes;
	int framed, rc;
	uint64_t *missing;
	size_t missing_cap, *nmissing;
};

static int page_add(void *arg, uint64_t cid, enum mesh_home_result how, const void *p, size_t n)
{
	struct page *g = arg;
	if (g->out->len >= g->max_bytes)
		return 1;
	if (how == MESH_HOME_NONE)
		return 0; /* never DONE: adds nothing */
	if (how == MESH_HOME_MISSING) {
		/* DONE without a result (the file lost it): named, and the others
		 * go on; the page ends before one more than it can name. */
		if (*g->nmissing == g->missing_cap)
			return 1;
		g->missing[(*g->nmissing)++] = cid;
		return 0;
	}
	if (g->framed) {
		uint8_t h[12];
		for (int i = 0; i < 8; i++)
			h[i] = (uint8_t)(cid >> (8 * i));
		for (int i = 0; i < 4; i++)
			h[8 + i] = (uint8_t)((uint64_t)n >> (8 * i));
		if (mesh_buf_add(g->out, h, sizeof h) < 0)
			g->rc = -ENOMEM;
	}
	if (g->rc == 0 && n && mesh_buf_add(g->out, p, n) < 0)
		g->rc = -ENOMEM;
	return g->rc < 0;
}

/* meshd_jobs_results of jb, its files held. */
static int results_of(struct job *jb, uint64_t from, uint64_t wait_ns, struct page *g, uint64_t *next, int *end,
		      char **err)
{
	struct mesh_home_job *hj = jb->hj;
	struct timespec ts;
	deadline_ts(&ts, wait_ns);
	uint64_t k = from;
	int rc = 0;
	pthread_mutex_lock(&jb->mu);
	for (;;) {
		int ended = jb->state != MESH_HOME_RUNNING;
		/* Off the lock: a read may take a while. */
		pthread_mutex_unlock(&jb->mu);
		rc = hj->home->ops->results(hj, k, ended, page_add, g, &k);
		if (rc == 0)
			rc = g->rc;
		pthread_mutex_lock(&jb->mu);
		if (rc < 0 || k > from || k >= hj->spec.n || !wait_ns || wait_progress(jb, &ts))
			break;
	}
	pthread_mutex_unlock(&jb->mu);
	if (rc < 0) {
		struct mesh_home_where w;
		hj->home->ops->where(hj, &w);
		return mesh_errf(err, rc, "cannot read the result of chunk %" PRIu64 " of job %" PRIu64 " in %s: %s", k,
				 jb->id, w.results, mesh_strerror(rc));
	}
	*next = k;
	*end = k >= hj->spec.n;
	return 0;
}

int meshd_jobs_results(struct meshd_jobs *j, uint64_t id, uint64_t from, uint64_t wait_ns, size_t max_bytes,
		       int framed, struct mesh_buf *out, uint64_t *missing, size_t missing_cap, size_t *nmissing,
		       uint64_t *next, int *end, char **err)
{
	if (err)
		*err = NULL;
	*next = from;
	*end = 0;
	*nmissing = 0;
	struct job *jb = mesh__jobs_find(&j->homes[0], id);
	if (!jb)
		return not_found(err, id);
	uint64_t n = jb->hj->spec.n;
	int rc = from > n ? mesh_errf(err, MESH_E_RANGE, "job %" PRIu64 " has %" PRIu64 " chunks", id, n)
			  : mesh__job_files_get(jb, 1, err);
	if (rc < 0) {
		mesh__job_put(jb);
		return rc;
	}
	struct page g = {out, max_bytes, framed, 0, missing, missing_cap, nmissing};
	rc = results_of(jb, from, wait_ns, &g, next, end, err);
	mesh__job_files_put(jb);
	mesh__job_put(jb);
	return rc;
}

/* The bucket of chunk cid in m: the largest i whose first chunk is at or
 * before cid. */
static unsigned bucket_of(const struct meshd_chunk_map *m, uint64_t cid)
{
	unsigned i = (unsigned)(((unsigned __int128)cid * m->buckets) / m->n);
	/* cid * buckets / n may land one past: the first chunks round down. */
	while (i + 1 < m->buckets && meshd_chunk_map_first(m, i + 1) <= cid)
		i++;
	while (i > 0 && meshd_chunk_map_first(m, i) > cid)
		i--;
	return i;
}

/* The feed hands out the DONE chunks in cid order: the bucket is found by
 * walking, not by a division each. */
struct map_walk {
	struct meshd_chunk_map *m;
	unsigned i;   /* the bucket of the last chunk */
	uint64_t end; /* where bucket i ends */
};

static void map_done(uint64_t cid, void *arg)
{
	struct map_walk *w = arg;
	if (cid >= w->end) {
		w->i = bucket_of(w->m, cid);
		w->end = meshd_chunk_map_first(w->m, w->i + 1);
	}
	w->m->done[w->i]++;
}

static void map_failure(const struct mesh_job_failure *f, void *arg)
{
	struct meshd_chunk_map *m = arg;
	if (f->cid >= m->n)
		return;
	unsigned i = bucket_of(m, f->cid);
	if (f->buried)
		m->buried[i]++;
	else
		m->retried[i]++;
}

/* Every chunk DONE but the buried ones, whose ids only the files know:
 * the map of an ended job without failed attempts. */
static void map_all_done(struct meshd_chunk_map *m)
{
	for (unsigned i = 0; i < m->buckets; i++)
		m->done[i] = meshd_chunk_map_first(m, i + 1) - meshd_chunk_map_first(m, i);
}

int meshd_jobs_chunk_map(struct meshd_jobs *j, uint64_t id, unsigned buckets, struct meshd_chunk_map *out,
			 char **err)
{
	memset(out, 0, sizeof *out);
	if (err)
		*err = NULL;
	struct job *jb = mesh__jobs_find(&j->homes[0], id);
	if (!jb)
		return not_found(err, id);
	uint64_t n = jb->hj->spec.n;
	int rc = 0;
	if (n > MESHD_CHUNK_MAP_MAX_CHUNKS) {
		rc = mesh_errf(err, MESH_E_RANGE, "job %" PRIu64 " has %" PRIu64 " chunks: a chunk map is made for at most %llu",
			       id, n, (unsigned long long)MESHD_CHUNK_MAP_MAX_CHUNKS);
		goto out;
	}
	out->n = n;
	out->buckets = n == 0 ? 0 : buckets < 1 ? 1 : buckets > MESHD_CHUNK_MAP_MAX ? MESHD_CHUNK_MAP_MAX : buckets;
	if (n && n < out->buckets)
		out->buckets = (unsigned)n;
	if (out->buckets == 0)
		goto out;
	out->done = calloc((size_t)out->buckets * 3, sizeof *out->done);
	if (!out->done) {
		rc = -ENOMEM;
		goto out;
	}
	out->retried = out->done + out->buckets;
	out->buried = out->retried + out->buckets;
	pthread_mutex_lock(&jb->mu);
	int have_sum = jb->have_sum && jb->state != MESH_HOME_RUNNING;
	struct mesh_home_sum sum = jb->sum;
	pthread_mutex_unlock(&jb->mu);
	if (have_sum && sum.st.failed_attempts == 0 && sum.st.done == n) {
		map_all_done(out);
		goto out;
	}
	rc = mesh__job_files_get(jb, 1, err);
	if (rc < 0)
		goto out;
	struct mesh_job *jh = atomic_load(&jb->hj->jh);
	if (jh) {
		struct mesh_job_feed f = MESH_JOB_FEED_INIT;
		struct map_walk w = {out, 0, 0};
		rc = mesh_job_feed(jh, &f, map_done, &w);
		mesh_job_feed_free(&f);
		if (rc == 0)
			rc = mesh_job_failures(jh, map_failure, out);
		if (rc < 0 && err && !*err)
			rc = mesh_errf(err, rc, "cannot read job %" PRIu64 "'s chunks: %s", id, mesh_strerror(rc));
	}
	mesh__job_files_put(jb);
out:
	mesh__job_put(jb);
	if (rc < 0)
		meshd_chunk_map_release(out);
	return rc;
}

void meshd_chunk_map_release(struct meshd_chunk_map *m)
{
	free(m->done);
	memset(m, 0, sizeof *m);
}
