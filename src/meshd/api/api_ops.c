/* meshd's control API (api_int.h): each request's op thread -- the
 * routes and the core's ops behind them, the parts of a streamed reply --
 * and, on the loop thread, the answers it queued sent out. */
#include "meshd/api/api_int.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/parse.h"
#include "meshd/api/api_jobs.h"
#include "meshd/api/metrics.h"
#include "gateway/gw.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* A call waits this long for its reply unless ?timeout= says otherwise. */
#define CALL_TIMEOUT_DEFAULT_NS (60ull * 1000000000ull)
#define CALL_TIMEOUT_MAX_NS (3600ull * 1000000000ull)
#define LOGS_TAIL_MAX (1u << 20)

static const char *arg(struct job *jb, const char *key)
{
	return evhttp_find_header(&jb->args, key);
}

/* Op thread: one part of a streamed reply.  It waits in jb->parts; the loop
 * thread sends it as a chunk (meshd__on_streams).  MESH_E_CLOSED once the client
 * is gone: the call stops. */
static int stream_part(void *arg, const void *p, size_t n)
{
	struct job *jb = arg;
	struct meshd_api *a = jb->a;
	int rc = 0;
	if (atomic_load(&jb->gone))
		return MESH_E_CLOSED;
	pthread_mutex_lock(&a->mu);
	if (!jb->parts && !(jb->parts = evbuffer_new()))
		rc = -ENOMEM;
	else if (evbuffer_add(jb->parts, p, n) < 0)
		rc = -ENOMEM;
	if (rc == 0) {
		jb->streaming = 1;
		if (!jb->stream_queued) {
			jb->stream_queued = 1;
			jb->stream_next = a->streams;
			a->streams = jb;
			event_active(a->stream_ev, EV_READ, 0);
		}
	}
	pthread_mutex_unlock(&a->mu);
	return rc;
}

/* GET /v1/programs/<name>/logs[?tail=BYTES]: the end of its log. */
static void do_logs(struct meshd_api *a, struct job *jb, const char *name)
{
	const char *tail = arg(jb, "tail");
	uint64_t n = 0;
	char *text = NULL, *msg = NULL;
	size_t len = 0;
	if (strcmp(jb->method, "GET") && strcmp(jb->method, "HEAD"))
		return meshd__send_method_not_allowed(jb, "GET, HEAD");
	if (tail && mesh_parse_u64(tail, LOGS_TAIL_MAX, &n) < 0)
		return meshd__send_errorf(jb, 400, MESH_E_PARSE, "tail must be a byte count from 0 to %u", LOGS_TAIL_MAX);
	int rc = meshd_op_logs(a->core, name, (size_t)n, &text, &len, &msg);
	if (rc < 0)
		return meshd__send_op_error(jb, rc, msg);
	free(msg);
	if (!text)
		return meshd__set_answer(jb, 200, "text/plain; charset=utf-8", "", 0, 1);
	return meshd__set_answer(jb, 200, "text/plain; charset=utf-8", text, len, 0);
}

/* POST /v1/programs/<name>/call[?timeout=DURATION]: the body to a worker,
 * its reply (streamed parts first) as the answer. */
static void do_call(struct meshd_api *a, struct job *jb, const char *name)
{
	const char *t = arg(jb, "timeout");
	uint64_t timeout = CALL_TIMEOUT_DEFAULT_NS;
	void *reply = NULL;
	size_t reply_len = 0;
	char *msg = NULL;
	if (t && (mesh_parse_duration(t, CALL_TIMEOUT_MAX_NS, &timeout) < 0 || timeout == 0))
		return meshd__send_errorf(jb, 400, MESH_E_PARSE,
					  "timeout must be a duration (30, 500ms, 5m), more than 0 and at most %llu s",
					  CALL_TIMEOUT_MAX_NS / 1000000000ull);
	int rc = meshd_op_call_ex(a->core, name, jb->body.p ? jb->body.p : "", jb->body.len, stream_part, jb, &reply,
				  &reply_len, timeout, &jb->gone, &msg);
	if (rc < 0) {
		free(reply);
		return meshd__send_op_error(jb, rc, msg);
	}
	free(msg);
	if (!reply)
		return meshd__set_answer(jb, 200, "application/octet-stream", "", 0, 1);
	return meshd__set_answer(jb, 200, "application/octet-stream", reply, reply_len, 0);
}

