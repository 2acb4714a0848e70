/* The PostgreSQL home (home.h) over store/store_pg_results.h: a job's spec
 * and input are its row of mesh.specs, its chunks the job URL#s<id> (the
 * engine's, job.h), each DONE chunk's reply a row of mesh.results written
 * before its DONE is committed, so `mesh results` reads it from any host.
 *
 * Watched (a meshd, `meshd --store URL`): a follower thread sleeps on
 * LISTEN mesh_jobs (a submit or a cancel wakes it at once; kick, a
 * program loaded, too) and looks again every RESCAN_NS besides; at each
 * look every job not ended is offered to the runner (ev.found), and the
 * cancels of the jobs it drives are told (ev.cancelled).  The meshd is a
 * node of the store from the watch on (mesh_pg_node_host, on a connection
 * of its own that beats it): `mesh nodes` lists the host and its
 * catalog's programs before any job; each run of a job is a node of that
 * job besides, under the same name.
 *
 * A run keeps its replies in memory and writes them in one transaction
 * before its batch's DONE (sync), then one NOTIFY for the job's waiters
 * (synced).  A client (`mesh ... --store`) reads and writes through the
 * home's own connection. */
#include "job/home.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"
#include "base/thread.h"
#include "store/store.h"
#include "store/store_pg.h"
#include "store/store_pg_results.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

_Static_assert(MESH_HOME_PG_INPUT_MAX == MESH_PGR_INPUT_MAX, "a store's input limit is the store's");

#define RESCAN_NS (5 * MESH_NS_PER_S)
/* The meshd's own node's TTL: the runs' lease TTL (the chunk driver's
 * default), or MESHD_STORE_TTL_MS as theirs. */
#define NODE_TTL_NS (10 * MESH_NS_PER_S)
#define WAIT_SLICE_NS (250 * MESH_NS_PER_MS)
/* Spare connections kept made (store_pg.h): a run's results handle and
 * job handle, and a speculating job's second job handle, open on them
 * instead of waiting for two or three backends' starts before its first
 * lease (MESH_HOME_PG_SPARES of them unless set). */
static unsigned spares_n = MESH_HOME_PG_SPARES;

void mesh_home_pg_set_spares(unsigned n)
{
	spares_n = n < MESH_HOME_PG_SPARES_MAX ? n : MESH_HOME_PG_SPARES_MAX;
}

struct phome {
	struct mesh_home base;
	char *url;	/* without #job */
	char safe[512]; /* ... without its password */
	char node[MESH_NODE_MAX + 1];
	struct mesh_pg *pg; /* the follower's, or the client's */
	/* the watch */
	pthread_t th;
	int th_on;
	_Atomic int stop;
	int wake_efd; /* kick: look again now */
	int spares;   /* this home keeps the spare connections (mesh_pg_spares_start) */
	struct mesh_pg *npg; /* the meshd's own node (its row, its beat), or NULL */
	char programs[1024]; /* as the row has them */
};

/* One reply waiting for the next sync. */
struct pres {
	struct pres *next;
	uint64_t cid;
	size_t len;
	unsigned char data[];
};

struct pjob {
	struct mesh_home_job base;
	struct phome *h;
	char url[1024]; /* URL#s<id> */
	char where[600];
	struct mesh_pg *rpg; /* a run's results connection */
	pthread_mutex_t mu;  /* pending */
	struct pres *pending;
	int settled; /* the completer thread's: this batch had replies, its NOTIFY is due */
};

static struct phome *ph(struct mesh_home *h)
{
	return (struct phome *)h;
}

static struct pjob *pj(struct mesh_home_job *hj)
{
	return (struct pjob *)hj;
}

static uint64_t ttl_ns(void)
{
	const char *ttl = getenv("MESHD_STORE_TTL_MS");
	return ttl && atoi(ttl) > 0 ? (uint64_t)atoi(ttl) * MESH_NS_PER_MS : 0;
}

/* "<url>: <reason>[: <libpq's words>]" into *err. */
static int store_err(char **err, int rc, const char *safe, const char *why)
{
	return mesh_errf(err, rc, "%s: %s%s%s", safe, mesh_strerror(rc), why[0] ? ": " : "", why);
}

/* ---- a job's handle ---- */

