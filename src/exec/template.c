#include "exec/template.h"

#include "base/err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_VALUE = 1, K_POS, K_SEQ, K_SLOT };
enum { M_NONE, M_NOEXT, M_BASE, M_DIR, M_BASENOEXT };

struct tok {
	int kind, mod;
	unsigned pos; /* K_POS: 1-based */
	size_t len;   /* bytes of the token */
};

/* Recognises a replacement string at s (which starts with '{'); 0 when
 * there is none. */
static int parse_tok(const char *s, struct tok *t)
{
	static const struct {
		const char *text;
		int mod;
	} mods[] = {{"}", M_NONE}, {".}", M_NOEXT}, {"/}", M_BASE}, {"//}", M_DIR}, {"/.}", M_BASENOEXT}};
	const char *p = s + 1;
	memset(t, 0, sizeof *t);
	if ((p[0] == '#' || p[0] == '%') && p[1] == '}') {
		t->kind = p[0] == '#' ? K_SEQ : K_SLOT;
		t->len = 3;
		return 1;
	}
	t->kind = K_VALUE;
	if (*p >= '1' && *p <= '9') {
		t->kind = K_POS;
		while (*p >= '0' && *p <= '9' && t->pos < 100000)
			t->pos = t->pos * 10 + (unsigned)(*p++ - '0');
	}
	for (size_t i = 0; i < sizeof mods / sizeof mods[0]; i++) {
		size_t n = strlen(mods[i].text);
		if (!strncmp(p, mods[i].text, n)) {
			t->mod = mods[i].mod;
			t->len = (size_t)(p - s) + n;
			return 1;
		}
	}
	return 0;
}

/* The first replacement string in s (its offset in *at), or 0. */
static int find_tok(const char *s, struct tok *t, size_t *at)
{
	for (const char *p = strchr(s, '{'); p; p = strchr(p + 1, '{')) {
		if (parse_tok(p, t)) {
			*at = (size_t)(p - s);
			return 1;
		}
	}
	return 0;
}

int mesh_exec_template_init(struct mesh_exec_template *t, char *const *argv)
{
	memset(t, 0, sizeof *t);
	if (!argv || !argv[0] || !argv[0][0])
		return MESH_E_PARSE;
	t->argv = argv;
	while (argv[t->argc])
		t->argc++;
	t->subst = calloc(t->argc, 1);
	if (!t->subst)
		return -ENOMEM;
	t->shell = t->argc == 3 && !strcmp(argv[0], "/bin/sh") && !strcmp(argv[1], "-c");
	for (size_t i = 0; i < t->argc; i++) {
		struct tok k;
		size_t at;
		if (!find_tok(argv[i], &k, &at))
			continue;
		t->subst[i] = 1;
		t->has_value = 1;
		t->nsubst++;
		if (at == 0 && k.len == strlen(argv[i]) && k.kind == K_VALUE)
			t->nwhole++;
	}
	return 0;
}

void mesh_exec_template_release(struct mesh_exec_template *t)
{
	free(t->subst);
	memset(t, 0, sizeof *t);
}

/* One chunk's strings for the expansion. */
struct chunk {
	const char *vals[MESH_EXEC_INPUT_MAX_ARGS], *args[MESH_EXEC_INPUT_MAX_ARGS];
	size_t nvals, nargs;
	char seq[24], slot[16], id[24];
	int quote;   /* single-quote values for the shell */
	int context; /* -X: a longer argument repeats once a value */
};

static int safe_word(const char *s, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,:@%+=-", s[i]) || !s[i])
			return 0;
	return 1;
}

static int put(struct mesh_buf *b, const char *s, size_t n, int quote)
{
	if (!quote || safe_word(s, n))
		return mesh_buf_add(b, s, n);
	if (mesh_buf_add(b, "'", 1) < 0)
		return -ENOMEM;
	for (const char *q; (q = memchr(s, '\'', n)); n -= (size_t)(q + 1 - s), s = q + 1)
		if (mesh_buf_add(b, s, (size_t)(q - s)) < 0 || mesh_buf_add(b, "'\\''", 4) < 0)
			return -ENOMEM;
	return mesh_buf_add(b, s, n) < 0 || mesh_buf_add(b, "'", 1) < 0 ? -ENOMEM : 0;
}

