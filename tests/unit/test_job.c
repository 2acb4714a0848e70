#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "job/job.h"
#include "job/record.h"
#include "journal/journal.h"
#include "runner/t.h"
#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS MESH_NS_PER_MS

static struct mesh_job *open_node(const char *journal, const char *node, uint64_t n)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j = NULL;
	o.journal = journal;
	o.lockdir = "locks";
	o.name = "jb";
	o.nchunks = n;
	o.node = node;
	int rc = mesh_job_open(&j, &o);
	if (rc)
		t__fail(__FILE__, __LINE__, "open %s as %s: %s", journal, node, mesh_strerror(rc));
	return j;
}

static off_t fsize(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 ? st.st_size : -1;
}

static uint64_t journal_done_records(const char *path)
{
	struct mesh_journal_report r;
	if (mesh_job_journal_check(path, 0, &r))
		return UINT64_MAX;
	return r.by_type[MESH_JREC_DONE];
}

TEST(job_submit_rules)
{
	EXPECT_EQ(mesh_job_submit("j.log", 10), 0);
	off_t size = fsize("j.log");
	EXPECT_EQ(mesh_job_submit("j.log", 10), 0);
	EXPECT_EQ(fsize("j.log"), size);
	EXPECT_EQ(mesh_job_submit("j.log", 11), MESH_E_MISMATCH);
	EXPECT_EQ(fsize("j.log"), size);
	EXPECT_EQ(mesh_job_submit("k.log", 0), MESH_E_RANGE);
	EXPECT_EQ(mesh_job_submit("k.log", MESH_JOB_MAX_CHUNKS + 1), MESH_E_RANGE);
	EXPECT_EQ(mesh_job_submit("k.txt", 5), MESH_E_PATH);
	EXPECT_EQ(mesh_job_submit("../k.log", 5), MESH_E_PATH);
	EXPECT_EQ(mesh_job_submit(".log", 5), MESH_E_PATH);
	ASSERT_EQ(symlink("j.log", "s.log"), 0);
	EXPECT_EQ(mesh_job_submit("s.log", 10), MESH_E_PATH);
	t_write_file("foreign.log", "hello\n");
	EXPECT_EQ(mesh_job_submit("foreign.log", 10), MESH_E_FOREIGN);
	EXPECT_EQ(fsize("foreign.log"), 6);
	EXPECT_EQ(fsize("k.log"), -1);
	EXPECT_EQ(access("k.txt", F_OK), -1);
	/* O(1) in n: ten million chunks is one small file */
	EXPECT_EQ(mesh_job_submit("big.log", 10000000), 0);
	EXPECT_LT(fsize("big.log"), 100);
}

TEST(job_open_errors)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j;
	o.lockdir = "locks";
	o.name = "jb";
	o.journal = "none.log";
	EXPECT_EQ(mesh_job_open(&j, &o), -ENOENT);
	t_write_file("f.log", "some text that is not a journal\n");
	o.journal = "f.log";
	EXPECT_EQ(mesh_job_open(&j, &o), MESH_E_FOREIGN);
	{
		struct mesh_jrec r = {MESH_JREC_NODE, 0, 6, "\1\0\0\0ab", 0};
		ASSERT_EQ(mesh_journal_create("nojob.log", &r), 0);
	}
	o.journal = "nojob.log";
	EXPECT_EQ(mesh_job_open(&j, &o), MESH_E_NOJOB);
	ASSERT_EQ(mesh_job_submit("j.log", 5), 0);
	o.journal = "j.log";
	o.nchunks = 6;
	EXPECT_EQ(mesh_job_open(&j, &o), MESH_E_MISMATCH);
	o.nchunks = 5;
	o.lockdir = "/var/locks";
	EXPECT_EQ(mesh_job_open(&j, &o), MESH_E_PATH);
	o.lockdir = "locks";
	o.name = "a/b";
	EXPECT_EQ(mesh_job_open(&j, &o), MESH_E_PATH);
	o.name = "jb";
	o.node = "has space";
	EXPECT_EQ(mesh_job_open(&j, &o), MESH_E_PARSE);
	EXPECT_EQ(access("locks", F_OK), -1); /* nothing was created */
	o.node = NULL;
	ASSERT_EQ(mesh_job_open(&j, &o), 0);
	EXPECT_EQ(access("locks", F_OK), 0);
	EXPECT_UEQ(mesh_job_nchunks(j), 5);
	mesh_job_close(j);
}

