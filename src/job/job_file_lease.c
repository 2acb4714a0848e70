/* The file store's leases (job_file.h): one chunk at a time (a chunk
 * lease file), many at once (a block lease, store/store.h), steals of
 * expired leases, renewals and hand-backs, and speculative copies of
 * stragglers (placement: job/place.h). */
#include "job/job_file.h"

#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "job/place.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

_Static_assert(MESH_JOB_LEASE_MANY_MAX == MESH_LEASE_BLOCK, "lease_many hands out at most one block");

static uint64_t new_token(struct jfile *j)
{
	uint64_t t = 0;
	if (getrandom(&t, sizeof t, GRND_NONBLOCK) != (ssize_t)sizeof t) {
		uint64_t x[3] = {mesh_wall_ns(), (uint64_t)getpid(), ++j->token_seq};
		t = mesh_fnv1a64(MESH_FNV1A64_INIT, x, sizeof x);
	}
	return t ? t : 1;
}

/* held[] is found by cid through buckets (cid mod cheld: chunks are
 * leased in order, so a chain is about one long): the driver asks about
 * every chunk it leases and completes, with hundreds held at once (a scan
 * of them each time was a good part of a fast job's CPU). */
static void held_link(struct jfile *j, size_t i)
{
	uint32_t *b = &j->hbucket[j->held[i].cid & (j->cheld - 1)];
	j->held[i].hnext = *b;
	*b = (uint32_t)i + 1;
}
static void held_unlink(struct jfile *j, size_t i)
{
	uint32_t *p = &j->hbucket[j->held[i].cid & (j->cheld - 1)];
	while (*p != i + 1)
		p = &j->held[*p - 1].hnext;
	*p = j->held[i].hnext;
}
struct held *mesh__jf_held_find(struct jfile *j, uint64_t cid)
{
	if (!j->nheld)
		return NULL;
	for (uint32_t k = j->hbucket[cid & (j->cheld - 1)]; k; k = j->held[k - 1].hnext)
		if (j->held[k - 1].cid == cid)
			return &j->held[k - 1];
	return NULL;
}
void mesh__jf_held_del(struct jfile *j, struct held *h)
{
	size_t i = (size_t)(h - j->held), last = j->nheld - 1;
	held_unlink(j, i);
	if (i != last) {
		held_unlink(j, last);
		j->held[i] = j->held[last];
		held_link(j, i);
	}
	j->nheld--;
}
static int held_add(struct jfile *j, const struct held *h)
{
	if (j->nheld == j->cheld) {
		size_t c = j->cheld ? 2 * j->cheld : 8;
		if (c > UINT32_MAX)
			return -ENOMEM;
		uint32_t *nb = calloc(c, sizeof *nb);
		struct held *p = nb ? realloc(j->held, c * sizeof *p) : NULL;
		if (!p) {
			free(nb);
			return -ENOMEM;
		}
		free(j->hbucket);
		j->hbucket = nb;
		j->held = p;
		j->cheld = c;
		for (size_t i = 0; i < j->nheld; i++)
			held_link(j, i);
	}
	j->held[j->nheld] = *h;
	held_link(j, j->nheld++);
	return 0;
}

/* 1 if this handle holds a live lease of cid; a holding that expired (or
 * was released by a renew to now) is forgotten, so the chunk can be leased
 * again -- by us too. */
static int held_live(struct jfile *j, uint64_t cid, const struct mesh_lease_clock *now)
{
	struct held *h = mesh__jf_held_find(j, cid);
	if (!h)
		return 0;
	if (h->boot_deadline_ns > now->boot_ns)
		return 1;
	mesh__jf_held_del(j, h);
	return 0;
}

static void stamp_init(struct jfile *j, struct mesh_lease_stamp *s, const struct mesh_lease_clock *now,
		       uint64_t ttl, uint32_t attempt)
{
	memset(s, 0, sizeof *s);
	s->started_ns = now->wall_ns;
	s->deadline_ns = now->wall_ns + ttl;
	s->boot_deadline_ns = now->boot_ns + ttl;
	s->attempt = attempt;
	s->token = new_token(j);
	snprintf(s->node, sizeof s->node, "%s", j->node);
	s->holder = now->self;
	if (j->detached) {
		s->holder.pid = 0;
		s->holder.pid_start = 0;
	}
}

