/* The swarm job engine: a job is the chunks 0..n-1 of one journal.  Nodes
 * lease chunks, run them, and complete them; the journal makes completions
 * durable; expired leases are stolen; stragglers get speculative copies and
 * the first completion wins.
 *
 * Caller protocol:
 *   1. mesh_job_submit(journal, n)            -- once, by anyone (idempotent);
 *      or mesh_job_submit_id(journal, n, identity, ...) to tie the journal
 *      to one piece of work (a command and its input)
 *   2. mesh_job_open(&j, &opts)               -- per process/node
 *      (opts.read_only for a look that changes nothing: status)
 *   3. loop: mesh_job_lease -> run the chunk -> mesh_job_complete / mesh_job_fail
 *      (mesh_job_renew while a long chunk runs)
 *   4. mesh_job_close(j)
 *
 * Return values: 0 or a positive answer code (MESH_JOB_*) on success, a
 * negative mesh error (base/err.h) on failure.  Nothing prints.
 *
 * Threads: one struct mesh_job may be used by many threads at once;
 * concurrent mesh_job_complete calls share one fsync (group commit).
 * Processes: any number of processes (nodes) may open the same journal and
 * lockdir; the journal is appended under flock and each process tails what
 * the others appended, so every call costs O(1) amortized, never a rescan. */
#ifndef MESH_JOB_JOB_H
#define MESH_JOB_JOB_H

#include <stddef.h>
#include <stdint.h>

/* Positive answers (not errors). */
enum {
	MESH_JOB_DONE = 0,	/* complete: the DONE record is durable */
	MESH_JOB_IGNORED = 1,	/* complete: the chunk was already DONE; counted, nothing written */
	MESH_JOB_NONE = 3,	/* lease: nothing can be leased now (all leased, or buried) */
	MESH_JOB_COMPLETE = 4,	/* lease: every chunk is DONE */
};

#define MESH_JOB_MAX_ATTEMPTS_DEFAULT 3
/* The most chunks a job may have.  Every open handle keeps two bitmaps of n
 * bits (done, in flight) in memory: 1 GiB at this maximum (`mesh run
 * --speculate` opens two handles), and the journal of a finished job holds
 * a 24-byte DONE record per chunk (103 GB here).  2^40 passed the old check
 * and then needed 256 GiB at every open. */
#define MESH_JOB_MAX_CHUNKS (1ull << 32)
/* The longest identity a journal records (mesh_job_submit_id). */
#define MESH_JOB_IDENTITY_MAX 200

struct mesh_job;

/* Which path an error of mesh_job_submit_id / mesh_job_open is about. */
enum mesh_job_where {
	MESH_JOB_AT_NONE,	   /* no path (memory, a bad argument) */
	MESH_JOB_AT_JOURNAL,	   /* reading the journal */
	MESH_JOB_AT_JOURNAL_WRITE, /* creating or writing the journal (read-only, immutable, no room) */
	MESH_JOB_AT_LOCKDIR,	   /* the lock directory (missing parent, not creatable, not a directory) */
};

/* What an error of mesh_job_submit_id / mesh_job_open was about, for the
 * caller's message (the library prints nothing).  Filled on error only. */
struct mesh_job_why {
	enum mesh_job_where at;
	unsigned file_type;	/* MESH_E_PATH for a journal that is not a regular file: its S_IFMT bits */
	uint64_t n;		/* MESH_E_MISMATCH, MESH_E_RANGE: the chunk count the journal holds */
	uint64_t damage_off;	/* MESH_E_CORRUPT of a read-only open: where the whole records end */
	uint64_t size;		/* ... and the file's size */
	int torn;		/* ... and the damage is only a torn tail (plain `check` cuts it; else `check --force`).
				 * A read-only open that finds only a torn tail succeeds (the
				 * whole records count, as for a writer, which cuts it) and
				 * sets these three */
	int identity_damaged;	/* MESH_E_CORRUPT or MESH_E_DAMAGED: the damage is in the records that
				 * name the work (SUBMIT, WORK; mesh_journal_report.identity): no
				 * repair keeps them, start afresh (damage_off and size set too) */
	/* MESH_E_MISMATCH: a journal whose identity is its owner's (meshd's
	 * jobs), opened to write by a handle that did not present it */
	int owned;
	/* MESH_E_MISMATCH: the identity the journal holds (len 0: none) */
	size_t identity_len;
	unsigned char identity[MESH_JOB_IDENTITY_MAX];
	/* A store URL's error: the store's own words (PostgreSQL: libpq's
	 * message, or what to run), never a password; "" otherwise. */
	char store_msg[256];
};