TEST(job_lease_complete_status)
{
	struct mesh_job *j;
	struct mesh_lease l;
	struct mesh_job_status st;
	ASSERT_EQ(mesh_job_submit("j.log", 3), 0);
	j = open_node("j.log", "n1", 3);
	ASSERT_TRUE(j != NULL);
	for (uint64_t i = 0; i < 3; i++) {
		ASSERT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), 0);
		EXPECT_UEQ(l.cid, i);
		EXPECT_EQ(l.attempt, 1);
		EXPECT_EQ(l.kind, MESH_LEASE_FRESH);
		EXPECT_GT(l.deadline_ns, l.started_ns);
	}
	EXPECT_EQ(access("locks/jb.1.lease", F_OK), 0);
	EXPECT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), MESH_JOB_NONE);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.leased, 3);
	EXPECT_UEQ(st.pending, 0);
	EXPECT_EQ(mesh_job_complete(j, 1, 5 * MS), MESH_JOB_DONE);
	EXPECT_EQ(access("locks/jb.1.lease", F_OK), -1);
	EXPECT_EQ(mesh_job_complete(j, 1, 0), MESH_JOB_IGNORED);
	EXPECT_EQ(mesh_job_complete(j, 3, 0), MESH_E_RANGE);
	EXPECT_EQ(mesh_job_is_done(j, 1), 1);
	EXPECT_EQ(mesh_job_is_done(j, 0), 0);
	EXPECT_EQ(mesh_job_is_done(j, 3), MESH_E_RANGE);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.done, 1);
	EXPECT_UEQ(st.leased, 2);
	EXPECT_UEQ(st.duplicates, 1);
	EXPECT_EQ(mesh_job_complete(j, 0, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_complete(j, 2, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), MESH_JOB_COMPLETE);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.done, 3);
	EXPECT_UEQ(st.pending + st.leased + st.buried, 0);
	mesh_job_close(j);
	EXPECT_UEQ(journal_done_records("j.log"), 3);
	/* a new process sees the same state */
	j = open_node("j.log", "n2", 0);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.done, 3);
	mesh_job_close(j);
}

static void fail_cb(const struct mesh_job_failure *f, void *arg)
{
	struct mesh_job_failure *out = arg;
	if (f->cid == 1)
		*out = *f;
}

TEST(job_fail_bury_retry)
{
	struct mesh_job *j;
	struct mesh_lease l;
	struct mesh_job_status st;
	struct mesh_job_failure f = {0};
	ASSERT_EQ(mesh_job_submit("j.log", 2), 0);
	j = open_node("j.log", "n1", 2);
	ASSERT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), 0);
	ASSERT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), 0);
	ASSERT_UEQ(l.cid, 1);
	EXPECT_EQ(mesh_job_fail(j, 1, 7), 0);
	EXPECT_EQ(access("locks/jb.1.lease", F_OK), -1); /* released: it can run again */
	ASSERT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_UEQ(l.cid, 1);
	EXPECT_EQ(l.attempt, 2);
	EXPECT_EQ(mesh_job_fail(j, 1, 8), 0);
	ASSERT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_EQ(l.attempt, 3);
	EXPECT_EQ(mesh_job_fail(j, 1, 137), 1); /* third failure buries it */
	EXPECT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), MESH_JOB_NONE);
	EXPECT_EQ(mesh_job_fail(j, 2, 1), MESH_E_RANGE);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.buried, 1);
	EXPECT_UEQ(st.failed_attempts, 3);
	EXPECT_UEQ(st.pending, 0);
	ASSERT_EQ(mesh_job_failures(j, fail_cb, &f), 0);
	EXPECT_UEQ(f.cid, 1);
	EXPECT_EQ(f.attempts, 3);
	EXPECT_EQ(f.last_status, 137);
	EXPECT_EQ(f.buried, 1);
	/* another process agrees (the failures are in the journal) */
	struct mesh_job *k = open_node("j.log", "n2", 2);
	EXPECT_EQ(mesh_job_lease(k, 10 * MESH_NS_PER_S, 0, &l), MESH_JOB_NONE);
	EXPECT_EQ(mesh_job_retry(k, 0), 0); /* chunk 0 is not buried */
	EXPECT_EQ(mesh_job_retry(k, UINT64_MAX), 1);
	EXPECT_EQ(mesh_job_retry(k, UINT64_MAX), 0);
	ASSERT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_UEQ(l.cid, 1);
	EXPECT_EQ(l.attempt, 4);
	EXPECT_EQ(mesh_job_complete(j, 1, 0), MESH_JOB_DONE);
	ASSERT_EQ(mesh_job_status(k, &st), 0);
	EXPECT_UEQ(st.buried, 0);
	mesh_job_close(j);
	mesh_job_close(k);
}

