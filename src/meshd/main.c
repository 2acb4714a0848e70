/* meshd: the native worker host.  Wires the core (meshd/core/ops.h) to the
 * control API (meshd/api/api.h) and to systemd's readiness protocol. */
#include "base/err.h"
#include "base/exit.h"
#include "base/log.h"
#include "base/near.h"
#include "base/parse.h"
#include "base/thread.h"
#include "meshd/api/api.h"
#include "client/api_client.h"
#include "meshd/api/metrics.h"
#include "meshd/api/api_jobs.h"
#include "meshd/jobs/jobs.h"
#include "meshd/core/feed.h"
#include "meshd/notify.h"
#include "meshd/core/ops.h"
#include "gateway/gw.h"
#include "job/home.h"
#include "job/job.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

/* A bound's value in a message (the macro's digits, not a copy of them). */
#define MESH_STR_(x) #x
#define MESH_STR(x) MESH_STR_(x)
/* Parked helper threads kept for good: about what one cold job uses at once
 * (store, its six syncs, driver, completer, results, worker waits). */
#define MESHD_THREADS_KEPT 16u

static volatile sig_atomic_t stop_asked;
/* The stop's self-pipe: SIGTERM/SIGINT (or the loop's end) write to it;
 * the main thread, which runs the shutdown, reads it. */
static int stop_pipe[2] = {-1, -1};

