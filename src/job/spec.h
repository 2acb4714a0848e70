/* spec: the speculation rule both stores apply (docs/job.md, Spark's): a
 * histogram of completed durations, its quantiles, and the straggler
 * threshold.  Pure functions; placement of a copy is place.h's. */
#ifndef MESH_JOB_SPEC_H
#define MESH_JOB_SPEC_H

#include "job/job.h"

#include <stdint.h>

/* Durations in microseconds, 8 sub-buckets per power of 2. */
#define MESH__SPEC_BUCKETS 256

/* A job's speculation options with the defaults filled in (job.h:
 * 1.5, 0.75, 100 ms, 1). */
struct mesh__spec_rule {
	double mult, q;
	uint64_t min_ns;
	uint32_t copies;
};
void mesh__spec_rule_of(struct mesh__spec_rule *r, const struct mesh_job_opts *o);

/* The bucket of a duration of us microseconds. */
unsigned mesh__spec_bucket(uint64_t us);
/* The q-quantile of hist (MESH__SPEC_BUCKETS counts, total hist_n) in ns;
 * 0 when it is empty. */
uint64_t mesh__spec_quantile_ns(const uint64_t *hist, uint64_t hist_n, double q);
/* The straggler threshold of a job of n chunks, done of them DONE, whose
 * completed durations are hist: 0 (no speculation yet) until r->q of the
 * chunks are DONE and a duration is known; then max(r->min_ns, r->mult x
 * the r->q quantile). */
uint64_t mesh__spec_threshold_ns(const struct mesh__spec_rule *r, const uint64_t *hist, uint64_t hist_n,
				 uint64_t n, uint64_t done);

#endif
