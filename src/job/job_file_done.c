/* The file store's completions and answers (job_file.h): complete (one
 * fsync for every concurrent completer: the journal's group commit, first
 * completion wins, duplicates journaled and counted), fail / bury / retry,
 * status, the failures, the completion feed, the nodes' speeds. */
#include "job/job_file.h"
#include "job/record.h"

#include "base/clock.h"
#include "base/err.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Removes every lease file of a DONE chunk and forgets our holding. */
static void release_done(struct jfile *j, uint64_t cid)
{
	struct held *h = mesh__jf_held_find(j, cid);
	if (h)
		mesh__jf_held_del(j, h);
	if (!j->st)
		return;
	/* The copies' slots only when this handle ever took one: another
	 * node's copy is its own to release (a lookup of a name that is
	 * not there for every chunk was a good part of a fast job's CPU). */
	for (unsigned k = 0; k <= (j->spec_taken ? j->spec.copies : 0); k++)
		j->st->ops->release(j->st, cid, k, 0);
}

static uint64_t duration_locked(struct jfile *j, uint64_t cid, uint64_t given, int *spec)
{
	struct held *h = mesh__jf_held_find(j, cid);
	uint64_t now = mesh_wall_ns();
	*spec = h && h->kind == MESH_LEASE_SPECULATIVE;
	if (given)
		return given;
	if (h)
		return mesh_ns_since(now, h->started_ns);
	if (j->st) {
		struct mesh_lease_stamp s;
		if (j->st->ops->read(j->st, cid, 0, &s) == 0 && s.started_ns < now)
			return now - s.started_ns;
	}
	return 0;
}

static size_t enc_node(struct jfile *j, unsigned char *p)
{
	return mesh_rec_node_enc(p, j->node_hash, j->node, strlen(j->node));
}

/* Journals a DUP record for every IGNORED answer so that status counts
 * duplicates across processes (the tail counts them).  The answers are
 * already final: a failed write loses only the count.  pay and recs are the
 * caller's scratch space, at least 16 bytes and one record per cid. */
static void record_dups(struct jfile *j, const uint64_t *cids, const int *results, size_t n, unsigned char *pay,
			struct mesh_jrec *recs)
{
	size_t nrec = 0;
	for (size_t i = 0; i < n; i++) {
		if (results[i] != MESH_JOB_IGNORED)
			continue;
		size_t len = mesh_rec_dup_enc(pay + 16 * nrec, cids[i], j->node_hash);
		recs[nrec] = (struct mesh_jrec){MESH_JREC_DUP, 0, (uint16_t)len, pay + 16 * nrec, 0};
		nrec++;
	}
	if (nrec)
		(void)mesh_journal_append(j->jr, recs, nrec, NULL);
}

/* One completion call's records and their space: a NODE record when this
 * node is new to the journal, a DONE for each cid that is not DONE yet. */
struct batch {
	unsigned char nodep[MESH_REC_NODE_MAX];
	unsigned char *pay; /* each DONE's bytes (the first 16 * n are also record_dups' scratch) */
	struct mesh_jrec *recs;
	int *keep;	/* per record: 1 written, 0 dropped by the journal (DONE meanwhile) */
	size_t *rec_of; /* results index -> record index, or SIZE_MAX */
	size_t *dup_of; /* results index -> the same cid's earlier index, or SIZE_MAX */
	size_t nrec;
};

/* The answers of a call that cannot be made: every cid MESH_E_STATE on a
 * read-only store, or MESH_E_RANGE for each cid out of range (0 for the
 * others).  Returns that error, or 0 when the call can be made. */
static int refuse(struct jfile *j, const uint64_t *cids, size_t n, int *results)
{
	if (j->read_only) {
		for (size_t k = 0; k < n; k++)
			results[k] = MESH_E_STATE;
		return MESH_E_STATE;
	}
	for (size_t i = 0; i < n; i++)
		if (cids[i] >= j->n) {
			for (size_t k = 0; k < n; k++)
				results[k] = cids[k] >= j->n ? MESH_E_RANGE : 0;
			return MESH_E_RANGE;
		}
	return 0;
}

