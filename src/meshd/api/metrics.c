/* meshd's metrics: histograms, the Prometheus text rendering, and the TCP
 * listener of `meshd --metrics` (meshd/api/metrics.h, docs/metrics.md). */
#include "meshd/api/metrics.h"
#include "meshd/api/metrics_gpu.h"

#include "autoscale/policy.h"
#include "base/err.h"
#include "http/http.h"
#include "base/log.h"
#include "base/utf8.h"

#include <arpa/inet.h>
#include <errno.h>
#include <sys/queue.h> /* before event2: TAILQ_INIT for struct evkeyvalq */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void meshd_metrics_release(struct meshd_metrics *m)
{
	if (!m)
		return;
	meshd_core_metrics_release(&m->core);
	mesh_gw_stats_free(m->gw, m->ngw);
	m->gw = NULL;
	m->ngw = 0;
}

int meshd_metrics_label(struct mesh_buf *out, const char *s)
{
	char *t = mesh_utf8_sanitize(s, strlen(s), NULL);
	int rc = t ? 0 : -ENOMEM;
	for (const char *c = t; c && *c && !rc; c++) {
		if (*c == '\\')
			rc = mesh_buf_adds(out, "\\\\");
		else if (*c == '"')
			rc = mesh_buf_adds(out, "\\\"");
		else if (*c == '\n')
			rc = mesh_buf_adds(out, "\\n");
		else if ((unsigned char)*c < 0x20 || *c == 0x7f)
			rc = mesh_buf_adds(out, MESH_UTF8_REPLACEMENT);
		else
			rc = mesh_buf_add(out, c, 1);
	}
	free(t);
	return rc;
}

void meshd_metrics_put(struct meshd_metrics_text *w, const char *fmt, ...)
{
	va_list ap;
	if (w->rc)
		return;
	va_start(ap, fmt);
	w->rc = mesh_buf_vaddf(w->b, fmt, ap);
	va_end(ap);
}

