/* The model gateway's insides, shared by gw.c (the front door: accept, each
 * connection's requests, routing, the relay of each response) and
 * gw_prog.c (the programs: the catalog, acquire/release of a request's
 * place, the budget, their numbers) and gw_sup.c (the supervisor thread of
 * each running program).  One mutex (g->mu)
 * guards every field marked "mu".  Not a public contract: see gw.h. */
#ifndef MESH_GATEWAY_GW_INT_H
#define MESH_GATEWAY_GW_INT_H

#include "gateway/gw.h"
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

/* Idle connections to one program kept for the next request (each request
 * otherwise pays a loopback connect and the program's accept). */
#define GW_POOL_MAX 64

/* The request a cold start's supervisor sends itself, on the warm probe's
 * connection, the moment the probe passes: the first waiter's (one per
 * start), registered by mesh__gw_acquire while it waits.  Its bytes stay
 * the waiter's (it cannot leave acquire without taking the slot back under
 * mu); the supervisor writes what goes under mu, without blocking, so the
 * program works on it while the waiter's thread wakes.  mu. */
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
	pthread_cond_t cv;	/* waiters: a state change, a place free */
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
	int pool[GW_POOL_MAX];	/* mu: idle keep-alive connections to the warm process */
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
	pthread_cond_t cv_budget; /* mu: a program went cold or idle */
	struct mesh__gw_conn *conns; /* mu */
	unsigned nconns, nsup, busy; /* mu */
	int draining, stopping, drained; /* mu */
	struct mesh__gw_loop *loops;	/* gw_loop.c: the warm path's event loops */
	unsigned nloops, next_loop;
};

/* gw_prog.c */
/* Reads the catalog's HTTP programs into g->progs.  0 or a code, *err. */
int mesh__gw_catalog(struct mesh_gw *g, char **err);
void mesh__gw_progs_free(struct mesh_gw *g);
/* The program serving model, or NULL. */
struct mesh__gw_prog *mesh__gw_find(struct mesh_gw *g, const char *model);
/* The "model" string of a JSON request body (malloc'd), or NULL. */
char *mesh__gw_body_model(const char *body, size_t n);
/* Splits target "/upstream/<model>/P" into model (at most mcap - 1 bytes)
 * and the path "/P" the program gets (the query kept). */
void mesh__gw_upstream_split(const char *target, char *model, size_t mcap, char *path, size_t pcap);
/* Takes a place for one request: waits (cold start, backoff, a place under
 * max_concurrency, room in the budget) as needed, looking at client_fd
 * every 200 ms while it waits.  0 with *port and *cold (it waited for a
 * start), or an HTTP status (502, 503, 504; 499: the client closed its
 * connection meanwhile, nothing to answer) with why (malloc'd, for the
 * client or the log) and *retry_after (seconds, 0: none).  first (NULL:
 * none; else line, rest and their lengths set, fd -1): while it waits for
 * a start, the request the supervisor may send itself; on 0 with
 * first->fd >= 0 it went (first->sent bytes of it) on that connection,
 * whose place it holds; on an error any such connection is closed. */
int mesh__gw_acquire(struct mesh__gw_prog *p, int client_fd, int *port, int *cold, char **why,
		     unsigned *retry_after, struct mesh__gw_first *first);
/* The request ended. */
void mesh__gw_release(struct mesh__gw_prog *p);
/* An idle connection to p's process on port, or -1 (none: connect). */
int mesh__gw_pool_get(struct mesh__gw_prog *p, int port);
/* Keeps fd (a connection to port whose last response ended whole) for the
 * next request, or closes it (the process changed, the pool is full). */
void mesh__gw_pool_put(struct mesh__gw_prog *p, int port, int fd);
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

/* gw_body.c */
/* Sends all n bytes (MSG_NOSIGNAL).  0, or -1 (the peer is gone). */
int mesh__gw_send_all(int fd, const void *p, size_t n);
/* An error answer in OpenAI's shape ({"error":{message,type,param,code}});
 * errcode may be NULL; retry_after 0: no Retry-After; close_it: Connection:
 * close.  0 or -1 as above. */
int mesh__gw_send_error(int fd, int code, const char *type, const char *errcode, const char *msg,
			unsigned retry_after, int close_it);
/* GET /v1/models's answer. */
int mesh__gw_send_models(struct mesh_gw *g, int fd, int close_it);
/* The 404 for an unknown model, naming the known ones. */
int mesh__gw_send_unknown_model(struct mesh_gw *g, int fd, const char *model, int close_it);
/* Under mu: what p counts for in the memory budget while it has a process:
 * max(its manifest's `memory`, its measured rss + vram). */
uint64_t mesh__gw_counted(const struct mesh__gw_prog *p);

/* gw_sup.c: the supervisor thread of a start (arg: the program, whose
 * state is STARTING and evfd set, under mu, when it is created). */
void *mesh__gw_sup_main(void *arg);

/* gw.c */
/* A condition variable on CLOCK_MONOTONIC (every timed wait here is). */
void mesh__gw_cond_init(pthread_cond_t *cv);
void mesh__gw_log(struct mesh_gw *g, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
