/* The chunk driver's insides, shared by its four files: driver.c (the
 * loop, leasing, renewing, speculation, signals), run_slot.c (one attempt
 * in a slot: start it on the executor, take its output, record how it
 * ended), run_done.c (the completer thread) and run_out.c (where output
 * goes: grouped, in order, tagged, line by line, ungrouped; the joblog; the
 * halt rule; the start throttles).  What runs an attempt is an executor
 * (executor.h); the driver knows nothing of processes.  Not a public
 * contract: see runner.h for that. */
#ifndef MESH_EXEC_RUN_INT_H
#define MESH_EXEC_RUN_INT_H

#include "base/buf.h"
#include "base/list.h"
#include "base/thread.h"
#include "exec/capture.h"
#include "exec/runner.h"
#include "exec/executor.h"
#include "exec/template.h"
#include "job/job.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#define MESH__RUN_KILL_GRACE (2 * MESH_NS_PER_S)

enum mesh__end_why { END_NORMAL, END_TIMEOUT, END_KILLED };

struct mesh__slot {
	int busy;
	struct mesh_job *jh; /* the handle that leased the chunk */
	unsigned idx; /* 1-based, MESH_SLOT */
	struct mesh_lease l;
	int res_out, res_err; /* results temp files */
	char *res_dir, *tmp_out, *tmp_err;
	struct mesh__capture cout, cerr;
	struct mesh__tag tag_out, tag_err; /* line starts of the streams passed on live */
	uint64_t t_start, t_deadline, t_renew, t_kill, wall_start;
	uint64_t recv; /* stdout bytes (the joblog's Receive) */
	int exited; /* the executor knows how it ended (its output may still come) */
	int term_sent;
	uint64_t t_renewed; /* the last renewal that held (the start at first) */
	/* when the lease may expire at the earliest (monotonic): the lease's
	 * or its last renewal's time left, counted from before that call */
	uint64_t t_expire;
	int lost;	    /* its lease was taken over while it ran (said once) */
	int printed;	    /* part of its output went out while it ran (-u, --line-buffer) */
	struct mesh__exec_result res; /* once exited; res.start_err: could not start, buried at once */
	int cap_err; /* the spill file failed: -errno; the chunk fails */
	enum mesh__end_why why;
	char **argv;	   /* the attempt's command (NULL until the slot's first start) */
	size_t argv_cap;   /* pointers argv holds */
	struct mesh_buf argbuf;
	char tagnum[24]; /* the chunk id as a tag when there is no input */
	struct mesh_buf tagbuf; /* --tagstring expanded */
	char *report;	 /* hooks->failed: the failed attempt's stderr, kept before it is written on */
	size_t report_len;
};

/* Work for the completer thread: finalize results (fsyncs, renames) and
 * complete successful chunks, many at once. */
struct mesh__item {
	struct mesh__item *next;
	struct mesh_job *jh;
	struct mesh_lease l;
	uint64_t cid, dur_ns;
	int complete; /* 0: results only (a failed attempt) */
	void *res_p;  /* its result, for its DONE (hooks' results_in_done); NULL: none */
	size_t res_len;
	int res_out, res_err;
	char *res_dir, *tmp_out, *tmp_err, *status;
	int result; /* MESH_JOB_DONE / IGNORED or a negative error */
	/* The loop's own (the completer never reads them): a completion in
	 * flight (complete) is on the runner's list, in the order of its next
	 * renewal (run_done.c). */
	MESH_LINK(struct mesh__item) fl;
	uint64_t renew_at;
	int lease_gone; /* a renewal found the lease another's, or the chunk DONE */
};

/* -k: a finished attempt whose output waits for the chunks before it. */
struct mesh__hold {
	MESH_LINK(struct mesh__hold) link; /* by cid */
	uint64_t cid;
	struct mesh__capture out, err;
	struct mesh__tag tag_out, tag_err;
	struct mesh__item *it; /* its completion, queued once the output is out; NULL = none */
	int settles; /* the chunk is settled once this is out (done or buried) */
	char *tagtext; /* its tag (a copy: the slot's goes on to the next attempt) */
};

/* The running median of the done chunks' runtimes (--timeout N%). */
struct mesh__median {
	uint64_t *lo, *hi; /* a max-heap of the lower half, a min-heap of the upper */
	size_t nlo, nhi, cap;
};

struct mesh__runner {
	struct mesh_job *job;
	const struct mesh_exec_opts *o;
	struct mesh_exec_stats *st;
	struct mesh_exec_template tmpl;
	struct mesh_exec_template tagtmpl; /* --tagstring */
	char *tagargv[2];
	/* Where a start expands its command: room for the longest a template
	 * may give (mesh_exec_template_slots: 4097 pointers and more), once
	 * for the run; a slot keeps a copy of what it used.  (One array that
	 * size a slot was 8 MB zeroed before meshd's first lease at 256
	 * slots.) */
	char **argv_tmp;
	struct mesh__executor *ex;
	int evfd, joblog;
	struct mesh__slot *slots;
	unsigned nslots, busy;
	/* Busy slots counted by chunk id & busy_mask (a table of 4 x nslots
	 * or more): a completion looks through the slots for a local copy of
	 * its chunk still running only when its count is not 0. */
	uint32_t *busy_by_cid;
	uint64_t busy_mask;
	uint64_t n, ttl;
	uint64_t retry; /* ns a driver that found nothing waits (retry_ns(), read once) */
	pid_t self;
	const char *tmpdir;

