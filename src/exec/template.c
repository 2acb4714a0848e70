#include "exec/template.h"

#include "base/err.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_VALUE = 1, K_POS, K_SEQ, K_SLOT };
enum { M_NONE, M_NOEXT, M_BASE, M_DIR, M_BASENOEXT, M_EXPR };

/* One step of an --rpl expression (mesh_exec_rpls_define). */
enum { OP_S, OP_TR, OP_UC, OP_LC, OP_UCFIRST, OP_LCFIRST, OP_SEQ, OP_SLOT, OP_TOTAL };
struct op {
	int type;
	int or_next; /* `A || B`: B runs only when A did nothing */
	int global;  /* s///g */
	int has_re;
	regex_t re;
	char *repl; /* s///: REPL, a group as the byte 1 then '0'..'9' or '&' */
	unsigned char map[256], in[256]; /* tr: what each byte becomes; which bytes it takes */
};

struct mesh_exec_rpl {
	char *name; /* what the command holds */
	size_t len;
	int kind, mod; /* K_VALUE, K_SEQ, K_SLOT; M_* (M_EXPR: ops) */
	unsigned pos;  /* --rpl 'TAG N ...': the N-th argument always */
	struct op *ops;
	size_t nops;
};

static const struct {
	const char *name;
	int kind, mod;
} builtin[MESH_EXEC_RPL_BUILTIN] = {
	[MESH_EXEC_RPL_VALUE] = {"{}", K_VALUE, M_NONE},	  [MESH_EXEC_RPL_NOEXT] = {"{.}", K_VALUE, M_NOEXT},
	[MESH_EXEC_RPL_BASE] = {"{/}", K_VALUE, M_BASE},	  [MESH_EXEC_RPL_DIR] = {"{//}", K_VALUE, M_DIR},
	[MESH_EXEC_RPL_BASENOEXT] = {"{/.}", K_VALUE, M_BASENOEXT}, [MESH_EXEC_RPL_SEQ] = {"{#}", K_SEQ, M_NONE},
	[MESH_EXEC_RPL_SLOT] = {"{%}", K_SLOT, M_NONE},
};

/* The table of a template built without one. */
static struct mesh_exec_rpl builtin_rpl[MESH_EXEC_RPL_BUILTIN] = {
	{"{}", 2, K_VALUE, M_NONE, 0, NULL, 0},	      {"{.}", 3, K_VALUE, M_NOEXT, 0, NULL, 0},
	{"{/}", 3, K_VALUE, M_BASE, 0, NULL, 0},      {"{//}", 4, K_VALUE, M_DIR, 0, NULL, 0},
	{"{/.}", 4, K_VALUE, M_BASENOEXT, 0, NULL, 0}, {"{#}", 3, K_SEQ, M_NONE, 0, NULL, 0},
	{"{%}", 3, K_SLOT, M_NONE, 0, NULL, 0},
};
static const struct mesh_exec_rpls builtin_rpls = {builtin_rpl, MESH_EXEC_RPL_BUILTIN};

/* ---- the table ---- */

static void ops_free(struct op *ops, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (ops[i].has_re)
			regfree(&ops[i].re);
		free(ops[i].repl);
	}
	free(ops);
}

int mesh_exec_rpls_init(struct mesh_exec_rpls *r)
{
	r->n = 0;
	if (!(r->v = calloc(MESH_EXEC_RPL_BUILTIN, sizeof *r->v)))
		return -ENOMEM;
	for (; r->n < MESH_EXEC_RPL_BUILTIN; r->n++) {
		struct mesh_exec_rpl *e = &r->v[r->n];
		if (!(e->name = strdup(builtin[r->n].name)))
			return -ENOMEM;
		e->len = strlen(e->name);
		e->kind = builtin[r->n].kind;
		e->mod = builtin[r->n].mod;
	}
	return 0;
}

int mesh_exec_rpls_rename(struct mesh_exec_rpls *r, int which, const char *name)
{
	if (!*name)
		return MESH_E_PARSE;
	if (which < 0 || (size_t)which >= r->n)
		return MESH_E_RANGE;
	char *n = strdup(name);
	if (!n)
		return -ENOMEM;
	free(r->v[which].name);
	r->v[which].name = n;
	r->v[which].len = strlen(n);
	return 0;
}

void mesh_exec_rpls_release(struct mesh_exec_rpls *r)
{
	for (size_t i = 0; r->v && i < r->n; i++) {
		free(r->v[i].name);
		ops_free(r->v[i].ops, r->v[i].nops);
	}
	free(r->v);
	r->v = NULL;
	r->n = 0;
}

/* ---- Perl's regexes as POSIX ones ---- */

/* glibc's regcomp copies a repeated part once a copy (x{1000}: 1000
 * copies, x+: 2), and a repeat inside a repeat multiplies: ((x+)+)+ ...
 * or x++++ (Perl's possessive, undefined in POSIX) grows as 2^depth, and
 * twenty of them take gigabytes.  So a pattern is refused whose parts,
 * counted with their copies, exceed RE_MAX_NODES, or that stacks two
 * quantifiers.  ere is the POSIX extended text. */
#define RE_MAX_NODES 20000
#define RE_MAX_DEPTH 32

