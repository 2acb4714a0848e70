/* GET /metrics end to end: the real meshd with --metrics on loopback, an
 * echo worker, calls and cold starts, the text read over the control socket
 * and over TCP, checked by value and by promtool. */
#include "base/exit.h"
#include "host/image.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#define SOCK "run/meshd.sock"

static char out[1 << 17];

static int mesh(const char *args)
{
	return t_sh(out, sizeof out, 1, "'%s' %s --socket " SOCK, t_bin("mesh"), args);
}

/* echo's warm_history in GET /v1/ps (a new reference), or NULL. */
static json_t *echo_warm_history(void)
{
	if (mesh("ps --json") != 0)
		return NULL;
	json_t *ps = json_loads(out, 0, NULL), *q, *h = NULL;
	size_t i;
	json_array_foreach(json_object_get(ps, "programs"), i, q)
		if (!strcmp(json_string_value(json_object_get(q, "name")) ?: "", "echo"))
			h = json_incref(json_object_get(q, "warm_history"));
	json_decref(ps);
	return h;
}

/* Whether echo's last warm/cold change is arg (0 cold, 1 warm). */
static int echo_last_warm_is(void *arg)
{
	json_t *h = echo_warm_history();
	size_t n = json_array_size(h);
	int is = n && json_integer_value(json_array_get(json_array_get(h, n - 1), 1)) == (json_int_t)(intptr_t)arg;
	json_decref(h);
	return is;
}

