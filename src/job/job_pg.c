/* The PostgreSQL store of jobs (store_ops.h) over store/store_pg.h: the
 * engine's calls with the file store's contracts, every one a call or
 * two into the database.  Speculation (the file store's rule, job/spec.h
 * and job/place.h) is in its own functions at the end: a copy is looked
 * for only when a lease found nothing, and a completion of a copy takes
 * its own commit, so the fresh lease and the primary completion cost
 * what they did. */
#include "job/store_ops.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"
#include "job/place.h"
#include "job/spec.h"
#include "store/store.h"
#include "store/store_pg.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A lease this handle holds: its token renews and proves it. */
struct pheld {
	uint64_t cid, token;
};

/* The most chunks one call leases from the database: the k asked for
 * plus a reserve (below): the server's CPU a chunk stops falling past
 * about 256 (docs/DESIGN.md, "Figures behind the code"). */
#define RESV_MAX 256
/* A node that hands out leases fast leases, in one call, what it hands out
 * in about 50 ms (as the file store's block leases do), at most RESV_MAX:
 * one lease statement for several of the caller's batches.  The rest
 * waits in the reserve, leased to this handle (it counts as leased;
 * mesh.release() lets it go at close; a silent node's is stolen as its
 * other leases are).  Other nodes wait for a chunk of it at most about
 * those 50 ms, so the reserve shrinks by itself where there are many
 * nodes (each one slower) and few chunks.  None for a TTL under
 * RESV_TTL_MIN_NS or a detached handle. */
#define RESV_WINDOW_NS (50 * MESH_NS_PER_MS)
#define RESV_TTL_MIN_NS (1000 * MESH_NS_PER_MS)

struct presv {
	struct mesh_pg_lease l;
	uint64_t leased_ns; /* mesh_mono_ns() when leased (renewed) */
};

struct mesh__jpg {
	struct mesh__jstore base; /* first: the ops table */
	struct mesh_pg *pg;
	char node[MESH_NODE_MAX + 1];
	char where[512]; /* the URL without its password */
	uint64_t n;
	uint32_t max_attempts;
	int detached, read_only;
	size_t ident_len;
	unsigned char ident[MESH_JOB_IDENTITY_MAX];
	pthread_mutex_t mu;
	struct pheld *held;
	size_t nheld, cheld;
	/* speculation (mu): our copies' leases, this handle's completed
	 * durations not yet added to the job's, when they last were */
	struct mesh__spec_rule spec;
	struct pheld *copies;
	size_t ncopies, ccopies;
	int spec_taken;
	uint64_t hist[MESH__SPEC_BUCKETS], hist_n, hist_at_ns;
	/* the reserve (RESV_MAX), oldest first, and the rate it is sized by */
	struct presv resv[RESV_MAX];
	size_t nresv;
	struct mesh__lease_rate rate;
};

static int spec_taken(const struct mesh__jpg *p);
static int spec_lease(struct mesh__jpg *p, uint64_t ttl_ns, struct mesh_lease *l);
static int spec_renew(struct mesh__jpg *p, struct mesh_lease *l, uint64_t ttl_ns);
static int spec_complete(struct mesh__jpg *p, const uint64_t *cids, const uint64_t *durs, size_t n, int *results);
static int spec_fail(struct mesh__jpg *p, uint64_t cid, int status);
static void spec_durations(struct mesh__jpg *p, const uint64_t *durs, const int *results, size_t n);
static void spec_close(struct mesh__jpg *p);

_Static_assert((int)MESH_JOB_STORE_GAVE_UP == (int)MESH_PG_WAIT_GAVE_UP &&
		       (int)MESH_JOB_STORE_ANSWERS == (int)MESH_PG_WAIT_ANSWERS &&
		       (int)MESH_JOB_STORE_STOPPED == (int)MESH_PG_WAIT_STOPPED &&
		       (int)MESH_JOB_STORE_STILL == (int)MESH_PG_WAIT_STILL,
	       "job.h's store wait states are store_pg.h's");
_Static_assert(MESH_JOB_STORE_OUTAGE_DEFAULT_NS == MESH_PG_OUTAGE_DEFAULT_NS, "one default outage budget");

void mesh_job_set_store_outage(uint64_t ns)
{
	mesh_pg_set_outage(ns);
}

void mesh_job_set_store_app(const char *name, int with_job)
{
	mesh_pg_set_app(name, with_job);
}

