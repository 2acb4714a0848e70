/* The engine's calls (job.h) over the one boundary for a job's state,
 * the store ops table (store_ops.h): this file picks the store a path or
 * URL names, checks what is common to every store, and hands each call to
 * it.  It knows no store by name: the file store is job_file*.c, the
 * PostgreSQL store job_pg.c.  The drain loop is written once, over the
 * calls. */
#include "job/job.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"
#include "job/place.h"
#include "job/store_ops.h"
#include "store/store.h"
#include "store/store_pg.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mesh_job {
	struct mesh__jstore *s; /* s->ops: the store's table */
	char node[MESH_NODE_MAX + 1];
	/* Placement of lease batches (mesh_place_batch), looked up at most
	 * once a second: this node and the fastest, and the job's typical
	 * chunk time. */
	pthread_mutex_t pmu;
	uint64_t place_at;
	struct mesh_place_node place_self, place_fastest;
	uint64_t place_typical;
};

/* The nodes of a job by name (a name may have several rows: restarts,
 * or handles of one node), for placement. */
#define PLACE_NODES 64
struct place_acc {
	const char *self;
	char names[PLACE_NODES][MESH_NODE_MAX + 1];
	uint64_t count[PLACE_NODES], sum_ns[PLACE_NODES];
	size_t n;
};
static void place_one(const struct mesh_job_node_stat *s, void *arg)
{
	struct place_acc *a = arg;
	size_t i = 0;
	if (!s->timed || !s->mean_ns)
		return;
	while (i < a->n && strcmp(a->names[i], s->name))
		i++;
	if (i == a->n) {
		if (a->n == PLACE_NODES)
			return;
		snprintf(a->names[a->n++], sizeof a->names[0], "%s", s->name);
	}
	a->count[i] += s->timed;
	a->sum_ns[i] += s->timed * s->mean_ns;
}

/* How many of k this node takes now: its share of the speed of all nodes
 * of the job (place.h).  Errors of the look-up leave k. */
static size_t place_k(struct mesh_job *j, size_t k)
{
	uint64_t now = mesh_mono_ns();
	pthread_mutex_lock(&j->pmu);
	if (!j->place_at || now - j->place_at >= MESH_NS_PER_S) {
		struct place_acc *a = calloc(1, sizeof *a);
		j->place_at = now;
		memset(&j->place_self, 0, sizeof j->place_self);
		memset(&j->place_fastest, 0, sizeof j->place_fastest);
		if (a && j->s->ops->nodes(j->s, place_one, a) == 0) {
			uint64_t all = 0, sum = 0;
			for (size_t i = 0; i < a->n; i++) {
				struct mesh_place_node pn = {a->sum_ns[i] / a->count[i], a->count[i]};
				all += a->count[i];
				sum += a->sum_ns[i];
				if (!strcmp(a->names[i], j->node))
					j->place_self = pn;
				if (!j->place_fastest.samples || pn.mean_ns < j->place_fastest.mean_ns)
					j->place_fastest = pn;
			}
			j->place_typical = all ? sum / all : 0;
		}
		free(a);
	}
	struct mesh_place_node two[2] = {j->place_fastest, j->place_self};
	size_t r = mesh_place_batch(two, 2, 1, k, j->place_typical);
	pthread_mutex_unlock(&j->pmu);
	return r;
}

const struct mesh__jstore_ops *mesh__jstore_for(const char *where)
{
	return where && mesh_pg_url_is(where) ? &mesh__jstore_pg : &mesh__jstore_file;
}

int mesh_job_where_has_password(const char *where)
{
	return mesh_pg_url_has_password(where);
}

const char *mesh_job_password_why(void)
{
	return MESH_PG_URL_PASSWORD;
}

int mesh_job_submit(const char *journal, uint64_t n)
{
	return mesh_job_submit_id(journal, n, NULL, 0, NULL);
}

