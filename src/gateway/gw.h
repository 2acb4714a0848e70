/* The model gateway: one OpenAI-compatible front door (`meshd --http`) in
 * front of the catalog's HTTP programs (manifests with backend = "http",
 * host/manifest.h), each started on demand and stopped when idle.
 *
 * Routes (docs/gateway.md):
 *   GET  /v1/models            every catalog model, OpenAI's list shape, with
 *                              its program and state (cold, starting, warm,
 *                              failed)
 *   POST /v1/...               routed by the JSON body's "model" (the body,
 *                              Content-Length or chunked, is
 *                              read whole, at most max_body bytes)
 *   ANY  /upstream/<model>/P   to that model's program as /P
 * An unknown model gets OpenAI's 404 error JSON naming the known ones.
 *
 * A request for a cold program starts it: each program is an instance of
 * the host's (host/host.h: an HTTP program, the host's second kind; it
 * spawns it in its own PID namespace where the machine allows, else its
 * process group, on a free loopback port put in place of {port}, its output
 * to <logs>/<name>.log and a 30-line tail, and probes it), and the request
 * waits (at most max_queue waiting per program: past it 503 + Retry-After)
 * until the probe says warm; then every waiting request goes, each answer
 * with X-Mesh-Cold-Start: 1.  A start that fails answers its waiting
 * requests 502 (the program exited) or 504 (not warm within start_timeout)
 * with a short reason and the request's id (every answer carries
 * X-Request-Id), the program's last lines to on_log under that id, never
 * to a client; the program is cold again
 * and the next request starts it after a backoff (backoff_ns, doubling per
 * failed start up to 30 s, reset when one gets warm): never stuck failed.
 *
 * Demand is requests in flight (from the head read to the response's last
 * byte; a stream until it ends): an open idle keep-alive connection is not
 * demand.  A program with nothing in flight or waiting for its idle_ttl is
 * stopped: its stop_signal, stop_grace, then SIGKILL of all it contains.
 *
 * Threads: mesh_gw_open starts an accept thread and a few event loop
 * threads (gw_loop.c), which serve every client connection: its requests
 * read, answered or relayed as the response comes (a client that does not
 * read stops the program's writes: backpressure), and a request that waits
 * for a place parked on its loop, not on a thread; the first loop also
 * runs the programs' tick (idle stops, measured memory).  The programs'
 * processes are the host's: its changes of state come on the thread that
 * dispatches the host's events (meshd's core loop), none a program.
 * Nothing here prints: events and an access-log line per request go to
 * on_log.
 *
 * Caller protocol:
 *   1. struct mesh_gw_config c = MESH_GW_CONFIG_INIT; fill it
 *   2. mesh_gw_open(&g, &c, &err): reads the catalog, listens, serves
 *   3. mesh_gw_port(g) for the port (listen port 0 picks one)
 *   4. mesh_gw_drain(g): stops accepting; answers waiting requests 503; lets
 *      requests in flight end for up to drain_timeout; then stops every
 *      program (stop signal, grace, SIGKILL) and ends every connection
 *   5. mesh_gw_free(g) (drains first if 4 was not called). */
#ifndef MESH_GATEWAY_GW_H
#define MESH_GATEWAY_GW_H

#include "base/hist.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct mesh_buf;
struct mesh_host;

enum mesh_gw_log_level { MESH_GW_INFO, MESH_GW_WARN };