TEST(job_renew_steal_and_first_completion_wins)
{
	struct mesh_job *a, *b;
	struct mesh_lease la, lb;
	ASSERT_EQ(mesh_job_submit("j.log", 1), 0);
	a = open_node("j.log", "na", 1);
	b = open_node("j.log", "nb", 1);
	ASSERT_EQ(mesh_job_lease(a, 150 * MS, 0, &la), 0);
	EXPECT_EQ(mesh_job_lease(b, 150 * MS, 0, &lb), MESH_JOB_NONE);
	mesh_sleep_ns(100 * MS);
	EXPECT_EQ(mesh_job_renew(a, &la, 150 * MS), 0);
	mesh_sleep_ns(100 * MS);
	EXPECT_EQ(mesh_job_lease(b, 150 * MS, 0, &lb), MESH_JOB_NONE); /* renewed: still live */
	mesh_sleep_ns(120 * MS);
	ASSERT_EQ(mesh_job_lease(b, 10 * MESH_NS_PER_S, 0, &lb), 0);
	EXPECT_EQ(lb.kind, MESH_LEASE_STOLEN);
	EXPECT_EQ(lb.attempt, 2);
	EXPECT_EQ(mesh_job_renew(a, &la, 150 * MS), MESH_E_STATE);
	EXPECT_EQ(mesh_job_complete(a, 0, 0), MESH_JOB_DONE); /* the slow holder still finished first */
	EXPECT_EQ(mesh_job_complete(b, 0, 0), MESH_JOB_IGNORED);
	EXPECT_EQ(mesh_job_renew(b, &lb, 150 * MS), MESH_E_STATE);
	mesh_job_close(a);
	mesh_job_close(b);
	EXPECT_UEQ(journal_done_records("j.log"), 1);
}

TEST(job_garbled_lease_counts_as_expired)
{
	static const char *bad[] = {"", "garbage\n", "mesh-lease 1 99999999999999999999 1 1 0000000000000001 n x\n",
				    "mesh-lease 1 9999999999999999999 1 1 0000000000000001 n 00000000\n"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct mesh_job *j;
		struct mesh_lease l;
		char path[64];
		snprintf(path, sizeof path, "g%zu.log", i);
		ASSERT_EQ(mesh_job_submit(path, 1), 0);
		mkdir("locks", 0755);
		t_write_file("locks/jb.0.lease", bad[i]);
		/* An empty file counts once it is older than a claimer's
		 * create-then-write (below). */
		struct timespec old[2] = {{time(NULL) - 10, 0}, {time(NULL) - 10, 0}};
		ASSERT_EQ(utimensat(AT_FDCWD, "locks/jb.0.lease", old, 0), 0);
		j = open_node(path, "n1", 1);
		ASSERT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), 0);
		EXPECT_EQ(l.kind, MESH_LEASE_STOLEN);
		EXPECT_EQ(mesh_job_complete(j, 0, 0), MESH_JOB_DONE);
		mesh_job_close(j);
	}
}

