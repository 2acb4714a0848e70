/* Failed fsyncs and what other processes believe (docs/journal.md, "Who may
 * trust a record").  This file defines fdatasync itself: the test binary's
 * definition wins over libc's for every call in libmesh, so a test can make
 * one process's fsync slow and failing while the others run normally. */
#include "base/err.h"
#include "job/record.h"
#include "journal/journal.h"
#include "runner/t.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* 0: the real fdatasync.  1: tell the test over gate_tell, wait for a byte
 * on gate_wait, then fail with EIO (a slow failing disk under a test's
 * control).  2: fail at random (fail_per_mille) after a short delay. */
static int fsync_mode;
static int gate_tell = -1, gate_wait = -1;
static unsigned fail_per_mille, rnd;

int fdatasync(int fd)
{
	if (fsync_mode == 1) {
		char c = 'w';
		fsync_mode = 0; /* once */
		if (write(gate_tell, &c, 1) != 1 || read(gate_wait, &c, 1) != 1)
			abort();
		errno = EIO;
		return -1;
	}
	if (fsync_mode == 2 && (unsigned)rand_r(&rnd) % 1000 < fail_per_mille) {
		struct timespec ts = {0, 200000 + (long)(rand_r(&rnd) % 800000)};
		nanosleep(&ts, NULL); /* the window in which others may look */
		errno = EIO;
		return -1;
	}
	return (int)syscall(SYS_fdatasync, fd);
}

/* pread, defined here for the same reason: splice_hook, when set, runs once
 * right after a read that came back short (the end of the file then), before
 * the caller sees it, so a test can change the file between a reader's two
 * reads. */
static void (*splice_hook)(void);

ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
	ssize_t got = (ssize_t)syscall(SYS_pread64, fd, buf, n, off);
	if (got > 0 && (size_t)got < n && splice_hook) {
		void (*h)(void) = splice_hook;
		splice_hook = NULL;
		h();
	}
	return got;
}

ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
	return pread(fd, buf, n, off);
}

struct view {
	uint64_t n;
	unsigned char done[4096];
	uint64_t dones, others;
	uint64_t at[64][2]; /* the offsets of the first two DONE records of cids < 64 */
};

static int see(void *arg, const struct mesh_jrec *r)
{
	struct view *v = arg;
	uint64_t cid;
	if (r->type == MESH_JREC_SUBMIT) {
		memcpy(&v->n, r->data, 8);
	} else if (r->type == MESH_JREC_DONE) {
		memcpy(&cid, r->data, 8);
		if (cid < 64 && v->done[cid] < 2)
			v->at[cid][v->done[cid]] = r->off;
		if (cid < sizeof v->done)
			v->done[cid]++;
		v->dones++;
	} else {
		v->others++;
	}
	return 0;
}

static void mk(const char *path, uint64_t n)
{
	struct mesh_jrec r = {MESH_JREC_SUBMIT, 0, 8, &n, 0};
	ASSERT_EQ(mesh_journal_create(path, &r), 0);
}

static int append_done(struct mesh_journal *j, uint64_t cid, int *keep)
{
	unsigned char p[16] = {0};
	struct mesh_jrec r = {MESH_JREC_DONE, 0, 16, p, 0};
	memcpy(p, &cid, 8);
	return mesh_journal_append(j, &r, 1, keep);
}

/* The reproduction.  A appends a record and its fsync hangs, then
 * fails; B tails meanwhile; then C appends two DONE records and B appends
 * one.  B must never have handed out A's record, and B's append must not
 * cut C's durable records at a stale offset. */
