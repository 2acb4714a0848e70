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

struct stream_arg {
	int port, status;
	char resp[16384];
};

static void *stream_main(void *arg)
{
	struct stream_arg *a = arg;
	a->status = post_chat(a->port, "p-model", "hi", 1, a->resp, sizeof a->resp);
	return NULL;
}

/* mesh start / mesh stop (and POST /v1/programs/NAME/start|stop) preload
 * and unload an HTTP program: start spawns it and returns once it is warm
 * (or says why its start failed), stop lets the requests in flight end,
 * then stops it; the next request starts it again. */
TEST_TIMEOUT(gateway_mesh_start_and_stop_an_http_program, 90)
{
	char out[8192], resp[8192];
	add_oa("p", "\"p-model\"", ", \"--models\", \"p-model\", \"--start-delay\", \"0.5\", \"--token-delay\", \"0.3\", \"--tokens\", \"6\"",
	       "");
	add_oa("f", "\"f-model\"", ", \"--models\", \"f-model\", \"--exit-on-start\", \"3\"", "");
	struct gw g = start_gw("");
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "start p"), 0);
	EXPECT_CONTAINS(out, "started p (pid ");
	EXPECT_TRUE(file_has("meshd.err", "program=p warm pid="));
	EXPECT_EQ(post_chat(g.port, "p-model", "hi", 0, resp, sizeof resp), 200);
	EXPECT_FALSE(strstr(resp, "X-Mesh-Cold-Start") != NULL); /* it was warm */
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "start p"), 0); /* warm already: nothing more */
	EXPECT_EQ(count_in("meshd.err", "program=p spawned"), 1);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -sS -X POST --unix-socket run/meshd.sock http://x/v1/programs/p/start"), 0);
	EXPECT_CONTAINS(out, "\"action\":\"start\"");
	EXPECT_CONTAINS(out, "\"state\":\"warm\"");
	/* stop while a stream is in flight: it ends whole first. */
	struct stream_arg sa = {.port = g.port};
	pthread_t th;
	ASSERT_EQ(pthread_create(&th, NULL, stream_main, &sa), 0);
	usleep(400000);
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "stop p"), 0);
	EXPECT_CONTAINS(out, "stopped p");
	pthread_join(th, NULL);
	EXPECT_EQ(sa.status, 200);
	EXPECT_CONTAINS(sa.resp, "data: [DONE]");
	EXPECT_GE(t_now_ms() - t0, 600); /* it waited for the stream (6 tokens 0.3 s apart) */
	EXPECT_TRUE(file_has("meshd.err", "program=p stopping pid="));
	EXPECT_TRUE(file_has("meshd.err", "(mesh stop)"));
	EXPECT_EQ(http_get(g.port, "/v1/models/p-model", resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "\"state\":\"cold\"");
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "stop p"), 0); /* cold already */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -sS -X POST --unix-socket run/meshd.sock http://x/v1/programs/p/stop"), 0);
	EXPECT_CONTAINS(out, "\"action\":\"stop\"");
	/* The next request starts it again. */
	EXPECT_EQ(post_chat(g.port, "p-model", "hi", 0, resp, sizeof resp), 200);
	EXPECT_CONTAINS(resp, "X-Mesh-Cold-Start: 1");
	/* A start that fails says why, with a failing exit code. */
	EXPECT_NE(meshd_t_mesh(out, sizeof out, 1, "start f"), 0);
	EXPECT_CONTAINS(out, "exited with status 3 before it was warm");
	EXPECT_EQ(stop_gw(&g), 0);
}
