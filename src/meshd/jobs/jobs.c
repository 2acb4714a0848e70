/* meshd's jobs (jobs.h): the state directory, one driver thread per
 * running job, status and results for the API. */
#include "meshd/jobs/jobs.h"
#include "meshd/jobs/jobs_int.h"

#include "base/buf.h"
#include "base/thread.h"
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/io.h"
#include "base/log.h"
#include "meshd/jobs/job_exec.h"
#include "meshd/core/ops.h"
#include "exec/input.h"
#include "exec/runner.h"
#include "job/job.h"
#include "job/record.h"
#include "job/results.h"
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *meshd_job_state_name(enum meshd_job_state s)
{
	switch (s) {
	case MESHD_JOB_RUNNING: return "running";
	case MESHD_JOB_COMPLETE: return "complete";
	case MESHD_JOB_FAILED: return "failed";
	case MESHD_JOB_CANCELLED: return "cancelled";
	case MESHD_JOB_ERROR: return "error";
	}
	return "?";
}

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

/* mkdir -p with mode 0700 for what it creates. */
static int mkdirs(const char *path)
{
	char tmp[PATH_MAX];
	if (strlen(path) >= sizeof tmp)
		return -ENAMETOOLONG;
	strcpy(tmp, path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(tmp, 0700) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* The results file opened on its helper thread (job_open_files): joins
 * it once.  0 once jb->res is open, or the open's error (logged once). */
static int res_wait(struct job *jb)
{
	pthread_mutex_lock(&jb->res_mu);
	if (jb->res_th_on) {
		mesh_thread_join(jb->res_th, NULL);
		jb->res_th_on = 0;
		if (jb->res_rc < 0)
			mesh_error("job=%" PRIu64 " cannot open the results %s: %s", jb->id, jb->results_path,
				   mesh_strerror(jb->res_rc));
	}
	int rc = jb->res_rc;
	pthread_mutex_unlock(&jb->res_mu);
	return rc;
}

/* Closes jb's files (none may use them: files_users is 0, or jb is
 * being freed). */
static void files_close(struct mesh_job *jh, struct mesh_job *sjh, struct mesh_results *res)
{
	if (sjh)
		mesh_job_close(sjh);
	if (jh)
		mesh_job_close(jh);
	mesh_results_close(res);
}

static int job_open_files(struct job *jb, int writable, int defer_results, char **err);

void mesh__job_free(struct job *jb)
{
	if (!jb)
		return;
	if (jb->th_on)
		mesh_thread_join(jb->th, NULL); /* a driver that ended, not joined yet */
	res_wait(jb);
	pthread_mutex_destroy(&jb->res_mu);
	files_close(jb->jh, jb->spec_jh, jb->res);
	if (jb->cancel_efd >= 0)
		close(jb->cancel_efd);
	meshd_job_ahead_drop(jb->ahead);
	free(jb->dir);
	free(jb->journal);
	free(jb->results_path);
	free(jb->input_path);
	free(jb->lockdir);
	free(jb->lease_name);
	free(jb->program);
	free(jb->name);
	free(jb->error);
	free(jb->io_error);
	free(jb->buried);
	pthread_mutex_destroy(&jb->mu);
	pthread_cond_destroy(&jb->cv);
	free(jb);
}

int mesh__job_new(struct meshd_jobs *j, uint64_t id, struct job **out)
{
	struct job *jb = calloc(1, sizeof *jb);
	*out = NULL;
	if (!jb)
		return -ENOMEM;
	jb->owner = j;
	jb->id = id;
	jb->refs = 1;
	jb->cancel_efd = -1; /* made when a driver starts: a job that ended holds no fd */
	pthread_mutex_init(&jb->mu, NULL);
	pthread_mutex_init(&jb->res_mu, NULL);
	/* Readers wait with CLOCK_MONOTONIC deadlines. */
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&jb->cv, &ca);
	pthread_condattr_destroy(&ca);
	jb->dir = mesh_strf("%s/%" PRIu64, j->jobs_dir, id);
	jb->journal = mesh_strf("%s/journal.log", jb->dir ? jb->dir : "");
	jb->results_path = mesh_strf("%s/results.bin", jb->dir ? jb->dir : "");
	jb->input_path = mesh_strf("%s/input", jb->dir ? jb->dir : "");
	jb->lockdir = mesh_strf("%s/leases", jb->dir ? jb->dir : "");
	jb->lease_name = mesh_strf("j%" PRIu64, id);
	jb->ident_len = (size_t)snprintf(jb->ident, sizeof jb->ident,
					 "meshd job %" PRIu64 ": meshd runs its chunks and keeps their results (`mesh results %" PRIu64 "`)",
					 id, id);
	if (!jb->dir || !jb->journal || !jb->results_path || !jb->input_path || !jb->lockdir || !jb->lease_name) {
		mesh__job_free(jb);
		return -ENOMEM;
	}
	*out = jb;
	return 0;
}

struct job *mesh__jobs_find(struct meshd_jobs *j, uint64_t id)
{
	pthread_mutex_lock(&j->mu);
	struct job *jb = j->list;
	while (jb && jb->id != id)
		jb = jb->next;
	if (jb)
		jb->refs++;
	pthread_mutex_unlock(&j->mu);
	return jb;
}

void mesh__job_put(struct job *jb)
{
	struct meshd_jobs *j = jb->owner;
	pthread_mutex_lock(&j->mu);
	int last = --jb->refs == 0;
	pthread_mutex_unlock(&j->mu);
	if (last)
		mesh__job_free(jb); /* unlinked: nobody can find it */
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
	if (!jb->jh && !jb->driver_files && open && jb->state != MESHD_JOB_RUNNING) {
		jb->files_opening = 1;
		pthread_mutex_unlock(&jb->mu);
		rc = job_open_files(jb, 0, 0, err);
		pthread_mutex_lock(&jb->mu);
		jb->files_opening = 0;
		pthread_cond_broadcast(&jb->cv);
		opened = rc == 0;
	}
	if (rc == 0)
		jb->files_users++;
	pthread_mutex_unlock(&jb->mu);
	if (opened)
		mesh__jobs_kick(jb->owner); /* it keeps FILES_CACHED jobs' files at most */
	return rc;
}

void mesh__job_files_put(struct job *jb)
{
	pthread_mutex_lock(&jb->mu);
	if (--jb->files_users == 0)
		jb->files_idle_ns = mesh_mono_ns();
	pthread_mutex_unlock(&jb->mu);
}

/* ---- the spec file ---- */

char *mesh__job_spec_text(const struct job *jb)
{
	return mesh_strf("program %s\nchunks %" PRIu64 "\ninput %d\nmax_workers %u\nretries %u\ntimeout_ns %" PRIu64
			 "\nspeculate %d\nlockdir %s\nlease_name %s\nname %s\n",
			 jb->program, jb->n, jb->has_input, jb->max_workers, (unsigned)jb->retries, jb->timeout_ns,
			 jb->speculate, jb->lockdir, jb->lease_name, jb->name ? jb->name : "");
}

static int spec_parse(struct job *jb, char *text)
{
	int have = 0;
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		char *sp = strchr(line, ' ');
		if (!sp)
			continue;
		*sp = 0;
		const char *k = line, *v = sp + 1;
		unsigned long long u = strtoull(v, NULL, 10);
		if (!strcmp(k, "program"))
			free(jb->program), have |= (jb->program = strdup(v)) != NULL; /* the last one wins */
		else if (!strcmp(k, "chunks"))
			jb->n = u, have |= 2;
		else if (!strcmp(k, "input"))
			jb->has_input = u != 0;
		else if (!strcmp(k, "max_workers"))
			jb->max_workers = (unsigned)u;
		else if (!strcmp(k, "retries"))
			jb->retries = (uint32_t)u;
		else if (!strcmp(k, "timeout_ns"))
			jb->timeout_ns = u;
		else if (!strcmp(k, "speculate"))
			jb->speculate = u != 0;
		else if (!strcmp(k, "name") && *v)
			free(jb->name), jb->name = strdup(v);
	}
	if (have != 3 || !jb->n || jb->n > MESH_JOB_MAX_CHUNKS || !jb->max_workers || !jb->retries)
		return MESH_E_PARSE;
	return 0;
}

