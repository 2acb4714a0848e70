#include "journal/journal.h"

#include "base/bytes.h"
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Records straddle read chunks; the fuzz build reads in small chunks so that
 * the fuzzer reaches that path (and runs fast under ASan). */
#ifdef MESH_FUZZ
#define READ_CHUNK (1u << 12)
#else
#define READ_CHUNK (1u << 20)
#endif

/* A walk reads a chunk and the longest record that may straddle its end. */
#define WALK_BUF (READ_CHUNK + MESH_JOURNAL_FRAME + MESH_JOURNAL_MAX_PAYLOAD + 8)

/* A tail re-reads the last ANCHOR bytes it read (the end of the last records,
 * their checksums included) and compares them: a file cut below read_off,
 * or cut and regrown with other records, is caught before it is trusted. */
#define ANCHOR 64

struct waiter {
	const struct mesh_jrec *recs;
	size_t n;
	int *keep;
	int rc;
	_Atomic int done;  /* set (release) by the leader after rc and keep */
	uint32_t gen;	   /* the batch it joined: it sleeps on wake[gen & 1] */
	struct waiter *next;
};

struct mesh_journal {
	int fd;			/* read + append, its own open file description */
	char *path;
	mesh_journal_fn fn;
	void *arg;
	mesh_journal_prepare_fn prepare;
	void *prepare_arg;
	const struct mesh_journal_kinds *kinds; /* NULL: any record type */
	/* reader; rmu guards read_off, trusted, anchor, rbuf and run_* (tail may run
	 * on a commit leader's thread while another thread tails) */
	pthread_mutex_t rmu;
	uint64_t read_off;
	uint64_t rfold;		 /* fold of the records from the last COMMIT to read_off */
	uint64_t trusted;	 /* records ending here or before are durable without a COMMIT after them */
	unsigned char anchor[ANCHOR]; /* the bytes that end at read_off, as read */
	unsigned char *rbuf;	      /* WALK_BUF: the anchor, then the new bytes */
	uint64_t bytes_read;	      /* what this handle's reads returned (tests) */
	/* [run_from, run_end): whole records without COMMIT that a walk from
	 * read_off found (0: none), with the file size then and their last bytes:
	 * leftovers are walked once, not on every tail.  hold numbers the LOCK_EX
	 * hold settling is in (0: none); run_hold, the hold the run was walked in. */
	uint64_t run_from, run_end, run_size, run_hold, hold, holds;
	uint64_t run_fold; /* the fold at run_end */
	unsigned char run_anchor[ANCHOR];
	/* group commit */
	pthread_mutex_t gmu;
	struct waiter *qhead, **qtail;
	int leader;
	uint32_t qgen;		   /* the batch the queue will become */
	_Atomic uint32_t wake[2];  /* futex words: batch g's waiters sleep on wake[g & 1] */
	int broken;		/* sticky error after a failed cut-back */
	unsigned char *wbuf;
	size_t wcap;
	uint64_t batches, written;
};

size_t mesh_journal_encode(void *out, uint8_t type, uint8_t flags, const void *payload, uint16_t len)
{
	unsigned char *p = out;
	size_t size = mesh_journal_size(len);
	p[4] = type;
	p[5] = flags;
	p[6] = (unsigned char)len;
	p[7] = (unsigned char)(len >> 8);
	if (len)
		memcpy(p + MESH_JOURNAL_FRAME, payload, len);
	memset(p + MESH_JOURNAL_FRAME + len, 0, size - MESH_JOURNAL_FRAME - len);
	mesh_put32le(p, mesh_crc32c(0, p + 4, size - 4));
	return size;
}

/* A multiply and a shift: a bijection of the running value for each crc,
 * so batches that differ in one record differ in their fold, and cheap next
 * to the record's own crc (a crc32c of the 4 bytes doubled the time to
 * open a journal of 10 million records). */
uint64_t mesh_journal_fold(uint64_t fold, const void *rec)
{
	uint32_t h = ((uint32_t)fold ^ mesh_get32le(rec)) * 0x9e3779b1u;
	h ^= h >> 16;
	return ((fold >> 32) + 1) << 32 | h;
}

size_t mesh_journal_encode_commit(void *out, uint64_t fold)
{
	unsigned char p[MESH_JOURNAL_COMMIT_LEN];
	mesh_put64le(p, fold);
	return mesh_journal_encode(out, MESH_JREC_COMMIT, 0, p, sizeof p);
}

int mesh_journal_commit_vouches(const struct mesh_jrec *r, uint64_t fold)
{
	if (r->len == 0)
		return 1;
	return r->len == MESH_JOURNAL_COMMIT_LEN && mesh_get64le(r->data) == fold;
}

