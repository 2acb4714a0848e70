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

#include <jansson.h>
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
