/* The exec runner: one node that runs a command per chunk of an opened job
 * on N local slots.  It is the loop behind `mesh run` (N slots, progress)
 * and `mesh job harvest ... -- CMD ARG...` (1 slot, no progress): the chunk
 * driver (driver.c) over the process executor (exec_proc.c; executor.h).
 *
 * Caller protocol:
 *   1. mesh_job_submit + mesh_job_open (job/job.h); the caller owns the job.
 *   2. fill struct mesh_exec_opts (MESH_EXEC_OPTS_INIT, then argv and what
 *      differs), call mesh_exec_run(job, &opts, &stats).
 *   3. map the answer to an exit code (MESH_EXEC_* below), print the
 *      summary from stats if wanted, mesh_job_close(job).
 *
 * One chunk = one process: argv with every "{}" inside an argument replaced
 * by the chunk's value (its line of opts->input, else its decimal chunk id)
 * and every "{#}" by the chunk id; when no argument holds "{}" the value is
 * appended as one last argument (GNU parallel's rule).  argv[0] is searched
 * in PATH once, in the parent.  The child runs in its own process group with
 * default signal dispositions, stdin from /dev/null, the parent's
 * environment plus MESH_CHUNK=<cid>, MESH_ATTEMPT=<n>, MESH_SLOT=<1..N>, and
 * its whole process group dies with the runner, however the runner ends
 * (SIGKILL included): the leader by PR_SET_PDEATHSIG, the rest of the group
 * by a keeper process (proc/proc.h) that the process executor starts once a
 * run.  What leaves the group (setsid, setpgid) is not covered, nor what
 * is left of a group after its leader ended and was reaped.
 *
 * Outcome of one attempt:
 *   exit 0                       -> mesh_job_complete, once its output is
 *                                   written whole (batched: chunks that end
 *                                   close together share one fsync)
 *   exit k != 0                  -> mesh_job_fail(cid, k)
 *   killed by signal s           -> mesh_job_fail(cid, 128 + s)
 *   timed out (timeout_ns, or    -> SIGKILL to its process group, then
 *     timeout_pct)                  mesh_job_fail(cid, 128 + SIGKILL)
 *   cannot exec (ENOENT, EACCES) -> mesh_job_fail(cid, 127 or 126), repeated
 *                                   until the chunk is buried: trying again
 *                                   cannot help
 *   its output could not be kept -> the attempt fails (status 1 when it had
 *     (the spill file failed)       exited 0; it is killed at once), with a
 *                                   note naming the spill directory and the
 *                                   errno; nothing of it is written
 * While a chunk runs its lease is renewed every ttl/4.  When the chunk turns
 * out to be DONE elsewhere (a speculative race lost, or our lease was stolen
 * and the thief completed it) its process group is killed and nothing is
 * recorded for it -- unless it has ended already (its end waiting to be
 * read when the renew came back late: a store out of reach): then it is
 * completed anyway.  A speculative copy that finishes second, and such an
 * attempt, come back IGNORED (counted as a duplicate).
 *
 * What is written where (the runner never prints anything else):
 *   out_fd / err_fd: each chunk's stdout / stderr, captured through pipes
 *     and written in one piece when the chunk ends -- never interleaved with
 *     another chunk's.  Output beyond 4 MiB a stream spills to an unlinked
 *     file in tmpdir (else $TMPDIR, else /tmp; nowhere else), so no size caps
 *     a chunk.  -1 = discard.  The modes of GNU parallel:
 *     keep_order (-k): outputs in chunk order: a finished chunk's output
 *       waits until every chunk before it is settled (DONE, or buried as
 *       far as this call knows); held outputs beyond 64 MiB in all go to
 *       spill files; the held chunks' leases are renewed, and they are
 *       completed only once written.  When nothing is left to run here,
 *       whatever still waits is written in order (a chunk another node
 *       holds then no longer blocks it).  Not with results_dir,
 *       line_buffer or ungroup (ignored there).
 *     tag (--tag): each line of both streams starts with the chunk's
 *       arguments (mesh_exec_input_line, else the chunk id), or tagstring
 *       expanded, and a TAB; a last line without a newline is not closed.
 *   The output of a failed attempt that is tried again (retries) is
 *     dropped, as GNU parallel drops it: only the last attempt's is
 *     written (the note says each failure); with line_buffer or ungroup
 *     what went out while it ran stays out.
 *     line_buffer (--line-buffer): whole lines as soon as they come (lines
 *       of chunks may mix, never within a line; a line longer than 4 MiB is
 *       written in pieces); the rest at the end.
 *     ungroup (-u): bytes written as they are read.
 *   With results_dir set, nothing goes to out_fd/err_fd; instead
 *     <results_dir>/<cid>/stdout, stderr and status ("exit 0\n", "exit 3\n",
 *     "signal 9\n", "timeout\n") are replaced atomically (temp, fsync,
 *     rename, fsync dir) when an attempt ends, before its completion is
 *     journaled -- a DONE chunk's results survive a crash.  The runner
 *     writes them from pipes (mesh_write_all: the fault seam) as they come.
 *   A chunk is completed only after its output is written in full to its
 *     destination.  A write error there stops the run: no more starts,
 *     running chunks are killed (their leases released), the chunk whose
 *     output failed records nothing (so a rerun runs and prints it), and the
 *     call returns MESH_E_OUTPUT after a note ("mesh: cannot write the
 *     output of chunk 7: No space left on device"; "the results of chunk
 *     7" when its results directory cannot be made) -- or -EPIPE, without a
 *     note, when the reader went away (`| head`, SIGPIPE ignored).
 *   joblog: a file (emptied, or appended to, as joblog_mode says), one line
 *     a finished attempt in GNU parallel's --joblog columns: Seq (cid + 1),
 *     Host ":", Starttime (epoch s, "%.3f"), JobRuntime ("%10.3f"), Send 0,
 *     Receive (stdout bytes), Exitval, Signal (a signal death: 0, s; a
 *     timeout: -1, 9; else k, 0), Command (the command as one shell line,
 *     mesh_exec_template_render).  Killed copies (lost races, interrupts,
 *     halts) are not logged.  A write error stops the run like an output
 *     error.
 *   note_fd: one line per failed attempt, buried chunk, or exec error, e.g.
 *     "mesh: chunk 17 failed (exit 3), attempt 1; will retry"; -1 = none.
 *   progress_fd: a one-line progress bar redrawn at most 10 times a second
 *     (done/total, rate, ETA); -1 = none.  On a terminal it is redrawn in
 *     place and coloured unless NO_COLOR is set; elsewhere (a file, a
 *     pipe) each line starts with "\r" and holds no escape sequence.  The
 *     caller decides whether it is wanted (mesh run: on a TTY or when
 *     asked).
 *
 * Control (GNU parallel's options):
 *   halt_*: counted over the chunks that end in this call: succeeded, or
 *     failed for good (buried), or either (halt_what).  The count is
 *     halt_count chunks, or halt_percent of the job's chunks.  SOON: start
 *     nothing more, let the running chunks end (recorded as usual).  NOW:
 *     SIGTERM to every running chunk's group (SIGKILL after 2 s); those
 *     record nothing and their leases are released.  Answer MESH_EXEC_HALTED
 *     (after an interrupt: MESH_EXEC_INTERRUPTED).
 *   timeout_pct: once 3 chunks are DONE in this call, an attempt running
 *     longer than timeout_pct% of their median runtime is killed as a
 *     timeout (with timeout_ns too, the earlier limit wins).
 *   delay_ns: two starts at least this far apart.  load_max / memfree_bytes:
 *     while the 1-minute load average is >= load_max or MemAvailable is
 *     below memfree_bytes, nothing starts while a chunk runs (one always
 *     may: a limit never met must not hang the run); looked at again every
 *     250 ms.  Read only when set.
 *   nice: the chunks' niceness (setpriority in the child, absolute as
 *     GNU parallel's; MESH_EXEC_NICE_INHERIT: theirs is this process's).
 *
 * Signals: with handle_signals set, SIGINT, SIGTERM, SIGTSTP and SIGHUP
 * are caught for the duration of the call (a SIGTSTP or SIGHUP ignored by
 * the caller stays ignored: no job control, nohup).  SIGHUP does what GNU
 * parallel's manual says of it ("complete running jobs but do not start
 * new jobs"): nothing more starts, a note says so, the running chunks
 * finish and are recorded as usual, and the call returns MESH_EXEC_HANGUP
 * (MESH_EXEC_COMPLETE if that was the last of the job); a SIGINT/SIGTERM
 * after it stops them as below.  The first SIGINT/SIGTERM stops launching,
 * sends SIGTERM to every running chunk's process group, SIGKILL after 2 s
 * (a second signal: at once).
 * Chunks that had already exited are completed as usual; the signalled ones
 * record nothing (an interrupted attempt is not the chunk's failure) and
 * their leases are released (renewed to expire now), so a rerun takes them
 * at once.  The call then returns MESH_EXEC_INTERRUPTED.  SIGTSTP (Ctrl-Z)
 * sends SIGSTOP to every running chunk's group (they are out of the
 * terminal's reach), then stops the process itself with SIGSTOP; on SIGCONT
 * it sends SIGCONT to the groups, renews every lease at once and does not
 * count the stopped time against timeouts.  The handlers write to a
 * self-pipe; the old dispositions are restored on return.
 * Children are reaped through pidfds (Linux >= 5.3); the caller must not
 * reap them (no waitpid(-1) elsewhere during the call).
 *
 * Threads: completions and results fsyncs run on one helper thread while the
 * loop keeps launching; the job must allow calls from two threads (job.h
 * does).  Not reentrant: one mesh_exec_run at a time per process. */
