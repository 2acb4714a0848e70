#include "autoscale/probe.h"

#include "base/thread.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "http/http.h"
#include "base/parse.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define DEF_RESOLVE_NS (1 * MESH_NS_PER_S)
#define DEF_CONNECT_NS (1 * MESH_NS_PER_S)
#define DEF_RESPONSE_NS (2 * MESH_NS_PER_S)
#define MAX_ADDRS 8

void mesh_probe_target_default(struct mesh_probe_target *t)
{
	memset(t, 0, sizeof *t);
	strcpy(t->host, MESH_PROBE_DEFAULT_HOST);
	t->port = MESH_PROBE_DEFAULT_PORT;
	strcpy(t->path, MESH_PROBE_DEFAULT_PATH);
}

void mesh_probe_target_ipv4(struct mesh_probe_target *t, unsigned a, unsigned b, unsigned c, unsigned d)
{
	mesh_probe_target_default(t);
	snprintf(t->host, sizeof t->host, "%u.%u.%u.%u", a & 255, b & 255, c & 255, d & 255);
}

static int set_port(struct mesh_probe_target *t, const char *s, size_t n)
{
	uint64_t v;
	if (mesh_parse_u64n(s, n, 65535, &v) || v == 0)
		return MESH_E_PARSE;
	t->port = (uint16_t)v;
	return 0;
}

static int set_host(struct mesh_probe_target *t, const char *s, size_t n)
{
	if (n == 0 || n >= sizeof t->host)
		return MESH_E_PARSE;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c <= 0x20 || c == 0x7f || strchr("/?#@[]", c))
			return MESH_E_PARSE;
	}
	memcpy(t->host, s, n);
	t->host[n] = 0;
	return 0;
}

/* "host", "host:port", "[v6]", "[v6]:port", bare "v6" (two or more colons). */
static int parse_authority(struct mesh_probe_target *t, const char *s, size_t n)
{
	if (n && s[0] == '[') {
		const char *close = memchr(s, ']', n);
		struct in6_addr a6;
		char tmp[INET6_ADDRSTRLEN + 1];
		size_t hn;
		if (!close)
			return MESH_E_PARSE;
		hn = (size_t)(close - s - 1);
		if (hn == 0 || hn >= sizeof tmp)
			return MESH_E_PARSE;
		memcpy(tmp, s + 1, hn);
		tmp[hn] = 0;
		if (inet_pton(AF_INET6, tmp, &a6) != 1)
			return MESH_E_PARSE;
		if (set_host(t, tmp, hn))
			return MESH_E_PARSE;
		size_t rest = n - (size_t)(close - s) - 1;
		if (rest == 0)
			return 0;
		if (close[1] != ':')
			return MESH_E_PARSE;
		return set_port(t, close + 2, rest - 1);
	}
	const char *colon = memchr(s, ':', n);
	if (colon && memchr(colon + 1, ':', n - (size_t)(colon - s) - 1)) {
		/* Two or more colons: a bare IPv6 literal, no port. */
		char tmp[INET6_ADDRSTRLEN + 1];
		struct in6_addr a6;
		if (n >= sizeof tmp)
			return MESH_E_PARSE;
		memcpy(tmp, s, n);
		tmp[n] = 0;
		if (inet_pton(AF_INET6, tmp, &a6) != 1)
			return MESH_E_PARSE;
		return set_host(t, s, n);
	}
	if (!colon)
		return set_host(t, s, n);
	if (set_host(t, s, (size_t)(colon - s)))
		return MESH_E_PARSE;
	return set_port(t, colon + 1, n - (size_t)(colon - s) - 1);
}

