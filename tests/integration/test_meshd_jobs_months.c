/* meshd's jobs over months (docs/jobs.md, "Running meshd for months"): one
 * meshd a state directory, results checked against the journal.  The real
 * meshd and mesh binaries, tests/workers/job_worker, a state directory in
 * the test's own directory. */
#include "base/crc.h"
#include "base/exit.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
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

/* `mesh results id` is "0:LINE\n1:LINE\n..." for n chunks. */
static void expect_results(unsigned id, const char *line, int n)
{
	size_t cap = (size_t)n * (strlen(line) + 24) + 1, k = 0;
	char *want = malloc(cap);
	ASSERT_TRUE(want != NULL);
	want[0] = 0;
	for (int i = 0; i < n; i++)
		k += (size_t)snprintf(want + k, cap - k, "%d:%s\n", i, line);
	EXPECT_EQ(mesh(0, "results %u", id), 0);
	EXPECT_STREQ(out, want);
	free(want);
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
	expect_results(id, "slow", 100);
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

/* The lease directory an older meshd gave job id in this test's state
 * directory: /tmp/meshd-<uid>-<hash of the state dir>-j<id> (in buf);
 * prefix (may be NULL) gets its name in /tmp up to the id. */
static void old_lease_dir(char *buf, size_t cap, char *prefix, size_t pcap, unsigned id)
{
	char real[4096];
	mkdir("state", 0700);
	ASSERT_TRUE(realpath("state", real) != NULL);
	uint32_t h = (uint32_t)mesh_fnv1a64(MESH_FNV1A64_INIT, real, strlen(real));
	snprintf(buf, cap, "/tmp/meshd-%u-%08x-j%u", (unsigned)getuid(), h, id);
	if (prefix)
		snprintf(prefix, pcap, "meshd-%u-%08x-", (unsigned)getuid(), h);
}

/* Entries of /tmp whose name starts with prefix. */
static int tmp_count(const char *prefix)
{
	DIR *d = opendir("/tmp");
	struct dirent *e;
	int n = 0;
	ASSERT_TRUE(d != NULL);
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

static int exists(void *path)
{
	return access(path, F_OK) == 0;
}

/* Item 5 of issue 31: a meshd job's lease directory was
 * /tmp/meshd-<uid>-<hash>-j<id>: anyone could make the next ones first
 * (the jobs went to `error`, the message blaming journal.log), none was
 * ever removed, and `ls /tmp` told how many jobs ran.  Now it is
 * <state>/jobs/<id>/leases, 0700 inside the private state directory, and
 * goes when its job ends.  The next three old names are made here as a
 * hostile user would: another user's (root chowns it; else one writable
 * by others), one writable by others, a symlink. */
TEST_TIMEOUT(jobs_lease_dirs_are_private_and_go_with_their_job, 60)
{
	char d[3][128], prefix[64];
	for (unsigned i = 0; i < 3; i++)
		old_lease_dir(d[i], sizeof d[i], prefix, sizeof prefix, i + 1);
	ASSERT_EQ(mkdir(d[0], 0700), 0);
	if (getuid() == 0)
		ASSERT_EQ(chown(d[0], 4242, 4242), 0);
	else
		ASSERT_EQ(chmod(d[0], 0777), 0);
	ASSERT_EQ(mkdir(d[1], 0700), 0);
	ASSERT_EQ(chmod(d[1], 0777), 0);
	ASSERT_EQ(symlink("/tmp", d[2]), 0);
	add_job_worker();
	start_meshd(NULL);
	input_of("slow", 40);
	unsigned id = submit("jw --input in.txt");
	/* While it runs: in the job's own directory, private. */
	EXPECT_TRUE(t_wait_for(exists, "state/jobs/1/leases", 5000));
	struct stat st;
	if (stat("state/jobs/1/leases", &st) == 0)
		EXPECT_EQ(st.st_mode & 0777, 0700);
	json_t *j = meshd_t_job_json(out, sizeof out, id);
	char want[4200], real[4096];
	ASSERT_TRUE(realpath("state", real) != NULL);
	snprintf(want, sizeof want, "%s/jobs/1/leases", real);
	EXPECT_STREQ(json_string_value(json_object_get(j, "lockdir")), want);
	json_decref(j);
	EXPECT_EQ(mesh(1, "wait %u --quiet", id), 0);
	expect_results(id, "slow", 40);
	for (unsigned k = 2; k <= 3; k++)
		EXPECT_EQ(mesh(1, "submit jw --wait ::: a b c"), 0);
	for (unsigned k = 1; k <= 3; k++) {
		char leases[64];
		snprintf(leases, sizeof leases, "state/jobs/%u/leases", k);
		EXPECT_EQ(access(leases, F_OK), -1);
	}
	/* Nothing new in /tmp; what another user made there is left alone. */
	EXPECT_EQ(tmp_count(prefix), 3);
	EXPECT_EQ(lstat(d[0], &st), 0);
	if (getuid() == 0)
		EXPECT_EQ(st.st_uid, 4242);
	EXPECT_EQ(lstat(d[2], &st), 0);
	EXPECT_TRUE(S_ISLNK(st.st_mode));
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	rmdir(d[0]);
	rmdir(d[1]);
	unlink(d[2]);
}

/* Done of job id now (`mesh jobs --json`). */
static int64_t done_of(unsigned id)
{
	json_t *j = meshd_t_job_json(out, sizeof out, id);
	int64_t done = meshd_t_jint(j, "done");
	json_decref(j);
	return done;
}

/* Runs a 100-chunk job of 20 ms chunks until 10 are DONE, then SIGKILLs
 * meshd; the job's lease dir (its lockdir) in lockdir. */
static unsigned killed_mid_job(char *lockdir, size_t cap)
{
	add_job_worker();
	start_meshd(NULL);
	input_of("slow", 100);
	unsigned id = submit("jw --input in.txt");
	json_t *j = meshd_t_job_json(out, sizeof out, id);
	snprintf(lockdir, cap, "%s", json_string_value(json_object_get(j, "lockdir")));
	json_decref(j);
	uint64_t until = t_now_ms() + 20000;
	while (done_of(id) < 10 && t_now_ms() < until)
		usleep(10000);
	ASSERT_GE(done_of(id), 10);
	kill(meshd_pid, SIGKILL);
	EXPECT_EQ(meshd_t_wait(meshd_pid), 128 + SIGKILL);
	return id;
}

/* An upgrade from a meshd whose jobs leased in /tmp: a job it was running
 * (its spec of the format before, naming /tmp/meshd-...-j1, and a lease
 * file left there) resumes and finishes under the new meshd, each chunk
 * DONE once with its result; the old directory, ours, is removed (its
 * lease only returned a chunk to PENDING), and the new one goes with the
 * job's end. */
TEST_TIMEOUT(jobs_a_running_job_of_an_older_meshd_finishes_after_the_upgrade, 90)
{
	char lockdir[4200], old[128], prefix[64], path[4300];
	unsigned id = killed_mid_job(lockdir, sizeof lockdir);
	old_lease_dir(old, sizeof old, prefix, sizeof prefix, id);
	/* The spec an older meshd wrote: no vouches, no check, its lockdir. */
	char spec[256];
	snprintf(spec, sizeof spec, "state/jobs/%u/spec", id);
	char *text = t_read_file(spec, NULL), *save = NULL;
	ASSERT_TRUE(text != NULL);
	FILE *f = fopen(spec, "w");
	ASSERT_TRUE(f != NULL);
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(l, "format ", 7) || !strncmp(l, "vouch ", 6) || !strncmp(l, "check ", 6))
			continue;
		if (!strncmp(l, "lockdir ", 8))
			fprintf(f, "lockdir %s\n", old);
		else
			fprintf(f, "%s\n", l);
	}
	fclose(f);
	free(text);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "rm -rf '%s' && mkdir -m 700 '%s' && echo stale > '%s/j%u.50.lease'", lockdir,
		       old, old, id),
		  0);
	start_meshd(NULL);
	EXPECT_EQ(mesh(1, "wait %u --quiet", id), 0);
	expect_results(id, "slow", 100);
	EXPECT_EQ(access(old, F_OK), -1);
	EXPECT_EQ(access(lockdir, F_OK), -1);
	EXPECT_EQ(tmp_count(prefix), 0);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	snprintf(path, sizeof path, "'%s' job check state/jobs/%u/journal.log", t_bin("mesh"), id);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s", path), 0);
	EXPECT_CONTAINS(out, "done 100,");
	EXPECT_CONTAINS(out, "100 DONE chunks: 100 results in the file");
	rmdir(old);
}

/* A lease directory that cannot be used (here made writable by others
 * while meshd was down) puts the job in `error` with a message that names
 * it, not the journal. */
TEST_TIMEOUT(jobs_a_lease_dir_that_cannot_be_used_is_named, 60)
{
	char lockdir[4200];
	unsigned id = killed_mid_job(lockdir, sizeof lockdir);
	ASSERT_EQ(chmod(lockdir, 0777), 0);
	start_meshd(NULL);
	EXPECT_EQ(mesh(1, "wait %u --quiet", id), MESH_EXIT_SOFTWARE);
	json_t *j = meshd_t_job_json(out, sizeof out, id);
	const char *err = json_string_value(json_object_get(j, "error"));
	char want[4300];
	snprintf(want, sizeof want, "lease directory %s: not private", lockdir);
	EXPECT_CONTAINS(err, want);
	json_decref(j);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	chmod(lockdir, 0700);
}