static void spec_of(const struct mesh_pgr_job *r, struct mesh_home_spec *s)
{
	memset(s, 0, sizeof *s);
	s->id = r->id;
	snprintf(s->program, sizeof s->program, "%s", r->program);
	snprintf(s->name, sizeof s->name, "%s", r->name);
	s->n = r->n;
	s->has_input = r->has_input;
	s->max_workers = r->max_workers;
	s->retries = r->retries;
	s->timeout_ns = r->timeout_ns;
	s->speculate = r->speculate;
}

/* The state and counts of a job row: cancelled; complete (every chunk
 * DONE); failed (every chunk DONE or buried, some buried); else running. */
static void found_of(const struct mesh_pgr_job *r, struct mesh_home_found *f)
{
	memset(f, 0, sizeof *f);
	f->state = r->cancelled		    ? MESH_HOME_CANCELLED
		   : r->done >= r->n	    ? MESH_HOME_COMPLETE
		   : r->done + r->buried >= r->n ? MESH_HOME_FAILED
					    : MESH_HOME_RUNNING;
	f->offer = 1;
	f->have_counts = 1;
	struct mesh_job_status *st = &f->sum.st;
	st->n = r->n;
	st->done = r->done;
	st->leased = r->leased;
	st->buried = r->buried;
	uint64_t pend = r->n - r->done;
	st->pending = pend > r->leased + r->buried ? pend - r->leased - r->buried : 0;
	st->failed_attempts = r->failed;
	st->duplicates = r->dups;
	f->elapsed_s = r->now_ns > r->submitted_ns ? (double)(r->now_ns - r->submitted_ns) / 1e9 : 0;
}

static struct pjob *pjob_new(struct phome *h, const struct mesh_home_spec *s)
{
	struct pjob *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->base.home = &h->base;
	p->base.spec = *s;
	p->h = h;
	p->base.ttl_ns = ttl_ns();
	p->base.result_max = MESH_PGR_RESULT_MAX;
	const char *rmax = getenv("MESHD_STORE_RESULT_MAX"); /* for tests */
	if (rmax && strtoull(rmax, NULL, 10) > 0 && strtoull(rmax, NULL, 10) < MESH_PGR_RESULT_MAX)
		p->base.result_max = (size_t)strtoull(rmax, NULL, 10);
	snprintf(p->url, sizeof p->url, "%s#s%" PRIu64, h->url, s->id);
	mesh_pg_url_safe(p->url, p->where, sizeof p->where);
	pthread_mutex_init(&p->mu, NULL);
	return p;
}

static void ph_close_job(struct mesh_home_job *hj)
{
	struct pjob *p = pj(hj);
	struct mesh_job *jh = atomic_exchange(&hj->jh, NULL), *sjh = atomic_exchange(&hj->sjh, NULL);
	if (sjh)
		mesh_job_close(sjh);
	if (jh)
		mesh_job_close(jh);
	if (p->rpg)
		mesh_pg_close(p->rpg);
	p->rpg = NULL;
	pthread_mutex_lock(&p->mu);
	while (p->pending) {
		struct pres *r = p->pending;
		p->pending = r->next;
		free(r);
	}
	pthread_mutex_unlock(&p->mu);
}

static void ph_job_free(struct mesh_home_job *hj)
{
	if (!hj)
		return;
	ph_close_job(hj);
	pthread_mutex_destroy(&pj(hj)->mu);
	free(hj);
}

static void ph_where(const struct mesh_home_job *hj, struct mesh_home_where *w)
{
	const struct pjob *p = (const struct pjob *)hj;
	w->dir = w->lockdir = w->lease_name = "";
	w->journal = w->results = p->where;
}

/* The job's handles tell when the database stops answering, while they
 * wait for it (up to the outage budget: meshd's --store-outage), and when
 * it answers again or they gave up (the job's run then stops and is
 * started again). */
static int store_wait(void *arg, int state, const char *why, uint64_t waited_ns, uint64_t budget_ns)
{
	struct pjob *p = arg;
	uint64_t id = p->base.spec.id;
	char waited[32], budget[32];
	mesh_say_duration(waited, sizeof waited, waited_ns);
	mesh_say_duration(budget, sizeof budget, budget_ns);
	if (state == MESH_JOB_STORE_STOPPED)
		mesh__home_note(&p->h->base, 1,
		     "store job=%" PRIu64 " the database stopped answering (%s); waiting for it up to %s (--store-outage)",
		     id, why, budget);
	else if (state == MESH_JOB_STORE_ANSWERS)
		mesh__home_note(&p->h->base, 0, "store job=%" PRIu64 " the database answers again after %s", id, waited);
	else if (state == MESH_JOB_STORE_GAVE_UP)
		mesh__home_note(&p->h->base, 1, "store job=%" PRIu64 " the database did not answer for %s (--store-outage)", id, budget);
	return 0;
}

