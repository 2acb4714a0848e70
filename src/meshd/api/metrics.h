/* meshd's metrics: what the core counts, and its Prometheus text rendering
 * (exposition format 0.0.4).  docs/metrics.md lists every family.
 *
 * The core owns the counters (meshd/core/core.c records cold starts and call
 * latencies into struct meshd_hist); meshd_op_metrics copies them into a
 * struct meshd_metrics; meshd_metrics_render turns that into text.  The
 * render is a pure function of the struct: the unit test feeds it by hand.
 *
 * Served twice: `GET /metrics` on the control socket (meshd/api/api.c) and,
 * with `meshd --metrics ADDR:PORT`, on TCP (meshd_metrics_serve_start). */
#ifndef MESH_MESHD_API_METRICS_H
#define MESH_MESHD_API_METRICS_H

#include "base/buf.h"
#include "gateway/gw.h"
#include "host/host.h"

#include <stdint.h>

struct meshd_core;

#define MESHD_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* A histogram with fixed bucket bounds (one table per kind, metrics.c).
 * bucket[i] counts observations <= bound i and > bound i-1 (not
 * cumulative); the last bucket is +Inf. */
enum meshd_hist_kind { MESHD_HIST_COLD_START, MESHD_HIST_CALL, MESHD_HIST__N };
#define MESHD_HIST_BUCKETS 20
struct meshd_hist {
	uint64_t bucket[MESHD_HIST_BUCKETS];
	uint64_t count;
	uint64_t sum_ns;
};
/* Counts one observation of ns nanoseconds.  Not locked: the caller's. */
void meshd_hist_observe(struct meshd_hist *h, enum meshd_hist_kind kind, uint64_t ns);

/* What a call ended as (mesh_calls_total's result label). */
enum meshd_call_result {
	MESHD_CALL_OK,		/* a reply */
	MESHD_CALL_HANDLER,	/* the worker's handler refused (MESH_E_HANDLER) */
	MESHD_CALL_TIMEOUT,	/* no reply in time, or no worker in time */
	MESHD_CALL_CRASHED,	/* its worker died */
	MESHD_CALL_STOPPED,	/* its worker was stopped meanwhile */
	MESHD_CALL_ERROR,	/* anything else (no slot, spawn failed, ...) */
	MESHD_CALL__N
};
const char *meshd_call_result_name(enum meshd_call_result r);
/* The result label for a meshd_op_call return code. */
enum meshd_call_result meshd_call_result_of(int rc);

/* The job engine's numbers (filled by meshd_jobs_metrics). */
enum meshd_mjob_state { MESHD_MJOB_RUNNING, MESHD_MJOB_COMPLETE, MESHD_MJOB_FAILED, MESHD_MJOB_CANCELLED, MESHD_MJOB_ERROR, MESHD_MJOB__N };
enum meshd_chunk_state { MESHD_CHUNK_PENDING, MESHD_CHUNK_LEASED, MESHD_CHUNK_DONE, MESHD_CHUNK_BURIED, MESHD_CHUNK__N };
struct meshd_job_metrics {
	uint64_t jobs[MESHD_MJOB__N];	 /* jobs known to meshd, by state */
	uint64_t chunks[MESHD_CHUNK__N]; /* their chunks, by state */
	uint64_t completions;		 /* chunks completed (DONE records written) */
	uint64_t duplicates;		 /* completions ignored: the chunk was DONE already */
	uint64_t speculative_wins;	 /* chunks won by a speculative copy */
};
/* Fills *out from the job subsystem.  0, or MESH_E_UNSUPPORTED when meshd
 * has none (the job families are then left out of /metrics, not shown as
 * zeros).  The one seam between the jobs code and the metrics. */
int meshd_jobs_metrics(struct meshd_core *d, struct meshd_job_metrics *out);

/* One loaded program.  name is malloc'd (meshd_metrics_release). */
struct meshd_program_metrics {
	char *name;
	unsigned max_workers;
	unsigned workers[MESH_IS__N]; /* its workers by lifecycle state */
	uint64_t spawns, crashes;
	uint64_t calls[MESHD_CALL__N];
	struct meshd_hist cold_start; /* spawn -> ready */
	struct meshd_hist call;	      /* a call's latency, as its caller saw it */
	uint64_t warm_ns;	      /* worker-seconds with a process, since loaded */
	uint64_t window_ns;	      /* since loaded */
};

struct meshd_metrics {
	unsigned slots, slots_in_use;
	uint64_t spawns, crashes; /* the host's, over every program ever loaded */
	uint32_t processes;	  /* live worker processes */
	struct meshd_program_metrics *programs;
	unsigned nprograms;
	int have_jobs; /* jobs holds meshd_jobs_metrics's answer */
	struct meshd_job_metrics jobs;
	/* meshd --http: the gateway's programs (malloc'd; released with the rest) */
	int have_gateway;
	struct mesh_gw_prog_stats *gw;
	size_t ngw;
};
void meshd_metrics_release(struct meshd_metrics *m);

/* The snapshot (meshd/core/core.c).  0 or -ENOMEM (*out then holds nothing). */
int meshd_op_metrics(struct meshd_core *d, struct meshd_metrics *out);

/* Appends m in the text format to out.  0 or -ENOMEM. */
int meshd_metrics_render(const struct meshd_metrics *m, struct mesh_buf *out);
/* Appends s as a label value (between the quotes): \ " and newline
 * escaped, other control bytes and invalid UTF-8 as U+FFFD.  0 or -ENOMEM. */
int meshd_metrics_label(struct mesh_buf *out, const char *s);
/* A text being rendered and its first error: every call after a failure
 * does nothing, so a render reads as the text it writes (metrics.c and
 * metrics_gpu.c render through these). */
struct meshd_metrics_text {
	struct mesh_buf *b;
	int rc;
};
void meshd_metrics_put(struct meshd_metrics_text *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The # HELP and # TYPE lines of a family. */
void meshd_metrics_family(struct meshd_metrics_text *w, const char *name, const char *type, const char *help);
/* s escaped as a label value (NULL as ""). */
void meshd_metrics_put_label(struct meshd_metrics_text *w, const char *s);
/* The gateway whose programs /metrics shows (meshd --http sets it before
 * serving, clears it before freeing it); NULL: none, its families are left
 * out. */
void meshd_metrics_gateway_set(struct mesh_gw *g);
/* The gateway set there (NULL: none), for GET /v1/ps's HTTP programs. */
struct mesh_gw *meshd_metrics_gateway(void);
/* Snapshot + render: the body of GET /metrics.  0 or -ENOMEM. */
int meshd_metrics_text(struct meshd_core *d, struct mesh_buf *out);

/* The TCP listener of `meshd --metrics ADDR:PORT`: GET /metrics only.
 * addr is "HOST:PORT" with a numeric IPv4 host or "[IPv6]:PORT"; a
 * non-loopback host is refused with MESH_E_REFUSED unless allow_public.
 * Port 0 picks one (meshd_metrics_serve_port says which).  Serves on the
 * core's event loop (meshd_core_base) from return until
 * meshd_metrics_serve_stop, which must come before meshd_core_free.  0 or
 * a negative mesh error with *err malloc'd. */
struct meshd_metrics_server;
int meshd_metrics_serve_start(struct meshd_metrics_server **out, struct meshd_core *d, const char *addr,
			      int allow_public, char **err);
int meshd_metrics_serve_port(const struct meshd_metrics_server *s);
/* Stops serving (on the loop's thread), frees s.  NULL is a no-op. */
void meshd_metrics_serve_stop(struct meshd_metrics_server *s);

#endif
