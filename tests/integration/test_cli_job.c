/* `mesh job` as scripts use it: answers, exit codes, bad input. */
#include "runner/t.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char out[16384];

#define MESH(...) t_sh(out, sizeof out, 1, "%s job " __VA_ARGS__)
#define M t_bin("mesh")

static off_t fsize(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? st.st_size : -1;
}

TEST(cli_job_help_and_usage)
{
	static const char *subs[] = {"submit", "lease", "complete", "status", "harvest", "check", "retry"};
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
		char want[64];
		EXPECT_EQ(t_sh(out, sizeof out, 0, "%s job %s --help", M, subs[i]), 0);
		snprintf(want, sizeof want, "usage: mesh job %s", subs[i]);
		EXPECT_CONTAINS(out, want);
	}
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s job --help", M), 0);
	EXPECT_CONTAINS(out, "harvest");
	EXPECT_EQ(MESH("", M), 64);
	EXPECT_EQ(MESH("frobnicate", M), 64);
	EXPECT_CONTAINS(out, "unknown command 'frobnicate'");
	EXPECT_EQ(MESH("submit j.log", M), 64);
	EXPECT_EQ(MESH("submit j.log 5 6", M), 64);
	EXPECT_EQ(MESH("submit j.log 5 --bogus", M), 64);
	EXPECT_EQ(access("j.log", F_OK), -1);
}

TEST(cli_job_submit_and_bad_numbers)
{
	EXPECT_EQ(MESH("submit j.log 10", M), 0);
	EXPECT_CONTAINS(out, "SUBMITTED 10");
	off_t size = fsize("j.log");
	EXPECT_EQ(MESH("submit j.log 10", M), 0);
	EXPECT_EQ(MESH("submit j.log 11", M), 65);
	EXPECT_CONTAINS(out, "mesh: journal 'j.log'");
	EXPECT_EQ(fsize("j.log"), size);
	static const struct {
		const char *n;
		int code;
	} rows[] = {{"12x", 64}, {"-1", 64}, {"+3", 64}, {"", 64}, {"0", 65},
		    {"99999999999999999999999", 65}, {"18446744073709551616", 65}, {"1099511627777", 65}};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		int rc = MESH("submit k.log '%s'", M, rows[i].n);
		if (rc != rows[i].code)
			t__fail(__FILE__, __LINE__, "submit '%s': exit %d, want %d (%s)", rows[i].n, rc, rows[i].code,
				out);
		EXPECT_CONTAINS(out, "mesh: ");
	}
	EXPECT_EQ(access("k.log", F_OK), -1);
	/* the path law */
	EXPECT_EQ(MESH("submit j.txt 5", M), 65);
	EXPECT_CONTAINS(out, "refused");
	EXPECT_EQ(MESH("submit ../j.log 5", M), 65);
	EXPECT_EQ(symlink("j.log", "s.log"), 0);
	EXPECT_EQ(MESH("submit s.log 10", M), 65);
	EXPECT_CONTAINS(out, "symlink");
	t_write_file("foreign.log", "not a journal\n");
	EXPECT_EQ(MESH("submit foreign.log 5", M), 65);
	EXPECT_CONTAINS(out, "not a mesh journal");
	EXPECT_EQ(fsize("foreign.log"), 14);
}