static const char *regex_too_big(const char *ere)
{
	uint64_t sum[RE_MAX_DEPTH + 1] = {0}, last = 0; /* size so far at each depth; the last atom's */
	unsigned d = 0;
	int quantified = 0; /* the last atom already has its quantifier */
	for (const char *c = ere; *c;) {
		uint64_t times = 0; /* the copies a quantifier here makes; 0: none here */
		if (*c == '*' || *c == '?') {
			times = 1;
			c++;
		} else if (*c == '+') {
			times = 2;
			c++;
		} else if (*c == '{' && (isdigit((unsigned char)c[1]) || (c[1] == ',' && isdigit((unsigned char)c[2])))) {
			char *end;
			unsigned long lo = strtoul(c + 1, &end, 10), hi = lo;
			if (*end == ',')
				hi = isdigit((unsigned char)end[1]) ? strtoul(end + 1, &end, 10) : (end++, lo + 1);
			if (*end != '}')
				return "a {n,m} that does not end in }";
			times = hi > RE_MAX_NODES ? RE_MAX_NODES + 1 : (hi ? hi : 1);
			c = end + 1;
		}
		if (times) {
			if (!last)
				return "a quantifier that follows nothing";
			if (quantified)
				return "a quantifier on a quantifier (++, *+, {2}+: possessive in Perl, undefined in POSIX)";
			quantified = 1;
			sum[d] += last * (times - 1);
			last *= times;
		} else if (*c == '(') {
			if (d == RE_MAX_DEPTH)
				return "groups nested more than 32 deep";
			sum[++d] = 0;
			last = 0;
			quantified = 0;
			c++;
		} else if (*c == ')' && d > 0) {
			last = sum[d--] + 1;
			sum[d] += last;
			quantified = 0;
			c++;
		} else if (*c == '|' || *c == '^' || *c == '$') {
			last = 0;
			c++;
		} else {
			if (*c == '\\' && c[1]) {
				c += 2;
			} else if (*c == '[') {
				c += c[1] == '^' ? 2 : 1;
				c += *c == ']'; /* a leading ] is the byte */
				while (*c && *c != ']') {
					if (*c == '[' && (c[1] == ':' || c[1] == '.' || c[1] == '=')) {
						const char *e = strchr(c + 2, c[1]);
						c = e && e[1] == ']' ? e + 2 : c + 1;
					} else {
						c++;
					}
				}
				c += *c == ']';
			} else {
				c++;
			}
			last = 1;
			sum[d] += 1;
			quantified = 0;
		}
		if (sum[d] > RE_MAX_NODES)
			return "a pattern that repeats too much (over 20,000 copies of its parts)";
	}
	return NULL;
}

int mesh_exec_regcomp_perl(regex_t *re, const char *perl, size_t len, int icase, const char **why)
{
	static const struct {
		char c;
		const char *out, *in_class; /* outside and inside [...] */
	} esc[] = {
		{'d', "[0-9]", "0-9"},	{'D', "[^0-9]", NULL},		 {'w', "[[:alnum:]_]", "[:alnum:]_"},
		{'W', "[^[:alnum:]_]", NULL}, {'s', "[[:space:]]", "[:space:]"}, {'S', "[^[:space:]]", NULL},
		{'t', "\t", "\t"},	{'n', "\n", "\n"},		 {'r', "\r", "\r"},
	};
	struct mesh_buf b = MESH_BUF_INIT;
	int in_class = 0, rc = 0;
	*why = NULL;
	for (size_t i = 0; i < len && rc == 0; i++) {
		char c = perl[i];
		if (c == '\\' && i + 1 < len) {
			char e = perl[++i];
			size_t k = 0;
			while (k < sizeof esc / sizeof esc[0] && esc[k].c != e)
				k++;
			if (k < sizeof esc / sizeof esc[0]) {
				const char *s = in_class ? esc[k].in_class : esc[k].out;
				if (!s) {
					*why = "a negated class (\\D, \\W, \\S) inside [...]";
					rc = MESH_E_PARSE;
				} else {
					rc = mesh_buf_adds(&b, s);
				}
			} else if (isalnum((unsigned char)e)) {
				*why = "an escape (\\b, \\A, \\1 ...) that POSIX regexes do not have";
				rc = MESH_E_PARSE;
			} else if (in_class) {
				rc = mesh_buf_add(&b, &e, 1); /* [\.] is [.] */
			} else {
				char two[2] = {'\\', e};
				rc = mesh_buf_add(&b, two, 2);
			}
			continue;
		}
		if (in_class) {
			if (c == ']' && !(perl[i - 1] == '[' || (perl[i - 1] == '^' && perl[i - 2] == '[')))
				in_class = 0;
		} else if (c == '[') {
			in_class = 1;
		} else if ((c == '*' || c == '+' || c == '?' || c == '}') && i + 1 < len && perl[i + 1] == '?') {
			*why = "a lazy quantifier (*?, +?): POSIX regexes match the longest";
			rc = MESH_E_PARSE;
			break;
		} else if (c == '(' && i + 1 < len && perl[i + 1] == '?') {
			*why = "a (?...) group";
			rc = MESH_E_PARSE;
			break;
		}
		if (c == 0) {
			*why = "a NUL byte";
			rc = MESH_E_PARSE;
			break;
		}
		rc = mesh_buf_add(&b, &c, 1);
	}
	if (rc == 0 && (rc = mesh_buf_add(&b, "", 1)) == 0 && (*why = regex_too_big(b.p)) != NULL)
		rc = MESH_E_PARSE;
	if (rc == 0 && regcomp(re, b.p, REG_EXTENDED | (icase ? REG_ICASE : 0)) != 0) {
		*why = "not a regular expression";
		rc = MESH_E_PARSE;
	}
	if (rc == -ENOMEM)
		*why = "out of memory";
	mesh_buf_release(&b);
	return rc;
}

