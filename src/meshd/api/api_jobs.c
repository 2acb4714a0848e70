/* The control API's job routes (api_jobs.h). */
#include "meshd/api/api_jobs.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/parse.h"
#include "base/utf8.h"
#include "meshd/api/api.h"
#include "meshd/jobs/jobs.h"
#include "meshd/api/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h> /* before event2: TAILQ for struct evkeyvalq */
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#define WAIT_MAX_NS (60ull * 1000000000ull)
#define RESULTS_PAGE (4u << 20)

_Static_assert((int)MESH_HOME_RUNNING == (int)MESHD_MJOB_RUNNING && (int)MESH_HOME_COMPLETE == (int)MESHD_MJOB_COMPLETE &&
		       (int)MESH_HOME_FAILED == (int)MESHD_MJOB_FAILED && (int)MESH_HOME_CANCELLED == (int)MESHD_MJOB_CANCELLED &&
		       (int)MESH_HOME_ERROR == (int)MESHD_MJOB_ERROR,
	       "the metrics job states are the jobs states");

int meshd_api_is_jobs(const char *path)
{
	return !strcmp(path, "/v1/jobs") || !strncmp(path, "/v1/jobs/", 9);
}

static void answer(struct meshd_api_answer *a, unsigned status, const char *type, char *data, size_t n)
{
	a->status = status;
	snprintf(a->type, sizeof a->type, "%s", type);
	a->data = data;
	a->len = n;
}

static void error(struct meshd_api_answer *a, unsigned status, int err, const char *msg)
{
	size_t n = 0;
	char *body = meshd_api_error_body(err, msg, &n);
	answer(a, body ? status : 503, "application/json", body, body ? n : 0);
}

