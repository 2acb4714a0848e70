/* A job's results file (job/results.h): records, index, torn tails, and
 * the rule that a DONE chunk always has its result. */
#include "base/err.h"
#include "job/job.h"
#include "job/results.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static off_t fsize(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? st.st_size : -1;
}

static void expect_result(struct mesh_results *r, uint64_t cid, const char *want)
{
	void *d = NULL;
	size_t n = 0;
	int rc = mesh_results_get(r, cid, MESH_RESULT_OK, &d, &n);
	EXPECT_EQ(rc, 0);
	if (rc == 0) {
		EXPECT_UEQ(n, strlen(want));
		EXPECT_STREQ(d, want);
	}
	free(d);
}

TEST(results_append_get_reopen)
{
	struct mesh_results *r;
	ASSERT_EQ(mesh_results_open(&r, "res.bin", 4, NULL), 0);
	EXPECT_EQ(fsize("res.bin"), 16);
	void *d;
	size_t n;
	EXPECT_EQ(mesh_results_get(r, 0, MESH_RESULT_OK, &d, &n), -ENOENT);
	EXPECT_EQ(mesh_results_get(r, 4, MESH_RESULT_OK, &d, &n), MESH_E_RANGE);
	EXPECT_EQ(mesh_results_append(r, 4, MESH_RESULT_OK, "x", 1), MESH_E_RANGE);
	ASSERT_EQ(mesh_results_append(r, 2, MESH_RESULT_OK, "two", 3), 0);
	ASSERT_EQ(mesh_results_append(r, 0, MESH_RESULT_OK, "", 0), 0);
	ASSERT_EQ(mesh_results_append(r, 2, MESH_RESULT_OK, "second copy", 11), 0);
	ASSERT_EQ(mesh_results_append(r, 3, MESH_RESULT_FAILURE, "signal 11\nlast line", 19), 0);
	ASSERT_EQ(mesh_results_sync(r), 0);
	expect_result(r, 2, "two"); /* the first record of a chunk is its result */
	expect_result(r, 0, "");
	EXPECT_EQ(mesh_results_has(r, 3), 0);
	EXPECT_EQ(mesh_results_has(r, 2), 1);
	ASSERT_EQ(mesh_results_get(r, 3, MESH_RESULT_FAILURE, &d, &n), 0);
	EXPECT_STREQ(d, "signal 11\nlast line");
	free(d);
	mesh_results_close(r);

	uint64_t cut = 99;
	ASSERT_EQ(mesh_results_open(&r, "res.bin", 4, &cut), 0);
	EXPECT_UEQ(cut, 0);
	expect_result(r, 2, "two");
	expect_result(r, 0, "");
	mesh_results_close(r);

	/* A journal is not a results file. */
	t_write_file("j.log", "MESHJRNL and more bytes than a header");
	EXPECT_EQ(mesh_results_open(&r, "j.log", 4, NULL), MESH_E_FOREIGN);
}

/* Results are read through a window of the file (one read for the records
 * after the one asked for): sizes around and past its 256 KiB and its
 * 64 KiB direct-read bound, in and out of order, with records still in the
 * append buffer and appends between reads, all come back whole; a torn
 * tail read into the window at the open is not served after the cut. */
