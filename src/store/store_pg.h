/* The PostgreSQL job store: every node of a job reaches one database.
 *
 * Selected by a URL where a journal path is accepted (job/job.h):
 *   postgresql://[user@]host[:port]/db[?param=...][#job]
 * (postgres:// too); libpq reads the rest of the usual environment (PGHOST,
 * PGPASSFILE, PGSSLMODE, ...).  `#job` names the job in the database
 * ("default" without it).  Nothing here prints, and no message built here
 * holds a password: mesh_pg_url_safe gives the URL to show.
 *
 * The schema lives in its own schema name, `mesh`, at version
 * MESH_PG_SCHEMA_VERSION; mesh_pg_schema creates and migrates it (`mesh
 * store init|migrate|status`), and an open refuses any other version
 * (MESH_E_VERSION) or none.  docs/cluster.md has the tables.
 *
 * Semantics are the file store's (docs/job.md): a DONE is committed with
 * synchronous_commit on before it is answered; the first completion wins
 * and later ones are IGNORED and counted; an expired lease is taken by
 * exactly one thief (a row lock, SKIP LOCKED); every time is the
 * database's clock; a lease is one round trip (mesh.lease()); concurrent
 * completions on one handle share one commit (group commit); submit is
 * one row whatever the chunk count, and a chunk has a row only once it
 * was leased or completed.
 *
 * Threads: one handle may be used by many threads (one connection,
 * serialized).  A connection lost (a database restart) is made again once
 * per call, and a call whose answer was lost is never reported DONE: the
 * retry answers IGNORED for a completion that did commit.  Speculation
 * (copies of stragglers, the file store's rule) is store_pg_spec.c's. */
#ifndef MESH_STORE_STORE_PG_H
#define MESH_STORE_STORE_PG_H

#include <stddef.h>
#include <stdint.h>

#define MESH_PG_SCHEMA_VERSION 11

struct mesh_pg;

struct mesh_pg_lease {
	uint64_t cid, token;
	uint64_t deadline_ns, started_ns; /* the database's wall clock */
	uint32_t attempt;
	int stolen;
};

struct mesh_pg_status {
	uint64_t n, done, leased, buried, dups, failed;
	uint64_t spec_wins; /* first completions that came from a speculative copy */
};

struct mesh_pg_failure {
	uint64_t cid;
	uint32_t attempts;
	int last_status, buried;
};

/* 1 when s is a store URL (postgresql:// or postgres://). */
int mesh_pg_url_is(const char *s);
/* The URL without its password, into buf (always terminated). */
void mesh_pg_url_safe(const char *url, char *buf, size_t cap);
/* 1 when the store URL url holds a password (postgresql://user:pw@..., a
 * password parameter however spelled: libpq's own reading of it where
 * libpq can be loaded), else 0.  Every command that takes a store URL
 * refuses such a URL (it would show in the process list for the command's
 * lifetime): MESH_PG_URL_PASSWORD says why and what to do instead. */
int mesh_pg_url_has_password(const char *url);
#define MESH_PG_URL_PASSWORD                                                                                        \
	"a password in the store URL is refused (it would show in the process list): give it in ~/.pgpass, "      \
	"the file PGPASSFILE names, or PGPASSWORD"

/* Spare connections: a thread of this process keeps n (at most 8)
 * connections to url's database made and unused, and mesh_pg_open takes
 * one of them (still open: checked) instead of connecting, so a handle
 * opened at a moment that counts (a meshd starting on a new job) does not
 * wait for a backend's start.  Each holds a backend of the server idle.
 * One process-wide set: MESH_E_STATE when started already.  Stop closes
 * them. */
int mesh_pg_spares_start(const char *url, unsigned n);
void mesh_pg_spares_stop(void);
/* Since the start: connections made, taken, and dropped (found closed). */
void mesh_pg_spares_counts(uint64_t *made, uint64_t *taken, uint64_t *dropped);

/* What this process's connections tell the database they are (its
 * application_name, seen in pg_stat_activity): name ("meshd host1", "mesh
 * store"), followed by " <job>" (the URL's #job, "default" without one)
 * when with_job is set ("mesh run <job>").  Given to libpq as
 * fallback_application_name, so an application_name in the URL wins, then
 * PGAPPNAME, then this.  "mesh" unless set; set it before the first
 * connection (a copy is kept). */
void mesh_pg_set_app(const char *name, int with_job);

