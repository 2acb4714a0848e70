#include "job/place.h"
#include "runner/t.h"

#define MS 1000000ull

TEST(place_table)
{
	static const struct {
		const char *why;
		struct mesh_place_node holder;
		uint64_t elapsed;
		struct mesh_place_node cands[3];
		size_t ncand;
		uint64_t typical;
		int want;
	} rows[] = {
		{"no idle node", {100 * MS, 5}, 50 * MS, {{0, 0}}, 0, 10 * MS, -1},
		{"slow holder, fast idle node: copy", {100 * MS, 5}, 30 * MS, {{10 * MS, 5}}, 1, 10 * MS, 0},
		{"fast holder just over its mean, slow idle node: no copy", {10 * MS, 5}, 20 * MS, {{100 * MS, 5}}, 1,
		 10 * MS, -1},
		{"holder nearly done: no copy", {100 * MS, 5}, 95 * MS, {{10 * MS, 5}}, 1, 10 * MS, -1},
		{"holder overran its mean long ago: copy to an equal node", {10 * MS, 5}, 50 * MS, {{10 * MS, 5}}, 1,
		 10 * MS, 0},
		{"the fastest of three idle nodes", {100 * MS, 5}, 10 * MS, {{30 * MS, 2}, {5 * MS, 9}, {20 * MS, 1}}, 3,
		 10 * MS, 1},
		{"tie goes to the lower index", {100 * MS, 5}, 10 * MS, {{7 * MS, 2}, {7 * MS, 9}}, 2, 10 * MS, 0},
		{"unknown idle node uses the job's typical time", {100 * MS, 5}, 10 * MS, {{0, 0}}, 1, 20 * MS, 0},
		{"unknown holder uses the typical time: within it, no copy", {0, 0}, 5 * MS, {{20 * MS, 3}}, 1, 20 * MS,
		 -1},
		{"unknown idle node slower than the remaining time", {100 * MS, 5}, 80 * MS, {{0, 0}}, 1, 50 * MS, -1},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		int got = mesh_place(&rows[i].holder, rows[i].elapsed, rows[i].cands, rows[i].ncand, rows[i].typical);
		if (got != rows[i].want)
			t__fail(__FILE__, __LINE__, "row %zu (%s): got %d, want %d", i, rows[i].why, got, rows[i].want);
	}
}

TEST(place_estimates)
{
	struct mesh_place_node known = {40 * MS, 3}, unknown = {123, 0};
	EXPECT_UEQ(mesh_place_estimate(&known, 5 * MS), 40 * MS);
	EXPECT_UEQ(mesh_place_estimate(&unknown, 5 * MS), 5 * MS);
	EXPECT_UEQ(mesh_place_remaining(&known, 0, 10 * MS), 30 * MS);
	EXPECT_UEQ(mesh_place_remaining(&known, 0, 40 * MS), 40 * MS);
	EXPECT_UEQ(mesh_place_remaining(&known, 0, 70 * MS), 70 * MS);
}

TEST(place_batch_table)
{
	static const struct {
		const char *why;
		struct mesh_place_node nodes[3];
		size_t n, self, k;
		uint64_t typical;
		size_t want;
	} rows[] = {
		{"alone", {{10 * MS, 5}}, 1, 0, 8, 10 * MS, 8},
		{"no measurement of self yet", {{1 * MS, 5}, {0, 0}}, 2, 1, 8, 50 * MS, 8},
		{"the fastest takes k", {{1 * MS, 5}, {10 * MS, 5}}, 2, 0, 8, 5 * MS, 8},
		{"ten times slower: a tenth, rounded up", {{1 * MS, 5}, {10 * MS, 5}}, 2, 1, 8, 5 * MS, 1},
		{"twice slower: half", {{5 * MS, 5}, {10 * MS, 5}}, 2, 1, 8, 5 * MS, 4},
		{"equal speeds: k", {{5 * MS, 5}, {5 * MS, 9}, {5 * MS, 1}}, 3, 2, 16, 5 * MS, 16},
		{"an unknown node counts at the typical time", {{0, 0}, {20 * MS, 3}}, 2, 1, 10, 5 * MS, 3},
		{"k = 1 stays 1", {{1 * MS, 5}, {100 * MS, 5}}, 2, 1, 1, 5 * MS, 1},
		{"self out of range: k", {{1 * MS, 5}}, 1, 4, 6, 5 * MS, 6},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		size_t got = mesh_place_batch(rows[i].nodes, rows[i].n, rows[i].self, rows[i].k, rows[i].typical);
		if (got != rows[i].want)
			t__fail(__FILE__, __LINE__, "row %zu (%s): got %zu, want %zu", i, rows[i].why, got, rows[i].want);
	}
}
