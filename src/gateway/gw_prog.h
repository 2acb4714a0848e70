/* The model gateway's programs and the state its threads share (gw_prog.c:
 * the catalog's HTTP programs, each an instance of the host's (host/host.h:
 * the host starts, probes, stops and reaps them; its changes of state come
 * to on_change, on the thread that dispatches the host's events); a
 * request's place -- acquire, never blocking, and release --, the memory
 * budget, their numbers, the log; the programs' tick: the idle stop, the
 * measured memory, the wait for a dead program's VRAM).  Used by the front
 * (gw_loop.c), meshd's own answers (gw_answer.c) and the gateway's open,
 * drain and free (gw.c); it knows none of them: when what a waiting request
 * waits for changes it calls g->look, and it asks for its tick through
 * g->arm, the hooks the front set.
 * One mutex (g->mu) guards every field marked "mu"; lock order: g->mu,
 * then a loop's own mutex (gw_loop.c), or the host's (host calls that do
 * not wait), never the other way (the host calls on_change without its
 * lock).  Not a public contract: see gw.h. */
#ifndef MESH_GATEWAY_GW_PROG_H
#define MESH_GATEWAY_GW_PROG_H

#include "base/list.h"
#include "gateway/gw.h"
#include "gateway/gw_guard.h"
#include "gateway/gw_json.h"
#include "gpu/nvml.h"
#include "host/host.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

enum mesh__gw_state { GW_COLD, GW_STARTING, GW_WARM, GW_STOPPING };

/* Idle connections to one program that no loop keeps yet: a start's probe
 * connection its first request did not ride (a loop takes it rather than
 * pay a loopback connect and the program's accept). */
#define GW_POOL_MAX 64

/* The request a cold start sends itself, on the warm probe's connection,
 * the moment the probe passes (on_change, on the thread that dispatched
 * the probe's answer): the first waiter's (one per start), registered by
 * mesh__gw_acquire while it waits.  Its bytes stay the waiter's (its wait
 * cannot end without taking the slot back under mu, and its bytes do not
 * move meanwhile); what goes is written under mu, without blocking, so the
 * program works on it while the waiter's loop wakes.  mu. */
struct mesh__gw_first {
	const char *line, *rest; /* the request line meshd makes, then the client's head and body */
	size_t nline, nrest;
	int fd;      /* set when sent: the connection it went on (the waiter's to relay and close) */
	size_t sent; /* how many of line + rest went (the waiter sends the rest) */
	int port;    /* of the process it went to */
	uint64_t t_sent; /* mesh_mono_ns when it went */
};

#define GW_GPU_PIDS_MAX 64