TEST_TIMEOUT(meshd_metrics_count_calls_and_cold_starts, 60)
{
	int port = 0;
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	pid_t pid = meshd_t_start(.args = "--metrics 127.0.0.1:0", .wait_accept = 1);
	ASSERT_TRUE(t_wait_for(meshd_t_metrics_port, &port, 10000));

	/* A cold start, three calls; a stop, a cold start again, one call. */
	ASSERT_EQ(mesh("call echo one"), 0);
	ASSERT_EQ(mesh("call echo two"), 0);
	ASSERT_EQ(mesh("call echo three"), 0);
	ASSERT_EQ(mesh("stop echo"), 0);
	ASSERT_EQ(mesh("call echo four"), 0);

	ASSERT_EQ(t_sh(out, sizeof out, 0,
		       "curl -sS -D sock.hdr -o sock.txt --unix-socket " SOCK " http://x/metrics"),
		  0);
	char *hdr = t_read_file("sock.hdr", NULL), *m = t_read_file("sock.txt", NULL);
	ASSERT_TRUE(hdr && m);
	EXPECT_CONTAINS(hdr, "200");
	EXPECT_CONTAINS(hdr, "text/plain; version=0.0.4");
	EXPECT_EQ(meshd_t_sample(m, "mesh_calls_total{program=\"echo\",result=\"ok\"}"), 4);
	EXPECT_EQ(meshd_t_sample(m, "mesh_calls_total{program=\"echo\",result=\"error\"}"), 0);
	EXPECT_EQ(meshd_t_sample(m, "mesh_call_duration_seconds_count{program=\"echo\"}"), 4);
	EXPECT_EQ(meshd_t_sample(m, "mesh_call_duration_seconds_bucket{program=\"echo\",le=\"+Inf\"}"), 4);
	double spawns = meshd_t_sample(m, "mesh_spawns_total{program=\"echo\"}");
	EXPECT_EQ(spawns, 2);
	EXPECT_EQ(meshd_t_sample(m, "mesh_cold_start_seconds_count{program=\"echo\"}"), spawns);
	EXPECT_TRUE(meshd_t_sample(m, "mesh_cold_start_seconds_sum{program=\"echo\"}") > 0);
	EXPECT_EQ(meshd_t_sample(m, "mesh_crashes_total{program=\"echo\"}"), 0);
	EXPECT_EQ(meshd_t_sample(m, "mesh_workers{program=\"echo\",state=\"running\"}"), 1);
	EXPECT_EQ(meshd_t_sample(m, "mesh_worker_processes"), 1);
	EXPECT_EQ(meshd_t_sample(m, "mesh_slots"), 8);
	EXPECT_EQ(meshd_t_sample(m, "mesh_slots_in_use"), 1);
	double warm = meshd_t_sample(m, "mesh_warm_seconds_total{program=\"echo\"}");
	double window = meshd_t_sample(m, "mesh_window_seconds{program=\"echo\"}");
	EXPECT_TRUE(warm > 0);
	EXPECT_TRUE(warm <= window);
	double sav = meshd_t_sample(m, "mesh_savings_ratio{program=\"echo\"}");
	EXPECT_TRUE(sav >= 0 && sav <= 1);
	/* No job was submitted yet: the job families are there, at zero. */
	EXPECT_EQ(meshd_t_sample(m, "mesh_jobs{state=\"running\"}"), 0);
	EXPECT_EQ(meshd_t_sample(m, "mesh_chunks{state=\"done\"}"), 0);
	EXPECT_EQ(meshd_t_sample(m, "mesh_chunk_completions_total"), 0);
	meshd_t_promtool_ok("sock.txt");
	/* GET /v1/ps says the same of the cold starts: how many, the mean
	 * (the histogram's sum over its count) and the last. */
	ASSERT_EQ(mesh("ps --json"), 0);
	json_t *ps = json_loads(out, 0, NULL), *p = NULL, *q;
	size_t i;
	json_array_foreach(json_object_get(ps, "programs"), i, q)
		if (!strcmp(json_string_value(json_object_get(q, "name")) ?: "", "echo"))
			p = q;
	ASSERT_TRUE(p != NULL);
	EXPECT_EQ(json_integer_value(json_object_get(p, "cold_starts")), 2);
	double mean = json_number_value(json_object_get(p, "cold_start_mean_s")),
	       last = json_number_value(json_object_get(p, "cold_start_last_s"));
	double sum = meshd_t_sample(m, "mesh_cold_start_seconds_sum{program=\"echo\"}");
	EXPECT_TRUE(last > 0 && last < 2 * sum);
	EXPECT_TRUE(mean > 0.499 * sum && mean < 0.501 * sum);
	json_decref(ps);
	/* Its warm/cold record: alternating, in time order, warm now; cold
	 * once stopped, warm again at the next call. */
	int64_t t_stop = (int64_t)time(NULL) * 1000;
	ASSERT_EQ(mesh("stop echo"), 0);
	ASSERT_TRUE(t_wait_for(echo_last_warm_is, (void *)0, 5000));
	ASSERT_EQ(mesh("call echo again"), 0);
	ASSERT_TRUE(t_wait_for(echo_last_warm_is, (void *)1, 5000));
	json_t *h = echo_warm_history();
	size_t nh = json_array_size(h);
	EXPECT_GE(nh, 3);
	for (size_t k = 1; k < nh; k++) {
		json_t *a = json_array_get(h, k - 1), *b = json_array_get(h, k);
		EXPECT_NE(json_integer_value(json_array_get(a, 1)), json_integer_value(json_array_get(b, 1)));
		EXPECT_TRUE(json_integer_value(json_array_get(a, 0)) <= json_integer_value(json_array_get(b, 0)));
	}
	/* the cold change came after the stop, by the wall clock */
	EXPECT_TRUE(json_integer_value(json_array_get(json_array_get(h, nh - 2), 0)) >= t_stop - 1000);
	json_decref(h);

	/* The same text over TCP (loopback), and the counters moved with the
	 * cold start and call above and one more call. */
	ASSERT_EQ(mesh("call echo five"), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "curl -sS -o tcp.txt -w '%%{http_code}' http://127.0.0.1:%d/metrics", port),
		  0);
	EXPECT_STREQ(out, "200");
	char *tm = t_read_file("tcp.txt", NULL);
	ASSERT_TRUE(tm != NULL);
	EXPECT_EQ(meshd_t_sample(tm, "mesh_calls_total{program=\"echo\",result=\"ok\"}"), 6);
	EXPECT_EQ(meshd_t_sample(tm, "mesh_cold_start_seconds_count{program=\"echo\"}"), 3);
	meshd_t_promtool_ok("tcp.txt");

	/* A job of three chunks: counted once it is complete. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s' submit --socket " SOCK " echo ::: a b c", t_bin("mesh")), 0);
	ASSERT_EQ(mesh("wait 1 --quiet"), 0);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "curl -sS -o job.txt http://127.0.0.1:%d/metrics", port), 0);
	char *jm = t_read_file("job.txt", NULL);
	ASSERT_TRUE(jm != NULL);
	EXPECT_EQ(meshd_t_sample(jm, "mesh_jobs{state=\"complete\"}"), 1);
	EXPECT_EQ(meshd_t_sample(jm, "mesh_jobs{state=\"running\"}"), 0);
	EXPECT_EQ(meshd_t_sample(jm, "mesh_chunks{state=\"done\"}"), 3);
	EXPECT_EQ(meshd_t_sample(jm, "mesh_chunks{state=\"pending\"}"), 0);
	EXPECT_EQ(meshd_t_sample(jm, "mesh_chunk_completions_total"), 3);
	meshd_t_promtool_ok("job.txt");
	free(jm);
	/* That listener serves nothing else. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -s -o /dev/null -w '%%{http_code}' http://127.0.0.1:%d/v1/ps", port), 0);
	EXPECT_STREQ(out, "404");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -s -o /dev/null -w '%%{http_code}' -X POST http://127.0.0.1:%d/metrics",
		       port),
		  0);
	EXPECT_STREQ(out, "405");
	/* On the socket, only GET and HEAD. */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "curl -s -o /dev/null -w '%%{http_code}' -X POST --unix-socket " SOCK
					  " http://x/metrics"),
		  0);
	EXPECT_STREQ(out, "405");

	EXPECT_EQ(meshd_t_stop(pid), 0);
	free(hdr);
	free(m);
	free(tm);
}

TEST(meshd_metrics_refuses_public_address)
{
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), NULL);
	mkdir("logs", 0755);
	int rc = t_sh(out, sizeof out, 1, "'%s' --catalog catalog --logs logs --socket " SOCK " --metrics 0.0.0.0:0",
		      t_bin("meshd"));
	EXPECT_EQ(rc, MESH_EXIT_USAGE);
	EXPECT_CONTAINS(out, "not a loopback address");
	EXPECT_CONTAINS(out, "--metrics-public");
	rc = t_sh(out, sizeof out, 1, "'%s' --catalog catalog --logs logs --socket " SOCK " --metrics nonsense",
		  t_bin("meshd"));
	EXPECT_EQ(rc, MESH_EXIT_USAGE);
	EXPECT_CONTAINS(out, "not HOST:PORT");
}
