/* One savings figure (issue 35, item 6): the worker-seconds saved against
 * always-on over one window -- the time the program was loaded, across
 * meshd's restarts (<logs>/.savings) -- the same definition in mesh ps,
 * GET /v1/ps and /metrics, with the window beside it.  Before, each place
 * had a window that began at meshd's start, so a restart reset it. */
#include "runner/t.h"
#include "integration/meshd_t.h"

#include <math.h>

static char out[65536];

/* |a - b| <= eps */
#define EXPECT_NEAR(a, b, eps) EXPECT_DBL(fabs((double)(a) - (double)(b)), <=, (double)(eps))

struct savings {
	double window, always, warm, savings;
	long long since;
};

/* The program's savings from `mesh ps --json`. */
static struct savings ps_savings(const char *name)
{
	struct savings s = {-1, -1, -1, -1, -1};
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 0, "ps --json"), 0);
	json_t *ps = json_loads(out, 0, NULL), *progs = ps ? json_object_get(ps, "programs") : NULL, *p;
	size_t i;
	json_array_foreach(progs, i, p) if (!strcmp(json_string_value(json_object_get(p, "name")), name))
	{
		s.window = json_number_value(json_object_get(p, "window_seconds"));
		s.always = json_number_value(json_object_get(p, "always_on_seconds"));
		s.warm = json_number_value(json_object_get(p, "warm_seconds"));
		s.savings = json_number_value(json_object_get(p, "savings"));
		s.since = json_integer_value(json_object_get(p, "window_since"));
	}
	json_decref(ps);
	printf("ps: window %.3f always %.3f warm %.3f savings %.3f since %lld\n", s.window, s.always, s.warm, s.savings,
	       s.since);
	return s;
}

/* Every worker of every program is down: a t_wait_for condition. */
static int cold(void *arg)
{
	char o[65536];
	if (meshd_t_mesh(o, sizeof o, 0, "ps --json") != 0)
		return 0;
	json_t *ps = json_loads(o, 0, NULL), *p, *w;
	size_t i, k;
	int up = !ps;
	json_array_foreach(json_object_get(ps, "programs"), i, p)
		json_array_foreach(json_object_get(p, "workers"), k, w)
			up |= strcmp(json_string_value(json_object_get(w, "state")) ?: "", "DOWN") != 0;
	json_decref(ps);
	return !up;
}

static void setup(void)
{
	meshd_t_add_program(out, sizeof out, "echo", t_bin("examples/echo_worker"), "idle_ttl = \"500ms\"\nmax_workers = 2\n");
}

/* A worker up for a while and reaped, meshd SIGKILLed, started again on
 * the same --logs: the window and the warm time go on from what the first
 * run wrote (at the reap), and its start stays the first load's. */
TEST_TIMEOUT(savings_window_goes_on_across_a_sigkill_restart, 60)
{
	setup();
	pid_t m = meshd_t_start();
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "call echo hi"), 0);
	/* warm, then reaped after its 500 ms idle (which writes the ledger) */
	ASSERT_TRUE(t_wait_for(cold, NULL, 10000));
	usleep(300 * 1000);
	struct savings a = ps_savings("echo");
	EXPECT_DBL(a.window, >=, 0.5);
	EXPECT_DBL(a.warm, >, 0.3);
	EXPECT_DBL(a.warm, <, a.always);
	EXPECT_TRUE(a.since > 0);
	kill(m, SIGKILL);
	EXPECT_EQ(meshd_t_wait(m), 128 + SIGKILL);
	m = meshd_t_start();
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "call echo hi"), 0);
	struct savings b = ps_savings("echo");
	/* The reap was written (0.5 s or more in): before, the window began
	 * again with this run (a few ms when ps answers). */
	EXPECT_DBL(b.window, >=, 0.5);
	EXPECT_DBL(b.warm, >=, a.warm - 0.001);
	EXPECT_EQ(b.since, a.since);
	EXPECT_EQ(meshd_t_stop(m), 0);
	/* A clean exit writes it too: a third run starts from all of it. */
	m = meshd_t_start();
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "load echo"), 0);
	struct savings c = ps_savings("echo");
	EXPECT_DBL(c.window, >=, b.window);
	EXPECT_DBL(c.warm, >=, b.warm);
	EXPECT_EQ(c.since, a.since);
	EXPECT_EQ(meshd_t_stop(m), 0);
}

/* ps (text and JSON) and /metrics give the one definition: savings =
 * 1 - warm / always-on over the window, always-on = max_workers x window. */
TEST_TIMEOUT(savings_ps_metrics_and_api_agree, 60)
{
	if (t_sh(out, sizeof out, 1, "command -v curl") != 0)
		SKIP_TOOL("curl is not installed (mk/deps.sh test installs it)");
	setup();
	pid_t m = meshd_t_start();
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "call echo hi"), 0);
	usleep(1200 * 1000);
	struct savings s = ps_savings("echo");
	EXPECT_TRUE(s.savings > 0 && s.savings < 1);
	EXPECT_NEAR(s.always, 2 * s.window, 0.01);
	EXPECT_NEAR(s.savings, 1 - s.warm / s.always, 0.002);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "curl -sS --unix-socket " SOCK " http://x/metrics"), 0);
	double mw = meshd_t_sample(out, "mesh_window_seconds{program=\"echo\"}"),
	       ma = meshd_t_sample(out, "mesh_always_on_seconds_total{program=\"echo\"}"),
	       mwarm = meshd_t_sample(out, "mesh_warm_seconds_total{program=\"echo\"}"),
	       ms = meshd_t_sample(out, "mesh_savings_ratio{program=\"echo\"}");
	printf("metrics: window %.3f always %.3f warm %.3f savings %.3f\n", mw, ma, mwarm, ms);
	/* Read after ps: the same window a moment later, the same warm time
	 * (the worker was reaped), and the same definition. */
	EXPECT_DBL(mw, >=, s.window);
	EXPECT_DBL(mw, <, s.window + 2);
	EXPECT_NEAR(mwarm, s.warm, 0.001);
	EXPECT_NEAR(ms, 1 - mwarm / ma, 0.002);
	EXPECT_EQ(meshd_t_mesh(out, sizeof out, 1, "ps"), 0);
	EXPECT_CONTAINS(out, "savings 0.");
	EXPECT_CONTAINS(out, " s loaded since 20");
	EXPECT_EQ(meshd_t_stop(m), 0);
}

/* A damaged ledger is said and the window starts afresh (never a crash,
 * never a number read from garbage). */
TEST_TIMEOUT(savings_damaged_ledger_is_said_and_started_afresh, 60)
{
	setup();
	mkdir("logs", 0755);
	mkdir("logs/.savings", 0700);
	t_write_file("logs/.savings/echo", "mesh-savings 1\nsince 12\nwindow_ns 99999999999999\nalways_ns x\n");
	pid_t m = meshd_t_start();
	ASSERT_EQ(meshd_t_mesh(out, sizeof out, 1, "load echo"), 0);
	struct savings s = ps_savings("echo");
	EXPECT_DBL(s.window, <, 30);
	EXPECT_TRUE(s.since > 1000000000);
	EXPECT_EQ(meshd_t_stop(m), 0);
	char *err = t_read_file("meshd.err", NULL);
	EXPECT_TRUE(err && strstr(err, "logs/.savings/echo' is damaged: its window starts again now"));
	free(err);
	/* and the clean exit wrote a good one */
	char *text = t_read_file("logs/.savings/echo", NULL);
	EXPECT_TRUE(text && !strncmp(text, "mesh-savings 1\nsince ", 21) && strstr(text, "\nwarm_ns "));
	free(text);
}