int mesh_job_submit_id(const char *journal, uint64_t n, const void *identity, size_t identity_len,
		       struct mesh_job_why *why)
{
	struct mesh_job_why dummy;
	if (!why)
		why = &dummy;
	memset(why, 0, sizeof *why);
	return mesh__jstore_for(journal)->submit(journal, n, identity, identity_len, why);
}

/* "<host>.<pid>": only a label for status and node statistics.  Whether
 * a holder is alive is judged from the holder fields of its lease line
 * (store.h), never from this name. */
static char *default_node(void)
{
	char host[64], buf[MESH_NODE_MAX + 1];
	if (gethostname(host, sizeof host) < 0)
		strcpy(host, "host");
	host[sizeof host - 1] = 0;
	for (char *c = host; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '-' ||
		      *c == '.'))
			*c = '-';
	host[40] = 0;
	snprintf(buf, sizeof buf, "%s.%d", host, (int)getpid());
	return strdup(buf);
}


int mesh_job_open(struct mesh_job **out, const struct mesh_job_opts *o)
{
	struct mesh_job_opts opts = *o;
	struct mesh_job_why dummy;
	struct mesh_job *j;
	char *node;
	int rc;
	if (!opts.why)
		opts.why = &dummy;
	memset(opts.why, 0, sizeof *opts.why);
	opts.why->at = MESH_JOB_AT_JOURNAL;
	if (o->node && !mesh_node_name_ok(o->node)) {
		opts.why->at = MESH_JOB_AT_NONE;
		return MESH_E_PARSE;
	}
	j = calloc(1, sizeof *j);
	node = o->node ? strdup(o->node) : default_node();
	if (!j || !node) {
		free(j);
		free(node);
		return -ENOMEM;
	}
	snprintf(j->node, sizeof j->node, "%s", node);
	pthread_mutex_init(&j->pmu, NULL);
	rc = mesh__jstore_for(o->journal)->open(&j->s, &opts, node);
	free(node);
	if (rc) {
		pthread_mutex_destroy(&j->pmu);
		free(j);
		return rc;
	}
	*out = j;
	return 0;
}

void mesh_job_close(struct mesh_job *j)
{
	if (!j)
		return;
	j->s->ops->close(j->s);
	pthread_mutex_destroy(&j->pmu);
	free(j);
}

void mesh_job_detach_leases(struct mesh_job *j)
{
	j->s->ops->detach(j->s);
}

int mesh_job_lease(struct mesh_job *j, uint64_t ttl_ns, int speculate, struct mesh_lease *l)
{
	return j->s->ops->lease(j->s, ttl_ns, speculate, l);
}

int mesh_job_lease_many(struct mesh_job *j, uint64_t ttl_ns, int speculate, struct mesh_lease *ls, size_t k,
			size_t *got)
{
	*got = 0;
	if (k == 0)
		return MESH_E_RANGE;
	if (k > MESH_JOB_LEASE_MANY_MAX)
		k = MESH_JOB_LEASE_MANY_MAX;
	return j->s->ops->lease_many(j->s, ttl_ns, speculate, ls, place_k(j, k), got);
}

int mesh_job_renew(struct mesh_job *j, struct mesh_lease *l, uint64_t ttl_ns)
{
	return j->s->ops->renew(j->s, l, ttl_ns);
}

int mesh_job_complete_many(struct mesh_job *j, const uint64_t *cids, const uint64_t *durations_ns, size_t n,
			   int *results)
{
	return j->s->ops->complete_many(j->s, cids, durations_ns, NULL, n, results);
}

size_t mesh_job_result_max(const struct mesh_job *j)
{
	return j->s->ops->result_max;
}

int mesh_job_complete_results(struct mesh_job *j, const uint64_t *cids, const uint64_t *durations_ns,
			      const struct mesh_job_result *res, size_t n, int *results)
{
	for (size_t i = 0; res && i < n; i++)
		if (res[i].p && res[i].len > j->s->ops->result_max) {
			for (size_t k = 0; k < n; k++)
				results[k] = MESH_E_RANGE;
			return MESH_E_RANGE;
		}
	return j->s->ops->complete_many(j->s, cids, durations_ns, res, n, results);
}