/* The fuzz seam (tests/fuzz/fuzz_job_spec.c). */
int mesh__job_spec_parse(struct job *jb, char *text)
{
	return spec_parse(jb, text);
}

/* ---- a spec that vouches for the files written with it ----
 *
 * A submit writes its files and its spec unsynced and makes them durable in
 * one round of syncs (jobs_query.c, store_job).  Until that round ends any
 * of them may be torn or missing after a crash, so the spec says what it
 * stands for: its first line is SPEC_FORMAT, then the job, then for each
 * file written with it a line "vouch NAME BYTES CRC" (the file's first
 * BYTES bytes, which never change, and their CRC-32C), and last "check CRC"
 * over every byte before that line.  At a restart a spec whose check or
 * vouches fail is a submit that was never answered: its directory is
 * ignored, as one without a spec (load_job).  A spec without SPEC_FORMAT is
 * of the format before, written whole by a rename after its files were
 * durable: taken as it is. */
#define SPEC_FORMAT "format 2\n"

static const char *vouch_path(const struct job *jb, const char *name)
{
	return !strcmp(name, "journal")	  ? jb->journal
	       : !strcmp(name, "results") ? jb->results_path
	       : !strcmp(name, "input")	  ? jb->input_path
					  : NULL;
}

/* The CRC-32C of the first n bytes of path; MESH_E_CORRUPT when it is
 * shorter. */
static int crc_of_prefix(const char *path, uint64_t n, uint32_t *crc)
{
	unsigned char buf[65536];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW), rc = 0;
	if (fd < 0)
		return -errno;
	*crc = 0;
	for (uint64_t at = 0; at < n && rc == 0;) {
		size_t want = n - at < sizeof buf ? (size_t)(n - at) : sizeof buf;
		ssize_t got = pread(fd, buf, want, (off_t)at);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			rc = -errno;
		else if (got == 0)
			rc = MESH_E_CORRUPT;
		else
			*crc = mesh_crc32c(*crc, buf, (size_t)got), at += (uint64_t)got;
	}
	close(fd);
	return rc;
}

char *mesh__job_spec_seal(const struct job *jb, const void *input, size_t input_len)
{
	struct mesh_buf b = MESH_BUF_INIT;
	char *body = mesh__job_spec_text(jb), *file = NULL;
	int ok = body && mesh_buf_adds(&b, SPEC_FORMAT) == 0 && mesh_buf_adds(&b, body) == 0;
	static const char *const small[] = {"journal", "results"};
	/* The journal and the results file as they were written: a few dozen
	 * bytes each, in the page cache. */
	for (size_t i = 0; ok && i < sizeof small / sizeof small[0]; i++) {
		size_t len = 0;
		ok = mesh_read_file(vouch_path(jb, small[i]), 1 << 16, &file, &len) == 0 &&
		     mesh_buf_addf(&b, "vouch %s %zu %08x\n", small[i], len, mesh_crc32c(0, file, len)) == 0;
		free(file);
		file = NULL;
	}
	if (ok && jb->has_input)
		ok = mesh_buf_addf(&b, "vouch input %zu %08x\n", input_len, mesh_crc32c(0, input, input_len)) == 0;
	if (ok)
		ok = mesh_buf_addf(&b, "check %08x\n", mesh_crc32c(0, b.p, b.len)) == 0;
	free(body);
	if (!ok) {
		mesh_buf_release(&b);
		return NULL;
	}
	return mesh_buf_detach(&b, NULL);
}

