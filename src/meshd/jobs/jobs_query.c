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
#include "job/job.h"
#include "job/results.h"
#include "shm/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
	uint64_t one = 1;
	pthread_mutex_lock(&jb->mu);
	jb->cancelled = 1; /* its driver ends it CANCELLED, not unfinished */
	if (jb->th_on && jb->cancel_efd >= 0 && write(jb->cancel_efd, &one, sizeof one) < 0) {
		/* the counter is never full */
	}
	while (jb->th_on && jb->state == MESHD_JOB_RUNNING)
		pthread_cond_wait(&jb->cv, &jb->mu);
	jb->state = MESHD_JOB_ERROR;
	free(jb->error);
	jb->error = why;
	pthread_cond_broadcast(&jb->cv);
	pthread_mutex_unlock(&jb->mu);
}

/* A new file at path (in the job's new directory) holding len bytes of
 * p, not synced; its descriptor in *fd for store_job's fdatasync. */
static int write_new(const char *path, const void *p, size_t len, int *fd)
{
	int rc;
	*fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (*fd < 0)
		return -errno;
	if ((rc = mesh_write_all(*fd, p, len)) < 0) {
		close(*fd);
		*fd = -1;
	}
	return rc;
}

/* Makes a job durable while its driver already runs, in one round of
 * syncs, all at once (mesh_sync_many): the data of its input (in_fd),
 * results file (res_fd), journal and spec (path), all written unsynced
 * before; the job's directory (their names); jobs/ (the directory's own
 * name).  The spec vouches for the files written with it (jobs.c,
 * mesh__job_spec_seal): a crash before the round ends leaves a spec that a
 * restart finds whole, with whole files, or a directory it ignores.  The
 * spec used to go in under a temporary name, renamed after that round and
 * its directory synced again: a second round, and its file system commit
 * was one more that the first DONE's sync could wait behind.  In series
 * these were seven syncs, each waiting for the last.  The submit is
 * answered after. */
