/* The PostgreSQL store as a DBA sees it (docs/cluster.md, "Running it in
 * production"): every connection says which part of mesh it is
 * (application_name), the connections each part holds, and a node that
 * finds the server full (53300, too many clients) waits for room within
 * its outage budget instead of failing at its start.  A real server from
 * the harness (tests/runner/store_env.c) and real `mesh` processes. */
#include "base/exit.h"
#include "integration/meshd_t.h"
#include "runner/store_env.h"
#include "runner/t.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MESH t_bin("mesh")

static char out[1 << 16];

/* Connections of application_name name now (-1: psql failed). */
static long conns_of(const struct store_env *e, const char *name)
{
	char q[300];
	snprintf(q, sizeof q, "SELECT count(*) FROM pg_stat_activity WHERE application_name = '%s'", name);
	return (long)store_env_sql(e, q);
}

/* Runs cmd (sh) in a child of its own: its pid. */
static pid_t spawn_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static pid_t spawn_sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	pid_t p = fork();
	ASSERT_GE(p, 0);
	if (p == 0) {
		setpgid(0, 0); /* a group of its own: free_room kills it whole */
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	return p;
}

/* Fills the server (max_connections 5) with five psql sessions, each in
 * pg_sleep: their group's pid, once a sixth login is refused with "too
 * many clients". */
static pid_t fill_room(const struct store_env *e)
{
	/* A holder refused (the check's own login can take its place for a
	 * moment) logs in again at once: psql ends when refused.  The server
	 * checks each holder's socket every 100 ms
	 * (client_connection_check_interval), so free_room's kill frees its
	 * place though pg_sleep has not ended. */
	pid_t hold = spawn_sh("for i in 1 2 3 4 5; do (while :; do"
			      " PGOPTIONS='-c client_connection_check_interval=100'"
			      " psql -q -X -h %s -U mesh -d postgres -c 'SELECT pg_sleep(600)' >/dev/null 2>&1;"
			      " sleep 0.2; done) & done; wait",
			      e->pgdir);
	int full = 0;
	for (int i = 0; i < 600 && !full; i++) {
		t_sh(out, sizeof out, 0, "psql -q -X -h %s -U mesh -d postgres -c 'SELECT 1' 2>&1", e->pgdir);
		full = strstr(out, "too many clients") != NULL;
		if (!full)
			usleep(50 * 1000);
	}
	if (!full) {
		fprintf(stderr, "the last login: %s\n", out);
		kill(-hold, SIGTERM);
	}
	ASSERT_TRUE(full);
	return hold;
}

/* Ends the sessions of fill_room: their backends see the sockets close. */
static void free_room(pid_t hold)
{
	int ws;
	kill(-hold, SIGTERM);
	ASSERT_EQ(waitpid(hold, &ws, 0), hold);
}

/* Each part names itself: `mesh run <job>`, `mesh job harvest <job>`,
 * `mesh <cmd>` for the others; an application_name in the URL wins, then
 * PGAPPNAME.  While the nodes run, the most connections each held. */
