/* The file store: chunk lease files, reads, the lock directory (block
 * leases: store_file_block.c). */
#include "store/store_file_int.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"
#include "base/path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

int mesh__fs_lease_name(struct file_store *fs, uint64_t cid, unsigned slot, char *buf, size_t cap)
{
	int n = slot ? snprintf(buf, cap, "%s.%" PRIu64 ".s%u.lease", fs->name, cid, slot)
		     : snprintf(buf, cap, "%s.%" PRIu64 ".lease", fs->name, cid);
	return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

int mesh__fs_block_name(struct file_store *fs, uint64_t b, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s.b%" PRIu64 ".lease", fs->name, b);
	return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
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

int mesh__fs_lease_write(int fd, const struct mesh_lease_stamp *st)
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

/* 0 when fd is the file linked as name now, -ENOENT when it is not (it
 * was unlinked, or renamed away: a released block file reused for another
 * block), -errno. */
static int still_named(struct file_store *fs, const char *name, int fd)
{
	struct stat a, b;
	if (fstat(fd, &a) < 0)
		return -errno;
	if (fstatat(fs->dirfd, name, &b, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? -ENOENT : -errno;
	return a.st_nlink > 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev ? 0 : -ENOENT;
}

/* Opens and locks an existing lease file; fails with -ENOENT when it is
 * gone (also when it was unlinked while we waited for the lock).  A block
 * file may also have been renamed to another block's name meanwhile (only
 * under its lock, by the holder of its free stamp): for those (block set)
 * the name is checked to be still this file. */
int mesh__fs_open_locked(struct file_store *fs, const char *name, int block)
{
	struct stat st;
	int rc, fd = openat(fs->dirfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	rc = mesh_flock_ex(fd);
	if (!rc && block)
		rc = still_named(fs, name, fd);
	else if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	else if (!rc && st.st_nlink == 0)
		rc = -ENOENT;
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

static int open_locked(struct file_store *fs, const char *name)
{
	return mesh__fs_open_locked(fs, name, 0);
}


static int fs_claim(struct mesh_store *s, uint64_t cid, unsigned slot, const struct mesh_lease_stamp *mine)
{
	struct file_store *fs = mesh__fs_of(s);
	char name[NAME_MAX + 1];
	struct stat st;
	int fd, rc = mesh__fs_lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = openat(fs->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return errno == EEXIST ? MESH_E_STATE : -errno;
	rc = mesh_flock_ex(fd);
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (!rc && (st.st_size != 0 || st.st_nlink == 0)) {
		/* A stealer took the empty file between our create and lock. */
		close(fd);
		return MESH_E_STATE;
	}
	if (!rc)
		rc = mesh__fs_lease_write(fd, mine);
	if (!rc && slot == 0) {
		/* Written first, looked second (store.h): a live block of
		 * another that covers cid wins. */
		struct mesh_lease_clock now;
		mesh_lease_clock_now(&now, &mine->holder);
		rc = mesh__fs_block_covers(fs, cid, &now, NULL);
		if (rc == 1)
			rc = MESH_E_STATE;
		else if (rc == 2)
			rc = 1;
	}
	if (rc < 0)
		unlinkat(fs->dirfd, name, 0);
	close(fd);
	return rc;
}

static int fs_steal(struct mesh_store *s, uint64_t cid, unsigned slot, const struct mesh_lease_clock *now,
		    struct mesh_lease_stamp *mine, struct mesh_lease_stamp *seen)
{
	struct file_store *fs = mesh__fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp old;
	int fd, rc = mesh__fs_lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = open_locked(fs, name);
	if (fd == -ENOENT && slot == 0)
		return mesh__fs_block_covers(fs, cid, now, seen) == 1 ? MESH_E_STATE : -ENOENT;
	if (fd < 0)
		return fd;
	rc = read_fd(fd, &old);
	if (rc == 0 && !mesh_lease_free(&old, now)) {
		if (seen)
			*seen = old;
		close(fd);
		return MESH_E_STATE;
	}
	struct stat fst;
	if (rc != 0 && fstat(fd, &fst) == 0 && fst.st_size == 0 &&
	    (uint64_t)fst.st_mtim.tv_sec * MESH_NS_PER_S + (uint64_t)fst.st_mtim.tv_nsec + MESH_LEASE_EMPTY_GRACE_NS >
		    now->wall_ns) {
		/* A claimer's file, created and not yet written: it is about to
		 * be (taking it would make the claim a steal). */
		close(fd);
		return MESH_E_STATE;
	}
	if (rc == 0 && old.attempt + 1 > mine->attempt)
		mine->attempt = old.attempt + 1;
	rc = mesh__fs_lease_write(fd, mine);
	if (!rc && slot == 0) {
		/* As a claim: written first, looked second.  What we took may
		 * be a claimer's file still empty, or one it was about to
		 * remove on seeing a live block. */
		int b = mesh__fs_block_covers(fs, cid, now, seen);
		if (b == 1) {
			unlinkat(fs->dirfd, name, 0);
			rc = MESH_E_STATE;
		} else if (b < 0) {
			rc = b;
		}
	}
	close(fd);
	return rc;
}

static int fs_renew(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token, uint64_t deadline_ns,
		    uint64_t boot_deadline_ns)
{
	struct file_store *fs = mesh__fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp cur;
	int fd, rc = mesh__fs_lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	if (slot == 0 && token) {
		struct blk *bk;
		pthread_mutex_lock(&fs->mu);
		bk = mesh__fs_held_by_block(fs, cid, token);
		if (bk)
			rc = mesh__fs_block_renew(fs, bk, cid, deadline_ns, boot_deadline_ns);
		pthread_mutex_unlock(&fs->mu);
		if (bk)
			return rc;
	}
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
	rc = mesh__fs_lease_write(fd, &cur);
	close(fd);
	return rc;
}

static int fs_release(struct mesh_store *s, uint64_t cid, unsigned slot, uint64_t token)
{
	struct file_store *fs = mesh__fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp cur;
	int fd, rc;
	if (slot == 0) {
		/* There is no chunk lease of ours; nor of another (token 0, a
		 * DONE chunk's sweep): a claimer that saw our live block
		 * removed its own, and one that took the chunk after our block
		 * expired releases its own.  No unlink of a name that is not
		 * there for every chunk (nor its name made). */
		if (mesh__fs_block_release(fs, cid, token))
			return 0;
	}
	if ((rc = mesh__fs_lease_name(fs, cid, slot, name, sizeof name)))
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
	struct file_store *fs = mesh__fs_of(s);
	char name[NAME_MAX + 1];
	int fd, rc = mesh__fs_lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = openat(fs->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT && slot == 0 && !mesh__fs_block_name(fs, cid / MESH_LEASE_BLOCK, name, sizeof name)) {
		uint64_t mask;
		fd = openat(fs->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return -errno;
		rc = mesh__fs_block_read(fd, st, &mask, NULL);
		/* read unlocked: what a file renamed away (reused) says is another block's */
		if (!rc && still_named(fs, name, fd))
			rc = -ENOENT;
		close(fd);
		return rc ? rc : mask >> (cid % MESH_LEASE_BLOCK) & 1 ? 0 : -ENOENT;
	}
	if (fd < 0)
		return -errno;
	rc = read_fd(fd, st);
	close(fd);
	return rc;
}

/* The chunks of a live block lease without a chunk lease of their own
 * (those are counted from their own files). */
static void each_in_block(struct file_store *fs, uint64_t b, const struct mesh_lease_clock *now,
			  void (*fn)(void *arg, uint64_t cid, const struct mesh_lease_stamp *st), void *arg)
{
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp st;
	uint64_t free_bits, mask;
	int fd;
	if (mesh__fs_block_name(fs, b, name, sizeof name))
		return;
	fd = openat(fs->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	if (mesh__fs_block_read(fd, &st, &mask, NULL) || mesh_lease_free(&st, now) || still_named(fs, name, fd)) {
		close(fd);
		return;
	}
	close(fd);
	free_bits = mesh__fs_without_chunk_lease(fs, b, mask);
	for (unsigned i = 0; i < MESH_LEASE_BLOCK; i++)
		if (free_bits >> i & 1)
			fn(arg, b * MESH_LEASE_BLOCK + i, &st);
}

static int fs_each_live(struct mesh_store *s, const struct mesh_lease_clock *now,
			void (*fn)(void *arg, uint64_t cid, const struct mesh_lease_stamp *st), void *arg)
{
	struct file_store *fs = mesh__fs_of(s);
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
		if (*dot == 'b' && !mesh_parse_u64n(dot + 1, (size_t)(n + len - 6 - dot - 1),
						     UINT64_MAX / MESH_LEASE_BLOCK - 1, &cid)) {
			each_in_block(fs, cid, now, fn, arg);
			continue;
		}
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
	struct file_store *fs = mesh__fs_of(s);
	if (!fs)
		return;
	mesh__fs_blocks_close(fs);
	free(fs->blks);
	pthread_mutex_destroy(&fs->mu);
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
	.claim_block = mesh__fs_claim_block,
	.close = fs_close,
};

/* Opens lockdir (creating it 0700 when create is set and it is missing) and
 * checks that it is private to this user; the check is made on the opened
 * directory itself, so nothing can be swapped in between. */
static int open_private_dir(const char *lockdir, int flags)
{
	const char *why;
	if (flags & MESH_STORE_FILE_PRIVATE ? mesh_path_lockdir_private_ok(lockdir, &why)
					     : mesh_path_lockdir_ok(lockdir, &why))
		return MESH_E_PATH;
	return mesh_path_open_private_dir(lockdir, flags & MESH_STORE_FILE_CREATE);
}

int mesh_store_file_open(struct mesh_store **out, const char *lockdir, const char *name, int flags)
{
	struct file_store *fs;
	int dfd;
	if (!mesh_job_name_ok(name))
		return MESH_E_PATH;
	dfd = open_private_dir(lockdir, flags);
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
	pthread_mutex_init(&fs->mu, NULL);
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

int mesh_store_file_remove_dir(const char *lockdir, int flags)
{
	int rc = 0, dfd = open_private_dir(lockdir, flags & MESH_STORE_FILE_PRIVATE);
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