static void do_program(struct meshd_api *a, struct job *jb, const char *name, const char *action)
{
	int is_post = !strcmp(jb->method, "POST");
	char *msg = NULL;
	json_t *out = NULL;
	int rc;
	struct mesh_gw *gw = a->parts->gw; /* meshd --http's programs (docs/gateway.md) */

	if (!strcmp(action, "logs"))
		return do_logs(a, jb, name);
	if (strcmp(action, "load") && strcmp(action, "unload") && strcmp(action, "start") && strcmp(action, "stop") &&
	    strcmp(action, "call") && strcmp(action, "rollback"))
		return meshd__send_errorf(jb, 404, MESH_E_NOTFOUND, "no such route: /v1/programs/<name>/%s", action);
	if (!is_post)
		return meshd__send_method_not_allowed(jb, "POST");

	if (!strcmp(action, "call"))
		return do_call(a, jb, name);
	if (!strcmp(action, "load") || !strcmp(action, "rollback")) {
		struct meshd_program_info pi;
		rc = (!strcmp(action, "load") ? meshd_op_load : meshd_op_rollback)(a->core, name, &pi, &msg);
		if (rc == 0) {
			out = meshd__program_json(&pi);
			if (out)
				json_object_set_new(out, "replaced", json_boolean(pi.replaced));
			meshd_program_info_release(&pi);
		}
	} else if (!strcmp(action, "start") && gw && mesh_gw_has_program(gw, name)) {
		/* An HTTP program of meshd --http: its gateway starts it. */
		pid_t pid = 0;
		rc = mesh_gw_program_start(gw, name, &pid, &msg);
		if (rc == 0)
			out = json_pack("{s:s, s:I, s:s}", "name", name, "pid", (json_int_t)pid, "state", "warm");
	} else if (!strcmp(action, "stop") && gw && mesh_gw_has_program(gw, name)) {
		rc = mesh_gw_program_stop(gw, name, &msg);
	} else if (!strcmp(action, "start")) {
		struct mesh_instance_stats st;
		rc = meshd_op_start(a->core, name, &st, &msg);
		if (rc == 0)
			out = json_pack("{s:s, s:I, s:s}", "name", name, "pid", (json_int_t)st.pid, "state",
					mesh_istate_name(st.state));
	} else if (!strcmp(action, "stop"))
		rc = meshd_op_stop(a->core, name, &msg);
	else
		rc = meshd_op_unload(a->core, name, &msg);
	if (rc < 0) {
		json_decref(out);
		return meshd__send_op_error(jb, rc, msg);
	}
	free(msg);
	meshd__send_ok(jb, name, action, out);
}

int meshd_reload(const struct meshd_parts *parts, char **summary)
{
	struct mesh_gw *gw = parts->gw;
	struct mesh_gw_reload r = {0};
	struct mesh_buf s = MESH_BUF_INIT;
	char *msg = NULL, *native = NULL;
	int rc = 0, nrc;
	*summary = NULL;
	if (gw) {
		rc = mesh_gw_reload(gw, &r, &msg);
		mesh_buf_adds(&s, r.summary ? r.summary : msg ? msg : mesh_strerror(rc));
		free(r.summary);
		free(msg);
	}
	nrc = meshd_op_reload(parts->core, &native);
	if (native)
		mesh_buf_addf(&s, "%s%s", s.len ? "\n" : "", native);
	else if (nrc < 0)
		mesh_buf_addf(&s, "%snative programs: %s", s.len ? "\n" : "", mesh_strerror(nrc));
	free(native);
	if (!s.len)
		mesh_buf_adds(&s, "reloaded: nothing (no --http, and no native program loaded)");
	if (!(*summary = mesh_buf_detach(&s, NULL)))
		return -ENOMEM;
	return rc < 0 && rc != MESH_E_PARSE ? rc : nrc < 0 && nrc != MESH_E_PARSE ? nrc : rc ? rc : nrc;
}

/* POST /v1/reload (meshd_reload). */
static void do_reload(struct meshd_api *a, struct job *jb)
{
	char *summary = NULL;
	if (strcmp(jb->method, "POST"))
		return meshd__send_method_not_allowed(jb, "POST");
	int rc = meshd_reload(a->parts, &summary);
	if (rc < 0)
		return meshd__send_op_error(jb, rc, summary);
	json_t *out = json_pack("{s:b, s:s}", "ok", 1, "summary", summary);
	free(summary);
	meshd__send_json(jb, 200, out);
}

