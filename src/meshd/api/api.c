/* meshd's control API over libevent's evhttp (docs/api.md).  This file is
 * the server: requests taken in, the body bound, the socket, start and
 * stop; api_ops.c runs each request's op and delivers its answer, and
 * api_json.c renders answers as JSON (api_int.h joins them).
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
#include "meshd/api/api_int.h"

#include "base/thread.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/path.h"
#include "shm/ring.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

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

/* Loop thread: the record of a request that came: its method, its path
 * as the client meant it (%2e%2e is "..", refused as a name; NULL when
 * out of memory), its query's arguments and its words for the log.  NULL
 * when out of memory. */
static struct job *job_new(struct meshd_api *a, struct evhttp_request *req, const char *uri)
{
	struct job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	j->a = a;
	j->req = req;
	j->t0 = mesh_mono_ns();
	j->method = method_name(evhttp_request_get_command(req));
	TAILQ_INIT(&j->args);
	const char *q = strchr(uri, '?');
	size_t plen = q ? (size_t)(q - uri) : strlen(uri);
	char *raw = strndup(uri, plen);
	j->path = raw ? evhttp_uridecode(raw, 0, NULL) : NULL;
	free(raw);
	if (q)
		(void)evhttp_parse_query_str(q + 1, &j->args); /* a malformed query keeps what parsed */
	/* Reads are frequent (mesh ps, probes): they log at debug, changes at info. */
	j->quiet = !strcmp(j->method, "GET") || !strcmp(j->method, "HEAD") || (j->path && strstr(j->path, "/call"));
	snprintf(j->what, sizeof j->what, "%s %s", j->method, j->path ? j->path : uri);
	for (char *c = j->what; *c; c++) /* untrusted bytes into a log line */
		if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f || *c == '"')
			*c = '?';
	return j;
}

/* Loop thread: j goes to a pool thread of its own (detached; a->threads
 * counts it until it ends).  Calls may wait long (a busy or hung worker);
 * control requests (ps, stop, unload, ...) are bounded apart, so they
 * always get through whatever calls are queued.  A call's client going
 * away is watched for.  0, or j answered 503 (not delivered: the caller's). */
static int dispatch(struct meshd_api *a, struct job *j)
{
	j->is_call = strlen(j->path) > 5 && !strcmp(j->path + strlen(j->path) - 5, "/call");
	pthread_mutex_lock(&a->mu);
	if (j->is_call ? a->calls >= MESHD_API_MAX_CONNS : a->threads - a->calls >= MESHD_API_MAX_CONTROL) {
		pthread_mutex_unlock(&a->mu);
		meshd__send_errorf(j, 503, -EAGAIN, "too many %s in flight (at most %u)", j->is_call ? "calls" : "requests",
				   j->is_call ? MESHD_API_MAX_CONNS : MESHD_API_MAX_CONTROL);
		return -1;
	}
	if (j->is_call) {
		struct evhttp_connection *evcon = evhttp_request_get_connection(j->req);
		struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
		evutil_socket_t cfd = bev ? bufferevent_getfd(bev) : -1;
		if (evcon)
			evhttp_connection_set_closecb(evcon, on_client_close, j);
		if (cfd >= 0 && (j->watch = event_new(a->base, cfd, EV_CLOSED, on_client_gone, j)))
			event_add(j->watch, NULL);
	}
	int rc = -mesh_thread_run(NULL, meshd__op_main, j, MESH_THREAD_DETACHED);
	if (rc == 0) {
		a->threads++;
		a->calls += j->is_call;
	}
	pthread_mutex_unlock(&a->mu);
	if (rc)
		meshd__send_error(j, 503, -rc, NULL);
	return rc ? -1 : 0;
}

/* Loop thread: every request whose head and body evhttp has read.  A body
 * announced over MESHD_API_MAX_BODY never gets here (in_added); a chunked
 * one may be over it, up to BODY_DRAIN_MAX. */
