/* meshd's control API over libevent's evhttp (docs/api.md).
 *
 * evhttp runs on the core's event loop (meshd_core_base: one event_base
 * for meshd, ops.h), which parses HTTP; each request's op runs on a thread
 * of its own (at most MESHD_API_MAX_CONNS at once), because ops block:
 * `start` waits for a worker's ready, `call` for its reply -- and the
 * worker's events are dispatched by that same loop, which must never wait.
 * The op's answer is queued and the loop thread, woken by an event, sends
 * it -- evhttp is not thread-safe, so only the loop thread touches it.
 *
 * evhttp answers a few errors itself with an HTML page (libevent 2.1 has no
 * hook to change it): a malformed request (400), a method it does not know
 * (501), headers over HEADERS_HARD_MAX (400) or a body over BODY_DRAIN_MAX
 * (413).  Headers over HEADERS_MAX, the bound the API documents, get JSON 413
 * from on_request; a bad or too large Content-Length JSON 400/413 from
 * in_added.  The
 * body bound the API documents, MESHD_API_MAX_BODY, is ours: answered in
 * JSON by in_added (announced) or on_request (chunked).  libmicrohttpd, used
 * before, is gone because Debian's links GnuTLS: 2.3 MB of meshd's RSS. */
#include "daemon/api.h"
#include "daemon/api_jobs.h"

#include "autoscale/policy.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/path.h"
#include "base/utf8.h"
#include "daemon/metrics.h"
#include "daemon/api_gpu.h"
#include "daemon/ops.h"
#include "gateway/gw.h"
#include "host/manifest.h"
#include "shm/ring.h"

#include <errno.h>
#include <sys/queue.h> /* before event2: TAILQ_INIT for struct evkeyvalq */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A call waits this long for its reply unless ?timeout= says otherwise. */
#define CALL_TIMEOUT_DEFAULT_NS (60ull * 1000000000ull)
#define CALL_TIMEOUT_MAX_NS (3600ull * 1000000000ull)
#define LOGS_TAIL_MAX (1u << 20)
#define STOP_DRAIN_NS (10ull * 1000000000ull)
#define HEADERS_MAX (32u << 10)
/* evhttp's own bound, above ours: between the two the answer is our JSON
 * 413 (on_request); past it evhttp closes with its HTML 400 page. */
#define HEADERS_HARD_MAX (1u << 20)
#define IDLE_TIMEOUT_S 120
#define ACCEPT_PAUSE_MS 100
#define EMFILE_LOG_EVERY_NS (10ull * 1000000000ull)

/* The API's body bound is the workers' message limit: what is accepted can be sent. */
_Static_assert(MESHD_API_MAX_BODY == MESH_MSG_MAX, "the body bound is the message limit");

struct job;

struct meshd_api {
	struct meshd_core *core;
	struct event_base *base; /* the core's (not ours to free) */
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	struct event *done_ev;	/* activated by an op thread: answers are queued */
	struct event *stream_ev; /* activated by an op thread: parts of a streamed answer are queued */
	int listen_fd;
	/* Out of fds (EMFILE): the reserve is closed to accept one client and
	 * answer it 503, then reopened; accepting pauses ACCEPT_PAUSE_MS. */
	int reserve_fd;
	struct event *accept_retry;
	uint64_t emfile_logged;	/* loop thread: when "out of fds" was last logged */
	unsigned emfile_refused; /* loop thread: clients refused since */
	struct meshd_api *reg_next; /* apis (reg_mu): the listener's callbacks get the evhttp */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t dev;	/* the socket file we bound, to unlink only our own */
	ino_t ino;
	int quiesced;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *done;	/* mu: answered, not sent yet (a stack) */
	struct job *streams;	/* mu: streaming, with parts not handed to evhttp yet */
	unsigned threads;	/* mu: op threads not finished */
	unsigned calls;		/* mu: those of them running a call */
	atomic_int stopping;	/* new requests get 503 */
	atomic_int inflight;	/* requests begun and not answered */
};

/* One request: what it asked (copied off the loop thread's objects) and
 * the answer its op thread made. */
struct job {
	struct meshd_api *a;
	struct evhttp_request *req;	/* loop thread only */
	struct job *next;
	const char *method;
	char *path;	/* percent-decoded */
	struct evkeyvalq args;
	struct mesh_buf body;
	uint64_t t0;
	int quiet;
	int is_call;		/* POST .../call: counted apart from control requests */
	atomic_int gone;	/* the client went away (its connection closed, or a streamed part
				   found it gone): a queued call gives up, a stream stops */
	struct event *watch;	/* loop thread: a call's connection closing (EV_CLOSED) */
	char what[160];	/* "METHOD /path" for the log line */
	/* the answer */
	unsigned status;
	const char *type, *allow;
	char *data;	/* malloc'd unless data_static */
	size_t len;
	int data_static;
	char type_buf[96]; /* a type made for this answer (job routes) */
	/* A streamed answer (a call whose worker sends parts): the parts wait
	 * in parts (mu) until the loop thread hands them to evhttp. */
	struct evbuffer *parts;	/* mu */
	int streaming;		/* mu: a part came; the answer is 200, chunked */
	int stream_queued;	/* mu: on a->streams */
	struct job *stream_next; /* mu */
	int started;		/* loop thread: the head went out */
};

int meshd_api_name_ok(const char *name)
{
	return name && mesh_manifest_name_ok(name);
}