/* A run: its results connection and the job's handles, leasing as this
 * meshd's node (the speculating copies through a second node name, as a
 * file job's: a node never copies its own lease).  A read: nothing (the
 * home's connection reads). */
static int ph_open(struct mesh_home_job *hj, int run, char **err)
{
	struct pjob *p = pj(hj);
	struct mesh_job *jh = NULL, *sjh = NULL;
	char snode[MESH_NODE_MAX + 8], why[256] = "";
	if (!run)
		return 0;
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	o.journal = p->url;
	o.node = p->h->node;
	o.nchunks = hj->spec.n;
	o.max_attempts = hj->spec.retries;
	o.on_store_wait = store_wait;
	o.on_store_wait_arg = p;
	int rc = mesh_pg_open(&p->rpg, p->url, why, sizeof why);
	if (!rc)
		rc = mesh_job_open(&jh, &o);
	if (!rc && hj->spec.speculate) {
		snprintf(snode, sizeof snode, "%.59s-spec", p->h->node);
		o.node = snode;
		rc = mesh_job_open(&sjh, &o);
	}
	if (rc < 0) {
		if (jh)
			mesh_job_close(jh);
		if (p->rpg)
			mesh_pg_close(p->rpg);
		p->rpg = NULL;
		return mesh_errf(err, rc, "%s%s%s", mesh_strerror(rc), why[0] ? ": " : "", why);
	}
	atomic_store(&hj->t_results, mesh_mono_ns());
	atomic_store(&hj->sjh, sjh);
	atomic_store(&hj->jh, jh);
	return 0;
}

/* The connection of a job's calls: its run's, else the home's. */
static struct mesh_pg *conn(struct pjob *p)
{
	return p->rpg ? p->rpg : p->h->pg;
}

static int ph_input(struct mesh_home_job *hj, char **data, size_t *len, char **err)
{
	int rc = mesh_pgr_input(conn(pj(hj)), hj->spec.id, data, len);
	return rc < 0 ? mesh_errf(err, rc, "%s", mesh_strerror(rc)) : 0;
}

static int ph_keep(struct mesh_home_job *hj, uint64_t cid, const void *d, size_t n)
{
	struct pjob *p = pj(hj);
	struct pres *r = malloc(sizeof *r + n);
	if (!r)
		return -ENOMEM;
	r->cid = cid;
	r->len = n;
	memcpy(r->data, d, n);
	pthread_mutex_lock(&p->mu);
	r->next = p->pending;
	p->pending = r;
	pthread_mutex_unlock(&p->mu);
	return 0;
}

/* Before a batch's DONE: every reply taken so far goes to the store in one
 * transaction (replies of chunks outside the batch too: harmless). */
static int ph_sync(struct mesh_home_job *hj)
{
	struct pjob *p = pj(hj);
	pthread_mutex_lock(&p->mu);
	struct pres *list = p->pending;
	p->pending = NULL;
	pthread_mutex_unlock(&p->mu);
	size_t n = 0;
	for (struct pres *r = list; r; r = r->next)
		n++;
	uint64_t *cids = malloc((n ? n : 1) * sizeof *cids);
	const void **data = malloc((n ? n : 1) * sizeof *data);
	size_t *lens = malloc((n ? n : 1) * sizeof *lens);
	int rc = cids && data && lens ? 0 : -ENOMEM;
	size_t i = 0;
	for (struct pres *r = list; r && !rc; r = r->next, i++) {
		cids[i] = r->cid;
		data[i] = r->data;
		lens[i] = r->len;
	}
	if (!rc)
		rc = mesh_pgr_put_results(conn(p), hj->spec.id, n, cids, data, lens);
	free(cids);
	free(data);
	free(lens);
	p->settled |= rc == 0 && n > 0;
	if (rc < 0) {
		/* Kept for the next try: the batch is not completed. */
		pthread_mutex_lock(&p->mu);
		struct pres *last = list;
		while (last && last->next)
			last = last->next;
		if (last) {
			last->next = p->pending;
			p->pending = list;
		}
		pthread_mutex_unlock(&p->mu);
		return rc;
	}
	while (list) {
		struct pres *r = list;
		list = r->next;
		free(r);
	}
	return 0;
}

