/* mesh serve: scale-to-zero activator in front of a local server.  A thin
 * layer over serve/serve.h: parse the options, open, run, print the
 * events (stderr log lines) and the status lines (stdout; one JSON object a
 * line with --json). */
#include "serve/serve.h"
#include "http/relay.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/parse.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "host/manifest.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
	"usage: mesh serve --listen ADDR:PORT --upstream ADDR:PORT --idle SEC [options] -- CMD [ARG...]\n"
	"\n"
	"Scale to zero for any local server (llama.cpp's server, vLLM, ...): listen on ADDR:PORT; on the\n"
	"first connection while no server runs, start CMD in its own process group; hold connections\n"
	"until GET PATH on the upstream answers 2xx; relay bytes both ways; after SEC seconds without a\n"
	"connection stop the server (SIGTERM, the grace, then SIGKILL to its group) and start it again\n"
	"on the next connection.\n"
	"With --http, demand is requests, not connections: a request counts from its first byte to the\n"
	"end of its response (a stream until it ends); idle keep-alive connections and bare connects\n"
	"neither start the server nor keep it up, and --idle counts from the end of the last response.\n"
	"\n"
	"  --listen ADDR:PORT       where clients connect (IPv4, [IPv6]; port 0 picks one)\n"
	"  --upstream ADDR:PORT     where CMD listens\n"
	"  --idle SEC               stop the server after SEC seconds without a connection (--http:\n"
	"                           without a request in flight)\n"
	"  --http                   count HTTP/1.1 requests, not connections\n"
	"  --start-on-connect       --http: a connection that has sent nothing yet starts the server too\n"
	"  --probe PATH             the warmth check path (default /v1/models)\n"
	"  --model NAME             warm only when the probe's model list holds NAME\n"
	"  --stop-signal SIG        the stop signal: TERM (default), INT, QUIT (nginx), HUP, USR1, USR2\n"
	"  --grace SEC              stop signal to SIGKILL (default 5)\n"
	"  --drain-timeout SEC      at SIGTERM, longest wait for requests/connections in flight (default 30)\n"
	"  --max-conns N            most client connections at once, 503 past it (default: from the fd limit)\n"
	"  --header-timeout SEC     --http: a request head's first byte to its end, at most (default 60)\n"
	"  --body-timeout SEC       --http: one byte of a request body to the next, at most (default 60);\n"
	"                           past either the client gets 408 and its connection ends\n"
	"  --start-timeout SEC      longest start, spawn to warm (default 300)\n"
	"  --queue-timeout SEC      longest wait of a held connection (default 120)\n"
	"  --max-queue N            most connections held at once (default 1024)\n"
	"  --log FILE               the server's output (default ./mesh-serve.log, appended)\n"
	"  --json                   status lines and events as one JSON object per line on stdout\n"
	"  --no-splice              relay through user-space copies (for comparison)\n"
	"\n"
	"Clients past the queue bound get `HTTP/1.1 503` with Retry-After (HTTP clients) or a close.\n"
	"SIGUSR1 prints the savings line; SIGTERM/SIGINT drain (stop accepting, let what is in flight\n"
	"finish, a second signal cuts it short), stop the server and exit 0.\n"
	"exit: 0 after a stop signal; 64 usage; 66 CMD not found; 71 cannot listen (address in use).\n"
	"See docs/serve.md.\n";

enum { O_LISTEN = 256, O_UPSTREAM, O_IDLE, O_PROBE, O_MODEL, O_GRACE, O_START_TIMEOUT, O_QUEUE_TIMEOUT,
       O_MAX_QUEUE, O_LOG, O_JSON, O_NO_SPLICE, O_HELP, O_HTTP, O_START_ON_CONNECT, O_STOP_SIGNAL,
       O_DRAIN_TIMEOUT, O_MAX_CONNS, O_HEADER_TIMEOUT, O_BODY_TIMEOUT };