void mesh_job_set_store_start_wait(int (*fn)(void *arg, int state, const char *why, uint64_t waited_ns,
					     uint64_t budget_ns),
				   void *arg)
{
	mesh_pg_set_start_wait(fn, arg);
}

/* mesh_job_store_wait_words' lines: the outages under way, the last
 * "still waiting" said (a step of still_step), whether one gave up. */
static _Atomic int store_down, store_said, store_gave_up;

/* "still waiting" at 10 s, 30 s, 1 min, then each minute: the step
 * waited reached. */
static int still_step(uint64_t waited_ns)
{
	uint64_t s = waited_ns / MESH_NS_PER_S;
	return s < 10 ? 0 : s < 30 ? 1 : s < 60 ? 2 : 2 + (int)(s / 60);
}

int mesh_job_store_wait_words(int state, const char *why, uint64_t waited_ns, uint64_t budget_ns, char *msg,
			      size_t cap)
{
	char waited[32], budget[32], left[32];
	mesh_say_duration(waited, sizeof waited, waited_ns);
	mesh_say_duration(budget, sizeof budget, budget_ns);
	mesh_say_duration(left, sizeof left, budget_ns > waited_ns ? budget_ns - waited_ns : 0);
	switch (state) {
	case MESH_JOB_STORE_STOPPED:
		if (atomic_fetch_add(&store_down, 1) != 0)
			break;
		store_said = 0;
		snprintf(msg, cap,
			 "stopped answering (%s); waiting for it up to %s (--store-outage), this node's leases and output kept",
			 why, budget);
		return 1;
	case MESH_JOB_STORE_STILL: {
		int step = still_step(waited_ns), said = store_said;
		if (step <= said || !atomic_compare_exchange_strong(&store_said, &said, step))
			break;
		snprintf(msg, cap, "has not answered for %s; waiting %s more", waited, left);
		return 1;
	}
	case MESH_JOB_STORE_ANSWERS:
		if (atomic_fetch_sub(&store_down, 1) != 1)
			break;
		snprintf(msg, cap, "answers again after %s", waited);
		return 1;
	case MESH_JOB_STORE_GAVE_UP:
		if (atomic_exchange(&store_gave_up, 1))
			break;
		snprintf(msg, cap, "did not answer for %s (--store-outage): giving up", budget);
		return 1;
	}
	if (cap)
		msg[0] = 0;
	return 0;
}

static struct mesh__jpg *jpg_of(const struct mesh__jstore *s)
{
	return (struct mesh__jpg *)s;
}

static void why_conn(struct mesh_job_why *why, int rc)
{
	if (why)
		why->at = rc == MESH_E_UNAVAILABLE || rc == MESH_E_PARSE ? MESH_JOB_AT_NONE : MESH_JOB_AT_JOURNAL;
}

static int jp_submit(const char *url, uint64_t n, const void *ident, size_t ident_len, struct mesh_job_why *why)
{
	struct mesh_pg *pg;
	int rc;
	if (n == 0 || n > MESH_JOB_MAX_CHUNKS)
		return MESH_E_RANGE;
	if (ident_len > MESH_JOB_IDENTITY_MAX)
		return MESH_E_TOOBIG;
	rc = mesh_pg_open(&pg, url, why->store_msg, sizeof why->store_msg);
	if (rc) {
		why_conn(why, rc);
		return rc;
	}
	rc = mesh_pg_submit(pg, n, ident, ident_len, &why->n, why->identity, &why->identity_len);
	if (rc < 0)
		mesh_pg_error(pg, why->store_msg, sizeof why->store_msg);
	mesh_pg_close(pg);
	return rc;
}

