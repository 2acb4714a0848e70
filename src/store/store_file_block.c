/* Block leases of the file store and the released block files it keeps
 * for reuse (docs/journal.md, "Block leases"). */
#include "store/store_file_int.h"

#include "base/err.h"
#include "base/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads a block file; *len (may be NULL) = its length as read, for a
 * write under the same lock. */
int mesh__fs_block_read(int fd, struct mesh_lease_stamp *st, uint64_t *mask, size_t *len)
{
	char buf[MESH_LEASE_BLOCK_MAX];
	ssize_t got = mesh_pread_full(fd, buf, sizeof buf, 0);
	if (len)
		*len = got >= 0 && (size_t)got < sizeof buf ? (size_t)got : LEN_UNKNOWN;
	if (got < 0)
		return (int)got;
	return mesh_lease_block_parse(buf, (size_t)got, st, mask);
}

static struct blk *blk_find(struct file_store *fs, uint64_t b)
{
	for (size_t i = 0; i < fs->nblk; i++)
		if (fs->blks[i].b == b)
			return &fs->blks[i];
	return NULL;
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
	int fd, rc = mesh__fs_block_name(fs, b, name, sizeof name);
	if (rc)
		return rc;
	fd = mesh__fs_open_locked(fs, name, 0);
	if (fd == -ENOENT)
		return MESH_E_STATE;
	if (fd >= 0 && (mesh__fs_block_read(fd, &cur, mask, len) || cur.token != token)) {
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
	if (how != DROP_FORGET && mesh__fs_block_name(fs, bk->b, name, sizeof name) == 0) {
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
		if (m == 0 && mesh__fs_block_name(fs, sp.b, old, sizeof old) == 0) {
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
uint64_t mesh__fs_without_chunk_lease(struct file_store *fs, uint64_t b, uint64_t want)
{
	uint64_t got = 0, have;
	if (chunk_leases_listed(fs, b, &have) == 0)
		return want & ~have;
	for (unsigned i = 0; i < MESH_LEASE_BLOCK; i++) {
		char name[NAME_MAX + 1];
		struct stat st;
		if (!(want >> i & 1) || mesh__fs_lease_name(fs, b * MESH_LEASE_BLOCK + i, 0, name, sizeof name))
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
	got = mesh__fs_without_chunk_lease(fs, bk->b, add);
	if (got != add)
		(void)block_write_fd(fd, &bk->st, bk->fmask | got, len); /* failing, a superset stays: harmless */
	bk->fmask |= got;
	bk->mask |= got;
	return got;
}

/* Moves the deadlines of our block bk to the later of its own and these. */
static void blk_later(struct blk *bk, uint64_t deadline_ns, uint64_t boot_deadline_ns)
{
	if (bk->st.deadline_ns < deadline_ns)
		bk->st.deadline_ns = deadline_ns;
	if (bk->st.boot_deadline_ns < boot_deadline_ns)
		bk->st.boot_deadline_ns = boot_deadline_ns;
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
	blk_later(bk, deadline_ns, boot_deadline_ns);
	bk->fmask &= ~clear;
	rc = block_write_fd(fd, &bk->st, bk->fmask, &len);
	close(fd);
	return rc;
}

/* Who holds cid through its block, as a claimer of cid judges it: 0 = no
 * block lease with cid in its mask, or one of this handle; 1 = a live one
 * of another (*seen filled); 2 = a free one (or a garbled file); -errno. */
int mesh__fs_block_covers(struct file_store *fs, uint64_t cid, const struct mesh_lease_clock *now,
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
	if ((rc = mesh__fs_block_name(fs, b, name, sizeof name)))
		return rc;
	fd = mesh__fs_open_locked(fs, name, 1);
	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return fd;
	rc = mesh__fs_block_read(fd, &st, &mask, NULL);
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

/* Renews a chunk held through our block bk (fs->mu held): moves the
 * block's deadlines, or, for an earlier deadline (a hand-back), moves the
 * chunk to a chunk lease of its own (which wins over the block).  Then a
 * chunk lease of another (made while the block had expired) takes the
 * chunk: MESH_E_STATE. */
int mesh__fs_block_renew(struct file_store *fs, struct blk *bk, uint64_t cid, uint64_t deadline_ns,
			 uint64_t boot_deadline_ns)
{
	char cname[NAME_MAX + 1];
	uint64_t bit = 1ull << (cid % MESH_LEASE_BLOCK);
	struct stat st;
	int fd, rc;
	if ((rc = mesh__fs_lease_name(fs, cid, 0, cname, sizeof cname)))
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
			rc = mesh__fs_lease_write(fd, &mine);
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
struct blk *mesh__fs_held_by_block(struct file_store *fs, uint64_t cid, uint64_t token)
{
	struct blk *bk = fs->nblk ? blk_find(fs, cid / MESH_LEASE_BLOCK) : NULL;
	if (bk && (bk->mask >> (cid % MESH_LEASE_BLOCK) & 1) && (!token || token == bk->st.token))
		return bk;
	return NULL;
}

/* Adds the chunks of want it lacks to our block bk (fs->mu held), its
 * deadlines moved to the later of its own and mine's and its start made
 * mine's (the start others judge stragglers by: the newest chunks').
 * *got = the chunks added, *mine = the block's stamp.  0, MESH_E_STATE
 * (nothing added: none lacking, or the block was taken over after it
 * expired, and bk is forgotten), or -errno. */
static int block_add(struct file_store *fs, struct blk *bk, uint64_t want, struct mesh_lease_stamp *mine,
		     uint64_t *got)
{
	uint64_t add = want & ~bk->mask;
	size_t len = LEN_UNKNOWN;
	int rc, fd = add ? block_open_ours(fs, bk, &len) : MESH_E_STATE;
	if (fd == MESH_E_STATE && add)
		blk_drop(fs, bk, DROP_FORGET);
	if (fd < 0)
		return fd;
	blk_later(bk, mine->deadline_ns, mine->boot_deadline_ns);
	bk->st.started_ns = mine->started_ns;
	*got = block_commit(fs, bk, fd, &len, add, &rc);
	close(fd);
	*mine = bk->st;
	if (!rc && !*got)
		rc = MESH_E_STATE;
	return rc;
}

/* Creates the file name of a block, locked and empty (fs->mu held): the
 * fd (*len = 0), -EEXIST (the block has a file), MESH_E_STATE (a stealer
 * took the empty file before our lock) or -errno. */
static int block_create(struct file_store *fs, const char *name, size_t *len)
{
	struct stat st;
	int rc, fd = openat(fs->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	rc = mesh_flock_ex(fd);
	if (!rc && fstat(fd, &st) < 0)
		rc = -errno;
	if (!rc && (st.st_size != 0 || st.st_nlink == 0))
		rc = MESH_E_STATE; /* a stealer took the empty file */
	*len = 0;
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

/* Takes over the existing file name of a block when it is free (fs->mu
 * held; a file that does not parse is free): the fd, locked (*len: its
 * length), MESH_E_STATE (live, or gone meanwhile) or -errno.  *taken = 1
 * when it held chunks, and then mine->attempt is past the old stamp's. */
static int block_take_over(struct file_store *fs, const char *name, const struct mesh_lease_clock *now,
			   struct mesh_lease_stamp *mine, size_t *len, int *taken)
{
	struct mesh_lease_stamp old;
	uint64_t m;
	int fd = mesh__fs_open_locked(fs, name, 1);
	if (fd < 0)
		return fd == -ENOENT ? MESH_E_STATE : fd;
	*taken = 1;
	if (mesh__fs_block_read(fd, &old, &m, len) == 0) {
		if (!mesh_lease_free(&old, now)) {
			close(fd);
			return MESH_E_STATE;
		}
		if (m == 0)
			*taken = 0; /* released (or every chunk let go): nothing stolen */
		else if (old.attempt + 1 > mine->attempt)
			mine->attempt = old.attempt + 1;
	}
	return fd;
}

/* A new block lease of ours on block b, file name (fs->mu held): as
 * mesh__fs_claim_block answers. */
static int block_new(struct file_store *fs, uint64_t b, const char *name, uint64_t want,
		     const struct mesh_lease_clock *now, struct mesh_lease_stamp *mine, uint64_t *got)
{
	struct blk *bk;
	size_t len = LEN_UNKNOWN;
	int fd, rc, taken = 0;
	if (fs->nblk == fs->cblk) {
		size_t c = fs->cblk ? 2 * fs->cblk : 8;
		struct blk *p = realloc(fs->blks, c * sizeof *p);
		if (!p)
			return -ENOMEM;
		fs->blks = p;
		fs->cblk = c;
	}
	/* A released file of ours renamed to b's name (locked, free), else a
	 * new one; when b has a file, it is taken over only when it is free. */
	fd = spare_take(fs, b, name, &len);
	if (fd == -ENOENT)
		fd = block_create(fs, name, &len);
	if (fd == -EEXIST)
		fd = block_take_over(fs, name, now, mine, &len, &taken);
	if (fd < 0)
		return fd;
	bk = &fs->blks[fs->nblk++];
	memset(bk, 0, sizeof *bk);
	bk->b = b;
	bk->st = *mine;
	*got = block_commit(fs, bk, fd, &len, want, &rc);
	close(fd);
	if (!*got) {
		blk_drop(fs, bk, DROP_RELEASE);
		if (!rc)
			rc = MESH_E_STATE;
	}
	return rc ? rc : taken;
}

int mesh__fs_claim_block(struct mesh_store *s, uint64_t b, uint64_t want, const struct mesh_lease_clock *now,
			 struct mesh_lease_stamp *mine, uint64_t *got)
{
	struct file_store *fs = mesh__fs_of(s);
	char name[NAME_MAX + 1];
	struct blk *bk;
	int rc = mesh__fs_block_name(fs, b, name, sizeof name);
	*got = 0;
	if (rc)
		return rc;
	if (b > UINT64_MAX / MESH_LEASE_BLOCK - 1 || !want)
		return MESH_E_RANGE;
	pthread_mutex_lock(&fs->mu);
	bk = blk_find(fs, b);
	if (bk)
		rc = block_add(fs, bk, want, mine, got); /* ours already */
	else
		rc = block_new(fs, b, name, want, now, mine, got);
	pthread_mutex_unlock(&fs->mu);
	return rc;
}

int mesh__fs_block_release(struct file_store *fs, uint64_t cid, uint64_t token)
{
	struct blk *bk;
	pthread_mutex_lock(&fs->mu);
	bk = mesh__fs_held_by_block(fs, cid, token);
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
	return bk != NULL;
}

void mesh__fs_blocks_close(struct file_store *fs)
{
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
			if (m == 0 && mesh__fs_block_name(fs, sp->b, name, sizeof name) == 0)
				unlinkat(fs->dirfd, name, 0);
			close(fd);
		}
		spare_forget(fs, fs->nspare - 1);
	}
	pthread_mutex_unlock(&fs->mu);
}