/* Connects and checks the schema.  Errors: MESH_E_PARSE (not a URL libpq
 * takes, or a bad job name), MESH_E_UNAVAILABLE (no connection: refused,
 * no such host, a login refused -- why says which, without the password),
 * MESH_E_VERSION (the schema is missing or of another version).  why (may
 * be NULL) gets libpq's message. */
int mesh_pg_open(struct mesh_pg **out, const char *url, char *why, size_t whycap);
/* The outage budget of this process's handles (one node's): how long a
 * call waits for a database that stopped answering (a restart, a network
 * cut), counted from the moment a call of its handle found it gone, before
 * it fails with MESH_E_UNAVAILABLE; MESH_PG_OUTAGE_DEFAULT_NS unless set.
 * Set it before the first handle is opened. */
#define MESH_PG_OUTAGE_DEFAULT_NS (300ull * 1000000000ull)
void mesh_pg_set_outage(uint64_t ns);
/* What a handle's wait hook hears (mesh_pg_set_wait_hook). */
enum {
	MESH_PG_WAIT_GAVE_UP = -1, /* the budget ran out: the waiting calls fail */
	MESH_PG_WAIT_ANSWERS = 0,  /* a call reached it again (waited: how long it was gone) */
	MESH_PG_WAIT_STOPPED = 1,  /* it stopped answering (why: libpq's first line) */
	MESH_PG_WAIT_STILL = 2,	   /* calls still wait (about once a second, from each) */
};
/* fn (may be NULL) hears, from any of pg's threads, when pg's database
 * stops answering, while calls wait for it, and when it answers again or
 * they give up: STOPPED, ANSWERS and GAVE_UP once an outage, STILL from
 * each waiting call about once a second; waited_ns since the outage
 * began, budget_ns the budget.  A nonzero return stops the waiting call
 * now (it fails with MESH_E_UNAVAILABLE): a node told to stop.  Set
 * before pg is used by more than one thread. */
typedef int (*mesh_pg_wait_fn)(void *arg, int state, const char *why, uint64_t waited_ns, uint64_t budget_ns);
void mesh_pg_set_wait_hook(struct mesh_pg *pg, mesh_pg_wait_fn fn, void *arg);
/* How a connection's start waits for a database that has no room for it
 * or is not up yet -- the server refused the login with 53300 (too many
 * clients, too many connections for a role or database, the slots left
 * reserved) or 57P03 (the database system is starting up or shutting
 * down), recognized by the server's message, which libpq gives as text:
 * with fn set, the start tries again (backoff 50 ms doubling to 1 s) for
 * up to the outage budget (mesh_pg_set_outage), telling fn as a handle's
 * wait hook hears an outage (STOPPED with the server's words, STILL about
 * once a second, ANSWERS once it got in, GAVE_UP at the budget; a
 * nonzero return stops the wait), then fails with MESH_E_UNAVAILABLE as
 * before.  fn NULL (the default): a start fails at once.  For every
 * connection this process opens (mesh_pg_open, mesh_pg_schema); set
 * before the first. */
void mesh_pg_set_start_wait(mesh_pg_wait_fn fn, void *arg);
/* 1 when libpq's message of a failed connection's start says the server
 * had no room or was not up yet (mesh_pg_set_start_wait). */
int mesh_pg_start_busy(const char *msg);

void mesh_pg_close(struct mesh_pg *pg);
/* The server's words for pg's last call that failed, into buf (always
 * terminated; "" when none failed): a statement the database refused --
 * its message, "(SQLSTATE xxxxx)", its hint, and the command that fixes
 * it where there is one (a missing schema, table or function: `mesh store
 * init` or `migrate`) -- or, for MESH_E_UNAVAILABLE, libpq's message.
 * Any thread; a call that fails sets it before it returns. */
void mesh_pg_error(struct mesh_pg *pg, char *buf, size_t cap);

/* Creates the job (n chunks, its identity) if missing: 0; the same n and
 * identity (or none on either side): 0; else MESH_E_MISMATCH with *have_n.
 * One row, whatever n. */
int mesh_pg_submit(struct mesh_pg *pg, uint64_t n, const void *ident, size_t ident_len, uint64_t *have_n,
		   unsigned char *have_ident, size_t *have_ident_len);
/* Selects the job: its n and identity (have_ident: MESH_JOB_IDENTITY_MAX
 * bytes).  MESH_E_NOJOB when it was never submitted. */
int mesh_pg_job(struct mesh_pg *pg, uint64_t *n, unsigned char *ident, size_t *ident_len);