/* v with the modifier applied, added to b. */
static int put_mod(struct mesh_buf *b, const char *v, int mod, int quote)
{
	size_t n = strlen(v);
	const char *slash = strrchr(v, '/');
	if (mod == M_DIR) {
		if (!slash)
			return put(b, ".", 1, quote);
		return put(b, v, slash == v ? 1 : (size_t)(slash - v), quote);
	}
	if ((mod == M_BASE || mod == M_BASENOEXT) && slash) {
		n -= (size_t)(slash + 1 - v);
		v = slash + 1;
	}
	if (mod == M_NOEXT || mod == M_BASENOEXT) {
		const char *dot = NULL;
		for (size_t i = 0; i < n; i++)
			if (v[i] == '.')
				dot = v + i;
			else if (v[i] == '/')
				dot = NULL;
		if (dot)
			n = (size_t)(dot - v);
	}
	return put(b, v, n, quote);
}

/* The text of token k inside a longer argument; only >= 0: a value
 * token gives that value alone (-X's context replacement). */
static int put_tok(struct mesh_buf *b, const struct tok *k, const struct chunk *c, long only)
{
	if (k->kind == K_SEQ)
		return mesh_buf_adds(b, c->seq);
	if (k->kind == K_SLOT)
		return mesh_buf_adds(b, c->slot);
	if (k->kind == K_POS)
		return k->pos <= c->nargs ? put_mod(b, c->args[k->pos - 1], k->mod, c->quote) : 0;
	if (only >= 0)
		return put_mod(b, c->vals[only], k->mod, c->quote);
	for (size_t i = 0; i < c->nvals; i++)
		if ((i && mesh_buf_add(b, " ", 1) < 0) || put_mod(b, c->vals[i], k->mod, c->quote) < 0)
			return -ENOMEM;
	return 0;
}

/* Whether s holds {} or one of its modified forms (not {n}, {#}, {%}). */
static int has_value_tok(const char *s)
{
	struct tok t;
	for (const char *p = strchr(s, '{'); p; p = strchr(p + 1, '{'))
		if (parse_tok(p, &t) && t.kind == K_VALUE)
			return 1;
	return 0;
}

/* Starts output argument *k at the end of b. */
static void mark(struct mesh_buf *b, char **out, size_t *k)
{
	out[(*k)++] = (char *)(uintptr_t)b->len;
}

static int end_arg(struct mesh_buf *b)
{
	return mesh_buf_add(b, "", 1);
}

/* s with its replacement strings expanded (only: as put_tok). */
static int put_text(struct mesh_buf *b, const char *s, const struct chunk *c, long only)
{
	struct tok tk;
	size_t at;
	while (find_tok(s, &tk, &at)) {
		if (mesh_buf_add(b, s, at) < 0 || put_tok(b, &tk, c, only) < 0)
			return -ENOMEM;
		s += at + tk.len;
	}
	return mesh_buf_adds(b, s);
}

/* -X in a shell script: a word holding {} is repeated once a value,
 * blank-separated; other words as put_text.  Words are split at blanks
 * only (the script's own quoting is not parsed). */
static int put_words(struct mesh_buf *b, const char *s, const struct chunk *c)
{
	struct mesh_buf w = MESH_BUF_INIT;
	int rc = 0;
	while (*s && rc == 0) {
		size_t sp = strspn(s, " \t\n"), n;
		rc = mesh_buf_add(b, s, sp);
		s += sp;
		n = strcspn(s, " \t\n");
		if (n == 0 || rc < 0)
			continue;
		mesh_buf_reset(&w);
		if ((rc = mesh_buf_add(&w, s, n)) < 0 || (rc = mesh_buf_add(&w, "", 1)) < 0)
			break;
		s += n;
		long reps = has_value_tok(w.p) ? (long)c->nvals : 0;
		for (long r = 0; r < (reps ? reps : 1) && rc == 0; r++)
			rc = (r > 0 && mesh_buf_add(b, " ", 1) < 0) || put_text(b, w.p, c, reps ? r : -1) < 0 ? -ENOMEM : 0;
	}
	mesh_buf_release(&w);
	return rc;
}

