/* A growable byte buffer (git's strbuf, smaller).  Always NUL-terminated.
 * MESH_BUF_INIT is a valid empty buffer; mesh_buf_release frees it and
 * leaves it empty and reusable.  Appends return 0 or -ENOMEM (the buffer
 * keeps what it had). */
#ifndef MESH_BASE_BUF_H
#define MESH_BASE_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct mesh_buf {
	char *p;
	size_t len, cap;
};
#define MESH_BUF_INIT {NULL, 0, 0}

int mesh_buf_grow(struct mesh_buf *b, size_t extra);
int mesh_buf_add(struct mesh_buf *b, const void *data, size_t n);
int mesh_buf_adds(struct mesh_buf *b, const char *s);
int mesh_buf_addf(struct mesh_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int mesh_buf_vaddf(struct mesh_buf *b, const char *fmt, va_list ap);
void mesh_buf_reset(struct mesh_buf *b);
void mesh_buf_release(struct mesh_buf *b);
/* A malloc'd formatted string (the caller frees it), or NULL without memory. */
char *mesh_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* For functions that hand a message to their caller: when err is not NULL,
 * *err gets a malloc'd formatted message (or NULL without memory).
 * Returns rc, so that `return mesh_errf(err, MESH_E_PARSE, "...")` works. */
int mesh_errf(char **err, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Hands the storage to the caller (who frees it); b becomes empty. */
char *mesh_buf_detach(struct mesh_buf *b, size_t *len);

/* Room for need elements of size bytes in the array p of *cap elements (git's
 * ALLOC_GROW): p itself when it has it, else p grown (doubled from 16) with
 * *cap its new capacity; NULL without memory (p and *cap as they were).
 * need >= 1:
 *     struct item *v = mesh_grow(t->v, &t->cap, t->n + 1, sizeof *v);
 *     if (!v) return -ENOMEM;
 *     t->v = v; */
void *mesh_grow(void *p, size_t *cap, size_t need, size_t size);

#endif
