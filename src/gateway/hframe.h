/* An HTTP/1.1 framer for a relayed connection: it watches the bytes of both
 * directions go by (it stores none of them, copies nothing) and knows where
 * each request and each response begins and ends, so that `mesh serve
 * --http` can count requests in flight instead of open sockets.
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
 * (Transfer-Encoding: chunked), Content-Length bytes, or empty; a request
 * with another transfer coding, with both headers, or with Content-Length
 * values that disagree is malformed.  A response body is empty for HEAD,
 * 1xx, 204 and 304; else chunked, Content-Length, or until the server
 * closes.  Lines end in CRLF or a bare LF; header names are tokens; a
 * folded header line (leading space) is malformed.  A head (request or
 * status line, headers; a trailer block) longer than MESH_HFRAME_MAX_HEAD
 * bytes is refused.
 *
 * Errors: MESH_E_PROTO (malformed), MESH_E_TOOBIG (a head or the pipeline
 * too long); after an error the side stays in error and why() says what.
 *
 * Caller protocol: mesh_hframe_init(&f); feed every byte of each direction
 * in order (mesh_hframe_feed with dir 0 = client to server, 1 = server to
 * client; mesh_hframe_eof when a direction ends); read f.inflight after
 * each call.  No allocation, nothing to release. */
#ifndef MESH_GATEWAY_HFRAME_H
#define MESH_GATEWAY_HFRAME_H

#include <stddef.h>
#include <stdint.h>

#define MESH_HFRAME_MAX_HEAD (64u * 1024u)
#define MESH_HFRAME_MAX_PIPELINE 64

struct mesh_hframe_side {
	uint8_t state, sub;    /* private: where in the message */
	uint8_t chunked, has_cl, te_other, ctl;
	uint8_t nlen, vlen;    /* bytes kept of the current name / value */
	char name[20], val[24];
	uint16_t status;       /* response side: the status of the head being read */
	uint32_t head_bytes;
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
};

void mesh_hframe_init(struct mesh_hframe *f);
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

#endif