TEST_TIMEOUT(store_pg_ops_application_name_names_each_part, 90)
{
	struct store_env e;
	char url[600], logpath[300];
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	store_env_base_url(&e, url, sizeof url);
	/* every login logged with its application_name */
	store_env_sql1(&e, "ALTER SYSTEM SET log_connections = on");
	store_env_sql1(&e, "SELECT 0 FROM pg_reload_conf()");
	/* chunks of 5 s: the nodes are connected a while */
	pid_t run = spawn_sh("%s run -j 2 --store '%s#appjob' --chunks 2 -- sh -c 'sleep 5' >run.out 2>run.err", MESH, url);
	pid_t hv = spawn_sh("%s job submit '%s#hv' 2 && %s job harvest '%s#hv' x hv 2 30 h1 -- sh -c 'sleep 5' >hv.out 2>&1",
			    MESH, url, MESH, url);
	pid_t mine = spawn_sh("%s run --store '%s&application_name=mine#j3' --chunks 1 -- sh -c 'sleep 5' >/dev/null 2>&1",
			      MESH, url);
	pid_t theirs = spawn_sh("PGAPPNAME=theirs %s run --store '%s#j4' --chunks 1 -- sh -c 'sleep 5' >/dev/null 2>&1",
				MESH, url);
	long run_max = 0, hv_max = 0, mine_max = 0, theirs_max = 0;
	uint64_t t0 = t_now_ms();
	while (t_now_ms() - t0 < 4000) {
		long r = conns_of(&e, "mesh run appjob"), h = conns_of(&e, "mesh job harvest hv");
		long m = conns_of(&e, "mine"), t = conns_of(&e, "theirs");
		run_max = r > run_max ? r : run_max;
		hv_max = h > hv_max ? h : hv_max;
		mine_max = m > mine_max ? m : mine_max;
		theirs_max = t > theirs_max ? t : theirs_max;
		usleep(100 * 1000);
	}
	/* a quick command, seen in the server's log of its connections */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s store status '%s'", MESH, url), 0);
	int ws;
	ASSERT_EQ(waitpid(run, &ws, 0), run);
	EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	ASSERT_EQ(waitpid(hv, &ws, 0), hv);
	EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	ASSERT_EQ(waitpid(mine, &ws, 0), mine);
	ASSERT_EQ(waitpid(theirs, &ws, 0), theirs);
	fprintf(stderr, "connections held: mesh run (-j 2) %ld, mesh job harvest %ld\n", run_max, hv_max);
	EXPECT_GE(run_max, 1);
	EXPECT_GE(hv_max, 1);
	EXPECT_GE(mine_max, 1);
	EXPECT_GE(theirs_max, 1);
	/* nothing of mesh's is left without a name */
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'"
				     " AND application_name = ''"),
		  0);
	snprintf(logpath, sizeof logpath, "%s/log", e.pgdir);
	char *log = t_read_file(logpath, NULL);
	ASSERT_TRUE(log != NULL);
	EXPECT_CONTAINS(log, "application_name=mesh store");
	free(log);
	store_env_stop(&e);
}

/* A PostgreSQL of 5 connections (none reserved), all held by
 * fill_room's sessions: its URL in url; the holders' pid (free_room). */
static pid_t full_server(struct store_env *e, char *url, size_t cap)
{
	if (store_env_start_conns(e, 5))
		FAIL("cannot start PostgreSQL");
	store_env_base_url(e, url, cap);
	return fill_room(e);
}

/* A server with no room (max_connections 5, all held by psql sessions,
 * ended 2 s after the node starts): the starting `mesh run` node is
 * refused (53300, too many clients), says it waits, gets in once they
 * end, and completes its job -- it failed at its start before. */
TEST_TIMEOUT(store_pg_ops_node_waits_for_room, 120)
{
	struct store_env e;
	char url[600];
	pid_t hold = full_server(&e, url, sizeof url);
	uint64_t t0 = t_now_ms();
	pid_t node = spawn_sh("%s run -j 2 --store '%s#room' --chunks 6 -- echo c{} >o 2>err", MESH, url);
	sleep(2);
	free_room(hold);
	int ws;
	ASSERT_EQ(waitpid(node, &ws, 0), node);
	uint64_t took = t_now_ms() - t0;
	char *err = t_read_file("err", NULL);
	fprintf(stderr, "the node finished %.1f s after its start; its stderr:\n%s", took / 1000.0, err ? err : "");
	EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	ASSERT_EQ(t_sh(out, sizeof out, 0, "sort o | tr '\\n' ' '"), 0);
	EXPECT_STREQ(out, "c0 c1 c2 c3 c4 c5 ");
	ASSERT_TRUE(err != NULL);
	EXPECT_CONTAINS(err, "too many clients");
	EXPECT_CONTAINS(err, "waiting for it up to 5 min (--store-outage)");
	EXPECT_CONTAINS(err, "answers again after");
	EXPECT_GE(took, 1900); /* it waited for the sessions to end */
	EXPECT_EQ(store_env_sql1(&e, "SELECT done FROM mesh.job_counts WHERE name = 'room'"), 6);
	free(err);
	store_env_stop(&e);
}

