/* The "model" string of a JSON request body, found without parsing it into
 * a document when it can be (gw_json.c).  Internal to src/gateway. */
#ifndef MESH_GATEWAY_GW_JSON_H
#define MESH_GATEWAY_GW_JSON_H

#include "base/buf.h"
#include "host/manifest.h"

#include <stddef.h>
#include <stdint.h>

/* 0: body is valid JSON (a top-level object) and *model, *len are its last
 * top-level "model" member's string, raw (NULL, 0: none, or not a string);
 * -1: not sure (anything outside the plain subset it checks, or not JSON):
 * ask a real parser. */
int mesh__gw_json_model(const char *body, size_t n, const char **model, size_t *len);
/* The "model" string of a JSON request body (the scan above, jansson when
 * it is not sure): malloc'd, or NULL (none, empty, not a string, not JSON,
 * no memory). */
char *mesh__gw_body_model(const char *body, size_t n);

/* A request's "keep_alive" (Ollama's): absent (or null), hold warm forever
 * (a negative number, or a string starting with '-'), else nanoseconds (0:
 * unload after the request). */
#define MESH__GW_KEEP_ABSENT (-2)
#define MESH__GW_KEEP_FOREVER (-1)
/* The longest keep_alive duration taken (the longest idle_ttl). */
#define MESH__GW_KEEP_MAX_NS (7ull * 24 * 3600 * 1000000000ull)

/* What a request's JSON body becomes on its way to its program. */
struct mesh__gw_edit {
	const char *model;	/* the "model" sent upstream (NULL: the body's) */
	char *const *strip;	/* top-level members removed (nstrip of them) */
	size_t nstrip;
	const struct mesh_manifest_default *defaults; /* members set when absent (after the strip) */
	size_t ndefaults;
};

/* 1 when a body routed to a program with edit e must be rewritten: e asks
 * for a change, or the body may hold "keep_alive" (always removed). */
int mesh__gw_body_needs_edit(const char *body, size_t n, const struct mesh__gw_edit *e);
/* The body (a JSON object) rewritten by e into *out (appended), with every
 * top-level "keep_alive" removed and its value in *keep (ns, or
 * MESH__GW_KEEP_ABSENT / _FOREVER).  The members kept are copied as they
 * came (their bytes and order), those added come last.  0; MESH_E_PARSE
 * with why[0..whycap) the reason for a client (not a JSON object; a
 * keep_alive that is neither a duration nor a number of seconds, or past
 * a week); -ENOMEM. */
int mesh__gw_body_edit(const char *body, size_t n, const struct mesh__gw_edit *e, struct mesh_buf *out, int64_t *keep,
		       char *why, size_t whycap);

#endif
