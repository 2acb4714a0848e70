#include "autoscale/policy.h"
#include "base/err.h"
#include "runner/t.h"

#include <stdio.h>

/* The seed's six cases and three negative controls, row by row. */
TEST(decide_seed_table)
{
	static const struct {
		const char *what;
		int warm, demand;
		int64_t idle, ttl;
		int want;
	} rows[] = {
		{"T1 cold+demand -> SPAWN", 0, 1, 0, 60, MESH_AS_SPAWN},
		{"T2 warm+demand -> SERVE", 1, 1, 0, 60, MESH_AS_SERVE},
		{"T3 warm+idle>ttl -> REAP", 1, 0, 90, 60, MESH_AS_REAP},
		{"T4 warm+idle<ttl -> HOLD", 1, 0, 30, 60, MESH_AS_HOLD},
		{"T5 cold+no demand -> HOLD", 0, 0, 999, 60, MESH_AS_HOLD},
		{"T6 demand beats idle -> SPAWN", 0, 1, 999, 60, MESH_AS_SPAWN},
		{"boundary idle == ttl -> REAP", 1, 0, 60, 60, MESH_AS_REAP},
		{"boundary idle == ttl - 1 -> HOLD", 1, 0, 59, 60, MESH_AS_HOLD},
		{"ttl 0 reaps at once", 1, 0, 0, 0, MESH_AS_REAP},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		int got = mesh_as_decide(rows[i].warm, rows[i].demand, rows[i].idle, rows[i].ttl);
		if (got != rows[i].want)
			printf("row '%s': got %s\n", rows[i].what, mesh_as_action_name(got));
		EXPECT_EQ(got, rows[i].want);
	}
}

TEST(decide_negative_controls)
{
	/* neg1: warm and busy never reaps, however long idle looks. */
	EXPECT_NE(mesh_as_decide(1, 1, 999, 60), MESH_AS_REAP);
	/* neg2: warm and fresh never reaps. */
	EXPECT_NE(mesh_as_decide(1, 0, 30, 60), MESH_AS_REAP);
	/* neg3: already warm never spawns. */
	EXPECT_NE(mesh_as_decide(1, 1, 0, 60), MESH_AS_SPAWN);
	/* The same over a grid: no REAP while busy or fresh, no SPAWN while warm. */
	for (int64_t idle = 0; idle < 200; idle += 7)
		for (int64_t ttl = 0; ttl < 200; ttl += 11) {
			EXPECT_NE(mesh_as_decide(1, 1, idle, ttl), MESH_AS_REAP);
			EXPECT_NE(mesh_as_decide(0, 1, idle, ttl), MESH_AS_REAP);
			if (idle < ttl)
				EXPECT_NE(mesh_as_decide(1, 0, idle, ttl), MESH_AS_REAP);
			EXPECT_NE(mesh_as_decide(1, 0, idle, ttl), MESH_AS_SPAWN);
			EXPECT_NE(mesh_as_decide(1, 1, idle, ttl), MESH_AS_SPAWN);
		}
}

/* A plain restatement of the seed's rules, to compare decide() with on
 * inputs the CLI never passes (negative, huge). */
static int seed_model(int warm, int demand, int64_t idle, int64_t ttl)
{
	if (demand)
		return warm ? MESH_AS_SERVE : MESH_AS_SPAWN;
	if (warm && idle >= ttl)
		return MESH_AS_REAP;
	return MESH_AS_HOLD;
}

TEST(decide_matches_seed_on_all_int64)
{
	static const int64_t v[] = {INT64_MIN, INT64_MIN + 1, -1000, -1, 0, 1, 59, 60, 61, 1000, INT64_MAX - 1,
				    INT64_MAX};
	int n = 0;
	for (int w = 0; w < 2; w++)
		for (int d = 0; d < 2; d++)
			for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
				for (size_t j = 0; j < sizeof v / sizeof v[0]; j++) {
					EXPECT_EQ(mesh_as_decide(w, d, v[i], v[j]), seed_model(w, d, v[i], v[j]));
					n++;
				}
	EXPECT_EQ(n, 576);
}

