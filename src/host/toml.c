#include "host/toml.h"

#include "base/buf.h"
#include "base/err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cur {
	const char *file;
	const char *s;
	size_t n, pos;
	unsigned line;
	size_t bol; /* offset where the current line begins */
	char **err;
	int rc;
};

static unsigned col_of(const struct cur *c, size_t pos)
{
	return (unsigned)(pos - c->bol + 1);
}

/* Records the first error at pos; returns MESH_E_PARSE for chaining. */
static int fail_at(struct cur *c, size_t pos, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(struct cur *c, size_t pos, const char *fmt, ...)
{
	if (c->rc)
		return c->rc;
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	mesh_buf_addf(&b, "%s:%u:%u: ", c->file, c->line, col_of(c, pos));
	va_start(ap, fmt);
	mesh_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	c->rc = MESH_E_PARSE;
	if (c->err)
		*c->err = b.p ? mesh_buf_detach(&b, NULL) : NULL;
	else
		mesh_buf_release(&b);
	return c->rc;
}

static int peek(const struct cur *c)
{
	return c->pos < c->n ? (unsigned char)c->s[c->pos] : -1;
}

static void skip_ws(struct cur *c)
{
	while (c->pos < c->n && (c->s[c->pos] == ' ' || c->s[c->pos] == '\t'))
		c->pos++;
}

/* At a '#': the comment runs to the end of the line (control chars other
 * than tab are refused, as TOML says). */
static int skip_comment(struct cur *c)
{
	if (peek(c) != '#')
		return 0;
	while (c->pos < c->n && c->s[c->pos] != '\n') {
		unsigned char ch = (unsigned char)c->s[c->pos];
		if ((ch < 0x20 && ch != '\t' && ch != '\r') || ch == 0x7f)
			return fail_at(c, c->pos, "control character 0x%02x in a comment", ch);
		if (ch == '\r' && !(c->pos + 1 < c->n && c->s[c->pos + 1] == '\n'))
			return fail_at(c, c->pos, "bare carriage return");
		c->pos++;
	}
	return 0;
}

/* After a value or header: spaces, an optional comment, then a newline or
 * the end of the text. */
static int end_of_line(struct cur *c)
{
	skip_ws(c);
	if (skip_comment(c))
		return c->rc;
	if (c->pos >= c->n)
		return 0;
	if (c->s[c->pos] == '\r' && c->pos + 1 < c->n && c->s[c->pos + 1] == '\n')
		c->pos++;
	if (c->s[c->pos] == '\r')
		return fail_at(c, c->pos, "bare carriage return");
	if (c->s[c->pos] != '\n')
		return fail_at(c, c->pos, "expected the end of the line, found '%c'", c->s[c->pos]);
	c->pos++;
	c->line++;
	c->bol = c->pos;
	return 0;
}

static int is_bare(int ch)
{
	return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
	       ch == '-';
}

static char *bare_key(struct cur *c, const char *what)
{
	size_t start = c->pos;
	while (c->pos < c->n && is_bare((unsigned char)c->s[c->pos]))
		c->pos++;
	if (c->pos == start) {
		int ch = peek(c);
		if (ch == '"' || ch == '\'')
			fail_at(c, start, "quoted %ss are not supported; use a bare name", what);
		else if (ch < 0)
			fail_at(c, start, "expected a %s, found the end of the file", what);
		else
			fail_at(c, start, "expected a %s ([A-Za-z0-9_-]), found '%c'", what, ch);
		return NULL;
	}
	char *k = strndup(c->s + start, c->pos - start);
	if (!k)
		c->rc = -ENOMEM;
	return k;
}

static int put_utf8(struct mesh_buf *b, uint32_t cp)
{
	char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	return mesh_buf_add(b, u, n);
}

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* The escape sequence at c->pos (its backslash) of a basic string, its
 * character added to b: 0, -1 (refused: c says where), or -ENOMEM. */
static int escape(struct cur *c, struct mesh_buf *b)
{
	size_t esc = c->pos;
	c->pos++;
	int e = peek(c);
	const char *simple = NULL;
	switch (e) {
	case '"': simple = "\""; break;
	case '\\': simple = "\\"; break;
	case 'b': simple = "\b"; break;
	case 't': simple = "\t"; break;
	case 'n': simple = "\n"; break;
	case 'f': simple = "\f"; break;
	case 'r': simple = "\r"; break;
	case 'u':
	case 'U': break;
	default:
		fail_at(c, esc, "unknown escape sequence");
		return -1;
	}
	if (simple) {
		if (mesh_buf_add(b, simple, 1))
			return -ENOMEM;
		c->pos++;
		return 0;
	}
	unsigned digits = e == 'u' ? 4 : 8;
	uint32_t cp = 0;
	c->pos++;
	for (unsigned i = 0; i < digits; i++) {
		int h = hexval(peek(c));
		if (h < 0) {
			fail_at(c, esc, "\\%c needs %u hex digits", e, digits);
			return -1;
		}
		cp = cp << 4 | (uint32_t)h;
		c->pos++;
	}
	if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
		fail_at(c, esc, cp == 0 ? "NUL is not allowed in a string" : "escape is not a Unicode scalar value");
		return -1;
	}
	if (put_utf8(b, cp))
		return -ENOMEM;
	return 0;
}

