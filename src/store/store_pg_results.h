/* meshd jobs in the PostgreSQL store (schema version 3, store_pg_sql.h):
 * `mesh submit --store URL` puts a job's spec (program, options, the
 * chunks' inputs) next to an ordinary job row named s<id>; every meshd
 * that follows the store (`meshd --store URL`) runs the jobs whose
 * program its catalog has, leasing their chunks through the engine
 * (job.h, URL#s<id>); each chunk's reply goes to mesh.results before its
 * DONE bit is committed, so `mesh results` reads a DONE chunk's reply from
 * any host.  docs/cluster.md, "meshd on several hosts".
 *
 * Every call takes a handle of mesh_pg_open (the URL's #job is not used)
 * and is serialized on its connection.  Nothing prints. */
#ifndef MESH_STORE_STORE_PG_RESULTS_H
#define MESH_STORE_STORE_PG_RESULTS_H

#include <stddef.h>
#include <stdint.h>

struct mesh_pg;

/* The largest reply kept for one chunk (PostgreSQL keeps a value this
 * large out of line, TOAST).  A larger one is refused with MESH_E_TOOBIG;
 * meshd buries its chunk at once with the reason (mesh_pgr_bury). */
#define MESH_PGR_RESULT_MAX (1u << 20)
/* The largest input of a job (all its lines): `mesh submit` reads at most
 * this much. */
#define MESH_PGR_INPUT_MAX (16u << 20)

/* A meshd job as the store holds it. */
struct mesh_pgr_job {
	uint64_t id;		/* the job row's id: the job is URL#s<id> */
	uint64_t n;		/* chunks */
	char program[72], name[72];
	unsigned max_workers;	/* 0 = each host's manifest's */
	uint32_t retries;
	uint64_t timeout_ns;
	int speculate;
	int cancelled;
	int has_input;
	/* counts now */
	uint64_t done, leased, buried, failed, dups;
	uint64_t submitted_ns; /* the database's clock */
	uint64_t now_ns;       /* the database's clock when read */
};

/* Submits: one transaction makes the job row (n chunks) and the spec
 * (job->program ..., input of input_len bytes, NULL = none) and tells the
 * followers (NOTIFY mesh_jobs).  *id gets the new id. */
int mesh_pgr_submit(struct mesh_pg *pg, const struct mesh_pgr_job *job, const void *input, size_t input_len,
		    uint64_t *id);
/* Calls fn for every meshd job (id 0) or the one with id, in id order;
 * active: only those not cancelled and not complete.  MESH_E_NOJOB when
 * id names none. */
int mesh_pgr_jobs(struct mesh_pg *pg, uint64_t id, int active, void (*fn)(const struct mesh_pgr_job *, void *),
		  void *arg);
/* Calls fn for each of the n jobs ids[] that was cancelled: what a
 * follower asks of the jobs it runs drivers for (mesh_pgr_jobs(active)
 * no longer lists them), by their keys alone, not over every job there
 * ever was. */
int mesh_pgr_cancelled(struct mesh_pg *pg, const uint64_t *ids, size_t n, void (*fn)(uint64_t id, void *), void *arg);
/* The job's input (malloc'd; *len 0 and NULL when it has none). */
int mesh_pgr_input(struct mesh_pg *pg, uint64_t id, char **data, size_t *len);
/* Cancels for good (NOTIFY mesh_jobs).  MESH_E_NOJOB when there is none. */
int mesh_pgr_cancel(struct mesh_pg *pg, uint64_t id);
/* Keeps n chunks' replies (one transaction; a chunk that has one keeps
 * its first).  0, MESH_E_TOOBIG (one over MESH_PGR_RESULT_MAX: nothing
 * written), or the database's error. */
int mesh_pgr_put_results(struct mesh_pg *pg, uint64_t id, size_t n, const uint64_t *cids, const void *const *data,
			 const size_t *lens);
/* Buries chunk cid now (whatever attempts are left: trying again cannot
 * help), with status and report.  0 or an error. */
int mesh_pgr_bury(struct mesh_pg *pg, uint64_t id, uint64_t cid, int status, const char *report);
/* Keeps a failed attempt's report (the last one of a chunk counts). */
int mesh_pgr_put_report(struct mesh_pg *pg, uint64_t id, uint64_t cid, const void *p, size_t n);
/* From chunk `from` on, in chunk order, at most 1000 settled chunks:
 * fn(cid, data, len, arg) for a DONE chunk (its reply), fn(cid, NULL, 0)
 * for a buried one.  Chunks neither DONE nor buried are left out (the
 * caller stops at the first gap). */
int mesh_pgr_results(struct mesh_pg *pg, uint64_t id, uint64_t from,
		     int (*fn)(uint64_t cid, const void *p, size_t n, void *arg), void *arg);
/* A buried chunk of the job: its attempts, last status and report. */
struct mesh_pgr_buried {
	uint64_t cid;
	uint32_t attempts;
	int status;
	const char *report; /* "" when none */
};
int mesh_pgr_buried(struct mesh_pg *pg, uint64_t id, void (*fn)(const struct mesh_pgr_buried *, void *), void *arg);
/* Waits up to timeout_ns for a NOTIFY on mesh_jobs (a submit, a cancel)
 * or for wake_fd (-1: none) to be readable: 1 woken by a NOTIFY, 2 by
 * wake_fd (not read here), 0 timeout, or an error.  LISTENs from the
 * first call on. */
int mesh_pgr_wait(struct mesh_pg *pg, uint64_t timeout_ns, int wake_fd);
/* Tells the waiters of job id (mesh_pgr_wait_job) that some of its chunks
 * were settled: NOTIFY on the job's own channel, mesh_job_<id>.  meshd
 * sends one a commit batch (not one a chunk); mesh_pgr_bury and
 * mesh_pgr_cancel send theirs in their own statement. */
int mesh_pgr_notify(struct mesh_pg *pg, uint64_t id);
/* Waits up to timeout_ns for news of job id (mesh_pgr_notify, a bury, a
 * cancel): 1 woken, 0 timeout, or an error.  LISTENs on mesh_job_<id> at
 * each call; a NOTIFY sent before the first call is not seen, so a caller
 * reads the job after its first call, then waits. */
int mesh_pgr_wait_job(struct mesh_pg *pg, uint64_t id, uint64_t timeout_ns);

#endif
