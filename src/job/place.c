#include "job/place.h"

uint64_t mesh_place_estimate(const struct mesh_place_node *node, uint64_t typical_ns)
{
	return node->samples ? node->mean_ns : typical_ns;
}

uint64_t mesh_place_remaining(const struct mesh_place_node *holder, uint64_t typical_ns, uint64_t elapsed_ns)
{
	uint64_t est = mesh_place_estimate(holder, typical_ns);
	return est > elapsed_ns ? est - elapsed_ns : elapsed_ns;
}

int mesh_place(const struct mesh_place_node *holder, uint64_t elapsed_ns, const struct mesh_place_node *cands,
	       size_t ncand, uint64_t typical_ns)
{
	uint64_t best = mesh_place_remaining(holder, typical_ns, elapsed_ns);
	int pick = -1;
	for (size_t i = 0; i < ncand; i++) {
		uint64_t e = mesh_place_estimate(&cands[i], typical_ns);
		if (e < best) {
			best = e;
			pick = (int)i;
		}
	}
	return pick;
}

size_t mesh_place_batch(const struct mesh_place_node *nodes, size_t n, size_t self, size_t k, uint64_t typical_ns)
{
	uint64_t fastest = UINT64_MAX, mine;
	if (self >= n || !nodes[self].samples || k <= 1)
		return k;
	mine = mesh_place_estimate(&nodes[self], typical_ns);
	for (size_t i = 0; i < n; i++) {
		uint64_t e = mesh_place_estimate(&nodes[i], typical_ns);
		if (e && e < fastest)
			fastest = e;
	}
	if (!mine || fastest == UINT64_MAX || fastest >= mine)
		return k;
	/* k * fastest / mine, rounded up, without overflow */
	long double b = (long double)k * (long double)fastest / (long double)mine;
	size_t r = (size_t)b;
	if ((long double)r < b)
		r++;
	return r < 1 ? 1 : r > k ? k : r;
}
