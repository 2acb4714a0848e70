/* The insides of meshd's jobs, shared by jobs.c (the state directory,
 * the drivers) and jobs_query.c (submit, status, results, cancel).  Not a
 * contract: jobs.h is. */
#ifndef MESH_MESHD_JOBS_JOBS_INT_H
#define MESH_MESHD_JOBS_JOBS_INT_H

#include "base/thread.h"
#include "meshd/jobs/job_exec.h"
#include "meshd/jobs/jobs.h"
#include "job/job.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define DEFAULT_DEPTH 128u
#define DEFAULT_RETRIES 3u
#define NAME_MAX_LEN 64u

struct mesh_buf;

/* What a job that ended keeps in memory and in its end file (jobs.c,
 * mesh__job_write_end): the journal's counts then, its run's time and
 * rate, and when it ended. */
struct job_sum {
	struct mesh_job_status st;
	double elapsed_s, rate;
	int64_t ended; /* unix seconds */
};

/* One job.  Its lifetime: refs (j->mu) counts the list's reference (while
 * linked) and one for each API call that found it (mesh__jobs_find ...
 * mesh__job_put); the last put of an unlinked job frees it.
 *
 * Its files (jh, spec_jh, res) are its driver's while it runs; once it
 * ended they stay open only while used (files_users, mesh__job_files_get
 * ... _put), and FILES_IDLE_NS after, at most FILES_CACHED jobs' at once:
 * the janitor closes them (jobs.c).  A finished job holds no fd and no
 * per-chunk memory. */
struct job {
	struct job *next;
	struct meshd_jobs *owner;
	uint64_t id;
	unsigned refs; /* j->mu */
	int linked;    /* j->mu: on j->list */
	char *dir, *journal, *results_path, *input_path, *lockdir, *lease_name;
	/* Its journal's owner identity (mesh_job_submit_unsynced's owned): only
	 * this meshd's handles, which present it, may write the journal. */
	char ident[128];
	size_t ident_len;
	/* the spec */
	char *program, *name;
	uint64_t n, timeout_ns;
	unsigned max_workers;
	uint32_t retries;
	int speculate, has_input;

	pthread_mutex_t mu;
	pthread_cond_t cv; /* progress: a batch completed, a chunk buried, the state changed */
	enum meshd_job_state state;
	char *error;
	char *io_error; /* mu: the first write of its results that failed, with the file and why */
	struct mesh_job *jh, *spec_jh; /* set under mu; see above */
	struct mesh_results *res;
	unsigned char *buried;	       /* bit per chunk, known buried; the driver's (NULL once it ended) */
	int files_users;	       /* mu: callers using jh/res now */
	int files_opening;	       /* mu: a caller is opening a finished job's files (cv tells the end) */
	int driver_files;	       /* mu: jh/res are a running driver's */
	uint64_t files_idle_ns;	       /* mu: when the last user of a finished job's files let them go */
	int removed;		       /* mu: `mesh rm` or retention took it: nothing opens its files again */
	int have_sum;		       /* mu: sum holds its counts (it ended) */
	struct job_sum sum;
	int cancel_efd, cancelled;     /* cancel_efd: made by mesh__job_start, closed at the driver's join (-1) */
	struct mesh_thread *th;
	int th_on;
	_Atomic int driver_done; /* the driver returned: the janitor joins it */
	struct meshd_job_exec_stats xs;
	uint64_t t0, done0;
	_Atomic uint64_t t_end; /* when the driver returned, 0 while it runs */
	/* The first result's path (CLOCK_MONOTONIC; 0 = not seen): the
	 * submit arrived, its journal and then its spec were durable (while
	 * the driver runs), the driver's thread was started, the first DONE was durable
	 * (journaled with its result).  xs has the rest. */
	uint64_t t_submit, t_driver;
	_Atomic uint64_t t_journal, t_stored, t_first_done;
	_Atomic int first_logged;
	/* Asked for at submit, adopted by the driver's executor (job_exec.h). */
	struct meshd_job_ahead *ahead;
	/* The driver's results file is opened (created: two fsyncs) on a
	 * helper thread while the first chunk is leased and sent; the first
	 * hook that needs it joins it (jobs.c, res_wait).  t_results: open. */
	pthread_mutex_t res_mu;
	struct mesh_thread *res_th;
	int res_th_on, res_rc; /* res_mu */
	_Atomic uint64_t t_results;
};

/* The state directory's lock file (jobs.c, lock_state). */
#define MESHD_STATE_LOCK "meshd.lock"