static void usage(FILE *f)
{
	char sock[PATH_MAX];
	if (meshd_socket_default(sock, sizeof sock) < 0)
		strcpy(sock, "(too long)");
	fprintf(f,
		"usage: meshd --catalog DIR --logs DIR [--slots N] [--isolation none|mps]\n"
		"             [--socket PATH] [--ready-timeout S] [--heartbeat-timeout S]\n"
		"             [--log-max SIZE] [--log-level debug|info|warn|error]\n"
		"             [--metrics ADDR:PORT [--metrics-public]] [--state DIR]\n"
		"             [--keep-jobs N] [--keep-for DURATION]\n"
		"             [--store postgresql://...] [--store-outage DURATION] [--store-spares N]\n"
		"             [--http ADDR:PORT [--http-public] [--http-api-key-file FILE]\n"
		"                                       [--http-allow-origin ORIGIN]... [--http-max-body SIZE]\n"
		"                                       [--http-max-queue N] [--http-max-conns N]\n"
		"                                       [--http-max-conns-per-peer N]\n"
		"                                       [--http-header-timeout S] [--http-body-timeout S]\n"
		"                                       [--http-memory SIZE] [--http-request-timeout S]\n"
		"                                       [--http-response-timeout S] [--http-idle-timeout S]\n"
		"                                       [--http-probe-interval S] [--http-probe-failures N]\n"
		"                                       [--http-threads N]]\n"
		"\n"
		"meshd starts worker programs from a catalog, keeps them warm while there is work,\n"
		"and serves a control API (HTTP/1.1 + JSON) on a unix socket; `mesh load|start|ps|\n"
		"call|stop|unload|logs` talk to it.\n"
		"\n"
		"  --catalog DIR        the catalog: <DIR>/<name>.toml manifests and their binaries\n"
		"  --logs DIR           each program's output goes to <DIR>/<name>.log\n"
		"  --slots N            shared-memory slots, 1..4096 (default 8)\n"
		"  --isolation MODE     none (default) or mps (GPU workers share meshd's CUDA MPS server)\n"
		"  --socket PATH        the control socket (mode 0600, its directory created 0700 and\n"
		"                       refused unless yours and writable by you only);\n"
		"                       default $MESH_SOCKET, else $XDG_RUNTIME_DIR/mesh/meshd.sock,\n"
		"                       else /tmp/mesh-<uid>/meshd.sock; now: %s\n"
		"  --ready-timeout S    seconds a worker has to say ready (default: the manifest's, else 60)\n"
		"  --heartbeat-timeout S  a worker whose heartbeat is older than S seconds while a\n"
		"                       request or chunk waits for it hangs: it is killed and\n"
		"                       replaced (default 10)\n"
		"  --log-max SIZE       a <name>.log past SIZE (K/M/G suffixes) becomes <name>.log.1\n"
		"                       and a new one starts (default 16M)\n"
		"  --log-level LEVEL    least level logged on stderr (default info)\n"
		"  --metrics ADDR:PORT  also serve GET /metrics (Prometheus text) on TCP, e.g.\n"
		"                       127.0.0.1:9464; loopback only unless --metrics-public\n"
		"  --metrics-public     allow a --metrics address that is not loopback\n"
		"  --http ADDR:PORT     the model gateway: an OpenAI-compatible front door to the\n"
		"                       catalog's backend = \"http\" programs, each started on demand\n"
		"                       and stopped when idle (docs/gateway.md); loopback only unless\n"
		"                       --http-public\n"
		"  --http-public        allow an --http address that is not loopback (and any Host\n"
		"                       name; without it only loopback names are answered)\n"
		"  --http-api-key-file FILE  keys a request must bring (Authorization: Bearer KEY),\n"
		"                       one a line, the file readable by its owner alone\n"
		"  --http-allow-origin ORIGIN  a web page's origin allowed besides loopback ones\n"
		"                       (https://ui.example:8443, or *); repeatable\n"
		"  --http-max-body SIZE the largest request body the gateway takes (default 16M)\n"
		"  --http-max-queue N   requests waiting per program for its start (default 256);\n"
		"                       one more is answered 503 with Retry-After\n"
		"  --http-max-conns N   client connections at once (default 1024); past it an idle\n"
		"                       one (no request begun) is closed to make room, else the\n"
		"                       new one is answered 503; the open-files limit is raised\n"
		"                       to fit it (2 a connection, and 512)\n"
		"  --http-max-conns-per-peer N  connections from one client address (an IPv6\n"
		"                       /64; default half of --http-max-conns): past it, its own\n"
		"                       idle one is closed to make room, else 503\n"
		"  --http-header-timeout S    a request head's first byte to its end (default 60);\n"
		"  --http-body-timeout S      between two reads of a request body (60): past one,\n"
		"                       408 and the connection ends\n"
		"  --http-memory SIZE   the gateway's memory budget: programs that declare `memory`\n"
		"                       run together only within it; a start that does not fit\n"
		"                       stops the least recently used idle ones first\n"
		"  --http-request-timeout S   a request's head to its response's end (default 1800);\n"
		"  --http-response-timeout S  the request sent to the response's first byte (300);\n"
		"  --http-idle-timeout S      a stream's silence between two reads (300): past one,\n"
		"                       504 when nothing was answered yet, else the stream is cut\n"
		"  --http-probe-interval S    a warm program is probed this often (default 10)\n"
		"  --http-probe-failures N    failed probes in a row that make it hung: killed,\n"
		"                       started again by the next request (default 3)\n"
		"  --http-threads N     the gateway's event loop threads (default: 1 on 1 CPU, else\n"
		"                       half the CPUs, at least 2, at most 4)\n"
		"  --state DIR          where submitted jobs live (created 0700); default\n"
		"                       $XDG_STATE_HOME/mesh, else ~/.local/state/mesh; one meshd a\n"
		"                       state directory (a second one exits 75)\n"
		"  --keep-jobs N        keep the newest N jobs that ended (default 1000) ...\n"
		"  --keep-for DURATION  ... and any that ended within DURATION (default 7d; s, m, h, d);\n"
		"                       older ones are removed, directory and all (`mesh rm JOB`: one)\n"
		"  --store URL          also run the jobs of a shared PostgreSQL store (MESH_STORE)\n"
		"                       whose program this catalog has (docs/cluster.md)\n"
		"  --store-outage DURATION  how long the store's jobs wait for a database that\n"
		"                       stopped answering, keeping their leases, and meshd's start\n"
		"                       for one that is full or starting up (default 5m)\n"
		"  --store-spares N     idle connections kept made for a job's start, 0..8\n"
		"                       (default 3; docs/cluster.md counts each part's)\n"
		"\n"
		"Signals: SIGTERM or SIGINT: every worker is asked to exit, then killed and reaped;\n"
		"meshd exits 0.  Under systemd (Type=notify) READY=1 is sent once the socket serves.\n"
		"Exit codes: 0 clean stop, 64 usage error, 65 the socket's directory is a symlink\n"
		"or not a directory, 66 catalog or logs missing, 69 socket in use, 71 system error,\n"
		"70 internal error, 75 the state directory is held by another meshd (its pid is\n"
		"named), 77 socket directory not private, 81 --isolation mps and no MPS daemon.\n",
		sock);
}

/* A gateway request's end, to the feed (GET /v1/events) while someone
 * follows: requests come too often to keep for nobody. */
