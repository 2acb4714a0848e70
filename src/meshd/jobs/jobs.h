/* meshd's jobs: submitted work that meshd runs on warm workers of one
 * program until every chunk is DONE (docs/jobs.md).
 *
 * One runner drives the jobs of two homes (job/home.h): meshd's state
 * directory (its own jobs, those this API names: <state>/jobs/<id>/), and
 * with meshd_jobs_store a PostgreSQL store shared by many hosts, whose
 * jobs each meshd serves when its catalog has the program.  One driver
 * thread a running job: the chunk driver (exec/runner.h) over the slot
 * executor (meshd/jobs/job_exec.h), results kept by its home through the
 * driver's hooks.  On open, every job of the state directory without an
 * end is resumed: a meshd killed mid-job finishes it after a restart, no
 * chunk DONE twice (the journal), none lost.  A job that ended holds no fd
 * and no per-chunk memory (its home's handles are opened when its results
 * or failures are read); the janitor thread (jobs_keep.c) removes those
 * past the retention.
 *
 * Threads: every call is thread-safe (the API's op threads). */
#ifndef MESH_MESHD_JOBS_JOBS_H
#define MESH_MESHD_JOBS_JOBS_H

#include "base/buf.h"
#include "job/home.h"

#include <stddef.h>
#include <stdint.h>

struct meshd_core;
struct meshd_jobs;

/* How long finished jobs are kept (`meshd --keep-jobs N --keep-for D`):
 * the newest keep_jobs of the jobs that ended (complete, failed,
 * cancelled) are kept, and any that ended less than keep_for_ns ago; the
 * others are removed, their directory and all (jobs_keep.c, the janitor: at the
 * start, when a job ends, and each second).  0 in either: its default. */
struct meshd_jobs_keep {
	uint64_t keep_jobs;
	uint64_t keep_for_ns;
};
#define MESHD_KEEP_JOBS_DEFAULT 1000u
#define MESHD_KEEP_FOR_DEFAULT_NS (7ull * 24 * 3600 * 1000000000ull)

/* Opens (creating it 0700) the state directory, locks it for meshd's
 * lifetime (flock on <state>/meshd.lock, which holds the holder's pid;
 * released by meshd_jobs_free), then loads its jobs: an ended one as its
 * end file says (no file of it is opened: a start needs O(1) fds whatever
 * the number of jobs), an unfinished one is resumed.  keep may be NULL
 * (the defaults).  0, or a negative error with *err malloc'd: MESH_E_BUSY
 * when another meshd holds the directory (*err names its pid); a job that
 * cannot be read for a reason other than its content (EMFILE, EIO, ...)
 * names it and the real error. */
int meshd_jobs_open(struct meshd_jobs **out, struct meshd_core *core, const char *state_dir,
		    const struct meshd_jobs_keep *keep, char **err);
/* Stops every driver (meshd is stopping: the jobs stay unfinished on disk
 * and resume at the next start) and wakes every waiting reader.  Before
 * the core stops its programs.  Idempotent. */
void meshd_jobs_stop(struct meshd_jobs *j);
/* After meshd_jobs_stop and once no API thread uses j. */
void meshd_jobs_free(struct meshd_jobs *j);
/* Follows the PostgreSQL store at url (`meshd --store URL`, MESH_STORE;
 * its #job part is ignored): every meshd job in it (`mesh submit --store`)
 * whose program this catalog has is run here too, its chunks leased from
 * the store, its results written there (job/home_pg.c, docs/cluster.md).
 * The meshd is a node of the store from here on (`mesh nodes`: its host,
 * the programs of catalog, the catalog directory), marked stopped by
 * meshd_jobs_stop.  0, or a negative error with *err malloc'd (a bad URL,
 * no connection, a schema of another version).  Stopped by meshd_jobs_stop. */
int meshd_jobs_store(struct meshd_jobs *j, const char *url, const char *catalog, char **err);
/* $XDG_STATE_HOME/mesh, else $HOME/.local/state/mesh, into buf.  0 or -ENAMETOOLONG / -ENOENT. */
int meshd_state_default(char *buf, size_t n);

struct meshd_job_spec {
	const char *program;
	uint64_t chunks;	/* --chunks N (no input); 0 = the input's lines */
	const void *input;	/* chunk i's input is line i (no newline); NULL with chunks */
	size_t input_len;
	unsigned max_workers;	/* 0 = the manifest's max_workers */
	uint32_t retries;	/* attempts before a chunk is buried; 0 = 3 */
	uint64_t timeout_ns;	/* per chunk on a worker; 0 = none */
	int speculate;
	const char *name;	/* a label; NULL = none */
};
/* Checks and stores a job, then starts it.  0 with *id; MESH_E_PARSE /
 * MESH_E_RANGE (bad spec), MESH_E_NOTFOUND (no such program) and the
 * load's errors, -errno of the state dir; *err says why. */
int meshd_jobs_submit(struct meshd_jobs *j, const struct meshd_job_spec *s, uint64_t *id, char **err);

struct meshd_job_failure {
	uint64_t cid;
	uint32_t attempts;
	int status;	/* the last attempt's exit status */
	int buried;
	char *report;	/* the last failed attempt's report, or NULL */
};

struct meshd_job_info {
	uint64_t id;
	char *program, *name, *error; /* malloc'd; name "" when none, error NULL unless state ERROR */
	char *program_failed; /* malloc'd: why a running job's program is FAILED (no worker starts
			       * until `mesh start`); NULL when it is not */
	enum mesh_home_state state;
	uint64_t n, done, leased, pending, buried, duplicates, failed_attempts, speculative_wins;
	double rate;		/* chunks DONE per second since the driver started */
	double eta_s;		/* -1 when unknown */
	double elapsed_s;
	unsigned workers, starting, max_workers;
	uint32_t retries;
	uint64_t timeout_ns;
	int speculate;
	uint64_t worker_deaths, worker_kills, ignored_replies, requeued;
	double first_result_s;	/* submit (a resumed job: its driver's start) to the first durable DONE; -1 none yet */
	char *dir, *journal, *lockdir, *lease_name;
	struct meshd_job_failure *failures; /* with details only: every chunk with failed attempts */
	size_t nfailures;
};
void meshd_job_info_release(struct meshd_job_info *ji);

