/* mesh serve: a scale-to-zero activator in front of one local server
 * process (llama.cpp's server, vLLM, anything that speaks TCP and answers
 * an HTTP health path).
 *
 * It listens; the first connection while no server runs SPAWNs the
 * server command; connections wait in a bounded queue (bounded in count
 * and in time) while the warmth probe (autoscale/probe.h, run on a helper
 * thread so the loop never blocks) polls the upstream; once warm, every
 * connection is relayed byte for byte (http/relay.h: splice, no user
 * copy).  When no connection has been open for the idle TTL the server is
 * REAPed: the stop signal (SIGTERM, or stop_signal) to its process group, the grace, then
 * SIGKILL to the group, until no process of the group is left.  The
 * decisions come from the policy table (autoscale/policy.h) with one
 * worker, no floor, linger = idle TTL.
 *
 * Process model (the caller should know):
 *   - mesh_serve_open blocks SIGCHLD, SIGTERM, SIGINT, SIGHUP and SIGUSR1 in
 *     the calling thread (they are read through a signalfd by the loop),
 *     sets SIGPIPE to SIG_IGN, makes the process a child subreaper (so that
 *     the server's own children, orphaned, are reaped here and a stop can
 *     wait for the whole group), and raises RLIMIT_NOFILE to its hard limit.
 *     Call it from the main thread, before starting other threads.
 *   - The server runs in its own process group with PR_SET_PDEATHSIG =
 *     SIGKILL (it dies with this process), stdin from /dev/null, stdout and
 *     stderr through a pipe into the log file (appended) and a ring of its
 *     last MESH_PROC_TAIL_LINES (30) lines, shown when it crashes.
 *   - A process of the server that leaves its group (setsid) escapes the
 *     stop; only a cgroup could follow it, and none is used here.
 *
 * Errors clients can see (all described in docs/serve.md).  Where the
 * client's first bytes look like an HTTP request (a method and a space), it
 * gets a short HTTP answer with Connection: close, else just a close:
 *   503 + Retry-After  the queue is full, the wait passed queue_timeout, more
 *                      than max_conns connections, no fd left, or mesh serve
 *                      is stopping
 *   502                the server crashed or could not be started while the
 *                      client waited, or refused the connection while warm
 *   504                the server did not become warm within start_timeout;
 *                      the body ends with the last probe's reason ("cold:
 *                      HTTP 200 but model 'x' is not listed")
 *
 * Caller protocol:
 *   1. struct mesh_serve_config c = MESH_SERVE_CONFIG_INIT; fill it.
 *   2. mesh_serve_open(&s, &c, why, sizeof why): validates, resolves,
 *      listens.  On error returns a code and writes the subject into why
 *      ("cannot listen on '127.0.0.1:80'"), nothing is left open.
 *   3. mesh_serve_run(s): the event loop (one libevent event_base, on this
 *      thread), until SIGTERM/SIGINT/SIGHUP: then
 *      it drains: stops listening, fails the queued clients (503), closes
 *      idle keep-alive connections (http), lets what is in flight finish
 *      (requests (http) or connections) for up to drain_timeout (a second
 *      signal ends the drain at once), then stops the server (stop_signal,
 *      grace, SIGKILL), closes every connection and returns 0.
 *      Events go to c.on_event as they happen, on this thread.
 *   4. mesh_serve_stats(s, &st) any time (also inside on_event);
 *      mesh_serve_free(s). */
#ifndef MESH_SERVE_SERVE_H
#define MESH_SERVE_SERVE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>


enum mesh_serve_state { MESH_SERVE_COLD, MESH_SERVE_STARTING, MESH_SERVE_WARM, MESH_SERVE_STOPPING };

/* "cold", "starting", "warm", "stopping". */
const char *mesh_serve_state_name(int state);

enum mesh_serve_event_kind {
	MESH_SERVE_EV_LISTENING,     /* addr: the bound address (port 0 resolved) */
	MESH_SERVE_EV_SPAWNED,       /* pid; reason: why (the demand) */
	MESH_SERVE_EV_SPAWN_FAILED,  /* err: the exec error; queued clients got 502 */
	MESH_SERVE_EV_WARM,          /* pid, elapsed_ns: spawn to warm; reason: the probe's line */
	MESH_SERVE_EV_START_TIMEOUT, /* pid, elapsed_ns; tail; queued clients got 504; the server is stopped */
	MESH_SERVE_EV_CRASHED,       /* pid, status, elapsed_ns: its uptime; tail; queued clients got 502 */
	MESH_SERVE_EV_REAPING,       /* pid; reason: "idle 30.0 s" or "shutdown" */
	MESH_SERVE_EV_KILLED,        /* pid: the grace passed, SIGKILL sent to the group */
	MESH_SERVE_EV_REAPED,        /* pid, status, elapsed_ns: stop signal to empty group */
	MESH_SERVE_EV_REJECTED,      /* status: the HTTP code sent (0: closed); reason */
	MESH_SERVE_EV_STATUS,        /* stats (SIGUSR1) */
	MESH_SERVE_EV_EXIT,          /* stats, just before mesh_serve_run returns */
	MESH_SERVE_EV_DRAINING,      /* a stop signal came: status = requests (http) / connections in flight */
};

