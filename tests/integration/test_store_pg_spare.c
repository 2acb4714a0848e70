/* Spare connections (store/store_pg_spare.c, mesh_pg_spares_start): a
 * meshd following a store keeps a few connections made and warmed, and a
 * new job's handles open on them instead of waiting for backends to start.
 * Against a real PostgreSQL: a handle takes a spare (and works on it); the
 * warm-up leaves nothing behind in the database; a spare whose backend
 * was terminated is dropped, not handed out; the set is made again after;
 * a stop closes them; a database that is not there neither spins the
 * keeper nor holds up its stop. */
#include "base/clock.h"
#include "base/err.h"
#include "job/job.h"
#include "runner/store_env.h"
#include "runner/t.h"
#include "store/store_pg.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Waits up to 5 s for the spares' made count to reach want. */
static uint64_t made_reaches(uint64_t want)
{
	uint64_t made = 0, taken, dropped;
	for (uint64_t until = mesh_mono_ns() + 5 * MESH_NS_PER_S; mesh_mono_ns() < until; mesh_sleep_ns(10 * MESH_NS_PER_MS)) {
		mesh_pg_spares_counts(&made, &taken, &dropped);
		if (made >= want)
			break;
	}
	return made;
}

static long long backends_reach(const struct store_env *e, long long want)
{
	long long n = -1;
	for (int i = 0; i < 250; i++) {
		if ((n = store_env_client_backends(e)) == want)
			break;
		usleep(20000);
	}
	return n;
}

TEST_TIMEOUT(store_pg_spares_taken_warm_and_checked, 60)
{
	struct store_env e;
	struct mesh_job *a, *b;
	struct mesh_lease l;
	char url[600];
	uint64_t made, taken, dropped;
	const uint64_t ttl = 60ull * MESH_NS_PER_S;
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	ASSERT_EQ(store_env_submit(&e, 4), 0);
	store_env_base_url(&e, url, sizeof url);
	ASSERT_EQ(mesh_pg_spares_start(url, 2), 0);
	EXPECT_EQ(mesh_pg_spares_start(url, 2), MESH_E_STATE); /* one set a process */
	ASSERT_EQ(made_reaches(2), 2);
	EXPECT_EQ(backends_reach(&e, 2), 2);
	/* the warm-up (a status and a lease of job -1, rolled back) left nothing */
	EXPECT_EQ(store_env_sql(&e, "SELECT count(*) FROM mesh.nodes"), 0);
	EXPECT_EQ(store_env_sql(&e, "SELECT count(*) FROM mesh.blocks"), 0);
	EXPECT_EQ(store_env_sql(&e, "SELECT count(*) FROM mesh.chunks"), 0);
	EXPECT_EQ(store_env_sql(&e, "SELECT count(*) FROM pg_stat_activity WHERE state <> 'idle'"
				    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"),
		  0);

	/* terminated while kept: dropped when taken, and the handle connects */
	EXPECT_EQ(store_env_sql(&e, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
				    " WHERE backend_type = 'client backend' AND application_name <> 'psql'"
				    " AND pid <> pg_backend_pid()"),
		  2);
	EXPECT_EQ(backends_reach(&e, 0), 0);
	ASSERT_EQ(store_env_open(&e, &a, "n1", 3), 0);
	mesh_pg_spares_counts(&made, &taken, &dropped);
	EXPECT_EQ(taken, 0);
	EXPECT_EQ(dropped, 2);
	ASSERT_EQ(mesh_job_lease(a, ttl, 0, &l), 0);
	EXPECT_EQ(l.cid, 0);
	EXPECT_EQ(mesh_job_complete(a, l.cid, 0), MESH_JOB_DONE);

	/* made again, then taken: a second node works on its spare */
	ASSERT_EQ(made_reaches(4), 4);
	ASSERT_EQ(store_env_open(&e, &b, "n2", 3), 0);
	mesh_pg_spares_counts(&made, &taken, &dropped);
	EXPECT_EQ(taken, 1);
	ASSERT_EQ(mesh_job_lease(b, ttl, 0, &l), 0);
	EXPECT_EQ(l.cid, 1);
	EXPECT_EQ(mesh_job_complete(b, l.cid, 0), MESH_JOB_DONE);
	struct mesh_job_status st;
	ASSERT_EQ(mesh_job_status(b, &st), 0);
	EXPECT_EQ(st.done, 2);

	/* stopped: the spares' backends go, the handles' stay */
	mesh_job_close(a);
	mesh_job_close(b);
	long long handles = backends_reach(&e, 2); /* the refill's two, once the handles closed */
	EXPECT_EQ(handles, 2);
	uint64_t t0 = mesh_mono_ns();
	mesh_pg_spares_stop();
	EXPECT_LT(mesh_mono_ns() - t0, 1 * MESH_NS_PER_S);
	EXPECT_EQ(backends_reach(&e, 0), 0);
	mesh_pg_spares_stop(); /* twice: nothing */
	store_env_stop(&e);
}

/* No server there: the keeper tries once a second, not in a loop, and a
 * stop does not wait for it; a handle opened meanwhile says why it cannot
 * connect, as without spares. */
TEST_TIMEOUT(store_pg_spares_without_a_database, 30)
{
	char dir[] = "/tmp/mesh-spare-XXXXXX", url[200], why[256];
	uint64_t made, taken, dropped;
	struct mesh_pg *pg = NULL;
	ASSERT_TRUE(mkdtemp(dir) != NULL);
	snprintf(url, sizeof url, "postgresql:///postgres?host=%s&user=mesh", dir);
	ASSERT_EQ(mesh_pg_spares_start(url, 3), 0);
	mesh_sleep_ns(300 * MESH_NS_PER_MS);
	char job[650];
	snprintf(job, sizeof job, "%s#j", url);
	EXPECT_EQ(mesh_pg_open(&pg, job, why, sizeof why), MESH_E_UNAVAILABLE);
	EXPECT_CONTAINS(why, dir);
	mesh_pg_spares_counts(&made, &taken, &dropped);
	EXPECT_EQ(made, 0);
	uint64_t t0 = mesh_mono_ns();
	mesh_pg_spares_stop();
	EXPECT_LT(mesh_mono_ns() - t0, 500 * MESH_NS_PER_MS);
	EXPECT_EQ(mesh_pg_spares_start("not a url", 1), MESH_E_PARSE);
	EXPECT_EQ(mesh_pg_spares_start("postgresql:///x#bad name", 1), MESH_E_PARSE);
	rmdir(dir);
}
