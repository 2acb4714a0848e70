#include "exec/capture.h"

#include "base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

static int spill_open(void)
{
	const char *dir = getenv("TMPDIR");
	if (!dir || !dir[0])
		dir = "/tmp";
	int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0 && dir[0] && (errno == EOPNOTSUPP || errno == EISDIR || errno == ENOENT))
		fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	return fd < 0 ? -errno : fd;
}

int mesh__capture_add(struct mesh__capture *c, const void *p, size_t n)
{
	size_t max = c->mem_max ? c->mem_max : MESH_CAPTURE_MEM_MAX;
	c->total += n;
	if (c->spill_fd < 0 && c->mem.len + n <= max)
		return mesh_buf_add(&c->mem, p, n);
	if (c->spill_fd < 0) {
		int fd = spill_open();
		if (fd < 0)
			return fd;
		c->spill_fd = fd;
		int rc = mesh_write_all_raw(fd, c->mem.p, c->mem.len);
		mesh_buf_reset(&c->mem);
		if (rc < 0)
			return rc;
	}
	return mesh_write_all_raw(c->spill_fd, p, n);
}

long mesh__capture_read(struct mesh__capture *c, int fd)
{
	char tmp[65536];
	ssize_t r;
	/* Read straight into the buffer while it stays in memory. */
	size_t max = c->mem_max ? c->mem_max : MESH_CAPTURE_MEM_MAX;
	if (c->spill_fd < 0 && c->mem.len + sizeof tmp <= max) {
		if (mesh_buf_grow(&c->mem, sizeof tmp) < 0)
			return -ENOMEM;
		do
			r = read(fd, c->mem.p + c->mem.len, sizeof tmp);
		while (r < 0 && errno == EINTR);
		if (r < 0)
			return -errno;
		c->mem.len += (size_t)r;
		c->mem.p[c->mem.len] = 0;
		c->total += (unsigned long long)r;
		return (long)r;
	}
	do
		r = read(fd, tmp, sizeof tmp);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r > 0) {
		int rc = mesh__capture_add(c, tmp, (size_t)r);
		if (rc < 0)
			return rc;
	}
	return (long)r;
}

static void reset(struct mesh__capture *c)
{
	mesh_buf_reset(&c->mem);
	if (c->spill_fd >= 0)
		close(c->spill_fd);
	c->spill_fd = -1;
	c->total = 0;
}

int mesh__capture_flush(struct mesh__capture *c, int fd)
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
			if ((rc = mesh_write_all_raw(fd, tmp, (size_t)r)) < 0)
				break;
		}
	}
	if (rc == 0 && fd >= 0 && c->mem.len)
		rc = mesh_write_all_raw(fd, c->mem.p, c->mem.len);
	reset(c);
	return rc;
}

void mesh__capture_release(struct mesh__capture *c)
{
	reset(c);
	mesh_buf_release(&c->mem);
}