struct mesh__gw_prog {
	/* Its image (img.m: the manifest), read-only after the catalog's
	 * reading, and its instance of the host (NULL: unfit). */
	struct mesh_image img;
	struct mesh_instance *inst;
	struct mesh_gw *g;
	/* mu: */
	int state;		/* enum mesh__gw_state */
	uint64_t gen;		/* starts begun */
	uint64_t fail_gen;	/* the start that failed last (0: none) */
	int fail_code;		/* its answer: 502, 504, 503 */
	char fail_msg[8192];	/* its reason and the program's last lines */
	char fail_short[768];	/* its reason for a client: no output of the program's, no port */
	uint64_t fail_told;	/* the failed start whose fail_msg a request's log line had */
	char fail_rid[72];	/* ... that request's id */
	uint64_t backoff_until, backoff_ns;
	unsigned inflight, waiting;
	uint64_t last_end;	/* when the last request ended (or warm) */
	int port;		/* of the current process */
	pid_t pid;
	uint32_t spawns_seen;	/* the host's spawns of it, as noted (its "spawned" line) */
	uint64_t spawned_gen;	/* the start whose spawn was noted */
	char stop_why[80];	/* why it is STOPPING ("idle", "evicted for b", ...) */
	uint64_t stop_t0;	/* when its stop was asked (0: not asked) */
	int killed;		/* its stop went on to SIGKILL */
	uint64_t vram_since;	/* reaped, awaiting its VRAM since (0: not) */
	struct mesh__gw_first *first; /* mu: the waiter whose request the start sends (NULL: none) */
	int pool[GW_POOL_MAX];	/* mu: idle connections to the warm process (GW_POOL_MAX) */
	unsigned npool;
	uint64_t spawns, crashes, start_failures, reaps, requests, hung;
	uint64_t evict_budget, evict_swap; /* stopped over the budget; for another's start */
	uint64_t cuts;			   /* answers begun that did not reach their end (not the client's leaving) */
	uint64_t to_request, to_response, to_idle; /* requests past a limit */
	struct mesh_gw_model_counts *mcounts; /* mu: one per img.m.models, in their order */
	struct mesh_hist warm, queue;	      /* mu: spawn to warm; the waits of requests that waited */
	/* Why it cannot start at all (a limit this machine cannot enforce, an
	 * unknown user; NULL: none), set at the catalog's reading. */
	char *unfit;
	/* mu: measured by the programs' tick (every second, 0.1 s after warm;
	 * 0 without a process): the resident bytes of its processes, and the
	 * GPU memory NVML lists for their pids; the most seen (rss + vram) in
	 * this run, and in its last run (what a new start is counted at when
	 * it is more than the manifest's `memory`); the pids NVML was seen
	 * listing (their memory is back only when NVML lists them no more). */
	uint64_t rss, vram, peak, last_peak, next_measure;
	pid_t gpu_pids[GW_GPU_PIDS_MAX];
	size_t ngpu;
	uint64_t logged_peak;	/* mu: the peak its last "holds" line said (0: none yet this run) */
	int measured;		/* mu: measured at least once in this run */
	/* mu: stopped (idle, evicted, over the budget), it is measured once
	 * more before the host is asked to stop it (the programs' tick). */
	int exit_due;
	/* mu: its waiting requests (mesh__gw_acquire's w), oldest first. */
	MESH_LIST(struct mesh__gw_wait) waits;
	/* mu: cold, its start waits for room in the budget: its place in the
	 * one FIFO of swaps (a number of g->seq; 0: not in it). */
	uint64_t swap_seq;
	/* mu: warm, chosen to make room for the swap at the FIFO's head (its
	 * swap_seq; 0: not): requests for it that came after that swap wait
	 * behind it; it is stopped once those before have ended. */
	uint64_t held_for;
	/* mu: a request's keep_alive (mesh__gw_release) holds its process
	 * warm until then, whatever its idle_ttl (UINT64_MAX: until a
	 * keep_alive of 0, a stop or the budget; 0: none); keep_unload: the
	 * last keep_alive was 0, it stops once no request is in flight. */
	uint64_t keep_until;
	int keep_unload;
	int pick;		/* mu: make_room's scratch */
	/* mu: a reload took it out of the catalog (changed: its successor
	 * serves its models; removed: none does), since retired_t0: no new
	 * request finds it, those it has end, then it is stopped (at most
	 * drain_timeout after), and once cold it leaves g->progs for
	 * g->retired, where the tick frees it once nothing holds it. */
	int retired;
	uint64_t retired_t0;
	const char *retired_why; /* "changed", "removed" */
	struct mesh__gw_prog *rnext; /* in g->retired */
	/* mu: the definition it replaced (a reload's changed program; NULL:
	 * none): it does not start until that one's process is gone. */
	struct mesh__gw_prog *prev;
	/* Atomic: the holds on it from outside mu (mesh__gw_hold). */
	unsigned holds;
};

/* A client connection as the gateway counts it (gw.c): its loop's
 * (gw_loop.c) from its accept to its close. */
struct mesh__gw_conn {
	int fd;
	int busy; /* mu: a request of it is in flight */
	/* Since when no request is begun on it (a new one that sent nothing,
	 * a kept one between requests; mesh_mono_ns; 0: one is): its loop's,
	 * read by the accept thread to choose one to close at a cap. */
	_Atomic uint64_t idle_since;
	int evicted;		  /* mu: closed to make room (not counted against the caps) */
	unsigned char peer[16];	  /* its client address's key (gw.c) */
	MESH_LINK(struct mesh__gw_conn) link; /* mu: in g->conns, newest first */
};

/* How many connections one client address has (gw.c's table). */
struct mesh__gw_peer {
	unsigned char key[16];
	uint32_t n; /* 0: a free entry */
};