int mesh__job_spec_check(const char *text, size_t len)
{
	size_t f = sizeof SPEC_FORMAT - 1;
	if (len < f || memcmp(text, SPEC_FORMAT, f) != 0)
		return 0; /* the format before: no check */
	/* The last line, whole: "check " and eight hex digits. */
	size_t c = sizeof "check 12345678\n" - 1;
	if (len < f + c || text[len - 1] != '\n' || text[len - c - 1] != '\n' || memcmp(text + len - c, "check ", 6))
		return MESH_E_CORRUPT;
	uint32_t want = 0;
	for (size_t i = len - c + 6; i < len - 1; i++) {
		int d = text[i] >= '0' && text[i] <= '9' ? text[i] - '0' : text[i] >= 'a' && text[i] <= 'f' ? text[i] - 'a' + 10 : -1;
		if (d < 0)
			return MESH_E_CORRUPT;
		want = want << 4 | (uint32_t)d;
	}
	return mesh_crc32c(0, text, len - c) == want ? 0 : MESH_E_CORRUPT;
}

/* A checked spec's vouches against its files: 0, or MESH_E_CORRUPT (or
 * -errno) with *what naming the file. */
static int spec_vouches_hold(const struct job *jb, const char *text, const char **what)
{
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		char name[16];
		unsigned long long n;
		unsigned crc;
		if (strncmp(l, "vouch ", 6) || sscanf(l + 6, "%15s %llu %8x", name, &n, &crc) != 3)
			continue;
		const char *path = vouch_path(jb, name);
		uint32_t got = 0;
		int rc = path ? crc_of_prefix(path, n, &got) : MESH_E_CORRUPT;
		*what = path ? path : "an unknown file";
		if (rc == 0 && got != crc)
			rc = MESH_E_CORRUPT;
		if (rc)
			return rc;
	}
	return 0;
}

enum meshd_job_state mesh__job_end_state(const char *text)
{
	return !strncmp(text, "complete", 8)    ? MESHD_JOB_COMPLETE
	       : !strncmp(text, "cancelled", 9) ? MESHD_JOB_CANCELLED
						: MESHD_JOB_FAILED;
}

/* ---- the driver's hooks ---- */

/* A write of the results file failed (rc): kept, with the file and the
 * system's reason, for the job's error (the runner says only that an
 * output could not be written).  rc is returned. */
static int io_failed(struct job *jb, int rc, const char *what, uint64_t cid)
{
	char num[32] = "";
	if (cid != UINT64_MAX)
		snprintf(num, sizeof num, " of chunk %" PRIu64, cid);
	char *why = mesh_strf("cannot %s%s in %s: %s", what, num, jb->results_path, mesh_strerror(rc));
	pthread_mutex_lock(&jb->mu);
	if (!jb->io_error)
		jb->io_error = why, why = NULL;
	pthread_mutex_unlock(&jb->mu);
	free(why);
	return rc;
}

static int hook_result(void *arg, uint64_t cid, uint32_t attempt, const void *p, size_t n)
{
	struct job *jb = arg;
	(void)attempt;
	int rc = res_wait(jb);
	if (rc == 0 && (rc = mesh_results_append(jb->res, cid, MESH_RESULT_OK, p, n)) < 0)
		io_failed(jb, rc, "write the result", cid);
	return rc;
}

static int hook_commit(void *arg)
{
	struct job *jb = arg;
	int rc = res_wait(jb);
	if (rc == 0 && (rc = mesh_results_sync(jb->res)) < 0)
		io_failed(jb, rc, "write and sync the results", UINT64_MAX);
	return rc;
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
	mesh_info("job=%" PRIu64 " first result durable after %.3f ms (since the %s): journal durable %.3f, stored %.3f, "
		  "driver %.3f, worker asked %.3f, first lease %.3f, worker joined %.3f, chunk sent %.3f, worker online %.3f, "
		  "reply %.3f, results file %.3f, DONE durable %.3f",
		  jb->id, ms_since(end, t0), jb->t_submit ? "submit" : "driver's start",
		  ms_since(atomic_load(&jb->t_journal), t0), ms_since(stored, t0),
		  ms_since(jb->t_driver, t0), ms_since(atomic_load(&jb->xs.first_ask_ns), t0),
		  ms_since(atomic_load(&jb->xs.first_start_ns), t0), ms_since(atomic_load(&jb->xs.first_worker_ns), t0),
		  ms_since(atomic_load(&jb->xs.first_sent_ns), t0), ms_since(atomic_load(&jb->xs.first_online_ns), t0),
		  ms_since(atomic_load(&jb->xs.first_reply_ns), t0), ms_since(atomic_load(&jb->t_results), t0),
		  ms_since(done, t0));
}

/* The first DONE is durable: its time (docs/jobs.md, "The first result"). */
static void note_first_done(struct job *jb)
{
	struct mesh_job_status js;
	uint64_t now = mesh_mono_ns(); /* durable from here (the batch returned), whatever the status costs */
	if (atomic_load(&jb->t_first_done) || mesh_job_status(jb->jh, &js) < 0 || js.done <= jb->done0)
		return;
	atomic_store(&jb->t_first_done, now);
	mesh__job_note_first(jb);
}

static void hook_committed(void *arg)
{
	struct job *jb = arg;
	note_first_done(jb);
	pthread_mutex_lock(&jb->mu);
	pthread_cond_broadcast(&jb->cv);
	pthread_mutex_unlock(&jb->mu);
}

void mesh__job_failure_text(struct mesh_buf *b, uint32_t attempt, int code, const void *err, size_t n)
{
	if (code > 128 && code < 128 + 65)
		mesh_buf_addf(b, "attempt %u: signal %d (status %d)\n", (unsigned)attempt, code - 128, code);
	else
		mesh_buf_addf(b, "attempt %u: exit %d\n", (unsigned)attempt, code);
	mesh_buf_add(b, err, n);
}

void mesh__job_warn_lease_lost(const char *what, uint64_t id, uint64_t cid, uint64_t since_ns, uint64_t ttl_ns)
{
	mesh_warn("%sjob=%" PRIu64 " chunk=%" PRIu64 " lease taken over while it ran (last renewed %" PRIu64
		  " ms ago, lease %" PRIu64 " ms): it may run twice",
		  what, id, cid, (uint64_t)(since_ns / MESH_NS_PER_MS), (uint64_t)(ttl_ns / MESH_NS_PER_MS));
}

static void hook_lease_lost(void *arg, uint64_t cid, uint64_t since_ns, uint64_t ttl_ns)
{
	struct job *jb = arg;
	mesh__job_warn_lease_lost("", jb->id, cid, since_ns, ttl_ns);
}

