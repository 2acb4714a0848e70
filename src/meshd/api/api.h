/* meshd's control API: HTTP/1.1 + JSON on a unix socket (libevent's evhttp
 * and jansson).  Routes and shapes are in docs/api.md.
 *
 * Caller protocol (meshd/main.c):
 *   1. meshd_api_start(&a, parts, path, &err) -- after meshd_core_new; it
 *      serves as soon as it returns (READY=1 may be sent then)
 *   2. meshd_api_quiesce(a)                  -- after meshd_core_run returned:
 *      stops accepting, answers 503 to any further request on a kept-alive
 *      connection, removes the socket; returns the requests still in flight
 *      (the caller makes them end, e.g. by stopping the programs they wait on)
 *   3. meshd_api_stop(a)                     -- before meshd_core_free: waits
 *      (at most 10 s) for the requests in flight to be answered, then for
 *      their threads, frees a
 *
 * One thread runs the HTTP event loop; each request's op runs on a thread
 * of its own (at most MESHD_API_MAX_CONNS calls and MESHD_API_MAX_CONTROL
 * other requests at once, counted apart; beyond, 503), so calls queued on
 * a hung worker never hold up `ps`, `stop` or `unload`.  A call whose
 * client closes its connection gives up waiting for a worker.  Every byte of a request is
 * untrusted: names are checked with meshd_api_name_ok, bodies are bounded by
 * MESHD_API_MAX_BODY (413 above). */
#ifndef MESH_MESHD_API_API_H
#define MESH_MESHD_API_API_H

#include <stddef.h>

struct meshd_core;
struct meshd_api;
struct meshd_jobs;
struct mesh_gw;

/* The parts of meshd the API and /metrics serve, wired by main.c, which
 * owns this and keeps it until after meshd_api_stop and
 * meshd_metrics_serve_stop. */
struct meshd_parts {
	struct meshd_core *core;
	struct meshd_jobs *jobs;    /* NULL: meshd runs no jobs (the job routes answer 503) */
	struct mesh_gw *_Atomic gw; /* meshd --http's gateway, set once it serves and
				     * cleared before it is freed; NULL: none */
	struct meshd_api *_Atomic api; /* the control API, set once it serves and
					* cleared before it stops; NULL: none */
};

#define MESHD_API_MAX_BODY (16u << 20)	/* request body bound, bytes */
#define MESHD_API_MAX_CONNS 64u		/* calls whose op runs at once */
#define MESHD_API_MAX_CONTROL 16u	/* other requests whose op runs at once, apart from calls */
#define MESHD_API_NAME_MAX 64u		/* program name length bound */

/* Binds the unix socket at path and starts serving.  The socket's directory
 * is created with mode 0700 when missing; the socket gets mode 0600.  A stale
 * socket file (nobody accepting) is replaced; a live one is refused with
 * -EADDRINUSE; a path that exists and is not a socket with -EEXIST; a path
 * longer than sun_path with -ENAMETOOLONG.  0 or a negative mesh error; on
 * error *err (when err is not NULL) gets a malloc'd message, and nothing is
 * left behind. */
int meshd_api_start(struct meshd_api **out, const struct meshd_parts *parts, const char *path, char **err);
/* SIGHUP and POST /v1/reload: the catalog read again -- meshd --http's
 * HTTP programs (mesh_gw_reload, docs/gateway.md "Reload") and the loaded
 * native programs (meshd_op_reload: each upgraded as `mesh load` does).
 * Each part logs its line.  *summary (malloc'd, the caller's): their lines,
 * one each, or "reloaded: nothing (...)".  0; MESH_E_PARSE when a manifest
 * was refused (the rest is done); another code when a part could not be
 * done at all (*summary says why); -ENOMEM (*summary NULL). */
int meshd_reload(const struct meshd_parts *parts, char **summary);
/* Stops accepting (see the protocol above); the number of requests in
 * flight.  Idempotent; NULL is a no-op (0). */
int meshd_api_quiesce(struct meshd_api *a);
/* The ops running now: *calls of them program calls (a call waiting for a
 * worker included), *others the rest. */
void meshd_api_running(struct meshd_api *a, unsigned *calls, unsigned *others);
/* Quiesces if not yet done, lets the requests in flight be answered (at
 * most 10 s), stops the server (joining its threads), frees a.  NULL is a
 * no-op. */
void meshd_api_stop(struct meshd_api *a);

/* 1 if name may name a program: 1..MESHD_API_NAME_MAX bytes of
 * [A-Za-z0-9_-], not starting with '-' (the catalog's rule, host/manifest.h;
 * so never "..", never a path, never needs escaping in a URL); else 0. */
int meshd_api_name_ok(const char *name);

/* The body of an error answer, {"error": "...", "code": "E_..."}, as the
 * API sends it: msg (any bytes; invalid UTF-8 becomes U+FFFD, docs/api.md),
 * or err's text when msg is NULL or empty.  malloc'd, NUL-terminated, its
 * length in *len (when not NULL); NULL only when out of memory. */
char *meshd_api_error_body(int err, const char *msg, size_t *len);

/* The HTTP status for a mesh error an op returned. */
int meshd_api_status_for(int err);

#endif
