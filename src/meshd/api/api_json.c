/* meshd's control API (api_int.h): the answers an op thread makes, and
 * the core's answers (meshd/core/ops.h: plain structs) rendered as JSON. */
#include "meshd/api/api_int.h"

#include "autoscale/policy.h"
#include "base/err.h"
#include "base/utf8.h"
#include "meshd/api/api_gpu.h"
#include "host/manifest.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int meshd_api_name_ok(const char *name)
{
	return name && mesh_manifest_name_ok(name);
}

int meshd_api_status_for(int err)
{
	switch (err) {
	case 0:
		return 200;
	case MESH_E_NOTFOUND:
	case -ENOENT:
		return 404;
	case MESH_E_STATE:
	case MESH_E_STOPPED:
	case MESH_E_MISMATCH:
	case -EBUSY:
	case -EEXIST:
	case -EALREADY:
		return 409;
	case MESH_E_TOOBIG:
	case -E2BIG:
	case -EMSGSIZE:
		return 413;
	/* The catalog entry is what is wrong, not the request. */
	case MESH_E_PARSE:
	case MESH_E_CORRUPT:
	case MESH_E_VERSION:
	case MESH_E_RANGE:
	case MESH_E_PATH:
	case MESH_E_REFUSED:
	case MESH_E_UNSUPPORTED:
	case MESH_E_SCRIPT:
	case MESH_E_ARCH:
	case MESH_E_NOGPU:
	case MESH_E_LIMITS:
	case MESH_E_HANDLER:
	case -ENOEXEC:
		return 422;
	case MESH_E_CRASHED:
	case MESH_E_PROTO:
	case MESH_E_CLOSED:
		return 502;
	case -EAGAIN:
	case -ENOMEM:
	case -EMFILE:
	case -ENFILE:
	case -ENOSPC:
		return 503;
	case MESH_E_TIMEOUT:
	case -ETIMEDOUT:
		return 504;
	case -EINVAL:
		return 400;
	}
	return 500;
}

/* The answer: data (owned, or static when mode_static) goes out as is. */
void meshd__set_answer(struct job *j, unsigned status, const char *type, char *data, size_t n, int is_static)
{
	j->status = status;
	j->type = type;
	j->data = data;
	j->len = n;
	j->data_static = is_static;
}

/* The JSON body j (consumed). */
void meshd__send_json(struct job *jb, unsigned status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	json_decref(j);
	static char oom[] = "{\"error\":\"out of memory\",\"code\":\"ENOMEM\"}\n";
	if (!s) {
		meshd__set_answer(jb, 503, "application/json", oom, sizeof oom - 1, 1);
		return;
	}
	size_t n = strlen(s);
	char *t = realloc(s, n + 2); /* a newline, for curl in a terminal */
	if (t) {
		t[n++] = '\n';
		t[n] = 0;
		s = t;
	}
	meshd__set_answer(jb, status, "application/json", s, n, 0);
}

/* A JSON string of text that may hold any bytes (a worker's output, a
 * path): invalid UTF-8 becomes U+FFFD, so the text is never refused. */
static json_t *text_json(const char *s)
{
	json_t *j = json_string(s);
	if (j || !s)
		return j;
	char *t = mesh_utf8_sanitize(s, strlen(s), NULL);
	j = t ? json_string(t) : NULL;
	free(t);
	return j;
}

/* {"error": msg or the error's text, "code": its name}; NULL: no memory. */
static json_t *error_json(int err, const char *msg)
{
	return json_pack("{s:o, s:s}", "error", text_json(msg && *msg ? msg : mesh_strerror(err)), "code",
			 mesh_err_name(err));
}

char *meshd_api_error_body(int err, const char *msg, size_t *len)
{
	json_t *j = error_json(err, msg);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (s && len)
		*len = strlen(s);
	return s;
}

void meshd__send_error(struct job *jb, unsigned status, int err, const char *msg)
{
	meshd__send_json(jb, status, error_json(err, msg));
}

void meshd__send_errorf(struct job *jb, unsigned status, int err, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	meshd__send_error(jb, status, err, msg);
}

/* An op failed: its message (freed here), or the error's text. */
void meshd__send_op_error(struct job *jb, int err, char *msg)
{
	meshd__send_error(jb, (unsigned)meshd_api_status_for(err), err, msg);
	free(msg);
}

