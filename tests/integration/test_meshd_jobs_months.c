/* meshd's jobs over months (docs/jobs.md, "Running meshd for months"): one
 * meshd a state directory, results checked against the journal.  The real
 * meshd and mesh binaries, tests/workers/job_worker, a state directory in
 * the test's own directory. */
#include "base/exit.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

static char out[1 << 20];
static pid_t meshd_pid;

#define mesh(merge, ...) meshd_t_mesh(out, sizeof out, (merge), __VA_ARGS__)

static void add_job_worker(void)
{
	char bin[4096];
	snprintf(bin, sizeof bin, "%s", t_bin("tests-workers/job_worker"));
	meshd_t_add_program(out, sizeof out, "jw", bin, "max_workers = 2\nidle_ttl = \"300s\"\n");
}

static pid_t start_meshd(const char *more)
{
	char args[1024];
	snprintf(args, sizeof args, "--state state %s", more ? more : "");
	meshd_pid = meshd_t_start_notified(args, NULL, 0);
	return meshd_pid;
}

/* Submits; the job id. */
static unsigned submit(const char *args)
{
	return meshd_t_submit(out, sizeof out, args);
}

/* in.txt: n lines, each line. */
static void input_of(const char *line, int n)
{
	FILE *f = fopen("in.txt", "w");
	ASSERT_TRUE(f != NULL);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s\n", line);
	fclose(f);
}

/* "0:LINE\n1:LINE\n..." for n chunks. */
static char *expected_of(const char *line, int n)
{
	size_t cap = (size_t)n * (strlen(line) + 24) + 1, k = 0;
	char *buf = malloc(cap);
	ASSERT_TRUE(buf != NULL);
	buf[0] = 0;
	for (int i = 0; i < n; i++)
		k += (size_t)snprintf(buf + k, cap - k, "%d:%s\n", i, line);
	return buf;
}

/* Item 2 of issue 31: a second meshd on the same --state resumed the
 * first one's running job and both appended to one results.bin (both said
 * complete, then `mesh results` failed on a corrupt record).  Now the
 * state directory is locked for meshd's lifetime: the second is refused at
 * once (75, the table's "a lock held"), naming the pid that holds it, and
 * touches nothing; the first one's job completes, every result readable,
 * and `mesh job check` finds the results whole. */
TEST_TIMEOUT(jobs_second_meshd_on_one_state_is_refused_naming_the_holder, 60)
{
	add_job_worker();
	pid_t a = start_meshd(NULL);
	input_of("slow", 100); /* 20 ms each on 2 workers: about a second */
	unsigned id = submit("jw --input in.txt");
	uint64_t t0 = t_now_ms();
	int rc = t_sh(out, sizeof out, 1, "mkdir -p logs2 && timeout 10 '%s' --catalog catalog --logs logs2 --socket run/b.sock --state state",
		      t_bin("meshd"));
	uint64_t took = t_now_ms() - t0;
	EXPECT_EQ(rc, MESH_EXIT_TEMPFAIL);
	char pid[32];
	snprintf(pid, sizeof pid, "pid %d", (int)a);
	EXPECT_CONTAINS(out, pid);
	EXPECT_CONTAINS(out, "in use by another meshd");
	EXPECT_LT(took, 5000);
	EXPECT_EQ(access("run/b.sock", F_OK), -1);
	EXPECT_EQ(mesh(0, "wait %u --quiet", id), 0);
	EXPECT_EQ(mesh(0, "results %u", id), 0);
	char *want = expected_of("slow", 100);
	EXPECT_STREQ(out, want);
	free(want);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	char cmd[256];
	snprintf(cmd, sizeof cmd, "job check state/jobs/%u/journal.log", id);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' %s", t_bin("mesh"), cmd), 0);
	EXPECT_CONTAINS(out, "100 DONE chunks: 100 results in the file");
	EXPECT_CONTAINS(out, "OK");
	/* The lock goes with its holder: the next meshd takes the directory. */
	start_meshd(NULL);
	EXPECT_EQ(mesh(0, "results %u --no-wait", id), 0);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
}

/* Item 2 too: `mesh job check` on a meshd job's journal said OK while the
 * results of DONE chunks were gone.  It now checks the results file beside
 * the journal: every DONE chunk has its result, in the file or carried by
 * its DONE record (a small one, put back by meshd at its next open).
 * Chunks 0-2 here answer 2,000 bytes (over what a DONE carries), chunk 3
 * eight; the results file is cut to its header while meshd is down. */
TEST_TIMEOUT(jobs_check_reports_a_done_chunk_without_its_result, 60)
{
	add_job_worker();
	start_meshd(NULL);
	t_write_file("in.txt", "big2000\nbig2000\nbig2000\nsmall\n");
	unsigned id = submit("jw --input in.txt");
	EXPECT_EQ(mesh(0, "wait %u --quiet", id), 0);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	char journal[256], results[256];
	snprintf(journal, sizeof journal, "state/jobs/%u/journal.log", id);
	snprintf(results, sizeof results, "state/jobs/%u/results.bin", id);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' job check %s", t_bin("mesh"), journal), 0);
	EXPECT_CONTAINS(out, "4 DONE chunks: 4 results in the file");
	ASSERT_EQ(truncate(results, 16), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' job check %s", t_bin("mesh"), journal), MESH_EXIT_DATAERR);
	EXPECT_CONTAINS(out, "3 DONE chunks have no result (lost): 0 1 2\n");
	EXPECT_CONTAINS(out, "1 carried by their DONE record only");
	EXPECT_CONTAINS(out, "CORRUPT");
	struct stat st;
	ASSERT_EQ(stat(results, &st), 0);
	EXPECT_EQ(st.st_size, 16); /* the check changed nothing */
	/* A damaged tail is reported, not cut. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "printf 'RESRgarbage' >> %s", results), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' job check %s", t_bin("mesh"), journal), MESH_EXIT_DATAERR);
	EXPECT_CONTAINS(out, "11 bytes after the last whole record at offset 16");
	ASSERT_EQ(stat(results, &st), 0);
	EXPECT_EQ(st.st_size, 27);
}