int mesh_probe_target_parse(struct mesh_probe_target *t, const char *spec)
{
	mesh_probe_target_default(t);
	if (!spec)
		return MESH_E_PARSE;
	for (const char *p = spec; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			return MESH_E_PARSE;
	const char *sep = strstr(spec, "://");
	if (!sep)
		return strpbrk(spec, "/?#@") ? MESH_E_PARSE : parse_authority(t, spec, strlen(spec));
	if (sep - spec != 4 || strncasecmp(spec, "http", 4) != 0)
		return MESH_E_PARSE;
	const char *auth = sep + 3;
	size_t an = strcspn(auth, "/?#");
	if (memchr(auth, '@', an))
		return MESH_E_PARSE;
	int rc = parse_authority(t, auth, an);
	if (rc)
		return rc;
	const char *path = auth + an;
	if (strchr(path, '#'))
		return MESH_E_PARSE;
	if (*path == 0)
		return 0;
	if (*path == '?') {
		/* "http://h?x" means path "/?x". */
		if (strlen(path) + 1 >= sizeof t->path)
			return MESH_E_PARSE;
		t->path[0] = '/';
		strcpy(t->path + 1, path);
		return 0;
	}
	if (strlen(path) >= sizeof t->path)
		return MESH_E_PARSE;
	strcpy(t->path, path);
	return 0;
}

static mesh__probe_resolver_fn resolver = getaddrinfo;

void mesh__probe_set_resolver(mesh__probe_resolver_fn fn)
{
	resolver = fn ? fn : getaddrinfo;
}

/* A lookup shared by the probe and its thread; the last one to let go frees it. */
struct lookup {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs, done, rc;
	struct addrinfo *res;
	mesh__probe_resolver_fn fn;
	char host[256], port[8];
};

static void lookup_unref(struct lookup *l)
{
	int last;
	pthread_mutex_lock(&l->mu);
	last = --l->refs == 0;
	pthread_mutex_unlock(&l->mu);
	if (!last)
		return;
	if (l->res)
		freeaddrinfo(l->res);
	pthread_cond_destroy(&l->cv);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

static void *lookup_thread(void *arg)
{
	struct lookup *l = arg;
	struct addrinfo hints = {0};
	struct addrinfo *res = NULL;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_ADDRCONFIG;
	int rc = l->fn(l->host, l->port, &hints, &res);
	pthread_mutex_lock(&l->mu);
	l->rc = rc;
	l->res = rc == 0 ? res : NULL;
	l->done = 1;
	pthread_cond_signal(&l->cv);
	pthread_mutex_unlock(&l->mu);
	lookup_unref(l);
	return NULL;
}

struct addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

static void addr_text(const struct sockaddr *sa, char *out, size_t cap)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const void *)sa;
		inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
		snprintf(out, cap, "[%s]:%u", ip, ntohs(s6->sin6_port));
	} else {
		const struct sockaddr_in *s4 = (const void *)sa;
		inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
		snprintf(out, cap, "%s:%u", ip, ntohs(s4->sin_port));
	}
}

/* Fills up to MAX_ADDRS addresses; returns their number, or a negative code:
 * MESH_E_TIMEOUT (lookup still running at the deadline), MESH_E_NOTFOUND. */
static int resolve(const struct mesh_probe_target *t, uint64_t deadline, struct addr *out)
{
	struct sockaddr_in s4 = {0};
	struct sockaddr_in6 s6 = {0};
	if (inet_pton(AF_INET, t->host, &s4.sin_addr) == 1) {
		s4.sin_family = AF_INET;
		s4.sin_port = htons(t->port);
		memcpy(&out[0].ss, &s4, sizeof s4);
		out[0].len = sizeof s4;
		return 1;
	}
	if (inet_pton(AF_INET6, t->host, &s6.sin6_addr) == 1) {
		s6.sin6_family = AF_INET6;
		s6.sin6_port = htons(t->port);
		memcpy(&out[0].ss, &s6, sizeof s6);
		out[0].len = sizeof s6;
		return 1;
	}

	struct lookup *l = calloc(1, sizeof *l);
	pthread_condattr_t ca;
	if (!l)
		return -ENOMEM;
	pthread_mutex_init(&l->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&l->cv, &ca);
	pthread_condattr_destroy(&ca);
	l->refs = 2;
	l->fn = resolver;
	snprintf(l->host, sizeof l->host, "%s", t->host);
	snprintf(l->port, sizeof l->port, "%u", t->port);
	/* Detached: a lookup past the deadline is left to end by itself. */
	int prc = mesh_thread_run(NULL, lookup_thread, l, MESH_THREAD_DETACHED);
	if (prc) {
		l->refs = 1;
		lookup_unref(l);
		return prc;
	}

	struct timespec ts = {(time_t)(deadline / MESH_NS_PER_S), (long)(deadline % MESH_NS_PER_S)};
	struct addrinfo *res = NULL;
	int rc = 0, n = 0;
	pthread_mutex_lock(&l->mu);
	while (!l->done) {
		/* mesh_mono_ns is CLOCK_MONOTONIC, the clock the condition waits on. */
		if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT && !l->done)
			break;
	}
	if (l->done) {
		rc = l->rc;
		res = l->res;
		l->res = NULL;
	}
	int done = l->done;
	pthread_mutex_unlock(&l->mu);
	lookup_unref(l);
	if (!done)
		return MESH_E_TIMEOUT;
	if (rc != 0)
		return MESH_E_NOTFOUND;
	for (struct addrinfo *ai = res; ai && n < MAX_ADDRS; ai = ai->ai_next) {
		if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) || ai->ai_addrlen > sizeof out[n].ss)
			continue;
		memcpy(&out[n].ss, ai->ai_addr, ai->ai_addrlen);
		out[n].len = ai->ai_addrlen;
		n++;
	}
	freeaddrinfo(res);
	return n ? n : MESH_E_NOTFOUND;
}