void meshd_metrics_family(struct meshd_metrics_text *w, const char *name, const char *type, const char *help)
{
	meshd_metrics_put(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void meshd_metrics_put_label(struct meshd_metrics_text *w, const char *s)
{
	if (!w->rc)
		w->rc = meshd_metrics_label(w->b, s ? s : "");
}

/* `name{program="p"` -- the caller closes the label set. */
static void open_prog(struct meshd_metrics_text *w, const char *name, const char *prog)
{
	meshd_metrics_put(w, "%s{program=\"", name);
	meshd_metrics_put_label(w, prog);
	meshd_metrics_put(w, "\"");
}

/* `name{program="p",model="m"` (model NULL: without it) -- the caller
 * closes the label set. */
static void open_prog_model(struct meshd_metrics_text *w, const char *name, const char *prog, const char *model)
{
	open_prog(w, name, prog);
	if (model) {
		meshd_metrics_put(w, ",model=\"");
		meshd_metrics_put_label(w, model);
		meshd_metrics_put(w, "\"");
	}
}

static void seconds(struct meshd_metrics_text *w, uint64_t ns)
{
	meshd_metrics_put(w, "%llu.%09llu", (unsigned long long)(ns / 1000000000ull), (unsigned long long)(ns % 1000000000ull));
}

/* One program's (one of its models', model not NULL) histogram family
 * members: _bucket (cumulative), _sum, _count. */
static void hist_lines(struct meshd_metrics_text *w, const char *name, const char *prog, const char *model,
		       const struct mesh_hist *h, const struct mesh_hist_bounds *bounds)
{
	size_t n = bounds->n;
	const struct mesh_hist_bound *b = bounds->b;
	uint64_t cum = 0;
	char nm[96];
	snprintf(nm, sizeof nm, "%s_bucket", name);
	for (size_t i = 0; i <= n; i++) {
		cum += h->bucket[i];
		open_prog_model(w, nm, prog, model);
		meshd_metrics_put(w, ",le=\"%s\"} %llu\n", i < n ? b[i].le : "+Inf", (unsigned long long)cum);
	}
	snprintf(nm, sizeof nm, "%s_sum", name);
	open_prog_model(w, nm, prog, model);
	meshd_metrics_put(w, "} ");
	seconds(w, h->sum_ns);
	meshd_metrics_put(w, "\n");
	snprintf(nm, sizeof nm, "%s_count", name);
	open_prog_model(w, nm, prog, model);
	meshd_metrics_put(w, "} %llu\n", (unsigned long long)h->count);
}

/* One sample per program: name{program="p"} value. */
static void per_prog_u64(struct meshd_metrics_text *w, const struct meshd_metrics *m, const char *name, size_t field_off)
{
	for (unsigned i = 0; i < m->core.nprograms; i++) {
		const struct meshd_program_metrics *p = &m->core.programs[i];
		open_prog(w, name, p->name);
		meshd_metrics_put(w, "} %llu\n", (unsigned long long)*(const uint64_t *)((const char *)p + field_off));
	}
}

static void render_programs(struct meshd_metrics_text *w, const struct meshd_metrics *m)
{
	meshd_metrics_family(w, "mesh_workers", "gauge", "Worker instances of a loaded program, by lifecycle state.");
	for (unsigned i = 0; i < m->core.nprograms; i++)
		for (int s = 0; s < MESH_IS__N; s++) {
			char st[32];
			snprintf(st, sizeof st, "%s", mesh_istate_name((enum mesh_istate)s));
			for (char *c = st; *c; c++)
				*c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
			open_prog(w, "mesh_workers", m->core.programs[i].name);
			meshd_metrics_put(w, ",state=\"%s\"} %u\n", st, m->core.programs[i].workers[s]);
		}
	meshd_metrics_family(w, "mesh_spawns_total", "counter", "Worker processes spawned for a program since it was loaded.");
	per_prog_u64(w, m, "mesh_spawns_total", offsetof(struct meshd_program_metrics, spawns));
	meshd_metrics_family(w, "mesh_crashes_total", "counter",
	       "Worker processes of a program that died unasked (crashes) since it was loaded.");
	per_prog_u64(w, m, "mesh_crashes_total", offsetof(struct meshd_program_metrics, crashes));
	meshd_metrics_family(w, "mesh_cold_start_seconds", "histogram", "Time from a worker's spawn to its ready message.");
	for (unsigned i = 0; i < m->core.nprograms; i++)
		hist_lines(w, "mesh_cold_start_seconds", m->core.programs[i].name, NULL, &m->core.programs[i].cold_start,
			   &meshd_cold_start_bounds);
	meshd_metrics_family(w, "mesh_call_duration_seconds", "histogram",
	       "Latency of a call through meshd, cold start included, as the caller saw it.");
	for (unsigned i = 0; i < m->core.nprograms; i++)
		hist_lines(w, "mesh_call_duration_seconds", m->core.programs[i].name, NULL, &m->core.programs[i].call,
			   &meshd_call_bounds);
	meshd_metrics_family(w, "mesh_calls_total", "counter", "Calls to a program, by how they ended.");
	for (unsigned i = 0; i < m->core.nprograms; i++)
		for (int r = 0; r < MESHD_CALL__N; r++) {
			open_prog(w, "mesh_calls_total", m->core.programs[i].name);
			meshd_metrics_put(w, ",result=\"%s\"} %llu\n", meshd_call_result_name((enum meshd_call_result)r),
			    (unsigned long long)m->core.programs[i].calls[r]);
		}
	/* The savings (struct meshd_savings): the same numbers as ps and the API. */
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} sv[] = {
		{"mesh_warm_seconds_total", "counter",
		 "Worker-seconds a program's workers had a process (held their resources) over its savings window.",
		 offsetof(struct meshd_savings, warm_ns)},
		{"mesh_always_on_seconds_total", "counter",
		 "Worker-seconds max_workers always-on workers would have held over the savings window.",
		 offsetof(struct meshd_savings, always_ns)},
		{"mesh_window_seconds", "gauge",
		 "The savings window: seconds the program was loaded, over meshd's runs with these --logs.",
		 offsetof(struct meshd_savings, window_ns)},
	};
	for (size_t k = 0; k < sizeof sv / sizeof sv[0]; k++) {
		meshd_metrics_family(w, sv[k].name, sv[k].type, sv[k].help);
		for (unsigned i = 0; i < m->core.nprograms; i++) {
			open_prog(w, sv[k].name, m->core.programs[i].name);
			meshd_metrics_put(w, "} ");
			seconds(w, *(const uint64_t *)((const char *)&m->core.programs[i].savings + sv[k].off));
			meshd_metrics_put(w, "\n");
		}
	}
	meshd_metrics_family(w, "mesh_savings_ratio", "gauge",
	       "1 - warm / always-on worker-seconds over the savings window (0..1), as mesh ps shows it.");
	for (unsigned i = 0; i < m->core.nprograms; i++) {
		int pm = m->core.programs[i].savings.permil;
		open_prog(w, "mesh_savings_ratio", m->core.programs[i].name);
		meshd_metrics_put(w, "} %d.%03d\n", pm / 1000, pm % 1000);
	}
}

static void render_jobs(struct meshd_metrics_text *w, const struct meshd_job_metrics *j)
{
	static const char *const js[MESHD_MJOB__N] = {"running", "complete", "failed", "cancelled", "error"};
	static const char *const cs[MESHD_CHUNK__N] = {"pending", "leased", "done", "buried"};
	meshd_metrics_family(w, "mesh_jobs", "gauge", "Jobs known to meshd, by state.");
	for (int i = 0; i < MESHD_MJOB__N; i++)
		meshd_metrics_put(w, "mesh_jobs{state=\"%s\"} %llu\n", js[i], (unsigned long long)j->jobs[i]);
	meshd_metrics_family(w, "mesh_chunks", "gauge", "Chunks of meshd's jobs, by state.");
	for (int i = 0; i < MESHD_CHUNK__N; i++)
		meshd_metrics_put(w, "mesh_chunks{state=\"%s\"} %llu\n", cs[i], (unsigned long long)j->chunks[i]);
	meshd_metrics_family(w, "mesh_chunk_completions_total", "counter", "Chunks completed (DONE records made durable).");
	meshd_metrics_put(w, "mesh_chunk_completions_total %llu\n", (unsigned long long)j->completions);
	meshd_metrics_family(w, "mesh_chunk_duplicates_total", "counter",
	       "Completions ignored because the chunk was DONE already (a race's loser).");
	meshd_metrics_put(w, "mesh_chunk_duplicates_total %llu\n", (unsigned long long)j->duplicates);
	meshd_metrics_family(w, "mesh_speculative_wins_total", "counter", "Chunks whose speculative copy finished first.");
	meshd_metrics_put(w, "mesh_speculative_wins_total %llu\n", (unsigned long long)j->speculative_wins);
}

/* name{program="p"} v, for each gateway program. */
static void per_gw_u64(struct meshd_metrics_text *w, const struct meshd_metrics *m, const char *name, size_t off)
{
	for (size_t i = 0; i < m->ngw; i++) {
		open_prog(w, name, m->gw[i].name);
		meshd_metrics_put(w, "} %llu\n", (unsigned long long)*(const uint64_t *)((const char *)&m->gw[i] + off));
	}
}

/* name{program="p",label="vals[k]"} v for each gateway program and k < 3,
 * v its field at offs[k]. */
static void per_gw_by(struct meshd_metrics_text *w, const struct meshd_metrics *m, const char *name, const char *label,
		      const char *const vals[3], const size_t offs[3])
{
	for (size_t i = 0; i < m->ngw; i++)
		for (size_t k = 0; k < 3; k++) {
			open_prog(w, name, m->gw[i].name);
			meshd_metrics_put(w, ",%s=\"%s\"} %llu\n", label, vals[k],
					  (unsigned long long)*(const uint64_t *)((const char *)&m->gw[i] + offs[k]));
		}
}

/* The gateway's request figures: each HTTP program's state, requests by
 * model and status class, their durations, cut answers, those in flight
 * and queued. */
static void render_gateway_requests(struct meshd_metrics_text *w, const struct meshd_metrics *m)
{
	static const char *const states[] = {"cold", "starting", "warm", "stopping", "failed"};
	meshd_metrics_family(w, "mesh_gateway_program_state", "gauge", "An HTTP program's state (1 for the state it is in).");
	for (size_t i = 0; i < m->ngw; i++)
		for (size_t k = 0; k < sizeof states / sizeof states[0]; k++) {
			open_prog(w, "mesh_gateway_program_state", m->gw[i].name);
			meshd_metrics_put(w, ",state=\"%s\"} %d\n", states[k], !strcmp(states[k], m->gw[i].state));
		}
	const struct mesh_hist_bounds *gb = &mesh_gw_seconds_bounds;
	meshd_metrics_family(w, "mesh_gateway_requests_total", "counter",
	       "Requests for a catalog model, by the status class the client got (the program's or meshd's; 499: it left first).");
	for (size_t i = 0; i < m->ngw; i++)
		for (size_t k = 0; k < m->gw[i].nmodels; k++)
			for (int c = 0; c < MESH_GW_CODE__N; c++) {
				open_prog_model(w, "mesh_gateway_requests_total", m->gw[i].name, m->gw[i].models[k].model);
				meshd_metrics_put(w, ",code=\"%s\"} %llu\n", mesh_gw_code_name((enum mesh_gw_code)c),
						  (unsigned long long)m->gw[i].models[k].c.requests[c]);
			}
	static const struct {
		const char *name, *help;
		size_t off;
	} mh[] = {
		{"mesh_gateway_request_duration_seconds",
		 "Time from a request's head read to its answer's end (or the client's leaving), per catalog model.",
		 offsetof(struct mesh_gw_model_counts, latency)},
		{"mesh_gateway_time_to_first_byte_seconds",
		 "Time from a request's head read to the first byte of its answer's head, per catalog model.",
		 offsetof(struct mesh_gw_model_counts, ttfb)},
	};
	for (size_t h = 0; h < sizeof mh / sizeof mh[0]; h++) {
		meshd_metrics_family(w, mh[h].name, "histogram", mh[h].help);
		for (size_t i = 0; i < m->ngw; i++)
			for (size_t k = 0; k < m->gw[i].nmodels; k++)
				hist_lines(w, mh[h].name, m->gw[i].name, m->gw[i].models[k].model,
					   (const struct mesh_hist *)((const char *)&m->gw[i].models[k].c + mh[h].off), gb);
	}
	meshd_metrics_family(w, "mesh_gateway_responses_cut_total", "counter",
	       "Answers of an HTTP program begun that did not reach their end: it closed or died, or a limit passed (counted by their status too).");
	per_gw_u64(w, m, "mesh_gateway_responses_cut_total", offsetof(struct mesh_gw_prog_stats, cuts));
	meshd_metrics_family(w, "mesh_gateway_requests_in_flight", "gauge", "Requests relayed to an HTTP program now.");
	for (size_t i = 0; i < m->ngw; i++) {
		open_prog(w, "mesh_gateway_requests_in_flight", m->gw[i].name);
		meshd_metrics_put(w, "} %u\n", m->gw[i].inflight);
	}
	meshd_metrics_family(w, "mesh_gateway_queue_length", "gauge", "Requests waiting for an HTTP program's start or a place.");
	for (size_t i = 0; i < m->ngw; i++) {
		open_prog(w, "mesh_gateway_queue_length", m->gw[i].name);
		meshd_metrics_put(w, "} %u\n", m->gw[i].queued);
	}
}

/* The gateway's program figures: starts and how they failed, crashes,
 * evictions, hung restarts, timeouts, the memory budget, the time to warm
 * and the queue's wait. */
static void render_gateway_programs(struct meshd_metrics_text *w, const struct meshd_metrics *m)
{
	static const char *const evict[3] = {"idle", "budget", "swap"}, *const limit[3] = {"request", "response", "idle_stream"};
	static const size_t evict_off[3] = {offsetof(struct mesh_gw_prog_stats, evict_idle),
					    offsetof(struct mesh_gw_prog_stats, evict_budget),
					    offsetof(struct mesh_gw_prog_stats, evict_swap)},
			    limit_off[3] = {offsetof(struct mesh_gw_prog_stats, timeouts_request),
					    offsetof(struct mesh_gw_prog_stats, timeouts_response),
					    offsetof(struct mesh_gw_prog_stats, timeouts_idle)};
	const struct mesh_hist_bounds *gb = &mesh_gw_seconds_bounds;
	meshd_metrics_family(w, "mesh_gateway_cold_starts_total", "counter", "HTTP program processes started.");
	per_gw_u64(w, m, "mesh_gateway_cold_starts_total", offsetof(struct mesh_gw_prog_stats, cold_starts));
	meshd_metrics_family(w, "mesh_gateway_start_failures_total", "counter",
	       "Starts of an HTTP program that failed (exited before warm, start timeout, could not run).");
	per_gw_u64(w, m, "mesh_gateway_start_failures_total", offsetof(struct mesh_gw_prog_stats, start_failures));
	meshd_metrics_family(w, "mesh_gateway_crashes_total", "counter", "HTTP program processes that died while warm.");
	per_gw_u64(w, m, "mesh_gateway_crashes_total", offsetof(struct mesh_gw_prog_stats, crashes));
	meshd_metrics_family(w, "mesh_gateway_evictions_total", "counter",
	       "HTTP program processes stopped: idle (past idle_ttl), budget (over the memory budget), swap (for another's start).");
	per_gw_by(w, m, "mesh_gateway_evictions_total", "reason", evict, evict_off);
	meshd_metrics_family(w, "mesh_gateway_hung_restarts_total", "counter",
	       "Warm HTTP program processes killed because their periodic probe kept failing.");
	per_gw_u64(w, m, "mesh_gateway_hung_restarts_total", offsetof(struct mesh_gw_prog_stats, hung_restarts));
	meshd_metrics_family(w, "mesh_gateway_timeouts_total", "counter",
	       "Requests past a limit: request (whole), response (first byte), idle_stream (between reads).");
	per_gw_by(w, m, "mesh_gateway_timeouts_total", "limit", limit, limit_off);
	uint64_t counted = 0;
	for (size_t i = 0; i < m->ngw; i++)
		counted += m->gw[i].counted;
	meshd_metrics_family(w, "mesh_gateway_memory_bytes", "gauge",
	       "The memory budget (--http-memory; 0: none), and what the HTTP programs with a process are counted at against it.");
	meshd_metrics_put(w, "mesh_gateway_memory_bytes{kind=\"counted\"} %llu\n", (unsigned long long)counted);
	meshd_metrics_put(w, "mesh_gateway_memory_bytes{kind=\"budget\"} %llu\n", (unsigned long long)m->gw_budget);
	meshd_metrics_family(w, "mesh_gateway_program_memory_bytes", "gauge",
	       "What an HTTP program is counted at in the memory budget: max(its memory, measured resident + GPU memory); 0 without a process.");
	per_gw_u64(w, m, "mesh_gateway_program_memory_bytes", offsetof(struct mesh_gw_prog_stats, counted));
	meshd_metrics_family(w, "mesh_gateway_time_to_warm_seconds", "histogram",
	       "Time from an HTTP program's spawn to its warm probe, over the starts that got warm.");
	for (size_t i = 0; i < m->ngw; i++)
		hist_lines(w, "mesh_gateway_time_to_warm_seconds", m->gw[i].name, NULL, &m->gw[i].warm, gb);
	meshd_metrics_family(w, "mesh_gateway_queue_seconds", "histogram",
	       "Time requests waited for an HTTP program's start or a place (those that waited).");
	for (size_t i = 0; i < m->ngw; i++)
		hist_lines(w, "mesh_gateway_queue_seconds", m->gw[i].name, NULL, &m->gw[i].queue, gb);
}

int meshd_metrics_render(const struct meshd_metrics *m, struct mesh_buf *out)
{
	struct meshd_metrics_text w = {out, 0};
	meshd_metrics_family(&w, "mesh_slots", "gauge", "Shared-memory slots meshd has.");
	meshd_metrics_put(&w, "mesh_slots %u\n", m->core.slots);
	meshd_metrics_family(&w, "mesh_slots_in_use", "gauge", "Slots given to a worker.");
	meshd_metrics_put(&w, "mesh_slots_in_use %u\n", m->core.slots_in_use);
	meshd_metrics_family(&w, "mesh_worker_processes", "gauge", "Live worker processes, every program.");
	meshd_metrics_put(&w, "mesh_worker_processes %u\n", m->core.processes);
	meshd_metrics_family(&w, "mesh_host_spawns_total", "counter", "Worker processes spawned since meshd started.");
	meshd_metrics_put(&w, "mesh_host_spawns_total %llu\n", (unsigned long long)m->core.spawns);
	meshd_metrics_family(&w, "mesh_host_crashes_total", "counter", "Worker crashes since meshd started.");
	meshd_metrics_put(&w, "mesh_host_crashes_total %llu\n", (unsigned long long)m->core.crashes);
	render_programs(&w, m);
	if (m->have_api) {
		meshd_metrics_family(&w, "mesh_api_ops_running", "gauge",
				     "Control API requests being answered now, by kind (a call waiting for a worker included).");
		meshd_metrics_put(&w, "mesh_api_ops_running{kind=\"call\"} %u\n", m->api_calls);
		meshd_metrics_put(&w, "mesh_api_ops_running{kind=\"other\"} %u\n", m->api_others);
	}
	if (m->have_jobs)
		render_jobs(&w, &m->jobs);
	if (m->have_gateway) {
		render_gateway_requests(&w, m);
		render_gateway_programs(&w, m);
	}
	return w.rc;
}

int meshd_metrics_text(const struct meshd_parts *p, struct mesh_buf *out)
{
	struct meshd_metrics m = {0};
	struct mesh_gw *g = p->gw;
	int rc = meshd_op_metrics(p->core, &m.core);
	if (rc)
		return rc;
	m.have_jobs = meshd_api_jobs_metrics(p->jobs, &m.jobs) == 0;
	struct meshd_api *a = p->api;
	if (a) {
		meshd_api_running(a, &m.api_calls, &m.api_others);
		m.have_api = 1;
	}
	if (g) {
		rc = mesh_gw_stats(g, &m.gw, &m.ngw);
		if (rc) {
			meshd_metrics_release(&m);
			return rc;
		}
		m.have_gateway = 1;
		m.gw_budget = mesh_gw_memory_budget(g);
	}
	rc = meshd_metrics_render(&m, out);
	rc = rc ? rc : meshd__gpu_metrics(p->core, out); /* GPU families: meshd/api/metrics_gpu.c */
	meshd_metrics_release(&m);
	return rc;
}

/* The TCP listener, on the core's event loop (meshd_core_base, ops.h)
 * beside the control API: a scrape renders from the core's structs under
 * short locks (never waiting on a worker), and the API's blocking ops run
 * on threads of their own, so a scrape never waits behind them. */
struct meshd_metrics_server {
	const struct meshd_parts *parts;
	struct event_base *base; /* the core's */
	struct evhttp *http;
	int fd, port;
};

static void on_scrape(struct evhttp_request *req, void *arg)
{
	struct meshd_metrics_server *s = arg;
	const char *uri = evhttp_request_get_uri(req);
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	struct evbuffer *body = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	struct mesh_buf b = MESH_BUF_INIT;
	size_t plen = uri ? strcspn(uri, "?") : 0;
	if (!body) {
		evhttp_send_error(req, 503, NULL);
		return;
	}
	if (!uri || plen != 8 || strncmp(uri, "/metrics", 8)) {
		evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
		evbuffer_add_printf(body, "not found: this listener serves GET /metrics only\n");
		evhttp_send_reply(req, 404, "Not Found", body);
	} else if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
		evhttp_add_header(h, "Allow", "GET, HEAD");
		evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
		evbuffer_add_printf(body, "method not allowed\n");
		evhttp_send_reply(req, 405, "Method Not Allowed", body);
	} else if (meshd_metrics_text(s->parts, &b) < 0 || evbuffer_add(body, b.p ? b.p : "", b.len) < 0) {
		evhttp_send_error(req, 503, NULL);
	} else {
		evhttp_add_header(h, "Content-Type", MESHD_METRICS_CONTENT_TYPE);
		evhttp_send_reply(req, 200, "OK", body);
	}
	mesh_buf_release(&b);
	evbuffer_free(body);
}