/* A claimer creates its lease file (O_EXCL), then writes it: another node
 * that finds it still empty leaves it alone (it took it as expired before,
 * and the claim became a steal: job_exactly_one_claimer_and_one_stealer
 * saw a STOLEN winner in its claim round). */
TEST(job_fresh_empty_lease_is_a_claim_in_progress)
{
	struct mesh_job *j;
	struct mesh_lease l;
	ASSERT_EQ(mesh_job_submit("e.log", 1), 0);
	mkdir("locks", 0755);
	t_write_file("locks/jb.0.lease", "");
	j = open_node("e.log", "n1", 1);
	EXPECT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), MESH_JOB_NONE);
	mesh_job_close(j);
}

TEST(lease_line_codec_table)
{
	struct mesh_lease_stamp s = {.deadline_ns = 123456789,
				     .started_ns = 100,
				     .attempt = 3,
				     .token = 0xdeadbeefcafef00dull,
				     .node = "node-1.x",
				     .boot_deadline_ns = 987654321,
				     .holder = {.boot_id = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98,
							    0x76, 0x54, 0x32, 0x10},
						.timens = 4026531834ull,
						.pidns = 4026531836ull,
						.pid = 4242,
						.pid_start = 123456}},
				r;
	char buf[MESH_LEASE_LINE_MAX];
	size_t n = mesh_lease_format(buf, sizeof buf, &s);
	ASSERT_GT(n, 0);
	ASSERT_EQ(memcmp(buf, "mesh-lease 2 ", 13), 0);
	ASSERT_EQ(mesh_lease_parse(buf, n, &r), 0);
	EXPECT_UEQ(r.deadline_ns, s.deadline_ns);
	EXPECT_UEQ(r.started_ns, 100);
	EXPECT_EQ(r.attempt, 3);
	EXPECT_UEQ(r.token, s.token);
	EXPECT_STREQ(r.node, "node-1.x");
	EXPECT_UEQ(r.boot_deadline_ns, 987654321);
	EXPECT_EQ(memcmp(r.holder.boot_id, s.holder.boot_id, 16), 0);
	EXPECT_UEQ(r.holder.timens, s.holder.timens);
	EXPECT_UEQ(r.holder.pidns, s.holder.pidns);
	EXPECT_UEQ(r.holder.pid, 4242);
	EXPECT_UEQ(r.holder.pid_start, 123456);
	for (size_t k = 0; k < n; k++) /* every truncation is refused */
		EXPECT_EQ(mesh_lease_parse(buf, k, &r), MESH_E_PARSE);
	for (size_t k = 0; k + 1 < n; k++) { /* every changed byte is refused */
		char save = buf[k];
		buf[k] = save == '7' ? '8' : '7';
		EXPECT_EQ(mesh_lease_parse(buf, n, &r), MESH_E_PARSE);
		buf[k] = save;
	}
	/* the longest line fits MESH_LEASE_LINE_MAX */
	memset(s.node, 'n', MESH_NODE_MAX);
	s.node[MESH_NODE_MAX] = 0;
	s.deadline_ns = s.started_ns = s.boot_deadline_ns = s.token = UINT64_MAX;
	s.attempt = UINT32_MAX;
	s.holder.timens = s.holder.pidns = s.holder.pid_start = UINT64_MAX;
	s.holder.pid = INT32_MAX;
	n = mesh_lease_format(buf, sizeof buf, &s);
	ASSERT_GT(n, 0);
	EXPECT_EQ(mesh_lease_parse(buf, n, &r), 0);
	EXPECT_EQ(mesh_lease_format(buf, n, &s), 0); /* too small: nothing */
	/* format 1 (written before holders were recorded): read, holder unknown */
	static const char v1[] = "mesh-lease 1 123456789 100 3 deadbeefcafef00d node-1.x ";
	char line[128];
	snprintf(line, sizeof line, "%s%08x\n", v1, mesh_crc32c(0, v1, sizeof v1 - 1));
	ASSERT_EQ(mesh_lease_parse(line, strlen(line), &r), 0);
	EXPECT_UEQ(r.deadline_ns, 123456789);
	EXPECT_STREQ(r.node, "node-1.x");
	EXPECT_UEQ(r.boot_deadline_ns, 0);
	EXPECT_UEQ(r.holder.pid, 0);
	EXPECT_UEQ(r.holder.pidns, 0);
	line[11] = '3'; /* an unknown version */
	EXPECT_EQ(mesh_lease_parse(line, strlen(line), &r), MESH_E_PARSE);
	EXPECT_EQ(mesh_node_name_ok("a"), 1);
	EXPECT_EQ(mesh_node_name_ok(""), 0);
	EXPECT_EQ(mesh_node_name_ok("a b"), 0);
	EXPECT_EQ(mesh_node_name_ok("host:1@x"), 1);
	EXPECT_EQ(mesh_job_name_ok(".hidden"), 0);
	EXPECT_EQ(mesh_job_name_ok("a/b"), 0);
	EXPECT_EQ(mesh_job_name_ok("render-v2.1"), 1);
}

