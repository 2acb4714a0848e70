/* The bounded warmth probe: is the model server at a target warm?
 *
 * One probe = resolve the target, connect without blocking (bounded), send
 * `GET <path> HTTP/1.1` and read the whole response (bounded), then judge:
 *
 *   warm  iff the status line is a real 2xx (http/http.h parses it strictly)
 *         and, when a model name is given, the JSON body lists that model:
 *           OpenAI style  {"data":   [{"id":   "NAME"}, ...]}   (vLLM, llama.cpp, ...)
 *           Ollama style  {"models": [{"name": "NAME"} or {"model": "NAME"}, ...]}
 *         A server that answers 200 before its model is loaded is cold.
 *   cold  otherwise, with the reason: refused, connect timed out, no answer,
 *         closed early, malformed or oversized response, non-2xx status,
 *         body not JSON, model not listed.
 *
 * Bounds (each from its own phase start; the whole probe ends within
 * resolve + connect + response timeouts plus scheduling noise):
 *   resolve   numeric IPv4/IPv6 literals are parsed inline (no lookup);
 *             any other name goes to getaddrinfo() in a detached thread that
 *             the probe waits for at most resolve_timeout (getaddrinfo itself
 *             cannot be interrupted; a late answer is freed by the thread).
 *   connect   non-blocking connect + poll, all addresses of the name tried
 *             in order within one connect_timeout (default 1 s).
 *   response  from connected to the complete response: response_timeout
 *             (default 2 s) for sending the request and reading every byte;
 *             a server that never answers or dribbles is cut at the bound.
 *
 * The default target is loopback: 127.0.0.1:7861 (the seed's port), path
 * /v1/models.  Nothing is ever sent anywhere the caller did not name. */
#ifndef MESH_AUTOSCALE_PROBE_H
#define MESH_AUTOSCALE_PROBE_H

#include "http/http.h"

#include <stddef.h>
#include <stdint.h>

#define MESH_PROBE_DEFAULT_HOST "127.0.0.1"
#define MESH_PROBE_DEFAULT_PORT 7861
#define MESH_PROBE_DEFAULT_PATH "/v1/models"

struct mesh_probe_target {
	char host[256];  /* name or literal, IPv6 without brackets */
	uint16_t port;   /* 1..65535 */
	char path[1024]; /* starts with '/' */
};

/* Fills t with the default target. */
void mesh_probe_target_default(struct mesh_probe_target *t);
/* Parses a target; missing parts keep their defaults:
 *   "host", "host:port", "1.2.3.4:port", "[::1]:port", "[::1]", "::1",
 *   "http://host[:port][/path]"  (an http URL without a path probes
 *   MESH_PROBE_DEFAULT_PATH; with a path, exactly that path and query).
 * Refused (MESH_E_PARSE): other schemes (https is not supported), user
 * info, a fragment, spaces or CTLs, an empty host, a port not in
 * 1..65535 or not all digits, a host or path longer than the fields.
 * Returns 0 or MESH_E_PARSE (t is then unspecified). */
int mesh_probe_target_parse(struct mesh_probe_target *t, const char *spec);
/* Sets t to a.b.c.d (each 0..255) with the default port and path. */
void mesh_probe_target_ipv4(struct mesh_probe_target *t, unsigned a, unsigned b, unsigned c, unsigned d);

struct mesh_probe_opts {
	uint64_t resolve_timeout_ns;  /* 0 = 1 s */
	uint64_t connect_timeout_ns;  /* 0 = 1 s */
	uint64_t response_timeout_ns; /* 0 = 2 s */
	size_t max_body;              /* 0 = 1 MiB */
	const char *model;            /* NULL or "": any 2xx is warm */
};
#define MESH_PROBE_OPTS_INIT {0, 0, 0, 0, NULL}

enum mesh_probe_phase {
	MESH_PROBE_RESOLVE = 1,
	MESH_PROBE_CONNECT = 2,
	MESH_PROBE_RESPONSE = 3,
	MESH_PROBE_JUDGE = 4, /* the response arrived; status or body decided */
};

