/* The worker lifecycle table (host.h): every cell written out, its names,
 * and its printout.  The dispatcher that runs it is in host.c. */
#include "host/host.h"

#include "base/buf.h"

/* The table.  Rows are states, columns events; every cell is written out.
 * STARTING to HALTING are a native worker's rows, PROBING and WARM an HTTP
 * program's; an event of the other kind's (a `start` of a native worker,
 * a channel's message in an HTTP program's states) never comes, and its
 * cell does nothing (a request's is refused). */
#define T(a, n) {MESH_A_##a, MESH_IS_##n}
const struct mesh_transition mesh_lifecycle[MESH_IS__N][MESH_EV__N] = {
	[MESH_IS_DOWN] = {
		[MESH_EV_WARM] = T(SPAWN, STARTING),         [MESH_EV_LAUNCH] = T(SPAWN, STARTING),
		[MESH_EV_HALT] = T(NOP, DOWN),               [MESH_EV_EXIT] = T(NOP, DOWN),
		[MESH_EV_START] = T(SPAWN, PROBING),         [MESH_EV_READY] = T(NOP, DOWN),
		[MESH_EV_REJECTED] = T(NOP, DOWN),           [MESH_EV_ONLINE] = T(NOP, DOWN),
		[MESH_EV_STALE] = T(NOP, DOWN),              [MESH_EV_HALTED] = T(NOP, DOWN),
		[MESH_EV_REFUSED] = T(NOP, DOWN),            [MESH_EV_BROKEN] = T(NOP, DOWN),
		[MESH_EV_CLOSED] = T(NOP, DOWN),             [MESH_EV_TIMEOUT] = T(NOP, DOWN),
		[MESH_EV_DIED] = T(NOP, DOWN),               [MESH_EV_UNSTARTED] = T(NOP, DOWN),
		[MESH_EV_PROBE] = T(NOP, DOWN),              [MESH_EV_HUNG] = T(NOP, DOWN),
	},
	[MESH_IS_STARTING] = {
		[MESH_EV_WARM] = T(NOP, STARTING),           [MESH_EV_LAUNCH] = T(PEND, STARTING),
		[MESH_EV_HALT] = T(UNPEND, STARTING),        [MESH_EV_EXIT] = T(STOP, STOPPING_EXIT),
		[MESH_EV_START] = T(DENY, STARTING),         [MESH_EV_READY] = T(READY, IDLE),
		[MESH_EV_REJECTED] = T(FAIL, STOPPING_KILL), [MESH_EV_ONLINE] = T(FAIL, STOPPING_KILL),
		[MESH_EV_STALE] = T(FAIL, STOPPING_KILL),    [MESH_EV_HALTED] = T(FAIL, STOPPING_KILL),
		[MESH_EV_REFUSED] = T(FAIL, STOPPING_KILL),  [MESH_EV_BROKEN] = T(FAIL, STOPPING_KILL),
		[MESH_EV_CLOSED] = T(HANGUP, STARTING),      [MESH_EV_TIMEOUT] = T(FAIL, STOPPING_KILL),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(ABORT, DOWN),
		[MESH_EV_PROBE] = T(NOP, STARTING),          [MESH_EV_HUNG] = T(NOP, STARTING),
	},
	[MESH_IS_IDLE] = {
		[MESH_EV_WARM] = T(NOP, IDLE),               [MESH_EV_LAUNCH] = T(RUN, LAUNCHING),
		[MESH_EV_HALT] = T(NOP, IDLE),               [MESH_EV_EXIT] = T(STOP, STOPPING_EXIT),
		[MESH_EV_START] = T(DENY, IDLE),             [MESH_EV_READY] = T(FAIL, STOPPING_KILL),
		[MESH_EV_REJECTED] = T(FAIL, STOPPING_KILL), [MESH_EV_ONLINE] = T(FAIL, STOPPING_KILL),
		[MESH_EV_STALE] = T(FAIL, STOPPING_KILL),    [MESH_EV_HALTED] = T(NOP, IDLE),
		[MESH_EV_REFUSED] = T(NOP, IDLE),            [MESH_EV_BROKEN] = T(FAIL, STOPPING_KILL),
		[MESH_EV_CLOSED] = T(HANGUP, IDLE),          [MESH_EV_TIMEOUT] = T(NOP, IDLE),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(NOP, IDLE),
		[MESH_EV_PROBE] = T(NOP, IDLE),              [MESH_EV_HUNG] = T(NOP, IDLE),
	},
	[MESH_IS_LAUNCHING] = {
		[MESH_EV_WARM] = T(NOP, LAUNCHING),          [MESH_EV_LAUNCH] = T(DENY, LAUNCHING),
		[MESH_EV_HALT] = T(HALT, HALTING),           [MESH_EV_EXIT] = T(STOP, STOPPING_EXIT),
		[MESH_EV_START] = T(DENY, LAUNCHING),        [MESH_EV_READY] = T(FAIL, STOPPING_KILL),
		[MESH_EV_REJECTED] = T(FAIL, STOPPING_KILL), [MESH_EV_ONLINE] = T(ONLINE, RUNNING),
		[MESH_EV_STALE] = T(FAIL, STOPPING_KILL),    [MESH_EV_HALTED] = T(FAIL, STOPPING_KILL),
		[MESH_EV_REFUSED] = T(REFUSE, IDLE),         [MESH_EV_BROKEN] = T(FAIL, STOPPING_KILL),
		[MESH_EV_CLOSED] = T(HANGUP, LAUNCHING),     [MESH_EV_TIMEOUT] = T(FAIL, STOPPING_KILL),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(NOP, LAUNCHING),
		[MESH_EV_PROBE] = T(NOP, LAUNCHING),         [MESH_EV_HUNG] = T(NOP, LAUNCHING),
	},
	[MESH_IS_RUNNING] = {
		[MESH_EV_WARM] = T(NOP, RUNNING),            [MESH_EV_LAUNCH] = T(DENY, RUNNING),
		[MESH_EV_HALT] = T(HALT, HALTING),           [MESH_EV_EXIT] = T(STOP, STOPPING_EXIT),
		[MESH_EV_START] = T(DENY, RUNNING),          [MESH_EV_READY] = T(FAIL, STOPPING_KILL),
		[MESH_EV_REJECTED] = T(FAIL, STOPPING_KILL), [MESH_EV_ONLINE] = T(FAIL, STOPPING_KILL),
		[MESH_EV_STALE] = T(FAIL, STOPPING_KILL),    [MESH_EV_HALTED] = T(FAIL, STOPPING_KILL),
		[MESH_EV_REFUSED] = T(NOP, RUNNING),         [MESH_EV_BROKEN] = T(FAIL, STOPPING_KILL),
		[MESH_EV_CLOSED] = T(HANGUP, RUNNING),       [MESH_EV_TIMEOUT] = T(NOP, RUNNING),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(NOP, RUNNING),
		[MESH_EV_PROBE] = T(NOP, RUNNING),           [MESH_EV_HUNG] = T(NOP, RUNNING),
	},
	[MESH_IS_HALTING] = {
		[MESH_EV_WARM] = T(NOP, HALTING),            [MESH_EV_LAUNCH] = T(DENY, HALTING),
		[MESH_EV_HALT] = T(NOP, HALTING),            [MESH_EV_EXIT] = T(STOP, STOPPING_EXIT),
		[MESH_EV_START] = T(DENY, HALTING),          [MESH_EV_READY] = T(FAIL, STOPPING_KILL),
		[MESH_EV_REJECTED] = T(FAIL, STOPPING_KILL), [MESH_EV_ONLINE] = T(NOP, HALTING),
		[MESH_EV_STALE] = T(NOP, HALTING),           [MESH_EV_HALTED] = T(HALTED, IDLE),
		[MESH_EV_REFUSED] = T(NOP, HALTING),         [MESH_EV_BROKEN] = T(FAIL, STOPPING_KILL),
		[MESH_EV_CLOSED] = T(HANGUP, HALTING),       [MESH_EV_TIMEOUT] = T(FAIL, STOPPING_KILL),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(NOP, HALTING),
		[MESH_EV_PROBE] = T(NOP, HALTING),           [MESH_EV_HUNG] = T(NOP, HALTING),
	},
	[MESH_IS_STOPPING_EXIT] = {
		[MESH_EV_WARM] = T(DENY, STOPPING_EXIT),     [MESH_EV_LAUNCH] = T(DENY, STOPPING_EXIT),
		[MESH_EV_HALT] = T(NOP, STOPPING_EXIT),      [MESH_EV_EXIT] = T(NOP, STOPPING_EXIT),
		[MESH_EV_START] = T(DENY, STOPPING_EXIT),    [MESH_EV_READY] = T(NOP, STOPPING_EXIT),
		[MESH_EV_REJECTED] = T(NOP, STOPPING_EXIT),  [MESH_EV_ONLINE] = T(NOP, STOPPING_EXIT),
		[MESH_EV_STALE] = T(NOP, STOPPING_EXIT),     [MESH_EV_HALTED] = T(NOP, STOPPING_EXIT),
		[MESH_EV_REFUSED] = T(NOP, STOPPING_EXIT),   [MESH_EV_BROKEN] = T(NOP, STOPPING_EXIT),
		[MESH_EV_CLOSED] = T(HANGUP, STOPPING_EXIT), [MESH_EV_TIMEOUT] = T(TERM, STOPPING_TERM),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(NOP, STOPPING_EXIT),
		[MESH_EV_PROBE] = T(NOP, STOPPING_EXIT),     [MESH_EV_HUNG] = T(NOP, STOPPING_EXIT),
	},
	[MESH_IS_STOPPING_TERM] = {
		[MESH_EV_WARM] = T(DENY, STOPPING_TERM),     [MESH_EV_LAUNCH] = T(DENY, STOPPING_TERM),
		[MESH_EV_HALT] = T(NOP, STOPPING_TERM),      [MESH_EV_EXIT] = T(NOP, STOPPING_TERM),
		[MESH_EV_START] = T(DENY, STOPPING_TERM),    [MESH_EV_READY] = T(NOP, STOPPING_TERM),
		[MESH_EV_REJECTED] = T(NOP, STOPPING_TERM),  [MESH_EV_ONLINE] = T(NOP, STOPPING_TERM),
		[MESH_EV_STALE] = T(NOP, STOPPING_TERM),     [MESH_EV_HALTED] = T(NOP, STOPPING_TERM),
		[MESH_EV_REFUSED] = T(NOP, STOPPING_TERM),   [MESH_EV_BROKEN] = T(NOP, STOPPING_TERM),
		[MESH_EV_CLOSED] = T(HANGUP, STOPPING_TERM), [MESH_EV_TIMEOUT] = T(KILL, STOPPING_KILL),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(NOP, STOPPING_TERM),
		[MESH_EV_PROBE] = T(NOP, STOPPING_TERM),     [MESH_EV_HUNG] = T(NOP, STOPPING_TERM),
	},
	[MESH_IS_STOPPING_KILL] = {
		[MESH_EV_WARM] = T(DENY, STOPPING_KILL),     [MESH_EV_LAUNCH] = T(DENY, STOPPING_KILL),
		[MESH_EV_HALT] = T(NOP, STOPPING_KILL),      [MESH_EV_EXIT] = T(NOP, STOPPING_KILL),
		[MESH_EV_START] = T(DENY, STOPPING_KILL),    [MESH_EV_READY] = T(NOP, STOPPING_KILL),
		[MESH_EV_REJECTED] = T(NOP, STOPPING_KILL),  [MESH_EV_ONLINE] = T(NOP, STOPPING_KILL),
		[MESH_EV_STALE] = T(NOP, STOPPING_KILL),     [MESH_EV_HALTED] = T(NOP, STOPPING_KILL),
		[MESH_EV_REFUSED] = T(NOP, STOPPING_KILL),   [MESH_EV_BROKEN] = T(NOP, STOPPING_KILL),
		[MESH_EV_CLOSED] = T(HANGUP, STOPPING_KILL), [MESH_EV_TIMEOUT] = T(NOP, STOPPING_KILL),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(NOP, STOPPING_KILL),
		[MESH_EV_PROBE] = T(NOP, STOPPING_KILL),     [MESH_EV_HUNG] = T(NOP, STOPPING_KILL),
	},
	[MESH_IS_PROBING] = {
		[MESH_EV_WARM] = T(NOP, PROBING),            [MESH_EV_LAUNCH] = T(DENY, PROBING),
		[MESH_EV_HALT] = T(NOP, PROBING),            [MESH_EV_EXIT] = T(STOP, STOPPING_EXIT),
		[MESH_EV_START] = T(NOP, PROBING),           [MESH_EV_READY] = T(READY, WARM),
		[MESH_EV_REJECTED] = T(NOP, PROBING),        [MESH_EV_ONLINE] = T(NOP, PROBING),
		[MESH_EV_STALE] = T(NOP, PROBING),           [MESH_EV_HALTED] = T(NOP, PROBING),
		[MESH_EV_REFUSED] = T(NOP, PROBING),         [MESH_EV_BROKEN] = T(FAIL, STOPPING_KILL),
		[MESH_EV_CLOSED] = T(NOP, PROBING),          [MESH_EV_TIMEOUT] = T(EXPIRE, STOPPING_EXIT),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(ABORT, DOWN),
		[MESH_EV_PROBE] = T(PROBE, PROBING),         [MESH_EV_HUNG] = T(NOP, PROBING),
	},
	[MESH_IS_WARM] = {
		[MESH_EV_WARM] = T(NOP, WARM),               [MESH_EV_LAUNCH] = T(DENY, WARM),
		[MESH_EV_HALT] = T(NOP, WARM),               [MESH_EV_EXIT] = T(STOP, STOPPING_EXIT),
		[MESH_EV_START] = T(NOP, WARM),              [MESH_EV_READY] = T(NOP, WARM),
		[MESH_EV_REJECTED] = T(NOP, WARM),           [MESH_EV_ONLINE] = T(NOP, WARM),
		[MESH_EV_STALE] = T(NOP, WARM),              [MESH_EV_HALTED] = T(NOP, WARM),
		[MESH_EV_REFUSED] = T(NOP, WARM),            [MESH_EV_BROKEN] = T(FAIL, STOPPING_KILL),
		[MESH_EV_CLOSED] = T(NOP, WARM),             [MESH_EV_TIMEOUT] = T(NOP, WARM),
		[MESH_EV_DIED] = T(REAP, DOWN),              [MESH_EV_UNSTARTED] = T(NOP, WARM),
		[MESH_EV_PROBE] = T(CHECK, WARM),            [MESH_EV_HUNG] = T(FAIL, STOPPING_KILL),
	},
};
#undef T

