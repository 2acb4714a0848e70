/* The chunks of `mesh run` built from GNU parallel's argument sources.
 *
 * A source is a list of records: the words of a `:::` list, or a file (or
 * standard input) split at a delimiter ('\n' by default, '\0' for -0, any
 * byte for -d).  Sources combine into chunks as in GNU parallel: each
 * source multiplies the chunks (the cross product, the last source varying
 * fastest); a source marked `linked` (`:::+`, `::::+`) instead pairs with the
 * one before it record by record, and the pair is as long as the shorter;
 * one marked linked 2 (--link) pairs as well, but the pair is as long as
 * the longer, the shorter one starting over.  Among several sources, one
 * without records counts as one empty record (GNU parallel's: `::: a b
 * :::` runs twice, with an empty second argument); when every source is
 * empty there are no chunks.
 *
 * Chunk i then has one *value* per source (the record as read; `{}`) and
 * its *arguments* (`{1}`, `{2}`, ...; what is appended to a command without
 * a replacement string): the values again, or with a column separator each
 * value split at every match of the regex, each column without the white
 * space around it -- and then the values are the columns too (GNU
 * parallel's --colsep: {} is every column, {.} each without its
 * extension). */
#ifndef MESH_EXEC_INPUT_H
#define MESH_EXEC_INPUT_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

/* Most arguments (columns) one chunk may have; more is MESH_E_TOOBIG. */
#define MESH_EXEC_INPUT_MAX_ARGS 4096

/* One source: n records, record k at data + start[k], NUL-terminated. */
struct mesh_exec_list {
	char *data;
	uint64_t n;
	size_t *start;
};
#define MESH_EXEC_LIST_INIT {NULL, 0, NULL}

/* Splits the len bytes at buf (copied) at each delim byte; a last record
 * without a delimiter still counts; no bytes = no records.  0, -ENOMEM, or
 * MESH_E_PARSE when delim is not '\0' and a record holds a NUL byte, which
 * no argument can carry (*bad gets its 1-based number when bad is not
 * NULL).  Release l with mesh_exec_list_release, also after a failure. */
int mesh_exec_list_split(struct mesh_exec_list *l, const void *buf, size_t len, int delim, uint64_t *bad);
/* The n strings at v (copied) as records.  0 or -ENOMEM. */
int mesh_exec_list_from_argv(struct mesh_exec_list *l, char *const *v, size_t n);
void mesh_exec_list_release(struct mesh_exec_list *l);

struct mesh_exec_source {
	const struct mesh_exec_list *list; /* borrowed for the call */
	int linked;			   /* paired with the source before it: 1 as long as the
					    * shorter (:::+), 2 as the longer (--link) */
};

struct mesh_exec_input {
	uint64_t n;	  /* chunks */
	char *data;	  /* every string below, NUL-terminated */
	size_t *line;	  /* n entries: chunk i's arguments joined by spaces */
	size_t *val;	  /* value offsets, chunk after chunk */
	uint64_t *vfirst; /* n + 1 entries: chunk i's values are val[vfirst[i]] .. val[vfirst[i+1]-1] */
	size_t *arg;	  /* argument offsets, chunk after chunk */
	uint64_t *afirst; /* n + 1 entries, as vfirst */
	uint64_t hash;	  /* FNV-1a 64 over every chunk's values: the identity of the input */
	int context;	  /* -X: a replacement string inside a longer argument repeats the
			     argument once a value (exec/template.h), not the values joined */
	int pipe;	  /* --pipe: a chunk's records go to its standard input, each ended by
			     pipe_end; the command sees no values (exec/template.h) */
	char pipe_end;
	int no_args;	  /* -N0: a chunk is a record the command does not see: no values, no
			     arguments (exec/template.h) */
	int cols;	  /* built with a column separator: the command's values are the
			     arguments (exec/template.h) */
};
#define MESH_EXEC_INPUT_INIT {0, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0, 0, 0, 0, 0}

/* Builds the chunks from nsrc >= 1 sources (src[0].linked is ignored);
 * colsep (borrowed, may be NULL) splits values into arguments (and the
 * values are those columns then).  0 (n may be 0: no records at all gives
 * no chunks), -ENOMEM, MESH_E_TOOBIG (more
 * than MESH_JOB_MAX_CHUNKS chunks or MESH_EXEC_INPUT_MAX_ARGS arguments in
 * one chunk).  Release in with mesh_exec_input_release, also after a
 * failure. */
int mesh_exec_input_combine(struct mesh_exec_input *in, const struct mesh_exec_source *src, size_t nsrc,
			    const regex_t *colsep);
/* One source: the lines of path (or of the n bytes at buf), one argument a
 * chunk.  0; -errno (cannot read); MESH_E_RANGE (no lines); MESH_E_PARSE
 * (a line holds a NUL byte; *bad_line gets its 1-based number when bad_line
 * is not NULL).  Release in as above. */
int mesh_exec_input_load(const char *path, struct mesh_exec_input *in, uint64_t *bad_line);
int mesh_exec_input_from_mem(const void *buf, size_t n, struct mesh_exec_input *in, uint64_t *bad_line);
void mesh_exec_input_release(struct mesh_exec_input *in);

/* GNU parallel's several arguments a command (-N, -n, -m, -X, --xargs):
 * regroups in's chunks so that each new chunk holds consecutive old ones,
 * at most per of them (0: no such limit), and no more than fit in
 * MESH_EXEC_INPUT_MAX_ARGS values and arguments and max_bytes of
 * arguments joined by spaces (0: no byte limit); a chunk is never empty,
 * and an old chunk too big alone stays alone.  colsep is the one in was
 * built with.  The hash covers the new boundaries, so grouped and
 * ungrouped inputs never share a journal.  0, -ENOMEM, or MESH_E_TOOBIG
 * when per is set and per old chunks hold more than
 * MESH_EXEC_INPUT_MAX_ARGS values or arguments (a fixed -N cannot shrink);
 * in is unchanged after a failure. */
int mesh_exec_input_group(struct mesh_exec_input *in, const regex_t *colsep, uint64_t per, size_t max_bytes);
/* --pipe's blocks: as mesh_exec_input_group without colsep, but with no
 * bound on the records a chunk (they never become arguments): per
 * records (0: no such limit) and max_bytes of them (0: none); a record
 * longer than max_bytes is a block alone.  Sets in->pipe. */
int mesh_exec_input_blocks(struct mesh_exec_input *in, uint64_t per, size_t max_bytes, char end);
/* A memfd (close-on-exec, at offset 0) holding chunk i's records, each
 * followed by in->pipe_end: its standard input under --pipe.  The fd or
 * -errno. */
int mesh_exec_input_block_fd(const struct mesh_exec_input *in, uint64_t i);

/* Chunk i's arguments joined by spaces (the --tag text, as GNU parallel tags),
 * its length in *len if not NULL; NULL when i >= n.  in == NULL: NULL (the
 * chunk's value is then its decimal id). */
const char *mesh_exec_input_line(const struct mesh_exec_input *in, uint64_t i, size_t *len);
/* Chunk i's values / arguments: *count entries in out (borrowed pointers
 * into in); at most MESH_EXEC_INPUT_MAX_ARGS.  0, or MESH_E_RANGE when
 * i >= n. */
int mesh_exec_input_values(const struct mesh_exec_input *in, uint64_t i, const char **out, size_t *count);
int mesh_exec_input_args(const struct mesh_exec_input *in, uint64_t i, const char **out, size_t *count);

#endif
