/* One chunk's captured output stream: kept in memory up to a limit, then
 * spilled to an unlinked temp file, so output is grouped per chunk without
 * a cap on its size. */
#ifndef MESH_EXEC_CAPTURE_H
#define MESH_EXEC_CAPTURE_H

#include "base/buf.h"

#include <stddef.h>

#define MESH_CAPTURE_MEM_MAX (4u << 20)

struct mesh__capture {
	struct mesh_buf mem;
	int spill_fd;		/* -1 until the first spill */
	size_t mem_max;		/* 0 = MESH_CAPTURE_MEM_MAX */
	unsigned long long total;
};
#define MESH__CAPTURE_INIT {MESH_BUF_INIT, -1, 0, 0}

/* Reads what fd has now (one read of up to 64 KiB) into c.  Returns the
 * byte count, 0 at end of file, or -errno (-EAGAIN included). */
long mesh__capture_read(struct mesh__capture *c, int fd);
/* Appends n bytes.  0 or -errno (spill file). */
int mesh__capture_add(struct mesh__capture *c, const void *p, size_t n);
/* Writes everything captured to fd (fd < 0: discard) in order, then resets
 * c for reuse (the memory is kept, the spill file closed).  0 or -errno of
 * the write; c is reset either way. */
int mesh__capture_flush(struct mesh__capture *c, int fd);
/* Frees everything. */
void mesh__capture_release(struct mesh__capture *c);

#endif