TEST(journal_failed_fsync_is_never_seen_or_cut_by_others)
{
	int tell[2], go[2], st;
	struct view vb = {0}, vf = {0};
	struct mesh_journal *b, *c, *f;
	struct mesh_journal_report rep;
	mk("x.log", 10);
	ASSERT_EQ(pipe(tell), 0);
	ASSERT_EQ(pipe(go), 0);
	ASSERT_EQ(mesh_journal_open(&b, "x.log", see, &vb), 0);
	ASSERT_EQ(mesh_journal_recover(b, NULL), 0);
	EXPECT_EQ(vb.n, 10);
	pid_t a = fork();
	if (a == 0) {
		struct mesh_journal *ja;
		/* a NODE record longer than a DONE, so that a stale offset
		 * lands inside the records C writes later */
		struct mesh_jrec r = {MESH_JREC_NODE, 0, 20, "0123node-name-abcdef", 0};
		gate_tell = tell[1];
		gate_wait = go[0];
		fsync_mode = 1;
		if (mesh_journal_open(&ja, "x.log", NULL, NULL))
			_exit(1);
		_exit(mesh_journal_append(ja, &r, 1, NULL) == -EIO ? 0 : 2);
	}
	char ch;
	ASSERT_EQ(read(tell[0], &ch, 1), 1); /* A's record is in the file, its fsync pending */
	EXPECT_EQ(mesh_journal_tail(b), 0);   /* not durable: not handed out */
	EXPECT_EQ(vb.others, 0);
	ASSERT_EQ(write(go[1], "g", 1), 1);
	ASSERT_EQ(waitpid(a, &st, 0), a);
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ASSERT_EQ(mesh_journal_open(&c, "x.log", NULL, NULL), 0);
	ASSERT_EQ(append_done(c, 2, NULL), 0);
	ASSERT_EQ(append_done(c, 3, NULL), 0);
	ASSERT_EQ(append_done(b, 4, NULL), 0);
	mesh_journal_close(c);
	EXPECT_GE(mesh_journal_tail(b), 0);
	EXPECT_EQ(vb.others, 0);
	EXPECT_EQ(vb.done[2] + vb.done[3] + vb.done[4], 3);
	mesh_journal_close(b);
	/* the final journal: C's and B's DONEs, nothing of A's, sound */
	ASSERT_EQ(mesh_journal_open(&f, "x.log", see, &vf), 0);
	ASSERT_EQ(mesh_journal_recover(f, NULL), 0);
	mesh_journal_close(f);
	EXPECT_EQ(vf.dones, 3);
	EXPECT_EQ(vf.done[2] + vf.done[3] + vf.done[4], 3);
	EXPECT_EQ(vf.others, 0);
	EXPECT_EQ(mesh_job_journal_check("x.log", 0, &rep), 0);
}

/* What splice_world does, between a reader's short read and the next. */
static int splice_go = -1;
static pid_t splice_writer;

static void splice_world(void)
{
	struct mesh_journal *c;
	int st;
	/* the writer's fsync fails: its DONE 5 is taken back */
	if (write(splice_go, "g", 1) != 1 || waitpid(splice_writer, &st, 0) != splice_writer)
		abort();
	/* three commits from another process take its place and more */
	if (mesh_journal_open(&c, "x.log", NULL, NULL))
		abort();
	for (uint64_t cid = 7; cid <= 9; cid++)
		if (append_done(c, cid, NULL))
			abort();
	mesh_journal_close(c);
}

/* The stress test's double DONE, made certain.  A reader's read stops at
 * the end of the file, where a batch's fsync is pending (DONE 5); before its
 * next read that batch is taken back and three others are committed in its
 * place (DONE 7, 8, 9).  Joined, the two reads showed DONE 5 followed by
 * DONE 7's COMMIT: a reader believed 5 DONE and never saw 7, so its process
 * would complete 7 again.  The reader must hand out exactly 7, 8 and 9. */
