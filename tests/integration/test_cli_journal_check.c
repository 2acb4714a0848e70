/* `mesh job check` on damaged journals: a bad header, one flipped byte in
 * the middle; and what the other commands say about them. */
#include "journal/journal.h"
#include "runner/t.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char out[16384];

#define MESH(...) t_sh(out, sizeof out, 1, "%s job " __VA_ARGS__)
#define M t_bin("mesh")

static void flip(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	char c;
	ASSERT_EQ(pread(fd, &c, 1, at), 1);
	c ^= 0x40;
	ASSERT_EQ(pwrite(fd, &c, 1, at), 1);
	close(fd);
}

TEST(cli_job_check_bad_header_is_reported_and_forced)
{
	ASSERT_EQ(MESH("submit j.log 4", M), 0);
	ASSERT_EQ(MESH("complete j.log locks jb 1 n1", M), 0);
	flip("j.log", 17);
	EXPECT_EQ(MESH("status j.log locks jb 4", M), 65);
	EXPECT_EQ(MESH("check j.log", M), 65); /* used to say OK, exit 0 */
	EXPECT_CONTAINS(out, "header: bad checksum");
	EXPECT_CONTAINS(out, "CORRUPT");
	EXPECT_EQ(MESH("check j.log --force", M), 0);
	EXPECT_CONTAINS(out, "rewritten");
	EXPECT_CONTAINS(out, "REPAIRED");
	EXPECT_EQ(MESH("check j.log", M), 0);
	EXPECT_CONTAINS(out, "OK");
	EXPECT_EQ(MESH("status j.log locks jb 4", M), 1);
	EXPECT_CONTAINS(out, "done 1");
}

/* 500 DONE records, one byte flipped in the 248th: every command refuses
 * and names the repair; --force keeps 247 before and 252 after. */