static int jp_open(struct mesh__jstore **out, const struct mesh_job_opts *o, const char *node)
{
	struct mesh__jpg *p = calloc(1, sizeof *p);
	int rc;
	if (!p)
		return -ENOMEM;
	rc = mesh_pg_open(&p->pg, o->journal, o->why ? o->why->store_msg : NULL, o->why ? sizeof o->why->store_msg : 0);
	if (!rc)
		mesh_pg_set_wait_hook(p->pg, o->on_store_wait, o->on_store_wait_arg);
	if (!rc)
		rc = mesh_pg_job(p->pg, &p->n, p->ident, &p->ident_len);
	if (!rc && o->nchunks && o->nchunks != p->n)
		rc = MESH_E_MISMATCH;
	if (!rc && o->identity_len && p->ident_len &&
	    (o->identity_len != p->ident_len || memcmp(o->identity, p->ident, p->ident_len)))
		rc = MESH_E_MISMATCH;
	if (rc) {
		if (p->pg && rc < 0 && o->why && !o->why->store_msg[0])
			mesh_pg_error(p->pg, o->why->store_msg, sizeof o->why->store_msg);
		if (p->pg)
			mesh_pg_close(p->pg);
		if (o->why) {
			why_conn(o->why, rc);
			o->why->n = p->n;
			o->why->identity_len = p->ident_len;
			memcpy(o->why->identity, p->ident, p->ident_len);
		}
		free(p);
		return rc;
	}
	snprintf(p->node, sizeof p->node, "%s", node);
	mesh_pg_url_safe(o->journal, p->where, sizeof p->where);
	p->max_attempts = o->max_attempts ? o->max_attempts : MESH_JOB_MAX_ATTEMPTS_DEFAULT;
	p->read_only = o->read_only;
	mesh__spec_rule_of(&p->spec, o);
	pthread_mutex_init(&p->mu, NULL);
	p->base.ops = &mesh__jstore_pg;
	*out = &p->base;
	return 0;
}

static void jp_close(struct mesh__jstore *s)
{
	struct mesh__jpg *p = jpg_of(s);
	if (!p)
		return;
	/* A node that stops lets its leases go (not a detached one's: they
	 * are its caller's). */
	if (!p->detached && !p->read_only && (p->nheld || p->nresv))
		mesh_pg_release_mine(p->pg);
	spec_close(p);
	mesh_pg_close(p->pg);
	pthread_mutex_destroy(&p->mu);
	free(p->held);
	free(p->copies);
	free(p);
}

static void jp_detach(struct mesh__jstore *s)
{
	struct mesh__jpg *p = jpg_of(s);
	p->detached = 1;
}

static struct pheld *held_find(struct mesh__jpg *p, uint64_t cid)
{
	for (size_t i = 0; i < p->nheld; i++)
		if (p->held[i].cid == cid)
			return &p->held[i];
	return NULL;
}

static void held_drop(struct mesh__jpg *p, uint64_t cid)
{
	struct pheld *h = held_find(p, cid);
	if (h)
		*h = p->held[--p->nheld];
}

static int held_put(struct mesh__jpg *p, uint64_t cid, uint64_t token)
{
	struct pheld *h = held_find(p, cid);
	if (!h) {
		if (p->nheld == p->cheld) {
			size_t c = p->cheld ? 2 * p->cheld : 16;
			struct pheld *n = realloc(p->held, c * sizeof *n);
			if (!n)
				return -ENOMEM;
			p->held = n;
			p->cheld = c;
		}
		h = &p->held[p->nheld++];
	}
	h->cid = cid;
	h->token = token;
	return 0;
}

/* How many chunks to lease from the database for k asked for (p->mu
 * held): k, or what this handle hands out in RESV_WINDOW_NS. */
static size_t lease_target(struct mesh__jpg *p, size_t k, uint64_t ttl_ns)
{
	uint64_t rate = mesh__lease_rate_get(&p->rate, mesh_mono_ns()), t;
	if (p->detached || ttl_ns < RESV_TTL_MIN_NS)
		return k;
	/* whole words of 64 from half a word on: a fresh lease from a cursor
	 * at a multiple of 64 ends at one, so that the caller's batches of 64
	 * complete a DONE word each instead of two completers meeting on one
	 * (the second waits for the first's commit: 8 nodes, leases of 64 to
	 * 256 not so rounded, the completion took 2 to 4 times the server time) */
	t = rate * RESV_WINDOW_NS / MESH_NS_PER_S;
	if (t >= 32)
		t = (t + 32) / 64 * 64;
	return t <= k ? k : t > RESV_MAX ? RESV_MAX : (size_t)t;
}

/* Hands out up to k leases of the reserve into ls (p->mu held), oldest
 * first.  One leased more than ttl/2 ago is renewed first, so a lease
 * handed out lives at least that long; one lost meanwhile (its block
 * stolen after it expired) is skipped.  Returns how many. */
