/* Leases that survive what is outside the engine: a short-lived CLI, a
 * holder in another PID namespace or on a same-named host, wall-clock
 * steps, a dotted host name, and other users' lock directories
 * (docs/job.md, "Who holds a lease, and when it ends"). */
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "job/job.h"
#include "runner/t.h"
#include "store/store.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[8192];

#define M t_bin("mesh")
#define S MESH_NS_PER_S

static struct mesh_job *open_as(const char *node, const char *lockdir)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j = NULL;
	o.journal = "j.log";
	o.lockdir = lockdir;
	o.name = "jb";
	o.node = node;
	int rc = mesh_job_open(&j, &o);
	if (rc)
		t__fail(__FILE__, __LINE__, "open as %s: %s", node ? node : "(default)", mesh_strerror(rc));
	return j;
}

/* A pid that certainly belonged to a process of ours that has exited. */
static pid_t dead_pid(void)
{
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	return p;
}

/* Four `mesh job lease` calls without --node on 3 chunks: the leases of the
 * exited CLI processes hold until their deadline. */
TEST(lease_cli_default_node_holds_until_deadline)
{
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job submit j.log 3", M), 0);
	for (int i = 0; i < 3; i++) {
		char want[8];
		ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job lease j.log locks jb 3 30", M), 0);
		snprintf(want, sizeof want, "%d\n", i);
		EXPECT_STREQ(out, want);
	}
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job lease j.log locks jb 3 30", M), 3);
	EXPECT_STREQ(out, "NONE\n");
	/* status counts them as leased, too */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job status j.log locks jb 3", M), 1);
	EXPECT_CONTAINS(out, "leased 3");
}

/* A live holder of this host, seen from another PID namespace (where its
 * pid does not exist): its lease is not stolen before the deadline. */
TEST(lease_other_pid_namespace_does_not_steal)
{
	if (t_sh(out, sizeof out, 1, "unshare -p -f --mount-proc true") != 0)
		SKIP("unshare -p -f --mount-proc refused: %s", out);
	ASSERT_EQ(mesh_job_submit("j.log", 1), 0);
	struct mesh_job *j = open_as(NULL, "locks"); /* default node <host>.<pid> */
	struct mesh_lease l;
	ASSERT_EQ(mesh_job_lease(j, 60 * S, 0, &l), 0);
	int rc = t_sh(out, sizeof out, 1, "unshare -p -f --mount-proc %s job lease j.log locks jb 1 30 --node ns", M);
	EXPECT_EQ(rc, 3);
	EXPECT_STREQ(out, "NONE\n");
	EXPECT_EQ(mesh_job_complete(j, 0, 0), MESH_JOB_DONE);
	mesh_job_close(j);
}

/* A lease whose node names a dead pid of a host called like this one, but
 * that carries no proof of coming from this boot (another machine with the
 * same name sharing the lock dir): it holds until its deadline. */
TEST(lease_same_hostname_other_machine_does_not_steal)
{
	char host[64], node[MESH_NODE_MAX + 1], line[256];
	ASSERT_EQ(mesh_job_submit("j.log", 1), 0);
	ASSERT_EQ(gethostname(host, sizeof host), 0);
	host[sizeof host - 1] = 0;
	snprintf(node, sizeof node, "%.40s.%d", host, (int)dead_pid());
	struct mesh_lease_stamp s = {.deadline_ns = mesh_wall_ns() + 60 * S, .started_ns = mesh_wall_ns(), .attempt = 1,
				     .token = 0x1234};
	snprintf(s.node, sizeof s.node, "%s", node);
	size_t n = mesh_lease_format(line, sizeof line, &s);
	ASSERT_GT(n, 0);
	line[n] = 0;
	ASSERT_EQ(mkdir("locks", 0700), 0);
	t_write_file("locks/jb.0.lease", line);
	struct mesh_job *j = open_as("b", "locks");
	struct mesh_lease l;
	EXPECT_EQ(mesh_job_lease(j, 30 * S, 0, &l), MESH_JOB_NONE);
	mesh_job_close(j);
}

/* On one host a step of the wall clock (forward for the stealer, backward
 * for a renewing holder) does not make a live lease look expired. */
TEST(lease_wall_clock_step_does_not_steal)
{
	ASSERT_EQ(mesh_job_submit("j.log", 1), 0);
	struct mesh_job *a = open_as("a", "locks"), *b = open_as("b", "locks");
	struct mesh_lease l, m;
	ASSERT_EQ(mesh_job_lease(a, 60 * S, 0, &l), 0);
	mesh__clock_step_wall(2 * 3600 * (int64_t)S); /* the clock jumps 2 h ahead */
	EXPECT_EQ(mesh_job_lease(b, 60 * S, 0, &m), MESH_JOB_NONE);
	mesh__clock_step_wall(-2 * 3600 * (int64_t)S); /* ... and 2 h back: the holder renews */
	EXPECT_EQ(mesh_job_renew(a, &l, 60 * S), 0);
	mesh__clock_step_wall(0);
	EXPECT_EQ(mesh_job_lease(b, 60 * S, 0, &m), MESH_JOB_NONE);
	/* a lease handed back (tiny ttl) is free at once, step or not */
	EXPECT_EQ(mesh_job_renew(a, &l, 1), 0);
	EXPECT_EQ(mesh_job_lease(b, 60 * S, 0, &m), 0);
	EXPECT_UEQ(m.cid, 0);
	mesh_job_close(a);
	mesh_job_close(b);
}

