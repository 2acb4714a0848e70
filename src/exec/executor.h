/* The executor interface: what runs one attempt of a chunk for the chunk
 * driver (driver.c).  The driver owns everything about the job -- leasing,
 * renewing, timeouts, speculation, killing a race's loser, batched
 * completion, where output goes; an executor only runs attempts in numbered
 * slots and says how they ended.  Two implementations fit it: the process
 * executor of `mesh run` and `mesh job harvest` (exec_proc.c: one process
 * group per attempt, pipes, a pidfd) and meshd's slot executor
 * (src/meshd/jobs/job_exec.c: a worker's shared-memory slot, the chunk goes
 * in as a message and its result comes back as one).
 *
 * Caller protocol (the driver, mesh__exec_drive below):
 *   1. create an executor (mesh__exec_proc_new, or any other through a
 *      mesh__exec_make_fn) with the number of slots and a sink: where
 *      output bytes go.
 *   2. for a free slot: ops->start(ex, &chunk).  0: the attempt runs;
 *      1: it could not start (the command cannot be found or run), its
 *      result is ready (go to 5); negative: an error, nothing of the
 *      attempt is left (the slot is free again).
 *   3. wait: ops->events(ex, slot, ...) for each busy slot gives the pollfds
 *      to wait on and lowers *wake to the latest time by which step 4 must
 *      be done even without an event; ops->shared_events, where the
 *      executor has it, gives once the pollfds that serve many slots at
 *      once (a worker's wake-up for every chunk in its ring: given by each
 *      slot, one fd would be polled and read once per slot); poll(2) them
 *      together with the driver's own fds.  For each pollfd that has
 *      revents, call ops->dispatch(ex, slot, pf), slot 0 for a shared one:
 *      output bytes reach the sink from inside this call, and only from
 *      here.
 *   4. ops->status(ex, slot, now, &res): MESH__EXEC_RUNNING, or
 *      MESH__EXEC_EXITED (the attempt's code is known and res is filled,
 *      its output may still come: keep waiting, a cancel does nothing now),
 *      or MESH__EXEC_ENDED (res filled, no more output will come).  Until
 *      ENDED the driver may ops->signal(ex, slot, sig) the attempt: SIGTERM
 *      asks it to stop, SIGKILL cancels it outright, SIGSTOP / SIGCONT
 *      suspend and resume it (a process executor sends them to the
 *      attempt's process group; a slot executor turns them into a cancel
 *      message to its worker).  Repeat 3-4 until ENDED.
 *   5. ops->release(ex, slot): frees what the attempt held; the slot can
 *      take a new start.  Released before it ENDED, the attempt is killed
 *      first (and reaped: nothing of it is left when release returns).
 *   6. ops->free(ex) once no slot is busy (busy slots are released first).
 *
 * Ownership: the chunk's argv and input stay the caller's and must stay
 * valid until release.  The executor owns every fd and child it makes; none
 * outlives release.  The sink is borrowed for the executor's life.  All
 * calls come from one thread (the driver's loop); none blocks except
 * release of a running attempt (the kill and its reap). */
#ifndef MESH_EXEC_EXECUTOR_H
#define MESH_EXEC_EXECUTOR_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

/* The most pollfds one attempt waits on (events' cap). */
#define MESH__EXEC_MAX_FDS 3
/* The most pollfds shared_events gives. */
#define MESH__EXEC_MAX_SHARED 80

/* What one attempt runs. */
struct mesh__exec_chunk {
	uint64_t cid;
	uint32_t attempt;	/* 1-based, as leased */
	unsigned slot;		/* 1..nslots */
	char *const *argv;	/* the expanded command, NULL-terminated (processes; a slot executor may ignore it) */
	const char *input;	/* the chunk's input bytes (its line); NULL = none */
	size_t input_len;
	int stdin_fd;		/* a process's standard input when > 2 (--pipe's block; borrowed
				   for the call), else /dev/null */
};

/* How an attempt ended. */
struct mesh__exec_result {
	int code;	/* exit status k, 128 + s after signal s, 127 / 126 when it could not start */
	int signal;	/* s when it died of signal s, else 0 */
	int start_err;	/* could not start: -ENOENT, -EACCES, ... (code 127 / 126); else 0 */
};

/* status's answers. */
enum { MESH__EXEC_RUNNING = 0, MESH__EXEC_EXITED = 1, MESH__EXEC_ENDED = 2 };

/* The driver's side: the bytes an attempt writes, stdout (out = 1) or
 * stderr (out = 0), in order, each stream on its own.  Returns 0, or a
 * negative code when the driver wants no more of that stream (the
 * executor then drops the rest of it). */
struct mesh__exec_sink {
	int (*output)(void *arg, unsigned slot, int out, const void *p, size_t n);
	void *arg;
};

struct mesh__executor;

