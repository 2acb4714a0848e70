/* mesh load|unload|rollback|start|stop|ps|logs|call: thin clients of meshd's control
 * API (docs/api.md) over its unix socket. */
#include "base/err.h"
#include "base/parse.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "client/api_client.h"
#include "host/manifest.h"
#include "shm/ring.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CALL_BODY_MAX MESH_MSG_MAX
#define LOGS_MAX (1u << 20)
/* How long mesh waits for meshd beyond what the operation itself may take. */
#define SLACK_NS (10ull * 1000000000ull)
#define OP_TIMEOUT_NS (600ull * 1000000000ull)

struct opts {
	char sock[PATH_MAX];
	const char *name;
	const char *payload;
	int json;
	int verbose; /* ps -v: the host's limits, containment and GPUs too */
	int have_lines, have_tail;
	uint64_t lines, tail, timeout_ns;
};

static const char *const helps[][2] = {
	{"load", "usage: mesh load <name> [--socket PATH]\n\n"
		 "Loads <name> from meshd's catalog: manifest, binary, image hash, limits.\n"
		 "No process starts yet.  Loaded already: the catalog is read again, and a changed\n"
		 "image (manifest or binary) is an upgrade: new calls and job chunks go to workers of\n"
		 "the new image, the old image's workers finish what they hold and exit, and the old\n"
		 "image becomes the one `mesh rollback` goes back to.  The same image changes nothing.\n"},
	{"rollback", "usage: mesh rollback <name> [--socket PATH]\n\n"
		     "Goes back to <name>'s previous image (the one before the last `mesh load` that\n"
		     "changed it), from the copy meshd kept, as an upgrade does: in-flight work finishes\n"
		     "on the current image's workers.  A second rollback goes forward again.  No\n"
		     "previous image: exit 65.\n"},
	{"unload", "usage: mesh unload <name> [--socket PATH]\n\n"
		   "Its workers exit (the stop signal, SIGKILL after the grace) and the image is forgotten.\n"},
	{"start", "usage: mesh start <name> [--socket PATH]\n\n"
		  "Starts a worker of <name> now (loading it first if needed) and waits for it to say ready.\n"
		  "An HTTP program of meshd --http: starts it (preload) and waits until it is warm.\n"},
	{"stop", "usage: mesh stop <name> [--socket PATH]\n\n"
		 "Its workers exit (the stop signal, SIGKILL of the process group after the grace);\n"
		 "the program stays loaded.  An HTTP program of meshd --http: its requests in flight\n"
		 "end first, then it stops; the next request starts it again.\n"},
	{"reload", "usage: mesh reload [--socket PATH]\n\n"
		   "meshd reads its catalog's manifests again (as SIGHUP does) and prints what\n"
		   "changed.  meshd --http's HTTP programs: \"reloaded: 1 changed (a), 1 added (c), 1 removed (b), 1 refused (d: why),\n"
		   "2 unchanged\".  An unchanged program goes on (same process); a changed one ends its\n"
		   "requests in flight on its old process, which then stops, and its next request starts\n"
		   "the new definition; a removed one ends its requests, stops, and its models answer\n"
		   "404; a new one is served from now.  A manifest that does not read (FILE:LINE:COL) or\n"
		   "whose model another program serves is refused: that program keeps its definition,\n"
		   "the rest is done, and mesh exits 65.  Every loaded native program is read again\n"
		   "too, as `mesh load NAME` does (a changed image is an upgrade), in a second line.\n"},
	{"ps", "usage: mesh ps [-v] [--json] [--socket PATH]\n\n"
	       "The stats table: per worker its state (warm: ready, no work; busy: a call or a job on\n"
	       "it; starting, launching, halting, stopping), pid, cpu %, resident memory ('-' until\n"
	       "first sampled), spawns, crashes, last exit and the limits really enforced; then the\n"
	       "host totals.  -v: also what limits this host can enforce, how workers are contained,\n"
	       "and its GPUs.  --json prints meshd's answer as it is (docs/api.md).\n"},
	{"logs", "usage: mesh logs <name> [-n LINES | --tail BYTES] [--socket PATH]\n\n"
		 "Prints <name>'s output log (<logs>/<name>.log on meshd's side), at most its last\n"
		 "1 MiB; -n the last LINES lines, --tail the last BYTES bytes.\n"},
	{"socket", "usage: mesh socket [--socket PATH]\n\n"
		   "Prints the path of the control socket the other commands talk to (for curl\n"
		   "--unix-socket), whether or not a meshd serves it now.\n"},
	{"call", "usage: mesh call <name> <payload | -> [--timeout S] [--socket PATH]\n\n"
		 "Sends one request through the slot of a warm worker of <name> (one is started when\n"
		 "none is warm) and prints its reply bytes as they are; a reply the worker streams is\n"
		 "printed part by part as it comes.  '-' reads the payload from stdin (at most\n"
		 "16 MiB).  --timeout: how long to wait for the reply (default 60; 30, 500ms, 2m).\n"},
};

