/* The engine's calls (job.h) over the PostgreSQL store (store/store_pg.h):
 * job.c hands every call of a job opened with a store URL to these, with
 * the same contracts.  Not done here: speculation (no copies of
 * stragglers). */
#ifndef MESH_JOB_JOB_PG_H
#define MESH_JOB_JOB_PG_H

#include "job/job.h"

struct mesh__jpg;

int mesh__jpg_submit(const char *url, uint64_t n, const void *ident, size_t ident_len, struct mesh_job_why *why);
/* node: the node name job.c chose (opts or "<host>.<pid>"). */
int mesh__jpg_open(struct mesh__jpg **out, const struct mesh_job_opts *o, const char *node);
void mesh__jpg_close(struct mesh__jpg *p);
void mesh__jpg_detach(struct mesh__jpg *p);
int mesh__jpg_lease_many(struct mesh__jpg *p, uint64_t ttl_ns, struct mesh_lease *ls, size_t k, size_t *got);
int mesh__jpg_renew(struct mesh__jpg *p, struct mesh_lease *l, uint64_t ttl_ns);
int mesh__jpg_complete_many(struct mesh__jpg *p, const uint64_t *cids, const uint64_t *durs, size_t n, int *results);
int mesh__jpg_fail(struct mesh__jpg *p, uint64_t cid, int status);
int mesh__jpg_retry(struct mesh__jpg *p, uint64_t cid);
int mesh__jpg_status(struct mesh__jpg *p, struct mesh_job_status *st);
int mesh__jpg_failures(struct mesh__jpg *p, void (*fn)(const struct mesh_job_failure *, void *), void *arg);
int mesh__jpg_is_done(struct mesh__jpg *p, uint64_t cid);
/* Waits for a NOTIFY of this job (store_pg.h mesh_pg_wait). */
int mesh__jpg_wait(struct mesh__jpg *p, uint64_t timeout_ns);
/* mesh_job_nodes: the nodes of this job in the store (every host's),
 * completions and mean duration from what they sent. */
int mesh__jpg_nodes(struct mesh__jpg *p, void (*fn)(const struct mesh_job_node_stat *, void *), void *arg);
uint64_t mesh__jpg_nchunks(const struct mesh__jpg *p);
const char *mesh__jpg_node(const struct mesh__jpg *p);
const char *mesh__jpg_where(const struct mesh__jpg *p);
const void *mesh__jpg_identity(const struct mesh__jpg *p, size_t *len);

#endif