TEST(cli_job_lease_complete_exit_codes)
{
	ASSERT_EQ(MESH("submit j.log 2", M), 0);
	EXPECT_EQ(MESH("lease j.log locks jb 2 30 --node a", M), 0);
	EXPECT_STREQ(out, "0\n");
	EXPECT_EQ(MESH("lease j.log locks jb 2 30 --node b", M), 0);
	EXPECT_STREQ(out, "1\n");
	EXPECT_EQ(MESH("lease j.log locks jb 2 30", M), 3);
	EXPECT_STREQ(out, "NONE\n");
	EXPECT_EQ(MESH("status j.log locks jb 2", M), 1);
	EXPECT_CONTAINS(out, "done 0, leased 2, pending 0");
	EXPECT_CONTAINS(out, "INCOMPLETE");
	EXPECT_EQ(MESH("complete j.log locks jb 1 b", M), 0);
	EXPECT_STREQ(out, "DONE 1\n");
	EXPECT_EQ(MESH("complete j.log locks jb 1 b", M), 0);
	EXPECT_STREQ(out, "IGNORED 1\n");
	EXPECT_EQ(MESH("complete j.log locks jb 2 b", M), 65);
	EXPECT_CONTAINS(out, "out of range");
	EXPECT_EQ(MESH("complete j.log locks jb 1x b", M), 64);
	EXPECT_EQ(MESH("complete j.log locks jb 0 'bad node'", M), 64);
	EXPECT_EQ(MESH("complete j.log locks jb 0 a", M), 0);
	EXPECT_EQ(MESH("lease j.log locks jb 2 30", M), 4);
	EXPECT_STREQ(out, "COMPLETE\n");
	EXPECT_EQ(MESH("status j.log locks jb 2", M), 0);
	EXPECT_CONTAINS(out, "COMPLETE");
	/* the duplicate answered IGNORED by another process is counted here */
	EXPECT_CONTAINS(out, "duplicates ignored 1");
	/* errors never reuse an answer's code */
	EXPECT_EQ(MESH("lease j.log locks jb 3 30", M), 65); /* chunk count conflicts */
	EXPECT_EQ(MESH("lease missing.log locks jb 2 30", M), 66);
	EXPECT_CONTAINS(out, "mesh: cannot open 'missing.log'");
	EXPECT_EQ(access("missing.log", F_OK), -1);
	t_write_file("foreign.log", "#!/bin/sh\necho hi\n");
	EXPECT_EQ(MESH("lease foreign.log locks jb 2 30", M), 65);
	EXPECT_EQ(MESH("lease j.log /var/locks jb 2 30", M), 65);
	EXPECT_EQ(MESH("lease j.log ../locks jb 2 30", M), 65);
	EXPECT_EQ(MESH("lease j.log locks a/b 2 30", M), 65);
	EXPECT_EQ(MESH("lease j.log locks jb 2 0", M), 65);
	EXPECT_EQ(MESH("lease j.log locks jb 2 abc", M), 64);
	EXPECT_EQ(MESH("lease j.log locks jb 2 -1", M), 64);
	EXPECT_EQ(MESH("lease j.log locks jb 2 30 --node", M), 64);
	EXPECT_EQ(MESH("status j.log locks jb 2x", M), 64);
	EXPECT_EQ(MESH("status missing.log locks jb 2", M), 66);
}

TEST(cli_job_status_json_shows_failures)
{
	ASSERT_EQ(MESH("submit j.log 4", M), 0);
	EXPECT_EQ(MESH("harvest j.log locks jb 4 10 n1 -- sh -c 'exit $(( {} == 2 ? 7 : 0 ))'", M), 1);
	EXPECT_CONTAINS(out, "buried");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s job status j.log locks jb 4 --json", M), 1);
	json_error_t err;
	json_t *o = json_loads(out, 0, &err);
	ASSERT_TRUE(o != NULL);
	EXPECT_STREQ(json_string_value(json_object_get(o, "verdict")), "INCOMPLETE");
	EXPECT_EQ(json_integer_value(json_object_get(o, "done")), 3);
	EXPECT_EQ(json_integer_value(json_object_get(o, "buried")), 1);
	json_t *f = json_array_get(json_object_get(o, "failures"), 0);
	ASSERT_TRUE(f != NULL);
	EXPECT_EQ(json_integer_value(json_object_get(f, "cid")), 2);
	EXPECT_EQ(json_integer_value(json_object_get(f, "attempts")), 3);
	EXPECT_EQ(json_integer_value(json_object_get(f, "last_status")), 7);
	EXPECT_TRUE(json_is_true(json_object_get(f, "buried")));
	json_decref(o);
	EXPECT_EQ(MESH("status j.log locks jb 4", M), 1);
	EXPECT_CONTAINS(out, "chunk 2: 3 failed attempts, last exit status 7, buried");
	EXPECT_EQ(MESH("retry j.log", M), 0);
	EXPECT_CONTAINS(out, "RETRIED 1");
	EXPECT_EQ(MESH("retry j.log 9", M), 65);
	EXPECT_EQ(MESH("retry j.log x", M), 64);
	EXPECT_EQ(MESH("harvest j.log locks jb 4 10 n1 -- true", M), 0);
	EXPECT_EQ(MESH("status j.log locks jb 4 --json", M), 0);
	EXPECT_CONTAINS(out, "\"verdict\": \"COMPLETE\"");
}