TEST(savings_permil)
{
	static const struct {
		int64_t warm, window;
		int want;
	} rows[] = {
		{30, 100, 700},	      /* the seed's T7 */
		{0, 100, 1000},	      {100, 100, 0},	      {150, 100, 0}, /* warm longer than the window: clamp */
		{1, 3, 666},	      /* rounded down */
		{5, 0, 0},	      {5, -5, 0},	      /* no window */
		{-50, 100, 1000},     /* clamp the other way */
		{INT64_MIN, INT64_MAX, 1000}, {0, INT64_MAX, 1000}, {INT64_MAX / 2, INT64_MAX, 500},
		{INT64_MAX, INT64_MAX, 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
		EXPECT_EQ(mesh_as_savings_permil(rows[i].warm, rows[i].window), rows[i].want);
}

static int row_index(const char *name)
{
	size_t n;
	const struct mesh_as_row *rows = mesh_as_rows(&n);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(rows[i].name, name))
			return (int)i;
	return -2;
}

TEST(plan_table_row_by_row)
{
	/* max 4 workers, 2 requests each, ttl 60, linger 120, scale-up damping 10. */
	const struct mesh_as_config base = {0, 4, 2, 60, 120, 10};
	static const struct {
		const char *what;
		uint32_t min;
		uint32_t warm, starting;
		uint64_t demand;
		int64_t idle, surplus, over;
		const char *row; /* NULL: no row (HOLD) */
		int action;
		uint32_t count, need;
	} rows[] = {
		{"over-max fires", 0, 6, 0, 0, 0, 0, 0, "over-max", MESH_AS_REAP, 2, 0},
		{"over-max counts starting", 0, 3, 2, 9, 0, 0, 0, "over-max", MESH_AS_REAP, 1, 4},
		{"under-min fires without demand", 2, 0, 1, 0, 500, 500, 0, "under-min", MESH_AS_SPAWN, 1, 2},
		{"from-zero spawns need at once", 0, 0, 0, 5, 0, 0, 0, "from-zero", MESH_AS_SPAWN, 3, 3},
		{"from-zero ignores damping", 0, 0, 0, 1, 0, 0, 0, "from-zero", MESH_AS_SPAWN, 1, 1},
		{"from-zero capped at max", 0, 0, 0, 100, 0, 0, 0, "from-zero", MESH_AS_SPAWN, 4, 4},
		{"scale-up after the delay", 0, 1, 0, 5, 0, 0, 10, "scale-up", MESH_AS_SPAWN, 2, 3},
		{"scale-up damped: serve meanwhile", 0, 1, 0, 5, 0, 0, 9, "serve", MESH_AS_SERVE, 0, 3},
		{"scale-up counts starting workers", 0, 1, 1, 5, 0, 0, 10, "scale-up", MESH_AS_SPAWN, 1, 3},
		{"surplus reaped past ttl", 0, 3, 0, 1, 0, 60, 0, "surplus", MESH_AS_REAP, 2, 1},
		{"surplus kept before ttl", 0, 3, 0, 1, 0, 59, 0, "serve", MESH_AS_SERVE, 0, 1},
		{"surplus without demand keeps one", 0, 3, 0, 0, 60, 60, 0, "surplus", MESH_AS_REAP, 2, 0},
		{"surplus respects min", 2, 4, 0, 0, 500, 500, 0, "surplus", MESH_AS_REAP, 2, 2},
		{"serve", 0, 2, 0, 3, 0, 0, 0, "serve", MESH_AS_SERVE, 0, 2},
		{"wait-start: no second spawn", 0, 0, 1, 2, 0, 0, 500, "wait-start", MESH_AS_HOLD, 0, 1},
		{"to-zero after ttl and linger", 0, 1, 0, 0, 120, 120, 0, "to-zero", MESH_AS_REAP, 1, 0},
		{"to-zero: linger not passed", 0, 1, 0, 0, 119, 119, 0, NULL, MESH_AS_HOLD, 0, 0},
		{"to-zero: stops a starting worker", 0, 0, 1, 0, 120, 120, 0, "to-zero", MESH_AS_REAP, 1, 0},
		{"to-zero: min keeps one", 1, 1, 0, 0, 500, 500, 0, NULL, MESH_AS_HOLD, 0, 1},
		{"none: at zero, no demand", 0, 0, 0, 0, 500, 500, 0, NULL, MESH_AS_HOLD, 0, 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_as_config c = base;
		struct mesh_as_obs o = {rows[i].warm, rows[i].starting, rows[i].demand,
					rows[i].idle, rows[i].surplus,	rows[i].over};
		struct mesh_as_plan p;
		c.min_workers = rows[i].min;
		ASSERT_EQ(mesh_as_plan(&c, &o, &p), 0);
		int want_row = rows[i].row ? row_index(rows[i].row) : -1;
		if (p.row != want_row || p.action != rows[i].action || p.count != rows[i].count ||
		    p.need != rows[i].need)
			printf("case '%s': row %d %s count %u need %u\n", rows[i].what, p.row,
			       mesh_as_action_name(p.action), p.count, p.need);
		EXPECT_EQ(p.row, want_row);
		EXPECT_EQ(p.action, rows[i].action);
		EXPECT_EQ(p.count, rows[i].count);
		EXPECT_EQ(p.need, rows[i].need);
	}
}

TEST(plan_every_row_is_reachable_and_printable)
{
	size_t n;
	const struct mesh_as_row *rows = mesh_as_rows(&n);
	ASSERT_EQ(n, 8);
	for (size_t i = 0; i < n; i++) {
		EXPECT_TRUE(rows[i].name && *rows[i].name);
		EXPECT_TRUE(rows[i].when && *rows[i].when);
		EXPECT_TRUE(rows[i].count && *rows[i].count);
		EXPECT_STRNE(mesh_as_action_name(rows[i].action), "?");
	}
	EXPECT_STREQ(mesh_as_action_name(7), "?");
}

TEST(plan_config_checks)
{
	struct mesh_as_obs o = {0};
	struct mesh_as_plan p = {0};
	const struct mesh_as_config bad[] = {
		{0, 0, 1, 1, 1, 0}, /* max 0 */
		{3, 2, 1, 1, 1, 0}, /* min > max */
		{0, 2, 0, 1, 1, 0}, /* concurrency 0 */
		{0, 2, 1, -1, 1, 0}, {0, 2, 1, 1, -1, 0}, {0, 2, 1, 1, 1, -1},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		EXPECT_EQ(mesh_as_config_check(&bad[i]), MESH_E_RANGE);
		EXPECT_EQ(mesh_as_plan(&bad[i], &o, &p), MESH_E_RANGE);
	}
	struct mesh_as_config c = MESH_AS_CONFIG_INIT;
	EXPECT_EQ(mesh_as_config_check(&c), 0);
	o.idle = -1;
	EXPECT_EQ(mesh_as_plan(&c, &o, &p), MESH_E_RANGE);
	EXPECT_EQ(mesh_as_need(&c, 0), 0);
	c.max_workers = 10;
	c.target_concurrency = 4;
	EXPECT_EQ(mesh_as_need(&c, 4), 1);
	EXPECT_EQ(mesh_as_need(&c, 5), 2);
	EXPECT_EQ(mesh_as_need(&c, UINT64_MAX), 10);
	c.min_workers = 3;
	EXPECT_EQ(mesh_as_need(&c, 1), 3);
}

/* The guarantees stated in policy.h, checked over a grid of pools, demands,
 * clocks and configs. */
TEST(plan_invariants_over_a_grid)
{
	static const int64_t clocks[] = {0, 9, 10, 59, 60, 119, 120, 1000};
	const size_t nc = sizeof clocks / sizeof clocks[0];
	long checked = 0;
	for (uint32_t min = 0; min <= 2; min++)
		for (uint32_t max = 1; max <= 4; max++)
			for (uint32_t tc = 1; tc <= 3; tc++) {
				if (min > max)
					continue;
				struct mesh_as_config c = {min, max, tc, 60, 120, 10};
				for (uint32_t warm = 0; warm <= 5; warm++)
					for (uint32_t st = 0; st <= 2; st++)
						for (uint64_t demand = 0; demand <= 9; demand++)
							for (size_t a = 0; a < nc; a++)
								for (size_t b = 0; b < nc; b++)
									for (size_t d = 0; d < nc; d++) {
		struct mesh_as_obs o = {warm, st, demand, demand ? 0 : clocks[a], clocks[b], clocks[d]};
		struct mesh_as_plan p;
		uint32_t have = warm + st, need = mesh_as_need(&c, demand);
		ASSERT_EQ(mesh_as_plan(&c, &o, &p), 0);
		checked++;
		if (p.action == MESH_AS_SPAWN) {
			ASSERT_GT(p.count, 0);
			ASSERT_LE(p.after, max);
			ASSERT_TRUE(demand > 0 || have < min);
		} else if (p.action == MESH_AS_REAP) {
			ASSERT_GT(p.count, 0);
			ASSERT_LE(p.count, have);
			ASSERT_GE(p.after, min);
			if (have <= max && demand > 0)
				ASSERT_GE(p.after, need > min ? need : min);
			if (p.after == 0) {
				ASSERT_EQ(demand, 0);
				ASSERT_GE(o.idle, c.idle_ttl);
				ASSERT_GE(o.idle, c.linger);
			}
		} else {
			ASSERT_EQ(p.count, 0);
			ASSERT_EQ(p.after, have);
		}
		if (demand > 0 && have == 0)
			ASSERT_EQ(p.action, MESH_AS_SPAWN);
		if (demand > 0 && warm > 0 && have == need)
			ASSERT_EQ(p.action, MESH_AS_SERVE);
		if (demand == 0 && have == 0 && min == 0)
			ASSERT_EQ(p.action, MESH_AS_HOLD);
	}
			}
	printf("checked %ld plans\n", checked);
	EXPECT_GT(checked, 1000000);
}