static void errorf(struct meshd_api_answer *a, unsigned status, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void errorf(struct meshd_api_answer *a, unsigned status, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	error(a, status, err, msg);
}

static void op_error(struct meshd_api_answer *a, int err, char *msg)
{
	error(a, (unsigned)meshd_api_status_for(err), err, msg);
	free(msg);
}

static void not_allowed(struct meshd_api_answer *a, const char *allow)
{
	error(a, 405, MESH_E_PROTO, "method not allowed");
	a->allow = allow;
}

static void json_answer(struct meshd_api_answer *a, unsigned status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	json_decref(j);
	if (!s)
		return error(a, 503, -ENOMEM, NULL);
	size_t n = strlen(s);
	char *t = realloc(s, n + 2);
	if (t) {
		t[n++] = '\n';
		t[n] = 0;
		s = t;
	}
	answer(a, status, "application/json", s, n);
}

/* Any bytes as a JSON string (invalid UTF-8 becomes U+FFFD). */
static json_t *text_json(const char *s)
{
	json_t *j = json_string(s ? s : "");
	if (j)
		return j;
	char *t = mesh_utf8_sanitize(s, strlen(s), NULL);
	j = json_string(t ? t : "");
	free(t);
	return j;
}

static json_t *job_json(const struct meshd_job_info *ji)
{
	char id[24];
	snprintf(id, sizeof id, "%" PRIu64, ji->id);
	json_t *j = json_pack("{s:s, s:o, s:o, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:I, s:I, s:I}",
			      "id", id, "program", text_json(ji->program), "name", text_json(ji->name), "state",
			      mesh_home_state_name(ji->state), "chunks", (json_int_t)ji->n, "done", (json_int_t)ji->done,
			      "leased", (json_int_t)ji->leased, "pending", (json_int_t)ji->pending, "buried",
			      (json_int_t)ji->buried, "duplicates", (json_int_t)ji->duplicates, "failed_attempts",
			      (json_int_t)ji->failed_attempts, "speculative_wins", (json_int_t)ji->speculative_wins,
			      "rate", ji->rate, "eta_s", ji->eta_s, "elapsed_s", ji->elapsed_s, "workers",
			      (json_int_t)ji->workers, "starting", (json_int_t)ji->starting, "max_workers",
			      (json_int_t)ji->max_workers);
	if (!j)
		return NULL;
	json_t *more = json_pack("{s:I, s:f, s:b, s:I, s:I, s:I, s:I, s:f, s:o, s:o, s:o, s:o}", "retries",
				 (json_int_t)ji->retries, "timeout_s", (double)ji->timeout_ns / 1e9, "speculate",
				 ji->speculate, "worker_deaths", (json_int_t)ji->worker_deaths, "worker_kills",
				 (json_int_t)ji->worker_kills, "ignored_replies", (json_int_t)ji->ignored_replies,
				 "requeued", (json_int_t)ji->requeued, "first_result_s", ji->first_result_s, "dir",
				 text_json(ji->dir), "journal", text_json(ji->journal), "lockdir", text_json(ji->lockdir),
				 "lease_name", text_json(ji->lease_name));
	if (!more || json_object_update(j, more) < 0) {
		json_decref(more);
		json_decref(j);
		return NULL;
	}
	json_decref(more);
	if (ji->error)
		json_object_set_new(j, "error", text_json(ji->error));
	if (ji->program_failed)
		json_object_set_new(j, "program_failed", text_json(ji->program_failed));
	if (ji->failures) {
		json_t *arr = json_array();
		for (size_t i = 0; arr && i < ji->nfailures; i++) {
			const struct meshd_job_failure *f = &ji->failures[i];
			json_array_append_new(arr, json_pack("{s:I, s:I, s:i, s:b, s:o}", "chunk", (json_int_t)f->cid,
							     "attempts", (json_int_t)f->attempts, "status", f->status,
							     "buried", f->buried,
							     "report", f->report ? text_json(f->report) : json_null()));
		}
		json_object_set_new(j, "failures", arr ? arr : json_null());
	}
	return j;
}

/* Parses ?key=N; 0 (absent: *out untouched), or -1 after answering 400. */
/* Query parameter key, when given, into *out: a whole number min..max. */
static int arg_u64(const struct evkeyvalq *args, const char *key, uint64_t min, uint64_t max, uint64_t *out,
		   struct meshd_api_answer *a)
{
	const char *v = evhttp_find_header(args, key);
	if (!v)
		return 0;
	if (mesh_parse_u64(v, max, out) < 0 || *out < min) {
		errorf(a, 400, MESH_E_PARSE, "%s must be a whole number from %" PRIu64 " to %" PRIu64 ", not '%.40s'", key,
		       min, max, v);
		return -1;
	}
	return 0;
}

static int arg_seconds(const struct evkeyvalq *args, const char *key, uint64_t max_ns, uint64_t *out,
		       struct meshd_api_answer *a)
{
	const char *v = evhttp_find_header(args, key);
	if (!v)
		return 0;
	if (mesh_parse_duration(v, max_ns, out) < 0) {
		errorf(a, 400, MESH_E_PARSE, "%s must be a duration (30, 500ms, 5m; at most %llu s), not '%.40s'", key,
		       (unsigned long long)(max_ns / 1000000000ull), v);
		return -1;
	}
	return 0;
}

static void submit(struct meshd_jobs *jobs, const struct evkeyvalq *args, const void *body, size_t n, struct meshd_api_answer *a)
{
	struct meshd_job_spec s = {0};
	uint64_t v = 0;
	s.program = evhttp_find_header(args, "program");
	s.name = evhttp_find_header(args, "name");
	if (!s.program || !meshd_api_name_ok(s.program))
		return errorf(a, 400, MESH_E_PARSE, "program=NAME is required: letters, digits, '_' and '-'");
	if (arg_u64(args, "chunks", 0, UINT64_MAX, &s.chunks, a) < 0)
		return;
	if (evhttp_find_header(args, "chunks") && !s.chunks)
		return errorf(a, 400, MESH_E_RANGE, "chunks must be at least 1");
	v = 0;
	if (arg_u64(args, "max_workers", 1, 64, &v, a) < 0)
		return;
	s.max_workers = (unsigned)v;
	v = 0;
	if (arg_u64(args, "retries", 1, 1000000, &v, a) < 0)
		return;
	s.retries = (uint32_t)v;
	if (arg_seconds(args, "timeout", 86400ull * 1000000000ull, &s.timeout_ns, a) < 0)
		return;
	const char *sp = evhttp_find_header(args, "speculate");
	s.speculate = sp && strcmp(sp, "0") && strcmp(sp, "false");
	if (!s.chunks) {
		s.input = body;
		s.input_len = n;
	} else if (n) {
		return errorf(a, 400, MESH_E_PARSE, "chunks=N takes no input body");
	}
	uint64_t id;
	char *msg = NULL;
	int rc = meshd_jobs_submit(jobs, &s, &id, &msg);
	if (rc < 0)
		return op_error(a, rc, msg);
	free(msg);
	struct meshd_job_info ji;
	if (meshd_jobs_get(jobs, id, 0, 0, &ji, NULL) < 0) {
		char ids[24];
		snprintf(ids, sizeof ids, "%" PRIu64, id);
		return json_answer(a, 201, json_pack("{s:s}", "id", ids));
	}
	json_answer(a, 201, job_json(&ji));
	meshd_job_info_release(&ji);
}

static void list(struct meshd_jobs *jobs, const struct evkeyvalq *args, struct meshd_api_answer *a)
{
	struct meshd_job_info *v;
	size_t n, older = 0;
	uint64_t all = 0;
	if (arg_u64(args, "all", 0, 1, &all, a) < 0)
		return;
	int rc = meshd_jobs_list(jobs, all ? 0 : MESHD_JOBS_RECENT, &v, &n, &older);
	if (rc < 0)
		return error(a, 503, rc, NULL);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, job_json(&v[i]));
	meshd_jobs_list_release(v, n);
	json_answer(a, 200, arr ? json_pack("{s:o, s:I}", "jobs", arr, "older", (json_int_t)older) : NULL);
}

