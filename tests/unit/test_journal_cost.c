/* What the journal reads: a tail costs what was appended since the last one,
 * never a walk of the whole file (docs/journal.md, "Who may trust a record"). */
#include "base/err.h"
#include "base/io.h"
#include "job/record.h"
#include "journal/journal.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define REC 24 /* a DONE record */

struct seen {
	uint64_t n, done, last;
};

static int count(void *arg, const struct mesh_jrec *r)
{
	struct seen *s = arg;
	s->n++;
	if (r->type == MESH_JREC_DONE) {
		s->done++;
		memcpy(&s->last, r->data, 8);
	}
	return 0;
}

static off_t fsize(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? st.st_size : -1;
}

/* Appends DONE records for cids first..first+n-1 straight to the file, no
 * COMMIT after them: what a writer that died before its COMMIT leaves, and
 * what a journal written before COMMIT existed holds.  commit adds one, for
 * a batch of the records before them of the given fold and these. */
static void raw_done(const char *path, uint64_t first, uint64_t n, int commit, uint64_t fold)
{
	unsigned char *buf = malloc(n * REC + MESH_JOURNAL_COMMIT_SIZE), pay[16] = {0};
	size_t len = 0;
	int fd = open(path, O_WRONLY | O_APPEND);
	ASSERT_TRUE(buf != NULL);
	ASSERT_GE(fd, 0);
	for (uint64_t i = 0; i < n; i++) {
		uint64_t c = first + i;
		memcpy(pay, &c, 8);
		mesh_journal_encode(buf + len, MESH_JREC_DONE, 0, pay, 16);
		fold = mesh_journal_fold(fold, buf + len);
		len += REC;
	}
	if (commit)
		len += mesh_journal_encode_commit(buf + len, fold);
	ASSERT_EQ(write(fd, buf, len), (ssize_t)len);
	close(fd);
	free(buf);
}

/* The fold of DONE records for cids 0..n-1 (raw_done's). */
static uint64_t kept_fold(uint64_t n)
{
	unsigned char rec[REC], pay[16] = {0};
	uint64_t fold = 0;
	for (uint64_t c = 0; c < n; c++) {
		memcpy(pay, &c, 8);
		mesh_journal_encode(rec, MESH_JREC_DONE, 0, pay, 16);
		fold = mesh_journal_fold(fold, rec);
	}
	return fold;
}

static void mk(const char *path, uint64_t n)
{
	struct mesh_jrec r = {MESH_JREC_SUBMIT, 0, 8, &n, 0};
	ASSERT_EQ(mesh_journal_create(path, &r), 0);
}

/* 150,000 uncommitted records (3.6 MB, more than a read chunk): a reader
 * that cannot adopt them walks them once; its next tails read only what is
 * new, not the whole run again; and once a writer adopts them (reading the
 * file at most twice, and a few chunks) the reader hands out every one. */
TEST(journal_uncommitted_run_is_walked_once)
{
	enum { N = 150000 };
	struct mesh_journal *r, *w;
	struct seen sr = {0}, sw = {0};
	uint64_t b0, size;
	mk("t.log", N + 10);
	raw_done("t.log", 0, N, 0, 0);
	size = (uint64_t)fsize("t.log");
	ASSERT_EQ(mesh_journal_open(&r, "t.log", count, &sr), 0);
	EXPECT_EQ(mesh_journal_tail(r), 1); /* the SUBMIT only */
	b0 = mesh__journal_bytes_read(r);
	for (int i = 0; i < 10; i++)
		EXPECT_EQ(mesh_journal_tail(r), 0);
	EXPECT_LT(mesh__journal_bytes_read(r) - b0, (uint64_t)64 << 10);

	ASSERT_EQ(mesh_journal_open(&w, "t.log", count, &sw), 0);
	ASSERT_EQ(mesh_journal_recover(w, NULL), 0);
	EXPECT_EQ(sw.done, N);
	EXPECT_LE(mesh__journal_bytes_read(w), 2 * size + ((uint64_t)3 << 20)); /* twice, and a few chunks */
	EXPECT_EQ(mesh_journal_tail(r), N);
	EXPECT_EQ(sr.done, N);
	EXPECT_EQ(sr.last, N - 1);
	EXPECT_EQ(mesh_journal_position(r), (uint64_t)fsize("t.log"));
	mesh_journal_close(r);
	mesh_journal_close(w);
}

/* The run a reader remembered is taken back (a commit in flight that
 * failed) and the file regrows with other records and a COMMIT, shorter or
 * longer than before: the reader hands out exactly the committed records. */