int mesh_job_complete(struct mesh_job *j, uint64_t cid, uint64_t duration_ns)
{
	int res = 0, rc = mesh_job_complete_many(j, &cid, &duration_ns, 1, &res);
	return rc ? rc : res;
}

int mesh_job_fail(struct mesh_job *j, uint64_t cid, int status)
{
	return j->s->ops->fail(j->s, cid, status);
}

int mesh_job_retry(struct mesh_job *j, uint64_t cid)
{
	return j->s->ops->retry(j->s, cid);
}

int mesh_job_note_closed(struct mesh_job *j)
{
	return j->s->ops->note_closed ? j->s->ops->note_closed(j->s) : -ENOTSUP;
}

int mesh_job_status(struct mesh_job *j, struct mesh_job_status *st)
{
	return j->s->ops->status(j->s, st);
}

int mesh_job_failures(struct mesh_job *j, void (*fn)(const struct mesh_job_failure *, void *), void *arg)
{
	return j->s->ops->failures(j->s, fn, arg);
}

int mesh_job_done_word(struct mesh_job *j, uint64_t w, uint64_t *bits)
{
	uint64_t n = j->s->ops->nchunks(j->s);
	*bits = 0;
	if (w >= (n + 63) / 64)
		return MESH_E_RANGE;
	if (j->s->ops->done_word)
		return j->s->ops->done_word(j->s, w, bits);
	for (uint64_t i = 0; i < 64 && w * 64 + i < n; i++) {
		int d = j->s->ops->is_done(j->s, w * 64 + i);
		if (d < 0)
			return d;
		*bits |= (uint64_t)(d == 1) << i;
	}
	return 0;
}

int mesh_job_is_done(struct mesh_job *j, uint64_t cid)
{
	return j->s->ops->is_done(j->s, cid);
}

int mesh_job_feed(struct mesh_job *j, struct mesh_job_feed *f, void (*fn)(uint64_t cid, void *), void *arg)
{
	return j->s->ops->feed(j->s, f, fn, arg);
}

void mesh_job_feed_free(struct mesh_job_feed *f)
{
	free(f->seen);
	memset(f, 0, sizeof *f);
}

int mesh__feed_ready(struct mesh_job_feed *f, uint64_t n)
{
	if (f->seen && f->n == n)
		return 0;
	uint64_t words = (n + 63) / 64;
	uint64_t *p = realloc(f->seen, words * sizeof *p);
	if (!p)
		return -ENOMEM;
	if (words > f->words)
		memset(p + f->words, 0, (words - f->words) * sizeof *p);
	f->seen = p;
	f->n = n;
	f->words = words;
	return 0;
}

void mesh__feed_word(struct mesh_job_feed *f, uint64_t w, uint64_t done, void (*fn)(uint64_t cid, void *),
		     void *arg)
{
	uint64_t news;
	if (w >= f->words)
		return;
	news = done & ~f->seen[w];
	f->seen[w] |= news;
	while (news) {
		uint64_t cid = w * 64 + (uint64_t)__builtin_ctzll(news);
		news &= news - 1;
		if (cid < f->n)
			fn(cid, arg);
	}
}

int mesh_job_nodes(struct mesh_job *j, void (*fn)(const struct mesh_job_node_stat *, void *), void *arg)
{
	return j->s->ops->nodes(j->s, fn, arg);
}

int mesh_job_wait_work(struct mesh_job *j, uint64_t timeout_ns)
{
	return j->s->ops->wait_work(j->s, timeout_ns);
}

int mesh_job_wake_fd(struct mesh_job *j)
{
	return j->s->ops->wake_fd ? j->s->ops->wake_fd(j->s) : -1;
}

uint64_t mesh_job_straggler_ns(struct mesh_job *j)
{
	return j->s->ops->straggler_ns(j->s);
}

const char *mesh_job_node(const struct mesh_job *j)
{
	return j->node;
}

uint64_t mesh_job_nchunks(const struct mesh_job *j)
{
	return j->s->ops->nchunks(j->s);
}

