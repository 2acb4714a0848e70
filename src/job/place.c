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