/* ---- --rpl's expressions ---- */

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\n')
		p++;
	return p;
}

/* A delimiter of s/// or tr///: punctuation, not a bracket. */
static int delim_ok(char d)
{
	return d && ispunct((unsigned char)d) && !strchr("([{<;", d);
}

/* One part of s/// or tr/// from p up to the delimiter d (unescaped), in
 * out (NUL-terminated): \d becomes d; keep: other escapes stay. */
static const char *part(const char *p, char d, int keep, struct mesh_buf *out, const char **why)
{
	mesh_buf_reset(out);
	for (; *p && *p != d; p++) {
		if (*p == '\\' && p[1]) {
			p++;
			if (*p != d && keep && mesh_buf_add(out, "\\", 1) < 0)
				return NULL;
		}
		if (mesh_buf_add(out, p, 1) < 0)
			return NULL;
	}
	if (*p != d) {
		*why = "an unterminated s/// or tr///";
		return NULL;
	}
	return mesh_buf_add(out, "", 1) < 0 ? NULL : p + 1;
}

/* s///'s replacement: groups as byte 1 then '0'..'9' or '&'. */
static int repl_parse(const char *s, char **out, const char **why)
{
	struct mesh_buf b = MESH_BUF_INIT;
	int rc = 0;
	for (; *s && rc == 0; s++) {
		char g = 0;
		if (*s == '\\' && s[1]) {
			s++;
			char c = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s;
			rc = mesh_buf_add(&b, &c, 1);
			continue;
		}
		if (*s == '$' && isdigit((unsigned char)s[1]) && s[1] != '0' && !isdigit((unsigned char)s[2]))
			g = *++s;
		else if (*s == '$' && s[1] == '{' && isdigit((unsigned char)s[2]) && s[2] != '0' && s[3] == '}')
			g = s[2], s += 3;
		else if (*s == '$' && s[1] == '&')
			g = '&', s++;
		else if (*s == '$' || *s == '@') {
			*why = "a variable in s///'s replacement (only $1..$9 and $&)";
			rc = MESH_E_PARSE;
			break;
		} else if (*s == 1) {
			*why = "a control byte in s///'s replacement";
			rc = MESH_E_PARSE;
			break;
		}
		rc = g ? mesh_buf_add(&b, "\1", 1) == 0 ? mesh_buf_add(&b, &g, 1) : -ENOMEM : mesh_buf_add(&b, s, 1);
	}
	if (rc == 0 && (rc = mesh_buf_add(&b, "", 1)) == 0) {
		*out = b.p;
		return 0;
	}
	mesh_buf_release(&b);
	return rc;
}

/* tr's list: bytes with a-z ranges and escapes, in order. */
static int tr_list(const char *s, unsigned char *out, size_t *n)
{
	*n = 0;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '\\' && s[1]) {
			s++;
			c = *s == 'n' ? '\n' : *s == 't' ? '\t' : (unsigned char)*s;
		} else if (s[1] == '-' && s[2]) {
			unsigned char to = (unsigned char)s[2];
			if (to < c)
				return MESH_E_PARSE;
			for (unsigned k = c; k <= to && *n < 1024; k++)
				out[(*n)++] = (unsigned char)k;
			s += 2;
			continue;
		}
		if (*n < 1024)
			out[(*n)++] = c;
	}
	return 0;
}

/* One ALT at p into op; returns the byte after it or NULL (*why). */
static const char *parse_alt(const char *p, struct op *op, struct mesh_buf *t1, struct mesh_buf *t2, const char **why)
{
	memset(op, 0, sizeof *op);
	if (p[0] == 's' && delim_ok(p[1])) {
		char d = p[1];
		const char *q = part(p + 2, d, 1, t1, why);
		if (!q || !(q = part(q, d, 1, t2, why)))
			return NULL;
		int icase = 0;
		for (; isalpha((unsigned char)*q); q++) {
			if (*q == 'g')
				op->global = 1;
			else if (*q == 'i')
				icase = 1;
			else {
				*why = "an s/// flag other than g and i";
				return NULL;
			}
		}
		op->type = OP_S;
		if (mesh_exec_regcomp_perl(&op->re, t1->p, strlen(t1->p), icase, why) < 0)
			return NULL;
		op->has_re = 1;
		return repl_parse(t2->p, &op->repl, why) < 0 ? NULL : q;
	}
	int y = p[0] == 'y' ? 1 : p[0] == 't' && p[1] == 'r' ? 2 : 0;
	if (y && delim_ok(p[y])) {
		char d = p[y];
		unsigned char from[1024], to[1024];
		size_t nf, nt;
		const char *q = part(p + y + 1, d, 0, t1, why);
		if (!q || !(q = part(q, d, 0, t2, why)))
			return NULL;
		if (isalpha((unsigned char)*q) || tr_list(t1->p, from, &nf) < 0 || tr_list(t2->p, to, &nt) < 0) {
			*why = "a tr/// flag or a reversed range";
			return NULL;
		}
		op->type = OP_TR;
		for (size_t k = 0; k < 256; k++)
			op->map[k] = (unsigned char)k;
		for (size_t k = 0; k < nf; k++) {
			if (op->in[from[k]])
				continue; /* the first mention counts */
			op->in[from[k]] = 1;
			op->map[from[k]] = nt == 0 ? from[k] : to[k < nt ? k : nt - 1];
		}
		return q;
	}
	static const struct {
		const char *text;
		int type, arg; /* arg: ($_) or $_ may follow */
	} fns[] = {
		{"ucfirst", OP_UCFIRST, 1}, {"lcfirst", OP_LCFIRST, 1}, {"uc", OP_UC, 1},
		{"lc", OP_LC, 1},	    {"$job->seq()", OP_SEQ, 0},	{"$job->slot()", OP_SLOT, 0},
		{"seq()", OP_SEQ, 0},	    {"slot()", OP_SLOT, 0},	{"total_jobs()", OP_TOTAL, 0},
	};
	if (p[0] == '$' && p[1] == '_') {
		const char *q = skip_ws(p + 2);
		if (*q == '=' && q[1] != '=' && q[1] != '~') {
			q = skip_ws(q + 1);
			for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
				size_t n = strlen(fns[k].text);
				if (strncmp(q, fns[k].text, n) || (fns[k].arg && isalnum((unsigned char)q[n])))
					continue;
				q += n;
				op->type = fns[k].type;
				if (fns[k].arg) {
					const char *a = skip_ws(q);
					if (!strncmp(a, "($_)", 4))
						q = a + 4;
					else if (!strncmp(a, "$_", 2))
						q = a + 2;
				}
				return q;
			}
		}
	}
	*why = "Perl beyond mesh's subset (s///, tr///, y///, $_ = uc/lc/ucfirst/lcfirst, "
	       "$_ = seq()/slot()/total_jobs(), joined by ; and ||)";
	return NULL;
}

