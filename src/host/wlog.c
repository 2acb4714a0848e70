#include "host/wlog.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* O_NOFOLLOW: a symlink planted there would send the worker's output (and
 * our writes) wherever it points.  O_NONBLOCK: a FIFO must not hang us. */
static int open_file(const char *path)
{
	struct stat st;
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
	if (fd < 0)
		return errno == ELOOP ? MESH_E_PATH : -errno;
	if (fstat(fd, &st) < 0) {
		int rc = -errno;
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return MESH_E_PATH;
	}
	/* A log left 0644 by an older meshd is tightened too. */
	if (st.st_uid == geteuid() && (st.st_mode & 07777) != 0600)
		fchmod(fd, 0600);
	return fd;
}

int mesh__wlog_open(struct mesh__wlog *l, const char *dir, const char *name, uint64_t max, char **err)
{
	char *path = mesh_strf("%s/%s.log", dir, name);
	if (!path) {
		*l = (struct mesh__wlog)MESH__WLOG_INIT;
		if (err)
			*err = mesh_strf("cannot open the log of '%s': out of memory", name);
		return -ENOMEM;
	}
	int rc = mesh__wlog_open_path(l, path, max, err);
	free(path);
	return rc;
}

int mesh__wlog_open_path(struct mesh__wlog *l, const char *path, uint64_t max, char **err)
{
	int fd;
	*l = (struct mesh__wlog)MESH__WLOG_INIT;
	if (!(l->path = strdup(path))) {
		if (err)
			*err = mesh_strf("cannot open the log '%s': out of memory", path);
		return -ENOMEM;
	}
	fd = open_file(l->path);
	if (fd < 0) {
		if (err)
			*err = fd == MESH_E_PATH
				       ? mesh_strf("refusing log '%s': a symlink or not a regular file", l->path)
				       : mesh_strf("cannot open '%s': %s", l->path, mesh_strerror(fd));
		mesh__wlog_close(l);
		return fd;
	}
	l->fd = fd;
	l->max = max;
	return 0;
}

/* Moves the full file aside (unless another instance did already) and opens
 * a fresh one at the path. */
static void rotate(struct mesh__wlog *l, const struct stat *mine)
{
	struct stat st;
	char *old = mesh_strf("%s.1", l->path);
	if (old && lstat(l->path, &st) == 0 && st.st_dev == mine->st_dev && st.st_ino == mine->st_ino)
		rename(l->path, old);
	free(old);
	close(l->fd);
	l->fd = open_file(l->path);
	if (l->fd < 0)
		l->fd = -1;
}

void mesh__wlog_write(struct mesh__wlog *l, const void *p, size_t n)
{
	struct stat st;
	if (l->fd < 0)
		return;
	if (l->max && fstat(l->fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size + n > l->max)
		rotate(l, &st);
	if (l->fd >= 0)
		mesh_write_all(l->fd, p, n);
}

void mesh__wlog_close(struct mesh__wlog *l)
{
	if (l->fd >= 0)
		close(l->fd);
	free(l->path);
	*l = (struct mesh__wlog)MESH__WLOG_INIT;
}
