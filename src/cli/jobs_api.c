/* The jobs of a meshd, over its control API (jobs_client.h; docs/api.md,
 * "Jobs"). */
#include "cli/jobs_client.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/io.h"
#include "cli/exit.h"
#include "client/api_client.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REQ_TIMEOUT_NS (600ull * MESH_NS_PER_S)
/* A long poll asks meshd to hold the answer this long (it may answer sooner). */
#define POLL_WAIT "20"
#define BAR_WAIT "0.2"

/* A wait or a results stream that had an answer waits this long for a
 * meshd that went away (a restart: the job is durable, so is the wait,
 * and a results page is written whole or not at all), asking again after
 * pauses that double from GONE_PAUSE_MIN_NS to GONE_PAUSE_MAX_NS. */
#define GONE_MAX_NS (60ull * MESH_NS_PER_S)
#define GONE_PAUSE_MIN_NS (100ull * MESH_NS_PER_MS)
#define GONE_PAUSE_MAX_NS (2ull * MESH_NS_PER_S)

struct api {
	struct jclient base;
	char sock[PATH_MAX];
	json_t *last; /* the last answer: the views' strings */
	int answered; /* a job's look (get) or a results page had an answer */
};

/* The outcome rc of a request (meshd_client_request's) and its answer r:
 * -1 when it went well, else says why and returns the exit code (r
 * released). */
static int outcome(struct api *a, const char *what, int rc, struct meshd_reply *r)
{
	if (rc < 0) {
		if (meshd_client_unreachable(rc)) {
			fprintf(stderr, "mesh: cannot reach meshd at '%s': %s\n", a->sock, mesh_strerror(rc));
			return MESH_EXIT_UNAVAILABLE;
		}
		return mesh_cli_fail(rc, "%s: no answer from meshd at '%s'", what, a->sock);
	}
	if (r->status >= 400) {
		char *msg = NULL;
		int err = meshd_reply_error(r, &msg);
		fprintf(stderr, "mesh: %s: %s\n", what, msg ? msg : "error");
		free(msg);
		meshd_reply_release(r);
		return mesh_exit_for(err);
	}
	return -1;
}

/* One request; on failure prints why and returns the exit code, else -1. */
static int request(struct api *a, const char *what, const char *method, const char *target, const void *body,
		   size_t n, struct meshd_reply *r)
{
	return outcome(a, what, meshd_client_request(a->sock, method, target, body, n, REQ_TIMEOUT_NS, r), r);
}

/* 1 when the request's outcome (rc, r) says meshd is away for now: nobody
 * serves its socket, the answer was cut (it stopped), or 503 (it is
 * stopping); *why says so (malloc'd; r released). */
static int away(int rc, struct meshd_reply *r, char **why)
{
	if (rc < 0) {
		if (!meshd_client_unreachable(rc) && rc != MESH_E_CLOSED)
			return 0;
		*why = strdup(mesh_strerror(rc));
		return 1;
	}
	if (r->status != 503)
		return 0;
	meshd_reply_error(r, why);
	meshd_reply_release(r);
	return 1;
}

/* GET target for job id's look or results (`mesh cmd`: wait, results),
 * through a restart of meshd once an answer came: while meshd is away it
 * asks again, for GONE_MAX_NS at most (saying so on stderr), then gives up
 * as request does. */
static int get_through_restart(struct api *a, const char *cmd, const char *id, const char *what, const char *target,
			       struct meshd_reply *r)
{
	uint64_t since = 0, pause = GONE_PAUSE_MIN_NS;
	for (;;) {
		char *why = NULL;
		int rc = meshd_client_request(a->sock, "GET", target, NULL, 0, REQ_TIMEOUT_NS, r);
		if (!a->answered || !away(rc, r, &why)) {
			if (since && rc == 0 && r->status < 400)
				fprintf(stderr, "mesh: meshd at '%s' answers again; job %s is %s\n", a->sock, id,
					!strcmp(cmd, "wait") ? "waited for" : "read on");
			return outcome(a, what, rc, r);
		}
		uint64_t now = mesh_mono_ns();
		if (!since) {
			since = now;
			fprintf(stderr, "%smesh: meshd at '%s' is away (%s); waiting up to %llu s for it to come back\n",
				isatty(2) ? "\n" : "", a->sock, why ? why : "?",
				(unsigned long long)(GONE_MAX_NS / MESH_NS_PER_S));
		} else if (now - since >= GONE_MAX_NS) {
			fprintf(stderr,
				"mesh: cannot reach meshd at '%s' for %llu s (%s): job %s may still run; `mesh %s %s` "
				"once meshd is back\n",
				a->sock, (unsigned long long)(GONE_MAX_NS / MESH_NS_PER_S), why ? why : "?", id, cmd, id);
			free(why);
			return MESH_EXIT_UNAVAILABLE;
		}
		free(why);
		mesh_sleep_ns(pause);
		pause = pause * 2 < GONE_PAUSE_MAX_NS ? pause * 2 : GONE_PAUSE_MAX_NS;
	}
}