/* After a batch's DONE: one NOTIFY for the job's waiters (`mesh wait`,
 * `mesh results`), not one a chunk.  Lost, it costs them a second. */
static void ph_synced(struct mesh_home_job *hj)
{
	struct pjob *p = pj(hj);
	if (p->settled && mesh_pgr_notify(conn(p), hj->spec.id) == 0)
		p->settled = 0;
}

static int ph_report(struct mesh_home_job *hj, uint64_t cid, const void *d, size_t len, int buried)
{
	struct pjob *p = pj(hj);
	int rc = mesh_pgr_put_report(conn(p), hj->spec.id, cid, d, len);
	if (buried)
		mesh_pgr_notify(conn(p), hj->spec.id);
	return rc;
}

static int ph_bury(struct mesh_home_job *hj, uint64_t cid, const char *why)
{
	return mesh_pgr_bury(conn(pj(hj)), hj->spec.id, cid, 1, why);
}

/* The store's counts are its end: the run's handles go now, and the
 * leases they hold (a reserve, a cancelled run's) with them. */
static int ph_end(struct mesh_home_job *hj, enum mesh_home_state state, const struct mesh_home_sum *sum, char **err)
{
	ph_close_job(hj);
	return 0;
}

/* The store refused or stopped answering: the server's words (a
 * read-only role, a dropped schema), after rc's.  NULL for an output that
 * cannot be kept (the runner says so) and when the store said nothing. */
static char *ph_why(struct mesh_home_job *hj, int rc)
{
	struct mesh_job *jh = atomic_load(&hj->jh);
	char words[400] = "";
	if (rc >= 0 || rc == MESH_E_OUTPUT || !jh)
		return NULL;
	mesh_job_store_error(jh, words, sizeof words);
	return words[0] ? mesh_strf("%s: %s", mesh_strerror(rc), words) : NULL;
}

static int ph_cancel(struct mesh_home_job *hj, char **err)
{
	int rc = mesh_pgr_cancel(conn(pj(hj)), hj->spec.id);
	return rc < 0 ? mesh_errf(err, rc, "%s", mesh_strerror(rc)) : 0;
}

struct page {
	uint64_t next;
	int (*fn)(void *arg, uint64_t cid, enum mesh_home_result how, const void *p, size_t n);
	void *arg;
};

static int one_result(uint64_t cid, const void *p, size_t n, void *arg)
{
	struct page *g = arg;
	if (cid != g->next || g->fn(g->arg, cid, p ? MESH_HOME_RESULT : MESH_HOME_NONE, p, n))
		return 1; /* a gap (not settled yet), or the caller's stop */
	g->next++;
	return 0;
}

/* A page of at most 1000 chunks (the store's); a chunk not settled is a
 * gap, whatever ended says (a cancelled job's never are: its caller stops
 * once the job ended and nothing more comes). */
static int ph_results(struct mesh_home_job *hj, uint64_t from, int ended,
		      int (*fn)(void *arg, uint64_t cid, enum mesh_home_result how, const void *p, size_t n), void *arg,
		      uint64_t *next)
{
	struct page g = {from, fn, arg};
	int rc = mesh_pgr_results(conn(pj(hj)), hj->spec.id, from, one_result, &g);
	*next = g.next;
	return rc < 0 ? rc : 0;
}

struct bur {
	void (*fn)(void *arg, const struct mesh_home_failure *f);
	void *arg;
};

static void one_buried(const struct mesh_pgr_buried *b, void *arg)
{
	struct bur *c = arg;
	struct mesh_home_failure f = {b->cid, b->attempts, b->status, 1, b->report, strlen(b->report)};
	c->fn(c->arg, &f);
}

static int ph_failures(struct mesh_home_job *hj, void (*fn)(void *arg, const struct mesh_home_failure *f), void *arg)
{
	struct bur c = {fn, arg};
	return mesh_pgr_buried(conn(pj(hj)), hj->spec.id, one_buried, &c);
}

static int ph_wait(struct mesh_home_job *hj, uint64_t timeout_ns)
{
	return mesh_pgr_wait_job(pj(hj)->h->pg, hj->spec.id, timeout_ns);
}

/* ---- a client's jobs ---- */