static uint32_t attempts_of(struct jfile *j, uint64_t cid)
{
	struct fail *f = j->nfails ? mesh__jf_fail_find(j, cid, 0) : NULL;
	return f ? f->attempts : 0;
}

/* After winning a lease: the chunk may have become DONE meanwhile (its
 * completer appends DONE before it removes the lease file).  1 = keep. */
static int won(struct jfile *j, uint64_t cid, unsigned slot, const struct mesh_lease_stamp *s,
	       enum mesh_lease_kind kind, struct mesh_lease *l)
{
	struct held h;
	if (mesh__jf_sync_locked(j) == 0 && bit(j->done_bits, cid)) {
		j->st->ops->release(j->st, cid, slot, s->token);
		return 0;
	}
	h.cid = cid;
	h.token = s->token;
	h.started_ns = s->started_ns;
	h.boot_deadline_ns = s->boot_deadline_ns;
	h.slot = slot;
	h.attempt = s->attempt;
	h.kind = kind;
	if (held_add(j, &h)) {
		j->st->ops->release(j->st, cid, slot, s->token);
		return 0;
	}
	l->cid = cid;
	l->attempt = s->attempt;
	l->kind = kind;
	l->deadline_ns = s->deadline_ns;
	l->started_ns = s->started_ns;
	return 1;
}

static int cmp_live_elapsed(const void *a, const void *b)
{
	const struct live *x = a, *y = b;
	return x->st.started_ns < y->st.started_ns ? -1 : x->st.started_ns > y->st.started_ns;
}

static uint64_t straggler_locked(struct jfile *j)
{
	return mesh__spec_threshold_ns(&j->spec, j->hist, j->hist_n, j->n, j->done);
}

uint64_t mesh__jf_straggler_ns(struct mesh__jstore *s)
{
	struct jfile *j = jfile_of(s);
	uint64_t t;
	pthread_mutex_lock(&j->mu);
	mesh__jf_sync_locked(j);
	t = straggler_locked(j);
	pthread_mutex_unlock(&j->mu);
	return t;
}

static struct mesh_place_node place_of(struct jfile *j, uint32_t hash)
{
	struct mesh_place_node p = {0, 0};
	struct node *nd = mesh__jf_node_find(j, hash);
	if (nd && nd->timed) {
		p.samples = nd->timed;
		p.mean_ns = nd->sum_us / nd->timed * 1000;
	}
	return p;
}

/* Speculative copy of the longest-running straggler that place() gives us. */
static int speculate(struct jfile *j, struct live *lv, size_t nlive, const struct mesh_lease_clock *now,
		     uint64_t ttl, struct mesh_lease *l)
{
	uint64_t thr = straggler_locked(j), typical;
	struct mesh_place_node self;
	if (!thr || !nlive)
		return 0;
	typical = mesh__jf_hist_quantile_ns(j, 0.5);
	self = place_of(j, j->node_hash);
	qsort(lv, nlive, sizeof *lv, cmp_live_elapsed);
	for (size_t i = 0; i < nlive; i++) {
		uint64_t cid = lv[i].cid, elapsed;
		struct mesh_place_node holder;
		if (lv[i].st.started_ns >= now->wall_ns || bit(j->done_bits, cid) || held_live(j, cid, now))
			continue;
		elapsed = now->wall_ns - lv[i].st.started_ns;
		if (elapsed <= thr || !strcmp(lv[i].st.node, j->node))
			continue;
		holder = place_of(j, mesh__jf_node_hash(lv[i].st.node));
		if (mesh_place(&holder, elapsed, &self, 1, typical) != 0)
			continue;
		for (unsigned k = 1; k <= j->spec.copies; k++) {
			struct mesh_lease_stamp s, seen;
			int rc;
			stamp_init(j, &s, now, ttl, lv[i].st.attempt);
			rc = j->st->ops->claim(j->st, cid, k, &s);
			if (rc == MESH_E_STATE)
				rc = j->st->ops->steal(j->st, cid, k, now, &s, &seen);
			if (rc == 0)
				j->spec_taken = 1;
			if (rc == 0 && won(j, cid, k, &s, MESH_LEASE_SPECULATIVE, l))
				return 1;
			if (rc < 0 && rc != MESH_E_STATE && rc != -ENOENT)
				return rc;
		}
	}
	return 0;
}

