/* `mesh run` driven as a user would: the real binary, real signals. */
#include "base/clock.h"
#include "job/job.h"
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MESH t_bin("mesh")

/* Counts of each chunk id in a file of lines "<cid> ..." (cids < n). */
static void count_cids(const char *path, int *cnt, int n)
{
	memset(cnt, 0, (size_t)n * sizeof *cnt);
	char *s = t_read_file(path, NULL);
	if (!s)
		return;
	char *save = NULL;
	for (char *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		int c = atoi(l);
		if (c >= 0 && c < n)
			cnt[c]++;
	}
	free(s);
}

static int lines_at_least(void *arg)
{
	char out[64];
	const char **a = arg;
	if (t_sh(out, sizeof out, 0, "cat %s 2>/dev/null | wc -l", a[0]) != 0)
		return 0;
	return atoi(out) >= atoi(a[1]);
}

TEST(run_completes_and_groups_output)
{
	char out[8192];
	int rc = t_sh(out, sizeof out, 0, "%s run -v -j3 --chunks 20 -- echo chunk 2>err", MESH);
	EXPECT_EQ(rc, 0);
	int seen[20] = {0}, lines = 0;
	char *save = NULL;
	for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save), lines++) {
		int c = -1;
		EXPECT_EQ(sscanf(l, "chunk %d", &c), 1);
		if (c >= 0 && c < 20)
			seen[c]++;
	}
	EXPECT_EQ(lines, 20);
	for (int i = 0; i < 20; i++)
		EXPECT_EQ(seen[i], 1);
	char *err = t_read_file("err", NULL);
	EXPECT_CONTAINS(err, "20/20 done, 0 failed");
	free(err);
	/* a complete run removes its default journal: the same command runs afresh */
	rc = t_sh(out, sizeof out, 0, "ls .mesh-run-*.log 2>/dev/null | wc -l");
	EXPECT_EQ(atoi(out), 0);
	rc = t_sh(out, sizeof out, 0, "%s run -j3 --chunks 20 -- echo chunk 2>err | wc -l", MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_EQ(atoi(out), 20);
}

/* --nice N is the commands' niceness, not N more than mesh's own, as GNU
 * parallel sets it: mesh run under `nice -n 10` (niceness o) gives its
 * commands N; a lower one than o is root's alone (another user's commands
 * stay at o), and --nice 0, like no --nice, leaves them at o. */
TEST(run_nice_is_the_niceness_not_an_increment)
{
	static const int asked[] = {5, 12, 0, -1}; /* -1: no --nice */
	char out[256];
	t_sh(out, sizeof out, 0, "nice");
	int o = atoi(out) + 10;
	if (o > 19)
		SKIP("this test runs at niceness %d already: nice -n 10 would not be told apart", o - 10);
	for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++) {
		int n = asked[i];
		char opt[32] = "";
		if (n >= 0)
			snprintf(opt, sizeof opt, "--nice %d", n);
		EXPECT_EQ(t_sh(out, sizeof out, 0, "nice -n 10 %s run %s 'nice; : {}' ::: a", MESH, opt), 0);
		printf("mesh run %s at niceness %d: %s", opt, o, out);
		EXPECT_EQ(atoi(out), n <= 0 ? o : n >= o || geteuid() == 0 ? n : o);
	}
}

/* kill -9 midway; the rerun never runs a chunk that was DONE in the journal
 * when it started, and together the runs do every chunk. */