static int ph_create(struct mesh_home *home, const struct mesh_home_spec *spec, const void *input, size_t len,
		     struct mesh_home_job **out, char **err)
{
	struct phome *h = ph(home);
	struct mesh_pgr_job r = {0};
	uint64_t id = 0;
	*out = NULL;
	snprintf(r.program, sizeof r.program, "%s", spec->program);
	snprintf(r.name, sizeof r.name, "%s", spec->name);
	r.n = spec->n;
	r.max_workers = spec->max_workers;
	r.retries = spec->retries;
	r.timeout_ns = spec->timeout_ns;
	r.speculate = spec->speculate;
	int rc = mesh_pgr_submit(h->pg, &r, spec->has_input ? input : NULL, spec->has_input ? len : 0, &id);
	if (rc < 0)
		return mesh_errf(err, rc, "%s", mesh_strerror(rc));
	struct mesh_home_spec s = *spec;
	s.id = id;
	struct pjob *p = pjob_new(h, &s);
	if (!p)
		return -ENOMEM;
	*out = &p->base;
	return 0;
}

struct one {
	struct mesh_home_spec *spec;
	struct mesh_home_found *f;
};

static void take_one(const struct mesh_pgr_job *r, void *arg)
{
	struct one *o = arg;
	if (o->spec)
		spec_of(r, o->spec);
	if (o->f)
		found_of(r, o->f);
}

static int ph_job(struct mesh_home *home, uint64_t id, struct mesh_home_job **out, struct mesh_home_spec *spec,
		  struct mesh_home_found *f)
{
	struct phome *h = ph(home);
	struct one o = {spec, f};
	struct mesh_home_spec s = {.id = id};
	int rc = spec || f ? mesh_pgr_jobs(h->pg, id, 0, take_one, &o) : 0;
	if (out)
		*out = NULL;
	if (rc == 0 && out && !(*out = (struct mesh_home_job *)pjob_new(h, spec ? spec : &s)))
		rc = -ENOMEM;
	return rc;
}

struct each {
	void (*fn)(void *arg, const struct mesh_home_spec *s, const struct mesh_home_found *f);
	void *arg;
};

static void each_job(const struct mesh_pgr_job *r, void *arg)
{
	struct each *e = arg;
	struct mesh_home_spec s;
	struct mesh_home_found f;
	spec_of(r, &s);
	found_of(r, &f);
	e->fn(e->arg, &s, &f);
}

static int ph_list(struct mesh_home *home,
		   void (*fn)(void *arg, const struct mesh_home_spec *s, const struct mesh_home_found *f), void *arg)
{
	struct each e = {fn, arg};
	return mesh_pgr_jobs(ph(home)->pg, 0, 0, each_job, &e);
}

/* ---- the watch: the follower ---- */

/* The node's programs again (the follower's thread): a program put in the
 * catalog, or taken out, shows at the next look. */
static void node_programs(struct phome *h)
{
	char now[sizeof h->programs] = "";
	if (!h->npg || !h->base.ev.programs)
		return;
	h->base.ev.programs(h->base.ev.arg, now, sizeof now);
	if (strcmp(now, h->programs) && mesh_pg_node_programs(h->npg, now) == 0)
		memcpy(h->programs, now, sizeof now);
}

/* A job not ended: offered to the runner. */
static void seen_job(const struct mesh_pgr_job *r, void *arg)
{
	struct phome *h = arg;
	struct mesh_home_spec s;
	struct mesh_home_found f;
	spec_of(r, &s);
	found_of(r, &f);
	struct pjob *p = r->cancelled ? NULL : pjob_new(h, &s);
	if (p)
		h->base.ev.found(h->base.ev.arg, &p->base, &f);
}

static void seen_cancel(uint64_t id, void *arg)
{
	struct phome *h = arg;
	h->base.ev.cancelled(h->base.ev.arg, id);
}

/* Asks the store which of the jobs the runner drives were cancelled (their
 * ids only: not a scan of every job ever submitted, which each submit's
 * wake-up used to run beside the new job's start). */
static int check_cancels(struct phome *h)
{
	uint64_t *ids = NULL;
	size_t n = 0;
	int rc = h->base.ev.driving ? h->base.ev.driving(h->base.ev.arg, &ids, &n) : 0;
	if (rc == 0 && n)
		rc = mesh_pgr_cancelled(h->pg, ids, n, seen_cancel, h);
	free(ids);
	return rc;
}

