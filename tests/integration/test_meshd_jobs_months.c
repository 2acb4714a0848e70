/* meshd's jobs over months (docs/jobs.md, "Running meshd for months"): one
 * meshd a state directory, results checked against the journal.  The real
 * meshd and mesh binaries, tests/workers/job_worker, a state directory in
 * the test's own directory. */
#include "base/asan.h"
#include "base/crc.h"
#include "base/exit.h"
#include "client/api_client.h"
#include "meshd/jobs/jobs.h"
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
#include <sys/resource.h>
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
	pid_t a = meshd_pid = meshd_t_start(.state = "state");
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
	meshd_pid = meshd_t_start(.state = "state");
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
	meshd_pid = meshd_t_start(.state = "state");
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
	meshd_pid = meshd_t_start(.state = "state");
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

/* Runs a job of n 20 ms chunks until 10 are DONE, then SIGKILLs meshd;
 * the job's lease dir (its lockdir) in lockdir.  n: enough that the job
 * is still running when the polls (a `mesh` each, slow under ASan and
 * load) see 10 done (with 100 a make check once saw the job end first:
 * its lease dir gone). */
static unsigned killed_mid_job(char *lockdir, size_t cap, int n)
{
	add_job_worker();
	meshd_pid = meshd_t_start(.state = "state");
	input_of("slow", n);
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
	unsigned id = killed_mid_job(lockdir, sizeof lockdir, 400);
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
	meshd_pid = meshd_t_start(.state = "state");
	EXPECT_EQ(mesh(1, "wait %u --quiet", id), 0);
	expect_results(id, "slow", 400);
	EXPECT_EQ(access(old, F_OK), -1);
	EXPECT_EQ(access(lockdir, F_OK), -1);
	EXPECT_EQ(tmp_count(prefix), 0);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	snprintf(path, sizeof path, "'%s' job check state/jobs/%u/journal.log", t_bin("mesh"), id);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s", path), 0);
	EXPECT_CONTAINS(out, "done 400,");
	EXPECT_CONTAINS(out, "400 DONE chunks: 400 results in the file");
	rmdir(old);
}

/* A lease directory that cannot be used (here made writable by others
 * while meshd was down) puts the job in `error` with a message that names
 * it, not the journal. */
