/* The file home (home.h): a state directory, one directory a job,
 * <state>/jobs/<id>/ (ids 1, 2, 3, ...; docs/jobs.md):
 *   spec        what was submitted (one "key value" a line), written last
 *               and vouching for the files written with it: a directory
 *               without a whole one is no job
 *   input       the chunks' inputs, one a line (absent for --chunks N)
 *   journal.log the engine's journal (job.h), owned by the job: only this
 *               home's handles, which present its identity, write it
 *   results.bin each chunk's result (job/results.h), synced before DONE
 *               (small results are durable in their DONE record instead,
 *               and put back from the journal when the file lost them)
 *   end         how it ended ("complete", "failed", "cancelled"), then its
 *               counts then ("key value" lines); absent while it runs
 *   leases/     the lease directory (job.h lockdir_private), inside the
 *               private state directory; removed once the job ends.
 * jobs/last_id holds the highest id ever given (ids are never given
 * twice); a job being removed is first renamed .rm-<id>. */
#include "job/home.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/io.h"
#include "base/thread.h"
#include "job/record.h"
#include "job/results.h"
#include "store/store.h"

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The state directory's lock file, the highest id given, a job's
 * directory while it is removed. */
#define STATE_LOCK "meshd.lock"
#define LAST_ID "last_id"
#define REMOVING ".rm-"
/* A spec's first line (format 2: it vouches for its files, below). */
#define SPEC_FORMAT "format 2\n"
/* An input is read whole (exec/input.h reads it so). */
#define INPUT_MAX ((size_t)1 << 40)

struct fhome {
	struct mesh_home base;
	char *state, *jobs_dir;
	int lock_fd; /* flock(LOCK_EX) on <state>/meshd.lock for the home's lifetime */
	uint32_t hash; /* of the state dir's real path: an older meshd's lease dirs were named by it */
	pthread_mutex_t mu; /* next_id, last_id */
	uint64_t next_id, last_id;
};

struct fjob {
	struct mesh_home_job base;
	struct fhome *h;
	char *dir, *journal, *results_path, *input_path, *lockdir, *lease_name;
	/* Its journal's owner identity (mesh_job_submit_unsynced's owned). */
	char ident[128];
	size_t ident_len;
	pthread_mutex_t mu;	/* res, buried, io_error */
	struct mesh_results *res;
	unsigned char *buried; /* a run's: a bit a chunk known buried */
	char *io_error;	       /* the first write of its results that failed, with the file and why */
	/* A run's results file is opened on a helper thread while its first
	 * chunks are leased (open); the first call that needs it joins it. */
	pthread_mutex_t res_mu;
	struct mesh_thread *res_th;
	int res_th_on, res_rc; /* res_mu */
	/* create ... persist: the files written, not synced yet */
	int in_fd, res_fd;
	char *spec_text;
};

static struct fhome *fh(struct mesh_home *h)
{
	return (struct fhome *)h;
}

static struct fjob *fj(struct mesh_home_job *hj)
{
	return (struct fjob *)hj;
}

/* ---- a job's handle ---- */

static void fjob_free(struct mesh_home_job *hj);

/* A handle of job id (its paths; nothing opened). */
static struct fjob *fjob_new(struct fhome *h, uint64_t id)
{
	struct fjob *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	f->base.home = &h->base;
	f->base.spec.id = id;
	f->base.result_max = SIZE_MAX;
	f->h = h;
	f->in_fd = f->res_fd = -1;
	pthread_mutex_init(&f->mu, NULL);
	pthread_mutex_init(&f->res_mu, NULL);
	f->dir = mesh_strf("%s/%" PRIu64, h->jobs_dir, id);
	f->journal = mesh_strf("%s/journal.log", f->dir ? f->dir : "");
	f->results_path = mesh_strf("%s/results.bin", f->dir ? f->dir : "");
	f->input_path = mesh_strf("%s/input", f->dir ? f->dir : "");
	f->lockdir = mesh_strf("%s/leases", f->dir ? f->dir : "");
	f->lease_name = mesh_strf("j%" PRIu64, id);
	f->ident_len = (size_t)snprintf(f->ident, sizeof f->ident,
					"meshd job %" PRIu64 ": meshd runs its chunks and keeps their results (`mesh results %" PRIu64 "`)",
					id, id);
	if (!f->dir || !f->journal || !f->results_path || !f->input_path || !f->lockdir || !f->lease_name) {
		fjob_free(&f->base);
		return NULL;
	}
	return f;
}

/* The results file opened on its helper thread: joins it once.  0 once
 * res is open, or the open's error. */
static int res_wait(struct fjob *f)
{
	pthread_mutex_lock(&f->res_mu);
	if (f->res_th_on) {
		mesh_thread_join(f->res_th, NULL);
		f->res_th_on = 0;
		if (f->res_rc < 0)
			mesh__home_note(&f->h->base, 2, "job=%" PRIu64 " cannot open the results %s: %s", f->base.spec.id, f->results_path,
			     mesh_strerror(f->res_rc));
	}
	int rc = f->res_rc;
	pthread_mutex_unlock(&f->res_mu);
	return rc;
}

static void fh_close(struct mesh_home_job *hj)
{
	struct fjob *f = fj(hj);
	res_wait(f);
	struct mesh_job *jh = atomic_exchange(&hj->jh, NULL), *sjh = atomic_exchange(&hj->sjh, NULL);
	if (sjh)
		mesh_job_close(sjh);
	if (jh)
		mesh_job_close(jh);
	pthread_mutex_lock(&f->mu);
	struct mesh_results *res = f->res;
	f->res = NULL;
	free(f->buried);
	f->buried = NULL;
	pthread_mutex_unlock(&f->mu);
	mesh_results_close(res);
	f->res_rc = 0;
}

