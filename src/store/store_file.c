#include "store/store.h"

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


/* A block lease this handle holds: which of its chunks, and its stamp. */
struct blk {
	uint64_t b;
	uint64_t mask;	/* the chunks we hold through it */
	uint64_t fmask; /* the mask its file says (a superset: a chunk DONE stays in it) */
	struct mesh_lease_stamp st;
};

/* A block file this handle released (its free stamp, docs/journal.md
 * "Block leases"): renamed to the next block it claims instead of a file
 * created and one unlinked (inode allocation was a quarter of a fast job's
 * CPU on ext4).  Ours while the file under block_name(b) still has token. */
struct spare {
	uint64_t b, token;
};

/* Released block files kept for reuse; more are unlinked. */
#define MAX_SPARE 64

struct file_store {
	struct mesh_store base;
	char *dir;
	char *name;
	int dirfd;
	pthread_mutex_t mu; /* guards blks and spares (release runs outside the job's lock) */
	struct blk *blks;
	size_t nblk, cblk;
	struct spare spares[MAX_SPARE];
	size_t nspare;
	int no_rename; /* the file system refused RENAME_NOREPLACE: unlink released blocks */
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

static int block_name(struct file_store *fs, uint64_t b, char *buf, size_t cap)
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
static int open_locked_as(struct file_store *fs, const char *name, int block)
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
	return open_locked_as(fs, name, 0);
}

static struct blk *blk_find(struct file_store *fs, uint64_t b)
{
	for (size_t i = 0; i < fs->nblk; i++)
		if (fs->blks[i].b == b)
			return &fs->blks[i];
	return NULL;
}

/* Unknown file length: a write truncates. */
#define LEN_UNKNOWN SIZE_MAX

/* Reads a block file; *len (may be NULL) = its length as read, for a
 * write under the same lock. */
static int block_read_fd(int fd, struct mesh_lease_stamp *st, uint64_t *mask, size_t *len)
{
	char buf[MESH_LEASE_BLOCK_MAX];
	ssize_t got = mesh_pread_full(fd, buf, sizeof buf, 0);
	if (len)
		*len = got >= 0 && (size_t)got < sizeof buf ? (size_t)got : LEN_UNKNOWN;
	if (got < 0)
		return (int)got;
	return mesh_lease_block_parse(buf, (size_t)got, st, mask);
}

/* Writes a block file whose length under our lock is *len (LEN_UNKNOWN:
 * not known); truncates only when the new text is shorter (most rewrites
 * are the same length or longer: one syscall less). */
static int block_write_fd(int fd, const struct mesh_lease_stamp *st, uint64_t mask, size_t *len)
{
	char buf[MESH_LEASE_BLOCK_MAX];
	size_t n = mesh_lease_block_format(buf, sizeof buf, st, mask);
	int rc;
	if (!n)
		return MESH_E_TOOBIG;
	rc = mesh_pwrite_all(fd, buf, n, 0);
	if (!rc && n < *len && ftruncate(fd, (off_t)n) < 0)
		rc = -errno;
	*len = rc ? LEN_UNKNOWN : n;
	return rc;
}

/* Opens the file of block b, locked, and checks it still holds token:
 * the fd (*mask = its mask), MESH_E_STATE (taken over after it expired,
 * gone, or renamed away), or -errno.  Only the holder of a token renames
 * its file, under its lock: with the token read under the lock, the name
 * is still this file's. */
static int block_open_token(struct file_store *fs, uint64_t b, uint64_t token, uint64_t *mask, size_t *len)
{
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp cur;
	int fd, rc = block_name(fs, b, name, sizeof name);
	if (rc)
		return rc;
	fd = open_locked(fs, name);
	if (fd == -ENOENT)
		return MESH_E_STATE;
	if (fd >= 0 && (block_read_fd(fd, &cur, mask, len) || cur.token != token)) {
		close(fd);
		return MESH_E_STATE;
	}
	return fd;
}

static int block_open_ours(struct file_store *fs, const struct blk *bk, size_t *len)
{
	uint64_t m;
	return block_open_token(fs, bk->b, bk->st.token, &m, len);
}

enum { DROP_FORGET, DROP_RELEASE, DROP_UNLINK };

/* Forgets our block bk (fs->mu held).  DROP_RELEASE: when its file is
 * still ours, rewrites it to the free stamp (mask 0, deadlines 0: free by
 * every clock, so taken at once by the next claimer, new or old version)
 * and keeps it as a spare for our next block; DROP_UNLINK, or when the
 * spares are full: removes the file. */