static void route(struct meshd_api *a, struct job *jb)
{
	static const char prefix[] = "/v1/programs/";
	const char *url = jb->path, *method = jb->method;
	if (!strcmp(url, "/metrics")) { /* Prometheus text, docs/metrics.md */
		struct mesh_buf b = MESH_BUF_INIT;
		if (strcmp(method, "GET") && strcmp(method, "HEAD"))
			return meshd__send_method_not_allowed(jb, "GET, HEAD");
		if (meshd_metrics_text(a->parts, &b) < 0) {
			mesh_buf_release(&b);
			return meshd__send_error(jb, 503, -ENOMEM, NULL);
		}
		size_t n = b.len;
		return meshd__set_answer(jb, 200, MESHD_METRICS_CONTENT_TYPE, mesh_buf_detach(&b, NULL), n, 0);
	}
	if (!strcmp(url, "/v1/reload"))
		return do_reload(a, jb);
	if (!strcmp(url, "/v1/ps")) {
		struct meshd_ps ps;
		int rc;
		if (strcmp(method, "GET") && strcmp(method, "HEAD"))
			return meshd__send_method_not_allowed(jb, "GET, HEAD");
		rc = meshd_op_ps(a->core, &ps);
		if (rc < 0)
			return meshd__send_op_error(jb, rc, NULL);
		json_t *out = meshd__ps_json(&ps);
		meshd_ps_release(&ps);
		struct mesh_gw *gw = a->parts->gw; /* meshd --http's programs (docs/gateway.md) */
		if (out && gw)
			json_object_set_new(out, "http", mesh_gw_ps_json(gw));
		return meshd__send_json(jb, 200, out);
	}
	if (meshd_api_is_jobs(url)) {
		struct meshd_api_answer ans;
		meshd_api_jobs(a->parts->jobs, method, url, &jb->args, jb->body.p, jb->body.len, &ans);
		memcpy(jb->type_buf, ans.type, sizeof jb->type_buf);
		meshd__set_answer(jb, ans.status, jb->type_buf, ans.data ? ans.data : "", ans.len, ans.data == NULL);
		jb->allow = ans.allow;
		return;
	}
	if (!strncmp(url, prefix, sizeof prefix - 1)) {
		const char *name = url + sizeof prefix - 1;
		const char *slash = strchr(name, '/');
		char nm[MESHD_API_NAME_MAX + 1];
		size_t n;
		if (!slash || strchr(slash + 1, '/'))
			return meshd__send_errorf(jb, 404, MESH_E_NOTFOUND, "no such route");
		n = (size_t)(slash - name);
		if (n == 0 || n > MESHD_API_NAME_MAX)
			return meshd__send_errorf(jb, 400, MESH_E_PARSE, "bad program name: 1 to %u characters",
					   MESHD_API_NAME_MAX);
		memcpy(nm, name, n);
		nm[n] = 0;
		if (!meshd_api_name_ok(nm))
			return meshd__send_errorf(jb, 400, MESH_E_PARSE,
					   "bad program name: letters, digits, '_' and '-', not first '-'");
		return do_program(a, jb, nm, slash + 1);
	}
	meshd__send_errorf(jb, 404, MESH_E_NOTFOUND, "no such route");
}

void meshd__job_free(struct job *j)
{
	if (!j)
		return;
	if (!j->data_static)
		free(j->data);
	free(j->path);
	if (j->parts)
		evbuffer_free(j->parts);
	evhttp_clear_headers(&j->args);
	mesh_buf_release(&j->body);
	free(j);
}

static void free_data(const void *data, size_t len, void *arg)
{
	(void)len;
	(void)arg;
	free((void *)data);
}

/* Loop thread, a->mu held: the head of a streamed answer (once) and the
 * parts queued since, as one chunk. */
static void flush_stream(struct job *j)
{
	struct evhttp_request *req = j->req;
	if (!j->started) {
		j->started = 1;
		evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/octet-stream");
		/* HTTP/1.1: no Content-Length, so evhttp sends Transfer-Encoding: chunked. */
		evhttp_send_reply_start(req, 200, "OK");
	}
	if (j->parts && evbuffer_get_length(j->parts))
		evhttp_send_reply_chunk(req, j->parts);
	if (!evhttp_request_get_connection(req))
		atomic_store(&j->gone, 1);
}

/* Loop thread, a->mu held: takes j off a->streams. */
static void unqueue_stream(struct meshd_api *a, struct job *j)
{
	for (struct job **pp = &a->streams; *pp; pp = &(*pp)->stream_next)
		if (*pp == j) {
			*pp = j->stream_next;
			break;
		}
	j->stream_queued = 0;
}

void meshd__on_streams(evutil_socket_t fd, short what, void *arg)
{
	struct meshd_api *a = arg;
	(void)fd;
	(void)what;
	pthread_mutex_lock(&a->mu);
	while (a->streams) {
		struct job *j = a->streams;
		unqueue_stream(a, j);
		flush_stream(j);
	}
	pthread_mutex_unlock(&a->mu);
}

/* Loop thread: the end of a streamed answer.  A call that succeeded sends
 * its last part and the last chunk; one that failed after parts went out
 * cannot change the status any more: the connection is cut before the last
 * chunk, so the client sees an incomplete body, never a whole one.
 * Returns whether the client was still there. */