int meshd_api_status_for(int err)
{
	switch (err) {
	case 0:
		return 200;
	case MESH_E_NOTFOUND:
	case -ENOENT:
		return 404;
	case MESH_E_STATE:
	case MESH_E_STOPPED:
	case MESH_E_MISMATCH:
	case -EBUSY:
	case -EEXIST:
	case -EALREADY:
		return 409;
	case MESH_E_TOOBIG:
	case -E2BIG:
	case -EMSGSIZE:
		return 413;
	/* The catalog entry is what is wrong, not the request. */
	case MESH_E_PARSE:
	case MESH_E_CORRUPT:
	case MESH_E_VERSION:
	case MESH_E_RANGE:
	case MESH_E_PATH:
	case MESH_E_REFUSED:
	case MESH_E_UNSUPPORTED:
	case MESH_E_SCRIPT:
	case MESH_E_ARCH:
	case MESH_E_NOGPU:
	case MESH_E_LIMITS:
	case MESH_E_HANDLER:
	case -ENOEXEC:
		return 422;
	case MESH_E_CRASHED:
	case MESH_E_PROTO:
	case MESH_E_CLOSED:
		return 502;
	case -EAGAIN:
	case -ENOMEM:
	case -EMFILE:
	case -ENFILE:
	case -ENOSPC:
		return 503;
	case MESH_E_TIMEOUT:
	case -ETIMEDOUT:
		return 504;
	case -EINVAL:
		return 400;
	}
	return 500;
}

/* The answer: data (owned, or static when mode_static) goes out as is. */
static void set_answer(struct job *j, unsigned status, const char *type, char *data, size_t n, int is_static)
{
	j->status = status;
	j->type = type;
	j->data = data;
	j->len = n;
	j->data_static = is_static;
}

/* The JSON body j (consumed). */
static void send_json(struct job *jb, unsigned status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	json_decref(j);
	static char oom[] = "{\"error\":\"out of memory\",\"code\":\"ENOMEM\"}\n";
	if (!s) {
		set_answer(jb, 503, "application/json", oom, sizeof oom - 1, 1);
		return;
	}
	size_t n = strlen(s);
	char *t = realloc(s, n + 2); /* a newline, for curl in a terminal */
	if (t) {
		t[n++] = '\n';
		t[n] = 0;
		s = t;
	}
	set_answer(jb, status, "application/json", s, n, 0);
}

/* A JSON string of text that may hold any bytes (a worker's output, a
 * path): invalid UTF-8 becomes U+FFFD, so the text is never refused. */
static json_t *text_json(const char *s)
{
	json_t *j = json_string(s);
	if (j || !s)
		return j;
	char *t = mesh_utf8_sanitize(s, strlen(s), NULL);
	j = t ? json_string(t) : NULL;
	free(t);
	return j;
}

/* {"error": msg or the error's text, "code": its name}; NULL: no memory. */
static json_t *error_json(int err, const char *msg)
{
	return json_pack("{s:o, s:s}", "error", text_json(msg && *msg ? msg : mesh_strerror(err)), "code",
			 mesh_err_name(err));
}

char *meshd_api_error_body(int err, const char *msg, size_t *len)
{
	json_t *j = error_json(err, msg);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (s && len)
		*len = strlen(s);
	return s;
}

static void send_error(struct job *jb, unsigned status, int err, const char *msg)
{
	send_json(jb, status, error_json(err, msg));
}