static void blk_drop(struct file_store *fs, struct blk *bk, int how)
{
	char name[NAME_MAX + 1];
	if (how != DROP_FORGET && block_name(fs, bk->b, name, sizeof name) == 0) {
		size_t len;
		int fd = block_open_ours(fs, bk, &len);
		if (fd >= 0) {
			struct mesh_lease_stamp freed = bk->st;
			freed.deadline_ns = 0;
			freed.boot_deadline_ns = 0;
			if (how == DROP_RELEASE && !fs->no_rename && fs->nspare < MAX_SPARE &&
			    block_write_fd(fd, &freed, 0, &len) == 0)
				fs->spares[fs->nspare++] = (struct spare){bk->b, bk->st.token};
			else
				unlinkat(fs->dirfd, name, 0);
			close(fd);
		}
	}
	*bk = fs->blks[--fs->nblk];
}

static void spare_forget(struct file_store *fs, size_t i)
{
	fs->spares[i] = fs->spares[--fs->nspare];
}

/* A spare of ours as the file of block b (fs->mu held): locked, still
 * ours and still free, and renamed to b's name when it is another block's
 * (RENAME_NOREPLACE: a file already there is b's lease, and wins).  The
 * fd, locked, its file holding the free stamp; -ENOENT: no spare (create
 * one); -EEXIST: b has a file (take it over by the rules); -errno.
 * *len: the file's length. */
static int spare_take(struct file_store *fs, uint64_t b, const char *name, size_t *len)
{
	while (fs->nspare) {
		char old[NAME_MAX + 1];
		uint64_t m;
		size_t i = fs->nspare - 1;
		for (size_t k = 0; k < fs->nspare; k++)
			if (fs->spares[k].b == b)
				i = k; /* ours already under b's name: no rename */
		struct spare sp = fs->spares[i];
		int fd = block_open_token(fs, sp.b, sp.token, &m, len);
		spare_forget(fs, i);
		if (fd < 0)
			continue; /* taken over meanwhile: not ours any more */
		if (m == 0 && sp.b == b)
			return fd;
		if (m == 0 && block_name(fs, sp.b, old, sizeof old) == 0) {
			if (renameat2(fs->dirfd, old, fs->dirfd, name, RENAME_NOREPLACE) == 0)
				return fd;
			if (errno == EEXIST) {
				fs->spares[fs->nspare++] = sp; /* still free, still ours */
				close(fd);
				return -EEXIST;
			}
			/* RENAME_NOREPLACE not supported here: unlink, as before spares */
			fs->no_rename = 1;
			unlinkat(fs->dirfd, old, 0);
		}
		close(fd);
	}
	return -ENOENT;
}

/* A directory this small is read whole rather than asked name by name. */
#define SMALL_DIR_BYTES 16384

/* The chunks of block b that have a chunk lease file, from one pass over
 * the directory when it is small (a lookup of a name that is not there goes
 * to the disk's index each time: 64 of them a block were a good part of a
 * fast job's CPU).  0 with *have; -1: ask name by name.  Written first,
 * looked second holds: a file created before the pass began is in it. */
static int chunk_leases_listed(struct file_store *fs, uint64_t b, uint64_t *have)
{
	struct stat st;
	size_t nl = strlen(fs->name);
	if (fstat(fs->dirfd, &st) < 0 || st.st_size > SMALL_DIR_BYTES)
		return -1;
	int dfd = openat(fs->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return -1;
	}
	*have = 0;
	for (;;) {
		errno = 0;
		struct dirent *e = readdir(d);
		if (!e)
			break;
		/* <name>.<cid>.lease (lease_name, slot 0) */
		const char *p = e->d_name + nl + 1;
		char *end;
		if (strncmp(e->d_name, fs->name, nl) || e->d_name[nl] != '.' || *p < '0' || *p > '9')
			continue;
		uint64_t cid = strtoull(p, &end, 10);
		if (!strcmp(end, ".lease") && cid / MESH_LEASE_BLOCK == b)
			*have |= 1ull << (cid % MESH_LEASE_BLOCK);
	}
	int err = errno;
	closedir(d);
	return err ? -1 : 0;
}

