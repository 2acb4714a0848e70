/* The PostgreSQL store's first promise under contention: a chunk that is
 * DONE is never handed out again.  Real `mesh run` nodes on a real
 * server (tests/runner/store_env.c) while a psql session holds mesh.jobs
 * locked (as a DBA's LOCK TABLE, or a long transaction, does), with short
 * TTLs so that leases expire and are taken over meanwhile; and a
 * randomized mix of lock holds and nodes killed.  The server audits every
 * lease and renew itself: mesh.lease and mesh.renew are wrapped (as the
 * superuser) by functions that, once the real call returned, record each
 * chunk it handed out that is DONE by then -- a completion of a chunk the
 * lease holds cannot commit before the lease does, so any such row is a
 * DONE chunk handed out again. */
#include "base/clock.h"
#include "runner/store_env.h"
#include "runner/t.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MESH t_bin("mesh")

static const char AUDIT_SQL[] =
	"CREATE TABLE public.audit (kind text NOT NULL, job int NOT NULL, cid bigint NOT NULL);\n"
	"ALTER FUNCTION mesh.lease(int, int, bigint, bigint) RENAME TO lease_audited;\n"
	"CREATE FUNCTION mesh.lease(p_job int, p_k int, p_ttl_us bigint, p_holder bigint)\n"
	" RETURNS TABLE(cid bigint, attempt int, stolen boolean, deadline bigint, started bigint, token bigint)\n"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE c bigint[]; a int[]; s boolean[]; d bigint[]; st bigint[]; tk bigint[];\n"
	"BEGIN\n"
	" SELECT array_agg(l.cid), array_agg(l.attempt), array_agg(l.stolen), array_agg(l.deadline),\n"
	"  array_agg(l.started), array_agg(l.token) INTO c, a, s, d, st, tk\n"
	"  FROM mesh.lease_audited(p_job, p_k, p_ttl_us, p_holder) l;\n"
	" INSERT INTO public.audit SELECT 'lease', p_job, x FROM unnest(c) x WHERE mesh.is_done(p_job, x);\n"
	" RETURN QUERY SELECT * FROM unnest(c, a, s, d, st, tk);\n"
	"END $f$;\n"
	"ALTER FUNCTION mesh.renew(int, bigint, bigint, bigint) RENAME TO renew_audited;\n"
	"CREATE FUNCTION mesh.renew(p_job int, p_cid bigint, p_token bigint, p_ttl_us bigint) RETURNS bigint\n"
	" LANGUAGE plpgsql AS $f$\n"
	"DECLARE dl bigint;\n"
	"BEGIN\n"
	" dl := mesh.renew_audited(p_job, p_cid, p_token, p_ttl_us);\n"
	" IF dl IS NOT NULL AND mesh.is_done(p_job, p_cid) THEN\n"
	"  INSERT INTO public.audit VALUES ('renew', p_job, p_cid);\n"
	" END IF;\n"
	" RETURN dl;\n"
	"END $f$;\n";

static void start(struct store_env *e, char *url, size_t cap)
{
	char out[2048];
	if (store_env_start(e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	store_env_base_url(e, url, cap);
	t_write_file("audit.sql", AUDIT_SQL);
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "PGOPTIONS='-c client_min_messages=warning' psql -q -X -v ON_ERROR_STOP=1 -h %s -U mesh"
		       " -d postgres -f audit.sql",
		       e->pgdir),
		  0);
}

