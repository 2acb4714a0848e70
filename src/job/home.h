/* A job home: where a meshd job's spec, input, results and end live, and
 * how a result is kept, read and made durable, how the end is recorded and
 * how a cancel is seen.  One interface, two homes:
 *   file        (home_file.c): a state directory, one directory a job,
 *               <state>/jobs/<id>/ (docs/jobs.md): spec, input,
 *               journal.log (the engine's, job.h), results.bin
 *               (job/results.h), end, leases/.  meshd's own jobs.
 *   postgresql  (home_pg.c): a PostgreSQL store (docs/cluster.md): the
 *               spec and input in mesh.specs, the chunks in the job
 *               URL#s<id>, each reply in mesh.results, a cancel in the
 *               spec's state.  Shared by every `meshd --store URL` (each
 *               serves the jobs its catalog has the program of) and read
 *               and written by `mesh submit|jobs|wait|results|cancel
 *               --store URL` on any host.
 * meshd's one job runner (meshd/jobs/) drives the jobs of either home
 * through these calls; the CLI reads a store's jobs through them.  The
 * chunks themselves are the engine's (job.h): a home hands the runner the
 * engine's handles of a job (struct mesh_home_job's jh, sjh).
 *
 * Where the two homes differ, the difference is a call below or a value
 * the home gives, never a test of the kind by the caller:
 *   - the spec: a file written last that vouches for the files beside it
 *     (file), a row (postgresql);
 *   - the ids: a directory claimed by mkdir, never given twice (file); the
 *     store's sequence (postgresql);
 *   - a submit: written unsynced then made durable in one round of syncs
 *     while the driver already leases (file: create, then persist); one
 *     committed statement (postgresql: persist is NULL);
 *   - which jobs the runner learns of (watch): every job of the state
 *     directory, once, at the start, each the runner's to run (file); every
 *     job not ended, at each look of a follower thread, each an offer the
 *     runner takes when its catalog has the program (postgresql);
 *   - a result: appended to results.bin, synced before its batch's DONE
 *     (small ones durable in their DONE record instead: results_in_done)
 *     (file); kept in memory, written in one transaction before the
 *     batch's DONE, then one NOTIFY for the job's waiters (postgresql:
 *     at most result_max bytes, a larger reply's chunk is buried);
 *   - a failure's report: a FAILURE record in results.bin (file); the
 *     chunk's row (postgresql);
 *   - the end: the end file with the counts, the lease directory removed
 *     (file); nothing, the store's counts are the end (postgresql);
 *   - a cancel: the end file first, then the driver is told (file); the
 *     spec's state and a NOTIFY, which the followers see (postgresql).
 *
 * Library code: nothing prints; what a home has to tell people goes to the
 * note callback of its events.  Errors are negative MESH_E_* or -errno;
 * with an err out-parameter, a malloc'd message for people (or NULL).
 *
 * Threads: a home's calls may come from any thread.  One job's calls
 * follow its caller's protocol: open, then (a run) the keep/sync/synced/
 * report/bury calls from the driver's threads, and close once no one uses
 * the job (the runner's files_users, jobs_int.h).  Each home job has a
 * lock of its own, a leaf: nothing is taken while it is held. */
#ifndef MESH_JOB_HOME_H
#define MESH_JOB_HOME_H

#include "job/job.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

enum mesh_home_state { MESH_HOME_RUNNING, MESH_HOME_COMPLETE, MESH_HOME_FAILED, MESH_HOME_CANCELLED, MESH_HOME_ERROR };
/* "running", "complete", "failed", "cancelled", "error". */
const char *mesh_home_state_name(enum mesh_home_state s);

/* The longest program and job name a spec holds. */
#define MESH_HOME_NAME_MAX 64

/* What was submitted. */
struct mesh_home_spec {
	uint64_t id; /* the home's: 1, 2, 3, ... */
	char program[MESH_HOME_NAME_MAX + 8];
	char name[MESH_HOME_NAME_MAX + 8]; /* a label, "" none */
	uint64_t n;			   /* chunks */
	int has_input;			   /* chunk i's input is line i of the input; else none */
	unsigned max_workers;		   /* 0: each host's manifest's (a store's job) */
	uint32_t retries;		   /* attempts before a chunk is buried */
	uint64_t timeout_ns;		   /* per chunk on a worker; 0 none */
	int speculate;
};

/* A job's counts when it ended (file: its end file keeps them). */
struct mesh_home_sum {
	struct mesh_job_status st;
	double elapsed_s, rate; /* its last driver's run */
	int64_t ended;		/* unix seconds */
};