static size_t resv_take(struct mesh__jpg *p, uint64_t ttl_ns, struct mesh_lease *ls, size_t k)
{
	size_t got = 0, used = 0;
	uint64_t now = mesh_mono_ns();
	for (; used < p->nresv && got < k; used++) {
		struct presv *r = &p->resv[used];
		if (now - r->leased_ns > ttl_ns / 2) {
			uint64_t dl;
			if (mesh_pg_renew(p->pg, r->l.cid, r->l.token, ttl_ns, &dl))
				continue;
			r->l.deadline_ns = dl;
		}
		if (held_put(p, r->l.cid, r->l.token))
			break; /* stays in the reserve */
		ls[got].cid = r->l.cid;
		ls[got].attempt = r->l.attempt;
		ls[got].kind = r->l.stolen ? MESH_LEASE_STOLEN : MESH_LEASE_FRESH;
		ls[got].deadline_ns = r->l.deadline_ns;
		/* started now, on the database's clock as near as we can say */
		ls[got].started_ns = r->l.started_ns + (now - r->leased_ns);
		got++;
	}
	memmove(p->resv, p->resv + used, (p->nresv - used) * sizeof *p->resv);
	p->nresv -= used;
	return got;
}

static int jp_lease_many(struct mesh__jstore *s, uint64_t ttl_ns, int speculate, struct mesh_lease *ls, size_t k,
			 size_t *got)
{
	struct mesh__jpg *p = jpg_of(s);
	struct mesh_pg_lease pl[RESV_MAX];
	size_t n = 0, want, from_db = 0;
	int rc = 0;
	*got = 0;
	if (p->read_only)
		return MESH_E_STATE;
	if (k == 0)
		return MESH_E_RANGE;
	if (k > MESH_JOB_LEASE_MANY_MAX)
		k = MESH_JOB_LEASE_MANY_MAX;
	pthread_mutex_lock(&p->mu);
	n = resv_take(p, ttl_ns, ls, k);
	want = n < k && !p->nresv ? lease_target(p, k - n, ttl_ns) : 0;
	pthread_mutex_unlock(&p->mu);
	if (want) {
		/* before the call: the database's lease time is later, so the
		 * reserve's age is never under the lease's own */
		uint64_t now = mesh_mono_ns();
		rc = mesh_pg_lease(p->pg, p->node, ttl_ns, want, pl, &from_db);
		pthread_mutex_lock(&p->mu);
		for (size_t i = 0; !rc && i < from_db; i++) {
			if (n < k) {
				ls[n].cid = pl[i].cid;
				ls[n].attempt = pl[i].attempt;
				ls[n].kind = pl[i].stolen ? MESH_LEASE_STOLEN : MESH_LEASE_FRESH;
				ls[n].deadline_ns = pl[i].deadline_ns;
				ls[n].started_ns = pl[i].started_ns;
				if (held_put(p, pl[i].cid, pl[i].token))
					rc = -ENOMEM;
				n++;
			} else if (p->nresv < RESV_MAX) {
				p->resv[p->nresv].l = pl[i];
				p->resv[p->nresv++].leased_ns = now;
			}
		}
		pthread_mutex_unlock(&p->mu);
		if (rc && !n)
			return rc;
	}
	pthread_mutex_lock(&p->mu);
	mesh__lease_rate_add(&p->rate, n);
	pthread_mutex_unlock(&p->mu);
	*got = n;
	if (n)
		return rc == -ENOMEM ? rc : 0;
	struct mesh_pg_status st;
	rc = mesh_pg_status(p->pg, &st);
	if (rc)
		return rc;
	if (st.done >= st.n)
		return MESH_JOB_COMPLETE;
	/* nothing pending, no expired lease: a copy of a straggler (one) */
	rc = speculate ? spec_lease(p, ttl_ns, &ls[0]) : 0;
	if (rc == 1)
		*got = 1;
	return rc < 0 ? rc : rc == 1 ? 0 : MESH_JOB_NONE;
}

static int jp_renew(struct mesh__jstore *s, struct mesh_lease *l, uint64_t ttl_ns)
{
	struct mesh__jpg *p = jpg_of(s);
	struct pheld *h;
	uint64_t token, dl;
	int rc;
	if (p->read_only)
		return MESH_E_STATE;
	if (spec_taken(p) && (rc = spec_renew(p, l, ttl_ns)) != 1)
		return rc;
	pthread_mutex_lock(&p->mu);
	h = held_find(p, l->cid);
	token = h ? h->token : 0;
	pthread_mutex_unlock(&p->mu);
	if (!token)
		return MESH_E_STATE;
	rc = mesh_pg_renew(p->pg, l->cid, token, ttl_ns, &dl);
	if (!rc)
		l->deadline_ns = dl;
	else if (rc == MESH_E_STATE) {
		pthread_mutex_lock(&p->mu);
		held_drop(p, l->cid);
		pthread_mutex_unlock(&p->mu);
	}
	return rc;
}