/* Expands template argument s into one or more output arguments. */
static int expand_arg(const struct mesh_exec_template *t, const char *s, const struct chunk *c, struct mesh_buf *b,
		      char **out, size_t *k)
{
	struct tok tk;
	size_t at;
	int whole = find_tok(s, &tk, &at) && at == 0 && tk.len == strlen(s);
	if (whole && t->shell && !strcmp(s, "{}") && c->quote) {
		/* the input line is the command */
		struct chunk raw = *c;
		raw.quote = 0;
		mark(b, out, k);
		return put_tok(b, &tk, &raw, -1) < 0 || end_arg(b) < 0 ? -ENOMEM : 0;
	}
	if (whole && !c->quote && tk.kind == K_VALUE) {
		for (size_t i = 0; i < c->nvals; i++) {
			mark(b, out, k);
			if (put_mod(b, c->vals[i], tk.mod, 0) < 0 || end_arg(b) < 0)
				return -ENOMEM;
		}
		return 0;
	}
	if (whole && !c->quote && tk.kind == K_POS && tk.pos > c->nargs)
		return 0;
	/* -X: the argument once a value (when it holds a value token); in a
	 * shell script, each word (between blanks) that holds one */
	long reps = c->context && !c->quote && has_value_tok(s) ? (long)c->nvals : 0;
	for (long r = 0; r < (reps ? reps : 1); r++) {
		if (r > 0 && end_arg(b) < 0)
			return -ENOMEM;
		mark(b, out, k);
		if ((c->context && c->quote ? put_words(b, s, c) : put_text(b, s, c, reps ? r : -1)) < 0)
			return -ENOMEM;
	}
	if (c->quote && !t->has_value) /* one-word command line: arguments go into the script */
		for (size_t i = 0; i < c->nargs; i++)
			if (mesh_buf_add(b, " ", 1) < 0 || put(b, c->args[i], strlen(c->args[i]), 1) < 0)
				return -ENOMEM;
	return end_arg(b);
}

static int load_chunk(struct chunk *c, const struct mesh_exec_input *in, uint64_t cid, unsigned slot)
{
	snprintf(c->seq, sizeof c->seq, "%" PRIu64, cid + 1);
	snprintf(c->slot, sizeof c->slot, "%u", slot);
	snprintf(c->id, sizeof c->id, "%" PRIu64, cid);
	c->context = in && in->context;
	if (in && in->pipe) {
		/* the records go to standard input: {} and {n} are empty */
		c->nvals = c->nargs = 0;
		return cid < in->n ? 0 : MESH_E_RANGE;
	}
	if (!in) {
		c->vals[0] = c->args[0] = c->id;
		c->nvals = c->nargs = 1;
		return 0;
	}
	int rc = mesh_exec_input_values(in, cid, c->vals, &c->nvals);
	return rc < 0 ? rc : mesh_exec_input_args(in, cid, c->args, &c->nargs);
}

int mesh_exec_template_expand(const struct mesh_exec_template *t, const struct mesh_exec_input *in, uint64_t cid,
			      unsigned slot, struct mesh_buf *buf, char **out_argv)
{
	struct chunk *c = malloc(sizeof *c);
	int rc = -ENOMEM;
	size_t k = 0;
	if (!c)
		return -ENOMEM;
	if ((rc = load_chunk(c, in, cid, slot)) < 0)
		goto out;
	rc = -ENOMEM;
	mesh_buf_reset(buf);
	/* Offsets first, pointers after: buf may move while it grows. */
	for (size_t i = 0; i < t->argc; i++) {
		c->quote = t->shell && i == 2;
		if (!t->subst[i] && !c->quote) {
			mark(buf, out_argv, &k);
			if (mesh_buf_add(buf, t->argv[i], strlen(t->argv[i]) + 1) < 0)
				goto out;
		} else if (expand_arg(t, t->argv[i], c, buf, out_argv, &k) < 0) {
			goto out;
		}
	}
	for (size_t i = 0; !t->has_value && !t->shell && i < c->nargs; i++) {
		mark(buf, out_argv, &k);
		if (mesh_buf_add(buf, c->args[i], strlen(c->args[i]) + 1) < 0)
			goto out;
	}
	for (size_t i = 0; i < k; i++)
		out_argv[i] = buf->p + (uintptr_t)out_argv[i];
	out_argv[k] = NULL;
	rc = 0;
out:
	free(c);
	return rc;
}