struct mesh_job_opts {
	const char *journal;	/* path (path law: ends in .log, no .., no symlinks) */
	const char *lockdir;	/* a bare name or under /tmp/ (or see lockdir_private); created if missing */
	const char *name;	/* job name: the lease files are <lockdir>/<name>.<cid>.lease */
	uint64_t nchunks;	/* must equal the submitted n; 0 = take it from the journal */
	const char *node;	/* this node's name (no spaces, <= 64 bytes); NULL = "<host>.<pid>" */
	uint32_t max_attempts;	/* failed attempts before a chunk is buried; 0 = default 3 */
	/* Speculation (Spark's rule): a running chunk is a straggler once its
	 * runtime exceeds max(spec_min_ns, spec_multiplier x the spec_quantile
	 * of completed durations), after spec_quantile of the chunks are DONE.
	 * At most spec_max_copies extra copies of a chunk.  0 = defaults
	 * (1.5, 0.75, 100 ms, 1). */
	double spec_multiplier, spec_quantile;
	uint64_t spec_min_ns;
	uint32_t spec_max_copies;
	/* Read-only: the open writes nothing -- no torn tail is cut (damage is
	 * MESH_E_CORRUPT, repaired by mesh_journal_check), the lock dir is not
	 * created (missing: nothing is leased); lease, renew, complete, fail and
	 * retry answer MESH_E_STATE.  Otherwise the journal must be writable. */
	int read_only;
	/* lockdir is a directory the caller places inside one private to it
	 * (meshd's <state>/jobs/<id>/leases): an absolute path
	 * (mesh_path_lockdir_private_ok) instead of a bare name or one under
	 * /tmp/, which anyone can pre-create.  It must still be private to
	 * this user.  Never set for a path a user gave. */
	int lockdir_private;
	/* When both this and the journal hold an identity, they must be equal
	 * (else MESH_E_MISMATCH); a journal without one takes any.  A journal
	 * whose identity is its owner's (mesh_job_submit_unsynced) takes a
	 * handle that writes only when this is that identity. */
	const void *identity;
	size_t identity_len;
	struct mesh_job_why *why; /* NULL, or filled when the open fails */
	/* PostgreSQL store only: told (from any of the handle's threads)
	 * when its database stops answering (MESH_JOB_STORE_STOPPED, why:
	 * libpq's message), while calls wait for it (STILL, about once a
	 * second from each waiting call), and when it answers again
	 * (ANSWERS) or the outage budget (mesh_job_set_store_outage) ran out
	 * (GAVE_UP: the waiting calls fail with MESH_E_UNAVAILABLE); waited_ns
	 * since the outage began, budget_ns the budget.  A nonzero return
	 * stops the waiting call now (MESH_E_UNAVAILABLE: a node told to
	 * stop).  NULL: nothing, and calls wait out the budget. */
	int (*on_store_wait)(void *arg, int state, const char *why, uint64_t waited_ns, uint64_t budget_ns);
	void *on_store_wait_arg;
};
#define MESH_JOB_OPTS_INIT {0}
/* on_store_wait's states. */
enum { MESH_JOB_STORE_GAVE_UP = -1, MESH_JOB_STORE_ANSWERS, MESH_JOB_STORE_STOPPED, MESH_JOB_STORE_STILL };

/* The outage budget of this process's job store handles (PostgreSQL; a
 * node's): how long a call waits for a database that stopped answering
 * (a restart, a network cut), counted from the moment the handle found it
 * gone, before it fails with MESH_E_UNAVAILABLE.
 * MESH_JOB_STORE_OUTAGE_DEFAULT_NS unless set; set it before the first
 * open. */
#define MESH_JOB_STORE_OUTAGE_DEFAULT_NS (300ull * 1000000000ull)
void mesh_job_set_store_outage(uint64_t ns);
/* What this process's store connections tell the database they are
 * (PostgreSQL's application_name, store_pg.h mesh_pg_set_app): name,
 * followed by " <job>" when with_job ("mesh run <job>").  An
 * application_name in the URL, then PGAPPNAME, win over it.  Set it
 * before the first open. */