/* A string value at c->pos ('"' or '\''); the decoded text is malloc'd. */
static char *string_value(struct cur *c)
{
	char q = c->s[c->pos];
	size_t open = c->pos;
	struct mesh_buf b = MESH_BUF_INIT;
	c->pos++;
	if (c->pos + 1 < c->n && c->s[c->pos] == q && c->s[c->pos + 1] == q) {
		fail_at(c, open, "multi-line strings are not supported");
		return NULL;
	}
	if (mesh_buf_grow(&b, 16)) {
		c->rc = -ENOMEM;
		return NULL;
	}
	b.p[0] = 0; /* mesh_buf_grow does not terminate; "" must come back as "" */
	for (;;) {
		if (c->pos >= c->n || c->s[c->pos] == '\n' || c->s[c->pos] == '\r') {
			fail_at(c, open, "unterminated string");
			goto bad;
		}
		unsigned char ch = (unsigned char)c->s[c->pos];
		if (ch == (unsigned char)q) {
			c->pos++;
			break;
		}
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
			fail_at(c, c->pos, "control character 0x%02x in a string", ch);
			goto bad;
		}
		if (ch != '\\' || q == '\'') {
			if (mesh_buf_add(&b, &c->s[c->pos], 1))
				goto nomem;
			c->pos++;
			continue;
		}
		int rc = escape(c, &b);
		if (rc == -ENOMEM)
			goto nomem;
		if (rc)
			goto bad;
	}
	return mesh_buf_detach(&b, NULL);
nomem:
	c->rc = -ENOMEM;
bad:
	mesh_buf_release(&b);
	return NULL;
}

static int int_value(struct cur *c, int64_t *out)
{
	size_t start = c->pos;
	int neg = 0;
	if (peek(c) == '+' || peek(c) == '-') {
		neg = peek(c) == '-';
		c->pos++;
	}
	size_t digits = c->pos;
	uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
	int prev_us = 1, nd = 0;
	while (c->pos < c->n) {
		int ch = (unsigned char)c->s[c->pos];
		if (ch == '_') {
			if (prev_us)
				return fail_at(c, c->pos, "'_' must sit between digits");
			prev_us = 1;
			c->pos++;
			continue;
		}
		if (ch < '0' || ch > '9')
			break;
		if (v > (lim - (uint64_t)(ch - '0')) / 10)
			return fail_at(c, start, "integer out of range");
		v = v * 10 + (uint64_t)(ch - '0');
		prev_us = 0;
		nd++;
		c->pos++;
	}
	if (nd == 0)
		return fail_at(c, start, "expected a value");
	if (prev_us)
		return fail_at(c, c->pos - 1, "'_' must sit between digits");
	if (c->s[digits] == '0' && nd > 1)
		return fail_at(c, start, "leading zeros are not allowed");
	if (c->pos < c->n) {
		int ch = (unsigned char)c->s[c->pos];
		if (ch == '.' || ch == 'e' || ch == 'E')
			return 1; /* a float: float_value reads it from start */
		if (is_bare(ch) || ch == ':')
			return fail_at(c, start, "not a decimal integer");
	}
	*out = neg ? (int64_t)(0 - v) : (int64_t)v;
	return 0;
}

/* Digits with '_' only between two of them, from c->pos, copied without
 * the '_' into b: their count, or -1 (an error is set). */
static int digits_into(struct cur *c, struct mesh_buf *b)
{
	int nd = 0, prev_us = 1;
	while (c->pos < c->n) {
		int ch = (unsigned char)c->s[c->pos];
		if (ch == '_') {
			if (prev_us)
				return fail_at(c, c->pos, "'_' must sit between digits"), -1;
			prev_us = 1;
		} else if (ch >= '0' && ch <= '9') {
			if (mesh_buf_add(b, c->s + c->pos, 1))
				return c->rc = -ENOMEM, -1;
			prev_us = 0;
			nd++;
		} else {
			break;
		}
		c->pos++;
	}
	if (nd && prev_us)
		return fail_at(c, c->pos - 1, "'_' must sit between digits"), -1;
	return nd;
}