#ifndef MESH_EXEC_RUNNER_H
#define MESH_EXEC_RUNNER_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

struct mesh_job;
struct mesh_exec_input;

/* Answers of mesh_exec_run (not errors). */
enum {
	MESH_EXEC_COMPLETE = 0,	   /* every chunk of the job is DONE */
	MESH_EXEC_FAILED = 1,	   /* nothing left to run: every chunk is DONE or buried, some buried */
	MESH_EXEC_LIMIT = 2,	   /* max_chunks attempts were started by this call; the job may be incomplete */
	MESH_EXEC_INTERRUPTED = 5, /* stopped by SIGINT/SIGTERM (handle_signals) */
	MESH_EXEC_HALTED = 6,	   /* stopped by the halt rule (halt_mode) */
	MESH_EXEC_HANGUP = 7,	   /* SIGHUP (handle_signals): no new chunk was started after it, the
				    * running ones finished; the job is not complete */
};

/* When the halt rule stops the run (GNU parallel's --halt). */
enum {
	MESH_EXEC_HALT_NEVER = 0,
	MESH_EXEC_HALT_SOON = 1, /* start nothing more; let running chunks finish */
	MESH_EXEC_HALT_NOW = 2,	 /* kill running chunks at once */
};
/* What the halt rule counts: chunks that failed for good (buried; an
 * attempt that is retried does not count), that succeeded, or either. */
