/* The "model" string of a JSON request body, found without parsing it into
 * a document when it can be (gw_json.c).  Internal to src/gateway. */
#ifndef MESH_GATEWAY_GW_JSON_H
#define MESH_GATEWAY_GW_JSON_H

#include <stddef.h>

/* 0: body is valid JSON (a top-level object) and *model, *len are its last
 * top-level "model" member's string, raw (NULL, 0: none, or not a string);
 * -1: not sure (anything outside the plain subset it checks, or not JSON):
 * ask a real parser. */
int mesh__gw_json_model(const char *body, size_t n, const char **model, size_t *len);
/* The "model" string of a JSON request body (the scan above, jansson when
 * it is not sure): malloc'd, or NULL (none, empty, not a string, not JSON,
 * no memory). */
char *mesh__gw_body_model(const char *body, size_t n);

#endif