static void hook_failed(void *arg, uint64_t cid, uint32_t attempt, int code, const void *err, size_t n, int buried)
{
	struct job *jb = arg;
	struct mesh_buf b = MESH_BUF_INIT;
	mesh__job_failure_text(&b, attempt, code, err, n);
	/* The report is for people: losing it loses no chunk. */
	if (b.p && res_wait(jb) == 0 && mesh_results_append(jb->res, cid, MESH_RESULT_FAILURE, b.p, b.len) < 0)
		mesh_warn("job=%" PRIu64 " cannot keep the failure report of chunk %" PRIu64, jb->id, cid);
	mesh_buf_release(&b);
	if (buried) {
		pthread_mutex_lock(&jb->mu);
		jb->buried[cid / 8] |= (unsigned char)(1u << (cid % 8));
		pthread_cond_broadcast(&jb->cv);
		pthread_mutex_unlock(&jb->mu);
		mesh_info("job=%" PRIu64 " chunk=%" PRIu64 " buried status=%d", jb->id, cid, code);
	}
}

static void note_buried(const struct mesh_job_failure *f, void *arg)
{
	struct job *jb = arg;
	if (f->buried && f->cid < jb->n && jb->buried)
		jb->buried[f->cid / 8] |= (unsigned char)(1u << (f->cid % 8));
}

struct rebuild {
	struct mesh_results *res;
	uint64_t restored;
};

/* A result a DONE carries: into the results file unless the chunk has
 * one there (a chunk's first result record is its result: the file's
 * rule, docs/jobs.md). */
static int rebuild_one(void *arg, uint64_t cid, const void *p, size_t n)
{
	struct rebuild *b = arg;
	if (mesh_results_has(b->res, cid))
		return 0;
	b->restored++;
	return mesh_results_append(b->res, cid, MESH_RESULT_OK, p, n);
}

/* Opens what a job needs to be read (and, writable, run).  A small
 * result is durable in its DONE record, not in the results file, which
 * is not synced for it (docs/journal.md, "Results in DONE records"): any
 * the file lost in a crash is put back from the journal here. */
static int results_open(struct job *jb, char **err)
{
	uint64_t cut = 0;
	struct mesh_results *res = NULL;
	int rc = mesh_results_open(&res, jb->results_path, jb->n, &cut);
	if (rc < 0)
		return mesh_errf(err, rc, "cannot open the results %s: %s", jb->results_path, mesh_strerror(rc));
	if (cut)
		mesh_warn("job=%" PRIu64 " results: a torn tail of %" PRIu64 " bytes was cut", jb->id, cut);
	struct rebuild b = {res, 0};
	rc = mesh_rec_each_result(jb->journal, jb->n, rebuild_one, &b);
	if (rc == 0 && b.restored)
		rc = mesh_results_sync(res);
	if (rc < 0) {
		mesh_results_close(res);
		return mesh_errf(err, rc, "cannot put the journal's results back in %s: %s", jb->results_path,
				 mesh_strerror(rc));
	}
	if (b.restored)
		mesh_warn("job=%" PRIu64 " results: %" PRIu64 " put back from the journal (the results file had lost them)",
			  jb->id, b.restored);
	atomic_store(&jb->t_results, mesh_mono_ns());
	pthread_mutex_lock(&jb->mu);
	jb->res = res;
	pthread_mutex_unlock(&jb->mu);
	return 0;
}

static void *results_open_main(void *arg)
{
	struct job *jb = arg;
	jb->res_rc = results_open(jb, NULL); /* read after the join */
	return NULL;
}

/* The error of opening jb's journal, naming the file that failed: the
 * journal, or the lease directory. */
static int open_error(const struct job *jb, int rc, const struct mesh_job_why *why, char **err)
{
	if (why->at == MESH_JOB_AT_LOCKDIR)
		return mesh_errf(err, rc, "cannot use the lease directory %s: %s", jb->lockdir, mesh_strerror(rc));
	return mesh_errf(err, rc, "cannot open the journal %s: %s", jb->journal, mesh_strerror(rc));
}

/* Opens the job's journal (and its speculative handle) and its results
 * file; with defer_results the results file on a helper thread (res_wait
 * joins it), so that a driver's first lease does not wait for its
 * creation.  Its leases are in its own directory (jobs.h), which no other
 * user can reach. */
static int job_open_files(struct job *jb, int writable, int defer_results, char **err)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job_why why;
	struct mesh_job *jh = NULL, *sjh = NULL;
	char node[96];
	int rc;
	o.journal = jb->journal;
	o.lockdir = jb->lockdir;
	o.lockdir_private = 1;
	o.name = jb->lease_name;
	o.nchunks = jb->n;
	o.max_attempts = jb->retries;
	o.read_only = !writable;
	o.identity = jb->ident; /* the journal's owner (or a journal made before owners) */
	o.identity_len = jb->ident_len;
	o.why = &why;
	if ((rc = mesh_job_open(&jh, &o)) < 0)
		return open_error(jb, rc, &why, err);
	if (writable && jb->speculate) {
		/* Copies of this node's own stragglers come through a second
		 * node name (the engine never gives a node a copy of its own). */
		snprintf(node, sizeof node, "%.60s-spec", mesh_job_node(jh));
		o.node = node;
		if ((rc = mesh_job_open(&sjh, &o)) < 0) {
			mesh_job_close(jh);
			return open_error(jb, rc, &why, err);
		}
	}
	pthread_mutex_lock(&jb->res_mu);
	if (defer_results && mesh_thread_run(&jb->res_th, results_open_main, jb, 0) == 0)
		jb->res_th_on = 1;
	else
		jb->res_rc = rc = results_open(jb, err);
	pthread_mutex_unlock(&jb->res_mu);
	if (rc < 0) {
		if (sjh)
			mesh_job_close(sjh);
		mesh_job_close(jh);
		return rc;
	}
	pthread_mutex_lock(&jb->mu);
	mesh_job_failures(jh, note_buried, jb);
	jb->jh = jh;
	jb->spec_jh = sjh;
	pthread_mutex_unlock(&jb->mu);
	return 0;
}