/* res: never given (result_max 0: job.c refuses one). */
static int jp_complete_many(struct mesh__jstore *s, const uint64_t *cids, const uint64_t *durs,
			    const struct mesh_job_result *res, size_t n, int *results)
{
	(void)res;
	struct mesh__jpg *p = jpg_of(s);
	int rc;
	if (p->read_only) {
		for (size_t i = 0; i < n; i++)
			results[i] = MESH_E_STATE;
		return MESH_E_STATE;
	}
	for (size_t i = 0; i < n; i++)
		if (cids[i] >= p->n) {
			for (size_t k = 0; k < n; k++)
				results[k] = cids[k] >= p->n ? MESH_E_RANGE : 0;
			return MESH_E_RANGE;
		}
	rc = spec_taken(p) ? spec_complete(p, cids, durs, n, results) : mesh_pg_complete(p->pg, cids, durs, n, results);
	for (size_t i = 0; i < n; i++)
		results[i] = rc ? rc : results[i] == 0 ? MESH_JOB_DONE : MESH_JOB_IGNORED;
	spec_durations(p, durs, results, n);
	if (!rc) {
		pthread_mutex_lock(&p->mu);
		for (size_t i = 0; i < n; i++)
			held_drop(p, cids[i]);
		pthread_mutex_unlock(&p->mu);
	}
	return rc;
}

static int jp_fail(struct mesh__jstore *s, uint64_t cid, int status)
{
	struct mesh__jpg *p = jpg_of(s);
	if (p->read_only)
		return MESH_E_STATE;
	if (cid >= p->n)
		return MESH_E_RANGE;
	int rc = spec_taken(p) ? spec_fail(p, cid, status) : 1;
	if (rc != 1)
		return rc;
	pthread_mutex_lock(&p->mu);
	held_drop(p, cid);
	pthread_mutex_unlock(&p->mu);
	return mesh_pg_fail(p->pg, cid, status, p->max_attempts);
}

static int jp_retry(struct mesh__jstore *s, uint64_t cid)
{
	struct mesh__jpg *p = jpg_of(s);
	if (p->read_only)
		return MESH_E_STATE;
	if (cid != UINT64_MAX && cid >= p->n)
		return MESH_E_RANGE;
	return mesh_pg_retry(p->pg, cid);
}

static int jp_status(struct mesh__jstore *s, struct mesh_job_status *st)
{
	struct mesh__jpg *p = jpg_of(s);
	struct mesh_pg_status ps;
	int rc = mesh_pg_status(p->pg, &ps);
	memset(st, 0, sizeof *st);
	if (rc)
		return rc;
	st->n = ps.n;
	st->done = ps.done;
	st->leased = ps.leased;
	st->buried = ps.buried;
	st->duplicates = ps.dups;
	st->failed_attempts = ps.failed;
	st->pending = ps.n - ps.done;
	st->pending = st->pending > ps.leased + ps.buried ? st->pending - ps.leased - ps.buried : 0;
	st->speculative_wins = ps.spec_wins;
	return 0;
}

struct fail_arg {
	void (*fn)(const struct mesh_job_failure *, void *);
	void *arg;
};
static void one_failure(const struct mesh_pg_failure *f, void *arg)
{
	struct fail_arg *a = arg;
	struct mesh_job_failure jf = {f->cid, f->attempts, f->last_status, f->buried};
	a->fn(&jf, a->arg);
}

static int jp_failures(struct mesh__jstore *s, void (*fn)(const struct mesh_job_failure *, void *), void *arg)
{
	struct mesh__jpg *p = jpg_of(s);
	struct fail_arg a = {fn, arg};
	return mesh_pg_failures(p->pg, one_failure, &a);
}

static int jp_is_done(struct mesh__jstore *s, uint64_t cid)
{
	struct mesh__jpg *p = jpg_of(s);
	if (cid >= p->n)
		return MESH_E_RANGE;
	return mesh_pg_is_done(p->pg, cid);
}

static int jp_wake_fd(struct mesh__jstore *s)
{
	return mesh_pg_wake_fd(jpg_of(s)->pg);
}

static int jp_wait(struct mesh__jstore *s, uint64_t timeout_ns)
{
	struct mesh__jpg *p = jpg_of(s);
	return mesh_pg_wait(p->pg, timeout_ns);
}