/* ch added to b; 0, or -1 (out of memory: c->rc set). */
static int add_char(struct cur *c, struct mesh_buf *b, char ch)
{
	if (mesh_buf_add(b, &ch, 1) == 0)
		return 0;
	c->rc = -ENOMEM;
	return -1;
}

/* A float's '.' or exponent ('e'/'E' at c->pos, then a sign when exp)
 * and its digits, at least one (else the error said): into b.  0 or -1. */
static int float_part(struct cur *c, struct mesh_buf *b, int exp, const char *no_digits)
{
	if (add_char(c, b, c->s[c->pos++]))
		return -1;
	if (exp && (peek(c) == '+' || peek(c) == '-') && add_char(c, b, c->s[c->pos++]))
		return -1;
	int nd = digits_into(c, b);
	if (nd == 0)
		fail_at(c, c->pos, "%s", no_digits);
	return nd > 0 ? 0 : -1;
}

/* A float from start (its integer part already checked by int_value):
 * [+-]int, then .digits and/or e[+-]digits (TOML 1.0's; no inf or nan),
 * finite as a double. */
static int float_value(struct cur *c, size_t start, double *out)
{
	struct mesh_buf b = MESH_BUF_INIT;
	int rc = 0;
	c->pos = start;
	if ((peek(c) == '+' || peek(c) == '-') && add_char(c, &b, c->s[c->pos++]))
		goto out;
	if (digits_into(c, &b) < 0)
		goto out;
	if (peek(c) == '.' && float_part(c, &b, 0, "a float's '.' must be followed by digits"))
		goto out;
	if ((peek(c) == 'e' || peek(c) == 'E') && float_part(c, &b, 1, "a float's exponent must have digits"))
		goto out;
	if (c->pos < c->n && (is_bare((unsigned char)c->s[c->pos]) || c->s[c->pos] == '.')) {
		fail_at(c, start, "not a decimal number");
		goto out;
	}
	char *end;
	errno = 0;
	double v = strtod(b.p, &end);
	if (*end || !isfinite(v) || (errno == ERANGE && fabs(v) > 1.0)) {
		fail_at(c, start, "float out of range");
		goto out;
	}
	*out = v;
	rc = 1;
out:
	mesh_buf_release(&b);
	return rc ? 0 : (c->rc ? c->rc : -ENOMEM);
}

/* Skips blank lines, spaces and comments inside an array. */
static int array_space(struct cur *c)
{
	for (;;) {
		skip_ws(c);
		if (skip_comment(c))
			return c->rc;
		if (c->pos < c->n && c->s[c->pos] == '\r' && c->pos + 1 < c->n && c->s[c->pos + 1] == '\n')
			c->pos++;
		if (c->pos < c->n && c->s[c->pos] == '\n') {
			c->pos++;
			c->line++;
			c->bol = c->pos;
			continue;
		}
		return 0;
	}
}

static int array_value(struct cur *c, struct mesh_toml_item *it)
{
	size_t open = c->pos;
	unsigned oline = c->line;
	size_t obol = c->bol;
	size_t cap = 0;
	c->pos++;
	for (;;) {
		if (array_space(c))
			return c->rc;
		if (c->pos >= c->n) {
			c->line = oline;
			c->bol = obol;
			return fail_at(c, open, "unterminated array");
		}
		if (c->s[c->pos] == ']') {
			c->pos++;
			return 0;
		}
		if (c->s[c->pos] != '"' && c->s[c->pos] != '\'')
			return fail_at(c, c->pos, "arrays may hold only strings");
		char *s = string_value(c);
		if (!s)
			return c->rc;
		char **na = mesh_grow(it->arr, &cap, it->n + 1, sizeof *na);
		if (!na) {
			free(s);
			return c->rc = -ENOMEM;
		}
		it->arr = na;
		it->arr[it->n++] = s;
		if (array_space(c))
			return c->rc;
		if (peek(c) == ',') {
			c->pos++;
			continue;
		}
		if (peek(c) == ']')
			continue;
		if (peek(c) < 0)
			continue;
		return fail_at(c, c->pos, "expected ',' or ']' in an array");
	}
}

