/* The journal: a framed, append-only, checksummed log file.
 *
 * Layout (all integers little-endian; docs/journal.md has the full table):
 *   header, 32 bytes: magic "meshjrnl", u32 version, u32 header size (32),
 *     u64 creation wall time (ns), u32 zero, u32 crc32c of bytes 0..27.
 *   records, each 8-byte aligned:
 *     u32 crc32c of bytes 4..(8+len+pad), u8 type, u8 flags, u16 len,
 *     len payload bytes, zero padding to a multiple of 8.
 * A record is whole when all its bytes are present and its crc matches;
 * nothing else is ever accepted.
 *
 * Format version bump procedure (beanstalkd's Walver rule): the version is
 * MESH_JOURNAL_VERSION below.  Any change to the header, the frame, or the
 * meaning or payload of an existing record type needs a new version number;
 * the reader then keeps a decoder for every older version it still accepts
 * and mesh_journal_open() answers MESH_E_VERSION for any other.  Adding a new
 * record type that old readers may safely skip does not need a bump (readers
 * skip unknown types); one they must not skip does.
 *
 * Durability rule (docs/journal.md, "Who may trust a record"): a record is
 * handed to a consumer only once it is durable, and nothing ever removes a
 * durable record.  A writer appends its batch and fdatasyncs it while holding
 * flock(LOCK_EX), and only when the fdatasync succeeded does it append a
 * COMMIT record (not synced itself; a later fsync covers it).  Every byte
 * before a COMMIT is durable.  A lock-free reader hands out only records
 * followed by a COMMIT; records after the last COMMIT belong to a commit in
 * flight (which may still be taken back) or to a writer that died; the next
 * holder of LOCK_EX fdatasyncs such leftovers and commits them ("adopts"
 * them), or cuts them when they are a torn tail.
 *
 * Concurrency: any number of processes may append and read (each
 * struct mesh_journal remembers how far it has read and mesh_journal_tail
 * reads only what was appended since, without a lock).  Within one process
 * many threads may call mesh_journal_append at once: their records are
 * written together with one fdatasync (group commit: the first waiter
 * becomes the leader and commits everything queued).  Tail calls are
 * serialised inside the handle. */
#ifndef MESH_JOURNAL_JOURNAL_H
#define MESH_JOURNAL_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#define MESH_JOURNAL_MAGIC "meshjrnl"
#define MESH_JOURNAL_VERSION 1
#define MESH_JOURNAL_HDR_SIZE 32
#define MESH_JOURNAL_FRAME 8		/* frame header bytes before the payload */
#define MESH_JOURNAL_MAX_PAYLOAD 1024	/* longer len fields are corrupt */

/* The journal's own record type; every other type is its user's (the
 * job's: job/record.h), and the journal tells them apart only through
 * the kinds its user gives (struct mesh_journal_kinds). */
enum {
	MESH_JREC_COMMIT = 7, /* every byte before it is durable; never handed to consumers */
};
/* A COMMIT's payload is 8 bytes: the fold (mesh_journal_fold) of the records
 * of its batch, the whole records since the COMMIT before it (or the
 * header).  It names the bytes it vouches for: a reader whose reads joined
 * two states of a file in which a failed batch was taken back and others
 * written in its place (a read that came back short, then the next) holds
 * a fold that does not match, and reads again.  An empty COMMIT, as written
 * before folds, vouches for durability only. */
#define MESH_JOURNAL_COMMIT_LEN 8
#define MESH_JOURNAL_COMMIT_SIZE (MESH_JOURNAL_FRAME + MESH_JOURNAL_COMMIT_LEN)
/* Record types are one byte: a report counts each (by_type). */
#define MESH_JOURNAL_TYPES 256

struct mesh_jrec {
	uint8_t type, flags;
	uint16_t len;
	const void *data; /* len bytes; valid during the callback only */
	uint64_t off;	  /* file offset of the record (output of tail/scan) */
};

/* The fold of a batch after one more record (rec: its encoded bytes): the
 * count of records in the high 32 bits; in the low, the running value mixed
 * with the record's crc (xor, multiply, shift: a bijection for each crc).
 * A batch starts at 0. */
uint64_t mesh_journal_fold(uint64_t fold, const void *rec);
/* Encodes a COMMIT for a batch of the given fold into out
 * (MESH_JOURNAL_COMMIT_SIZE bytes); returns its size. */
size_t mesh_journal_encode_commit(void *out, uint64_t fold);
/* 1 when the decoded COMMIT r vouches for a batch of this fold (an empty,
 * older COMMIT vouches for any), else 0. */
int mesh_journal_commit_vouches(const struct mesh_jrec *r, uint64_t fold);

struct mesh_journal;

/* Called by tail for every whole record in file order; a non-zero return
 * stops the tail and is returned by it (the record counts as read). */