TEST_TIMEOUT(run_sigkill_midway_then_resume, 60)
{
	const char *cmd = "-- sh -c 'echo {} >> \"$SIDE\"; sleep 0.05'";
	char out[512];
	const int n = 60;
	EXPECT_EQ(t_sh(out, sizeof out, 0,
		       "SIDE=s1 %s run -j2 --ttl 1 --journal r.log --chunks %d %s >/dev/null 2>&1 & echo $! > pid",
		       MESH, n, cmd),
		  0);
	const char *arg[] = {"s1", "12"};
	ASSERT_TRUE(t_wait_for(lines_at_least, arg, 20000));
	EXPECT_EQ(t_sh(out, sizeof out, 0, "kill -9 $(cat pid)"), 0);
	mesh_sleep_ns(100 * MESH_NS_PER_MS);

	/* What the journal holds now, read through the library. */
	char lockdir[64];
	snprintf(lockdir, sizeof lockdir, "/tmp/mesh-test-run-%d", (int)getpid());
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j = NULL;
	o.journal = "r.log";
	o.lockdir = lockdir;
	o.name = "peek";
	ASSERT_EQ(mesh_job_open(&j, &o), 0);
	int done_before[60], ndone = 0;
	for (int i = 0; i < n; i++) {
		done_before[i] = mesh_job_is_done(j, (uint64_t)i) == 1;
		ndone += done_before[i];
	}
	mesh_job_close(j);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
	EXPECT_GT(ndone, 0);
	EXPECT_LT(ndone, n);

	int rc = t_sh(out, sizeof out, 0, "SIDE=s2 %s run -v -j2 --ttl 1 --journal r.log --chunks %d %s 2>err", MESH, n,
		      cmd);
	EXPECT_EQ(rc, 0);
	int c1[60], c2[60];
	count_cids("s1", c1, n);
	count_cids("s2", c2, n);
	for (int i = 0; i < n; i++) {
		if (done_before[i])
			EXPECT_EQ(c2[i], 0); /* a DONE chunk never runs again */
		EXPECT_GE(c1[i] + c2[i], 1);
	}
	char *err = t_read_file("err", NULL);
	EXPECT_CONTAINS(err, "resuming");
	EXPECT_CONTAINS(err, "60/60 done");
	free(err);
}

/* SIGINT: exit 5; the interrupted chunks' leases are released, so the rerun
 * does not wait for the (long) TTL. */
