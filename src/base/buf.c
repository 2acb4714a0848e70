#include "base/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mesh_buf_grow(struct mesh_buf *b, size_t extra)
{
	size_t need = b->len + extra + 1, cap;
	char *p;
	if (need < b->len)
		return -ENOMEM;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 64;
	while (cap < need)
		cap = cap * 2 > cap ? cap * 2 : need;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	b->p[b->len] = 0;
	return 0;
}

void *mesh_grow(void *p, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return p;
	size_t c = *cap ? *cap : 16;
	while (c < need) {
		if (c > SIZE_MAX / 2)
			return NULL;
		c *= 2;
	}
	if (size && c > SIZE_MAX / size)
		return NULL;
	void *q = realloc(p, c * size);
	if (q)
		*cap = c;
	return q;
}

int mesh_buf_add(struct mesh_buf *b, const void *data, size_t n)
{
	if (mesh_buf_grow(b, n))
		return -ENOMEM;
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = 0;
	return 0;
}

int mesh_buf_adds(struct mesh_buf *b, const char *s)
{
	return mesh_buf_add(b, s, strlen(s));
}

int mesh_buf_vaddf(struct mesh_buf *b, const char *fmt, va_list ap)
{
	va_list cp;
	int n;
	va_copy(cp, ap);
	n = vsnprintf(NULL, 0, fmt, cp);
	va_end(cp);
	if (n < 0 || mesh_buf_grow(b, (size_t)n))
		return -ENOMEM;
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int mesh_buf_addf(struct mesh_buf *b, const char *fmt, ...)
{
	va_list ap;
	int rc;
	va_start(ap, fmt);
	rc = mesh_buf_vaddf(b, fmt, ap);
	va_end(ap);
	return rc;
}

void mesh_buf_reset(struct mesh_buf *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = 0;
}

void mesh_buf_release(struct mesh_buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

char *mesh_buf_detach(struct mesh_buf *b, size_t *len)
{
	char *p = b->p;
	if (!p)
		p = calloc(1, 1);
	if (len)
		*len = b->len;
	b->p = NULL;
	b->len = b->cap = 0;
	return p;
}

char *mesh_strf(const char *fmt, ...)
{
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	va_start(ap, fmt);
	int rc = mesh_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	if (rc) {
		mesh_buf_release(&b);
		return NULL;
	}
	return mesh_buf_detach(&b, NULL);
}

int mesh_errf(char **err, int rc, const char *fmt, ...)
{
	if (err) {
		struct mesh_buf b = MESH_BUF_INIT;
		va_list ap;
		va_start(ap, fmt);
		int e = mesh_buf_vaddf(&b, fmt, ap);
		va_end(ap);
		*err = e ? NULL : mesh_buf_detach(&b, NULL);
		if (e)
			mesh_buf_release(&b);
	}
	return rc;
}