TEST(cli_job_check_force_keeps_records_after_midfile_damage)
{
	ASSERT_EQ(MESH("submit j.log 500", M), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job harvest j.log locks jb 500 60 n1", M), 0);
	EXPECT_CONTAINS(out, "COMPLETE");
	EXPECT_EQ(MESH("check j.log", M), 0);
	EXPECT_CONTAINS(out, "done 500,");
	/* the 248th DONE: the journal holds header, SUBMIT + COMMIT, then the
	 * first batch NODE + DONE + COMMIT, then one DONE + COMMIT (24 + 16
	 * bytes) per chunk */
	const off_t commit = MESH_JOURNAL_COMMIT_SIZE;
	off_t at = 32 + 16 + commit;
	{
		unsigned char frame[8];
		int fd = open("j.log", O_RDONLY);
		ASSERT_EQ(pread(fd, frame, 8, at), 8);
		close(fd);
		ASSERT_EQ(frame[4], 2); /* NODE */
		at += (8 + frame[6] + 7) / 8 * 8 + 247 * (24 + commit);
	}
	flip("j.log", at + 10);
	EXPECT_EQ(MESH("status j.log locks jb 500", M), 65);
	EXPECT_CONTAINS(out, "mesh job check --force");
	EXPECT_EQ(MESH("complete j.log locks jb 3 n1", M), 65);
	EXPECT_CONTAINS(out, "mesh job check --force");
	EXPECT_EQ(MESH("check j.log", M), 65);
	EXPECT_CONTAINS(out, "done 499,");
	EXPECT_CONTAINS(out, "(24 bytes)");
	EXPECT_CONTAINS(out, "CORRUPT");
	EXPECT_EQ(MESH("check j.log --force", M), 0);
	EXPECT_CONTAINS(out, "dropped bytes");
	EXPECT_CONTAINS(out, "REPAIRED");
	EXPECT_EQ(MESH("status j.log locks jb 500", M), 1);
	EXPECT_CONTAINS(out, "done 499");
}

/* The record boundaries of a journal (offsets where each record starts,
 * and the file's size last); how many.  Types in types[]. */
static int records_of(const char *path, uint64_t *starts, unsigned char *types, int cap, uint64_t *size)
{
	char *s;
	size_t len;
	int n = 0;
	s = t_read_file(path, &len);
	if (!s)
		return -1;
	for (size_t off = MESH_JOURNAL_HDR_SIZE; off + 8 <= len && n < cap;) {
		unsigned rlen = (unsigned char)s[off + 6] | (unsigned)(unsigned char)s[off + 7] << 8;
		starts[n] = off;
		types[n++] = (unsigned char)s[off + 4];
		off += mesh_journal_size(rlen);
	}
	*size = len;
	free(s);
	return n;
}

/* "done N" of `mesh job status`, or -1 (with its exit code in *rc). */
static int status_done(const char *path, int *rc)
{
	*rc = MESH("status %s L tj 6", M, path);
	const char *p = strstr(out, "done ");
	return p ? atoi(p + 5) : -1;
}

/* Every reader and writer reads journal J (a copy of which each gets) the
 * same way: a chunk is DONE iff its DONE record is whole, whether the
 * COMMIT after it is whole, torn or missing.  status, status after check,
 * status after check --force, complete's answer and what mesh run runs
 * must agree on it. */
static void agree_on(const char *j, int want_done, uint64_t at)
{
	int rc, d;
	char tag[64];
	snprintf(tag, sizeof tag, "cut at %llu", (unsigned long long)at);
	/* status, read-only: counts it and changes nothing */
	t_sh(NULL, 0, 0, "cp %s a.log && rm -rf L", j);
	d = status_done("a.log", &rc);
	if (d != want_done || (rc != 0 && rc != 1))
		fprintf(stderr, "%s: status: done %d (exit %d), want %d: %s\n", tag, d, rc, want_done, out);
	EXPECT_EQ(d, want_done);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "cmp -s %s a.log", j), 0);
	/* check, or check --force, then status */
	static const char *checks[] = {"check", "check --force"};
	for (int k = 0; k < 2; k++) {
		t_sh(NULL, 0, 0, "cp %s b.log", j);
		EXPECT_EQ(MESH("%s b.log", M, checks[k]), 0);
		d = status_done("b.log", &rc);
		if (d != want_done)
			fprintf(stderr, "%s: status after %s: done %d, want %d\n", tag, checks[k], d, want_done);
		EXPECT_EQ(d, want_done);
	}
	/* complete of the last chunk: IGNORED iff it was DONE */
	t_sh(NULL, 0, 0, "cp %s d.log", j);
	rc = MESH("complete d.log L tj 3 n1", M);
	EXPECT_EQ(rc, 0);
	if (want_done == 4)
		EXPECT_CONTAINS(out, "IGNORED 3");
	else
		EXPECT_CONTAINS(out, "DONE 3");
	/* mesh run runs exactly the chunks not DONE */
	t_sh(NULL, 0, 0, "cp %s e.log && rm -rf L", j);
	rc = t_sh(out, sizeof out, 0, "%s run -j2 --journal e.log --chunks 6 -- echo 2>/dev/null | wc -l", M);
	EXPECT_EQ(rc, 0);
	if (atoi(out) != 6 - want_done)
		fprintf(stderr, "%s: mesh run ran %d chunks, want %d\n", tag, atoi(out), 6 - want_done);
	EXPECT_EQ(atoi(out), 6 - want_done);
}

/* The reproduction, generalised: `mesh job submit J 100`, complete
 * 0..49, `truncate -s -3 J`, `mesh job check J`: status said 49 done while
 * `complete ... 49` answered IGNORED 49, and check --force did not settle
 * it.  Here the journal is cut at every byte offset of its last three
 * records (the COMMIT before the last DONE, the last DONE, its COMMIT). */
TEST_TIMEOUT(cli_job_every_reader_and_writer_agree_on_a_torn_or_missing_commit, 240)
{
	ASSERT_EQ(MESH("submit J.log 6", M), 0);
	for (int c = 0; c < 4; c++)
		ASSERT_EQ(MESH("complete J.log L tj %d n1", M, c), 0);
	uint64_t starts[64], size;
	unsigned char types[64];
	int n = records_of("J.log", starts, types, 64, &size);
	ASSERT_GE(n, 3);
	ASSERT_EQ(types[n - 1], MESH_JREC_COMMIT);
	ASSERT_EQ(types[n - 2], 3); /* DONE */
	ASSERT_EQ(types[n - 3], MESH_JREC_COMMIT);
	uint64_t done_end = starts[n - 1];
	for (uint64_t at = starts[n - 3]; at <= size; at++) {
		t_sh(NULL, 0, 0, "cp J.log cut.log && truncate -s %llu cut.log", (unsigned long long)at);
		agree_on("cut.log", at >= done_end ? 4 : 3, at);
		if (t__failed)
			break;
	}
}

