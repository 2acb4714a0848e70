#include "store/store.h"

#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"
#include "base/path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>


struct file_store {
	struct mesh_store base;
	char *dir;
	char *name;
	int dirfd;
};

static struct file_store *fs_of(struct mesh_store *s)
{
	return (struct file_store *)s;
}

static int lease_name(struct file_store *fs, uint64_t cid, unsigned slot, char *buf, size_t cap)
{
	int n = slot ? snprintf(buf, cap, "%s.%" PRIu64 ".s%u.lease", fs->name, cid, slot)
		     : snprintf(buf, cap, "%s.%" PRIu64 ".lease", fs->name, cid);
	return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

static int lock_ex(int fd)
{
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

/* Reads the stamp of an open lease file. */
static int read_fd(int fd, struct mesh_lease_stamp *st)
{
	char buf[MESH_LEASE_LINE_MAX];
	ssize_t got = mesh_pread_full(fd, buf, sizeof buf, 0);
	if (got < 0)
		return (int)got;
	return mesh_lease_parse(buf, (size_t)got, st);
}

static int write_fd(int fd, const struct mesh_lease_stamp *st)
{
	char buf[MESH_LEASE_LINE_MAX];
	size_t n = mesh_lease_format(buf, sizeof buf, st);
	int rc;
	if (!n)
		return MESH_E_TOOBIG;
	rc = mesh_pwrite_all(fd, buf, n, 0);
	if (!rc && ftruncate(fd, (off_t)n) < 0)
		rc = -errno;
	return rc;
}

/* Opens and locks an existing lease file; fails with -ENOENT when it is
 * gone (also when it was unlinked while we waited for the lock). */
static int open_locked(struct file_store *fs, const char *name)
{
	struct stat st;
	int rc, fd = openat(fs->dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	rc = lock_ex(fd);
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (!rc && st.st_nlink == 0)
		rc = -ENOENT;
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

static int fs_claim(struct mesh_store *s, uint64_t cid, unsigned slot, const struct mesh_lease_stamp *mine)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct stat st;
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = openat(fs->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return errno == EEXIST ? MESH_E_STATE : -errno;
	rc = lock_ex(fd);
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (!rc && (st.st_size != 0 || st.st_nlink == 0)) {
		/* A stealer took the empty file between our create and lock. */
		close(fd);
		return MESH_E_STATE;
	}
	if (!rc)
		rc = write_fd(fd, mine);
	if (rc)
		unlinkat(fs->dirfd, name, 0);
	close(fd);
	return rc;
}

static int fs_steal(struct mesh_store *s, uint64_t cid, unsigned slot, const struct mesh_lease_clock *now,
		    struct mesh_lease_stamp *mine, struct mesh_lease_stamp *seen)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp old;
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = open_locked(fs, name);
	if (fd < 0)
		return fd;
	rc = read_fd(fd, &old);
	if (rc == 0 && !mesh_lease_free(&old, now)) {
		if (seen)
			*seen = old;
		close(fd);
		return MESH_E_STATE;
	}
	if (rc == 0 && old.attempt + 1 > mine->attempt)
		mine->attempt = old.attempt + 1;
	rc = write_fd(fd, mine);
	close(fd);
	return rc;
}

static int fs_renew(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token, uint64_t deadline_ns,
		    uint64_t boot_deadline_ns)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp cur;
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = open_locked(fs, name);
	if (fd < 0)
		return fd == -ENOENT ? MESH_E_STATE : fd;
	rc = read_fd(fd, &cur);
	if (rc || cur.token != token) {
		close(fd);
		return MESH_E_STATE;
	}
	cur.deadline_ns = deadline_ns;
	cur.boot_deadline_ns = boot_deadline_ns;
	rc = write_fd(fd, &cur);
	close(fd);
	return rc;
}

static int fs_release(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp cur;
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	if (!token) {
		if (unlinkat(fs->dirfd, name, 0) < 0 && errno != ENOENT)
			return -errno;
		return 0;
	}
	fd = open_locked(fs, name);
	if (fd < 0)
		return fd == -ENOENT ? 0 : fd;
	if (read_fd(fd, &cur) == 0 && cur.token == token && unlinkat(fs->dirfd, name, 0) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

static int fs_read(struct mesh_store *s, uint64_t cid, unsigned slot, struct mesh_lease_stamp *st)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = openat(fs->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	rc = read_fd(fd, st);
	close(fd);
	return rc;
}

static int fs_each_live(struct mesh_store *s, const struct mesh_lease_clock *now,
			void (*fn)(void *arg, uint64_t cid, const struct mesh_lease_stamp *st), void *arg)
{
	struct file_store *fs = fs_of(s);
	size_t nl = strlen(fs->name);
	int fd = openat(fs->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;
	struct dirent *e;
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -ENOMEM;
	}
	while ((e = readdir(d))) {
		const char *n = e->d_name, *dot;
		size_t len = strlen(n);
		uint64_t cid;
		struct mesh_lease_stamp st;
		if (len <= nl + 7 || memcmp(n, fs->name, nl) || n[nl] != '.' || strcmp(n + len - 6, ".lease"))
			continue;
		dot = n + nl + 1;
		if (mesh_parse_u64n(dot, (size_t)(n + len - 6 - dot), UINT64_MAX, &cid))
			continue; /* speculative copies (".s1") and other jobs' files */
		if (fs_read(s, cid, 0, &st) == 0 && !mesh_lease_free(&st, now))
			fn(arg, cid, &st);
	}
	closedir(d);
	return 0;
}

static void fs_close(struct mesh_store *s)
{
	struct file_store *fs = fs_of(s);
	if (!fs)
		return;
	close(fs->dirfd);
	free(fs->dir);
	free(fs->name);
	free(fs);
}

static const struct mesh_store_ops file_ops = {
	.name = "file",
	.claim = fs_claim,
	.steal = fs_steal,
	.renew = fs_renew,
	.release = fs_release,
	.read = fs_read,
	.each_live = fs_each_live,
	.close = fs_close,
};

/* Opens lockdir (creating it 0700 when create is set and it is missing) and
 * checks that it is private to this user; the check is made on the opened
 * directory itself, so nothing can be swapped in between. */
static int open_private_dir(const char *lockdir, int create)
{
	const char *why;
	if (mesh_path_lockdir_ok(lockdir, &why))
		return MESH_E_PATH;
	return mesh_path_open_private_dir(lockdir, create);
}

int mesh_store_file_open(struct mesh_store **out, const char *lockdir, const char *name, int create)
{
	struct file_store *fs;
	int dfd;
	if (!mesh_job_name_ok(name))
		return MESH_E_PATH;
	dfd = open_private_dir(lockdir, create);
	if (dfd < 0)
		return dfd;
	fs = calloc(1, sizeof *fs);
	if (!fs || !(fs->dir = strdup(lockdir)) || !(fs->name = strdup(name))) {
		if (fs) {
			free(fs->dir);
			free(fs);
		}
		close(dfd);
		return -ENOMEM;
	}
	fs->base.ops = &file_ops;
	fs->dirfd = dfd;
	*out = &fs->base;
	return 0;
}

int mesh_store_file_check_dir(const char *lockdir)
{
	int dfd = open_private_dir(lockdir, 0);
	if (dfd == -ENOENT)
		return 0;
	if (dfd < 0)
		return dfd;
	close(dfd);
	return 0;
}

int mesh_store_file_remove_dir(const char *lockdir)
{
	int rc = 0, dfd = open_private_dir(lockdir, 0);
	DIR *d;
	struct dirent *e;
	if (dfd == -ENOENT)
		return 0;
	if (dfd < 0)
		return dfd;
	d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return -ENOMEM;
	}
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len > 6 && !strcmp(e->d_name + len - 6, ".lease") && unlinkat(dirfd(d), e->d_name, 0) < 0 &&
		    errno != ENOENT)
			rc = -errno;
	}
	closedir(d);
	if (!rc && rmdir(lockdir) < 0 && errno != ENOENT)
		rc = errno == EEXIST ? -ENOTEMPTY : -errno;
	return rc;
}