const void *mesh_job_identity(const struct mesh_job *j, size_t *len)
{
	return j->s->ops->identity(j->s, len);
}

void mesh_job_commit_stats(const struct mesh_job *j, uint64_t *fsyncs, uint64_t *records)
{
	j->s->ops->commit_stats(j->s, fsyncs, records);
}

void mesh_job_store_error(struct mesh_job *j, char *buf, size_t cap)
{
	if (!cap)
		return;
	buf[0] = 0;
	if (j->s->ops->store_error)
		j->s->ops->store_error(j->s, buf, cap);
}

/* The longest wait of an idle drain between two looks: its store's (on
 * PostgreSQL a NOTIFY wakes it sooner), or MESH_STORE_IDLE_MS (1 ms to
 * 1 h; read at each drain). */
static uint64_t idle_max_ns(const struct mesh_job *j)
{
	const char *e = getenv("MESH_STORE_IDLE_MS");
	uint64_t ms;
	if (e && mesh_parse_u64(e, 3600000, &ms) == 0 && ms > 0)
		return ms * MESH_NS_PER_MS;
	return j->s->ops->idle_max_ns;
}

int mesh_job_drain(struct mesh_job *j, uint64_t ttl_ns, uint64_t maxiter, int speculate_on, volatile int *stop,
		   struct mesh_job_drain_stats *st)
{
	uint64_t idle_max = idle_max_ns(j);
	struct mesh_job_drain_stats dummy;
	uint64_t backoff = 5 * MESH_NS_PER_MS;
	if (!st)
		st = &dummy;
	memset(st, 0, sizeof *st);
	for (;;) {
		struct mesh_lease ls[MESH_JOB_LEASE_MANY_MAX];
		uint64_t cids[MESH_JOB_LEASE_MANY_MAX], durs[MESH_JOB_LEASE_MANY_MAX] = {0};
		int res[MESH_JOB_LEASE_MANY_MAX];
		size_t k = MESH_JOB_LEASE_MANY_MAX, got = 0;
		int rc;
		if (stop && *stop)
			return MESH_JOB_INTERRUPTED;
		if (maxiter && st->leased >= maxiter)
			return MESH_JOB_LIMIT;
		if (maxiter && maxiter - st->leased < k)
			k = (size_t)(maxiter - st->leased);
		rc = mesh_job_lease_many(j, ttl_ns, speculate_on, ls, k, &got);
		if (rc == MESH_JOB_COMPLETE || rc < 0)
			return rc;
		if (rc == MESH_JOB_NONE) {
			struct mesh_job_status s;
			rc = mesh_job_status(j, &s);
			if (rc)
				return rc;
			if (s.done == s.n)
				return MESH_JOB_COMPLETE;
			if (s.leased == 0 && s.pending == 0 && s.buried > 0)
				return MESH_E_BURIED;
			/* A store with a wake-up (PostgreSQL's NOTIFY for
			 * chunks let go) is polled seldom: idle_max. */
			rc = mesh_job_wait_work(j, backoff);
			if (rc < 0)
				return rc;
			if (backoff < idle_max)
				backoff *= 2;
			continue;
		}
		backoff = 5 * MESH_NS_PER_MS;
		for (size_t i = 0; i < got; i++) {
			st->leased++;
			st->stolen += ls[i].kind == MESH_LEASE_STOLEN;
			st->speculative += ls[i].kind == MESH_LEASE_SPECULATIVE;
			cids[i] = ls[i].cid;
		}
		rc = mesh_job_complete_many(j, cids, durs, got, res);
		if (rc < 0)
			return rc;
		for (size_t i = 0; i < got; i++) {
			if (res[i] == MESH_JOB_DONE)
				st->done++;
			else
				st->ignored++;
		}
	}
}

int mesh_job_node_ok(const char *s)
{
	return mesh_node_name_ok(s);
}

int mesh_job_lease_name_ok(const char *s)
{
	return mesh_job_name_ok(s);
}