/* Processes race for one chunk: a fresh one (claim), then, round after
 * round, an expired one (steal).  Exactly one wins each time. */
TEST_TIMEOUT(job_exactly_one_claimer_and_one_stealer, 60)
{
	enum { PROCS = 12, ROUNDS = 10 };
	ASSERT_EQ(mesh_job_submit("j.log", 1), 0);
	mkdir("locks", 0755);
	for (int round = 0; round <= ROUNDS; round++) {
		int go[2], winners = 0, nones = 0;
		pid_t pids[PROCS];
		if (round > 0) {
			/* an expired lease left by a holder of unknown boot: past
			 * its deadline by more than the clock skew allowed */
			struct mesh_lease_stamp s = {.deadline_ns = mesh_wall_ns() - MESH_LEASE_SKEW_NS - MS,
						     .started_ns = mesh_wall_ns() - 10 * MESH_NS_PER_S,
						     .attempt = 1,
						     .token = 42,
						     .node = "dead"};
			char buf[256];
			size_t n = mesh_lease_format(buf, sizeof buf, &s);
			buf[n] = 0;
			t_write_file("locks/jb.0.lease", buf);
		} else {
			unlink("locks/jb.0.lease");
		}
		ASSERT_EQ(pipe(go), 0);
		for (int p = 0; p < PROCS; p++) {
			pids[p] = fork();
			if (pids[p] == 0) {
				struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
				struct mesh_job *j;
				struct mesh_lease l;
				char node[32], c;
				close(go[1]);
				snprintf(node, sizeof node, "p%d", p);
				o.journal = "j.log";
				o.lockdir = "locks";
				o.name = "jb";
				o.node = node;
				if (mesh_job_open(&j, &o))
					_exit(10);
				/* the winner exits at once: its lease must still hold */
				mesh_job_detach_leases(j);
				if (read(go[0], &c, 1) != 0)
					_exit(11);
				int rc = mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l);
				if (rc == 0)
					_exit(l.kind == (round ? MESH_LEASE_STOLEN : MESH_LEASE_FRESH) ? 0 : 12);
				_exit(rc == MESH_JOB_NONE ? 3 : 13);
			}
		}
		close(go[0]);
		close(go[1]); /* releases them all at once */
		for (int p = 0; p < PROCS; p++) {
			int status;
			waitpid(pids[p], &status, 0);
			ASSERT_TRUE(WIFEXITED(status));
			int c = WEXITSTATUS(status);
			if (c == 0)
				winners++;
			else if (c == 3)
				nones++;
			else
				FAIL("child exited %d", c);
		}
		EXPECT_EQ(winners, 1);
		EXPECT_EQ(nones, PROCS - 1);
	}
}

struct dup_arg {
	struct mesh_job *j;
	uint64_t n;
	uint64_t done, ignored, errors;
};

static void *dup_thread(void *p)
{
	struct dup_arg *a = p;
	for (uint64_t c = 0; c < a->n; c++) {
		int rc = mesh_job_complete(a->j, c, 1000);
		if (rc == MESH_JOB_DONE)
			a->done++;
		else if (rc == MESH_JOB_IGNORED)
			a->ignored++;
		else
			a->errors++;
	}
	return NULL;
}

