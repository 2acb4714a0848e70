/* The Prometheus renderer of meshd/api/metrics.h, fed by hand. */
#include "base/err.h"
#include "meshd/api/metrics.h"
#include "runner/t.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *label(const char *s)
{
	struct mesh_buf b = MESH_BUF_INIT;
	ASSERT_EQ(meshd_metrics_label(&b, s), 0);
	return mesh_buf_detach(&b, NULL);
}

TEST(metrics_label_escaping)
{
	char *t;
	EXPECT_STREQ(t = label("echo"), "echo");
	free(t);
	EXPECT_STREQ(t = label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
	free(t);
	/* Other control bytes and invalid UTF-8 become U+FFFD; valid UTF-8 stays. */
	EXPECT_STREQ(t = label("x\ty\x01z\x7f"), "x\xef\xbf\xbdy\xef\xbf\xbdz\xef\xbf\xbd");
	free(t);
	EXPECT_STREQ(t = label("\xff\xc3\xa9"), "\xef\xbf\xbd\xc3\xa9");
	free(t);
	EXPECT_STREQ(t = label(""), "");
	free(t);
}

TEST(metrics_histogram_buckets_are_inclusive)
{
	struct mesh_hist h = {0};
	mesh_hist_observe(&h, &meshd_cold_start_bounds, 1000000);	    /* exactly 1 ms: le="0.001" */
	mesh_hist_observe(&h, &meshd_cold_start_bounds, 1000001);	    /* just over: le="0.0025" */
	mesh_hist_observe(&h, &meshd_cold_start_bounds, 999999999999ull); /* +Inf */
	EXPECT_UEQ(h.bucket[0], 1);
	EXPECT_UEQ(h.bucket[1], 1);
	EXPECT_UEQ(h.count, 3);
	EXPECT_UEQ(h.sum_ns, 1000000ull + 1000001ull + 999999999999ull);
	uint64_t inf = 0;
	for (int i = 2; i < MESH_HIST_BUCKETS; i++)
		inf += h.bucket[i];
	EXPECT_UEQ(inf, 1);
}

TEST(metrics_call_result_labels)
{
	EXPECT_EQ(meshd_call_result_of(0), MESHD_CALL_OK);
	EXPECT_EQ(meshd_call_result_of(MESH_E_HANDLER), MESHD_CALL_HANDLER);
	EXPECT_EQ(meshd_call_result_of(MESH_E_TIMEOUT), MESHD_CALL_TIMEOUT);
	EXPECT_EQ(meshd_call_result_of(MESH_E_CRASHED), MESHD_CALL_CRASHED);
	EXPECT_EQ(meshd_call_result_of(MESH_E_STOPPED), MESHD_CALL_STOPPED);
	EXPECT_EQ(meshd_call_result_of(-ENOMEM), MESHD_CALL_ERROR);
	EXPECT_STREQ(meshd_call_result_name(MESHD_CALL_HANDLER), "handler_error");
}

/* Two programs, one with a hostile name; jobs present or not. */
static char *render(int have_jobs)
{
	struct meshd_program_metrics p[2];
	struct meshd_metrics m = {.core = {.slots = 8, .slots_in_use = 1, .spawns = 3, .crashes = 1, .processes = 1}};
	memset(p, 0, sizeof p);
	p[0].name = "echo";
	p[0].max_workers = 2;
	p[0].workers[MESH_IS_RUNNING] = 1;
	p[0].spawns = 2;
	p[0].calls[MESHD_CALL_OK] = 5;
	mesh_hist_observe(&p[0].cold_start, &meshd_cold_start_bounds, 1500000);
	mesh_hist_observe(&p[0].cold_start, &meshd_cold_start_bounds, 1500000);
	mesh_hist_observe(&p[0].call, &meshd_call_bounds, 20000);
	/* 2 always-on workers over 100 s: 200 s; warm 30 s saves 0.85 */
	p[0].savings = (struct meshd_savings){.window_ns = 100ull * 1000000000ull, .always_ns = 200ull * 1000000000ull,
					      .warm_ns = 30ull * 1000000000ull, .permil = 850};
	p[1].name = "we\"ird\\na\nme";
	p[1].max_workers = 1;
	m.core.programs = p;
	m.core.nprograms = 2;
	m.have_jobs = have_jobs;
	m.jobs.jobs[MESHD_MJOB_RUNNING] = 1;
	m.jobs.chunks[MESHD_CHUNK_PENDING] = 200;
	m.jobs.chunks[MESHD_CHUNK_DONE] = 100;
	m.jobs.completions = 100;
	m.jobs.duplicates = 2;
	m.jobs.speculative_wins = 1;
	struct mesh_buf b = MESH_BUF_INIT;
	ASSERT_EQ(meshd_metrics_render(&m, &b), 0);
	return mesh_buf_detach(&b, NULL);
}

TEST(metrics_render_values)
{
	char *s = render(0);
	EXPECT_CONTAINS(s, "# TYPE mesh_workers gauge\n");
	EXPECT_CONTAINS(s, "mesh_workers{program=\"echo\",state=\"running\"} 1\n");
	EXPECT_CONTAINS(s, "mesh_workers{program=\"echo\",state=\"idle\"} 0\n");
	EXPECT_CONTAINS(s, "mesh_spawns_total{program=\"echo\"} 2\n");
	EXPECT_CONTAINS(s, "mesh_calls_total{program=\"echo\",result=\"ok\"} 5\n");
	/* Cumulative buckets: 1.5 ms is over 0.001 and within 0.0025. */
	EXPECT_CONTAINS(s, "mesh_cold_start_seconds_bucket{program=\"echo\",le=\"0.001\"} 0\n");
	EXPECT_CONTAINS(s, "mesh_cold_start_seconds_bucket{program=\"echo\",le=\"0.0025\"} 2\n");
	EXPECT_CONTAINS(s, "mesh_cold_start_seconds_bucket{program=\"echo\",le=\"+Inf\"} 2\n");
	EXPECT_CONTAINS(s, "mesh_cold_start_seconds_sum{program=\"echo\"} 0.003000000\n");
	EXPECT_CONTAINS(s, "mesh_cold_start_seconds_count{program=\"echo\"} 2\n");
	EXPECT_CONTAINS(s, "mesh_call_duration_seconds_bucket{program=\"echo\",le=\"2.5e-05\"} 1\n");
	EXPECT_CONTAINS(s, "mesh_savings_ratio{program=\"echo\"} 0.850\n");
	EXPECT_CONTAINS(s, "mesh_warm_seconds_total{program=\"echo\"} 30.000000000\n");
	EXPECT_CONTAINS(s, "mesh_always_on_seconds_total{program=\"echo\"} 200.000000000\n");
	EXPECT_CONTAINS(s, "mesh_window_seconds{program=\"echo\"} 100.000000000\n");
	/* The hostile name, escaped the same way in every family. */
	EXPECT_CONTAINS(s, "mesh_spawns_total{program=\"we\\\"ird\\\\na\\nme\"} 0\n");
	EXPECT_CONTAINS(s, "mesh_savings_ratio{program=\"we\\\"ird\\\\na\\nme\"} 0.000\n");
	EXPECT_CONTAINS(s, "mesh_slots 8\n");
	EXPECT_CONTAINS(s, "mesh_slots_in_use 1\n");
	/* No job subsystem: no job family at all, not zeros. */
	EXPECT_TRUE(strstr(s, "mesh_jobs") == NULL);
	EXPECT_TRUE(strstr(s, "mesh_chunk") == NULL);
	EXPECT_TRUE(strstr(s, "mesh_speculative_wins_total") == NULL);
	/* Every line is a comment or a sample ending in a newline. */
	EXPECT_EQ(s[strlen(s) - 1], '\n');
	free(s);

	s = render(1);
	EXPECT_CONTAINS(s, "mesh_jobs{state=\"running\"} 1\n");
	EXPECT_CONTAINS(s, "mesh_chunks{state=\"pending\"} 200\n");
	EXPECT_CONTAINS(s, "mesh_chunks{state=\"done\"} 100\n");
	EXPECT_CONTAINS(s, "mesh_chunk_completions_total 100\n");
	EXPECT_CONTAINS(s, "mesh_chunk_duplicates_total 2\n");
	EXPECT_CONTAINS(s, "mesh_speculative_wins_total 1\n");
	free(s);
}

/* promtool (Debian's prometheus package) accepts both renderings. */
TEST(metrics_render_passes_promtool)
{
	static char out[65536];
	if (t_sh(out, sizeof out, 1, "command -v promtool") != 0)
		SKIP_TOOL("promtool is not installed: install Debian's 'prometheus' package (mk/deps.sh test)");
	for (int jobs = 0; jobs <= 1; jobs++) {
		char *s = render(jobs);
		t_write_file("m.txt", s);
		free(s);
		int rc = t_sh(out, sizeof out, 1, "promtool check metrics < m.txt");
		if (rc != 0)
			printf("promtool (jobs=%d): %s\n", jobs, out);
		EXPECT_EQ(rc, 0);
	}
}