static int store_job(struct job *jb, const char *spec, const char *path, int in_fd, int res_fd)
{
	int fds[6], n = 0, rc = 0;
	unsigned char data[6];
	int sfd = -1, jfd = -1, dfd = -1, pfd = -1;
	if ((sfd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		rc = -errno;
	if (!rc)
		rc = mesh_write_all(sfd, spec, strlen(spec));
	if (!rc && (jfd = open(jb->journal, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		rc = -errno;
	if (!rc && (dfd = open(jb->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		rc = -errno;
	if (!rc && (pfd = open(jb->owner->jobs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		rc = -errno;
	if (!rc) {
		if (in_fd >= 0)
			fds[n] = in_fd, data[n++] = 1;
		fds[n] = res_fd, data[n++] = 1;
		fds[n] = jfd, data[n++] = 1;
		fds[n] = sfd, data[n++] = 1;
		fds[n] = dfd, data[n++] = 0;
		fds[n] = pfd, data[n++] = 0;
		rc = mesh_sync_many(fds, data, (size_t)n);
	}
	if (!rc)
		atomic_store(&jb->t_journal, mesh_mono_ns());
	if (rc && sfd >= 0) {
		/* Not stored: no spec a restart could find either. */
		unlink(path);
	}
	int mine[] = {sfd, jfd, dfd, pfd};
	for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
		if (mine[i] >= 0)
			close(mine[i]);
	return rc;
}

struct store_arg {
	struct job *jb;
	const char *spec, *path;
	int in_fd, res_fd;
	int rc;
};

static void *store_main(void *arg)
{
	struct store_arg *a = arg;
	a->rc = store_job(a->jb, a->spec, a->path, a->in_fd, a->res_fd);
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

int meshd_jobs_submit(struct meshd_jobs *j, const struct meshd_job_spec *s, uint64_t *id, char **err)
{
	struct mesh_exec_input in = MESH_EXEC_INPUT_INIT;
	uint64_t n = s->chunks, t_submit = mesh_mono_ns();
	int rc;
	if (err)
		*err = NULL;
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
	/* The program must exist (it is loaded now, as `mesh load` would). */
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

	pthread_mutex_lock(&j->mu);
	if (j->stopping) {
		pthread_mutex_unlock(&j->mu);
		return mesh_errf(err, MESH_E_STATE, "meshd is stopping");
	}
	uint64_t nid = j->next_id;
	struct job *jb = NULL;
	/* mkdir is the claim: an id is never given twice. */
	for (;; nid++) {
		char *d = mesh_strf("%s/%" PRIu64, j->jobs_dir, nid);
		if (!d) {
			rc = -ENOMEM;
			break;
		}
		rc = mkdir(d, 0700) < 0 ? -errno : 0;
		free(d);
		if (rc != -EEXIST)
			break;
	}
	if (rc == 0) {
		j->next_id = nid + 1;
		if ((rc = mesh__job_new(j, nid, &jb)) < 0) {
			pthread_mutex_unlock(&j->mu);
			return mesh_errf(err, rc, "cannot take job %" PRIu64 ": %s", nid, mesh_strerror(rc));
		}
	}
	pthread_mutex_unlock(&j->mu);
	if (rc < 0)
		return mesh_errf(err, rc, "cannot create the job's directory in %s: %s", j->jobs_dir, mesh_strerror(rc));
	jb->program = strdup(s->program);
	jb->name = s->name ? strdup(s->name) : NULL;
	jb->n = n;
	jb->has_input = s->chunks == 0;
	jb->max_workers = s->max_workers ? s->max_workers : mw;
	jb->retries = s->retries ? s->retries : DEFAULT_RETRIES;
	jb->timeout_ns = s->timeout_ns;
	jb->speculate = s->speculate;
	jb->t_submit = t_submit;
	char *spec = NULL, *path = NULL;
	if (!jb->program || (s->name && !jb->name) || !(path = mesh_strf("%s/spec", jb->dir))) {
		rc = -ENOMEM;
		goto fail;
	}
	/* The input and the journal, written and not synced: the directory
	 * is ours alone (the mkdir above), and the spec that vouches for them
	 * comes last (store_job), so a crash before all of it is durable
	 * leaves a directory that open ignores. */
	int in_fd = -1, res_fd = -1;
	if (jb->has_input && (rc = write_new(jb->input_path, s->input, s->input_len, &in_fd)) < 0)
		goto fail;
	/* The results file too: made durable with the rest, so that the
	 * driver's open of it syncs nothing (its creation by the driver was
	 * two more fsyncs beside these, on the way to the first result). */
	if ((rc = mesh_results_create(jb->results_path, &res_fd)) < 0 ||
	    (rc = mesh_job_submit_unsynced(jb->journal, n, jb->ident, jb->ident_len, 1)) < 0 ||
	    (!(spec = mesh__job_spec_seal(jb, s->input, s->input_len)) && (rc = -ENOMEM))) {
		if (in_fd >= 0)
			close(in_fd);
		if (res_fd >= 0)
			close(res_fd);
		goto fail;
	}
	/* Its first worker: from zero, the spawn is the long pole, and it
	 * runs while the job is stored, its driver starts and its first chunks
	 * are leased (the driver's executor adopts it).  Not having it costs
	 * only time: the executor asks for its own. */
	struct meshd_job_ahead *ahead = NULL;
	if (meshd_job_ahead_new(j->core, jb->program, &jb->xs, &ahead) == 0)
		jb->ahead = ahead;
	/* Its driver now, while the job is made durable (store_job): it needs
	 * the journal's bytes, not their fsyncs, which would only delay its
	 * first lease.  The job is durable once its spec is (first_result_s
	 * counts from then at the earliest); a crash before leaves a directory
	 * that open ignores, and the submit unanswered.  Listed first: a stop
	 * must find its driver. */
	pthread_mutex_lock(&j->mu);
	jb->next = j->list;
	j->list = jb;
	jb->linked = 1;
	jb->refs++; /* this submit's, to its end */
	/* Stopping meanwhile: it stays on disk, unfinished, for the next start. */
	rc = j->stopping ? 1 : mesh__job_start(jb);
	pthread_mutex_unlock(&j->mu);
	/* The store on a thread of its own, the worker's spawn on this one
	 * (meshd_job_ahead_run): both before the answer. */
	struct store_arg sa = {jb, spec, path, in_fd, res_fd, 0};
	struct mesh_thread *sth;
	/* Background: its wake-up must not take the CPU from this spawn. */
	int store_th = mesh_thread_run(&sth, store_main, &sa, MESH_THREAD_BG) == 0;
	if (ahead) {
		meshd_job_ahead_run(ahead, rc == 0);
		if (rc != 0) {
			/* No driver adopted it. */
			meshd_job_ahead_drop(ahead);
			jb->ahead = NULL;
		}
	}
	if (store_th)
		mesh_thread_join(sth, NULL);
	else
		store_main(&sa);
	int src = sa.rc;
	if (in_fd >= 0)
		close(in_fd);
	close(res_fd);
	if (src == 0) {
		atomic_store(&jb->t_stored, mesh_mono_ns());
		mesh__job_note_first(jb);
	}
	free(spec);
	free(path);
	if (src < 0) {
		/* Not stored: its driver stops, and the job stays listed as an
		 * error (until `mesh rm`); a restart will not see it. */
		char *why = mesh_strf("cannot store job %" PRIu64 " in %s: %s", jb->id, jb->dir, mesh_strerror(src));
		stop_unstored(jb, why);
		if (err)
			*err = why ? strdup(why) : NULL;
		mesh__job_put(jb);
		return src;
	}
	if (rc < 0) {
		pthread_mutex_lock(&jb->mu);
		jb->state = MESHD_JOB_ERROR;
		free(jb->error);
		jb->error = mesh_strf("cannot start its driver: %s", mesh_strerror(rc));
		pthread_mutex_unlock(&jb->mu);
	}
	mesh_info("job=%" PRIu64 " submitted program=%s chunks=%" PRIu64 " max_workers=%u", jb->id, jb->program, n,
		  jb->max_workers);
	*id = jb->id;
	mesh__job_put(jb);
	return 0;
fail:
	free(spec);
	free(path);
	rc = mesh_errf(err, rc, "cannot store job %" PRIu64 " in %s: %s", jb->id, jb->dir, mesh_strerror(rc));
	mesh__job_free(jb);
	return rc;
}

/* ---- status ---- */

struct fail_ctx {
	struct job *jb;
	struct meshd_job_failure *v;
	size_t n, cap;
	int oom;
};

static void add_failure(const struct mesh_job_failure *f, void *arg)
{
	struct fail_ctx *c = arg;
	if (c->n == c->cap) {
		size_t nc = c->cap ? c->cap * 2 : 16;
		struct meshd_job_failure *v = realloc(c->v, nc * sizeof *v);
		if (!v) {
			c->oom = 1;
			return;
		}
		c->v = v;
		c->cap = nc;
	}
	struct meshd_job_failure *d = &c->v[c->n++];
	d->cid = f->cid;
	d->attempts = f->attempts;
	d->status = f->last_status;
	d->buried = f->buried;
	d->report = NULL;
	size_t len;
	void *p = NULL;
	if (c->jb->res && mesh_results_get(c->jb->res, f->cid, MESH_RESULT_FAILURE, &p, &len) == 0)
		d->report = p;
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
static void sum_counts(const struct job_sum *sum, struct meshd_job_info *ji)
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
	if (ji->rate > 0 && ji->state == MESHD_JOB_RUNNING)
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

static int fill_info(struct job *jb, int details, struct meshd_job_info *ji)
{
	memset(ji, 0, sizeof *ji);
	ji->id = jb->id;
	ji->eta_s = -1;
	ji->first_result_s = -1;
	pthread_mutex_lock(&jb->mu);
	ji->state = jb->state;
	ji->error = jb->error ? strdup(jb->error) : NULL;
	int have_sum = jb->have_sum && jb->state != MESHD_JOB_RUNNING;
	struct job_sum sum = jb->sum;
	pthread_mutex_unlock(&jb->mu);
	ji->program = strdup(jb->program);
	ji->name = strdup(jb->name ? jb->name : "");
	ji->dir = strdup(jb->dir);
	ji->journal = strdup(jb->journal);
	ji->lockdir = strdup(jb->lockdir);
	ji->lease_name = strdup(jb->lease_name);
	ji->n = jb->n;
	ji->pending = jb->n;
	ji->max_workers = jb->max_workers;
	ji->retries = jb->retries;
	ji->timeout_ns = jb->timeout_ns;
	ji->speculate = jb->speculate;
	ji->workers = atomic_load(&jb->xs.workers);
	ji->starting = atomic_load(&jb->xs.starting);
	ji->worker_deaths = atomic_load(&jb->xs.worker_deaths);
	ji->worker_kills = atomic_load(&jb->xs.worker_kills);
	ji->ignored_replies = atomic_load(&jb->xs.ignored_replies);
	ji->requeued = atomic_load(&jb->xs.requeued);
	if (!ji->program || !ji->name || !ji->dir || !ji->journal || !ji->lockdir || !ji->lease_name)
		return -ENOMEM;
	/* A job can only wait while its program is FAILED: say why. */
	if (ji->state == MESHD_JOB_RUNNING)
		ji->program_failed = meshd_core_program_failed(jb->owner->core, jb->program);
	first_result(jb, ji);
	/* Its files only for failures to report: an ended job's are opened
	 * for that, and closed again once idle (a list opens none). */
	int want = details && (!have_sum || sum.st.failed_attempts > 0);
	int files = mesh__job_files_get(jb, want, NULL) == 0;
	pthread_mutex_lock(&jb->mu);
	struct mesh_job *jh = files ? jb->jh : NULL;
	pthread_mutex_unlock(&jb->mu);
	if (have_sum)
		sum_counts(&sum, ji);
	else
		live_counts(jb, jh, ji);
	int rc = 0;
	if (want && jh) {
		struct fail_ctx c = {.jb = jb};
		mesh_job_failures(jh, add_failure, &c);
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
	if (jb->owner->stopping)
		return 1;
	return pthread_cond_timedwait(&jb->cv, &jb->mu, ts) != 0 || jb->owner->stopping;
}

int meshd_jobs_get(struct meshd_jobs *j, uint64_t id, int details, uint64_t wait_ns, struct meshd_job_info *out,
		   char **err)
{
	if (err)
		*err = NULL;
	struct job *jb = mesh__jobs_find(j, id);
	if (!jb)
		return not_found(err, id);
	if (wait_ns) {
		struct timespec ts;
		deadline_ts(&ts, wait_ns);
		pthread_mutex_lock(&jb->mu);
		while (jb->state == MESHD_JOB_RUNNING && !wait_progress(jb, &ts))
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
	pthread_mutex_lock(&j->mu);
	size_t cnt = 0;
	for (struct job *jb = j->list; jb; jb = jb->next)
		cnt++;
	struct job **v = calloc(cnt ? cnt : 1, sizeof *v);
	size_t k = 0;
	for (struct job *jb = j->list; v && jb; jb = jb->next) {
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
		int running = v[i]->state == MESHD_JOB_RUNNING;
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

int meshd_jobs_cancel(struct meshd_jobs *j, uint64_t id, char **err)
{
	if (err)
		*err = NULL;
	struct job *jb = mesh__jobs_find(j, id);
	if (!jb)
		return not_found(err, id);
	pthread_mutex_lock(&jb->mu);
	if (jb->state != MESHD_JOB_RUNNING) {
		enum meshd_job_state st = jb->state;
		pthread_mutex_unlock(&jb->mu);
		mesh__job_put(jb);
		return mesh_errf(err, MESH_E_STATE, "job %" PRIu64 " is not running (it is %s)", id,
				 meshd_job_state_name(st));
	}
	/* Durable first: a restart must not resume it.  Its driver writes it
	 * again with the counts at its end. */
	int rc = mesh__job_write_end(jb, "cancelled", NULL);
	if (rc == 0) {
		jb->cancelled = 1;
		uint64_t one = 1;
		if (jb->cancel_efd >= 0 && write(jb->cancel_efd, &one, sizeof one) < 0) {
			/* the counter is never full */
		}
		if (!jb->th_on) {
			/* No driver (meshd is stopping): it ends here. */
			jb->state = MESHD_JOB_CANCELLED;
			jb->sum.ended = (int64_t)time(NULL);
			jb->have_sum = 1;
			mesh__job_remove_leases(jb);
		}
	}
	pthread_mutex_unlock(&jb->mu);
	if (rc < 0)
		rc = mesh_errf(err, rc, "cannot record the cancel in %s: %s", jb->dir, mesh_strerror(rc));
	else
		mesh_info("job=%" PRIu64 " cancelled", id);
	mesh__job_put(jb);
	return rc;
}

/* ---- results ---- */

/* 1 when cid will never be DONE as far as we know (buried, or the job is
 * over); jb->mu held. */
static int settled(struct job *jb, uint64_t cid)
{
	return jb->state != MESHD_JOB_RUNNING || (jb->buried && (jb->buried[cid / 8] & (1u << (cid % 8))));
}

static int results_of(struct job *jb, uint64_t from, uint64_t wait_ns, size_t max_bytes, int framed,
		      struct mesh_buf *out, uint64_t *missing, size_t missing_cap, size_t *nmissing, uint64_t *next,
		      int *end, char **err);

int meshd_jobs_results(struct meshd_jobs *j, uint64_t id, uint64_t from, uint64_t wait_ns, size_t max_bytes,
		       int framed, struct mesh_buf *out, uint64_t *missing, size_t missing_cap, size_t *nmissing,
		       uint64_t *next, int *end, char **err)
{
	if (err)
		*err = NULL;
	*next = from;
	*end = 0;
	*nmissing = 0;
	struct job *jb = mesh__jobs_find(j, id);
	if (!jb)
		return not_found(err, id);
	int rc = from > jb->n ? mesh_errf(err, MESH_E_RANGE, "job %" PRIu64 " has %" PRIu64 " chunks", id, jb->n)
			      : mesh__job_files_get(jb, 1, err);
	if (rc < 0) {
		mesh__job_put(jb);
		return rc;
	}
	rc = results_of(jb, from, wait_ns, max_bytes, framed, out, missing, missing_cap, nmissing, next, end, err);
	mesh__job_files_put(jb);
	mesh__job_put(jb);
	return rc;
}

/* meshd_jobs_results of jb, its files held. */
static int results_of(struct job *jb, uint64_t from, uint64_t wait_ns, size_t max_bytes, int framed,
		      struct mesh_buf *out, uint64_t *missing, size_t missing_cap, size_t *nmissing, uint64_t *next,
		      int *end, char **err)
{
	uint64_t id = jb->id;
	struct timespec ts;
	deadline_ts(&ts, wait_ns);
	uint64_t k = from;
	int rc = 0;
	pthread_mutex_lock(&jb->mu);
	for (;;) {
		struct mesh_job *jh = jb->jh;
		struct mesh_results *res = jb->res;
		while (jh && res && k < jb->n && out->len < max_bytes) {
			int done = mesh_job_is_done(jh, k);
			if (done != 1) {
				if (!settled(jb, k))
					break;
				k++;
				continue;
			}
			/* Off the lock: a read may take a while. */
			pthread_mutex_unlock(&jb->mu);
			void *p = NULL;
			size_t n = 0;
			rc = mesh_results_get(res, k, MESH_RESULT_OK, &p, &n);
			if (rc == -ENOENT && *nmissing == missing_cap) {
				/* The page ends before it: the next names it. */
				pthread_mutex_lock(&jb->mu);
				rc = 0;
				break;
			}
			if (rc == -ENOENT) {
				/* DONE without a result (a node outside meshd completed
				 * it, or the file lost it): named, and the others go on. */
				missing[(*nmissing)++] = k;
				rc = 0;
			} else if (rc == 0 && framed) {
				uint8_t h[12];
				for (int i = 0; i < 8; i++)
					h[i] = (uint8_t)(k >> (8 * i));
				for (int i = 0; i < 4; i++)
					h[8 + i] = (uint8_t)((uint64_t)n >> (8 * i));
				if (mesh_buf_add(out, h, sizeof h) < 0)
					rc = -ENOMEM;
			}
			if (rc == 0 && n && mesh_buf_add(out, p, n) < 0)
				rc = -ENOMEM;
			free(p);
			pthread_mutex_lock(&jb->mu);
			if (rc < 0)
				break;
			k++;
		}
		if (rc < 0 || k > from || k >= jb->n || !wait_ns || wait_progress(jb, &ts))
			break;
	}
	pthread_mutex_unlock(&jb->mu);
	if (rc < 0)
		return mesh_errf(err, rc, "cannot read the result of chunk %" PRIu64 " of job %" PRIu64 " in %s: %s", k, id,
				 jb->results_path, mesh_strerror(rc));
	*next = k;
	*end = k >= jb->n;
	return 0;
}