typedef int (*mesh_journal_fn)(void *arg, const struct mesh_jrec *r);
/* Called by the commit leader while it holds the file lock, before it
 * writes: it must bring the consumer up to date (mesh_journal_tail) and may
 * drop records of the batch by clearing keep[i] (e.g. a DONE that another
 * process wrote first).  A negative return fails the whole batch. */
typedef int (*mesh_journal_prepare_fn)(void *arg, const struct mesh_jrec *recs, size_t n, int *keep);

/* Encodes one record into out (at least mesh_journal_size(len) bytes);
 * returns its size. */
size_t mesh_journal_encode(void *out, uint8_t type, uint8_t flags, const void *payload, uint16_t len);
static inline size_t mesh_journal_size(size_t len)
{
	return (MESH_JOURNAL_FRAME + len + 7) & ~(size_t)7;
}
/* Decodes the record at buf (n bytes available).  1 with *r filled and
 * *size set, 0 when the bytes end before the record does, MESH_E_CORRUPT
 * when the frame or crc is bad.  Pure; used by the reader and the fuzzer. */
int mesh_journal_decode(const void *buf, size_t n, struct mesh_jrec *r, size_t *size);
/* What a journal's user says of its record types, for the two places that
 * must tell a record from garbage (recover's look past a torn tail, the
 * check's resynchronisation): len_ok answers 1 when len is a sane payload
 * length for a known type (COMMIT included); first is the type every
 * journal starts with (a bad header is repaired only before one).  Without
 * kinds (NULL) any type but 0 with a length up to MESH_JOURNAL_MAX_PAYLOAD
 * passes, and any first record. */
struct mesh_journal_kinds {
	int (*len_ok)(uint8_t type, uint16_t len);
	uint8_t first;
};
/* len_ok of kinds, or the rule without kinds. */
int mesh_journal_len_ok(const struct mesh_journal_kinds *kinds, uint8_t type, uint16_t len);
/* Builds a header into out (MESH_JOURNAL_HDR_SIZE bytes). */
void mesh_journal_header(void *out);
/* Checks a header: 0, MESH_E_FOREIGN (short or wrong magic), MESH_E_VERSION,
 * MESH_E_CORRUPT (bad header crc). */
int mesh_journal_header_check(const void *buf, size_t n);

/* Creates path holding the header, one record and a COMMIT, atomically (temp file,
 * fdatasync, link, fsync dir): the file appears whole or not at all.
 * -EEXIST if path exists (it is left alone). */
int mesh_journal_create(const char *path, const struct mesh_jrec *first);
/* The same with n records (1..4) in the new file. */
int mesh_journal_create_many(const char *path, const struct mesh_jrec *recs, size_t n);
/* The same written in place (O_EXCL, mode 0600) and not synced, for a
 * path only the caller can name (a directory it just made): a crash may
 * leave it torn or empty, so the caller fdatasyncs it and fsyncs its
 * directory before it tells anyone the journal exists.  -EEXIST if path
 * exists. */
int mesh_journal_create_unsynced(const char *path, const struct mesh_jrec *recs, size_t n);

/* Opens an existing journal and checks its header; reads no records.
 * fn/arg receive the records tail reads.  Errors: -errno (-ENOENT), the
 * header errors above.  *out is the caller's (mesh_journal_close). */
int mesh_journal_open(struct mesh_journal **out, const char *path, mesh_journal_fn fn, void *arg);
void mesh_journal_close(struct mesh_journal *j);
/* Installs the commit leader's prepare hook (see above). */
void mesh_journal_set_prepare(struct mesh_journal *j, mesh_journal_prepare_fn fn, void *arg);
/* The record kinds recover uses (kinds must outlive j; default NULL). */
void mesh_journal_set_kinds(struct mesh_journal *j, const struct mesh_journal_kinds *kinds);

/* Reads the committed records appended since the last tail and passes each
 * to fn (COMMIT records are not passed).  Takes no file lock and never
 * waits for one.  Stops quietly before records not yet committed (a commit
 * in flight, a dead writer's leftovers) and at a partial or bad record.
 * Returns the number of records passed, or a negative error: MESH_E_STALE
 * when the file is now shorter than what this handle already read (another
 * program cut it) -- the handle is then of no further use. */
long mesh_journal_tail(struct mesh_journal *j);
/* Tails, then, if bytes remain after the last committed record, takes
 * LOCK_EX, re-checks the real size and the bytes this handle read last, and
 * settles them: whole records are made durable (fdatasync) and committed,
 * a torn tail after them is cut; when whole records follow bad bytes the
 * damage is in the middle: MESH_E_DAMAGED, nothing changed (see
 * mesh_journal_check).  *cut (may be NULL) gets the bytes cut.  0 or a
 * negative error. */