/* Adds s to b percent-encoded for a query value. */
static int add_qvalue(struct mesh_buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char e[3] = {'%', hex[c >> 4], hex[c & 15]};
		int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
			    c == '_' || c == '.' || c == '~';
		if (mesh_buf_add(b, plain ? (const char *)&c : e, plain ? 1 : 3) < 0)
			return -ENOMEM;
	}
	return 0;
}

static uint64_t num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

static double real(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_number(v) ? json_number_value(v) : -1;
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static void view_of(json_t *e, struct jview *v)
{
	*v = (struct jview){
		.id = str(e, "id"),
		.program = str(e, "program"),
		.name = str(e, "name"),
		.state = str(e, "state"),
		.n = num(e, "chunks"),
		.done = num(e, "done"),
		.leased = num(e, "leased"),
		.pending = num(e, "pending"),
		.buried = num(e, "buried"),
		.workers = num(e, "workers"),
		.max_workers = num(e, "max_workers"),
		.rate = real(e, "rate") > 0 ? real(e, "rate") : 0.0,
		.eta_s = real(e, "eta_s"),
		.elapsed_s = real(e, "elapsed_s") > 0 ? real(e, "elapsed_s") : 0,
		.error = str(e, "error"),
		.program_failed = json_string_value(json_object_get(e, "program_failed")),
	};
}

/* The answer's body as JSON, kept as the client's last (the views point
 * into it); NULL when it is none. */
static json_t *keep_json(struct api *a, struct meshd_reply *r)
{
	json_decref(a->last);
	a->last = json_loadb(r->body, r->len, 0, NULL);
	meshd_reply_release(r);
	return a->last;
}

static int api_submit(struct jclient *c, const struct jsub *s, const struct mesh_buf *input, char *id, size_t cap)
{
	struct api *a = (struct api *)c;
	struct mesh_buf t = MESH_BUF_INIT;
	mesh_buf_adds(&t, "/v1/jobs?program=");
	add_qvalue(&t, s->program);
	if (s->have_chunks)
		mesh_buf_addf(&t, "&chunks=%" PRIu64, s->chunks);
	if (s->max_workers)
		mesh_buf_addf(&t, "&max_workers=%" PRIu64, s->max_workers);
	if (s->retries)
		mesh_buf_addf(&t, "&retries=%" PRIu64, s->retries);
	if (s->timeout_ns)
		mesh_buf_addf(&t, "&timeout=%" PRIu64 ".%09" PRIu64, (uint64_t)(s->timeout_ns / MESH_NS_PER_S),
			      (uint64_t)(s->timeout_ns % MESH_NS_PER_S));
	if (s->speculate)
		mesh_buf_adds(&t, "&speculate=1");
	if (s->name) {
		mesh_buf_adds(&t, "&name=");
		add_qvalue(&t, s->name);
	}
	struct meshd_reply r;
	char what[128];
	snprintf(what, sizeof what, "cannot submit a job of '%s'", s->program);
	int ex = t.p ? request(a, what, "POST", t.p, input->p ? input->p : "", input->len, &r)
		     : mesh_cli_fail(-ENOMEM, "submit");
	mesh_buf_release(&t);
	if (ex >= 0)
		return ex;
	json_t *j = keep_json(a, &r);
	const char *got = j ? json_string_value(json_object_get(j, "id")) : NULL;
	/* An id of digits alone: it goes into the wait's URL. */
	if (!got || !*got || strlen(got) >= cap || strspn(got, "0123456789") != strlen(got)) {
		fprintf(stderr, "mesh: submit: meshd's answer names no job id\n");
		return MESH_EXIT_PROTOCOL;
	}
	snprintf(id, cap, "%s", got);
	return -1;
}

static int api_list(struct jclient *c, int all, int json, void (*row)(void *arg, const struct jview *v), void *arg,
		    uint64_t *older)
{
	struct api *a = (struct api *)c;
	struct meshd_reply r;
	int ex = request(a, "cannot list the jobs", "GET", all ? "/v1/jobs?all=1" : "/v1/jobs", NULL, 0, &r);
	if (ex >= 0)
		return ex;
	if (json) {
		/* meshd's answer as it is */
		fwrite(r.body, 1, r.len, stdout);
		meshd_reply_release(&r);
		return -1;
	}
	json_t *j = keep_json(a, &r), *e;
	size_t i;
	row(arg, NULL);
	json_array_foreach(j ? json_object_get(j, "jobs") : NULL, i, e)
	{
		struct jview v;
		view_of(e, &v);
		row(arg, &v);
	}
	*older = num(j, "older");
	return -1;
}

static int api_get(struct jclient *c, const char *id, enum jwait w, struct jview *v)
{
	struct api *a = (struct api *)c;
	struct meshd_reply r;
	char target[96], what[96];
	/* the first look answers at once: a job that cannot move is told
	 * about before the long poll */
	snprintf(target, sizeof target, "/v1/jobs/%s%s%s", id, w == JW_NOW ? "" : "?wait=",
		 w == JW_NOW ? "" : w == JW_TICK ? BAR_WAIT : POLL_WAIT);
	snprintf(what, sizeof what, "cannot wait for job %s", id);
	int ex = get_through_restart(a, "wait", id, what, target, &r);
	if (ex >= 0)
		return ex;
	json_t *j = keep_json(a, &r);
	if (!j) {
		fprintf(stderr, "mesh: %s: meshd's answer is not JSON\n", what);
		return MESH_EXIT_PROTOCOL;
	}
	a->answered = 1;
	view_of(j, v);
	return -1;
}

/* The last get's failures (meshd tells them with the job). */
static int api_buried(struct jclient *c, const char *id,
		      void (*fn)(uint64_t cid, uint64_t attempts, long long status, const char *report))
{
	struct api *a = (struct api *)c;
	json_t *f;
	size_t i;
	json_array_foreach(json_object_get(a->last, "failures"), i, f)
	{
		if (json_is_true(json_object_get(f, "buried")))
			fn(num(f, "chunk"), num(f, "attempts"), (long long)num(f, "status"), str(f, "report"));
	}
	return -1;
}

static int api_results(struct jclient *c, const char *id, uint64_t from, int wait,
		       int (*out)(void *arg, const void *p, size_t n), void *arg, struct jpage *pg)
{
	struct api *a = (struct api *)c;
	char target[128], what[96];
	struct meshd_reply r;
	snprintf(what, sizeof what, "cannot read the results of job %s", id);
	snprintf(target, sizeof target, "/v1/jobs/%s/results?from=%" PRIu64 "&wait=%s", id, from, wait ? POLL_WAIT : "0");
	int ex = get_through_restart(a, "results", id, what, target, &r);
	if (ex >= 0)
		return ex;
	if (meshd_results_page(r.type, &pg->next, &pg->end, &pg->missing) < 0) {
		meshd_reply_release(&r);
		fprintf(stderr, "mesh: %s: meshd's answer has no page position\n", what);
		return MESH_EXIT_PROTOCOL;
	}
	a->answered = 1;
	if (r.len)
		out(arg, r.body, r.len);
	meshd_reply_release(&r);
	return -1;
}

/* One action on job id (method on /v1/jobs/<id><suffix>). */
static int action(struct api *a, const char *id, const char *method, const char *suffix, const char *verb)
{
	struct meshd_reply r;
	char target[96], what[96];
	snprintf(target, sizeof target, "/v1/jobs/%s%s", id, suffix);
	snprintf(what, sizeof what, "cannot %s job %s", verb, id);
	int ex = request(a, what, method, target, NULL, 0, &r);
	if (ex >= 0)
		return ex;
	meshd_reply_release(&r);
	return -1;
}

static int api_cancel(struct jclient *c, const char *id, int kill_workers)
{
	return action((struct api *)c, id, "POST", kill_workers ? "/cancel?kill_workers=1" : "/cancel", "cancel");
}

static int api_remove(struct jclient *c, const char *id)
{
	return action((struct api *)c, id, "DELETE", "", "remove");
}

static void api_close(struct jclient *c)
{
	struct api *a = (struct api *)c;
	if (a)
		json_decref(a->last);
	free(a);
}

static const struct jclient_ops api_ops = {
	.live = 1,
	.submit = api_submit,
	.list = api_list,
	.get = api_get,
	.buried = api_buried,
	.results = api_results,
	.cancel = api_cancel,
	.remove = api_remove,
	.close = api_close,
};

int mesh__jclient_api(struct jclient **out, const char *sock)
{
	struct api *a = calloc(1, sizeof *a);
	if (!a)
		return mesh_cli_fail(-ENOMEM, "jobs");
	a->base.ops = &api_ops;
	snprintf(a->sock, sizeof a->sock, "%s", sock);
	*out = &a->base;
	return -1;
}
