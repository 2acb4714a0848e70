/* The runner's insides, shared by its four files: runner.c (the loop,
 * leasing, signals), run_slot.c (one chunk's process: start, read, reap,
 * finish), run_done.c (the completer thread) and run_out.c (where output
 * goes: grouped, in order, tagged, line by line, ungrouped; the joblog; the
 * halt rule; the start throttles).  Not a public contract: see runner.h for that. */
#ifndef MESH_EXEC_RUN_INT_H
#define MESH_EXEC_RUN_INT_H

#include "base/buf.h"
#include "exec/capture.h"
#include "exec/runner.h"
#include "proc/proc.h"
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
	pid_t pid;
	int pidfd, fd_out, fd_err;
	int res_out, res_err; /* results temp files */
	char *res_dir, *tmp_out, *tmp_err;
	struct mesh__capture cout, cerr;
	struct mesh__tag tag_out, tag_err; /* line starts of the streams passed on live */
	uint64_t t_start, t_deadline, t_renew, t_kill, t_exit, wall_start;
	uint64_t recv; /* stdout bytes (the joblog's Receive) */
	int exited, wstatus, term_sent;
	int exec_err; /* could not exec: 126 / 127, buried at once */
	int cap_err; /* the spill file failed: -errno; the chunk fails */
	enum mesh__end_why why;
	char env_chunk[48], env_attempt[48], env_slot[48];
	char **envp, **argv;
	struct mesh_buf argbuf;
	char tagnum[24]; /* the chunk id as a tag when there is no input */
};

/* Work for the completer thread: finalize results (fsyncs, renames) and
 * complete successful chunks, many at once. */
struct mesh__item {
	struct mesh__item *next;
	struct mesh_job *jh;
	struct mesh_lease l;
	uint64_t cid, dur_ns;
	int complete; /* 0: results only (a failed attempt) */
	int res_out, res_err;
	char *res_dir, *tmp_out, *tmp_err, *status;
	int result; /* MESH_JOB_DONE / IGNORED or a negative error */
};

/* -k: a finished attempt whose output waits for the chunks before it. */
struct mesh__hold {
	struct mesh__hold *prev, *next; /* by cid */
	uint64_t cid;
	struct mesh__capture out, err;
	struct mesh__tag tag_out, tag_err;
	struct mesh__item *it; /* its completion, queued once the output is out; NULL = none */
	int settles; /* the chunk is settled once this is out (done or buried) */
	char tagnum[24];
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
	struct mesh_proc_spawner *sp;
	char *path; /* resolved argv[0], NULL when argv[0] holds a placeholder */
	int nullfd, evfd, joblog;
	struct mesh__slot *slots;
	unsigned nslots, busy;
	uint64_t n, ttl;
	char **env_base;
	size_t env_n;
	pid_t self;
	const char *tmpdir;

	pthread_t thr;
	int thr_started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct mesh__item *q_in, **q_in_tail, *q_out;
	unsigned in_flight; /* items queued or being processed */
	int quit;

	int stopping, sigs, fatal, complete_seen, none_seen, halted;
	uint64_t retry_at, t0, next_draw, done_at_start;
	uint64_t hold_until, last_start; /* --delay, --load, --memfree */
	uint64_t n_ok, n_fail; /* attempts of this call, for the halt rule */
	int drawn;

	/* -k */
	struct mesh__hold *hold_head, *hold_tail;
	uint64_t next_cid, hold_mem, hold_renew;
	unsigned char *settled; /* bit per chunk: buried (known to this call) */

	struct mesh__median med;
	uint64_t pct_limit; /* --timeout N%: the limit now; 0 = none yet */
};

/* runner.c */
void mesh__run_note(struct mesh__runner *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void mesh__run_stop_all(struct mesh__runner *r, int sig);
char *mesh__run_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* run_done.c: the completer thread's body (arg: the runner); queueing an
 * item for it (the runner owns it until then). */
void *mesh__run_completer(void *arg);
void mesh__run_queue(struct mesh__runner *r, struct mesh__item *it);
void mesh__run_item_free(struct mesh__item *it);

/* run_slot.c */
int mesh__slot_start(struct mesh__runner *r, struct mesh__slot *s);
void mesh__slot_finish(struct mesh__runner *r, struct mesh__slot *s, int code);
int mesh__slot_reap(struct mesh__slot *s);
void mesh__slot_read(struct mesh__runner *r, struct mesh__slot *s, int out);
void mesh__slot_maybe_finish(struct mesh__runner *r, struct mesh__slot *s);
void mesh__slot_clear(struct mesh__slot *s);
void mesh__slot_kill(struct mesh__slot *s, int sig);
uint64_t mesh__slot_deadline(const struct mesh__runner *r, const struct mesh__slot *s);

/* run_out.c */
/* The chunk's --tag text (its arguments, or its id). */
const char *mesh__out_tag(struct mesh__runner *r, uint64_t cid, char *buf24, size_t *len);
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
/* Counts the attempt's outcome; applies the halt rule. */
void mesh__out_halt_check(struct mesh__runner *r, int ok);
void mesh__out_median_add(struct mesh__runner *r, uint64_t dur);
void mesh__out_median_free(struct mesh__median *m);
/* --load / --memfree: 1 when a start may go ahead now. */
int mesh__out_resources_ok(struct mesh__runner *r);

#endif