static void gw_request(void *ctx, const char *program, const char *model, int status, uint64_t us, int cold)
{
	struct meshd_feed *f = ctx;
	if (!meshd_feed_live(f))
		return;
	struct meshd_event e = {.kind = MESHD_EV_REQUEST, .n = {(uint64_t)(status < 0 ? -status : status), us,
								  (uint64_t)(cold != 0)}};
	snprintf(e.name, sizeof e.name, "%s", program ? program : "");
	e.text = model && *model ? strdup(model) : NULL;
	meshd_feed_post(f, &e);
}

/* GET /metrics on the gateway port: the text of the control socket's. */
static int gw_metrics(void *ctx, struct mesh_buf *out)
{
	return meshd_metrics_text(ctx, out);
}

static void gw_log(void *ctx, int level, const char *line)
{
	(void)ctx;
	if (level == MESH_GW_WARN)
		mesh_warn("%s", line);
	else
		mesh_info("%s", line);
}

static int usage_error(const char *fmt, const char *arg)
{
	fputs("meshd: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\n(see `meshd --help`)\n", stderr);
	return MESH_EXIT_USAGE;
}

/* "unknown argument", and the option meant when one of --help's is near. */
static int unknown_argument(const char *arg)
{
	char *text = NULL, near[64];
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);
	const char *best = NULL;
	if (f) {
		usage(f);
		if (fclose(f) == 0)
			best = mesh_help_nearest_option(text, arg, near, sizeof near);
	}
	free(text);
	fprintf(stderr, "meshd: unknown argument '%s'", arg);
	if (best)
		fprintf(stderr, "; did you mean '%s'?", best);
	fputs("\n(see `meshd --help`)\n", stderr);
	return MESH_EXIT_USAGE;
}

/* SIGTERM, SIGINT: the stop ("s"); SIGHUP: a reload of the gateway's
 * catalog ("h"), done by the main thread. */
static void on_signal(int sig)
{
	int e = errno;
	if (sig != SIGHUP)
		stop_asked = 1;
	if (stop_pipe[1] >= 0) {
		ssize_t r = write(stop_pipe[1], sig == SIGHUP ? "h" : "s", 1);
		(void)r;
	}
	errno = e;
}

/* The store's URL as meshd shows it (no password: refused) and its
 * start wait: meshd's store connections wait for a database that has no
 * room for them (53300) or is starting up (57P03), within the outage
 * budget, as a `mesh run` node's do (mesh_job_set_store_start_wait), said
 * in meshd's log in the same words; a stop asked ends the wait. */
static char store_safe[512];

static int store_start_wait(void *arg, int state, const char *why, uint64_t waited_ns, uint64_t budget_ns)
{
	char msg[600];
	if (mesh_job_store_wait_words(state, why, waited_ns, budget_ns, msg, sizeof msg))
		mesh_log(state == MESH_JOB_STORE_ANSWERS ? MESH_LOG_INFO : MESH_LOG_WARN, "the job store '%s' %s",
			 store_safe, msg);
	return stop_asked;
}

/* SIGHUP: the catalog read again, as `mesh reload` (meshd_reload: each
 * part logs its summary line). */
static void reload(const struct meshd_parts *parts)
{
	char *summary = NULL;
	int rc = meshd_reload(parts, &summary);
	if (rc < 0 && rc != MESH_E_PARSE)
		mesh_warn("SIGHUP: cannot reload the catalog: %s", summary ? summary : mesh_strerror(rc));
	free(summary);
}

/* The loop's thread: the one event loop (meshd/core/ops.h) runs until the
 * shutdown below is done. */
struct loop_run {
	struct meshd_core *core;
	int rc;
};

static void *loop_main(void *arg)
{
	struct loop_run *lr = arg;
	/* Named for `top -H`, `ps -L` and bench/bench_events.sh. */
	prctl(PR_SET_NAME, "meshd-loop");
	lr->rc = meshd_core_run(lr->core);
	/* A loop that ended by itself (it failed) stops meshd too. */
	ssize_t r = write(stop_pipe[1], "l", 1);
	(void)r;
	return NULL;
}

/* What the command line asks for. */
struct args {
	struct meshd_config cfg;
	struct mesh_gw_config gwc;
	struct meshd_jobs_keep keep;
	char sock[PATH_MAX], state[PATH_MAX];
	const char *level, *metrics_addr, *store_url;
	int metrics_public;
	uint64_t store_outage_ns; /* 0: the default */
	uint64_t store_spares;	  /* UINT64_MAX: the default */
	const char *origins[32];
};

/* How an option's value is read: a number or a size or a duration within
 * [min, max], a word of `words` (a string kept), a path that fits its
 * buffer (copied), a string kept as it is, an origin (repeatable), or no
 * value (a flag: 1). */