struct mesh_gw_config {
	const char *listen;	   /* "ADDR:PORT" / "[V6]:PORT", numeric or localhost */
	int allow_public;	   /* a listen address that is not loopback */
	const char *catalog;	   /* <catalog>/<name>.toml; those with backend = "http" */
	/* The host that runs the programs (meshd's core's: its logs, limits,
	 * user and containment; its events dispatched by a loop that runs
	 * until mesh_gw_free); required, borrowed. */
	struct mesh_host *host;
	size_t max_body;	   /* request body bound; 0: 16 MiB */
	uint32_t max_queue;	   /* requests waiting per program; 0: 256 */
	/* Client connections at once (0: 1024), and from one client address
	 * (an IPv4 address, an IPv6 /64; 0: half of max_conns).  A connection
	 * past either is answered 503 and closed, unless an idle one (no
	 * request begun on it: a new one that sent nothing, a kept one between
	 * requests) can be closed to make room: of the same address when the
	 * address is at its share, else of any; the one idle longest.
	 * mesh_gw_open raises the process's soft RLIMIT_NOFILE to what
	 * max_conns needs (2 a connection, and 512), as far as the hard limit
	 * allows; short of it max_conns is lowered to fit (a warning). */
	uint32_t max_conns, max_conns_per_peer;
	uint32_t threads;	   /* event loop threads; 0: by the CPUs (gw_loop.c) */
	uint64_t drain_timeout_ns; /* mesh_gw_drain's wait for requests in flight */
	uint64_t backoff_ns;	   /* after a failed start; 0: 500 ms */
	/* The memory budget (bytes; 0: none): the programs that run
	 * (starting, warm, stopping) together need at most this much, each
	 * counted at max(its `memory`, its measured resident memory + the VRAM
	 * NVML lists for its pids; until warm and measured, at least its last
	 * run's peak).  A start that does not fit takes its place in one FIFO
	 * of swaps; the head stops the least recently used idle programs of
	 * other groups first, then holds busy ones: their new requests wait
	 * behind the swap, those in flight (and those that came before it) end,
	 * then they are stopped; it starts once they are gone (reaped, their
	 * PID namespace empty, and NVML listing none of their pids).  A request
	 * waits for room at most its program's start_timeout (longer only while
	 * programs stopping for it free enough): then 503 + Retry-After naming
	 * the budget and the busy programs that hold it; never a start over the
	 * budget.  After
	 * each measure (every second, and at a program's stop) the budget is
	 * enforced: over it, the least recently used idle programs are
	 * stopped. */
	uint64_t memory_budget;
	/* Per-request limits (0: the default in brackets).  Past one, a request
	 * that has had no byte of answer gets 504; a response already under way
	 * is cut (the client's connection ends without its end).
	 * request_timeout_ns: head read to the response's last byte [30 min];
	 * response_timeout_ns: request sent to the response's first byte [5 min];
	 * idle_stream_timeout_ns: between two reads of a response [5 min]. */
	uint64_t request_timeout_ns, response_timeout_ns, idle_stream_timeout_ns;
	/* Reading a request (0: the default in brackets); past one, the
	 * client is answered 408 and its connection ends.
	 * header_timeout_ns: a request head's first byte to its end, bytes or
	 * not in between (a new connection's from its accept: one that sent
	 * nothing is closed without an answer) [60 s];
	 * body_timeout_ns: between two reads of the request's body [60 s]. */
	uint64_t header_timeout_ns, body_timeout_ns;
	/* A warm program is probed every probe_interval_ns [10 s] (the start's
	 * probe); after probe_failures [3] failed in a row it is hung: killed
	 * (SIGKILL: a hung server drains nothing), its requests in flight end
	 * (502 or cut), and the waiting ones start it again. */
	uint64_t probe_interval_ns;
	uint32_t probe_failures;
	/* The door (gateway/gw_guard.h): api_key_file (NULL: no key asked)
	 * lists the keys a request must bring (Authorization: Bearer); a
	 * browser's request is served from a loopback origin or one of
	 * allow_origins ("scheme://host[:port]", or "*"); with allow_public
	 * unset, the Host must be a loopback name. */
	const char *api_key_file;
	const char *const *allow_origins;
	size_t nallow_origins;
	void (*on_log)(void *ctx, int level, const char *line);
	void *ctx;
	/* GET /metrics on the gateway port (behind the key when api_key_file
	 * is set; the Host and Origin rules as for any route): appends the
	 * Prometheus text to out (meshd's own renderer: the same text as its
	 * control socket's /metrics), 0 or a negative MESH_E_* (then 503).
	 * Called on a loop's thread: it must not block for long.  NULL: the
	 * route is 404.  metrics_type: the answer's Content-Type. */
	int (*metrics)(void *metrics_ctx, struct mesh_buf *out);
	void *metrics_ctx;
	const char *metrics_type;
	/* Each request's end, as its access line says it (program: NULL when
	 * it reached none; status negative when cut; us since its head), on a
	 * loop's thread: it must not block.  NULL: none. */
	void (*on_request)(void *request_ctx, const char *program, const char *model, int status, uint64_t us,
			   int cold);
	void *request_ctx;
};
/* The most event loop threads a gateway may be given. */
#define MESH_GW_MAX_THREADS 64
#define MESH_GW_CONFIG_INIT {.drain_timeout_ns = 30ull * 1000000000ull}