const char *mesh_istate_name(enum mesh_istate s)
{
	static const char *const n[] = {"DOWN",	   "STARTING",	   "IDLE",	    "LAUNCHING",
					"RUNNING", "HALTING",	   "STOPPING_EXIT", "STOPPING_TERM",
					"STOPPING_KILL", "PROBING", "WARM"};
	_Static_assert(sizeof n / sizeof *n == MESH_IS__N, "a name for every state");
	return (unsigned)s < MESH_IS__N ? n[s] : "?";
}

const char *mesh_ievent_name(enum mesh_ievent e)
{
	static const char *const n[] = {"warm",	  "launch",  "halt",   "exit",	 "start",  "ready",
					"rejected", "online",  "stale",  "halted", "refused",
					"broken",   "closed",  "timeout", "died",   "unstarted", "probe", "hung"};
	_Static_assert(sizeof n / sizeof *n == MESH_EV__N, "a name for every event");
	return (unsigned)e < MESH_EV__N ? n[e] : "?";
}

const char *mesh_iaction_name(enum mesh_iaction a)
{
	static const char *const n[] = {"nop",	  "deny",   "spawn",  "abort", "pend", "unpend",
					"ready",  "run",    "online", "halt",  "halted", "refuse",
					"stop",	  "term",   "kill",   "fail",  "hangup", "reap",
					"probe",  "check",  "expire"};
	_Static_assert(sizeof n / sizeof *n == MESH_A__N, "a name for every action");
	return (unsigned)a < MESH_A__N ? n[a] : "?";
}

int mesh_lifecycle_describe(struct mesh_buf *out)
{
	int rc = mesh_buf_addf(out, "%-14s %-10s %-7s %s\n", "STATE", "EVENT", "ACTION", "NEXT");
	for (int s = 0; s < MESH_IS__N && !rc; s++)
		for (int e = 0; e < MESH_EV__N && !rc; e++) {
			const struct mesh_transition *t = &mesh_lifecycle[s][e];
			rc = mesh_buf_addf(out, "%-14s %-10s %-7s %s\n", mesh_istate_name((enum mesh_istate)s),
					   mesh_ievent_name((enum mesh_ievent)e), mesh_iaction_name(t->action),
					   mesh_istate_name(t->next));
		}
	return rc;
}
