/* `mesh run` with several records a command (-N, -n, -m, -X, --xargs), as
 * GNU parallel's users type them: the real binary. */
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MESH t_bin("mesh")

/* A grouped run that fails one group resumes that group alone: the groups
 * are the journal's chunks, named by their boundaries. */
TEST(run_grouped_records_fail_and_resume_by_group)
{
	char out[4096];
	const char *cmd = "'test {1} != c || test -e ok && echo {1}{2} >> out' ::: a b c d e f";
	int rc = t_sh(out, sizeof out, 1, "%s run -j1 -N2 %s", MESH, cmd);
	EXPECT_EQ(rc, 1); /* one failed chunk: the group (c, d) */
	char *s = t_read_file("out", NULL);
	EXPECT_STREQ(s ? s : "", "ab\nef\n");
	free(s);
	/* its journal is kept for the rerun */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "ls .mesh-run-*.log | wc -l"), 0);
	EXPECT_STREQ(out, "1\n");
	t_write_file("ok", "");
	rc = t_sh(out, sizeof out, 1, "%s run -j1 -N2 %s", MESH, cmd);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "resuming: 2/3 chunks already done");
	s = t_read_file("out", NULL);
	EXPECT_STREQ(s ? s : "", "ab\nef\ncd\n");
	free(s);
	/* the journal is removed when complete: nothing left */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "ls .mesh-run-*.log 2>/dev/null | wc -l"), 0);
	EXPECT_STREQ(out, "0\n");
}

/* -m and -X spread the records over the slots; -X repeats the word
 * around {}; --xargs puts them all in one command.  (Standard output
 * alone: a sanitizer build writes its notes to standard error.) */
TEST(run_multi_spreads_over_slots_and_replaces_in_context)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -k -j3 -m echo ::: 1 2 3 4 5 6 7", MESH), 0);
	EXPECT_STREQ(out, "1 2 3\n4 5 6\n7\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -k -j2 -X echo f{}.txt ::: a b c", MESH), 0);
	EXPECT_STREQ(out, "fa.txt fb.txt\nfc.txt\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -k -j2 -m echo f{}.txt ::: a b c", MESH), 0);
	EXPECT_STREQ(out, "fa b.txt\nfc.txt\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "seq 5 | %s run -j4 --xargs echo", MESH), 0);
	EXPECT_STREQ(out, "1 2 3 4 5\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --dry-run -N2 cp {1} {2} ::: a b c d", MESH), 0);
	EXPECT_STREQ(out, "cp a b\ncp c d\n");
	/* -N0: a record a command, which the command does not see (it was a
	 * usage error) */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -k -N0 echo x{}y ::: a b c 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "xy\nxy\nxy\n");
}

TEST(run_multi_bad_use_is_a_usage_error)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -N2 echo ::: a b ::: 1 2", MESH), 104);
	EXPECT_CONTAINS(out, "group the records of one argument source; 2 given");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -N 4097 echo ::: a", MESH), 104);
	EXPECT_CONTAINS(out, "-N '4097': expected a whole number from 0 to 4096");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --pipe -N0 wc", MESH), 104);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -X --chunks 4 echo", MESH), 104);
	EXPECT_CONTAINS(out, "not with --chunks N");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --max-args=x echo ::: a", MESH), 104);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --help", MESH), 0);
	EXPECT_CONTAINS(out, "-N, -n, --max-args N");
}

/* --pipe: each block of records is a chunk's standard input; a failed
 * block runs again alone on the rerun. */
TEST(run_pipe_blocks_go_to_stdin_and_resume_by_block)
{
	char out[4096];
	t_write_file("in.txt", "1\n2\n3\n4\n5\n6\n7\n8\n9\n");
	const char *cmd = "'x=$(cat); test -e ok || ! echo \"$x\" | grep -qx 5 && echo \"$x\" | paste -sd+ >> out'";
	int rc = t_sh(out, sizeof out, 1, "%s run -j1 --pipe -N3 -a in.txt %s", MESH, cmd);
	EXPECT_EQ(rc, 1);
	char *s = t_read_file("out", NULL);
	EXPECT_STREQ(s ? s : "", "1+2+3\n7+8+9\n");
	free(s);
	t_write_file("ok", "");
	rc = t_sh(out, sizeof out, 1, "%s run -j1 --pipe -N3 -a in.txt %s", MESH, cmd);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "resuming: 2/3 chunks already done");
	s = t_read_file("out", NULL);
	EXPECT_STREQ(s ? s : "", "1+2+3\n7+8+9\n4+5+6\n");
	free(s);
	/* blocks of bytes from standard input, nothing lost or doubled */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "seq 20000 | %s run -k --pipe --block 10k wc -l | awk '{s += $1} END {print s}'", MESH), 0);
	EXPECT_STREQ(out, "20000\n");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "seq 3 | %s run --pipe --block 1k -m cat", MESH), 104);
	EXPECT_CONTAINS(out, "not -m, -X or --xargs");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --block 1k cat ::: a", MESH), 104);
	EXPECT_CONTAINS(out, "give --pipe too");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "seq 3 | %s run --pipe --block 0 cat", MESH), 104);
}
