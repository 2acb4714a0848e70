/* `mesh job` as scripts use it: answers, exit codes, bad input. */
#include "job/record.h"
#include "journal/journal.h"
#include "runner/t.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

TEST(cli_job_status_is_read_only)
{
	ASSERT_EQ(MESH("submit j.log 3", M), 0);
	ASSERT_EQ(MESH("complete j.log locks jb 1 n1", M), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "rm -r locks"), 0);
	/* a healthy journal: status creates no lock dir (none: nothing leased) */
	EXPECT_EQ(MESH("status j.log locks jb 3", M), 1);
	EXPECT_CONTAINS(out, "done 1, leased 0, pending 2");
	EXPECT_EQ(access("locks", F_OK), -1);
	/* a torn last record: reported, pointed at check, left alone -- and
	 * the whole records counted, as every writer counts them */
	off_t good = fsize("j.log");
	ASSERT_EQ(t_sh(out, sizeof out, 1, "printf 'torn' >> j.log"), 0);
	EXPECT_EQ(MESH("status j.log locks jb 3", M), 1);
	EXPECT_CONTAINS(out, "mesh: journal 'j.log' ends in a torn record at offset");
	EXPECT_CONTAINS(out, "mesh job check j.log");
	EXPECT_CONTAINS(out, "done 1,");
	EXPECT_EQ(fsize("j.log"), good + 4);
	EXPECT_EQ(MESH("status j.log locks jb 3 --json", M), 1);
	EXPECT_EQ(fsize("j.log"), good + 4);
	EXPECT_EQ(access("locks", F_OK), -1);
	EXPECT_EQ(MESH("check j.log", M), 0);
	EXPECT_EQ(fsize("j.log"), good);
	EXPECT_EQ(MESH("status j.log locks jb 3", M), 1);
	EXPECT_CONTAINS(out, "done 1,");
}

TEST(cli_job_journal_that_is_not_a_file)
{
	ASSERT_EQ(mkfifo("f.log", 0644), 0);
	ASSERT_EQ(mkdir("d.log", 0755), 0);
	/* timeout: a FIFO without a writer hung the submit */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "timeout 5 %s job submit f.log 3", M), 65);
	EXPECT_CONTAINS(out, "mesh: journal 'f.log' is a FIFO, not a journal file");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "timeout 5 %s job status f.log locks jb 3", M), 65);
	EXPECT_CONTAINS(out, "'f.log' is a FIFO");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "timeout 5 %s job harvest f.log locks jb 3 10 n1", M), 65);
	EXPECT_CONTAINS(out, "'f.log' is a FIFO");
	EXPECT_EQ(MESH("submit d.log 3", M), 65);
	EXPECT_CONTAINS(out, "mesh: journal 'd.log' is a directory, not a journal file");
	EXPECT_EQ(MESH("status d.log locks jb 3", M), 65);
	EXPECT_CONTAINS(out, "'d.log' is a directory");
	EXPECT_EQ(MESH("complete d.log locks jb 0 n1", M), 65);
	EXPECT_CONTAINS(out, "'d.log' is a directory");
	EXPECT_EQ(MESH("retry d.log", M), 65);
	EXPECT_CONTAINS(out, "'d.log' is a directory");
}

TEST(cli_job_journal_that_cannot_be_written)
{
	ASSERT_EQ(MESH("submit j.log 3", M), 0);
	off_t size = fsize("j.log");
	if (t_sh(out, sizeof out, 1, "chattr +i j.log") != 0) {
		printf("skip immutable part: chattr +i refused here (%s)\n", out);
	} else {
		/* immutable: the writers refuse up front, naming the journal
		 * (EXPECT only until chattr -i: the runner must remove it) */
		EXPECT_EQ(MESH("complete j.log locks jb 0 n1", M), 77);
		EXPECT_CONTAINS(out, "mesh: journal 'j.log' cannot be written: Operation not permitted");
		EXPECT_EQ(MESH("harvest j.log locks jb 3 10 n1", M), 77);
		EXPECT_EQ(MESH("status j.log locks jb 3", M), 1); /* reading it is fine */
		EXPECT_EQ(MESH("submit j.log 3", M), 0);
		t_sh(NULL, 0, 0, "chattr -i j.log");
		EXPECT_EQ(fsize("j.log"), size);
	}
	/* read-only to its user (root writes anyway: run as nobody) */
	char dir[] = "/tmp/mesh-ro.XXXXXX";
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	ASSERT_EQ(chmod(dir, 0755), 0);
	if (t_sh(out, sizeof out, 1, "setpriv --reuid=65534 --regid=65534 --clear-groups true") != 0) {
		printf("skip read-only part: setpriv refused here (%s)\n", out);
	} else {
		ASSERT_EQ(t_sh(out, sizeof out, 1, "cd %s && %s job submit r.log 3", dir, M), 0);
		int rc_c = t_sh(out, sizeof out, 1,
				"cd %s && setpriv --reuid=65534 --regid=65534 --clear-groups %s job complete r.log locks jb 0 n1",
				dir, M);
		EXPECT_EQ(rc_c, 77);
		EXPECT_CONTAINS(out, "mesh: journal 'r.log' cannot be written: Permission denied");
		int rc_s = t_sh(out, sizeof out, 1,
				"cd %s && setpriv --reuid=65534 --regid=65534 --clear-groups %s job status r.log locks jb 3",
				dir, M);
		EXPECT_EQ(rc_s, 1);
	}
	t_sh(NULL, 0, 0, "rm -rf %s", dir);
}

