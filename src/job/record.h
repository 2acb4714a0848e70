/* The job's records in its journal: their types and payload codecs (the
 * table is docs/journal.md's).  journal/ frames, checksums and syncs
 * records and knows none of these; the file store (job_file*.c) writes and
 * reads them only through this file.  All integers little-endian.
 *
 *   SUBMIT u64 n                                   always the first record
 *   NODE   u32 node hash, name bytes (1..255)
 *   DONE   u64 cid, u32 node hash, u32 duration us   flag 1: a speculative copy;
 *          flag 2: the chunk's result follows (at most MESH_REC_RESULT_MAX bytes)
 *   FAIL   u64 cid, u32 node hash, i32 exit status   flag 1: it buried the chunk
 *   RETRY  u64 cid (UINT64_MAX: every buried chunk)
 *   DUP    u64 cid, u32 node hash: a completion that came back IGNORED
 *   WORK   identity bytes (1..200), created with SUBMIT (older readers skip it)
 *          flag 1: the owner's identity: only a handle that presents it
 *          writes the journal (meshd's jobs)
 *   CLOSED u32 node hash: a run of that node ended because its standard
 *          output was closed (older readers skip it)
 * Type 7 is the journal's own COMMIT (journal.h). */
#ifndef MESH_JOB_RECORD_H
#define MESH_JOB_RECORD_H

#include "journal/journal.h"

#include <stddef.h>
#include <stdint.h>

enum {
	MESH_JREC_SUBMIT = 1,
	MESH_JREC_NODE = 2,
	MESH_JREC_DONE = 3,
	MESH_JREC_FAIL = 4,
	MESH_JREC_RETRY = 5,
	MESH_JREC_DUP = 6,
	MESH_JREC_WORK = 8,
	MESH_JREC_CLOSED = 9,
	MESH_JREC__MAX = 9,
};
_Static_assert(MESH_JREC_COMMIT == 7, "the journal's COMMIT sits between the job's types");

#define MESH_REC_DONE_LEN 16
#define MESH_REC_FAIL_LEN 16
#define MESH_REC_DUP_LEN 12
#define MESH_REC_U64_LEN 8 /* SUBMIT, RETRY */
#define MESH_REC_CLOSED_LEN 4
#define MESH_REC_NODE_MAX (4 + 255)

/* DONE flag 2: the chunk's result is in the record, after its 16 bytes:
 * meshd's small results, durable with their DONE in its one fdatasync
 * (docs/journal.md, "Results in DONE records"). */
#define MESH_REC_DONE_RESULT 2
#define MESH_REC_RESULT_MAX (MESH_JOURNAL_MAX_PAYLOAD - 16) /* 1008 */

/* WORK flag 1: the identity is its owner's; a handle that would write the
 * journal without presenting it is refused (docs/journal.md). */
#define MESH_REC_WORK_OWNED 1

/* A decoded DONE, FAIL or DUP (value: the duration in us for DONE, the
 * exit status for FAIL, 0 for DUP). */
struct mesh_rec_chunk {
	uint64_t cid;
	uint32_t node;
	uint32_t value;
};

/* Encoders: write the payload into p and return its length.  The DONE's
 * duration is rounded to microseconds (at least 1 when dur_ns > 0, at most
 * UINT32_MAX). */
size_t mesh_rec_u64_enc(unsigned char *p, uint64_t v);
size_t mesh_rec_done_enc(unsigned char *p, uint64_t cid, uint32_t node, uint64_t dur_ns);
size_t mesh_rec_fail_enc(unsigned char *p, uint64_t cid, uint32_t node, int status);
size_t mesh_rec_dup_enc(unsigned char *p, uint64_t cid, uint32_t node);
/* A DONE that carries the chunk's result (n <= MESH_REC_RESULT_MAX; p
 * must hold 16 + n bytes): its length, 16 + n. */
size_t mesh_rec_done_result_enc(unsigned char *p, uint64_t cid, uint32_t node, uint64_t dur_ns, const void *res,
				size_t n);
size_t mesh_rec_closed_enc(unsigned char *p, uint32_t node);
/* name: 1..255 bytes (longer is cut). */
size_t mesh_rec_node_enc(unsigned char *p, uint32_t hash, const char *name, size_t len);

/* Decoders: 0, or MESH_E_PARSE when the payload is too short for its type
 * (a record that is whole but short is skipped, never trusted). */
int mesh_rec_u64_dec(const struct mesh_jrec *r, uint64_t *v);
int mesh_rec_chunk_dec(const struct mesh_jrec *r, struct mesh_rec_chunk *c);
int mesh_rec_node_dec(const struct mesh_jrec *r, uint32_t *hash, const char **name, size_t *len);
/* 1 with the result (valid while r is) when r is a DONE that carries one,
 * else 0. */
int mesh_rec_done_result(const struct mesh_jrec *r, const void **p, size_t *n);
/* Calls fn with the result each chunk's first committed DONE carries, in
 * file order, for the journal at path of a job of nchunks (read without a
 * lock, as `mesh job status` reads).  A negative return of fn stops the
 * walk and is returned; else 0 or the journal's error. */
int mesh_rec_each_result(const char *path, uint64_t nchunks,
			 int (*fn)(void *arg, uint64_t cid, const void *p, size_t n), void *arg);

/* 1 when len is a sane payload length for a type of the job's journal
 * (COMMIT included): what a resynchronising check demands of a record found
 * inside garbage. */
int mesh_rec_len_ok(uint8_t type, uint16_t len);
/* The job's record kinds, for journal/ (journal.h, mesh_journal_kinds). */
extern const struct mesh_journal_kinds mesh_job_records;
/* mesh_journal_check of a job's journal (with the job's record kinds); its
 * report is journal.h's, included here for `mesh job check`, so that the
 * CLI includes no journal/ header of its own. */
int mesh_job_journal_check(const char *path, int repair, struct mesh_journal_report *rep);

#endif