struct mesh_gw {
	struct mesh_gw_config c;
	struct mesh__gw_guard guard; /* the keys and the Host rule (gw_guard.h) */
	char *catalog;
	/* mu (read at open and free without it): the programs, by name; each
	 * allocated on its own (a pointer to one stays good until
	 * mesh_gw_free); a reload (mesh_gw_reload) replaces the array. */
	struct mesh__gw_prog **progs;
	size_t nprogs;
	struct mesh__gw_prog *retired; /* mu: retired programs gone cold (rnext) */
	struct mesh_host *host;	      /* c.host: runs the programs */
	struct mesh_nvml *nvml;	      /* NVML for the programs' VRAM; NULL: none */
	int lfd, port;
	pthread_t accept_th;
	int accept_started;
	pthread_mutex_t mu;
	pthread_cond_t cv_all;	/* mu: nconns, nlive, busy changed */
	MESH_LIST(struct mesh__gw_conn) conns; /* mu */
	unsigned nconns, nlive, busy; /* mu; nlive: programs not cold */
	/* mu: the connections closed to make room and not yet gone (in
	 * nconns still); the addresses' counts (open addressing, a power of
	 * two entries, at most half of them used); the connections turned
	 * away and closed for room since the last log line about them. */
	unsigned nevicted;
	struct mesh__gw_peer *peers;
	size_t peers_cap, npeers;
	uint64_t refused_peer, refused_full, closed_idle, refused_logged;
	int draining, stopping, drained; /* mu */
	unsigned nwaiting;	/* mu: requests waiting for a place (mesh__gw_acquire), all programs */
	uint64_t seq;		/* mu: requests and swaps numbered as they come (gw_prog.c) */
	int over_said;		/* mu: the budget is exceeded with no program idle, and that was logged */
	/* Called under mu (by mesh__gw_look) when what a waiting request waits
	 * for may have changed: its loop looks again (gw_loop.c's; NULL: none). */
	void (*look)(struct mesh_gw *g);
	/* Called under mu: the programs' tick (mesh__gw_progs_tick) is wanted
	 * at this mesh_mono_ns time, or sooner (the front's; NULL: none yet). */
	void (*arm)(struct mesh_gw *g, uint64_t at);
	struct mesh__gw_loop *loops;	/* gw_loop.c: the front's event loops */
	uint32_t rid_boot;	/* a request id's first part: random at open */
	uint64_t rid_seq;	/* its second: counted (atomic) */
	unsigned nloops, next_loop;
};

/* gw.c */
/* Under mu: c (its fd and peer set) is one of g's connections, counted
 * against the caps. */
void mesh__gw_conn_link(struct mesh_gw *g, struct mesh__gw_conn *c);
/* Under mu: c is gone (its fd is the caller's to close). */
void mesh__gw_conn_unlink(struct mesh_gw *g, struct mesh__gw_conn *c);

/* gw_prog.c */
/* Reads the catalog's HTTP programs into g->progs, each an instance of
 * g->host.  0 or a code, *err. */
int mesh__gw_catalog(struct mesh_gw *g, char **err);
void mesh__gw_progs_free(struct mesh_gw *g);
/* The names a request's model may give p: its models, then its aliases;
 * how many, and the k-th (p's, read-only). */
size_t mesh__gw_nnames(const struct mesh__gw_prog *p);
const char *mesh__gw_name(const struct mesh__gw_prog *p, size_t k);
/* The program serving model (one of its names), held (the caller lets go
 * with mesh__gw_unhold), or NULL.  Takes mu. */
struct mesh__gw_prog *mesh__gw_find(struct mesh_gw *g, const char *model);
/* What keeps a program that a reload retired from being freed while a
 * pointer to it is used outside mu: a request's from its route to its
 * end, a kept connection's, a `mesh start` or `stop`'s.  mesh__gw_hold
 * takes one more, where the caller has one already or holds mu; any
 * thread lets one go, mu held or not (NULL: nothing). */
void mesh__gw_hold(struct mesh__gw_prog *p);
void mesh__gw_unhold(struct mesh__gw_prog *p);
/* A request's wait for a place in its program (its loop's: it parks the
 * request and asks again when told to look, or at until).  Set p, and
 * first's line, rest and their lengths (line NULL: no start may send it),
 * first.fd -1, the rest 0; then call mesh__gw_acquire. */