static void send_errorf(struct job *jb, unsigned status, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void send_errorf(struct job *jb, unsigned status, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	send_error(jb, status, err, msg);
}

/* An op failed: its message (freed here), or the error's text. */
static void send_op_error(struct job *jb, int err, char *msg)
{
	send_error(jb, (unsigned)meshd_api_status_for(err), err, msg);
	free(msg);
}

static void send_ok(struct job *jb, const char *name, const char *action, json_t *extra)
{
	json_t *j = json_pack("{s:b, s:s, s:s}", "ok", 1, "name", name, "action", action);
	if (j && extra && json_object_set(j, "result", extra) < 0) {
		json_decref(j);
		j = NULL;
	}
	json_decref(extra);
	send_json(jb, 200, j);
}

static void send_method_not_allowed(struct job *jb, const char *allow)
{
	json_t *j = json_pack("{s:s, s:s}", "error", "method not allowed", "code", mesh_err_name(MESH_E_PROTO));
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	json_decref(j);
	if (!s) {
		send_json(jb, 503, NULL);
		return;
	}
	set_answer(jb, 405, "application/json", s, strlen(s), 0);
	jb->allow = allow;
}

/* An image id (mesh_image_id) as shown: its first 12 hex digits; null for 0. */
static json_t *image_json(uint64_t id)
{
	char b[24];
	snprintf(b, sizeof b, "%016llx", (unsigned long long)id);
	b[12] = 0;
	return id ? json_string(b) : json_null();
}

/* The core answers with structs (daemon/ops.h); here they become JSON. */
static json_t *program_json(const struct meshd_program_info *pi)
{
	char lim[256], ih[24], bh[24];
	mesh_limits_describe(pi->limits, lim, sizeof lim);
	snprintf(ih, sizeof ih, "%016llx", (unsigned long long)pi->image_hash);
	snprintf(bh, sizeof bh, "%016llx", (unsigned long long)pi->bin_hash);
	/* The seed's savings: 1 - warm worker-time / what max_workers always-on
	 * workers would have held since the program was loaded. */
	uint64_t always = pi->window_ns * (pi->max_workers ? pi->max_workers : 1);
	int pm = mesh_as_savings_permil((int64_t)(pi->warm_ns > INT64_MAX ? INT64_MAX : pi->warm_ns),
					(int64_t)(always > INT64_MAX ? INT64_MAX : always));
	return json_pack("{s:s, s:s, s:o, s:s, s:s, s:I, s:I, s:s, s:o, s:o, s:I, s:f, s:f, s:f}", "name", pi->name,
			 "device", pi->gpu ? "gpu" : "cpu", "binary", text_json(pi->binary), "image_hash", ih, "bin_hash",
			 bh, "bin_bytes", (json_int_t)pi->bin_bytes, "max_workers", (json_int_t)pi->max_workers, "limits",
			 lim, "image", image_json(pi->image_id), "previous_image", image_json(pi->prev_id), "warm",
			 (json_int_t)pi->warm, "warm_seconds", (double)pi->warm_ns / 1e9, "always_on_seconds",
			 (double)always / 1e9, "savings", pm / 1000.0);
}

static json_t *worker_json(const struct meshd_worker_info *wi)
{
	const struct mesh_instance_stats *st = &wi->st;
	char el[256] = "";
	if (st->pid)
		mesh_limits_describe(st->limits, el, sizeof el);
	json_t *o = json_pack("{s:s, s:I, s:o, s:f, s:I, s:I, s:I, s:I, s:o, s:s, s:o, s:s, s:I, s:o, s:b}", "state",
			 mesh_istate_name(st->state), "pid", (json_int_t)st->pid, "slot",
			 wi->slot >= 0 ? json_integer(wi->slot) : json_null(), "cpu_pct", st->cpu_pct, "rss", (json_int_t)st->rss,
			 "cpu_ns", (json_int_t)st->cpu_ns, "spawns", (json_int_t)st->spawns, "crashes", (json_int_t)st->crashes,
			 "last_exit", st->last_exit >= 0 ? json_integer(st->last_exit) : json_null(), "limits_enforced", el,
			 "ring", wi->ring ? json_integer((json_int_t)wi->ring) : json_null(), "containment",
			 st->pid ? mesh_limits_containment_name(st->containment) : "", "processes", (json_int_t)st->procs,
			 "image", image_json(wi->image_id), "retired", wi->retired);
	json_t *g = o ? meshd__gpu_worker_json(wi) : NULL;
	if (g)
		json_object_set_new(o, "gpu", g);
	return o;
}

/* {"host": {...}, "programs": [{..., "workers": [...]}, ...]}; NULL: no memory. */
static json_t *ps_json(const struct meshd_ps *ps)
{
	char lim[320];
	mesh_limits_describe(ps->caps.avail, lim, sizeof lim);
	json_t *progs = json_array();
	for (unsigned i = 0; progs && i < ps->nprograms; i++) {
		const struct meshd_program_info *pi = &ps->programs[i];
		json_t *ws = json_array(), *pj = program_json(pi);
		for (unsigned k = 0; ws && k < pi->nworkers; k++)
			json_array_append_new(ws, worker_json(&pi->workers[k]));
		if (!ws || !pj || json_object_set_new(pj, "spawns", json_integer(pi->spawns)) ||
		    json_object_set_new(pj, "failed", pi->failed ? text_json(pi->failed) : json_null()) ||
		    json_object_set_new(pj, "crashes", json_integer(pi->crashes)) || json_object_set_new(pj, "workers", ws) ||
		    json_array_append_new(progs, pj)) {
			json_decref(progs);
			progs = NULL;
		}
	}
	if (!progs)
		return NULL;
	json_t *o = json_pack("{s:{s:I, s:f, s:I, s:I, s:I, s:s, s:s, s:s, s:s, s:I}, s:o}", "host", "processes",
			 (json_int_t)ps->host.procs, "cpu_pct", ps->host.cpu_pct, "rss", (json_int_t)ps->host.rss, "spawns",
			 (json_int_t)ps->host.spawns, "crashes", (json_int_t)ps->host.crashes, "limits_available", lim,
			 "cgroup", *ps->caps.cgroup_why ? ps->caps.cgroup_why : "delegated", "containment",
			 mesh_limits_containment_name(ps->caps.contain), "containment_why", ps->caps.contain_why, "slots",
			 (json_int_t)ps->slots, "programs", progs);
	json_t *g = o ? meshd__gpu_ps_json(ps) : NULL;
	if (g)
		json_object_set_new(o, "gpu", g);
	return o;
}

static const char *arg(struct job *jb, const char *key)
{
	return evhttp_find_header(&jb->args, key);
}

/* Op thread: one part of a streamed reply.  It waits in jb->parts; the loop
 * thread sends it as a chunk (on_streams).  MESH_E_CLOSED once the client
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

static void do_program(struct meshd_api *a, struct job *jb, const char *name, const char *action)
{
	const char *method = jb->method;
	int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	int is_post = !strcmp(method, "POST");
	char *msg = NULL;
	json_t *out = NULL;
	int rc;

	if (!strcmp(action, "logs")) {
		const char *tail = arg(jb, "tail");
		uint64_t n = 0;
		char *text = NULL;
		size_t len = 0;
		if (!is_get)
			return send_method_not_allowed(jb, "GET, HEAD");
		if (tail && mesh_parse_u64(tail, LOGS_TAIL_MAX, &n) < 0)
			return send_errorf(jb, 400, MESH_E_PARSE, "tail must be a byte count from 0 to %u",
					   LOGS_TAIL_MAX);
		rc = meshd_op_logs(a->core, name, (size_t)n, &text, &len, &msg);
		if (rc < 0)
			return send_op_error(jb, rc, msg);
		free(msg);
		if (!text)
			return set_answer(jb, 200, "text/plain; charset=utf-8", "", 0, 1);
		return set_answer(jb, 200, "text/plain; charset=utf-8", text, len, 0);
	}
	if (strcmp(action, "load") && strcmp(action, "unload") && strcmp(action, "start") && strcmp(action, "stop") &&
	    strcmp(action, "call") && strcmp(action, "rollback"))
		return send_errorf(jb, 404, MESH_E_NOTFOUND, "no such route: /v1/programs/<name>/%s", action);
	if (!is_post)
		return send_method_not_allowed(jb, "POST");

	if (!strcmp(action, "call")) {
		const char *t = arg(jb, "timeout");
		uint64_t timeout = CALL_TIMEOUT_DEFAULT_NS;
		void *reply = NULL;
		size_t reply_len = 0;
		if (t && (mesh_parse_seconds(t, CALL_TIMEOUT_MAX_NS, &timeout) < 0 || timeout == 0))
			return send_errorf(jb, 400, MESH_E_PARSE, "timeout must be seconds, more than 0 and at most %llu",
					   CALL_TIMEOUT_MAX_NS / 1000000000ull);
		rc = meshd_op_call_ex(a->core, name, jb->body.p ? jb->body.p : "", jb->body.len, stream_part, jb, &reply,
				      &reply_len, timeout, &jb->gone, &msg);
		if (rc < 0) {
			free(reply);
			return send_op_error(jb, rc, msg);
		}
		free(msg);
		if (!reply)
			return set_answer(jb, 200, "application/octet-stream", "", 0, 1);
		return set_answer(jb, 200, "application/octet-stream", reply, reply_len, 0);
	}
	if (!strcmp(action, "load") || !strcmp(action, "rollback")) {
		struct meshd_program_info pi;
		rc = (!strcmp(action, "load") ? meshd_op_load : meshd_op_rollback)(a->core, name, &pi, &msg);
		if (rc == 0) {
			out = program_json(&pi);
			if (out)
				json_object_set_new(out, "replaced", json_boolean(pi.replaced));
			meshd_program_info_release(&pi);
		}
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
		return send_op_error(jb, rc, msg);
	}
	free(msg);
	send_ok(jb, name, action, out);
}

static void route(struct meshd_api *a, struct job *jb)
{
	static const char prefix[] = "/v1/programs/";
	const char *url = jb->path, *method = jb->method;
	if (!strcmp(url, "/metrics")) { /* Prometheus text, docs/metrics.md */
		struct mesh_buf b = MESH_BUF_INIT;
		if (strcmp(method, "GET") && strcmp(method, "HEAD"))
			return send_method_not_allowed(jb, "GET, HEAD");
		if (meshd_metrics_text(a->core, &b) < 0) {
			mesh_buf_release(&b);
			return send_error(jb, 503, -ENOMEM, NULL);
		}
		size_t n = b.len;
		return set_answer(jb, 200, MESHD_METRICS_CONTENT_TYPE, mesh_buf_detach(&b, NULL), n, 0);
	}
	if (!strcmp(url, "/v1/ps")) {
		struct meshd_ps ps;
		int rc;
		if (strcmp(method, "GET") && strcmp(method, "HEAD"))
			return send_method_not_allowed(jb, "GET, HEAD");
		rc = meshd_op_ps(a->core, &ps);
		if (rc < 0)
			return send_op_error(jb, rc, NULL);
		json_t *out = ps_json(&ps);
		meshd_ps_release(&ps);
		struct mesh_gw *gw = meshd_metrics_gateway(); /* meshd --http's programs (docs/gateway.md) */
		if (out && gw)
			json_object_set_new(out, "http", mesh_gw_ps_json(gw));
		return send_json(jb, 200, out);
	}
	if (meshd_api_is_jobs(url)) {
		struct meshd_api_answer ans;
		meshd_api_jobs(method, url, &jb->args, jb->body.p, jb->body.len, &ans);
		memcpy(jb->type_buf, ans.type, sizeof jb->type_buf);
		set_answer(jb, ans.status, jb->type_buf, ans.data ? ans.data : "", ans.len, ans.data == NULL);
		jb->allow = ans.allow;
		return;
	}
	if (!strncmp(url, prefix, sizeof prefix - 1)) {
		const char *name = url + sizeof prefix - 1;
		const char *slash = strchr(name, '/');
		char nm[MESHD_API_NAME_MAX + 1];
		size_t n;
		if (!slash || strchr(slash + 1, '/'))
			return send_errorf(jb, 404, MESH_E_NOTFOUND, "no such route");
		n = (size_t)(slash - name);
		if (n == 0 || n > MESHD_API_NAME_MAX)
			return send_errorf(jb, 400, MESH_E_PARSE, "bad program name: 1 to %u characters",
					   MESHD_API_NAME_MAX);
		memcpy(nm, name, n);
		nm[n] = 0;
		if (!meshd_api_name_ok(nm))
			return send_errorf(jb, 400, MESH_E_PARSE,
					   "bad program name: letters, digits, '_' and '-', not first '-'");
		return do_program(a, jb, nm, slash + 1);
	}
	send_errorf(jb, 404, MESH_E_NOTFOUND, "no such route");
}