struct nodes_arg {
	void (*fn)(const struct mesh_job_node_stat *, void *);
	void *arg;
};
static void one_node(const struct mesh_pg_node *nd, void *arg)
{
	struct nodes_arg *a = arg;
	struct mesh_job_node_stat s = {nd->name, nd->chunks, nd->chunks ? nd->busy_ns / nd->chunks : 0, nd->chunks};
	a->fn(&s, a->arg);
}

static int jp_nodes(struct mesh__jstore *s, void (*fn)(const struct mesh_job_node_stat *, void *), void *arg)
{
	struct mesh__jpg *p = jpg_of(s);
	struct nodes_arg a = {fn, arg};
	return mesh_pg_job_nodes(p->pg, one_node, &a);
}

static uint64_t jp_nchunks(const struct mesh__jstore *s)
{
	const struct mesh__jpg *p = jpg_of(s);
	return p->n;
}
static const char *jp_where(const struct mesh__jstore *s)
{
	const struct mesh__jpg *p = jpg_of(s);
	return p->where;
}
static const void *jp_identity(const struct mesh__jstore *s, size_t *len)
{
	const struct mesh__jpg *p = jpg_of(s);
	*len = p->ident_len;
	return p->ident_len ? p->ident : NULL;
}

static int jp_lease(struct mesh__jstore *s, uint64_t ttl_ns, int speculate, struct mesh_lease *l)
{
	size_t got;
	return jp_lease_many(s, ttl_ns, speculate, l, 1, &got);
}

struct feed_arg {
	struct mesh_job_feed *f;
	void (*fn)(uint64_t cid, void *);
	void *arg;
};
static void one_word(uint64_t w, uint64_t bits, void *arg)
{
	struct feed_arg *a = arg;
	mesh__feed_word(a->f, w, bits, a->fn, a->arg);
}

static int jp_feed(struct mesh__jstore *s, struct mesh_job_feed *f, void (*fn)(uint64_t cid, void *), void *arg)
{
	struct mesh__jpg *p = jpg_of(s);
	struct feed_arg a = {f, fn, arg};
	int rc = mesh__feed_ready(f, p->n);
	return rc ? rc : mesh_pg_done_words(p->pg, one_word, &a);
}

static void jp_commit_stats(const struct mesh__jstore *s, uint64_t *fsyncs, uint64_t *records)
{
	(void)s;
	*fsyncs = *records = 0;
}

static void jp_store_error(struct mesh__jstore *s, char *buf, size_t cap)
{
	mesh_pg_error(jpg_of(s)->pg, buf, cap);
}

/* Speculation: the file store's rule (docs/job.md), decided on what the
 * database says with its clock -- the job's DONE count and every node's
 * completed durations (the threshold, job/spec.h), the live leases of
 * other nodes that ran past it with their holders' speeds, and place()'s
 * verdict for this node (job/place.h).  A copy is a row of mesh.copies
 * (at most spec_max_copies a chunk); the first completion wins, and one
 * by a copy is a speculative win, counted in the same commit. */

/* How often a node adds its completed durations to the job's at most
 * (besides when it runs out of work and when it closes). */
#define SPEC_FLUSH_NS (250 * MESH_NS_PER_MS)
/* The stragglers looked at a time (the longest-running first). */
#define SPEC_LOOK 32

static int spec_taken(const struct mesh__jpg *p)
{
	return __atomic_load_n(&p->spec_taken, __ATOMIC_ACQUIRE);
}

static struct pheld *copy_find(struct mesh__jpg *p, uint64_t cid)
{
	for (size_t i = 0; i < p->ncopies; i++)
		if (p->copies[i].cid == cid)
			return &p->copies[i];
	return NULL;
}

static void copy_drop(struct mesh__jpg *p, uint64_t cid)
{
	struct pheld *h = copy_find(p, cid);
	if (h)
		*h = p->copies[--p->ncopies];
}

static int copy_put(struct mesh__jpg *p, uint64_t cid, uint64_t token)
{
	if (p->ncopies == p->ccopies) {
		size_t c = p->ccopies ? 2 * p->ccopies : 4;
		struct pheld *n = realloc(p->copies, c * sizeof *n);
		if (!n)
			return -ENOMEM;
		p->copies = n;
		p->ccopies = c;
	}
	p->copies[p->ncopies++] = (struct pheld){cid, token};
	return 0;
}

/* Adds our durations not yet added to the job's: when now, or when the
 * last time is SPEC_FLUSH_NS ago.  A failure keeps them for the next. */