static void results(struct meshd_jobs *jobs, uint64_t id, const struct evkeyvalq *args, struct meshd_api_answer *a)
{
	uint64_t from = 0, wait = 0, framed = 0, next;
	int end;
	if (arg_u64(args, "from", 0, UINT64_MAX, &from, a) < 0 || arg_seconds(args, "wait", WAIT_MAX_NS, &wait, a) < 0 ||
	    arg_u64(args, "framed", 0, 1, &framed, a) < 0)
		return;
	struct mesh_buf b = MESH_BUF_INIT;
	char *msg = NULL;
	uint64_t missing;
	size_t nmissing;
	/* At most one DONE chunk without a result a page: named in the type. */
	int rc = meshd_jobs_results(jobs, id, from, wait, RESULTS_PAGE, (int)framed, &b, &missing, 1, &nmissing,
				    &next, &end, &msg);
	if (rc < 0) {
		mesh_buf_release(&b);
		return op_error(a, rc, msg);
	}
	free(msg);
	char type[sizeof a->type], miss[40] = "";
	if (nmissing)
		snprintf(miss, sizeof miss, "; missing=%" PRIu64, missing);
	/* Where the next page starts travels with the bytes (the results as
	 * they are, or with framed=1 each behind its chunk id and length),
	 * and which DONE chunk of the page has no result. */
	snprintf(type, sizeof type, "application/octet-stream; next=%" PRIu64 "; end=%d%s", next, end, miss);
	size_t n = 0;
	char *data = mesh_buf_detach(&b, &n);
	answer(a, 200, type, data, data ? n : 0);
}

static json_t *u64_array(const uint64_t *v, unsigned n)
{
	json_t *arr = json_array();
	for (unsigned i = 0; arr && i < n; i++)
		if (json_array_append_new(arr, json_integer((json_int_t)v[i])) < 0) {
			json_decref(arr);
			return NULL;
		}
	return arr;
}

/* GET /v1/jobs/<id>/chunks[?buckets=N]: the chunk map (meshd_jobs_chunk_map). */
static void chunks(struct meshd_jobs *jobs, uint64_t id, const struct evkeyvalq *args, struct meshd_api_answer *a)
{
	uint64_t buckets = 100;
	if (arg_u64(args, "buckets", 1, MESHD_CHUNK_MAP_MAX, &buckets, a) < 0)
		return;
	struct meshd_chunk_map m;
	char *msg = NULL;
	int rc = meshd_jobs_chunk_map(jobs, id, (unsigned)buckets, &m, &msg);
	if (rc < 0)
		return op_error(a, rc, msg);
	free(msg);
	json_t *first = json_array();
	for (unsigned i = 0; first && i < m.buckets; i++)
		if (json_array_append_new(first, json_integer((json_int_t)meshd_chunk_map_first(&m, i))) < 0) {
			json_decref(first);
			first = NULL;
		}
	json_t *d = u64_array(m.done, m.buckets), *r = u64_array(m.retried, m.buckets), *b = u64_array(m.buried, m.buckets);
	json_t *j = first && d && r && b
			    ? json_pack("{s:I, s:I, s:o, s:o, s:o, s:o}", "n", (json_int_t)m.n, "buckets", (json_int_t)m.buckets,
					"first", first, "done", d, "retried", r, "buried", b)
			    : NULL;
	if (!j) {
		json_decref(first);
		json_decref(d);
		json_decref(r);
		json_decref(b);
	}
	meshd_chunk_map_release(&m);
	json_answer(a, 200, j);
}

/* The answer to an action on job ids (cancel, remove): the call's rc and
 * its message (owned). */
static void acted(struct meshd_api_answer *a, const char *ids, const char *action, int rc, char *msg)
{
	if (rc < 0)
		return op_error(a, rc, msg);
	free(msg);
	json_answer(a, 200, json_pack("{s:b, s:s, s:s}", "ok", 1, "id", ids, "action", action));
}

