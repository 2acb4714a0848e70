/* The "model" of a JSON request body without building the document: the
 * warm path reads it once a request, and jansson's parse (an allocation per
 * key and string of the whole body, the messages included) was about 7 % of
 * meshd's CPU a relayed request.  The scan accepts only what it is sure of
 * -- a top-level object of ASCII text, strings whose escapes are the plain
 * ones, numbers of at most 15 digits without exponent, at most 64 levels --
 * and answers "not sure" for everything else, which mesh__gw_body_model then
 * gives to jansson: so the answer is always jansson's (the same model, or none for a
 * body jansson refuses). */
#include "gateway/gw_json.h"

#include "base/err.h"
#include "base/parse.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH_MAX 64

struct scan {
	const char *p, *end;
};

static void ws(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
		s->p++;
}

/* A string at s->p (its quote): 0 with [*a, *b) its raw inside and *esc
 * whether it has an escape; -1 not sure. */
static int str(struct scan *s, const char **a, const char **b, int *esc)
{
	if (s->p >= s->end || *s->p != '"')
		return -1;
	*a = ++s->p;
	*esc = 0;
	while (s->p < s->end) {
		unsigned char c = (unsigned char)*s->p;
		if (c == '"') {
			*b = s->p++;
			return 0;
		}
		if (c < 0x20 || c >= 0x80)
			return -1;
		if (c == '\\') {
			if (s->p + 1 >= s->end || !strchr("\"\\/bfnrt", s->p[1]) || !s->p[1])
				return -1;
			*esc = 1;
			s->p += 2;
			continue;
		}
		s->p++;
	}
	return -1;
}

static int digits(struct scan *s)
{
	int n = 0;
	while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
		s->p++;
		n++;
	}
	return n;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?, 15 digits at most (no overflow to tell). */
static int num(struct scan *s)
{
	if (s->p < s->end && *s->p == '-')
		s->p++;
	if (s->p >= s->end)
		return -1;
	const char *d = s->p;
	int n = digits(s);
	if (!n || (n > 1 && *d == '0'))
		return -1;
	if (s->p < s->end && *s->p == '.') {
		s->p++;
		int f = digits(s);
		if (!f)
			return -1;
		n += f;
	}
	if (n > 15 || (s->p < s->end && (*s->p == 'e' || *s->p == 'E')))
		return -1;
	return 0;
}

static int lit(struct scan *s, const char *w)
{
	size_t n = strlen(w);
	if ((size_t)(s->end - s->p) < n || memcmp(s->p, w, n))
		return -1;
	s->p += n;
	return 0;
}

static int value(struct scan *s, int depth);

/* An object or array at s->p; at depth 1 the object's "model" string (the
 * last one, as jansson's) in [*ma, *mb), *mesc. */
static int container(struct scan *s, int depth, const char **ma, const char **mb, int *mesc)
{
	char close = *s->p == '{' ? '}' : ']';
	if (depth > DEPTH_MAX)
		return -1;
	s->p++;
	ws(s);
	if (s->p < s->end && *s->p == close) {
		s->p++;
		return 0;
	}
	for (;;) {
		if (close == '}') {
			const char *ka, *kb;
			int kesc;
			if (str(s, &ka, &kb, &kesc))
				return -1;
			ws(s);
			if (s->p >= s->end || *s->p != ':')
				return -1;
			s->p++;
			ws(s);
			if (depth == 1 && !kesc && kb - ka == 5 && !memcmp(ka, "model", 5)) {
				if (s->p < s->end && *s->p == '"') {
					if (str(s, ma, mb, mesc))
						return -1;
				} else {
					*ma = *mb = NULL; /* not a string: no model */
					if (value(s, depth + 1))
						return -1;
				}
			} else if (value(s, depth + 1)) {
				return -1;
			}
		} else if (value(s, depth + 1)) {
			return -1;
		}
		ws(s);
		if (s->p >= s->end)
			return -1;
		if (*s->p == close) {
			s->p++;
			return 0;
		}
		if (*s->p != ',')
			return -1;
		s->p++;
		ws(s);
	}
}

