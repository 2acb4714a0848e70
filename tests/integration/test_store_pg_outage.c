/* The PostgreSQL store's outage budget (docs/cluster.md, "Running it in
 * production"): a node waits for a database that stopped answering, up to
 * its budget (--store-outage, 5 min by default), keeps its leases and its
 * output, and goes on when the database answers; past the budget it exits
 * with a message that says so. */
#include "base/exit.h"
#include "runner/store_env.h"
#include "runner/t.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MESH t_bin("mesh")

static void start(struct store_env *e)
{
	if (store_env_start(e, "postgresql"))
		FAIL("cannot start PostgreSQL");
}

/* The DONE count of the one `mesh run` job of the database. */
static long run_done(const struct store_env *e)
{
	return store_env_sql(e, "SELECT coalesce(max(done), -1) FROM mesh.job_counts WHERE name LIKE 'mesh-run-%'");
}

/* Two `mesh run` nodes on 300 chunks of 50 ms (TTL 3 s), the database
 * stopped for 25 s mid-job (its leases all expire meanwhile) and started
 * again: both nodes wait for it, say how long, and finish the job; every
 * chunk DONE once and printed once. */
/* Waits for node to exit, at most 30 s after t0 (ms): node, with its
 * status in *ws; 0 when it had not, and it is SIGKILLed and reaped. */
static pid_t wait_or_kill(pid_t node, uint64_t t0, int *ws)
{
	pid_t w;
	while ((w = waitpid(node, ws, WNOHANG)) == 0 && t_now_ms() - t0 < 30000)
		usleep(20000);
	if (w == 0) {
		kill(node, SIGKILL);
		waitpid(node, ws, 0);
	}
	return w;
}

TEST_TIMEOUT(store_pg_outage_nodes_wait_and_finish, 150)
{
	struct store_env e;
	char url[600], out[4096];
	const long n = 300;
	start(&e);
	store_env_base_url(&e, url, sizeof url);
	pid_t nodes = fork();
	ASSERT_GE(nodes, 0);
	if (nodes == 0) {
		char cmd[2048];
		snprintf(cmd, sizeof cmd,
			 "%s run -j 2 --ttl 3 --store '%s' --chunks %ld -- sh -c 'sleep 0.05; echo c{}' >a.out 2>a.err & "
			 "%s run -j 2 --ttl 3 --store '%s' --chunks %ld -- sh -c 'sleep 0.05; echo c{}' >b.out 2>b.err; "
			 "rb=$?; wait $!; echo $? $rb >rc",
			 MESH, url, n, MESH, url, n);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	long at = -1;
	for (int i = 0; i < 3000 && (at = run_done(&e)) < n / 5; i++)
		usleep(10000);
	ASSERT_EQ(store_env_pg_ctl(&e, "-m fast stop"), 0);
	ASSERT_LT(at, n); /* mid-job */
	sleep(25);
	ASSERT_EQ(store_env_pg_ctl(&e, "start"), 0);
	int ws;
	ASSERT_EQ(waitpid(nodes, &ws, 0), nodes);
	char *rc = t_read_file("rc", NULL), *a = t_read_file("a.err", NULL), *b = t_read_file("b.err", NULL);
	ASSERT_TRUE(rc && a && b);
	EXPECT_STREQ(rc, "0 0\n");
	/* each says it waits, for how long, and that it goes on */
	EXPECT_CONTAINS(a, "stopped answering");
	EXPECT_CONTAINS(a, "waiting for it up to 5 min (--store-outage)");
	EXPECT_CONTAINS(a, "answers again after");
	EXPECT_CONTAINS(b, "answers again after");
	EXPECT_CONTAINS(a, "has not answered for 1"); /* 10 or 11 s */
	EXPECT_CONTAINS(a, "s more");
	/* and keeps its leases: no chunk another node took over meanwhile */
	EXPECT_TRUE(strstr(a, "taken over") == NULL);
	EXPECT_TRUE(strstr(b, "taken over") == NULL);
	if (strcmp(rc, "0 0\n") || !strstr(a, "answers again after") || !strstr(b, "answers again after"))
		fprintf(stderr, "a.err:\n%s\nb.err:\n%s\n", a, b);
	/* every chunk printed once, by one node or the other */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "cat a.out b.out | sort | uniq -d | wc -l"), 0);
	EXPECT_EQ(atoi(out), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "cat a.out b.out | sort -u | wc -l"), 0);
	EXPECT_EQ(atol(out), n);
	EXPECT_EQ(run_done(&e), n);
	EXPECT_EQ(store_env_sql1(&e, "SELECT sum(bit_count(bits::bit(64))) FROM mesh.done_words"), n);
	free(rc);
	free(a);
	free(b);
	store_env_stop(&e);
}

