#include "exec/template.h"

#include "base/err.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	for (size_t i = 0; i < t->argc; i++) {
		if (strstr(argv[i], "{}")) {
			t->subst[i] = 1;
			t->has_value = 1;
		}
		if (strstr(argv[i], "{#}"))
			t->subst[i] = 1;
	}
	return 0;
}

void mesh_exec_template_release(struct mesh_exec_template *t)
{
	free(t->subst);
	memset(t, 0, sizeof *t);
}

static int expand_one(struct mesh_buf *buf, const char *s, const char *value, const char *cid)
{
	const char *p = s;
	for (;;) {
		const char *a = strstr(p, "{}"), *b = strstr(p, "{#}"), *q;
		const char *with;
		size_t skip;
		if (a && (!b || a < b)) {
			q = a, with = value, skip = 2;
		} else if (b) {
			q = b, with = cid, skip = 3;
		} else {
			break;
		}
		if (mesh_buf_add(buf, p, (size_t)(q - p)) < 0 || mesh_buf_adds(buf, with) < 0)
			return -ENOMEM;
		p = q + skip;
	}
	/* the terminating NUL belongs to the argument */
	return mesh_buf_add(buf, p, strlen(p) + 1) < 0 ? -ENOMEM : 0;
}

int mesh_exec_template_expand(const struct mesh_exec_template *t, const char *value, uint64_t cid,
			      struct mesh_buf *buf, char **out_argv)
{
	char cidbuf[24];
	snprintf(cidbuf, sizeof cidbuf, "%" PRIu64, cid);
	if (!value)
		value = cidbuf;
	mesh_buf_reset(buf);
	/* Offsets first, pointers after: buf may move while it grows. */
	size_t k = 0;
	for (size_t i = 0; i < t->argc; i++) {
		if (t->subst[i]) {
			out_argv[k++] = (char *)(uintptr_t)buf->len;
			if (expand_one(buf, t->argv[i], value, cidbuf) < 0)
				return -ENOMEM;
		} else {
			out_argv[k++] = NULL;
		}
	}
	size_t tail = buf->len;
	if (!t->has_value && mesh_buf_add(buf, value, strlen(value) + 1) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < t->argc; i++)
		out_argv[i] = t->subst[i] ? buf->p + (uintptr_t)out_argv[i] : t->argv[i];
	if (!t->has_value)
		out_argv[k++] = buf->p + tail;
	out_argv[k] = NULL;
	return 0;
}
