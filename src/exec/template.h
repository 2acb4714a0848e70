/* The command template of `mesh run`: GNU parallel's replacement strings.
 *
 *   {}    the chunk's values (exec/input.h), or its decimal id without input
 *   {.}   ... without the extension      {/}   basename
 *   {//}  dirname ("." when none)        {/.}  basename without extension
 *   {#}   the chunk's sequence number (chunk id + 1)
 *   {%}   the slot running it (1..N)
 *   {n}   the n-th argument (1-based), also {n.} {n/} {n//} {n/.}
 *
 * Anything else in braces ("{x}", "{ }") stays as it is.  An argument that
 * is exactly "{}" (or "{.}" ...) becomes one argument per value; inside a
 * longer argument the values are joined by spaces.  An argument that is
 * exactly "{n}" with n past the chunk's arguments disappears (GNU parallel's
 * empty unquoted word).  When no argument holds a replacement string, the
 * chunk's arguments are appended.  No shell, no quoting -- except for the
 * form "/bin/sh" "-c" SCRIPT that `mesh run` builds for a one-word command
 * line: there every value put into SCRIPT is single-quoted for the shell,
 * appended arguments are added to SCRIPT, and a SCRIPT of exactly "{}" is
 * replaced verbatim (the input line is the command).
 *
 * An input built for -X (in->context, exec/input.h) replaces in context: a
 * longer argument holding {} (or {.} ...) becomes one argument per value,
 * each with the text around it ("pre{}post" with a b: "preapost"
 * "prebpost"); in a shell SCRIPT, each blank-separated word holding one.
 * Under --pipe (in->pipe) the chunk's records are its standard input, not
 * its arguments: value and argument strings expand to nothing and nothing
 * is appended. */
#ifndef MESH_EXEC_TEMPLATE_H
#define MESH_EXEC_TEMPLATE_H

#include "base/buf.h"
#include "exec/input.h"

#include <stddef.h>
#include <stdint.h>

struct mesh_exec_template {
	char *const *argv;	/* borrowed, NULL-terminated */
	size_t argc;
	unsigned char *subst;	/* per argument: 1 when it holds a replacement string */
	int has_value;		/* some argument holds a replacement string: nothing is appended */
	int shell;		/* argv is "/bin/sh" "-c" SCRIPT (see above) */
	size_t nwhole;		/* arguments that are exactly one value-replacement string */
	size_t nsubst;		/* arguments holding any replacement string */
};
#define MESH_EXEC_TEMPLATE_INIT {NULL, 0, NULL, 0, 0, 0, 0}

/* 0, MESH_E_PARSE (argv empty or argv[0] ""), -ENOMEM.  Release with
 * mesh_exec_template_release (also after a failure). */
int mesh_exec_template_init(struct mesh_exec_template *t, char *const *argv);
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

#endif