static int in_resv(const struct jfile *j, uint64_t cid)
{
	for (size_t i = 0; i < j->nresv; i++)
		if (j->resv[i].cid == cid)
			return 1;
	return 0;
}

/* Hands out up to k chunks of the reserve into ls (j->mu held), in cid
 * order; a chunk DONE or buried meanwhile is let go.  A block whose
 * deadline is less than ttl/2 away is renewed first, so a lease handed out
 * lives at least that long.  Returns how many. */
static int resv_take(struct jfile *j, const struct mesh_lease_clock *now, uint64_t ttl_ns, struct mesh_lease *ls,
		     size_t k)
{
	size_t got = 0, i = 0;
	while (got < k && i < j->nresv) {
		struct held h = j->resv[i];
		memmove(&j->resv[i], &j->resv[i + 1], (j->nresv - i - 1) * sizeof h);
		j->nresv--;
		if (bit(j->done_bits, h.cid) || mesh__jf_is_buried(j, h.cid)) {
			j->st->ops->release(j->st, h.cid, 0, h.token);
			continue;
		}
		if (h.boot_deadline_ns < now->boot_ns + ttl_ns / 2) {
			uint64_t bdl = now->boot_ns + ttl_ns;
			if (j->st->ops->renew(j->st, h.cid, 0, h.token, now->wall_ns + ttl_ns, bdl))
				continue; /* lost to a stealer after it expired */
			for (size_t m = 0; m < j->nresv; m++)
				if (j->resv[m].token == h.token && j->resv[m].boot_deadline_ns < bdl)
					j->resv[m].boot_deadline_ns = bdl;
			h.boot_deadline_ns = bdl;
		}
		h.started_ns = now->wall_ns;
		if (held_add(j, &h)) {
			j->st->ops->release(j->st, h.cid, 0, h.token);
			continue;
		}
		ls[got].cid = h.cid;
		ls[got].attempt = h.attempt;
		ls[got].kind = h.kind;
		ls[got].deadline_ns = now->wall_ns + (h.boot_deadline_ns - now->boot_ns);
		ls[got].started_ns = h.started_ns;
		got++;
	}
	return (int)got;
}

/* Leases of others seen live by a sweep, with their stamps: the
 * stragglers speculate may copy. */
struct lives {
	struct live *v;
	size_t n, c;
};

static int lives_add(struct lives *lv, uint64_t cid, const struct mesh_lease_stamp *seen)
{
	if (lv->n == lv->c) {
		size_t c = lv->c ? 2 * lv->c : 16;
		struct live *p = realloc(lv->v, c * sizeof *p);
		if (!p)
			return -ENOMEM;
		lv->v = p;
		lv->c = c;
	}
	lv->v[lv->n].cid = cid;
	lv->v[lv->n++].st = *seen;
	return 0;
}

/* Claims a fresh lease of cid (j->mu held), unless cid is buried or is
 * ours already (held, or in the reserve): 1 when l is leased, 0 when not
 * (skipped, or DONE meanwhile), or claim's MESH_E_STATE (a lease exists;
 * *s is the stamp to steal it with) or -errno. */
static int claim_one(struct jfile *j, uint64_t cid, const struct mesh_lease_clock *now, uint64_t ttl_ns,
		     struct mesh_lease_stamp *s, struct mesh_lease *l)
{
	int rc;
	if (mesh__jf_is_buried(j, cid) || held_live(j, cid, now) || in_resv(j, cid))
		return 0;
	stamp_init(j, s, now, ttl_ns, attempts_of(j, cid) + 1);
	rc = j->st->ops->claim(j->st, cid, 0, s);
	if (rc < 0)
		return rc;
	return won(j, cid, 0, s, rc == 1 ? MESH_LEASE_STOLEN : MESH_LEASE_FRESH, l);
}

/* The next PENDING chunk after the cursor, which moves past each chunk it
 * tries (j->mu held): 1 when l is leased, 0 when the cursor has seen every
 * chunk, or -errno. */
static int lease_at_cursor(struct jfile *j, const struct mesh_lease_clock *now, uint64_t ttl_ns,
			   struct mesh_lease *l)
{
	while ((j->cursor = next_not_done(j, j->cursor)) < j->n) {
		struct mesh_lease_stamp s;
		int rc = claim_one(j, j->cursor++, now, ttl_ns, &s, l);
		if (rc == 1 || (rc < 0 && rc != MESH_E_STATE))
			return rc;
	}
	return 0;
}