/* Waits for a non-blocking connect: 0 connected, -errno, MESH_E_TIMEOUT. */
static int connect_wait(int fd, uint64_t deadline)
{
	for (;;) {
		uint64_t now = mesh_mono_ns();
		if (now >= deadline)
			return MESH_E_TIMEOUT;
		uint64_t left = deadline - now;
		struct timespec ts = {(time_t)(left / MESH_NS_PER_S), (long)(left % MESH_NS_PER_S)};
		struct pollfd pfd = {fd, POLLOUT, 0};
		int n = ppoll(&pfd, 1, &ts, NULL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			continue;
		int soerr = 0;
		socklen_t sl = sizeof soerr;
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
			return -errno;
		return soerr ? -soerr : 0;
	}
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static void say(struct mesh_probe_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct mesh_probe_result *res, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(res->reason, sizeof res->reason, fmt, ap);
	va_end(ap);
}

int mesh_probe_model_listed(const char *body, size_t len, const char *model)
{
	json_error_t je;
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	int rc = MESH_E_PARSE;
	if (!root)
		return MESH_E_PARSE;
	static const struct {
		const char *list;
		const char *keys[2];
	} shapes[] = {{"data", {"id", NULL}}, {"models", {"name", "model"}}};
	for (size_t s = 0; s < 2 && rc != 0; s++) {
		json_t *arr = json_is_object(root) ? json_object_get(root, shapes[s].list) : NULL;
		size_t i;
		json_t *item;
		if (!json_is_array(arr))
			continue;
		rc = MESH_E_NOTFOUND;
		json_array_foreach(arr, i, item) {
			for (int k = 0; k < 2 && shapes[s].keys[k]; k++) {
				const char *v = json_string_value(json_object_get(item, shapes[s].keys[k]));
				if (v && strcmp(v, model) == 0)
					rc = 0;
			}
			if (rc == 0)
				break;
		}
	}
	json_decref(root);
	return rc;
}

static void judge(const struct mesh_probe_target *t, const struct mesh_probe_opts *o, struct mesh_http_response *r,
		  struct mesh_probe_result *res, uint64_t t0)
{
	uint64_t el = mesh_mono_ns() - t0;
	res->phase = MESH_PROBE_JUDGE;
	res->status = r->status;
	if (!mesh_http_status_is_2xx(r)) {
		res->err = MESH_E_STATE;
		say(res, "cold: HTTP %d from %s%s in %.1f ms", r->status, res->addr, t->path, ms(el));
		return;
	}
	if (o->model && *o->model) {
		int rc = mesh_probe_model_listed(r->body.p, r->body.len, o->model);
		if (rc == MESH_E_NOTFOUND) {
			res->err = rc;
			say(res, "cold: HTTP %d but model '%.64s' not listed at %s%s", r->status, o->model, res->addr,
			    t->path);
			return;
		}
		if (rc) {
			res->err = rc;
			say(res, "cold: HTTP %d but the body at %s%s is not a JSON model list", r->status, res->addr,
			    t->path);
			return;
		}
		res->warm = 1;
		say(res, "warm: HTTP %d, model '%.64s' listed at %s%s in %.1f ms", r->status, o->model, res->addr,
		    t->path, ms(el));
		return;
	}
	res->warm = 1;
	say(res, "warm: HTTP %d from %s%s in %.1f ms", r->status, res->addr, t->path, ms(el));
}

/* The request's bytes: GET t->path, without `Connection: close` when keep
 * (the builder always ends the head with it: one request a connection). */
static int request_bytes(struct mesh_buf *req, const struct mesh_probe_target *t, int keep)
{
	static const char close_line[] = "Connection: close\r\n\r\n";
	char hostport[300];
	if (strchr(t->host, ':'))
		snprintf(hostport, sizeof hostport, "[%s]:%u", t->host, t->port);
	else
		snprintf(hostport, sizeof hostport, "%s:%u", t->host, t->port);
	int rc = mesh_http_request_get(req, hostport, t->path);
	if (rc == 0 && keep && req->len >= sizeof close_line - 1 &&
	    !memcmp(req->p + req->len - (sizeof close_line - 1), close_line, sizeof close_line - 1)) {
		req->len -= sizeof close_line - 1;
		rc = mesh_buf_adds(req, "\r\n");
	}
	return rc;
}

/* The probe is over (rc: 0 the response came whole, else why not): whether
 * the connection can carry a next request, and the judgement. */
static void finish(struct mesh_probe_conn *p, struct mesh_probe_result *res, int rc)
{
	struct mesh_http_response *r = &p->r;
	uint64_t now = mesh_mono_ns();
	const char *conn = rc == 0 ? mesh_http_response_header(r, "Connection") : NULL;
	p->done = 1;
	p->keep = p->keep_asked && rc == 0 && r->done && r->version_minor >= 1 &&
		  (r->content_length >= 0 || r->chunked || r->no_body || r->status == 204 || r->status == 304) &&
		  !(conn && strcasestr(conn, "close"));
	if (rc == 0) {
		judge(p->t, &p->o, r, res, p->t0);
	} else {
		res->err = rc;
		res->status = r->head_done ? r->status : 0;
		if (rc == MESH_E_TIMEOUT)
			say(res, "cold: no complete response from %s within %.0f ms", res->addr, ms(now - p->r0));
		else if (rc == MESH_E_PROTO || rc == MESH_E_TOOBIG || rc == MESH_E_CLOSED)
			say(res, "cold: %s response from %s: %s",
			    rc == MESH_E_PROTO ? "malformed" : rc == MESH_E_TOOBIG ? "oversized" : "incomplete", res->addr,
			    mesh_http_response_why(r));
		else
			say(res, "cold: exchange with %s failed: %s", res->addr, mesh_strerror(rc));
	}
	res->elapsed_ns = now - p->t0;
}

/* mesh_probe_begin, the probe timed from t0 (mesh_probe's: its resolve and
 * connect count). */
static int begin_at(struct mesh_probe_conn *p, int fd, const struct mesh_probe_target *t,
		    const struct mesh_probe_opts *o, int keep, struct mesh_probe_result *res, uint64_t t0)
{
	static const struct mesh_probe_opts def = MESH_PROBE_OPTS_INIT;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	struct mesh_http_limits lim = MESH_HTTP_LIMITS_DEFAULT;
	struct mesh_buf req = MESH_BUF_INIT;
	memset(p, 0, sizeof *p);
	p->fd = fd;
	if (fd < 0 || !t || !res || t->port == 0 || t->path[0] != '/' || !memchr(t->host, 0, sizeof t->host) ||
	    !memchr(t->path, 0, sizeof t->path))
		return MESH_E_RANGE;
	memset(res, 0, sizeof *res);
	p->t = t;
	p->o = o ? *o : def;
	p->keep_asked = keep;
	p->t0 = t0;
	p->r0 = mesh_mono_ns();
	p->deadline = p->r0 + (p->o.response_timeout_ns ? p->o.response_timeout_ns : DEF_RESPONSE_NS);
	if (p->o.max_body)
		lim.max_body = p->o.max_body;
	mesh_http_response_init(&p->r, &lim);
	p->live = 1;
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 && (ss.ss_family == AF_INET || ss.ss_family == AF_INET6))
		addr_text((struct sockaddr *)&ss, res->addr, sizeof res->addr);
	else
		snprintf(res->addr, sizeof res->addr, "%.50s:%u", t->host, t->port);
	res->phase = MESH_PROBE_RESPONSE;
	int rc = request_bytes(&req, t, keep);
	/* A few hundred bytes on a new connection: its buffer takes them at once. */
	ssize_t n = rc ? 0 : send(fd, req.p, req.len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (!rc && n != (ssize_t)req.len)
		rc = n < 0 ? -errno : MESH_E_CLOSED;
	mesh_buf_release(&req);
	if (rc) {
		finish(p, res, rc);
		return 1;
	}
	return 0;
}

int mesh_probe_begin(struct mesh_probe_conn *p, int fd, const struct mesh_probe_target *t,
		     const struct mesh_probe_opts *o, int keep, struct mesh_probe_result *res)
{
	return begin_at(p, fd, t, o, keep, res, mesh_mono_ns());
}

int mesh_probe_read(struct mesh_probe_conn *p, struct mesh_probe_result *res)
{
	char buf[4096];
	if (p->done)
		return 1;
	for (;;) {
		ssize_t n = recv(p->fd, buf, sizeof buf, MSG_DONTWAIT);
		int rc;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n < 0)
			rc = -errno;
		else if (n == 0)
			rc = mesh_http_response_eof(&p->r) == 1 ? 0 : MESH_E_CLOSED;
		else if ((rc = mesh_http_response_feed(&p->r, buf, (size_t)n, NULL)) == 0)
			continue;
		/* Bytes after a complete response are not the probe's. */
		finish(p, res, rc == 1 ? 0 : rc < 0 ? rc : 0);
		return 1;
	}
}

void mesh_probe_expire(struct mesh_probe_conn *p, struct mesh_probe_result *res)
{
	if (!p->done)
		finish(p, res, MESH_E_TIMEOUT);
}

void mesh_probe_end(struct mesh_probe_conn *p)
{
	if (p->live)
		mesh_http_response_release(&p->r);
	p->live = 0;
}

/* A whole probe on a connected fd, waiting with poll (mesh_probe's; t0
 * its start). */
static int exchange(int fd, const struct mesh_probe_target *t, const struct mesh_probe_opts *o,
		    struct mesh_probe_result *res, uint64_t t0, int keep)
{
	struct mesh_probe_conn p;
	int done = begin_at(&p, fd, t, o, keep, res, t0);
	if (done < 0)
		return done;
	while (!done) {
		uint64_t now = mesh_mono_ns();
		if (now >= p.deadline) {
			mesh_probe_expire(&p, res);
			break;
		}
		uint64_t left = p.deadline - now;
		struct timespec ts = {(time_t)(left / MESH_NS_PER_S), (long)(left % MESH_NS_PER_S)};
		struct pollfd pf = {fd, POLLIN, 0};
		if (ppoll(&pf, 1, &ts, NULL) < 0 && errno != EINTR) {
			finish(&p, res, -errno);
			break;
		}
		done = mesh_probe_read(&p, res);
	}
	mesh_probe_end(&p);
	return p.keep;
}

int mesh_probe(const struct mesh_probe_target *t, const struct mesh_probe_opts *o, struct mesh_probe_result *res)
{
	static const struct mesh_probe_opts def = MESH_PROBE_OPTS_INIT;
	struct addr addrs[MAX_ADDRS];
	uint64_t t0 = mesh_mono_ns();
	int n, fd = -1, err = 0;

	if (!t || !res || t->port == 0 || t->path[0] != '/' || !memchr(t->host, 0, sizeof t->host) ||
	    !memchr(t->path, 0, sizeof t->path))
		return MESH_E_RANGE;
	if (!o)
		o = &def;
	uint64_t resolve_ns = o->resolve_timeout_ns ? o->resolve_timeout_ns : DEF_RESOLVE_NS;
	uint64_t connect_ns = o->connect_timeout_ns ? o->connect_timeout_ns : DEF_CONNECT_NS;
	memset(res, 0, sizeof *res);

	res->phase = MESH_PROBE_RESOLVE;
	n = resolve(t, t0 + resolve_ns, addrs);
	if (n < 0) {
		res->err = n;
		res->elapsed_ns = mesh_mono_ns() - t0;
		if (n == MESH_E_TIMEOUT)
			say(res, "cold: resolving '%.200s' took over %.0f ms", t->host, ms(resolve_ns));
		else
			say(res, "cold: cannot resolve '%.200s': %s", t->host, mesh_strerror(n));
		return 0;
	}

	res->phase = MESH_PROBE_CONNECT;
	uint64_t c0 = mesh_mono_ns(), cdl = c0 + connect_ns;
	for (int i = 0; i < n; i++) {
		struct sockaddr *sa = (struct sockaddr *)&addrs[i].ss;
		addr_text(sa, res->addr, sizeof res->addr);
		fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = -errno;
			continue;
		}
		if (connect(fd, sa, addrs[i].len) == 0)
			err = 0;
		else if (errno == EINPROGRESS || errno == EINTR)
			err = connect_wait(fd, cdl);
		else
			err = -errno;
		if (err == 0)
			break;
		close(fd);
		fd = -1;
		if (err == MESH_E_TIMEOUT)
			break;
	}
	if (fd < 0) {
		uint64_t now = mesh_mono_ns();
		res->err = err;
		res->elapsed_ns = now - t0;
		if (err == MESH_E_TIMEOUT)
			say(res, "cold: connect to %s timed out after %.0f ms", res->addr, ms(now - c0));
		else if (err == -ECONNREFUSED)
			say(res, "cold: connect refused by %s in %.1f ms", res->addr, ms(now - c0));
		else
			say(res, "cold: connect to %s failed: %s", res->addr, mesh_strerror(err));
		return 0;
	}
	uint64_t connected = mesh_mono_ns() - t0;
	exchange(fd, t, o, res, t0, 0);
	close(fd);
	res->connect_ns = connected;
	return 0;
}