static size_t size_of(uint64_t cid)
{
	return cid % 97 == 0 ? 70000 + cid : cid % 13 == 0 ? 300000 + cid : cid % 7;
}
static void expect_pattern(struct mesh_results *r, uint64_t cid)
{
	void *d = NULL;
	size_t n = 0;
	ASSERT_EQ(mesh_results_get(r, cid, MESH_RESULT_OK, &d, &n), 0);
	EXPECT_UEQ(n, size_of(cid));
	const unsigned char *b = d;
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += b[i] != (unsigned char)(cid * 31 + i);
	EXPECT_UEQ(bad, 0);
	free(d);
}
TEST(results_read_through_the_window_in_and_out_of_order)
{
	enum { N = 600 };
	struct mesh_results *r;
	ASSERT_EQ(mesh_results_open(&r, "res.bin", N, NULL), 0);
	unsigned char *buf = malloc(400000);
	ASSERT_TRUE(buf != NULL);
	for (uint64_t cid = 0; cid < N; cid++) {
		for (size_t i = 0; i < size_of(cid); i++)
			buf[i] = (unsigned char)(cid * 31 + i);
		ASSERT_EQ(mesh_results_append(r, cid, MESH_RESULT_OK, buf, size_of(cid)), 0);
		if (cid % 50 == 49)
			ASSERT_EQ(mesh_results_sync(r), 0);
		if (cid % 40 == 39) /* reads between appends, some still buffered */
			for (uint64_t k = 0; k <= cid; k += 17)
				expect_pattern(r, k);
	}
	for (uint64_t cid = 0; cid < N; cid++)
		expect_pattern(r, cid);
	for (uint64_t cid = N; cid-- > 0;)
		expect_pattern(r, cid);
	ASSERT_EQ(mesh_results_sync(r), 0);
	mesh_results_close(r);
	/* A torn tail: half a record more, cut at the open; a record written
	 * after it is read, not the torn bytes. */
	off_t size = fsize("res.bin");
	int fd = open("res.bin", O_WRONLY | O_APPEND);
	ASSERT_TRUE(fd >= 0);
	static const char torn[60] = "RESR\x01\0\0\0garbage longer than the record written after it";
	ASSERT_EQ(write(fd, torn, sizeof torn), (ssize_t)sizeof torn);
	close(fd);
	uint64_t cut = 0;
	ASSERT_EQ(mesh_results_open(&r, "res.bin", N + 1, &cut), 0);
	EXPECT_UEQ(cut, sizeof torn);
	EXPECT_EQ(fsize("res.bin"), size);
	ASSERT_EQ(mesh_results_append(r, N, MESH_RESULT_OK, "after the cut", 13), 0);
	ASSERT_EQ(mesh_results_sync(r), 0);
	expect_pattern(r, N - 1);
	expect_result(r, N, "after the cut");
	for (uint64_t cid = 0; cid < N; cid += 7)
		expect_pattern(r, cid);
	mesh_results_close(r);
	free(buf);
}

/* Appends are buffered (one write for many records, docs/jobs.md
 * "Throughput"): readable at once, on disk at the sync; a write that fails
 * keeps them, and the sync says so until they are written. */
TEST(results_appends_are_written_at_the_sync_and_a_failed_write_keeps_them)
{
	struct mesh_results *r;
	struct rlimit rl;
	ASSERT_EQ(mesh_results_open(&r, "res.bin", 8, NULL), 0);
	ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &rl), 0);
	signal(SIGXFSZ, SIG_IGN); /* a write past the limit: EFBIG */
	struct rlimit small = {64, rl.rlim_max};
	ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
	char big[100];
	memset(big, 'b', sizeof big - 1);
	big[sizeof big - 1] = 0;
	ASSERT_EQ(mesh_results_append(r, 1, MESH_RESULT_OK, "one", 3), 0);
	ASSERT_EQ(mesh_results_append(r, 5, MESH_RESULT_OK, big, strlen(big)), 0);
	EXPECT_EQ(fsize("res.bin"), 16); /* nothing written yet */
	expect_result(r, 1, "one");	  /* read from the buffer */
	expect_result(r, 5, big);
	EXPECT_EQ(mesh_results_sync(r), -EFBIG);
	EXPECT_EQ(fsize("res.bin"), 16); /* no torn part stays */
	EXPECT_EQ(mesh_results_sync(r), -EFBIG); /* not "nothing to sync" */
	expect_result(r, 5, big);
	ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
	ASSERT_EQ(mesh_results_append(r, 2, MESH_RESULT_OK, "two", 3), 0);
	ASSERT_EQ(mesh_results_sync(r), 0);
	EXPECT_EQ(fsize("res.bin"), 16 + 3 * 24 + 3 + 99 + 3);
	mesh_results_close(r);
	uint64_t cut = 99;
	ASSERT_EQ(mesh_results_open(&r, "res.bin", 8, &cut), 0);
	EXPECT_UEQ(cut, 0);
	expect_result(r, 1, "one");
	expect_result(r, 5, big);
	expect_result(r, 2, "two");
	mesh_results_close(r);
}