void mesh__meshd_cmd_help(const char *const tab[][2], size_t n, const char *cmd)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(tab[i][0], cmd))
			fputs(tab[i][1], stdout);
	fputs("\n--socket PATH: meshd's control socket; default $MESH_SOCKET, else\n"
	      "$XDG_RUNTIME_DIR/mesh/meshd.sock, else /tmp/mesh-<uid>/meshd.sock.\n"
	      "Exit codes: `mesh help exit-codes`; 69 when meshd cannot be reached.\n",
	      stdout);
}

static void print_help(const char *cmd)
{
	mesh__meshd_cmd_help(helps, sizeof helps / sizeof helps[0], cmd);
}

/* Parses argv; want_name / want_payload say which positionals cmd takes.
 * Returns -1 to go on, else the exit code. */
static int parse(int argc, char **argv, struct opts *o, int want_name, int want_payload)
{
	const char *cmd = argv[0];
	int npos = 0, dashdash = 0;
	memset(o, 0, sizeof *o);
	if (mesh_cli_wants_help(argc, argv)) {
		print_help(cmd);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = NULL;
		if (!dashdash && !strcmp(a, "--")) {
			dashdash = 1;
			continue;
		}
		if (!dashdash && a[0] == '-' && a[1]) {
			const char *eq = strchr(a, '=');
			size_t klen = eq ? (size_t)(eq - a) : strlen(a);
			int takes = (klen == 8 && !strncmp(a, "--socket", 8)) ||
				    (!strcmp(cmd, "logs") && ((klen == 2 && !strncmp(a, "-n", 2)) ||
							       (klen == 6 && !strncmp(a, "--tail", 6)))) ||
				    (!strcmp(cmd, "call") && klen == 9 && !strncmp(a, "--timeout", 9));
			if (!strcmp(cmd, "ps") && !strcmp(a, "--json")) {
				o->json = 1;
				continue;
			}
			if (!strcmp(cmd, "ps") && (!strcmp(a, "-v") || !strcmp(a, "--verbose"))) {
				o->verbose = 1;
				continue;
			}
			if (!takes) {
				char near[128];
				return mesh_cli_usage("%s: unknown option '%s'%s", cmd, a,
						      mesh_cli_did_you_mean(cmd, a, near, sizeof near));
			}
			if (eq)
				v = eq + 1;
			else if (i + 1 < argc)
				v = argv[++i];
			else
				return mesh_cli_usage("%s: %.*s needs a value", cmd, (int)klen, a);
			if (!strncmp(a, "--socket", 8)) {
				if (!*v || strlen(v) >= sizeof o->sock)
					return mesh_cli_usage("%s: --socket wants a path", cmd);
				strcpy(o->sock, v);
			} else if (!strncmp(a, "-n", 2) && klen == 2) {
				if (mesh_parse_u64(v, 1000000, &o->lines) < 0)
					return mesh_cli_usage("%s: -n wants a line count, not '%s'", cmd, v);
				o->have_lines = 1;
			} else if (!strncmp(a, "--tail", 6)) {
				if (mesh_parse_size(v, LOGS_MAX, &o->tail) < 0)
					return mesh_cli_usage("%s: --tail wants a byte count up to 1M, not '%s'", cmd, v);
				o->have_tail = 1;
			} else {
				if (mesh_parse_duration(v, 3600ull * 1000000000ull, &o->timeout_ns) < 0 ||
				    !o->timeout_ns)
					return mesh_cli_usage("%s: --timeout wants a duration (0 < T <= 1h: 30, 250ms, 5m), not '%s'",
							      cmd, v);
			}
			continue;
		}
		if (npos == 0 && want_name)
			o->name = a;
		else if (npos == 1 && want_payload)
			o->payload = a;
		else
			return mesh_cli_usage("%s: unexpected argument '%s'", cmd, a);
		npos++;
	}
	if (want_name && !o->name)
		return mesh_cli_usage("%s: which program? (mesh %s <name>)", cmd, cmd);
	if (want_payload && !o->payload)
		return mesh_cli_usage("%s: no payload (give it, or '-' for stdin)", cmd);
	if (o->name && !mesh_manifest_name_ok(o->name))
		return mesh_cli_usage("%s: bad program name '%s': 1 to 64 letters, digits, '_' or '-'", cmd, o->name);
	if (o->have_lines && o->have_tail)
		return mesh_cli_usage("%s: -n and --tail exclude each other", cmd);
	if (!o->sock[0] && meshd_socket_default(o->sock, sizeof o->sock) < 0)
		return mesh_cli_usage("%s: the default socket path is too long; give --socket PATH", cmd);
	return -1;
}

