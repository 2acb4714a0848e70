/* The gateway's own answers, as the bytes to send, and a request's access
 * line (gw_answer.c): what the front (gw_loop.c) and the accept thread
 * (gw.c) answer themselves.  Internal to src/gateway. */
#ifndef MESH_GATEWAY_GW_ANSWER_H
#define MESH_GATEWAY_GW_ANSWER_H

#include "base/buf.h"
#include "gateway/gw_prog.h"

#include <stddef.h>
#include <stdint.h>

/* Each appends one whole answer to b: 0, or -1 (no memory; b as it was).
 * close_it: with Connection: close. */
/* An error in OpenAI's shape ({"error":{message,type,param,code}});
 * errcode may be NULL; retry_after 0: no Retry-After. */
int mesh__gw_answer_error(struct mesh_buf *b, int code, const char *type, const char *errcode, const char *msg,
			  unsigned retry_after, int close_it);
/* GET /v1/models's answer: every model, its program and state (takes mu). */
int mesh__gw_answer_models(struct mesh_gw *g, struct mesh_buf *b, int close_it);
/* GET /v1/models/{id}: the model's object (200) or the unknown model's
 * error (404) into b; the status, or -1 out of memory. */
int mesh__gw_answer_model(struct mesh_gw *g, struct mesh_buf *b, const char *id, int close_it);
/* 200 with body (n bytes) as content_type: GET /metrics's answer. */
int mesh__gw_answer_text(struct mesh_buf *b, const char *content_type, const char *body, size_t n, int close_it);
/* GET /health: {"status":"ok"}. */
int mesh__gw_answer_health(struct mesh_buf *b, int close_it);
/* The 404 for an unknown model, naming the known ones. */
int mesh__gw_answer_unknown_model(struct mesh_gw *g, struct mesh_buf *b, const char *model, int close_it);
/* A CORS preflight's answer: 204 with the methods and the request headers
 * (authorization, content-type, and those the browser asked for:
 * req_headers, n bytes, a token list; NULL none) allowed, for how long; the
 * origin's own fields (Access-Control-Allow-Origin, Vary) are the caller's
 * extra fields (mesh__gw_answer_insert). */
int mesh__gw_answer_preflight(struct mesh_buf *b, const char *req_headers, size_t n, int close_it);
/* Inserts the header lines h[0..n) (each ending CRLF) after the status line
 * of the answer at b[from..): 0, or -1 (no memory; b as it was). */
int mesh__gw_answer_insert(struct mesh_buf *b, size_t from, const char *h, size_t n);
/* The access line of one request to on_log, and its end to on_request
 * (t0: when its head was read; status < 0: none sent, |status| the one
 * meant; program NULL: it reached none; rid its request id). */
void mesh__gw_access(struct mesh_gw *g, const char *method, const char *target, const char *model,
		     const char *program, int status, int cold, size_t bytes, uint64_t t0, const char *rid);
/* A new request id into out (at least MESH_GW_RID_MAX + 1 bytes): meshd's
 * random part of this run, '-', a count in hex.  Its length.  Any thread. */
#define MESH_GW_RID_MAX 64
size_t mesh__gw_request_id(struct mesh_gw *g, char *out);
/* 1 if the client's X-Request-Id value v (n bytes) may be used as its
 * request's id: 1..64 of [A-Za-z0-9._-]. */
int mesh__gw_rid_ok(const char *v, size_t n);

#endif