enum { MESH_EXEC_HALT_FAIL = 0, MESH_EXEC_HALT_SUCCESS = 1, MESH_EXEC_HALT_DONE = 2 };
/* An existing joblog: emptied first (header written: a new run), appended
 * to with the header only if it is empty (a resumed run), or appended to
 * without a header (GNU parallel's --joblog +FILE). */
enum { MESH_EXEC_JOBLOG_NEW = 0, MESH_EXEC_JOBLOG_APPEND = 1, MESH_EXEC_JOBLOG_PLUS = 2 };
/* What a setup error that mesh_exec_run returns before anything ran was
 * about (stats.failed_at). */
enum { MESH_EXEC_AT_NONE = 0, MESH_EXEC_AT_COMMAND, MESH_EXEC_AT_JOBLOG, MESH_EXEC_AT_RESULTS };

/* For a caller that keeps each chunk's result itself (meshd's jobs,
 * docs/jobs.md) instead of having output written to out_fd/results_dir.
 * Every callback may be NULL.  arg is passed to each.
 *   result: on the loop thread, for an attempt that ended with code 0 whose
 *     chunk is about to be completed: its whole stdout, in memory (one
 *     that spilled past MESH_CAPTURE_MEM_MAX is read back from its spill
 *     file first; that read failing counts as the hook's error).
 *     Non-zero: the run stops as for an output error (the chunk is not
 *     completed; MESH_E_OUTPUT).
 *   commit: on the completer thread, before each batch of completions is
 *     appended to the journal (so results reach the disk before their DONE
 *     records).  Non-zero: nothing of the batch is completed and the run
 *     stops with that error.  Not called for a batch whose every result is
 *     in its DONE (results_in_done).
 *   results_in_done: a result of at most the job's mesh_job_result_max
 *     bytes is also written in its chunk's DONE record, durable with it
 *     (one fsync a batch, not two); the caller's own copy (the result hook)
 *     may then be lost in a crash and is rebuilt from the journal
 *     (mesh_rec_each_result, job/record.h).
 *   failed: on the loop thread, for each failed attempt recorded: its status
 *     code, its stderr (what the executor gave as stream 0), and whether
 *     this failure buried the chunk.
 *   cancel_fd: >= 0: once readable, the run stops as after SIGTERM (running
 *     attempts are killed, record nothing, their leases are released) and
 *     returns MESH_EXEC_INTERRUPTED.  The fd is polled, never read. */
