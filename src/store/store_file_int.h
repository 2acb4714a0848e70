/* The file store's parts shared by store_file.c (chunk leases, reads, the
 * directory) and store_file_block.c (block leases and the released block
 * files kept for reuse).  Internal to store/. */
#ifndef MESH_STORE_STORE_FILE_INT_H
#define MESH_STORE_STORE_FILE_INT_H

#include "store/store.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* A block lease this handle holds: which of its chunks, and its stamp. */
struct blk {
	uint64_t b;
	uint64_t mask;	/* the chunks we hold through it */
	uint64_t fmask; /* the mask its file says (a superset: a chunk DONE stays in it) */
	struct mesh_lease_stamp st;
};

/* A block file this handle released (its free stamp, docs/journal.md
 * "Block leases"): renamed to the next block it claims instead of a file
 * created and one unlinked (ext4's inode allocation was the largest cost
 * of a fast job's lease path).  Ours while the file under the name of
 * block b still has token. */
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

static inline struct file_store *mesh__fs_of(struct mesh_store *s)
{
	return (struct file_store *)s;
}

/* Unknown file length: a write truncates. */
#define LEN_UNKNOWN SIZE_MAX

/* store_file.c */
int mesh__fs_lease_name(struct file_store *fs, uint64_t cid, unsigned slot, char *buf, size_t cap);
int mesh__fs_block_name(struct file_store *fs, uint64_t b, char *buf, size_t cap);
/* Writes a lease line to an open (locked) lease file, truncating it. */
int mesh__fs_lease_write(int fd, const struct mesh_lease_stamp *st);
/* Opens and locks an existing lease file: the fd, -ENOENT when it is gone
 * (also when it was unlinked while we waited for the lock; for block set,
 * also when the name is no longer this file), -errno. */
int mesh__fs_open_locked(struct file_store *fs, const char *name, int block);

/* store_file_block.c */
/* Reads a block file; *len (may be NULL) = its length as read. */
int mesh__fs_block_read(int fd, struct mesh_lease_stamp *st, uint64_t *mask, size_t *len);
/* The chunks of want (in block b) that have no chunk lease file. */
uint64_t mesh__fs_without_chunk_lease(struct file_store *fs, uint64_t b, uint64_t want);
/* Who holds cid through its block, as a claimer of cid judges it: 0 = no
 * block lease with cid in its mask, or one of this handle; 1 = a live one
 * of another (*seen filled); 2 = a free one (or a garbled file); -errno. */
int mesh__fs_block_covers(struct file_store *fs, uint64_t cid, const struct mesh_lease_clock *now,
			  struct mesh_lease_stamp *seen);
/* The block of ours that holds cid under token (token 0: any), or NULL;
 * fs->mu held. */
struct blk *mesh__fs_held_by_block(struct file_store *fs, uint64_t cid, uint64_t token);
/* Renews cid held through our block bk (fs->mu held); store.h, renew. */
int mesh__fs_block_renew(struct file_store *fs, struct blk *bk, uint64_t cid, uint64_t deadline_ns,
			 uint64_t boot_deadline_ns);
/* Lets go of cid when one of our blocks holds it under token (0: any):
 * 1 (the block released with its last chunk), else 0. */
int mesh__fs_block_release(struct file_store *fs, uint64_t cid, uint64_t token);
/* ops->claim_block of the file store. */
int mesh__fs_claim_block(struct mesh_store *s, uint64_t b, uint64_t want, const struct mesh_lease_clock *now,
			 struct mesh_lease_stamp *mine, uint64_t *got);
/* Removes our blocks and released files (those still ours). */
void mesh__fs_blocks_close(struct file_store *fs);

#endif
