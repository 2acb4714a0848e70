#include "base/http.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"

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

enum {
	ST_STATUS,
	ST_HEADER,
	ST_BODY_LEN,
	ST_CHUNK_SIZE,
	ST_CHUNK_DATA,
	ST_CHUNK_CR,
	ST_CHUNK_LF,
	ST_TRAILER,
	ST_BODY_EOF,
	ST_DONE,
	ST_ERROR,
};

static int is_tchar(unsigned char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return 1;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* HTAB, SP, VCHAR and obs-text: what a reason phrase or field value may hold. */
static int is_text(unsigned char c)
{
	return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
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
	r->state = ST_STATUS;
	r->why = "";
}

void mesh_http_response_release(struct mesh_http_response *r)
{
	mesh_buf_release(&r->body);
	mesh_buf_release(&r->line);
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

static int parse_status(struct mesh_http_response *r, const char *s, size_t n)
{
	if (n < 8 || memcmp(s, "HTTP/1.", 7) != 0 || s[7] < '0' || s[7] > '9')
		return fail(r, MESH_E_PROTO, "status line: bad version");
	if (n < 9 || s[8] != ' ')
		return fail(r, MESH_E_PROTO, "status line: no space after version");
	int code = 0;
	for (size_t i = 9; i < 12; i++) {
		if (i >= n || s[i] < '0' || s[i] > '9')
			return fail(r, MESH_E_PROTO, "status line: status is not 3 digits");
		code = code * 10 + (s[i] - '0');
	}
	if (n < 13 || s[12] != ' ')
		return fail(r, MESH_E_PROTO, "status line: no space after status");
	if (code < 100 || code > 599)
		return fail(r, MESH_E_PROTO, "status line: status out of 100..599");
	for (size_t i = 13; i < n; i++)
		if (!is_text((unsigned char)s[i]))
			return fail(r, MESH_E_PROTO, "status line: control byte in reason");
	r->version_minor = s[7] - '0';
	r->status = code;
	r->content_length = -1;
	r->chunked = 0;
	r->nheaders = 0;
	mesh_buf_reset(&r->hdrs);
	return 0;
}

/* Splits and checks "name: value"; the name is s[0, name_len), the value *v for *vn bytes. */
static int split_field(struct mesh_http_response *r, const char *s, size_t n, size_t *name_len, const char **v,
		       size_t *vn)
{
	size_t i = 0;
	if (s[0] == ' ' || s[0] == '\t')
		return fail(r, MESH_E_PROTO, "header: folded continuation line");
	while (i < n && is_tchar((unsigned char)s[i]))
		i++;
	if (i == 0 || i == n || s[i] != ':')
		return fail(r, MESH_E_PROTO, i < n && (s[i] == ' ' || s[i] == '\t') ? "header: space before colon"
										       : "header: bad field name");
	*name_len = i++;
	while (i < n && (s[i] == ' ' || s[i] == '\t'))
		i++;
	size_t end = n;
	while (end > i && (s[end - 1] == ' ' || s[end - 1] == '\t'))
		end--;
	for (size_t k = i; k < end; k++)
		if (!is_text((unsigned char)s[k]))
			return fail(r, MESH_E_PROTO, "header: control byte in value");
	*v = s + i;
	*vn = end - i;
	return 0;
}

static int parse_header(struct mesh_http_response *r, const char *s, size_t n)
{
	size_t nl, vn;
	const char *v;
	int rc;
	if ((rc = split_field(r, s, n, &nl, &v, &vn)))
		return rc;
	if (++r->nheaders > r->lim.max_headers)
		return fail(r, MESH_E_TOOBIG, "too many headers");
	if (nl == 14 && strncasecmp(s, "Content-Length", 14) == 0) {
		uint64_t len;
		rc = mesh_parse_u64n(v, vn, INT64_MAX, &len);
		if (rc == MESH_E_RANGE)
			return fail(r, MESH_E_TOOBIG, "content-length out of range");
		if (rc)
			return fail(r, MESH_E_PROTO, "content-length is not a number");
		if (r->content_length >= 0 && (uint64_t)r->content_length != len)
			return fail(r, MESH_E_PROTO, "conflicting content-length headers");
		r->content_length = (int64_t)len;
	} else if (nl == 17 && strncasecmp(s, "Transfer-Encoding", 17) == 0) {
		if (r->chunked)
			return fail(r, MESH_E_PROTO, "transfer-encoding repeated");
		if (vn != 7 || strncasecmp(v, "chunked", 7) != 0)
			return fail(r, MESH_E_PROTO, "unsupported transfer-encoding");
		r->chunked = 1;
	}
	if (mesh_buf_add(&r->hdrs, s, nl) || mesh_buf_add(&r->hdrs, "", 1) || mesh_buf_add(&r->hdrs, v, vn) ||
	    mesh_buf_add(&r->hdrs, "", 1))
		return fail(r, -ENOMEM, "out of memory");
	return 0;
}

static int end_of_head(struct mesh_http_response *r)
{
	if (r->status < 200 && r->status != 101) {
		/* Interim response: the real one follows. */
		r->status = 0;
		r->state = ST_STATUS;
		return 0;
	}
	r->head_done = 1;
	if (r->chunked && r->content_length >= 0)
		return fail(r, MESH_E_PROTO, "both transfer-encoding and content-length");
	if (r->no_body || r->status < 200 || r->status == 204 || r->status == 304)
		return finish(r);
	if (r->chunked) {
		r->state = ST_CHUNK_SIZE;
		return 0;
	}
	if (r->content_length >= 0) {
		if ((uint64_t)r->content_length > r->lim.max_body)
			return fail(r, MESH_E_TOOBIG, "content-length over the body limit");
		if (r->content_length == 0)
			return finish(r);
		r->remaining = (uint64_t)r->content_length;
		r->state = ST_BODY_LEN;
		return 0;
	}
	r->state = ST_BODY_EOF;
	return 0;
}

static int parse_chunk_size(struct mesh_http_response *r, const char *s, size_t n)
{
	uint64_t size = 0;
	size_t i = 0;
	int d;
	while (i < n && (d = hexval((unsigned char)s[i])) >= 0) {
		if (i == 15)
			return fail(r, MESH_E_TOOBIG, "chunk size too large");
		size = size * 16 + (uint64_t)d;
		i++;
	}
	if (i == 0)
		return fail(r, MESH_E_PROTO, "chunk size is not hex");
	size_t j = i;
	while (j < n && (s[j] == ' ' || s[j] == '\t'))
		j++;
	if (j < n && s[j] != ';')
		return fail(r, MESH_E_PROTO, "junk after chunk size");
	if (j == n && j != i)
		return fail(r, MESH_E_PROTO, "junk after chunk size");
	for (; j < n; j++)
		if (!is_text((unsigned char)s[j]))
			return fail(r, MESH_E_PROTO, "control byte in chunk extension");
	if (size == 0) {
		r->trailer_count = 0;
		r->state = ST_TRAILER;
		return 0;
	}
	if (!sinking(r) && size > r->lim.max_body - r->body.len)
		return fail(r, MESH_E_TOOBIG, "chunked body over the body limit");
	r->remaining = size;
	r->state = ST_CHUNK_DATA;
	return 0;
}

static int parse_trailer(struct mesh_http_response *r, const char *s, size_t n)
{
	size_t nl, vn;
	const char *v;
	int rc;
	if (n == 0)
		return finish(r);
	if ((rc = split_field(r, s, n, &nl, &v, &vn)))
		return rc;
	if (++r->trailer_count > r->lim.max_headers)
		return fail(r, MESH_E_TOOBIG, "too many trailer fields");
	return 0;
}

/* A complete line (CRLF included) in r->line: check its ending, dispatch. */
static int line_done(struct mesh_http_response *r)
{
	const char *s = r->line.p;
	size_t n = r->line.len;
	if (n < 2 || s[n - 2] != '\r')
		return fail(r, MESH_E_PROTO, "line ends in a bare LF");
	n -= 2;
	if (memchr(s, '\r', n))
		return fail(r, MESH_E_PROTO, "bare CR inside a line");
	switch (r->state) {
	case ST_STATUS:
		if (parse_status(r, s, n))
			return r->err;
		r->state = ST_HEADER;
		return 0;
	case ST_HEADER:
		return n == 0 ? end_of_head(r) : parse_header(r, s, n);
	case ST_CHUNK_SIZE:
		return parse_chunk_size(r, s, n);
	case ST_TRAILER:
		return parse_trailer(r, s, n);
	}
	return fail(r, MESH_E_PROTO, "internal state");
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

int mesh_http_response_feed(struct mesh_http_response *r, const void *data, size_t n, size_t *used)
{
	const char *p = data;
	size_t i = 0;
	int rc = 0;

	while (i < n && r->state != ST_DONE && r->state != ST_ERROR) {
		size_t avail = n - i, k;
		switch (r->state) {
		case ST_STATUS:
		case ST_HEADER:
		case ST_CHUNK_SIZE:
		case ST_TRAILER: {
			const char *nl = memchr(p + i, '\n', avail);
			k = nl ? (size_t)(nl - (p + i)) + 1 : avail;
			if (k > r->lim.max_line - r->line.len) {
				i += r->lim.max_line - r->line.len;
				rc = fail(r, MESH_E_TOOBIG, r->state == ST_STATUS   ? "status line too long"
							    : r->state == ST_HEADER ? "header line too long"
										    : "chunk line too long");
				break;
			}
			if (r->state != ST_CHUNK_SIZE) {
				if (k > r->lim.max_head - r->head_bytes) {
					i += r->lim.max_head - r->head_bytes;
					rc = fail(r, MESH_E_TOOBIG, "head too large");
					break;
				}
				r->head_bytes += k;
			}
			if (mesh_buf_add(&r->line, p + i, k)) {
				rc = fail(r, -ENOMEM, "out of memory");
				break;
			}
			i += k;
			if (nl) {
				rc = line_done(r);
				mesh_buf_reset(&r->line);
				if (rc < 0) {
					i--;
					break;
				}
			}
			break;
		}
		case ST_BODY_LEN:
		case ST_CHUNK_DATA:
			k = avail < r->remaining ? avail : (size_t)r->remaining;
			if ((rc = body_add(r, p + i, k)) < 0)
				break;
			i += k;
			r->remaining -= k;
			if (r->remaining == 0) {
				if (r->state == ST_BODY_LEN)
					rc = finish(r);
				else
					r->state = ST_CHUNK_CR;
			}
			break;
		case ST_CHUNK_CR:
		case ST_CHUNK_LF:
			if (p[i] != (r->state == ST_CHUNK_CR ? '\r' : '\n')) {
				rc = fail(r, MESH_E_PROTO, "chunk data not followed by CRLF");
				break;
			}
			i++;
			r->state = r->state == ST_CHUNK_CR ? ST_CHUNK_LF : ST_CHUNK_SIZE;
			break;
		case ST_BODY_EOF:
			if ((rc = body_add(r, p + i, avail)) < 0)
				break;
			i += avail;
			break;
		}
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
		if (!is_tchar((unsigned char)*s))
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
		while (s + i < eol && is_tchar((unsigned char)s[i]))
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