static void job_free(struct job *j)
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

static void on_streams(evutil_socket_t fd, short what, void *arg)
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
static void deliver(struct meshd_api *a, struct job *j)
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
		job_free(j);
		atomic_fetch_sub(&a->inflight, 1);
		return;
	}
	struct evbuffer *body = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	int ok = body != NULL;
	if (ok && j->len)
		ok = (j->data_static ? evbuffer_add_reference(body, j->data, j->len, NULL, NULL)
				     : evbuffer_add_reference(body, j->data, j->len, free_data, NULL)) == 0;
	if (ok && !j->data_static)
		j->data = NULL; /* the buffer owns it now */
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
	job_free(j);
	atomic_fetch_sub(&a->inflight, 1);
}

/* Loop thread: sends every answer the op threads queued. */
static void deliver_done(struct meshd_api *a)
{
	struct job *list, *next;
	pthread_mutex_lock(&a->mu);
	list = a->done;
	a->done = NULL;
	pthread_mutex_unlock(&a->mu);
	for (; list; list = next) {
		next = list->next;
		deliver(a, list);
	}
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	deliver_done(arg);
}

/* An op thread: runs the request, queues its answer for the loop thread. */
static void *op_main(void *arg)
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

static const char *method_name(enum evhttp_cmd_type t)
{
	switch (t) {
	case EVHTTP_REQ_GET:
		return "GET";
	case EVHTTP_REQ_POST:
		return "POST";
	case EVHTTP_REQ_HEAD:
		return "HEAD";
	case EVHTTP_REQ_PUT:
		return "PUT";
	case EVHTTP_REQ_DELETE:
		return "DELETE";
	case EVHTTP_REQ_OPTIONS:
		return "OPTIONS";
	case EVHTTP_REQ_TRACE:
		return "TRACE";
	case EVHTTP_REQ_CONNECT:
		return "CONNECT";
	case EVHTTP_REQ_PATCH:
		return "PATCH";
	}
	return "?";
}