/* What a home says of one of its jobs (watch, job, list). */
struct mesh_home_found {
	enum mesh_home_state state; /* RUNNING: not ended; ERROR: cannot be read (error) */
	char *error;		    /* ERROR: why (owned by the home, valid during the call) */
	int have_sum;		    /* ended: sum holds its counts */
	struct mesh_home_sum sum;
	/* An offer: the job is shared with other hosts, and this one serves
	 * it only when its catalog has the program (else leaves it to the
	 * others until a later look).  0: the job is this runner's to run. */
	int offer;
	/* The counts a store keeps of a job, running or not (not the file
	 * home's: the runner counts from the journal); and the time since
	 * its submit. */
	int have_counts;
	double elapsed_s;
};

/* One job of a home.  The first member of each home's own. */
struct mesh_home_job {
	struct mesh_home *home;
	struct mesh_home_spec spec;
	/* The engine's handles while the job is open (open ... close): jh,
	 * and with a run of a speculating job sjh (the same job under a
	 * second node name: copies of this node's own stragglers).  Set by
	 * the home's open, read by any thread after it. */
	struct mesh_job *_Atomic jh, *_Atomic sjh;
	/* A run's lease TTL (0: the engine's default) and the largest result
	 * the home keeps (SIZE_MAX: any; a larger one's chunk is buried). */
	uint64_t ttl_ns;
	size_t result_max;
	/* When the job's results store was ready to keep results
	 * (CLOCK_MONOTONIC; 0 not yet): the first result's path. */
	_Atomic uint64_t t_results;
};

/* What meshd is told by a home, from the thread that found it (watch: the
 * caller's at the start, or the follower's).  arg is each one's. */
struct mesh_home_events {
	/* A job the home holds: hj is the callee's (ops->job_free when it
	 * knows the job already).  Non-zero stops a file home's watch with
	 * that error (a job that cannot be loaded for a system's reason). */
	int (*found)(void *arg, struct mesh_home_job *hj, const struct mesh_home_found *f);
	/* Job id was cancelled (the home has recorded it): its driver stops. */
	void (*cancelled)(void *arg, uint64_t id);
	/* The ids of the jobs whose drivers run now (malloc'd into *ids): the
	 * ones a follower asks the store about.  0 or -ENOMEM. */
	int (*driving)(void *arg, uint64_t **ids, size_t *n);
	/* The programs this host runs, comma-separated, into buf: what its
	 * node row in the store says. */
	void (*programs)(void *arg, char *buf, size_t cap);
	/* Something for people: level 0 information, 1 a warning, 2 an error. */
	void (*note)(void *arg, int level, const char *msg);
	void *arg;
};

struct mesh_home {
	const struct mesh_home_ops *ops;
	struct mesh_home_events ev;
};

/* Says msg (printf's fmt) through h's note event, if it has one: what
 * both homes tell meshd's log. */