/* Space for n cids' records: each DONE's 16 bytes and the result it
 * carries (job.c checked the sizes).  0, or -ENOMEM (then what was
 * allocated is for batch_free). */
static int batch_alloc(struct batch *b, const struct mesh_job_result *res, size_t n)
{
	size_t extra = 0;
	for (size_t i = 0; res && i < n; i++)
		if (res[i].p)
			extra += res[i].len;
	b->pay = malloc(n * 16 + extra + 1);
	b->recs = malloc((n + 1) * sizeof *b->recs);
	b->keep = malloc((n + 1) * sizeof *b->keep);
	b->rec_of = malloc(n * sizeof *b->rec_of);
	b->dup_of = malloc(n * sizeof *b->dup_of);
	return b->pay && b->recs && b->keep && b->rec_of && b->dup_of ? 0 : -ENOMEM;
}

static void batch_free(struct batch *b)
{
	free(b->pay);
	free(b->recs);
	free(b->keep);
	free(b->rec_of);
	free(b->dup_of);
}

/* Under j->mu: waits until no cid is being completed by another call
 * (marked busy and not DONE yet). */
static void wait_turn_locked(struct jfile *j, const uint64_t *cids, size_t n)
{
	for (;;) {
		int conflict = 0;
		for (size_t i = 0; i < n && !conflict; i++)
			conflict = !bit(j->done_bits, cids[i]) && bit(j->busy_bits, cids[i]);
		if (!conflict)
			break;
		pthread_cond_wait(&j->cv, &j->mu);
	}
}

/* Under j->mu: encodes b's records for cids, marking each cid that gets a
 * DONE busy.  A cid DONE already is answered IGNORED now; one that comes
 * twice gets its record once (dup_of says where). */
static void batch_encode_locked(struct jfile *j, struct batch *b, const uint64_t *cids, const uint64_t *durs,
				const struct mesh_job_result *res, size_t n, int *results)
{
	size_t off = 0; /* where the next DONE's bytes go in pay */
	if (!mesh__jf_node_find(j, j->node_hash)) {
		b->recs[b->nrec].type = MESH_JREC_NODE;
		b->recs[b->nrec].flags = 0;
		b->recs[b->nrec].len = (uint16_t)enc_node(j, b->nodep);
		b->recs[b->nrec].data = b->nodep;
		b->nrec++;
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t c = cids[i];
		b->rec_of[i] = SIZE_MAX;
		b->dup_of[i] = SIZE_MAX;
		if (bit(j->done_bits, c)) {
			results[i] = MESH_JOB_IGNORED;
			continue;
		}
		if (bit(j->busy_bits, c)) {
			/* the same cid earlier in this call */
			for (size_t k = 0; k < i; k++)
				if (cids[k] == c && b->rec_of[k] != SIZE_MAX) {
					b->dup_of[i] = k;
					break;
				}
			continue;
		}
		int spec;
		uint64_t d = duration_locked(j, c, durs ? durs[i] : 0, &spec);
		bit_set(j->busy_bits, c);
		int with = res && res[i].p;
		size_t len = with ? mesh_rec_done_result_enc(b->pay + off, c, j->node_hash, d, res[i].p, res[i].len)
				  : mesh_rec_done_enc(b->pay + off, c, j->node_hash, d);
		b->recs[b->nrec].type = MESH_JREC_DONE;
		b->recs[b->nrec].flags = (uint8_t)((spec ? 1 : 0) | (with ? MESH_REC_DONE_RESULT : 0));
		b->recs[b->nrec].len = (uint16_t)len;
		b->recs[b->nrec].data = b->pay + off;
		off += len;
		b->rec_of[i] = b->nrec++;
	}
}