/* The size of a request's head as sent: its request line and header lines. */
static size_t headers_size(struct evhttp_request *req, const char *uri)
{
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	struct evkeyval *kv;
	size_t n = strlen(uri) + 20;
	TAILQ_FOREACH(kv, h, next)
	n += strlen(kv->key) + strlen(kv->value) + 4;
	return n;
}

/* Loop thread: a call's client closed its connection before the answer:
 * its call, if still waiting for a worker, gives up (the op sees gone). */
static void on_client_close(struct evhttp_connection *evcon, void *arg)
{
	struct job *j = arg;
	(void)evcon;
	atomic_store(&j->gone, 1);
	if (j->watch)
		event_del(j->watch); /* its fd is about to be closed */
}

/* Loop thread: evhttp does not read a connection while its request waits
 * for the answer, so a client's close is seen by a watch of its own. */
static void on_client_gone(evutil_socket_t fd, short what, void *arg)
{
	struct job *j = arg;
	(void)fd;
	(void)what;
	atomic_store(&j->gone, 1);
}

/* Loop thread: every request whose head and body evhttp has read.  A body
 * announced over MESHD_API_MAX_BODY never gets here (in_added); a chunked
 * one may be over it, up to BODY_DRAIN_MAX. */
static void on_request(struct evhttp_request *req, void *arg)
{
	struct meshd_api *a = arg;
	struct job *j = calloc(1, sizeof *j);
	const char *uri = evhttp_request_get_uri(req);
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t n = evbuffer_get_length(in);
	const char *q;
	pthread_attr_t at;
	pthread_t th;
	int rc;

	if (!j) {
		evhttp_send_error(req, 503, NULL);
		return;
	}
	atomic_fetch_add(&a->inflight, 1);
	j->a = a;
	j->req = req;
	j->t0 = mesh_mono_ns();
	j->method = method_name(evhttp_request_get_command(req));
	TAILQ_INIT(&j->args);
	if (!uri)
		uri = "";
	q = strchr(uri, '?');
	{
		/* The path as the client meant it: %2e%2e is "..", refused as a name. */
		size_t plen = q ? (size_t)(q - uri) : strlen(uri);
		char *raw = strndup(uri, plen);
		j->path = raw ? evhttp_uridecode(raw, 0, NULL) : NULL;
		free(raw);
	}
	if (q)
		(void)evhttp_parse_query_str(q + 1, &j->args); /* a malformed query keeps what parsed */
	/* Reads are frequent (mesh ps, probes): they log at debug, changes at info. */
	j->quiet = !strcmp(j->method, "GET") || !strcmp(j->method, "HEAD") || (j->path && strstr(j->path, "/call"));
	snprintf(j->what, sizeof j->what, "%s %s", j->method, j->path ? j->path : uri);
	for (char *c = j->what; *c; c++) /* untrusted bytes into a log line */
		if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f || *c == '"')
			*c = '?';

	/* A keep-alive connection may still ask after meshd began to stop. */
	if (atomic_load(&a->stopping))
		goto stopping;
	if (!j->path)
		goto oom;
	if (headers_size(req, uri) > HEADERS_MAX) {
		send_errorf(j, 413, MESH_E_TOOBIG, "request headers over %u bytes", HEADERS_MAX);
		goto answer;
	}
	if (n > MESHD_API_MAX_BODY) { /* evhttp's bound is the same; never more */
		send_errorf(j, 413, MESH_E_TOOBIG, "request body over %u bytes", MESHD_API_MAX_BODY);
		goto answer;
	}
	if (n && (mesh_buf_grow(&j->body, n) < 0 || evbuffer_remove(in, j->body.p, n) != (int)n))
		goto oom;
	j->body.len = n;

	/* Calls may wait long (a busy or hung worker); control requests (ps,
	 * stop, unload, ...) have threads of their own, so they always get
	 * through whatever calls are queued. */
	j->is_call = strlen(j->path) > 5 && !strcmp(j->path + strlen(j->path) - 5, "/call");
	pthread_mutex_lock(&a->mu);
	if (j->is_call ? a->calls >= MESHD_API_MAX_CONNS : a->threads - a->calls >= MESHD_API_MAX_CONTROL) {
		pthread_mutex_unlock(&a->mu);
		send_errorf(j, 503, -EAGAIN, "too many %s in flight (at most %u)", j->is_call ? "calls" : "requests",
			    j->is_call ? MESHD_API_MAX_CONNS : MESHD_API_MAX_CONTROL);
		goto answer;
	}
	if (j->is_call) {
		struct evhttp_connection *evcon = evhttp_request_get_connection(req);
		struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
		evutil_socket_t cfd = bev ? bufferevent_getfd(bev) : -1;
		if (evcon)
			evhttp_connection_set_closecb(evcon, on_client_close, j);
		if (cfd >= 0 && (j->watch = event_new(a->base, cfd, EV_CLOSED, on_client_gone, j)))
			event_add(j->watch, NULL);
	}
	/* A small stack: ops keep their data on the heap. */
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, (size_t)256 * 1024);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&th, &at, op_main, j);
	pthread_attr_destroy(&at);
	if (rc == 0) {
		a->threads++;
		a->calls += j->is_call;
	}
	pthread_mutex_unlock(&a->mu);
	if (rc == 0)
		return;
	send_error(j, 503, -rc, NULL);
	goto answer;
stopping:
	send_errorf(j, 503, MESH_E_STATE, "meshd is stopping");
	goto answer;
oom:
	send_error(j, 503, -ENOMEM, NULL);