int mesh_journal_decode(const void *buf, size_t n, struct mesh_jrec *r, size_t *size)
{
	const unsigned char *p = buf;
	size_t len, sz;
	if (n < MESH_JOURNAL_FRAME)
		return 0;
	len = (size_t)p[6] | (size_t)p[7] << 8;
	if (p[4] == 0 || len > MESH_JOURNAL_MAX_PAYLOAD)
		return MESH_E_CORRUPT;
	sz = mesh_journal_size(len);
	if (n < sz)
		return 0;
	if (mesh_crc32c(0, p + 4, sz - 4) != mesh_get32le(p))
		return MESH_E_CORRUPT;
	for (size_t i = MESH_JOURNAL_FRAME + len; i < sz; i++)
		if (p[i])
			return MESH_E_CORRUPT;
	r->type = p[4];
	r->flags = p[5];
	r->len = (uint16_t)len;
	r->data = p + MESH_JOURNAL_FRAME;
	*size = sz;
	return 1;
}

void mesh_journal_header(void *out)
{
	unsigned char *p = out;
	memset(p, 0, MESH_JOURNAL_HDR_SIZE);
	memcpy(p, MESH_JOURNAL_MAGIC, 8);
	mesh_put32le(p + 8, MESH_JOURNAL_VERSION);
	mesh_put32le(p + 12, MESH_JOURNAL_HDR_SIZE);
	mesh_put64le(p + 16, mesh_wall_ns());
	mesh_put32le(p + 28, mesh_crc32c(0, p, 28));
}

int mesh_journal_header_check(const void *buf, size_t n)
{
	const unsigned char *p = buf;
	if (n < 8 || memcmp(p, MESH_JOURNAL_MAGIC, 8) != 0)
		return MESH_E_FOREIGN;
	if (n < MESH_JOURNAL_HDR_SIZE)
		return MESH_E_CORRUPT;
	if (mesh_get32le(p + 28) != mesh_crc32c(0, p, 28))
		return MESH_E_CORRUPT;
	if (mesh_get32le(p + 8) != MESH_JOURNAL_VERSION)
		return MESH_E_VERSION;
	if (mesh_get32le(p + 12) != MESH_JOURNAL_HDR_SIZE)
		return MESH_E_CORRUPT;
	return 0;
}

int mesh_journal_len_ok(const struct mesh_journal_kinds *kinds, uint8_t type, uint16_t len)
{
	if (kinds)
		return kinds->len_ok(type, len);
	return type != 0 && (type != MESH_JREC_COMMIT || len == 0 || len == MESH_JOURNAL_COMMIT_LEN) &&
	       len <= MESH_JOURNAL_MAX_PAYLOAD;
}

int mesh_journal_create(const char *path, const struct mesh_jrec *first)
{
	return mesh_journal_create_many(path, first, 1);
}

/* A new journal's bytes: the header, nrec records and a COMMIT, into buf
 * (CREATE_MAX bytes); their length, or MESH_E_RANGE / MESH_E_TOOBIG. */
#define CREATE_MAX (MESH_JOURNAL_HDR_SIZE + 4 * (MESH_JOURNAL_FRAME + MESH_JOURNAL_MAX_PAYLOAD + 8) + MESH_JOURNAL_COMMIT_SIZE)
static long create_bytes(unsigned char *buf, const struct mesh_jrec *recs, size_t nrec)
{
	size_t n = MESH_JOURNAL_HDR_SIZE;
	uint64_t fold = 0;
	if (nrec == 0 || nrec > 4)
		return MESH_E_RANGE;
	for (size_t i = 0; i < nrec; i++)
		if (recs[i].len > MESH_JOURNAL_MAX_PAYLOAD)
			return MESH_E_TOOBIG;
	mesh_journal_header(buf);
	for (size_t i = 0; i < nrec; i++) {
		size_t sz = mesh_journal_encode(buf + n, recs[i].type, recs[i].flags, recs[i].data, recs[i].len);
		fold = mesh_journal_fold(fold, buf + n);
		n += sz;
	}
	n += mesh_journal_encode_commit(buf + n, fold);
	return (long)n;
}

int mesh_journal_create_unsynced(const char *path, const struct mesh_jrec *recs, size_t nrec)
{
	unsigned char buf[CREATE_MAX];
	long n = create_bytes(buf, recs, nrec);
	int fd, rc;
	if (n < 0)
		return (int)n;
	/* The caller's private file (meshd's job directory, whose other
	 * files are 0600 too). */
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	rc = mesh_write_all(fd, buf, (size_t)n);
	close(fd);
	if (rc)
		unlink(path);
	return rc;
}