void mesh_job_set_store_app(const char *name, int with_job);
/* A node's connections wait, within the outage budget, for a database
 * that has no room for them (too many clients) or is starting up, telling
 * fn as on_store_wait hears an outage (store_pg.h mesh_pg_set_start_wait);
 * without it they fail at once.  Set it before the first open. */
void mesh_job_set_store_start_wait(int (*fn)(void *arg, int state, const char *why, uint64_t waited_ns,
					     uint64_t budget_ns),
				   void *arg);
/* What to say of a store wait (an on_store_wait or start-wait call's
 * state, why, waited_ns, budget_ns), one set of lines for all of this
 * process's handles and threads: when the first wait began ("stopped
 * answering (why); waiting for it up to BUDGET (--store-outage), ..."),
 * at 10 s, 30 s, 1 min, then each minute ("has not answered for W;
 * waiting L more"), when the last one ended ("answers again after W")
 * and the first time the budget ran out ("did not answer for B
 * (--store-outage): giving up").  1 with the words in msg (always
 * terminated), to follow "the job store 'URL' "; 0 when there is nothing
 * to say. */
int mesh_job_store_wait_words(int state, const char *why, uint64_t waited_ns, uint64_t budget_ns, char *msg,
			      size_t cap);

/* 1 when where is a PostgreSQL store URL that holds a password
 * (store/store_pg.h, mesh_pg_url_has_password): every command that takes
 * a store URL refuses it, saying mesh_job_password_why(). */
int mesh_job_where_has_password(const char *where);
const char *mesh_job_password_why(void);

/* mesh_job_submit_id(journal, n, NULL, 0, NULL). */
int mesh_job_submit(const char *journal, uint64_t n);
/* Defines the chunk universe 0..n-1 in journal, creating the journal if
 * missing, with the identity of the work (identity_len bytes, 0 = none, at
 * most MESH_JOB_IDENTITY_MAX: else MESH_E_TOOBIG) in the same atomic
 * create.  O(1) in n.  Re-submitting the same n and identity: 0 (no-op); a
 * journal without an identity (made before identities, or by
 * mesh_job_submit) accepts any.  A different n or identity:
 * MESH_E_MISMATCH, nothing written.  n == 0 or > MESH_JOB_MAX_CHUNKS:
 * MESH_E_RANGE.  A journal path that is not a regular file (a directory, a
 * FIFO: never opened for reading, so never blocks): MESH_E_PATH.  Other
 * errors: -errno, the journal header errors.  why (may be NULL) says more
 * on error. */
int mesh_job_submit_id(const char *journal, uint64_t n, const void *identity, size_t identity_len,
		       struct mesh_job_why *why);

/* mesh_job_submit_id of a new file journal at a path only the caller can
 * name (in a directory it just made), written in place (mode 0600) and not
 * synced: the caller fdatasyncs the journal and fsyncs its directory before
 * it tells anyone the job exists (meshd's submit, which syncs it beside the
 * job's other files while its driver already leases).  With owned, the
 * identity (which must then be given) is its owner's: an open that would
 * write (not read_only) must present the same identity, else it is
 * MESH_E_MISMATCH with why->owned set; reads are anyone's.  meshd's jobs
 * are owned so: their results are meshd's, and a chunk another node
 * completed would have none (docs/jobs.md).  -EEXIST if the journal exists;
 * MESH_E_PATH for a PostgreSQL URL or a bad path; MESH_E_TOOBIG (identity);
 * -EINVAL (owned without an identity). */
int mesh_job_submit_unsynced(const char *journal, uint64_t n, const void *identity, size_t identity_len, int owned);

/* Opens a submitted job (recovering a torn journal tail unless read-only).
 * On success *out is owned by the caller (mesh_job_close).  Errors: -ENOENT
 * (no journal), MESH_E_FOREIGN (not a mesh journal), MESH_E_VERSION,
 * MESH_E_NOJOB (no submit record), MESH_E_MISMATCH (nchunks or identity
 * differs), MESH_E_PATH (path law; a journal that is not a regular file),
 * MESH_E_RANGE (the journal holds more than MESH_JOB_MAX_CHUNKS),
 * MESH_E_CORRUPT (damage; read-only: also a torn tail), -EACCES / -EPERM /
 * -EROFS for a journal that cannot be written (unless read-only), -errno
 * of the lock dir.  opts->why says which path and more. */