/* The answers once the journal's append of b returned rc: rc for each cid
 * whose DONE was in it; DONE for one the journal kept, IGNORED for the
 * others (DONE already, DONE meanwhile, or a repeat in this call). */
static void batch_answer(const struct batch *b, size_t n, int rc, int *results)
{
	for (size_t i = 0; i < n; i++) {
		size_t src = b->dup_of[i] != SIZE_MAX ? b->dup_of[i] : i;
		if (b->rec_of[src] == SIZE_MAX) {
			if (b->dup_of[i] == SIZE_MAX && results[i] != MESH_JOB_IGNORED)
				results[i] = MESH_JOB_IGNORED;
			continue;
		}
		if (rc) {
			results[i] = rc;
		} else if (b->dup_of[i] != SIZE_MAX || !b->keep[b->rec_of[src]]) {
			results[i] = MESH_JOB_IGNORED;
		} else {
			results[i] = MESH_JOB_DONE;
		}
	}
}

int mesh__jf_complete_many(struct mesh__jstore *s, const uint64_t *cids, const uint64_t *durs,
			   const struct mesh_job_result *res, size_t n, int *results)
{
	struct jfile *j = jfile_of(s);
	struct batch b = {.pay = NULL};
	int rc = refuse(j, cids, n, results);
	if (rc || n == 0)
		return rc;
	if ((rc = batch_alloc(&b, res, n)))
		goto out;
	/* No tail here: the index may be behind other processes, and that is
	 * fine -- the commit leader re-checks every DONE under the journal
	 * lock and drops the ones done meanwhile (they come back IGNORED). */
	pthread_mutex_lock(&j->mu);
	wait_turn_locked(j, cids, n);
	batch_encode_locked(j, &b, cids, durs, res, n, results);
	pthread_mutex_unlock(&j->mu);

	rc = mesh_journal_append(j->jr, b.recs, b.nrec, b.keep);

	pthread_mutex_lock(&j->mu);
	for (size_t i = 0; i < n; i++)
		if (b.rec_of[i] != SIZE_MAX)
			bit_clr(j->busy_bits, cids[i]);
	pthread_cond_broadcast(&j->cv);
	/* No tail here: keep[] says what was written; the next call's tail
	 * puts it in the index (the leader's prepare already read the rest). */
	batch_answer(&b, n, rc, results);
	if (!rc)
		for (size_t i = 0; i < n; i++)
			release_done(j, cids[i]);
	pthread_mutex_unlock(&j->mu);
	if (!rc)
		record_dups(j, cids, results, n, b.pay, b.recs);
out:
	batch_free(&b);
	return rc;
}

int mesh__jf_fail(struct mesh__jstore *s, uint64_t cid, int status)
{
	struct jfile *j = jfile_of(s);
	unsigned char nodep[MESH_REC_NODE_MAX], pay[16];
	struct mesh_jrec recs[2];
	size_t nrec = 0;
	struct held *h;
	uint64_t token = 0;
	unsigned slot = 0;
	int rc, buried = 0;
	if (j->read_only)
		return MESH_E_STATE;
	if (cid >= j->n)
		return MESH_E_RANGE;
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	if (rc || bit(j->done_bits, cid)) {
		if (!rc)
			release_done(j, cid);
		pthread_mutex_unlock(&j->mu);
		return rc;
	}
	if (!mesh__jf_node_find(j, j->node_hash)) {
		recs[nrec] = (struct mesh_jrec){MESH_JREC_NODE, 0, (uint16_t)enc_node(j, nodep), nodep, 0};
		nrec++;
	}
	mesh_rec_fail_enc(pay, cid, j->node_hash, status);
	{
		/* The writer decides burial with its own max_attempts, so every
		 * reader agrees whatever its options. */
		struct fail *f = j->nfails ? mesh__jf_fail_find(j, cid, 0) : NULL;
		uint32_t since = f ? f->attempts - f->base : 0;
		recs[nrec++] = (struct mesh_jrec){MESH_JREC_FAIL, since + 1 >= j->max_attempts ? 1 : 0, MESH_REC_FAIL_LEN,
						  pay, 0};
	}
	pthread_mutex_unlock(&j->mu);

	rc = mesh_journal_append(j->jr, recs, nrec, NULL);

	pthread_mutex_lock(&j->mu);
	if (!rc)
		rc = mesh__jf_sync_locked(j);
	if (!rc)
		buried = mesh__jf_is_buried(j, cid);
	h = mesh__jf_held_find(j, cid);
	if (h) {
		token = h->token;
		slot = h->slot;
		mesh__jf_held_del(j, h);
	}
	pthread_mutex_unlock(&j->mu);
	if (token && j->st)
		j->st->ops->release(j->st, cid, slot, token);
	return rc ? rc : buried;
}