struct mesh_gw;

/* 0, or a negative code with *err malloc'd: MESH_E_PARSE (a bad address, a
 * model served by two programs), MESH_E_REFUSED (not
 * loopback without allow_public), -errno from bind/listen, opendir.  A
 * manifest that does not parse is skipped (a warning to on_log). */
int mesh_gw_open(struct mesh_gw **out, const struct mesh_gw_config *c, char **err);
int mesh_gw_port(const struct mesh_gw *g);

/* One HTTP program's numbers, for /metrics (docs/metrics.md). */
/* The status classes a request is counted by: the status the client got
 * (the program's, or meshd's own 502/503/504), 499 for a client that left
 * before its answer's end. */
enum mesh_gw_code { MESH_GW_1XX, MESH_GW_2XX, MESH_GW_3XX, MESH_GW_4XX, MESH_GW_5XX, MESH_GW_499, MESH_GW_CODE__N };
/* "1xx" ... "5xx", "499". */
const char *mesh_gw_code_name(enum mesh_gw_code c);
/* The bounds of the gateway's histograms (100 us to 300 s): a warm relay's
 * latency, an LLM's generation, a model server's cold start. */
extern const struct mesh_hist_bounds mesh_gw_seconds_bounds;

/* One catalog model's requests (never a name a client made up): those
 * routed to its program, from the head read. */
struct mesh_gw_model_counts {
	uint64_t requests[MESH_GW_CODE__N]; /* by the status class they ended with */
	struct mesh_hist latency;	    /* to the answer's end (or the client's leaving): each counted */
	struct mesh_hist ttfb;		    /* to the answer's first byte: each that got one */
};
struct mesh_gw_model_stats {
	char *model; /* its name (malloc'd) */
	struct mesh_gw_model_counts c;
};

struct mesh_gw_prog_stats {
	char name[72];
	char state[12];		/* as GET /v1/models shows it */
	uint64_t memory;	/* declared; 0: none */
	uint64_t counted;	/* what it counts for in the memory budget now (0: no process) */
	unsigned inflight;	/* requests relayed now */
	unsigned queued;	/* requests waiting for a start or a place */
	struct mesh_gw_model_stats *models; /* its manifest's models, in order (malloc'd) */
	size_t nmodels;
	uint64_t cold_starts;	/* spawns */
	uint64_t start_failures, crashes;
	/* processes stopped: idle past idle_ttl; evicted over the memory
	 * budget; evicted to make room for another's start (a swap) */
	uint64_t evict_idle, evict_budget, evict_swap;
	uint64_t hung_restarts;	/* killed after probe_failures failed probes while warm */
	uint64_t cuts;		/* answers begun that did not reach their end: the program closed or died, a limit passed */
	/* requests past a limit: request_timeout, response_timeout, idle_stream_timeout */
	uint64_t timeouts_request, timeouts_response, timeouts_idle;
	pid_t pid;		/* of its process (0: none) */
	int port;		/* its loopback port (0: none) */
	char last_error[512];	/* the last failed start's reason ("" : none; its first line) */
	struct mesh_hist warm;	/* spawn to warm, over the starts that got warm */
	struct mesh_hist queue;	/* time requests waited for a start or a place (those that waited) */
};
/* The memory budget (memory_budget; 0: none). */
uint64_t mesh_gw_memory_budget(const struct mesh_gw *g);
/* A snapshot of every HTTP program, sorted by name: *out malloc'd (the
 * caller releases it with mesh_gw_stats_free), *n of them.  0 or -ENOMEM
 * (*out NULL). */