enum okind { V_NUM, V_SIZE, V_DUR, V_WORD, V_PATH, V_STR, V_ORIGIN, V_FLAG };

struct opt {
	const char *name;
	enum okind kind;
	size_t off, size; /* the field of struct args it sets */
	uint64_t min, max;
	const char *want; /* "--name wants <want>, not 'V'"; V_WORD: the words, '|' between */
};

#define AF(m) offsetof(struct args, m), sizeof(((struct args *)0)->m)
#define DAY_NS (86400ull * 1000000000ull)
#define CENTURY_NS (100ull * 365 * DAY_NS)

static const struct opt opts[] = {
	{"--catalog", V_STR, AF(cfg.catalog), 0, 0, NULL},
	{"--logs", V_STR, AF(cfg.logs), 0, 0, NULL},
	{"--slots", V_NUM, AF(cfg.slots), 1, 4096, "a number from 1 to 4096"},
	{"--isolation", V_WORD, AF(cfg.isolation), 0, 0, "none|mps"},
	{"--socket", V_PATH, AF(sock), 0, 0, "a path"},
	{"--ready-timeout", V_DUR, AF(cfg.ready_timeout_ns), 1, DAY_NS,
	 "a duration (more than 0, at most a day: 30, 500ms, 2m)"},
	{"--heartbeat-timeout", V_DUR, AF(cfg.heartbeat_timeout_ns), 1, DAY_NS,
	 "a duration (more than 0, at most a day: 10, 500ms, 1m)"},
	{"--log-max", V_SIZE, AF(cfg.log_max), 1, UINT64_MAX, "a size such as 16M"},
	{"--log-level", V_WORD, AF(level), 0, 0, "debug|info|warn|error"},
	{"--metrics", V_STR, AF(metrics_addr), 0, 0, NULL},
	{"--metrics-public", V_FLAG, AF(metrics_public), 0, 0, NULL},
	{"--http", V_STR, AF(gwc.listen), 0, 0, NULL},
	{"--http-public", V_FLAG, AF(gwc.allow_public), 0, 0, NULL},
	{"--http-api-key-file", V_STR, AF(gwc.api_key_file), 0, 0, NULL},
	{"--http-allow-origin", V_ORIGIN, 0, 0, 0, 0, "an origin like https://ui.example:8443, or *"},
	{"--http-max-body", V_SIZE, AF(gwc.max_body), 1, 1ull << 32, "a size from 1 to 4G such as 16M"},
	{"--http-max-queue", V_NUM, AF(gwc.max_queue), 1, 1000000, "a number from 1 to 1000000"},
	{"--http-max-conns", V_NUM, AF(gwc.max_conns), 1, 1048576, "a number from 1 to 1048576"},
	{"--http-max-conns-per-peer", V_NUM, AF(gwc.max_conns_per_peer), 1, 1048576, "a number from 1 to 1048576"},
	{"--http-header-timeout", V_DUR, AF(gwc.header_timeout_ns), 1, DAY_NS,
	 "a duration (more than 0, at most a day: 30, 500ms, 5m)"},
	{"--http-body-timeout", V_DUR, AF(gwc.body_timeout_ns), 1, DAY_NS,
	 "a duration (more than 0, at most a day: 30, 500ms, 5m)"},
	{"--http-memory", V_SIZE, AF(gwc.memory_budget), 1, UINT64_MAX, "a size such as 24G"},
	{"--http-request-timeout", V_DUR, AF(gwc.request_timeout_ns), 1, DAY_NS,
	 "a duration (more than 0, at most a day: 30, 500ms, 5m)"},
	{"--http-response-timeout", V_DUR, AF(gwc.response_timeout_ns), 1, DAY_NS,
	 "a duration (more than 0, at most a day: 30, 500ms, 5m)"},
	{"--http-idle-timeout", V_DUR, AF(gwc.idle_stream_timeout_ns), 1, DAY_NS,
	 "a duration (more than 0, at most a day: 30, 500ms, 5m)"},
	{"--http-probe-interval", V_DUR, AF(gwc.probe_interval_ns), 1, DAY_NS,
	 "a duration (more than 0, at most a day: 10, 500ms, 1m)"},
	{"--http-probe-failures", V_NUM, AF(gwc.probe_failures), 1, 1000, "a number from 1 to 1000"},
	{"--http-threads", V_NUM, AF(gwc.threads), 1, MESH_GW_MAX_THREADS,
	 "a number from 1 to " MESH_STR(MESH_GW_MAX_THREADS)},
	{"--state", V_PATH, AF(state), 0, 0, "a directory"},
	{"--keep-jobs", V_NUM, AF(keep.keep_jobs), 1, 100000000, "a number from 1 to 100000000"},
	{"--keep-for", V_DUR, AF(keep.keep_for_ns), 1000000000ull, CENTURY_NS,
	 "a duration of 1s or more such as 7d, 12h or 90m"},
	{"--store", V_STR, AF(store_url), 0, 0, NULL},
	{"--store-outage", V_DUR, AF(store_outage_ns), 1000000000ull, CENTURY_NS,
	 "a duration of 1s or more such as 5m or 30s"},
	{"--store-spares", V_NUM, AF(store_spares), 0, MESH_HOME_PG_SPARES_MAX,
	 "a number from 0 to " MESH_STR(MESH_HOME_PG_SPARES_MAX)},
};

