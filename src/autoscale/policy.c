#include "autoscale/policy.h"

#include "base/err.h"

/* What a row's condition and count see: the observation plus the derived terms. */
struct view {
	const struct mesh_as_config *c;
	const struct mesh_as_obs *o;
	uint64_t have;
	uint64_t need;
	uint64_t keep; /* max(need, 1): the pool size a surplus reap shrinks to */
};

struct rule {
	int (*when)(const struct view *v);
	uint64_t (*count)(const struct view *v);
};

static int w_over_max(const struct view *v) { return v->have > v->c->max_workers; }
static uint64_t n_over_max(const struct view *v) { return v->have - v->c->max_workers; }

static int w_under_min(const struct view *v) { return v->have < v->c->min_workers; }
static uint64_t n_under_min(const struct view *v) { return v->c->min_workers - v->have; }

static int w_from_zero(const struct view *v) { return v->o->demand > 0 && v->have == 0; }
static uint64_t n_need(const struct view *v) { return v->need; }

static int w_scale_up(const struct view *v)
{
	return v->o->demand > 0 && v->have < v->need && v->o->over >= v->c->upscale_delay;
}
static uint64_t n_scale_up(const struct view *v) { return v->need - v->have; }

static int w_surplus(const struct view *v) { return v->have > v->keep && v->o->surplus >= v->c->idle_ttl; }
static uint64_t n_surplus(const struct view *v) { return v->have - v->keep; }

static int w_serve(const struct view *v) { return v->o->demand > 0 && v->o->warm > 0; }
static int w_wait_start(const struct view *v) { return v->o->demand > 0 && v->o->warm == 0; }
static uint64_t n_zero(const struct view *v) { return 0; }

static int w_to_zero(const struct view *v)
{
	return v->o->demand == 0 && v->c->min_workers == 0 && v->have > 0 && v->o->idle >= v->c->idle_ttl &&
	       v->o->idle >= v->c->linger;
}
static uint64_t n_have(const struct view *v) { return v->have; }

/* The table: descriptions (public, printed by `mesh autoscale table`) and,
 * at the same index, the rule that implements each row. */
static const struct mesh_as_row rows[] = {
	{"over-max", "have > max", MESH_AS_REAP, "have - max"},
	{"under-min", "have < min", MESH_AS_SPAWN, "min - have"},
	{"from-zero", "demand > 0 and have == 0", MESH_AS_SPAWN, "need (no damping)"},
	{"scale-up", "demand > 0 and have < need and over >= upscale_delay", MESH_AS_SPAWN, "need - have"},
	{"surplus", "have > max(need, 1) and surplus >= idle_ttl", MESH_AS_REAP, "have - max(need, 1)"},
	{"serve", "demand > 0 and warm > 0", MESH_AS_SERVE, "0"},
	{"wait-start", "demand > 0 and warm == 0", MESH_AS_HOLD, "0"},
	{"to-zero", "demand == 0 and min == 0 and have > 0 and idle >= idle_ttl and idle >= linger", MESH_AS_REAP,
	 "have"},
};
static const struct rule rules[] = {
	{w_over_max, n_over_max}, {w_under_min, n_under_min}, {w_from_zero, n_need},	{w_scale_up, n_scale_up},
	{w_surplus, n_surplus},	  {w_serve, n_zero},	      {w_wait_start, n_zero}, {w_to_zero, n_have},
};
#define NROWS (sizeof rows / sizeof rows[0])
_Static_assert(sizeof rows / sizeof rows[0] == sizeof rules / sizeof rules[0], "one rule per row");

const struct mesh_as_row *mesh_as_rows(size_t *n)
{
	*n = NROWS;
	return rows;
}

const char *mesh_as_action_name(int action)
{
	switch (action) {
	case MESH_AS_HOLD:
		return "HOLD";
	case MESH_AS_SPAWN:
		return "SPAWN";
	case MESH_AS_SERVE:
		return "SERVE";
	case MESH_AS_REAP:
		return "REAP";
	}
	return "?";
}

static uint64_t need_of(const struct mesh_as_config *c, uint64_t demand)
{
	uint64_t tc = c->target_concurrency ? c->target_concurrency : 1;
	uint64_t n = demand / tc + (demand % tc != 0);
	if (n < c->min_workers)
		n = c->min_workers;
	if (n > c->max_workers)
		n = c->max_workers;
	return n;
}

uint32_t mesh_as_need(const struct mesh_as_config *c, uint64_t demand)
{
	return (uint32_t)need_of(c, demand);
}

/* The table itself, without range checks (mesh_as_decide relies on that to
 * keep the seed's answers for every int64 input). */
static void eval(const struct mesh_as_config *c, const struct mesh_as_obs *o, struct mesh_as_plan *out)
{
	struct view v = {c, o, (uint64_t)o->warm + o->starting, need_of(c, o->demand), 0};
	v.keep = v.need > 1 ? v.need : 1;
	out->action = MESH_AS_HOLD;
	out->count = 0;
	out->row = -1;
	for (size_t i = 0; i < NROWS; i++) {
		if (!rules[i].when(&v))
			continue;
		out->action = rows[i].action;
		out->count = (uint32_t)rules[i].count(&v);
		out->row = (int)i;
		break;
	}
	out->need = (uint32_t)v.need;
	if (out->action == MESH_AS_SPAWN)
		out->after = (uint32_t)(v.have + out->count);
	else if (out->action == MESH_AS_REAP)
		out->after = (uint32_t)(v.have - out->count);
	else
		out->after = (uint32_t)v.have;
}

int mesh_as_config_check(const struct mesh_as_config *c)
{
	if (c->max_workers < 1 || c->min_workers > c->max_workers || c->target_concurrency < 1 || c->idle_ttl < 0 ||
	    c->linger < 0 || c->upscale_delay < 0)
		return MESH_E_RANGE;
	return 0;
}

int mesh_as_plan(const struct mesh_as_config *c, const struct mesh_as_obs *o, struct mesh_as_plan *out)
{
	if (mesh_as_config_check(c) || o->idle < 0 || o->surplus < 0 || o->over < 0 ||
	    (uint64_t)o->warm + o->starting > UINT32_MAX)
		return MESH_E_RANGE;
	eval(c, o, out);
	return 0;
}

int mesh_as_decide(int warm, int demand, int64_t idle, int64_t ttl)
{
	struct mesh_as_config c = {0, 1, 1, ttl, ttl, 0};
	struct mesh_as_obs o = {warm != 0, 0, demand != 0, idle, idle, 0};
	struct mesh_as_plan p;
	eval(&c, &o, &p);
	return p.action;
}

int mesh_as_savings_permil(int64_t warm, int64_t window)
{
	if (window <= 0)
		return 0;
	__int128 off = (__int128)window - warm;
	if (off < 0)
		return 0;
	__int128 permil = off * 1000 / window;
	return permil > 1000 ? 1000 : (int)permil;
}