/* One request; on failure prints why and returns the exit code, else -1. */
/* Where a streamed answer goes as it arrives: stdout, flushed per piece. */
struct out_stream {
	uint64_t bytes;
};

static int write_out(void *arg, const void *p, size_t n)
{
	struct out_stream *os = arg;
	if (fwrite(p, 1, n, stdout) != n || fflush(stdout) != 0)
		return errno ? -errno : -EIO;
	os->bytes += n;
	return 0;
}

static int request_stream(const struct opts *o, const char *what, const char *method, const char *target,
			  const void *body, size_t n, uint64_t timeout_ns, struct out_stream *os, struct meshd_reply *r)
{
	int rc = meshd_client_request_stream(o->sock, method, target, body, n, timeout_ns, os ? write_out : NULL, os, r);
	if (rc == MESH_E_CLOSED && os && os->bytes) {
		/* meshd cut a streamed answer: the call failed after parts went out.
		 * An incomplete reply is a remote protocol failure, not "unreachable". */
		fprintf(stderr,
			"mesh: %s: the reply stopped after %llu bytes (the call failed after part of it was sent; "
			"meshd's log says why)\n",
			what, (unsigned long long)os->bytes);
		return mesh_exit_for(MESH_E_PROTO);
	}
	if (rc < 0 && os && os->bytes)
		return mesh_cli_fail(rc, "%s: after %llu bytes of the reply", what, (unsigned long long)os->bytes);
	if (rc < 0) {
		if (meshd_client_unreachable(rc)) {
			fprintf(stderr, "mesh: cannot reach meshd at '%s': %s\n", o->sock, mesh_strerror(rc));
			return MESH_EXIT_UNAVAILABLE;
		}
		if (rc == MESH_E_PEER) {
			fprintf(stderr, "mesh: refusing to talk to '%s': %s; nothing was sent\n", o->sock,
				mesh_strerror(rc));
			return mesh_exit_for(rc);
		}
		return mesh_cli_fail(rc, "%s: no answer from meshd at '%s'", what, o->sock);
	}
	if (r->status >= 400) {
		char *msg = NULL;
		int err = meshd_reply_error(r, &msg);
		json_t *j = json_loadb(r->body, r->len, 0, NULL);
		const char *tail = j ? json_string_value(json_object_get(j, "tail")) : NULL;
		fprintf(stderr, "mesh: %s: %s\n", what, msg ? msg : "error");
		if (tail && *tail) {
			size_t tl = strlen(tail);
			fprintf(stderr, "mesh: its last output:\n%s%s", tail, tail[tl - 1] == '\n' ? "" : "\n");
		}
		json_decref(j);
		free(msg);
		meshd_reply_release(r);
		return mesh_exit_for(err);
	}
	return -1;
}

static int request(const struct opts *o, const char *what, const char *method, const char *target, const void *body,
		   size_t n, uint64_t timeout_ns, struct meshd_reply *r)
{
	return request_stream(o, what, method, target, body, n, timeout_ns, NULL, r);
}

