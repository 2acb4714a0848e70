/* The insides of meshd's job runner, shared by jobs.c (the homes, the
 * drivers), jobs_query.c (submit, status, results, cancel) and
 * jobs_keep.c (the janitor, retention, removal).  Not a contract: jobs.h
 * is.
 *
 * Threads (docs/threads.md): a home's loops that drive the running jobs'
 * chunks, pool runs that open and close them, the janitor thread, a store home's follower thread
 * (job/home_pg.c), the API's op threads calling in.  Locks, in this order:
 * j->mu (the list and refs), then a job's mu; a home job's own lock
 * (job/home.h) is a leaf, and no job lock is held across a call into the
 * core or a home call that blocks on I/O, except the cancel's record. */
#ifndef MESH_MESHD_JOBS_JOBS_INT_H
#define MESH_MESHD_JOBS_JOBS_INT_H

#include "base/thread.h"
#include "meshd/jobs/job_exec.h"
#include "meshd/jobs/jobs.h"
#include "job/home.h"
#include "job/job.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define DEFAULT_DEPTH 128u
#define DEFAULT_RETRIES 3u
#define NAME_MAX_LEN 64u
/* A home's loops at most: MESHD_JOB_LOOPS (0: none), else two a CPU, up to this. */
#define MAX_LOOPS 4u

struct mesh_buf;

/* A home the runner drives: [0] the state directory (the API's jobs), [1]
 * a store (`meshd --store`). */
struct rhome {
	struct meshd_jobs *j;
	struct mesh_home *h; /* NULL: none */
	const char *tag;     /* its jobs' log lines begin "<tag>job=": "" or "store " */
	int keep;	     /* its ended jobs are kept under --keep-jobs/--keep-for only */
	/* The loops that drive its jobs' runs (exec/loop.h), made as needed
	 * (j->mu), at most j->max_loops: a run whose lease waits on a store
	 * stalls the runs on its loop, and no home's waits stall another's. */
	struct mesh_exec_loop *loops[MAX_LOOPS];
	unsigned nloops;
};

/* One job.  Its lifetime: refs (j->mu) counts the list's reference (while
 * linked) and one for each caller that found it (mesh__jobs_find ...
 * mesh__job_put); the last put of an unlinked job frees it.
 *
 * Its home's handles (hj->jh, what keeps its results) are its driver's
 * while it runs; once it ended they stay open only while used
 * (files_users, mesh__job_files_get ... _put), and FILES_IDLE_NS after, at
 * most FILES_CACHED jobs' at once: the janitor closes them (jobs_keep.c).
 * A finished job holds no fd and no per-chunk memory. */
struct job {
	struct job *next;
	struct rhome *rh;
	struct mesh_home_job *hj; /* the home's: its spec (hj->spec), its handles */
	uint64_t id;
	unsigned refs; /* j->mu */
	int linked;    /* j->mu: on j->list */
	int offer;     /* a store's offer: served when this catalog has its program */
	unsigned told; /* "not served here" said */
	unsigned max_workers;

