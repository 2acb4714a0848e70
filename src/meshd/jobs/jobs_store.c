/* meshd on a shared PostgreSQL store (`meshd --store URL`, jobs.h
 * meshd_jobs_store): a follower thread watches the store's meshd jobs
 * (store/store_pg_results.h) and, for each running one whose program this
 * meshd's catalog has, runs a driver thread: the chunk driver over the
 * slot executor, as for a local job, leasing the chunks of URL#s<id>
 * through the engine.  So a job submitted anywhere is served by every
 * meshd that has its program; each scales its workers from zero on the
 * chunks it leases and back to zero after.
 *
 * The follower sleeps on LISTEN mesh_jobs (a submit or a cancel wakes it
 * at once) and looks again every RESCAN_NS besides (a driver that stopped
 * on an error is started again then).  A chunk's reply is written to
 * mesh.results by the completer thread (the commit hook) before its DONE
 * is committed, so a DONE chunk's result is in the store.
 *
 * The meshd itself is a node from its start (mesh_pg_node_host, on a
 * connection of its own that beats it): `mesh nodes` lists the host and
 * its catalog's programs before any job; each driver is a node of its job
 * besides, under the same name. */
#include "meshd/jobs/jobs.h"
#include "meshd/jobs/jobs_int.h"

#include "base/buf.h"
#include "base/thread.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/parse.h"
#include "meshd/jobs/job_exec.h"
#include "meshd/core/ops.h"
#include "exec/executor.h"
#include "exec/input.h"
#include "exec/runner.h"
#include "job/job.h"
#include "store/store.h"
#include "store/store_pg.h"
#include "store/store_pg_results.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define RESCAN_NS (5 * MESH_NS_PER_S)
/* The meshd's own node's TTL: the drivers' lease TTL (the chunk driver's
 * default), or MESHD_STORE_TTL_MS as theirs. */
#define NODE_TTL_NS (10 * MESH_NS_PER_S)
#define WAIT_SLICE_NS (250 * MESH_NS_PER_MS)
/* Spare connections kept made (store_pg.h): a driver's results handle and
 * job handle, and a speculating job's second job handle, open on them
 * instead of waiting for two or three backends' starts before its first
 * lease. */
#define SPARES 3

/* One reply waiting for the next commit. */
struct pres {
	struct pres *next;
	uint64_t cid;
	size_t len;
	unsigned char data[];
};

struct sjob {
	struct sjob *next;
	struct sfollow *f;
	struct mesh_pgr_job spec;
	int skip;	   /* not in this catalog (yet): takes no chunks */
	unsigned told;	   /* "not served here" logged */
	unsigned max_workers;
	int cancel_efd;
	_Atomic int cancel_sent; /* set by the follower, read by the driver */
	pthread_t th;
	int th_on;
	_Atomic int ended; /* the driver returned */
	size_t result_max;  /* MESH_PGR_RESULT_MAX, or less (MESHD_STORE_RESULT_MAX, for tests) */
	size_t over_len;    /* the loop thread's: the size of the reply cut by cap_output, 0 none */
	struct mesh__exec_sink inner; /* the runner's sink, behind cap_output */
	struct meshd_job_exec_arg *xa; /* the slot executor's, for make_capped */
	_Atomic int toobig; /* a reply over MESH_PGR_RESULT_MAX buried its chunk and stopped the run */
	int final;	   /* ... with the job over for this host (complete, failed, cancelled) */
	struct mesh_pg *rpg; /* the results' connection (the driver's threads) */
	pthread_mutex_t mu;  /* pending */
	struct pres *pending;
	int settled; /* the completer thread's: this batch had replies, its NOTIFY is due */
	uint64_t done;
};

