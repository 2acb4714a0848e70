/* A local meshd job (no --store) whose worker replies more than the chunk
 * runner's 4 MiB in-memory capture bound: the reply is within what a
 * worker may send (16 MiB) and what results.bin keeps (a record up to
 * 1 GiB), so it is the chunk's result, kept whole, and the other chunks
 * are done too.  The runner spilled such a reply to a file and never gave
 * it to the result hook: the job stopped on an output error. */
#include "base/exit.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

static char out[1 << 16];

TEST_TIMEOUT(jobs_big_reply_over_4mib_is_kept_whole_and_the_others_done, 60)
{
	char cwd[4096], toml[8192];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(toml, sizeof toml, "max_workers = 2\nidle_ttl = \"30s\"\n[env]\nJOBTEST_FIRST_CRASH = \"%s/c\"\n", cwd);
	meshd_t_add_program(out, sizeof out, "jw", t_bin("tests-workers/job_worker"), toml);
	pid_t pid = meshd_t_start_notified("--state state", NULL, 0);
	t_write_file("in.txt", "a\nbig5000000\nb\nc\n");
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 0, "submit jw --input in.txt"), 0);
	unsigned id = (unsigned)strtoul(out, NULL, 10);
	ASSERT_GT(id, 0);
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "wait %u --quiet", id), 0);
	json_t *j = meshd_t_job_json(out, sizeof out, id);
	EXPECT_STREQ(json_string_value(json_object_get(j, "state")), "complete");
	EXPECT_EQ(meshd_t_jint(j, "done"), 4);
	EXPECT_EQ(meshd_t_jint(j, "buried"), 0);
	/* The journal says so too (`mesh job status`). */
	EXPECT_EQ(meshd_t_job_status(out, sizeof out, j, 4), 0);
	EXPECT_CONTAINS(out, "COMPLETE");
	json_decref(j);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' results %u --socket " SOCK " > res.out", t_bin("mesh"), id), 0);
	size_t len = 0;
	char *res = t_read_file("res.out", &len);
	ASSERT_TRUE(res != NULL);
	size_t big = 5000000, want = 4 + big + 4 + 4;
	EXPECT_UEQ(len, want);
	if (len == want) {
		EXPECT_TRUE(!memcmp(res, "0:a\n", 4));
		size_t xs = 0;
		while (xs < big - 1 && res[4 + xs] == 'x')
			xs++;
		EXPECT_UEQ(xs, big - 1);
		EXPECT_TRUE(!memcmp(res + 4 + big - 1, "\n2:b\n3:c\n", 9));
	}
	free(res);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}
