/* `mesh ps` lists meshd --http's programs: state, pid, port, models, in
 * flight, the last failure. */
#include "runner/t.h"
#include "integration/gw_t.h"

#include <pthread.h>

struct slow_arg {
	int port, status;
	char resp[8192];
};

static void *slow_main(void *arg)
{
	struct slow_arg *a = arg;
	a->status = post_chat(a->port, "m-a", "slow:1.5", 0, a->resp, sizeof a->resp);
	return NULL;
}

struct ps_has {
	const char *needle;
	char out[16384];
};

static int ps_json_has(void *arg)
{
	struct ps_has *h = arg;
	return t_sh(h->out, sizeof h->out, 1, "%s ps --json --socket run/meshd.sock", t_bin("mesh")) == 0 &&
	       strstr(h->out, h->needle) != NULL;
}

TEST_TIMEOUT(gateway_mesh_ps_lists_http_programs, 30)
{
	char resp[8192], out[16384], line[256];
	add_oa("a", "\"m-a\", \"m-a2\"", ", \"--models\", \"m-a,m-a2\"", "");
	add_oa("f", "\"m-f\"", ", \"--exit-on-start\", \"3\"", "");
	struct gw g = start_gw("");
	/* Nothing started yet: both cold, no pid. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s ps --socket run/meshd.sock", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "HTTP PROGRAM");
	EXPECT_TRUE(strstr(out, "\na                    cold             -      -") != NULL);
	EXPECT_EQ(post_chat(g.port, "m-a", "hi", 0, resp, sizeof resp), 200);
	EXPECT_EQ(post_chat(g.port, "m-f", "hi", 0, resp, sizeof resp), 502);
	pid_t pid = 0;
	char *err = t_read_file("meshd.err", NULL);
	const char *sp = err ? strstr(err, "program=a spawned pid=") : NULL;
	if (sp)
		pid = atoi(sp + 22);
	free(err);
	ASSERT_GT(pid, 1);
	/* A request in flight shows. */
	struct slow_arg a = {.port = g.port};
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, slow_main, &a), 0);
	struct ps_has h = {.needle = "\"in_flight\":1"};
	EXPECT_TRUE(t_wait_for(ps_json_has, &h, 3000));
	EXPECT_CONTAINS(h.out, "\"models\":[\"m-a\",\"m-a2\"]");
	snprintf(line, sizeof line, "\"pid\":%d", (int)pid);
	EXPECT_CONTAINS(h.out, line);
	EXPECT_CONTAINS(h.out, "\"last_error\":\"program 'f' exited with status 3 before it was warm");
	pthread_join(th, NULL);
	EXPECT_EQ(a.status, 200);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s ps --socket run/meshd.sock", t_bin("mesh")), 0);
	snprintf(line, sizeof line, "\na                    warm       %7d", (int)pid);
	EXPECT_CONTAINS(out, line);
	EXPECT_CONTAINS(out, "m-a,m-a2\n");
	EXPECT_TRUE(strstr(out, "\nf                    failed           -      -        0      0      1 m-f\n") != NULL);
	EXPECT_CONTAINS(out, "  LAST FAILURE: program 'f' exited with status 3 before it was warm (last probe:");
	EXPECT_EQ(stop_gw(&g), 0);
}
