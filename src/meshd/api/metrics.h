/* meshd's metrics: its Prometheus text rendering (exposition format
 * 0.0.4).  docs/metrics.md lists every family.
 *
 * The core owns its counters (meshd/core/ops.h: cold starts and call
 * latencies in struct mesh_hist); meshd_metrics_text copies them
 * (meshd_op_metrics), the jobs' numbers and the gateway's programs into a
 * struct meshd_metrics; meshd_metrics_render turns that into text.  The
 * render is a pure function of the struct: the unit test feeds it by hand.
 *
 * Served twice: `GET /metrics` on the control socket (meshd/api/api.c) and,
 * with `meshd --metrics ADDR:PORT`, on TCP (meshd_metrics_serve_start). */
#ifndef MESH_MESHD_API_METRICS_H
#define MESH_MESHD_API_METRICS_H

#include "base/buf.h"
#include "gateway/gw.h"
#include "meshd/api/api.h"
#include "meshd/core/ops.h"

#include <stdint.h>

struct meshd_jobs;

#define MESHD_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* The job engine's numbers (filled by meshd_api_jobs_metrics). */
enum meshd_mjob_state { MESHD_MJOB_RUNNING, MESHD_MJOB_COMPLETE, MESHD_MJOB_FAILED, MESHD_MJOB_CANCELLED, MESHD_MJOB_ERROR, MESHD_MJOB__N };
enum meshd_chunk_state { MESHD_CHUNK_PENDING, MESHD_CHUNK_LEASED, MESHD_CHUNK_DONE, MESHD_CHUNK_BURIED, MESHD_CHUNK__N };
struct meshd_job_metrics {
	uint64_t jobs[MESHD_MJOB__N];	 /* jobs known to meshd, by state */
	uint64_t chunks[MESHD_CHUNK__N]; /* their chunks, by state */
	uint64_t completions;		 /* chunks completed (DONE records written) */
	uint64_t duplicates;		 /* completions ignored: the chunk was DONE already */
	uint64_t speculative_wins;	 /* chunks won by a speculative copy */
};
/* Fills *out from jobs (meshd/api/api_jobs.c).  0, or MESH_E_UNSUPPORTED
 * when jobs is NULL, meshd runs none (the job families are then left out of
 * /metrics, not shown as zeros).  The one seam between the jobs code and
 * the metrics. */
int meshd_api_jobs_metrics(struct meshd_jobs *jobs, struct meshd_job_metrics *out);

/* What /metrics shows: the core's snapshot, the jobs' numbers and the
 * gateway's programs. */
struct meshd_metrics {
	struct meshd_core_metrics core;
	int have_jobs; /* jobs holds meshd_api_jobs_metrics's answer */
	struct meshd_job_metrics jobs;
	int have_api; /* the control API's running ops: */
	unsigned api_calls, api_others;
	/* meshd --http: the gateway's programs (malloc'd; released with the rest) */
	int have_gateway;
	struct mesh_gw_prog_stats *gw;
	size_t ngw;
	uint64_t gw_budget; /* --http-memory (0: none) */
};
void meshd_metrics_release(struct meshd_metrics *m);

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
/* Snapshot + render: the body of GET /metrics.  0 or -ENOMEM. */
int meshd_metrics_text(const struct meshd_parts *p, struct mesh_buf *out);

/* The TCP listener of `meshd --metrics ADDR:PORT`: GET /metrics only.
 * addr is "HOST:PORT" with a numeric IPv4 host or "[IPv6]:PORT"; a
 * non-loopback host is refused with MESH_E_REFUSED unless allow_public.
 * Port 0 picks one (meshd_metrics_serve_port says which).  Serves on the
 * core's event loop (meshd_core_base) from return until
 * meshd_metrics_serve_stop, which must come before meshd_core_free.  0 or
 * a negative mesh error with *err malloc'd. */
struct meshd_metrics_server;
int meshd_metrics_serve_start(struct meshd_metrics_server **out, const struct meshd_parts *p, const char *addr,
			      int allow_public, char **err);
int meshd_metrics_serve_port(const struct meshd_metrics_server *s);
/* Stops serving (on the loop's thread), frees s.  NULL is a no-op. */
void meshd_metrics_serve_stop(struct meshd_metrics_server *s);

#endif