static int parse_expr(struct mesh_exec_rpl *e, const char *p, const char **why)
{
	struct mesh_buf t1 = MESH_BUF_INIT, t2 = MESH_BUF_INIT;
	int rc = MESH_E_PARSE, want_alt = 0;
	p = skip_ws(p);
	if (isdigit((unsigned char)*p)) {
		char *end;
		unsigned long n = strtoul(p, &end, 10);
		if (*end && *end != ' ' && *end != '\t')
			goto bad_pos;
		if (n == 0 || n > MESH_EXEC_INPUT_MAX_ARGS)
			goto bad_pos;
		e->pos = (unsigned)n;
		p = end;
	}
	for (;;) {
		p = skip_ws(p);
		if (!*p && !want_alt)
			break;
		struct op *ops = realloc(e->ops, (e->nops + 1) * sizeof *ops);
		if (!ops) {
			rc = -ENOMEM;
			goto out;
		}
		e->ops = ops;
		if (!(p = parse_alt(p, &ops[e->nops], &t1, &t2, why))) {
			if (!*why)
				rc = -ENOMEM;
			if (ops[e->nops].has_re)
				regfree(&ops[e->nops].re);
			free(ops[e->nops].repl);
			goto out;
		}
		e->nops++;
		p = skip_ws(p);
		want_alt = p[0] == '|' && p[1] == '|';
		if (want_alt) {
			ops[e->nops - 1].or_next = 1;
			p += 2;
		} else if (*p == ';') {
			p++;
		} else if (*p) {
			*why = "expected ; or || between two parts";
			goto out;
		}
	}
	rc = 0;
	goto out;
bad_pos:
	*why = "a leading number that is not an argument's (1..4096)";
out:
	mesh_buf_release(&t1);
	mesh_buf_release(&t2);
	return rc;
}

int mesh_exec_rpls_define(struct mesh_exec_rpls *r, const char *def, const char **why)
{
	struct mesh_exec_rpl e;
	const char *sp = def + strcspn(def, " \t\n");
	memset(&e, 0, sizeof e);
	*why = NULL;
	if (sp == def) {
		*why = "no name before the expression";
		return MESH_E_PARSE;
	}
	e.kind = K_VALUE;
	e.mod = M_EXPR;
	int rc = parse_expr(&e, sp, why);
	if (rc == 0 && e.nops == 0) {
		/* GNU parallel's --rpl '{} ': the value as it is */
		e.mod = M_NONE;
	}
	if (rc == 0 && !(e.name = strndup(def, (size_t)(sp - def))))
		rc = -ENOMEM;
	if (rc < 0) {
		ops_free(e.ops, e.nops);
		if (rc == -ENOMEM)
			*why = "out of memory";
		return rc;
	}
	e.len = strlen(e.name);
	for (size_t i = 0; i < r->n; i++)
		if (!strcmp(r->v[i].name, e.name)) {
			free(r->v[i].name);
			ops_free(r->v[i].ops, r->v[i].nops);
			r->v[i] = e;
			return 0;
		}
	struct mesh_exec_rpl *v = realloc(r->v, (r->n + 1) * sizeof *v);
	if (!v) {
		free(e.name);
		ops_free(e.ops, e.nops);
		*why = "out of memory";
		return -ENOMEM;
	}
	r->v = v;
	r->v[r->n++] = e;
	return 0;
}

/* ---- finding replacement strings ---- */

struct tok {
	const struct mesh_exec_rpl *e;
	int kind, mod;
	unsigned pos; /* K_POS: 1-based */
	size_t len;   /* bytes of the token */
};