struct sfollow {
	struct meshd_jobs *j;
	char *base; /* the URL without #job */
	struct mesh_pg *pg;
	pthread_t th;
	_Atomic int stop;
	int wake_efd; /* a program loaded (meshd_on_catalog_change): look again now */
	int spares;   /* this follower keeps the spare connections (mesh_pg_spares_start) */
	struct sjob *list; /* the follower thread's */
	char *catalog;	   /* the catalog directory: its programs go in the node's row */
	struct mesh_pg *npg; /* the meshd's own node (its row, its beat), or NULL */
	char programs[1024]; /* as the row has them */
};

/* This meshd's node name: its drivers' too. */
static void node_name(char *buf, size_t cap)
{
	char host[64] = "host";
	gethostname(host, sizeof host - 1);
	host[sizeof host - 1] = 0;
	snprintf(buf, cap, "meshd.%.40s.%d", host, (int)getpid());
}

static uint64_t ttl_ns(void)
{
	const char *ttl = getenv("MESHD_STORE_TTL_MS");
	return ttl && atoi(ttl) > 0 ? (uint64_t)atoi(ttl) * MESH_NS_PER_MS : 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The catalog's programs (<name>.toml), sorted, joined by commas into buf
 * (cut at cap, ending "..."): what the node's row says this host runs. */
static void catalog_programs(const char *dir, char *buf, size_t cap)
{
	char *names[256];
	size_t n = 0, len = 0;
	DIR *dp = opendir(dir);
	struct dirent *de;
	buf[0] = 0;
	while (dp && n < sizeof names / sizeof *names && (de = readdir(dp))) {
		size_t l = strlen(de->d_name);
		if (de->d_name[0] != '.' && l > 5 && !strcmp(de->d_name + l - 5, ".toml") &&
		    (names[n] = strndup(de->d_name, l - 5)))
			n++;
	}
	if (dp)
		closedir(dp);
	qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; i < n; i++) {
		int k = snprintf(buf + len, cap - len, "%s%s", i ? "," : "", names[i]);
		if (k < 0 || (size_t)k >= cap - len) {
			snprintf(buf + (cap > 4 ? cap - 4 : 0), cap > 4 ? 4 : 0, "...");
			len = cap - 1;
		} else {
			len += (size_t)k;
		}
		free(names[i]);
	}
}

/* The node's programs again (the follower's thread): a program put in the
 * catalog, or taken out, shows at the next look. */
static void node_programs(struct sfollow *f)
{
	char now[sizeof f->programs];
	if (!f->npg)
		return;
	catalog_programs(f->catalog, now, sizeof now);
	if (strcmp(now, f->programs) && mesh_pg_node_programs(f->npg, now) == 0)
		memcpy(f->programs, now, sizeof now);
}

/* ---- one job's driver ---- */

