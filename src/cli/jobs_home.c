/* The jobs of a PostgreSQL store, read and written in the store directly
 * through its job home (jobs_client.h over job/home.h), so they work on
 * any host that reaches the database, with or without a meshd there.
 * Every meshd started with --store runs the jobs whose program its
 * catalog has (docs/cluster.md). */
#include "cli/jobs_client.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "cli/exit.h"
#include "job/home.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `wait` and `results` sleep on the job's news (a commit batch of its
 * chunks, a bury, a cancel: the home's wait) and look again after this
 * long without any (a meshd that died between its commit and its NOTIFY,
 * a chunk buried by the engine's attempt limit: told at the next look). */
#define LOOK_NS (1000 * MESH_NS_PER_MS)

struct store {
	struct jclient base;
	const char *url, *cmd;
	struct mesh_home *h;
	struct mesh_home_job *hj; /* the job of the calls (one a command) */
	struct mesh_home_spec spec;
	struct mesh_home_found f; /* its last look */
	char id[24], done[48];
	int listening, ended;
};

/* The store, once; or an exit code (a message printed). */
static int open_store(struct store *s)
{
	char *err = NULL;
	if (s->h)
		return -1;
	if (!mesh_job_is_store_url(s->url))
		return mesh_cli_usage("%s: --store wants a postgresql:// URL", s->cmd);
	int ex = mesh_cli_store_url_refused(s->cmd, s->url);
	if (ex)
		return ex;
	int rc = mesh_home_pg_open(&s->h, s->url, NULL, &err);
	if (rc) {
		fprintf(stderr, "mesh: %s: %s\n", s->cmd, err ? err : mesh_strerror(rc));
		free(err);
		return mesh_exit_for(rc);
	}
	return -1;
}

static int fail(const struct store *s, int rc, const char *what)
{
	fprintf(stderr, "mesh: %s: %s: %s\n", s->cmd, what,
		rc == MESH_E_NOJOB ? "no such job in the store" : mesh_strerror(rc));
	return rc == MESH_E_NOJOB ? MESH_EXIT_DATAERR : mesh_exit_for(rc);
}

/* The store and a handle of job id (nothing read yet); or an exit code. */
static int open_job(struct store *s, const char *id)
{
	int ex = open_store(s);
	if (ex >= 0 || s->hj)
		return ex;
	int rc = s->h->ops->job(s->h, strtoull(id, NULL, 10), &s->hj, NULL, NULL);
	return rc ? fail(s, rc, "cannot read the job") : -1;
}

/* The job's spec, state and counts now: 0 or the store's error. */
static int look(struct store *s)
{
	return s->h->ops->job(s->h, s->hj->spec.id, NULL, &s->spec, &s->f);
}

static void view_of(struct store *s, const struct mesh_home_spec *sp, const struct mesh_home_found *f,
		    struct jview *v)
{
	const struct mesh_job_status *st = &f->sum.st;
	snprintf(s->id, sizeof s->id, "%" PRIu64, sp->id);
	*v = (struct jview){
		.id = s->id,
		.program = sp->program,
		.name = sp->name,
		.state = mesh_home_state_name(f->state),
		.n = sp->n,
		.done = st->done,
		.leased = st->leased,
		.pending = st->pending,
		.buried = st->buried,
		.eta_s = -1,
		.elapsed_s = f->elapsed_s,
		.error = "",
	};
}

static int st_submit(struct jclient *c, const struct jsub *sub, const struct mesh_buf *input, char *id, size_t cap)
{
	struct store *s = (struct store *)c;
	struct mesh_home_spec sp = {0};
	struct mesh_home_job *hj = NULL;
	char *err = NULL;
	int ex = open_store(s);
	if (ex >= 0)
		return ex;
	snprintf(sp.program, sizeof sp.program, "%s", sub->program);
	snprintf(sp.name, sizeof sp.name, "%s", sub->name ? sub->name : "");
	sp.n = sub->chunks;
	sp.has_input = !sub->have_chunks;
	for (size_t i = 0; sp.has_input && i < input->len; i++)
		sp.n += input->p[i] == '\n';
	sp.max_workers = (unsigned)sub->max_workers;
	sp.retries = sub->retries ? (uint32_t)sub->retries : MESH_JOB_MAX_ATTEMPTS_DEFAULT;
	sp.timeout_ns = sub->timeout_ns;
	sp.speculate = sub->speculate;
	int rc = s->h->ops->create(s->h, &sp, input->p, input->len, &hj, &err);
	free(err);
	if (rc)
		return fail(s, rc, "cannot submit the job");
	snprintf(id, cap, "%" PRIu64, hj->spec.id);
	s->h->ops->job_free(hj);
	return -1;
}

struct rows {
	struct store *s;
	void (*row)(void *arg, const struct jview *v);
	void *arg;
	json_t *arr;
};

static void list_row(void *arg, const struct mesh_home_spec *sp, const struct mesh_home_found *f)
{
	struct rows *r = arg;
	struct jview v;
	view_of(r->s, sp, f, &v);
	if (!r->arr)
		return r->row(r->arg, &v);
	const struct mesh_job_status *st = &f->sum.st;
	json_array_append_new(r->arr, json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "id", v.id,
						"program", v.program, "name", v.name, "state", v.state, "chunks",
						(json_int_t)v.n, "done", (json_int_t)v.done, "leased",
						(json_int_t)v.leased, "pending", (json_int_t)v.pending, "buried",
						(json_int_t)v.buried, "failed_attempts", (json_int_t)st->failed_attempts,
						"duplicates", (json_int_t)st->duplicates));
}