struct mesh__executor_ops {
	int (*start)(struct mesh__executor *ex, const struct mesh__exec_chunk *c, struct mesh__exec_result *res);
	unsigned (*events)(struct mesh__executor *ex, unsigned slot, struct pollfd *pf, unsigned cap,
			   uint64_t *wake);
	/* NULL where each slot's events say everything. */
	unsigned (*shared_events)(struct mesh__executor *ex, struct pollfd *pf, unsigned cap);
	void (*dispatch)(struct mesh__executor *ex, unsigned slot, const struct pollfd *pf);
	int (*status)(struct mesh__executor *ex, unsigned slot, uint64_t now, struct mesh__exec_result *res);
	void (*signal)(struct mesh__executor *ex, unsigned slot, int sig);
	void (*release)(struct mesh__executor *ex, unsigned slot);
	void (*free)(struct mesh__executor *ex);
	/* How many more attempts it takes now (the driver leases no more
	 * than that, however many slots are free); NULL: one a free slot. */
	size_t (*room)(struct mesh__executor *ex);
};

/* Every executor starts with this; ops and sink are set by its constructor. */
struct mesh__executor {
	const struct mesh__executor_ops *ops;
	struct mesh__exec_sink sink;
	unsigned nslots;
	/* Set by a constructor whose starts never read the chunk's argv (the
	 * slot executor): the driver then expands no command per chunk and
	 * hands opts->argv as it is. */
	int argv_unused;
};

/* The process executor (exec_proc.c).  argv0 is the command template's
 * first word: searched in PATH now unless it holds a placeholder ("{}",
 * "{#}"; then each start searches its expanded argv[0]).  Each attempt
 * runs as runner.h describes: its own process group, stdin /dev/null, the
 * environment plus MESH_CHUNK, MESH_ATTEMPT, MESH_SLOT, at niceness nice
 * (MESH_EXEC_NICE_INHERIT: this process's).
 * Create it after installing the caller's signal handlers (the children
 * reset them).  Returns 0 with *out set, -ENOENT / -EACCES (argv0 not
 * found / not executable), or -errno; on error nothing is left. */
int mesh__exec_proc_new(const char *argv0, unsigned nslots, int nice, const struct mesh__exec_sink *sink,
			struct mesh__executor **out);

struct mesh_job;
struct mesh_exec_opts;
struct mesh_exec_stats;

/* Makes the executor a run drives: nslots slots, output to sink (copy it).
 * 0 with *out set, or a negative error (the run returns it). */
typedef int (*mesh__exec_make_fn)(void *arg, const struct mesh_exec_opts *o, unsigned nslots,
				  const struct mesh__exec_sink *sink, struct mesh__executor **out);

/* The chunk driver (driver.c) over any executor: mesh_exec_run with the
 * executor that make builds (mesh_exec_run's is the process executor).
 * make is called once, after the signal handlers are installed and before
 * the results directory or the joblog are created; the driver owns and
 * frees what it makes.  Same answers, rules and contract as mesh_exec_run
 * (runner.h), except what runs an attempt and how its output arrives:
 * opts->argv is still expanded per chunk and handed to start (unless the
 * executor is argv_unused: then opts->argv as it is); input lines go with
 * it. */
int mesh__exec_drive(struct mesh_job *job, const struct mesh_exec_opts *opts, mesh__exec_make_fn make, void *arg,
		     struct mesh_exec_stats *stats);

/* The same run in steps, for a loop that drives many (exec/loops.c):
 * mesh__exec_drive is open, then turn, poll and polled until turn says
 * the run is over, then close.
 *
 * mesh__exec_open does all of the run's setup (make included): 0 with *out,
 * or the error mesh__exec_drive would return (stats say where; nothing is
 * left).  mesh__exec_turn leases and starts what it may (a lease may wait
 * on the job's store), then gives the fds to poll and the timeout in ms
 * (-1: none), which stay valid until the next call on d: 0; or 1 when the
 * run is over (nothing is running or completing).  mesh__exec_polled takes
 * what the poll set in those fds' revents: k is the poll's answer (how
 * many of them are ready, or -errno; -EINTR counts as none).
 * mesh__exec_close stops the completer, releases everything (it may block:
 * an attempt still running is killed and reaped), frees d and returns the
 * run's answer.  One thread at a time calls these for a given d. */
struct mesh__drive;
int mesh__exec_open(struct mesh_job *job, const struct mesh_exec_opts *opts, mesh__exec_make_fn make, void *arg,
		    struct mesh_exec_stats *stats, struct mesh__drive **out);
int mesh__exec_turn(struct mesh__drive *d, struct pollfd **pf, nfds_t *n, int *timeout);
void mesh__exec_polled(struct mesh__drive *d, int k);
int mesh__exec_close(struct mesh__drive *d);
/* Drives d on the calling thread until it is over, then closes it: its
 * answer (the rest of mesh__exec_drive). */
int mesh__exec_go(struct mesh__drive *d);

#endif
