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
	pid_t pid = meshd_t_start(.state = "state");
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

/* Chunk i's input of len bytes: letters that change with i and the offset. */
static void fill_input(char *p, size_t len, unsigned i)
{
	for (size_t k = 0; k < len; k++)
		p[k] = (char)('a' + (k * 7 + i * 3 + k / 4099) % 26);
}

/* Inputs larger than a slot's ring (1 MiB by default) ride in pieces, as
 * a `mesh call`'s request does: 6 chunks of 2,666,668 bytes (the issue's
 * 16 MB input split 6 ways), each result "<i>:<input>\n" byte for byte,
 * so the results come back in pieces too.  Before, each attempt failed
 * ("the chunk's input (2666668 bytes) is larger than a slot carries") with
 * status 1 and every chunk was buried. */
TEST_TIMEOUT(jobs_chunk_inputs_larger_than_the_ring_ride_in_pieces, 120)
{
	enum { N = 6 };
	const size_t len = 2666668;
	meshd_t_add_program(out, sizeof out, "jw", t_bin("tests-workers/job_worker"), "max_workers = 2\nidle_ttl = \"30s\"\n");
	pid_t pid = meshd_t_start(.state = "state");
	char *line = malloc(len + 1);
	ASSERT_TRUE(line != NULL);
	FILE *f = fopen("in.txt", "w");
	ASSERT_TRUE(f != NULL);
	for (unsigned i = 0; i < N; i++) {
		fill_input(line, len, i);
		line[len] = '\n';
		ASSERT_UEQ(fwrite(line, 1, len + 1, f), len + 1);
	}
	fclose(f);
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 0, "submit jw --input in.txt --max-workers 2"), 0);
	unsigned id = (unsigned)strtoul(out, NULL, 10);
	ASSERT_GT(id, 0);
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "wait %u --quiet", id), 0);
	json_t *j = meshd_t_job_json(out, sizeof out, id);
	EXPECT_STREQ(json_string_value(json_object_get(j, "state")), "complete");
	EXPECT_EQ(meshd_t_jint(j, "done"), N);
	EXPECT_EQ(meshd_t_jint(j, "failed_attempts"), 0);
	json_decref(j);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' results %u --socket " SOCK " > res.out", t_bin("mesh"), id), 0);
	size_t rlen = 0;
	char *res = t_read_file("res.out", &rlen);
	ASSERT_TRUE(res != NULL);
	EXPECT_UEQ(rlen, N * (2 + len + 1));
	size_t at = 0;
	for (unsigned i = 0; i < N && at + 2 + len + 1 <= rlen; i++) {
		char head[8];
		snprintf(head, sizeof head, "%u:", i);
		EXPECT_TRUE(!memcmp(res + at, head, 2));
		fill_input(line, len, i);
		EXPECT_TRUE(!memcmp(res + at + 2, line, len));
		EXPECT_EQ(res[at + 2 + len], '\n');
		at += 2 + len + 1;
	}
	free(res);
	free(line);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

/* Results larger than the ring come back in pieces: 8 chunks whose
 * results are 3,000,000 bytes each (and small ones between them), on 2
 * workers, every byte in place. */
TEST_TIMEOUT(jobs_results_larger_than_the_ring_come_back_whole, 120)
{
	meshd_t_add_program(out, sizeof out, "jw", t_bin("tests-workers/job_worker"), "max_workers = 2\nidle_ttl = \"30s\"\n");
	pid_t pid = meshd_t_start(.state = "state");
	FILE *f = fopen("in.txt", "w");
	ASSERT_TRUE(f != NULL);
	for (int i = 0; i < 8; i++)
		fprintf(f, "big3000000\ns%d\n", i);
	fclose(f);
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 0, "submit jw --input in.txt --max-workers 2"), 0);
	unsigned id = (unsigned)strtoul(out, NULL, 10);
	ASSERT_GT(id, 0);
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "wait %u --quiet", id), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' results %u --socket " SOCK " > res.out", t_bin("mesh"), id), 0);
	size_t rlen = 0;
	char *res = t_read_file("res.out", &rlen);
	ASSERT_TRUE(res != NULL);
	size_t at = 0;
	int whole = 0;
	for (int i = 0; i < 8; i++) {
		size_t xs = 0;
		while (at + xs < rlen && res[at + xs] == 'x')
			xs++;
		char small[16];
		int sn = snprintf(small, sizeof small, "%d:s%d\n", 2 * i + 1, i);
		if (xs == 2999999 && at + xs + 1 + (size_t)sn <= rlen && res[at + xs] == '\n' &&
		    !memcmp(res + at + xs + 1, small, (size_t)sn))
			whole++;
		at += xs + 1 + (size_t)sn;
	}
	EXPECT_EQ(whole, 8);
	EXPECT_UEQ(rlen, at);
	free(res);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}

/* A chunk's input that no slot can ever carry (over the message limit
 * less the chunk's 12-byte header) is refused at the submit, naming the
 * limit, with the bad-input exit code, and no job is made.  Before, the
 * job was accepted and each attempt failed with status 1 until the chunk
 * was buried. */
TEST_TIMEOUT(jobs_a_chunk_input_over_the_limit_is_refused_at_submit, 60)
{
	const size_t len = 16777210; /* the file, with its newline, is within the 16 MiB input limit */
	meshd_t_add_program(out, sizeof out, "jw", t_bin("tests-workers/job_worker"), "max_workers = 1\nidle_ttl = \"30s\"\n");
	pid_t pid = meshd_t_start(.state = "state");
	char *line = malloc(len + 1);
	ASSERT_TRUE(line != NULL);
	memset(line, 'q', len);
	line[len] = '\n';
	FILE *f = fopen("in.txt", "w");
	ASSERT_TRUE(f != NULL);
	ASSERT_UEQ(fwrite(line, 1, len + 1, f), len + 1);
	fclose(f);
	free(line);
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "submit jw --input in.txt"), MESH_EXIT_DATAERR);
	EXPECT_CONTAINS(out, "chunk 0");
	EXPECT_CONTAINS(out, "16777210 bytes");
	EXPECT_CONTAINS(out, "at most 16777204 bytes");
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 0, "jobs --json"), 0);
	json_t *j = json_loads(out, 0, NULL);
	ASSERT_TRUE(j != NULL);
	EXPECT_UEQ(json_array_size(json_object_get(j, "jobs")), 0);
	json_decref(j);
	EXPECT_EQ(meshd_t_stop(pid), 0);
}
