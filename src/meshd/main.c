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
#include "meshd/notify.h"
#include "meshd/core/ops.h"
#include "gateway/gw.h"
#include "job/home.h"
#include "job/job.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
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
		"                       stopped answering, keeping their leases (default 5m)\n"
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
	lr->rc = meshd_core_run(lr->core);
	/* A loop that ended by itself (it failed) stops meshd too. */
	ssize_t r = write(stop_pipe[1], "l", 1);
	(void)r;
	return NULL;
}

/* The value of option name at argv[*i] ("--name V" or "--name=V"), or NULL
 * when argv[*i] is not that option.  *missing is set when the value is. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing)
{
	size_t n = strlen(name);
	const char *a = argv[*i];
	if (strncmp(a, name, n))
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n])
		return NULL;
	if (*i + 1 >= argc) {
		*missing = 1;
		return NULL;
	}
	return argv[++*i];
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

int main(int argc, char **argv)
{
	struct meshd_config cfg = {.slots = 8, .isolation = "none"};
	char sock[PATH_MAX] = "";
	const char *level = "info";
	const char *metrics_addr = NULL;
	const char *store_url = getenv("MESH_STORE");
	int metrics_public = 0;
	struct mesh_gw_config gwc = MESH_GW_CONFIG_INIT;
	const char *origins[32];
	size_t norigins = 0;
	struct mesh_gw *gw = NULL;
	struct meshd_metrics_server *msrv = NULL;
	struct meshd_core *core = NULL;
	struct meshd_api *api = NULL;
	struct meshd_jobs *jobs = NULL;
	struct meshd_parts parts = {0}; /* what the API and /metrics serve */
	char state[PATH_MAX] = "";
	struct meshd_jobs_keep keep = {0};
	struct sigaction sa;
	char *err = NULL;
	int rc;

	/* Workers run as our uid: non-dumpable, our /proc/<pid>/fd (every slot's
	 * memfd) belongs to root and no worker can open another program's slot. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		fprintf(stderr, "meshd: cannot make the process non-dumpable: %s\n", strerror(errno));
		return MESH_EXIT_OSERR;
	}
	for (int i = 1; i < argc; i++) {
		const char *v;
		int missing = 0;
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(argv[i], "--version")) {
			printf("meshd %s\n", MESH_VERSION);
			return 0;
		}
		if ((v = opt_value(argc, argv, &i, "--catalog", &missing))) {
			cfg.catalog = v;
		} else if ((v = opt_value(argc, argv, &i, "--logs", &missing))) {
			cfg.logs = v;
		} else if ((v = opt_value(argc, argv, &i, "--slots", &missing))) {
			uint64_t n;
			if (mesh_parse_u64(v, 4096, &n) < 0 || n == 0)
				return usage_error("--slots wants a number from 1 to 4096, not '%s'", v);
			cfg.slots = (unsigned)n;
		} else if ((v = opt_value(argc, argv, &i, "--isolation", &missing))) {
			if (strcmp(v, "none") && strcmp(v, "mps"))
				return usage_error("--isolation is none or mps, not '%s'", v);
			cfg.isolation = v;
		} else if ((v = opt_value(argc, argv, &i, "--socket", &missing))) {
			if (!*v || strlen(v) >= sizeof sock)
				return usage_error("--socket wants a path, not '%s'", v);
			strcpy(sock, v);
		} else if ((v = opt_value(argc, argv, &i, "--ready-timeout", &missing))) {
			if (mesh_parse_duration(v, 86400ull * 1000000000ull, &cfg.ready_timeout_ns) < 0 ||
			    cfg.ready_timeout_ns == 0)
				return usage_error("--ready-timeout wants a duration (more than 0, at most a day: 30, 500ms, 2m), not '%s'",
						   v);
		} else if ((v = opt_value(argc, argv, &i, "--heartbeat-timeout", &missing))) {
			if (mesh_parse_duration(v, 86400ull * 1000000000ull, &cfg.heartbeat_timeout_ns) < 0 ||
			    cfg.heartbeat_timeout_ns == 0)
				return usage_error("--heartbeat-timeout wants a duration (more than 0, at most a day: 10, 500ms, 1m), not '%s'",
						   v);
		} else if ((v = opt_value(argc, argv, &i, "--log-max", &missing))) {
			if (mesh_parse_size(v, UINT64_MAX, &cfg.log_max) < 0 || cfg.log_max == 0)
				return usage_error("--log-max wants a size such as 16M, not '%s'", v);
		} else if ((v = opt_value(argc, argv, &i, "--log-level", &missing))) {
			if (strcmp(v, "debug") && strcmp(v, "info") && strcmp(v, "warn") && strcmp(v, "error"))
				return usage_error("--log-level is debug, info, warn or error, not '%s'", v);
			level = v;
		} else if ((v = opt_value(argc, argv, &i, "--metrics", &missing))) {
			metrics_addr = v;
		} else if ((v = opt_value(argc, argv, &i, "--http", &missing))) {
			gwc.listen = v;
		} else if ((v = opt_value(argc, argv, &i, "--http-max-queue", &missing))) {
			uint64_t n;
			if (mesh_parse_u64(v, 1000000, &n) < 0 || n == 0)
				return usage_error("--http-max-queue wants a number from 1 to 1000000, not '%s'", v);
			gwc.max_queue = (uint32_t)n;
		} else if ((v = opt_value(argc, argv, &i, "--http-max-conns", &missing)) ||
			   (v = opt_value(argc, argv, &i, "--http-max-conns-per-peer", &missing))) {
			const char *o = argv[i][0] == '-' ? argv[i] : argv[i - 1];
			int per_peer = strstr(o, "per-peer") != NULL;
			uint64_t n;
			if (mesh_parse_u64(v, 1048576, &n) < 0 || n == 0)
				return usage_error(per_peer ? "--http-max-conns-per-peer wants a number from 1 to 1048576, not '%s'"
							    : "--http-max-conns wants a number from 1 to 1048576, not '%s'",
						   v);
			*(per_peer ? &gwc.max_conns_per_peer : &gwc.max_conns) = (uint32_t)n;
		} else if ((v = opt_value(argc, argv, &i, "--http-memory", &missing))) {
			if (mesh_parse_size(v, UINT64_MAX, &gwc.memory_budget) < 0 || gwc.memory_budget == 0)
				return usage_error("--http-memory wants a size such as 24G, not '%s'", v);
		} else if ((v = opt_value(argc, argv, &i, "--http-request-timeout", &missing)) ||
			   (v = opt_value(argc, argv, &i, "--http-response-timeout", &missing)) ||
			   (v = opt_value(argc, argv, &i, "--http-idle-timeout", &missing)) ||
			   (v = opt_value(argc, argv, &i, "--http-header-timeout", &missing)) ||
			   (v = opt_value(argc, argv, &i, "--http-body-timeout", &missing)) ||
			   (v = opt_value(argc, argv, &i, "--http-probe-interval", &missing))) {
			/* which one: argv[i] is the value when it came as a word of its own */
			const char *o = argv[i][0] == '-' ? argv[i] : argv[i - 1];
			uint64_t *dst = strstr(o, "request") ? &gwc.request_timeout_ns
					: strstr(o, "response") ? &gwc.response_timeout_ns
					: strstr(o, "idle") ? &gwc.idle_stream_timeout_ns
					: strstr(o, "header") ? &gwc.header_timeout_ns
					: strstr(o, "body") ? &gwc.body_timeout_ns : &gwc.probe_interval_ns;
			if (mesh_parse_duration(v, 86400ull * 1000000000ull, dst) < 0 || *dst == 0)
				return usage_error("--http-*-timeout and --http-probe-interval want a duration (more "
						   "than 0, at most a day: 30, 500ms, 5m), not '%s'", v);
		} else if ((v = opt_value(argc, argv, &i, "--http-probe-failures", &missing))) {
			uint64_t n;
			if (mesh_parse_u64(v, 1000, &n) < 0 || n == 0)
				return usage_error("--http-probe-failures wants a number from 1 to 1000, not '%s'", v);
			gwc.probe_failures = (uint32_t)n;
		} else if ((v = opt_value(argc, argv, &i, "--http-threads", &missing))) {
			uint64_t n;
			if (mesh_parse_u64(v, MESH_GW_MAX_THREADS, &n) < 0 || n == 0)
				return usage_error("--http-threads wants a number from 1 to " MESH_STR(MESH_GW_MAX_THREADS)
						   ", not '%s'", v);
			gwc.threads = (uint32_t)n;
		} else if (!strcmp(argv[i], "--http-public")) {
			gwc.allow_public = 1;
		} else if ((v = opt_value(argc, argv, &i, "--http-api-key-file", &missing))) {
			gwc.api_key_file = v;
		} else if ((v = opt_value(argc, argv, &i, "--http-allow-origin", &missing))) {
			if (strcmp(v, "*") && (strncmp(v, "http://", 7) && strncmp(v, "https://", 8)))
				return usage_error("--http-allow-origin wants an origin like https://ui.example:8443, or *, "
						   "not '%s'", v);
			if (norigins == sizeof origins / sizeof origins[0])
				return usage_error("%s", "at most 32 --http-allow-origin");
			origins[norigins++] = v;
			gwc.allow_origins = origins;
			gwc.nallow_origins = norigins;
		} else if ((v = opt_value(argc, argv, &i, "--http-max-body", &missing))) {
			uint64_t n;
			if (mesh_parse_size(v, 1ull << 32, &n) < 0 || n == 0)
				return usage_error("--http-max-body wants a size from 1 to 4G such as 16M, not '%s'", v);
			gwc.max_body = (size_t)n;
		} else if (!strcmp(argv[i], "--metrics-public")) {
			metrics_public = 1;
		} else if ((v = opt_value(argc, argv, &i, "--store", &missing))) {
			store_url = v;
		} else if ((v = opt_value(argc, argv, &i, "--store-outage", &missing))) {
			uint64_t ns;
			if (mesh_parse_duration(v, 100ull * 365 * 86400 * 1000000000ull, &ns) < 0 || ns < 1000000000ull)
				return usage_error("--store-outage wants a duration of 1s or more such as 5m or 30s, not '%s'", v);
			mesh_job_set_store_outage(ns);
		} else if ((v = opt_value(argc, argv, &i, "--store-spares", &missing))) {
			uint64_t n;
			if (mesh_parse_u64(v, MESH_HOME_PG_SPARES_MAX, &n) < 0)
				return usage_error("--store-spares wants a number from 0 to 8, not '%s'", v);
			mesh_home_pg_set_spares((unsigned)n);
		} else if ((v = opt_value(argc, argv, &i, "--keep-jobs", &missing))) {
			if (mesh_parse_u64(v, 100000000, &keep.keep_jobs) < 0 || keep.keep_jobs == 0)
				return usage_error("--keep-jobs wants a number from 1 to 100000000, not '%s'", v);
		} else if ((v = opt_value(argc, argv, &i, "--keep-for", &missing))) {
			if (mesh_parse_duration(v, 100ull * 365 * 86400 * 1000000000ull, &keep.keep_for_ns) < 0 ||
			    keep.keep_for_ns < 1000000000ull)
				return usage_error("--keep-for wants a duration of 1s or more such as 7d, 12h or 90m, "
						   "not '%s'", v);
		} else if ((v = opt_value(argc, argv, &i, "--state", &missing))) {
			if (!*v || strlen(v) >= sizeof state)
				return usage_error("--state wants a directory, not '%s'", v);
			strcpy(state, v);
		} else if (missing) {
			return usage_error("%s needs a value", argv[i]);
		} else {
			return unknown_argument(argv[i]);
		}
	}
	if (!cfg.catalog)
		return usage_error("%s", "--catalog DIR is required");
	if (!cfg.logs)
		return usage_error("%s", "--logs DIR is required");
	if (!sock[0] && meshd_socket_default(sock, sizeof sock) < 0)
		return usage_error("%s", "the default socket path is too long; give --socket PATH");
	if (store_url && *store_url && mesh_job_where_has_password(store_url))
		return usage_error("--store (or MESH_STORE): %s", mesh_job_password_why());
	if (store_url && *store_url) {
		/* its store connections' application_name: meshd <host> */
		char host[64] = "host", app[80];
		gethostname(host, sizeof host - 1);
		host[sizeof host - 1] = 0;
		snprintf(app, sizeof app, "meshd %s", host);
		mesh_job_set_store_app(app, 0);
		mesh_job_url_safe(store_url, store_safe, sizeof store_safe);
		mesh_job_set_store_start_wait(store_start_wait, NULL);
	}

	mesh_log_init("meshd", !strcmp(level, "debug")  ? MESH_LOG_DEBUG
			       : !strcmp(level, "warn") ? MESH_LOG_WARN
			       : !strcmp(level, "error") ? MESH_LOG_ERROR
							 : MESH_LOG_INFO);

	/* A signal before the loop runs is remembered and ends meshd right after setup. */
	if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		mesh_error("cannot start: pipe: %s", strerror(errno));
		return MESH_EXIT_OSERR;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	/* Threads parked for the work that ends (a job's store, driver and
	 * completer, the syncs...): a cold job after a long idle starts none
	 * (base/thread.h). */
	if ((rc = mesh_thread_keep(MESHD_THREADS_KEPT)) < 0)
		mesh_warn("cannot keep %u threads parked: %s", MESHD_THREADS_KEPT, mesh_strerror(rc));

	rc = meshd_core_new(&core, &cfg, &err);
	if (rc < 0) {
		mesh_error("cannot start: %s", err ? err : mesh_strerror(rc));
		free(err);
		return exit_for(rc);
	}
	free(err);
	err = NULL;

	int default_state = !state[0];
	if (default_state && meshd_state_default(state, sizeof state) < 0)
		state[0] = 0;
	rc = state[0] ? meshd_jobs_open(&jobs, core, state, &keep, &err) : -ENOENT;
	if (rc < 0 && default_state && rc != MESH_E_BUSY) {
		/* No usable default: meshd serves programs, not jobs.  One that
		 * another meshd holds is refused as a given one is. */
		mesh_warn("no jobs: %s (give --state DIR)",
			  err ? err : "neither $XDG_STATE_HOME nor $HOME names a state directory");
		free(err);
		err = NULL;
		jobs = NULL;
	} else if (rc < 0) {
		mesh_error("cannot open the jobs: %s", err ? err : mesh_strerror(rc));
		free(err);
		meshd_core_free(core);
		return exit_for(rc);
	}
	if (!jobs && store_url && *store_url)
		mesh_warn("the store is not followed: meshd has no jobs (give --state DIR)");
	if (jobs && store_url && *store_url && (rc = meshd_jobs_store(jobs, store_url, cfg.catalog, &err)) < 0) {
		if (stop_asked) /* stopped while it waited for the store */
			mesh_info("stopped before the store answered");
		else
			mesh_error("%s", err ? err : mesh_strerror(rc));
		free(err);
		meshd_jobs_stop(jobs);
		meshd_jobs_free(jobs);
		meshd_core_free(core);
		return stop_asked ? MESH_EXIT_OK : mesh_exit_for(rc); /* the store's codes: 69 unreachable, 65 another schema */
	}
	parts.core = core;
	parts.jobs = jobs;

	rc = meshd_api_start(&api, &parts, sock, &err);
	if (rc < 0) {
		mesh_error("cannot serve the control API: %s", err ? err : mesh_strerror(rc));
		free(err);
		meshd_jobs_stop(jobs);
		meshd_jobs_free(jobs);
		meshd_core_free(core);
		return exit_for(rc);
	}
	parts.api = api;
	if (metrics_addr) {
		rc = meshd_metrics_serve_start(&msrv, &parts, metrics_addr, metrics_public, &err);
		if (rc < 0) {
			mesh_error("cannot serve metrics: %s", err ? err : mesh_strerror(rc));
			free(err);
			meshd_api_stop(api);
			meshd_core_free(core);
			return rc == MESH_E_PARSE || rc == MESH_E_REFUSED ? MESH_EXIT_USAGE : exit_for(rc);
		}
		mesh_info("serving metrics=%s port=%d", metrics_addr, meshd_metrics_serve_port(msrv));
	}
	if (gwc.listen) {
		gwc.catalog = cfg.catalog;
		gwc.host = meshd_core_host(core);
		gwc.on_log = gw_log;
		rc = mesh_gw_open(&gw, &gwc, &err);
		if (rc < 0) {
			mesh_error("cannot serve the gateway: %s", err ? err : mesh_strerror(rc));
			free(err);
			meshd_metrics_serve_stop(msrv);
			meshd_api_stop(api);
			meshd_core_free(core);
			return rc == MESH_E_PARSE || rc == MESH_E_REFUSED ? MESH_EXIT_USAGE : exit_for(rc);
		}
		parts.gw = gw;
		mesh_info("serving http=%s port=%d", gwc.listen, mesh_gw_port(gw));
	}
	mesh_info("serving socket=%s catalog=%s logs=%s slots=%u isolation=%s", sock, cfg.catalog, cfg.logs,
		  cfg.slots, cfg.isolation);
	rc = meshd_notify("READY=1\nSTATUS=serving");
	if (rc < 0)
		mesh_warn("cannot notify systemd: %s", mesh_strerror(rc));

	/* The loop runs on a thread of its own; this one waits for the stop and
	 * then runs the shutdown while the loop still serves: the API answers
	 * what is in flight and the workers' exits are dispatched. */
	struct loop_run lr = {core, 0};
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
			reload(&parts);
	}
	mesh_info("stopping");
	meshd_notify("STOPPING=1");
	/* The gateway first: its requests in flight end (bounded), then its programs stop. */
	if (gw)
		mesh_gw_drain(gw);
	/* Jobs first: their drivers give their workers back before any
	 * program is stopped (a stop would count as their chunks' failure). */
	meshd_jobs_stop(jobs);
	int inflight = meshd_api_quiesce(api);
	if (inflight > 0) {
		/* A start or call may wait on a worker for a minute: stop every
		 * program so that those requests end now, then let them answer. */
		mesh_info("stopping every program: requests=%d in flight", inflight);
		stop_programs(core);
	}
	meshd_metrics_serve_stop(msrv);
	parts.api = NULL;
	meshd_api_stop(api);
	/* No request or scrape can read them any more. */
	parts.gw = NULL;
	mesh_gw_free(gw);
	meshd_jobs_free(jobs);
	if (threaded) {
		meshd_core_stop(core);
		pthread_join(loop_th, NULL);
		rc = lr.rc;
		if (rc < 0)
			mesh_error("event loop failed: %s", mesh_strerror(rc));
	}
	meshd_core_free(core);
	mesh_info("stopped");
	return rc < 0 ? MESH_EXIT_SOFTWARE : 0;
}