/* The driver ended (st; error owned, or NULL): its counts in sum (may be
 * NULL); its files are no longer its own (the janitor closes them once
 * idle) and its per-chunk memory goes. */
static void driver_end(struct job *jb, enum meshd_job_state st, char *error, const struct job_sum *sum)
{
	res_wait(jb);
	pthread_mutex_lock(&jb->mu);
	jb->state = st;
	free(jb->error);
	jb->error = error;
	if (sum) {
		jb->sum = *sum;
		jb->have_sum = 1;
	}
	free(jb->buried);
	jb->buried = NULL;
	jb->driver_files = 0;
	jb->files_idle_ns = mesh_mono_ns();
	pthread_cond_broadcast(&jb->cv);
	pthread_mutex_unlock(&jb->mu);
}

/* The driver's counts now, for its end. */
static void make_sum(struct job *jb, struct job_sum *sum)
{
	uint64_t t_end = atomic_load(&jb->t_end);
	memset(sum, 0, sizeof *sum);
	if (jb->jh)
		mesh_job_status(jb->jh, &sum->st);
	if (jb->t0 && t_end > jb->t0)
		sum->elapsed_s = (double)(t_end - jb->t0) / 1e9;
	if (sum->elapsed_s > 0 && sum->st.done > jb->done0)
		sum->rate = (double)(sum->st.done - jb->done0) / sum->elapsed_s;
	sum->ended = (int64_t)time(NULL);
}

int mesh__job_write_end(struct job *jb, const char *what, const struct job_sum *sum)
{
	char *path = mesh_strf("%s/end", jb->dir), *text;
	if (!path)
		return -ENOMEM;
	if (sum)
		text = mesh_strf("%s\ndone %" PRIu64 "\nleased %" PRIu64 "\npending %" PRIu64 "\nburied %" PRIu64
				 "\nduplicates %" PRIu64 "\nfailed_attempts %" PRIu64 "\nspeculative_wins %" PRIu64
				 "\nelapsed_s %.6f\nrate %.3f\nended %lld\n",
				 what, sum->st.done, sum->st.leased, sum->st.pending, sum->st.buried, sum->st.duplicates,
				 sum->st.failed_attempts, sum->st.speculative_wins, sum->elapsed_s, sum->rate,
				 (long long)sum->ended);
	else
		text = mesh_strf("%s\n", what);
	int rc = text ? mesh_write_file_atomic(path, text, strlen(text), 0600) : -ENOMEM;
	free(text);
	free(path);
	return rc;
}

/* An end file's counts (the lines after its first) into sum: 1 when it
 * has them (an older meshd wrote only the first line), else 0. */
static int end_parse(const char *text, struct job_sum *sum)
{
	static const struct {
		const char *key;
		size_t off;
	} u64s[] = {
		{"done", offsetof(struct job_sum, st.done)},
		{"leased", offsetof(struct job_sum, st.leased)},
		{"pending", offsetof(struct job_sum, st.pending)},
		{"buried", offsetof(struct job_sum, st.buried)},
		{"duplicates", offsetof(struct job_sum, st.duplicates)},
		{"failed_attempts", offsetof(struct job_sum, st.failed_attempts)},
		{"speculative_wins", offsetof(struct job_sum, st.speculative_wins)},
	};
	int have = 0;
	memset(sum, 0, sizeof *sum);
	for (const char *l = strchr(text, '\n'); l && l[1]; l = strchr(l + 1, '\n')) {
		const char *k = l + 1, *sp = strchr(k, ' ');
		size_t kn = sp ? (size_t)(sp - k) : 0;
		if (!sp)
			continue;
		for (size_t i = 0; i < sizeof u64s / sizeof u64s[0]; i++)
			if (strlen(u64s[i].key) == kn && !memcmp(k, u64s[i].key, kn))
				*(uint64_t *)((char *)sum + u64s[i].off) = strtoull(sp + 1, NULL, 10), have |= i == 0;
		if (kn == 9 && !memcmp(k, "elapsed_s", 9))
			sum->elapsed_s = strtod(sp + 1, NULL);
		else if (kn == 4 && !memcmp(k, "rate", 4))
			sum->rate = strtod(sp + 1, NULL);
		else if (kn == 5 && !memcmp(k, "ended", 5))
			sum->ended = strtoll(sp + 1, NULL, 10);
	}
	return have;
}

/* A job that ended (its end file written) leases nothing again: its lease
 * directory goes, with any lease file left in it. */
void mesh__job_remove_leases(struct job *jb)
{
	int rc = mesh_store_file_remove_dir(jb->lockdir, MESH_STORE_FILE_PRIVATE);
	if (rc < 0)
		mesh_warn("job=%" PRIu64 " cannot remove the lease directory %s: %s", jb->id, jb->lockdir,
			  mesh_strerror(rc));
}

/* The lease directory an older meshd gave job id (/tmp/meshd-<uid>-<hash
 * of the state dir>-j<id>): removed when it is ours (private to this user)
 * and holds only lease files; one another user made is left alone.
 * Losing its leases only returns the chunks they held to PENDING. */
static void remove_old_leases(struct meshd_jobs *j, uint64_t id)
{
	char old[96];
	snprintf(old, sizeof old, "/tmp/meshd-%u-%08x-j%" PRIu64, (unsigned)getuid(), j->hash, id);
	int rc = mesh_store_file_remove_dir(old, 0);
	if (rc < 0 && rc != MESH_E_NOTPRIVATE && rc != MESH_E_PATH)
		mesh_warn("job=%" PRIu64 " cannot remove the old lease directory %s: %s", id, old, mesh_strerror(rc));
}