void mesh__home_note(struct mesh_home *h, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* How one of a job's settled chunks is handed out (results). */
enum mesh_home_result {
	MESH_HOME_RESULT,  /* DONE: p, n its result */
	MESH_HOME_MISSING, /* DONE, but its result is missing (the results file lost it) */
	MESH_HOME_NONE,	   /* settled without a result: buried, or the job ended before it was DONE */
};

/* A chunk with failed attempts (failures). */
struct mesh_home_failure {
	uint64_t cid;
	uint32_t attempts;
	int status; /* the last attempt's exit status */
	int buried;
	const char *report; /* the last failed attempt's report ("" none), valid during the call */
	size_t report_len;
};

/* Where a job lives, for people and for `mesh job status` (valid while
 * the job is): "" where the home has none. */
struct mesh_home_where {
	const char *dir, *journal, *lockdir, *lease_name, *results;
};

struct mesh_home_ops {
	const char *kind; /* "file", "postgresql" */
	/* Results up to the home's limit are also written in their DONE
	 * record (the runner's results_in_done, exec/runner.h). */
	int results_in_done;

	/* ---- the home ---- */
	/* Tells ev->found of the home's jobs: file: every job of the state
	 * directory, now, once (a job that cannot be read for the system's
	 * reason stops it: its error with *err); postgresql: from a follower
	 * thread started here, every job not ended, at each look (a submit or
	 * a cancel wakes it at once, kick too, else every 5 s), and
	 * ev->cancelled of the cancels of the jobs ev->driving names; the
	 * meshd is a node of the store from here (ev->programs).  Once. */
	int (*watch)(struct mesh_home *h, char **err);
	/* Looks again now (a program was loaded).  NULL: no follower. */
	void (*kick)(struct mesh_home *h);
	/* Stops the watch: no event is told after it returns.  Idempotent. */
	void (*stop)(struct mesh_home *h);
	/* After stop and once no job of it is open: frees h. */
	void (*close)(struct mesh_home *h);

	/* A new job of spec (its id is given here, into hj->spec.id) with
	 * input (len bytes, one chunk a line; NULL when !spec->has_input):
	 * written, and durable once persist returns 0 (persist NULL: durable
	 * here).  Between the two a driver may already open and run it.  *out
	 * is the caller's.  0, or an error with *err. */
	int (*create)(struct mesh_home *h, const struct mesh_home_spec *spec, const void *input, size_t len,
		      struct mesh_home_job **out, char **err);
	int (*persist)(struct mesh_home_job *hj, char **err);
	/* One job by id (a client's): its spec and its state and counts read
	 * now into spec and f (each may be NULL; both NULL: nothing is read,
	 * and a job that is not there fails its calls later), and a handle
	 * of it into *out (out may be NULL), the caller's.  MESH_E_NOJOB when
	 * none.  NULL: the runner holds the jobs (file). */
	int (*job)(struct mesh_home *h, uint64_t id, struct mesh_home_job **out, struct mesh_home_spec *spec,
		   struct mesh_home_found *f);
	/* Every job, in id order: fn(arg, spec, f).  NULL: listed by the
	 * runner, which holds them (file). */
	int (*list)(struct mesh_home *h, void (*fn)(void *arg, const struct mesh_home_spec *s,
						    const struct mesh_home_found *f),
		    void *arg);
	/* Removes an ended job for good (its id is never given again); hj
	 * stays the caller's (job_free).  0 or -errno with *err.  NULL: a home whose jobs are not
	 * this host's to remove. */
	int (*remove)(struct mesh_home_job *hj, char **err);
	void (*job_free)(struct mesh_home_job *hj);

	/* ---- a job ---- */
	/* Opens it: run 1 to run it (the engine's handles writable, jh and,
	 * when it speculates, sjh; what keeps its results), 0 to read it (jh
	 * read-only where the home has one).  0 or an error with *err naming
	 * what could not be opened. */
	int (*open)(struct mesh_home_job *hj, int run, char **err);
	/* Closes what open opened (jh and sjh are NULL after). */
	void (*close_job)(struct mesh_home_job *hj);
	/* Its input, all its lines (malloc'd; the caller frees). */
	int (*input)(struct mesh_home_job *hj, char **data, size_t *len, char **err);
	/* A run's result of chunk cid (n <= hj->result_max), kept before its
	 * DONE (the runner's result hook): 0 or an error (the run stops). */
	int (*keep)(struct mesh_home_job *hj, uint64_t cid, const void *p, size_t n);
	/* Before a batch's DONE records: every result kept so far is durable
	 * (commit hook).  0 or an error: the batch is not completed. */
	int (*sync)(struct mesh_home_job *hj);
	/* After a batch's DONE records are durable (committed hook).  NULL: nothing. */
	void (*synced)(struct mesh_home_job *hj);
	/* A failed attempt's report (len bytes; buried: the attempt buried
	 * the chunk).  0 or an error (the report is lost, no chunk is). */
	int (*report)(struct mesh_home_job *hj, uint64_t cid, const void *p, size_t len, int buried);
	/* Buries chunk cid now, whatever attempts are left, with why (a reply
	 * over result_max: trying again cannot help).  0 or an error. */
	int (*bury)(struct mesh_home_job *hj, uint64_t cid, const char *why);
	/* The job ended in state (not RUNNING; sum its counts): what the home
	 * keeps of an end (file: the end file, the lease directory removed;
	 * an ERROR is kept by neither, it runs again at the next look or
	 * start), and what the run held goes (postgresql: the run's handles
	 * with their leases).  sum NULL: a cancel recorded the end already
	 * (no driver ran).  0 or an error with *err. */
	int (*end)(struct mesh_home_job *hj, enum mesh_home_state state, const struct mesh_home_sum *sum, char **err);
	/* What stopped a run with rc, in the home's terms (which file, which
	 * store, and why), malloc'd; NULL when the home knows no more than rc. */
	char *(*why)(struct mesh_home_job *hj, int rc);
	/* Cancels it for good (the home's record first; a running driver is
	 * told by the caller).  0, MESH_E_NOJOB, or an error with *err. */
	int (*cancel)(struct mesh_home_job *hj, char **err);
	/* Hands out its settled chunks from `from` on, in chunk order:
	 * fn(arg, cid, how, p, n) for each chunk DONE (its result), and, a
	 * chunk that will never be DONE (buried, or any once ended is set),
	 * MESH_HOME_NONE.  Stops at the first chunk not settled, at n, or when
	 * fn returns non-zero (that chunk is not taken).  *next: the first
	 * chunk not taken.  0 or the error of a read. */
	int (*results)(struct mesh_home_job *hj, uint64_t from, int ended,
		       int (*fn)(void *arg, uint64_t cid, enum mesh_home_result how, const void *p, size_t n), void *arg,
		       uint64_t *next);
	/* fn for each chunk with failed attempts (the store: each buried one),
	 * in chunk order, with the last failure's report. */
	int (*failures)(struct mesh_home_job *hj, void (*fn)(void *arg, const struct mesh_home_failure *f), void *arg);
	/* Waits up to timeout_ns for news of the job (a commit batch, a bury,
	 * a cancel): 1 woken, 0 the time is up, or an error.  Listens from the
	 * first call on (a caller looks after its first call, then waits).
	 * NULL: the home tells no news (the runner's waiters wait on it). */
	int (*wait)(struct mesh_home_job *hj, uint64_t timeout_ns);
	void (*where)(const struct mesh_home_job *hj, struct mesh_home_where *w);
};

/* A state directory: creates it (0700) when missing and locks it for the
 * home's lifetime (flock on <state>/meshd.lock, which holds our pid; a
 * second meshd is refused with MESH_E_BUSY, its pid in *err).  ev is
 * copied.  0 or an error with *err. */
int mesh_home_file_open(struct mesh_home **out, const char *state_dir, const struct mesh_home_events *ev, char **err);
/* A PostgreSQL store at url (postgresql://...; its #job is ignored; a
 * password in it is refused: MESH_E_PARSE).  ev may be NULL (a client that
 * does not watch).  0 or an error with *err (no connection, a schema of
 * another version, libpq that cannot be loaded). */
int mesh_home_pg_open(struct mesh_home **out, const char *url, const struct mesh_home_events *ev, char **err);
/* The spare connections a watching store home keeps made (store_pg.h,
 * mesh_pg_spares_start): 0 .. MESH_HOME_PG_SPARES_MAX, MESH_HOME_PG_SPARES
 * unless set (meshd --store-spares); set before the home watches.  Each
 * holds an idle backend of the server; a job's first handles open on them
 * instead of waiting for backends' starts. */
#define MESH_HOME_PG_SPARES 3
#define MESH_HOME_PG_SPARES_MAX 8
void mesh_home_pg_set_spares(unsigned n);

/* The largest input a store keeps for a job (all its lines). */
#define MESH_HOME_PG_INPUT_MAX (16u << 20)

/* `mesh store init|migrate|status` (store/store_pg.h, mesh_pg_schema):
 * the schema version found at url (0: none) and, after init or migrate,
 * the version now.  init refuses an existing schema of another version
 * (MESH_E_VERSION: migrate it); migrate refuses a newer one.  Connection
 * errors as mesh_home_pg_open's, libpq's words in why. */
enum mesh_home_pg_schema_op { MESH_HOME_PG_STATUS, MESH_HOME_PG_INIT, MESH_HOME_PG_MIGRATE };
int mesh_home_pg_schema(const char *url, enum mesh_home_pg_schema_op op, int *found, int *now, char *why,
			size_t whycap);
/* The schema version this mesh uses. */
int mesh_home_pg_schema_version(void);

/* A node of a store (`mesh nodes`): a handle that leased, or a meshd's
 * own node of no job (job ""); a meshd job's node shows its spec's
 * program.  Valid during the call. */
struct mesh_home_node {
	const char *name, *host, *program, *job;
	uint64_t chunks;     /* completions sent (a meshd's own node: its drivers') */
	double chunks_per_s; /* from its registration to its last beat */
	uint64_t age_ns;     /* since its last beat */
	int stopped;	     /* closed cleanly */
	int silent;	     /* no beat for longer than its TTL: its leases may be taken */
};
/* Every node of the store at url (this_job: only those of the URL's
 * #job), oldest first: fn(arg, NULL) once connected, then fn(arg, node)
 * for each.  0, or an error (why: libpq's words when it could not
 * connect). */
int mesh_home_pg_nodes(const char *url, int this_job, void (*fn)(void *arg, const struct mesh_home_node *nd),
		       void *arg, char *why, size_t whycap);

/* The fuzz seams of a state directory's files (home_file.c; pure): a spec
 * file's check line (0 whole, or of the format before, which has none;
 * MESH_E_CORRUPT torn or damaged); its "key value" lines (text is
 * modified) into s (0 or MESH_E_PARSE); the state an end file (text)
 * records. */
int mesh__home_spec_check(const char *text, size_t len);
int mesh__home_spec_parse(struct mesh_home_spec *s, char *text);
enum mesh_home_state mesh__home_end_state(const char *text);

#endif