static void spec_flush(struct mesh__jpg *p, int now)
{
	uint64_t h[MESH__SPEC_BUCKETS], t = mesh_mono_ns();
	pthread_mutex_lock(&p->mu);
	if (!p->hist_n || (!now && t - p->hist_at_ns < SPEC_FLUSH_NS)) {
		pthread_mutex_unlock(&p->mu);
		return;
	}
	memcpy(h, p->hist, sizeof h);
	memset(p->hist, 0, sizeof p->hist);
	p->hist_n = 0;
	p->hist_at_ns = t;
	pthread_mutex_unlock(&p->mu);
	if (mesh_pg_spec_durations(p->pg, h, MESH__SPEC_BUCKETS)) {
		pthread_mutex_lock(&p->mu);
		for (unsigned b = 0; b < MESH__SPEC_BUCKETS; b++) {
			p->hist[b] += h[b];
			p->hist_n += h[b];
		}
		pthread_mutex_unlock(&p->mu);
	}
}

/* The durations of the completions that were first (DONE), as the file
 * store's DONE records carry them; an unknown one (0) is not counted. */
static void spec_durations(struct mesh__jpg *p, const uint64_t *durs, const int *results, size_t n)
{
	if (!durs)
		return;
	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < n; i++)
		if (results[i] == MESH_JOB_DONE && durs[i]) {
			p->hist[mesh__spec_bucket(durs[i] / 1000)]++;
			p->hist_n++;
		}
	pthread_mutex_unlock(&p->mu);
	spec_flush(p, 0);
}

/* The threshold now (0: not yet), with the view it came from and the
 * job's median duration. */
static int spec_threshold(struct mesh__jpg *p, uint64_t *thr, uint64_t *typical, struct mesh_pg_spec_view *v)
{
	uint64_t h[MESH__SPEC_BUCKETS] = {0};
	int rc;
	spec_flush(p, 1);
	rc = mesh_pg_spec_view(p->pg, p->node, h, MESH__SPEC_BUCKETS, v);
	if (rc)
		return rc;
	*thr = mesh__spec_threshold_ns(&p->spec, h, v->hist_n, v->n, v->done);
	*typical = mesh__spec_quantile_ns(h, v->hist_n, 0.5);
	return 0;
}

static struct mesh_place_node place_node(uint64_t chunks, uint64_t busy_ns)
{
	struct mesh_place_node n = {chunks ? busy_ns / chunks : 0, chunks};
	return n;
}

/* A copy of the longest-running straggler that place() gives this node:
 * 1 with *l, 0 none, or an error. */
static int spec_lease(struct mesh__jpg *p, uint64_t ttl_ns, struct mesh_lease *l)
{
	struct mesh_pg_straggler sg[SPEC_LOOK];
	struct mesh_pg_spec_view v;
	uint64_t thr, typical;
	size_t n = 0;
	int rc = spec_threshold(p, &thr, &typical, &v);
	if (rc || !thr)
		return rc;
	rc = mesh_pg_stragglers(p->pg, p->node, p->spec.copies, thr, sg, SPEC_LOOK, &n);
	if (rc)
		return rc;
	struct mesh_place_node self = place_node(v.self_chunks, v.self_busy_ns);
	for (size_t i = 0; i < n; i++) {
		struct mesh_place_node holder = place_node(sg[i].chunks, sg[i].busy_ns);
		struct mesh_pg_lease pl;
		if (mesh_place(&holder, sg[i].elapsed_ns, &self, 1, typical) != 0)
			continue;
		rc = mesh_pg_spec_claim(p->pg, sg[i].cid, p->spec.copies, ttl_ns, &pl);
		if (rc == MESH_E_STATE)
			continue; /* DONE, or its slots taken, meanwhile */
		if (rc)
			return rc;
		pthread_mutex_lock(&p->mu);
		rc = copy_put(p, pl.cid, pl.token);
		__atomic_store_n(&p->spec_taken, 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&p->mu);
		if (rc)
			return rc;
		l->cid = pl.cid;
		l->attempt = pl.attempt;
		l->kind = MESH_LEASE_SPECULATIVE;
		l->deadline_ns = pl.deadline_ns;
		l->started_ns = pl.started_ns;
		return 1;
	}
	return 0;
}

