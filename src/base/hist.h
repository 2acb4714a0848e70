/* A histogram of durations over fixed bucket bounds (Prometheus'
 * histogram, kept as counts).  The bounds are the owner's table: the ns
 * each bucket ends at and that bound as Prometheus clients print it (`le`).
 * bucket[i] counts observations <= bound i and > bound i-1 (not
 * cumulative); bucket[n] (n bounds) is +Inf. */
#ifndef MESH_BASE_HIST_H
#define MESH_BASE_HIST_H

#include <stddef.h>
#include <stdint.h>

#define MESH_HIST_BUCKETS 20 /* at most 19 bounds, and +Inf */

struct mesh_hist_bound {
	uint64_t ns;
	const char *le;
};
struct mesh_hist_bounds {
	const struct mesh_hist_bound *b;
	size_t n; /* < MESH_HIST_BUCKETS */
};

struct mesh_hist {
	uint64_t bucket[MESH_HIST_BUCKETS];
	uint64_t count;
	uint64_t sum_ns;
};

/* Counts one observation of ns nanoseconds.  Not locked: the caller's. */
void mesh_hist_observe(struct mesh_hist *h, const struct mesh_hist_bounds *bounds, uint64_t ns);

#endif