struct mesh_exec_hooks {
	int (*result)(void *arg, uint64_t cid, uint32_t attempt, const void *p, size_t n);
	int (*commit)(void *arg);
	void (*committed)(void *arg); /* completer thread: a batch was completed (its DONE records are durable) */
	void (*failed)(void *arg, uint64_t cid, uint32_t attempt, int code, const void *err, size_t n, int buried);
	/* An attempt's lease was taken over while it ran (its renewal came
	 * too late: since_ns since the last good one, against a lease of
	 * ttl_ns); it runs on, and its completion may come back IGNORED.  Once
	 * an attempt; also a note on note_fd.  NULL = the note alone. */
	void (*lease_lost)(void *arg, uint64_t cid, uint64_t since_ns, uint64_t ttl_ns);
	int cancel_fd;
	int results_in_done;
	void *arg;
};

struct mesh_exec_opts {
	char *const *argv;	/* the command template, NULL-terminated, argv[0] non-empty; borrowed */
	unsigned slots;		/* chunks run at once; 0 = 1 */
	const struct mesh_exec_input *input; /* chunk i's value = line i (exec/input.h); NULL = chunk id; borrowed */
	uint64_t ttl_ns;	/* lease TTL; renewed every ttl/4 while a chunk runs; 0 = 10 s */
	uint64_t timeout_ns;	/* per attempt; 0 = none */
	int speculate;		/* idle slots may take speculative copies of stragglers */
	/* With speculate: a second handle on the same job, opened under another
	 * node name, through which idle slots take copies of stragglers that
	 * this node's own slots run (the engine never hands a node a copy of a
	 * chunk it holds itself).  Borrowed; NULL = copies of other nodes'
	 * chunks only. */
	struct mesh_job *spec_job;
	uint64_t max_chunks;	/* stop after starting this many attempts (harvest's maxiter); 0 = no limit */
	const char *results_dir; /* NULL = group output to out_fd/err_fd; created if missing */
	int out_fd, err_fd;	/* -1 = discard */
	int note_fd;		/* failure notes; -1 = none */
	int progress_fd;	/* progress bar; -1 = none */
	int handle_signals;	/* SIGINT/SIGTERM stop the run, SIGTSTP suspends it (see above) */
	/* GNU parallel's output modes (mesh run); at most one of line_buffer and ungroup. */
	int keep_order;		/* -k: outputs in chunk order; a finished chunk's output waits (spilled past the memory limit) for the ones before it */
	int tag;		/* --tag: each output line starts with the chunk's arguments (mesh_exec_input_line) and a TAB */
	const char *tagstring;	/* --tagstring: with tag, the text is this with its replacement strings
				 * expanded (mesh_exec_template_string, in the attempt's slot); borrowed */
	const struct mesh_exec_rpls *rpls; /* the replacement strings of argv and tagstring (exec/template.h);
					    * NULL = the built-in ones; borrowed */
	int line_buffer;	/* --line-buffer: whole lines as soon as they come; lines of chunks may mix */
	int ungroup;		/* -u: bytes passed on as they come */
	const char *joblog;	/* --joblog FILE: one line per finished attempt in GNU parallel's columns; NULL = none */
	int joblog_mode;	/* MESH_EXEC_JOBLOG_*: how an existing joblog is treated */
	/* The halt rule (--halt now,fail=1 / soon,fail=10% / now,success=1). */
	int halt_mode;		/* MESH_EXEC_HALT_* */
	int halt_what;		/* MESH_EXEC_HALT_FAIL, _SUCCESS, _DONE: what is counted */
	uint64_t halt_count;	/* halt once this many chunks failed (or succeeded, or ended) */
	unsigned halt_percent;	/* 1..100: halt once this share of the chunks failed (or
				 * succeeded, or ended); 0 = use halt_count */
	unsigned timeout_pct;	/* --timeout N%: kill an attempt running over N% of the median runtime of done chunks; 0 = off */
	uint64_t delay_ns;	/* --delay: at least this long between two starts */
	double load_max;	/* --load: start nothing while the 1-minute load average is >= this; 0 = off */
	uint64_t memfree_bytes;	/* --memfree: start nothing while MemAvailable is below this; 0 = off */
	int nice;		/* --nice: the chunks' niceness; MESH_EXEC_NICE_INHERIT = inherit */
	const char *tmpdir;	/* where output spills; NULL = $TMPDIR, else /tmp */
	const struct mesh_exec_hooks *hooks; /* NULL = none; borrowed */
};
/* mesh_exec_opts.nice when no --nice was given: no niceness is set. */
#define MESH_EXEC_NICE_INHERIT INT_MIN
#define MESH_EXEC_OPTS_INIT                                                                      \
	{                                                                                         \
		.argv = NULL, .slots = 1, .input = NULL, .ttl_ns = 0, .timeout_ns = 0, .speculate = 0, .spec_job = NULL, \
		.max_chunks = 0, .results_dir = NULL, .out_fd = 1, .err_fd = 2, .note_fd = 2,        \
		.progress_fd = -1, .handle_signals = 1, .nice = MESH_EXEC_NICE_INHERIT,                 \
	}