struct meshd_jobs {
	struct meshd_core *core;
	char *state, *jobs_dir;
	int lock_fd; /* flock(LOCK_EX) on <state>/meshd.lock for meshd's lifetime */
	uint32_t hash;
	unsigned depth;
	struct meshd_jobs_keep keep;
	pthread_mutex_t mu; /* the list and refs; taken before any job's mu */
	struct job *list;
	uint64_t next_id;
	uint64_t last_id; /* the highest id recorded in jobs/last_id (ids are never given twice) */
	int stopping;
	/* The janitor (jobs.c): joins ended drivers, closes idle files, removes
	 * jobs past the retention.  jan_cv (with mu) wakes it. */
	pthread_t jan;
	int jan_on, jan_kick;
	pthread_cond_t jan_cv;
	/* Sums of the jobs removed, for the /metrics counters (mu). */
	uint64_t gone_done, gone_duplicates, gone_wins;
	struct sfollow *sf; /* jobs_store.c: the store followed (--store), or NULL */
};

/* jobs.c */
/* A new job (not listed; refs 1): 0 with *out, or -errno (-ENOMEM). */
int mesh__job_new(struct meshd_jobs *j, uint64_t id, struct job **out);
void mesh__job_free(struct job *jb);
/* The listed job id with a reference the caller puts back, or NULL. */
struct job *mesh__jobs_find(struct meshd_jobs *j, uint64_t id);
void mesh__job_put(struct job *jb);
/* Makes jb's files usable by the caller until mesh__job_files_put: a
 * running job's are its driver's (jh may still be NULL: it is opening
 * them); an ended one's are opened now when closed and open is set (else
 * jh stays NULL).  0; MESH_E_NOTFOUND (removed meanwhile, *err says so);
 * the open's error with *err. */
int mesh__job_files_get(struct job *jb, int open, char **err);
void mesh__job_files_put(struct job *jb);
/* Wakes the janitor (a job ended, files were opened, a job was removed). */
void mesh__jobs_kick(struct meshd_jobs *j);
char *mesh__job_spec_text(const struct job *jb);
/* The spec a submit writes: SPEC_FORMAT, the job, a vouch for each file
 * written with it (the journal and results file as they are on disk now,
 * the input from memory) and the check line (jobs.c).  NULL: no memory or
 * a file that cannot be read. */
char *mesh__job_spec_seal(const struct job *jb, const void *input, size_t input_len);
/* A spec file's check: 0 when whole (or of the format before, which has
 * none), MESH_E_CORRUPT when torn or damaged.  Pure (the fuzz seam). */
int mesh__job_spec_check(const char *text, size_t len);
/* Parses a spec file's text (modified) into jb: 0 or MESH_E_PARSE. */
int mesh__job_spec_parse(struct job *jb, char *text);
/* The state a job's end file (NUL-terminated text) records. */
enum meshd_job_state mesh__job_end_state(const char *text);
int mesh__job_start(struct job *jb);
/* Removes the lease directory of a job that ended (warns when it cannot). */
void mesh__job_remove_leases(struct job *jb);
/* Writes the end file: what ("complete", "failed", "cancelled"), then the
 * counts of sum when not NULL.  0 or -errno. */
int mesh__job_write_end(struct job *jb, const char *what, const struct job_sum *sum);
/* Logs the first result's path (info) once both the first DONE and, for a
 * job submitted to this meshd, its spec are durable: each of the two
 * threads that stamps one calls it after its stamp. */
void mesh__job_note_first(struct job *jb);
/* A failed attempt's report for people, into b: the attempt, its exit code
 * or signal, then what the executor said (err, n bytes). */
void mesh__job_failure_text(struct mesh_buf *b, uint32_t attempt, int code, const void *err, size_t n);
/* The warning for an attempt whose lease another node took while it ran
 * (the lease_lost hook of both kinds of job; what is "store " or ""). */
void mesh__job_warn_lease_lost(const char *what, uint64_t id, uint64_t cid, uint64_t since_ns, uint64_t ttl_ns);

/* jobs_keep.c: the janitor (started once the jobs are loaded; stopped
 * first by meshd_jobs_stop); jobs/last_id read at open (the highest id
 * ever given, for next_id); name, a directory left half removed
 * (".rm-<id>"), removed at open: 1 when it was one, else 0. */
int mesh__jobs_keep_start(struct meshd_jobs *j);
void mesh__jobs_keep_stop(struct meshd_jobs *j);
int mesh__jobs_read_last_id(struct meshd_jobs *j, char **err);
int mesh__jobs_clean_removing(struct meshd_jobs *j, const char *name);

/* jobs_store.c: stops the follower and its drivers (idempotent); frees them. */
void mesh__jobs_store_stop(struct meshd_jobs *j);
void mesh__jobs_store_free(struct meshd_jobs *j);

#endif