int mesh_journal_create_many(const char *path, const struct mesh_jrec *recs, size_t nrec)
{
	char tmp[PATH_MAX];
	unsigned char buf[CREATE_MAX];
	long n = create_bytes(buf, recs, nrec);
	int fd, rc;
	if (n < 0)
		return (int)n;
	if (snprintf(tmp, sizeof tmp, "%s.%d.new", path, (int)getpid()) >= (int)sizeof tmp)
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	rc = mesh_write_all(fd, buf, (size_t)n);
	if (!rc)
		rc = mesh_fdatasync(fd);
	close(fd);
	/* link, not rename: of two creators exactly one wins, the other sees
	 * EEXIST and reads what the winner wrote. */
	if (!rc && link(tmp, path) < 0)
		rc = -errno;
	unlink(tmp);
	if (!rc)
		rc = mesh_fsync_dir_of(path);
	return rc;
}

int mesh_journal_open(struct mesh_journal **out, const char *path, mesh_journal_fn fn, void *arg)
{
	unsigned char hdr[MESH_JOURNAL_HDR_SIZE];
	struct mesh_journal *j;
	ssize_t got;
	int rc;
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	/* A journal we may only read (mode, read-only mount, immutable) still
	 * serves status and check; appends then fail with -EBADF. */
	if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM))
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	got = mesh_pread_full(fd, hdr, sizeof hdr, 0);
	if (got < 0) {
		close(fd);
		return (int)got;
	}
	rc = mesh_journal_header_check(hdr, (size_t)got);
	if (rc) {
		close(fd);
		return rc;
	}
	j = calloc(1, sizeof *j);
	if (!j || !(j->path = strdup(path)) || !(j->rbuf = malloc(WALK_BUF))) {
		if (j) {
			free(j->path);
			free(j);
		}
		close(fd);
		return -ENOMEM;
	}
	j->fd = fd;
	j->fn = fn;
	j->arg = arg;
	j->read_off = MESH_JOURNAL_HDR_SIZE;
	memcpy(j->anchor, hdr, MESH_JOURNAL_HDR_SIZE);
	pthread_mutex_init(&j->gmu, NULL);
	pthread_mutex_init(&j->rmu, NULL);
	j->qtail = &j->qhead;
	*out = j;
	return 0;
}

void mesh_journal_close(struct mesh_journal *j)
{
	if (!j)
		return;
	close(j->fd);
	pthread_mutex_destroy(&j->gmu);
	pthread_mutex_destroy(&j->rmu);
	free(j->rbuf);
	free(j->wbuf);
	free(j->path);
	free(j);
}

void mesh_journal_set_prepare(struct mesh_journal *j, mesh_journal_prepare_fn fn, void *arg)
{
	j->prepare = fn;
	j->prepare_arg = arg;
}

void mesh_journal_set_kinds(struct mesh_journal *j, const struct mesh_journal_kinds *kinds)
{
	j->kinds = kinds;
}

uint64_t mesh_journal_position(const struct mesh_journal *j)
{
	struct mesh_journal *m = (struct mesh_journal *)j;
	uint64_t off;
	pthread_mutex_lock(&m->rmu);
	off = m->read_off;
	pthread_mutex_unlock(&m->rmu);
	return off;
}

uint64_t mesh__journal_bytes_read(const struct mesh_journal *j)
{
	return j->bytes_read; /* tests read it between calls */
}

void mesh_journal_stats(const struct mesh_journal *j, uint64_t *batches, uint64_t *records)
{
	if (batches)
		*batches = j->batches;
	if (records)
		*records = j->written;
}

static long tail_locked(struct mesh_journal *j, int look);
/* How settle_locked treats what follows the last committed record: an
 * opener (recover) and a writer (before its batch) hold LOCK_EX and write
 * (cut a torn tail, commit leftovers; a writer fails when it cannot); a
 * look (recover_look) holds LOCK_SH and writes nothing. */
enum settle_how { SETTLE_OPEN, SETTLE_WRITER, SETTLE_LOOK };
static int settle_locked(struct mesh_journal *j, uint64_t *cut, enum settle_how how);

long mesh_journal_tail(struct mesh_journal *j)
{
	long n;
	pthread_mutex_lock(&j->rmu);
	n = tail_locked(j, 1);
	pthread_mutex_unlock(&j->rmu);
	return n;
}

static size_t anchor_len(uint64_t off)
{
	return off < ANCHOR ? (size_t)off : ANCHOR;
}

