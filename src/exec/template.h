/* The command template of `mesh run`: GNU parallel's replacement strings.
 *
 *   {}    the chunk's values (exec/input.h), or its decimal id without input
 *   {.}   ... without the extension      {/}   basename
 *   {//}  dirname ("." when none)        {/.}  basename without extension
 *   {#}   the chunk's sequence number (chunk id + 1)
 *   {%}   the slot running it (1..N)
 *   {n}   the n-th argument (1-based), also {n.} {n/} {n//} {n/.}
 *
 * These seven are a table (struct mesh_exec_rpls) that the caller may
 * change as GNU parallel's options do: -I and its kin rename one, --rpl
 * defines one by an expression.  A name that starts with '{' also has
 * positional forms: '{', the argument's number, the rest of the name
 * ({2.} for {.}, {3x} for {x}).  The path strings are GNU parallel's:
 * {.} drops a last ".ext" without a '/' ("a." -> "a"); {//} is Perl's
 * dirname (trailing slashes first: "a/b/" -> "a", "/" -> "/").
 *
 * Anything else in braces ("{x}", "{ }") stays as it is.  An argument that
 * is exactly "{}" (or "{.}" ...) becomes one argument per value; inside a
 * longer argument the values are joined by spaces.  An argument that is
 * exactly "{n}" with n past the chunk's arguments disappears (GNU parallel's
 * empty unquoted word).  When no argument holds a replacement string, the
 * chunk's arguments are appended.  No shell, no quoting -- except for the
 * form "/bin/sh" "-c" SCRIPT that `mesh run` builds for a one-word command
 * line: there every value put into SCRIPT is quoted for the shell
 * (mesh_exec_quote), appended arguments are added to SCRIPT, and a
 * replacement string that starts SCRIPT is put as it is (GNU parallel's
 * rule: "{}" alone runs the input line as a command; "{} | wc" pipes it).
 *
 * An input built for -X (in->context, exec/input.h) replaces in context: a
 * longer argument holding {} (or {.} ...) becomes one argument per value,
 * each with the text around it ("pre{}post" with a b: "preapost"
 * "prebpost"); in a shell SCRIPT, each blank-separated word holding one.
 * Under --pipe (in->pipe) and -N0 (in->no_args) the command sees no values:
 * value and argument strings expand to nothing and nothing is appended. */
#ifndef MESH_EXEC_TEMPLATE_H
#define MESH_EXEC_TEMPLATE_H

#include "base/buf.h"
#include "exec/input.h"

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

/* The built-in replacement strings, in the table's first seven entries. */
enum {
	MESH_EXEC_RPL_VALUE,	 /* {} */
	MESH_EXEC_RPL_NOEXT,	 /* {.} */
	MESH_EXEC_RPL_BASE,	 /* {/} */
	MESH_EXEC_RPL_DIR,	 /* {//} */
	MESH_EXEC_RPL_BASENOEXT, /* {/.} */
	MESH_EXEC_RPL_SEQ,	 /* {#} */
	MESH_EXEC_RPL_SLOT,	 /* {%} */
	MESH_EXEC_RPL_BUILTIN
};

struct mesh_exec_rpl;
struct mesh_exec_rpls {
	struct mesh_exec_rpl *v;
	size_t n;
};
#define MESH_EXEC_RPLS_INIT {NULL, 0}

/* The seven built-in strings.  0 or -ENOMEM.  Release with
 * mesh_exec_rpls_release, also after a failure of any of these. */
int mesh_exec_rpls_init(struct mesh_exec_rpls *r);
/* Names built-in string which (MESH_EXEC_RPL_*) name instead (copied; -I,
 * --extensionreplace, ...).  0, MESH_E_PARSE (name empty), -ENOMEM. */
int mesh_exec_rpls_rename(struct mesh_exec_rpls *r, int which, const char *name);
/* GNU parallel's --rpl 'TAG EXPR': TAG (up to the first blank) becomes
 * the result of EXPR on each value, replacing a string of that name.
 * EXPR is Perl in GNU parallel; mesh reads this subset of it:
 *   [N] STMT [; STMT]...      N: always the N-th argument (as {N...})
 *   STMT:  ALT [|| ALT]...    an ALT runs only when the one before did
 *                             nothing (matched nothing, changed nothing)
 *   ALT:   s/RE/REPL/[gi]     RE a Perl regex as far as POSIX ERE goes
 *                             (\d \w \s \t \n and their negations; no
 *                             lazy quantifiers); REPL with $1..$9, ${n}, $&
 *          tr/A-Z/a-z/, y/../../
 *          $_ = uc | lc | ucfirst | lcfirst [($_)]
 *          $_ = seq() | slot() | total_jobs()  ($job->seq(), $job->slot())
 * Any delimiter but brackets may replace '/'.  0, MESH_E_PARSE with *why
 * (static text) saying what mesh cannot read, -ENOMEM. */