static const struct option longopts[] = {
	{"listen", required_argument, NULL, O_LISTEN},
	{"upstream", required_argument, NULL, O_UPSTREAM},
	{"idle", required_argument, NULL, O_IDLE},
	{"probe", required_argument, NULL, O_PROBE},
	{"model", required_argument, NULL, O_MODEL},
	{"grace", required_argument, NULL, O_GRACE},
	{"start-timeout", required_argument, NULL, O_START_TIMEOUT},
	{"queue-timeout", required_argument, NULL, O_QUEUE_TIMEOUT},
	{"max-queue", required_argument, NULL, O_MAX_QUEUE},
	{"log", required_argument, NULL, O_LOG},
	{"json", no_argument, NULL, O_JSON},
	{"no-splice", no_argument, NULL, O_NO_SPLICE},
	{"help", no_argument, NULL, O_HELP},
	{"http", no_argument, NULL, O_HTTP},
	{"start-on-connect", no_argument, NULL, O_START_ON_CONNECT},
	{"stop-signal", required_argument, NULL, O_STOP_SIGNAL},
	{"drain-timeout", required_argument, NULL, O_DRAIN_TIMEOUT},
	{"max-conns", required_argument, NULL, O_MAX_CONNS},
	{"header-timeout", required_argument, NULL, O_HEADER_TIMEOUT},
	{"body-timeout", required_argument, NULL, O_BODY_TIMEOUT},
	{NULL, 0, NULL, 0},
};

struct out {
	int json;
};

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static json_t *stats_json(const struct mesh_serve_stats *st)
{
	return json_pack("{s:s, s:I, s:f, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
			 "s:I, s:I}",
			 "state", mesh_serve_state_name(st->state), "pid", (json_int_t)st->pid, "savings",
			 (double)st->savings_permil / 1000.0, "warm_s", (double)st->warm_ns / 1e9, "window_s",
			 (double)st->window_ns / 1e9, "spawns", (json_int_t)st->spawns, "reaps", (json_int_t)st->reaps,
			 "crashes", (json_int_t)st->crashes, "start_timeouts", (json_int_t)st->start_timeouts,
			 "spawn_failures", (json_int_t)st->spawn_failures, "served", (json_int_t)st->served,
			 "rejected", (json_int_t)st->rejected, "open", (json_int_t)st->open, "queued",
			 (json_int_t)st->queued, "queued_max", (json_int_t)st->queued_max, "bytes_in",
			 (json_int_t)st->bytes_in, "bytes_out", (json_int_t)st->bytes_out, "requests",
			 (json_int_t)st->requests, "inflight", (json_int_t)st->inflight, "demand", (json_int_t)st->demand,
			 "pipes", (json_int_t)st->pipes);
}

static void print_json(const struct mesh_serve_event *ev)
{
	json_t *o = json_pack("{s:s}", "event", mesh_serve_event_name(ev->kind));
	if (!o)
		return;
	if (ev->pid)
		json_object_set_new(o, "pid", json_integer(ev->pid));
	if (ev->kind == MESH_SERVE_EV_CRASHED || ev->kind == MESH_SERVE_EV_REAPED ||
	    ev->kind == MESH_SERVE_EV_REJECTED || ev->kind == MESH_SERVE_EV_DRAINING)
		json_object_set_new(o, "status", json_integer(ev->status));
	if (ev->elapsed_ns)
		json_object_set_new(o, "elapsed_ms", json_real(ms(ev->elapsed_ns)));
	if (ev->addr)
		json_object_set_new(o, "addr", json_string(ev->addr));
	if (ev->reason)
		json_object_set_new(o, "reason", json_string(ev->reason));
	if (ev->err)
		json_object_set_new(o, "error", json_string(mesh_strerror(ev->err)));
	if (ev->tail) {
		json_t *a = json_array();
		for (size_t i = 0; i < ev->ntail; i++)
			json_array_append_new(a, json_string(ev->tail[i]));
		json_object_set_new(o, "tail", a);
	}
	json_object_set_new(o, "stats", stats_json(ev->stats));
	/* Output bytes of the server may be any bytes: ensure_ascii keeps the
	 * line valid JSON whatever they are. */
	char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(6));
	if (s) {
		fputs(s, stdout);
		fputc('\n', stdout);
		fflush(stdout);
		free(s);
	}
	json_decref(o);
}

static void print_savings(const struct mesh_serve_stats *st, const char *when)
{
	printf("mesh serve %s: savings %.1f%% (warm %.3f s of %.3f s) state=%s spawns=%llu reaps=%llu "
	       "crashes=%llu start_timeouts=%llu served=%llu rejected=%llu queued_max=%llu open=%llu requests=%llu\n",
	       when, (double)st->savings_permil / 10.0, (double)st->warm_ns / 1e9, (double)st->window_ns / 1e9,
	       mesh_serve_state_name(st->state), (unsigned long long)st->spawns, (unsigned long long)st->reaps,
	       (unsigned long long)st->crashes, (unsigned long long)st->start_timeouts,
	       (unsigned long long)st->served, (unsigned long long)st->rejected, (unsigned long long)st->queued_max,
	       (unsigned long long)st->open, (unsigned long long)st->requests);
	fflush(stdout);
}