static int value(struct scan *s, int depth)
{
	const char *a, *b;
	int esc;
	if (s->p >= s->end)
		return -1;
	switch (*s->p) {
	case '{':
	case '[':
		return container(s, depth, &a, &b, &esc);
	case '"':
		return str(s, &a, &b, &esc);
	case 't':
		return lit(s, "true");
	case 'f':
		return lit(s, "false");
	case 'n':
		return lit(s, "null");
	default:
		return num(s);
	}
}

int mesh__gw_json_model(const char *body, size_t n, const char **model, size_t *len)
{
	struct scan s = {body, body + n};
	const char *ma = NULL, *mb = NULL;
	int mesc = 0;
	ws(&s);
	if (s.p >= s.end || *s.p != '{' || container(&s, 1, &ma, &mb, &mesc))
		return -1;
	ws(&s);
	if (s.p != s.end || mesc)
		return -1;
	*model = ma;
	*len = ma ? (size_t)(mb - ma) : 0;
	return 0;
}

char *mesh__gw_body_model(const char *body, size_t n)
{
	const char *fm;
	size_t fl;
	if (mesh__gw_json_model(body, n, &fm, &fl) == 0) /* the usual body, without jansson */
		return fm && fl ? strndup(fm, fl) : NULL;
	json_t *j = json_loadb(body, n, 0, NULL);
	const char *m = j ? json_string_value(json_object_get(j, "model")) : NULL;
	char *out = m && *m ? strdup(m) : NULL;
	json_decref(j);
	return out;
}

/* ---- The body's rewrite (only for a body jansson took: the raw reading
 * below trusts it to be valid JSON) ---- */