TEST(journal_reader_never_joins_two_states_of_a_taken_back_batch)
{
	int tell[2], go[2];
	struct view vb = {0}, vf = {0};
	struct mesh_journal *b, *f;
	char ch;
	mk("x.log", 10);
	ASSERT_EQ(pipe(tell), 0);
	ASSERT_EQ(pipe(go), 0);
	ASSERT_EQ(mesh_journal_open(&b, "x.log", see, &vb), 0);
	ASSERT_EQ(mesh_journal_recover(b, NULL), 0);
	splice_writer = fork();
	if (splice_writer == 0) {
		struct mesh_journal *ja;
		gate_tell = tell[1];
		gate_wait = go[0];
		fsync_mode = 1;
		if (mesh_journal_open(&ja, "x.log", NULL, NULL))
			_exit(1);
		_exit(append_done(ja, 5, NULL) == -EIO ? 0 : 2);
	}
	ASSERT_EQ(read(tell[0], &ch, 1), 1); /* DONE 5 is in the file, its fsync pending */
	splice_go = go[1];
	splice_hook = splice_world;
	EXPECT_GE(mesh_journal_tail(b), 0);
	EXPECT_TRUE(splice_hook == NULL); /* the short read happened */
	splice_hook = NULL;
	EXPECT_GE(mesh_journal_tail(b), 0);
	EXPECT_EQ(vb.done[5], 0);
	EXPECT_EQ(vb.done[7], 1);
	EXPECT_EQ(vb.done[8], 1);
	EXPECT_EQ(vb.done[9], 1);
	EXPECT_EQ(vb.dones, 3);
	mesh_journal_close(b);
	ASSERT_EQ(mesh_journal_open(&f, "x.log", see, &vf), 0);
	ASSERT_EQ(mesh_journal_recover(f, NULL), 0);
	mesh_journal_close(f);
	EXPECT_EQ(vf.dones, 3);
	EXPECT_EQ(vf.done[5], 0);
}

/* The prepare hook of the stress workers: drop a DONE for a chunk already
 * DONE in this process's view (which the tail just brought up to date). */
static int dedupe(void *arg, const struct mesh_jrec *recs, size_t n, int *keep)
{
	struct mesh_journal *j = *(struct mesh_journal **)arg;
	struct view *v = (struct view *)((struct mesh_journal **)arg + 1)[0];
	long t = mesh_journal_tail(j);
	if (t < 0)
		return (int)t;
	for (size_t i = 0; i < n; i++) {
		uint64_t cid;
		memcpy(&cid, recs[i].data, 8);
		if (v->done[cid])
			keep[i] = 0;
	}
	return 0;
}

#define NCHUNK 48

/* One stress worker: completes chunks its view does not hold as DONE until
 * every chunk is DONE in its view; its fsyncs fail at random.  It writes to
 * fd, one line each, every chunk it acted on: "A cid" for a DONE it was
 * told is durable, "I cid" for a completion answered IGNORED, "S cid" for a
 * DONE its tail handed out.  Exits 0 when it saw the job complete. */
static void stress_worker(const char *path, int fd, unsigned seed)
{
	struct view v = {0};
	struct mesh_journal *j;
	void *hook[2];
	FILE *out = fdopen(fd, "w");
	rnd = seed;
	fsync_mode = 2;
	fail_per_mille = 150;
	if (!out || mesh_journal_open(&j, path, see, &v) || mesh_journal_recover(j, NULL))
		_exit(3);
	hook[0] = j;
	hook[1] = &v;
	mesh_journal_set_prepare(j, dedupe, hook);
	for (int iter = 0; iter < 100000; iter++) {
		uint64_t cid, left = 0;
		unsigned char before[NCHUNK];
		int keep = 0, rc;
		memcpy(before, v.done, NCHUNK);
		if (mesh_journal_tail(j) < 0)
			_exit(4);
		for (uint64_t c = 0; c < NCHUNK; c++) {
			if (v.done[c] && !before[c])
				fprintf(out, "S %llu\n", (unsigned long long)c);
			left += !v.done[c];
		}
		if (!left) {
			fclose(out);
			_exit(0);
		}
		cid = (uint64_t)rand_r(&rnd) % NCHUNK;
		if (v.done[cid])
			continue;
		rc = append_done(j, cid, &keep);
		if (rc == 0)
			fprintf(out, "%c %llu\n", keep ? 'A' : 'I', (unsigned long long)cid);
		else if (rc != -EIO)
			_exit(5);
	}
	_exit(6);
}