/* Sweeps every chunk not DONE (j->mu held) for a lost lease file or an
 * expired lease: 1 when l is leased, 0 when none is, or -errno.  The
 * leases of others found live go into lv (NULL: not wanted). */
static int lease_swept(struct jfile *j, const struct mesh_lease_clock *now, uint64_t ttl_ns, struct lives *lv,
		       struct mesh_lease *l)
{
	for (uint64_t cid = next_not_done(j, 0); cid < j->n; cid = next_not_done(j, cid + 1)) {
		struct mesh_lease_stamp s, seen;
		int rc = claim_one(j, cid, now, ttl_ns, &s, l);
		if (rc != MESH_E_STATE) {
			if (rc)
				return rc;
			continue;
		}
		rc = j->st->ops->steal(j->st, cid, 0, now, &s, &seen);
		if (rc == 0) {
			if (won(j, cid, 0, &s, MESH_LEASE_STOLEN, l))
				return 1;
			continue;
		}
		if (rc == MESH_E_STATE && lv && lives_add(lv, cid, &seen))
			return -ENOMEM;
		if (rc != MESH_E_STATE && rc != -ENOENT)
			return rc;
	}
	return 0;
}

/* One lease (mesh_job_lease), j->mu held. */
static int lease_one_locked(struct jfile *j, uint64_t ttl_ns, int spec, struct mesh_lease *l)
{
	struct mesh_lease_clock now;
	struct lives lv = {NULL, 0, 0};
	int rc = mesh__jf_sync_locked(j);
	if (rc)
		return rc;
	if (j->done == j->n)
		return MESH_JOB_COMPLETE;
	mesh__jf_lease_clock(j, &now);
	/* 0: a chunk of our block leases not handed out yet. */
	if (j->nresv && resv_take(j, &now, ttl_ns, l, 1) == 1)
		return 0;
	/* 1: the next PENDING chunk after our cursor. */
	rc = lease_at_cursor(j, &now, ttl_ns, l);
	/* 2: the cursor has seen every chunk: sweep what is not DONE for lost
	 * lease files and expired leases. */
	if (rc == 0)
		rc = lease_swept(j, &now, ttl_ns, spec ? &lv : NULL, l);
	/* 3: a speculative copy of a straggler. */
	if (rc == 0 && spec)
		rc = speculate(j, lv.v, lv.n, &now, ttl_ns, l);
	if (rc == 1)
		rc = 0;
	else if (rc == 0)
		rc = j->done == j->n ? MESH_JOB_COMPLETE : MESH_JOB_NONE;
	free(lv.v);
	return rc;
}