TEST_TIMEOUT(run_sigint_exits_5_and_resumes_at_once, 60)
{
	char out[512];
	EXPECT_EQ(t_sh(out, sizeof out, 0,
		       "(%s run -j2 --ttl 60 --chunks 30 -- sh -c 'echo {} >> side; sleep 0.1' >/dev/null 2>err1 &"
		       " echo $! > pid; wait $!; echo $? > rc1) >/dev/null 2>&1 &",
		       MESH),
		  0);
	const char *arg[] = {"side", "6"}, *parg[] = {"pid", "1"};
	ASSERT_TRUE(t_wait_for(lines_at_least, arg, 20000));
	ASSERT_TRUE(t_wait_for(lines_at_least, parg, 5000));
	EXPECT_EQ(t_sh(out, sizeof out, 0, "kill -INT $(cat pid)"), 0);
	const char *rcarg[] = {"rc1", "1"};
	ASSERT_TRUE(t_wait_for(lines_at_least, rcarg, 10000));
	char *rc1 = t_read_file("rc1", NULL);
	EXPECT_STREQ(rc1, "130\n");
	free(rc1);
	char *err = t_read_file("err1", NULL);
	EXPECT_CONTAINS(err, "interrupted");
	free(err);
	uint64_t t0 = t_now_ms();
	int rc = t_sh(out, sizeof out, 0, "%s run -j2 --ttl 60 --chunks 30 -- sh -c 'echo {} >> side; sleep 0.1' 2>&1",
		      MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_LT(t_now_ms() - t0, 30000); /* far below the 60 s TTL */
	int c[30];
	count_cids("side", c, 30);
	for (int i = 0; i < 30; i++)
		EXPECT_GE(c[i], 1);
}

TEST(run_input_lines_and_changed_input)
{
	char out[1024];
	t_write_file("in.txt", "a b\nc\n\nd");
	int rc = t_sh(out, sizeof out, 0, "%s run -j2 --input in.txt -- printf '[%%s]\\n' 2>/dev/null | LC_ALL=C sort", MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_STREQ(out, "[]\n[a b]\n[c]\n[d]\n");
	/* {} inside an argument, {#} the chunk id */
	rc = t_sh(out, sizeof out, 0, "%s run -j2 --input in.txt -- echo '{#}:x{}y' 2>/dev/null | LC_ALL=C sort", MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_STREQ(out, "1:xa by\n2:xcy\n3:xy\n4:xdy\n");

	/* an explicit journal remembers its input: a changed file is refused */
	rc = t_sh(out, sizeof out, 1, "%s run --journal in.log --input in.txt -- true", MESH);
	EXPECT_EQ(rc, 0);
	t_write_file("in.txt", "a b\nc\n\nD");
	rc = t_sh(out, sizeof out, 1, "%s run --journal in.log --input in.txt -- true", MESH);
	EXPECT_EQ(rc, 105);
	EXPECT_CONTAINS(out, "belongs to other work");
	/* the default journal is named after the input's content: a new job */
	rc = t_sh(out, sizeof out, 0, "%s run --input in.txt -- echo 2>/dev/null | LC_ALL=C sort", MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_STREQ(out, "\nD\na b\nc\n");
}

TEST(run_results_dir)
{
	char out[512];
	int rc = t_sh(out, sizeof out, 0, "%s run -j2 --results res --chunks 3 -- sh -c 'echo o{}; echo e{} >&2' 2>/dev/null",
		      MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_STREQ(out, "");
	for (int i = 0; i < 3; i++) {
		char p[64], want[16];
		snprintf(p, sizeof p, "res/%d/stdout", i);
		snprintf(want, sizeof want, "o%d\n", i);
		char *s = t_read_file(p, NULL);
		EXPECT_STREQ(s, want);
		free(s);
		snprintf(p, sizeof p, "res/%d/stderr", i);
		snprintf(want, sizeof want, "e%d\n", i);
		s = t_read_file(p, NULL);
		EXPECT_STREQ(s, want);
		free(s);
		snprintf(p, sizeof p, "res/%d/status", i);
		s = t_read_file(p, NULL);
		EXPECT_STREQ(s, "exit 0\n");
		free(s);
	}
	rc = t_sh(out, sizeof out, 0, "find res -name '.*' | wc -l");
	EXPECT_EQ(atoi(out), 0); /* no temp file left behind */
}

TEST(run_failures_and_retries)
{
	char out[4096];
	int rc = t_sh(out, sizeof out, 1, "%s run -v -j2 --retries 2 --chunks 5 -- sh -c 'echo x >> tries.{}; [ {} != 3 ]'",
		      MESH);
	EXPECT_EQ(rc, 1);
	EXPECT_CONTAINS(out, "chunk 3 buried after 2 attempts (last: exit 1)");
	EXPECT_CONTAINS(out, "4/5 done, 1 failed");
	EXPECT_CONTAINS(out, "mesh: 1 chunk failed; the same command runs it again; ");
	/* One attempt, two failed chunks: each word as many as it counts. */
	rc = t_sh(out, sizeof out, 1, "%s run --chunks 4 -- sh -c '[ {} -lt 2 ]'", MESH);
	EXPECT_EQ(rc, 2);
	EXPECT_CONTAINS(out, "chunk 2 buried after 1 attempt (last: exit 1)");
	EXPECT_CONTAINS(out, "mesh: 2 chunks failed; the same command runs them again; ");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "cat tries.3 | wc -l"), 0);
	EXPECT_EQ(atoi(out), 2);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "cat tries.0 | wc -l"), 0);
	EXPECT_EQ(atoi(out), 1);
}

TEST(run_timeout_kills)
{
	char out[4096];
	uint64_t t0 = t_now_ms();
	int rc = t_sh(out, sizeof out, 1, "%s run -v -j2 --timeout 0.2 --retries 1 --chunks 2 -- sleep 10", MESH);
	EXPECT_EQ(rc, 2); /* GNU parallel's: the number of failed chunks */
	EXPECT_LT(t_now_ms() - t0, 8000);
	EXPECT_CONTAINS(out, "failed (timeout)");
	EXPECT_CONTAINS(out, "0/2 done, 2 failed");
}

TEST_TIMEOUT(run_two_cooperating_processes, 60)
{
	char out[4096];
	const int n = 60;
	int rc = t_sh(out, sizeof out, 0,
		      "for i in 1 2; do %s run -j2 --journal co.log --chunks %d -- sh -c 'echo {} $PPID >> side; "
		      "sleep 0.1' >/dev/null 2>&1 & done; wait %%1; a=$?; wait %%2; echo $a $?",
		      MESH, n);
	EXPECT_EQ(rc, 0);
	EXPECT_STREQ(out, "0 0\n");
	int c[60];
	count_cids("side", c, n);
	for (int i = 0; i < n; i++)
		EXPECT_EQ(c[i], 1);
	/* both processes took chunks */
	rc = t_sh(out, sizeof out, 0, "awk '{print $2}' side | sort -u | wc -l");
	EXPECT_EQ(atoi(out), 2);
	rc = t_sh(out, sizeof out, 0, "%s job status co.log x run %d", MESH, n);
	EXPECT_CONTAINS(out, "COMPLETE");
}

TEST_TIMEOUT(run_speculate_beats_a_straggler, 60)
{
	char out[4096];
	/* chunk 0's first copy hangs; a copy started later finds the marker
	 * and finishes at once */
	uint64_t t0 = t_now_ms();
	int rc = t_sh(out, sizeof out, 1,
		      "%s run -v -j2 --speculate --chunks 12 -- sh -c "
		      "'if [ {} = 0 ] && mkdir m 2>/dev/null; then sleep 20; else sleep 0.05; fi'",
		      MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_LT(t_now_ms() - t0, 15000);
	EXPECT_CONTAINS(out, "12/12 done");
	EXPECT_CONTAINS(out, "1 speculative wins");
}

TEST(run_bad_arguments)
{
	static const struct {
		const char *args;
		int rc;
		const char *msg;
	} rows[] = {
		/* mesh run's own errors are the shared codes + 40 (GNU parallel's
		 * exit code is the number of failed jobs) */
		{"--chunks 3", 104, "no command"},
		{"--chunks 12x -- true", 104, "--chunks '12x'"},
		{"--chunks -1 -- true", 104, "--chunks '-1'"},
		{"-j x --chunks 2 -- true", 104, "-j 'x'"},
		{"--chunks 2 --input f -- true", 104, "no argument source"},
		{"--frob --chunks 2 -- true", 104, "unknown option '--frob'"},
		{"--timeout abc --chunks 2 -- true", 104, "--timeout 'abc'"},
		{"--retries 0 --chunks 2 -- true", 104, "--retries '0'"},
		{"--chunks", 104, "needs a value"},
		{"--input missing.txt -- true", 106, "missing.txt"},
		{"--journal j.txt --chunks 2 -- true", 105, "j.txt"},
		{"--chunks 2 -- no-such-command-xyz", 106, "cannot run 'no-such-command-xyz'"},
	};
	char out[2048];
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		int rc = t_sh(out, sizeof out, 1, "%s run %s", MESH, rows[i].args);
		EXPECT_EQ(rc, rows[i].rc);
		EXPECT_CONTAINS(out, rows[i].msg);
	}
	int rc = t_sh(out, sizeof out, 0, "%s run --help 2>/dev/null", MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "usage: mesh run");
	/* the same journal with another chunk count */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --journal a.log --chunks 2 -- true", MESH), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --journal a.log --chunks 3 -- true", MESH), 105);
	EXPECT_CONTAINS(out, "belongs to other work");
}

/* A command that cannot run leaves no default journal behind (a hidden
 * .mesh-run-*.log nobody asked for, with nothing to resume); a run whose
 * chunks failed keeps its journal, which the message names. */
TEST(run_missing_program_leaves_no_journal)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run no-such-program-here ::: a b", MESH), 106);
	EXPECT_CONTAINS(out, "cannot run 'no-such-program-here'");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "ls -a | grep -c '^.mesh-run-'"), 1); /* grep: none */
	EXPECT_STREQ(out, "0\n");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run false ::: a b", MESH), 2);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "ls -a | grep -c '^.mesh-run-'"), 0);
	EXPECT_STREQ(out, "1\n");
}
