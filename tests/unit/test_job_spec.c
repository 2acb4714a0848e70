/* Speculation: one node ten times slower than the others. */
#include "base/clock.h"
#include "base/err.h"
#include "job/job.h"
#include "runner/t.h"

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS MESH_NS_PER_MS

static struct mesh_job *open_spec(const char *node)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j = NULL;
	o.journal = "j.log";
	o.lockdir = "locks";
	o.name = "jb";
	o.node = node;
	o.spec_min_ns = 20 * MS;
	if (mesh_job_open(&j, &o))
		return NULL;
	return j;
}

/* A node loop: lease (speculation on), "run" for chunk_ms, complete. */
static void node_loop(const char *node, uint64_t chunk_ms)
{
	struct mesh_job *j = open_spec(node);
	if (!j)
		_exit(10);
	for (;;) {
		struct mesh_lease l;
		int rc = mesh_job_lease(j, 30 * MESH_NS_PER_S, 1, &l);
		if (rc == MESH_JOB_COMPLETE)
			break;
		if (rc == MESH_JOB_NONE) {
			mesh_sleep_ns(5 * MS);
			continue;
		}
		if (rc)
			_exit(11);
		mesh_sleep_ns(chunk_ms * MS);
		if (mesh_job_complete(j, l.cid, 0) < 0)
			_exit(12);
	}
	mesh_job_close(j);
	_exit(0);
}

/* 12 chunks; three nodes take 80 ms a chunk, one takes 800 ms and grabs the
 * first chunk.  Without speculation the job would end when the slow node
 * finishes (>= 800 ms); the fast nodes alone need about 4 x 80 = 320 ms,
 * plus one more chunk for the copy.  With a speculative copy the job ends
 * near the fast nodes' time: the bound leaves 300 ms for a loaded machine. */
TEST_TIMEOUT(job_speculation_beats_a_slow_node, 60)
{
	enum { N = 12 };
	pid_t pids[4];
	int go[2];
	ASSERT_EQ(mesh_job_submit("j.log", N), 0);
	ASSERT_EQ(pipe(go), 0);
	uint64_t t0 = t_now_ms();
	pids[0] = fork();
	if (pids[0] == 0) {
		/* the slow node: takes chunk 0, then lets the others start */
		struct mesh_job *j = open_spec("slow");
		struct mesh_lease l;
		if (!j || mesh_job_lease(j, 30 * MESH_NS_PER_S, 1, &l) || l.cid != 0)
			_exit(20);
		if (write(go[1], "x", 1) != 1)
			_exit(21);
		mesh_job_close(j);
		mesh_sleep_ns(800 * MS);
		j = open_spec("slow");
		int rc = mesh_job_complete(j, 0, 800 * MS);
		mesh_job_close(j);
		_exit(rc == MESH_JOB_IGNORED ? 0 : 22);
	}
	char c;
	ASSERT_EQ(read(go[0], &c, 1), 1);
	for (int i = 1; i < 4; i++) {
		pids[i] = fork();
		if (pids[i] == 0) {
			char node[16];
			snprintf(node, sizeof node, "fast%d", i);
			node_loop(node, 80);
		}
	}
	struct mesh_job *j = open_spec("watch");
	ASSERT_TRUE(j != NULL);
	struct mesh_job_status st;
	uint64_t t_end = 0;
	while (t_now_ms() - t0 < 5000) {
		ASSERT_EQ(mesh_job_status(j, &st), 0);
		if (st.done == N) {
			t_end = t_now_ms();
			break;
		}
		usleep(2000);
	}
	ASSERT_GT(t_end, 0);
	EXPECT_UEQ(st.speculative_wins, 1);
	/* the slow copy alone would need 800 ms from t0 */
	EXPECT_LT(t_end - t0, 700);
	for (int i = 0; i < 4; i++) {
		int s;
		waitpid(pids[i], &s, 0);
		EXPECT_TRUE(WIFEXITED(s));
		EXPECT_EQ(WEXITSTATUS(s), 0); /* the slow node's late completion was IGNORED */
	}
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.done, N);
	mesh_job_close(j);
}

/* No speculation before enough chunks are done, nor below the minimum
 * runtime; and never a copy to a node that would finish later. */
TEST(job_speculation_rules)
{
	ASSERT_EQ(mesh_job_submit("j.log", 4), 0);
	struct mesh_job *a = open_spec("a"), *b = open_spec("b");
	struct mesh_lease l;
	ASSERT_EQ(mesh_job_lease(a, 30 * MESH_NS_PER_S, 1, &l), 0); /* a holds 0 */
	for (int i = 0; i < 2; i++) {
		ASSERT_EQ(mesh_job_lease(b, 30 * MESH_NS_PER_S, 1, &l), 0);
		EXPECT_EQ(mesh_job_complete(b, l.cid, 10 * MS), MESH_JOB_DONE);
	}
	ASSERT_EQ(mesh_job_lease(b, 30 * MESH_NS_PER_S, 1, &l), 0); /* b holds 3 */
	mesh_sleep_ns(40 * MS);
	/* 2 of 4 done < 75%: no copy yet */
	EXPECT_EQ(mesh_job_straggler_ns(b), 0);
	EXPECT_EQ(mesh_job_lease(b, 30 * MESH_NS_PER_S, 1, &l), MESH_JOB_NONE);
	EXPECT_EQ(mesh_job_complete(b, 3, 10 * MS), MESH_JOB_DONE);
	/* 3 of 4: threshold = max(20 ms, 1.5 x ~10 ms) = 20 ms; a ran 40+ ms */
	EXPECT_EQ(mesh_job_straggler_ns(b), 20 * MS);
	EXPECT_EQ(mesh_job_lease(b, 30 * MESH_NS_PER_S, 0, &l), MESH_JOB_NONE); /* not asked */
	ASSERT_EQ(mesh_job_lease(b, 30 * MESH_NS_PER_S, 1, &l), 0);
	EXPECT_EQ(l.kind, MESH_LEASE_SPECULATIVE);
	EXPECT_UEQ(l.cid, 0);
	/* the cap: one copy per chunk by default */
	struct mesh_job *c = open_spec("c");
	EXPECT_EQ(mesh_job_lease(c, 30 * MESH_NS_PER_S, 1, &l), MESH_JOB_NONE);
	EXPECT_EQ(mesh_job_complete(b, 0, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_complete(a, 0, 0), MESH_JOB_IGNORED);
	struct mesh_job_status st;
	ASSERT_EQ(mesh_job_status(c, &st), 0);
	EXPECT_UEQ(st.speculative_wins, 1);
	EXPECT_UEQ(st.done, 4);
	mesh_job_close(a);
	mesh_job_close(b);
	mesh_job_close(c);
}
