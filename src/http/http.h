/* A bounded, incremental HTTP/1.1 response parser, a request builder and a
 * deadline-bounded request/response exchange over a connected socket.
 *
 * Generic: it knows nothing about what the response means (the autoscale
 * probe and meshd's CLI client both use it).  Every byte fed to it is
 * untrusted; every limit is enforced as bytes arrive, so a peer can neither
 * grow memory past the limits nor make the parser accept a malformed message.
 * The message is read by the framer (http/hframe.h, a strict reader of
 * responses): the one head parser and chunked-body reader of the tree.
 *
 * What is accepted (strict, after RFC 9112):
 *   status-line = "HTTP/1." DIGIT SP 3DIGIT SP reason CRLF
 *                 status 100..599; reason any of HTAB, SP, VCHAR, 0x80-0xFF,
 *                 possibly empty (the SP before it is still required)
 *   header      = token ":" OWS value OWS CRLF   (no space before ':', no
 *                 obs-fold continuation lines, no CTL but HTAB in a value)
 *   end of head = CRLF
 * Every line ends in CRLF; a bare LF or a CR not followed by LF is malformed.
 * Interim 1xx responses (except 101) are skipped and the next head parsed;
 * their bytes count toward max_head.
 *
 * Body framing, in this order:
 *   - none for 1xx, 204, 304 and when `no_body` is set (a HEAD request);
 *   - Transfer-Encoding: the only coding accepted is exactly "chunked"
 *     (case-insensitive); Transfer-Encoding together with Content-Length is
 *     refused (request-smuggling shape); chunk sizes are hex, at most 15
 *     digits, chunk extensions are skipped, trailers are parsed as headers
 *     (same limits) and dropped;
 *   - Content-Length: digits only; repeated headers must agree; a length over
 *     max_body is refused as soon as the header is seen;
 *   - otherwise the body runs until the peer closes: mesh_http_response_eof().
 *
 * Errors (negative, base/err.h): MESH_E_PROTO for a malformed message,
 * MESH_E_TOOBIG for one past a limit, MESH_E_CLOSED for a peer that closed
 * before the response was complete, -ENOMEM.  After an error the parser
 * stays in error (every further call returns the same code) and
 * mesh_http_response_why() says what was wrong in a short static phrase,
 * e.g. "status line: bad version" or "header line too long". */
#ifndef MESH_HTTP_HTTP_H
#define MESH_HTTP_HTTP_H

#include "base/buf.h"
#include "http/hframe.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct mesh_http_limits {
	size_t max_line;    /* status, header, chunk-size or trailer line, CRLF included */
	size_t max_headers; /* header fields per head (and per trailer block) */
	size_t max_head;    /* all head bytes (interim 1xx heads included) */
	size_t max_body;    /* decoded body bytes */
};
#define MESH_HTTP_MAX_LINE 8192
#define MESH_HTTP_MAX_HEADERS 100
#define MESH_HTTP_MAX_HEAD 65536
#define MESH_HTTP_MAX_BODY (1u << 20)
#define MESH_HTTP_LIMITS_DEFAULT {MESH_HTTP_MAX_LINE, MESH_HTTP_MAX_HEADERS, MESH_HTTP_MAX_HEAD, MESH_HTTP_MAX_BODY}

struct mesh_http_response {
	/* Results: valid once head_done (status, version, headers) / done (body). */
	int version_minor;     /* the x of HTTP/1.x */
	int status;            /* 100..599; 0 before the status line is parsed */
	int64_t content_length; /* -1 when absent */
	int chunked;           /* 1 when the body is chunked */
	int head_done;         /* the final (non-1xx) head is complete */
	int done;              /* the whole response is complete */
	int no_body;           /* set by the caller before feeding: response to HEAD */
	struct mesh_buf body;  /* decoded body, NUL-terminated (the NUL is not counted) */
	/* Set by the caller after init, before feeding (optional): the decoded
	 * body of a 2xx response goes to sink as it arrives, not into body, and
	 * max_body does not bound it (a stream).  sink returns 0, or a negative
	 * code: the parser then fails with it ("the body's reader stopped"). */
	int (*sink)(void *arg, const void *p, size_t n);
	void *sink_arg;

	/* Private. */
	struct mesh_http_limits lim;
	int state, err, asked;
	const char *why;
	struct mesh_hframe f;  /* its reading (the responses side, strict) */
	struct mesh_buf head;  /* the head being read (the final one's bytes) */
	struct mesh_buf hdrs;  /* "name\0value\0" pairs of the final head */
	size_t nheaders, head_bytes;
};

