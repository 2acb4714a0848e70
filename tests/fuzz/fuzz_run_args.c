/* `mesh run`'s records and command template (exec/input.h,
 * exec/template.h) on untrusted bytes: the input split at a delimiter,
 * split into columns, regrouped as -N / -m / -X would, and every chunk's
 * command expanded.  Never crashes; grouping loses, duplicates and
 * reorders no record; every expansion fits the slots the template asks
 * for.
 *
 * Bytes: [0] options (bit 0-1 the delimiter: \n, NUL, ',', ' '; bit 2
 * --colsep ':'; bit 3 -X; bits 4-7 -N, 0 = -m), [1] the byte bound (x4;
 * odd: --pipe's blocks instead, which have no bound on records),
 * then the template's words up to the first '\x01' (split at '\x02'),
 * the records after it. */
#include "base/buf.h"
#include "base/err.h"
#include "exec/input.h"
#include "exec/template.h"

#include <regex.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static regex_t colon;
	static int ready;
	static const char delims[] = {'\n', '\0', ',', ' '};
	if (!ready) {
		if (regcomp(&colon, ":", REG_EXTENDED))
			abort();
		ready = 1;
	}
	if (size < 2)
		return 0;
	unsigned opt = data[0];
	size_t max_bytes = (size_t)data[1] * 4;
	int pipe = data[1] & 1;
	data += 2, size -= 2;
	const uint8_t *sep = memchr(data, 1, size);
	size_t tlen = sep ? (size_t)(sep - data) : 0;
	const uint8_t *rec = sep ? sep + 1 : data;
	size_t rlen = size - (size_t)(rec - data);

	/* the template: words split at \x02, NUL-terminated */
	char *tw = malloc(tlen + 2), *argv[64];
	size_t argc = 0;
	if (!tw)
		return 0;
	memcpy(tw, data, tlen);
	tw[tlen] = 0;
	for (char *p = tw; argc < 63;) {
		argv[argc++] = p;
		char *q = memchr(p, 2, strlen(p));
		if (!q)
			break;
		*q = 0;
		p = q + 1;
	}
	argv[argc] = NULL;

	struct mesh_exec_list l;
	struct mesh_exec_input in, before;
	struct mesh_exec_source src[1] = {{&l, 0}};
	const regex_t *cs = opt & 4 ? &colon : NULL;
	int rc = mesh_exec_list_split(&l, rec, rlen, delims[opt & 3], NULL);
	if (rc == 0)
		rc = mesh_exec_input_combine(&in, src, 1, cs);
	else
		memset(&in, 0, sizeof in);
	if (rc == 0 && mesh_exec_input_combine(&before, src, 1, cs) != 0)
		abort(); /* the same bytes twice: the same answer */
	if (rc != 0) {
		mesh_exec_input_release(&in);
		goto out;
	}
	uint64_t per = opt >> 4;
	rc = pipe ? mesh_exec_input_blocks(&in, per, per ? 0 : max_bytes, '\n')
		  : mesh_exec_input_group(&in, cs, per, per ? 0 : max_bytes);
	if (rc != 0 && !(rc == MESH_E_TOOBIG && per && !pipe))
		abort();
	in.context = (opt & 8) != 0;
	if (rc == 0) {
		/* every record once, in order */
		uint64_t k = 0;
		const char **v = malloc((rlen + 2) * sizeof *v), **w = malloc(MESH_EXEC_INPUT_MAX_ARGS * sizeof *w);
		if (!v || !w)
			abort();
		uint64_t bi = 0;
		size_t bn = 0, bk = 0;
		for (uint64_t c = 0; c < in.n; c++) {
			size_t nv;
			if (mesh_exec_input_values(&in, c, v, &nv) || nv == 0)
				abort();
			if (per && nv > per)
				abort();
			if (pipe) { /* its standard input: the records, each ended */
				int fd = mesh_exec_input_block_fd(&in, c);
				if (fd < 0)
					abort();
				close(fd);
			}
			for (size_t i = 0; i < nv; i++, k++) {
				while (bk == bn) {
					if (bi >= before.n || mesh_exec_input_values(&before, bi++, w, &bn))
						abort();
					bk = 0;
				}
				if (strcmp(v[i], w[bk++]))
					abort();
			}
		}
		if (bi != before.n || bk != bn)
			abort();
		free(v), free(w);
		/* every command expands within its slots */
		struct mesh_exec_template t = MESH_EXEC_TEMPLATE_INIT;
		if (mesh_exec_template_init(&t, argv) == 0) {
			size_t slots = mesh_exec_template_slots(&t);
			char **av = calloc(slots, sizeof *av);
			struct mesh_buf b = MESH_BUF_INIT;
			for (uint64_t c = 0; av && c < in.n && c < 64; c++) {
				for (size_t i = 0; i < slots; i++)
					av[i] = (char *)1;
				if (mesh_exec_template_expand(&t, &in, c, 1, &b, av) != 0)
					abort();
				size_t n = 0;
				while (n < slots && av[n])
					n++;
				if (n == slots)
					abort();
			}
			free(av);
			mesh_buf_release(&b);
		}
		mesh_exec_template_release(&t);
	}
	mesh_exec_input_release(&in);
	mesh_exec_input_release(&before);
out:
	mesh_exec_list_release(&l);
	free(tw);
	return 0;
}