int mesh_job_open(struct mesh_job **out, const struct mesh_job_opts *opts);
void mesh_job_close(struct mesh_job *j);

enum mesh_lease_kind {
	MESH_LEASE_FRESH,	/* a PENDING chunk */
	MESH_LEASE_STOLEN,	/* an expired lease taken over */
	MESH_LEASE_SPECULATIVE, /* an extra copy of a straggler still leased by another */
};

struct mesh_lease {
	uint64_t cid;
	uint32_t attempt;	/* 1 for the first attempt */
	enum mesh_lease_kind kind;
	uint64_t deadline_ns;	/* wall clock (CLOCK_REALTIME) */
	uint64_t started_ns;	/* wall clock */
};

/* Makes the leases j takes from now on outlive this process: they hold
 * until their deadline even after it exits (`mesh job lease`, which exits
 * while its caller works on the chunk).  By default a lease is bound to the
 * process that took it, and once that process is certainly gone
 * (store/store.h) any node may take the lease before its deadline. */
void mesh_job_detach_leases(struct mesh_job *j);

/* Claims the next PENDING chunk, else steals an expired lease, else (when
 * speculate is set and nothing is pending) a speculative copy of the worst
 * straggler that place() gives to this node.  Returns 0 with *l filled,
 * MESH_JOB_NONE, MESH_JOB_COMPLETE, or a negative error. */
int mesh_job_lease(struct mesh_job *j, uint64_t ttl_ns, int speculate, struct mesh_lease *l);
/* The most leases one mesh_job_lease_many call gives: a block
 * (MESH_LEASE_BLOCK, store/store.h). */
#define MESH_JOB_LEASE_MANY_MAX 64
/* Up to k leases at once (k >= 1; more than MESH_JOB_LEASE_MANY_MAX counts
 * as that many), as mesh_job_lease gives them, into ls[0 .. *got-1]: returns 0
 * with *got >= 1, or MESH_JOB_NONE, MESH_JOB_COMPLETE, a negative error
 * (MESH_E_RANGE for k == 0); *got is 0 then.  Fresh chunks are taken as
 * block leases (store/store.h): one lease file for up to 64 chunks; on a
 * node that hands out leases fast a block holds a few more chunks than
 * asked for (what this handle hands out in about 50 ms), kept for the next
 * calls of this handle (mesh_job_lease too): they count as leased, and
 * mesh_job_close lets them go.  A detached handle takes no block leases.
 * Placement (job/place.h): a node slower than the fastest node of the job
 * (mean chunk times measured from completions, every host's) takes fewer:
 * k scaled by its speed over the fastest's, at least 1.
 * Each lease is renewed, completed, failed and handed back alone, as one
 * from mesh_job_lease. */
int mesh_job_lease_many(struct mesh_job *j, uint64_t ttl_ns, int speculate, struct mesh_lease *ls, size_t k,
			size_t *got);
/* Extends a lease this node holds to now + ttl_ns.  0, or MESH_E_STATE when
 * the lease is no longer ours (stolen after expiry, or the chunk is DONE).
 * A tiny ttl_ns (1) hands the lease back: it expires at once for every node
 * of this boot, this one included (nodes of other boots wait out the clock
 * skew margin, MESH_LEASE_SKEW_NS in store/store.h). */
int mesh_job_renew(struct mesh_job *j, struct mesh_lease *l, uint64_t ttl_ns);
/* Durably completes cid: MESH_JOB_DONE after the record is fsync'd, or
 * MESH_JOB_IGNORED for a duplicate.  MESH_E_RANGE for cid >= n.  A write or
 * fsync failure returns its -errno and the chunk is NOT reported DONE (it
 * may become DONE on a later successful complete).  duration_ns (0 if
 * unknown) feeds the straggler threshold and node speeds. */
int mesh_job_complete(struct mesh_job *j, uint64_t cid, uint64_t duration_ns);
/* Completes several chunks with one fsync.  results[i] gets MESH_JOB_DONE,
 * MESH_JOB_IGNORED or a negative error for cids[i].  Returns 0 or the first
 * error (then no chunk of this batch that was not already DONE is DONE). */
int mesh_job_complete_many(struct mesh_job *j, const uint64_t *cids, const uint64_t *durations_ns, size_t n,
			   int *results);
/* A chunk's result, for a store that keeps it with the DONE. */
struct mesh_job_result {
	const void *p; /* NULL: none given */
	size_t len;
};
/* The most bytes of a result the store keeps in its DONE record, durable
 * with it (the file store: MESH_REC_RESULT_MAX); 0 when it keeps none. */