/* A node whose budget is shorter than the outage: it says how long it
 * waited and that it gives up, and exits with mesh run's code for an
 * unavailable store (109) -- not before its budget. */
TEST_TIMEOUT(store_pg_outage_past_the_budget_ends_the_node, 90)
{
	struct store_env e;
	char url[600], out[4096];
	start(&e);
	store_env_base_url(&e, url, sizeof url);
	pid_t node = fork();
	ASSERT_GE(node, 0);
	if (node == 0) {
		char cmd[2048];
		snprintf(cmd, sizeof cmd,
			 "%s run -j 2 --store-outage 4s --store '%s' --chunks 100000 -- sh -c 'sleep 0.05' 2>err",
			 MESH, url);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 3000 && run_done(&e) < 20; i++)
		usleep(10000);
	uint64_t t0 = t_now_ms(); /* the outage starts after this */
	ASSERT_EQ(store_env_pg_ctl(&e, "-m fast stop"), 0);
	int ws = 0;
	pid_t w = wait_or_kill(node, t0, &ws);
	uint64_t took = t_now_ms() - t0;
	store_env_pg_ctl(&e, "start");
	char *err = t_read_file("err", NULL);
	ASSERT_TRUE(err != NULL);
	EXPECT_EQ(w, node);
	EXPECT_TRUE(WIFEXITED(ws));
	EXPECT_EQ(WEXITSTATUS(ws), 109);
	EXPECT_GE(took, 4000);
	EXPECT_LT(took, 25000);
	EXPECT_CONTAINS(err, "waiting for it up to 4 s");
	EXPECT_CONTAINS(err, "did not answer for 4 s (--store-outage): giving up");
	if (WEXITSTATUS(ws) != 109)
		fprintf(stderr, "err:\n%s\n", err);
	(void)out;
	free(err);
	store_env_stop(&e);
}

/* Told to stop (SIGINT) while it waits for the database: the node stops
 * waiting and exits as interrupted (130), not after its budget. */
TEST_TIMEOUT(store_pg_outage_sigint_while_waiting_stops_the_node, 90)
{
	struct store_env e;
	char url[600];
	start(&e);
	store_env_base_url(&e, url, sizeof url);
	pid_t node = fork();
	ASSERT_GE(node, 0);
	if (node == 0) {
		char cmd[2048];
		snprintf(cmd, sizeof cmd, "exec %s run -j 2 --store '%s' --chunks 100000 -- sh -c 'sleep 0.05' 2>err", MESH,
			 url);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 3000 && run_done(&e) < 20; i++)
		usleep(10000);
	ASSERT_EQ(store_env_pg_ctl(&e, "-m fast stop"), 0);
	sleep(3);
	uint64_t t0 = t_now_ms();
	kill(node, SIGINT);
	int ws = 0;
	pid_t w = wait_or_kill(node, t0, &ws);
	uint64_t took = t_now_ms() - t0;
	store_env_pg_ctl(&e, "start");
	char *err = t_read_file("err", NULL);
	ASSERT_TRUE(err != NULL);
	EXPECT_EQ(w, node);
	EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 130);
	EXPECT_LT(took, 10000);
	if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 130)
		fprintf(stderr, "status %d, err:\n%s\n", ws, err);
	free(err);
	store_env_stop(&e);
}
