/* The command template of `mesh run`: "{}" in any argument becomes the
 * chunk's value (its input line, else its chunk id), "{#}" the chunk id.
 * When no argument holds "{}", the value is appended as a last argument
 * (GNU parallel's rule).  Nothing else is special: no shell, no quoting. */
#ifndef MESH_EXEC_TEMPLATE_H
#define MESH_EXEC_TEMPLATE_H

#include "base/buf.h"

#include <stddef.h>
#include <stdint.h>

struct mesh_exec_template {
	char *const *argv;	/* borrowed, NULL-terminated */
	size_t argc;
	unsigned char *subst;	/* per argument: 1 when it holds "{}" or "{#}" */
	int has_value;		/* some argument holds "{}" */
};
#define MESH_EXEC_TEMPLATE_INIT {NULL, 0, NULL, 0}

/* 0, MESH_E_PARSE (argv empty or argv[0] ""), -ENOMEM.  Release with
 * mesh_exec_template_release (also after a failure). */
int mesh_exec_template_init(struct mesh_exec_template *t, char *const *argv);
void mesh_exec_template_release(struct mesh_exec_template *t);
/* Number of entries out_argv needs for mesh_exec_template_expand. */
static inline size_t mesh_exec_template_slots(const struct mesh_exec_template *t)
{
	return t->argc + 2;
}
/* Fills out_argv (NULL-terminated) for one chunk; substituted arguments
 * live in buf (reset first, owned by the caller, reusable), the others
 * point into the template.  0 or -ENOMEM. */
int mesh_exec_template_expand(const struct mesh_exec_template *t, const char *value, uint64_t cid,
			      struct mesh_buf *buf, char **out_argv);

#endif