static int end_stream(struct meshd_api *a, struct job *j)
{
	struct evhttp_request *req = j->req;
	pthread_mutex_lock(&a->mu);
	if (j->stream_queued)
		unqueue_stream(a, j);
	if (j->status == 200 && j->len && j->parts)
		evbuffer_add(j->parts, j->data, j->len);
	flush_stream(j);
	pthread_mutex_unlock(&a->mu);
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	if (j->status == 200 || !evcon) {
		evhttp_send_reply_end(req); /* with no connection: frees req */
		return evcon != NULL;
	}
	/* The parts already queued go out first, as far as the socket takes
	 * them now; then the connection goes (freeing req). */
	struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
	struct evbuffer *o = bev ? bufferevent_get_output(bev) : NULL;
	evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
	while (o && fd >= 0 && evbuffer_get_length(o) && evbuffer_write(o, fd) > 0)
		;
	evhttp_connection_free(evcon);
	return 1;
}

/* Loop thread: sends j's answer, logs the request's line, frees j. */
void meshd__deliver(struct meshd_api *a, struct job *j)
{
	struct evhttp_request *req = j->req;
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	int aborted = evcon == NULL || atomic_load(&j->gone); /* the client went away */
	if (evcon && j->is_call)
		evhttp_connection_set_closecb(evcon, NULL, NULL); /* j is freed below */
	if (j->watch)
		event_free(j->watch);
	j->watch = NULL;
	if (j->streaming) {
		aborted = !end_stream(a, j);
		/* A failure after parts went out reaches no client: it is logged here. */
		int cut = j->status >= 400;
		int en = cut && j->data ? (int)j->len : 0;
		while (en > 0 && j->data[en - 1] == '\n')
			en--;
		mesh_log(cut || aborted ? MESH_LOG_WARN : MESH_LOG_DEBUG,
			 "api request=\"%s\" status=200 stream=1 ms=%llu%s%s%.*s", j->what,
			 (unsigned long long)((mesh_mono_ns() - j->t0) / 1000000), aborted ? " aborted=1" : "",
			 cut ? " cut=1 error=" : "", en, en ? j->data : "");
		meshd__job_free(j);
		atomic_fetch_sub(&a->inflight, 1);
		return;
	}
	struct evbuffer *body = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	int ok = body != NULL;
	if (ok && j->len)
		ok = (j->data_static ? evbuffer_add_reference(body, j->data, j->len, NULL, NULL)
				     : evbuffer_add_reference(body, j->data, j->len, free_data, NULL)) == 0;
	if (ok && j->len && !j->data_static)
		j->data = NULL; /* the buffer owns it now (an empty answer's stays ours to free) */
	if (ok) {
		evhttp_add_header(h, "Content-Type", j->type);
		if (j->allow)
			evhttp_add_header(h, "Allow", j->allow);
	} else {
		j->status = 503;
	}
	if (ok)
		evhttp_send_reply(req, (int)j->status, NULL, body);
	else
		evhttp_send_error(req, 503, NULL); /* out of memory: evhttp's own page */
	if (body)
		evbuffer_free(body);
	unsigned status = j->status;
	mesh_log(status >= 500 || aborted ? MESH_LOG_WARN
		 : j->quiet && status < 400 ? MESH_LOG_DEBUG
					    : MESH_LOG_INFO,
		 "api request=\"%s\" status=%u ms=%llu%s", j->what, status,
		 (unsigned long long)((mesh_mono_ns() - j->t0) / 1000000), aborted ? " aborted=1" : "");
	meshd__job_free(j);
	atomic_fetch_sub(&a->inflight, 1);
}

/* Loop thread: sends every answer the op threads queued. */
void meshd__deliver_done(struct meshd_api *a)
{
	struct job *list, *next;
	pthread_mutex_lock(&a->mu);
	list = a->done;
	a->done = NULL;
	pthread_mutex_unlock(&a->mu);
	for (; list; list = next) {
		next = list->next;
		meshd__deliver(a, list);
	}
}

void meshd__on_done(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	meshd__deliver_done(arg);
}

/* An op thread: runs the request, queues its answer for the loop thread. */
void *meshd__op_main(void *arg)
{
	struct job *j = arg;
	struct meshd_api *a = j->a;
	route(a, j);
	pthread_mutex_lock(&a->mu);
	j->next = a->done;
	a->done = j;
	event_active(a->done_ev, EV_READ, 0);
	/* After this the thread touches nothing of a: stop may free it. */
	a->threads--;
	a->calls -= j->is_call;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	return NULL;
}