/* Renews l when it is one of our copies (1: it is not). */
static int spec_renew(struct mesh__jpg *p, struct mesh_lease *l, uint64_t ttl_ns)
{
	struct pheld *h;
	uint64_t token = 0, dl;
	int rc;
	pthread_mutex_lock(&p->mu);
	if ((h = copy_find(p, l->cid)))
		token = h->token;
	pthread_mutex_unlock(&p->mu);
	if (!token)
		return 1;
	rc = mesh_pg_spec_renew(p->pg, l->cid, token, ttl_ns, &dl);
	if (!rc)
		l->deadline_ns = dl;
	else if (rc == MESH_E_STATE) {
		pthread_mutex_lock(&p->mu);
		copy_drop(p, l->cid);
		pthread_mutex_unlock(&p->mu);
	}
	return rc;
}

/* Fails cid when it is one of our copies (1: it is not): the copy goes and
 * the attempt counts; the chunk's own lease stays its holder's. */
static int spec_fail(struct mesh__jpg *p, uint64_t cid, int status)
{
	struct pheld *h;
	uint64_t token = 0;
	pthread_mutex_lock(&p->mu);
	if ((h = copy_find(p, cid))) {
		token = h->token;
		copy_drop(p, cid);
	}
	pthread_mutex_unlock(&p->mu);
	return token ? mesh_pg_spec_fail(p->pg, cid, token, status) : 1;
}

/* mesh_pg_complete for a handle that took copies: our copies through
 * their own commit (a win counted with its DONE), the rest as usual. */
static int spec_complete(struct mesh__jpg *p, const uint64_t *cids, const uint64_t *durs, size_t n, int *results)
{
	uint64_t *c = malloc(2 * n * sizeof *c), *d = c + n;
	size_t *at = malloc(n * sizeof *at), nc = 0, np = 0;
	int *r = malloc(n * sizeof *r), rc = 0;
	if (!c || !at || !r) {
		rc = -ENOMEM;
		goto out;
	}
	/* copies to the front of c/d, the rest to the back */
	pthread_mutex_lock(&p->mu);
	for (size_t i = 0; i < n; i++) {
		size_t k = copy_find(p, cids[i]) ? nc++ : n - 1 - np++;
		c[k] = cids[i];
		d[k] = durs ? durs[i] : 0;
		at[i] = k;
	}
	pthread_mutex_unlock(&p->mu);
	if (nc)
		rc = mesh_pg_spec_complete(p->pg, c, d, nc, r);
	if (!rc && np)
		rc = mesh_pg_complete(p->pg, c + nc, d + nc, np, r + nc);
	if (nc && rc != MESH_E_UNAVAILABLE) {
		pthread_mutex_lock(&p->mu);
		for (size_t i = 0; i < nc; i++)
			copy_drop(p, c[i]);
		pthread_mutex_unlock(&p->mu);
	}
	for (size_t i = 0; !rc && i < n; i++)
		results[i] = r[at[i]];
out:
	free(c);
	free(at);
	free(r);
	return rc;
}

static uint64_t jp_straggler_ns(struct mesh__jstore *s)
{
	struct mesh__jpg *p = jpg_of(s);
	struct mesh_pg_spec_view v;
	uint64_t thr = 0, typical;
	return spec_threshold(p, &thr, &typical, &v) ? 0 : thr;
}

/* A node that stops adds its last durations and lets its copies go. */
static void spec_close(struct mesh__jpg *p)
{
	if (p->read_only)
		return;
	spec_flush(p, 1);
	if (spec_taken(p) && !p->detached)
		mesh_pg_spec_release(p->pg);
}

const struct mesh__jstore_ops mesh__jstore_pg = {
	.kind = "postgresql",
	.idle_max_ns = 1000 * MESH_NS_PER_MS, /* a NOTIFY wakes it sooner */
	.submit = jp_submit,
	.open = jp_open,
	.close = jp_close,
	.detach = jp_detach,
	.lease = jp_lease,
	.lease_many = jp_lease_many,
	.renew = jp_renew,
	.complete_many = jp_complete_many,
	.fail = jp_fail,
	.retry = jp_retry,
	.status = jp_status,
	.failures = jp_failures,
	.is_done = jp_is_done,
	.feed = jp_feed,
	.nodes = jp_nodes,
	.wait_work = jp_wait,
	.wake_fd = jp_wake_fd,
	.straggler_ns = jp_straggler_ns,
	.nchunks = jp_nchunks,
	.where = jp_where,
	.identity = jp_identity,
	.commit_stats = jp_commit_stats,
	.store_error = jp_store_error,
};

int mesh_job_is_store_url(const char *where)
{
	return mesh_pg_url_is(where);
}

void mesh_job_url_safe(const char *url, char *buf, size_t cap)
{
	mesh_pg_url_safe(url, buf, cap);
}