int mesh_journal_recover(struct mesh_journal *j, uint64_t *cut);
/* The same rule for a look that writes nothing (`mesh job status`): under
 * LOCK_SH (so that no commit is in flight), the whole records after the
 * last committed one are made durable (fdatasync, which a read-only fd may
 * do) and handed out by this handle as recover would adopt them, without a
 * COMMIT; a torn tail after them is left as it is and not handed out.  So
 * every reader and writer counts the same records: a last record whose
 * COMMIT is torn or missing, or a journal written before COMMITs.
 * MESH_E_DAMAGED as for recover; 0 or a negative error. */
int mesh_journal_recover_look(struct mesh_journal *j);
/* Appends n records durably with the other appenders of this process (one
 * write + one fdatasync per batch, then its COMMIT).  keep (may be NULL) gets
 * 1 for each record written, 0 for one the prepare hook dropped.  Returns 0
 * once the kept records are durable, or a negative error: write or fsync
 * failed (then none of them is in the file, as far as a truncate can ensure,
 * and no reader anywhere has handed them out), MESH_E_STALE when the path
 * now names another file (mesh job check --force replaced it) or the file
 * was cut below what this handle read, MESH_E_DAMAGED as for recover. */
int mesh_journal_append(struct mesh_journal *j, const struct mesh_jrec *recs, size_t n, int *keep);
/* Bytes of whole records read so far (the tail position). */
uint64_t mesh_journal_position(const struct mesh_journal *j);
/* Counts of this handle: batches committed, records written. */
void mesh_journal_stats(const struct mesh_journal *j, uint64_t *batches, uint64_t *records);
/* Internal, for tests and benchmarks: bytes this handle has read from its
 * file so far (tails, look-aheads, settling); read without a lock, so only
 * between calls. */
uint64_t mesh__journal_bytes_read(const struct mesh_journal *j);

#define MESH_JOURNAL_RANGES 8 /* dropped ranges a report lists one by one */

struct mesh_journal_range {
	uint64_t off, len;
};

struct mesh_journal_report {
	uint64_t size;		/* file size found */
	int header_bad;		/* magic right, rest of the header not (crc, size) */
	uint64_t records;	/* whole records kept (COMMIT included) */
	uint64_t by_type[MESH_JOURNAL_TYPES];
	uint64_t good_end;	/* end of the last whole record before any damage */
	uint64_t bad_off;	/* first damaged byte, or UINT64_MAX */
	uint64_t after_bad;	/* whole records found after the first damage */
	uint64_t dropped_bytes;	/* bytes in damaged ranges (header excluded) */
	size_t ndropped;	/* damaged ranges; the first MESH_JOURNAL_RANGES are listed */
	struct mesh_journal_range dropped[MESH_JOURNAL_RANGES];
	int torn;		/* the only damage is a torn tail (no whole record after it) */
	int identity;		/* the damage lies in the records that name the journal's work (its
				 * first batch, before its first COMMIT: the job's SUBMIT and WORK;
				 * in a journal without COMMITs, its first record or the one after):
				 * never repaired, a repair without them would belong to no work or to
				 * any */
	uint64_t adopted;	/* whole records after the last COMMIT (a writer died before it, it was
				 * torn or lost, the journal predates COMMITs) that this check
				 * committed (repair >= 1), as every writer adopts them */
	int repaired;		/* the file was cut (torn tail) or rewritten (--force) */
};
/* Verifies a whole journal under LOCK_EX, resynchronising past damage: after
 * a bad record it scans forward at 8-byte steps for the next whole record of
 * a known type and sane length (mesh_journal_len_ok) and goes on from there.
 * repair = 0 changes nothing; 1 cuts a torn tail; 2 also rewrites a journal
 * with damage before its end or a bad header (temp file, fdatasync, rename,
 * fsync of the directory): every whole record is kept, the damaged ranges
 * are dropped (and listed in rep), a fresh header replaces a bad one.  A bad
 * header is repaired only when the first record is a whole SUBMIT, and
 * damage in the records that name the work (rep->identity) never is.  With
 * repair >= 1, whole records after the last COMMIT are made durable and
 * committed (rep->adopted), as recover does: after a check every reader
 * counts what every writer counts.  A
 * process that still has the old file open gets MESH_E_STALE on its next
 * append.  Returns 0 when the file is (now) sound, MESH_E_CORRUPT when
 * damage remains, MESH_E_FOREIGN / MESH_E_VERSION (never touched), or
 * another error. */
int mesh_journal_check(const char *path, int repair, struct mesh_journal_report *rep);
/* The same, telling records from garbage by kinds (mesh_journal_check:
 * NULL; a job's journal: job/record.h mesh_job_journal_check). */
int mesh_journal_check_kinds(const char *path, int repair, const struct mesh_journal_kinds *kinds,
			     struct mesh_journal_report *rep);

#endif
