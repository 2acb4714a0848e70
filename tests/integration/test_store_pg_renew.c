/* A renew on the PostgreSQL store commits without waiting for the WAL
 * flush (store/store_pg.c, mesh_pg_renew), as a lease does: the chunk
 * driver renews each running chunk every quarter of its TTL, one call after
 * another on its loop's thread, and a flush each left a loaded host's
 * driver no time for its chunks (the cut-off host test of
 * test_meshd_store.c: the other host, renewing 64 chunks on a TTL of 1 s,
 * ran at a tenth of its speed and did not finish the job in 30 s). */
#include "job/job.h"
#include "runner/store_env.h"
#include "runner/t.h"

#include <stdint.h>
#include <unistd.h>

#define RENEWS 200

TEST_TIMEOUT(store_pg_renew_waits_for_no_wal_flush, 30)
{
	struct store_env e;
	struct mesh_job *j;
	struct mesh_lease l;
	const uint64_t ttl = 60ull * 1000000000;
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	ASSERT_EQ(store_env_submit(&e, 4), 0);
	ASSERT_EQ(store_env_open(&e, &j, "n1", 3), 0);
	ASSERT_EQ(mesh_job_lease(j, ttl, 0, &l), 0);
	long long before = store_env_sql(&e, "SELECT wal_sync FROM pg_stat_wal");
	ASSERT_GE(before, 0);
	uint64_t deadline = l.deadline_ns;
	for (int i = 0; i < RENEWS; i++)
		ASSERT_EQ(mesh_job_renew(j, &l, ttl), 0);
	EXPECT_TRUE(l.deadline_ns > deadline); /* renewed all the same */
	/* closed: its backend's counts reach pg_stat_wal as it exits */
	mesh_job_close(j);
	long long after = -1;
	for (int i = 0; i < 50 && after < 0; i++) {
		long long gone = store_env_sql(&e, "SELECT count(*) FROM pg_stat_activity WHERE application_name = ''"
						   " AND backend_type = 'client backend' AND pid <> pg_backend_pid()");
		if (gone == 0)
			after = store_env_sql(&e, "SELECT wal_sync FROM pg_stat_wal");
		else
			usleep(20000);
	}
	ASSERT_GE(after, 0);
	/* a few by the WAL writer, against one a renew when each waited */
	EXPECT_LT(after - before, RENEWS / 4);
	store_env_stop(&e);
}