/* One job (details: its failures with their reports too).  wait_ns > 0:
 * while it runs, first waits that long or until it ends.  0; MESH_E_NOTFOUND. */
int meshd_jobs_get(struct meshd_jobs *j, uint64_t id, int details, uint64_t wait_ns, struct meshd_job_info *out,
		   char **err);
/* The jobs, by id: with recent 0 every one kept; else the running ones
 * and the recent newest of those that are not, *older (may be NULL)
 * getting how many were left out.  No file of an ended job is opened.  0
 * or -ENOMEM (*out then NULL). */
int meshd_jobs_list(struct meshd_jobs *j, size_t recent, struct meshd_job_info **out, size_t *n, size_t *older);
void meshd_jobs_list_release(struct meshd_job_info *list, size_t n);
/* The jobs `mesh jobs` shows without --all: the running and this many ended. */
#define MESHD_JOBS_RECENT 20u
/* A job's chunks in buckets: the range 0..n-1 cut into `buckets` runs of
 * nearly equal length, bucket i holding the chunks from first(i) =
 * i * n / buckets to first(i+1) - 1, and for each how many are DONE, how
 * many had a failed attempt and were not buried (done since, or still to
 * come), and how many are buried.  The rest of a bucket is pending or
 * leased.  What `GET /v1/jobs/<id>/chunks` answers (the page's chunk
 * strip). */
struct meshd_chunk_map {
	uint64_t n;
	unsigned buckets;     /* min(asked, n); 0 when n is 0 */
	uint64_t *done, *retried, *buried; /* buckets each, one allocation */
};
/* The most buckets a map has, and the most chunks a job may have for one
 * (the DONE bits are walked whole: n / 8 bytes for a moment). */
#define MESHD_CHUNK_MAP_MAX 4096u
#define MESHD_CHUNK_MAP_MAX_CHUNKS (1ull << 28)
/* Job id's map.  An ended job whose chunks all ended DONE or buried and
 * that had no failed attempt is answered from its counts; any other opens
 * its files.  0; MESH_E_NOTFOUND; MESH_E_RANGE (more chunks than
 * MESHD_CHUNK_MAP_MAX_CHUNKS, *err says so); -ENOMEM; the open's error. */
int meshd_jobs_chunk_map(struct meshd_jobs *j, uint64_t id, unsigned buckets, struct meshd_chunk_map *out,
			 char **err);
void meshd_chunk_map_release(struct meshd_chunk_map *m);
/* Where bucket i of m starts: i * n / buckets (i == buckets: n). */
static inline uint64_t meshd_chunk_map_first(const struct meshd_chunk_map *m, unsigned i)
{
	return (uint64_t)(((unsigned __int128)i * m->n) / m->buckets);
}
/* The DONE, duplicate and speculative-win counts of the jobs removed since
 * the start (by retention or meshd_jobs_remove): /metrics adds them to the
 * kept jobs' so that its counters never go down. */
void meshd_jobs_gone(struct meshd_jobs *j, uint64_t *done, uint64_t *duplicates, uint64_t *wins);
/* Removes a job that is not running (`mesh rm`): its directory and all,
 * and meshd forgets it; its id is never given again.  0; MESH_E_NOTFOUND;
 * MESH_E_STATE (it runs: *err says to cancel it first); -errno of the
 * removal (*err names the path). */
int meshd_jobs_remove(struct meshd_jobs *j, uint64_t id, char **err);
/* Stops a running job for good (its `end` says cancelled): its attempts
 * end; a worker in one of its chunks is halted once that chunk is
 * answered (killed when that takes longer than its stop grace) and stays
 * warm, as do the program's idle workers.  kill_workers: the job's workers
 * are killed at once instead, and the program's idle workers (held by no
 * job and no call) are asked to exit too.  0; MESH_E_NOTFOUND;
 * MESH_E_STATE (it already ended). */
int meshd_jobs_cancel(struct meshd_jobs *j, uint64_t id, int kill_workers, char **err);

/* The results of chunks from, from on, in chunk order, appended to out:
 * each DONE chunk's result bytes; a chunk that will never be DONE (buried,
 * or the job ended) adds nothing.  A DONE chunk whose result the results
 * file lacks adds nothing either: its id goes into missing[] (*nmissing of
 * them, at most missing_cap; the page ends before one more), and the
 * chunks after it go on.  Stops at the first chunk not settled yet, at n,
 * or once out holds max_bytes.  When nothing could be added and wait_ns >
 * 0, first waits (at most wait_ns) for that chunk.  *next: the first chunk
 * not taken; *end: 1 when *next == n (nothing more will come).  0;
 * MESH_E_NOTFOUND; MESH_E_RANGE (from > n); MESH_E_CORRUPT or -errno (a
 * result that cannot be read: its bytes changed on disk).  framed: each
 * result is preceded by its chunk id (u64 LE) and its length (u32 LE), so
 * a reader can tell the chunks apart (results are at most 16 MiB). */
int meshd_jobs_results(struct meshd_jobs *j, uint64_t id, uint64_t from, uint64_t wait_ns, size_t max_bytes,
		       int framed, struct mesh_buf *out, uint64_t *missing, size_t missing_cap, size_t *nmissing,
		       uint64_t *next, int *end, char **err);

#endif