struct mesh_probe_result {
	int warm;            /* 1 warm, 0 cold */
	int err;             /* 0 when warm; else why cold: -ECONNREFUSED, MESH_E_TIMEOUT,
			      * MESH_E_CLOSED, MESH_E_PROTO, MESH_E_TOOBIG, MESH_E_NOTFOUND
			      * (model not listed / name not found), MESH_E_PARSE (body not
			      * JSON), MESH_E_STATE (status not 2xx), or another -errno */
	int phase;           /* enum mesh_probe_phase where it ended */
	int status;          /* HTTP status, 0 when none was read */
	uint64_t elapsed_ns; /* whole probe */
	uint64_t connect_ns; /* resolve + connect, 0 when it did not connect */
	char addr[64];       /* the address connected or last tried, "ip:port" / "[ip]:port" */
	char reason[256];    /* one line: "warm: HTTP 200 in 1.2 ms", "cold: connect refused by
			      * 127.0.0.1:7861", "cold: no complete response within 2000 ms", ... */
};

/* Probes t.  o may be NULL (all defaults).  Returns 0 whenever the probe
 * ran, warm or cold (read *res); MESH_E_RANGE for a target with port 0 or
 * a path not starting with '/'.  Never blocks past the bounds above, never
 * raises SIGPIPE, leaves no fd open (a lookup abandoned at its bound keeps
 * its thread until getaddrinfo returns).  Safe to call from several threads
 * at once: it shares no state (the test seam below aside). */
int mesh_probe(const struct mesh_probe_target *t, const struct mesh_probe_opts *o, struct mesh_probe_result *res);

/* A probe driven by the caller's event loop, on a connection the caller
 * made (the host's readiness of an HTTP program: the connection of the
 * listen test that found the port listening carries the probe, and a kept
 * one the first request): no thread, never blocks.  The same request and
 * judgement as mesh_probe's (res->connect_ns stays 0).
 *   1. mesh_probe_begin(&p, fd, t, o, keep, &res): sends the request, and
 *      when keep without `Connection: close`.  0: under way; 1: over
 *      already (the send failed: res says why); MESH_E_RANGE for fd < 0 or
 *      a target mesh_probe refuses (nothing sent).
 *   2. when fd is readable: mesh_probe_read(&p, &res): 0, more to come;
 *      1, over: res holds the judgement.
 *   3. at p.deadline (mesh_mono_ns; o's response_timeout from the send)
 *      when not over: mesh_probe_expire(&p, &res) (over: cold, no complete
 *      response).
 *   4. mesh_probe_end(&p), whatever happened (after a 0 of step 1 too).
 * fd stays the caller's, open; once over, p.keep is 1 when it can carry a
 * next request (keep asked; the answer came whole, HTTP/1.1, framed by a
 * length, chunked or bodiless, without `Connection: close`).  t must
 * outlive p; o is copied. */
struct mesh_probe_conn {
	uint64_t deadline; /* the answer's bound */
	int keep;	   /* over: fd can carry a next request */
	int done;	   /* over */
	/* Private. */
	int fd, keep_asked, live;
	const struct mesh_probe_target *t;
	struct mesh_probe_opts o;
	uint64_t t0, r0;
	struct mesh_http_response r;
};
int mesh_probe_begin(struct mesh_probe_conn *p, int fd, const struct mesh_probe_target *t,
		     const struct mesh_probe_opts *o, int keep, struct mesh_probe_result *res);
int mesh_probe_read(struct mesh_probe_conn *p, struct mesh_probe_result *res);
void mesh_probe_expire(struct mesh_probe_conn *p, struct mesh_probe_result *res);
void mesh_probe_end(struct mesh_probe_conn *p);


/* Judges a complete response body against a model name (the JSON rules
 * above).  0 when listed, MESH_E_NOTFOUND when the JSON has no such model,
 * MESH_E_PARSE when the body is not JSON of either shape. */
int mesh_probe_model_listed(const char *body, size_t len, const char *model);

/* Test seam: replaces getaddrinfo() for non-numeric names (NULL restores
 * it).  The answer must be freeable with freeaddrinfo().  Not thread-safe
 * against running probes; tests only. */
struct addrinfo;
typedef int (*mesh__probe_resolver_fn)(const char *node, const char *service, const struct addrinfo *hints,
				       struct addrinfo **res);
void mesh__probe_set_resolver(mesh__probe_resolver_fn fn);

#endif
