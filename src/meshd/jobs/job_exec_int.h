/* job_exec.c (the slot executor) and job_ahead.c (the workers it asks the
 * core for, on helper threads).  Internal to src/meshd/jobs (see job_exec.h). */
#ifndef MESH_MESHD_JOBS_JOB_EXEC_INT_H
#define MESH_MESHD_JOBS_JOB_EXEC_INT_H

#include "base/thread.h"
#include "meshd/jobs/job_exec.h"
#include "meshd/core/ops.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

/* A worker asked for from the core on a helper thread (the core's start
 * blocks): by the executor, or ahead of it by the job's submit
 * (job_exec.h), which gets it on its own thread (meshd_job_ahead_run).
 * It is got once its slot is armed (before the spawn of one spawned for
 * it, meshd_job_worker_get_armed; when `run` is sent; or it was online
 * already): the executor attaches it then and sends it chunks while it
 * starts and maps the slot; its pid comes once the spawn returned (h is
 * read and written under mu).  A thread then waits for its `online`
 * (done).  kick_fd is told at each of the two; -1 while nobody listens
 * (asked ahead, not adopted yet).  busy: an ahead's run has not ended
 * (its thread not started yet): a join waits for it. */
struct meshd_job_ahead {
	struct meshd_core *core;
	const char *program;
	struct meshd_job_exec_stats *st;
	struct mesh_thread *th;
	pthread_mutex_t mu;
	pthread_cond_t cv;	/* busy ended */
	int got, done, kick_fd; /* mu */
	int busy;		/* mu */
	int rc;			/* got: rc, err, h */
	char *err;
	struct meshd_job_worker h;
	int online_rc;		/* done: 0, or it did not come online (online_err) */
	int launch_rc;		/* done: its spawn failed after got (online_rc too) */
	char *online_err;
	int counted, joined;	/* in st->starting; its thread joined (or none) */
};

/* job_ahead.c */
/* Sets *stamp to now unless it was set already. */
void mesh__jx_stamp_first(_Atomic uint64_t *stamp);
/* Asks the core for a worker of program on a thread of its own; kick_fd
 * (or -1) is told when it is got and when it is online.  0 with *out set,
 * or a negative errno. */
int mesh__jx_getter_start(struct meshd_core *core, const char *program, struct meshd_job_exec_stats *st, int kick_fd,
			  struct meshd_job_ahead **out);
/* 0: still asking; 1: got (rc, err, h); 2: done as well (online_rc). */
int mesh__jx_getter_state(struct meshd_job_ahead *g);
/* Waits for the getter's thread (once).  Its result stays for the caller,
 * who frees g with mesh__jx_getter_free. */
void mesh__jx_getter_join(struct meshd_job_ahead *g);
void mesh__jx_getter_free(struct meshd_job_ahead *g);

#endif