/* A meshd following the store at url (a catalog of the echo example;
 * more options in opts), stderr in meshd.err: its pid, not waited for
 * (it may wait for the store before it serves). */
static pid_t spawn_meshd(const char *url, const char *opts)
{
	meshd_t_add_program(out, sizeof out, "other", t_bin("examples/echo_worker"), "max_workers = 1\n");
	mkdir("logs", 0755);
	mkdir("run", 0755);
	return spawn_sh("exec %s --catalog catalog --logs logs --socket " SOCK " --state state --store '%s' %s 2>meshd.err",
			t_bin("meshd"), url, opts);
}

/* `meshd --store URL` started while the server has no room (max_connections
 * 5, all held by psql sessions, ended 2 s after meshd starts): it is
 * refused (53300), says it waits within its outage budget, gets in once
 * they end, registers its node and follows the store -- as a `mesh run`
 * node does (store_pg_ops_node_waits_for_room). */
TEST_TIMEOUT(store_pg_ops_meshd_waits_for_room, 120)
{
	struct store_env e;
	char url[600];
	pid_t hold = full_server(&e, url, sizeof url);
	uint64_t t0 = t_now_ms();
	pid_t d = spawn_meshd(url, "--store-spares 0");
	sleep(2);
	int ws, gone = waitpid(d, &ws, WNOHANG) == d;
	char *err = t_read_file("meshd.err", NULL);
	fprintf(stderr, "meshd's stderr 2 s after its start (%s):\n%s", gone ? "it exited" : "running", err ? err : "");
	free(err);
	free_room(hold);
	ASSERT_FALSE(gone);
	/* its node row, alive, once the sessions ended */
	long long rows = 0;
	for (int i = 0; i < 1500 && rows < 1; i++) {
		rows = store_env_sql(&e, "SELECT count(*) FROM mesh.nodes WHERE job = 0 AND NOT stopped");
		if (rows < 1)
			usleep(20 * 1000);
	}
	uint64_t took = t_now_ms() - t0;
	fprintf(stderr, "meshd's node row seen %.1f s after its start\n", took / 1000.0);
	EXPECT_EQ(rows, 1);
	EXPECT_GE(took, 1900); /* it waited for the sessions to end */
	/* It says it follows the store right after its node row is in (and
	 * its follower started): read until it has (once read too soon in a
	 * CI run, 4 test binaries at a time). */
	err = NULL;
	for (uint64_t until = t_now_ms() + 5000;; usleep(20 * 1000)) {
		free(err);
		err = t_read_file("meshd.err", NULL);
		if ((err && strstr(err, "following its meshd jobs")) || t_now_ms() > until)
			break;
	}
	ASSERT_TRUE(err != NULL);
	EXPECT_CONTAINS(err, "too many clients");
	EXPECT_CONTAINS(err, "waiting for it up to 5 min (--store-outage)");
	EXPECT_CONTAINS(err, "answers again after");
	EXPECT_CONTAINS(err, "following its meshd jobs");
	free(err);
	EXPECT_EQ(meshd_t_stop(d), 0);
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM mesh.nodes WHERE job = 0 AND stopped"), 1);
	store_env_stop(&e);
}

