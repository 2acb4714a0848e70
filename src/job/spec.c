/* The speculation rule of both stores (spec.h). */
#include "job/spec.h"

#include "base/clock.h"

void mesh__spec_rule_of(struct mesh__spec_rule *r, const struct mesh_job_opts *o)
{
	r->mult = o->spec_multiplier > 0 ? o->spec_multiplier : 1.5;
	r->q = o->spec_quantile > 0 && o->spec_quantile <= 1 ? o->spec_quantile : 0.75;
	r->min_ns = o->spec_min_ns ? o->spec_min_ns : 100 * MESH_NS_PER_MS;
	r->copies = o->spec_max_copies ? o->spec_max_copies : 1;
}

unsigned mesh__spec_bucket(uint64_t us)
{
	unsigned e;
	if (us < 8)
		return (unsigned)us;
	e = 63u - (unsigned)__builtin_clzll(us);
	unsigned b = 8 + (e - 3) * 8 + (unsigned)((us >> (e - 3)) & 7);
	return b < MESH__SPEC_BUCKETS ? b : MESH__SPEC_BUCKETS - 1;
}

/* A bucket's value: its middle, in microseconds. */
static uint64_t bucket_us(unsigned b)
{
	if (b < 8)
		return b;
	unsigned e = (b - 8) / 8 + 3, sub = (b - 8) % 8;
	/* the middle of the bucket */
	return ((8ull + sub) << (e - 3)) + ((1ull << (e - 3)) >> 1);
}

uint64_t mesh__spec_quantile_ns(const uint64_t *hist, uint64_t hist_n, double q)
{
	uint64_t want, acc = 0;
	if (!hist_n)
		return 0;
	want = (uint64_t)(q * (double)hist_n + 0.999999);
	if (want < 1)
		want = 1;
	for (unsigned b = 0; b < MESH__SPEC_BUCKETS; b++) {
		acc += hist[b];
		if (acc >= want)
			return bucket_us(b) * 1000;
	}
	return bucket_us(MESH__SPEC_BUCKETS - 1) * 1000;
}

uint64_t mesh__spec_threshold_ns(const struct mesh__spec_rule *r, const uint64_t *hist, uint64_t hist_n,
				 uint64_t n, uint64_t done)
{
	uint64_t need = (uint64_t)(r->q * (double)n + 0.999999), thr;
	if (!hist_n || done < need)
		return 0;
	thr = (uint64_t)(r->mult * (double)mesh__spec_quantile_ns(hist, hist_n, r->q));
	return thr > r->min_ns ? thr : r->min_ns;
}