size_t mesh_job_result_max(const struct mesh_job *j);
/* mesh_job_complete_many where res[i] (res may be NULL) is cids[i]'s
 * result, at most mesh_job_result_max bytes: written in the chunk's DONE,
 * so durable with it.  A result given to a store that keeps none, or over
 * its most, is not kept: MESH_E_RANGE for the whole call, nothing done. */
int mesh_job_complete_results(struct mesh_job *j, const uint64_t *cids, const uint64_t *durations_ns,
			      const struct mesh_job_result *res, size_t n, int *results);
/* Records a failed attempt of cid with its exit status (128+sig for a
 * signal).  Returns 0, or 1 when this failure buried the chunk (max attempts
 * reached: it is not leased again until mesh_job_retry). */
int mesh_job_fail(struct mesh_job *j, uint64_t cid, int status);
/* Records durably that this node's run ended because its standard output
 * was closed (`mesh run ... | head`): the chunks it completed are DONE, but
 * what they printed may not have been read, so a later run can say so
 * (status.closed).  0, -ENOTSUP (the PostgreSQL store keeps no such
 * mark), MESH_E_STATE (read-only), or the journal's error. */
int mesh_job_note_closed(struct mesh_job *j);
/* Un-buries every buried chunk (cid == UINT64_MAX) or one; returns how many. */
int mesh_job_retry(struct mesh_job *j, uint64_t cid);

struct mesh_job_status {
	uint64_t n, done, leased, pending, buried;
	uint64_t duplicates;	/* IGNORED completions recorded or seen in this process */
	uint64_t failed_attempts;
	uint64_t speculative_wins; /* chunks whose first completion came from a speculative copy */
	uint64_t closed;	/* runs that ended because their standard output closed
				 * (mesh_job_note_closed); the PostgreSQL store: 0 */
};
/* Counts now (O(1) after the tail is read; leased counts live lease files). */
int mesh_job_status(struct mesh_job *j, struct mesh_job_status *st);

struct mesh_job_failure {
	uint64_t cid;
	uint32_t attempts;
	int last_status;
	int buried;
};
/* Calls fn for every chunk with failed attempts, in cid order. */
int mesh_job_failures(struct mesh_job *j, void (*fn)(const struct mesh_job_failure *, void *), void *arg);
/* 1 if cid is DONE, 0 if not, MESH_E_RANGE. */
int mesh_job_is_done(struct mesh_job *j, uint64_t cid);
/* The DONE bits of chunks 64w .. 64w+63 into *bits (bit i: chunk 64w+i;
 * chunks past n read 0): one look at the store for 64 chunks, for a reader
 * of many in order.  0, MESH_E_RANGE (64w >= n), or the store's error. */
int mesh_job_done_word(struct mesh_job *j, uint64_t w, uint64_t *bits);

/* The completion feed a node follows (a collector of results, a progress
 * view): what it has handed out so far.  Zero it (MESH_JOB_FEED_INIT)
 * before the first call; mesh_job_feed_free frees it. */
struct mesh_job_feed {
	uint64_t *seen; /* bit cid: handed out */
	uint64_t n, words;
};
#define MESH_JOB_FEED_INIT {0}
/* Calls fn(cid, arg) once for every chunk that is DONE (durably: the
 * store has it) and that f has not handed out yet, in cid order, and
 * marks it in f.  fn runs with no lock of j held.  Cost: one look at the
 * DONE bits (n/64 words), whatever the store.  0 or a negative error. */
int mesh_job_feed(struct mesh_job *j, struct mesh_job_feed *f, void (*fn)(uint64_t cid, void *), void *arg);
void mesh_job_feed_free(struct mesh_job_feed *f);
uint64_t mesh_job_nchunks(const struct mesh_job *j);
const char *mesh_job_node(const struct mesh_job *j);

/* Answers of mesh_job_drain besides MESH_JOB_COMPLETE. */
enum {
	MESH_JOB_LIMIT = 2,	  /* drain: maxiter leases taken, the job may be incomplete */
	MESH_JOB_INTERRUPTED = 5, /* drain: *stop became non-zero */
};