/* Prepares r for one response.  lim NULL means MESH_HTTP_LIMITS_DEFAULT; a
 * zero field in lim also takes its default.  Cannot fail. */
void mesh_http_response_init(struct mesh_http_response *r, const struct mesh_http_limits *lim);
/* Frees what r holds; r may be init'ed again. */
void mesh_http_response_release(struct mesh_http_response *r);

/* Feeds the next n bytes of the stream (n may be 0).  Returns 1 when the
 * response is complete (r->done), 0 when more bytes are needed, or a
 * negative error.  *used (may be NULL) receives how many of the n bytes
 * belong to this response: on 1 the rest is the start of whatever follows
 * (pipelining); on 0 it is n; on error, about where the fault was found.
 * Feeding a done parser returns 1 with *used = 0. */
int mesh_http_response_feed(struct mesh_http_response *r, const void *data, size_t n, size_t *used);
/* Tells the parser the peer closed.  Returns 1 when that completes the
 * response (a body delimited by close, or already done), else MESH_E_CLOSED
 * (or the earlier error) and the parser is in error. */
int mesh_http_response_eof(struct mesh_http_response *r);

/* The value of the first header named name (case-insensitive), or NULL.
 * Valid until release.  Only the final head's headers are kept. */
const char *mesh_http_response_header(const struct mesh_http_response *r, const char *name);
/* Number of headers, and the i-th (0-based) name/value; 0 or MESH_E_RANGE. */
size_t mesh_http_response_nheaders(const struct mesh_http_response *r);
int mesh_http_response_header_at(const struct mesh_http_response *r, size_t i, const char **name,
				 const char **value);
/* A short static phrase for the last error ("" when none). */
const char *mesh_http_response_why(const struct mesh_http_response *r);
/* 1 when the final status is 200..299. */
int mesh_http_status_is_2xx(const struct mesh_http_response *r);

/* Appends one request to b:
 *   METHOD SP path SP "HTTP/1.1" CRLF  Host: host CRLF
 *   [extra header lines]  [Content-Length: n CRLF]  Connection: close CRLF CRLF  [body]
 * method is a token ("GET", "POST"), path starts with '/' and holds no
 * space or CTL, host is "name", "name:port" or "[v6]:port" without space or
 * CTL (for a unix socket use "localhost").  extra is NULL or complete header
 * lines "Name: value\r\n" (validated: token name, no bare CR/LF, no empty
 * line).  Content-Length is sent when body is not NULL (body_len may be 0).
 * Returns 0, MESH_E_PARSE for a refused argument (b unchanged), -ENOMEM. */
int mesh_http_request_build(struct mesh_buf *b, const char *method, const char *host, const char *path,
			    const char *extra, const void *body, size_t body_len);
/* mesh_http_request_build(b, "GET", host, path, NULL, NULL, 0). */
int mesh_http_request_get(struct mesh_buf *b, const char *host, const char *path);

/* One exchange on a connected stream socket fd: sends the n bytes of req,
 * then feeds r (already init'ed by the caller, limits and no_body chosen)
 * until the response is complete, the peer closes, an error, or the
 * monotonic deadline (mesh_mono_ns() clock) passes.  fd is switched to
 * O_NONBLOCK and stays so; it is not closed.  SIGPIPE is never raised
 * (MSG_NOSIGNAL).  Returns 0 (r->done), MESH_E_TIMEOUT, MESH_E_CLOSED,
 * a parser error, or a negated errno from send/recv/poll.  Bytes the peer
 * sent after the complete response are ignored. */
int mesh_http_exchange(int fd, const void *req, size_t n, struct mesh_http_response *r, uint64_t deadline_ns);

/* A listen address "HOST:PORT" or "[V6]:PORT" ("localhost:PORT" is
 * 127.0.0.1; numeric hosts only) into *ss and *len; *loopback says whether
 * the host is a loopback address.  0 or MESH_E_PARSE. */
struct sockaddr_storage;
int mesh_addr_parse(const char *addr, struct sockaddr_storage *ss, socklen_t *len, int *loopback);
/* An IPv4 or IPv6 socket address as "a.b.c.d:port" or "[v6]:port" into out
 * (cut to cap); "?" for the host of another family. */
struct sockaddr;
void mesh_addr_text(const struct sockaddr *sa, char *out, size_t cap);

#endif