static int st_list(struct jclient *c, int all, int json, void (*row)(void *arg, const struct jview *v), void *arg,
		   uint64_t *older)
{
	struct store *s = (struct store *)c;
	struct rows r = {s, row, arg, NULL};
	int ex = open_store(s);
	if (ex >= 0)
		return ex;
	if (json && !(r.arr = json_array()))
		return mesh_cli_fail(-ENOMEM, "%s", s->cmd);
	if (!json)
		row(arg, NULL);
	int rc = s->h->ops->list(s->h, list_row, &r);
	if (rc) {
		json_decref(r.arr);
		return fail(s, rc, "cannot list the jobs");
	}
	if (r.arr) {
		json_t *o = json_pack("{s:o}", "jobs", r.arr);
		char *text = json_dumps(o, JSON_COMPACT);
		if (text)
			printf("%s\n", text);
		free(text);
		json_decref(o);
	}
	*older = 0;
	return -1;
}

/* Listening before the first look: no news between the two is lost. */
static int st_get(struct jclient *c, const char *id, enum jwait w, struct jview *v)
{
	struct store *s = (struct store *)c;
	int ex = open_job(s, id), rc = 0;
	if (ex >= 0)
		return ex;
	if (!s->listening || w != JW_NOW)
		rc = s->h->ops->wait(s->hj, s->listening ? LOOK_NS : 0);
	s->listening = 1;
	if (rc >= 0)
		rc = look(s);
	if (rc)
		return fail(s, rc, "cannot read the job");
	view_of(s, &s->spec, &s->f, v);
	return -1;
}

struct bur {
	void (*fn)(uint64_t cid, uint64_t attempts, long long status, const char *report);
};

static void one_buried(void *arg, const struct mesh_home_failure *f)
{
	((struct bur *)arg)->fn(f->cid, f->attempts, f->status, f->report);
}

static int st_buried(struct jclient *c, const char *id,
		     void (*fn)(uint64_t cid, uint64_t attempts, long long status, const char *report))
{
	struct store *s = (struct store *)c;
	int ex = open_job(s, id);
	if (ex >= 0)
		return ex;
	struct bur b = {fn};
	s->h->ops->failures(s->hj, one_buried, &b);
	return -1;
}

struct sink {
	int (*out)(void *arg, const void *p, size_t n);
	void *arg;
	int stopped; /* out said stop */
};

static int one_result(void *arg, uint64_t cid, enum mesh_home_result how, const void *p, size_t n)
{
	struct sink *k = arg;
	return k->stopped = how == MESH_HOME_RESULT && n && k->out(k->arg, p, n);
}

/* From chunk from on: what is settled, else (wait) news first.  The job
 * read once at the start (listening first when it waits), and again when
 * nothing came: once it ended, one more look (its last batch may have
 * landed after ours) ends the results. */
static int st_results(struct jclient *c, const char *id, uint64_t from, int wait,
		      int (*out)(void *arg, const void *p, size_t n), void *arg, struct jpage *pg)
{
	struct store *s = (struct store *)c;
	struct sink k = {out, arg, 0};
	int ex = open_job(s, id), rc = 0;
	if (ex >= 0)
		return ex;
	if (!s->listening && ((wait && (rc = s->h->ops->wait(s->hj, 0)) < 0) || (rc = look(s)) != 0))
		return fail(s, rc, "cannot read the results");
	s->listening = 1;
	*pg = (struct jpage){from, 0, UINT64_MAX};
	for (;;) {
		if (from >= s->spec.n) {
			pg->end = 1;
			return -1;
		}
		if ((rc = s->hj->home->ops->results(s->hj, from, 0, one_result, &k, &pg->next)) < 0)
			break;
		if (k.stopped)
			return -1;
		if (pg->next > from || !wait || s->ended) {
			pg->end = pg->next >= s->spec.n || (pg->next == from && s->ended);
			return -1;
		}
		if ((rc = look(s)) != 0)
			break;
		if (s->f.state != MESH_HOME_RUNNING) {
			s->ended = 1;
			continue;
		}
		if ((rc = s->h->ops->wait(s->hj, LOOK_NS)) < 0)
			break;
	}
	return fail(s, rc, "cannot read the results");
}

static int st_cancel(struct jclient *c, const char *id, int kill_workers)
{
	struct store *s = (struct store *)c;
	if (kill_workers)
		return mesh_cli_usage("cancel: --kill-workers asks a meshd (--socket): a store's job has the workers "
				      "of every host that serves it");
	int ex = open_job(s, id);
	if (ex >= 0)
		return ex;
	int rc = s->h->ops->cancel(s->hj, NULL);
	return rc ? fail(s, rc, "cannot cancel the job") : -1;
}

static void st_close(struct jclient *c)
{
	struct store *s = (struct store *)c;
	if (!s)
		return;
	if (s->hj)
		s->h->ops->job_free(s->hj);
	if (s->h)
		s->h->ops->close(s->h);
	free(s);
}

static const struct jclient_ops store_ops = {
	.submit = st_submit,
	.list = st_list,
	.get = st_get,
	.buried = st_buried,
	.results = st_results,
	.cancel = st_cancel,
	.close = st_close,
};

int mesh__jclient_store(struct jclient **out, const char *url, const char *cmd)
{
	struct store *s = calloc(1, sizeof *s);
	if (!s)
		return mesh_cli_fail(-ENOMEM, "%s", cmd);
	s->base.ops = &store_ops;
	s->url = url;
	s->cmd = cmd;
	*out = &s->base;
	return -1;
}