/* Threads of one process and a second process complete the same chunks at
 * once: each chunk is DONE exactly once, every other completion IGNORED. */
TEST_TIMEOUT(job_concurrent_duplicates_done_once, 60)
{
	enum { N = 300, T = 4 };
	ASSERT_EQ(mesh_job_submit("j.log", N), 0);
	int pfd[2];
	ASSERT_EQ(pipe(pfd), 0);
	pid_t pid = fork();
	if (pid == 0) {
		struct mesh_job *j = open_node("j.log", "other", N);
		struct dup_arg a = {j, N, 0, 0, 0};
		dup_thread(&a);
		uint64_t d = a.done;
		if (write(pfd[1], &d, sizeof d) != sizeof d)
			_exit(1);
		_exit(a.errors ? 2 : 0);
	}
	struct mesh_job *j = open_node("j.log", "main", N);
	pthread_t th[T];
	struct dup_arg a[T];
	for (int i = 0; i < T; i++) {
		a[i] = (struct dup_arg){j, N, 0, 0, 0};
		pthread_create(&th[i], NULL, dup_thread, &a[i]);
	}
	uint64_t done = 0, ignored = 0, other = 0;
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		EXPECT_UEQ(a[i].errors, 0);
		done += a[i].done;
		ignored += a[i].ignored;
	}
	int status;
	waitpid(pid, &status, 0);
	EXPECT_EQ(WEXITSTATUS(status), 0);
	ASSERT_EQ(read(pfd[0], &other, sizeof other), (ssize_t)sizeof other);
	EXPECT_UEQ(done + other, N);
	EXPECT_UEQ(ignored, (uint64_t)N * T - done);
	mesh_job_close(j);
	EXPECT_UEQ(journal_done_records("j.log"), N);
}

TEST(job_complete_many_one_batch)
{
	struct mesh_job *j;
	uint64_t cids[] = {0, 1, 1, 4, 2};
	int res[5];
	ASSERT_EQ(mesh_job_submit("j.log", 5), 0);
	j = open_node("j.log", "n1", 5);
	EXPECT_EQ(mesh_job_complete(j, 2, 0), MESH_JOB_DONE);
	ASSERT_EQ(mesh_job_complete_many(j, cids, NULL, 5, res), 0);
	EXPECT_EQ(res[0], MESH_JOB_DONE);
	EXPECT_EQ(res[1], MESH_JOB_DONE);
	EXPECT_EQ(res[2], MESH_JOB_IGNORED);
	EXPECT_EQ(res[3], MESH_JOB_DONE);
	EXPECT_EQ(res[4], MESH_JOB_IGNORED);
	uint64_t bad[] = {3, 5};
	EXPECT_EQ(mesh_job_complete_many(j, bad, NULL, 2, res), MESH_E_RANGE);
	EXPECT_EQ(mesh_job_is_done(j, 3), 0); /* nothing of a refused batch is done */
	mesh_job_close(j);
	EXPECT_UEQ(journal_done_records("j.log"), 4);
}

struct got_results {
	char text[64][32];
	int count[64];
	int calls;
};

static int got_result(void *arg, uint64_t cid, const void *p, size_t n)
{
	struct got_results *g = arg;
	g->calls++;
	if (cid < 64 && n < 32) {
		memcpy(g->text[cid], p, n);
		g->text[cid][n] = 0;
		g->count[cid]++;
	}
	return 0;
}

/* A result in the DONE (meshd's small results): durable with it, read
 * back by mesh_rec_each_result for the chunk's first DONE only (the
 * answer the job kept), never for a duplicate; over the store's most it
 * is refused whole; the DONE is still a DONE to every reader. */