/* A meshd told to stop while it waits for room stops at once, exit 0. */
TEST_TIMEOUT(store_pg_ops_meshd_stops_while_waiting_for_room, 120)
{
	struct store_env e;
	char url[600];
	pid_t hold = full_server(&e, url, sizeof url);
	pid_t d = spawn_meshd(url, "");
	char *err = NULL;
	for (int i = 0; i < 1500 && !(err && strstr(err, "stopped answering")); i++) {
		free(err);
		usleep(20 * 1000);
		err = t_read_file("meshd.err", NULL);
	}
	ASSERT_TRUE(err && strstr(err, "stopped answering"));
	free(err);
	uint64_t t0 = t_now_ms();
	int rc = meshd_t_stop(d);
	uint64_t took = t_now_ms() - t0;
	free_room(hold);
	fprintf(stderr, "meshd stopped %.1f s after SIGTERM\n", took / 1000.0);
	EXPECT_EQ(rc, 0);
	EXPECT_LT(took, 10000); /* not its 5 min budget */
	store_env_stop(&e);
}

/* A meshd still shut out past its budget (--store-outage 2s) gives up:
 * exit 69, the store cannot be reached. */
TEST_TIMEOUT(store_pg_ops_meshd_gives_up_past_the_budget, 120)
{
	struct store_env e;
	char url[600];
	pid_t hold = full_server(&e, url, sizeof url);
	uint64_t t0 = t_now_ms();
	pid_t d = spawn_meshd(url, "--store-outage 2s");
	int rc = meshd_t_wait(d);
	uint64_t took = t_now_ms() - t0;
	free_room(hold);
	char *err = t_read_file("meshd.err", NULL);
	EXPECT_EQ(rc, MESH_EXIT_UNAVAILABLE);
	ASSERT_TRUE(err != NULL);
	EXPECT_CONTAINS(err, "giving up");
	EXPECT_CONTAINS(err, "too many clients");
	EXPECT_GE(took, 1900);
	EXPECT_LT(took, 30000);
	free(err);
	store_env_stop(&e);
}

/* Past its budget a node still shut out gives up with the server's words
 * (--store-outage 2s, the server full until it exits). */
TEST_TIMEOUT(store_pg_ops_node_gives_up_past_the_budget, 120)
{
	struct store_env e;
	char url[600];
	pid_t hold = full_server(&e, url, sizeof url);
	uint64_t t0 = t_now_ms();
	int rc = t_sh(out, sizeof out, 1, "%s run --store-outage 2s --store '%s#late' --chunks 2 -- echo c{} 2>err", MESH, url);
	uint64_t took = t_now_ms() - t0;
	free_room(hold);
	char *err = t_read_file("err", NULL);
	EXPECT_EQ(rc, 109); /* mesh run's code for a store that cannot be reached */
	ASSERT_TRUE(err != NULL);
	EXPECT_CONTAINS(err, "too many clients");
	EXPECT_CONTAINS(err, "giving up");
	EXPECT_GE(took, 1900);
	EXPECT_LT(took, 30000);
	free(err);
	store_env_stop(&e);
}

/* The roles of docs/cluster.md ("Roles and grants"), run as written: an
 * owner role that makes the schema (`mesh store init`), a node role with
 * only the grants listed (given before the init, as default privileges),
 * and a `mesh run` node and a harvest node through the node role, each
 * completing its job; the node role cannot change the schema. */
