/* The lines of an input file as chunk values (`mesh run --input FILE`):
 * chunk i is line i (0-based).  A line ends at '\n' (not kept); a last line
 * without '\n' still counts; an empty line is a chunk whose value is "". */
#ifndef MESH_EXEC_INPUT_H
#define MESH_EXEC_INPUT_H

#include <stddef.h>
#include <stdint.h>

struct mesh_exec_input {
	char *data;	/* the file, each line's '\n' replaced by NUL */
	size_t len;
	uint64_t n;	/* number of lines */
	size_t *start;	/* n + 1 entries: line i is data[start[i]] .. */
	uint64_t hash;	/* FNV-1a 64 of the file's bytes: the identity of the input */
};
#define MESH_EXEC_INPUT_INIT {NULL, 0, 0, NULL, 0}

/* Reads path into in (which the caller releases with
 * mesh_exec_input_release, also after a failure).  0; -errno (cannot
 * read); MESH_E_RANGE (no lines: an empty file); MESH_E_PARSE (a line holds
 * a NUL byte, which no argument can carry; *bad_line gets its 1-based
 * number when bad_line is not NULL). */
int mesh_exec_input_load(const char *path, struct mesh_exec_input *in, uint64_t *bad_line);
/* Parses the n bytes at buf (copied) the same way. */
int mesh_exec_input_from_mem(const void *buf, size_t n, struct mesh_exec_input *in, uint64_t *bad_line);
void mesh_exec_input_release(struct mesh_exec_input *in);
/* Line i as a NUL-terminated string (its length in *len if not NULL); NULL
 * when i >= n. */
const char *mesh_exec_input_line(const struct mesh_exec_input *in, uint64_t i, size_t *len);

#endif
