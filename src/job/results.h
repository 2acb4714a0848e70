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
 * Durability rule (the caller's protocol, meshd/jobs/jobs.c with the chunk
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

/* What mesh_results_check found (`mesh job check` of a meshd job). */
#define MESH_RESULTS_REPORT_MISSING 16
struct mesh_results_report {
	uint64_t n, done;  /* the job's chunks; those DONE in its journal */
	uint64_t in_file;  /* DONE chunks whose result is in the results file */
	uint64_t in_done;  /* ... only in their DONE record (a small result; meshd puts it
			    * back in the file at its next open of the job) */
	uint64_t missing;  /* DONE chunks with neither: their result is lost */
	uint64_t first_missing[MESH_RESULTS_REPORT_MISSING]; /* the first of them, by chunk id */
	uint64_t size;	   /* the file's size */
	uint64_t tail;	   /* bytes after its last whole record (torn or damaged) */
};
/* Checks the results file at path against the job's journal (read-only:
 * neither file is changed; a torn tail is reported, not cut): every chunk
 * the journal holds DONE must have its result, in the file or carried by
 * its DONE record.  0 when so; MESH_E_CORRUPT when a DONE chunk has none
 * or the file has bytes past its whole records (rep says which); the
 * journal's open errors (mesh_job_open, read-only: a torn journal is
 * MESH_E_CORRUPT too, so check the journal first); MESH_E_FOREIGN,
 * MESH_E_VERSION, -errno of the results file. */
int mesh_results_check(const char *path, const char *journal, struct mesh_results_report *rep);

#endif