struct mesh__gw_wait {
	struct mesh__gw_prog *p;
	struct mesh__gw_first first; /* the request a start may send itself */
	uint64_t gen;	/* the start it waits for (0: none yet) */
	uint64_t until; /* after a 1: ask again then (a backoff's end, its wait for room's); 0: when told to look */
	uint64_t room_t0; /* when it began to wait for room in the budget (0: it has not) */
	int queued;	/* counted in p->waiting */
	int cold;	/* it waited for a start (or a room for one) */
	int port;	/* placed: of the process */
	int start;	/* its place began a start: its acquire asks the host for it */
	uint64_t seq;	/* when it came (g->seq; set by its first acquire) */
	MESH_LINK(struct mesh__gw_wait) link; /* in p's waiting requests while queued */
	const char *rid; /* its request's id, for meshd's log (NULL: none) */
};
/* Takes a place for one request, or says why not yet, without blocking:
 * 0, placed (w->port; w->cold when it waited for a start; w->first.fd >= 0:
 * its start sent it, w->first.sent bytes, on that connection, which is now
 * the caller's); 1, it waits (a cold start, the backoff after a failed one,
 * a place under max_concurrency, room in the budget (at most its program's
 * start_timeout: then 503), a swap its program is held for, that came
 * before it: gw_prog.c): ask again when g's
 * look hook is called, or at w->until; or an HTTP status (502, 503, 504)
 * with *why (malloc'd: its first line for the client, without the
 * program's output or port; the whole for meshd's log: a failed start's
 * report and the program's last lines the first time a request is answered
 * with it, after that the id of that request) and *retry_after (seconds,
 * 0: none).  While it waits w must stay where it is, and so must
 * first's bytes. */
int mesh__gw_acquire(struct mesh__gw_wait *w, char **why, unsigned *retry_after);
/* The client of a waiting request went away: its wait ends (a connection
 * its start sent it on is closed, and its place given back). */
void mesh__gw_acquire_cancel(struct mesh__gw_wait *w);
/* Under mu: what a waiting request waits for may have changed (a start's
 * end, a place free, the budget, the drain): the look hook, when one waits. */
void mesh__gw_look(struct mesh_gw *g);
/* The request ended; keep: its keep_alive (gw_json.h: MESH__GW_KEEP_ABSENT,
 * _FOREVER, or nanoseconds, 0: unload p once no request is in flight). */
void mesh__gw_release(struct mesh__gw_prog *p, int64_t keep);
/* An idle connection to p's process on port (a start's probe connection
 * its first request did not ride), or -1 (none: connect). */
int mesh__gw_pool_get(struct mesh__gw_prog *p, int port);
/* Counts the end of a request routed to p: under model (one of its
 * manifest's; another name is not counted by model), the status the client
 * got (499: it left first); t0 its head read, t_first when its answer's
 * first byte went (0: none went), now its end; queued_ns its wait for a
 * start or a place (0: it did not wait); cut: its answer began but did not
 * reach its end (the program closed or died, a limit passed).  Takes mu. */
void mesh__gw_count(struct mesh__gw_prog *p, const char *model, int status, uint64_t t0, uint64_t t_first, uint64_t now,
		    uint64_t queued_ns, int cut);
/* Counts a request past a limit: 1 request, 2 response start, 3 idle stream. */
void mesh__gw_count_timeout(struct mesh__gw_prog *p, int kind);
/* "cold", "starting", "warm", "stopping", or "failed" (cold after a failed
 * start).  Under mu. */
const char *mesh__gw_state_name(const struct mesh__gw_prog *p);
/* Stops every program and waits (bounded) until each is cold. */
void mesh__gw_stop_all(struct mesh_gw *g, uint64_t deadline);
/* The programs' tick, at the time g->arm asked for (the front's loop):
 * the idle stops, the measured memory, the wait for a dead program's VRAM.
 * Returns when the next is wanted (mesh_mono_ns; 0: none until armed). */
uint64_t mesh__gw_progs_tick(struct mesh_gw *g);

/* A condition variable on CLOCK_MONOTONIC (every timed wait here is). */
void mesh__gw_cond_init(pthread_cond_t *cv);
/* One line to the config's on_log (none: nothing). */
void mesh__gw_log(struct mesh_gw *g, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
