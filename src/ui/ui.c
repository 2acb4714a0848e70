/* `mesh ui`'s server (ui.h): the accept loop on one thread, a thread of the
 * pool for each connection, which reads one request head, checks the door,
 * answers and closes. */
#include "ui/ui.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"
#include "base/thread.h"
#include "client/api_client.h"
#include "http/hframe.h"
#include "http/http.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* A request head must be whole within this many bytes and seconds. */
#define HEAD_MAX 16384
#define HEAD_TIMEOUT_S 10
/* meshd's answer to a read (ps, jobs, logs) within this. */
#define API_TIMEOUT_NS (30ull * MESH_NS_PER_S)
#define TOKEN_HEX 32
#define COOKIE "mesh_ui"

struct mesh_ui {
	int lfd, stop_fd, port;
	char *sock;
	char token[TOKEN_HEX + 1];
	char url[128];
	char hosts[3][64]; /* the Host values allowed: 127.0.0.1:P, localhost:P, [::1]:P */
	atomic_uint conns; /* connection threads running */
};

/* The answers' fixed header lines: no sniffing, no framing by other sites,
 * no referrer leaving with the token, only this origin's scripts. */
#define SAFE_HEADERS                                                                                          \
	"X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n"          \
	"Content-Security-Policy: default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " \
	"frame-ancestors 'none'\r\n"

int mesh_ui_open(struct mesh_ui **out, const struct mesh_ui_config *c, char **err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int loopback = 0, one = 1;
	*out = NULL;
	if (err)
		*err = NULL;
	if (mesh_addr_parse(c->listen, &ss, &len, &loopback) < 0)
		return mesh_errf(err, MESH_E_PARSE, "'%s' is not an address: 127.0.0.1:PORT or [::1]:PORT", c->listen);
	if (!loopback)
		return mesh_errf(err, MESH_E_REFUSED,
			       "'%s' is not a loopback address: mesh ui serves this machine only (127.0.0.1:PORT)",
			       c->listen);
	struct mesh_ui *u = calloc(1, sizeof *u);
	if (!u || !(u->sock = strdup(c->sock))) {
		free(u);
		return mesh_errf(err, -ENOMEM, "out of memory");
	}
	u->lfd = u->stop_fd = -1;
	unsigned char rnd[TOKEN_HEX / 2];
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
		int e = -errno;
		mesh_ui_free(u);
		return mesh_errf(err, e, "cannot make a token: %s", mesh_strerror(e));
	}
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(u->token + 2 * i, 3, "%02x", rnd[i]);
	u->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	u->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (u->lfd < 0 || u->stop_fd < 0 || setsockopt(u->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(u->lfd, (struct sockaddr *)&ss, len) < 0 || listen(u->lfd, 64) < 0) {
		int e = -errno;
		mesh_ui_free(u);
		return mesh_errf(err, e, "cannot listen on '%s': %s", c->listen, mesh_strerror(e));
	}
	struct sockaddr_storage got;
	socklen_t glen = sizeof got;
	getsockname(u->lfd, (struct sockaddr *)&got, &glen);
	u->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
						 : ((struct sockaddr_in *)&got)->sin_port);
	const char *host = got.ss_family == AF_INET6 ? "[::1]" : "127.0.0.1";
	snprintf(u->url, sizeof u->url, "http://%s:%d/?token=%s", host, u->port, u->token);
	snprintf(u->hosts[0], sizeof u->hosts[0], "127.0.0.1:%d", u->port);
	snprintf(u->hosts[1], sizeof u->hosts[1], "localhost:%d", u->port);
	snprintf(u->hosts[2], sizeof u->hosts[2], "[::1]:%d", u->port);
	*out = u;
	return 0;
}

const char *mesh_ui_url(const struct mesh_ui *u)
{
	return u->url;
}

void mesh_ui_stop(struct mesh_ui *u)
{
	mesh_efd_ring(u->stop_fd);
}

/* ---- one connection ---- */