/* On a host named a.example.com, the lease of a process that died (default
 * node name) is taken at once, not after its deadline. */
TEST(lease_dead_holder_on_dotted_hostname_is_taken_at_once)
{
	if (unshare(CLONE_NEWUTS) < 0)
		SKIP("unshare(CLONE_NEWUTS): %s", strerror(errno));
	ASSERT_EQ(sethostname("a.example.com", 13), 0);
	ASSERT_EQ(mesh_job_submit("j.log", 1), 0);
	pid_t p = fork();
	if (p == 0) {
		struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
		struct mesh_job *j;
		struct mesh_lease l;
		o.journal = "j.log";
		o.lockdir = "locks";
		o.name = "jb";
		if (mesh_job_open(&j, &o) || mesh_job_lease(j, 60 * S, 0, &l))
			_exit(1);
		_exit(0); /* dies holding chunk 0 */
	}
	int st;
	ASSERT_EQ(waitpid(p, &st, 0), p);
	ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct mesh_job *j = open_as("b", "locks");
	struct mesh_lease l;
	ASSERT_EQ(mesh_job_lease(j, 30 * S, 0, &l), 0);
	EXPECT_UEQ(l.cid, 0);
	EXPECT_EQ(l.kind, MESH_LEASE_STOLEN);
	mesh_job_close(j);
}

/* A lock dir another user can write to (or that another user owns) is
 * refused with a clear message, not used: a planted one-year lease would
 * otherwise hold a chunk without a word. */
TEST(lease_lockdir_of_others_is_refused)
{
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job submit j.log 1", M), 0);
	ASSERT_EQ(mkdir("open", 0777), 0);
	ASSERT_EQ(chmod("open", 0777), 0);
	struct mesh_lease_stamp s = {.deadline_ns = mesh_wall_ns() + 365ull * 24 * 3600 * S,
				     .started_ns = mesh_wall_ns(),
				     .attempt = 1,
				     .token = 0x99,
				     .node = "mallory"};
	char line[256];
	size_t n = mesh_lease_format(line, sizeof line, &s);
	line[n] = 0;
	t_write_file("open/jb.0.lease", line);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job lease j.log open jb 1 30", M), 65);
	EXPECT_CONTAINS(out, "mesh: lock directory 'open'");
	EXPECT_CONTAINS(out, "writable by group or others");
	ASSERT_EQ(mkdir("theirs", 0700), 0);
	ASSERT_EQ(chown("theirs", 4242, 4242), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job lease j.log theirs jb 1 30", M), 65);
	EXPECT_CONTAINS(out, "mesh: lock directory 'theirs'");
	EXPECT_CONTAINS(out, "owned by another user");
	/* ours and private: fine; a new one is created 0700 */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job lease j.log mine jb 1 30", M), 0);
	struct stat sb;
	ASSERT_EQ(stat("mine", &sb), 0);
	EXPECT_EQ(sb.st_mode & 0777, 0700);
}

/* The case: another user pre-creates the predictable lock dir of a
 * `mesh run` (mode 0777) and plants a one-year lease; the run must refuse
 * the directory at once instead of waiting on that chunk without a word. */
TEST(lease_mesh_run_refuses_a_planted_lock_dir)
{
	char cwd[4096], abs[4200], dir[64];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(abs, sizeof abs, "%s/x.log", cwd);
	/* cmd_run.c: the lock dir follows the journal's absolute path */
	snprintf(dir, sizeof dir, "/tmp/mesh-run-%016" PRIx64, mesh_fnv1a64(MESH_FNV1A64_INIT, abs, strlen(abs)));
	ASSERT_EQ(mkdir(dir, 0777), 0);
	ASSERT_EQ(chmod(dir, 0777), 0);
	struct mesh_lease_stamp s = {.deadline_ns = mesh_wall_ns() + 365ull * 24 * 3600 * S,
				     .started_ns = mesh_wall_ns(),
				     .attempt = 1,
				     .token = 0x99,
				     .node = "mallory"};
	char line[MESH_LEASE_LINE_MAX], path[128];
	size_t n = mesh_lease_format(line, sizeof line, &s);
	line[n] = 0;
	snprintf(path, sizeof path, "%s/run.0.lease", dir);
	t_write_file(path, line);
	int rc = t_sh(out, sizeof out, 1, "timeout 10 %s run --chunks 1 --journal x.log -- true", M);
	unlink(path);
	rmdir(dir);
	EXPECT_EQ(rc, 105); /* mesh run: its own errors are the table's + 40 */
	EXPECT_CONTAINS(out, "not private to this user");
}