static int simple(int argc, char **argv, const char *verb_done)
{
	struct opts o;
	struct meshd_reply r;
	char target[128], what[128];
	int ex = parse(argc, argv, &o, 1, 0);
	if (ex >= 0)
		return ex;
	snprintf(target, sizeof target, "/v1/programs/%s/%s", o.name, argv[0]);
	snprintf(what, sizeof what, "cannot %s '%s'", argv[0], o.name);
	ex = request(&o, what, "POST", target, NULL, 0, OP_TIMEOUT_NS, &r);
	if (ex >= 0)
		return ex;
	json_t *j = json_loadb(r.body, r.len, 0, NULL);
	json_t *res = j ? json_object_get(j, "result") : NULL;
	json_t *pid = res ? json_object_get(res, "pid") : NULL;
	json_t *prev = res ? json_object_get(res, "previous_image") : NULL;
	if (!strcmp(argv[0], "load") && json_is_true(json_object_get(res, "replaced")))
		verb_done = "upgraded";
	printf("%s %s", verb_done, o.name);
	json_t *lim = res ? json_object_get(res, "limits") : NULL;
	json_t *img = res ? json_object_get(res, "image") : NULL;
	if (json_is_integer(pid))
		printf(" (pid %lld)", (long long)json_integer_value(pid));
	if (json_is_string(img) && json_is_true(json_object_get(res, "replaced")) && json_is_string(prev))
		printf(" (image %s -> %s)", json_string_value(prev), json_string_value(img));
	else if (json_is_string(img))
		printf(" (image %s)", json_string_value(img));
	if (json_is_string(lim) && strcmp(json_string_value(lim), "none") != 0)
		printf(" (limits: %s)", json_string_value(lim));
	printf("\n");
	json_decref(j);
	meshd_reply_release(&r);
	return 0;
}

int mesh_cmd_load(int argc, char **argv)
{
	return simple(argc, argv, "loaded");
}

int mesh_cmd_reload(int argc, char **argv)
{
	struct opts o;
	struct meshd_reply r;
	int ex = parse(argc, argv, &o, 0, 0);
	if (ex >= 0)
		return ex;
	ex = request(&o, "cannot reload the catalog", "POST", "/v1/reload", NULL, 0, OP_TIMEOUT_NS, &r);
	if (ex >= 0)
		return ex;
	json_t *j = json_loadb(r.body, r.len, 0, NULL);
	const char *line = json_string_value(json_object_get(j, "summary"));
	printf("%s\n", line ? line : "reloaded");
	json_decref(j);
	meshd_reply_release(&r);
	return 0;
}

int mesh_cmd_unload(int argc, char **argv)
{
	return simple(argc, argv, "unloaded");
}

int mesh_cmd_rollback(int argc, char **argv)
{
	return simple(argc, argv, "rolled back");
}

int mesh_cmd_start(int argc, char **argv)
{
	return simple(argc, argv, "started");
}

int mesh_cmd_stop(int argc, char **argv)
{
	return simple(argc, argv, "stopped");
}

static json_t *field(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(o, a);
	return v || !b ? v : json_object_get(o, b);
}

static void fmt_num(char *buf, size_t n, json_t *v)
{
	if (json_is_integer(v))
		snprintf(buf, n, "%lld", (long long)json_integer_value(v));
	else if (json_is_real(v))
		snprintf(buf, n, "%.1f", json_real_value(v));
	else if (json_is_string(v))
		snprintf(buf, n, "%s", json_string_value(v));
	else
		snprintf(buf, n, "-");
}

static void fmt_bytes(char *buf, size_t n, json_t *v)
{
	double b;
	if (!json_is_number(v)) {
		snprintf(buf, n, "-");
		return;
	}
	b = json_number_value(v);
	if (b < 1024)
		snprintf(buf, n, "%.0fB", b);
	else if (b < 1024.0 * 1024)
		snprintf(buf, n, "%.1fK", b / 1024);
	else if (b < 1024.0 * 1024 * 1024)
		snprintf(buf, n, "%.1fM", b / (1024.0 * 1024));
	else
		snprintf(buf, n, "%.2fG", b / (1024.0 * 1024 * 1024));
}

static void fmt_pct(char *buf, size_t n, json_t *v)
{
	if (json_is_number(v))
		snprintf(buf, n, "%.1f", json_number_value(v));
	else
		snprintf(buf, n, "-");
}

/* "exit 0", "signal 9 (137)", or what meshd said. */
static void fmt_exit(char *buf, size_t n, json_t *v)
{
	if (json_is_integer(v)) {
		long long x = json_integer_value(v);
		if (x > 128 && x < 128 + 65)
			snprintf(buf, n, "%lld(SIG%s)", x, sigabbrev_np((int)(x - 128)) ? sigabbrev_np((int)(x - 128)) : "?");
		else
			snprintf(buf, n, "%lld", x);
	} else if (json_is_string(v)) {
		snprintf(buf, n, "%s", json_string_value(v));
	} else {
		snprintf(buf, n, "-");
	}
}