/* sh -c cmd in a child; its pid. */
static pid_t spawn_sh(const char *cmd)
{
	pid_t pid = fork();
	if (pid < 0)
		FAIL("fork");
	if (pid == 0) {
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* A `mesh run` node on job of n chunks (each prints "c<cid>" after a few
 * ms), its stdout to out_path; its pid. */
static pid_t node(const char *url, const char *job, long n, const char *ttl, const char *out_path)
{
	char cmd[1600];
	snprintf(cmd, sizeof cmd,
		 "exec %s run --store '%s#%s' -j 4 --ttl %s --chunks %ld -- sh -c 'sleep 0.01; echo c{}'"
		 " > %s 2> %s.err",
		 MESH, url, job, ttl, n, out_path, out_path);
	return spawn_sh(cmd);
}

/* A psql session holds mesh.jobs for ms: the whole table (LOCK TABLE) or
 * the job's row (FOR UPDATE, the fresh-lease cursor's lock). */
static void hold_jobs(const struct store_env *e, int whole_table, unsigned ms)
{
	char out[512];
	t_sh(out, sizeof out, 1,
	     "psql -q -X -h %s -U mesh -d postgres -c 'BEGIN; %s; SELECT pg_sleep(%u / 1000.0); COMMIT;' > /dev/null",
	     e->pgdir, whole_table ? "LOCK TABLE mesh.jobs" : "SELECT 1 FROM mesh.jobs FOR UPDATE", ms);
}

static long long done_count(const struct store_env *e, const char *job)
{
	char q[200];
	snprintf(q, sizeof q, "SELECT coalesce((SELECT done FROM mesh.job_counts WHERE name = '%s'), 0)", job);
	return store_env_sql1(e, q);
}

/* Adds each "c<cid>" line of path to seen[cid]; the lines that are not. */
static long count_lines(const char *path, long n, int *seen)
{
	char *s = t_read_file(path, NULL), *save = NULL;
	long bad = 0;
	if (!s)
		return 0;
	for (char *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *end;
		long c = l[0] == 'c' ? strtol(l + 1, &end, 10) : -1;
		if (c < 0 || c >= n || *end)
			bad++;
		else
			seen[c]++;
	}
	free(s);
	return bad;
}

/* What the server must say at the end, whatever happened: every chunk
 * DONE once, no lease or renew handed out a DONE chunk, and no row of a
 * DONE chunk left (one would be leased again at its expiry). */
static void check_store(const struct store_env *e, const char *job, long n)
{
	char q[400];
	EXPECT_EQ(store_env_done_bits(e, job), n);
	snprintf(q, sizeof q, "SELECT done FROM mesh.job_counts WHERE name = '%s'", job);
	EXPECT_EQ(store_env_sql1(e, q), n);
	long long leased = store_env_sql1(e, "SELECT count(*) FROM public.audit WHERE kind = 'lease'");
	long long renewed = store_env_sql1(e, "SELECT count(*) FROM public.audit WHERE kind = 'renew'");
	if (leased || renewed)
		fprintf(stderr, "    DONE chunks handed out again: %lld leases (%lld chunks), %lld renews\n", leased,
			store_env_sql1(e, "SELECT count(DISTINCT cid) FROM public.audit WHERE kind = 'lease'"), renewed);
	EXPECT_EQ(leased, 0);
	EXPECT_EQ(renewed, 0);
	snprintf(q, sizeof q,
		 "SELECT count(*) FROM mesh.chunks c JOIN mesh.jobs j ON j.id = c.job WHERE j.name = '%s'"
		 " AND mesh.is_done(c.job, c.cid) AND c.state <> 'd'",
		 job);
	long long rows = store_env_sql1(e, q);
	if (rows)
		fprintf(stderr, "    rows of DONE chunks left: %lld (max attempt %lld)\n", rows,
			store_env_sql1(e, "SELECT max(attempt) FROM mesh.chunks"));
	EXPECT_EQ(rows, 0);
}

/* Checks the prints: every chunk printed at least once (once[] and more[]
 * together) and by the nodes whose outputs are more[] (the files outs)
 * at most once; says where the first ten chunks printed twice were. */
static void check_prints(const int *once, const int *more, long n, const char *outs)
{
	long missing = 0, twice = 0;
	for (long i = 0; i < n; i++) {
		missing += once[i] + more[i] == 0;
		twice += more[i] > 1;
	}
	if (twice) {
		fprintf(stderr, "    chunks printed more than once: %ld\n", twice);
		for (long i = 0, shown = 0; i < n && shown < 10; i++)
			if (more[i] > 1 && ++shown)
				t_sh(NULL, 0, 0, "grep -H -w 'c%ld' %s >&2; for f in %s; do grep -H 'chunk %ld:' $f.err; done >&2",
				     i, outs, outs, i);
	}
	EXPECT_EQ(missing, 0);
	EXPECT_EQ(twice, 0);
}

/* Two nodes, TTL 2 s, while mesh.jobs is locked twice for 3 s mid-job
 * (the reproduction, shortened: TTL 3 s and one 20 s lock gave
 * 12-30 duplicates there).  A TTL of 2 s: a node prints an attempt's
 * output with at least half its TTL left, and its completion must commit
 * within that on a loaded machine. */
TEST_TIMEOUT(store_pg_race_done_never_leased_again_under_a_table_lock, 90)
{
	struct store_env e;
	char url[600], out[1024];
	const long n = 500;
	start(&e, url, sizeof url);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job submit '%s#lk' %ld", MESH, url, n), 0);
	uint64_t t0 = t_now_ms();
	pid_t a = node(url, "lk", n, "2", "a.out"), b = node(url, "lk", n, "2", "b.out");
	long long at_lock = -1;
	for (int round = 0; round < 2; round++) {
		while (done_count(&e, "lk") < n * (round + 1) / 4 && t_now_ms() - t0 < 30000)
			usleep(20000);
		long long done = done_count(&e, "lk");
		if (at_lock < 0)
			at_lock = done;
		hold_jobs(&e, 1, 3000);
	}
	/* A lock came mid-job: counted as the first one began.  Completions
	 * need no lock on mesh.jobs, so the nodes may finish every chunk
	 * they hold while it is held, and under ASan the job has ended
	 * before the second lock (CI, 500 of 500 there). */
	EXPECT_LT(at_lock, n);
	fprintf(stderr, "    %lld of %ld done as the first lock began\n", at_lock, n);
	int wa, wb;
	ASSERT_EQ(waitpid(a, &wa, 0), a);
	ASSERT_EQ(waitpid(b, &wb, 0), b);
	fprintf(stderr, "    the job took %llu ms\n", (unsigned long long)(t_now_ms() - t0));
	EXPECT_TRUE(WIFEXITED(wa) && WEXITSTATUS(wa) == 0);
	EXPECT_TRUE(WIFEXITED(wb) && WEXITSTATUS(wb) == 0);
	/* every chunk's output exactly once, over both nodes */
	int *seen = calloc((size_t)n, sizeof *seen);
	ASSERT_TRUE(seen != NULL);
	EXPECT_EQ(count_lines("a.out", n, seen) + count_lines("b.out", n, seen), 0);
	int *none = calloc((size_t)n, sizeof *none);
	ASSERT_TRUE(none != NULL);
	check_prints(none, seen, n, "a.out b.out");
	free(none);
	free(seen);
	check_store(&e, "lk", n);
	store_env_stop(&e);
}

/* Several nodes, TTL 2 s; for up to 12 s, at random: mesh.jobs locked
 * (the table, or the job's row) for 0.2..3 s, and a node killed with
 * SIGKILL and another started in its place.  Every chunk is printed at
 * least once (a killed node may have printed one it did not complete);
 * by the nodes that ran to the end, at most once; and the store holds as
 * above.  The seed is printed; MESH_TEST_SEED replays one. */
TEST_TIMEOUT(store_pg_race_random_locks_and_kills, 120)
{
	struct store_env e;
	char url[600], out[1024], path[64];
	const long n = 800;
	enum { NODES = 3, MAXRUNS = 64 };
	pid_t pids[NODES];
	int run_of[NODES], killed[MAXRUNS] = {0}, runs = 0;
	const char *seed_env = getenv("MESH_TEST_SEED");
	unsigned seed = seed_env ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
	fprintf(stderr, "    seed %u\n", seed);
	srand(seed);
	start(&e, url, sizeof url);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job submit '%s#rnd' %ld", MESH, url, n), 0);
	for (int i = 0; i < NODES; i++) {
		snprintf(path, sizeof path, "n%d.out", runs);
		run_of[i] = runs++;
		pids[i] = node(url, "rnd", n, "2", path);
	}
	uint64_t t0 = t_now_ms();
	while (t_now_ms() - t0 < 12000 && done_count(&e, "rnd") < n * 9 / 10) {
		int what = rand() % 3;
		fprintf(stderr, "    %5llu ms: %s\n", (unsigned long long)(t_now_ms() - t0),
			what == 0 ? "kill a node" : what == 1 ? "lock mesh.jobs" : "lock the job's row");
		if (what == 0 && runs < MAXRUNS) {
			int i = rand() % NODES;
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
			killed[run_of[i]] = 1;
			snprintf(path, sizeof path, "n%d.out", runs);
			run_of[i] = runs++;
			pids[i] = node(url, "rnd", n, "2", path);
		} else {
			hold_jobs(&e, what == 1, 200 + (unsigned)(rand() % 2800));
		}
		usleep((useconds_t)(50 + rand() % 300) * 1000);
	}
	for (int i = 0; i < NODES; i++) {
		int ws;
		ASSERT_EQ(waitpid(pids[i], &ws, 0), pids[i]);
		EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	}
	fprintf(stderr, "    %d nodes ran, %d killed; the job took %llu ms\n", runs, runs - NODES,
		(unsigned long long)(t_now_ms() - t0));
	int *all = calloc((size_t)n, sizeof *all), *kept = calloc((size_t)n, sizeof *kept);
	ASSERT_TRUE(all && kept);
	for (int r = 0; r < runs; r++) {
		snprintf(path, sizeof path, "n%d.out", r);
		EXPECT_EQ(count_lines(path, n, killed[r] ? all : kept), 0);
	}
	check_prints(all, kept, n, "n*.out");
	free(all);
	free(kept);
	check_store(&e, "rnd", n);
	store_env_stop(&e);
}

/* A psql session in the background that holds the locks in sql (the
 * statements after BEGIN) for ms; its pid. */
static pid_t hold_bg(const struct store_env *e, const char *sql, unsigned ms)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd,
		 "exec psql -q -X -h %s -U mesh -d postgres -c 'BEGIN; %s; SELECT pg_sleep(%u / 1000.0); COMMIT;'"
		 " > /dev/null",
		 e->pgdir, sql, ms);
	return spawn_sh(cmd);
}