static void on_event(void *ctx, const struct mesh_serve_event *ev)
{
	const struct out *o = ctx;
	switch (ev->kind) {
	case MESH_SERVE_EV_LISTENING:
		mesh_info("listening addr=%s", ev->addr);
		break;
	case MESH_SERVE_EV_SPAWNED:
		mesh_info("spawned pid=%d (%s)", (int)ev->pid, ev->reason ? ev->reason : "");
		break;
	case MESH_SERVE_EV_SPAWN_FAILED:
		mesh_error("cannot start the server: %s", mesh_strerror(ev->err));
		break;
	case MESH_SERVE_EV_WARM:
		mesh_info("warm pid=%d after_ms=%.1f (%s)", (int)ev->pid, ms(ev->elapsed_ns), ev->reason ? ev->reason : "");
		break;
	case MESH_SERVE_EV_START_TIMEOUT:
	case MESH_SERVE_EV_CRASHED:
		if (ev->kind == MESH_SERVE_EV_CRASHED)
			mesh_error("crashed pid=%d status=%d uptime_ms=%.1f: %s", (int)ev->pid, ev->status,
				   ms(ev->elapsed_ns), ev->reason);
		else
			mesh_error("start timeout pid=%d after_ms=%.1f: %s", (int)ev->pid, ms(ev->elapsed_ns), ev->reason);
		for (size_t i = 0; i < ev->ntail; i++)
			mesh_error("tail pid=%d | %s", (int)ev->pid, ev->tail[i]);
		break;
	case MESH_SERVE_EV_REAPING:
		mesh_info("reaping pid=%d (%s)", (int)ev->pid, ev->reason ? ev->reason : "");
		break;
	case MESH_SERVE_EV_KILLED:
		mesh_warn("grace over, SIGKILL to group pid=%d after_ms=%.1f", (int)ev->pid, ms(ev->elapsed_ns));
		break;
	case MESH_SERVE_EV_REAPED:
		mesh_info("reaped pid=%d status=%d stop_ms=%.1f; no process left in its group", (int)ev->pid, ev->status,
			  ms(ev->elapsed_ns));
		break;
	case MESH_SERVE_EV_REJECTED:
		mesh_warn("rejected a connection (%s): %s", ev->status ? "HTTP error sent" : "closed", ev->reason);
		break;
	case MESH_SERVE_EV_STATUS:
		if (!o->json)
			print_savings(ev->stats, "status");
		break;
	case MESH_SERVE_EV_EXIT:
		if (!o->json)
			print_savings(ev->stats, "exit");
		break;
	case MESH_SERVE_EV_DRAINING:
		mesh_info("draining: %s", ev->reason);
		break;
	}
	if (o->json)
		print_json(ev);
}

static int parse_secs(const char *opt, const char *v, uint64_t *out, int allow_zero)
{
	/* At most about 290 years: keeps every deadline sum far from overflow. */
	int rc = mesh_parse_duration(v, UINT64_MAX / 2, out);
	if (rc < 0 || (!allow_zero && *out == 0))
		return mesh_cli_usage("serve: %s wants a %sduration (30, 0.5, 250ms, 5m), not '%s'", opt,
				      allow_zero ? "" : "positive ", v);
	return 0;
}

/* The options that take a duration: the field each sets, and whether it
 * may be 0. */
static const struct {
	int opt;
	const char *name;
	size_t off;
	int allow_zero;
} secs_opts[] = {
	{O_IDLE, "--idle", offsetof(struct mesh_serve_config, idle_ns), 0},
	{O_GRACE, "--grace", offsetof(struct mesh_serve_config, grace_ns), 1},
	{O_START_TIMEOUT, "--start-timeout", offsetof(struct mesh_serve_config, start_timeout_ns), 0},
	{O_QUEUE_TIMEOUT, "--queue-timeout", offsetof(struct mesh_serve_config, queue_timeout_ns), 0},
	{O_DRAIN_TIMEOUT, "--drain-timeout", offsetof(struct mesh_serve_config, drain_timeout_ns), 1},
	{O_HEADER_TIMEOUT, "--header-timeout", offsetof(struct mesh_serve_config, header_timeout_ns), 0},
	{O_BODY_TIMEOUT, "--body-timeout", offsetof(struct mesh_serve_config, body_timeout_ns), 0},
};

/* One option: getopt_long's answer opt for the word word, with its value
 * arg, into c and o (*have_idle: --idle came).  0, or the exit code of a
 * usage error, said. */