void meshd__send_ok(struct job *jb, const char *name, const char *action, json_t *extra)
{
	json_t *j = json_pack("{s:b, s:s, s:s}", "ok", 1, "name", name, "action", action);
	if (j && extra && json_object_set(j, "result", extra) < 0) {
		json_decref(j);
		j = NULL;
	}
	json_decref(extra);
	meshd__send_json(jb, 200, j);
}

void meshd__send_method_not_allowed(struct job *jb, const char *allow)
{
	json_t *j = json_pack("{s:s, s:s}", "error", "method not allowed", "code", mesh_err_name(MESH_E_PROTO));
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	json_decref(j);
	if (!s) {
		meshd__send_json(jb, 503, NULL);
		return;
	}
	meshd__set_answer(jb, 405, "application/json", s, strlen(s), 0);
	jb->allow = allow;
}

/* An image id (mesh_image_id) as shown: its first 12 hex digits; null for 0. */
static json_t *image_json(uint64_t id)
{
	char b[24];
	snprintf(b, sizeof b, "%016llx", (unsigned long long)id);
	b[12] = 0;
	return id ? json_string(b) : json_null();
}

/* The core answers with structs (meshd/core/ops.h); here they become JSON. */
json_t *meshd__program_json(const struct meshd_program_info *pi)
{
	char lim[256], ih[24], bh[24];
	mesh_limits_describe(pi->limits, lim, sizeof lim);
	snprintf(ih, sizeof ih, "%016llx", (unsigned long long)pi->image_hash);
	snprintf(bh, sizeof bh, "%016llx", (unsigned long long)pi->bin_hash);
	/* The savings (struct meshd_savings: one definition, one window). */
	const struct meshd_savings *sv = &pi->savings;
	json_t *o = json_pack("{s:s, s:s, s:o, s:s, s:s, s:I, s:I, s:s, s:o, s:o, s:I, s:f, s:f, s:f, s:f, s:I}", "name", pi->name,
			 "device", pi->gpu ? "gpu" : "cpu", "binary", text_json(pi->binary), "image_hash", ih, "bin_hash",
			 bh, "bin_bytes", (json_int_t)pi->bin_bytes, "max_workers", (json_int_t)pi->max_workers, "limits",
			 lim, "image", image_json(pi->image_id), "previous_image", image_json(pi->prev_id), "warm",
			 (json_int_t)pi->warm, "warm_seconds", (double)sv->warm_ns / 1e9, "always_on_seconds",
			 (double)sv->always_ns / 1e9, "savings", sv->permil / 1000.0, "window_seconds",
			 (double)sv->window_ns / 1e9, "window_since", (json_int_t)sv->since);
	/* Its cold starts since it was loaded (spawn -> ready). */
	if (o) {
		json_object_set_new(o, "cold_starts", json_integer((json_int_t)pi->cold_starts));
		json_object_set_new(o, "cold_start_mean_s",
				    pi->cold_starts ? json_real((double)pi->cold_sum_ns / (double)pi->cold_starts / 1e9) : json_null());
		json_object_set_new(o, "cold_start_last_s", pi->cold_starts ? json_real((double)pi->cold_last_ns / 1e9) : json_null());
		/* Its warm/cold changes, oldest first: [unix ms, 1 warm | 0 cold]. */
		json_t *h = json_array();
		for (unsigned i = 0; h && i < pi->nwarm_hist; i++)
			json_array_append_new(h, json_pack("[I, i]", (json_int_t)pi->warm_hist[i].at_ms, pi->warm_hist[i].warm));
		json_object_set_new(o, "warm_history", h ? h : json_null());
	}
	return o;
}

static json_t *worker_json(const struct meshd_worker_info *wi)
{
	const struct mesh_instance_stats *st = &wi->st;
	char el[256] = "";
	if (st->pid)
		mesh_limits_describe(st->limits, el, sizeof el);
	json_t *o = json_pack("{s:s, s:I, s:o, s:f, s:I, s:I, s:I, s:I, s:o, s:s, s:o, s:s, s:I, s:o, s:b, s:b}", "state",
			 mesh_istate_name(st->state), "pid", (json_int_t)st->pid, "slot",
			 wi->slot >= 0 ? json_integer(wi->slot) : json_null(), "cpu_pct", st->cpu_pct, "rss", (json_int_t)st->rss,
			 "cpu_ns", (json_int_t)st->cpu_ns, "spawns", (json_int_t)st->spawns, "crashes", (json_int_t)st->crashes,
			 "last_exit", st->last_exit >= 0 ? json_integer(st->last_exit) : json_null(), "limits_enforced", el,
			 "ring", wi->ring ? json_integer((json_int_t)wi->ring) : json_null(), "containment",
			 st->pid ? mesh_limits_containment_name(st->containment) : "", "processes", (json_int_t)st->procs,
			 "image", image_json(wi->image_id), "retired", wi->retired, "busy", wi->busy);
	json_t *g = o ? meshd__gpu_worker_json(wi) : NULL;
	if (g)
		json_object_set_new(o, "gpu", g);
	return o;
}