/* 1 when the remembered run starts at read_off and still holds no COMMIT:
 * the file has the same size and the run the same last bytes (a batch taken
 * back and regrown changes them; at worst a reader hands its records out a
 * commit later); settling trusts only a run of its own hold.  rmu held. */
static int run_known(struct mesh_journal *j)
{
	unsigned char now[ANCHOR];
	struct stat st;
	size_t alen;
	ssize_t got;
	if (!j->run_end || j->run_from != j->read_off || j->run_end <= j->read_off)
		return 0;
	if (j->hold && j->run_hold != j->hold)
		return 0;
	if (fstat(j->fd, &st) < 0 || (uint64_t)st.st_size != j->run_size)
		return 0;
	alen = anchor_len(j->run_end);
	got = mesh_pread_full(j->fd, now, alen, (off_t)(j->run_end - alen));
	if (got > 0)
		j->bytes_read += (uint64_t)got;
	return got == (ssize_t)alen && memcmp(now, j->run_anchor, alen) == 0;
}

/* Remembers [read_off, end) as a run without COMMIT, fold its records'
 * fold from the last COMMIT (rmu held). */
static void run_remember(struct mesh_journal *j, uint64_t end, uint64_t fold)
{
	struct stat st;
	size_t alen = anchor_len(end);
	ssize_t got;
	j->run_end = 0;
	if (end <= j->read_off || fstat(j->fd, &st) < 0)
		return;
	got = mesh_pread_full(j->fd, j->run_anchor, alen, (off_t)(end - alen));
	if (got > 0)
		j->bytes_read += (uint64_t)got;
	if (got != (ssize_t)alen)
		return;
	j->run_from = j->read_off;
	j->run_end = end;
	j->run_size = (uint64_t)st.st_size;
	j->run_hold = j->hold;
	j->run_fold = fold;
}

/* Walks the whole records that follow each other from off (only whole
 * records, no COMMIT, from read_off to off; fold, their fold from the last
 * COMMIT), resuming at the end of a known run: where they stop (*end),
 * where the last COMMIT among them ends (*commit_end, 0 if none), the fold
 * of the records after it (*fold_out); remembers a run without COMMIT.
 * A COMMIT that does not vouch for the records walked stops the walk there:
 * MESH_E_DAMAGED (a reader without the lock may have joined two states of
 * the file; under the lock the damage is real).  Uses rbuf (rmu held).
 * 0 or a negative error. */
static int walk(struct mesh_journal *j, uint64_t off, uint64_t fold, uint64_t *end, uint64_t *commit_end,
		uint64_t *fold_out)
{
	int fd = j->fd;
	unsigned char *buf = j->rbuf;
	uint64_t from;
	int rc = 0;
	*commit_end = 0;
	if (off < j->run_end && run_known(j)) {
		off = j->run_end;
		fold = j->run_fold;
	}
	from = off;
	for (;;) {
		size_t pos = 0;
		ssize_t got = mesh_pread_full(fd, buf, WALK_BUF, (off_t)off);
		if (got < 0) {
			rc = (int)got;
			break;
		}
		j->bytes_read += (uint64_t)got;
		for (;;) {
			struct mesh_jrec r;
			size_t sz;
			if (mesh_journal_decode(buf + pos, (size_t)got - pos, &r, &sz) != 1)
				break;
			if (r.type == MESH_JREC_COMMIT) {
				if (!mesh_journal_commit_vouches(&r, fold)) {
					rc = MESH_E_DAMAGED;
					break;
				}
				*commit_end = off + pos + sz;
				fold = 0;
			} else {
				fold = mesh_journal_fold(fold, buf + pos);
			}
			pos += sz;
		}
		off += pos;
		if (rc || pos == 0 || (size_t)got < WALK_BUF)
			break;
	}
	*end = off;
	*fold_out = fold;
	if (rc || *commit_end)
		j->run_end = 0;
	else if (off != from || off != j->run_end)
		run_remember(j, off, fold);
	return rc;
}

/* Moves read_off forward by adv bytes of data (rbuf + alen holds the bytes
 * at read_off) and keeps the anchor. */
static void advance(struct mesh_journal *j, size_t alen, size_t adv)
{
	uint64_t to = j->read_off + adv;
	size_t nlen = anchor_len(to);
	memmove(j->anchor, j->rbuf + alen + adv - nlen, nlen);
	j->read_off = to;
}

/* The fold after the whole records in buf[0, n), from fold (0 after a
 * COMMIT among them). */