TEST(results_torn_tail_is_cut_and_appends_go_on)
{
	struct mesh_results *r;
	ASSERT_EQ(mesh_results_open(&r, "res.bin", 10, NULL), 0);
	ASSERT_EQ(mesh_results_append(r, 1, MESH_RESULT_OK, "one", 3), 0);
	ASSERT_EQ(mesh_results_append(r, 5, MESH_RESULT_OK, "five!", 5), 0);
	mesh_results_close(r);
	off_t whole = fsize("res.bin");
	/* A record cut in its payload, as a writer killed mid-write leaves it. */
	ASSERT_EQ(truncate("res.bin", whole - 2), 0);
	uint64_t cut = 0;
	ASSERT_EQ(mesh_results_open(&r, "res.bin", 10, &cut), 0);
	EXPECT_UEQ(cut, (uint64_t)(whole - 2 - (16 + 24 + 3)));
	EXPECT_EQ(fsize("res.bin"), 16 + 24 + 3);
	expect_result(r, 1, "one");
	EXPECT_EQ(mesh_results_has(r, 5), 0);
	ASSERT_EQ(mesh_results_append(r, 5, MESH_RESULT_OK, "five again", 10), 0);
	mesh_results_close(r);
	/* A flipped payload byte: the record and everything after it go. */
	int fd = open("res.bin", O_RDWR);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(pwrite(fd, "X", 1, 16 + 24 + 3 + 24 + 2), 1);
	close(fd);
	ASSERT_EQ(mesh_results_open(&r, "res.bin", 10, &cut), 0);
	EXPECT_UEQ(cut, 24 + 10);
	expect_result(r, 1, "one");
	EXPECT_EQ(mesh_results_has(r, 5), 0);
	mesh_results_close(r);
}

/* The crash test of the durability rule: a node appends results, syncs
 * them, then completes their chunks in one batch; SIGKILL lands between
 * the results sync and the journal's commit, or before the results sync.
 * Whatever the journal calls DONE has its result, byte for byte. */
TEST(results_sigkill_between_the_two_fsyncs_loses_nothing_done)
{
	for (int where = 0; where < 2; where++) {
		char jpath[32], rpath[32];
		snprintf(jpath, sizeof jpath, "j%d.log", where);
		snprintf(rpath, sizeof rpath, "r%d.bin", where);
		const uint64_t n = 200;
		ASSERT_EQ(mesh_job_submit(jpath, n), 0);
		pid_t pid = fork();
		ASSERT_GE(pid, 0);
		if (pid == 0) {
			struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
			struct mesh_job *j;
			struct mesh_results *r;
			o.journal = jpath;
			o.nchunks = n;
			if (mesh_job_open(&j, &o) || mesh_results_open(&r, rpath, n, NULL))
				_exit(2);
			for (uint64_t b = 0; b < n / 10; b++) {
				uint64_t cids[10], durs[10] = {0};
				int res[10];
				for (int i = 0; i < 10; i++) {
					char v[32];
					cids[i] = b * 10 + (uint64_t)i;
					snprintf(v, sizeof v, "result of %" PRIu64, cids[i]);
					if (mesh_results_append(r, cids[i], MESH_RESULT_OK, v, strlen(v)))
						_exit(3);
				}
				if (b == 7 && where == 1)
					kill(getpid(), SIGKILL); /* results written, not synced, not DONE */
				if (mesh_results_sync(r))
					_exit(4);
				if (b == 7 && where == 0)
					kill(getpid(), SIGKILL); /* results synced, DONE not written */
				if (mesh_job_complete_many(j, cids, durs, 10, res))
					_exit(5);
			}
			_exit(0);
		}
		int st;
		ASSERT_EQ(waitpid(pid, &st, 0), pid);
		ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
		struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
		struct mesh_job *j;
		struct mesh_results *r;
		o.journal = jpath;
		o.nchunks = n;
		o.read_only = 1;
		ASSERT_EQ(mesh_job_open(&j, &o), 0);
		ASSERT_EQ(mesh_results_open(&r, rpath, n, NULL), 0);
		uint64_t done = 0;
		for (uint64_t c = 0; c < n; c++) {
			if (mesh_job_is_done(j, c) != 1)
				continue;
			done++;
			char v[32];
			snprintf(v, sizeof v, "result of %" PRIu64, c);
			expect_result(r, c, v);
		}
		EXPECT_UEQ(done, 70);
		mesh_results_close(r);
		mesh_job_close(j);
	}
}