struct mesh_job_drain_stats {
	uint64_t leased, done, ignored, stolen, speculative;
};
/* One node's drain loop without a command (harvest's simulated run): lease
 * a batch (mesh_job_lease_many, up to MESH_JOB_LEASE_MANY_MAX), complete it
 * at once in one call (mesh_job_complete_many: one commit, one fsync),
 * until every chunk is DONE (MESH_JOB_COMPLETE), maxiter
 * leases were taken (MESH_JOB_LIMIT; 0 = no limit), *stop is set
 * (MESH_JOB_INTERRUPTED; stop may be NULL), only buried chunks are left
 * (MESH_E_BURIED), or an error.  While others hold every remaining chunk it
 * waits (5..50 ms back-off; a job in PostgreSQL
 * waits up to 1 s, woken at once by a NOTIFY: mesh_job_wait_work) and leases
 * again.  st may be NULL. */
int mesh_job_drain(struct mesh_job *j, uint64_t ttl_ns, uint64_t maxiter, int speculate, volatile int *stop,
		   struct mesh_job_drain_stats *st);

/* Waits up to timeout_ns for work to appear on j (an idle node between
 * leases that answered MESH_JOB_NONE): in PostgreSQL a NOTIFY wakes it at
 * once when a chunk is let go (a failure, a hand-back, a node that
 * stopped); the file store just sleeps.  1 = woken, 0 = timeout, or a
 * negative error; 1 at once when the store has just begun to listen (a
 * wake-up before that was lost: lease again).  Expired leases wake nobody:
 * poll at least that often. */
int mesh_job_wait_work(struct mesh_job *j, uint64_t timeout_ns);
/* For a caller with a poll() loop of its own: a descriptor that becomes
 * readable when work may have appeared on j (PostgreSQL: j's connection,
 * listening for the NOTIFY of mesh_job_wait_work), or -1 where the store
 * has none (the file store: poll as before).  Readable, it is taken with
 * mesh_job_wait_work(j, 0); readable without a wake-up for j (the
 * connection's other traffic, a connection lost) is possible: the caller
 * leases again, and still polls as often as for expired leases. */
int mesh_job_wake_fd(struct mesh_job *j);

/* Speed measured for one node (from the durations in DONE records). */
struct mesh_job_node_stat {
	const char *name;     /* valid until the next call on j */
	uint64_t completions; /* its DONE records */
	uint64_t mean_ns;     /* the mean duration of those that carry one (0: none does) */
	uint64_t timed;	      /* how many carry one (`mesh job complete` writes none) */
};
/* Calls fn for every node named in the journal, in first-seen order. */
int mesh_job_nodes(struct mesh_job *j, void (*fn)(const struct mesh_job_node_stat *, void *), void *arg);
/* The straggler threshold now (0 = speculation not yet allowed). */
uint64_t mesh_job_straggler_ns(struct mesh_job *j);
/* The identity the journal holds (*len 0 and NULL when none). */
const void *mesh_job_identity(const struct mesh_job *j, size_t *len);
/* 1 when where names a PostgreSQL store (postgresql:// or postgres://,
 * store/store_pg.h) rather than a journal path. */
int mesh_job_is_store_url(const char *where);
/* A store URL as a message may show it: without its password, into buf
 * (always terminated). */
void mesh_job_url_safe(const char *url, char *buf, size_t cap);
/* 1 when s is a node name mesh_job_open takes (opts.node: 1..64 bytes of
 * [A-Za-z0-9_.:@-]), or a job name of the lease files (opts.name: 1..64
 * bytes of [A-Za-z0-9_.-], not starting with '.'); else 0. */
int mesh_job_node_ok(const char *s);
int mesh_job_lease_name_ok(const char *s);
/* Checks a lock directory as mesh_job_open would, without creating it: 0
 * when it is private to this user or missing, else MESH_E_PATH,
 * MESH_E_NOTPRIVATE or -errno (store/store.h). */
int mesh_job_lockdir_check(const char *lockdir);
/* Appends this handle committed: fsyncs (batches) and records written. */
void mesh_job_commit_stats(const struct mesh_job *j, uint64_t *fsyncs, uint64_t *records);
/* The store's own words for j's last call that failed, into buf (always
 * terminated): PostgreSQL's SQLSTATE and message, and the command that
 * fixes it where there is one (store/store_pg.h, mesh_pg_error); "" for
 * the file store, whose errors are errno's, and when none failed. */
void mesh_job_store_error(struct mesh_job *j, char *buf, size_t cap);

#endif