static uint64_t fold_span(uint64_t fold, const unsigned char *buf, size_t n)
{
	struct mesh_jrec r;
	size_t pos = 0, sz;
	while (pos < n && mesh_journal_decode(buf + pos, n - pos, &r, &sz) == 1) {
		fold = r.type == MESH_JREC_COMMIT ? 0 : mesh_journal_fold(fold, buf + pos);
		pos += sz;
	}
	return fold;
}

#define READ_AGAIN 3

/* Looks ahead from off (fold: the records' from read_off to it) for the
 * next COMMIT (walk): 1 with j->trusted at its end, 0 when there is none
 * yet, 2 to read again (a damaged walk, fewer than READ_AGAIN times: again
 * counts them), or a negative error.  rmu held. */
static int look_ahead(struct mesh_journal *j, uint64_t off, uint64_t fold, int *again)
{
	uint64_t stop, cend, f;
	int rc = walk(j, off, fold, &stop, &cend, &f);
	if (rc == MESH_E_DAMAGED && ++*again < READ_AGAIN)
		return 2;
	if (rc)
		return rc;
	if (cend == 0)
		return 0;
	j->trusted = cend;
	return 1;
}

/* What one read's records are (tail_locked's first pass). */
struct tail_scan {
	size_t whole;	/* the whole records' bytes */
	size_t end;	/* the durable ones' (0: none): to the last COMMIT, or to trusted */
	uint64_t fold;	/* the fold of the records after the last COMMIT */
	uint64_t efold; /* the fold at end */
	int bad;	/* a COMMIT that does not vouch for the records before it */
};

/* The first pass over data[0, got), read at read_off where the fold is
 * fold: how far records are whole, and where the last COMMIT among them
 * ends; only records before it are durable, and those before tpos (the
 * trusted end from read_off; 0: none), which are durable without a COMMIT
 * in this read. */
static void scan_read(const unsigned char *data, size_t got, uint64_t fold, uint64_t tpos, struct tail_scan *s)
{
	uint64_t tfold = 0;
	*s = (struct tail_scan){.efold = fold}; /* the fold at read_off while end is 0 */
	for (;;) {
		struct mesh_jrec r;
		size_t sz;
		if (mesh_journal_decode(data + s->whole, got - s->whole, &r, &sz) != 1)
			break;
		if (r.type == MESH_JREC_COMMIT) {
			if (!mesh_journal_commit_vouches(&r, fold)) {
				s->bad = 1;
				break;
			}
			fold = 0;
			s->efold = 0;
			s->end = s->whole + sz;
		} else {
			fold = mesh_journal_fold(fold, data + s->whole);
		}
		s->whole += sz;
		if (s->whole == tpos)
			tfold = fold;
	}
	s->fold = fold;
	if (tpos) {
		/* the fold carried on to trusted */
		if (tpos >= s->whole) {
			tpos = s->whole;
			tfold = fold;
		}
		if (tpos > s->end) {
			s->end = (size_t)tpos;
			s->efold = tfold;
		}
	}
}

/* Hands the records of data[*pos, end) but COMMITs to j->fn, counted in
 * *count: 0 once all went, or the callback's stop (< 0 an error, > 0
 * stop), *pos after the record it stopped at. */
static int hand_out(struct mesh_journal *j, const unsigned char *data, size_t end, size_t *pos, long *count)
{
	while (*pos < end) {
		struct mesh_jrec r;
		size_t sz;
		(void)mesh_journal_decode(data + *pos, end - *pos, &r, &sz);
		r.off = j->read_off + *pos;
		*pos += sz;
		if (r.type == MESH_JREC_COMMIT)
			continue;
		++*count;
		int stop = j->fn ? j->fn(j->arg, &r) : 0;
		if (stop)
			return stop;
	}
	return 0;
}

/* Hands out the committed records after read_off; rmu held.  rbuf holds
 * the anchor's bytes as they are now (they must not have changed: else the
 * file was cut or rewritten under us), then the new bytes.  look = 0: no
 * look-ahead past a chunk without COMMIT (recover settles it, walking once).
 * A COMMIT that does not vouch for the records before it (their fold) means
 * this read joined two states of the file (journal.h): what precedes it is
 * handed out and the rest read again; a third time is damage. */
