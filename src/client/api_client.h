/* The client side of meshd's control API (what `mesh load|ps|call|...` use):
 * one HTTP/1.1 request over the unix socket, one bounded response.
 *
 * This file needs only base/ (no libmicrohttpd, no core), so `mesh` links
 * it without pulling in the daemon. */
#ifndef MESH_CLIENT_API_CLIENT_H
#define MESH_CLIENT_API_CLIENT_H

#include <stddef.h>
#include <stdint.h>

/* A response larger than this is refused (MESH_E_TOOBIG). */
#define MESHD_CLIENT_MAX_RESPONSE (64u << 20)

/* The socket meshd serves on and mesh talks to, into buf: $MESH_SOCKET when
 * set and non-empty, else $XDG_RUNTIME_DIR/mesh/meshd.sock when
 * XDG_RUNTIME_DIR is set (absolute), else /tmp/mesh-<uid>/meshd.sock.
 * 0 or -ENAMETOOLONG. */
int meshd_socket_default(char *buf, size_t n);

struct meshd_reply {
	int status;	     /* HTTP status */
	char *body;	     /* malloc'd, NUL-terminated (not counted in len) */
	size_t len;
	char type[128];	     /* Content-Type, "" if none (cut at 127 bytes) */
};
#define MESHD_REPLY_INIT {0, NULL, 0, {0}}

/* A meshd of this user started less than this ago that will serve the
 * socket (its --socket, or the default) but does not listen yet: a request
 * waits for it instead of failing (`meshd ... &` then `mesh call` at once). */
#define MESHD_CLIENT_START_WAIT_NS (15ull * 1000000000ull)

/* Sends `method target` with body (n bytes; NULL/0 for none) to the meshd at
 * sock and reads the whole response (parsed by http/http.h), waiting at
 * most timeout_ns (0: a day) for it.  Nobody listens at sock but a meshd
 * for it is starting (MESHD_CLIENT_START_WAIT_NS): waits for it to serve.
 * 0 with *out filled (any HTTP status), or:
 *   a negated connect(2) errno (-ENOENT, -ECONNREFUSED, -EACCES, ...) when
 *     meshd cannot be reached -- see meshd_client_unreachable;
 *   MESH_E_PEER when the socket is served by a uid other than ours and
 *     root (SO_PEERCRED): nothing was sent;
 *   MESH_E_TIMEOUT, MESH_E_CLOSED (no or a cut response), MESH_E_PROTO (not
 *     HTTP), MESH_E_TOOBIG, -errno.
 * On error *out is left empty.  Release *out with meshd_reply_release. */
int meshd_client_request(const char *sock, const char *method, const char *target, const void *body, size_t n,
			 uint64_t timeout_ns, struct meshd_reply *out);
/* meshd_client_request, but the body of a 2xx answer goes to sink as it
 * arrives (a streamed call's parts, chunk by chunk), not into out->body, and
 * is not bounded by MESHD_CLIENT_MAX_RESPONSE; other answers are read whole
 * as above.  sink returns 0 or a negative code that ends the exchange with
 * it.  A stream cut before its end (the call failed after parts were sent)
 * is MESH_E_CLOSED, after sink saw the parts that came. */
int meshd_client_request_stream(const char *sock, const char *method, const char *target, const void *body, size_t n,
				uint64_t timeout_ns, int (*sink)(void *arg, const void *p, size_t n), void *arg,
				struct meshd_reply *out);
/* 1 if err (from meshd_client_request) means nobody serves at the socket. */
int meshd_client_unreachable(int err);
void meshd_reply_release(struct meshd_reply *r);

/* Where a page of GET /v1/jobs/<id>/results leaves off, from its
 * Content-Type's "; next=K; end=E[; missing=C]" (docs/api.md): 0, or -1
 * when next or end is not there as a number.  *missing: UINT64_MAX when
 * the page names none. */
int meshd_results_page(const char *type, uint64_t *next, int *end, uint64_t *missing);

/* For a reply with status >= 400: the mesh error its JSON body names in
 * "code" (MESH_E_PROTO if none or unknown), and in *msg (malloc'd, caller
 * frees; never NULL unless out of memory) its "error" text, or the status
 * line when the body is not meshd's error JSON. */
int meshd_reply_error(const struct meshd_reply *r, char **msg);

#endif
