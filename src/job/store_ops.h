/* The one boundary for a job's state: every call of job.h that touches
 * what a job holds (submit, lease one or k, renew, steal, complete in
 * batches, fail/bury/retry, duplicates, status, the completion feed, the
 * nodes) goes through this table, and job.c knows no store by name.  Two
 * stores implement it:
 *   file        (job_file.c, job_file_lease.c): the completion journal
 *               (journal/) and the lease files (store/store.h);
 *   postgresql  (job_pg.c): store/store_pg.h, one database for many hosts.
 * The table lives in job/ because its words are job.h's (a lease, a
 * status); the stores under it (journal/, store/) know nothing of jobs.
 *
 * Every op has the contract of the job.h call of the same name, except
 * where said here; job.c checks what is common to every store (a node
 * name, k == 0) before it calls.  Both apply one speculation rule
 * (job/spec.h, job/place.h).  Where the stores differ on purpose:
 *   - commit_stats counts the journal's fsyncs (the file store); the
 *     postgresql store answers 0 0. */
#ifndef MESH_JOB_STORE_OPS_H
#define MESH_JOB_STORE_OPS_H

#include "base/clock.h"
#include "job/job.h"

#include <stddef.h>
#include <stdint.h>

/* One store's handle of one job: the first member of each store's own. */
struct mesh__jstore {
	const struct mesh__jstore_ops *ops;
};

struct mesh__jstore_ops {
	const char *kind; /* "file", "postgresql" */
	/* The longest an idle drain loop sleeps between looks (a store with a
	 * wake-up wakes it sooner, wait_work). */
	uint64_t idle_max_ns;
	/* why is never NULL and was zeroed by the caller. */
	int (*submit)(const char *where, uint64_t n, const void *identity, size_t identity_len,
		      struct mesh_job_why *why);
	/* o->why is never NULL; node is the name job.c chose (checked). */
	int (*open)(struct mesh__jstore **out, const struct mesh_job_opts *o, const char *node);
	void (*close)(struct mesh__jstore *s);
	void (*detach)(struct mesh__jstore *s);
	/* One lease (mesh_job_lease): may differ from lease_many with k = 1
	 * (the file store takes no block lease for it). */
	int (*lease)(struct mesh__jstore *s, uint64_t ttl_ns, int speculate, struct mesh_lease *l);
	/* k >= 1 (job.c refuses 0). */
	int (*lease_many)(struct mesh__jstore *s, uint64_t ttl_ns, int speculate, struct mesh_lease *ls, size_t k,
			  size_t *got);
	int (*renew)(struct mesh__jstore *s, struct mesh_lease *l, uint64_t ttl_ns);
	/* res may be NULL; job.c checks each against result_max. */
	int (*complete_many)(struct mesh__jstore *s, const uint64_t *cids, const uint64_t *durs_ns,
			     const struct mesh_job_result *res, size_t n, int *results);
	size_t result_max; /* the most bytes of a result a DONE keeps; 0: none */
	int (*fail)(struct mesh__jstore *s, uint64_t cid, int status);
	int (*retry)(struct mesh__jstore *s, uint64_t cid);
	int (*note_closed)(struct mesh__jstore *s); /* NULL: -ENOTSUP */
	int (*status)(struct mesh__jstore *s, struct mesh_job_status *st);
	int (*failures)(struct mesh__jstore *s, void (*fn)(const struct mesh_job_failure *, void *), void *arg);
	int (*is_done)(struct mesh__jstore *s, uint64_t cid);
	/* The DONE bits of chunks 64w..64w+63 (mesh_job_done_word); NULL:
	 * job.c asks is_done for each. */
	int (*done_word)(struct mesh__jstore *s, uint64_t w, uint64_t *bits);
	/* The completion feed (mesh_job_feed): the chunks DONE that feed f has
	 * not handed out yet, each once, in cid order. */
	int (*feed)(struct mesh__jstore *s, struct mesh_job_feed *f, void (*fn)(uint64_t cid, void *), void *arg);
	int (*nodes)(struct mesh__jstore *s, void (*fn)(const struct mesh_job_node_stat *, void *), void *arg);
	int (*wait_work)(struct mesh__jstore *s, uint64_t timeout_ns);
	int (*wake_fd)(struct mesh__jstore *s); /* NULL: none (mesh_job_wake_fd) */
	uint64_t (*straggler_ns)(struct mesh__jstore *s);
	uint64_t (*nchunks)(const struct mesh__jstore *s);
	const char *(*where)(const struct mesh__jstore *s);
	const void *(*identity)(const struct mesh__jstore *s, size_t *len);
	void (*commit_stats)(const struct mesh__jstore *s, uint64_t *fsyncs, uint64_t *records);
	/* mesh_job_store_error; NULL: a store with no words of its own (""). */
	void (*store_error)(struct mesh__jstore *s, char *buf, size_t cap);
};

extern const struct mesh__jstore_ops mesh__jstore_file;
extern const struct mesh__jstore_ops mesh__jstore_pg;

/* The store a journal path or store URL names. */
const struct mesh__jstore_ops *mesh__jstore_for(const char *where);

/* Feed helpers for the stores: f's bitmap of the chunks handed out, sized
 * for n chunks on first use.  0 or -ENOMEM. */
int mesh__feed_ready(struct mesh_job_feed *f, uint64_t n);
/* Hands out the chunks of one 64-chunk word of DONE bits (word w, bits
 * done) not handed out yet, and marks them. */
void mesh__feed_word(struct mesh_job_feed *f, uint64_t w, uint64_t done, void (*fn)(uint64_t cid, void *),
		     void *arg);

/* Leases a node hands out a second, measured over windows of at least
 * 100 ms: what both stores size a fast node's lease by (a batch it hands
 * out in about 50 ms).  add counts n handed out; get is the rate of the
 * last whole window, a new one started once the current is 100 ms old. */
struct mesh__lease_rate {
	uint64_t t0, count, per_s;
};
static inline void mesh__lease_rate_add(struct mesh__lease_rate *r, uint64_t n)
{
	r->count += n;
}
static inline uint64_t mesh__lease_rate_get(struct mesh__lease_rate *r, uint64_t now_ns)
{
	if (!r->t0) {
		r->t0 = now_ns;
	} else if (now_ns - r->t0 >= 100 * MESH_NS_PER_MS) {
		r->per_s = r->count * MESH_NS_PER_S / (now_ns - r->t0);
		r->t0 = now_ns;
		r->count = 0;
	}
	return r->per_s;
}

#endif
