/* I/O helpers that every durable write goes through, and the seam where tests
 * inject failures.
 *
 * Fault injection: mesh_fault_arm(op, err, after) makes the (after+1)-th call
 * of that op fail with -err, and every later one too when sticky is set.  The
 * environment variable MESH_FAULT="op:ERRNAME:after[:sticky]" (op is write or
 * fsync; ERRNAME is ENOSPC, EIO, EDQUOT or EFBIG) arms the same from outside,
 * read once at the first I/O call; so a test can make a real `mesh` process
 * meet a full disk. */
#ifndef MESH_BASE_IO_H
#define MESH_BASE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum mesh_fault_op { MESH_FAULT_WRITE, MESH_FAULT_FSYNC, MESH_FAULT__N };

void mesh_fault_arm(enum mesh_fault_op op, int err, uint64_t after, int sticky);
void mesh_fault_disarm(void);
/* A pause at a named point of a race a test must win or lose on purpose:
 * MESH_FAULT_PAUSE="point:ms[,point:ms...]" (read once) makes each call
 * with that point sleep ms; without it, a call is one load. */
void mesh_fault_pause(const char *point);

/* An eventfd as a wake-up (a bell): mesh_efd_ring adds 1 to its count, so a
 * poller of it wakes: 0, or -errno (-EAGAIN, the count at its limit, is 0:
 * the poller wakes anyway).  mesh_efd_quiet reads a non-blocking one's count
 * back to 0 after its poller woke (none there: nothing done). */
int mesh_efd_ring(int fd);
void mesh_efd_quiet(int fd);

/* Writes all n bytes (retrying short writes and EINTR).  0 or -errno. */
int mesh_write_all(int fd, const void *buf, size_t n);
/* The same without the fault-injection seam: for output that is not state
 * (a terminal, captured chunk output), so injected faults hit only durable
 * writes. */
int mesh_write_all_raw(int fd, const void *buf, size_t n);
/* pwrite of all n bytes at off.  0 or -errno. */
int mesh_pwrite_all(int fd, const void *buf, size_t n, off_t off);
/* fdatasync (data and the size needed to read it back).  0 or -errno. */
int mesh_fdatasync(int fd);
/* fsync.  0 or -errno. */
int mesh_fsync(int fd);
/* Syncs n descriptors together: fdatasync where data[i] is set, else
 * fsync; all but the first on threads of their own, so that the disk and
 * the filesystem see them at once (one journal commit can serve them all,
 * where a series waits for one each).  In the caller where a thread cannot
 * be had.  At most MESH_SYNC_MANY_MAX (else -EINVAL).  0 or the first
 * -errno in the order given. */
#define MESH_SYNC_MANY_MAX 8
int mesh_sync_many(const int *fds, const unsigned char *data, size_t n);
/* fsync of the directory that holds path (after a create or rename). */
int mesh_fsync_dir_of(const char *path);
/* Reads up to n bytes at off, retrying EINTR and short reads; returns the
 * count read (less than n only at end of file) or -errno. */
ssize_t mesh_pread_full(int fd, void *buf, size_t n, off_t off);
/* Replaces path with the n bytes at buf: write a temp file, fsync, rename,
 * fsync the directory.  0 or -errno; on failure path is untouched. */
int mesh_write_file_atomic(const char *path, const void *buf, size_t n, mode_t mode);
/* Reads a whole file of at most max bytes into a malloc'd buffer (NUL
 * appended, not counted).  0, -errno, or MESH_E_TOOBIG. Caller frees *out. */
int mesh_read_file(const char *path, size_t max, char **out, size_t *len);
/* flock(LOCK_EX), waiting, retrying EINTR.  0 or -errno. */
int mesh_flock_ex(int fd);

#endif