/* 1 when w is one of words ("a|b|c"). */
static int one_of(const char *words, const char *w)
{
	size_t n = strlen(w);
	for (const char *p = words; n;) {
		const char *e = strchr(p, '|');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && !strncmp(p, w, n))
			return 1;
		if (!e)
			break;
		p = e + 1;
	}
	return 0;
}

/* Stores v (n bytes wide) into the field at f. */
static void store_num(void *f, size_t n, uint64_t v)
{
	if (n == sizeof(uint64_t))
		*(uint64_t *)f = v;
	else if (n == sizeof(uint32_t))
		*(uint32_t *)f = (uint32_t)v;
}

/* Option o's value v into a; 0, or the exit code of a usage error. */
static int apply(struct args *a, const struct opt *o, const char *v)
{
	void *f = (char *)a + o->off;
	uint64_t n = 0;
	int bad = 0;
	switch (o->kind) {
	case V_NUM:
		bad = mesh_parse_u64(v, o->max, &n) < 0;
		break;
	case V_SIZE:
		bad = mesh_parse_size(v, o->max, &n) < 0;
		break;
	case V_DUR:
		bad = mesh_parse_duration(v, o->max, &n) < 0;
		break;
	case V_WORD:
		if (!one_of(o->want, v)) {
			fprintf(stderr, "meshd: %s is one of %s, not '%s'\n(see `meshd --help`)\n", o->name, o->want, v);
			return MESH_EXIT_USAGE;
		}
		*(const char **)f = v;
		return 0;
	case V_PATH:
		bad = !*v || strlen(v) >= o->size;
		if (!bad)
			strcpy(f, v);
		break;
	case V_STR:
		*(const char **)f = v;
		return 0;
	case V_ORIGIN:
		bad = strcmp(v, "*") && strncmp(v, "http://", 7) && strncmp(v, "https://", 8);
		if (!bad && a->gwc.nallow_origins == sizeof a->origins / sizeof a->origins[0])
			return usage_error("%s", "at most 32 --http-allow-origin");
		if (!bad) {
			a->origins[a->gwc.nallow_origins++] = v;
			a->gwc.allow_origins = a->origins;
		}
		break;
	case V_FLAG:
		*(int *)f = 1;
		return 0;
	}
	if (!bad && (o->kind == V_NUM || o->kind == V_SIZE || o->kind == V_DUR)) {
		bad = n < o->min;
		if (!bad)
			store_num(f, o->size, n);
	}
	if (bad) {
		fprintf(stderr, "meshd: %s wants %s, not '%s'\n(see `meshd --help`)\n", o->name, o->want, v);
		return MESH_EXIT_USAGE;
	}
	return 0;
}

/* argv into a; -1 to go on, else the exit code (--help, --version, a
 * usage error). */
static int parse_args(int argc, char **argv, struct args *a)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *v = NULL;
		if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(arg, "--version")) {
			printf("meshd %s\n", MESH_VERSION);
			return 0;
		}
		const struct opt *o = NULL;
		for (size_t k = 0; k < sizeof opts / sizeof opts[0] && !o; k++) {
			size_t n = strlen(opts[k].name);
			if (!strncmp(arg, opts[k].name, n) && (!arg[n] || (arg[n] == '=' && opts[k].kind != V_FLAG)))
				o = &opts[k], v = arg[n] ? arg + n + 1 : NULL;
		}
		if (!o)
			return unknown_argument(arg);
		if (o->kind != V_FLAG && !v) {
			if (i + 1 >= argc)
				return usage_error("%s needs a value", arg);
			v = argv[++i];
		}
		int ex = apply(a, o, v);
		if (ex)
			return ex;
	}
	if (!a->cfg.catalog)
		return usage_error("%s", "--catalog DIR is required");
	if (!a->cfg.logs)
		return usage_error("%s", "--logs DIR is required");
	if (!a->sock[0] && meshd_socket_default(a->sock, sizeof a->sock) < 0)
		return usage_error("%s", "the default socket path is too long; give --socket PATH");
	if (a->store_url && *a->store_url && mesh_job_where_has_password(a->store_url))
		return usage_error("--store (or MESH_STORE): %s", mesh_job_password_why());
	return -1;
}