/* The longest replacement string of r at p; 0 when there is none. */
static int match_at(const struct mesh_exec_rpls *r, const char *p, struct tok *t)
{
	size_t best = 0;
	for (size_t i = 0; i < r->n; i++) {
		const struct mesh_exec_rpl *e = &r->v[i];
		size_t len = 0;
		unsigned pos = e->pos;
		if (!strncmp(p, e->name, e->len)) {
			len = e->len;
		} else if (e->name[0] == '{' && e->len >= 2 && p[0] == '{' && p[1] >= '1' && p[1] <= '9') {
			const char *q = p + 1;
			unsigned n = 0;
			for (; *q >= '0' && *q <= '9'; q++)
				n = n < 100000 ? n * 10 + (unsigned)(*q - '0') : n;
			if (!strncmp(q, e->name + 1, e->len - 1)) {
				len = (size_t)(q - p) + e->len - 1;
				pos = n;
			}
		}
		if (len > best) {
			best = len;
			t->e = e;
			t->len = len;
			t->pos = pos;
			t->mod = e->mod;
			t->kind = e->kind != K_VALUE ? e->kind : pos ? K_POS : K_VALUE;
		}
	}
	return best > 0;
}

/* The first replacement string in s (its offset in *at), or 0. */
static int find_tok(const struct mesh_exec_template *t, const char *s, struct tok *k, size_t *at)
{
	for (const char *p = s; *p; p++) {
		unsigned char c = (unsigned char)*p;
		if ((t->first[c / 8] & (1u << (c % 8))) && match_at(t->rpls, p, k)) {
			*at = (size_t)(p - s);
			return 1;
		}
	}
	return 0;
}

const char *mesh_exec_rpls_name(const struct mesh_exec_rpls *r, int which)
{
	return r->v[which].name;
}

int mesh_exec_rpls_starts(const struct mesh_exec_rpls *r, const char *s)
{
	struct tok k;
	return match_at(r ? r : &builtin_rpls, s, &k);
}

int mesh_exec_template_init_rpls(struct mesh_exec_template *t, char *const *argv, const struct mesh_exec_rpls *rpls)
{
	memset(t, 0, sizeof *t);
	if (!argv || !argv[0] || !argv[0][0])
		return MESH_E_PARSE;
	t->argv = argv;
	t->rpls = rpls ? rpls : &builtin_rpls;
	for (size_t i = 0; i < t->rpls->n; i++) {
		unsigned char c = (unsigned char)t->rpls->v[i].name[0];
		t->first[c / 8] |= (unsigned char)(1u << (c % 8));
	}
	while (argv[t->argc])
		t->argc++;
	t->subst = calloc(t->argc, 1);
	if (!t->subst)
		return -ENOMEM;
	t->shell = t->argc == 3 && !strcmp(argv[0], "/bin/sh") && !strcmp(argv[1], "-c");
	for (size_t i = 0; i < t->argc; i++) {
		struct tok k;
		size_t at;
		if (!find_tok(t, argv[i], &k, &at))
			continue;
		t->subst[i] = 1;
		t->has_value = 1;
		t->nsubst++;
	}
	return 0;
}

int mesh_exec_template_init(struct mesh_exec_template *t, char *const *argv)
{
	return mesh_exec_template_init_rpls(t, argv, NULL);
}

void mesh_exec_template_release(struct mesh_exec_template *t)
{
	free(t->subst);
	memset(t, 0, sizeof *t);
}

/* ---- expanding ---- */

/* One chunk's strings for the expansion. */
struct chunk {
	const char *vals[MESH_EXEC_INPUT_MAX_ARGS], *args[MESH_EXEC_INPUT_MAX_ARGS];
	size_t nvals, nargs;
	char seq[24], slot[16], id[24], total[24];
	int shell;   /* in the one-word shell SCRIPT (its values quoted, arguments appended to it) */
	int quote;   /* values quoted for the shell */
	int lit;     /* the template's own text quoted where a shell would read it (render) */
	int context; /* -X: a longer argument repeats once a value */
	struct mesh_buf a, b; /* an --rpl expression's work */
};

int mesh_exec_quote(struct mesh_buf *b, const char *s, size_t n)
{
	static const char safe[] = "-_.+/abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	size_t k = 0;
	while (k < n && s[k] && memchr(safe, s[k], sizeof safe - 1))
		k++;
	if (n && k == n)
		return mesh_buf_add(b, s, n);
	if (!n)
		return mesh_buf_add(b, "''", 2);
	/* '...' with each ' as '"'"'; no '' at either end */
	if (s[0] != '\'' && mesh_buf_add(b, "'", 1) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (s[i] != '\'') {
			if (mesh_buf_add(b, s + i, 1) < 0)
				return -ENOMEM;
			continue;
		}
		const char *q = i == 0 ? "\"'\"'" : "'\"'\"'";
		if (i + 1 == n)
			q = i == 0 ? "\"'\"" : "'\"'\"";
		if (mesh_buf_adds(b, q) < 0)
			return -ENOMEM;
	}
	return s[n - 1] != '\'' ? mesh_buf_add(b, "'", 1) : 0;
}

/* The template's own text: quoted only where a shell would read it. */
static int put_lit(struct mesh_buf *b, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./,:@%+=-{}", s[i]) || !s[i])
			return mesh_exec_quote(b, s, n);
	return mesh_buf_add(b, s, n);
}

static int put(struct mesh_buf *b, const char *s, size_t n, int quote)
{
	return quote ? mesh_exec_quote(b, s, n) : mesh_buf_add(b, s, n);
}

