/* `mesh run`'s replacement-string table (exec/template.h) on untrusted
 * bytes: --rpl definitions in mesh's part of Perl (and the Perl regexes in
 * them), renamed strings, then a command template expanded, rendered as a
 * shell line and as a string for some records.  Never crashes; what a
 * definition refuses comes with a reason; every expansion fits its slots
 * and every rendering is NUL-terminated at its length.
 *
 * Bytes: lines.  A line starting with 'R' defines (--rpl), 'I' renames {}
 * (-I), 'W' is a word of the template, 'V' a record; the rest is ignored. */
#include "base/buf.h"
#include "base/err.h"
#include "exec/input.h"
#include "exec/template.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1), *words[16], *recs[16];
	size_t nw = 0, nr = 0;
	struct mesh_exec_rpls r;
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	if (mesh_exec_rpls_init(&r) < 0)
		abort();
	for (char *line = text, *next; line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		const char *why = NULL;
		switch (line[0]) {
		case 'R':
			if (mesh_exec_rpls_define(&r, line + 1, &why) == MESH_E_PARSE && (!why || !*why))
				abort();
			break;
		case 'I':
			if (mesh_exec_rpls_rename(&r, MESH_EXEC_RPL_VALUE, line + 1) < 0 && line[1])
				abort();
			break;
		case 'W':
			if (nw < 15 && line[1])
				words[nw++] = line + 1;
			break;
		case 'V':
			if (nr < 15)
				recs[nr++] = line + 1;
			break;
		}
	}
	words[nw] = NULL;
	struct mesh_exec_list l;
	struct mesh_exec_input in;
	struct mesh_exec_source src[1] = {{&l, 0}};
	struct mesh_exec_template t = MESH_EXEC_TEMPLATE_INIT;
	if (mesh_exec_list_from_argv(&l, recs, nr) < 0)
		abort();
	if (mesh_exec_input_combine(&in, src, 1, NULL) < 0)
		abort();
	if (nw && mesh_exec_template_init_rpls(&t, words, &r) == 0) {
		size_t slots = mesh_exec_template_slots(&t);
		char **av = calloc(slots, sizeof *av);
		struct mesh_buf b = MESH_BUF_INIT;
		for (uint64_t c = 0; av && c < in.n; c++) {
			for (size_t i = 0; i < slots; i++)
				av[i] = (char *)1;
			if (mesh_exec_template_expand(&t, &in, c, 1, &b, av) != 0)
				abort();
			size_t n = 0;
			while (n < slots && av[n])
				n++;
			if (n == slots)
				abort();
			if (mesh_exec_template_render(&t, &in, c, 1, &b) != 0 || strlen(b.p) != b.len)
				abort();
			if (mesh_exec_template_string(&t, &in, c, 1, &b) != 0 || !b.p)
				abort();
		}
		free(av);
		mesh_buf_release(&b);
	}
	mesh_exec_template_release(&t);
	mesh_exec_input_release(&in);
	mesh_exec_list_release(&l);
	mesh_exec_rpls_release(&r);
	free(text);
	return 0;
}
