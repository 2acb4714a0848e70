/* A chunked request body, decoded for the gateway (which reads a request's
 * body whole before routing it by the model in it).  See gw_int.h. */
#include "gateway/gw_int.h"

#include "base/buf.h"

#include <string.h>

/* The line at p[pos..n) without its CRLF: its length, or -1 when its end
 * has not come yet. */
static long line_at(const char *p, size_t n, size_t pos)
{
	const char *nl = pos < n ? memchr(p + pos, '\n', n - pos) : NULL;
	if (!nl)
		return -1;
	long len = (long)(nl - (p + pos));
	return len && p[pos + (size_t)len - 1] == '\r' ? len - 1 : len;
}

int mesh__gw_dechunk(struct mesh__gw_dechunk *d, const char *p, size_t n, size_t max, struct mesh_buf *out)
{
	for (;;) {
		if (d->state == 0) { /* a chunk's size line */
			long len = line_at(p, n, d->pos);
			if (len < 0)
				return n - d->pos > 1024 ? 400 : 1;
			size_t size = 0, k = 0;
			const char *l = p + d->pos;
			for (; k < (size_t)len && strchr("0123456789abcdefABCDEF", l[k]) && l[k]; k++) {
				if (size > (SIZE_MAX >> 4))
					return 413;
				size = size * 16 + (size_t)(l[k] <= '9' ? l[k] - '0' : (l[k] | 0x20) - 'a' + 10);
			}
			if (!k || (k < (size_t)len && l[k] != ';' && l[k] != ' ' && l[k] != '\t'))
				return 400;
			if (size > max || out->len + size > max)
				return 413;
			d->pos += (size_t)len + (p[d->pos + (size_t)len] == '\r' ? 2 : 1);
			d->left = size;
			d->state = size ? 1 : 2;
		} else if (d->state == 1) { /* its data and CRLF */
			if (n - d->pos < d->left + 2)
				return 1;
			if (mesh_buf_add(out, p + d->pos, d->left) < 0)
				return 413;
			if (p[d->pos + d->left] != '\r' || p[d->pos + d->left + 1] != '\n')
				return 400;
			d->pos += d->left + 2;
			d->state = 0;
		} else { /* trailers, up to the empty line */
			long len = line_at(p, n, d->pos);
			if (len < 0)
				return n - d->pos > 8192 ? 400 : 1;
			d->pos += (size_t)len + (p[d->pos + (size_t)len] == '\r' ? 2 : 1);
			if (len == 0)
				return 0;
		}
	}
}