TEST(job_results_ride_in_their_done)
{
	struct mesh_job *j, *k;
	struct got_results g;
	memset(&g, 0, sizeof g);
	ASSERT_EQ(mesh_job_submit("r.log", 6), 0);
	j = open_node("r.log", "n1", 6);
	k = open_node("r.log", "n2", 6);
	EXPECT_UEQ(mesh_job_result_max(j), MESH_REC_RESULT_MAX);
	uint64_t cids[] = {0, 1, 1, 3};
	struct mesh_job_result rs[] = {{"zero", 4}, {"one", 3}, {"uno", 3}, {NULL, 0}};
	int res[4];
	ASSERT_EQ(mesh_job_complete_results(j, cids, NULL, rs, 4, res), 0);
	EXPECT_EQ(res[0], MESH_JOB_DONE);
	EXPECT_EQ(res[1], MESH_JOB_DONE);
	EXPECT_EQ(res[2], MESH_JOB_IGNORED);
	EXPECT_EQ(res[3], MESH_JOB_DONE);
	/* Another node's late copy of chunk 0: ignored, its result nowhere. */
	uint64_t c0 = 0;
	struct mesh_job_result late = {"late", 4};
	ASSERT_EQ(mesh_job_complete_results(k, &c0, NULL, &late, 1, res), 0);
	EXPECT_EQ(res[0], MESH_JOB_IGNORED);
	/* An empty result is a result. */
	uint64_t c4 = 4;
	struct mesh_job_result empty = {"", 0};
	ASSERT_EQ(mesh_job_complete_results(k, &c4, NULL, &empty, 1, res), 0);
	EXPECT_EQ(res[0], MESH_JOB_DONE);
	/* Over the most: nothing of the call is done. */
	static char big[MESH_REC_RESULT_MAX + 1];
	uint64_t two[] = {2, 5};
	struct mesh_job_result over[] = {{"fine", 4}, {big, sizeof big}};
	EXPECT_EQ(mesh_job_complete_results(j, two, NULL, over, 2, res), MESH_E_RANGE);
	EXPECT_EQ(mesh_job_is_done(j, 2), 0);
	/* The most: kept whole. */
	uint64_t c5 = 5;
	memset(big, 'b', sizeof big);
	struct mesh_job_result most = {big, MESH_REC_RESULT_MAX};
	ASSERT_EQ(mesh_job_complete_results(j, &c5, NULL, &most, 1, res), 0);
	EXPECT_EQ(res[0], MESH_JOB_DONE);
	struct mesh_job_status st;
	ASSERT_EQ(mesh_job_status(k, &st), 0);
	EXPECT_UEQ(st.done, 5);
	mesh_job_close(k);
	mesh_job_close(j);
	ASSERT_EQ(mesh_rec_each_result("r.log", 6, got_result, &g), 0);
	EXPECT_EQ(g.calls, 4); /* chunk 5's is too long for got_result's table: counted only */
	EXPECT_STREQ(g.text[0], "zero");
	EXPECT_STREQ(g.text[1], "one");
	EXPECT_EQ(g.count[3], 0); /* its DONE carried none */
	EXPECT_EQ(g.count[4], 1);
	EXPECT_STREQ(g.text[4], "");
	EXPECT_UEQ(journal_done_records("r.log"), 5);
	/* The journal is whole to its checker (a DONE may be longer now). */
	struct mesh_journal_report rep;
	EXPECT_EQ(mesh_job_journal_check("r.log", 0, &rep), 0);
}