static void server_free(struct meshd_metrics_server *s)
{
	if (s->http)
		evhttp_free(s->http);
	if (s->fd >= 0)
		close(s->fd);
	free(s);
}

int meshd_metrics_serve_start(struct meshd_metrics_server **out, const struct meshd_parts *p, const char *addr,
			      int allow_public, char **err)
{
	struct sockaddr_storage ss;
	socklen_t len = 0;
	int loopback = 0, rc, one = 1;
	*out = NULL;
	if (err)
		*err = NULL;
	if (mesh_addr_parse(addr, &ss, &len, &loopback) < 0)
		return mesh_errf(err, MESH_E_PARSE,
				 "metrics address '%s' is not HOST:PORT (a numeric IPv4 host, [IPv6] or localhost)", addr);
	if (!loopback && !allow_public)
		return mesh_errf(err, MESH_E_REFUSED,
				 "metrics address '%s' is not a loopback address: give --metrics-public to serve "
				 "metrics beyond this machine",
				 addr);
	struct meshd_metrics_server *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->parts = p;
	s->fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->fd < 0) {
		rc = -errno;
		server_free(s);
		return mesh_errf(err, rc, "socket: %s", strerror(-rc));
	}
	setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(s->fd, (struct sockaddr *)&ss, len) < 0 || listen(s->fd, 64) < 0) {
		rc = -errno;
		server_free(s);
		return mesh_errf(err, rc, "cannot listen on '%s': %s", addr, strerror(-rc));
	}
	struct sockaddr_storage got;
	socklen_t gl = sizeof got;
	if (getsockname(s->fd, (struct sockaddr *)&got, &gl) == 0)
		s->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
							  : ((struct sockaddr_in *)&got)->sin_port);
	s->base = meshd_core_base(p->core);
	s->http = evhttp_new(s->base);
	if (!s->http) {
		server_free(s);
		return mesh_errf(err, -ENOMEM, "cannot set up the metrics listener: out of memory");
	}
	evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
						    EVHTTP_REQ_DELETE);
	evhttp_set_max_body_size(s->http, 4096);
	evhttp_set_max_headers_size(s->http, 32768);
	evhttp_set_timeout(s->http, 30);
	evhttp_set_gencb(s->http, on_scrape, s);
	if (!evhttp_accept_socket_with_handle(s->http, s->fd)) {
		server_free(s);
		return mesh_errf(err, MESH_E_UNSUPPORTED, "cannot serve metrics on '%s'", addr);
	}
	*out = s;
	return 0;
}

/* Loop thread (or no loop runs): closes the listener and its connections. */
static void serve_stop(void *arg)
{
	struct meshd_metrics_server *s = arg;
	/* evhttp_free closes the listening socket it was given. */
	evhttp_free(s->http);
	s->http = NULL;
	s->fd = -1;
	server_free(s);
}

int meshd_metrics_serve_port(const struct meshd_metrics_server *s)
{
	return s ? s->port : 0;
}

void meshd_metrics_serve_stop(struct meshd_metrics_server *s)
{
	if (!s)
		return;
	/* On the loop's thread: evhttp is not thread-safe. */
	meshd_core_on_loop(s->parts->core, serve_stop, s);
}
