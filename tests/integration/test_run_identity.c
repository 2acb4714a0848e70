/* `mesh run --journal`: a journal belongs to one piece of work (the command
 * and its chunk source) and refuses other work instead of skipping it. */
#include "runner/t.h"

#include <stdio.h>
#include <unistd.h>

#define MESH t_bin("mesh")

TEST(run_journal_refuses_another_command)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j1 --journal step.log --chunks 2 -- echo one 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "one 0\none 1\n");
	/* the same chunks, another command: it ran nothing and said nothing */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j1 --journal step.log --chunks 2 -- echo two", MESH), 105);
	EXPECT_CONTAINS(out, "mesh: journal 'step.log' belongs to other work (it holds: chunks 2, command 'echo one'");
	EXPECT_CONTAINS(out, "this run: chunks 2, command 'echo two'");
	EXPECT_CONTAINS(out, "remove it or choose another --journal to start afresh");
	EXPECT_EQ(strstr(out, "two 0"), NULL);
	/* the same work again resumes (here: nothing left to run) */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j1 --journal step.log --chunks 2 -- echo one 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "");
	/* afresh, as the message says */
	EXPECT_EQ(unlink("step.log"), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j1 --journal step.log --chunks 2 -- echo two 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "two 0\ntwo 1\n");
}

TEST(run_journal_refuses_another_chunk_source)
{
	char out[4096];
	t_write_file("other.txt", "a\nb\nc\nd\ne\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j1 --journal c.log --chunks 5 -- echo 2>/dev/null", MESH), 0);
	/* five lines against a journal of five chunk ids: every line was skipped */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j1 --journal c.log --input other.txt -- echo", MESH), 105);
	EXPECT_CONTAINS(out, "belongs to other work (it holds: chunks 5, command 'echo'");
	EXPECT_CONTAINS(out, "this run: input ");
	EXPECT_CONTAINS(out, "(5 lines)");
	/* an input journal refuses a changed input, and keeps no sidecar file */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j1 --journal in.log --input other.txt -- echo 2>/dev/null", MESH), 0);
	EXPECT_EQ(access("in.log.input", F_OK), -1);
	t_write_file("other.txt", "a\nb\nc\nd\nE\n");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j1 --journal in.log --input other.txt -- echo", MESH), 105);
	EXPECT_CONTAINS(out, "belongs to other work");
	EXPECT_EQ(strstr(out, "\nE\n"), NULL);
}

TEST(run_input_with_a_nul_is_bad_data)
{
	char out[1024];
	FILE *f = fopen("nul.txt", "w");
	ASSERT_TRUE(f != NULL);
	fputs("a\nb", f);
	fputc(0, f);
	fputs("c\n", f);
	fclose(f);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --input nul.txt -- echo", MESH), 105);
	EXPECT_CONTAINS(out, "'nul.txt' record 2 holds a NUL byte");
}