static void *driver_main(void *arg)
{
	struct job *jb = arg;
	struct meshd_jobs *j = jb->owner;
	char *err = NULL;
	struct mesh_exec_input in = MESH_EXEC_INPUT_INIT;
	int rc = 0;
	if (!jb->jh)
		rc = job_open_files(jb, 1, 1, &err);
	if (rc == 0 && jb->has_input) {
		rc = mesh_exec_input_load(jb->input_path, &in, NULL);
		if (rc == 0 && in.n != jb->n)
			rc = MESH_E_MISMATCH;
		if (rc < 0)
			err = mesh_strf("cannot load the input %s: %s", jb->input_path, mesh_strerror(rc));
	}
	if (rc < 0) {
		mesh_error("job=%" PRIu64 " cannot run: %s", jb->id, err ? err : mesh_strerror(rc));
		mesh_exec_input_release(&in);
		meshd_job_ahead_drop(jb->ahead);
		jb->ahead = NULL;
		driver_end(jb, MESHD_JOB_ERROR, err ? err : strdup(mesh_strerror(rc)), NULL);
		atomic_store(&jb->driver_done, 1);
		mesh__jobs_kick(j);
		return NULL;
	}
	struct mesh_job_status js;
	jb->done0 = mesh_job_status(jb->jh, &js) == 0 ? js.done : 0;
	jb->t0 = mesh_mono_ns();
	struct mesh_exec_hooks hooks = {
		.result = hook_result,
		.commit = hook_commit,
		.committed = hook_committed,
		.failed = hook_failed,
		.lease_lost = hook_lease_lost,
		.cancel_fd = jb->cancel_efd,
		.results_in_done = 1, /* results_open rebuilds from the journal */
		.arg = jb,
	};
	char *argv[] = {jb->program, NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	o.argv = argv;
	o.slots = jb->max_workers * j->depth;
	o.input = jb->has_input ? &in : NULL;
	o.speculate = jb->speculate;
	o.spec_job = jb->spec_jh;
	o.out_fd = o.err_fd = o.note_fd = o.progress_fd = -1;
	o.handle_signals = 0;
	o.hooks = &hooks;
	struct meshd_job_exec_arg xa = {
		.cfg = {j->core, jb->program, jb->max_workers, j->depth, jb->timeout_ns},
		.stats = &jb->xs,
		.ahead = jb->ahead,
	};
	jb->ahead = NULL;
	struct mesh_exec_stats st;
	mesh_info("job=%" PRIu64 " running program=%s chunks=%" PRIu64 " done=%" PRIu64, jb->id, jb->program, jb->n,
		  jb->done0);
	mesh_thread_fg(); /* its files are open: the chunks' path from here */
	rc = mesh__exec_drive(jb->jh, &o, meshd_job_exec_make, &xa, &st);
	meshd_job_ahead_drop(xa.ahead); /* the driver stopped before its executor took it */
	atomic_store(&jb->t_end, mesh_mono_ns());
	mesh_exec_input_release(&in);
	pthread_mutex_lock(&jb->mu);
	int cancelled = jb->cancelled;
	pthread_mutex_unlock(&jb->mu);
	struct job_sum sum;
	make_sum(jb, &sum);
	enum meshd_job_state end = rc == MESH_EXEC_COMPLETE ? MESHD_JOB_COMPLETE
				   : rc == MESH_EXEC_FAILED ? MESHD_JOB_FAILED
				   : rc == MESH_EXEC_INTERRUPTED && cancelled ? MESHD_JOB_CANCELLED
				   : rc == MESH_EXEC_INTERRUPTED ? MESHD_JOB_RUNNING
								 : MESHD_JOB_ERROR;
	if (end == MESHD_JOB_RUNNING) {
		/* meshd is stopping: unfinished on disk, resumed next time. */
		mesh_info("job=%" PRIu64 " driver ended state=running (meshd is stopping) attempts=%" PRIu64
			  " done=%" PRIu64,
			  jb->id, st.started, st.done);
		atomic_store(&jb->driver_done, 1);
		return NULL;
	}
	if (end == MESHD_JOB_ERROR) {
		/* Which file and why: the results hook's words, else an I/O
		 * error of the engine's files (its journal, its leases). */
		pthread_mutex_lock(&jb->mu);
		char *why = jb->io_error;
		jb->io_error = NULL;
		pthread_mutex_unlock(&jb->mu);
		if (!why && mesh_exit_for(rc) == MESH_EXIT_IOERR && rc != MESH_E_OUTPUT)
			why = mesh_strf("cannot write the journal %s or a lease in %s: %s", jb->journal, jb->lockdir,
					mesh_strerror(rc));
		mesh_error("job=%" PRIu64 " stopped: %s", jb->id, why ? why : mesh_strerror(rc));
		driver_end(jb, end, why ? why : strdup(mesh_strerror(rc)), &sum);
	} else {
		int wrc = mesh__job_write_end(jb, meshd_job_state_name(end), &sum);
		if (wrc < 0)
			mesh_error("job=%" PRIu64 " cannot write its end in %s: %s", jb->id, jb->dir, mesh_strerror(wrc));
		mesh__job_remove_leases(jb);
		driver_end(jb, end, NULL, &sum);
	}
	mesh_info("job=%" PRIu64 " driver ended state=%s attempts=%" PRIu64 " done=%" PRIu64 " failed=%" PRIu64
		  " buried=%" PRIu64,
		  jb->id, meshd_job_state_name(end), st.started, st.done, st.failed, st.buried);
	/* Last: from here the janitor may join this thread, and the job may go. */
	atomic_store(&jb->driver_done, 1);
	mesh__jobs_kick(j);
	return NULL;
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
	if (rc == 0 && !jb->buried && !(jb->buried = calloc(jb->n / 8 + 1, 1)))
		rc = -ENOMEM;
	jb->driver_files = rc == 0;
	pthread_mutex_unlock(&jb->mu);
	if (rc < 0)
		return rc;
	atomic_store(&jb->driver_done, 0);
	/* Background until its files are open (driver_main): woken as an
	 * ordinary thread it took the CPU from a submit about to spawn the
	 * job's first worker, whose spawn then began 1.5-3.1 ms after the
	 * submit instead of 0.4-0.7 (docs/jobs.md, "Threads from a pool"). */
	rc = mesh_thread_run(&jb->th, driver_main, jb, MESH_THREAD_BG);
	pthread_mutex_lock(&jb->mu);
	if (rc < 0)
		jb->driver_files = 0;
	else
		jb->th_on = 1;
	pthread_mutex_unlock(&jb->mu);
	return rc;
}

/* ---- open: find the jobs, resume the unfinished ---- */

/* 1 when a job's file could not be read because of what it holds (or
 * that it is missing): the job is not whole, and is ignored; any other
 * error (EMFILE, EIO, ENOMEM, EACCES) is the system's, and stops the
 * start rather than hide a job. */
static int content_error(int rc)
{
	return rc == -ENOENT || rc == MESH_E_CORRUPT || rc == MESH_E_PARSE || rc == MESH_E_TOOBIG;
}

/* An ended job that an older meshd left without counts in its end file:
 * counted once from its journal (opened and closed again), and the end
 * file written again with them. */
static void sum_from_journal(struct job *jb, const char *end)
{
	char *err = NULL;
	struct stat st;
	char *path = mesh_strf("%s/end", jb->dir);
	int rc = job_open_files(jb, 0, 0, &err);
	if (rc == 0) {
		mesh_job_status(jb->jh, &jb->sum.st);
		jb->sum.ended = path && stat(path, &st) == 0 ? (int64_t)st.st_mtime : (int64_t)time(NULL);
		jb->have_sum = 1;
		files_close(jb->jh, jb->spec_jh, jb->res);
		jb->jh = jb->spec_jh = NULL;
		jb->res = NULL;
		char word[16];
		snprintf(word, sizeof word, "%.*s", (int)strcspn(end, "\n"), end);
		if ((rc = mesh__job_write_end(jb, word, &jb->sum)) < 0)
			mesh_warn("job=%" PRIu64 " cannot write its counts in %s: %s", jb->id, path, mesh_strerror(rc));
	} else {
		jb->state = MESHD_JOB_ERROR;
		jb->error = err;
	}
	free(path);
}

/* Loads job id from its directory: an ended one from its end file (no
 * file of it stays open), an unfinished one resumed.  0 (also for a
 * directory ignored because it holds no whole submit), or an error that
 * stops the start with *err. */
static int load_job(struct meshd_jobs *j, uint64_t id, char **err)
{
	struct job *jb;
	int rc = mesh__job_new(j, id, &jb);
	if (rc < 0)
		return mesh_errf(err, rc, "cannot load job %" PRIu64 ": %s", id, mesh_strerror(rc));
	char *path = mesh_strf("%s/spec", jb->dir), *text = NULL, *end = NULL, *copy = NULL;
	const char *what = path;
	size_t len;
	rc = path ? mesh_read_file(path, 1 << 16, &text, &len) : -ENOMEM;
	if (rc == 0 && (rc = mesh__job_spec_check(text, len)) < 0)
		what = "its spec";
	if (rc == 0 && !(copy = strdup(text)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = spec_parse(jb, copy);
	free(copy);
	char *epath = rc == 0 ? mesh_strf("%s/end", jb->dir) : NULL;
	int erc = epath ? mesh_read_file(epath, 4096, &end, &len) : -ENOENT, ended = erc == 0;
	if (rc == 0 && erc < 0 && erc != -ENOENT)
		rc = erc, what = epath;
	/* An ended job's files were durable long ago (its first DONE waited for
	 * them); an unfinished one's are read by its driver anyway. */
	if (rc == 0 && !ended)
		rc = spec_vouches_hold(jb, text, &what);
	free(text);
	if (rc < 0 && !content_error(rc)) {
		rc = mesh_errf(err, rc, "cannot load job %" PRIu64 ": %s: %s", id, what ? what : jb->dir, mesh_strerror(rc));
		goto out;
	}
	if (rc < 0) {
		/* Not a whole submit: killed before its spec was written, or
		 * before the files it vouches for were durable (never answered). */
		if (what && what != path)
			mesh_warn("job=%" PRIu64 " ignored: its submit did not finish (%s is not whole) in %s", id, what,
				  jb->dir);
		else
			mesh_warn("job=%" PRIu64 " ignored: no valid spec in %s (%s)", id, jb->dir, mesh_strerror(rc));
		rc = 0;
		goto out;
	}
	remove_old_leases(j, id);
	if (ended) {
		/* A meshd killed between the end and the removal. */
		mesh__job_remove_leases(jb);
		jb->state = mesh__job_end_state(end);
		jb->have_sum = end_parse(end, &jb->sum);
		if (!jb->have_sum)
			sum_from_journal(jb, end);
	}
	jb->next = j->list;
	j->list = jb;
	jb->linked = 1;
	if (id >= j->next_id)
		j->next_id = id + 1;
	if (jb->state == MESHD_JOB_RUNNING) {
		mesh_info("job=%" PRIu64 " resuming program=%s", id, jb->program);
		if ((rc = mesh__job_start(jb)) < 0) {
			jb->state = MESHD_JOB_ERROR;
			jb->error = mesh_strf("cannot start its driver: %s", mesh_strerror(rc));
		}
	}
	jb = NULL; /* listed */
	rc = 0;
out:
	free(path);
	free(epath);
	free(end);
	mesh__job_free(jb);
	return rc;
}

/* Takes the state directory for this meshd's lifetime: flock(LOCK_EX) on
 * <state>/meshd.lock (close-on-exec: no worker inherits it), which then
 * holds our pid.  A second meshd on the same directory would resume the
 * first one's jobs and append to the same results files: it gets
 * MESH_E_BUSY, with the holder's pid in *err.  The fd, or a negative error
 * with *err malloc'd. */
static int lock_state(const char *state, char **err)
{
	char *path = mesh_strf("%s/" MESHD_STATE_LOCK, state);
	if (!path)
		return -ENOMEM;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600), rc = 0;
	if (fd < 0) {
		rc = mesh_errf(err, -errno, "cannot open the state lock '%s': %s", path, strerror(errno));
		free(path);
		return rc;
	}
	while (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EINTR)
			continue;
		if (errno != EWOULDBLOCK) {
			rc = mesh_errf(err, -errno, "cannot lock '%s': %s", path, strerror(errno));
			break;
		}
		/* The holder writes its pid right after its flock: give it a
		 * moment when the file is still empty. */
		char pid[32] = "";
		for (int i = 0; i < 50; i++) {
			ssize_t k = mesh_pread_full(fd, pid, sizeof pid - 1, 0);
			pid[k > 0 ? k : 0] = 0;
			pid[strcspn(pid, "\n")] = 0;
			if (pid[0])
				break;
			mesh_sleep_ns(2 * MESH_NS_PER_MS);
		}
		rc = mesh_errf(err, MESH_E_BUSY,
			       "the state directory '%s' is in use by another meshd (pid %s, holding %s); one meshd "
			       "a state directory: stop it, or give this one another --state",
			       state, pid[0] ? pid : "unknown", path);
		break;
	}
	char line[32];
	int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
	if (rc == 0 && (ftruncate(fd, 0) < 0 || pwrite(fd, line, (size_t)n, 0) != n))
		rc = mesh_errf(err, -errno, "cannot write our pid in '%s': %s", path, strerror(errno));
	free(path);
	if (rc < 0) {
		close(fd);
		return rc;
	}
	return fd;
}

int meshd_jobs_open(struct meshd_jobs **out, struct meshd_core *core, const char *state_dir,
		    const struct meshd_jobs_keep *keep, char **err)
{
	char real[PATH_MAX];
	int rc = mkdirs(state_dir);
	if (rc < 0)
		return mesh_errf(err, rc, "cannot create the state directory '%s': %s", state_dir, mesh_strerror(rc));
	/* The engine refuses symlinks in a journal's path: use the real one. */
	if (!realpath(state_dir, real))
		return mesh_errf(err, -errno, "cannot use the state directory '%s': %s", state_dir, strerror(errno));
	/* Before anything in it is read. */
	int lock_fd = lock_state(real, err);
	if (lock_fd < 0)
		return lock_fd;
	struct meshd_jobs *j = calloc(1, sizeof *j);
	if (!j) {
		close(lock_fd);
		return -ENOMEM;
	}
	pthread_mutex_init(&j->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&j->jan_cv, &ca);
	pthread_condattr_destroy(&ca);
	j->lock_fd = lock_fd;
	j->core = core;
	j->next_id = 1;
	j->depth = DEFAULT_DEPTH;
	if (keep)
		j->keep = *keep;
	const char *d = getenv("MESHD_JOB_DEPTH");
	if (d && atoi(d) > 0 && atoi(d) <= 1024)
		j->depth = (unsigned)atoi(d);
	j->state = strdup(real);
	j->jobs_dir = mesh_strf("%s/jobs", real);
	j->hash = (uint32_t)mesh_fnv1a64(MESH_FNV1A64_INIT, real, strlen(real));
	if (!j->state || !j->jobs_dir) {
		meshd_jobs_free(j);
		return -ENOMEM;
	}
	if (mkdir(j->jobs_dir, 0700) < 0 && errno != EEXIST) {
		rc = mesh_errf(err, -errno, "cannot create '%s': %s", j->jobs_dir, strerror(errno));
		meshd_jobs_free(j);
		return rc;
	}
	DIR *dir = opendir(j->jobs_dir);
	if (!dir) {
		rc = mesh_errf(err, -errno, "cannot read '%s': %s", j->jobs_dir, strerror(errno));
		meshd_jobs_free(j);
		return rc;
	}
	struct dirent *e;
	pthread_mutex_lock(&j->mu);
	/* One directory a job, read one at a time: an ended one keeps no fd. */
	while (rc == 0 && (e = readdir(dir))) {
		char *endp;
		if (mesh__jobs_clean_removing(j, e->d_name) || e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		unsigned long long id = strtoull(e->d_name, &endp, 10);
		if (*endp || id == 0 || id == ULLONG_MAX)
			continue;
		rc = load_job(j, id, err);
	}
	pthread_mutex_unlock(&j->mu);
	closedir(dir);
	if (rc == 0)
		rc = mesh__jobs_read_last_id(j, err);
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

void meshd_jobs_stop(struct meshd_jobs *j)
{
	if (!j)
		return;
	mesh__jobs_store_stop(j);
	mesh__jobs_keep_stop(j); /* sets stopping: no submit starts a driver from here */
	/* The jobs now, each held: an API thread may still remove one. */
	size_t n = 0, k = 0;
	pthread_mutex_lock(&j->mu);
	for (struct job *jb = j->list; jb; jb = jb->next)
		n++;
	struct job **v = calloc(n ? n : 1, sizeof *v);
	for (struct job *jb = j->list; jb; jb = jb->next) {
		uint64_t one = 1;
		pthread_mutex_lock(&jb->mu);
		if (jb->th_on && jb->cancel_efd >= 0 && write(jb->cancel_efd, &one, sizeof one) < 0) {
			/* the counter is never full */
		}
		pthread_mutex_unlock(&jb->mu);
		if (v) {
			jb->refs++;
			v[k++] = jb;
		}
	}
	pthread_mutex_unlock(&j->mu);
	for (size_t i = 0; i < k; i++) {
		struct job *jb = v[i];
		pthread_mutex_lock(&jb->mu);
		struct mesh_thread *th = jb->th_on ? jb->th : NULL;
		jb->th_on = 0;
		pthread_mutex_unlock(&jb->mu);
		if (th)
			mesh_thread_join(th, NULL);
		pthread_mutex_lock(&jb->mu);
		pthread_cond_broadcast(&jb->cv);
		pthread_mutex_unlock(&jb->mu);
		mesh__job_put(jb);
	}
	free(v);
}

void meshd_jobs_free(struct meshd_jobs *j)
{
	if (!j)
		return;
	while (j->list) {
		struct job *jb = j->list;
		j->list = jb->next;
		mesh__job_free(jb);
	}
	mesh__jobs_store_free(j);
	free(j->state);
	free(j->jobs_dir);
	pthread_cond_destroy(&j->jan_cv);
	pthread_mutex_destroy(&j->mu);
	/* Last: the state directory is free for the next meshd. */
	if (j->lock_fd >= 0)
		close(j->lock_fd);
	free(j);
}