void meshd_api_jobs(struct meshd_jobs *jobs, const char *method, const char *path, const struct evkeyvalq *args, const void *body, size_t n,
		    struct meshd_api_answer *a)
{
	int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), is_post = !strcmp(method, "POST");
	memset(a, 0, sizeof *a);
	if (!jobs)
		return error(a, 503, MESH_E_STATE,
			     "this meshd runs no jobs: it has no state directory (start it with --state DIR; "
			     "its log said why the default could not be used)");
	if (!strcmp(path, "/v1/jobs")) {
		if (is_post)
			return submit(jobs, args, body, n, a);
		if (is_get)
			return list(jobs, args, a);
		return not_allowed(a, "GET, HEAD, POST");
	}
	/* /v1/jobs/<id>[/results|/chunks|/cancel] */
	const char *p = path + 9, *slash = strchr(p, '/');
	size_t idlen = slash ? (size_t)(slash - p) : strlen(p);
	char ids[24];
	uint64_t id;
	if (idlen == 0 || idlen >= sizeof ids)
		return errorf(a, 404, MESH_E_NOTFOUND, "no such job");
	memcpy(ids, p, idlen);
	ids[idlen] = 0;
	if (mesh_parse_u64(ids, UINT64_MAX, &id) < 0 || id == 0)
		return errorf(a, 404, MESH_E_NOTFOUND, "no job '%s' (job ids are 1, 2, 3, ...)", ids);
	const char *action = slash ? slash + 1 : "";
	if (!*action && !strcmp(method, "DELETE")) {
		char *msg = NULL;
		int rc = meshd_jobs_remove(jobs, id, &msg);
		return acted(a, ids, "remove", rc, msg);
	}
	if (!*action) {
		uint64_t wait = 0;
		if (!is_get)
			return not_allowed(a, "GET, HEAD, DELETE");
		if (arg_seconds(args, "wait", WAIT_MAX_NS, &wait, a) < 0)
			return;
		struct meshd_job_info ji;
		char *msg = NULL;
		int rc = meshd_jobs_get(jobs, id, 1, wait, &ji, &msg);
		if (rc < 0)
			return op_error(a, rc, msg);
		free(msg);
		json_answer(a, 200, job_json(&ji));
		meshd_job_info_release(&ji);
		return;
	}
	if (!strcmp(action, "results")) {
		if (!is_get)
			return not_allowed(a, "GET, HEAD");
		return results(jobs, id, args, a);
	}
	if (!strcmp(action, "chunks")) {
		if (!is_get)
			return not_allowed(a, "GET, HEAD");
		return chunks(jobs, id, args, a);
	}
	if (!strcmp(action, "cancel")) {
		if (!is_post)
			return not_allowed(a, "POST");
		char *msg = NULL;
		uint64_t kill_workers = 0;
		if (arg_u64(args, "kill_workers", 0, 1, &kill_workers, a) < 0)
			return;
		int rc = meshd_jobs_cancel(jobs, id, (int)kill_workers, &msg);
		return acted(a, ids, "cancel", rc, msg);
	}
	errorf(a, 404, MESH_E_NOTFOUND, "no such route: /v1/jobs/<id>/%.40s", action);
}

/* The job families of /metrics (meshd/api/metrics.h), summed over every job
 * meshd keeps.  A job's DONE count never goes down, and the counts of the
 * jobs removed (retention, `mesh rm`) are added, so the sums of done,
 * duplicates and wins are counters. */
int meshd_api_jobs_metrics(struct meshd_jobs *jobs, struct meshd_job_metrics *out)
{
	struct meshd_job_info *list = NULL;
	size_t n = 0;
	memset(out, 0, sizeof *out);
	if (!jobs)
		return MESH_E_UNSUPPORTED;
	if (meshd_jobs_list(jobs, 0, &list, &n, NULL) < 0)
		return -ENOMEM;
	meshd_jobs_gone(jobs, &out->completions, &out->duplicates, &out->speculative_wins);
	for (size_t i = 0; i < n; i++) {
		const struct meshd_job_info *ji = &list[i];
		if ((unsigned)ji->state < MESHD_MJOB__N)
			out->jobs[ji->state]++;
		out->chunks[MESHD_CHUNK_PENDING] += ji->pending;
		out->chunks[MESHD_CHUNK_LEASED] += ji->leased;
		out->chunks[MESHD_CHUNK_DONE] += ji->done;
		out->chunks[MESHD_CHUNK_BURIED] += ji->buried;
		out->completions += ji->done;
		out->duplicates += ji->duplicates;
		out->speculative_wins += ji->speculative_wins;
	}
	meshd_jobs_list_release(list, n);
	return 0;
}