answer:
	deliver(a, j);
}

/* The body bound.  evhttp enforces one per connection, answering with its
 * own HTML page; the JSON answer the API promises comes from here instead.
 * evhttp's bound is BODY_DRAIN_MAX: a chunked body that grows past
 * MESHD_API_MAX_BODY is read (up to that) and on_request answers 413.  A
 * body announced larger is answered by in_added before any of it is read. */
#define BODY_DRAIN_MAX (4ull * MESHD_API_MAX_BODY)

/* Answers a request in_added refuses: the JSON error straight to the
 * socket, the connection shut (evhttp sees its end and frees it, never
 * having seen the request), its log line from head (the request line at
 * head, its method m bytes long; head is changed). */
static void answer_raw(struct bufferevent *bev, struct evbuffer *in, char *head, size_t m, unsigned status,
		       const char *reason, int err, const char *msg)
{
	char resp[512];
	char *body = meshd_api_error_body(err, msg, NULL);
	int rn = snprintf(resp, sizeof resp,
			  "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
			  "Content-Length: %zu\r\nConnection: close\r\n\r\n%s\n",
			  status, reason, body ? strlen(body) + 1 : 1, body ? body : "");
	free(body);
	evutil_socket_t fd = bufferevent_getfd(bev);
	if (fd >= 0 && rn > 0 && (size_t)rn < sizeof resp) {
		/* A fresh socket's buffer takes these few bytes whole. */
		(void)!send(fd, resp, (size_t)rn, MSG_NOSIGNAL | MSG_DONTWAIT);
		shutdown(fd, SHUT_RDWR);
	} else if (fd >= 0) {
		shutdown(fd, SHUT_RDWR);
	}
	evbuffer_drain(in, evbuffer_get_length(in));
	/* Its log line: the request line, up to the version. */
	char *sp = strchr(head + m + 1, ' ');
	if (sp)
		*sp = 0;
	for (char *c = head; *c; c++) /* untrusted bytes into a log line */
		if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f || *c == '"')
			*c = '?';
	head[sizeof((struct job *)0)->what - 1] = 0;
	mesh_info("api request=\"%s\" status=%u ms=0", head, status);
}

/* The input of a connection grew, before evhttp parses it.  When it starts
 * with a request's head announcing a body over the bound, the 413 goes out
 * now, straight to the socket, and the connection is shut: evhttp sees its
 * end and frees it, never having seen the request. */
static void in_added(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
	struct bufferevent *bev = arg;
	char head[HEADERS_MAX + 1];
	size_t n = evbuffer_get_length(in), m = 0;
	unsigned long long cl;
	if (!info->n_added)
		return;
	/* A request line ("METHOD /..."), not body bytes: its start first, as
	 * this runs on every read of a body too. */
	if (evbuffer_copyout(in, head, n < 16 ? n : 16) < 0)
		return;
	while (m < n && m < 16 && head[m] >= 'A' && head[m] <= 'Z')
		m++;
	if (m == 0 || m >= 16 || m + 1 >= n || head[m] != ' ')
		return;
	/* Its whole head. */
	if (n > HEADERS_MAX)
		n = HEADERS_MAX;
	if (evbuffer_copyout(in, head, n) < 0)
		return;
	head[n] = 0;
	char *end = strstr(head, "\r\n\r\n");
	if (!end)
		return;
	end[2] = 0;
	const char *p = strcasestr(head, "\r\nContent-Length:");
	if (!p)
		return;
	/* 1*DIGIT (RFC 9110), spaces around: "-1" or "12x" is no length at all. */
	const char *v = p + 17, *e;
	while (*v == ' ' || *v == '\t')
		v++;
	for (e = v; *e >= '0' && *e <= '9'; e++)
		;
	const char *d = e;
	while (*e == ' ' || *e == '\t')
		e++;
	int bad = d == v || d - v > 19 || (*e != '\r' && *e != 0);
	if (!bad && (cl = strtoull(v, NULL, 10)) <= MESHD_API_MAX_BODY)
		return;
	char msg[64];
	if (bad)
		snprintf(msg, sizeof msg, "bad Content-Length");
	else
		snprintf(msg, sizeof msg, "request body over %u bytes", MESHD_API_MAX_BODY);
	answer_raw(bev, in, head, m, bad ? 400 : 413, bad ? "Bad Request" : "Payload Too Large",
		   bad ? MESH_E_PARSE : MESH_E_TOOBIG, msg);
}

/* Each accepted connection's bufferevent, watched by in_added. */
static struct bufferevent *make_bev(struct event_base *base, void *arg)
{
	struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	(void)arg;
	if (bev && !evbuffer_add_cb(bufferevent_get_input(bev), in_added, bev)) {
		bufferevent_free(bev);
		return NULL;
	}
	return bev;
}

/* Runs fn(a) on the loop thread and waits for it. */
struct on_loop {
	struct meshd_api *a;
	void (*fn)(struct meshd_api *);
};

static void on_loop_cb(void *arg)
{
	struct on_loop *o = arg;
	o->fn(o->a);
}

static int run_on_loop(struct meshd_api *a, void (*fn)(struct meshd_api *))
{
	struct on_loop o = {a, fn};
	return meshd_core_on_loop(a->core, on_loop_cb, &o);
}