static int value(struct cur *c, struct mesh_toml_item *it)
{
	int ch = peek(c);
	it->vline = c->line;
	it->vcol = col_of(c, c->pos);
	if (ch == '"' || ch == '\'') {
		it->type = MESH_TOML_STRING;
		it->str = string_value(c);
		return it->str ? 0 : c->rc;
	}
	if (ch == '[') {
		it->type = MESH_TOML_ARRAY;
		return array_value(c, it);
	}
	if (ch == '{')
		return fail_at(c, c->pos, "inline tables are not supported");
	if ((ch >= '0' && ch <= '9') || ch == '+' || ch == '-') {
		size_t start = c->pos;
		it->type = MESH_TOML_INT;
		int rc = int_value(c, &it->i);
		if (rc != 1)
			return rc;
		it->type = MESH_TOML_FLOAT;
		return float_value(c, start, &it->f);
	}
	if (c->n - c->pos >= 4 && memcmp(c->s + c->pos, "true", 4) == 0 &&
	    (c->pos + 4 == c->n || !is_bare((unsigned char)c->s[c->pos + 4]))) {
		it->type = MESH_TOML_BOOL;
		it->b = 1;
		c->pos += 4;
		return 0;
	}
	if (c->n - c->pos >= 5 && memcmp(c->s + c->pos, "false", 5) == 0 &&
	    (c->pos + 5 == c->n || !is_bare((unsigned char)c->s[c->pos + 5]))) {
		it->type = MESH_TOML_BOOL;
		it->b = 0;
		c->pos += 5;
		return 0;
	}
	if (ch < 0 || ch == '\n' || ch == '\r' || ch == '#')
		return fail_at(c, c->pos, "expected a value");
	return fail_at(c, c->pos, "expected a value (string, integer, boolean or array of strings)");
}

static void item_free(struct mesh_toml_item *it)
{
	free(it->table);
	free(it->key);
	free(it->str);
	for (size_t i = 0; i < it->n; i++)
		free(it->arr[i]);
	free(it->arr);
}

void mesh_toml_release(struct mesh_toml *t)
{
	for (size_t i = 0; i < t->n; i++)
		item_free(&t->items[i]);
	free(t->items);
	t->items = NULL;
	t->n = 0;
}