static void *follow_main(void *arg)
{
	struct phome *h = arg;
	int rc, warned = 0;
	while (!atomic_load(&h->stop)) {
		node_programs(h);
		/* Listening before the look, as a client does (a wait of 0: the
		 * news before it is the look's): a job submitted during the
		 * look wakes the wait after it (else the next RESCAN_NS). */
		int lrc = mesh_pgr_wait(h->pg, 0, -1);
		rc = mesh_pgr_jobs(h->pg, 0, 1, seen_job, h);
		if (!rc)
			rc = check_cancels(h);
		if (!rc && lrc < 0)
			rc = lrc;
		mesh_fault_pause("store.looked");
		if (rc < 0 && !warned++)
			mesh__home_note(&h->base, 1, "store: cannot read the jobs: %s", mesh_strerror(rc));
		else if (rc >= 0)
			warned = 0;
		uint64_t until = mesh_mono_ns() + RESCAN_NS;
		while (!atomic_load(&h->stop) && mesh_mono_ns() < until) {
			int w = mesh_pgr_wait(h->pg, WAIT_SLICE_NS * 4, h->wake_efd);
			if (w == 2)
				mesh_efd_quiet(h->wake_efd);
			if (w != 0) {
				if (w < 0)
					mesh_sleep_ns(WAIT_SLICE_NS);
				break;
			}
		}
	}
	return NULL;
}

static void ph_kick(struct mesh_home *home)
{
	mesh_efd_ring(ph(home)->wake_efd);
}

/* The meshd's own node, on a connection of its own (its beat thread's):
 * its row, with the catalog's programs, from now until the home closes.
 * A meshd without it still serves; it is said once. */
static void node_start(struct phome *h)
{
	char why[256] = "";
	uint64_t ttl = ttl_ns();
	int rc = mesh_pg_open(&h->npg, h->url, why, sizeof why);
	if (h->base.ev.programs)
		h->base.ev.programs(h->base.ev.arg, h->programs, sizeof h->programs);
	if (!rc && (rc = mesh_pg_node_host(h->npg, h->node, h->programs, ttl ? ttl : NODE_TTL_NS)) < 0) {
		mesh_pg_close(h->npg);
		h->npg = NULL;
	}
	if (rc < 0)
		mesh__home_note(&h->base, 1, "store %s: no node row for this meshd: %s%s%s", h->safe, mesh_strerror(rc), why[0] ? ": " : "",
		     why);
}