struct stopper {
	struct mesh_thread *th;
	struct meshd_core *core;
	char name[MESHD_API_NAME_MAX + 1];
	int started;
};

static void *stop_one(void *arg)
{
	struct stopper *s = arg;
	char *err = NULL;
	int rc = meshd_op_stop(s->core, s->name, &err);
	if (rc < 0 && rc != MESH_E_NOTFOUND)
		mesh_warn("cannot stop name=%s: %s", s->name, err ? err : mesh_strerror(rc));
	free(err);
	return NULL;
}

/* Every loaded program's workers exit, all programs at once (each may take
 * its grace). */
static void stop_programs(struct meshd_core *core)
{
	struct meshd_ps ps;
	struct stopper *st;
	size_t i, n;
	if (meshd_op_ps(core, &ps) < 0)
		return;
	n = ps.nprograms;
	st = n ? calloc(n, sizeof *st) : NULL;
	for (i = 0; st && i < n; i++) {
		const char *name = ps.programs[i].name;
		if (strlen(name) > MESHD_API_NAME_MAX)
			continue;
		st[i].core = core;
		strcpy(st[i].name, name);
		/* Without a thread, stop it here: slower, still right. */
		if (mesh_thread_run(&st[i].th, stop_one, &st[i], 0) == 0)
			st[i].started = 1;
		else
			stop_one(&st[i]);
	}
	for (i = 0; st && i < n; i++)
		if (st[i].started)
			mesh_thread_join(st[i].th, NULL);
	free(st);
	meshd_ps_release(&ps);
}

static int exit_for(int err)
{
	switch (err) {
	case MESH_E_NOTFOUND:
	case -ENOENT:
	case -ENOTDIR:
	case -EACCES:
		return MESH_EXIT_NOINPUT;
	case -EADDRINUSE:
	case -EEXIST:
		return MESH_EXIT_UNAVAILABLE;
	case MESH_E_NOTPRIVATE:
		return MESH_EXIT_NOPERM;
	case MESH_E_BUSY: /* the state directory: another meshd holds it */
		return MESH_EXIT_TEMPFAIL;
	case MESH_E_NOGPU: /* --isolation mps: no MPS control daemon */
		return MESH_EXIT_NOGPU;
	case MESH_E_PARSE:
	case MESH_E_RANGE:
	case MESH_E_PATH:
		return MESH_EXIT_DATAERR;
	case -ENOMEM:
	case -EMFILE:
	case -ENFILE:
	case -EAGAIN:
	case -ENAMETOOLONG:
		return MESH_EXIT_OSERR;
	}
	return MESH_EXIT_SOFTWARE;
}

/* What main starts, and stops in the opposite order. */
struct daemon {
	struct meshd_core *core;
	struct meshd_jobs *jobs;
	struct meshd_api *api;
	struct meshd_metrics_server *msrv;
	struct mesh_gw *gw;
	struct meshd_parts parts; /* what the API and /metrics serve */
};

/* The jobs: in a's state directory (the default one when none was given:
 * without it meshd serves programs, not jobs), following a's store when
 * one was given.  -1, or the exit code (said why; 0: a stop came while
 * it waited for the store). */
