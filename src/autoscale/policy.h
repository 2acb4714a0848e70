/* The autoscale-to-zero policy: pure functions, no clock, no I/O.
 *
 * A worker (a model server holding GPU memory) should exist only while there
 * is work.  At each tick the caller observes the pool (how many workers are
 * warm or starting, how much demand, how long it has been idle) and asks the
 * policy for ONE action:
 *
 *   HOLD  (0)  nothing to do now
 *   SPAWN (1)  start `count` workers
 *   SERVE (2)  dispatch the demand to the warm workers now
 *   REAP  (3)  stop `count` workers (their GPU memory is freed)
 *
 * The numeric values are the `mesh autoscale` exit codes.
 *
 * The policy is one ordered table (mesh_as_rows): the first row whose
 * condition holds decides; when none holds the answer is HOLD.  Durations
 * are int64 in any one unit the caller picks (seconds for the CLI,
 * nanoseconds for `mesh serve`); the policy only compares them.
 *
 * Terms used by the rows:
 *   have = warm + starting
 *   need = clamp(ceil(demand / target_concurrency), min_workers, max_workers)
 *
 *   row  name            when                                                 action  count
 *   R1   over-max        have > max                                            REAP    have - max
 *   R2   under-min       have < min                                            SPAWN   min - have
 *   R3   from-zero       demand > 0 and have == 0                              SPAWN   need (no damping)
 *   R4   scale-up        demand > 0 and have < need and over >= upscale_delay  SPAWN   need - have
 *   R5   surplus         have > max(need, 1) and surplus >= idle_ttl           REAP    have - max(need, 1)
 *   R6   serve           demand > 0 and warm > 0                               SERVE   0
 *   R7   wait-start      demand > 0 and warm == 0                              HOLD    0
 *   R8   to-zero         demand == 0 and min == 0 and have > 0
 *                        and idle >= idle_ttl and idle >= linger               REAP    have
 *   (none)               otherwise                                             HOLD    0
 *
 * The observed clocks: `idle` is the time since demand was last non-zero
 * (0 while there is demand); `surplus` the time the pool has had more
 * workers than max(need, 1); `over` the time demand has exceeded what `have`
 * workers can take.  The caller measures them; the policy never reads a clock.
 *
 * Guarantees, tested over a grid of inputs: a REAP never leaves fewer than
 * max(need, min) workers while there is demand, never takes the last
 * worker before both idle_ttl and linger have passed, never goes below
 * min; a SPAWN never goes above max and never happens without demand unless
 * the pool is below min; with demand and no worker the answer is SPAWN
 * whatever the damping.
 *
 * The seed's four-argument decision is this table with min 0, max 1,
 * target_concurrency 1, upscale_delay 0, linger = idle_ttl = ttl, warm and
 * demand as 0/1 (see mesh_as_decide). */
#ifndef MESH_AUTOSCALE_POLICY_H
#define MESH_AUTOSCALE_POLICY_H

#include <stddef.h>
#include <stdint.h>

enum mesh_as_action { MESH_AS_HOLD = 0, MESH_AS_SPAWN = 1, MESH_AS_SERVE = 2, MESH_AS_REAP = 3 };

/* "HOLD", "SPAWN", "SERVE", "REAP", or "?" for anything else. */
const char *mesh_as_action_name(int action);

/* The seed's decision: warm and demand are booleans (non-zero = true),
 * idle and ttl in the same unit (seconds in the CLI).
 *   demand and !warm      -> SPAWN
 *   demand and warm       -> SERVE
 *   !demand and warm and idle >= ttl -> REAP
 *   otherwise             -> HOLD
 * Returns the action (never fails). */
int mesh_as_decide(int warm, int demand, int64_t idle, int64_t ttl);

/* VRAM-seconds saved against an always-on worker, in permil:
 * (window - warm) * 1000 / window, rounded down, clamped to [0, 1000];
 * 0 when window <= 0.  No overflow for any int64 inputs. */
int mesh_as_savings_permil(int64_t warm, int64_t window);

struct mesh_as_config {
	uint32_t min_workers;        /* kept even when idle; 0 allows scale to zero */
	uint32_t max_workers;        /* >= 1 and >= min_workers */
	uint32_t target_concurrency; /* requests one worker takes at once; >= 1 */
	int64_t idle_ttl;            /* a surplus worker goes after this much surplus time; >= 0 */
	int64_t linger;              /* the last worker goes only after this much idle time too; >= 0 */
	int64_t upscale_delay;       /* damping of scale-up from >= 1 worker; >= 0 (never from zero) */
};
/* One worker, no floor, one request at a time, ttl 60 (seconds). */
#define MESH_AS_CONFIG_INIT {0, 1, 1, 60, 60, 0}

struct mesh_as_obs {
	uint32_t warm;     /* workers ready to serve */
	uint32_t starting; /* spawned, not yet warm */
	uint64_t demand;   /* requests in flight or queued */
	int64_t idle;      /* since demand was last > 0; 0 while demand > 0 */
	int64_t surplus;   /* since the pool last had no more than max(need, 1) workers */
	int64_t over;      /* since demand last fitted in `have` workers */
};

struct mesh_as_plan {
	int action;        /* enum mesh_as_action */
	uint32_t count;    /* workers to spawn or reap; 0 for HOLD and SERVE */
	uint32_t need;     /* the desired worker count from demand, clamped */
	uint32_t after;    /* have after the action */
	int row;           /* index into mesh_as_rows() of the row that decided; -1 = none (HOLD) */
};

/* 0, or MESH_E_RANGE when the config breaks a rule stated above. */
int mesh_as_config_check(const struct mesh_as_config *c);
/* ceil(demand / target_concurrency) clamped to [min, max]; c must be valid. */
uint32_t mesh_as_need(const struct mesh_as_config *c, uint64_t demand);
/* Evaluates the table.  Returns 0 and fills *out, or MESH_E_RANGE for an
 * invalid config or an observation with a negative clock (*out untouched). */
int mesh_as_plan(const struct mesh_as_config *c, const struct mesh_as_obs *o, struct mesh_as_plan *out);

/* The table, for printing and for tests. */
struct mesh_as_row {
	const char *name;   /* "from-zero" */
	const char *when;   /* the condition, in the words of the table above */
	int action;
	const char *count;  /* "need - have" */
};
/* The rows in evaluation order; *n receives their number. */
const struct mesh_as_row *mesh_as_rows(size_t *n);

#endif