/* "listening", "spawned", ... */
const char *mesh_serve_event_name(int kind);

struct mesh_serve_stats {
	int state;              /* enum mesh_serve_state */
	pid_t pid;              /* the server's pid, 0 when cold */
	uint64_t window_ns;     /* since mesh_serve_open */
	uint64_t warm_ns;       /* time a server process existed (spawn to empty group): it held its memory */
	int savings_permil;     /* mesh_as_savings_permil(warm_ns, window_ns) */
	uint64_t spawns, reaps, crashes, start_timeouts, spawn_failures;
	uint64_t served;        /* connections relayed to the server */
	uint64_t rejected;      /* connections answered with an error */
	uint64_t open;          /* connections open now (queued, connecting, relayed) */
	uint64_t queued, queued_max;
	uint64_t bytes_in, bytes_out; /* relayed client->server, server->client */
	uint64_t requests;      /* --http: requests seen */
	uint64_t inflight;      /* --http: requests in flight now (first byte to end of response) */
	uint64_t demand;        /* what the policy sees now: requests in flight and waiting (http), else open */
	uint64_t pipes;         /* relay pipes held now (bytes in flight through them) */
};

struct mesh_serve_event {
	int kind;                        /* enum mesh_serve_event_kind */
	pid_t pid;
	int status;                      /* exit status (128+signal for a signal), HTTP code, or -1 */
	int err;                         /* a negative code, or 0 */
	uint64_t elapsed_ns;
	const char *addr;                /* LISTENING, else NULL */
	const char *reason;              /* one line, or NULL */
	const char *const *tail;         /* CRASHED, START_TIMEOUT: oldest first */
	size_t ntail;
	const struct mesh_serve_stats *stats; /* always set */
};

struct mesh_serve_config {
	const char *listen;        /* "ADDR:PORT", "[v6]:PORT"; PORT may be 0 */
	const char *upstream;      /* "ADDR:PORT", "[v6]:PORT", a name:PORT */
	const char *probe_path;    /* NULL: /v1/models */
	const char *model;         /* NULL: any 2xx is warm; else it must be listed */
	char *const *argv;         /* the server command, NULL-terminated; argv[0] found in PATH */
	const char *log_path;      /* where its output goes; NULL: ./mesh-serve.log */
	uint64_t idle_ns;          /* reap after this long without a connection */
	uint64_t grace_ns;         /* SIGTERM to SIGKILL */
	uint64_t start_timeout_ns; /* spawn to warm, at most */
	uint64_t queue_timeout_ns; /* longest wait of a queued connection */
	uint32_t max_queue;        /* most connections waiting at once */
	unsigned relay_flags;      /* MESH_RELAY_NO_SPLICE to copy (benchmarks) */
	void (*on_event)(void *ctx, const struct mesh_serve_event *ev);
	void *ctx;
	/* Demand.  0: every open connection is demand (TCP, any protocol).
	 * 1 (--http): only requests are: a request is demand from its first
	 * byte to the end of its response; an idle keep-alive connection, a
	 * bare connect, a half-closed socket that sent nothing are not. */
	int http;
	int start_on_connect;      /* http: a connection that has sent nothing yet starts a cold server too */
	int stop_signal;           /* to the group at a stop (reap, start timeout, shutdown); 0: SIGTERM */
	uint64_t drain_timeout_ns; /* at SIGTERM: longest wait for what is in flight */
	uint32_t max_conns;        /* most client connections relayed or waiting; 0: from RLIMIT_NOFILE */
	/* http, while relayed: a request head's first byte to its blank line,
	 * and one byte of a request body to the next, at most; past either the
	 * client is answered 408 (or, with an answer under way, cut) */
	uint64_t header_timeout_ns, body_timeout_ns;
};
#define MESH_SERVE_CONFIG_INIT                                                                              \
	{.idle_ns = 300ull * 1000000000ull, .grace_ns = 5ull * 1000000000ull,                                \
	 .start_timeout_ns = 300ull * 1000000000ull, .queue_timeout_ns = 120ull * 1000000000ull,            \
	 .max_queue = 1024, .drain_timeout_ns = 30ull * 1000000000ull, .header_timeout_ns = 60ull * 1000000000ull, \
	 .body_timeout_ns = 60ull * 1000000000ull}

struct mesh_serve;

/* Steps 1-2 of the protocol.  Returns 0 (*out set) or: MESH_E_PARSE (a
 * malformed listen or upstream address, a probe path not starting with '/'),
 * MESH_E_RANGE (no command, idle 0, max_queue 0), -ENOENT / -EACCES (the
 * command cannot be found or run), -EADDRINUSE / -EACCES from bind,
 * -errno from resolving, opening the log or making the loop's fds.  why
 * (may be NULL) receives the subject of the failure. */
int mesh_serve_open(struct mesh_serve **out, const struct mesh_serve_config *c, char *why, size_t why_len);
/* Step 3.  Returns 0 after a stop signal, or a negative code when the loop
 * itself failed (its event_base, signalfd): the server is stopped in either case. */
int mesh_serve_run(struct mesh_serve *s);
void mesh_serve_stats(const struct mesh_serve *s, struct mesh_serve_stats *out);
/* Closes everything; kills the server's group if it still runs. */
void mesh_serve_free(struct mesh_serve *s);

#endif
