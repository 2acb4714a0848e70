#include "exec/input.h"

#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* The whole input lives in memory: mesh run needs every line by index and
 * the hash of the whole file before it can name its journal. */
#define INPUT_MAX (1ull << 40)

static int index_lines(struct mesh_exec_input *in, uint64_t *bad_line)
{
	uint64_t n = 0;
	for (size_t i = 0; i < in->len; i++)
		if (in->data[i] == '\n')
			n++;
	if (in->len > 0 && in->data[in->len - 1] != '\n')
		n++;
	if (n == 0)
		return MESH_E_RANGE;
	in->start = malloc((size_t)(n + 1) * sizeof *in->start);
	if (!in->start)
		return -ENOMEM;
	uint64_t k = 0;
	size_t s = 0;
	for (size_t i = 0; i <= in->len; i++) {
		if (i == in->len && s == in->len)
			break; /* the file ended with '\n': no extra line */
		if (i < in->len && in->data[i] == 0) {
			if (bad_line)
				*bad_line = k + 1;
			return MESH_E_PARSE;
		}
		if (i == in->len || in->data[i] == '\n') {
			in->data[i] = 0; /* data has one spare byte for the last line */
			in->start[k++] = s;
			s = i + 1;
		}
	}
	in->start[k] = s;
	in->n = k;
	return 0;
}

int mesh_exec_input_from_mem(const void *buf, size_t n, struct mesh_exec_input *in, uint64_t *bad_line)
{
	memset(in, 0, sizeof *in);
	in->data = malloc(n + 1);
	if (!in->data)
		return -ENOMEM;
	memcpy(in->data, buf, n);
	in->data[n] = 0;
	in->len = n;
	in->hash = mesh_fnv1a64(MESH_FNV1A64_INIT, buf, n);
	return index_lines(in, bad_line);
}

int mesh_exec_input_load(const char *path, struct mesh_exec_input *in, uint64_t *bad_line)
{
	memset(in, 0, sizeof *in);
	char *data;
	size_t len;
	int rc = mesh_read_file(path, INPUT_MAX, &data, &len);
	if (rc < 0)
		return rc;
	in->data = data; /* mesh_read_file appends a NUL: the spare byte */
	in->len = len;
	in->hash = mesh_fnv1a64(MESH_FNV1A64_INIT, data, len);
	return index_lines(in, bad_line);
}

void mesh_exec_input_release(struct mesh_exec_input *in)
{
	free(in->data);
	free(in->start);
	memset(in, 0, sizeof *in);
}

const char *mesh_exec_input_line(const struct mesh_exec_input *in, uint64_t i, size_t *len)
{
	if (!in || i >= in->n)
		return NULL;
	if (len)
		*len = in->start[i + 1] - in->start[i] - 1;
	return in->data + in->start[i];
}
