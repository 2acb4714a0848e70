/* What waits for a commit on the PostgreSQL store, and what does not.
 * A renew commits without waiting for the WAL
 * flush (store/store_pg.c, mesh_pg_renew), as a lease does: the chunk
 * driver renews each running chunk every quarter of its TTL, one call after
 * another on its loop's thread, and a flush each left a loaded host's
 * driver no time for its chunks (the cut-off host test of
 * test_meshd_store.c: the other host, renewing 64 chunks on a TTL of 1 s,
 * ran at a tenth of its speed and did not finish the job in 30 s). */
#include "base/clock.h"
#include "job/job.h"
#include "runner/store_env.h"
#include "runner/t.h"

#include <libpq-fe.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define RENEWS 200

/* The server's WAL syncs so far, once every handle's backend has exited
 * (a backend's counts reach pg_stat_wal as it exits); -1 if they did not
 * within a second. */
static long long wal_syncs_once_closed(const struct store_env *e)
{
	for (int i = 0; i < 50; i++) {
		if (store_env_client_backends(e) == 0)
			return store_env_sql(e, "SELECT wal_sync FROM pg_stat_wal");
		usleep(20000);
	}
	return -1;
}

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
	long long after = wal_syncs_once_closed(&e);
	ASSERT_GE(after, 0);
	/* a few by the WAL writer, against one a renew when each waited */
	EXPECT_LT(after - before, RENEWS / 4);
	store_env_stop(&e);
}

struct one_completion {
	struct mesh_job *j;
	uint64_t cid;
	int res, rc, finished;
};

static void *complete_one(void *arg)
{
	struct one_completion *c = arg;
	c->rc = mesh_job_complete_many(c->j, &c->cid, NULL, 1, &c->res);
	__atomic_store_n(&c->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* A leasing handle's completions go on a connection of their own
 * (store/store_pg_int.h, cconn): a completion that waits in its commit
 * -- in use on the WAL flush, here on a row lock another transaction
 * holds -- does not hold up the handle's next lease (mesh's executor
 * leases on one thread while another completes).  The handle's lock
 * wait is bounded at 3 s: one connection made the lease wait that long. */
TEST_TIMEOUT(store_pg_lease_does_not_wait_behind_a_commit, 30)
{
	struct store_env e;
	struct mesh_job *j;
	struct mesh_lease ls[4];
	size_t got = 0;
	const uint64_t ttl = 60ull * 1000000000;
	char conn[400];
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	ASSERT_EQ(store_env_submit(&e, 200), 0);
	setenv("PGOPTIONS", "-c lock_timeout=3000", 1);
	int rc = store_env_open(&e, &j, "n1", 3);
	unsetenv("PGOPTIONS");
	ASSERT_EQ(rc, 0);
	ASSERT_EQ(mesh_job_lease_many(j, ttl, 0, ls, 4, &got), 0);
	ASSERT_EQ(got, 4);
	ASSERT_EQ(mesh_job_complete(j, ls[0].cid, 0), MESH_JOB_DONE);
	/* the handle's second connection up (the first lease asked for it);
	 * not asserted: the lease below is what must not wait */
	long long conns = 0;
	for (uint64_t until = mesh_mono_ns() + 3000000000ull; conns != 2 && mesh_mono_ns() < until;) {
		conns = store_env_client_backends(&e);
		if (conns != 2)
			usleep(20000);
	}
	snprintf(conn, sizeof conn, "host=%s user=mesh dbname=postgres", e.pgdir);
	PGconn *c = PQconnectdb(conn);
	ASSERT_EQ(PQstatus(c), CONNECTION_OK);
	PQclear(PQexec(c, "BEGIN"));
	char q[200];
	snprintf(q, sizeof q,
		 "SELECT bits FROM mesh.done_words WHERE job = (SELECT id FROM mesh.jobs WHERE name = 'conf')"
		 " AND w = %llu FOR UPDATE",
		 (unsigned long long)(ls[1].cid / 64));
	PGresult *r = PQexec(c, q);
	ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK);
	ASSERT_EQ(PQntuples(r), 1);
	PQclear(r);
	struct one_completion oc = {j, ls[1].cid, 0, 0, 0};
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, complete_one, &oc), 0);
	usleep(300000);
	EXPECT_EQ(__atomic_load_n(&oc.finished, __ATOMIC_ACQUIRE), 0); /* waiting on the word's lock */
	uint64_t t0 = mesh_mono_ns();
	struct mesh_lease more[4];
	EXPECT_EQ(mesh_job_lease_many(j, ttl, 0, more, 4, &got), 0);
	uint64_t waited_ms = (mesh_mono_ns() - t0) / 1000000;
	EXPECT_EQ(got, 4);
	EXPECT_LT(waited_ms, 3000); /* not behind the open transaction, which ends only after */
	PQclear(PQexec(c, "ROLLBACK"));
	PQfinish(c);
	pthread_join(th, NULL);
	EXPECT_EQ(oc.rc, 0);
	EXPECT_EQ(oc.res, MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_is_done(j, ls[1].cid), 1);
	mesh_job_close(j);
	store_env_stop(&e);
}

