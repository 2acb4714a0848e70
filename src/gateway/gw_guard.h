/* The gateway's door checks, before a request is routed: the API key
 * (--http-api-key-file), the Host a client named (loopback names only
 * while the gateway listens on loopback: a DNS-rebinding page cannot reach
 * it under its own name) and the Origin of a browser's request (none, a
 * loopback one, or one --http-allow-origin names: a page of another site
 * cannot make a visitor's browser use it).  docs/gateway.md, "Keys and
 * origins". */
#ifndef MESH_GATEWAY_GW_GUARD_H
#define MESH_GATEWAY_GW_GUARD_H

#include <stddef.h>

struct mesh_gw_config;

struct mesh__gw_guard {
	char **keys; /* accepted API keys; none: no key is asked for */
	size_t nkeys;
	int check_host; /* Host must name a loopback address (not --http-public) */
};

/* Reads the key file the config names, if any (one key a line; blank
 * lines and lines starting with '#' skipped; a key is 1..256 printable
 * bytes without spaces).  0, or a code with *err: a file that cannot be
 * read, names no key, or is readable by others than its owner. */
int mesh__gw_guard_open(struct mesh__gw_guard *gd, const struct mesh_gw_config *c, char **err);
void mesh__gw_guard_free(struct mesh__gw_guard *gd);

/* What the door read of a request's head besides its verdict: pointers
 * into the head's bytes (valid until they move: mesh_hframe_head_forward),
 * NULL when absent. */
struct mesh__gw_door {
	const char *origin; /* Origin, when it may use the gateway (its answers name it: CORS) */
	size_t norigin;
	int preflight;	/* a CORS preflight: OPTIONS with Origin and Access-Control-Request-Method */
	const char *req_headers; /* Access-Control-Request-Headers, when a list of tokens */
	size_t nreq_headers;
	const char *rid; /* X-Request-Id, when one may be the request's id (gw_answer.h) */
	size_t nrid;
};

/* What the checks say of a request head p[0..n), its header fields from
 * offset at: 0 (let it through), or the status to answer (401: no or a
 * wrong key, the Authorization field checked in constant time per key;
 * 403: a Host or Origin refused) with *why a static phrase for the client
 * and *code OpenAI's error code.  allow/nallow: the allowed origins
 * (exact "scheme://host[:port]", or "*"); want_key: the route asks the key
 * (a CORS preflight never does: options, the method is OPTIONS); *d is
 * filled in every case. */
int mesh__gw_guard_check(const struct mesh__gw_guard *gd, const char *const *allow, size_t nallow, const char *p,
			 size_t n, size_t at, int want_key, int options, struct mesh__gw_door *d, const char **why,
			 const char **code);

#endif