/* GNU parallel's {//}: Perl's dirname.  Its length at v (n bytes). */
static size_t dirname_len(const char *v, size_t n, const char **dir)
{
	/* fileparse: the directory part ends after the last '/' ("./" when
	 * none); trailing slashes go (one stays); an empty basename means
	 * "a/b/": once more from the directory */
	for (int round = 0; round < 2; round++) {
		const char *slash = NULL;
		for (size_t i = 0; i < n; i++)
			if (v[i] == '/')
				slash = v + i;
		if (!slash) {
			*dir = ".";
			return 1;
		}
		size_t base = n - (size_t)(slash + 1 - v);
		n = (size_t)(slash + 1 - v);
		while (n > 1 && v[n - 1] == '/')
			n--;
		if (base)
			break;
	}
	*dir = v;
	return n;
}

/* v with the built-in modifier applied, added to b. */
static int put_mod(struct mesh_buf *b, const char *v, int mod, int quote)
{
	size_t n = strlen(v);
	const char *slash = strrchr(v, '/');
	if (mod == M_DIR) {
		const char *d;
		size_t dn = dirname_len(v, n, &d);
		return put(b, d, dn, quote);
	}
	if ((mod == M_BASE || mod == M_BASENOEXT) && slash) {
		n -= (size_t)(slash + 1 - v);
		v = slash + 1;
	}
	if (mod == M_NOEXT || mod == M_BASENOEXT) {
		/* s:\.[^/.]*$:: (GNU parallel's code; its manual says +) */
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

/* s///: 0 matches, 1 or more, or -ENOMEM; the result in out. */
static int op_s(const struct op *op, const char *s, struct mesh_buf *out)
{
	regmatch_t m[10];
	size_t len = strlen(s), off = 0;
	int n = 0, ef = 0;
	while (off <= len && regexec(&op->re, s + off, 10, m, ef) == 0) {
		const char *base = s + off;
		if (mesh_buf_add(out, base, (size_t)m[0].rm_so) < 0)
			return -ENOMEM;
		for (const char *r = op->repl; *r; r++) {
			if (*r != 1) {
				if (mesh_buf_add(out, r, 1) < 0)
					return -ENOMEM;
				continue;
			}
			int g = *++r == '&' ? 0 : *r - '0';
			if (m[g].rm_so >= 0 && mesh_buf_add(out, base + m[g].rm_so, (size_t)(m[g].rm_eo - m[g].rm_so)) < 0)
				return -ENOMEM;
		}
		n++;
		off += (size_t)m[0].rm_eo;
		if (m[0].rm_eo == m[0].rm_so) {
			/* an empty match: step over one byte */
			if (off < len && mesh_buf_add(out, s + off, 1) < 0)
				return -ENOMEM;
			off++;
		}
		ef = REG_NOTBOL;
		if (!op->global)
			break;
	}
	if (off < len && mesh_buf_add(out, s + off, len - off) < 0)
		return -ENOMEM;
	return n;
}

/* One step on s into out: > 0 when it did something, 0 not, -ENOMEM. */
static int op_run(const struct op *op, const char *s, const struct chunk *c, struct mesh_buf *out)
{
	int n = 0;
	switch (op->type) {
	case OP_S: return op_s(op, s, out);
	case OP_TR:
		for (const char *p = s; *p; p++) {
			n += op->in[(unsigned char)*p];
			char x = (char)op->map[(unsigned char)*p];
			if (mesh_buf_add(out, &x, 1) < 0)
				return -ENOMEM;
		}
		return n;
	case OP_SEQ: return mesh_buf_adds(out, c->seq) < 0 ? -ENOMEM : 1;
	case OP_SLOT: return mesh_buf_adds(out, c->slot) < 0 ? -ENOMEM : 1;
	case OP_TOTAL: return mesh_buf_adds(out, c->total) < 0 ? -ENOMEM : 1;
	}
	for (const char *p = s; *p; p++) {
		int first = p == s;
		char x = *p;
		if (op->type == OP_UC || (op->type == OP_UCFIRST && first))
			x = (char)toupper((unsigned char)x);
		else if (op->type == OP_LC || (op->type == OP_LCFIRST && first))
			x = (char)tolower((unsigned char)x);
		if (mesh_buf_add(out, &x, 1) < 0)
			return -ENOMEM;
	}
	/* Perl's truth of the value assigned */
	return *s && strcmp(s, "0") ? 1 : 0;
}

/* v through e's expression, added to b. */
static int put_expr(struct mesh_buf *b, const struct mesh_exec_rpl *e, const char *v, struct chunk *c, int quote)
{
	struct mesh_buf *cur = &c->a, *next = &c->b;
	mesh_buf_reset(cur);
	if (mesh_buf_add(cur, v, strlen(v) + 1) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < e->nops; i++) {
		mesh_buf_reset(next);
		int n = op_run(&e->ops[i], cur->p, c, next);
		if (n < 0 || mesh_buf_add(next, "", 1) < 0)
			return -ENOMEM;
		struct mesh_buf *t = cur;
		cur = next;
		next = t;
		/* A || B: B only when A did nothing */
		while (n > 0 && e->ops[i].or_next && i + 1 < e->nops)
			i++;
	}
	return put(b, cur->p, strlen(cur->p), quote);
}

static int put_val(struct mesh_buf *b, const struct tok *k, const char *v, struct chunk *c, int quote)
{
	return k->mod == M_EXPR ? put_expr(b, k->e, v, c, quote) : put_mod(b, v, k->mod, quote);
}

/* The text of token k inside a longer argument; only >= 0: a value
 * token gives that value alone (-X's context replacement). */
static int put_tok(struct mesh_buf *b, const struct tok *k, struct chunk *c, long only, int quote)
{
	if (k->kind == K_SEQ)
		return mesh_buf_adds(b, c->seq);
	if (k->kind == K_SLOT)
		return mesh_buf_adds(b, c->slot);
	if (k->kind == K_POS)
		return k->pos <= c->nargs ? put_val(b, k, c->args[k->pos - 1], c, quote) : 0;
	if (only >= 0)
		return put_val(b, k, c->vals[only], c, quote);
	for (size_t i = 0; i < c->nvals; i++)
		if ((i && mesh_buf_add(b, " ", 1) < 0) || put_val(b, k, c->vals[i], c, quote) < 0)
			return -ENOMEM;
	return 0;
}

/* Whether s holds {} or one of its modified forms (not {n}, {#}, {%}). */
static int has_value_tok(const struct mesh_exec_template *t, const char *s)
{
	struct tok k;
	size_t at;
	while (find_tok(t, s, &k, &at)) {
		if (k.kind == K_VALUE)
			return 1;
		s += at + k.len;
	}
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

/* s with its replacement strings expanded (only: as put_tok); raw0: a
 * string at offset 0 is put unquoted (the shell SCRIPT's rule). */
static int put_text(const struct mesh_exec_template *t, struct mesh_buf *b, const char *s, struct chunk *c, long only,
		    int raw0)
{
	struct tok tk;
	size_t at;
	int first = 1;
	while (find_tok(t, s, &tk, &at)) {
		if ((c->lit ? put_lit(b, s, at) : mesh_buf_add(b, s, at)) < 0 ||
		    put_tok(b, &tk, c, only, c->quote && !(raw0 && first && at == 0)) < 0)
			return -ENOMEM;
		s += at + tk.len;
		first = 0;
	}
	return c->lit ? put_lit(b, s, strlen(s)) : mesh_buf_adds(b, s);
}

/* -X in a shell script: a word holding {} is repeated once a value,
 * blank-separated; other words as put_text.  Words are split at blanks
 * only (the script's own quoting is not parsed). */
static int put_words(const struct mesh_exec_template *t, struct mesh_buf *b, const char *s, struct chunk *c)
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
		long reps = has_value_tok(t, w.p) ? (long)c->nvals : 0;
		for (long r = 0; r < (reps ? reps : 1) && rc == 0; r++)
			rc = (r > 0 && mesh_buf_add(b, " ", 1) < 0) || put_text(t, b, w.p, c, reps ? r : -1, 0) < 0 ? -ENOMEM
															 : 0;
	}
	mesh_buf_release(&w);
	return rc;
}

/* Whether the text of s around its replacement strings is all of a kind
 * a shell reads as it is. */
static int lit_safe(const struct mesh_exec_template *t, const char *s)
{
	struct tok tk;
	size_t at;
	struct mesh_buf probe = MESH_BUF_INIT;
	int safe = 1;
	for (;;) {
		size_t n = find_tok(t, s, &tk, &at) ? at : strlen(s);
		mesh_buf_reset(&probe);
		if (n && (put_lit(&probe, s, n) < 0 || probe.len != n))
			safe = 0;
		if (!safe || !s[n])
			break;
		s += at + tk.len;
	}
	mesh_buf_release(&probe);
	return safe;
}

/* Expands template argument s into one or more output arguments. */
static int expand_arg(const struct mesh_exec_template *t, const char *s, struct chunk *c, struct mesh_buf *b,
		      char **out, size_t *k)
{
	struct tok tk;
	size_t at;
	int whole = find_tok(t, s, &tk, &at) && at == 0 && tk.len == strlen(s);
	if (whole && !c->shell && tk.kind == K_VALUE) {
		for (size_t i = 0; i < c->nvals; i++) {
			mark(b, out, k);
			if (put_val(b, &tk, c->vals[i], c, c->quote) < 0 || end_arg(b) < 0)
				return -ENOMEM;
		}
		return 0;
	}
	if (whole && !c->shell && tk.kind == K_POS && tk.pos > c->nargs) {
		/* gone; a shell line keeps its place (GNU parallel's "echo d ") */
		if (c->lit) {
			mark(b, out, k);
			return end_arg(b);
		}
		return 0;
	}
	/* -X: the argument once a value (when it holds a value token); in a
	 * shell script, each word (between blanks) that holds one */
	long reps = c->context && !c->shell && has_value_tok(t, s) ? (long)c->nvals : 0;
	if (c->lit && !lit_safe(t, s)) {
		/* text a shell would read: each word as it runs, quoted whole */
		struct mesh_buf w = MESH_BUF_INIT;
		int rc = 0;
		c->quote = c->lit = 0;
		for (long r = 0; r < (reps ? reps : 1) && rc == 0; r++) {
			mesh_buf_reset(&w);
			mark(b, out, k);
			if (put_text(t, &w, s, c, reps ? r : -1, 0) < 0 || mesh_exec_quote(b, w.p ? w.p : "", w.len) < 0 ||
			    end_arg(b) < 0)
				rc = -ENOMEM;
		}
		c->quote = c->lit = 1;
		mesh_buf_release(&w);
		return rc;
	}
	for (long r = 0; r < (reps ? reps : 1); r++) {
		if (r > 0 && end_arg(b) < 0)
			return -ENOMEM;
		mark(b, out, k);
		if ((c->context && c->shell ? put_words(t, b, s, c) : put_text(t, b, s, c, reps ? r : -1, c->shell)) < 0)
			return -ENOMEM;
	}
	if (c->shell && !t->has_value) /* one-word command line: arguments go into the script */
		for (size_t i = 0; i < c->nargs; i++)
			if (mesh_buf_add(b, " ", 1) < 0 || put(b, c->args[i], strlen(c->args[i]), 1) < 0)
				return -ENOMEM;
	return end_arg(b);
}

static int load_chunk(struct chunk *c, const struct mesh_exec_template *t, const struct mesh_exec_input *in,
		      uint64_t cid, unsigned slot)
{
	snprintf(c->seq, sizeof c->seq, "%" PRIu64, cid + 1);
	snprintf(c->slot, sizeof c->slot, "%u", slot);
	snprintf(c->id, sizeof c->id, "%" PRIu64, cid);
	snprintf(c->total, sizeof c->total, "%" PRIu64, t->total ? t->total : in ? in->n : 0);
	c->context = in && in->context;
	if (in && (in->pipe || in->no_args)) {
		/* the records go to standard input (or nowhere): {} and {n} are empty */
		c->nvals = c->nargs = 0;
		return cid < in->n ? 0 : MESH_E_RANGE;
	}
	if (!in) {
		c->vals[0] = c->args[0] = c->id;
		c->nvals = c->nargs = 1;
		return 0;
	}
	int rc = mesh_exec_input_args(in, cid, c->args, &c->nargs);
	if (rc == 0 && in->cols) {
		/* --colsep: {} is every column */
		memcpy(c->vals, c->args, c->nargs * sizeof *c->vals);
		c->nvals = c->nargs;
		return 0;
	}
	return rc < 0 ? rc : mesh_exec_input_values(in, cid, c->vals, &c->nvals);
}

/* The expansion in one of three forms: argv (render 0), one shell line
 * (render 1), one unquoted string (render 2). */
static int expand(const struct mesh_exec_template *t, const struct mesh_exec_input *in, uint64_t cid, unsigned slot,
		  struct mesh_buf *buf, char **out_argv, int render)
{
	struct chunk *c = malloc(sizeof *c);
	char **av = out_argv;
	int rc = -ENOMEM;
	size_t k = 0;
	if (!c)
		return -ENOMEM;
	c->a = (struct mesh_buf)MESH_BUF_INIT;
	c->b = (struct mesh_buf)MESH_BUF_INIT;
	if (render && !(av = malloc(mesh_exec_template_slots(t) * sizeof *av)))
		goto out;
	if ((rc = load_chunk(c, t, in, cid, slot)) < 0)
		goto out;
	rc = -ENOMEM;
	mesh_buf_reset(buf);
	/* Offsets first, pointers after: buf may move while it grows. */
	for (size_t i = 0; i < t->argc; i++) {
		if (render == 1 && t->shell && i < 2)
			continue; /* the line is the SCRIPT */
		c->shell = t->shell && i == 2;
		c->quote = c->shell || render == 1;
		c->lit = render == 1 && !t->shell;
		if (!t->subst[i] && !c->shell) {
			mark(buf, av, &k);
			if ((c->lit ? put_lit(buf, t->argv[i], strlen(t->argv[i])) : mesh_buf_adds(buf, t->argv[i])) < 0 ||
			    end_arg(buf) < 0)
				goto out;
		} else if (expand_arg(t, t->argv[i], c, buf, av, &k) < 0) {
			goto out;
		}
	}
	for (size_t i = 0; !t->has_value && !t->shell && render != 2 && i < c->nargs; i++) {
		mark(buf, av, &k);
		if (put(buf, c->args[i], strlen(c->args[i]), render == 1) < 0 || end_arg(buf) < 0)
			goto out;
	}
	if (render) {
		/* the words, each NUL-ended in buf, joined by spaces */
		char *p = buf->p;
		size_t n = buf->len;
		for (size_t i = 0; i + 1 < n; i++)
			if (!p[i])
				p[i] = ' ';
		rc = 0;
		goto out;
	}
	for (size_t i = 0; i < k; i++)
		out_argv[i] = buf->p + (uintptr_t)out_argv[i];
	out_argv[k] = NULL;
	rc = 0;
out:
	if (render && rc == 0 && buf->len == 0)
		rc = end_arg(buf);
	if (render && rc == 0)
		buf->len--; /* the text without its NUL */
	if (av != out_argv)
		free(av);
	mesh_buf_release(&c->a);
	mesh_buf_release(&c->b);
	free(c);
	return rc;
}

int mesh_exec_template_expand(const struct mesh_exec_template *t, const struct mesh_exec_input *in, uint64_t cid,
			      unsigned slot, struct mesh_buf *buf, char **out_argv)
{
	return expand(t, in, cid, slot, buf, out_argv, 0);
}

int mesh_exec_template_render(const struct mesh_exec_template *t, const struct mesh_exec_input *in, uint64_t cid,
			      unsigned slot, struct mesh_buf *line)
{
	return expand(t, in, cid, slot, line, NULL, 1);
}

int mesh_exec_template_string(const struct mesh_exec_template *t, const struct mesh_exec_input *in, uint64_t cid,
			      unsigned slot, struct mesh_buf *out)
{
	return expand(t, in, cid, slot, out, NULL, 2);
}