TEST(cli_job_harvest_drains_and_maxiter)
{
	ASSERT_EQ(MESH("submit j.log 50", M), 0);
	EXPECT_EQ(MESH("harvest j.log locks jb 50 10 n1 5", M), 1);
	EXPECT_CONTAINS(out, "leased 5, done 5");
	EXPECT_EQ(MESH("status j.log locks jb 50", M), 1);
	EXPECT_CONTAINS(out, "done 5,");
	EXPECT_EQ(MESH("harvest j.log locks jb 50 10 n1", M), 0);
	EXPECT_CONTAINS(out, "COMPLETE");
	EXPECT_EQ(MESH("status j.log locks jb 50", M), 0);
	EXPECT_EQ(MESH("harvest j.log locks jb 50 10 n1 0", M), 65);
	EXPECT_EQ(MESH("harvest j.log locks jb 50 10 n1 --", M), 64);
	/* with a command: {} is the chunk id, output grouped per chunk */
	ASSERT_EQ(MESH("submit k.log 3", M), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s job harvest k.log locks kb 3 10 n1 -- echo chunk-{}", M), 0);
	EXPECT_CONTAINS(out, "chunk-0\nchunk-1\nchunk-2\n");
}

TEST(cli_job_check_repairs_torn_tail)
{
	ASSERT_EQ(MESH("submit j.log 10", M), 0);
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(MESH("complete j.log locks jb %d n1", M, i), 0);
	EXPECT_EQ(MESH("check j.log", M), 0);
	EXPECT_CONTAINS(out, "done 3,");
	EXPECT_CONTAINS(out, "OK");
	off_t good = fsize("j.log");
	ASSERT_EQ(t_sh(out, sizeof out, 1, "printf 'torn-bytes' >> j.log"), 0);
	EXPECT_EQ(MESH("check j.log", M), 0);
	EXPECT_CONTAINS(out, "torn tail: 10 bytes");
	EXPECT_CONTAINS(out, "REPAIRED");
	EXPECT_EQ(fsize("j.log"), good);
	/* damage in the middle: reported, not cut unless forced */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "printf 'X' | dd of=j.log bs=1 seek=60 conv=notrunc 2>/dev/null"), 0);
	EXPECT_EQ(MESH("check j.log", M), 65);
	EXPECT_CONTAINS(out, "damage at offset");
	EXPECT_CONTAINS(out, "CORRUPT");
	EXPECT_EQ(fsize("j.log"), good);
	EXPECT_EQ(MESH("status j.log locks jb 10", M), 65);
	EXPECT_EQ(MESH("check j.log --force", M), 0);
	EXPECT_EQ(MESH("check j.log", M), 0);
	EXPECT_EQ(MESH("check missing.log", M), 66);
	t_write_file("foreign.log", "plain text\n");
	EXPECT_EQ(MESH("check foreign.log", M), 65);
	EXPECT_EQ(MESH("check j.txt", M), 65);
}