int mesh__jf_retry(struct mesh__jstore *s, uint64_t cid)
{
	struct jfile *j = jfile_of(s);
	unsigned char pay[8];
	struct mesh_jrec r = {MESH_JREC_RETRY, 0, MESH_REC_U64_LEN, pay, 0};
	int count = 0, rc;
	if (j->read_only)
		return MESH_E_STATE;
	if (cid != UINT64_MAX && cid >= j->n)
		return MESH_E_RANGE;
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	for (size_t i = 0; !rc && i < j->cfails; i++) {
		struct fail *f = &j->fails[i];
		if (f->key && (cid == UINT64_MAX || f->key == cid + 1) && f->buried && !bit(j->done_bits, f->key - 1))
			count++;
	}
	pthread_mutex_unlock(&j->mu);
	if (rc || count == 0)
		return rc;
	mesh_rec_u64_enc(pay, cid);
	rc = mesh_journal_append(j->jr, &r, 1, NULL);
	pthread_mutex_lock(&j->mu);
	if (!rc)
		rc = mesh__jf_sync_locked(j);
	/* Our own cursor has passed these chunks; the sweep finds them. */
	pthread_mutex_unlock(&j->mu);
	return rc ? rc : count;
}

int mesh__jf_note_closed(struct mesh__jstore *s)
{
	struct jfile *j = jfile_of(s);
	unsigned char pay[MESH_REC_CLOSED_LEN];
	struct mesh_jrec r = {MESH_JREC_CLOSED, 0, MESH_REC_CLOSED_LEN, pay, 0};
	if (j->read_only)
		return MESH_E_STATE;
	mesh_rec_closed_enc(pay, j->node_hash);
	return mesh_journal_append(j->jr, &r, 1, NULL);
}

struct count_live {
	struct jfile *j;
	uint64_t n;
};
static void count_live_fn(void *arg, uint64_t cid, const struct mesh_lease_stamp *st)
{
	struct count_live *c = arg;
	(void)st;
	/* A block lease covers chunks buried meanwhile: they count as buried. */
	if (cid < c->j->n && !bit(c->j->done_bits, cid) && !mesh__jf_is_buried(c->j, cid))
		c->n++;
}