/* {"host": {...}, "programs": [{..., "workers": [...]}, ...]}; NULL: no memory. */
json_t *meshd__ps_json(const struct meshd_ps *ps)
{
	char lim[320];
	mesh_limits_describe(ps->caps.avail, lim, sizeof lim);
	json_t *progs = json_array();
	for (unsigned i = 0; progs && i < ps->nprograms; i++) {
		const struct meshd_program_info *pi = &ps->programs[i];
		json_t *ws = json_array(), *pj = meshd__program_json(pi);
		for (unsigned k = 0; ws && k < pi->nworkers; k++)
			json_array_append_new(ws, worker_json(&pi->workers[k]));
		if (!ws || !pj || json_object_set_new(pj, "spawns", json_integer(pi->spawns)) ||
		    json_object_set_new(pj, "failed", pi->failed ? text_json(pi->failed) : json_null()) ||
		    json_object_set_new(pj, "crashes", json_integer(pi->crashes)) || json_object_set_new(pj, "workers", ws) ||
		    json_array_append_new(progs, pj)) {
			json_decref(progs);
			progs = NULL;
		}
	}
	if (!progs)
		return NULL;
	json_t *o = json_pack("{s:{s:I, s:f, s:I, s:I, s:I, s:s, s:s, s:s, s:s, s:I}, s:o}", "host", "processes",
			 (json_int_t)ps->host.procs, "cpu_pct", ps->host.cpu_pct, "rss", (json_int_t)ps->host.rss, "spawns",
			 (json_int_t)ps->host.spawns, "crashes", (json_int_t)ps->host.crashes, "limits_available", lim,
			 "cgroup", *ps->caps.cgroup_why ? ps->caps.cgroup_why : "delegated", "containment",
			 mesh_limits_containment_name(ps->caps.contain), "containment_why", ps->caps.contain_why, "slots",
			 (json_int_t)ps->slots, "programs", progs);
	json_t *g = o ? meshd__gpu_ps_json(ps) : NULL;
	if (g)
		json_object_set_new(o, "gpu", g);
	return o;
}

json_t *meshd__event_json(const struct meshd_event *e)
{
	json_t *o = json_pack("{s:I}", "at", (json_int_t)e->at_ms);
	if (!o)
		return NULL;
	json_object_set_new(o, "program", text_json(e->name));
	switch (e->kind) {
	case MESHD_EV_WORKER:
		json_object_set_new(o, "worker", json_integer((json_int_t)e->n[0]));
		json_object_set_new(o, "pid", json_integer((json_int_t)e->id));
		json_object_set_new(o, "state", json_string(e->word));
		break;
	case MESHD_EV_CRASH:
		if (e->text)
			json_object_set_new(o, "report", text_json(e->text));
		break;
	case MESHD_EV_JOB:
		json_object_set_new(o, "id", json_integer((json_int_t)e->id));
		json_object_set_new(o, "state", json_string(e->word));
		json_object_set_new(o, "done", json_integer((json_int_t)e->n[0]));
		json_object_set_new(o, "buried", json_integer((json_int_t)e->n[1]));
		json_object_set_new(o, "chunks", json_integer((json_int_t)e->n[2]));
		break;
	case MESHD_EV_SAVINGS:
		json_object_set_new(o, "window_s", json_real((double)e->n[0] / 1000));
		json_object_set_new(o, "warm_s", json_real((double)e->n[1] / 1000));
		json_object_set_new(o, "always_on_s", json_real((double)e->n[2] / 1000));
		json_object_set_new(o, "saved", json_real((double)e->n[3] / 1000));
		break;
	case MESHD_EV_REQUEST:
		if (e->text)
			json_object_set_new(o, "model", text_json(e->text));
		json_object_set_new(o, "status", json_integer((json_int_t)e->n[0]));
		json_object_set_new(o, "ms", json_real((double)e->n[1] / 1000));
		json_object_set_new(o, "cold", json_boolean(e->n[2] != 0));
		break;
	default:
		break;
	}
	return o;
}
