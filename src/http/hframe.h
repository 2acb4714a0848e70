/* The one HTTP/1.1 head parser and message framer (RFC 9112).  It watches
 * the bytes of both directions go by (it stores none of them, copies
 * nothing) and knows where each request and each response begins and ends,
 * so that `mesh serve --http` can count requests in flight instead of open
 * sockets; the gateway reads a request's head by it (mesh_hframe_parse_request
 * below) and a chunked request body (mesh_hframe_step); the client's
 * response parser (http/http.h: the warmth probe, the CLI's control-API
 * client) reads a response by it, strictly (mesh_hframe_limits).
 *
 * A request is in flight from the first byte of its request line to the
 * last byte of its response: a streaming (chunked, or delimited by the
 * close) response is in flight until it ends; interim 1xx responses do not
 * end it.  A connection that switched protocols (101) or tunnels (2xx to
 * CONNECT) keeps its request in flight until it closes.  Pipelined
 * requests are answered in order (at most MESH_HFRAME_MAX_PIPELINE
 * outstanding).
 *
 * Framing (RFC 9112, section 6): a request body is chunked
 * (Transfer-Encoding: chunked, that coding alone, once), Content-Length
 * bytes, or empty; a request with another transfer coding, with both
 * headers, or with Content-Length twice (even agreeing) is malformed.  A
 * response body is empty for HEAD, 1xx, 204 and 304; else chunked (the
 * last coding), Content-Length (repeated only with one value), or until
 * the server closes.
 *
 * Syntax, strict where a request could be read two ways (request
 * smuggling): a request's lines end in CRLF (a bare LF, or a CR without
 * LF, is malformed; its chunk lines too); a response's in CRLF or a bare
 * LF (CRLF only for a strict reader, below).  The request line is method
 * SP target SP version, one space each, a token method and a target of
 * visible characters; a version is "HTTP/1." DIGIT (case-sensitive); a
 * status line is version SP 3DIGIT (100 or more) [SP reason].  A header is
 * a token name, ':' at once (no whitespace before it), optional SP/HTAB, a
 * value without control characters but HTAB (no NUL, no DEL); a folded
 * line (leading SP or HTAB: obs-fold) is malformed.  A head (request or
 * status line, headers; a trailer block) longer than MESH_HFRAME_MAX_HEAD
 * bytes is refused; a chunk size of more than 15 hex digits too.
 *
 * A strict reader of responses (mesh_hframe_limits) reads them by the
 * requests' rules: CRLF lines only; a status line "HTTP/1." DIGIT SP 3DIGIT
 * SP reason, 100..599, no DEL in the reason; Transfer-Encoding "chunked"
 * alone, once, never with Content-Length; no control character in a chunk
 * extension.  It may also bound each line and the fields of each head.
 *
 * The same reading of a request, for a proxy that parses a request's head
 * itself (the gateway): mesh_hframe_head_end, mesh_hframe_parse_request,
 * mesh_hframe_head_forward below.
 *
 * Errors: MESH_E_PROTO (malformed), MESH_E_TOOBIG (a head, a line, the
 * fields, a chunk size or a response's Content-Length past a bound, or the
 * pipeline too long); after an error the side stays in error and why()
 * says what.
 *
 * Caller protocol: mesh_hframe_init(&f); feed every byte of each direction
 * in order (mesh_hframe_feed with dir 0 = client to server, 1 = server to
 * client; mesh_hframe_eof when a direction ends); read f.inflight after
 * each call.  A reader of one message's parts (its head, its body's bytes,
 * its end) calls mesh_hframe_step instead of mesh_hframe_feed.  No
 * allocation, nothing to release. */
#ifndef MESH_HTTP_HFRAME_H
#define MESH_HTTP_HFRAME_H

#include <stddef.h>
#include <stdint.h>

#define MESH_HFRAME_MAX_HEAD (64u * 1024u)
#define MESH_HFRAME_MAX_PIPELINE 64