	struct mesh_thread *thr;
	int thr_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct mesh__item *q_in, **q_in_tail, *q_out;
	unsigned in_flight; /* items queued or being processed */
	int quit;
	/* the completions in flight (the loop's: mesh__run_flight_renew) */
	MESH_LIST(struct mesh__item) fl;

	int stopping, sigs, fatal, complete_seen, none_seen, halted;
	int hup; /* SIGHUP: start nothing more, let the running chunks finish */
	uint64_t retry_at, t0, next_draw, done_at_start;
	uint64_t hold_until, last_start; /* --delay, --load, --memfree */
	uint64_t n_ok, n_fail; /* chunks that succeeded / failed for good in this call (the halt rule) */
	int drawn;   /* the bar is on the terminal's last line (cleared before other output) */
	int bar_tty; /* progress_fd is a terminal: the bar is redrawn in place, coloured */

	/* -k */
	MESH_LIST(struct mesh__hold) hold;
	uint64_t next_cid, hold_mem, hold_renew;
	unsigned char *settled; /* bit per chunk: buried (known to this call) */

	struct mesh__median med;
	uint64_t pct_limit; /* --timeout N%: the limit now; 0 = none yet */
};

/* driver.c */
void mesh__run_note(struct mesh__runner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mesh__run_stop_all(struct mesh__runner *r, int sig);
/* cid's output went out but the chunk will not be DONE (stats.repeat). */
void mesh__run_repeat(struct mesh__runner *r, uint64_t cid);
char *mesh__run_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The attempt in s lost its lease (another node took it over): said once
 * (a note, hooks->lease_lost), counted; now the time it was noticed. */
void mesh__run_lease_lost(struct mesh__runner *r, struct mesh__slot *s, uint64_t now);

/* run_done.c: the completer thread's body (arg: the runner); queueing an
 * item for it (the runner owns it until then). */
void *mesh__run_completer(void *arg);
void mesh__run_queue(struct mesh__runner *r, struct mesh__item *it);
void mesh__run_item_free(struct mesh__item *it);
/* The loop took it back from the completer: off the list of completions
 * in flight. */
void mesh__run_taken(struct mesh__runner *r, struct mesh__item *it);
/* Renews the leases of the completions in flight whose turn has come
 * (every ttl/4 from their queueing; the next: r->fl.head->renew_at). */
void mesh__run_flight_renew(struct mesh__runner *r, uint64_t now);

/* run_slot.c */
/* Starts the leased chunk in slot s on the executor.  0 (running, or a
 * start failure already recorded as a failed attempt) or a fatal error
 * (the slot is left free). */
int mesh__slot_start(struct mesh__runner *r, struct mesh__slot *s);
/* The executor's sink: an attempt's output bytes (arg: the runner). */
int mesh__slot_output(void *arg, unsigned slot, int out, const void *p, size_t n);
/* Records how the attempt in s ended (s->res, s->why), sends its output on
 * or holds it, queues its completion; frees the slot. */
void mesh__slot_finish(struct mesh__runner *r, struct mesh__slot *s);
void mesh__slot_clear(struct mesh__runner *r, struct mesh__slot *s);
/* 0 when no busy slot runs chunk cid (1: one may). */
int mesh__slot_busy_with(const struct mesh__runner *r, uint64_t cid);
void mesh__slot_kill(struct mesh__runner *r, struct mesh__slot *s, int sig);
uint64_t mesh__slot_deadline(const struct mesh__runner *r, const struct mesh__slot *s);

/* run_out.c */
/* Sets the --tag text of the attempt in slot s (its arguments, its id, or
 * --tagstring expanded).  0 or -ENOMEM. */
int mesh__out_tag(struct mesh__runner *r, struct mesh__slot *s);
/* Clears the progress line before output reaches the terminal. */
void mesh__out_clear_bar(struct mesh__runner *r);
/* A write to the destination failed: stop the run (EPIPE quietly). */
void mesh__out_failed(struct mesh__runner *r, uint64_t cid, int rc, const char *what);
/* Grouped output of a finished attempt: written now (0, or a negative
 * error already handled by mesh__out_failed), or held for -k (1: the
 * completion item it goes with must not be queued by the caller). */
int mesh__out_finished(struct mesh__runner *r, struct mesh__slot *s, struct mesh__item *it, int settles);
/* -k: writes the held outputs whose turn has come (all of them when
 * force), queues their completions. */
void mesh__out_emit_ready(struct mesh__runner *r, int force);
/* -k: renews the leases of held chunks; drops them (leases released) after
 * a fatal error. */
void mesh__out_hold_renew(struct mesh__runner *r, uint64_t now);
void mesh__out_hold_drop(struct mesh__runner *r);
void mesh__out_settle(struct mesh__runner *r, uint64_t cid);
int mesh__out_joblog_open(struct mesh__runner *r);
void mesh__out_joblog(struct mesh__runner *r, struct mesh__slot *s, int code, uint64_t dur);
/* Counts a chunk's outcome (ok, or failed for good; code: its attempt's
 * status); applies the halt rule. */
void mesh__out_halt_check(struct mesh__runner *r, int ok, int code);
void mesh__out_median_add(struct mesh__runner *r, uint64_t dur);
void mesh__out_median_free(struct mesh__median *m);
/* --load / --memfree: 1 when a start may go ahead now. */
int mesh__out_resources_ok(struct mesh__runner *r);

#endif
