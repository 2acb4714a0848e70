/* A job's results file: what each chunk's attempt answered, kept so that a
 * chunk is never DONE without its result.  meshd's jobs use it
 * (docs/jobs.md); it knows nothing of processes or slots.
 *
 * Format (little-endian; docs/jobs.md has the table):
 *   header  16 bytes: "MESHRES" 0x01, then u32 version (1), u32 zero
 *   record  u32 magic 0x52534552 ("RESR"), u32 kind, u64 cid, u32 len,
 *           u32 crc (CRC-32C over kind, cid, len and the payload), then len
 *           payload bytes; no padding.
 * kind RESULT: the payload is the chunk's result (a worker's REP).  kind
 * FAILURE: a failed attempt's report (its status line and the output tail
 * of a crashed worker).  Records are only appended.
 *
 * Durability rule (the caller's protocol, daemon/jobs.c with the chunk
 * driver's hooks, exec/runner.h):
 *   1. mesh_results_append(RESULT) when an attempt succeeded (buffered in
 *      memory: one write(2) for many records, no fsync);
 *   2. mesh_results_sync() (fdatasync) for a batch of results, BEFORE the
 *      batch's DONE records are appended to the journal;
 *   3. then mesh_job_complete_many.
 * So a DONE chunk's result is on disk.  A crash between 1 and 3 leaves
 * results of chunks that are not DONE: harmless, the chunk runs again and
 * appends another record; the first whole record of a chunk is its result.
 *
 * Open scans the file once (O(size)), keeps an index in memory (the offset
 * of each chunk's first RESULT and last FAILURE), and cuts a torn or
 * damaged tail: everything from the first record that does not check.
 *
 * Threads: every call may come from any thread (one mutex; reads pread
 * outside it). */
#ifndef MESH_JOB_RESULTS_H
#define MESH_JOB_RESULTS_H

#include <stddef.h>
#include <stdint.h>

enum { MESH_RESULT_OK = 1, MESH_RESULT_FAILURE = 2 };

/* The largest payload of one record. */
#define MESH_RESULTS_MAX_LEN (1u << 30)

struct mesh_results;

/* Opens (creating, mode 0600) the results file of a job of nchunks chunks.
 * Records of a cid >= nchunks count as damage.  0 with *out set; -errno;
 * MESH_E_FOREIGN (not a results file); MESH_E_VERSION; -ENOMEM.  *cut (may
 * be NULL) gets the bytes of torn tail dropped. */
int mesh_results_open(struct mesh_results **out, const char *path, uint64_t nchunks, uint64_t *cut);
/* Creates path (it must not exist) holding the header alone, not synced:
 * for a caller that makes it durable with other files (fdatasync of *fd,
 * the caller's to close, then one fsync of their directory); an open of
 * it then writes and syncs nothing.  0 or -errno. */
int mesh_results_create(const char *path, int *fd);
void mesh_results_close(struct mesh_results *r);

/* Appends one record (not synced; buffered: written at the next sync, or
 * at once when the buffer is full).  0; MESH_E_RANGE (cid); MESH_E_TOOBIG;
 * -ENOMEM; -errno of a write (nothing of the record stays in the file). */
int mesh_results_append(struct mesh_results *r, uint64_t cid, int kind, const void *p, size_t n);
/* Writes the buffered records, then fdatasync, when anything was appended
 * since the last sync.  0 or -errno
 * (then the appends since are not known durable: the caller must not
 * complete their chunks). */
int mesh_results_sync(struct mesh_results *r);

/* The payload of cid's first RESULT (or last FAILURE), malloc'd and
 * NUL-appended (caller frees).  0; -ENOENT (none); MESH_E_RANGE; MESH_E_CORRUPT
 * (the bytes changed under us: the crc no longer checks); -errno. */
int mesh_results_get(struct mesh_results *r, uint64_t cid, int kind, void **data, size_t *len);
/* 1 when cid has a RESULT record, else 0. */
int mesh_results_has(struct mesh_results *r, uint64_t cid);
/* The file's size now (its whole records). */
uint64_t mesh_results_size(struct mesh_results *r);

#endif