static long tail_locked(struct mesh_journal *j, int look)
{
	long count = 0;
	int again = 0, rc;
	for (;;) {
		if (look && j->trusted <= j->read_off && run_known(j)) {
			/* look only past the known run */
			if ((rc = look_ahead(j, j->run_end, j->run_fold, &again)) == 2)
				continue;
			if (rc <= 0)
				return rc ? rc : count;
		}
		size_t alen = anchor_len(j->read_off), pos = 0;
		unsigned char *data = j->rbuf + alen;
		ssize_t got = mesh_pread_full(j->fd, j->rbuf, READ_CHUNK + alen, (off_t)(j->read_off - alen));
		if (got < 0)
			return got;
		j->bytes_read += (uint64_t)got;
		if ((size_t)got < alen || memcmp(j->rbuf, j->anchor, alen) != 0)
			return MESH_E_STALE;
		got -= (ssize_t)alen;
		struct tail_scan s;
		scan_read(data, (size_t)got, j->rfold, j->trusted > j->read_off ? j->trusted - j->read_off : 0, &s);
		if (s.end == 0 && !s.bad) {
			/* A full chunk of whole records with no COMMIT: a batch
			 * longer than a chunk; look ahead for its COMMIT. */
			if ((size_t)got < READ_CHUNK || s.whole == 0 || !look)
				return count;
			if ((rc = look_ahead(j, j->read_off + s.whole, s.fold, &again)) <= 0)
				return rc ? rc : count;
			continue;
		}
		if ((rc = hand_out(j, data, s.end, &pos, &count))) {
			j->rfold = fold_span(j->rfold, data, pos);
			advance(j, alen, pos);
			return rc < 0 ? rc : count;
		}
		j->rfold = s.efold;
		advance(j, alen, s.end);
		if (s.bad) {
			if (++again < READ_AGAIN)
				continue;
			return MESH_E_DAMAGED;
		}
		if ((size_t)got < READ_CHUNK)
			return count;
	}
}

/* Offset of the first whole record of a known type and sane length at or
 * after off (8-aligned from off), or UINT64_MAX; 0 when it cannot tell. */
static uint64_t find_whole_after(const struct mesh_journal_kinds *kinds, int fd, uint64_t off, uint64_t size)
{
	unsigned char *buf = malloc(WALK_BUF);
	uint64_t base = off, found = UINT64_MAX;
	if (!buf)
		return 0; /* cannot tell: behave as if whole records follow */
	while (base < size && found == UINT64_MAX) {
		ssize_t got = mesh_pread_full(fd, buf, WALK_BUF, (off_t)base);
		if (got <= 0)
			break;
		for (size_t i = 0; i < READ_CHUNK && i < (size_t)got; i += 8) {
			struct mesh_jrec r;
			size_t sz;
			if (mesh_journal_decode(buf + i, (size_t)got - i, &r, &sz) == 1 &&
			    mesh_journal_len_ok(kinds, r.type, r.len)) {
				found = base + i;
				break;
			}
		}
		base += READ_CHUNK;
	}
	free(buf);
	return found;
}

/* With LOCK_EX held (LOCK_SH for SETTLE_LOOK): brings the consumer up to
 * date, then settles what lies after the last committed record.  No writer
 * is in flight, so whole records there are a dead writer's batch (or one
 * whose COMMIT was torn or lost in a crash, or a journal written before
 * COMMITs): they are made durable and committed -- by a look, made durable
 * and trusted by this handle alone.  Bytes after them are cut when no whole
 * record follows (a torn tail; a look leaves them), else the damage is in
 * the middle. */
static int settle_locked(struct mesh_journal *j, uint64_t *cut, enum settle_how how)
{
	struct stat st;
	uint64_t w, cend, size, fold;
	unsigned char commit_rec[MESH_JOURNAL_COMMIT_SIZE];
	long n;
	int rc;
	pthread_mutex_lock(&j->rmu);
	j->hold = ++j->holds;
	n = tail_locked(j, 1);
	rc = n < 0 ? (int)n : 0;
	if (!rc && fstat(j->fd, &st) < 0)
		rc = -errno;
	size = rc ? 0 : (uint64_t)st.st_size;
	/* The tail just checked the anchor, so read_off is a record boundary
	 * of this very file and size >= read_off. */
	if (rc || size <= j->read_off)
		goto out;
	rc = walk(j, j->read_off, j->rfold, &w, &cend, &fold);
	if (rc)
		goto out;
	if (w < size) {
		if (find_whole_after(j->kinds, j->fd, w + 8, size) != UINT64_MAX) {
			rc = MESH_E_DAMAGED;
			goto out;
		}
		if (how == SETTLE_LOOK) {
			/* a torn tail: not ours to cut, not handed out */
		} else if (ftruncate(j->fd, (off_t)w) < 0) {
			rc = -errno;
			goto out;
		}
		else if (cut)
			*cut += size - w;
	}
	rc = mesh_fdatasync(j->fd);
	if (rc || w == j->read_off)
		goto out;
	/* Adopted: durable now.  The COMMIT tells the other processes; if it
	 * cannot be written, this handle still trusts them and the next
	 * holder of the lock adopts them again. */
	j->trusted = w;
	mesh_journal_encode_commit(commit_rec, fold);
	rc = how == SETTLE_LOOK ? 0 : mesh_pwrite_all(j->fd, commit_rec, sizeof commit_rec, (off_t)w);
	/* A writer must not append after leftovers left without their
	 * COMMIT: its own would not vouch for them. */
	if (rc && how != SETTLE_WRITER)
		rc = 0;
	if (!rc) {
		n = tail_locked(j, 1);
		rc = n < 0 ? (int)n : 0;
	}
out:
	j->hold = 0;
	pthread_mutex_unlock(&j->rmu);
	return rc;
}