static int set_err(char **err, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(char **err, int rc, const char *fmt, ...)
{
	va_list ap;
	if (err) {
		char *s = NULL;
		va_start(ap, fmt);
		if (vasprintf(&s, fmt, ap) < 0)
			s = NULL;
		va_end(ap);
		*err = s;
	}
	return rc;
}

/* Opens the socket's directory, creating it 0700 when missing, and refuses
 * one that another user could write into (they could swap the socket under
 * the clients).  The directory fd, with *base pointed at the socket's name. */
static int open_dir_of(const char *path, const char **base, char **err)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	int dfd;
	if (strlen(path) >= sizeof dir)
		return set_err(err, -ENAMETOOLONG, "socket path '%s' is too long", path);
	if (!slash)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	*base = slash ? slash + 1 : path;
	if (!**base)
		return set_err(err, -EINVAL, "socket path '%s' names a directory", path);
	dfd = mesh_path_open_private_dir(dir, !!slash && slash != path);
	if (dfd == MESH_E_NOTPRIVATE)
		return set_err(err, dfd,
			       "refusing socket directory '%s': it must be owned by uid %u and not writable by group "
			       "or others (chmod 700 it, or remove it and let meshd create it)",
			       dir, (unsigned)geteuid());
	if (dfd == MESH_E_PATH)
		return set_err(err, dfd, "refusing socket directory '%s': not a directory, or a symlink", dir);
	if (dfd < 0)
		return set_err(err, dfd, "cannot create socket directory '%s': %s", dir, mesh_strerror(dfd));
	return dfd;
}

/* Binds and listens on sa (the name base in the private directory dfd),
 * replacing a stale socket; *st is what was bound.  Returns the fd. */