static void on_request(struct evhttp_request *req, void *arg)
{
	struct meshd_api *a = arg;
	const char *uri = evhttp_request_get_uri(req);
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t n = evbuffer_get_length(in);
	struct job *j = job_new(a, req, uri ? uri : "");
	if (!j) {
		evhttp_send_error(req, 503, NULL);
		return;
	}
	atomic_fetch_add(&a->inflight, 1);
	if (!uri)
		uri = "";
	/* A keep-alive connection may still ask after meshd began to stop. */
	if (atomic_load(&a->stopping))
		meshd__send_errorf(j, 503, MESH_E_STATE, "meshd is stopping");
	else if (!j->path)
		meshd__send_error(j, 503, -ENOMEM, NULL);
	else if (headers_size(req, uri) > HEADERS_MAX)
		meshd__send_errorf(j, 413, MESH_E_TOOBIG, "request headers over %u bytes", HEADERS_MAX);
	else if (n > MESHD_API_MAX_BODY) /* evhttp's bound is the same; never more */
		meshd__send_errorf(j, 413, MESH_E_TOOBIG, "request body over %u bytes", MESHD_API_MAX_BODY);
	else if (n && (mesh_buf_grow(&j->body, n) < 0 || evbuffer_remove(in, j->body.p, n) != (int)n))
		meshd__send_error(j, 503, -ENOMEM, NULL);
	else {
		j->body.len = n;
		if (meshd__is_events(j->path))
			return meshd__events_follow(a, j); /* on this thread, for as long as it follows */
		if (dispatch(a, j) == 0)
			return;
	}
	meshd__deliver(a, j);
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
	if (a->feed_ev)
		event_free(a->feed_ev);
	if (a->ping_ev)
		event_free(a->ping_ev);
	pthread_mutex_destroy(&a->mu);
	pthread_cond_destroy(&a->cv);
	free(a);
}

int meshd_api_start(struct meshd_api **out, const struct meshd_parts *parts, const char *path, char **err)
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
	a->parts = parts;
	a->core = parts->core;
	a->listen_fd = -1;
	a->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	/* The loop may run: what is set up here is added to it under
	 * libevent's lock (the core made the base thread-safe). */
	a->base = meshd_core_base(a->core);
	a->http = a->base ? evhttp_new(a->base) : NULL;
	a->done_ev = a->base ? event_new(a->base, -1, 0, meshd__on_done, a) : NULL;
	a->stream_ev = a->base ? event_new(a->base, -1, 0, meshd__on_streams, a) : NULL;
	a->accept_retry = a->base ? evtimer_new(a->base, on_accept_retry, a) : NULL;
	a->feed_ev = a->base ? event_new(a->base, -1, 0, meshd__on_followers, a) : NULL;
	a->ping_ev = a->base ? event_new(a->base, -1, EV_PERSIST, meshd__on_followers, a) : NULL;
	if (!a->http || !a->done_ev || !a->stream_ev || !a->accept_retry || !a->feed_ev || !a->ping_ev ||
	    a->reserve_fd < 0) {
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
	/* GET /v1/events: the feed wakes the loop; pings keep streams alive. */
	struct timeval ping = {PING_EVERY_S, 0};
	evtimer_add(a->ping_ev, &ping);
	meshd_feed_set_wake(meshd_core_feed(a->core), meshd__feed_wake, a);
	*out = a;
	return 0;
}

/* Loop thread: no more connections. */
static void stop_accepting(struct meshd_api *a)
{
	meshd__events_end(a);
	event_del(a->ping_ev);
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
	meshd__deliver_done(a);
	evhttp_free(a->http);
	a->http = NULL;
	event_free(a->done_ev);
	event_free(a->stream_ev);
	a->done_ev = a->stream_ev = NULL;
	event_free(a->accept_retry);
	a->accept_retry = NULL;
	event_free(a->feed_ev);
	event_free(a->ping_ev);
	a->feed_ev = a->ping_ev = NULL;
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

void meshd_api_running(struct meshd_api *a, unsigned *calls, unsigned *others)
{
	pthread_mutex_lock(&a->mu);
	*calls = a->calls;
	*others = a->threads - a->calls;
	pthread_mutex_unlock(&a->mu);
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
	run_on_loop(a, meshd__deliver_done);
	mesh_sleep_ns(20000000);
	run_on_loop(a, finish);
	api_free(a);
}