struct mesh_hframe_side {
	uint8_t state, sub;    /* private: where in the message */
	uint8_t chunked, has_cl, te_other;
	uint8_t strict;        /* the strict rules (always on the requests side) */
	uint8_t nlen, vlen;    /* bytes kept of the current name / value */
	char name[20], val[24];
	uint16_t status;       /* response side: the status of the head being read */
	uint16_t nfields, max_fields; /* of the head or trailer block being read; the bound (0: none) */
	uint32_t head_bytes;
	uint32_t line_bytes, max_line; /* of the line being read; the bound (0: the head's) */
	uint64_t remaining;    /* body or chunk bytes left; a Content-Length */
	uint64_t cl;
	int err;
	const char *why;
};

struct mesh_hframe {
	struct mesh_hframe_side side[2]; /* [0] requests, [1] responses */
	unsigned inflight;     /* requests begun and not yet answered in full */
	uint64_t head_bits, connect_bits; /* per outstanding request, oldest at bit 0 */
	uint64_t requests, responses; /* counted so far (final responses) */
	int tunnel;            /* after 101 / CONNECT 2xx: bytes are opaque */
	/* private: the events of the byte being read (mesh_hframe_step) */
	uint8_t evs, ev_chunked;
	uint16_t ev_status;
	int64_t ev_size;
};

/* An empty framer: both sides between messages, the requests side strict,
 * no bound but the head's.  Cannot fail. */
void mesh_hframe_init(struct mesh_hframe *f);
/* How side dir is read, set after init and before its first byte: strict
 * (the rules above; the requests side is strict whatever this says), the
 * longest line, its CRLF included (0: the head's bound alone), the most
 * fields in a head or a trailer block (0: any; past it MESH_E_TOOBIG). */
void mesh_hframe_limits(struct mesh_hframe *f, int dir, int strict, uint32_t max_line, uint16_t max_fields);
/* One request the caller framed itself (its head parsed, its body of
 * Content-Length bytes or none sent whole), counted without feeding its
 * bytes: the responses side then expects its answer (head: it was HEAD,
 * whose answer has no body; connect: CONNECT).  Only while the requests
 * side is between messages (it is not fed at all).  0, or MESH_E_TOOBIG
 * (the pipeline is full). */
int mesh_hframe_request(struct mesh_hframe *f, int head, int connect);
/* Feeds n bytes of direction dir.  0, or the side's error (see above). */
int mesh_hframe_feed(struct mesh_hframe *f, int dir, const char *p, size_t n);
/* Direction dir ended.  A response delimited by the close is complete
 * (inflight drops); anything else cut short stays counted (the caller
 * ends the connection, and with it what is in flight).  Returns 0. */
int mesh_hframe_eof(struct mesh_hframe *f, int dir);
/* A short static phrase for the error of side dir ("" when none). */
const char *mesh_hframe_why(const struct mesh_hframe *f, int dir);
/* 1 while the responses side is inside a message (a byte of a final
 * response, or of an interim one not yet whole, was fed and its end was
 * not), or in error or a tunnel; 0 between messages.  A proxy that loses
 * the server while requests are in flight and this is 0 may still answer
 * the oldest of them itself (a 502); else it can only cut the connection. */
int mesh_hframe_answer_begun(const struct mesh_hframe *f);

/* Where side dir is: 0 between messages (or in a tunnel, or in error), 1
 * inside a head (a byte of it fed, its blank line not yet), 2 inside a
 * body or a trailer block.  A proxy bounds how long a client may take over
 * a request with it (mesh serve's header and body timeouts). */
int mesh_hframe_reading(const struct mesh_hframe *f, int dir);

/* One message's parts, for a reader that decodes it (a response's head and
 * body, a chunked request body): mesh_hframe_step reads like
 * mesh_hframe_feed but stops after the byte, or the run of body bytes, at
 * which something happened, and says what in ev->what (a set of bits):
 *   MESH_HFRAME_EV_HEAD   a head is whole (an interim 1xx one too): its
 *                         status (responses), chunked (its body is), size
 *                         (its Content-Length; -1: none)
 *   MESH_HFRAME_EV_CHUNK  a chunk's size line is whole: size (0: the last)
 *   MESH_HFRAME_EV_DATA   p, n: body bytes, a chunk's data (its framing
 *                         taken off) or a body delimited by its length or
 *                         by the close (all the bytes given, then)
 *   MESH_HFRAME_EV_END    the message ended (its last byte, or at the head
 *                         for one without a body; mesh_hframe_eof ends one
 *                         delimited by the close)
 * Returns the bytes taken (n when nothing happened), or the side's error.
 * Of a connection that switched protocols (101, a CONNECT's 2xx) every
 * byte is taken and nothing happens. */