static void fjob_free(struct mesh_home_job *hj)
{
	struct fjob *f = fj(hj);
	if (!f)
		return;
	fh_close(hj);
	if (f->in_fd >= 0)
		close(f->in_fd);
	if (f->res_fd >= 0)
		close(f->res_fd);
	free(f->spec_text);
	free(f->io_error);
	free(f->dir);
	free(f->journal);
	free(f->results_path);
	free(f->input_path);
	free(f->lockdir);
	free(f->lease_name);
	pthread_mutex_destroy(&f->mu);
	pthread_mutex_destroy(&f->res_mu);
	free(f);
}

static void fh_where(const struct mesh_home_job *hj, struct mesh_home_where *w)
{
	const struct fjob *f = (const struct fjob *)hj;
	w->dir = f->dir;
	w->journal = f->journal;
	w->lockdir = f->lockdir;
	w->lease_name = f->lease_name;
	w->results = f->results_path;
}

/* ---- the spec file ---- */

static char *spec_text(const struct fjob *f)
{
	const struct mesh_home_spec *s = &f->base.spec;
	return mesh_strf("program %s\nchunks %" PRIu64 "\ninput %d\nmax_workers %u\nretries %u\ntimeout_ns %" PRIu64
			 "\nspeculate %d\nlockdir %s\nlease_name %s\nname %s\n",
			 s->program, s->n, s->has_input, s->max_workers, (unsigned)s->retries, s->timeout_ns, s->speculate,
			 f->lockdir, f->lease_name, s->name);
}

int mesh__home_spec_parse(struct mesh_home_spec *s, char *text)
{
	int have = 0;
	char *save = NULL;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strchr(line, ' ');
		if (!sp)
			continue;
		*sp = 0;
		const char *k = line, *v = sp + 1;
		unsigned long long u = strtoull(v, NULL, 10);
		if (!strcmp(k, "program")) /* the last one wins */
			snprintf(s->program, sizeof s->program, "%s", v), have |= 1;
		else if (!strcmp(k, "chunks"))
			s->n = u, have |= 2;
		else if (!strcmp(k, "input"))
			s->has_input = u != 0;
		else if (!strcmp(k, "max_workers"))
			s->max_workers = (unsigned)u;
		else if (!strcmp(k, "retries"))
			s->retries = (uint32_t)u;
		else if (!strcmp(k, "timeout_ns"))
			s->timeout_ns = u;
		else if (!strcmp(k, "speculate"))
			s->speculate = u != 0;
		else if (!strcmp(k, "name") && *v)
			snprintf(s->name, sizeof s->name, "%s", v);
	}
	if (have != 3 || !s->program[0] || !s->n || s->n > MESH_JOB_MAX_CHUNKS || !s->max_workers || !s->retries)
		return MESH_E_PARSE;
	return 0;
}

/* ---- a spec that vouches for the files written with it ----
 *
 * A submit writes its files and its spec unsynced and makes them durable in
 * one round of syncs (persist).  Until that round ends any of them may be
 * torn or missing after a crash, so the spec says what it stands for: its
 * first line is SPEC_FORMAT, then the job, then for each file written with
 * it a line "vouch NAME BYTES CRC" (the file's first BYTES bytes, which
 * never change, and their CRC-32C), and last "check CRC" over every byte
 * before that line.  At a restart a spec whose check or vouches fail is a
 * submit that was never answered: its directory is ignored, as one without
 * a spec (load).  A spec without SPEC_FORMAT is of the format before,
 * written whole by a rename after its files were durable: taken as it is. */

