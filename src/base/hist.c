#include "base/hist.h"

void mesh_hist_observe(struct mesh_hist *h, const struct mesh_hist_bounds *bounds, uint64_t ns)
{
	size_t i;
	for (i = 0; i < bounds->n && ns > bounds->b[i].ns; i++)
		;
	h->bucket[i]++; /* i == n: +Inf */
	h->count++;
	h->sum_ns += ns;
}