TEST_TIMEOUT(store_pg_ops_roles_and_grants_as_documented, 90)
{
	struct store_env e;
	char base[600], owner[700], node[700];
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	store_env_base_url(&e, base, sizeof base);
	/* the harness made the schema as a superuser: start again without */
	store_env_sql1(&e, "DROP SCHEMA mesh CASCADE");
	static const char *const grants[] = {
		"CREATE ROLE mesh_owner LOGIN",
		"CREATE ROLE mesh_node LOGIN",
		"GRANT CONNECT, CREATE ON DATABASE postgres TO mesh_owner",
		"GRANT CONNECT ON DATABASE postgres TO mesh_node",
		"ALTER DEFAULT PRIVILEGES FOR ROLE mesh_owner GRANT USAGE ON SCHEMAS TO mesh_node",
		"ALTER DEFAULT PRIVILEGES FOR ROLE mesh_owner GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO mesh_node",
		"ALTER DEFAULT PRIVILEGES FOR ROLE mesh_owner GRANT USAGE, SELECT ON SEQUENCES TO mesh_node",
		"REVOKE CREATE ON SCHEMA public FROM PUBLIC",
	};
	for (size_t i = 0; i < sizeof grants / sizeof grants[0]; i++)
		store_env_sql1(&e, grants[i]);
	/* the harness's URL names user=mesh: the same URL with another user */
	snprintf(owner, sizeof owner, "%s", base);
	snprintf(node, sizeof node, "%s", base);
	char *u = strstr(owner, "user=mesh");
	ASSERT_TRUE(u != NULL);
	snprintf(u, sizeof owner - (size_t)(u - owner), "user=mesh_owner");
	u = strstr(node, "user=mesh");
	snprintf(u, sizeof node - (size_t)(u - node), "user=mesh_node");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s store init '%s'", MESH, owner), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s store status '%s'", MESH, node), 0);
	int rc = t_sh(out, sizeof out, 1, "%s run -j 2 --store '%s#g' --chunks 300 -- echo c{} | sort -u | wc -l", MESH,
		      node);
	EXPECT_EQ(rc, 0);
	EXPECT_EQ(atoi(out), 300);
	EXPECT_EQ(store_env_sql1(&e, "SELECT done FROM mesh.job_counts WHERE name = 'g'"), 300);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job submit '%s#h' 50 && %s job harvest '%s#h' x h 50 30 h1 -- true", MESH,
		       node, MESH, node),
		  0);
	EXPECT_EQ(store_env_sql1(&e, "SELECT done FROM mesh.job_counts WHERE name = 'h'"), 50);
	/* and nothing more: the node role cannot migrate or drop */
	EXPECT_NE(t_sh(out, sizeof out, 1, "psql -q -X -h %s -U mesh_node -d postgres -c 'DROP TABLE mesh.jobs'", e.pgdir),
		  0);
	EXPECT_CONTAINS(out, "must be owner");
	store_env_stop(&e);
}

/* The SQL block of docs/cluster.md that follows marker, into a file of
 * this test's directory (path), the day of the pruning made a second. */
static void doc_sql(const char *marker, const char *path)
{
	char *doc = t_read_file(t_src("docs/cluster.md"), NULL);
	ASSERT_TRUE(doc != NULL);
	char *m = strstr(doc, marker), *b = m ? strstr(m, "```sql\n") : NULL, *end = b ? strstr(b + 7, "\n```") : NULL;
	ASSERT_TRUE(end != NULL);
	end[1] = 0;
	for (char *d; (d = strstr(b, "86400000000"));)
		memcpy(d, "00001000000", 11);
	t_write_file(path, b + 7);
	free(doc);
}

/* docs/cluster.md's pruning SQL, run as written there: a job that ended
 * (its node stopped over a "day" ago, a second here) leaves no row in
 * any table; a job still running keeps every row and completes.  And its
 * monitoring queries run. */
