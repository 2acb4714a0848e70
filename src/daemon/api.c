#include "daemon/api.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/parse.h"
#include "daemon/ops.h"
#include "host/manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
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

struct meshd_api {
	struct meshd_core *core;
	struct MHD_Daemon *mhd;
	int listen_fd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t dev;	/* the socket file we bound, to unlink only our own */
	ino_t ino;
	int quiesced;
	atomic_int stopping;	/* new requests get 503 */
	atomic_int inflight;	/* requests begun and not completed */
};

/* Per request: the body so far. */
struct req {
	struct mesh_buf body;
	int too_big, answered, quiet;
	uint64_t drained, t0;
	char what[160]; /* "METHOD /path" for the log line */
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

static enum MHD_Result send_buf(struct MHD_Connection *c, unsigned status, const char *type, void *data, size_t n,
				enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(n, data, mode);
	enum MHD_Result ok;
	if (!r) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(data);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ok = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ok;
}

/* Sends j (consumed) as the JSON body. */
static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	static char oom[] = "{\"error\":\"out of memory\",\"code\":\"ENOMEM\"}\n";
	if (!s)
		return send_buf(c, 503, "application/json", oom, sizeof oom - 1, MHD_RESPMEM_PERSISTENT);
	size_t n = strlen(s);
	char *t = realloc(s, n + 2); /* a newline, for curl in a terminal */
	if (t) {
		t[n++] = '\n';
		t[n] = 0;
		s = t;
	}
	return send_buf(c, status, "application/json", s, n, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, int err, const char *msg)
{
	json_t *j = json_pack("{s:s, s:s}", "error", msg && *msg ? msg : mesh_strerror(err), "code",
			      mesh_err_name(err));
	return send_json(c, status, j);
}

static enum MHD_Result send_errorf(struct MHD_Connection *c, unsigned status, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static enum MHD_Result send_errorf(struct MHD_Connection *c, unsigned status, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return send_error(c, status, err, msg);
}

/* An op failed: its message (freed here), or the error's text. */
static enum MHD_Result send_op_error(struct MHD_Connection *c, int err, char *msg)
{
	enum MHD_Result ok = send_error(c, (unsigned)meshd_api_status_for(err), err, msg);
	free(msg);
	return ok;
}

static enum MHD_Result send_ok(struct MHD_Connection *c, const char *name, const char *action, json_t *extra)
{
	json_t *j = json_pack("{s:b, s:s, s:s}", "ok", 1, "name", name, "action", action);
	if (j && extra && json_object_set(j, "result", extra) < 0) {
		json_decref(j);
		j = NULL;
	}
	json_decref(extra);
	return send_json(c, 200, j);
}

static enum MHD_Result send_method_not_allowed(struct MHD_Connection *c, const char *allow)
{
	json_t *j = json_pack("{s:s, s:s}", "error", "method not allowed", "code", mesh_err_name(MESH_E_PROTO));
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	struct MHD_Response *r =
		s ? MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE) : NULL;
	enum MHD_Result ok;
	if (!r) {
		free(s);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	ok = MHD_queue_response(c, 405, r);
	MHD_destroy_response(r);
	return ok;
}

static enum MHD_Result do_program(struct meshd_api *a, struct MHD_Connection *c, const char *method, const char *name,
				  const char *action, struct req *r)
{
	int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
	int is_post = !strcmp(method, "POST");
	char *msg = NULL;
	json_t *out = NULL;
	int rc;

	if (!strcmp(action, "logs")) {
		const char *tail = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "tail");
		uint64_t n = 0;
		char *text = NULL;
		size_t len = 0;
		if (!is_get)
			return send_method_not_allowed(c, "GET, HEAD");
		if (tail && mesh_parse_u64(tail, LOGS_TAIL_MAX, &n) < 0)
			return send_errorf(c, 400, MESH_E_PARSE, "tail must be a byte count from 0 to %u",
					   LOGS_TAIL_MAX);
		rc = meshd_op_logs(a->core, name, (size_t)n, &text, &len, &msg);
		if (rc < 0)
			return send_op_error(c, rc, msg);
		free(msg);
		if (!text)
			return send_buf(c, 200, "text/plain; charset=utf-8", "", 0, MHD_RESPMEM_PERSISTENT);
		return send_buf(c, 200, "text/plain; charset=utf-8", text, len, MHD_RESPMEM_MUST_FREE);
	}
	if (strcmp(action, "load") && strcmp(action, "unload") && strcmp(action, "start") && strcmp(action, "stop") &&
	    strcmp(action, "call"))
		return send_errorf(c, 404, MESH_E_NOTFOUND, "no such route: /v1/programs/<name>/%s", action);
	if (!is_post)
		return send_method_not_allowed(c, "POST");

	if (!strcmp(action, "call")) {
		const char *t = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "timeout");
		uint64_t timeout = CALL_TIMEOUT_DEFAULT_NS;
		void *reply = NULL;
		size_t reply_len = 0;
		if (t && (mesh_parse_seconds(t, CALL_TIMEOUT_MAX_NS, &timeout) < 0 || timeout == 0))
			return send_errorf(c, 400, MESH_E_PARSE, "timeout must be seconds, more than 0 and at most %llu",
					   CALL_TIMEOUT_MAX_NS / 1000000000ull);
		rc = meshd_op_call(a->core, name, r->body.p ? r->body.p : "", r->body.len, &reply, &reply_len, timeout,
				   &msg);
		if (rc < 0) {
			free(reply);
			return send_op_error(c, rc, msg);
		}
		free(msg);
		if (!reply)
			return send_buf(c, 200, "application/octet-stream", "", 0, MHD_RESPMEM_PERSISTENT);
		return send_buf(c, 200, "application/octet-stream", reply, reply_len, MHD_RESPMEM_MUST_FREE);
	}
	if (!strcmp(action, "load"))
		rc = meshd_op_load(a->core, name, &out, &msg);
	else if (!strcmp(action, "start"))
		rc = meshd_op_start(a->core, name, &out, &msg);
	else if (!strcmp(action, "stop"))
		rc = meshd_op_stop(a->core, name, &msg);
	else
		rc = meshd_op_unload(a->core, name, &msg);
	if (rc < 0) {
		json_decref(out);
		return send_op_error(c, rc, msg);
	}
	free(msg);
	return send_ok(c, name, action, out);
}