TEST_TIMEOUT(jobs_a_lease_dir_that_cannot_be_used_is_named, 60)
{
	char lockdir[4200];
	unsigned id = killed_mid_job(lockdir, sizeof lockdir, 2000);
	ASSERT_EQ(chmod(lockdir, 0777), 0);
	meshd_pid = meshd_t_start(.state = "state");
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

/* ---- item 1: finished jobs hold nothing; retention; mesh rm ---- */

/* One request to meshd's API (the library `mesh` uses): the HTTP status;
 * the body in out. */
static int api(const char *method, const char *target, const char *body)
{
	struct meshd_reply r = MESHD_REPLY_INIT;
	int rc = meshd_client_request(SOCK, method, target, body, body ? strlen(body) : 0, 60 * 1000000000ull, &r);
	ASSERT_EQ(rc, 0);
	snprintf(out, sizeof out, "%.*s", (int)r.len, r.body ? r.body : "");
	int status = r.status;
	meshd_reply_release(&r);
	return status;
}

/* A three-line job through the API, waited for (as `mesh submit --wait`
 * does) and its results read (as `mesh results` does): its id. */
static unsigned small_job(void)
{
	char target[128];
	ASSERT_EQ(api("POST", "/v1/jobs?program=jw", "a\nb\nc\n"), 201);
	json_t *j = json_loads(out, 0, NULL);
	unsigned id = (unsigned)strtoul(json_string_value(json_object_get(j, "id")), NULL, 10);
	json_decref(j);
	ASSERT_GT(id, 0);
	snprintf(target, sizeof target, "/v1/jobs/%u?wait=20", id);
	for (;;) {
		ASSERT_EQ(api("GET", target, NULL), 200);
		if (!strstr(out, "\"state\":\"running\""))
			break;
	}
	ASSERT_CONTAINS(out, "\"state\":\"complete\"");
	snprintf(target, sizeof target, "/v1/jobs/%u/results", id);
	ASSERT_EQ(api("GET", target, NULL), 200);
	ASSERT_STREQ(out, "0:a\n1:b\n2:c\n");
	return id;
}

static int fds_of(pid_t pid)
{
	int n = t_proc_fds((int)pid);
	ASSERT_GE(n, 0);
	return n;
}

/* kB of pid's own resident memory: its heap and stacks (RssAnon), not
 * the slot rings it shares with its warm workers (RssShmem, returned when
 * the idle TTL stops them) nor its binary's pages. */
static long rss_kb(pid_t pid)
{
	return t_proc_status((int)pid, "RssAnon:");
}

static int fds_at_most(void *arg)
{
	return fds_of(meshd_pid) <= *(int *)arg;
}

/* Item 1 of issue 31: each finished job kept 4 fds (an eventfd, its lease
 * dir, results.bin, journal.log) and its per-chunk memory for good: after
 * 500 three-line jobs meshd held 2,049 fds and 28 MB, and a restart on
 * that state under `ulimit -n 1024` could not start.  Now a finished job
 * holds no fd (its files are opened when its results or failures are
 * read, and closed again within FILES_IDLE) and no per-chunk memory, and
 * a start needs O(1) fds whatever the number of jobs.
 *
 * SOAK jobs (each: submit, wait, results) through one meshd after a
 * warm-up; then meshd's fds must be back within 2 of where they were once
 * its cached files are closed (at most 200 more meanwhile: a leak would be
 * thousands), and its RSS within 4 MB + 1 KB a job of it.  Then a restart under a hard limit of
 * 256 fds, on the state with the jobs kept (the default --keep-jobs, 1000,
 * more than 256): it serves within a second and lists them all. */
#ifdef MESH_UNDER_ASAN
/* ASan keeps what is freed in a quarantine (256 MB) and runs several times
 * slower: fewer jobs, fds alone bounded, a restart within 5 s. */
static const int under_asan = 1;
#ifndef SOAK
#define SOAK 400
#endif
#else
static const int under_asan = 0;
#ifndef SOAK
#define SOAK 2000
#endif
#endif
TEST_TIMEOUT(jobs_soak_fds_and_memory_flat_and_a_restart_under_256_fds, 180)
{
	add_job_worker();
	meshd_pid = meshd_t_start(.state = "state");
	for (int i = 0; i < 20; i++)
		small_job();
	usleep(3000 * 1000); /* the warm-up's cached files closed */
	int fd0 = fds_of(meshd_pid);
	long rss0 = rss_kb(meshd_pid), rss_half = 0;
	int peak = fd0;
	uint64_t t0 = t_now_ms();
	for (int i = 0; i < SOAK; i++) {
		small_job();
		int n = fds_of(meshd_pid);
		peak = n > peak ? n : peak;
		if (i + 1 == SOAK / 2)
			rss_half = rss_kb(meshd_pid);
	}
	uint64_t took = t_now_ms() - t0;
	int bound = fd0 + 2;
	EXPECT_TRUE(t_wait_for(fds_at_most, &bound, 5000));
	int fd1 = fds_of(meshd_pid);
	long rss1 = rss_kb(meshd_pid);
	fprintf(stderr,
		"    %d jobs in %llu ms: fds %d -> %d (peak %d), RssAnon %ld -> %ld -> %ld kB (start, half, end), VmRSS %ld kB\n",
		SOAK, (unsigned long long)took, fd0, fd1, peak, rss0, rss_half, rss1, t_proc_status(meshd_pid, "VmRSS:"));
	EXPECT_LE(fd1, fd0 + 2);
	/* Meanwhile: the jobs whose files are still cached (closed within
	 * FILES_IDLE; a loaded machine runs the janitor late: CI saw 87 over
	 * fd0).  A leak would be 4 a job: thousands. */
	EXPECT_LE(peak, fd0 + 200);
	/* Memory: what the kept jobs hold (at most --keep-jobs, 1,000, of a
	 * few KB each), not what they ran: under 8 MB in all, and the second
	 * half (where as many jobs are removed as run) under 2 MB. */
	if (!under_asan) {
		EXPECT_LT(rss1 - rss0, 8 * 1024);
		EXPECT_LT(rss1 - rss_half, 2 * 1024);
	}
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	/* The restart, under 256 fds. */
	struct rlimit rl = {256, 256};
	ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
	t0 = t_now_ms();
	meshd_pid = meshd_t_start(.state = "state");
	ASSERT_EQ(api("GET", "/v1/jobs?all=1", NULL), 200);
	took = t_now_ms() - t0;
	json_t *j = json_loads(out, 0, NULL);
	size_t kept = json_array_size(json_object_get(j, "jobs"));
	json_decref(j);
	fprintf(stderr, "    restart with %zu jobs under 256 fds: serving and listed in %llu ms, %d fds\n", kept,
		(unsigned long long)took, fds_of(meshd_pid));
	/* Under a second on a quiet machine (the figure above; issue 31); the
	 * bound leaves room for a loaded CI: a start that reads every job's
	 * journal would take far longer. */
	EXPECT_LT(took, under_asan ? 5000 : 3000);
	EXPECT_EQ(kept, SOAK + 20 > MESHD_KEEP_JOBS_DEFAULT ? MESHD_KEEP_JOBS_DEFAULT : SOAK + 20);
	EXPECT_LT(fds_of(meshd_pid), 64);
	small_job();
	char *err = t_read_file("meshd.err", NULL);
	EXPECT_TRUE(err && !strstr(err, "Too many open files"));
	free(err);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
}

/* Whether job id's directory is there. */
static int job_dir(unsigned id)
{
	char d[64];
	snprintf(d, sizeof d, "state/jobs/%u", id);
	return access(d, F_OK) == 0;
}

static int job_dir_gone(void *id)
{
	return !job_dir(*(unsigned *)id);
}

/* Waits (2 s at most: the janitor looks each second and at each job's
 * end) until job id's directory is gone: 1 when it went. */
static int gone_soon(unsigned id)
{
	return t_wait_for(job_dir_gone, &id, 2000);
}

/* Retention: meshd keeps the newest --keep-jobs finished jobs and those
 * that ended within --keep-for; older ones go (their directory, lease dir
 * and all).  `mesh jobs` lists the running and the 20 most recent, `mesh
 * jobs --all` every one kept.  A removed job's id is never given again,
 * across restarts too. */
TEST_TIMEOUT(jobs_retention_removes_the_oldest_beyond_keep_jobs, 90)
{
	add_job_worker();
	meshd_pid = meshd_t_start(.state = "state", .args = "--keep-jobs 25");
	for (int i = 0; i < 30; i++)
		EXPECT_EQ(mesh(1, "submit jw --wait ::: a b"), 0);
	for (unsigned id = 1; id <= 5; id++)
		EXPECT_TRUE(gone_soon(id));
	for (unsigned id = 6; id <= 30; id++)
		EXPECT_TRUE(job_dir(id));
	EXPECT_EQ(mesh(1, "results 3"), MESH_EXIT_DATAERR);
	EXPECT_CONTAINS(out, "no job 3");
	EXPECT_EQ(mesh(0, "jobs"), 0);
	EXPECT_CONTAINS(out, "\n30 ");
	EXPECT_CONTAINS(out, "\n11 ");
	EXPECT_TRUE(!strstr(out, "\n10 "));
	EXPECT_CONTAINS(out, "5 older jobs not shown (mesh jobs --all)");
	EXPECT_EQ(mesh(0, "jobs --all"), 0);
	EXPECT_CONTAINS(out, "\n6 ");
	EXPECT_TRUE(!strstr(out, "\n5 "));
	/* The newest removed: its id is still never given again. */
	EXPECT_EQ(mesh(1, "rm 30"), 0);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	/* --keep-for: every job that ended over 2 s ago goes, at the start
	 * and then within a second of its time. */
	usleep(2500 * 1000);
	meshd_pid = meshd_t_start(.state = "state", .args = "--keep-jobs 25 --keep-for 2s");
	EXPECT_EQ(mesh(1, "submit jw --wait ::: a"), 0);
	EXPECT_TRUE(!strncmp(out, "31\n", 3));
	for (unsigned id = 6; id <= 29; id++)
		EXPECT_TRUE(gone_soon(id));
	EXPECT_TRUE(job_dir(31));
	usleep(2000 * 1000);
	EXPECT_TRUE(gone_soon(31));
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
}

/* `mesh rm JOB` removes one finished job (its directory, and from meshd);
 * a running one is refused, saying what `mesh cancel` is for. */
TEST_TIMEOUT(jobs_rm_removes_a_finished_job_and_refuses_a_running_one, 60)
{
	add_job_worker();
	meshd_pid = meshd_t_start(.state = "state");
	EXPECT_EQ(mesh(1, "submit jw --wait ::: a b"), 0);
	input_of("slow", 1000); /* running until cancelled (200 ended first under load) */
	unsigned id = submit("jw --input in.txt");
	EXPECT_EQ(mesh(1, "rm %u", id), MESH_EXIT_TEMPFAIL);
	EXPECT_CONTAINS(out, "is running");
	EXPECT_CONTAINS(out, "mesh cancel");
	EXPECT_TRUE(job_dir(id));
	EXPECT_EQ(mesh(1, "rm 1"), 0);
	EXPECT_CONTAINS(out, "removed job 1");
	EXPECT_FALSE(job_dir(1));
	EXPECT_EQ(mesh(1, "results 1"), MESH_EXIT_DATAERR);
	EXPECT_EQ(mesh(1, "rm 1"), MESH_EXIT_DATAERR);
	EXPECT_CONTAINS(out, "no job 1");
	EXPECT_EQ(mesh(1, "cancel %u", id), 0);
	EXPECT_EQ(mesh(1, "wait %u --quiet", id), MESH_EXIT_CANCELLED);
	EXPECT_EQ(mesh(1, "rm %u", id), 0);
	EXPECT_FALSE(job_dir(id));
	EXPECT_EQ(mesh(0, "jobs --all --json"), 0);
	EXPECT_CONTAINS(out, "\"jobs\":[]");
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	/* Gone for a restart too. */
	meshd_pid = meshd_t_start(.state = "state");
	EXPECT_EQ(mesh(1, "results 1"), MESH_EXIT_DATAERR);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
}

/* The k-th lowest fd number that pid has free (k = 1: the lowest). */
static int free_fd(pid_t pid, int k)
{
	char path[64];
	for (int fd = 0;; fd++) {
		snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
		if (access(path, F_OK) < 0 && --k == 0)
			return fd;
	}
}

/* A submit that runs out of fds says so (it said "Cannot allocate
 * memory"): meshd's fd limit is cut to what it holds now plus a few. */
TEST_TIMEOUT(jobs_out_of_fds_names_the_real_error, 60)
{
	add_job_worker();
	meshd_pid = meshd_t_start(.state = "state");
	EXPECT_EQ(mesh(1, "submit jw --wait ::: a"), 0);
	usleep(3000 * 1000);
	struct rlimit old, rl;
	ASSERT_EQ(prlimit(meshd_pid, RLIMIT_NOFILE, NULL, &old), 0);
	rl.rlim_cur = (rlim_t)free_fd(meshd_pid, 2);
	rl.rlim_max = old.rlim_max;
	ASSERT_EQ(prlimit(meshd_pid, RLIMIT_NOFILE, &rl, NULL), 0);
	int rc = mesh(1, "submit jw ::: a b c");
	ASSERT_EQ(prlimit(meshd_pid, RLIMIT_NOFILE, &old, NULL), 0);
	EXPECT_NE(rc, 0);
	EXPECT_CONTAINS(out, "Too many open files");
	EXPECT_TRUE(!strstr(out, "Cannot allocate memory"));
	EXPECT_EQ(mesh(1, "submit jw --wait ::: a"), 0);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
}

/* An older meshd's end file holds the state word alone: the first start
 * counts the job from its journal once (opened and closed) and writes the
 * end file again with the counts, which later starts read. */
TEST_TIMEOUT(jobs_an_end_of_an_older_meshd_is_counted_once, 60)
{
	add_job_worker();
	meshd_pid = meshd_t_start(.state = "state");
	EXPECT_EQ(mesh(1, "submit jw --wait ::: a b c fail"), MESH_EXIT_INCOMPLETE);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
	char *end = t_read_file("state/jobs/1/end", NULL);
	EXPECT_CONTAINS(end, "failed\ndone 3\n");
	EXPECT_CONTAINS(end, "\nburied 1\n");
	free(end);
	t_write_file("state/jobs/1/end", "failed\n");
	meshd_pid = meshd_t_start(.state = "state");
	json_t *j = meshd_t_job_json(out, sizeof out, 1);
	EXPECT_STREQ(json_string_value(json_object_get(j, "state")), "failed");
	EXPECT_EQ(meshd_t_jint(j, "done"), 3);
	EXPECT_EQ(meshd_t_jint(j, "buried"), 1);
	json_decref(j);
	end = t_read_file("state/jobs/1/end", NULL);
	EXPECT_CONTAINS(end, "failed\ndone 3\n");
	free(end);
	/* Its failures and results are read from its files, opened for that. */
	EXPECT_EQ(mesh(1, "wait 1 --quiet"), MESH_EXIT_INCOMPLETE);
	EXPECT_EQ(api("GET", "/v1/jobs/1", NULL), 200);
	EXPECT_CONTAINS(out, "refused: fail");
	EXPECT_EQ(mesh(0, "results 1"), 0);
	EXPECT_STREQ(out, "0:a\n1:b\n2:c\n");
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
}

/* No per-chunk memory stays with a job that ended: a 200,000-chunk job
 * (its journal handles' bitmaps, its results index of 16 bytes a chunk,
 * its buried bitmap) leaves meshd's own memory within 2 MB of where it
 * was once its files are closed (2 s after their last use) and the
 * janitor gave the freed memory back (malloc_trim). */
TEST_TIMEOUT(jobs_a_big_job_that_ended_holds_no_per_chunk_memory, 120)
{
	add_job_worker();
	meshd_pid = meshd_t_start(.state = "state");
	EXPECT_EQ(mesh(1, "submit jw --wait --chunks 1000"), 0);
	usleep(3000 * 1000);
	long rss0 = rss_kb(meshd_pid), vm0 = t_proc_status(meshd_pid, "VmRSS:");
	EXPECT_EQ(mesh(1, "submit jw --wait --chunks 200000"), 0);
	long rss_end = rss_kb(meshd_pid);
	usleep(3000 * 1000);
	long rss1 = rss_kb(meshd_pid);
	fprintf(stderr, "    200,000 chunks: RssAnon %ld -> %ld at its end -> %ld kB 3 s later (VmRSS %ld -> %ld)\n", rss0,
		rss_end, rss1, vm0, t_proc_status(meshd_pid, "VmRSS:"));
	if (!under_asan)
		EXPECT_LT(rss1 - rss0, 2048);
	EXPECT_EQ(meshd_t_stop(meshd_pid), 0);
}