TEST(cli_job_lock_dir_under_a_missing_parent)
{
	char lockdir[96];
	snprintf(lockdir, sizeof lockdir, "/tmp/mesh-missing-%d/locks", (int)getpid());
	ASSERT_EQ(MESH("submit j.log 3", M), 0);
	EXPECT_EQ(MESH("complete j.log %s jb 0 n1", M, lockdir), 73);
	EXPECT_CONTAINS(out, "mesh: cannot create lock directory '/tmp/mesh-missing-");
	EXPECT_CONTAINS(out, "No such file or directory");
	EXPECT_EQ(strstr(out, "j.log"), NULL);
	EXPECT_EQ(MESH("harvest j.log %s jb 3 10 n1", M, lockdir), 73);
	EXPECT_CONTAINS(out, "lock directory");
	/* status only reads: no lock dir, nothing leased */
	EXPECT_EQ(MESH("status j.log %s jb 3", M, lockdir), 1);
	EXPECT_CONTAINS(out, "leased 0, pending 3");
}

TEST(cli_job_chunk_count_the_engine_holds)
{
	EXPECT_EQ(MESH("submit big.log 1000000000000", M), 65);
	EXPECT_CONTAINS(out, "more than the engine handles");
	EXPECT_CONTAINS(out, "at most 4294967296");
	EXPECT_EQ(access("big.log", F_OK), -1);
	EXPECT_EQ(MESH("submit big.log 4294967297", M), 65);
	EXPECT_EQ(MESH("status big.log locks jb 1000000000000", M), 65);
	EXPECT_CONTAINS(out, "more than the engine handles");
	/* a journal made before the limit existed: named, not "out of memory" */
	unsigned char pay[8];
	uint64_t n = 1000000000000ull;
	for (int i = 0; i < 8; i++)
		pay[i] = (unsigned char)(n >> (8 * i));
	struct mesh_jrec r = {MESH_JREC_SUBMIT, 0, 8, pay, 0};
	ASSERT_EQ(mesh_journal_create("huge.log", &r), 0);
	EXPECT_EQ(MESH("retry huge.log", M), 65);
	EXPECT_CONTAINS(out, "journal 'huge.log' holds 1000000000000 chunks, more than the engine handles");
	EXPECT_EQ(MESH("harvest huge.log locks jb 4294967296 10 n1", M), 65);
	EXPECT_CONTAINS(out, "more than the engine handles");
}

/* harvest's summary and verdict go to stderr: stdout is the chunks' own
 * output (they were mixed into it). */
TEST(cli_job_harvest_summary_on_stderr)
{
	ASSERT_EQ(MESH("submit j.log 3", M), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 0, "%s job harvest j.log locks jb 3 10 n1 -- echo c{} 2>err.txt | sort", M), 0);
	EXPECT_STREQ(out, "c0\nc1\nc2\n");
	char *err = t_read_file("err.txt", NULL);
	EXPECT_CONTAINS(err, "harvest n1: started 3, done 3");
	EXPECT_CONTAINS(err, "COMPLETE\n");
	free(err);
}

/* A mistyped command gets git's "did you mean" (a typo, a swap, a letter
 * short), an unrelated word only "unknown command". */
TEST(cli_mistyped_command_did_you_mean)
{
	static const char *const cases[][2] = {
		{"sumbit", "did you mean 'submit'?"}, {"cancle", "did you mean 'cancel'?"},
		{"reslts", "did you mean 'results'?"}, {"rnu", "did you mean 'run'?"},
		{"pss", "did you mean 'ps'?"},	       {"verison", "did you mean 'version'?"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		EXPECT_EQ(t_sh(out, sizeof out, 1, "%s %s", M, cases[i][0]), 64);
		EXPECT_CONTAINS(out, cases[i][1]);
	}
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s xyzzy", M), 64);
	EXPECT_CONTAINS(out, "unknown command 'xyzzy'\n");
}

/* status --json counts every DONE of a node, also those `mesh job
 * complete` writes without a duration (it counted 0 of them); the mean
 * is over the DONEs that carry one. */
TEST(cli_job_status_json_counts_completions_without_duration)
{
	ASSERT_EQ(MESH("submit j.log 4", M), 0);
	EXPECT_EQ(MESH("complete j.log locks jb 0 n1", M), 0);
	EXPECT_EQ(MESH("complete j.log locks jb 1 n1", M), 0);
	EXPECT_EQ(MESH("complete j.log locks jb 2 n2", M), 0);
	EXPECT_EQ(MESH("harvest j.log locks jb 4 10 n3 -- true", M), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s job status j.log locks jb 4 --json", M), 0);
	json_error_t err;
	json_t *o = json_loads(out, 0, &err);
	ASSERT_TRUE(o != NULL);
	json_t *nodes = json_object_get(o, "nodes");
	int seen = 0;
	for (size_t i = 0; i < json_array_size(nodes); i++) {
		json_t *nd = json_array_get(nodes, i);
		const char *name = json_string_value(json_object_get(nd, "name"));
		json_int_t c = json_integer_value(json_object_get(nd, "completions"));
		int want = !strcmp(name, "n1") ? 2 : !strcmp(name, "n2") || !strcmp(name, "n3") ? 1 : -1;
		if (want < 0)
			continue;
		EXPECT_EQ(c, want);
		seen++;
	}
	EXPECT_EQ(seen, 3);
	json_decref(o);
}