struct one_failure {
	struct mesh_job *j;
	uint64_t cid;
	int rc, finished;
};

static void *fail_one(void *arg)
{
	struct one_failure *f = arg;
	f->rc = mesh_job_fail(f->j, f->cid, 1);
	__atomic_store_n(&f->finished, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* A job of 200 chunks on a fresh server, node n1's handle *j holding
 * a block of 4 leases (ls); the job's id. */
static long long four_leased(struct store_env *e, struct mesh_job **j, struct mesh_lease *ls)
{
	size_t got = 0;
	if (store_env_start(e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	ASSERT_EQ(store_env_submit(e, 200), 0);
	ASSERT_EQ(store_env_open(e, j, "n1", 3), 0);
	ASSERT_EQ(mesh_job_lease_many(*j, 60ull * 1000000000, 0, ls, 4, &got), 0);
	ASSERT_EQ(got, 4);
	return store_env_sql1(e, "SELECT id FROM mesh.jobs WHERE name = 'conf'");
}

/* A session of its own holding cid's DONE word of job, made as a
 * completion's first step makes it (uncommitted); it looks for a
 * deadlock 100 ms into a wait, before any other session does (1 s). */
static PGconn *hold_word(const struct store_env *e, long long job, uint64_t cid)
{
	char conn[400], q[200];
	snprintf(conn, sizeof conn, "host=%s user=mesh dbname=postgres", e->pgdir);
	PGconn *c = PQconnectdb(conn);
	ASSERT_EQ(PQstatus(c), CONNECTION_OK);
	PQclear(PQexec(c, "SET deadlock_timeout = '100ms'"));
	PQclear(PQexec(c, "BEGIN"));
	snprintf(q, sizeof q, "INSERT INTO mesh.done_words (job, w, bits) VALUES (%lld, %llu, 0)", job,
		 (unsigned long long)(cid / 64));
	PGresult *r = PQexec(c, q);
	ASSERT_EQ(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	return c;
}

/* Waits (5 s at most) until a statement that calls fn waits on a lock. */
static void wait_for_lock_wait(const struct store_env *e, const char *fn)
{
	char q[200];
	long long waiting = 0;
	snprintf(q, sizeof q, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%%%s%%'",
		 fn);
	for (uint64_t until = mesh_mono_ns() + 5000000000ull; waiting != 1 && mesh_mono_ns() < until;) {
		waiting = store_env_sql(e, q);
		if (waiting != 1)
			usleep(20000);
	}
	ASSERT_EQ(waiting, 1);
}

/* c's statement q (on the rows the deadlock would need) answers at once:
 * no cycle.  Its words when it does not. */
static void expect_no_cycle(PGconn *c, const char *q, ExecStatusType want)
{
	PGresult *r = PQexec(c, q);
	EXPECT_EQ(PQresultStatus(r), want);
	if (PQresultStatus(r) != want)
		fprintf(stderr, "    %s: %s", q, PQresultErrorMessage(r));
	PQclear(r);
	PQclear(PQexec(c, "ROLLBACK"));
	PQfinish(c);
}

/* A failed attempt (mesh.fail) takes its chunk's DONE word before the
 * block that leases the chunk, in a completion's order
 * (mesh.complete_words: the words, then the blocks over them).  A chunk
 * of a block with a row of its own (a renew split it out) made it lock
 * the block first and the word after; a completion of the same word,
 * coming the other way, deadlocked with it, and PostgreSQL cancelled one
 * of the two 1 s into the wait (meshd_store_reply_over_4mib's bury, about
 * once in 15 runs).  Here a session holds the word as a completion's
 * first step does, the failure waits for it, and the session then locks
 * the block as the completion's next step does: it gets the block at
 * once (a cycle cancels the session's statement). */
TEST_TIMEOUT(store_pg_fail_takes_the_word_before_the_block, 30)
{
	struct store_env e;
	struct mesh_job *j;
	struct mesh_lease ls[4];
	char q[300];
	long long job = four_leased(&e, &j, ls);
	ASSERT_EQ(mesh_job_renew(j, &ls[1], 60ull * 1000000000), 0); /* its row, inside the block */
	snprintf(q, sizeof q, "SELECT count(*) FROM mesh.chunks WHERE job = %lld AND cid = %llu", job,
		 (unsigned long long)ls[1].cid);
	ASSERT_EQ(store_env_sql1(&e, q), 1);
	PGconn *c = hold_word(&e, job, ls[1].cid);
	struct one_failure of = {j, ls[1].cid, 0, 0};
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, fail_one, &of), 0);
	wait_for_lock_wait(&e, "mesh.fail");
	snprintf(q, sizeof q, "SELECT lo FROM mesh.blocks WHERE job = %lld AND lo <= %llu AND hi > %llu FOR UPDATE",
		 job, (unsigned long long)ls[1].cid, (unsigned long long)ls[1].cid);
	EXPECT_EQ(__atomic_load_n(&of.finished, __ATOMIC_ACQUIRE), 0); /* behind the word */
	expect_no_cycle(c, q, PGRES_TUPLES_OK);
	pthread_join(th, NULL);
	EXPECT_EQ(of.rc, 0); /* counted, not buried (1 of 3) */
	snprintf(q, sizeof q, "SELECT fails FROM mesh.chunks WHERE job = %lld AND cid = %llu", job,
		 (unsigned long long)ls[1].cid);
	EXPECT_EQ(store_env_sql(&e, q), 1);
	mesh_job_close(j);
	store_env_stop(&e);
}

/* A completion of speculative copies (mesh.spec_complete) updates its
 * node's row last, as a completion does (its node's speed, in a WITH
 * that PostgreSQL runs after mesh.complete_words).  It updated the row
 * first, then took the words: with the node's own completion of the same
 * word on its other connection (the words held, then the node's row),
 * the two deadlocked.  Here a session holds the word, spec_complete
 * waits for it, and the session then updates the node's row as the
 * completion's last step does: at once. */
TEST_TIMEOUT(store_pg_spec_complete_takes_the_node_row_last, 30)
{
	struct store_env e;
	struct mesh_job *j;
	struct mesh_lease ls[4];
	char conn[400], q[300];
	long long job = four_leased(&e, &j, ls);
	long long holder = store_env_sql1(&e, "SELECT holder FROM mesh.nodes WHERE name = 'n1'");
	snprintf(conn, sizeof conn, "host=%s user=mesh dbname=postgres", e.pgdir);
	PGconn *spec = PQconnectdb(conn);
	ASSERT_EQ(PQstatus(spec), CONNECTION_OK);
	PGconn *c = hold_word(&e, job, ls[2].cid);
	snprintf(q, sizeof q, "SELECT count(*) FILTER (WHERE x) FROM mesh.spec_complete(%lld, '{%llu}', %lld, 0) x",
		 job, (unsigned long long)ls[2].cid, holder);
	ASSERT_EQ(PQsendQuery(spec, q), 1);
	wait_for_lock_wait(&e, "mesh.spec_complete");
	snprintf(q, sizeof q, "UPDATE mesh.nodes SET chunks = chunks + 1 WHERE holder = %lld", holder);
	expect_no_cycle(c, q, PGRES_COMMAND_OK);
	PGresult *r = PQgetResult(spec);
	EXPECT_EQ(PQresultStatus(r), PGRES_TUPLES_OK);
	if (PQresultStatus(r) == PGRES_TUPLES_OK)
		EXPECT_STREQ(PQgetvalue(r, 0, 0), "1"); /* its first completion */
	PQclear(r);
	while ((r = PQgetResult(spec)))
		PQclear(r);
	PQfinish(spec);
	EXPECT_EQ(mesh_job_is_done(j, ls[2].cid), 1);
	mesh_job_close(j);
	store_env_stop(&e);
}

/* Where the second connection cannot be had (here a role allowed one
 * connection), a leasing handle completes on its first, as before: every
 * chunk DONE once. */
TEST_TIMEOUT(store_pg_completions_fall_back_to_the_one_connection, 30)
{
	struct store_env e;
	struct mesh_job *j;
	struct mesh_lease ls[64];
	uint64_t cids[64];
	int res[64];
	size_t got = 0;
	const uint64_t ttl = 60ull * 1000000000;
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	ASSERT_EQ(store_env_submit(&e, 300), 0);
	store_env_sql1(&e, "CREATE ROLE one LOGIN CONNECTION LIMIT 1; GRANT USAGE ON SCHEMA mesh TO one;"
			   " GRANT ALL ON ALL TABLES IN SCHEMA mesh TO one; GRANT ALL ON ALL SEQUENCES IN SCHEMA mesh TO one;"
			   " SELECT 1");
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	char where[600];
	snprintf(where, sizeof where, "postgresql:///postgres?host=%s&user=one#conf", e.pgdir);
	o.journal = where;
	o.name = "conf";
	o.node = "one";
	ASSERT_EQ(mesh_job_open(&j, &o), 0);
	int rounds = 0, rc;
	while ((rc = mesh_job_lease_many(j, ttl, 0, ls, 64, &got)) == 0 && rounds++ < 50) {
		for (size_t i = 0; i < got; i++)
			cids[i] = ls[i].cid;
		ASSERT_EQ(mesh_job_complete_many(j, cids, NULL, got, res), 0);
		for (size_t i = 0; i < got; i++)
			EXPECT_EQ(res[i], MESH_JOB_DONE);
		usleep(20000); /* the beat thread's try at a second connection comes and fails */
	}
	EXPECT_EQ(rc, MESH_JOB_COMPLETE);
	EXPECT_EQ(store_env_sql(&e, "SELECT count(*) FROM pg_stat_activity WHERE usename = 'one'"), 1);
	mesh_job_close(j);
	EXPECT_EQ(store_env_sql(&e, "SELECT done FROM mesh.job_counts WHERE name = 'conf'"), 300);
	EXPECT_EQ(store_env_sql(&e, "SELECT dups FROM mesh.job_counts WHERE name = 'conf'"), 0);
	store_env_stop(&e);
}

/* A node's beat commits without waiting for the WAL flush, as a renew
 * does: a beat is not state worth an fsync (one lost in a server crash
 * only ages the node's row until the next one), and a beat that waited
 * on a slow flush was visible only that much later, so a beating node
 * could look silent and lose its leases (CI's store_pg_silent_node_leases_stolen,
 * a 400 ms TTL).  Beats every 20 ms for 1.5 s: about 75 of them. */
TEST_TIMEOUT(store_pg_beat_waits_for_no_wal_flush, 30)
{
	struct store_env e;
	struct mesh_job *j;
	struct mesh_lease l;
	const uint64_t ttl = 60ull * 1000000; /* beats every 20 ms */
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	ASSERT_EQ(store_env_submit(&e, 4), 0);
	ASSERT_EQ(store_env_open(&e, &j, "n1", 3), 0);
	long long before = store_env_sql(&e, "SELECT wal_sync FROM pg_stat_wal");
	ASSERT_GE(before, 0);
	ASSERT_EQ(mesh_job_lease(j, ttl, 0, &l), 0); /* registers the node: its beats begin */
	long long b0 = store_env_sql(&e, "SELECT beat FROM mesh.nodes WHERE name = 'n1'");
	usleep(1500000);
	long long b1 = store_env_sql(&e, "SELECT beat FROM mesh.nodes WHERE name = 'n1'");
	EXPECT_GT(b1 - b0, 1000000); /* it beat all along */
	mesh_job_close(j);
	long long after = wal_syncs_once_closed(&e);
	ASSERT_GE(after, 0);
	EXPECT_LT(after - before, 25); /* the lease, the close, the WAL writer's: not one a beat */
	store_env_stop(&e);
}