/* recover and recover_look: a tail, then, when bytes remain, the lock
 * (LOCK_EX to write, LOCK_SH to look) and the settling. */
static int recover_as(struct mesh_journal *j, uint64_t *cut, enum settle_how how)
{
	struct stat st;
	long n;
	int rc;
	if (cut)
		*cut = 0;
	/* No look-ahead: settling walks what has no COMMIT, once. */
	pthread_mutex_lock(&j->rmu);
	n = tail_locked(j, 0);
	pthread_mutex_unlock(&j->rmu);
	if (n < 0)
		return (int)n;
	if (fstat(j->fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size <= mesh_journal_position(j))
		return 0;
	while (flock(j->fd, how == SETTLE_LOOK ? LOCK_SH : LOCK_EX) < 0)
		if (errno != EINTR)
			return -errno;
	rc = settle_locked(j, cut, how);
	flock(j->fd, LOCK_UN);
	return rc;
}

int mesh_journal_recover(struct mesh_journal *j, uint64_t *cut)
{
	return recover_as(j, cut, SETTLE_OPEN);
}

int mesh_journal_recover_look(struct mesh_journal *j)
{
	return recover_as(j, NULL, SETTLE_LOOK);
}

/* With LOCK_EX held: MESH_E_STALE when the path no longer names our file
 * (mesh job check --force renamed a rewritten journal over it). */
static int same_file_locked(struct mesh_journal *j)
{
	struct stat a, b;
	if (fstat(j->fd, &a) < 0)
		return -errno;
	if (stat(j->path, &b) < 0)
		return errno == ENOENT ? MESH_E_STALE : -errno;
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino ? 0 : MESH_E_STALE;
}

/* The leader commits every queued waiter's records. */
static void futex_wait(_Atomic uint32_t *word, uint32_t val)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word, int n)
{
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Writes the kept records at the end of the file (LOCK_EX held), makes them
 * durable, then commits them.  0 or the error of the write or fsync, after
 * taking the batch back. */
static int write_batch_locked(struct mesh_journal *j, const struct mesh_jrec *all, const int *keep, size_t nrec)
{
	struct stat st;
	size_t bytes = 0, pos = 0;
	uint64_t end, fold = 0;
	int rc;
	if (fstat(j->fd, &st) < 0)
		return -errno;
	end = (uint64_t)st.st_size;
	for (size_t k = 0; k < nrec; k++)
		if (keep[k])
			bytes += mesh_journal_size(all[k].len);
	if (!bytes)
		return 0;
	if (bytes + MESH_JOURNAL_COMMIT_SIZE > j->wcap) {
		unsigned char *nb = realloc(j->wbuf, bytes + MESH_JOURNAL_COMMIT_SIZE);
		if (!nb)
			return -ENOMEM;
		j->wbuf = nb;
		j->wcap = bytes + MESH_JOURNAL_COMMIT_SIZE;
	}
	/* The batch starts right after a COMMIT (settled above), so its
	 * COMMIT vouches for its records alone. */
	for (size_t k = 0; k < nrec; k++)
		if (keep[k]) {
			size_t sz = mesh_journal_encode(j->wbuf + pos, all[k].type, all[k].flags, all[k].data, all[k].len);
			fold = mesh_journal_fold(fold, j->wbuf + pos);
			pos += sz;
		}
	mesh_journal_encode_commit(j->wbuf + pos, fold);
	rc = mesh_pwrite_all(j->fd, j->wbuf, bytes, (off_t)end);
	if (!rc)
		rc = mesh_fdatasync(j->fd);
	/* Durable: the COMMIT lets every reader hand them out.  A batch whose
	 * COMMIT cannot be written fails like one whose fsync failed: the disk
	 * is refusing writes, and no reader has handed these records out yet. */
	if (!rc)
		rc = mesh_pwrite_all(j->fd, j->wbuf + bytes, MESH_JOURNAL_COMMIT_SIZE, (off_t)(end + bytes));
	if (rc) {
		/* No reader anywhere has handed these out (no COMMIT follows
		 * them); take them back so none ever will. */
		if (ftruncate(j->fd, (off_t)end) < 0)
			j->broken = -EIO;
		return rc;
	}
	j->batches++;
	for (size_t k = 0; k < nrec; k++)
		j->written += keep[k] ? 1 : 0;
	return 0;
}

static void commit(struct mesh_journal *j, struct waiter *list, uint32_t gen)
{
	size_t nrec = 0, k;
	struct mesh_jrec *all;
	int *keep;
	int rc = 0;

	for (struct waiter *w = list; w; w = w->next)
		nrec += w->n;
	all = malloc(nrec * sizeof *all + 1);
	keep = malloc(nrec * sizeof *keep + 1);
	if (!all || !keep) {
		rc = -ENOMEM;
		goto out;
	}
	k = 0;
	for (struct waiter *w = list; w; w = w->next)
		for (size_t i = 0; i < w->n; i++, k++) {
			all[k] = w->recs[i];
			keep[k] = 1;
		}
	if (j->broken) {
		rc = j->broken;
		goto out;
	}
	rc = mesh_flock_ex(j->fd);
	if (rc)
		goto out;
	rc = same_file_locked(j);
	if (!rc)
		rc = settle_locked(j, NULL, SETTLE_WRITER);
	if (!rc && j->prepare)
		rc = j->prepare(j->prepare_arg, all, nrec, keep);
	if (!rc)
		rc = write_batch_locked(j, all, keep, nrec);
	if (rc == MESH_E_STALE)
		j->broken = rc;
	flock(j->fd, LOCK_UN);
out:
	k = 0;
	pthread_mutex_lock(&j->gmu);
	for (struct waiter *w = list, *next; w; w = next) {
		next = w->next; /* w may be gone once done is set */
		for (size_t i = 0; i < w->n; i++, k++)
			if (w->keep)
				w->keep[i] = (keep && !rc) ? keep[k] : 0;
		w->rc = rc;
		atomic_store_explicit(&w->done, 1, memory_order_release);
	}
	j->leader = 0;
	/* One wake for the whole batch (its waiters sleep on one word), and one
	 * for a waiter of the next batch to lead: a signal per waiter made the
	 * leader spend more on wake-ups than on the fsync it shared.  Each word
	 * is bumped under gmu first, so a waiter between reading it and
	 * sleeping cannot miss its wake-up. */
	int next_batch = j->qhead != NULL;
	atomic_fetch_add(&j->wake[gen & 1], 1);
	if (next_batch)
		atomic_fetch_add(&j->wake[(gen + 1) & 1], 1);
	pthread_mutex_unlock(&j->gmu);
	futex_wake(&j->wake[gen & 1], INT_MAX);
	if (next_batch)
		futex_wake(&j->wake[(gen + 1) & 1], 1);
	free(all);
	free(keep);
}

int mesh_journal_append(struct mesh_journal *j, const struct mesh_jrec *recs, size_t n, int *keep)
{
	struct waiter w = {.recs = recs, .n = n, .keep = keep};
	for (size_t i = 0; i < n; i++)
		if (recs[i].len > MESH_JOURNAL_MAX_PAYLOAD || recs[i].type == 0 || recs[i].type == MESH_JREC_COMMIT)
			return MESH_E_TOOBIG;
	if (n == 0)
		return 0;
	pthread_mutex_lock(&j->gmu);
	w.gen = j->qgen;
	*j->qtail = &w;
	j->qtail = &w.next;
	for (;;) {
		if (atomic_load_explicit(&w.done, memory_order_acquire))
			break;
		if (!j->leader) {
			struct waiter *list = j->qhead;
			uint32_t gen = j->qgen++;
			j->qhead = NULL;
			j->qtail = &j->qhead;
			j->leader = 1;
			pthread_mutex_unlock(&j->gmu);
			commit(j, list, gen);
			pthread_mutex_lock(&j->gmu);
			continue;
		}
		_Atomic uint32_t *word = &j->wake[w.gen & 1];
		uint32_t seen = atomic_load(word);
		pthread_mutex_unlock(&j->gmu);
		futex_wait(word, seen);
		if (atomic_load_explicit(&w.done, memory_order_acquire))
			return w.rc;
		pthread_mutex_lock(&j->gmu);
	}
	pthread_mutex_unlock(&j->gmu);
	return w.rc;
}
