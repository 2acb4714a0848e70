/* The client's side of HTTP/1.1: a response read by the framer's strict
 * reading (http/hframe.h: the one head parser and chunked-body reader),
 * its head kept to look its fields up; a request built; one exchange; a
 * listen address.  See http.h. */
#include "http/http.h"

#include "base/clock.h"
#include "base/err.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Where a response is: its head, a body (with a length or chunked: the
 * framer says where it ends), a body to the close, done, in error. */
enum { ST_HEAD, ST_BODY, ST_BODY_EOF, ST_DONE, ST_ERROR };

/* HTAB, SP, VCHAR and obs-text: what a field value may hold. */
static int is_text(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

void mesh_http_response_init(struct mesh_http_response *r, const struct mesh_http_limits *lim)
{
	static const struct mesh_http_limits def = MESH_HTTP_LIMITS_DEFAULT;
	memset(r, 0, sizeof *r);
	r->lim = lim ? *lim : def;
	if (!r->lim.max_line)
		r->lim.max_line = def.max_line;
	if (!r->lim.max_headers)
		r->lim.max_headers = def.max_headers;
	if (!r->lim.max_head)
		r->lim.max_head = def.max_head;
	if (!r->lim.max_body)
		r->lim.max_body = def.max_body;
	r->content_length = -1;
	r->state = ST_HEAD;
	r->why = "";
	mesh_hframe_init(&r->f);
	mesh_hframe_limits(&r->f, 1, 1, r->lim.max_line > UINT32_MAX ? UINT32_MAX : (uint32_t)r->lim.max_line,
			   r->lim.max_headers > UINT16_MAX ? UINT16_MAX : (uint16_t)r->lim.max_headers);
}

void mesh_http_response_release(struct mesh_http_response *r)
{
	mesh_buf_release(&r->body);
	mesh_buf_release(&r->head);
	mesh_buf_release(&r->hdrs);
}

/* The body goes to the caller's sink: a stream, not bounded by max_body. */
static int sinking(const struct mesh_http_response *r)
{
	return r->sink && r->status >= 200 && r->status <= 299;
}

static int fail(struct mesh_http_response *r, int err, const char *why)
{
	r->err = err;
	r->why = why;
	r->state = ST_ERROR;
	return err;
}

static int finish(struct mesh_http_response *r)
{
	/* The body is promised NUL-terminated even when empty. */
	if (mesh_buf_grow(&r->body, 0))
		return fail(r, -ENOMEM, "out of memory");
	r->body.p[r->body.len] = 0;
	r->done = 1;
	r->state = ST_DONE;
	return 1;
}

/* The final head is whole in r->head (the framer read it: CRLF lines, the
 * status line "HTTP/1.x NNN reason"): its version, status and fields. */
static int head_done(struct mesh_http_response *r, const struct mesh_hframe_ev *ev)
{
	const char *p = r->head.p, *name, *val;
	size_t n = r->head.len, at = 0, nl, vl;
	while (at < n && (p[at] == '\r' || p[at] == '\n'))
		at++;
	r->version_minor = p[at + 7] - '0';
	r->status = (int)ev->status;
	r->chunked = ev->chunked;
	r->content_length = ev->size;
	at = (size_t)((const char *)memchr(p + at, '\n', n - at) + 1 - p);
	while (mesh_hframe_field(p, n, &at, &name, &nl, &val, &vl)) {
		if (mesh_buf_add(&r->hdrs, name, nl) || mesh_buf_add(&r->hdrs, "", 1) || mesh_buf_add(&r->hdrs, val, vl) ||
		    mesh_buf_add(&r->hdrs, "", 1))
			return fail(r, -ENOMEM, "out of memory");
		r->nheaders++;
	}
	r->head_done = 1;
	if (ev->what & MESH_HFRAME_EV_END || r->status == 101)
		return finish(r); /* no body (1xx, 204, 304, a HEAD's), or a switch: none read here */
	if (r->content_length >= 0 && (uint64_t)r->content_length > r->lim.max_body)
		return fail(r, MESH_E_TOOBIG, "content-length over the body limit");
	r->state = r->chunked || r->content_length >= 0 ? ST_BODY : ST_BODY_EOF;
	return 0;
}

static int body_add(struct mesh_http_response *r, const char *p, size_t k)
{
	if (sinking(r)) {
		int rc = k ? r->sink(r->sink_arg, p, k) : 0;
		return rc < 0 ? fail(r, rc, "the body's reader stopped") : 0;
	}
	if (k > r->lim.max_body - r->body.len)
		return fail(r, MESH_E_TOOBIG, "body over the body limit");
	if (mesh_buf_add(&r->body, p, k))
		return fail(r, -ENOMEM, "out of memory");
	return 0;
}

/* One step of the framer over p[0..n): the bytes it took, or an error. */
static long step(struct mesh_http_response *r, const char *p, size_t n)
{
	struct mesh_hframe_ev ev;
	/* Every head byte (interim 1xx heads' too) counts toward max_head.
	 * The framer is shown no byte past it, so that what it finds there (a
	 * bad line that ends beyond the limit) cannot come first when the
	 * bytes arrive together and second when they arrive one by one: the
	 * answer never depends on how the bytes were cut. */
	if (r->state == ST_HEAD) {
		size_t room = r->lim.max_head - r->head_bytes;
		if (room == 0)
			return fail(r, MESH_E_TOOBIG, "head too large");
		if (n > room)
			n = room;
	}
	long k = mesh_hframe_step(&r->f, 1, p, n, &ev);
	if (k < 0)
		return fail(r, (int)k, mesh_hframe_why(&r->f, 1));
	if (r->state == ST_HEAD) {
		/* The final head's bytes are kept to read its fields. */
		r->head_bytes += (size_t)k;
		if (mesh_buf_add(&r->head, p, (size_t)k))
			return fail(r, -ENOMEM, "out of memory");
		if (ev.what & MESH_HFRAME_EV_HEAD) {
			if (ev.status < 200 && ev.status != 101) {
				mesh_buf_reset(&r->head); /* interim: the real one follows */
				return k;
			}
			int rc = head_done(r, &ev);
			return rc < 0 ? rc : k;
		}
		return k;
	}
	if ((ev.what & MESH_HFRAME_EV_CHUNK) && !sinking(r) && (uint64_t)ev.size > r->lim.max_body - r->body.len)
		return fail(r, MESH_E_TOOBIG, "chunked body over the body limit");
	if ((ev.what & MESH_HFRAME_EV_DATA) && body_add(r, ev.p, ev.n) < 0)
		return r->err;
	if (ev.what & MESH_HFRAME_EV_END)
		finish(r);
	return k;
}

int mesh_http_response_feed(struct mesh_http_response *r, const void *data, size_t n, size_t *used)
{
	const char *p = data;
	size_t i = 0;
	if (!r->asked) {
		/* The request it answers: a HEAD's answer has no body. */
		mesh_hframe_request(&r->f, r->no_body, 0);
		r->asked = 1;
	}
	while (i < n && r->state != ST_DONE && r->state != ST_ERROR) {
		long k = step(r, p + i, n - i);
		if (k < 0)
			break;
		i += (size_t)k;
	}
	if (used)
		*used = i;
	if (r->state == ST_ERROR)
		return r->err;
	return r->state == ST_DONE ? 1 : 0;
}

int mesh_http_response_eof(struct mesh_http_response *r)
{
	if (r->state == ST_DONE)
		return 1;
	if (r->state == ST_ERROR)
		return r->err;
	if (r->state == ST_BODY_EOF)
		return finish(r);
	return fail(r, MESH_E_CLOSED,
		    r->head_done ? "closed before the body was complete" : "closed before the head was complete");
}

size_t mesh_http_response_nheaders(const struct mesh_http_response *r)
{
	return r->head_done ? r->nheaders : 0;
}

int mesh_http_response_header_at(const struct mesh_http_response *r, size_t i, const char **name,
				 const char **value)
{
	if (!r->head_done || i >= r->nheaders)
		return MESH_E_RANGE;
	const char *p = r->hdrs.p;
	for (size_t k = 0; k < i; k++) {
		p += strlen(p) + 1;
		p += strlen(p) + 1;
	}
	if (name)
		*name = p;
	if (value)
		*value = p + strlen(p) + 1;
	return 0;
}

const char *mesh_http_response_header(const struct mesh_http_response *r, const char *name)
{
	if (!r->head_done)
		return NULL;
	const char *p = r->hdrs.p;
	for (size_t k = 0; k < r->nheaders; k++) {
		const char *v = p + strlen(p) + 1;
		if (strcasecmp(p, name) == 0)
			return v;
		p = v + strlen(v) + 1;
	}
	return NULL;
}

const char *mesh_http_response_why(const struct mesh_http_response *r)
{
	return r->state == ST_ERROR ? r->why : "";
}

int mesh_http_status_is_2xx(const struct mesh_http_response *r)
{
	return r->head_done && r->status >= 200 && r->status <= 299;
}

static int valid_token(const char *s)
{
	if (!s || !*s)
		return 0;
	for (; *s; s++)
		if (!mesh_hframe_tchar((unsigned char)*s))
			return 0;
	return 1;
}

/* No space, no CTL, no DEL, non-empty. */
static int valid_word(const char *s)
{
	if (!s || !*s)
		return 0;
	for (; *s; s++)
		if ((unsigned char)*s <= 0x20 || (unsigned char)*s == 0x7f)
			return 0;
	return 1;
}

static int valid_extra(const char *s)
{
	while (*s) {
		const char *eol = strstr(s, "\r\n");
		size_t i = 0;
		if (!eol)
			return 0;
		while (s + i < eol && mesh_hframe_tchar((unsigned char)s[i]))
			i++;
		if (i == 0 || s[i] != ':')
			return 0;
		for (const char *q = s + i + 1; q < eol; q++)
			if (!is_text((unsigned char)*q))
				return 0;
		s = eol + 2;
	}
	return 1;
}

int mesh_http_request_build(struct mesh_buf *b, const char *method, const char *host, const char *path,
			    const char *extra, const void *body, size_t body_len)
{
	size_t old = b->len;
	if (!valid_token(method) || !valid_word(host) || !valid_word(path) || path[0] != '/' ||
	    (extra && !valid_extra(extra)))
		return MESH_E_PARSE;
	int rc = mesh_buf_addf(b, "%s %s HTTP/1.1\r\nHost: %s\r\n%s", method, path, host, extra ? extra : "");
	if (!rc && body)
		rc = mesh_buf_addf(b, "Content-Length: %zu\r\n", body_len);
	if (!rc)
		rc = mesh_buf_adds(b, "Connection: close\r\n\r\n");
	if (!rc && body && body_len)
		rc = mesh_buf_add(b, body, body_len);
	if (rc) {
		b->len = old;
		if (b->p)
			b->p[old] = 0;
		return -ENOMEM;
	}
	return 0;
}

int mesh_http_request_get(struct mesh_buf *b, const char *host, const char *path)
{
	return mesh_http_request_build(b, "GET", host, path, NULL, NULL, 0);
}

/* Waits for events on fd until the deadline: 1 ready, 0 deadline, <0 error. */
static int wait_fd(int fd, short events, uint64_t deadline_ns)
{
	for (;;) {
		uint64_t now = mesh_mono_ns();
		if (now >= deadline_ns)
			return 0;
		uint64_t left = deadline_ns - now;
		struct timespec ts = {(time_t)(left / MESH_NS_PER_S), (long)(left % MESH_NS_PER_S)};
		struct pollfd pfd = {fd, events, 0};
		int n = ppoll(&pfd, 1, &ts, NULL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n > 0)
			return 1;
	}
}

int mesh_http_exchange(int fd, const void *req, size_t n, struct mesh_http_response *r, uint64_t deadline_ns)
{
	const char *p = req;
	size_t off = 0;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;

	while (off < n) {
		ssize_t k = send(fd, p + off, n - off, MSG_NOSIGNAL);
		if (k > 0) {
			off += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int w = wait_fd(fd, POLLOUT, deadline_ns);
			if (w < 0)
				return w;
			if (w == 0)
				return MESH_E_TIMEOUT;
			continue;
		}
		/* The peer may have answered and closed early (an error
		 * response): read what it sent before giving up. */
		if (errno == EPIPE || errno == ECONNRESET)
			break;
		return -errno;
	}

	char buf[16384];
	for (;;) {
		ssize_t k = recv(fd, buf, sizeof buf, 0);
		if (k > 0) {
			int rc = mesh_http_response_feed(r, buf, (size_t)k, NULL);
			if (rc < 0)
				return rc;
			if (rc == 1)
				return 0;
			continue;
		}
		if (k == 0) {
			int rc = mesh_http_response_eof(r);
			return rc == 1 ? 0 : rc;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		int w = wait_fd(fd, POLLIN, deadline_ns);
		if (w < 0)
			return w;
		if (w == 0)
			return MESH_E_TIMEOUT;
	}
}

void mesh_addr_text(const struct sockaddr *sa, char *out, size_t cap)
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

int mesh_addr_parse(const char *addr, struct sockaddr_storage *ss, socklen_t *len, int *loopback)
{
	char host[64];
	const char *colon;
	memset(ss, 0, sizeof *ss);
	if (addr[0] == '[') {
		const char *rb = strchr(addr, ']');
		if (!rb || rb[1] != ':' || (size_t)(rb - addr - 1) >= sizeof host)
			return MESH_E_PARSE;
		snprintf(host, sizeof host, "%.*s", (int)(rb - addr - 1), addr + 1);
		colon = rb + 1;
	} else {
		colon = strrchr(addr, ':');
		if (!colon || (size_t)(colon - addr) >= sizeof host || memchr(addr, ':', (size_t)(colon - addr)))
			return MESH_E_PARSE;
		snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
	}
	char *end;
	errno = 0;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (!colon[1] || *end || errno || port > 65535 || colon[1] < '0' || colon[1] > '9')
		return MESH_E_PARSE;
	if (!strcmp(host, "localhost"))
		strcpy(host, "127.0.0.1");
	struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
	if (addr[0] != '[' && inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)port);
		*len = sizeof *v4;
		*loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
		return 0;
	}
	if (addr[0] == '[' && inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)port);
		*len = sizeof *v6;
		*loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr) ||
			    (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr) && v6->sin6_addr.s6_addr[12] == 127);
		return 0;
	}
	return MESH_E_PARSE;
}
