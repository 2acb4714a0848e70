/* Inside the file store of jobs (store_ops.h): a job is a completion
 * journal (journal/) and a lock directory of lease files (store/store.h).
 * The handle keeps an index of the journal in memory (DONE bits, failures,
 * nodes, durations), brought up to date by tailing the journal under mu.
 *   job_file.c        the index, submit, open, close
 *   job_file_lease.c  leases: one, a block of many, steal, renew, speculation
 *   job_file_done.c   complete (group commit), fail, retry, status, feed
 * Not for other files. */
#ifndef MESH_JOB_JOB_FILE_H
#define MESH_JOB_JOB_FILE_H

#include "job/job.h"
#include "job/spec.h"
#include "job/store_ops.h"
#include "journal/journal.h"
#include "store/store.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define HIST_BUCKETS MESH__SPEC_BUCKETS

_Static_assert(MESH_JOB_LEASE_MANY_MAX == MESH_LEASE_BLOCK, "lease_many hands out at most one block");

struct node {
	uint32_t hash;
	char name[MESH_NODE_MAX + 1];
	uint64_t count;	       /* its DONE records */
	uint64_t timed, sum_us; /* those that carry a duration, and the durations' sum */
};

struct fail {
	uint64_t key; /* cid + 1; 0 = empty slot */
	uint32_t attempts, base;
	int last_status;
	int buried; /* the writer of the last FAIL buried it; a RETRY clears */
};

struct held {
	uint64_t cid, token, started_ns;
	uint64_t boot_deadline_ns; /* on this boot's CLOCK_BOOTTIME: a wall-clock step changes nothing */
	unsigned slot;
	uint32_t attempt;
	enum mesh_lease_kind kind;
	uint32_t hnext; /* held[]: the next of its bucket, index + 1 */
};

struct live {
	uint64_t cid;
	struct mesh_lease_stamp st;
};

struct jfile {
	struct mesh__jstore base; /* first: the ops table (store_ops.h) */
	char *journal_path, *name, *node;
	uint32_t node_hash;
	struct mesh_lease_holder self; /* this process, refreshed after a fork */
	int detached;
	uint32_t max_attempts;
	int spec_taken; /* mu: a copy's lease was claimed by this handle */
	struct mesh__spec_rule spec; /* the options, defaults filled in */
	struct mesh_journal *jr;
	struct mesh_store *st;
	int read_only;

	pthread_mutex_t mu;
	pthread_cond_t cv; /* a busy chunk became free */
	int have_n;
	uint64_t n, words;
	uint64_t n_refused; /* a SUBMIT above MESH_JOB_MAX_CHUNKS (0: none) */
	size_t ident_len;   /* the WORK record's identity (0: none) */
	unsigned char ident[MESH_JOB_IDENTITY_MAX];
	int ident_owned;    /* its flag MESH_REC_WORK_OWNED: only that identity writes */
	uint64_t *done_bits, *busy_bits;
	uint64_t done, dups, failed_attempts, spec_wins;
	uint64_t closed; /* CLOSED records */
	uint64_t cursor;
	uint64_t hist[HIST_BUCKETS], hist_n;
	struct node *nodes;
	size_t nnodes, cnodes, last_node;
	struct fail *fails;
	size_t nfails, cfails;
	struct held *held;
	size_t nheld, cheld;
	uint32_t *hbucket; /* cheld buckets (a power of 2): index + 1 of held[], chained by hnext */
	uint64_t token_seq;
	/* Chunks of our block leases not handed out yet (lease_many). */
	struct held resv[MESH_LEASE_BLOCK];
	size_t nresv;
	struct mesh__lease_rate rate; /* leases handed out a second (store_ops.h) */
};

static inline int bit(const uint64_t *b, uint64_t i)
{
	return (int)((b[i >> 6] >> (i & 63)) & 1);
}
static inline void bit_set(uint64_t *b, uint64_t i)
{
	b[i >> 6] |= 1ull << (i & 63);
}
static inline void bit_clr(uint64_t *b, uint64_t i)
{
	b[i >> 6] &= ~(1ull << (i & 63));
}

/* First cid >= from that is not DONE, or n. */
static inline uint64_t next_not_done(const struct jfile *j, uint64_t from)
{
	uint64_t w = from >> 6;
	uint64_t m;
	if (from >= j->n)
		return j->n;
	m = ~j->done_bits[w] & (~0ull << (from & 63));
	while (!m) {
		if (++w >= j->words)
			return j->n;
		m = ~j->done_bits[w];
	}
	uint64_t c = (w << 6) + (uint64_t)__builtin_ctzll(m);
	return c < j->n ? c : j->n;
}


/* The file store's handle of s. */
static inline struct jfile *jfile_of(struct mesh__jstore *s)
{
	return (struct jfile *)s;
}

/* Shared by the three files (j->mu held where a function says so). */
int mesh__jf_sync_locked(struct jfile *j);
int mesh__jf_is_buried(struct jfile *j, uint64_t cid);
struct fail *mesh__jf_fail_find(struct jfile *j, uint64_t cid, int add);
struct node *mesh__jf_node_find(struct jfile *j, uint32_t hash);
uint32_t mesh__jf_node_hash(const char *name);
uint64_t mesh__jf_hist_quantile_ns(const struct jfile *j, double q);
void mesh__jf_lease_clock(struct jfile *j, struct mesh_lease_clock *c);
struct held *mesh__jf_held_find(struct jfile *j, uint64_t cid);
void mesh__jf_held_del(struct jfile *j, struct held *h);

/* The ops of the file store, by file. */
int mesh__jf_lease(struct mesh__jstore *s, uint64_t ttl_ns, int spec, struct mesh_lease *l);
int mesh__jf_note_closed(struct mesh__jstore *s);
int mesh__jf_lease_many(struct mesh__jstore *s, uint64_t ttl_ns, int spec, struct mesh_lease *ls, size_t k,
			size_t *got);
int mesh__jf_renew(struct mesh__jstore *s, struct mesh_lease *l, uint64_t ttl_ns);
uint64_t mesh__jf_straggler_ns(struct mesh__jstore *s);
int mesh__jf_complete_many(struct mesh__jstore *s, const uint64_t *cids, const uint64_t *durs,
			   const struct mesh_job_result *res, size_t n,
			   int *results);
int mesh__jf_fail(struct mesh__jstore *s, uint64_t cid, int status);
int mesh__jf_retry(struct mesh__jstore *s, uint64_t cid);
int mesh__jf_status(struct mesh__jstore *s, struct mesh_job_status *st);
int mesh__jf_failures(struct mesh__jstore *s, void (*fn)(const struct mesh_job_failure *, void *), void *arg);
int mesh__jf_is_done(struct mesh__jstore *s, uint64_t cid);
int mesh__jf_done_word(struct mesh__jstore *s, uint64_t w, uint64_t *bits);
int mesh__jf_feed(struct mesh__jstore *s, struct mesh_job_feed *f, void (*fn)(uint64_t cid, void *), void *arg);
int mesh__jf_nodes(struct mesh__jstore *s, void (*fn)(const struct mesh_job_node_stat *, void *), void *arg);
int mesh__jf_wait_work(struct mesh__jstore *s, uint64_t timeout_ns);

#endif