TEST(job_ten_million_chunks)
{
	struct mesh_job *j;
	struct mesh_lease l;
	struct mesh_job_status st;
	uint64_t t0 = t_now_ms();
	ASSERT_EQ(mesh_job_submit("big.log", 10000000), 0);
	j = open_node("big.log", "n1", 10000000);
	ASSERT_EQ(mesh_job_lease(j, 10 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_UEQ(l.cid, 0);
	EXPECT_EQ(mesh_job_complete(j, 9999999, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_complete(j, 10000000, 0), MESH_E_RANGE);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.n, 10000000);
	EXPECT_UEQ(st.done, 1);
	EXPECT_UEQ(st.leased, 1);
	EXPECT_UEQ(st.pending, 10000000 - 2);
	mesh_job_close(j);
	EXPECT_LT(t_now_ms() - t0, 10000);
}

/* Losing every lease file (a wiped lock dir) returns in-flight chunks to
 * PENDING. */
TEST(job_lost_lease_files_return_chunks)
{
	struct mesh_job *j;
	struct mesh_lease l;
	ASSERT_EQ(mesh_job_submit("j.log", 2), 0);
	j = open_node("j.log", "n1", 2);
	ASSERT_EQ(mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l), 0);
	mesh_job_close(j);
	j = open_node("j.log", "n2", 2);
	ASSERT_EQ(mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_UEQ(l.cid, 1);
	EXPECT_EQ(mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l), MESH_JOB_NONE);
	ASSERT_EQ(unlink("locks/jb.0.lease"), 0);
	ASSERT_EQ(mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_UEQ(l.cid, 0);
	EXPECT_EQ(l.kind, MESH_LEASE_FRESH);
	mesh_job_close(j);
}

/* A renew to "now" hands the lease back (the exec runner does this when
 * interrupted): the chunk can be taken again at once, by us too. */
TEST(job_renew_to_now_releases)
{
	struct mesh_job *j;
	struct mesh_lease l, l2;
	ASSERT_EQ(mesh_job_submit("j.log", 1), 0);
	j = open_node("j.log", "n1", 1);
	ASSERT_EQ(mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_EQ(mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l2), MESH_JOB_NONE);
	EXPECT_EQ(mesh_job_renew(j, &l, 1), 0);
	mesh_sleep_ns(1000);
	ASSERT_EQ(mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l2), 0);
	EXPECT_UEQ(l2.cid, 0);
	EXPECT_EQ(l2.kind, MESH_LEASE_STOLEN);
	EXPECT_EQ(l2.attempt, 2);
	EXPECT_EQ(mesh_job_renew(j, &l2, 60 * MESH_NS_PER_S), 0);
	EXPECT_EQ(mesh_job_complete(j, 0, 0), MESH_JOB_DONE);
	mesh_job_close(j);
}

/* Burial is decided by the node that records the failure (its
 * max_attempts), so every reader agrees whatever its own options. */
TEST(job_burial_is_the_writers_decision)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *a, *b;
	struct mesh_lease l;
	struct mesh_job_status st;
	ASSERT_EQ(mesh_job_submit("j.log", 2), 0);
	o.journal = "j.log";
	o.lockdir = "locks";
	o.name = "jb";
	o.node = "strict";
	o.max_attempts = 1;
	ASSERT_EQ(mesh_job_open(&a, &o), 0);
	b = open_node("j.log", "lenient", 2); /* default 3 */
	ASSERT_EQ(mesh_job_lease(a, 60 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_EQ(mesh_job_fail(a, l.cid, 2), 1);
	ASSERT_EQ(mesh_job_status(b, &st), 0);
	EXPECT_UEQ(st.buried, 1);
	ASSERT_EQ(mesh_job_lease(b, 60 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_UEQ(l.cid, 1); /* chunk 0 is not offered */
	mesh_job_close(a);
	mesh_job_close(b);
}

TEST(job_lease_of_a_dead_local_process_is_taken_at_once)
{
	ASSERT_EQ(mesh_job_submit("j.log", 1), 0);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		/* node NULL: the default "<host>.<pid>" */
		struct mesh_job *c = open_node("j.log", NULL, 1);
		struct mesh_lease l;
		if (!c || mesh_job_lease(c, 3600 * MESH_NS_PER_S, 0, &l) != 0)
			_exit(1);
		raise(SIGKILL);
	}
	int st;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFSIGNALED(st));
	/* A lease with an hour to run whose holder process is gone (same
	 * boot, same PID namespace) does not hold. */
	struct mesh_job *j = open_node("j.log", "other", 1);
	struct mesh_lease l;
	ASSERT_EQ(mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l), 0);
	EXPECT_UEQ(l.cid, 0);
	EXPECT_EQ(l.kind, MESH_LEASE_STOLEN);
	EXPECT_EQ(l.attempt, 2);
	/* and a live holder's lease is not taken */
	struct mesh_job *k = open_node("j.log", NULL, 1);
	EXPECT_EQ(mesh_job_lease(k, 60 * MESH_NS_PER_S, 0, &l), MESH_JOB_NONE);
	mesh_job_close(k);
	mesh_job_close(j);
}