/* A lock for hold_bg: the statements after BEGIN, and for how long. */
struct hold {
	const char *sql;
	unsigned ms;
};

/* Runs nodes nodes of job `job` (n chunks, TTL 2 s) and, once a tenth of
 * it is DONE, the lock holds in holds (sql and ms, NULL-ended); then
 * checks that every chunk was printed once and the store as above.  The
 * holds are longer than the TTL.  A node renews each completion held up
 * with a round trip of its own every quarter TTL: with a TTL of 1 s a CI
 * run of four tests at once saw two chunks printed twice by both nodes,
 * most likely renewals late on the loaded machine (not proven). */
static void slow_completions(const char *job, int nodes, const struct hold *holds)
{
	struct store_env e;
	char url[600], out[1024], path[32];
	const long n = 300;
	pid_t pids[4], hp[4];
	int nh = 0;
	start(&e, url, sizeof url);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job submit '%s#%s' %ld", MESH, url, job, n), 0);
	for (int i = 0; i < nodes; i++) {
		snprintf(path, sizeof path, "%s%d.out", job, i);
		pids[i] = node(url, job, n, "2", path);
	}
	uint64_t t0 = t_now_ms();
	while (done_count(&e, job) < n / 10 && t_now_ms() - t0 < 30000)
		usleep(20000);
	long long at_lock = done_count(&e, job);
	for (; holds[nh].sql; nh++)
		hp[nh] = hold_bg(&e, holds[nh].sql, holds[nh].ms);
	for (int i = 0; i < nh; i++) {
		int ws;
		ASSERT_EQ(waitpid(hp[i], &ws, 0), hp[i]);
		EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	}
	EXPECT_LT(at_lock, n);
	fprintf(stderr, "    %lld of %ld done as the locks began; ", at_lock, n);
	for (int i = 0; i < nodes; i++) {
		int ws;
		ASSERT_EQ(waitpid(pids[i], &ws, 0), pids[i]);
		EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	}
	fprintf(stderr, "the job took %llu ms\n", (unsigned long long)(t_now_ms() - t0));
	int *seen = calloc((size_t)n, sizeof *seen), *none = calloc((size_t)n, sizeof *none);
	ASSERT_TRUE(seen && none);
	for (int i = 0; i < nodes; i++) {
		snprintf(path, sizeof path, "%s%d.out", job, i);
		EXPECT_EQ(count_lines(path, n, seen), 0);
	}
	snprintf(out, sizeof out, "%s*.out", job);
	check_prints(none, seen, n, out);
	free(seen);
	free(none);
	check_store(&e, job, n);
	store_env_stop(&e);
}