static int ph_watch(struct mesh_home *home, char **err)
{
	struct phome *h = ph(home);
	if ((h->wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		return mesh_errf(err, -errno, "cannot follow the store %s: %s", h->safe, strerror(errno));
	node_start(h);
	/* a new job's run opens its two handles on spares */
	h->spares = spares_n && mesh_pg_spares_start(h->url, spares_n) == 0;
	int rc = mesh_thread_start(&h->th, follow_main, h);
	if (rc)
		return mesh_errf(err, rc, "cannot start the store follower: %s", mesh_strerror(rc));
	h->th_on = 1;
	mesh__home_note(&h->base, 0, "store %s: following its meshd jobs", h->safe);
	return 0;
}

static void ph_stop(struct mesh_home *home)
{
	struct phome *h = ph(home);
	if (atomic_exchange(&h->stop, 1) || !h->th_on)
		return;
	pthread_join(h->th, NULL);
	h->th_on = 0;
}

static void ph_close(struct mesh_home *home)
{
	struct phome *h = ph(home);
	if (!h)
		return;
	ph_stop(home);
	if (h->spares)
		mesh_pg_spares_stop();
	/* closed: its node is marked stopped */
	if (h->npg)
		mesh_pg_close(h->npg);
	if (h->pg)
		mesh_pg_close(h->pg);
	if (h->wake_efd >= 0)
		close(h->wake_efd);
	free(h->url);
	free(h);
}

static const struct mesh_home_ops pg_ops = {
	.kind = "postgresql",
	.watch = ph_watch,
	.kick = ph_kick,
	.stop = ph_stop,
	.close = ph_close,
	.create = ph_create,
	.job = ph_job,
	.list = ph_list,
	.job_free = ph_job_free,
	.open = ph_open,
	.close_job = ph_close_job,
	.input = ph_input,
	.keep = ph_keep,
	.sync = ph_sync,
	.synced = ph_synced,
	.report = ph_report,
	.bury = ph_bury,
	.end = ph_end,
	.why = ph_why,
	.cancel = ph_cancel,
	.results = ph_results,
	.failures = ph_failures,
	.wait = ph_wait,
	.where = ph_where,
};

/* This host's node name: every run's too. */
static void node_name(char *buf, size_t cap)
{
	char host[64] = "host";
	gethostname(host, sizeof host - 1);
	host[sizeof host - 1] = 0;
	snprintf(buf, cap, "meshd.%.40s.%d", host, (int)getpid());
}

int mesh_home_pg_open(struct mesh_home **out, const char *url, const struct mesh_home_events *ev, char **err)
{
	char why[256] = "";
	struct phome *h = calloc(1, sizeof *h);
	if (!h)
		return -ENOMEM;
	h->base.ops = &pg_ops;
	if (ev)
		h->base.ev = *ev;
	h->wake_efd = -1;
	mesh_pg_url_safe(url, h->safe, sizeof h->safe);
	node_name(h->node, sizeof h->node);
	if (!mesh_pg_url_is(url)) {
		ph_close(&h->base);
		return mesh_errf(err, MESH_E_PARSE, "--store wants a postgresql:// URL, not '%s'", h->safe);
	}
	if (!(h->url = strdup(url))) {
		ph_close(&h->base);
		return -ENOMEM;
	}
	char *hash = strrchr(h->url, '#');
	if (hash)
		*hash = 0;
	int rc = mesh_pg_open(&h->pg, h->url, why, sizeof why);
	if (rc < 0) {
		rc = store_err(err, rc, h->safe, why);
		ph_close(&h->base);
		return rc;
	}
	*out = &h->base;
	return 0;
}

/* ---- a store's administration ---- */

_Static_assert((int)MESH_HOME_PG_STATUS == (int)MESH_PG_SCHEMA_STATUS && (int)MESH_HOME_PG_INIT == (int)MESH_PG_SCHEMA_INIT &&
		       (int)MESH_HOME_PG_MIGRATE == (int)MESH_PG_SCHEMA_MIGRATE,
	       "mesh store's commands are the store's");

int mesh_home_pg_schema(const char *url, enum mesh_home_pg_schema_op op, int *found, int *now, char *why,
			size_t whycap)
{
	return mesh_pg_schema(url, (enum mesh_pg_schema_op)op, found, now, why, whycap);
}

int mesh_home_pg_schema_version(void)
{
	return MESH_PG_SCHEMA_VERSION;
}

/* The meshd jobs (struct mesh_pgr_job each, in a mesh_buf): their
 * programs, by job name (s<id>), for their nodes' rows. */
struct nodes {
	struct mesh_buf specs;
	int err;
	void (*fn)(void *arg, const struct mesh_home_node *nd);
	void *arg;
};

static void add_spec(const struct mesh_pgr_job *j, void *arg)
{
	struct nodes *c = arg;
	if (mesh_buf_add(&c->specs, j, sizeof *j) < 0)
		c->err = -ENOMEM;
}

static void one_node(const struct mesh_pg_node *nd, void *arg)
{
	const struct nodes *c = arg;
	const struct mesh_pgr_job *v = (const void *)c->specs.p;
	struct mesh_home_node out = {nd->name, nd->host, nd->program, nd->job, nd->chunks, nd->chunks_per_s,
				     nd->age_ns, nd->stopped, nd->silent};
	char name[24];
	for (size_t i = 0; v && i < c->specs.len / sizeof *v; i++) {
		snprintf(name, sizeof name, "s%llu", (unsigned long long)v[i].id);
		if (!strcmp(name, nd->job))
			out.program = v[i].program;
	}
	c->fn(c->arg, &out);
}

int mesh_home_pg_nodes(const char *url, int this_job, void (*fn)(void *arg, const struct mesh_home_node *nd),
		       void *arg, char *why, size_t whycap)
{
	struct mesh_pg *pg;
	struct nodes c = {MESH_BUF_INIT, 0, fn, arg};
	int rc = mesh_pg_open(&pg, url, why, whycap);
	if (rc)
		return rc;
	if (whycap)
		why[0] = 0;
	fn(arg, NULL);
	rc = mesh_pgr_jobs(pg, 0, 0, add_spec, &c);
	if (!rc)
		rc = c.err;
	if (!rc)
		rc = mesh_pg_nodes(pg, this_job, one_node, &c);
	mesh_buf_release(&c.specs);
	mesh_pg_close(pg);
	return rc;
}