/* The enforced limits as "mem=512M(rlimit) nofile=1024(rlimit)"; "-" if none. */
static void fmt_limits(char *buf, size_t n, json_t *v)
{
	size_t w = 0;
	buf[0] = 0;
	if (json_is_string(v)) {
		snprintf(buf, n, "%s", json_string_value(v));
	} else if (json_is_array(v)) {
		size_t i;
		json_t *e;
		json_array_foreach(v, i, e)
		{
			if (json_is_string(e) && w < n)
				w += (size_t)snprintf(buf + w, n - w, "%s%s", w ? "," : "", json_string_value(e));
		}
	} else if (json_is_object(v)) {
		const char *k;
		json_t *e;
		json_object_foreach(v, k, e)
		{
			char val[64];
			if (json_is_false(e) || json_is_null(e))
				continue;
			fmt_num(val, sizeof val, e);
			if (w < n)
				w += (size_t)snprintf(buf + w, n - w, "%s%s=%s", w ? "," : "", k,
						      json_is_true(e) ? "yes" : val);
		}
	}
	if (!buf[0])
		snprintf(buf, n, "-");
}

/* A GPU worker's " vram=5.00G gpus=0 gpu=live last-free=312ms" (or ""). */
static void fmt_gpu(char *buf, size_t n, json_t *g)
{
	char vram[32], ttf[48] = "", gpus[64] = "";
	size_t i, w = 0;
	json_t *e;
	buf[0] = 0;
	if (!json_is_object(g))
		return;
	fmt_bytes(vram, sizeof vram, json_object_get(g, "vram"));
	json_array_foreach(json_object_get(g, "gpus"), i, e)
	{
		if (w < sizeof gpus)
			w += (size_t)snprintf(gpus + w, sizeof gpus - w, "%s%lld", w ? "," : "", json_integer_value(e));
	}
	json_t *t = json_object_get(g, "time_to_free_ms");
	if (!json_is_integer(t))
		t = json_object_get(g, "last_time_to_free_ms");
	if (json_is_integer(t))
		snprintf(ttf, sizeof ttf, " time_to_free=%lldms", json_integer_value(t));
	snprintf(buf, n, "  vram=%s gpus=%s gpu=%s%s", vram, *gpus ? gpus : "-",
		 json_string_value(json_object_get(g, "state")) ? json_string_value(json_object_get(g, "state")) : "?",
		 ttf);
}

/* "gpu: none (why)" or one line per GPU. */
/* The GPUs meshd places workers on; "gpu: none (why)" only when verbose. */
static void print_gpus(json_t *g, int verbose)
{
	size_t i;
	json_t *d;
	if (!json_is_object(g))
		return;
	const char *none = json_string_value(json_object_get(g, "none"));
	if (none && verbose)
		printf("gpu: none (%s)\n", none);
	json_t *mps = json_object_get(g, "mps");
	if (json_is_object(mps))
		printf("mps: control daemon %s by meshd, pipe directory %s\n",
		       json_string_value(json_object_get(mps, "daemon")) ? json_string_value(json_object_get(mps, "daemon")) : "?",
		       json_string_value(json_object_get(mps, "pipe_dir")) ? json_string_value(json_object_get(mps, "pipe_dir")) : "?");
	json_array_foreach(json_object_get(g, "devices"), i, d)
	{
		char used[32], total[32], fr[32], res[32];
		fmt_bytes(used, sizeof used, json_object_get(d, "used"));
		fmt_bytes(total, sizeof total, json_object_get(d, "total"));
		fmt_bytes(fr, sizeof fr, json_object_get(d, "free"));
		fmt_bytes(res, sizeof res, json_object_get(d, "reserved"));
		printf("gpu %lld: %s, used %s of %s, free %s, reserved %s, %lld workers, %lld draining\n",
		       json_integer_value(json_object_get(d, "index")),
		       json_string_value(json_object_get(d, "name")) ? json_string_value(json_object_get(d, "name")) : "?",
		       used, total, fr, res, json_integer_value(json_object_get(d, "workers")),
		       json_integer_value(json_object_get(d, "draining")));
	}
}