static const char *raw_ws(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/* Past the string whose quote is at p. */
static const char *raw_str(const char *p, const char *e)
{
	for (p++; p < e; p++) {
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return e;
}

/* Past the value at p. */
static const char *raw_value(const char *p, const char *e)
{
	if (*p == '"')
		return raw_str(p, e);
	if (*p == '{' || *p == '[') {
		int depth = 0;
		while (p < e) {
			if (*p == '"') {
				p = raw_str(p, e);
				continue;
			}
			if (*p == '{' || *p == '[')
				depth++;
			else if ((*p == '}' || *p == ']') && !--depth)
				return p + 1;
			p++;
		}
		return e;
	}
	while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
		p++;
	return p;
}

/* 1 when the raw key [a, b) (inside its quotes) decodes to name. */
static int key_is(const char *a, const char *b, const char *name)
{
	size_t n = (size_t)(b - a);
	if (!memchr(a, '\\', n))
		return strlen(name) == n && !memcmp(a, name, n);
	json_t *k = json_loadb(a - 1, n + 2, JSON_DECODE_ANY, NULL);
	int is = k && json_is_string(k) && !strcmp(json_string_value(k), name);
	json_decref(k);
	return is;
}

static int stripped(const struct mesh__gw_edit *e, const char *name)
{
	for (size_t i = 0; i < e->nstrip; i++)
		if (!strcmp(e->strip[i], name))
			return 1;
	return 0;
}

static int drop_member(const struct mesh__gw_edit *e, const char *a, const char *b)
{
	if (key_is(a, b, "keep_alive") || (e->model && key_is(a, b, "model")))
		return 1;
	for (size_t i = 0; i < e->nstrip; i++)
		if (key_is(a, b, e->strip[i]))
			return 1;
	return 0;
}

/* keep_alive's value v (not NULL) into *keep; -1 when it is not one. */
static int keep_value(json_t *v, int64_t *keep)
{
	double s;
	if (json_is_null(v)) {
		*keep = MESH__GW_KEEP_ABSENT;
		return 0;
	}
	if (json_is_string(v)) {
		const char *t = json_string_value(v);
		uint64_t ns;
		if (mesh_parse_duration(t + (*t == '-'), *t == '-' ? UINT64_MAX : MESH__GW_KEEP_MAX_NS, &ns))
			return -1;
		*keep = *t == '-' ? MESH__GW_KEEP_FOREVER : (int64_t)ns;
		return 0;
	}
	if (!json_is_number(v))
		return -1;
	s = json_number_value(v);
	if (s < 0) {
		*keep = MESH__GW_KEEP_FOREVER;
		return 0;
	}
	if (s * 1e9 > (double)MESH__GW_KEEP_MAX_NS)
		return -1;
	*keep = (int64_t)(s * 1e9);
	return 0;
}

/* [,]"key":value (JSON text of both; v is taken) to out. */
static int add_member(struct mesh_buf *out, int comma, const char *key, json_t *v)
{
	json_t *k = json_string(key);
	char *ks = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL, *vs = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
	int rc = ks && vs ? mesh_buf_addf(out, "%s%s:%s", comma ? "," : "", ks, vs) : -ENOMEM;
	free(ks);
	free(vs);
	json_decref(k);
	json_decref(v);
	return rc < 0 ? -ENOMEM : 0;
}

int mesh__gw_body_needs_edit(const char *body, size_t n, const struct mesh__gw_edit *e)
{
	return e->model || e->nstrip || e->ndefaults || memmem(body, n, "keep_alive", 10);
}

int mesh__gw_body_edit(const char *body, size_t n, const struct mesh__gw_edit *e, struct mesh_buf *out, int64_t *keep,
		       char *why, size_t whycap)
{
	json_t *j = json_loadb(body, n, 0, NULL), *ka;
	const char *p, *end = body + n;
	size_t start = out->len;
	int rc = 0;
	*keep = MESH__GW_KEEP_ABSENT;
	if (!j || !json_is_object(j)) {
		snprintf(why, whycap, "the body must be a JSON object");
		json_decref(j);
		return MESH_E_PARSE;
	}
	if ((ka = json_object_get(j, "keep_alive")) && keep_value(ka, keep)) {
		snprintf(why, whycap,
			 "'keep_alive' must be a duration like \"5m\" or \"30s\", a number of seconds (at most 7 days), 0 "
			 "(unload after this request) or -1 (keep loaded)");
		json_decref(j);
		return MESH_E_PARSE;
	}
	/* The object's members, each copied whole unless dropped. */
	int kept = 0;
	p = raw_ws(body, end) + 1;
	rc = mesh_buf_add(out, "{", 1);
	for (p = raw_ws(p, end); !rc && p < end && *p == '"';) {
		const char *ka0 = p, *kb = raw_str(p, end) - 1;
		const char *v = raw_ws(raw_ws(kb + 1, end) + 1, end), *ve = raw_value(v, end);
		if (!drop_member(e, ka0 + 1, kb)) {
			if (kept++)
				rc = mesh_buf_add(out, ",", 1);
			rc = rc ? rc : mesh_buf_add(out, ka0, (size_t)(ve - ka0));
		}
		p = raw_ws(ve, end);
		if (p < end && *p == ',')
			p = raw_ws(p + 1, end);
	}
	if (!rc && e->model)
		rc = add_member(out, kept++, "model", json_string(e->model));
	for (size_t i = 0; !rc && i < e->ndefaults; i++) {
		const struct mesh_manifest_default *d = &e->defaults[i];
		if (json_object_get(j, d->key) && !stripped(e, d->key))
			continue;
		rc = add_member(out, kept++, d->key,
				d->type == MESH_VALUE_STRING ? json_string(d->str)
				: d->type == MESH_VALUE_INT  ? json_integer(d->i)
				: d->type == MESH_VALUE_FLOAT ? json_real(d->f)
							     : json_boolean(d->b));
	}
	json_decref(j);
	if (!rc)
		rc = mesh_buf_add(out, "}", 1);
	if (rc && out->p) {
		out->len = start;
		out->p[start] = 0;
	}
	return rc ? -ENOMEM : 0;
}