static int open_jobs(struct daemon *d, struct args *a)
{
	char *err = NULL;
	int default_state = !a->state[0];
	if (default_state && meshd_state_default(a->state, sizeof a->state) < 0)
		a->state[0] = 0;
	int rc = a->state[0] ? meshd_jobs_open(&d->jobs, d->core, a->state, &a->keep, &err) : -ENOENT;
	if (rc < 0 && default_state && rc != MESH_E_BUSY) {
		/* No usable default.  One that another meshd holds is refused
		 * as a given one is. */
		mesh_warn("no jobs: %s (give --state DIR)",
			  err ? err : "neither $XDG_STATE_HOME nor $HOME names a state directory");
		free(err);
		d->jobs = NULL;
	} else if (rc < 0) {
		mesh_error("cannot open the jobs: %s", err ? err : mesh_strerror(rc));
		free(err);
		return exit_for(rc);
	}
	int store = a->store_url && *a->store_url;
	if (!d->jobs && store)
		mesh_warn("the store is not followed: meshd has no jobs (give --state DIR)");
	if (d->jobs && store && (rc = meshd_jobs_store(d->jobs, a->store_url, a->cfg.catalog, &err)) < 0) {
		if (stop_asked) /* stopped while it waited for the store */
			mesh_info("stopped before the store answered");
		else
			mesh_error("%s", err ? err : mesh_strerror(rc));
		free(err);
		/* the store's codes: 69 unreachable, 65 another schema */
		return stop_asked ? MESH_EXIT_OK : mesh_exit_for(rc);
	}
	return -1;
}

/* The core, the jobs, the control API, /metrics and the gateway, in that
 * order.  -1, or the exit code (said why; what was started is stopped by
 * close_daemon). */
static int open_daemon(struct daemon *d, struct args *a)
{
	char *err = NULL;
	int rc = meshd_core_new(&d->core, &a->cfg, &err);
	if (rc < 0) {
		mesh_error("cannot start: %s", err ? err : mesh_strerror(rc));
		free(err);
		return exit_for(rc);
	}
	free(err);
	err = NULL;
	if ((rc = open_jobs(d, a)) >= 0)
		return rc;
	d->parts.core = d->core;
	d->parts.jobs = d->jobs;
	if ((rc = meshd_api_start(&d->api, &d->parts, a->sock, &err)) < 0) {
		mesh_error("cannot serve the control API: %s", err ? err : mesh_strerror(rc));
		free(err);
		return exit_for(rc);
	}
	d->parts.api = d->api;
	if (a->metrics_addr) {
		rc = meshd_metrics_serve_start(&d->msrv, &d->parts, a->metrics_addr, a->metrics_public, &err);
		if (rc < 0) {
			mesh_error("cannot serve metrics: %s", err ? err : mesh_strerror(rc));
			free(err);
			return rc == MESH_E_PARSE || rc == MESH_E_REFUSED ? MESH_EXIT_USAGE : exit_for(rc);
		}
		mesh_info("serving metrics=%s port=%d", a->metrics_addr, meshd_metrics_serve_port(d->msrv));
	}
	if (a->gwc.listen) {
		a->gwc.catalog = a->cfg.catalog;
		a->gwc.host = meshd_core_host(d->core);
		a->gwc.on_log = gw_log;
		a->gwc.metrics = gw_metrics;
		a->gwc.metrics_ctx = &d->parts;
		a->gwc.metrics_type = MESHD_METRICS_CONTENT_TYPE;
		a->gwc.on_request = gw_request;
		a->gwc.request_ctx = meshd_core_feed(d->core);
		if ((rc = mesh_gw_open(&d->gw, &a->gwc, &err)) < 0) {
			mesh_error("cannot serve the gateway: %s", err ? err : mesh_strerror(rc));
			free(err);
			return rc == MESH_E_PARSE || rc == MESH_E_REFUSED ? MESH_EXIT_USAGE : exit_for(rc);
		}
		d->parts.gw = d->gw;
		mesh_info("serving http=%s port=%d", a->gwc.listen, mesh_gw_port(d->gw));
	}
	return -1;
}

/* The shutdown, while the loop (when it runs) still serves: the API
 * answers what is in flight and the workers' exits are dispatched.  Each
 * part may be missing (a start that failed part way). */
static void close_daemon(struct daemon *d)
{
	/* The gateway first: its requests in flight end (bounded), then its programs stop. */
	if (d->gw)
		mesh_gw_drain(d->gw);
	/* Jobs next: their drivers give their workers back before any
	 * program is stopped (a stop would count as their chunks' failure). */
	meshd_jobs_stop(d->jobs);
	int inflight = d->api ? meshd_api_quiesce(d->api) : 0;
	if (inflight > 0) {
		/* A start or call may wait on a worker for a minute: stop every
		 * program so that those requests end now, then let them answer. */
		mesh_info("stopping every program: requests=%d in flight", inflight);
		stop_programs(d->core);
	}
	meshd_metrics_serve_stop(d->msrv);
	d->parts.api = NULL;
	meshd_api_stop(d->api);
	/* No request or scrape can read them any more. */
	d->parts.gw = NULL;
	mesh_gw_free(d->gw);
	meshd_jobs_free(d->jobs);
}