static int stress_seconds(void)
{
	const char *e = getenv("MESH_STRESS_SECONDS");
	int s = e ? atoi(e) : 2;
	return s < 1 ? 1 : s > 600 ? 600 : s;
}

/* Several processes complete the chunks of one job while random fsyncs
 * fail, round after round for MESH_STRESS_SECONDS (2 by default; `make
 * check` sets 30).  After each round: every chunk any process acted on as
 * DONE is DONE in the final journal, no chunk has two DONE records, every
 * chunk is DONE, and the journal checks sound. */
TEST_TIMEOUT(journal_stress_failing_fsyncs_lose_nothing, 660)
{
	time_t stop = time(NULL) + stress_seconds();
	unsigned long long lost = 0, doubles = 0, missing = 0, acted = 0, rounds = 0;
	for (int round = 0; time(NULL) < stop || round == 0; round++) {
		char path[32];
		const int P = 4;
		pid_t pid[4];
		int st;
		struct view fin = {0};
		struct mesh_journal *f;
		struct mesh_journal_report rep;
		snprintf(path, sizeof path, "s%d.log", round);
		mk(path, NCHUNK);
		for (int i = 0; i < P; i++) {
			char rp[32];
			snprintf(rp, sizeof rp, "s%d.%d.txt", round, i);
			FILE *o = fopen(rp, "w");
			ASSERT_TRUE(o != NULL);
			pid[i] = fork();
			if (pid[i] == 0)
				stress_worker(path, fileno(o), (unsigned)(getpid() * 7919 + round));
			fclose(o);
		}
		for (int i = 0; i < P; i++) {
			ASSERT_EQ(waitpid(pid[i], &st, 0), pid[i]);
			EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		}
		ASSERT_EQ(mesh_journal_open(&f, path, see, &fin), 0);
		ASSERT_EQ(mesh_journal_recover(f, NULL), 0);
		mesh_journal_close(f);
		for (int i = 0; i < P; i++) {
			char rp[32], kind;
			unsigned long long cid;
			snprintf(rp, sizeof rp, "s%d.%d.txt", round, i);
			FILE *in = fopen(rp, "r");
			ASSERT_TRUE(in != NULL);
			while (fscanf(in, " %c %llu", &kind, &cid) == 2) {
				acted++;
				if (cid >= NCHUNK || !fin.done[cid])
					lost++;
			}
			fclose(in);
		}
		for (int c = 0; c < NCHUNK; c++) {
			doubles += fin.done[c] > 1;
			missing += fin.done[c] == 0;
		}
		EXPECT_EQ(mesh_job_journal_check(path, 0, &rep), 0);
		rounds++;
		if (lost || doubles || missing) {
			/* what a diagnosis needs (the files go with the test's
			 * directory): each bad chunk's DONE offsets and every
			 * worker's acts on it */
			for (int c = 0; c < NCHUNK; c++) {
				if (fin.done[c] == 1)
					continue;
				printf("    round %d chunk %d: %d DONE records (at %llu, %llu)\n", round, c, fin.done[c],
				       (unsigned long long)fin.at[c][0], (unsigned long long)fin.at[c][1]);
				for (int i = 0; i < P; i++) {
					char rp[32], kind;
					unsigned long long cid;
					snprintf(rp, sizeof rp, "s%d.%d.txt", round, i);
					FILE *in = fopen(rp, "r");
					for (int line = 0; in && fscanf(in, " %c %llu", &kind, &cid) == 2; line++)
						if (cid == (unsigned long long)c)
							printf("      worker %d, act %d: %c\n", i, line, kind);
					if (in)
						fclose(in);
				}
			}
			break;
		}
	}
	printf("    %llu rounds, %llu acts: %llu lost, %llu double DONE, %llu chunks never DONE\n", rounds, acted,
	       lost, doubles, missing);
	EXPECT_EQ(lost, 0);
	EXPECT_EQ(doubles, 0);
	EXPECT_EQ(missing, 0);
	EXPECT_GT(acted, 0);
}
