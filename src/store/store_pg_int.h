/* Inside the PostgreSQL store: the handle, shared by store_pg.c,
 * store_pg_nodes.c and store_pg_wake.c.  Not for other modules. */
#ifndef MESH_STORE_STORE_PG_INT_H
#define MESH_STORE_STORE_PG_INT_H

#include "store/pq.h"
#include "store/store.h"
#include "store/store_pg.h"

#include <stdatomic.h>
#include <pthread.h>
#include <stdint.h>

/* One caller's completions waiting for a shared commit. */
struct cbatch {
	const uint64_t *cids, *durs; /* durs may be NULL */
	size_t n;
	int *results;
	int rc, done;
	struct cbatch *next;
};

struct mesh_pg {
	PGconn *conn;
	pthread_mutex_t mu; /* the connection */
	char job[MESH_NODE_MAX + 1];
	char idtext[24]; /* the job's row id, as a parameter */
	/* the job's row as mesh_pg_open read it, for the first mesh_pg_job */
	int job_known;
	uint64_t job_n;
	size_t job_ident_len;
	unsigned char job_ident[200];
	uint64_t holder; /* random: the leases taken through this handle */
	/* group commit */
	pthread_mutex_t cmu;
	pthread_cond_t ccv;
	struct cbatch *queue;
	int leader;
	/* LISTEN mesh done on this connection (reconnect() clears it: a new
	 * session listens to nothing); listen_fresh: done since the last
	 * wait, which must say "look again" (a NOTIFY before it was lost) */
	int listening, listen_fresh;
	unsigned prepared; /* store_pg.c's statements prepared on it (bits) */
	/* the node (store_pg_nodes.c): registered at the first lease */
	int node_on;
	uint64_t beat_ns;
	pthread_t beat;
	pthread_cond_t bcv; /* with cmu: wakes the beat thread to stop */
	int beat_stop;
	/* A leasing handle's completions go on a connection of their own
	 * (opened by the beat thread as it starts; cconn under cmu, used by
	 * the group commit's leader alone): a lease, a renew or a beat does
	 * not wait behind a commit's WAL flush, and the next lease runs on
	 * another backend while it flushes.  Until then (and where it could
	 * not be opened) completions go on conn. */
	char *conninfo;
	int cconn_wanted;
	PGconn *cconn;
	unsigned cprepared; /* as prepared, for cconn */
	/* mesh_pg_set_wait_hook; down_since: when a call found the
	 * database gone (mesh_mono_ns; 0: it answers), for all of the
	 * handle's connections; gave_up: GAVE_UP was told for that outage;
	 * closing: mesh_pg_close began (a waiting call gives up) */
	mesh_pg_wait_fn wait_fn;
	void *wait_arg;
	_Atomic uint64_t down_since;
	_Atomic int gave_up, closing;
	/* mesh_pg_error's text, under emu (a leaf lock: held only to copy
	 * it) */
	pthread_mutex_t emu;
	char err[400];
};

/* Runs sql with params on pg's connection (pg->mu held), making the
 * connection again when it was lost (waiting up to the outage budget,
 * mesh_pg_set_outage).  The result, or
 * NULL with *rc set. */
PGresult *mesh__pg_q(struct mesh_pg *pg, const char *sql, int n, const char *const *vals, int *rc);
/* Splits "#job" off url into job (cap bytes); the rest, a copy the caller
 * frees, is libpq's conninfo.  NULL: a bad job name (or no memory). */
char *mesh__pg_conninfo(const char *url, char *job, size_t cap);
/* A connection made without blocking (PQconnectStart), polled 100 ms at
 * a time and given up when stopped(arg) says so; NULL where it failed.
 * No session settings on it yet. */
PGconn *mesh__pg_connect_polled(const char *conninfo, int (*stopped)(void *), void *arg);
/* Runs on c, in a transaction it rolls back, what a handle's first calls
 * run (its status, a lease) for no job (-1: no rows), so that a new
 * backend has planned them and compiled mesh.lease before a handle's
 * first calls do (on a new backend here: 1.8 and 3.5 ms; then 0.4 and 0.5).
 * Errors (another schema) are left: c is as it was, with the session's
 * settings applied. */
void mesh__pg_warm(PGconn *c);
/* One of the spare connections to conninfo's database (store_pg_spare.c)
 * that is still open, or NULL: none kept, or none left. */
PGconn *mesh__pg_spare_take(const char *conninfo);
/* Opens pg->cconn (the beat thread, as it starts). */
void mesh__pg_open_cconn(struct mesh_pg *pg);
/* mesh__pg_q with pg->mu taken here and let go before it returns: for a
 * result read without the connection (its rows may call the store). */
PGresult *mesh__pg_ql(struct mesh_pg *pg, const char *sql, int n, const char *const *vals, int *rc);
/* As mesh__pg_ql, sql being the connection's prepared statement of slot
 * (prepared at its first use on a connection, in the same round trip):
 * for what a meshd runs often, one of these a statement. */
enum { MESH__PG_PREP_JOBS = 8, MESH__PG_PREP_CANCELLED, MESH__PG_PREP_JOB_NODES };
PGresult *mesh__pg_qlp(struct mesh_pg *pg, int slot, const char *sql, int n, const char *const *vals, int *rc);
/* A one-value query (pg->mu taken here): the value's text into buf. */
int mesh__pg_q1(struct mesh_pg *pg, const char *sql, int n, const char *const *vals, char *buf, size_t cap);
/* Registers the node (once: the first lease) and starts its beat thread.
 * Errors are the database's; the lease goes on without a node row. */
int mesh__pg_node_start(struct mesh_pg *pg, const char *node, uint64_t ttl_ns);
/* Stops the beat thread and marks the node stopped (close). */
void mesh__pg_node_stop(struct mesh_pg *pg);

#endif