/* Signals into stop_pipe (a signal before the loop runs is remembered and
 * ends meshd right after setup); 0 or -errno. */
static int catch_signals(void)
{
	struct sigaction sa;
	if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/* The store's settings from a: its outage budget, spares, and its
 * connections' application_name (meshd <host>). */
static void set_store(const struct args *a)
{
	if (a->store_outage_ns)
		mesh_job_set_store_outage(a->store_outage_ns);
	if (a->store_spares != UINT64_MAX)
		mesh_home_pg_set_spares((unsigned)a->store_spares);
	if (a->store_url && *a->store_url) {
		char host[64] = "host", app[80];
		gethostname(host, sizeof host - 1);
		host[sizeof host - 1] = 0;
		snprintf(app, sizeof app, "meshd %s", host);
		mesh_job_set_store_app(app, 0);
		mesh_job_url_safe(a->store_url, store_safe, sizeof store_safe);
		mesh_job_set_store_start_wait(store_start_wait, NULL);
	}
}

int main(int argc, char **argv)
{
	struct args a = {.cfg = {.slots = 8, .isolation = "none"},
			 .gwc = MESH_GW_CONFIG_INIT,
			 .level = "info",
			 .store_url = getenv("MESH_STORE"),
			 .store_spares = UINT64_MAX};
	struct daemon d = {0};
	int rc;

	/* Workers run as our uid: non-dumpable, our /proc/<pid>/fd (every slot's
	 * memfd) belongs to root and no worker can open another program's slot. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		fprintf(stderr, "meshd: cannot make the process non-dumpable: %s\n", strerror(errno));
		return MESH_EXIT_OSERR;
	}
	if ((rc = parse_args(argc, argv, &a)) >= 0)
		return rc;
	set_store(&a);
	mesh_log_init("meshd", !strcmp(a.level, "debug")  ? MESH_LOG_DEBUG
			       : !strcmp(a.level, "warn") ? MESH_LOG_WARN
			       : !strcmp(a.level, "error") ? MESH_LOG_ERROR
							   : MESH_LOG_INFO);
	if ((rc = catch_signals()) < 0) {
		mesh_error("cannot start: pipe: %s", mesh_strerror(rc));
		return MESH_EXIT_OSERR;
	}
	/* Threads parked for the work that ends (a job's store, driver and
	 * completer, the syncs...): a cold job after a long idle starts none
	 * (base/thread.h). */
	if ((rc = mesh_thread_keep(MESHD_THREADS_KEPT)) < 0)
		mesh_warn("cannot keep %u threads parked: %s", MESHD_THREADS_KEPT, mesh_strerror(rc));
	if ((rc = open_daemon(&d, &a)) >= 0) {
		close_daemon(&d);
		meshd_core_free(d.core);
		return rc;
	}
	mesh_info("serving socket=%s catalog=%s logs=%s slots=%u isolation=%s", a.sock, a.cfg.catalog, a.cfg.logs,
		  a.cfg.slots, a.cfg.isolation);
	rc = meshd_notify("READY=1\nSTATUS=serving");
	if (rc < 0)
		mesh_warn("cannot notify systemd: %s", mesh_strerror(rc));

	/* The loop runs on a thread of its own; this one waits for the stop and
	 * then runs the shutdown while the loop still serves. */
	struct loop_run lr = {d.core, 0};
	pthread_t loop_th;
	int threaded = mesh_thread_start(&loop_th, loop_main, &lr) == 0;
	if (!threaded) {
		mesh_error("cannot start the event loop's thread");
		rc = -EAGAIN;
	}
	while (threaded && !stop_asked) {
		struct pollfd pf = {stop_pipe[0], POLLIN, 0};
		char c = 0;
		if (poll(&pf, 1, -1) > 0 && read(stop_pipe[0], &c, 1) == 1 && c == 'l')
			break;
		if (c == 'h' && !stop_asked)
			reload(&d.parts);
	}
	mesh_info("stopping");
	meshd_notify("STOPPING=1");
	close_daemon(&d);
	if (threaded) {
		meshd_core_stop(d.core);
		pthread_join(loop_th, NULL);
		rc = lr.rc;
		if (rc < 0)
			mesh_error("event loop failed: %s", mesh_strerror(rc));
	}
	meshd_core_free(d.core);
	mesh_info("stopped");
	return rc < 0 ? MESH_EXIT_SOFTWARE : 0;
}