/* What this call did (not the journal's totals: ask mesh_job_status). */
struct mesh_exec_stats {
	uint64_t started;	/* attempts started */
	uint64_t done;		/* completions that came back DONE */
	uint64_t ignored;	/* completions that came back IGNORED (duplicates) */
	uint64_t failed;	/* failed attempts recorded (incl. timeouts) */
	uint64_t buried;	/* chunks this call buried: the ones that finally failed (GNU parallel's
				 * exit code is this count, capped at 101) */
	uint64_t succeeded;	/* attempts that ended with status 0 */
	/* The halt rule, when it stopped the run: the status of the attempt that
	 * met it (a signal: 128 + s) and the chunks that had failed for good by
	 * then (GNU parallel's exit code comes from these). */
	int halt_status;
	uint64_t halt_failed;
	int failed_at;		/* MESH_EXEC_AT_*: what an error returned before anything ran was about */
	uint64_t timeouts;	/* attempts killed by timeout_ns */
	uint64_t killed;	/* attempts killed without a record: the chunk was DONE elsewhere,
				 * or the run was interrupted, halted (NOW) or stopped by an error */
	uint64_t speculative;	/* speculative copies started */
	uint64_t lost;		/* attempts whose lease was taken over while they ran (hooks.lease_lost) */
	uint64_t wall_ns;	/* duration of the call */
	/* Chunks whose output was written to out_fd/err_fd but that are not
	 * DONE because the run stopped on an error: their completion failed
	 * to be journaled (output goes out before its DONE is durable, never
	 * after), or, with line_buffer or ungroup, a part had gone out when
	 * the attempt was killed.  A rerun runs and writes them again.  How
	 * many, and the first MESH_EXEC_REPEAT_SHOWN of them in the order
	 * met. */
	uint64_t repeat;
	uint64_t repeat_cids[16];
};
#define MESH_EXEC_REPEAT_SHOWN 16

/* Runs chunks of job until nothing is left for this node (see answers).
 * Returns MESH_EXEC_* or a negative error: MESH_E_PARSE (empty argv),
 * MESH_E_RANGE (input has fewer lines than the job has chunks), -ENOENT /
 * -EACCES (argv[0] not found / not executable, before anything ran), -errno
 * of opening the joblog or of making results_dir (before anything ran;
 * stats->failed_at says which of the three), MESH_E_OUTPUT (out_fd,
 * err_fd, the results or the joblog could not be written; a note says
 * why), -EPIPE (out_fd or err_fd is a pipe whose reader is gone), or an
 * error of the job engine or of finalizing results (-EIO, -ENOSPC: the run
 * stops, running chunks are killed, nothing not durable is reported DONE).
 * stats (may be NULL) is filled in every case.  On return no child of the
 * runner is left running and every fd it opened is closed; job stays open
 * and owned by the caller. */
int mesh_exec_run(struct mesh_job *job, const struct mesh_exec_opts *opts, struct mesh_exec_stats *stats);

/* 1 once a run that handles signals (handle_signals) got SIGINT or
 * SIGTERM: for a job store's wait hook (mesh_job_opts.on_store_wait),
 * which then stops waiting for its database so that the run can stop.
 * Any thread; async-signal-safe. */
int mesh_exec_stop_asked(void);

#endif