static const char *vouch_path(const struct fjob *f, const char *name)
{
	return !strcmp(name, "journal")	  ? f->journal
	       : !strcmp(name, "results") ? f->results_path
	       : !strcmp(name, "input")	  ? f->input_path
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

/* The spec a submit writes: SPEC_FORMAT, the job, a vouch for each file
 * written with it (the journal and results file as they are on disk now,
 * the input from memory) and the check line.  NULL: no memory or a file
 * that cannot be read. */
static char *spec_seal(const struct fjob *f, const void *input, size_t input_len)
{
	struct mesh_buf b = MESH_BUF_INIT;
	char *body = spec_text(f), *file = NULL;
	int ok = body && mesh_buf_adds(&b, SPEC_FORMAT) == 0 && mesh_buf_adds(&b, body) == 0;
	static const char *const small[] = {"journal", "results"};
	/* The journal and the results file as they were written: a few dozen
	 * bytes each, in the page cache. */
	for (size_t i = 0; ok && i < sizeof small / sizeof small[0]; i++) {
		size_t len = 0;
		ok = mesh_read_file(vouch_path(f, small[i]), 1 << 16, &file, &len) == 0 &&
		     mesh_buf_addf(&b, "vouch %s %zu %08x\n", small[i], len, mesh_crc32c(0, file, len)) == 0;
		free(file);
		file = NULL;
	}
	if (ok && f->base.spec.has_input)
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

int mesh__home_spec_check(const char *text, size_t len)
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
static int spec_vouches_hold(const struct fjob *f, const char *text, const char **what)
{
	for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		char name[16];
		unsigned long long n;
		unsigned crc;
		if (strncmp(l, "vouch ", 6) || sscanf(l + 6, "%15s %llu %8x", name, &n, &crc) != 3)
			continue;
		const char *path = vouch_path(f, name);
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

/* ---- the end file ---- */

const char *mesh_home_state_name(enum mesh_home_state s)
{
	switch (s) {
	case MESH_HOME_RUNNING: return "running";
	case MESH_HOME_COMPLETE: return "complete";
	case MESH_HOME_FAILED: return "failed";
	case MESH_HOME_CANCELLED: return "cancelled";
	case MESH_HOME_ERROR: return "error";
	}
	return "?";
}

enum mesh_home_state mesh__home_end_state(const char *text)
{
	return !strncmp(text, "complete", 8)    ? MESH_HOME_COMPLETE
	       : !strncmp(text, "cancelled", 9) ? MESH_HOME_CANCELLED
						: MESH_HOME_FAILED;
}

/* Writes the end file: what, then the counts of sum when not NULL. */
static int write_end(struct fjob *f, const char *what, const struct mesh_home_sum *sum)
{
	char *path = mesh_strf("%s/end", f->dir), *text;
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
static int end_parse(const char *text, struct mesh_home_sum *sum)
{
	static const struct {
		const char *key;
		size_t off;
	} u64s[] = {
		{"done", offsetof(struct mesh_home_sum, st.done)},
		{"leased", offsetof(struct mesh_home_sum, st.leased)},
		{"pending", offsetof(struct mesh_home_sum, st.pending)},
		{"buried", offsetof(struct mesh_home_sum, st.buried)},
		{"duplicates", offsetof(struct mesh_home_sum, st.duplicates)},
		{"failed_attempts", offsetof(struct mesh_home_sum, st.failed_attempts)},
		{"speculative_wins", offsetof(struct mesh_home_sum, st.speculative_wins)},
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

/* A job that ended leases nothing again: its lease directory goes, with
 * any lease file left in it. */
static void remove_leases(struct fjob *f)
{
	int rc = mesh_store_file_remove_dir(f->lockdir, MESH_STORE_FILE_PRIVATE);
	if (rc < 0)
		mesh__home_note(&f->h->base, 1, "job=%" PRIu64 " cannot remove the lease directory %s: %s", f->base.spec.id, f->lockdir,
		     mesh_strerror(rc));
}

static int fh_end(struct mesh_home_job *hj, enum mesh_home_state state, const struct mesh_home_sum *sum, char **err)
{
	struct fjob *f = fj(hj);
	int rc = 0;
	/* its per-chunk memory goes now, its files once idle (the runner) */
	pthread_mutex_lock(&f->mu);
	free(f->buried);
	f->buried = NULL;
	pthread_mutex_unlock(&f->mu);
	if (state == MESH_HOME_ERROR)
		return 0; /* it runs again at the next start */
	if (sum && (rc = write_end(f, mesh_home_state_name(state), sum)) < 0)
		rc = mesh_errf(err, rc, "cannot write its end in %s: %s", f->dir, mesh_strerror(rc));
	remove_leases(f);
	return rc;
}

static int fh_cancel(struct mesh_home_job *hj, char **err)
{
	struct fjob *f = fj(hj);
	/* Durable first: a restart must not resume it.  The end of its run
	 * writes it again with the counts. */
	int rc = write_end(f, "cancelled", NULL);
	return rc < 0 ? mesh_errf(err, rc, "cannot record the cancel in %s: %s", f->dir, mesh_strerror(rc)) : 0;
}

/* ---- opening a job's files ---- */

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

/* Opens the results file.  A small result is durable in its DONE record,
 * not in the results file, which is not synced for it (docs/journal.md,
 * "Results in DONE records"): any the file lost in a crash is put back
 * from the journal here. */
static int results_open(struct fjob *f, char **err)
{
	uint64_t cut = 0, id = f->base.spec.id;
	struct mesh_results *res = NULL;
	int rc = mesh_results_open(&res, f->results_path, f->base.spec.n, &cut);
	if (rc < 0)
		return mesh_errf(err, rc, "cannot open the results %s: %s", f->results_path, mesh_strerror(rc));
	if (cut)
		mesh__home_note(&f->h->base, 1, "job=%" PRIu64 " results: a torn tail of %" PRIu64 " bytes was cut", id, cut);
	struct rebuild b = {res, 0};
	rc = mesh_rec_each_result(f->journal, f->base.spec.n, rebuild_one, &b);
	if (rc == 0 && b.restored)
		rc = mesh_results_sync(res);
	if (rc < 0) {
		mesh_results_close(res);
		return mesh_errf(err, rc, "cannot put the journal's results back in %s: %s", f->results_path,
				 mesh_strerror(rc));
	}
	if (b.restored)
		mesh__home_note(&f->h->base, 1, "job=%" PRIu64 " results: %" PRIu64 " put back from the journal (the results file had lost them)",
		     id, b.restored);
	atomic_store(&f->base.t_results, mesh_mono_ns());
	pthread_mutex_lock(&f->mu);
	f->res = res;
	pthread_mutex_unlock(&f->mu);
	return 0;
}

static void *results_open_main(void *arg)
{
	struct fjob *f = arg;
	f->res_rc = results_open(f, NULL); /* read after the join */
	return NULL;
}

/* The error of opening the journal, naming the file that failed: the
 * journal, or the lease directory. */
static int open_error(const struct fjob *f, int rc, const struct mesh_job_why *why, char **err)
{
	if (why->at == MESH_JOB_AT_LOCKDIR)
		return mesh_errf(err, rc, "cannot use the lease directory %s: %s", f->lockdir, mesh_strerror(rc));
	return mesh_errf(err, rc, "cannot open the journal %s: %s", f->journal, mesh_strerror(rc));
}

static void note_buried(const struct mesh_job_failure *x, void *arg)
{
	struct fjob *f = arg;
	if (x->buried && x->cid < f->base.spec.n)
		f->buried[x->cid / 8] |= (unsigned char)(1u << (x->cid % 8));
}

/* Opens the journal (and, a run of a speculating job, its second handle)
 * and the results file: for a run on a helper thread (res_wait joins
 * it), so that a driver's first lease does not wait for its creation.
 * Its leases are in its own directory, which no other user can reach. */
static int fh_open(struct mesh_home_job *hj, int run, char **err)
{
	struct fjob *f = fj(hj);
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job_why why;
	struct mesh_job *jh = NULL, *sjh = NULL;
	unsigned char *buried = run ? calloc(hj->spec.n / 8 + 1, 1) : NULL;
	char node[96];
	int rc;
	if (run && !buried)
		return mesh_errf(err, -ENOMEM, "cannot open job %" PRIu64 ": %s", hj->spec.id, mesh_strerror(-ENOMEM));
	o.journal = f->journal;
	o.lockdir = f->lockdir;
	o.lockdir_private = 1;
	o.name = f->lease_name;
	o.nchunks = hj->spec.n;
	o.max_attempts = hj->spec.retries;
	o.read_only = !run;
	o.identity = f->ident; /* the journal's owner (or a journal made before owners) */
	o.identity_len = f->ident_len;
	o.why = &why;
	if ((rc = mesh_job_open(&jh, &o)) < 0) {
		free(buried);
		return open_error(f, rc, &why, err);
	}
	if (run && hj->spec.speculate) {
		/* Copies of this node's own stragglers come through a second
		 * node name (the engine never gives a node a copy of its own). */
		snprintf(node, sizeof node, "%.60s-spec", mesh_job_node(jh));
		o.node = node;
		if ((rc = mesh_job_open(&sjh, &o)) < 0) {
			mesh_job_close(jh);
			free(buried);
			return open_error(f, rc, &why, err);
		}
	}
	pthread_mutex_lock(&f->res_mu);
	if (run && mesh_thread_run(&f->res_th, results_open_main, f, 0) == 0)
		f->res_th_on = 1;
	else
		f->res_rc = rc = results_open(f, err);
	pthread_mutex_unlock(&f->res_mu);
	if (rc < 0) {
		if (sjh)
			mesh_job_close(sjh);
		mesh_job_close(jh);
		free(buried);
		return rc;
	}
	pthread_mutex_lock(&f->mu);
	if (buried) {
		f->buried = buried;
		mesh_job_failures(jh, note_buried, f);
	}
	pthread_mutex_unlock(&f->mu);
	atomic_store(&hj->sjh, sjh);
	atomic_store(&hj->jh, jh);
	return 0;
}

static int fh_input(struct mesh_home_job *hj, char **data, size_t *len, char **err)
{
	struct fjob *f = fj(hj);
	int rc = mesh_read_file(f->input_path, INPUT_MAX, data, len);
	return rc < 0 ? mesh_errf(err, rc, "cannot load the input %s: %s", f->input_path, mesh_strerror(rc)) : 0;
}

/* ---- a run's results ---- */

/* A write of the results file failed (rc): kept, with the file and the
 * system's reason, for the job's error (the runner says only that an
 * output could not be written).  rc is returned. */
static int io_failed(struct fjob *f, int rc, const char *what, uint64_t cid)
{
	char num[32] = "";
	if (cid != UINT64_MAX)
		snprintf(num, sizeof num, " of chunk %" PRIu64, cid);
	char *why = mesh_strf("cannot %s%s in %s: %s", what, num, f->results_path, mesh_strerror(rc));
	pthread_mutex_lock(&f->mu);
	if (!f->io_error)
		f->io_error = why, why = NULL;
	pthread_mutex_unlock(&f->mu);
	free(why);
	return rc;
}

static int fh_keep(struct mesh_home_job *hj, uint64_t cid, const void *p, size_t n)
{
	struct fjob *f = fj(hj);
	int rc = res_wait(f);
	if (rc == 0 && (rc = mesh_results_append(f->res, cid, MESH_RESULT_OK, p, n)) < 0)
		io_failed(f, rc, "write the result", cid);
	return rc;
}

static int fh_sync(struct mesh_home_job *hj)
{
	struct fjob *f = fj(hj);
	int rc = res_wait(f);
	if (rc == 0 && (rc = mesh_results_sync(f->res)) < 0)
		io_failed(f, rc, "write and sync the results", UINT64_MAX);
	return rc;
}

static int fh_report(struct mesh_home_job *hj, uint64_t cid, const void *p, size_t len, int buried)
{
	struct fjob *f = fj(hj);
	int rc = res_wait(f);
	if (rc == 0)
		rc = mesh_results_append(f->res, cid, MESH_RESULT_FAILURE, p, len);
	if (buried && cid < hj->spec.n) {
		pthread_mutex_lock(&f->mu);
		if (f->buried)
			f->buried[cid / 8] |= (unsigned char)(1u << (cid % 8));
		pthread_mutex_unlock(&f->mu);
	}
	return rc;
}

static char *fh_why(struct mesh_home_job *hj, int rc)
{
	struct fjob *f = fj(hj);
	pthread_mutex_lock(&f->mu);
	char *w = f->io_error;
	f->io_error = NULL;
	pthread_mutex_unlock(&f->mu);
	/* Not the results file's: an I/O error of the engine's files. */
	if (!w && mesh_exit_for(rc) == MESH_EXIT_IOERR && rc != MESH_E_OUTPUT)
		w = mesh_strf("cannot write the journal %s or a lease in %s: %s", f->journal, f->lockdir, mesh_strerror(rc));
	return w;
}

/* ---- reading ---- */

static int fh_results(struct mesh_home_job *hj, uint64_t from, int ended,
		   int (*fn)(void *arg, uint64_t cid, enum mesh_home_result how, const void *p, size_t n), void *arg,
		   uint64_t *next)
{
	struct fjob *f = fj(hj);
	struct mesh_job *jh = atomic_load(&hj->jh);
	pthread_mutex_lock(&f->mu);
	struct mesh_results *res = f->res;
	pthread_mutex_unlock(&f->mu);
	uint64_t k = from, word = UINT64_MAX, bits = 0;
	int rc = 0;
	while (jh && res && k < hj->spec.n && rc == 0) {
		/* The DONE bits 64 chunks at a time: one look at the journal's
		 * tail for each 64, not one for each chunk. */
		if (k / 64 != word) {
			word = k / 64;
			if ((rc = mesh_job_done_word(jh, word, &bits)) < 0)
				break;
		}
		int done = (int)(bits >> (k % 64) & 1), stop;
		if (done != 1) {
			pthread_mutex_lock(&f->mu);
			int settled = ended || (f->buried && (f->buried[k / 8] & (1u << (k % 8))));
			pthread_mutex_unlock(&f->mu);
			if (!settled || fn(arg, k, MESH_HOME_NONE, NULL, 0))
				break;
			k++;
			continue;
		}
		void *p = NULL;
		size_t n = 0;
		rc = mesh_results_get(res, k, MESH_RESULT_OK, &p, &n);
		if (rc == -ENOENT)
			/* DONE without a result (a node outside meshd completed it,
			 * or the file lost it): named, and the others go on. */
			stop = fn(arg, k, MESH_HOME_MISSING, NULL, 0), rc = 0;
		else
			stop = rc == 0 && fn(arg, k, MESH_HOME_RESULT, p, n);
		free(p);
		if (rc == 0 && !stop)
			k++;
		if (stop)
			break;
	}
	*next = k;
	return rc;
}

struct fail_ctx {
	struct fjob *f;
	void (*fn)(void *arg, const struct mesh_home_failure *x);
	void *arg;
};

static void each_failure(const struct mesh_job_failure *x, void *arg)
{
	struct fail_ctx *c = arg;
	struct mesh_home_failure out = {x->cid, x->attempts, x->last_status, x->buried, "", 0};
	void *p = NULL;
	size_t len = 0;
	pthread_mutex_lock(&c->f->mu);
	struct mesh_results *res = c->f->res;
	pthread_mutex_unlock(&c->f->mu);
	if (res && mesh_results_get(res, x->cid, MESH_RESULT_FAILURE, &p, &len) == 0 && p)
		out.report = p, out.report_len = len;
	c->fn(c->arg, &out);
	free(p);
}

static int fh_failures(struct mesh_home_job *hj, void (*fn)(void *arg, const struct mesh_home_failure *x), void *arg)
{
	struct fail_ctx c = {fj(hj), fn, arg};
	struct mesh_job *jh = atomic_load(&hj->jh);
	return jh ? mesh_job_failures(jh, each_failure, &c) : 0;
}

/* ---- a submit ---- */

/* A new file at path (in the job's new directory) holding len bytes of
 * p, not synced; its descriptor in *fd for persist's fdatasync. */
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

/* The next id, its directory made: mkdir is the claim (an id is never
 * given twice).  0 with *id, or -errno. */
static int claim_id(struct fhome *h, uint64_t *id)
{
	int rc;
	pthread_mutex_lock(&h->mu);
	uint64_t nid = h->next_id;
	for (;; nid++) {
		char *d = mesh_strf("%s/%" PRIu64, h->jobs_dir, nid);
		if (!d) {
			rc = -ENOMEM;
			break;
		}
		rc = mkdir(d, 0700) < 0 ? -errno : 0;
		free(d);
		if (rc != -EEXIST)
			break;
	}
	if (rc == 0)
		h->next_id = nid + 1;
	pthread_mutex_unlock(&h->mu);
	*id = nid;
	return rc;
}

/* The input, the results file and the journal, written and not synced:
 * the directory is this submit's alone (claim_id), and the spec that
 * vouches for them comes last (persist), so a crash before all of it is
 * durable leaves a directory that a start ignores.  The results file is
 * made durable with the rest, so that a driver's open of it syncs
 * nothing. */
static int fh_create(struct mesh_home *home, const struct mesh_home_spec *spec, const void *in, size_t len,
		  struct mesh_home_job **out, char **err)
{
	struct fhome *h = fh(home);
	uint64_t id;
	int rc = claim_id(h, &id);
	*out = NULL;
	if (rc < 0)
		return mesh_errf(err, rc, "cannot create the job's directory in %s: %s", h->jobs_dir, mesh_strerror(rc));
	struct fjob *f = fjob_new(h, id);
	if (!f)
		return mesh_errf(err, -ENOMEM, "cannot take job %" PRIu64 ": %s", id, mesh_strerror(-ENOMEM));
	f->base.spec = *spec;
	f->base.spec.id = id;
	if ((spec->has_input && (rc = write_new(f->input_path, in, len, &f->in_fd)) < 0) ||
	    (rc = mesh_results_create(f->results_path, &f->res_fd)) < 0 ||
	    (rc = mesh_job_submit_unsynced(f->journal, spec->n, f->ident, f->ident_len, 1)) < 0 ||
	    (!(f->spec_text = spec_seal(f, in, len)) && (rc = -ENOMEM))) {
		rc = mesh_errf(err, rc, "cannot store job %" PRIu64 " in %s: %s", id, f->dir, mesh_strerror(rc));
		fjob_free(&f->base);
		return rc;
	}
	*out = &f->base;
	return 0;
}

/* Makes the job durable, in one round of syncs all at once
 * (mesh_sync_many): the data of its input, results file, journal and spec
 * (written here), all written unsynced before; its directory (their
 * names); jobs/ (the directory's own name).  The spec vouches for the
 * files written with it: a crash before the round ends leaves a spec that
 * a start finds whole, with whole files, or a directory it ignores.  (The
 * spec used to go in under a temporary name, renamed after that round
 * and its directory synced again: a second round, and its file system
 * commit was one more that the first DONE's sync could wait behind.) */
static int fh_persist(struct mesh_home_job *hj, char **err)
{
	struct fjob *f = fj(hj);
	int fds[6], n = 0, rc = 0;
	unsigned char data[6];
	int sfd = -1, jfd = -1, dfd = -1, pfd = -1;
	char *path = mesh_strf("%s/spec", f->dir);
	if (!path || !f->spec_text)
		rc = -ENOMEM;
	if (!rc && (sfd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		rc = -errno;
	if (!rc)
		rc = mesh_write_all(sfd, f->spec_text, strlen(f->spec_text));
	if (!rc && (jfd = open(f->journal, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
		rc = -errno;
	if (!rc && (dfd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		rc = -errno;
	if (!rc && (pfd = open(f->h->jobs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		rc = -errno;
	if (!rc) {
		if (f->in_fd >= 0)
			fds[n] = f->in_fd, data[n++] = 1;
		fds[n] = f->res_fd, data[n++] = 1;
		fds[n] = jfd, data[n++] = 1;
		fds[n] = sfd, data[n++] = 1;
		fds[n] = dfd, data[n++] = 0;
		fds[n] = pfd, data[n++] = 0;
		rc = mesh_sync_many(fds, data, (size_t)n);
	}
	if (rc && sfd >= 0) {
		/* Not stored: no spec a start could find either. */
		unlink(path);
	}
	int mine[] = {sfd, jfd, dfd, pfd, f->in_fd, f->res_fd};
	for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++)
		if (mine[i] >= 0)
			close(mine[i]);
	f->in_fd = f->res_fd = -1;
	free(f->spec_text);
	f->spec_text = NULL;
	free(path);
	if (rc < 0)
		return mesh_errf(err, rc, "cannot store job %" PRIu64 " in %s: %s", hj->spec.id, f->dir, mesh_strerror(rc));
	return 0;
}

/* ---- removal ---- */

/* Removes the directory name in parent_fd and what it holds, directories
 * depth levels down at most, following no symlink.  0 or the first -errno. */
static int rm_tree(int parent_fd, const char *name, int depth)
{
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), rc = 0;
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -ENOMEM;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		int r = unlinkat(dirfd(d), e->d_name, 0) < 0 ? -errno : 0;
		if (r == -EISDIR && depth > 1)
			r = rm_tree(dirfd(d), e->d_name, depth - 1);
		if (r < 0 && r != -ENOENT && rc == 0)
			rc = r;
	}
	closedir(d);
	if (unlinkat(parent_fd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && rc == 0)
		rc = -errno;
	return rc;
}

/* The highest id ever given is recorded before a job goes, so that a start
 * never gives the id of a job removed (ids are the directories' names). */
static int last_id_write(struct fhome *h)
{
	char *path = mesh_strf("%s/" LAST_ID, h->jobs_dir), line[32];
	pthread_mutex_lock(&h->mu);
	uint64_t id = h->next_id - 1, was = h->last_id;
	pthread_mutex_unlock(&h->mu);
	if (!path)
		return -ENOMEM;
	int rc = 0;
	if (id > was) {
		int n = snprintf(line, sizeof line, "%" PRIu64 "\n", id);
		if ((rc = mesh_write_file_atomic(path, line, (size_t)n, 0600)) == 0) {
			pthread_mutex_lock(&h->mu);
			if (id > h->last_id)
				h->last_id = id;
			pthread_mutex_unlock(&h->mu);
		}
	}
	if (rc < 0)
		mesh__home_note(&h->base, 1, "cannot record the last job id in %s: %s", path, mesh_strerror(rc));
	free(path);
	return rc;
}

static int read_last_id(struct fhome *h, char **err)
{
	char *path = mesh_strf("%s/" LAST_ID, h->jobs_dir), *text = NULL;
	size_t len;
	if (!path)
		return -ENOMEM;
	int rc = mesh_read_file(path, 64, &text, &len);
	if (rc == 0) {
		h->last_id = strtoull(text, NULL, 10);
		if (h->last_id >= h->next_id)
			h->next_id = h->last_id + 1;
	} else if (rc == -ENOENT) {
		rc = 0;
	} else {
		rc = mesh_errf(err, rc, "cannot read %s: %s", path, mesh_strerror(rc));
	}
	free(text);
	free(path);
	return rc;
}

/* A directory left half removed (".rm-<id>"): removed now.  1 when name
 * was one, else 0. */
static int clean_removing(struct fhome *h, const char *name)
{
	if (strncmp(name, REMOVING, sizeof REMOVING - 1))
		return 0;
	int dfd = open(h->jobs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc;
	if (dfd < 0)
		return -errno;
	rc = rm_tree(dfd, name, 2);
	close(dfd);
	if (rc < 0)
		mesh__home_note(&h->base, 1, "cannot remove %s/%s: %s", h->jobs_dir, name, mesh_strerror(rc));
	return 1;
}

/* Moved aside in one rename (a start finds no job there), then deleted. */
static int remove_job(struct mesh_home_job *hj, char **err)
{
	struct fjob *f = fj(hj);
	struct fhome *h = f->h;
	char name[32], aside[40];
	snprintf(name, sizeof name, "%" PRIu64, hj->spec.id);
	snprintf(aside, sizeof aside, REMOVING "%" PRIu64, hj->spec.id);
	int rc = last_id_write(h), dfd = open(h->jobs_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (rc == 0 && dfd < 0)
		rc = -errno;
	if (rc == 0 && renameat(dfd, name, dfd, aside) < 0 && errno != ENOENT)
		rc = -errno;
	if (rc == 0)
		rc = rm_tree(dfd, aside, 2);
	if (dfd >= 0)
		close(dfd);
	if (rc < 0)
		rc = mesh_errf(err, rc, "its directory %s was not removed: %s", f->dir, mesh_strerror(rc));
	return rc;
}

/* ---- the start: every job of the directory ---- */

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
 * file written again with them.  0, or the error (fd->error says why). */
static int sum_from_journal(struct fjob *f, const char *endtext, struct mesh_home_found *fd, char **err)
{
	struct stat st;
	char *path = mesh_strf("%s/end", f->dir);
	int rc = fh_open(&f->base, 0, err);
	if (rc == 0) {
		mesh_job_status(atomic_load(&f->base.jh), &fd->sum.st);
		fd->sum.ended = path && stat(path, &st) == 0 ? (int64_t)st.st_mtime : (int64_t)time(NULL);
		fd->have_sum = 1;
		fh_close(&f->base);
		char word[16];
		snprintf(word, sizeof word, "%.*s", (int)strcspn(endtext, "\n"), endtext);
		if ((rc = write_end(f, word, &fd->sum)) < 0)
			mesh__home_note(&f->h->base, 1, "job=%" PRIu64 " cannot write its counts in %s: %s", f->base.spec.id, path,
			     mesh_strerror(rc));
		rc = 0;
	}
	free(path);
	return rc;
}

/* The lease directory an older meshd gave job id (/tmp/meshd-<uid>-<hash
 * of the state dir>-j<id>): removed when it is ours (private to this user)
 * and holds only lease files; one another user made is left alone.
 * Losing its leases only returns the chunks they held to PENDING. */
static void remove_old_leases(struct fhome *h, uint64_t id)
{
	char old[96];
	snprintf(old, sizeof old, "/tmp/meshd-%u-%08x-j%" PRIu64, (unsigned)getuid(), h->hash, id);
	int rc = mesh_store_file_remove_dir(old, 0);
	if (rc < 0 && rc != MESH_E_NOTPRIVATE && rc != MESH_E_PATH)
		mesh__home_note(&h->base, 1, "job=%" PRIu64 " cannot remove the old lease directory %s: %s", id, old, mesh_strerror(rc));
}

/* Reads job f's spec (whole, and the files it vouches for when it has not
 * ended) and end file, into its spec and fd.  0; 1 when the directory
 * holds no whole submit (said, and ignored); or an error with *err. */
static int load_files(struct fjob *f, struct mesh_home_found *fd, char **endtext, char **err)
{
	uint64_t id = f->base.spec.id;
	char *path = mesh_strf("%s/spec", f->dir), *text = NULL, *copy = NULL, *epath = NULL;
	const char *what = path;
	size_t len;
	int rc = path ? mesh_read_file(path, 1 << 16, &text, &len) : -ENOMEM;
	if (rc == 0 && (rc = mesh__home_spec_check(text, len)) < 0)
		what = "its spec";
	if (rc == 0 && !(copy = strdup(text)))
		rc = -ENOMEM;
	if (rc == 0)
		rc = mesh__home_spec_parse(&f->base.spec, copy);
	free(copy);
	if (rc == 0 && !(epath = mesh_strf("%s/end", f->dir)))
		rc = -ENOMEM;
	int erc = epath ? mesh_read_file(epath, 4096, endtext, &len) : -ENOENT;
	if (rc == 0 && erc < 0 && erc != -ENOENT)
		rc = erc, what = epath;
	/* An ended job's files were durable long ago (its first DONE waited for
	 * them); an unfinished one's are read by its driver anyway. */
	if (rc == 0 && erc < 0)
		rc = spec_vouches_hold(f, text, &what);
	free(text);
	if (rc < 0 && !content_error(rc)) {
		rc = mesh_errf(err, rc, "cannot load job %" PRIu64 ": %s: %s", id, what ? what : f->dir, mesh_strerror(rc));
	} else if (rc < 0) {
		/* Not a whole submit: killed before its spec was written, or
		 * before the files it vouches for were durable (never answered). */
		if (what && what != path)
			mesh__home_note(&f->h->base, 1, "job=%" PRIu64 " ignored: its submit did not finish (%s is not whole) in %s", id, what,
			     f->dir);
		else
			mesh__home_note(&f->h->base, 1, "job=%" PRIu64 " ignored: no valid spec in %s (%s)", id, f->dir, mesh_strerror(rc));
		rc = 1;
	}
	fd->state = erc == 0 && rc == 0 ? mesh__home_end_state(*endtext) : MESH_HOME_RUNNING;
	free(path);
	free(epath);
	return rc;
}

/* Loads job id and tells the runner of it: an ended one as its end file
 * says (no file of it stays open), an unfinished one to resume.  0 (also
 * for a directory ignored because it holds no whole submit), or an error
 * that stops the start with *err. */
static int load_job(struct fhome *h, uint64_t id, char **err)
{
	struct fjob *f = fjob_new(h, id);
	struct mesh_home_found fd = {0};
	char *endtext = NULL, *why = NULL;
	if (!f)
		return mesh_errf(err, -ENOMEM, "cannot load job %" PRIu64 ": %s", id, mesh_strerror(-ENOMEM));
	int rc = load_files(f, &fd, &endtext, err);
	if (rc != 0) {
		free(endtext);
		fjob_free(&f->base);
		return rc < 0 ? rc : 0;
	}
	remove_old_leases(h, id);
	if (endtext) {
		/* A meshd killed between the end and the removal. */
		remove_leases(f);
		fd.have_sum = end_parse(endtext, &fd.sum);
		if (!fd.have_sum && sum_from_journal(f, endtext, &fd, &why) < 0)
			fd.state = MESH_HOME_ERROR, fd.error = why;
	}
	free(endtext);
	if (id >= h->next_id)
		h->next_id = id + 1;
	rc = h->base.ev.found(h->base.ev.arg, &f->base, &fd);
	free(why);
	if (rc < 0)
		return mesh_errf(err, rc, "cannot load job %" PRIu64 ": %s", id, mesh_strerror(rc));
	return 0;
}

/* One directory a job, read one at a time: an ended one keeps no fd. */
static int fh_watch(struct mesh_home *home, char **err)
{
	struct fhome *h = fh(home);
	struct dirent *e;
	int rc = 0;
	DIR *dir = opendir(h->jobs_dir);
	if (!dir)
		return mesh_errf(err, -errno, "cannot read '%s': %s", h->jobs_dir, strerror(errno));
	while (rc == 0 && (e = readdir(dir))) {
		char *endp;
		if (clean_removing(h, e->d_name) || e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		unsigned long long id = strtoull(e->d_name, &endp, 10);
		if (*endp || id == 0 || id == ULLONG_MAX)
			continue;
		rc = load_job(h, id, err);
	}
	closedir(dir);
	return rc == 0 ? read_last_id(h, err) : rc;
}

/* ---- the home ---- */

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

/* Takes the state directory for the home's lifetime: flock(LOCK_EX) on
 * <state>/meshd.lock (close-on-exec: no worker inherits it), which then
 * holds our pid.  A second meshd on the same directory would resume the
 * first one's jobs and append to the same results files: it gets
 * MESH_E_BUSY, with the holder's pid in *err.  The fd, or a negative error
 * with *err malloc'd. */
static int lock_state(const char *state, char **err)
{
	char *path = mesh_strf("%s/" STATE_LOCK, state);
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

static void fh_stop(struct mesh_home *h)
{
	(void)h;
}

static void close_home(struct mesh_home *home)
{
	struct fhome *h = fh(home);
	if (!h)
		return;
	free(h->state);
	free(h->jobs_dir);
	pthread_mutex_destroy(&h->mu);
	/* Last: the state directory is free for the next meshd. */
	if (h->lock_fd >= 0)
		close(h->lock_fd);
	free(h);
}

static const struct mesh_home_ops file_ops = {
	.kind = "file",
	.results_in_done = 1, /* results_open rebuilds from the journal */
	.watch = fh_watch,
	.stop = fh_stop,
	.close = close_home,
	.create = fh_create,
	.persist = fh_persist,
	.remove = remove_job,
	.job_free = fjob_free,
	.open = fh_open,
	.close_job = fh_close,
	.input = fh_input,
	.keep = fh_keep,
	.sync = fh_sync,
	.report = fh_report,
	.end = fh_end,
	.why = fh_why,
	.cancel = fh_cancel,
	.results = fh_results,
	.failures = fh_failures,
	.where = fh_where,
};

int mesh_home_file_open(struct mesh_home **out, const char *state_dir, const struct mesh_home_events *ev, char **err)
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
	struct fhome *h = calloc(1, sizeof *h);
	if (!h) {
		close(lock_fd);
		return -ENOMEM;
	}
	h->base.ops = &file_ops;
	h->base.ev = *ev;
	h->lock_fd = lock_fd;
	h->next_id = 1;
	pthread_mutex_init(&h->mu, NULL);
	h->state = strdup(real);
	h->jobs_dir = mesh_strf("%s/jobs", real);
	h->hash = (uint32_t)mesh_fnv1a64(MESH_FNV1A64_INIT, real, strlen(real));
	if (!h->state || !h->jobs_dir) {
		close_home(&h->base);
		return -ENOMEM;
	}
	if (mkdir(h->jobs_dir, 0700) < 0 && errno != EEXIST) {
		rc = mesh_errf(err, -errno, "cannot create '%s': %s", h->jobs_dir, strerror(errno));
		close_home(&h->base);
		return rc;
	}
	*out = &h->base;
	return 0;
}