/* Valid UTF-8, no NUL: checked up front so every later error has a line. */
static int check_utf8(struct cur *c)
{
	size_t i = 0;
	while (i < c->n) {
		unsigned char b0 = (unsigned char)c->s[i];
		if (b0 == '\n') {
			c->line++;
			c->bol = i + 1;
		}
		if (b0 == 0)
			return fail_at(c, i, "NUL byte");
		if (b0 < 0x80) {
			i++;
			continue;
		}
		size_t need;
		uint32_t cp, min;
		if ((b0 & 0xe0) == 0xc0) {
			need = 1, cp = b0 & 0x1f, min = 0x80;
		} else if ((b0 & 0xf0) == 0xe0) {
			need = 2, cp = b0 & 0x0f, min = 0x800;
		} else if ((b0 & 0xf8) == 0xf0) {
			need = 3, cp = b0 & 0x07, min = 0x10000;
		} else {
			return fail_at(c, i, "invalid UTF-8");
		}
		if (c->n - i <= need)
			return fail_at(c, i, "invalid UTF-8");
		for (size_t k = 1; k <= need; k++) {
			unsigned char bk = (unsigned char)c->s[i + k];
			if ((bk & 0xc0) != 0x80)
				return fail_at(c, i, "invalid UTF-8");
			cp = cp << 6 | (bk & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return fail_at(c, i, "invalid UTF-8");
		i += need + 1;
	}
	c->line = 1;
	c->bol = 0;
	return 0;
}

static struct mesh_toml_item *find(struct mesh_toml *t, const char *table, const char *key)
{
	for (size_t i = 0; i < t->n; i++) {
		struct mesh_toml_item *it = &t->items[i];
		if (strcmp(it->table, table) != 0)
			continue;
		if (key ? (it->key && strcmp(it->key, key) == 0) : it->type == MESH_TOML_TABLE)
			return it;
	}
	return NULL;
}

static struct mesh_toml_item *push(struct cur *c, struct mesh_toml *t, size_t *cap)
{
	struct mesh_toml_item *ni = mesh_grow(t->items, cap, t->n + 1, sizeof *ni);
	if (!ni) {
		c->rc = -ENOMEM;
		return NULL;
	}
	t->items = ni;
	struct mesh_toml_item *it = &t->items[t->n++];
	memset(it, 0, sizeof *it);
	return it;
}

/* After "[" and its spaces: a table's name, bare names joined by '.' with
 * spaces around the dots allowed, and the spaces after it.  [a.b]: the
 * table named "a.b" (what TOML makes of it for the keys in it; no key "b"
 * is made in [a]).  Returns the malloc'd name, or NULL with c->rc set. */
static char *table_name(struct cur *c)
{
	char *name = bare_key(c, "table name");
	if (!name)
		return NULL;
	skip_ws(c);
	while (name && peek(c) == '.') {
		c->pos++;
		skip_ws(c);
		char *part = bare_key(c, "table name");
		char *joined = part ? malloc(strlen(name) + strlen(part) + 2) : NULL;
		if (joined)
			sprintf(joined, "%s.%s", name, part);
		else if (part)
			c->rc = -ENOMEM;
		free(part);
		free(name);
		name = joined;
		skip_ws(c);
	}
	return name;
}

/* At a '[': a "[name]" header, up to its ']'.  Pushes its TABLE item and
 * makes it the table that the keys after it go in (*table, replaced).
 * Returns 0, or c->rc with the error recorded. */
static int table_header(struct cur *c, struct mesh_toml *t, size_t *cap, char **table)
{
	size_t start = c->pos;
	c->pos++;
	if (peek(c) == '[')
		return fail_at(c, start, "arrays of tables are not supported");
	skip_ws(c);
	char *name = table_name(c);
	if (!name)
		return c->rc;
	if (peek(c) != ']') {
		free(name);
		return fail_at(c, c->pos, "expected ']'");
	}
	c->pos++;
	if (find(t, name, NULL)) {
		fail_at(c, start, "table [%s] defined twice", name);
		free(name);
		return c->rc;
	}
	struct mesh_toml_item *it = push(c, t, cap);
	if (!it) {
		free(name);
		return c->rc;
	}
	it->type = MESH_TOML_TABLE;
	it->line = c->line;
	it->col = col_of(c, start);
	it->table = name;
	free(*table);
	*table = strdup(name);
	if (!*table)
		return c->rc = -ENOMEM;
	return 0;
}

/* At a key: "key = value", the key new in table ("" for the top level).
 * Pushes its item with the value.  Returns 0, or c->rc with the error
 * recorded. */
static int key_value(struct cur *c, struct mesh_toml *t, size_t *cap, const char *table)
{
	size_t start = c->pos;
	char *key = bare_key(c, "key");
	if (!key)
		return c->rc;
	skip_ws(c);
	if (peek(c) == '.') {
		free(key);
		return fail_at(c, c->pos, "dotted keys are not supported");
	}
	if (peek(c) != '=') {
		free(key);
		return fail_at(c, c->pos, "expected '=' after the key");
	}
	if (find(t, table, key)) {
		if (*table)
			fail_at(c, start, "key '%s' defined twice in [%s]", key, table);
		else
			fail_at(c, start, "key '%s' defined twice", key);
		free(key);
		return c->rc;
	}
	c->pos++;
	skip_ws(c);
	struct mesh_toml_item *it = push(c, t, cap);
	if (!it) {
		free(key);
		return c->rc;
	}
	it->line = c->line;
	it->col = col_of(c, start);
	it->key = key;
	it->table = strdup(table);
	if (!it->table)
		return c->rc = -ENOMEM;
	return value(c, it);
}

int mesh_toml_parse(const char *file, const char *text, size_t len, struct mesh_toml *out, char **err)
{
	struct cur c = {.file = file ? file : "(manifest)", .s = text, .n = len, .line = 1, .err = err};
	struct mesh_toml t = MESH_TOML_INIT;
	size_t cap = 0;
	char *table = strdup("");
	if (err)
		*err = NULL;
	out->items = NULL;
	out->n = 0;
	if (!table)
		return -ENOMEM;
	if (check_utf8(&c))
		goto done;
	while (c.pos < c.n && !c.rc) {
		skip_ws(&c);
		int ch = peek(&c);
		if (ch == '#' || ch == '\n' || ch == '\r' || ch < 0) {
			end_of_line(&c);
			continue;
		}
		if (ch == '[' ? table_header(&c, &t, &cap, &table) : key_value(&c, &t, &cap, table))
			break;
		end_of_line(&c);
	}
done:
	free(table);
	if (c.rc) {
		mesh_toml_release(&t);
		if (c.rc == -ENOMEM && err) {
			free(*err);
			*err = NULL;
		}
		return c.rc;
	}
	*out = t;
	return 0;
}

const char *mesh_toml_type_name(enum mesh_toml_type t)
{
	switch (t) {
	case MESH_TOML_TABLE: return "table";
	case MESH_TOML_STRING: return "string";
	case MESH_TOML_INT: return "integer";
	case MESH_TOML_FLOAT: return "float";
	case MESH_TOML_BOOL: return "boolean";
	case MESH_TOML_ARRAY: return "array";
	}
	return "?";
}