/* The chunks of want (in block b) that have no chunk lease file. */
static uint64_t without_chunk_lease(struct file_store *fs, uint64_t b, uint64_t want)
{
	uint64_t got = 0, have;
	if (chunk_leases_listed(fs, b, &have) == 0)
		return want & ~have;
	for (unsigned i = 0; i < MESH_LEASE_BLOCK; i++) {
		char name[NAME_MAX + 1];
		struct stat st;
		if (!(want >> i & 1) || lease_name(fs, b * MESH_LEASE_BLOCK + i, 0, name, sizeof name))
			continue;
		if (fstatat(fs->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
			got |= 1ull << i;
	}
	return got;
}

/* Writes our block's stamp with add in its mask to its locked file fd,
 * then -- written first, looked second (store.h) -- leaves out of add the
 * chunks that have a chunk lease (rewriting the mask without them).
 * Returns the chunks of add we now hold; *rc = 0 or the write's error. */
static uint64_t block_commit(struct file_store *fs, struct blk *bk, int fd, size_t *len, uint64_t add, int *rc)
{
	uint64_t got;
	*rc = block_write_fd(fd, &bk->st, bk->fmask | add, len);
	if (*rc)
		return 0;
	got = without_chunk_lease(fs, bk->b, add);
	if (got != add)
		(void)block_write_fd(fd, &bk->st, bk->fmask | got, len); /* failing, a superset stays: harmless */
	bk->fmask |= got;
	bk->mask |= got;
	return got;
}

/* Moves the deadlines of our block bk to the later of its own and these,
 * and takes clear out of its file's mask (fs->mu held).  MESH_E_STATE when
 * the block was taken over after it expired (then bk is forgotten). */
static int block_restamp(struct file_store *fs, struct blk *bk, uint64_t deadline_ns, uint64_t boot_deadline_ns,
			 uint64_t clear)
{
	size_t len;
	int rc, fd = block_open_ours(fs, bk, &len);
	if (fd == MESH_E_STATE) {
		blk_drop(fs, bk, DROP_FORGET);
		return fd;
	}
	if (fd < 0)
		return fd;
	if (bk->st.deadline_ns < deadline_ns)
		bk->st.deadline_ns = deadline_ns;
	if (bk->st.boot_deadline_ns < boot_deadline_ns)
		bk->st.boot_deadline_ns = boot_deadline_ns;
	bk->fmask &= ~clear;
	rc = block_write_fd(fd, &bk->st, bk->fmask, &len);
	close(fd);
	return rc;
}

/* Who holds cid through its block, as a claimer of cid judges it: 0 = no
 * block lease with cid in its mask, or one of this handle; 1 = a live one
 * of another (*seen filled); 2 = a free one (or a garbled file); -errno. */
static int block_covers(struct file_store *fs, uint64_t cid, const struct mesh_lease_clock *now,
			struct mesh_lease_stamp *seen)
{
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp st;
	uint64_t b = cid / MESH_LEASE_BLOCK, mask;
	int fd, rc, ours;
	pthread_mutex_lock(&fs->mu);
	ours = blk_find(fs, b) != NULL;
	pthread_mutex_unlock(&fs->mu);
	if (ours)
		return 0;
	if ((rc = block_name(fs, b, name, sizeof name)))
		return rc;
	fd = open_locked_as(fs, name, 1);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	rc = block_read_fd(fd, &st, &mask, NULL);
	close(fd);
	if (rc)
		return 2;
	if (!(mask >> (cid % MESH_LEASE_BLOCK) & 1))
		return 0;
	if (!mesh_lease_free(&st, now)) {
		if (seen)
			*seen = st;
		return 1;
	}
	return 2;
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
	rc = mesh_flock_ex(fd);
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (!rc && (st.st_size != 0 || st.st_nlink == 0)) {
		/* A stealer took the empty file between our create and lock. */
		close(fd);
		return MESH_E_STATE;
	}
	if (!rc)
		rc = write_fd(fd, mine);
	if (!rc && slot == 0) {
		/* Written first, looked second (store.h): a live block of
		 * another that covers cid wins. */
		struct mesh_lease_clock now;
		mesh_lease_clock_now(&now, &mine->holder);
		rc = block_covers(fs, cid, &now, NULL);
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
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp old;
	int fd, rc = lease_name(fs, cid, slot, name, sizeof name);
	if (rc)
		return rc;
	fd = open_locked(fs, name);
	if (fd == -ENOENT && slot == 0)
		return block_covers(fs, cid, now, seen) == 1 ? MESH_E_STATE : -ENOENT;
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
	rc = write_fd(fd, mine);
	if (!rc && slot == 0) {
		/* As a claim: written first, looked second.  What we took may
		 * be a claimer's file still empty, or one it was about to
		 * remove on seeing a live block. */
		int b = block_covers(fs, cid, now, seen);
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

/* Renews a chunk held through our block bk (fs->mu held): moves the
 * block's deadlines, or, for an earlier deadline (a hand-back), moves the
 * chunk to a chunk lease of its own (which wins over the block).  Then a
 * chunk lease of another (made while the block had expired) takes the
 * chunk: MESH_E_STATE. */
static int block_renew(struct file_store *fs, struct blk *bk, uint64_t cid, uint64_t deadline_ns,
		       uint64_t boot_deadline_ns)
{
	char cname[NAME_MAX + 1];
	uint64_t bit = 1ull << (cid % MESH_LEASE_BLOCK);
	struct stat st;
	int fd, rc;
	if ((rc = lease_name(fs, cid, 0, cname, sizeof cname)))
		return rc;
	if (boot_deadline_ns < bk->st.boot_deadline_ns || deadline_ns < bk->st.deadline_ns) {
		/* Out of the block's mask first (a live block's mask wins over
		 * a chunk lease), then a chunk lease of its own; another node
		 * that claims it in between simply has it. */
		struct mesh_lease_stamp mine = bk->st;
		mine.deadline_ns = deadline_ns;
		mine.boot_deadline_ns = boot_deadline_ns;
		bk->mask &= ~bit;
		if (!bk->mask)
			blk_drop(fs, bk, DROP_RELEASE);
		else if ((rc = block_restamp(fs, bk, 0, 0, bit)))
			return rc;
		fd = openat(fs->dirfd, cname, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
		rc = fd < 0 ? (errno == EEXIST ? MESH_E_STATE : -errno) : mesh_flock_ex(fd);
		if (!rc)
			rc = write_fd(fd, &mine);
		if (fd >= 0)
			close(fd);
		return rc;
	}
	if ((rc = block_restamp(fs, bk, deadline_ns, boot_deadline_ns, 0)))
		return rc;
	if (fstatat(fs->dirfd, cname, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		bk->mask &= ~bit;
		if (!bk->mask)
			blk_drop(fs, bk, DROP_RELEASE);
		return MESH_E_STATE;
	}
	return 0;
}

/* The block of ours that holds cid under token (token 0: any), or NULL;
 * fs->mu held. */
static struct blk *held_by_block(struct file_store *fs, uint64_t cid, uint64_t token)
{
	struct blk *bk = fs->nblk ? blk_find(fs, cid / MESH_LEASE_BLOCK) : NULL;
	if (bk && (bk->mask >> (cid % MESH_LEASE_BLOCK) & 1) && (!token || token == bk->st.token))
		return bk;
	return NULL;
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
	if (slot == 0 && token) {
		struct blk *bk;
		pthread_mutex_lock(&fs->mu);
		bk = held_by_block(fs, cid, token);
		if (bk)
			rc = block_renew(fs, bk, cid, deadline_ns, boot_deadline_ns);
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
	if (slot == 0) {
		struct blk *bk;
		pthread_mutex_lock(&fs->mu);
		bk = held_by_block(fs, cid, token);
		if (bk) {
			uint64_t bit = 1ull << (cid % MESH_LEASE_BLOCK);
			bk->mask &= ~bit;
			if (!bk->mask)
				blk_drop(fs, bk, DROP_RELEASE);
			else if (token)
				/* let go of (a failure): out of the file's mask, so
				 * that others may take it; a DONE chunk may stay */
				(void)block_restamp(fs, bk, 0, 0, bit);
		}
		pthread_mutex_unlock(&fs->mu);
		/* There is no chunk lease of ours; nor of another (token 0, a
		 * DONE chunk's sweep): a claimer that saw our live block
		 * removed its own, and one that took the chunk after our block
		 * expired releases its own.  No unlink of a name that is not
		 * there for every chunk. */
		if (bk)
			return 0;
	}
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
	if (fd < 0 && errno == ENOENT && slot == 0 && !block_name(fs, cid / MESH_LEASE_BLOCK, name, sizeof name)) {
		uint64_t mask;
		fd = openat(fs->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			return -errno;
		rc = block_read_fd(fd, st, &mask, NULL);
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
	if (block_name(fs, b, name, sizeof name))
		return;
	fd = openat(fs->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	if (block_read_fd(fd, &st, &mask, NULL) || mesh_lease_free(&st, now) || still_named(fs, name, fd)) {
		close(fd);
		return;
	}
	close(fd);
	free_bits = without_chunk_lease(fs, b, mask);
	for (unsigned i = 0; i < MESH_LEASE_BLOCK; i++)
		if (free_bits >> i & 1)
			fn(arg, b * MESH_LEASE_BLOCK + i, &st);
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

static int fs_claim_block(struct mesh_store *s, uint64_t b, uint64_t want, const struct mesh_lease_clock *now,
			  struct mesh_lease_stamp *mine, uint64_t *got)
{
	struct file_store *fs = fs_of(s);
	char name[NAME_MAX + 1];
	struct mesh_lease_stamp old;
	struct blk *bk;
	struct stat st;
	uint64_t m;
	size_t len = LEN_UNKNOWN;
	int fd, rc = block_name(fs, b, name, sizeof name), taken = 0;
	*got = 0;
	if (rc)
		return rc;
	if (b > UINT64_MAX / MESH_LEASE_BLOCK - 1 || !want)
		return MESH_E_RANGE;
	pthread_mutex_lock(&fs->mu);
	bk = blk_find(fs, b);
	if (bk) {
		/* Ours already: the chunks it adds, under later deadlines. */
		uint64_t add = want & ~bk->mask;
		fd = add ? block_open_ours(fs, bk, &len) : MESH_E_STATE;
		if (fd == MESH_E_STATE && add)
			blk_drop(fs, bk, DROP_FORGET);
		if (fd >= 0) {
			if (bk->st.deadline_ns < mine->deadline_ns)
				bk->st.deadline_ns = mine->deadline_ns;
			if (bk->st.boot_deadline_ns < mine->boot_deadline_ns)
				bk->st.boot_deadline_ns = mine->boot_deadline_ns;
			/* the start others judge stragglers by: the newest chunks' */
			bk->st.started_ns = mine->started_ns;
			*got = block_commit(fs, bk, fd, &len, add, &rc);
			close(fd);
			*mine = bk->st;
			if (!rc && !*got)
				rc = MESH_E_STATE;
		} else {
			rc = fd;
		}
		pthread_mutex_unlock(&fs->mu);
		return rc;
	}
	if (fs->nblk == fs->cblk) {
		size_t c = fs->cblk ? 2 * fs->cblk : 8;
		struct blk *p = realloc(fs->blks, c * sizeof *p);
		if (!p) {
			pthread_mutex_unlock(&fs->mu);
			return -ENOMEM;
		}
		fs->blks = p;
		fs->cblk = c;
	}
	/* A released file of ours renamed to b's name (locked, free), else a
	 * new one; when b has a file, it is taken over only when it is free. */
	fd = spare_take(fs, b, name, &len);
	if (fd == -ENOENT) {
		fd = openat(fs->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd >= 0) {
			rc = mesh_flock_ex(fd);
			if (!rc && fstat(fd, &st) < 0)
				rc = -errno;
			if (!rc && (st.st_size != 0 || st.st_nlink == 0))
				rc = MESH_E_STATE; /* a stealer took the empty file */
			len = 0;
		} else {
			fd = -errno;
		}
	}
	if (fd == -EEXIST) {
		fd = open_locked_as(fs, name, 1);
		rc = fd < 0 ? (fd == -ENOENT ? MESH_E_STATE : fd) : 0;
		taken = 1;
		if (!rc && block_read_fd(fd, &old, &m, &len) == 0) {
			if (!mesh_lease_free(&old, now))
				rc = MESH_E_STATE;
			else if (m == 0)
				taken = 0; /* released (or every chunk let go): nothing stolen */
			else if (old.attempt + 1 > mine->attempt)
				mine->attempt = old.attempt + 1;
		}
	} else if (fd < 0 && !rc) {
		rc = fd;
	}
	if (!rc) {
		bk = &fs->blks[fs->nblk++];
		memset(bk, 0, sizeof *bk);
		bk->b = b;
		bk->st = *mine;
		*got = block_commit(fs, bk, fd, &len, want, &rc);
	}
	if (fd >= 0)
		close(fd);
	if (bk && !*got) {
		blk_drop(fs, bk, DROP_RELEASE);
		if (!rc)
			rc = MESH_E_STATE;
	}
	pthread_mutex_unlock(&fs->mu);
	return rc ? rc : taken;
}

static void fs_close(struct mesh_store *s)
{
	struct file_store *fs = fs_of(s);
	if (!fs)
		return;
	pthread_mutex_lock(&fs->mu);
	while (fs->nblk)
		blk_drop(fs, &fs->blks[0], DROP_UNLINK);
	/* our released files: removed when still ours (a taker's are its own) */
	while (fs->nspare) {
		char name[NAME_MAX + 1];
		struct spare *sp = &fs->spares[fs->nspare - 1];
		uint64_t m;
		int fd = block_open_token(fs, sp->b, sp->token, &m, NULL);
		if (fd >= 0) {
			if (m == 0 && block_name(fs, sp->b, name, sizeof name) == 0)
				unlinkat(fs->dirfd, name, 0);
			close(fd);
		}
		spare_forget(fs, fs->nspare - 1);
	}
	pthread_mutex_unlock(&fs->mu);
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
	.claim_block = fs_claim_block,
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