TEST_TIMEOUT(store_pg_ops_prune_sql_removes_only_ended_jobs, 90)
{
	struct store_env e;
	char url[600], q[300];
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	store_env_base_url(&e, url, sizeof url);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s run --store '%s#a' --chunks 300 -- true", MESH, url), 0);
	long a = (long)store_env_sql1(&e, "SELECT id FROM mesh.jobs WHERE name = 'a'");
	ASSERT_GT(a, 0);
	uint64_t tb = t_now_ms();
	/* b runs until the test says go: a loaded machine once took longer
	 * over the SQL below than two `sleep 6` chunks, and b had ended.  At
	 * most 60 s a chunk: a test that stopped early leaves no b behind. */
	pid_t b = spawn_sh("%s run -j 1 --store '%s#b' --chunks 2 -- sh -c "
			   "'i=0; until [ -e go ] || [ $i -ge 1200 ]; do sleep 0.05; i=$((i + 1)); done' >b.out 2>&1",
			   MESH, url);
	for (int i = 0; i < 300 && store_env_sql(&e, "SELECT count(*) FROM mesh.nodes d JOIN mesh.jobs j ON j.id = d.job"
						    " WHERE j.name = 'b' AND NOT d.stopped") < 1;
	     i++)
		usleep(20 * 1000);
	fprintf(stderr, "b's node seen %.1f s after its start\n", (t_now_ms() - tb) / 1000.0);
	usleep(1500 * 1000); /* a's "day" */
	doc_sql("**Pruning.**", "prune.sql");
	doc_sql("**Monitoring.**", "monitor.sql");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "psql -q -X -v ON_ERROR_STOP=1 -h %s -U mesh -d postgres -f prune.sql", e.pgdir),
		  0);
	static const char *const tables[] = {"results", "specs", "copies", "durations", "chunks", "blocks",
					     "ranges", "done_words", "counts", "nodes"};
	for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
		snprintf(q, sizeof q, "SELECT count(*) FROM mesh.%s WHERE job = %ld", tables[i], a);
		EXPECT_EQ(store_env_sql1(&e, q), 0);
	}
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM mesh.jobs WHERE name = 'a'"), 0);
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM mesh.jobs WHERE name = 'b'"), 1);
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM mesh.nodes d JOIN mesh.jobs j ON j.id = d.job WHERE j.name = 'b'"),
		  1);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "psql -q -X -v ON_ERROR_STOP=1 -h %s -U mesh -d postgres -f monitor.sql", e.pgdir),
		  0);
	EXPECT_CONTAINS(out, "mesh run b");
	t_write_file("go", "");
	int ws;
	ASSERT_EQ(waitpid(b, &ws, 0), b);
	EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	EXPECT_EQ(store_env_sql1(&e, "SELECT done FROM mesh.job_counts WHERE name = 'b'"), 2);
	if (t__failed) {
		/* What b said, when it did not do as above. */
		char *bo = t_read_file("b.out", NULL);
		fprintf(stderr, "b exited %d; its output:\n%s\n", WIFEXITED(ws) ? WEXITSTATUS(ws) : -1,
			bo ? bo : "(none)");
		free(bo);
	}
	store_env_stop(&e);
}

/* A row of mesh.nodes made here (holder h, job, name, host, stopped),
 * registered `started_h` hours ago and last beating `beat_h` hours ago. */
static void node_row(const struct store_env *e, long h, long job, const char *name, int stopped, int started_h,
		     int beat_h)
{
	char q[600];
	snprintf(q, sizeof q,
		 "INSERT INTO mesh.nodes (holder, name, host, program, job, started, beat, ttl_us, stopped)"
		 " VALUES (%ld, '%s', 'h', 'p', %ld, mesh.now_us() - %d::bigint * 3600000000,"
		 " mesh.now_us() - %d::bigint * 3600000000, 3000000, %s)",
		 h, name, job, started_h, beat_h, stopped ? "true" : "false");
	store_env_sql1(e, q);
}

/* 1 when mesh.nodes has a row of holder h. */
static long long has_node(const struct store_env *e, long h)
{
	char q[200];
	snprintf(q, sizeof q, "SELECT count(*) FROM mesh.nodes WHERE holder = %ld", h);
	return store_env_sql1(e, q);
}

/* Stopped node rows are pruned by mesh itself (issue 32: "446 rows, 431
 * stopped"): a node's registration removes the stopped rows whose last
 * beat is over a day old, at most 500 at a time -- never a live or
 * silent node's row, nor a stopped one that a running job's speed
 * (mesh nodes, placement, speculation) or a running meshd's totals
 * still count.  The rows are aged in SQL. */
