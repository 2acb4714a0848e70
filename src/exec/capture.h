/* One chunk's captured output stream: kept in memory up to a limit, then
 * spilled to an unlinked temp file, so output is grouped per chunk without
 * a cap on its size; and the writer that passes it on, with GNU parallel's
 * --tag prefix when asked. */
#ifndef MESH_EXEC_CAPTURE_H
#define MESH_EXEC_CAPTURE_H

#include "base/buf.h"

#include <stddef.h>

#define MESH_CAPTURE_MEM_MAX (4u << 20)

struct mesh__capture {
	struct mesh_buf mem;
	int spill_fd;		/* -1 until the first spill */
	size_t mem_max;		/* 0 = MESH_CAPTURE_MEM_MAX */
	unsigned long long total; /* bytes held (memory + spill file) */
	const char *dir;	/* where to spill: NULL = $TMPDIR, else /tmp; borrowed */
	const char *spill_dir;	/* the directory of the last spill (or failed spill); for messages */
};
#define MESH__CAPTURE_INIT {MESH_BUF_INIT, -1, 0, 0, NULL, NULL}

/* A line prefix (--tag: the text, then a TAB) and where the stream stands:
 * mid is 1 while the last byte written was not a newline (the next byte
 * gets no prefix). */
struct mesh__tag {
	const char *p;		/* NULL: no prefix; else p[0..n) and a TAB */
	size_t n;
	int mid;
};

/* Appends n bytes.  0 or -errno of the spill file; on an error nothing of
 * what c held before is lost (the memory is kept until the spill file holds
 * it) and the n bytes are not added. */
int mesh__capture_add(struct mesh__capture *c, const void *p, size_t n);
/* Moves what memory holds into the spill file now (bounds the memory of
 * outputs that must wait).  0 or -errno; c unchanged on an error. */
int mesh__capture_spill(struct mesh__capture *c);
/* Brings a spilled capture back into memory whole (c->mem then holds all
 * c->total bytes, NUL-terminated; the spill file is closed), for a caller
 * that needs the output in one piece.  0 (also when nothing spilled),
 * -ENOMEM or -errno of reading the file; c unchanged on an error. */
int mesh__capture_gather(struct mesh__capture *c);
/* Writes everything captured to fd (fd < 0: discard) in order, each line
 * prefixed by tag (NULL = none), then resets c for reuse (the memory is
 * kept, the spill file closed).  durable selects mesh_write_all (the fault
 * seam; results files) over mesh_write_all_raw.  0 or -errno of the write
 * or of reading the spill file back; c is reset either way. */
int mesh__capture_flush(struct mesh__capture *c, int fd, struct mesh__tag *tag, int durable);
/* --line-buffer: writes the whole lines held (up to the last newline) and
 * keeps the partial last line; a spilled capture (one line over the memory
 * limit) is written whole.  0 or -errno. */
int mesh__capture_flush_lines(struct mesh__capture *c, int fd, struct mesh__tag *tag);
/* Writes n bytes to fd with tag's prefix at each line start.  0 or -errno. */
int mesh__write_tagged(int fd, struct mesh__tag *tag, const void *p, size_t n, int durable);
/* Frees everything. */
void mesh__capture_release(struct mesh__capture *c);

#endif
