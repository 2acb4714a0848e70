#include "exec/capture.h"

#include "base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *spill_dir(const struct mesh__capture *c)
{
	const char *dir = c->dir;
	if (!dir || !dir[0])
		dir = getenv("TMPDIR");
	if (!dir || !dir[0])
		dir = "/tmp";
	return dir;
}

/* An unlinked file in the chosen directory, never elsewhere: a message
 * about a failed spill names the directory the user set. */
static int spill_open(struct mesh__capture *c)
{
	const char *dir = spill_dir(c);
	c->spill_dir = dir;
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
		/* No O_TMPFILE on this file system: a named file, unlinked at once. */
		struct mesh_buf b = MESH_BUF_INIT;
		if (mesh_buf_addf(&b, "%s/.mesh-spill-XXXXXX", dir) < 0)
			return -ENOMEM;
		fd = mkostemp(b.p, O_CLOEXEC);
		int e = errno;
		if (fd >= 0)
			unlink(b.p);
		mesh_buf_release(&b);
		errno = e;
	}
	return fd < 0 ? -errno : fd;
}

int mesh__capture_spill(struct mesh__capture *c)
{
	if (c->spill_fd >= 0)
		return 0;
	int fd = spill_open(c);
	if (fd < 0)
		return fd;
	int rc = mesh_write_all_raw(fd, c->mem.p, c->mem.len);
	if (rc < 0) {
		/* The memory still holds everything: nothing is lost here. */
		close(fd);
		return rc;
	}
	c->spill_fd = fd;
	mesh_buf_reset(&c->mem);
	return 0;
}

int mesh__capture_add(struct mesh__capture *c, const void *p, size_t n)
{
	size_t max = c->mem_max ? c->mem_max : MESH_CAPTURE_MEM_MAX;
	int rc;
	if (c->spill_fd < 0 && c->mem.len + n <= max)
		rc = mesh_buf_add(&c->mem, p, n);
	else if ((rc = mesh__capture_spill(c)) == 0)
		rc = mesh_write_all_raw(c->spill_fd, p, n);
	if (rc == 0)
		c->total += n;
	return rc;
}

int mesh__capture_gather(struct mesh__capture *c)
{
	if (c->spill_fd < 0)
		return 0;
	/* Spilled, memory holds nothing (the spill took it all and later
	 * bytes went to the file): the file is the whole capture. */
	struct mesh_buf b = MESH_BUF_INIT;
	if (c->total > SIZE_MAX / 2 || mesh_buf_grow(&b, (size_t)c->total) < 0)
		return -ENOMEM;
	ssize_t r = mesh_pread_full(c->spill_fd, b.p, (size_t)c->total, 0);
	if (r >= 0 && (unsigned long long)r != c->total)
		r = -EIO; /* our own unlinked file, shorter than what we wrote */
	if (r < 0) {
		mesh_buf_release(&b);
		return (int)r;
	}
	b.len = (size_t)r;
	b.p[b.len] = 0;
	close(c->spill_fd);
	c->spill_fd = -1;
	mesh_buf_release(&c->mem);
	c->mem = b;
	return 0;
}

static void reset(struct mesh__capture *c)
{
	mesh_buf_reset(&c->mem);
	if (c->spill_fd >= 0)
		close(c->spill_fd);
	c->spill_fd = -1;
	c->total = 0;
}

static int put(int fd, const void *p, size_t n, int durable)
{
	return durable ? mesh_write_all(fd, p, n) : mesh_write_all_raw(fd, p, n);
}

int mesh__write_tagged(int fd, struct mesh__tag *tag, const void *p, size_t n, int durable)
{
	if (!n)
		return 0;
	if (!tag || !tag->p)
		return put(fd, p, n, durable);
	/* One write a call: the prefixes and lines gathered in one buffer. */
	struct mesh_buf b = MESH_BUF_INIT;
	const char *s = p, *end = s + n;
	int rc = 0;
	while (s < end && rc == 0) {
		const char *nl = memchr(s, '\n', (size_t)(end - s));
		const char *stop = nl ? nl + 1 : end;
		if (!tag->mid && (rc = mesh_buf_add(&b, tag->p, tag->n)) == 0)
			rc = mesh_buf_add(&b, "\t", 1);
		if (rc == 0)
			rc = mesh_buf_add(&b, s, (size_t)(stop - s));
		tag->mid = nl == NULL;
		s = stop;
	}
	if (rc == 0)
		rc = put(fd, b.p, b.len, durable);
	mesh_buf_release(&b);
	return rc;
}

int mesh__capture_flush(struct mesh__capture *c, int fd, struct mesh__tag *tag, int durable)
{
	int rc = 0;
	if (fd >= 0 && c->spill_fd >= 0) {
		char tmp[65536];
		off_t off = 0;
		for (;;) {
			ssize_t r = mesh_pread_full(c->spill_fd, tmp, sizeof tmp, off);
			if (r <= 0) {
				rc = (int)r;
				break;
			}
			off += r;
			if ((rc = mesh__write_tagged(fd, tag, tmp, (size_t)r, durable)) < 0)
				break;
		}
	}
	if (rc == 0 && fd >= 0 && c->mem.len)
		rc = mesh__write_tagged(fd, tag, c->mem.p, c->mem.len, durable);
	reset(c);
	return rc;
}

int mesh__capture_flush_lines(struct mesh__capture *c, int fd, struct mesh__tag *tag)
{
	if (c->spill_fd >= 0)
		return mesh__capture_flush(c, fd, tag, 0);
	char *nl = c->mem.len ? memrchr(c->mem.p, '\n', c->mem.len) : NULL;
	if (!nl)
		return 0;
	size_t k = (size_t)(nl + 1 - c->mem.p);
	int rc = fd >= 0 ? mesh__write_tagged(fd, tag, c->mem.p, k, 0) : 0;
	memmove(c->mem.p, c->mem.p + k, c->mem.len - k);
	c->mem.len -= k;
	c->mem.p[c->mem.len] = 0;
	c->total -= k;
	return rc;
}

void mesh__capture_release(struct mesh__capture *c)
{
	reset(c);
	mesh_buf_release(&c->mem);
}