int mesh_exec_rpls_define(struct mesh_exec_rpls *r, const char *def, const char **why);
/* The name of r's built-in string which (MESH_EXEC_RPL_*). */
const char *mesh_exec_rpls_name(const struct mesh_exec_rpls *r, int which);
/* 1 when s starts with one of r's strings (NULL: the built-in ones). */
int mesh_exec_rpls_starts(const struct mesh_exec_rpls *r, const char *s);
void mesh_exec_rpls_release(struct mesh_exec_rpls *r);

/* Compiles the Perl regex re (len bytes) as a POSIX extended one: \t \n
 * \r \d \D \w \W \s \S translated, other escapes kept.  0, or MESH_E_PARSE
 * (*why: what has no POSIX form: lazy quantifiers, (?...), \b ...). */
int mesh_exec_regcomp_perl(regex_t *re, const char *perl, size_t len, int icase, const char **why);
/* Adds the n bytes at s to b quoted for a POSIX shell, as GNU parallel
 * quotes values: as they are when only [-_.+a-zA-Z0-9/] and not empty,
 * else in single quotes (a ' as '"'"'), '' for nothing.  0 or -ENOMEM. */
int mesh_exec_quote(struct mesh_buf *b, const char *s, size_t n);

struct mesh_exec_template {
	char *const *argv;	/* borrowed, NULL-terminated */
	size_t argc;
	const struct mesh_exec_rpls *rpls; /* borrowed; the built-in ones by default */
	uint64_t total;		/* total_jobs() of an --rpl expression (the caller's; 0: in->n) */
	unsigned char first[32]; /* bit per byte: a replacement string may start with it */
	unsigned char *subst;	/* per argument: 1 when it holds a replacement string */
	int has_value;		/* some argument holds a replacement string: nothing is appended */
	int shell;		/* argv is "/bin/sh" "-c" SCRIPT (see above) */
	size_t nsubst;		/* arguments holding any replacement string */
};
#define MESH_EXEC_TEMPLATE_INIT {NULL, 0, NULL, 0, {0}, NULL, 0, 0, 0}

/* 0, MESH_E_PARSE (argv empty or argv[0] ""), -ENOMEM.  rpls (borrowed
 * until the release; NULL: the built-in strings) is the table of
 * mesh_exec_template_init_rpls.  Release with mesh_exec_template_release
 * (also after a failure). */
int mesh_exec_template_init(struct mesh_exec_template *t, char *const *argv);
int mesh_exec_template_init_rpls(struct mesh_exec_template *t, char *const *argv, const struct mesh_exec_rpls *rpls);
void mesh_exec_template_release(struct mesh_exec_template *t);
/* Number of entries out_argv needs for mesh_exec_template_expand. */
static inline size_t mesh_exec_template_slots(const struct mesh_exec_template *t)
{
	return t->argc + (t->nsubst + 1) * MESH_EXEC_INPUT_MAX_ARGS + 1;
}
/* Fills out_argv (NULL-terminated) for chunk cid of in (NULL: the value is
 * the decimal chunk id) run in slot (1-based, for {%}); every argument lives
 * in buf (reset first, owned by the caller, reusable).  0, MESH_E_RANGE
 * (cid not in in), or -ENOMEM. */
int mesh_exec_template_expand(const struct mesh_exec_template *t, const struct mesh_exec_input *in, uint64_t cid,
			      unsigned slot, struct mesh_buf *buf, char **out_argv);
/* The same command as one shell command line, as GNU parallel's --dry-run
 * and joblog show it: the words joined by spaces, each value quoted by
 * mesh_exec_quote, the template's own text quoted only where a shell would
 * read it otherwise (mesh runs it without a shell); a shell SCRIPT as it
 * runs.  line is reset first; its text is NUL-terminated.  0, MESH_E_RANGE,
 * -ENOMEM. */
int mesh_exec_template_render(const struct mesh_exec_template *t, const struct mesh_exec_input *in, uint64_t cid,
			      unsigned slot, struct mesh_buf *line);
/* One string: the template's arguments expanded (unquoted) and joined by
 * spaces, nothing appended, e.g. --tagstring's.  As
 * mesh_exec_template_render otherwise. */
int mesh_exec_template_string(const struct mesh_exec_template *t, const struct mesh_exec_input *in, uint64_t cid,
			      unsigned slot, struct mesh_buf *out);

#endif