struct req {
	char head[HEAD_MAX];
	size_t len;
	struct mesh_hframe_head h;
	char method[8];
	char path[2048];  /* the target before '?' */
	char query[2048]; /* after it ("" when none) */
	int head_only;
};

/* The value of header field name (case-insensitive) into out; whether
 * it was there. */
static int field(const struct req *r, const char *name, char *out, size_t cap)
{
	size_t at = r->h.line_off + r->h.line_len, nlen, vlen;
	const char *n, *v;
	while (mesh_hframe_field(r->head, r->h.len, &at, &n, &nlen, &v, &vlen))
		if (nlen == strlen(name) && !strncasecmp(n, name, nlen)) {
			snprintf(out, cap, "%.*s", (int)vlen, v);
			return 1;
		}
	return 0;
}

/* The value of key in a query or cookie string (pairs split by sep) into
 * out; whether it was there. */
static int pair(const char *s, const char *key, char sep, char *out, size_t cap)
{
	size_t k = strlen(key);
	for (const char *p = s; p && *p;) {
		while (*p == ' ')
			p++;
		const char *end = strchr(p, sep);
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n > k && !strncmp(p, key, k) && p[k] == '=') {
			snprintf(out, cap, "%.*s", (int)(n - k - 1), p + k + 1);
			return 1;
		}
		p = end ? end + 1 : NULL;
	}
	return 0;
}

/* Compares without an early exit: the time says nothing of the token. */
static int token_is(const struct mesh_ui *u, const char *t)
{
	size_t n = strlen(t);
	unsigned char d = 0;
	for (size_t i = 0; i < TOKEN_HEX; i++)
		d |= (unsigned char)(u->token[i] ^ (i < n ? t[i] : 0));
	return !d && n == TOKEN_HEX;
}

static void answer(int fd, const struct req *r, int status, const char *reason, const char *type,
		   const char *extra, const void *body, size_t n)
{
	struct mesh_buf b = MESH_BUF_INIT;
	mesh_buf_addf(&b,
		      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n" SAFE_HEADERS
		      "%s\r\n",
		      status, reason, type, n, extra ? extra : "");
	if (!r || !r->head_only)
		mesh_buf_add(&b, body, n);
	if (b.p)
		(void)mesh_write_all_raw(fd, b.p, b.len);
	mesh_buf_release(&b);
}

static void answer_text(int fd, const struct req *r, int status, const char *reason, const char *text)
{
	answer(fd, r, status, reason, "text/plain; charset=utf-8", "Cache-Control: no-store\r\n", text, strlen(text));
}

/* A JSON error of the page's API: {"error": msg} (msg has no quotes or
 * control bytes of its own: ours). */
static void answer_json_error(int fd, const struct req *r, int status, const char *reason, const char *msg)
{
	struct mesh_buf b = MESH_BUF_INIT;
	mesh_buf_adds(&b, "{\"error\":\"");
	for (const char *c = msg; *c; c++)
		if (*c == '"' || *c == '\\')
			mesh_buf_addf(&b, "\\%c", *c);
		else if ((unsigned char)*c >= 0x20)
			mesh_buf_add(&b, c, 1);
	mesh_buf_adds(&b, "\"}\n");
	answer(fd, r, status, reason, "application/json", "Cache-Control: no-store\r\n", b.p ? b.p : "", b.len);
	mesh_buf_release(&b);
}

