/* `mesh job check` on damaged journals: a bad header, one flipped byte in
 * the middle; and what the other commands say about them. */
#include "journal/journal.h"
#include "runner/t.h"

#include <fcntl.h>
#include <stdio.h>
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