static int take_opt(int opt, const char *word, const char *arg, struct mesh_serve_config *c, struct out *o,
		    int *have_idle)
{
	uint64_t v;
	for (size_t i = 0; i < sizeof secs_opts / sizeof secs_opts[0]; i++) {
		if (secs_opts[i].opt != opt)
			continue;
		if (parse_secs(secs_opts[i].name, arg, (uint64_t *)((char *)c + secs_opts[i].off), secs_opts[i].allow_zero))
			return MESH_EXIT_USAGE;
		*have_idle |= opt == O_IDLE;
		return 0;
	}
	switch (opt) {
	case O_LISTEN:
		c->listen = arg;
		break;
	case O_UPSTREAM:
		c->upstream = arg;
		break;
	case O_PROBE:
		c->probe_path = arg;
		break;
	case O_MODEL:
		c->model = arg;
		break;
	case O_MAX_QUEUE:
		if (mesh_parse_u64(arg, 1000000, &v) < 0 || v == 0)
			return mesh_cli_usage("serve: --max-queue wants a count 1..1000000, not '%s'", arg);
		c->max_queue = (uint32_t)v;
		break;
	case O_LOG:
		c->log_path = arg;
		break;
	case O_JSON:
		o->json = 1;
		break;
	case O_NO_SPLICE:
		c->relay_flags |= MESH_RELAY_NO_SPLICE;
		break;
	case O_HTTP:
		c->http = 1;
		break;
	case O_START_ON_CONNECT:
		c->start_on_connect = 1;
		break;
	case O_STOP_SIGNAL:
		if (!(c->stop_signal = mesh_signal_from_name(arg)))
			return mesh_cli_usage("serve: --stop-signal wants TERM, INT, QUIT, HUP, USR1 or USR2, not '%s'",
					      arg);
		break;
	case O_MAX_CONNS:
		if (mesh_parse_u64(arg, 10000000, &v) < 0 || v == 0)
			return mesh_cli_usage("serve: --max-conns wants a count 1..10000000, not '%s'", arg);
		c->max_conns = (uint32_t)v;
		break;
	case ':':
		return mesh_cli_usage("serve: %s wants a value", word);
	default: {
		char near[128];
		return mesh_cli_usage("serve: unknown option '%s'%s", word,
				      mesh_cli_did_you_mean("serve", word, near, sizeof near));
	}
	}
	return 0;
}

/* Opens the activator on c, runs it to its end and frees it; the exit code,
 * with what failed said. */
static int serve(const struct mesh_serve_config *c)
{
	struct mesh_serve *s;
	char why[512];
	int rc = mesh_serve_open(&s, c, why, sizeof why);
	if (rc < 0) {
		if (rc == MESH_E_PARSE)
			return mesh_cli_usage("serve: %s", why);
		int code = mesh_exit_for(rc);
		/* A listen address in use (or refused) is the system's refusal. */
		if (!strncmp(why, "cannot listen", 13))
			code = MESH_EXIT_OSERR;
		mesh_cli_fail(rc, "%s", why);
		return code;
	}
	rc = mesh_serve_run(s);
	mesh_serve_free(s);
	if (rc < 0)
		return mesh_cli_fail(rc, "serve: the event loop failed");
	return MESH_EXIT_OK;
}

int mesh_cmd_serve(int argc, char **argv)
{
	struct mesh_serve_config c = MESH_SERVE_CONFIG_INIT;
	struct out o = {0};
	int have_idle = 0, opt, rc;
	if (mesh_cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return MESH_EXIT_OK;
	}
	opterr = 0;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+:", longopts, NULL)) != -1)
		if ((rc = take_opt(opt, argv[optind - 1], optarg, &c, &o, &have_idle)))
			return rc;
	if (optind < argc && strcmp(argv[optind - 1], "--") != 0)
		return mesh_cli_usage("serve: unexpected '%s' (the server command goes after --)", argv[optind]);
	if (!c.listen)
		return mesh_cli_usage("serve: --listen ADDR:PORT is required");
	if (!c.upstream)
		return mesh_cli_usage("serve: --upstream ADDR:PORT is required");
	if (!have_idle)
		return mesh_cli_usage("serve: --idle SECONDS is required");
	if (optind >= argc)
		return mesh_cli_usage("serve: the server command is missing (-- CMD ARG...)");
	c.argv = argv + optind;
	c.on_event = on_event;
	c.ctx = &o;
	return serve(&c);
}