int mesh_gw_stats(struct mesh_gw *g, struct mesh_gw_prog_stats **out, size_t *n);
/* Frees mesh_gw_stats' snapshot (NULL: nothing). */
void mesh_gw_stats_free(struct mesh_gw_prog_stats *st, size_t n);
/* For `mesh ps` (GET /v1/ps's "http" array): one object per HTTP program,
 * sorted by name: name, state (as /v1/models), pid and port (null when it
 * has no process), models, in_flight, queued, cold_starts, crashes,
 * hung_restarts, last_error (the last failed start's reason and the
 * program's last lines; null: none).  A new reference, or NULL (no memory). */
struct json_t *mesh_gw_ps_json(struct mesh_gw *g);
/* 1 if name is one of the gateway's HTTP programs. */
int mesh_gw_has_program(struct mesh_gw *g, const char *name);
/* `mesh start NAME` of an HTTP program (preload): starts it when it is not
 * warm (as a request would: the backoff after a failed start, room in the
 * memory budget) and waits until it is warm, at most its start_timeout and
 * 10 s more.  Blocks: not from a loop's thread.  0 (warm; *pid its
 * process), or a code with *err (malloc'd): MESH_E_NOTFOUND (no such HTTP
 * program), MESH_E_CRASHED (it exited before it was warm: the reason, the
 * program's last lines), MESH_E_TIMEOUT (not warm in time), MESH_E_STATE
 * (meshd is draining, it cannot start here, or it does not fit the budget).
 * Warm, it is stopped after its idle_ttl like any. */
int mesh_gw_program_start(struct mesh_gw *g, const char *name, pid_t *pid, char **err);
/* `mesh stop NAME` of an HTTP program (unload): lets its requests in
 * flight end (at most drain_timeout: then it is stopped with them), stops
 * it (its stop signal, grace, SIGKILL) and waits until its process is gone.
 * Requests that come meanwhile are served, or wait and start it again.
 * Blocks as the above.  0 (cold), MESH_E_NOTFOUND, MESH_E_TIMEOUT. */
int mesh_gw_program_stop(struct mesh_gw *g, const char *name, char **err);
/* What a reload did: how many programs of each kind, and the line that
 * says it ("reloaded: 1 changed (a), 1 added (c), 1 removed (b), 1 refused
 * (d: FILE:LINE:COL: ...), 2 unchanged"; malloc'd, the caller's). */
struct mesh_gw_reload {
	char *summary;
	size_t changed, added, removed, refused, unchanged;
};
/* SIGHUP and `mesh reload`: reads the catalog's manifests again and
 * compares each with the program of its name (its file's bytes):
 *   the same: nothing happens to it (its process goes on);
 *   changed: the old definition is retired -- no new request reaches it,
 *     those in flight or waiting end on its process (at most drain_timeout,
 *     then it is stopped with them), then it stops --; the new one takes
 *     the name and its models, its first request waits until the old
 *     process is gone, then starts it (one process of a program at once:
 *     the same port, the same GPU memory);
 *   gone from the catalog (or no longer backend = "http"): retired as
 *     above; its models answer 404 from now;
 *   new: served from now (started by its first request);
 *   a manifest that does not read (FILE:LINE:COL), or whose models another
 *     program serves: refused, its program keeps its definition (none: not
 *     added).
 * Said in one line to on_log (WARN when one was refused) and in
 * out->summary.  Two reloads at once are each whole, one after the other.
 * Blocks for the manifests' reading, not for the programs.  0; MESH_E_PARSE
 * with *err the summary when one was refused (the others are done, and
 * out is set); or a code with *err (the catalog does not read, meshd is
 * draining: MESH_E_STATE; -ENOMEM), out->summary NULL, nothing changed. */
int mesh_gw_reload(struct mesh_gw *g, struct mesh_gw_reload *out, char **err);
void mesh_gw_drain(struct mesh_gw *g);
void mesh_gw_free(struct mesh_gw *g);

#endif
