/* The gateway's own answers, as the bytes to send (errors in OpenAI's
 * shape, the model list), and a request's access line.  See gw_answer.h. */
#include "gateway/gw_answer.h"

#include "base/buf.h"
#include "base/clock.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *reason_phrase(int code)
{
	switch (code) {
	case 200: return "OK";
	case 204: return "No Content";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 411: return "Length Required";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 417: return "Expectation Failed";
	case 501: return "Not Implemented";
	case 431: return "Request Header Fields Too Large";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	}
	return "Error";
}

/* One answer of meshd's own: a JSON body. */
static int answer_json(struct mesh_buf *b, int code, json_t *body, unsigned retry_after, int close_it)
{
	char *text = json_dumps(body, JSON_COMPACT);
	size_t old = b->len;
	json_decref(body);
	if (!text)
		return -1;
	mesh_buf_addf(b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n", code,
		      reason_phrase(code), strlen(text) + 1);
	if (retry_after)
		mesh_buf_addf(b, "Retry-After: %u\r\n", retry_after);
	if (close_it)
		mesh_buf_adds(b, "Connection: close\r\n");
	int rc = mesh_buf_addf(b, "\r\n%s\n", text);
	free(text);
	if (rc) {
		b->len = old;
		return -1;
	}
	return 0;
}

/* OpenAI's error shape. */
int mesh__gw_answer_error(struct mesh_buf *b, int code, const char *type, const char *errcode, const char *msg,
			  unsigned retry_after, int close_it)
{
	json_t *e = json_pack("{s:{s:s, s:s, s:n, s:s?}}", "error", "message", msg, "type", type, "param", "code",
			      errcode);
	return e ? answer_json(b, code, e, retry_after, close_it) : -1;
}

int mesh__gw_answer_preflight(struct mesh_buf *b, const char *req_headers, size_t n, int close_it)
{
	size_t old = b->len;
	mesh_buf_adds(b, "HTTP/1.1 204 No Content\r\nAccess-Control-Allow-Methods: GET, POST, OPTIONS\r\n"
			 "Access-Control-Allow-Headers: authorization, content-type");
	if (req_headers) {
		mesh_buf_adds(b, ", ");
		mesh_buf_add(b, req_headers, n);
	}
	mesh_buf_adds(b, "\r\nAccess-Control-Max-Age: 3600\r\n");
	if (close_it)
		mesh_buf_adds(b, "Connection: close\r\n");
	if (mesh_buf_adds(b, "\r\n")) {
		b->len = old;
		return -1;
	}
	return 0;
}

int mesh__gw_answer_insert(struct mesh_buf *b, size_t from, const char *h, size_t n)
{
	const char *nl = b->p && b->len > from ? memchr(b->p + from, '\n', b->len - from) : NULL;
	if (!nl || !n)
		return nl ? 0 : -1;
	size_t at = (size_t)(nl + 1 - b->p);
	if (mesh_buf_grow(b, n))
		return -1;
	memmove(b->p + at + n, b->p + at, b->len - at);
	memcpy(b->p + at, h, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

/* OpenAI's model object for p's name k (mesh__gw_name), with the program
 * and its state (and its last failed start, if that is its state now); an
 * alias says the first model it stands for.  g->mu held. */
static json_t *model_json(const struct mesh__gw_prog *p, size_t k)
{
	json_t *o = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s}", "id", mesh__gw_name(p, k), "object", "model", "created", 0,
			      "owned_by", "mesh", "program", p->img.m.name, "state", mesh__gw_state_name(p));
	if (o && k >= p->img.m.nmodels)
		json_object_set_new(o, "alias_of", json_string(p->img.m.models[0]));
	if (o && p->fail_gen && p->fail_gen == p->gen)
		json_object_set_new(o, "last_error", json_string(p->fail_short));
	return o;
}

int mesh__gw_answer_models(struct mesh_gw *g, struct mesh_buf *b, int close_it)
{
	json_t *data = json_array();
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; i < g->nprogs; i++)
		for (size_t k = 0; !g->progs[i]->retired && k < mesh__gw_nnames(g->progs[i]); k++)
			json_array_append_new(data, model_json(g->progs[i], k));
	pthread_mutex_unlock(&g->mu);
	return answer_json(b, 200, json_pack("{s:s, s:o}", "object", "list", "data", data), 0, close_it);
}

int mesh__gw_answer_text(struct mesh_buf *b, const char *content_type, const char *body, size_t n, int close_it)
{
	size_t old = b->len;
	mesh_buf_addf(b, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n", content_type, n,
		      close_it ? "Connection: close\r\n" : "");
	if (mesh_buf_add(b, body, n)) {
		b->len = old;
		return -1;
	}
	return 0;
}

int mesh__gw_answer_health(struct mesh_buf *b, int close_it)
{
	return answer_json(b, 200, json_pack("{s:s}", "status", "ok"), 0, close_it);
}