TEST_TIMEOUT(store_pg_ops_node_start_prunes_stopped_nodes, 120)
{
	struct store_env e;
	char url[600], q[300];
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	store_env_base_url(&e, url, sizeof url);
	/* a real node running a job: and of that job a stopped row
	 * two days old (below) */
	pid_t busy = spawn_sh("%s run -j 1 --store '%s#busy' --chunks 1 -- sleep 60 >/dev/null 2>&1", MESH, url);
	for (int i = 0; i < 500 && store_env_sql(&e, "SELECT count(*) FROM mesh.nodes d JOIN mesh.jobs j ON j.id = d.job"
						    " WHERE j.name = 'busy' AND NOT d.stopped") < 1;
	     i++)
		usleep(20 * 1000);
	/* real nodes, stopped: one aged two days, one of an hour ago */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s run -j 1 --store '%s#old' --chunks 3 -- true", MESH, url), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s run -j 1 --store '%s#recent' --chunks 3 -- true", MESH, url), 0);
	long old = (long)store_env_sql1(&e, "SELECT id FROM mesh.jobs WHERE name = 'old'");
	snprintf(q, sizeof q, "UPDATE mesh.nodes SET started = started - 172800000000, beat = beat - 172800000000"
			      " WHERE job = %ld", old);
	store_env_sql1(&e, q);
	store_env_sql1(&e, "UPDATE mesh.nodes SET started = started - 3600000000, beat = beat - 3600000000"
			   " WHERE job = (SELECT id FROM mesh.jobs WHERE name = 'recent')");
	long bj = (long)store_env_sql1(&e, "SELECT id FROM mesh.jobs WHERE name = 'busy'");
	ASSERT_GT(bj, 0);
	node_row(&e, 18, bj, "n18", 1, 49, 48);
	node_row(&e, 11, 0, "meshd.x.1", 1, 50, 48);  /* a meshd stopped two days ago: pruned */
	node_row(&e, 12, 9012, "n12", 0, 50, 48);     /* silent two days: kept */
	node_row(&e, 13, 9013, "n13", 1, 50, 48);     /* stopped, its job has a node ... */
	node_row(&e, 14, 9013, "n14", 0, 50, 0);      /* ... not stopped: both kept */
	node_row(&e, 15, 0, "meshd.h.1", 0, 72, 0);   /* a meshd running three days */
	node_row(&e, 16, 9016, "meshd.h.1", 1, 60, 48); /* its driver: its CHUNKS, kept */
	node_row(&e, 17, 9017, "meshd.h.1", 1, 96, 90); /* one from before it started: pruned */
	node_row(&e, 19, 9019, "n19", 1, 30, 23);     /* stopped 23 hours ago: kept */
	/* and a backlog: 700 stopped two days ago, of a job no node runs */
	store_env_sql1(&e, "INSERT INTO mesh.nodes (holder, name, host, program, job, started, beat, ttl_us, stopped)"
			   " SELECT 1000 + g, 'b', 'h', 'p', 9100, mesh.now_us() - 180000000000,"
			   " mesh.now_us() - 172800000000, 3000000, true FROM generate_series(0, 699) g");
	long long before = store_env_sql1(&e, "SELECT count(*) FROM mesh.nodes");
	/* a node starts: at most 500 go at once */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s run -j 1 --store '%s#new1' --chunks 1 -- true", MESH, url), 0);
	long long after = store_env_sql1(&e, "SELECT count(*) FROM mesh.nodes");
	fprintf(stderr, "node rows: %lld before the first new node, %lld after\n", before, after);
	EXPECT_EQ(after, before + 1 - 500);
	/* another: the rest of the backlog */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s run -j 1 --store '%s#new2' --chunks 1 -- true", MESH, url), 0);
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM mesh.nodes WHERE job = 9100"), 0);
	snprintf(q, sizeof q, "SELECT count(*) FROM mesh.nodes WHERE job = %ld", old);
	EXPECT_EQ(store_env_sql1(&e, q), 0);
	EXPECT_EQ(has_node(&e, 11), 0);
	EXPECT_EQ(has_node(&e, 17), 0);
	/* kept: the recent, the silent, the live, the running jobs' and meshd's */
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM mesh.nodes d JOIN mesh.jobs j ON j.id = d.job"
				     " WHERE j.name IN ('recent', 'new1', 'new2', 'busy')"),
		  5);
	EXPECT_EQ(has_node(&e, 12), 1);
	EXPECT_EQ(has_node(&e, 13), 1);
	EXPECT_EQ(has_node(&e, 14), 1);
	EXPECT_EQ(has_node(&e, 15), 1);
	EXPECT_EQ(has_node(&e, 16), 1);
	EXPECT_EQ(has_node(&e, 18), 1);
	EXPECT_EQ(has_node(&e, 19), 1);
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM mesh.nodes"), 11);
	int ws;
	kill(-busy, SIGKILL);
	ASSERT_EQ(waitpid(busy, &ws, 0), busy);
	store_env_stop(&e);
}