static enum MHD_Result route(struct meshd_api *a, struct MHD_Connection *c, const char *url, const char *method,
			     struct req *r)
{
	static const char prefix[] = "/v1/programs/";
	if (!strcmp(url, "/v1/ps")) {
		json_t *out = NULL;
		int rc;
		if (strcmp(method, "GET") && strcmp(method, "HEAD"))
			return send_method_not_allowed(c, "GET, HEAD");
		rc = meshd_op_ps(a->core, &out);
		if (rc < 0) {
			json_decref(out);
			return send_op_error(c, rc, NULL);
		}
		return send_json(c, 200, out);
	}
	if (!strncmp(url, prefix, sizeof prefix - 1)) {
		const char *name = url + sizeof prefix - 1;
		const char *slash = strchr(name, '/');
		char nm[MESHD_API_NAME_MAX + 1];
		size_t n;
		if (!slash || strchr(slash + 1, '/'))
			return send_errorf(c, 404, MESH_E_NOTFOUND, "no such route");
		n = (size_t)(slash - name);
		if (n == 0 || n > MESHD_API_NAME_MAX)
			return send_errorf(c, 400, MESH_E_PARSE, "bad program name: 1 to %u characters",
					   MESHD_API_NAME_MAX);
		memcpy(nm, name, n);
		nm[n] = 0;
		if (!meshd_api_name_ok(nm))
			return send_errorf(c, 400, MESH_E_PARSE,
					   "bad program name: letters, digits, '_' and '-', not first '-'");
		return do_program(a, c, method, nm, slash + 1, r);
	}
	return send_errorf(c, 404, MESH_E_NOTFOUND, "no such route");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload_data, size_t *upload_data_size,
				  void **con_cls)
{
	struct meshd_api *a = cls;
	struct req *r = *con_cls;
	(void)version;
	if (!r) {
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
		uint64_t v = 0;
		r = calloc(1, sizeof *r);
		if (!r)
			return MHD_NO;
		r->t0 = mesh_mono_ns();
		/* Reads are frequent (mesh ps, probes): they log at debug, changes at info. */
		r->quiet = !strcmp(method, "GET") || !strcmp(method, "HEAD") || strstr(url, "/call");
		snprintf(r->what, sizeof r->what, "%s %s", method, url);
		for (char *q = r->what; *q; q++) /* untrusted bytes into a log line */
			if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f || *q == '"')
				*q = '?';
		*con_cls = r;
		atomic_fetch_add(&a->inflight, 1);
		/* A keep-alive connection may still ask after meshd began to stop. */
		if (atomic_load(&a->stopping)) {
			r->too_big = r->answered = 1;
			return send_errorf(c, 503, MESH_E_STATE, "meshd is stopping");
		}
		/* Refuse an announced oversize body before reading any of it. */
		if (cl && mesh_parse_u64(cl, UINT64_MAX, &v) == 0 && v > MESHD_API_MAX_BODY) {
			r->too_big = r->answered = 1;
			return send_errorf(c, 413, MESH_E_TOOBIG, "request body over %u bytes", MESHD_API_MAX_BODY);
		}
		/* One allocation for an announced body. */
		if (cl && v && mesh_buf_grow(&r->body, (size_t)v) < 0)
			return MHD_NO;
		return MHD_YES;
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		*upload_data_size = 0;
		if (r->too_big) {
			/* MHD cannot answer in the middle of a body: drain it (memory stays
			 * bounded) and answer 413 at its end; drop a client that goes on and on. */
			r->drained += n;
			return r->drained > 4ull * MESHD_API_MAX_BODY ? MHD_NO : MHD_YES;
		}
		if (r->body.len + n > MESHD_API_MAX_BODY) {
			r->too_big = 1;
			r->drained = r->body.len + n;
			mesh_buf_release(&r->body);
			return MHD_YES;
		}
		return mesh_buf_add(&r->body, upload_data, n) < 0 ? MHD_NO : MHD_YES;
	}
	if (r->too_big && !r->answered) {
		r->answered = 1;
		return send_errorf(c, 413, MESH_E_TOOBIG, "request body over %u bytes", MESHD_API_MAX_BODY);
	}
	if (r->too_big)
		return MHD_YES; /* answered already */
	return route(a, c, url, method, r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	struct meshd_api *a = cls;
	struct req *r = *con_cls;
	const union MHD_ConnectionInfo *ci;
	if (!r)
		return;
	atomic_fetch_sub(&a->inflight, 1);
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
	unsigned status = ci ? ci->http_status : 0;
	mesh_log(status >= 500 || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? MESH_LOG_WARN
		 : r->quiet && status < 400				   ? MESH_LOG_DEBUG
									   : MESH_LOG_INFO,
		 "api request=\"%s\" status=%u ms=%llu%s", r->what, status,
		 (unsigned long long)((mesh_mono_ns() - r->t0) / 1000000),
		 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=1");
	mesh_buf_release(&r->body);
	free(r);
	*con_cls = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	(void)cls;
	vsnprintf(line, sizeof line, fmt, ap);
	mesh_warn("api http: %s", line);
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

/* Creates the socket's directory (0700) when it is missing. */
static int make_dir_of(const char *path, char **err)
{
	char dir[PATH_MAX];
	char *slash;
	struct stat st;
	if (strlen(path) >= sizeof dir)
		return set_err(err, -ENAMETOOLONG, "socket path '%s' is too long", path);
	strcpy(dir, path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0;
	*slash = 0;
	if (mkdir(dir, 0700) == 0)
		return 0;
	if (errno != EEXIST)
		return set_err(err, -errno, "cannot create socket directory '%s': %s", dir, strerror(errno));
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return set_err(err, -ENOTDIR, "socket directory '%s' is not a directory", dir);
	return 0;
}

/* Binds and listens on path, replacing a stale socket.  Returns the fd. */
static int bind_socket(struct meshd_api *a, const char *path, char **err)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct stat st;
	int fd, rc;
	if (!path[0])
		return set_err(err, -EINVAL, "empty socket path");
	if (strlen(path) >= sizeof sa.sun_path)
		return set_err(err, -ENAMETOOLONG, "socket path '%s' is longer than %zu bytes", path,
			       sizeof sa.sun_path - 1);
	strcpy(sa.sun_path, path);
	rc = make_dir_of(path, err);
	if (rc < 0)
		return rc;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return set_err(err, -EEXIST, "'%s' exists and is not a socket", path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return set_err(err, -errno, "socket: %s", strerror(errno));
		rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
		close(fd);
		if (rc == 0)
			return set_err(err, -EADDRINUSE, "'%s' is in use: another meshd serves there", path);
		if (unlink(path) < 0 && errno != ENOENT)
			return set_err(err, -errno, "cannot remove stale socket '%s': %s", path, strerror(errno));
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return set_err(err, -errno, "socket: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		rc = -errno;
		close(fd);
		return set_err(err, rc, "cannot bind '%s': %s", path, strerror(-rc));
	}
	/* The directory is ours; tightening the mode after bind leaves no window for others. */
	if (chmod(path, 0600) < 0 || lstat(path, &st) < 0 || listen(fd, 64) < 0) {
		rc = -errno;
		unlink(path);
		close(fd);
		return set_err(err, rc, "cannot set up '%s': %s", path, strerror(-rc));
	}
	a->dev = st.st_dev;
	a->ino = st.st_ino;
	return fd;
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
	a->core = core;
	fd = bind_socket(a, path, err);
	if (fd < 0) {
		free(a);
		return fd;
	}
	a->listen_fd = fd;
	strcpy(a->path, path);
	/* The logger first: MHD prints on its own until it has seen it. */
	a->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
					  MHD_USE_POLL | MHD_USE_ERROR_LOG,
				  0, NULL, NULL, on_request, a, MHD_OPTION_EXTERNAL_LOGGER, on_log, a,
				  MHD_OPTION_LISTEN_SOCKET, fd,
				  MHD_OPTION_NOTIFY_COMPLETED, on_completed, a, MHD_OPTION_CONNECTION_LIMIT,
				  MESHD_API_MAX_CONNS, MHD_OPTION_CONNECTION_TIMEOUT, 120u,
				  MHD_OPTION_THREAD_STACK_SIZE, (size_t)256 * 1024, MHD_OPTION_END);
	if (!a->mhd) {
		unlink(path);
		close(fd);
		free(a);
		return set_err(err, MESH_E_UNSUPPORTED, "cannot start the HTTP server on '%s'", path);
	}
	*out = a;
	return 0;
}

int meshd_api_quiesce(struct meshd_api *a)
{
	struct stat st;
	int fd;
	if (!a)
		return 0;
	if (!a->quiesced) {
		a->quiesced = 1;
		atomic_store(&a->stopping, 1);
		fd = MHD_quiesce_daemon(a->mhd);
		if (fd >= 0)
			close(fd);
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
	/* MHD_stop_daemon cuts connections whose answer is not written yet:
	 * give the requests in flight a bounded while to finish first. */
	for (uint64_t end = mesh_mono_ns() + STOP_DRAIN_NS; atomic_load(&a->inflight) > 0 && mesh_mono_ns() < end;)
		mesh_sleep_ns(2000000);
	MHD_stop_daemon(a->mhd);
	free(a);
}