static int hook_result(void *arg, uint64_t cid, uint32_t attempt, const void *p, size_t n)
{
	struct sjob *s = arg;
	size_t whole = s->over_len ? s->over_len : n;
	s->over_len = 0;
	if (n > s->result_max) {
		/* Never DONE without its result, and no use trying again: buried
		 * with the reason.  The error stops this run; driver_main drives
		 * the job again at once. */
		char why[200];
		snprintf(why, sizeof why,
			 "attempt %u: the reply of %zu bytes is over the store's limit of %zu bytes\n", (unsigned)attempt,
			 whole, s->result_max);
		int rc = mesh_pgr_bury(s->rpg, s->spec.id, cid, 1, why);
		mesh_warn("store job=%" PRIu64 " chunk=%" PRIu64 " buried: %.*s", s->spec.id, cid, (int)strlen(why) - 1, why);
		if (rc == 0)
			atomic_store(&s->toobig, 1);
		return MESH_E_TOOBIG;
	}
	struct pres *r = malloc(sizeof *r + n);
	if (!r)
		return -ENOMEM;
	r->cid = cid;
	r->len = n;
	memcpy(r->data, p, n);
	pthread_mutex_lock(&s->mu);
	r->next = s->pending;
	s->pending = r;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

/* Between the slot executor and the runner: a reply over the store's
 * limit goes on cut to limit + 1 bytes, enough for hook_result to bury its
 * chunk.  Whole, a reply over the runner's 4 MiB in-memory bound would
 * spill to a file, which the result hook is never given: the run would
 * stop (MESH_E_OUTPUT) on every try of that chunk.  The slot executor
 * hands a reply over in one piece, in the status call right before the
 * runner ends that attempt and calls hook_result (both on the loop
 * thread), so over_len is that reply's. */
static int cap_output(void *arg, unsigned slot, int out, const void *p, size_t n)
{
	struct sjob *s = arg;
	if (out && n > s->result_max) {
		s->over_len = n;
		n = s->result_max + 1;
	}
	return s->inner.output(s->inner.arg, slot, out, p, n);
}

static int make_capped(void *arg, const struct mesh_exec_opts *o, unsigned nslots, const struct mesh__exec_sink *sink,
		       struct mesh__executor **out)
{
	struct sjob *s = arg;
	struct mesh__exec_sink mine = {cap_output, s};
	s->inner = *sink;
	return meshd_job_exec_make(s->xa, o, nslots, &mine, out);
}

/* Before a batch's DONE: every reply taken so far goes to the store in one
 * transaction (replies of chunks outside the batch too: harmless). */
static int hook_commit(void *arg)
{
	struct sjob *s = arg;
	pthread_mutex_lock(&s->mu);
	struct pres *list = s->pending;
	s->pending = NULL;
	pthread_mutex_unlock(&s->mu);
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
		rc = mesh_pgr_put_results(s->rpg, s->spec.id, n, cids, data, lens);
	free(cids);
	free(data);
	free(lens);
	s->settled |= rc == 0 && n > 0;
	if (rc < 0) {
		/* Kept for the next try: the batch is not completed. */
		pthread_mutex_lock(&s->mu);
		struct pres *last = list;
		while (last && last->next)
			last = last->next;
		if (last) {
			last->next = s->pending;
			s->pending = list;
		}
		pthread_mutex_unlock(&s->mu);
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
static void hook_committed(void *arg)
{
	struct sjob *s = arg;
	if (s->settled && mesh_pgr_notify(s->rpg, s->spec.id) == 0)
		s->settled = 0;
}

static void hook_failed(void *arg, uint64_t cid, uint32_t attempt, int code, const void *err, size_t n, int buried)
{
	struct sjob *s = arg;
	struct mesh_buf b = MESH_BUF_INIT;
	mesh__job_failure_text(&b, attempt, code, err, n);
	/* The report is for people: losing it loses no chunk. */
	if (b.p && mesh_pgr_put_report(s->rpg, s->spec.id, cid, b.p, b.len) < 0)
		mesh_warn("store job=%" PRIu64 " cannot keep the failure report of chunk %" PRIu64, s->spec.id, cid);
	mesh_buf_release(&b);
	if (buried) {
		mesh_info("store job=%" PRIu64 " chunk=%" PRIu64 " buried status=%d", s->spec.id, cid, code);
		mesh_pgr_notify(s->rpg, s->spec.id);
	}
}

/* The job's handles tell when the database stops answering, while they
 * wait for it (up to meshd's --store-outage), and when it answers again
 * or they gave up (the job's driver then stops and is started again). */
static int store_wait(void *arg, int state, const char *why, uint64_t waited_ns, uint64_t budget_ns)
{
	struct sjob *s = arg;
	char waited[32], budget[32];
	mesh_say_duration(waited, sizeof waited, waited_ns);
	mesh_say_duration(budget, sizeof budget, budget_ns);
	if (state == MESH_JOB_STORE_STOPPED)
		mesh_warn("store job=%" PRIu64 " the database stopped answering (%s); waiting for it up to %s (--store-outage)",
			  s->spec.id, why, budget);
	else if (state == MESH_JOB_STORE_ANSWERS)
		mesh_info("store job=%" PRIu64 " the database answers again after %s", s->spec.id, waited);
	else if (state == MESH_JOB_STORE_GAVE_UP)
		mesh_warn("store job=%" PRIu64 " the database did not answer for %s (--store-outage)", s->spec.id, budget);
	return 0;
}

static void hook_lease_lost(void *arg, uint64_t cid, uint64_t since_ns, uint64_t ttl_ns)
{
	struct sjob *s = arg;
	mesh__job_warn_lease_lost("store ", s->spec.id, cid, since_ns, ttl_ns);
}

static void *driver_main(void *arg)
{
	struct sjob *s = arg;
	struct sfollow *f = s->f;
	struct meshd_jobs *j = f->j;
	struct mesh_exec_input in = MESH_EXEC_INPUT_INIT;
	struct mesh_job *jh = NULL, *sjh = NULL;
	char url[1024], node[MESH_NODE_MAX + 1], snode[MESH_NODE_MAX + 8], why[256] = "";
	char *data = NULL;
	size_t len = 0;
	int rc;
	snprintf(url, sizeof url, "%s#s%" PRIu64, f->base, s->spec.id);
	node_name(node, sizeof node);
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	o.journal = url;
	o.node = node;
	o.nchunks = s->spec.n;
	o.max_attempts = s->spec.retries;
	o.on_store_wait = store_wait;
	o.on_store_wait_arg = s;
	rc = mesh_pg_open(&s->rpg, url, why, sizeof why);
	if (!rc)
		rc = mesh_job_open(&jh, &o);
	if (!rc && s->spec.speculate) {
		/* copies of this node's own stragglers come through a second
		 * node name, as jobs.c's (a node never copies its own lease) */
		snprintf(snode, sizeof snode, "%.59s-spec", node);
		o.node = snode;
		rc = mesh_job_open(&sjh, &o);
	}
	if (!rc && s->spec.has_input) {
		rc = mesh_pgr_input(s->rpg, s->spec.id, &data, &len);
		if (!rc)
			rc = mesh_exec_input_from_mem(data, len, &in, NULL);
		if (!rc && in.n != s->spec.n)
			rc = MESH_E_MISMATCH;
	}
	free(data);
	if (rc < 0) {
		mesh_error("store job=%" PRIu64 " cannot run: %s%s%s", s->spec.id, mesh_strerror(rc), why[0] ? ": " : "",
			   why);
		goto out;
	}
	struct mesh_exec_hooks hooks = {
		.result = hook_result,
		.commit = hook_commit,
		.committed = hook_committed,
		.failed = hook_failed,
		.lease_lost = hook_lease_lost,
		.cancel_fd = s->cancel_efd,
		.arg = s,
	};
	char *argv[] = {s->spec.program, NULL};
	struct mesh_exec_opts eo = MESH_EXEC_OPTS_INIT;
	eo.argv = argv;
	eo.slots = s->max_workers * j->depth;
	eo.input = s->spec.has_input ? &in : NULL;
	eo.out_fd = eo.err_fd = eo.note_fd = eo.progress_fd = -1;
	eo.handle_signals = 0;
	eo.hooks = &hooks;
	eo.speculate = s->spec.speculate;
	eo.spec_job = sjh;
	const char *rmax = getenv("MESHD_STORE_RESULT_MAX");
	s->result_max = MESH_PGR_RESULT_MAX;
	if (rmax && strtoull(rmax, NULL, 10) > 0 && strtoull(rmax, NULL, 10) < MESH_PGR_RESULT_MAX)
		s->result_max = (size_t)strtoull(rmax, NULL, 10);
	eo.ttl_ns = ttl_ns();
	struct meshd_job_exec_stats xs = {0};
	struct meshd_job_exec_arg xa = {
		.cfg = {j->core, s->spec.program, s->max_workers, j->depth, s->spec.timeout_ns},
		.stats = &xs,
	};
	struct mesh_exec_stats st;
	s->xa = &xa;
	mesh_info("store job=%" PRIu64 " running program=%s chunks=%" PRIu64 " node=%s", s->spec.id, s->spec.program,
		  s->spec.n, node);
	do
		rc = mesh__exec_drive(jh, &eo, make_capped, s, &st);
	while (rc == MESH_E_OUTPUT && atomic_exchange(&s->toobig, 0));
	s->final = rc == MESH_EXEC_COMPLETE || rc == MESH_EXEC_FAILED || atomic_load(&s->cancel_sent);
	if (rc == MESH_E_OUTPUT) {
		/* An output the run could not keep (cap_output keeps replies
		 * under the runner's bound, so not a reply's size): it would
		 * stop again on the same chunk, so this host stops serving the
		 * job instead of looping. */
		mesh_error("store job=%" PRIu64 " no longer served here: an output could not be kept", s->spec.id);
		s->final = 1;
	}
	if (rc < 0 && rc != MESH_E_OUTPUT) {
		/* the store refused or stopped answering: said as an error, in
		 * the server's words (a read-only role, a dropped schema) */
		char words[400];
		mesh_job_store_error(jh, words, sizeof words);
		mesh_error("store job=%" PRIu64 " driver stopped: %s%s%s", s->spec.id, mesh_strerror(rc),
			   words[0] ? ": " : "", words);
	}
	s->done = st.done;
	mesh_info("store job=%" PRIu64 " driver ended: %s attempts=%" PRIu64 " done=%" PRIu64 " failed=%" PRIu64,
		  s->spec.id,
		  rc == MESH_EXEC_COMPLETE	 ? "complete"
		  : rc == MESH_EXEC_FAILED	 ? "failed"
		  : rc == MESH_EXEC_INTERRUPTED ? "stopped"
						 : mesh_strerror(rc),
		  st.started, st.done, st.failed);
out:
	mesh_exec_input_release(&in);
	if (sjh)
		mesh_job_close(sjh);
	if (jh)
		mesh_job_close(jh);
	atomic_store(&s->ended, 1);
	return NULL;
}

static void sjob_free(struct sjob *s)
{
	while (s->pending) {
		struct pres *r = s->pending;
		s->pending = r->next;
		free(r);
	}
	if (s->rpg)
		mesh_pg_close(s->rpg);
	if (s->cancel_efd >= 0)
		close(s->cancel_efd);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

static void sjob_cancel(struct sjob *s)
{
	uint64_t one = 1;
	if (s->th_on && !atomic_load(&s->cancel_sent) && write(s->cancel_efd, &one, sizeof one) == sizeof one)
		atomic_store(&s->cancel_sent, 1);
}

static void sjob_join(struct sjob *s)
{
	if (s->th_on) {
		pthread_join(s->th, NULL);
		s->th_on = 0;
	}
	if (s->rpg) {
		mesh_pg_close(s->rpg);
		s->rpg = NULL;
	}
}

static int sjob_start(struct sjob *s)
{
	uint64_t v;
	while (read(s->cancel_efd, &v, sizeof v) == sizeof v) {
	}
	atomic_store(&s->ended, 0);
	s->final = 0;
	int rc = mesh_thread_start(&s->th, driver_main, s);
	if (rc < 0)
		return rc;
	s->th_on = 1;
	return 0;
}

/* ---- the follower ---- */

/* Serves job s when this catalog has its program; else leaves it to the
 * others (said once) until a later look: a program put in the catalog
 * meanwhile (a `mesh load` wakes the follower at once) is served then. */
static void try_serve(struct sfollow *f, struct sjob *s)
{
	char *lerr = NULL;
	unsigned mw = s->cancel_efd >= 0 ? meshd_program_max_workers(f->j->core, s->spec.program, &lerr) : 0;
	if (!mw) {
		if (!s->told++)
			mesh_info("store job=%" PRIu64 " program=%s not served here: %s", s->spec.id, s->spec.program,
				  lerr ? lerr : "cannot load it");
		free(lerr);
		s->skip = 1;
		return;
	}
	s->max_workers = s->spec.max_workers && s->spec.max_workers < mw ? s->spec.max_workers : mw;
	s->skip = sjob_start(s) < 0;
	if (!s->skip && s->told)
		mesh_info("store job=%" PRIu64 " program=%s served here now", s->spec.id, s->spec.program);
}

static void seen_job(const struct mesh_pgr_job *pj, void *arg)
{
	struct sfollow *f = arg;
	struct sjob *s;
	for (s = f->list; s; s = s->next)
		if (s->spec.id == pj->id)
			break;
	if (s) {
		if (pj->cancelled)
			sjob_cancel(s);
		else if (s->skip)
			try_serve(f, s);
		else if (atomic_load(&s->ended) && !s->final) {
			/* stopped on an error (the database gone a while): again */
			sjob_join(s);
			if (sjob_start(s) < 0)
				s->final = 1;
		}
		return;
	}
	if (pj->cancelled || !(s = calloc(1, sizeof *s)))
		return;
	s->f = f;
	s->spec = *pj;
	s->cancel_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_init(&s->mu, NULL);
	s->next = f->list;
	f->list = s;
	try_serve(f, s);
}

/* A cancel makes a job inactive: its driver must hear of it too. */
static void seen_cancel(uint64_t id, void *arg)
{
	struct sfollow *f = arg;
	for (struct sjob *s = f->list; s; s = s->next)
		if (s->spec.id == id)
			sjob_cancel(s);
}

/* Asks the store which of the jobs this meshd runs drivers for were
 * cancelled (their ids only: not a scan of every job ever submitted,
 * which each submit's wake-up used to run beside the new job's start). */
static int check_cancels(struct sfollow *f)
{
	size_t n = 0, cap = 0;
	uint64_t *ids = NULL;
	int rc = 0;
	for (struct sjob *s = f->list; s && rc == 0; s = s->next) {
		if (!s->th_on || atomic_load(&s->ended))
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			uint64_t *m = realloc(ids, nc * sizeof *m);
			if (!m)
				rc = -ENOMEM;
			else
				ids = m, cap = nc;
		}
		if (rc == 0)
			ids[n++] = s->spec.id;
	}
	if (rc == 0)
		rc = mesh_pgr_cancelled(f->pg, ids, n, seen_cancel, f);
	free(ids);
	return rc;
}

static void *follow_main(void *arg)
{
	struct sfollow *f = arg;
	int rc, warned = 0;
	while (!atomic_load(&f->stop)) {
		node_programs(f);
		rc = mesh_pgr_jobs(f->pg, 0, 1, seen_job, f);
		if (!rc)
			rc = check_cancels(f);
		for (struct sjob *s = f->list; s; s = s->next)
			if (s->th_on && atomic_load(&s->ended) && s->final)
				sjob_join(s);
		if (rc < 0 && !warned++)
			mesh_warn("store: cannot read the jobs: %s", mesh_strerror(rc));
		else if (rc >= 0)
			warned = 0;
		uint64_t until = mesh_mono_ns() + RESCAN_NS;
		while (!atomic_load(&f->stop) && mesh_mono_ns() < until) {
			int w = mesh_pgr_wait(f->pg, WAIT_SLICE_NS * 4, f->wake_efd);
			if (w == 2) {
				uint64_t v;
				while (read(f->wake_efd, &v, sizeof v) == sizeof v) {
				}
			}
			if (w != 0) {
				if (w < 0)
					mesh_sleep_ns(WAIT_SLICE_NS);
				break;
			}
		}
	}
	return NULL;
}

static void catalog_changed(void *arg)
{
	struct sfollow *f = arg;
	uint64_t one = 1;
	if (write(f->wake_efd, &one, sizeof one) != sizeof one) {
		/* a counter near its limit: the follower is woken already */
	}
}

/* The meshd's own node, on a connection of its own (its beat thread's):
 * its row, with the catalog's programs, from now until a clean stop.  A
 * meshd without it still serves; it is said once. */
static void node_start(struct sfollow *f, const char *safe)
{
	char name[MESH_NODE_MAX + 1], why[256] = "";
	uint64_t ttl = ttl_ns();
	int rc = mesh_pg_open(&f->npg, f->base, why, sizeof why);
	node_name(name, sizeof name);
	catalog_programs(f->catalog, f->programs, sizeof f->programs);
	if (!rc && (rc = mesh_pg_node_host(f->npg, name, f->programs, ttl ? ttl : NODE_TTL_NS)) < 0) {
		mesh_pg_close(f->npg);
		f->npg = NULL;
	}
	if (rc < 0)
		mesh_warn("store %s: no node row for this meshd: %s%s%s", safe, mesh_strerror(rc), why[0] ? ": " : "",
			  why);
}

static void node_stop(struct sfollow *f)
{
	/* closed: marked stopped */
	mesh_pg_close(f->npg);
	f->npg = NULL;
}

static void follow_free(struct sfollow *f)
{
	node_stop(f);
	if (f->pg)
		mesh_pg_close(f->pg);
	if (f->wake_efd >= 0)
		close(f->wake_efd);
	free(f->catalog);
	free(f->base);
	free(f);
}

int meshd_jobs_store(struct meshd_jobs *j, const char *url, const char *catalog, char **err)
{
	char why[256] = "", safe[512], dir[PATH_MAX];
	struct sfollow *f;
	int rc;
	mesh_pg_url_safe(url, safe, sizeof safe);
	if (!mesh_pg_url_is(url))
		return mesh_errf(err, MESH_E_PARSE, "--store wants a postgresql:// URL, not '%s'", safe);
	if (j->sf)
		return mesh_errf(err, MESH_E_STATE, "already following a store");
	if (!(f = calloc(1, sizeof *f)))
		return -ENOMEM;
	f->wake_efd = -1;
	if (!(f->base = strdup(url)) || !(f->catalog = strdup(realpath(catalog, dir) ? dir : catalog)) ||
	    (f->wake_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		follow_free(f);
		return -ENOMEM;
	}
	char *h = strrchr(f->base, '#');
	if (h)
		*h = 0;
	f->j = j;
	if ((rc = mesh_pg_open(&f->pg, f->base, why, sizeof why)) < 0) {
		rc = mesh_errf(err, rc, "cannot use the store %s: %s%s%s", safe, mesh_strerror(rc), why[0] ? ": " : "",
			       why);
		follow_free(f);
		return rc;
	}
	node_start(f, safe);
	/* a new job's driver opens its two handles on spares */
	f->spares = mesh_pg_spares_start(f->base, SPARES) == 0;
	rc = mesh_thread_start(&f->th, follow_main, f);
	if (rc) {
		if (f->spares)
			mesh_pg_spares_stop();
		follow_free(f);
		return mesh_errf(err, rc, "cannot start the store follower: %s", mesh_strerror(rc));
	}
	j->sf = f;
	meshd_on_catalog_change(j->core, catalog_changed, f);
	mesh_info("store %s: following its meshd jobs", safe);
	return 0;
}

void mesh__jobs_store_stop(struct meshd_jobs *j)
{
	struct sfollow *f = j->sf;
	if (!f || atomic_exchange(&f->stop, 1))
		return;
	meshd_on_catalog_change(j->core, NULL, NULL);
	pthread_join(f->th, NULL);
	for (struct sjob *s = f->list; s; s = s->next)
		sjob_cancel(s);
	for (struct sjob *s = f->list; s; s = s->next)
		sjob_join(s);
	if (f->spares)
		mesh_pg_spares_stop();
	node_stop(f);
}

void mesh__jobs_store_free(struct meshd_jobs *j)
{
	struct sfollow *f = j->sf;
	if (!f)
		return;
	mesh__jobs_store_stop(j);
	while (f->list) {
		struct sjob *s = f->list;
		f->list = s->next;
		sjob_free(s);
	}
	follow_free(f);
	j->sf = NULL;
}