int mesh__gw_answer_model(struct mesh_gw *g, struct mesh_buf *b, const char *id, int close_it)
{
	json_t *o = NULL;
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; !o && i < g->nprogs; i++) {
		struct mesh__gw_prog *p = g->progs[i];
		for (size_t k = 0; !o && !p->retired && k < mesh__gw_nnames(p); k++)
			if (!strcmp(mesh__gw_name(p, k), id))
				o = model_json(p, k);
	}
	pthread_mutex_unlock(&g->mu);
	if (o)
		return answer_json(b, 200, o, 0, close_it) ? -1 : 200;
	return mesh__gw_answer_unknown_model(g, b, id, close_it) ? -1 : 404;
}

int mesh__gw_answer_unknown_model(struct mesh_gw *g, struct mesh_buf *b, const char *model, int close_it)
{
	struct mesh_buf m = MESH_BUF_INIT;
	mesh_buf_addf(&m, "The model '%s' does not exist here; known models:", model);
	size_t n = 0;
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; i < g->nprogs; i++)
		for (size_t k = 0; !g->progs[i]->retired && k < mesh__gw_nnames(g->progs[i]); k++)
			mesh_buf_addf(&m, "%s %s", n++ ? "," : "", mesh__gw_name(g->progs[i], k));
	pthread_mutex_unlock(&g->mu);
	if (!n)
		mesh_buf_adds(&m, " none (no backend = \"http\" program in the catalog)");
	int rc = mesh__gw_answer_error(b, 404, "invalid_request_error", "model_not_found", m.p ? m.p : "unknown model", 0,
				       close_it);
	mesh_buf_release(&m);
	return rc;
}

/* Appends s (at most n bytes) to line at *at, within cap. */
static void put(char *line, size_t cap, size_t *at, const char *s, size_t n)
{
	if (n > cap - 1 - *at)
		n = cap - 1 - *at;
	memcpy(line + *at, s, n);
	*at += n;
}

static void put_u(char *line, size_t cap, size_t *at, unsigned long long v)
{
	char d[24];
	size_t i = sizeof d;
	do
		d[--i] = (char)('0' + v % 10);
	while ((v /= 10));
	put(line, cap, at, d + i, sizeof d - i);
}

size_t mesh__gw_request_id(struct mesh_gw *g, char *out)
{
	static const char hex[] = "0123456789abcdef";
	uint64_t seq = __atomic_add_fetch(&g->rid_seq, 1, __ATOMIC_RELAXED);
	size_t n = 0;
	char d[16];
	int k = 0;
	for (int i = 28; i >= 0; i -= 4)
		out[n++] = hex[(g->rid_boot >> i) & 15];
	out[n++] = '-';
	do
		d[k++] = hex[seq & 15];
	while ((seq >>= 4));
	while (k)
		out[n++] = d[--k];
	out[n] = 0;
	return n;
}

int mesh__gw_rid_ok(const char *v, size_t n)
{
	if (!n || n > MESH_GW_RID_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = v[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return 0;
	}
	return 1;
}

void mesh__gw_access(struct mesh_gw *g, const char *method, const char *target, const char *model,
		     const char *program, int status, int cold, size_t bytes, uint64_t t0, const char *rid)
{
	if (!g->c.on_request && !g->c.on_log)
		return;
	uint64_t us = (mesh_mono_ns() - t0) / 1000; /* one clock read for both */
	if (g->c.on_request)
		g->c.on_request(g->c.request_ctx, program, model, status, us, cold);
	if (!g->c.on_log)
		return;
	/* "access METHOD TARGET model=M status=S cold=C bytes=B ms=X.Y id=R" by
	 * hand: a request's vsnprintf was ~3 % of meshd's CPU a request. */
	char line[4096];
	size_t at = 0;
	us += 50; /* ms to one decimal, rounded */
#define PUT(lit) put(line, sizeof line, &at, lit, sizeof lit - 1)
	PUT("access ");
	put(line, sizeof line, &at, method, strlen(method));
	PUT(" ");
	put(line, sizeof line, &at, target, strlen(target));
	PUT(" model=");
	if (model[0])
		put(line, sizeof line, &at, model, strlen(model));
	else
		PUT("-");
	PUT(" status=");
	if (status < 0) {
		PUT("-");
		status = -status;
	}
	put_u(line, sizeof line, &at, (unsigned long long)status);
	PUT(" cold=");
	put_u(line, sizeof line, &at, (unsigned long long)(cold != 0));
	PUT(" bytes=");
	put_u(line, sizeof line, &at, (unsigned long long)bytes);
	PUT(" ms=");
	put_u(line, sizeof line, &at, (unsigned long long)(us / 1000));
	PUT(".");
	put_u(line, sizeof line, &at, (unsigned long long)(us / 100 % 10));
	if (rid && rid[0]) {
		PUT(" id=");
		put(line, sizeof line, &at, rid, strlen(rid));
	}
#undef PUT
	line[at] = 0;
	g->c.on_log(g->c.ctx, MESH_GW_INFO, line);
}