/* A journal from before COMMIT records (the same records, no COMMIT among
 * them): status said "no job submitted" while check said OK and mesh run
 * resumed.  Now every one reads it as the others do. */
TEST_TIMEOUT(cli_job_a_journal_without_commits_reads_the_same_everywhere, 60)
{
	ASSERT_EQ(MESH("submit J.log 6", M), 0);
	for (int c = 0; c < 4; c++)
		ASSERT_EQ(MESH("complete J.log L tj %d n1", M, c), 0);
	uint64_t starts[64], size;
	unsigned char types[64];
	int n = records_of("J.log", starts, types, 64, &size);
	ASSERT_GT(n, 0);
	/* old.log: the header and every record but the COMMITs */
	char *s = t_read_file("J.log", NULL);
	int fd = open("old.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(write(fd, s, MESH_JOURNAL_HDR_SIZE), MESH_JOURNAL_HDR_SIZE);
	for (int i = 0; i < n; i++) {
		uint64_t end = i + 1 < n ? starts[i + 1] : size;
		if (types[i] != MESH_JREC_COMMIT)
			ASSERT_EQ(write(fd, s + starts[i], end - starts[i]), (ssize_t)(end - starts[i]));
	}
	close(fd);
	free(s);
	agree_on("old.log", 4, 0);
}

/* The records that name a journal's work (its first batch: SUBMIT and,
 * from mesh run, WORK) are never dropped by a repair.  A damaged WORK
 * used to be dropped by check --force, and the journal then took any other
 * command: `mesh run --journal w.log --chunks 8 -- echo other` "completed"
 * 8/8 with 0 run, exit 0.  Now the repair refuses, says how to start
 * afresh, and changes nothing; a run of another command is refused. */
TEST(cli_job_check_force_never_drops_a_damaged_work_record)
{
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --journal w.log --chunks 8 -- true", M), 0);
	uint64_t starts[64], size;
	unsigned char types[64];
	int n = records_of("w.log", starts, types, 64, &size);
	ASSERT_GE(n, 2);
	ASSERT_EQ(types[1], 8); /* WORK, second */
	flip("w.log", (off_t)starts[1] + 10);
	t_sh(NULL, 0, 0, "cp w.log before.log");
	EXPECT_EQ(MESH("check --force w.log", M), 65);
	EXPECT_CONTAINS(out, "records that name");
	EXPECT_CONTAINS(out, "mv w.log");
	EXPECT_CONTAINS(out, "CORRUPT");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "cmp -s w.log before.log"), 0);
	/* what a plain check and an open say points at the fresh start, not at --force */
	EXPECT_EQ(MESH("check w.log", M), 65);
	EXPECT_CONTAINS(out, "records that name");
	EXPECT_NE(t_sh(out, sizeof out, 1, "%s run --journal w.log --chunks 8 -- echo other", M), 0);
	EXPECT_TRUE(strstr(out, "8/8") == NULL);
	EXPECT_EQ(MESH("status w.log L run 8", M), 65);
	EXPECT_CONTAINS(out, "mv w.log");
	EXPECT_TRUE(strstr(out, "--force") == NULL);
}

/* A flipped bit in the SUBMIT: check --force said REPAIRED, then check
 * said OK, and status and mesh run refused the journal forever ("no job
 * submitted").  Now the repair refuses the same way. */
TEST(cli_job_check_force_never_drops_a_damaged_submit)
{
	ASSERT_EQ(MESH("submit s.log 8", M), 0);
	ASSERT_EQ(MESH("complete s.log L s 1 n1", M), 0);
	flip("s.log", MESH_JOURNAL_HDR_SIZE + 9);
	t_sh(NULL, 0, 0, "cp s.log before.log");
	EXPECT_EQ(MESH("check --force s.log", M), 65);
	EXPECT_CONTAINS(out, "records that name");
	EXPECT_CONTAINS(out, "mv s.log");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "cmp -s s.log before.log"), 0);
	EXPECT_EQ(MESH("status s.log L s 8", M), 65);
	EXPECT_CONTAINS(out, "mv s.log");
	EXPECT_TRUE(strstr(out, "--force") == NULL);
	EXPECT_EQ(MESH("complete s.log L s 2 n1", M), 65);
	EXPECT_CONTAINS(out, "mv s.log");
}