	pthread_mutex_t mu;
	pthread_cond_t cv; /* progress: a batch completed, a chunk buried, the state changed */
	enum mesh_home_state state;
	char *error;
	int no_retry;	       /* mu: an ERROR a look would only repeat: not driven again */
	int files_users;       /* mu: callers using its home's handles now */
	int files_opening;     /* mu: a caller is opening a finished job's handles (cv tells the end) */
	int driver_files;      /* mu: the handles are a running driver's */
	int run_files;	       /* mu: the handles open are a run's (open(run)) */
	uint64_t files_idle_ns; /* mu: when the last user of a finished job's handles let them go */
	int removed;	       /* mu: `mesh rm` or retention took it: nothing opens its handles again */
	int have_sum;	       /* mu: sum holds its counts (it ended) */
	struct mesh_home_sum sum;
	int cancel_efd, cancelled; /* cancel_efd: made by mesh__job_start, closed at the driver's join (-1) */
	_Atomic int leave;	   /* enum meshd_job_leave: how its workers leave a cancelled run */
	/* Its driver: a run of the pool (th) opens its files and hands its
	 * run to a loop of its home; a run that is over is closed on another
	 * pool run, which ends with driver_done (set under mu, cv told). */
	struct mesh_thread *th;
	int th_on;
	_Atomic int driver_done; /* the driver ended: the janitor joins th */
	struct meshd_job_exec_stats xs;
	uint64_t t0, done0;
	/* The DONE count its home told with the job (a store's row, at the
	 * follower's last look; have_found_done): the driver's done0 without
	 * a round trip to the store before its first lease. */
	uint64_t found_done;
	int have_found_done;
	_Atomic uint64_t t_end; /* when the driver returned, 0 while it runs */
	/* The first result's path (CLOCK_MONOTONIC; 0 = not seen): the
	 * submit arrived, its journal and then its spec were durable (while
	 * the driver runs), the driver's thread was started, the first DONE was durable
	 * (journaled with its result).  xs and hj->t_results have the rest. */
	uint64_t t_submit, t_driver;
	_Atomic uint64_t t_journal, t_stored, t_first_done;
	_Atomic int first_logged;
	_Atomic uint64_t ev_at; /* when its last progress event was posted (monotonic) */
	/* Asked for at submit, adopted by the driver's executor (job_exec.h). */
	struct meshd_job_ahead *ahead;
	/* A run whose home keeps results of hj->result_max bytes at most: the
	 * slot executor's replies go through cap_output (jobs.c), on the
	 * driver's loop thread. */
	struct mesh__exec_sink inner;
	struct meshd_job_exec_arg *xa;
	size_t over_len; /* the size of the reply cut by cap_output, 0 none */
	_Atomic int toobig; /* a reply over result_max buried its chunk and stopped the run */
};

struct meshd_jobs {
	struct meshd_core *core;
	unsigned depth;
	struct meshd_jobs_keep keep;
	pthread_mutex_t mu; /* the list and refs; taken before any job's mu */
	struct job *list;   /* every home's */
	int stopping;
	/* The janitor (jobs_keep.c): joins ended drivers, closes idle files,
	 * removes jobs past the retention.  jan_cv (with mu) wakes it. */
	pthread_t jan;
	int jan_on, jan_kick;
	pthread_cond_t jan_cv;
	/* Sums of the jobs removed, for the /metrics counters (mu). */
	uint64_t gone_done, gone_duplicates, gone_wins;
	struct rhome homes[2];
	unsigned max_loops;
	unsigned finishing; /* mu: the pool runs closing runs that are over (jobs.c:finish_main) */
	char *catalog; /* the catalog directory: its programs go in a store's node row */
};

/* jobs.c */
/* A new job of hj (not listed; refs 1): 0 with *out, or -ENOMEM (hj is
 * then still the caller's). */
int mesh__job_new(struct rhome *rh, struct mesh_home_job *hj, struct job **out);
/* Home rh's job id with a reference the caller puts back, or NULL. */
struct job *mesh__jobs_find(struct rhome *rh, uint64_t id);
void mesh__job_put(struct job *jb);
/* Waits for jb's driver to end, joins its thread (its run of the pool
 * back) and closes its cancel eventfd; nothing when it has none. */
void mesh__job_driver_join(struct job *jb);
/* Makes jb's home handles usable by the caller until mesh__job_files_put:
 * a running job's are its driver's (hj->jh may still be NULL: it is
 * opening them); an ended one's are opened now when closed and open is set
 * (else they stay closed).  0; MESH_E_NOTFOUND (removed meanwhile, *err
 * says so); the open's error with *err. */
int mesh__job_files_get(struct job *jb, int open, char **err);
void mesh__job_files_put(struct job *jb);
/* Wakes the janitor (a job ended, files were opened, a job was removed). */
void mesh__jobs_kick(struct meshd_jobs *j);
/* Starts jb's driver (j->mu held: a stop must find it).  0 or -errno. */
int mesh__job_start(struct job *jb);
/* mesh__job_start's failure rc: jb is in error, saying why (jb->mu not held). */
void mesh__job_start_failed(struct job *jb, int rc);
/* Logs the first result's path (info) once both the first DONE and, for a
 * job submitted to this meshd, its spec are durable: each of the two
 * threads that stamps one calls it after its stamp. */
void mesh__job_note_first(struct job *jb);

/* jobs_keep.c: the janitor (started once the jobs are loaded; stopped
 * first by meshd_jobs_stop). */
int mesh__jobs_keep_start(struct meshd_jobs *j);
void mesh__jobs_keep_stop(struct meshd_jobs *j);

#endif