int mesh__jf_status(struct mesh__jstore *s, struct mesh_job_status *st)
{
	struct jfile *j = jfile_of(s);
	struct count_live cl = {j, 0};
	int rc;
	memset(st, 0, sizeof *st);
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	if (!rc && j->st) {
		struct mesh_lease_clock now;
		mesh__jf_lease_clock(j, &now);
		rc = j->st->ops->each_live(j->st, &now, count_live_fn, &cl);
	}
	if (rc == -ENOENT)
		rc = 0; /* the lock dir is gone: nothing is leased */
	if (!rc) {
		st->n = j->n;
		st->done = j->done;
		st->closed = j->closed;
		for (size_t i = 0; i < j->cfails; i++) {
			struct fail *f = &j->fails[i];
			if (f->key && f->buried && !bit(j->done_bits, f->key - 1))
				st->buried++;
		}
		st->leased = cl.n;
		st->pending = j->n - j->done;
		st->pending = st->pending > st->leased + st->buried ? st->pending - st->leased - st->buried : 0;
		st->duplicates = j->dups;
		st->failed_attempts = j->failed_attempts;
		st->speculative_wins = j->spec_wins;
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

static int cmp_fail(const void *a, const void *b)
{
	const struct mesh_job_failure *x = a, *y = b;
	return x->cid < y->cid ? -1 : x->cid > y->cid;
}

int mesh__jf_failures(struct mesh__jstore *s, void (*fn)(const struct mesh_job_failure *, void *), void *arg)
{
	struct jfile *j = jfile_of(s);
	struct mesh_job_failure *v;
	size_t n = 0;
	int rc;
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	v = malloc((j->nfails + 1) * sizeof *v);
	if (!v)
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < j->cfails; i++) {
		struct fail *f = &j->fails[i];
		if (!f->key || !f->attempts)
			continue;
		v[n].cid = f->key - 1;
		v[n].attempts = f->attempts;
		v[n].last_status = f->last_status;
		v[n].buried = f->buried && !bit(j->done_bits, f->key - 1);
		n++;
	}
	pthread_mutex_unlock(&j->mu);
	if (!rc) {
		qsort(v, n, sizeof *v, cmp_fail);
		for (size_t i = 0; i < n; i++)
			fn(&v[i], arg);
	}
	free(v);
	return rc;
}

int mesh__jf_is_done(struct mesh__jstore *s, uint64_t cid)
{
	struct jfile *j = jfile_of(s);
	int rc;
	if (cid >= j->n)
		return MESH_E_RANGE;
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	if (!rc)
		rc = bit(j->done_bits, cid);
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int mesh__jf_done_word(struct mesh__jstore *s, uint64_t w, uint64_t *bits)
{
	struct jfile *j = jfile_of(s);
	int rc;
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	*bits = !rc && w < j->words ? j->done_bits[w] : 0;
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int mesh__jf_nodes(struct mesh__jstore *s, void (*fn)(const struct mesh_job_node_stat *, void *), void *arg)
{
	struct jfile *j = jfile_of(s);
	int rc;
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	for (size_t i = 0; !rc && i < j->nnodes; i++) {
		struct mesh_job_node_stat ns = {j->nodes[i].name, j->nodes[i].count,
						j->nodes[i].timed ? j->nodes[i].sum_us / j->nodes[i].timed * 1000 : 0,
						j->nodes[i].timed};
		fn(&ns, arg);
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int mesh__jf_wait_work(struct mesh__jstore *s, uint64_t timeout_ns)
{
	(void)s;
	mesh_sleep_ns(timeout_ns);
	return 0;
}

struct fword {
	uint64_t w, bits;
};

int mesh__jf_feed(struct mesh__jstore *s, struct mesh_job_feed *f, void (*fn)(uint64_t cid, void *), void *arg)
{
	struct jfile *j = jfile_of(s);
	struct fword *v = NULL;
	size_t nv = 0, cv = 0;
	int rc;
	pthread_mutex_lock(&j->mu);
	rc = mesh__jf_sync_locked(j);
	if (!rc)
		rc = mesh__feed_ready(f, j->n);
	/* The words with news, copied: fn runs without mu (it may call us). */
	for (uint64_t w = 0; !rc && w < j->words; w++) {
		if (!(j->done_bits[w] & ~f->seen[w]))
			continue;
		if (nv == cv) {
			size_t c = cv ? 2 * cv : 64;
			struct fword *p = realloc(v, c * sizeof *p);
			if (!p) {
				rc = -ENOMEM;
				break;
			}
			v = p;
			cv = c;
		}
		v[nv++] = (struct fword){w, j->done_bits[w]};
	}
	pthread_mutex_unlock(&j->mu);
	for (size_t i = 0; !rc && i < nv; i++)
		mesh__feed_word(f, v[i].w, v[i].bits, fn, arg);
	free(v);
	return rc;
}