/* One row: a worker of prog, or prog itself when it has none. */
static void print_row(json_t *prog, json_t *wk)
{
	char pid[32], cpu[32], rss[32], spawns[32], crashes[32], lastx[48], lim[256], image[24];
	json_t *src = wk ? wk : prog;
	json_t *jpid = json_object_get(src, "pid");
	const char *name = json_string_value(json_object_get(prog, "name"));
	const char *state = json_string_value(json_object_get(src, "state"));
	int running = json_is_integer(jpid) && json_integer_value(jpid) > 0;
	char word[16];
	if (!wk) {
		state = "loaded";
	} else if (state && (!strcmp(state, "IDLE") || !strcmp(state, "RUNNING"))) {
		/* Both are warm (IDLE: halted off its slot); busy when it works. */
		state = json_is_true(json_object_get(wk, "busy")) ? "busy" : "warm";
	} else if (state) {
		size_t k = 0;
		for (; state[k] && k + 1 < sizeof word; k++)
			word[k] = (char)tolower((unsigned char)state[k]);
		word[k] = 0;
		state = word;
	}
	if (running) {
		fmt_num(pid, sizeof pid, jpid);
		fmt_pct(cpu, sizeof cpu, field(src, "cpu_pct", NULL));
		json_t *jr = field(src, "rss", "rss_bytes");
		if (json_is_integer(jr) && json_integer_value(jr) == 0)
			strcpy(rss, "-"); /* not sampled yet (its first second) */
		else
			fmt_bytes(rss, sizeof rss, jr);
		fmt_limits(lim, sizeof lim, field(src, "limits_enforced", NULL));
	} else {
		strcpy(pid, "-");
		strcpy(cpu, "-");
		strcpy(rss, "-");
		strcpy(lim, "-");
	}
	fmt_num(spawns, sizeof spawns, json_object_get(src, "spawns"));
	fmt_num(crashes, sizeof crashes, json_object_get(src, "crashes"));
	fmt_exit(lastx, sizeof lastx, json_object_get(src, "last_exit"));
	/* A worker of a replaced image (it finishes what it holds): marked '*'. */
	json_t *img = json_object_get(src, "image");
	snprintf(image, sizeof image, "%s%s", json_is_string(img) ? json_string_value(img) : "-",
		 json_is_true(json_object_get(src, "retired")) ? "*" : "");
	char gpu[160];
	fmt_gpu(gpu, sizeof gpu, wk ? json_object_get(wk, "gpu") : NULL);
	printf("%-20s %-10s %-13s %7s %6s %8s %6s %7s %-13s %s%s\n", name ? name : "?", state ? state : "-", image, pid,
	       cpu, rss, spawns, crashes, lastx, lim, gpu);
}

/* meshd --http's programs (GET /v1/ps's "http"), a table of their own. */
static void print_http(json_t *http)
{
	size_t i, k;
	json_t *p, *m;
	if (!json_is_array(http) || !json_array_size(http))
		return;
	printf("\n%-20s %-10s %7s %6s %8s %6s %6s %s\n", "HTTP PROGRAM", "STATE", "PID", "PORT", "INFLIGHT", "QUEUED",
	       "STARTS", "MODELS");
	json_array_foreach(http, i, p)
	{
		char pid[32], port[32], models[256] = "";
		size_t w = 0;
		fmt_num(pid, sizeof pid, json_object_get(p, "pid"));
		fmt_num(port, sizeof port, json_object_get(p, "port"));
		json_array_foreach(json_object_get(p, "models"), k, m)
		{
			if (w < sizeof models)
				w += (size_t)snprintf(models + w, sizeof models - w, "%s%s", w ? "," : "",
						      json_string_value(m) ? json_string_value(m) : "?");
		}
		const char *name = json_string_value(json_object_get(p, "name"));
		const char *state = json_string_value(json_object_get(p, "state"));
		printf("%-20s %-10s %7s %6s %8lld %6lld %6lld %s\n", name ? name : "?", state ? state : "-", pid, port,
		       json_integer_value(json_object_get(p, "in_flight")), json_integer_value(json_object_get(p, "queued")),
		       json_integer_value(json_object_get(p, "cold_starts")), models);
		const char *err = json_string_value(json_object_get(p, "last_error"));
		if (err) /* its first line: the reason; the program's last lines are in its log */
			printf("  LAST FAILURE: %.*s\n", (int)strcspn(err, "\n"), err);
	}
}

/* ps: a program's lines under its rows: FAILED (a crash loop: calls are
 * refused until `mesh start`), and its savings over its window. */