/* The database's commits so far (pg_stat_database), once the server's
 * counters settled: the same twice 300 ms apart (a backend counts its
 * own as it exits, after its client). */
static long long commits(const struct store_env *e)
{
	long long a = -1, b = store_env_sql1(e, "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'");
	for (int i = 0; i < 20 && a != b; i++) {
		usleep(300 * 1000);
		a = b;
		b = store_env_sql1(e, "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'");
	}
	return b;
}

/* `mesh job harvest` without a command leases its chunks in batches and
 * completes each batch in one call (one commit), as docs/cluster.md says
 * nodes do (issue 32 item 7: 5,000 chunks took 5,171 commits). */
TEST_TIMEOUT(store_pg_ops_harvest_groups_its_commits, 120)
{
	struct store_env e;
	char url[600];
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	store_env_base_url(&e, url, sizeof url);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job submit '%s#hv' 2000", MESH, url), 0);
	long long before = commits(&e);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job harvest '%s#hv' x hv 2000 30 h1", MESH, url), 0);
	uint64_t took = t_now_ms() - t0;
	long long n = commits(&e) - before;
	fprintf(stderr, "a harvest of 2000 chunks: %lld commits, %.2f s\n", n, took / 1000.0);
	EXPECT_CONTAINS(out, "done 2000");
	EXPECT_EQ(store_env_sql1(&e, "SELECT done FROM mesh.job_counts WHERE name = 'hv'"), 2000);
	EXPECT_EQ(store_env_done_bits(&e, "hv"), 2000);
	EXPECT_LT(n, 2000 / 4);
	store_env_stop(&e);
}

/* A node that starts on a job other nodes are running says it joins
 * them, not that it resumes (issue 32: "resuming: 41/3000 already
 * done"). */
TEST_TIMEOUT(store_pg_ops_second_node_says_joining, 90)
{
	struct store_env e;
	char url[600];
	if (store_env_start(&e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	store_env_base_url(&e, url, sizeof url);
	pid_t a = spawn_sh("%s run -j 2 --store '%s#jn' --chunks 30 -- sh -c 'sleep 0.3' >/dev/null 2>a.err", MESH, url);
	for (int i = 0; i < 1000 && store_env_sql(&e, "SELECT done FROM mesh.job_counts WHERE name = 'jn'") < 2; i++)
		usleep(20 * 1000);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j 2 --store '%s#jn' --chunks 30 -- sh -c 'sleep 0.3' 2>&1 >/dev/null",
		       MESH, url),
		  0);
	int ws;
	ASSERT_EQ(waitpid(a, &ws, 0), a);
	EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	EXPECT_CONTAINS(out, "mesh run: joining: ");
	EXPECT_CONTAINS(out, "leased by other nodes");
	EXPECT_TRUE(strstr(out, "resuming") == NULL);
	EXPECT_EQ(store_env_sql1(&e, "SELECT done FROM mesh.job_counts WHERE name = 'jn'"), 30);
	store_env_stop(&e);
}