/* Up to k leases in one round trip: expired and let-go chunks, and the
 * leases of silent nodes (mesh_pg_node), first, then fresh ones.  *got may
 * be 0 (nothing can be leased now).  The first lease registers this handle
 * as a node named node, its TTL ttl_ns. */
int mesh_pg_lease(struct mesh_pg *pg, const char *node, uint64_t ttl_ns, size_t k, struct mesh_pg_lease *out,
		  size_t *got);
/* Moves the deadline of our lease to now + ttl_ns (a tiny ttl hands it
 * back): 0 with *deadline_ns, MESH_E_STATE when it is no longer ours. */
int mesh_pg_renew(struct mesh_pg *pg, uint64_t cid, uint64_t token, uint64_t ttl_ns, uint64_t *deadline_ns);
/* Completes n chunks (group commit with concurrent callers): results[i] =
 * 0 (DONE, committed) or 1 (IGNORED).  Returns 0 or an error (then none
 * of these is reported DONE). */
int mesh_pg_complete(struct mesh_pg *pg, const uint64_t *cids, const uint64_t *durs_ns, size_t n, int *results);
/* Records a failed attempt: 0, 1 = it buried the chunk, or an error. */
int mesh_pg_fail(struct mesh_pg *pg, uint64_t cid, int status, uint32_t max_attempts);
/* Un-buries cid (UINT64_MAX: all): how many. */
int mesh_pg_retry(struct mesh_pg *pg, uint64_t cid);
int mesh_pg_status(struct mesh_pg *pg, struct mesh_pg_status *st);
int mesh_pg_is_done(struct mesh_pg *pg, uint64_t cid);
int mesh_pg_failures(struct mesh_pg *pg, void (*fn)(const struct mesh_pg_failure *, void *), void *arg);
/* Calls fn for every word of the job's DONE bits that has a bit set (word
 * w: chunks w*64 .. w*64+63, bit i = chunk w*64+i), in w order: the
 * completion feed.  Every bit read is committed. */
int mesh_pg_done_words(struct mesh_pg *pg, void (*fn)(uint64_t w, uint64_t bits, void *), void *arg);
/* Waits up to timeout_ns for work on this job to appear: a chunk let go
 * (a failure, a hand-back, a node that stopped) or the job submitted,
 * told by NOTIFY (LISTEN on this handle's connection from the first call
 * on).  1 = woken, 0 = the timeout, or an error.  The first call after a
 * LISTEN (the first, or one on a connection made anew) answers 1 at once:
 * a NOTIFY before it reached nobody, so lease again before waiting.  An
 * idle node waits here instead of polling the database. */
int mesh_pg_wait(struct mesh_pg *pg, uint64_t timeout_ns);
/* The connection's socket, listening as for mesh_pg_wait (LISTEN from
 * here on), for a caller's poll(); -1 on an error.  Readable: take it with
 * mesh_pg_wait(pg, 0). */
int mesh_pg_wake_fd(struct mesh_pg *pg);
/* Lets every lease taken through this handle go (a node that stops). */
int mesh_pg_release_mine(struct mesh_pg *pg);

/* A node: a handle that leased (registered at its first lease, beating
 * every third of that lease's TTL from a thread until closed), or a
 * meshd's own node of no job (mesh_pg_node_host).  Speed: chunks completed
 * over the time from its registration to its last beat; a node of no job
 * shows the chunks of the nodes of the same name and host registered since
 * (its meshd's drivers) over the time they ran. */
struct mesh_pg_node {
	const char *name, *host, *program, *job; /* valid during fn; job "" for a node of no job */
	uint64_t chunks, busy_ns;		 /* completions sent, their summed durations */
	uint64_t started_ns, beat_ns, ttl_ns;	 /* the database's clock */
	uint64_t age_ns;			 /* since its last beat */
	double chunks_per_s;
	int stopped; /* closed cleanly */
	int silent;  /* not stopped, and no beat for longer than its TTL: its leases may be taken */
};
/* Calls fn for every node (this_job: only those of this handle's job),
 * oldest first. */
int mesh_pg_nodes(struct mesh_pg *pg, int this_job, void (*fn)(const struct mesh_pg_node *, void *), void *arg);
/* The same rows as mesh_pg_nodes(this_job), oldest first, with only
 * name, chunks and busy_ns filled: what placement reads (job/place.h), in
 * a statement that plans and runs in a fraction of the other's time (a
 * node's first lease waits for it). */
int mesh_pg_job_nodes(struct mesh_pg *pg, void (*fn)(const struct mesh_pg_node *, void *), void *arg);

