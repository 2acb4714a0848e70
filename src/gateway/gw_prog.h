/* The model gateway's programs and the state its threads share (gw_prog.c:
 * the catalog's HTTP programs, a request's place -- acquire, never
 * blocking, and release --, the memory budget, their numbers, the log; and
 * the supervisor thread of each running program, gw_sup.c).  Used by the
 * front (gw_loop.c), meshd's own answers (gw_answer.c) and the gateway's
 * open, drain and free (gw.c); it knows none of them: when what a waiting
 * request waits for changes it calls g->look, the hook the front set.
 * One mutex (g->mu) guards every field marked "mu"; lock order: g->mu,
 * then a loop's own mutex (gw_loop.c), never the other way.  Not a public
 * contract: see gw.h. */
#ifndef MESH_GATEWAY_GW_PROG_H
#define MESH_GATEWAY_GW_PROG_H

#include "gateway/gw.h"
#include "gateway/gw_guard.h"
#include "host/manifest.h"
#include "gpu/nvml.h"
#include "host/wlog.h"
#include "proc/proc.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

enum mesh__gw_state { GW_COLD, GW_STARTING, GW_WARM, GW_STOPPING };

/* Idle connections to one program that no loop keeps yet: a start's probe
 * connection its first request did not ride (a loop takes it rather than
 * pay a loopback connect and the program's accept). */
#define GW_POOL_MAX 64

/* The request a cold start's supervisor sends itself, on the warm probe's
 * connection, the moment the probe passes: the first waiter's (one per
 * start), registered by mesh__gw_acquire while it waits.  Its bytes stay
 * the waiter's (its wait cannot end without taking the slot back under
 * mu, and its bytes do not move meanwhile); the supervisor writes what
 * goes under mu, without blocking, so the program works on it while the
 * waiter's loop wakes.  mu. */
struct mesh__gw_first {
	const char *line, *rest; /* the request line meshd makes, then the client's head and body */
	size_t nline, nrest;
	int fd;      /* set when sent: the connection it went on (the waiter's to relay and close) */
	size_t sent; /* how many of line + rest went (the waiter sends the rest) */
	int port;    /* of the process it went to */
	uint64_t t_sent; /* mesh_mono_ns when it went */
};

struct mesh__gw_prog {
	struct mesh_manifest m;
	struct mesh_gw *g;
	/* mu: */
	int state;		/* enum mesh__gw_state */
	uint64_t gen;		/* starts begun */
	uint64_t fail_gen;	/* the start that failed last (0: none) */
	int fail_code;		/* its answer: 502, 504, 503 */
	char fail_msg[8192];	/* its reason and the program's last lines */
	uint64_t backoff_until, backoff_ns;
	unsigned inflight, waiting;
	uint64_t last_end;	/* when the last request ended (or warm) */
	int port;		/* of the current process */
	pid_t pid;
	int evfd;		/* wakes the current supervisor; -1 when none */
	char evict_for[80];	/* mu: why it is STOPPING, when evicted */
	struct mesh__gw_first *first; /* mu: the waiter whose request the start sends (NULL: none) */
	int pool[GW_POOL_MAX];	/* mu: idle connections to the warm process (GW_POOL_MAX) */
	unsigned npool;
	uint64_t spawns, crashes, start_failures, reaps, requests, evictions, hung;
	uint64_t to_request, to_response, to_idle; /* requests past a limit */
	uint64_t req_ok, req_err, warm_ns_sum, warm_count, queue_ns_sum, queue_count;
	struct mesh__wlog log;	/* supervisor thread only */
	/* Set at the catalog's reading, read-only afterwards: who it runs as
	 * (the manifest's `user`, else meshd's default), how its [limits] are
	 * enforced (MESH_LIM_* bits), and why it cannot start at all (a limit
	 * this machine cannot enforce, an unknown user; NULL: none). */
	struct mesh_run_as run_as;
	unsigned enforced;
	char *unfit;
	/* mu: measured by its supervisor (every second and at warm; 0
	 * without a process): the resident bytes of its processes, and the
	 * GPU memory NVML lists for their pids; the most seen (rss + vram) in
	 * this run, and in its last run (what a new start is counted at when
	 * it is more than the manifest's `memory`). */
	uint64_t rss, vram, peak, last_peak;
};

struct mesh__gw_conn {
	int fd;
	int busy; /* mu: a request of it is in flight */
	struct mesh__gw_conn *prev, *next;
};