/* Completions held up for 3 s (mesh.done_words locked against writes;
 * leases and renewals only read it), TTL 2 s, two nodes: a node keeps
 * the lease of a chunk whose output it printed renewed until its
 * completion commits, so no node takes it over and runs it again (each
 * such chunk was printed twice before, by a thief or by its own node). */
TEST_TIMEOUT(store_pg_race_slow_completions_keep_their_leases, 90)
{
	static const struct hold holds[] = {{"LOCK TABLE mesh.done_words IN EXCLUSIVE MODE", 3000}, {NULL, 0}};
	slow_completions("sc", 2, holds);
}

/* The same while the node's own lease waits on a locked mesh.jobs (its
 * loop, blocked there, renews nothing) for 3 s, the completions for
 * 4.5 s: the lease that ends the wait takes over the node's own expired
 * leases of chunks whose completions have not committed yet, and the
 * node runs none of them again (it did, and printed each twice). */
TEST_TIMEOUT(store_pg_race_own_expired_leases_not_run_again, 90)
{
	static const struct hold holds[] = {{"LOCK TABLE mesh.done_words IN EXCLUSIVE MODE", 4500},
					    {"LOCK TABLE mesh.jobs", 3000},
					    {NULL, 0}};
	slow_completions("ow", 1, holds);
}