/* Each registration (a handle's first lease, mesh_pg_node_host) removes
 * up to MESH_PG_NODES_PRUNE_MAX stopped rows whose last beat is
 * MESH_PG_NODES_KEEP_US old or more, but those of a job that still has a
 * row not stopped (a live or silent node: its speed counts them) and a
 * running meshd's drivers' (its row's chunks); a live or silent node's
 * row is never removed. */
#define MESH_PG_NODES_KEEP_US (86400ull * 1000000ull)
#define MESH_PG_NODES_PRUNE_MAX 500
/* The job id of a node of no job (no job has it: ids start at 1). */
#define MESH_PG_NO_JOB "0"
/* Registers this handle as a node of no job -- a meshd, present from its
 * start whether it serves a job or not: its name, and programs (what its
 * catalog holds, for people: `mesh nodes`) -- and beats it every third of
 * ttl_ns from a thread until mesh_pg_close, which marks it stopped.  Its
 * row takes no leases.  0, MESH_E_STATE when this handle is a node
 * already, or the database's error. */
int mesh_pg_node_host(struct mesh_pg *pg, const char *name, const char *programs, uint64_t ttl_ns);
/* Its programs changed (mesh_pg_node_host's node): 0, MESH_E_STATE when
 * this handle registered none, or the database's error. */
int mesh_pg_node_programs(struct mesh_pg *pg, const char *programs);

/* Speculation (store_pg_spec.c; the rule is job/spec.h's, the caller's).
 * What a node needs to decide: the job's n and DONE count, every node's
 * completed durations (hist: nb buckets, summed over the job's handles,
 * added to), and this node's speed (every handle of name node). */
struct mesh_pg_spec_view {
	uint64_t n, done, hist_n;
	uint64_t self_chunks, self_busy_ns;
};
int mesh_pg_spec_view(struct mesh_pg *pg, const char *node, uint64_t *hist, size_t nb, struct mesh_pg_spec_view *v);
/* Adds this handle's completed durations (hist: nb bucket counts) to the
 * job's (committed without waiting for the flush: a lost one only moves
 * the threshold). */
int mesh_pg_spec_durations(struct mesh_pg *pg, const uint64_t *hist, size_t nb);
/* Live leases of nodes not named node, run longer than thr_ns (the
 * database's clock), with a free copy slot of copies and no copy of ours:
 * the longest-running first, at most cap. */
struct mesh_pg_straggler {
	uint64_t cid, elapsed_ns;
	uint64_t chunks, busy_ns; /* its holder's speed: every handle of its name */
	uint32_t attempt;
};
int mesh_pg_stragglers(struct mesh_pg *pg, const char *node, uint32_t copies, uint64_t thr_ns,
		       struct mesh_pg_straggler *out, size_t cap, size_t *got);
/* A copy of cid in a free slot of copies while cid is not DONE and leased
 * by another: 0 with *l (stolen 0), MESH_E_STATE when it cannot be. */
int mesh_pg_spec_claim(struct mesh_pg *pg, uint64_t cid, uint32_t copies, uint64_t ttl_ns, struct mesh_pg_lease *l);
/* mesh_pg_renew of a copy. */
int mesh_pg_spec_renew(struct mesh_pg *pg, uint64_t cid, uint64_t token, uint64_t ttl_ns, uint64_t *deadline_ns);
/* mesh_pg_complete of our copies (one commit, not shared): each DONE is a
 * speculative win, counted with it. */
int mesh_pg_spec_complete(struct mesh_pg *pg, const uint64_t *cids, const uint64_t *durs_ns, size_t n, int *results);
/* A failed run of our copy (token): the copy goes, the attempt is counted
 * on its chunk, whose own lease is left as it is.  0, or an error. */
int mesh_pg_spec_fail(struct mesh_pg *pg, uint64_t cid, uint64_t token, int status);
/* Lets this handle's copies go. */
int mesh_pg_spec_release(struct mesh_pg *pg);

enum mesh_pg_schema_op { MESH_PG_SCHEMA_STATUS, MESH_PG_SCHEMA_INIT, MESH_PG_SCHEMA_MIGRATE };
/* `mesh store`: the version found (0: none) and, after init or migrate,
 * the version now.  init refuses an existing schema of another version
 * (MESH_E_VERSION: migrate it); migrate refuses a newer one.  Connection
 * errors as mesh_pg_open. */
int mesh_pg_schema(const char *url, enum mesh_pg_schema_op op, int *found, int *now, char *why, size_t whycap);

#endif