int mesh__jf_lease(struct mesh__jstore *s, uint64_t ttl_ns, int spec, struct mesh_lease *l)
{
	struct jfile *j = jfile_of(s);
	int rc;
	if (!j->st || j->read_only)
		return MESH_E_STATE;
	pthread_mutex_lock(&j->mu);
	rc = lease_one_locked(j, ttl_ns, spec, l);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

/* How many chunks a block lease should take now: the k asked for, or, for
 * a node handing out leases fast, what it hands out in about 50 ms (so
 * that chunks it holds but has not started keep other nodes waiting no
 * longer than that), at most a block. */
static size_t batch_target(struct jfile *j, size_t k)
{
	uint64_t t = mesh__lease_rate_get(&j->rate, mesh_mono_ns()) / 20;
	if (t < k)
		t = k;
	return t > MESH_LEASE_BLOCK ? MESH_LEASE_BLOCK : (size_t)t;
}

/* Block leases from the cursor on (j->mu held): hands out up to k into ls
 * and keeps the rest of each block in the reserve.  Returns how many were
 * handed out, or a negative error. */
static int lease_blocks(struct jfile *j, const struct mesh_lease_clock *now, uint64_t ttl_ns,
			struct mesh_lease *ls, size_t k)
{
	size_t got = 0;
	while (got < k && j->nresv == 0 && (j->cursor = next_not_done(j, j->cursor)) < j->n) {
		uint64_t b = j->cursor / MESH_LEASE_BLOCK, end = (b + 1) * MESH_LEASE_BLOCK, want = 0, gotm = 0;
		size_t target = batch_target(j, k - got), nwant = 0;
		struct mesh_lease_stamp s;
		int rc;
		if (end > j->n)
			end = j->n;
		for (; j->cursor < end && nwant < target; j->cursor++) {
			uint64_t cid = j->cursor;
			if (bit(j->done_bits, cid) || mesh__jf_is_buried(j, cid) || held_live(j, cid, now))
				continue;
			want |= 1ull << (cid % MESH_LEASE_BLOCK);
			nwant++;
		}
		if (!want)
			continue;
		stamp_init(j, &s, now, ttl_ns, 1);
		rc = j->st->ops->claim_block(j->st, b, want, now, &s, &gotm);
		if (rc == MESH_E_STATE)
			continue;
		if (rc < 0)
			return got ? (int)got : rc;
		/* DONE meanwhile (the completer appends DONE before it lets go). */
		int synced = mesh__jf_sync_locked(j);
		for (unsigned i = 0; i < MESH_LEASE_BLOCK; i++) {
			uint64_t cid = b * MESH_LEASE_BLOCK + i;
			struct held h;
			if (!(gotm >> i & 1))
				continue;
			if (synced < 0 || bit(j->done_bits, cid)) {
				j->st->ops->release(j->st, cid, 0, s.token);
				continue;
			}
			h.cid = cid;
			h.token = s.token;
			h.started_ns = now->wall_ns;
			h.boot_deadline_ns = s.boot_deadline_ns;
			h.slot = 0;
			h.attempt = attempts_of(j, cid) + 1;
			h.kind = rc == 1 ? MESH_LEASE_STOLEN : MESH_LEASE_FRESH;
			j->resv[j->nresv++] = h;
		}
		got += (size_t)resv_take(j, now, ttl_ns, ls + got, k - got);
	}
	return (int)got;
}

int mesh__jf_lease_many(struct mesh__jstore *s, uint64_t ttl_ns, int spec, struct mesh_lease *ls, size_t k,
			size_t *got)
{
	struct jfile *j = jfile_of(s);
	struct mesh_lease_clock now;
	int rc;
	size_t n = 0;
	*got = 0;
	if (!j->st || j->read_only)
		return MESH_E_STATE;
	if (k == 0)
		return MESH_E_RANGE;
	if (k > MESH_LEASE_BLOCK)
		k = MESH_LEASE_BLOCK;
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	if (!rc && j->done == j->n)
		rc = MESH_JOB_COMPLETE;
	if (!rc) {
		mesh__jf_lease_clock(j, &now);
		n = (size_t)resv_take(j, &now, ttl_ns, ls, k);
		/* A detached lease outlives us: never a block (its holder is
		 * gone before its chunks are done). */
		if (n < k && !j->detached) {
			rc = lease_blocks(j, &now, ttl_ns, ls + n, k - n);
			if (rc > 0)
				n += (size_t)rc;
			if (rc > 0 || n)
				rc = 0;
		}
		/* The rest one at a time: chunks in blocks of others, lost or
		 * expired leases, a speculative copy (for the first only). */
		while (rc == 0 && n < k) {
			rc = lease_one_locked(j, ttl_ns, n ? 0 : spec, ls + n);
			if (rc == 0)
				n++;
		}
		if (n)
			rc = 0;
	}
	mesh__lease_rate_add(&j->rate, n);
	pthread_mutex_unlock(&j->mu);
	*got = n;
	return n ? 0 : rc;
}

int mesh__jf_renew(struct mesh__jstore *s, struct mesh_lease *l, uint64_t ttl_ns)
{
	struct jfile *j = jfile_of(s);
	struct held *h;
	struct mesh_lease_clock now;
	uint64_t dl, boot_dl;
	int rc;
	if (!j->st || j->read_only)
		return MESH_E_STATE;
	pthread_mutex_lock(&j->mu);
	mesh__jf_lease_clock(j, &now);
	dl = now.wall_ns + ttl_ns;
	boot_dl = now.boot_ns + ttl_ns;
	rc = mesh__jf_sync_locked(j);
	h = mesh__jf_held_find(j, l->cid);
	if (!rc && (!h || l->cid >= j->n || bit(j->done_bits, l->cid)))
		rc = MESH_E_STATE;
	if (!rc)
		rc = j->st->ops->renew(j->st, l->cid, h->slot, h->token, dl, boot_dl);
	if (!rc) {
		l->deadline_ns = dl;
		h->boot_deadline_ns = boot_dl;
	} else if (rc == MESH_E_STATE && h)
		mesh__jf_held_del(j, h);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