TEST(journal_remembered_run_taken_back_is_not_trusted)
{
	enum { N = 100000, KEEP = 50000 };
	const off_t base = 32 + 16 + MESH_JOURNAL_COMMIT_SIZE; /* header, SUBMIT, COMMIT */
	for (int longer = 0; longer < 2; longer++) {
		struct mesh_journal *r;
		struct seen s = {0};
		unlink("t.log");
		mk("t.log", 3 * N);
		raw_done("t.log", 0, N, 0, 0);
		ASSERT_EQ(mesh_journal_open(&r, "t.log", count, &s), 0);
		EXPECT_EQ(mesh_journal_tail(r), 1);
		EXPECT_EQ(mesh_journal_tail(r), 0);
		ASSERT_EQ(truncate("t.log", base + (off_t)KEEP * REC), 0);
		raw_done("t.log", N, longer ? N : 10, 1, kept_fold(KEEP));
		EXPECT_EQ(mesh_journal_tail(r), KEEP + (longer ? N : 10));
		EXPECT_EQ(s.done, KEEP + (longer ? N : 10));
		EXPECT_EQ(s.last, N + (longer ? N : 10) - 1);
		EXPECT_EQ(mesh_journal_position(r), (uint64_t)fsize("t.log"));
		mesh_journal_close(r);
	}
}

struct big_writer {
	struct mesh_journal *j;
	int rounds, committed[64];
	_Atomic int finished;
};

enum { BIG = 60000 }; /* 1.44 MB: more than a read chunk */

static void *big_write(void *p)
{
	struct big_writer *w = p;
	struct mesh_jrec *recs = calloc(BIG, sizeof *recs);
	unsigned char *pay = calloc(BIG, 16);
	for (int r = 0; recs && pay && r < w->rounds; r++) {
		for (uint64_t i = 0; i < BIG; i++) {
			uint64_t c = (uint64_t)r * BIG + i;
			memcpy(pay + 16 * i, &c, 8);
			recs[i] = (struct mesh_jrec){MESH_JREC_DONE, 0, 16, pay + 16 * i, 0};
		}
		if (r % 3 == 1) /* this batch's fsync fails: it is taken back */
			mesh_fault_arm(MESH_FAULT_FSYNC, EIO, 0, 0);
		w->committed[r] = mesh_journal_append(w->j, recs, BIG, NULL) == 0;
		mesh_fault_disarm();
	}
	free(recs);
	free(pay);
	atomic_store(&w->finished, 1);
	return NULL;
}

struct in_order {
	uint64_t n, next_ok, bad, per_round[64];
};

static int check_order(void *arg, const struct mesh_jrec *r)
{
	struct in_order *o = arg;
	uint64_t c;
	if (r->type != MESH_JREC_DONE)
		return 0;
	memcpy(&c, r->data, 8);
	/* in order, each batch from its start (which batches: at the end) */
	if ((o->n && c < o->next_ok) || (c % BIG != 0 && c != o->next_ok) || c / BIG >= 64)
		o->bad++;
	else
		o->per_round[c / BIG]++;
	o->next_ok = c + 1;
	o->n++;
	return 0;
}

/* Batches longer than a read chunk, every third taken back after a failed
 * fsync and the file regrown by the next one, while another handle tails
 * as fast as it can: what it walked and remembered of a batch in flight
 * never makes it miss or invent a record. */
TEST(journal_tail_across_big_batches_taken_back)
{
	struct big_writer w = {.rounds = 12};
	struct in_order o = {0};
	struct mesh_journal *r;
	pthread_t th;
	int expect = 0;
	mk("t.log", (uint64_t)BIG * 12);
	ASSERT_EQ(mesh_journal_open(&w.j, "t.log", NULL, NULL), 0);
	ASSERT_EQ(mesh_journal_open(&r, "t.log", check_order, &o), 0);
	ASSERT_EQ(pthread_create(&th, NULL, big_write, &w), 0);
	while (!atomic_load(&w.finished))
		ASSERT_GE(mesh_journal_tail(r), 0);
	pthread_join(th, NULL);
	ASSERT_GE(mesh_journal_tail(r), 0);
	for (int i = 0; i < w.rounds; i++) {
		expect += w.committed[i];
		EXPECT_EQ(o.per_round[i], w.committed[i] ? (uint64_t)BIG : 0); /* committed ones whole, no other */
	}
	EXPECT_EQ(expect, 8);
	EXPECT_EQ(o.n, (uint64_t)expect * BIG);
	EXPECT_EQ(o.bad, 0);
	EXPECT_EQ(mesh_journal_position(r), (uint64_t)fsize("t.log"));
	mesh_journal_close(r);
	mesh_journal_close(w.j);
}
