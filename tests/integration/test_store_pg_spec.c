/* Speculation on the PostgreSQL store through the CLI, against a real
 * server the harness starts (tests/runner/store_env.c): a job with one
 * deliberately slow chunk, two nodes asked to speculate.  The copy wins
 * (counted), the straggler is stopped, and every chunk is DONE once.  The
 * API-level rules are the conformance suite's (test_store_conf.c,
 * conf_*_speculation_*). */
#include "base/clock.h"
#include "integration/meshd_t.h"
#include "runner/store_env.h"
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MESH t_bin("mesh")

/* chunk 0's first run hangs; any later run of it finds the marker and
 * ends at once, as every other chunk does */
#define SLOW_ZERO "sh -c 'if [ {} = 0 ] && mkdir m 2>/dev/null; then sleep 20; else sleep 0.05; fi'"

static void start(struct store_env *e, char *url, size_t cap)
{
	if (store_env_start(e, "postgresql"))
		FAIL("cannot start PostgreSQL");
	store_env_base_url(e, url, cap);
}

/* Two `mesh job harvest --speculate` nodes, one slot each: the node that
 * took chunk 0 hangs on it; the other finishes the rest, then copies
 * chunk 0 and wins; the hanging run is killed at its next renew (its
 * chunk is DONE).  Every chunk DONE once, one win, nothing left leased. */
TEST_TIMEOUT(store_pg_spec_harvest_two_nodes_copy_wins, 60)
{
	struct store_env e;
	char url[600], out[4096];
	start(&e, url, sizeof url);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job submit '%s#h' 12", MESH, url), 0);
	uint64_t t0 = t_now_ms();
	int rc = t_sh(out, sizeof out, 1,
		      "%s job harvest '%s#h' x h 12 4 na --speculate -- " SLOW_ZERO " > a.out 2>&1 & "
		      "%s job harvest '%s#h' x h 12 4 nb --speculate -- " SLOW_ZERO " > b.out 2>&1; rb=$?; "
		      "wait $!; ra=$?; cat a.out b.out; exit $((ra + rb))",
		      MESH, url, MESH, url);
	EXPECT_EQ(rc, 0);
	EXPECT_LT(t_now_ms() - t0, 15000); /* not the 20 s of the hanging run */
	EXPECT_CONTAINS(out, "speculative 1");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job status '%s#h' x h 12", MESH, url), 0);
	EXPECT_CONTAINS(out, "done 12");
	EXPECT_CONTAINS(out, "speculative wins 1");
	EXPECT_EQ(store_env_done_bits(&e, "h"), 12);
	EXPECT_EQ(store_env_sql1(&e, "SELECT done FROM mesh.job_counts WHERE name = 'h'"), 12);
	EXPECT_EQ(store_env_sql1(&e, "SELECT spec FROM mesh.job_counts WHERE name = 'h'"), 1);
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM mesh.copies"), 0);
	store_env_stop(&e);
}

/* `mesh run --store URL --speculate`: its copies' node (NAME.spec) takes
 * a copy of its own straggler, as on the file store (test_run.c,
 * run_speculate_beats_a_straggler). */
TEST_TIMEOUT(store_pg_spec_mesh_run_store_speculate, 60)
{
	struct store_env e;
	char url[600], out[4096];
	start(&e, url, sizeof url);
	uint64_t t0 = t_now_ms();
	int rc = t_sh(out, sizeof out, 1, "%s run -v -j2 --ttl 4 --speculate --store '%s' --chunks 12 -- " SLOW_ZERO,
		      MESH, url);
	EXPECT_EQ(rc, 0);
	EXPECT_LT(t_now_ms() - t0, 15000);
	EXPECT_CONTAINS(out, "12/12 done");
	EXPECT_CONTAINS(out, "1 speculative wins");
	EXPECT_EQ(store_env_sql1(&e, "SELECT count(*) FROM mesh.job_counts WHERE name LIKE 'mesh-run-%' AND done = 12"), 1);
	EXPECT_EQ(store_env_sql1(&e, "SELECT sum(spec) FROM mesh.job_counts WHERE name LIKE 'mesh-run-%'"), 1);
	store_env_stop(&e);
}

/* `mesh submit --store URL --speculate` served by a meshd: chunk 9 straggles
 * on the first worker that takes it (2 s); once the rest are DONE, a copy
 * runs on the other worker (the driver's NAME-spec node) and wins. */
TEST_TIMEOUT(store_pg_spec_meshd_submit_speculate, 60)
{
	static char out[1 << 16];
	struct store_env e;
	char url[600], top[4096], toml[4096 + 256], args[700], q[128];
	start(&e, url, sizeof url);
	ASSERT_TRUE(getcwd(top, sizeof top) != NULL);
	mkdir("a", 0755);
	ASSERT_EQ(chdir("a"), 0);
	snprintf(toml, sizeof toml,
		 "max_workers = 2\nidle_ttl = \"300s\"\n[lifecycle]\nstop_grace = \"1s\"\n[env]\n"
		 "JOBTEST_FIRST_SLOW = \"%s/slowed-once\"\n",
		 top);
	meshd_t_add_program(out, sizeof out, "jw", t_bin("tests-workers/job_worker"), toml);
	snprintf(args, sizeof args, "--state state --store '%s'", url);
	pid_t pid = meshd_t_start_notified(args, NULL, 0);
	ASSERT_EQ(chdir(top), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 0, "'%s' submit --store '%s' jw --speculate ::: a b c d e f g h i slow-once",
		       MESH, url),
		  0);
	unsigned id = (unsigned)strtoul(out, NULL, 10);
	ASSERT_GT(id, 0);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' wait --store '%s' %u", MESH, url, id), 0);
	EXPECT_LT(t_now_ms() - t0, 3000); /* not the straggler's 4 s */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "'%s' results --store '%s' %u", MESH, url, id), 0);
	EXPECT_STREQ(out, "0:a\n1:b\n2:c\n3:d\n4:e\n5:f\n6:g\n7:h\n8:i\n9:slow-once\n");
	snprintf(q, sizeof q, "SELECT spec FROM mesh.job_counts WHERE id = %u", id);
	EXPECT_EQ(store_env_sql1(&e, q), 1);
	snprintf(q, sizeof q, "s%u", id);
	EXPECT_EQ(store_env_done_bits(&e, q), 10);
	EXPECT_EQ(meshd_t_stop(pid), 0);
	store_env_stop(&e);
}