static void print_program_notes(json_t *p)
{
	const char *failed = json_string_value(json_object_get(p, "failed"));
	if (failed) /* a crash loop: calls are refused until `mesh start` */
		printf("  FAILED: %s\n", failed);
	json_t *sv = json_object_get(p, "savings");
	if (json_is_number(sv)) {
		long long warm = json_integer_value(json_object_get(p, "warm"));
		long long max = json_integer_value(json_object_get(p, "max_workers"));
		/* The window: the time it was loaded, since its first load. */
		char since[32] = "?";
		time_t t0 = (time_t)json_integer_value(json_object_get(p, "window_since"));
		struct tm tm;
		if (t0 > 0 && localtime_r(&t0, &tm))
			strftime(since, sizeof since, "%Y-%m-%d %H:%M", &tm);
		printf("  %s (%lld of %lld warm); savings %.3f over %.1f s loaded since %s: %.2f worker-seconds warm "
		       "of %.2f always-on\n",
		       warm ? "warm" : "cold", warm, max, json_number_value(sv),
		       json_number_value(json_object_get(p, "window_seconds")), since,
		       json_number_value(json_object_get(p, "warm_seconds")),
		       json_number_value(json_object_get(p, "always_on_seconds")));
	}
}

/* ps: the host's line, and with -v what it can enforce and contain. */
static void print_host(json_t *host, int verbose)
{
	if (!json_is_object(host))
		return;
	char procs[32], cpu[32], rss[32], spawns[32], crashes[32];
	fmt_num(procs, sizeof procs, json_object_get(host, "processes"));
	fmt_pct(cpu, sizeof cpu, json_object_get(host, "cpu_pct"));
	fmt_bytes(rss, sizeof rss, field(host, "rss_bytes", "rss"));
	fmt_num(spawns, sizeof spawns, json_object_get(host, "spawns"));
	fmt_num(crashes, sizeof crashes, json_object_get(host, "crashes"));
	printf("host: %s worker processes, cpu %s%%, rss %s, %s spawns, %s crashes\n", procs, cpu, rss, spawns, crashes);
	if (!verbose)
		return;
	const char *avail = json_string_value(json_object_get(host, "limits_available"));
	const char *cg = json_string_value(json_object_get(host, "cgroup"));
	if (avail)
		printf("limits this host can enforce: %s\n", avail);
	if (cg)
		printf("cgroup v2 limits: not enforced here: %s\n", cg);
	const char *cn = json_string_value(json_object_get(host, "containment"));
	const char *cw = json_string_value(json_object_get(host, "containment_why"));
	if (cn)
		printf("containment of workers (what keeps track of their processes and kills them all): %s%s%s%s\n", cn,
		       cw && *cw ? " (" : "", cw && *cw ? cw : "", cw && *cw ? ")" : "");
}

int mesh_cmd_ps(int argc, char **argv)
{
	struct opts o;
	struct meshd_reply r;
	json_t *j, *progs, *host, *p;
	size_t i;
	int ex = parse(argc, argv, &o, 0, 0);
	if (ex >= 0)
		return ex;
	ex = request(&o, "cannot list programs", "GET", "/v1/ps", NULL, 0, OP_TIMEOUT_NS, &r);
	if (ex >= 0)
		return ex;
	if (o.json) {
		fwrite(r.body, 1, r.len, stdout);
		meshd_reply_release(&r);
		return fflush(stdout) == 0 ? 0 : mesh_cli_fail(-errno, "cannot write");
	}
	j = json_loadb(r.body, r.len, 0, NULL);
	meshd_reply_release(&r);
	progs = j ? json_object_get(j, "programs") : NULL;
	host = j ? json_object_get(j, "host") : NULL;
	if (!json_is_array(progs)) {
		json_decref(j);
		return mesh_cli_fail(MESH_E_PROTO, "cannot list programs: meshd's answer has no program list");
	}
	printf("%-20s %-10s %-13s %7s %6s %8s %6s %7s %-13s %s\n", "NAME", "STATE", "IMAGE", "PID", "CPU%", "RSS",
	       "SPAWNS", "CRASHES", "LAST-EXIT", "LIMITS");
	json_array_foreach(progs, i, p)
	{
		json_t *workers = json_object_get(p, "workers");
		if (json_is_array(workers) && json_array_size(workers)) {
			size_t k;
			json_t *w;
			json_array_foreach(workers, k, w) print_row(p, w);
		} else {
			print_row(p, NULL);
		}
		print_program_notes(p);
	}
	print_host(host, o.verbose);
	print_gpus(j ? json_object_get(j, "gpu") : NULL, o.verbose);
	print_http(j ? json_object_get(j, "http") : NULL);
	json_decref(j);
	return fflush(stdout) == 0 ? 0 : mesh_cli_fail(-errno, "cannot write");
}