/* Reads one request head; 0, or the status to refuse it with. */
static int read_head(int fd, struct req *r)
{
	size_t scanned = 0, n = 0;
	struct timeval tv = {HEAD_TIMEOUT_S, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	while (!(n = mesh_hframe_head_end(r->head, r->len, &scanned))) {
		if (r->len == sizeof r->head)
			return 431;
		ssize_t k = read(fd, r->head + r->len, sizeof r->head - r->len);
		if (k <= 0)
			return -1; /* gone, or too slow: nothing to answer */
		r->len += (size_t)k;
	}
	if (mesh_hframe_parse_request(r->head, n, &r->h) < 0)
		return 400;
	if (r->h.method_len >= sizeof r->method || r->h.target_len >= sizeof r->path)
		return r->h.method_len >= sizeof r->method ? 405 : 414;
	snprintf(r->method, sizeof r->method, "%.*s", (int)r->h.method_len, r->head + r->h.line_off);
	const char *t = r->head + r->h.target_off, *q = memchr(t, '?', r->h.target_len);
	size_t plen = q ? (size_t)(q - t) : r->h.target_len;
	snprintf(r->path, sizeof r->path, "%.*s", (int)plen, t);
	snprintf(r->query, sizeof r->query, "%.*s", q ? (int)(r->h.target_len - plen - 1) : 0, q ? q + 1 : "");
	r->head_only = !strcmp(r->method, "HEAD");
	if (strcmp(r->method, "GET") && !r->head_only)
		return 405;
	if (r->h.chunked || r->h.content_length)
		return 400;
	return 0;
}

static const char *reason_of(int status)
{
	switch (status) {
	case 400:
		return "Bad Request";
	case 405:
		return "Method Not Allowed";
	case 414:
		return "URI Too Long";
	case 431:
		return "Request Header Fields Too Large";
	default:
		return "Error";
	}
}

static const struct mesh_ui_asset *asset(const char *name)
{
	for (size_t i = 0; i < mesh_ui_nassets; i++)
		if (!strcmp(mesh_ui_assets[i].name, name))
			return &mesh_ui_assets[i];
	return NULL;
}

/* The events relay: meshd's stream body to the browser as it comes. */
struct relay {
	int fd, begun;
};

static int relay_part(void *arg, const void *p, size_t n)
{
	static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
				   "Connection: close\r\n" SAFE_HEADERS "\r\n";
	struct relay *rl = arg;
	if (!rl->begun) {
		rl->begun = 1;
		if (mesh_write_all_raw(rl->fd, head, sizeof head - 1) < 0)
			return MESH_E_CLOSED;
	}
	return mesh_write_all_raw(rl->fd, p, n) < 0 ? MESH_E_CLOSED : 0;
}

static void events(struct mesh_ui *u, int fd, const struct req *r)
{
	char last[96] = "", target[160];
	if (!field(r, "Last-Event-ID", last, sizeof last))
		pair(r->query, "last_event_id", '&', last, sizeof last);
	for (char *c = last; *c; c++) /* an id is hex, digits and '-' */
		if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f') || *c == '-'))
			*c = 0;
	snprintf(target, sizeof target, "/v1/events%s%s", last[0] ? "?last_event_id=" : "", last);
	struct relay rl = {fd, 0};
	struct meshd_reply rep = MESHD_REPLY_INIT;
	/* SIGPIPE is not ours to take: the writes are MSG_NOSIGNAL-free, so
	 * the CLI ignores SIGPIPE (cmd_ui.c). */
	int rc = meshd_client_request_stream(u->sock, "GET", target, NULL, 0, 0, relay_part, &rl, &rep);
	if (!rl.begun) {
		char msg[512];
		if (rc < 0)
			snprintf(msg, sizeof msg, "cannot reach meshd at %s: %s", u->sock, mesh_strerror(rc));
		else
			snprintf(msg, sizeof msg, "meshd answered %d to GET /v1/events", rep.status);
		answer_json_error(fd, r, 502, "Bad Gateway", msg);
	}
	meshd_reply_release(&rep);
}

/* GET /api/<rest>: meshd's GET /v1/<rest> (/api/metrics: /metrics). */
static void api(struct mesh_ui *u, int fd, const struct req *r)
{
	const char *rest = r->path + 5;
	char target[4200];
	snprintf(target, sizeof target, "%s%s%s%s", strcmp(rest, "metrics") ? "/v1/" : "/", rest,
		 r->query[0] ? "?" : "", r->query);
	struct meshd_reply rep = MESHD_REPLY_INIT;
	int rc = meshd_client_request(u->sock, r->head_only ? "HEAD" : "GET", target, NULL, 0, API_TIMEOUT_NS, &rep);
	if (rc < 0) {
		char msg[512];
		snprintf(msg, sizeof msg, "cannot reach meshd at %s: %s", u->sock, mesh_strerror(rc));
		answer_json_error(fd, r, 502, "Bad Gateway", msg);
		return;
	}
	char reason[32];
	snprintf(reason, sizeof reason, "%s", rep.status < 300 ? "OK" : rep.status < 500 ? "Client Error" : "Error");
	answer(fd, r, rep.status, reason, rep.type[0] ? rep.type : "application/octet-stream", "Cache-Control: no-store\r\n",
	       rep.body ? rep.body : "", rep.len);
	meshd_reply_release(&rep);
}

/* GET /results/<id>: every settled result of job id in chunk order, as one
 * download: meshd's pages (GET /v1/jobs/<id>/results?from=K, 4 MiB each)
 * one after the other, until the end or the first chunk not settled yet (a
 * running job: what is there now).  Chunked, so that a download cut short
 * (meshd gone midway) ends without its last chunk: the browser says it
 * failed instead of keeping a short file. */
static void download(struct mesh_ui *u, int fd, const struct req *r)
{
	uint64_t id, from = 0, next, missing;
	int end = 0;
	if (mesh_parse_u64(r->path + 9, UINT64_MAX, &id) < 0 || id == 0) {
		answer_text(fd, r, 404, "Not Found", "mesh ui: no such job\n");
		return;
	}
	int begun = 0;
	while (!end) {
		char target[96], msg[512];
		snprintf(target, sizeof target, "/v1/jobs/%" PRIu64 "/results?from=%" PRIu64, id, from);
		struct meshd_reply rep = MESHD_REPLY_INIT;
		int rc = meshd_client_request(u->sock, "GET", target, NULL, 0, API_TIMEOUT_NS, &rep);
		int ok = rc == 0 && rep.status == 200 && meshd_results_page(rep.type, &next, &end, &missing) == 0;
		if (!ok && !begun) {
			if (rc < 0)
				snprintf(msg, sizeof msg, "cannot reach meshd at %s: %s", u->sock, mesh_strerror(rc));
			if (rc < 0 || rep.status == 200)
				answer_json_error(fd, r, 502, "Bad Gateway", rc < 0 ? msg : "meshd's results page had no next= or end=");
			else
				answer(fd, r, rep.status, rep.status < 500 ? "Client Error" : "Error",
				       rep.type[0] ? rep.type : "application/json", "Cache-Control: no-store\r\n",
				       rep.body ? rep.body : "", rep.len);
		}
		if (ok && !begun) {
			char head[512];
			int n = snprintf(head, sizeof head,
					 "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
					 "Content-Disposition: attachment; filename=\"job-%" PRIu64 "-results\"\r\n"
					 "Transfer-Encoding: chunked\r\nCache-Control: no-store\r\nConnection: close\r\n" SAFE_HEADERS
					 "\r\n",
					 id);
			begun = 1;
			if (mesh_write_all_raw(fd, head, (size_t)n) < 0 || r->head_only)
				ok = 0, begun = 0;
		}
		if (ok && rep.len) {
			char size[24];
			int n = snprintf(size, sizeof size, "%zx\r\n", rep.len);
			if (mesh_write_all_raw(fd, size, (size_t)n) < 0 || mesh_write_all_raw(fd, rep.body, rep.len) < 0 ||
			    mesh_write_all_raw(fd, "\r\n", 2) < 0)
				ok = 0, begun = 0;
		}
		meshd_reply_release(&rep);
		if (!ok)
			return; /* begun: no last chunk, the download fails */
		if (next <= from)
			break; /* a chunk not settled yet */
		from = next;
	}
	(void)mesh_write_all_raw(fd, "0\r\n\r\n", 5);
}

static void serve(struct mesh_ui *u, int fd)
{
	static const char refused[] =
		"mesh ui: this page needs the token: open the URL `mesh ui` printed (it ends in ?token=...).\n";
	struct req *r = calloc(1, sizeof *r);
	if (!r)
		return;
	int st = read_head(fd, r);
	if (st) {
		if (st > 0)
			answer_text(fd, NULL, st, reason_of(st), "mesh ui: a GET request, please\n");
		free(r);
		return;
	}
	char host[128] = "", cookie[512] = "", tok[80] = "";
	field(r, "Host", host, sizeof host);
	if (strcmp(host, u->hosts[0]) && strcmp(host, u->hosts[1]) && strcmp(host, u->hosts[2])) {
		answer_text(fd, r, 403, "Forbidden", "mesh ui: this Host is not the address mesh ui serves\n");
		free(r);
		return;
	}
	int by_query = pair(r->query, "token", '&', tok, sizeof tok) && token_is(u, tok);
	int by_cookie = field(r, "Cookie", cookie, sizeof cookie) && pair(cookie, COOKIE, ';', tok, sizeof tok) &&
			token_is(u, tok);
	if (!by_query && !by_cookie) {
		answer_text(fd, r, 403, "Forbidden", refused);
	} else if (by_query && strncmp(r->path, "/api/", 5) != 0) {
		/* The URL's token becomes the cookie, and leaves the address bar. */
		char extra[2400];
		snprintf(extra, sizeof extra,
			 "Location: %s\r\nSet-Cookie: " COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict\r\n"
			 "Cache-Control: no-store\r\n",
			 r->path, u->token);
		answer(fd, r, 303, "See Other", "text/plain", extra, "", 0);
	} else if (!strcmp(r->path, "/api/events")) {
		events(u, fd, r);
	} else if (!strncmp(r->path, "/api/", 5)) {
		api(u, fd, r);
	} else if (!strncmp(r->path, "/results/", 9)) {
		download(u, fd, r);
	} else {
		const struct mesh_ui_asset *a = asset(strcmp(r->path, "/") ? r->path + 1 : "index.html");
		if (a)
			answer(fd, r, 200, "OK", a->type, "Cache-Control: no-cache\r\n", a->data, a->len);
		else
			answer_text(fd, r, 404, "Not Found", "mesh ui: no such page\n");
	}
	free(r);
}

struct conn {
	struct mesh_ui *u;
	int fd;
};

static void *conn_main(void *arg)
{
	struct conn *c = arg;
	serve(c->u, c->fd);
	shutdown(c->fd, SHUT_WR);
	close(c->fd);
	atomic_fetch_sub(&c->u->conns, 1);
	free(c);
	return NULL;
}

int mesh_ui_run(struct mesh_ui *u)
{
	for (;;) {
		struct pollfd p[2] = {{.fd = u->lfd, .events = POLLIN}, {.fd = u->stop_fd, .events = POLLIN}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (p[1].revents)
			return 0;
		int fd = accept4(u->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE) {
				mesh_sleep_ns(100 * MESH_NS_PER_MS); /* out of fds: a pause, not a spin */
				continue;
			}
			return -errno;
		}
		struct conn *c = malloc(sizeof *c);
		if (c) {
			c->u = u;
			c->fd = fd;
			atomic_fetch_add(&u->conns, 1);
		}
		if (!c || mesh_thread_run(NULL, conn_main, c, MESH_THREAD_DETACHED) != 0) {
			if (c)
				atomic_fetch_sub(&u->conns, 1);
			free(c);
			close(fd);
		}
	}
}

void mesh_ui_free(struct mesh_ui *u)
{
	if (!u)
		return;
	if (u->lfd >= 0)
		close(u->lfd);
	u->lfd = -1;
	/* Connections still running (an events relay waits on meshd): a
	 * moment for them, then they are left to the process's exit, with u. */
	for (uint64_t end = mesh_mono_ns() + 2 * MESH_NS_PER_S; atomic_load(&u->conns) && mesh_mono_ns() < end;)
		mesh_sleep_ns(10 * MESH_NS_PER_MS);
	if (atomic_load(&u->conns))
		return;
	if (u->stop_fd >= 0)
		close(u->stop_fd);
	free(u->sock);
	free(u);
}