struct mesh_gw {
	struct mesh_gw_config c;
	struct mesh__gw_guard guard; /* the keys and the Host rule (gw_guard.h) */
	char *catalog, *logs;
	struct mesh__gw_prog *progs;
	size_t nprogs;
	struct mesh_proc_spawner *sp;
	struct mesh_limits_caps caps; /* what this machine enforces, found at open */
	struct mesh_nvml *nvml;	      /* NVML for the programs' VRAM; NULL: none */
	int lfd, port;
	pthread_t accept_th;
	int accept_started;
	pthread_mutex_t mu;
	pthread_cond_t cv_all;	/* mu: nconns, nsup, busy changed */
	struct mesh__gw_conn *conns; /* mu */
	unsigned nconns, nsup, busy; /* mu */
	int draining, stopping, drained; /* mu */
	unsigned nwaiting;	/* mu: requests waiting for a place (mesh__gw_acquire), all programs */
	/* Called under mu (by mesh__gw_look) when what a waiting request waits
	 * for may have changed: its loop looks again (gw_loop.c's; NULL: none). */
	void (*look)(struct mesh_gw *g);
	struct mesh__gw_loop *loops;	/* gw_loop.c: the front's event loops */
	unsigned nloops, next_loop;
};

/* gw_prog.c */
/* Reads the catalog's HTTP programs into g->progs.  0 or a code, *err. */
int mesh__gw_catalog(struct mesh_gw *g, char **err);
void mesh__gw_progs_free(struct mesh_gw *g);
/* The program serving model, or NULL. */
struct mesh__gw_prog *mesh__gw_find(struct mesh_gw *g, const char *model);
/* A request's wait for a place in its program (its loop's: it parks the
 * request and asks again when told to look, or at until).  Set p, and
 * first's line, rest and their lengths (line NULL: no start may send it),
 * first.fd -1, the rest 0; then call mesh__gw_acquire. */
struct mesh__gw_wait {
	struct mesh__gw_prog *p;
	struct mesh__gw_first first; /* the request a start may send itself */
	uint64_t gen;	/* the start it waits for (0: none yet) */
	uint64_t until; /* after a 1: ask again then (a backoff's end); 0: when told to look */
	int queued;	/* counted in p->waiting */
	int cold;	/* it waited for a start (or a room for one) */
	int port;	/* placed: of the process */
};
/* Takes a place for one request, or says why not yet, without blocking:
 * 0, placed (w->port; w->cold when it waited for a start; w->first.fd >= 0:
 * its start sent it, w->first.sent bytes, on that connection, which is now
 * the caller's); 1, it waits (a cold start, the backoff after a failed one,
 * a place under max_concurrency, room in the budget): ask again when g's
 * look hook is called, or at w->until; or an HTTP status (502, 503, 504)
 * with *why (malloc'd, for the client or the log) and *retry_after
 * (seconds, 0: none).  While it waits w must stay where it is, and so must
 * first's bytes. */
int mesh__gw_acquire(struct mesh__gw_wait *w, char **why, unsigned *retry_after);
/* The client of a waiting request went away: its wait ends (a connection
 * its start sent it on is closed, and its place given back). */
void mesh__gw_acquire_cancel(struct mesh__gw_wait *w);
/* Under mu: what a waiting request waits for may have changed (a start's
 * end, a place free, the budget, the drain): the look hook, when one waits. */
void mesh__gw_look(struct mesh_gw *g);
/* The request ended. */
void mesh__gw_release(struct mesh__gw_prog *p);
/* An idle connection to p's process on port (a start's probe connection
 * its first request did not ride), or -1 (none: connect). */
int mesh__gw_pool_get(struct mesh__gw_prog *p, int port);
/* Under mu: closes the pool (the process is stopping or gone: an idle
 * connection must not hold up a graceful stop). */
void mesh__gw_pool_drop(struct mesh__gw_prog *p);
/* Counts a request's end: relayed whole (ok) or not; queued_ns: its wait. */
void mesh__gw_count(struct mesh__gw_prog *p, int ok, uint64_t queued_ns);
/* Counts a request past a limit: 1 request, 2 response start, 3 idle stream. */
void mesh__gw_count_timeout(struct mesh__gw_prog *p, int kind);
/* "cold", "starting", "warm", "stopping", or "failed" (cold after a failed
 * start).  Under mu. */
const char *mesh__gw_state_name(const struct mesh__gw_prog *p);
/* Asks every supervisor to stop its program and waits (bounded) for them. */
void mesh__gw_stop_all(struct mesh_gw *g, uint64_t deadline);
/* Under mu: wakes p's supervisor (a request ended, a stop was asked). */
void mesh__gw_wake(struct mesh__gw_prog *p);
/* A monotonic time as a timespec for the condition variables here. */
void mesh__gw_abs_deadline(struct timespec *ts, uint64_t mono_deadline);

/* Under mu: what p counts for in the memory budget while it has a process:
 * max(its manifest's `memory`, its measured rss + vram). */
uint64_t mesh__gw_counted(const struct mesh__gw_prog *p);

/* gw_sup.c: the supervisor thread of a start (arg: the program, whose
 * state is STARTING and evfd set, under mu, when it is created). */
void *mesh__gw_sup_main(void *arg);

/* A condition variable on CLOCK_MONOTONIC (every timed wait here is). */
void mesh__gw_cond_init(pthread_cond_t *cv);
/* One line to the config's on_log (none: nothing). */
void mesh__gw_log(struct mesh_gw *g, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