#define MESH_HFRAME_EV_HEAD 1u
#define MESH_HFRAME_EV_CHUNK 2u
#define MESH_HFRAME_EV_DATA 4u
#define MESH_HFRAME_EV_END 8u
struct mesh_hframe_ev {
	unsigned what;
	unsigned status;
	int chunked;
	int64_t size;
	const char *p;
	size_t n;
};
long mesh_hframe_step(struct mesh_hframe *f, int dir, const char *p, size_t n, struct mesh_hframe_ev *ev);

/* RFC 9110's tchar: a byte of a token (a method, a field name). */
int mesh_hframe_tchar(unsigned char c);
/* The header field whose line starts at *at in a head p[0..n) the framer
 * read (CRLF lines: a request's, or a strict reader's response; *at the
 * offset of the line after the first, at first): its name and value (OWS
 * trimmed, not NUL-terminated); *at moves to the next line.  0 at the
 * head's blank line. */
int mesh_hframe_field(const char *p, size_t n, size_t *at, const char **name, size_t *nlen, const char **val,
		      size_t *vlen);

/* A request's head read whole, for a proxy (the gateway):
 *   1. n = mesh_hframe_head_end(buf, have, &scanned) as bytes arrive
 *      (scanned 0 at first; 0: not whole yet);
 *   2. mesh_hframe_parse_request(buf, n, &h): the framer's request side
 *      over those bytes (the rules above) and what a proxy needs of them;
 *   3. before the head goes on: mesh_hframe_head_forward(buf, &h). */
#define MESH_HFRAME_MAX_FIELDS 128 /* header fields in a parsed request head */

struct mesh_hframe_head {
	size_t len;		 /* the head's bytes, its blank line included */
	size_t line_off;	 /* the request line (after empty lines before it) */
	size_t line_len;	 /* ... its CRLF included */
	size_t method_len;	 /* the method, at line_off */
	size_t target_off, target_len;
	int minor;		 /* HTTP/1.minor */
	int chunked;		 /* the body is chunked (Transfer-Encoding: chunked) */
	uint64_t content_length; /* else its length (0: none) */
	int close;		 /* Connection: close, or HTTP/1.0 */
	int expect;		 /* Expect: 0 none, 1 100-continue, 2 another expectation */
	unsigned nfields;	 /* header fields */
	const char *why;	 /* a short static phrase when the parse failed */
};

/* The length of the request head at the start of p[0..n): up to and with
 * its first empty line, empty lines before the request line included; 0
 * while none is whole.  An empty line ends it whatever the line ends (CRLF
 * or a bare LF), so that a head with bare LFs ends and is refused by the
 * parse, not waited for.  *scanned: where the search goes on at the next
 * call over the same bytes and more (0 at first).  Cannot fail. */
size_t mesh_hframe_head_end(const char *p, size_t n, size_t *scanned);
/* Parses the request head p[0..n) (n from mesh_hframe_head_end) into *h.
 * 0; MESH_E_PROTO for a malformed head (h->why says what); MESH_E_TOOBIG
 * for one over MESH_HFRAME_MAX_HEAD bytes or MESH_HFRAME_MAX_FIELDS
 * fields.  Reads p only. */
int mesh_hframe_parse_request(const char *p, size_t n, struct mesh_hframe_head *h);
/* Makes p's head (parsed into h) what a proxy sends on, in place, without
 * moving its request line or anything after the head: the header fields
 * it keeps are moved to the end of the head, and their offset returned
 * (they and the blank line are p[offset .. h->len); the request line and
 * the bytes before the offset are left to the caller, which sends its own
 * line).  Dropped: the hop-by-hop fields (Connection, Keep-Alive,
 * Proxy-Connection, TE, Transfer-Encoding, Upgrade, Trailer; RFC 9110
 * 7.6.1), those the Connection fields name (but Content-Length and Host;
 * the first 32 names), and Expect (the proxy answers it).  Cannot fail; calling it again on the
 * same head is not allowed (h describes the bytes before). */
size_t mesh_hframe_head_forward(char *p, const struct mesh_hframe_head *h);

#endif
