/* meshd's slot executor: runs a job's chunk attempts on warm workers of one
 * program through their shared-memory slots, for the chunk driver
 * (exec/executor.h has the protocol; exec/runner.h the driver).
 *
 * The driver's slots are attempts in flight: with K workers at most and a
 * pipeline of D chunks per worker, the driver runs K x D slots.  An attempt
 * that starts waits in a queue until a worker has room; then its chunk
 * goes into that worker's request ring as a CHUNK message (shm/ring.h),
 * and the worker's REP is its result (stdout, stream 1) while an ERR is a
 * failed attempt (status 1, the text on stream 0).  Workers come from the
 * core (ops.h: meshd_job_worker_get, on helper threads so the driver never
 * blocks) as demand asks: ceil(attempts in flight / D), at most K; the
 * first comes from zero.  A worker that is coming up joins once its slot
 * is armed (the `run` sent), before it answers `online`: its first chunks
 * are in its ring when it maps the slot; one that then does not come
 * online gives its chunks back unstarted (no attempt counted) and counts
 * as a worker that could not be started (below).  They go back to the core, idle, when the
 * executor is freed (the idle TTL then reaps them).
 *
 * An upgrade (a load of a changed image, a rollback; ops.h): a worker of
 * the old image gets no more chunks; once it answered those it holds it
 * goes back to the core, which exits it, and demand takes workers of the
 * new image.  No chunk is moved or cut: each ends where it was sent.
 *
 * Failures:
 *   - a worker that dies: its replies already in the ring are taken; the
 *     chunk it was working on (the worker's own request count says which)
 *     ends with the worker's exit status (128 + signal) and the crash
 *     report (status line and output tail) on stream 0 -- the driver
 *     records the failed attempt at once, so the chunk is pending again
 *     (or buried after --retries); the chunks queued behind it in its ring
 *     had not started and go to another worker, no attempt counted;
 *   - timeout_ns (0: the worker's program's call_timeout): a chunk at the
 *     head of a worker's ring that long gets the worker killed (and
 *     replaced, demand permitting); it ends with 128 + SIGKILL and a
 *     report that says the worker hung, or, not taken yet, goes to another
 *     worker; a worker whose heartbeat stopped with chunks in its ring is
 *     the core's heal check's (ops.h): it dies as any worker does;
 *   - a signal from the driver (a lost speculative race, a stop): the
 *     attempt ends at once; when it was already in a worker's ring its
 *     reply, when it comes, is dropped and counted (stats.ignored_replies);
 *     a worker that still owes such replies when the executor is freed is
 *     killed rather than given back (no later user may read them), or,
 *     when the job was cancelled (cfg.leave), halted: the chunk in hand
 *     ends, the rest of its ring is dropped with the slot, and it goes
 *     back warm (killed if that takes more than its stop grace);
 *   - a worker that cannot be started: one queued attempt ends with status
 *     127 and the report, and the next start waits (200 ms doubling, at
 *     most 5 s).
 * The executor breaks the executor.h rule that output reaches the sink
 * only from dispatch in one place: a dead worker's report is handed over
 * from status (same thread, before the attempt is ENDED). */
#ifndef MESH_MESHD_JOBS_JOB_EXEC_H
#define MESH_MESHD_JOBS_JOB_EXEC_H

#include "exec/executor.h"

#include <stdatomic.h>
#include <stdint.h>

struct meshd_core;

/* How the workers that still owe replies (chunks in their rings) leave
 * when the executor is freed. */
enum meshd_job_leave {
	MESHD_JOB_LEAVE_KILL, /* killed at once: meshd stops, the job failed, `mesh cancel --kill-workers` */
	MESHD_JOB_LEAVE_HALT, /* a cancel: halted once the chunk in hand is answered, and given back
			       * warm (meshd_job_worker_halt); killed when that takes longer than
			       * the program's stop grace */
};

struct meshd_job_exec_cfg {
	struct meshd_core *core;
	const char *program;	/* borrowed for the executor's life */
	unsigned max_workers;	/* K >= 1 */
	unsigned depth;		/* D >= 1: chunks in flight per worker */
	uint64_t timeout_ns;	/* per chunk on a worker; 0 = its program's call_timeout (0: none) */
	/* enum meshd_job_leave, read when the executor is freed (set by any
	 * thread before it asks the driver to stop); NULL: KILL. */
	const _Atomic int *leave;
};

/* Counters, read by the job (any thread; relaxed). */
struct meshd_job_exec_stats {
	_Atomic unsigned workers;	   /* held now, serving */
	_Atomic unsigned starting;	   /* being started */
	_Atomic uint64_t worker_deaths;	   /* workers that died under the job */
	_Atomic uint64_t worker_kills;	   /* killed for a timeout or a signal */
	_Atomic uint64_t ignored_replies;  /* replies to attempts already ended (lost races) */
	_Atomic uint64_t requeued;	   /* chunks moved to another worker unstarted */
	/* The first chunk's path, CLOCK_MONOTONIC, 0 = not yet: a worker
	 * asked for (a getter started), an attempt started (leased), a worker
	 * attached (its slot armed: the `run` sent, maybe not online yet), a
	 * chunk sent into a slot, a worker's `online` seen by meshd, a result
	 * taken. */
	_Atomic uint64_t first_ask_ns, first_start_ns, first_worker_ns, first_sent_ns;
	_Atomic uint64_t first_online_ns, first_reply_ns;
};

/* A job's first worker asked for before its executor exists: at submit,
 * so that the spawn (the long pole from zero workers) runs while the job
 * is stored, its driver starts and its first chunks are leased.  The
 * executor adopts it as a worker coming (meshd_job_exec_arg.ahead).
 * new makes it; the submit's own thread then gets the worker
 * (meshd_job_ahead_run): on a new thread, its start waited for a CPU
 * beside the submit's work, all on the way to the spawn (docs/DESIGN.md,
 * "Figures behind the code").  program is borrowed until the worker is adopted or
 * dropped; st counts it as starting.  0 or -errno. */
struct meshd_job_ahead;
int meshd_job_ahead_new(struct meshd_core *core, const char *program, struct meshd_job_exec_stats *st,
			struct meshd_job_ahead **out);
/* Gets a's worker on this thread (want 0: gets none, a ends as a failed
 * start) and waits for its `online` on a thread of its own.  Called once
 * for every a made by new; a drop or an executor's join waits for it. */
void meshd_job_ahead_run(struct meshd_job_ahead *a, int want);
/* One never adopted: waits for its getter and gives the worker back idle. */
void meshd_job_ahead_drop(struct meshd_job_ahead *a);

/* A mesh__exec_make_fn (executor.h) for mesh__exec_drive: arg is a
 * struct meshd_job_exec_cfg plus its stats (struct meshd_job_exec_arg). */
struct meshd_job_exec_arg {
	struct meshd_job_exec_cfg cfg;
	struct meshd_job_exec_stats *stats;
	/* A worker asked for ahead (of cfg.program), or NULL: make adopts
	 * it (and sets this NULL), whether it succeeds or not; one left here
	 * (make was never called) is the caller's to drop. */
	struct meshd_job_ahead *ahead;
};
int meshd_job_exec_make(void *arg, const struct mesh_exec_opts *o, unsigned nslots, const struct mesh__exec_sink *sink,
			struct mesh__executor **out);

#endif