static int bind_in(int dfd, const char *base, const struct sockaddr_un *sa, struct stat *st, char **err)
{
	const char *path = sa->sun_path;
	int fd, rc;
	if (fstatat(dfd, base, st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!S_ISSOCK(st->st_mode))
			return set_err(err, -EEXIST, "'%s' exists and is not a socket", path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return set_err(err, -errno, "socket: %s", strerror(errno));
		rc = connect(fd, (const struct sockaddr *)sa, sizeof *sa);
		close(fd);
		if (rc == 0)
			return set_err(err, -EADDRINUSE, "'%s' is in use: another meshd serves there", path);
		if (unlinkat(dfd, base, 0) < 0 && errno != ENOENT)
			return set_err(err, -errno, "cannot remove stale socket '%s': %s", path, strerror(errno));
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return set_err(err, -errno, "socket: %s", strerror(errno));
	/* Linux gives the bound file the socket inode's mode: 0600 from birth,
	 * with no chmod by name afterwards (which would follow a symlink). */
	if (fchmod(fd, 0600) < 0 || bind(fd, (const struct sockaddr *)sa, sizeof *sa) < 0) {
		rc = -errno;
		close(fd);
		return set_err(err, rc, "cannot bind '%s': %s", path, strerror(-rc));
	}
	if (fstatat(dfd, base, st, AT_SYMLINK_NOFOLLOW) < 0 || listen(fd, 64) < 0) {
		rc = -errno;
		unlinkat(dfd, base, 0);
		close(fd);
		return set_err(err, rc, "cannot set up '%s': %s", path, strerror(-rc));
	}
	return fd;
}

/* Binds and listens on path, replacing a stale socket.  Returns the fd. */
static int bind_socket(struct meshd_api *a, const char *path, char **err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	const char *base;
	int dfd, rc;
	if (!path[0])
		return set_err(err, -EINVAL, "empty socket path");
	if (strlen(path) >= sizeof sa.sun_path)
		return set_err(err, -ENAMETOOLONG, "socket path '%s' is longer than %zu bytes", path,
			       sizeof sa.sun_path - 1);
	strcpy(sa.sun_path, path);
	dfd = open_dir_of(path, &base, err);
	if (dfd < 0)
		return dfd;
	rc = bind_in(dfd, base, &sa, &st, err);
	close(dfd);
	if (rc < 0)
		return rc;
	a->dev = st.st_dev;
	a->ino = st.st_ino;
	return rc;
}

/* evhttp_bind_listener makes the evhttp the listener's callback argument:
 * its error callback finds the api here. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct meshd_api *reg_head;

static struct meshd_api *api_of(const struct evhttp *http)
{
	struct meshd_api *a;
	pthread_mutex_lock(&reg_mu);
	for (a = reg_head; a && a->http != http; a = a->reg_next)
		;
	pthread_mutex_unlock(&reg_mu);
	return a;
}

static void reg_remove(struct meshd_api *a)
{
	pthread_mutex_lock(&reg_mu);
	for (struct meshd_api **p = &reg_head; *p; p = &(*p)->reg_next)
		if (*p == a) {
			*p = a->reg_next;
			break;
		}
	pthread_mutex_unlock(&reg_mu);
}

/* Loop thread: the pause after EMFILE is over. */
static void on_accept_retry(evutil_socket_t fd, short what, void *arg)
{
	struct meshd_api *a = arg;
	(void)fd;
	(void)what;
	if (a->bound)
		evconnlistener_enable(evhttp_bound_socket_get_listener(a->bound));
}

/* Loop thread: accept() failed for a reason other than "try again".  Out
 * of fds, the listening socket stays readable: accepting again at once
 * would spin.  So one waiting client is taken with the reserve fd and told
 * 503, accepting pauses a moment, and it is logged once per interval. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
#define BUSY_BODY "{\"error\": \"meshd is out of file descriptors\", \"code\": \"EMFILE\"}\n"
	_Static_assert(sizeof BUSY_BODY - 1 == 64, "the Content-Length below");
	static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
				   "Content-Length: 64\r\nConnection: close\r\n\r\n" BUSY_BODY;
	int e = EVUTIL_SOCKET_ERROR();
	struct meshd_api *a = api_of(arg);
	if (!a)
		return;
	if (e == EMFILE || e == ENFILE) {
		if (a->reserve_fd >= 0)
			close(a->reserve_fd);
		int c = accept4(evconnlistener_get_fd(l), NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (c >= 0) {
			(void)!send(c, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
			close(c);
			a->emfile_refused++;
		}
		a->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	}
	uint64_t now = mesh_mono_ns();
	if (!a->emfile_logged || now - a->emfile_logged >= EMFILE_LOG_EVERY_NS) {
		mesh_warn("accept: %s; accepting pauses %u ms at a time, new clients get 503 meanwhile (%u so far; "
			  "logged once per %llu s)",
			  strerror(e), ACCEPT_PAUSE_MS, a->emfile_refused,
			  (unsigned long long)(EMFILE_LOG_EVERY_NS / 1000000000ull));
		a->emfile_logged = now;
		a->emfile_refused = 0;
	}
	struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};
	evconnlistener_disable(l);
	evtimer_add(a->accept_retry, &tv);
}

static void api_free(struct meshd_api *a)
{
	reg_remove(a);
	if (a->reserve_fd >= 0)
		close(a->reserve_fd);
	if (a->accept_retry)
		event_free(a->accept_retry);
	if (a->http)
		evhttp_free(a->http);
	if (a->done_ev)
		event_free(a->done_ev);
	if (a->stream_ev)
		event_free(a->stream_ev);
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
	free(a);
}

int meshd_api_start(struct meshd_api **out, struct meshd_core *core, const char *path, char **err)
{
	struct meshd_api *a = calloc(1, sizeof *a);
	int fd;
	if (err)
		*err = NULL;
	*out = NULL;
	if (!a)
		return set_err(err, -ENOMEM, "out of memory");
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	a->core = core;
	a->listen_fd = -1;
	a->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* The loop may run: what is set up here is added to it under
	 * libevent's lock (the core made the base thread-safe). */
	a->base = meshd_core_base(core);
	a->http = a->base ? evhttp_new(a->base) : NULL;
	a->done_ev = a->base ? event_new(a->base, -1, 0, on_done, a) : NULL;
	a->stream_ev = a->base ? event_new(a->base, -1, 0, on_streams, a) : NULL;
	a->accept_retry = a->base ? evtimer_new(a->base, on_accept_retry, a) : NULL;
	if (!a->http || !a->done_ev || !a->stream_ev || !a->accept_retry || a->reserve_fd < 0) {
		api_free(a);
		return set_err(err, -ENOMEM, "cannot set up the HTTP server: out of memory");
	}
	/* Every method evhttp knows reaches the router, which answers 405 with Allow. */
	evhttp_set_allowed_methods(a->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
						    EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
						    EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_max_body_size(a->http, (ev_ssize_t)BODY_DRAIN_MAX); /* see in_added */
	evhttp_set_max_headers_size(a->http, HEADERS_HARD_MAX); /* see on_request */
	evhttp_set_timeout(a->http, IDLE_TIMEOUT_S);
	evhttp_set_gencb(a->http, on_request, a);
	evhttp_set_bevcb(a->http, make_bev, a);

	fd = bind_socket(a, path, err);
	if (fd < 0) {
		api_free(a);
		return fd;
	}
	a->listen_fd = fd;
	strcpy(a->path, path);
	/* evhttp_accept_socket_with_handle's listener, with an error callback
	 * (libevent's own would log each failed accept and retry at once). */
	struct evconnlistener *lev = evconnlistener_new(a->base, NULL, NULL, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 0, fd);
	a->bound = lev ? evhttp_bind_listener(a->http, lev) : NULL;
	if (lev && !a->bound)
		evconnlistener_free(lev);
	if (a->bound) {
		pthread_mutex_lock(&reg_mu);
		a->reg_next = reg_head;
		reg_head = a;
		pthread_mutex_unlock(&reg_mu);
		evconnlistener_set_error_cb(lev, on_accept_error);
	}
	if (!a->bound) {
		unlink(path);
		close(fd);
		api_free(a);
		return set_err(err, MESH_E_UNSUPPORTED, "cannot start the HTTP server on '%s'", path);
	}
	*out = a;
	return 0;
}

/* Loop thread: no more connections. */
static void stop_accepting(struct meshd_api *a)
{
	evtimer_del(a->accept_retry);
	if (a->bound)
		evhttp_del_accept_socket(a->http, a->bound);
	a->bound = NULL;
}

/* Loop thread, once every op thread is done: the last answers go out (or
 * are cut), every connection is closed (the loop goes on: it is the
 * core's). */
static void finish(struct meshd_api *a)
{
	deliver_done(a);
	evhttp_free(a->http);
	a->http = NULL;
	event_free(a->done_ev);
	event_free(a->stream_ev);
	a->done_ev = a->stream_ev = NULL;
	event_free(a->accept_retry);
	a->accept_retry = NULL;
}

int meshd_api_quiesce(struct meshd_api *a)
{
	struct stat st;
	if (!a)
		return 0;
	if (!a->quiesced) {
		a->quiesced = 1;
		atomic_store(&a->stopping, 1);
		run_on_loop(a, stop_accepting);
		if (a->listen_fd >= 0)
			close(a->listen_fd);
		a->listen_fd = -1;
		if (lstat(a->path, &st) == 0 && st.st_dev == a->dev && st.st_ino == a->ino)
			unlink(a->path);
	}
	return atomic_load(&a->inflight);
}

void meshd_api_stop(struct meshd_api *a)
{
	if (!a)
		return;
	meshd_api_quiesce(a);
	/* Closing the connections cuts answers not written yet: give the
	 * requests in flight a bounded while to be answered first. */
	for (uint64_t end = mesh_mono_ns() + STOP_DRAIN_NS; atomic_load(&a->inflight) > 0 && mesh_mono_ns() < end;)
		mesh_sleep_ns(2000000);
	/* An op thread still running holds its request: wait for it (its op
	 * ends when the caller stopped the programs), as evhttp frees requests. */
	pthread_mutex_lock(&a->mu);
	while (a->threads > 0)
		pthread_cond_wait(&a->cv, &a->mu);
	pthread_mutex_unlock(&a->mu);
	/* The last answers, and a moment for the loop to write them out. */
	run_on_loop(a, deliver_done);
	mesh_sleep_ns(20000000);
	run_on_loop(a, finish);
	api_free(a);
}