int mesh_cmd_socket(int argc, char **argv)
{
	struct opts o;
	int ex = parse(argc, argv, &o, 0, 0);
	if (ex >= 0)
		return ex;
	printf("%s\n", o.sock);
	return fflush(stdout) == 0 ? 0 : mesh_cli_fail(-errno, "cannot write");
}

int mesh_cmd_logs(int argc, char **argv)
{
	struct opts o;
	struct meshd_reply r;
	char target[160], what[128];
	const char *p;
	int ex = parse(argc, argv, &o, 1, 0);
	if (ex >= 0)
		return ex;
	snprintf(target, sizeof target, "/v1/programs/%s/logs?tail=%llu", o.name,
		 (unsigned long long)(o.have_tail ? o.tail : 0));
	snprintf(what, sizeof what, "cannot read the log of '%s'", o.name);
	ex = request(&o, what, "GET", target, NULL, 0, OP_TIMEOUT_NS, &r);
	if (ex >= 0)
		return ex;
	p = r.body;
	if (o.have_lines) {
		/* Walk back over `lines` line ends (a last line without one counts too). */
		const char *e = r.body + r.len;
		uint64_t seen = 0;
		if (o.lines == 0) {
			p = e;
		} else {
			const char *q = e;
			if (q > r.body && q[-1] == '\n')
				q--;
			while (q > r.body) {
				if (q[-1] == '\n' && ++seen == o.lines)
					break;
				q--;
			}
			p = q;
		}
	}
	fwrite(p, 1, (size_t)(r.body + r.len - p), stdout);
	meshd_reply_release(&r);
	return fflush(stdout) == 0 ? 0 : mesh_cli_fail(-errno, "cannot write");
}

static int read_stdin(char **out, size_t *len)
{
	size_t cap = 65536, n = 0;
	char *b = malloc(cap);
	if (!b)
		return -ENOMEM;
	for (;;) {
		ssize_t r;
		if (n == cap) {
			char *nb;
			if (cap >= CALL_BODY_MAX + 1) {
				free(b);
				return MESH_E_TOOBIG;
			}
			nb = realloc(b, cap * 2);
			if (!nb) {
				free(b);
				return -ENOMEM;
			}
			b = nb;
			cap *= 2;
		}
		r = read(0, b + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = -errno;
			free(b);
			return e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
		if (n > CALL_BODY_MAX) {
			free(b);
			return MESH_E_TOOBIG;
		}
	}
	*out = b;
	*len = n;
	return 0;
}

int mesh_cmd_call(int argc, char **argv)
{
	struct opts o;
	struct meshd_reply r;
	char target[160], what[128];
	char *body = NULL;
	size_t n = 0;
	int ex = parse(argc, argv, &o, 1, 1);
	if (ex >= 0)
		return ex;
	if (!strcmp(o.payload, "-")) {
		int rc = read_stdin(&body, &n);
		if (rc < 0)
			return mesh_cli_fail(rc, "cannot read the payload from stdin");
	} else {
		n = strlen(o.payload);
		if (n > CALL_BODY_MAX)
			return mesh_cli_fail(MESH_E_TOOBIG, "payload");
	}
	if (!o.timeout_ns)
		o.timeout_ns = 60ull * 1000000000ull;
	snprintf(target, sizeof target, "/v1/programs/%s/call?timeout=%llu.%09llu", o.name,
		 (unsigned long long)(o.timeout_ns / 1000000000ull), (unsigned long long)(o.timeout_ns % 1000000000ull));
	snprintf(what, sizeof what, "call to '%s' failed", o.name);
	/* Starting a cold worker may take its ready timeout before the call's own. */
	/* A streamed reply is written as it arrives (write_out); a whole one here. */
	struct out_stream os = {0};
	ex = request_stream(&o, what, "POST", target, body ? body : o.payload, n, o.timeout_ns + OP_TIMEOUT_NS + SLACK_NS,
			    &os, &r);
	free(body);
	if (ex >= 0)
		return ex;
	fwrite(r.body, 1, r.len, stdout);
	meshd_reply_release(&r);
	return fflush(stdout) == 0 ? 0 : mesh_cli_fail(-errno, "cannot write");
}
