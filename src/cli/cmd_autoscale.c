/* mesh autoscale: the scale-to-zero policy on the command line.  A thin layer
 * over autoscale/policy.h and autoscale/probe.h; the exit code of decide,
 * tick and plan is the action (0 HOLD, 1 SPAWN, 2 SERVE, 3 REAP); tick
 * --model against a server that answers without that model is 6, "warm but
 * wrong model" (no action of the policy fixes it: spawning is pointless,
 * holding waits for ever). */
#include "autoscale/policy.h"
#include "autoscale/probe.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"
#include "cli/cmds.h"
#include "cli/exit.h"

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static const char usage_text[] =
	"usage: mesh autoscale decide <warm> <demand> <idle_sec> <ttl_sec> [--json]\n"
	"       mesh autoscale tick <demand> <idle_sec> <ttl_sec> [a b c d] [--url URL] [--model NAME]\n"
	"                           [--connect-timeout SEC] [--timeout SEC] [--json]\n"
	"       mesh autoscale plan [--warm N] [--starting N] [--demand N] [--idle T] [--surplus T] [--over T]\n"
	"                           [--min N] [--max N] [--concurrency N] [--ttl T] [--linger T]\n"
	"                           [--upscale-delay T] [--json]\n"
	"       mesh autoscale table\n"
	"       mesh autoscale savings <warm_sec> <window_sec>\n"
	"\n"
	"decide   the seed's decision from warm (0/1), demand (0/1), idle and ttl seconds\n"
	"tick     probe the worker for warmth (GET /v1/models; default target 127.0.0.1:7861,\n"
	"         or the IPv4 a.b.c.d, or --url http://host:port/path, [v6]:port, host:port),\n"
	"         then decide; --model NAME: warm only when the server lists that model\n"
	"plan     the full policy: worker counts, min/max, target concurrency, linger\n"
	"table    print the policy table (first matching row decides)\n"
	"savings  VRAM-seconds saved against always-on, in permil\n"
	"\n"
	"exit: 0 HOLD, 1 SPAWN, 2 SERVE, 3 REAP (decide, tick, plan); 0 (table, savings);\n"
	"6 (tick --model) warm but wrong model: the server answers 2xx but does not list NAME;\n"
	"64 usage error.  Numbers are whole, non-negative decimals; seconds for times.\n";

#define MAX_SECONDS ((uint64_t)INT64_MAX / MESH_NS_PER_S)

/* Options and positionals of one subcommand invocation. */
struct args {
	const char *pos[8];
	int npos;
	const char *url, *model, *connect_timeout, *timeout;
	int json;
	/* plan */
	const char *warm, *starting, *demand, *idle, *surplus, *over, *min, *max, *conc, *ttl, *linger, *updelay;
};

static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct {
		const char *name;
		size_t off;
	} opts[] = {
		{"--url", offsetof(struct args, url)},
		{"--model", offsetof(struct args, model)},
		{"--connect-timeout", offsetof(struct args, connect_timeout)},
		{"--timeout", offsetof(struct args, timeout)},
		{"--warm", offsetof(struct args, warm)},
		{"--starting", offsetof(struct args, starting)},
		{"--demand", offsetof(struct args, demand)},
		{"--idle", offsetof(struct args, idle)},
		{"--surplus", offsetof(struct args, surplus)},
		{"--over", offsetof(struct args, over)},
		{"--min", offsetof(struct args, min)},
		{"--max", offsetof(struct args, max)},
		{"--concurrency", offsetof(struct args, conc)},
		{"--ttl", offsetof(struct args, ttl)},
		{"--linger", offsetof(struct args, linger)},
		{"--upscale-delay", offsetof(struct args, updelay)},
	};
	int only_pos = 0;
	memset(a, 0, sizeof *a);
	for (int i = 2; i < argc; i++) {
		const char *s = argv[i];
		if (!only_pos && !strcmp(s, "--")) {
			only_pos = 1;
			continue;
		}
		if (!only_pos && !strcmp(s, "--json")) {
			a->json = 1;
			continue;
		}
		if (!only_pos && s[0] == '-' && s[1] == '-') {
			size_t k, nl = strcspn(s, "=");
			for (k = 0; k < sizeof opts / sizeof opts[0]; k++)
				if (strlen(opts[k].name) == nl && !strncmp(s, opts[k].name, nl))
					break;
			if (k == sizeof opts / sizeof opts[0]) {
				char near[128];
				return mesh_cli_usage("autoscale %s: unknown option '%s'%s", argv[1], s,
						      mesh_cli_did_you_mean("autoscale", s, near, sizeof near));
			}
			const char **slot = (const char **)((char *)a + opts[k].off);
			if (s[nl] == '=')
				*slot = s + nl + 1;
			else if (i + 1 < argc)
				*slot = argv[++i];
			else
				return mesh_cli_usage("autoscale %s: option '%s' needs a value", argv[1], s);
			continue;
		}
		if (!only_pos && s[0] == '-' && s[1])
			return mesh_cli_usage("autoscale %s: unknown option '%s' (numbers are non-negative)", argv[1],
					      s);
		if (a->npos == (int)(sizeof a->pos / sizeof a->pos[0]))
			return mesh_cli_usage("autoscale %s: too many arguments", argv[1]);
		a->pos[a->npos++] = s;
	}
	return 0;
}

static int num(const char *what, const char *s, uint64_t max, uint64_t *out)
{
	int rc = mesh_parse_u64(s, max, out);
	if (rc == MESH_E_RANGE)
		return mesh_cli_usage("%s '%s' is out of range (at most %llu)", what, s, (unsigned long long)max);
	if (rc)
		return mesh_cli_usage("%s '%s' is not a whole non-negative number", what, s);
	return 0;
}

static int opt_num(const char *what, const char *s, uint64_t max, uint64_t *out)
{
	return s ? num(what, s, max, out) : 0;
}

static int opt_seconds(const char *what, const char *s, uint64_t *ns)
{
	if (!s)
		return 0;
	int rc = mesh_parse_duration(s, 3600 * MESH_NS_PER_S, ns);
	if (rc || *ns == 0)
		return mesh_cli_usage("%s '%s' must be a duration in (0, 1h], e.g. 0.5, 250ms or 2m", what, s);
	return 0;
}

static int no_extra_options(const struct args *a, const char *cmd, int probe_ok, int plan_ok)
{
	if (!probe_ok && (a->url || a->model || a->connect_timeout || a->timeout))
		return mesh_cli_usage("autoscale %s: --url, --model and timeouts belong to 'tick'", cmd);
	if (!plan_ok && (a->warm || a->starting || a->demand || a->idle || a->surplus || a->over || a->min || a->max ||
			 a->conc || a->ttl || a->linger || a->updelay))
		return mesh_cli_usage("autoscale %s: pool options belong to 'plan'", cmd);
	return 0;
}

static int print_json(json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
	json_decref(o);
	if (!s)
		return mesh_cli_fail(-ENOMEM, "autoscale: cannot format JSON");
	puts(s);
	free(s);
	return 0;
}

static int cmd_decide(const struct args *a)
{
	uint64_t warm, demand, idle, ttl;
	int rc;
	if ((rc = no_extra_options(a, "decide", 0, 0)))
		return rc;
	if (a->npos != 4)
		return mesh_cli_usage("usage: mesh autoscale decide <warm> <demand> <idle_sec> <ttl_sec>");
	if ((rc = num("warm", a->pos[0], 1, &warm)) || (rc = num("demand", a->pos[1], 1, &demand)) ||
	    (rc = num("idle_sec", a->pos[2], INT64_MAX, &idle)) || (rc = num("ttl_sec", a->pos[3], INT64_MAX, &ttl)))
		return rc;
	int act = mesh_as_decide((int)warm, (int)demand, (int64_t)idle, (int64_t)ttl);
	if (a->json)
		print_json(json_pack("{s:s, s:I, s:I, s:I, s:I, s:s, s:i}", "cmd", "decide", "warm", (json_int_t)warm,
				     "demand", (json_int_t)demand, "idle_sec", (json_int_t)idle, "ttl_sec",
				     (json_int_t)ttl, "action", mesh_as_action_name(act), "code", act));
	else
		printf("decide warm=%llu demand=%llu idle=%llus ttl=%llus -> %s\n", (unsigned long long)warm,
		       (unsigned long long)demand, (unsigned long long)idle, (unsigned long long)ttl,
		       mesh_as_action_name(act));
	return act;
}

static int cmd_tick(const struct args *a)
{
	uint64_t demand, idle, ttl, oct[4];
	struct mesh_probe_target t;
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	struct mesh_probe_result res;
	int rc;
	if ((rc = no_extra_options(a, "tick", 1, 0)))
		return rc;
	if (a->npos != 3 && a->npos != 7)
		return mesh_cli_usage("usage: mesh autoscale tick <demand> <idle_sec> <ttl_sec> [a b c d] [--url URL]");
	if ((rc = num("demand", a->pos[0], 1, &demand)) || (rc = num("idle_sec", a->pos[1], INT64_MAX, &idle)) ||
	    (rc = num("ttl_sec", a->pos[2], INT64_MAX, &ttl)))
		return rc;
	if (a->npos == 7 && a->url)
		return mesh_cli_usage("autoscale tick: give the worker as a b c d or as --url, not both");
	if (a->npos == 7) {
		for (int i = 0; i < 4; i++)
			if ((rc = num("address octet", a->pos[3 + i], 255, &oct[i])))
				return rc;
		mesh_probe_target_ipv4(&t, (unsigned)oct[0], (unsigned)oct[1], (unsigned)oct[2], (unsigned)oct[3]);
	} else if (a->url) {
		if (mesh_probe_target_parse(&t, a->url))
			return mesh_cli_usage("autoscale tick: cannot use '%s' as a target "
					      "(http://host[:port][/path], host:port, [v6]:port)",
					      a->url);
	} else {
		mesh_probe_target_default(&t);
	}
	if (a->model && !*a->model)
		return mesh_cli_usage("autoscale tick: --model needs a non-empty name");
	o.model = a->model;
	if ((rc = opt_seconds("--connect-timeout", a->connect_timeout, &o.connect_timeout_ns)) ||
	    (rc = opt_seconds("--timeout", a->timeout, &o.response_timeout_ns)))
		return rc;
	if ((rc = mesh_probe(&t, &o, &res)))
		return mesh_cli_fail(rc, "autoscale tick: cannot probe '%s'", t.host);
	/* A server that answers but lacks the model is not cold: starting one
	 * is pointless and waiting for it to warm never ends. */
	int wrong = o.model && !res.warm && res.phase == MESH_PROBE_JUDGE && res.err == MESH_E_NOTFOUND;
	int act = wrong ? MESH_EXIT_WRONGMODEL : mesh_as_decide(res.warm, (int)demand, (int64_t)idle, (int64_t)ttl);
	const char *act_name = wrong ? "WRONG_MODEL" : mesh_as_action_name(act);
	if (a->json)
		print_json(json_pack("{s:s, s:i, s:I, s:I, s:I, s:s, s:i, s:{s:s, s:i, s:f, s:s}}", "cmd", "tick",
				     "warm", res.warm, "demand", (json_int_t)demand, "idle_sec", (json_int_t)idle,
				     "ttl_sec", (json_int_t)ttl, "action", act_name, "code", act, "probe", "addr", res.addr, "status", res.status, "elapsed_ms",
				     (double)res.elapsed_ns / 1e6, "reason", res.reason));
	else
		printf("tick warm=%d demand=%llu idle=%llus ttl=%llus -> %s%s (probe %s)\n", res.warm,
		       (unsigned long long)demand, (unsigned long long)idle, (unsigned long long)ttl, act_name,
		       wrong ? ": warm but wrong model" : "", res.reason);
	return act;
}

static int cmd_plan(const struct args *a)
{
	struct mesh_as_config c = MESH_AS_CONFIG_INIT;
	struct mesh_as_obs o = {0};
	struct mesh_as_plan p;
	uint64_t warm = 0, starting = 0, demand = 0, idle = 0, surplus = 0, over = 0;
	uint64_t min = c.min_workers, max = c.max_workers, conc = c.target_concurrency;
	uint64_t ttl = (uint64_t)c.idle_ttl, linger = (uint64_t)c.linger, updelay = (uint64_t)c.upscale_delay;
	int rc;
	if ((rc = no_extra_options(a, "plan", 0, 1)))
		return rc;
	if (a->npos)
		return mesh_cli_usage("autoscale plan takes only options (see `mesh autoscale --help`)");
	if ((rc = opt_num("--warm", a->warm, 100000, &warm)) || (rc = opt_num("--starting", a->starting, 100000, &starting)) ||
	    (rc = opt_num("--demand", a->demand, UINT32_MAX, &demand)) ||
	    (rc = opt_num("--idle", a->idle, INT64_MAX, &idle)) ||
	    (rc = opt_num("--surplus", a->surplus, INT64_MAX, &surplus)) ||
	    (rc = opt_num("--over", a->over, INT64_MAX, &over)) || (rc = opt_num("--min", a->min, 100000, &min)) ||
	    (rc = opt_num("--max", a->max, 100000, &max)) ||
	    (rc = opt_num("--concurrency", a->conc, 100000, &conc)) ||
	    (rc = opt_num("--ttl", a->ttl, INT64_MAX, &ttl)) ||
	    (rc = opt_num("--linger", a->linger, INT64_MAX, &linger)) ||
	    (rc = opt_num("--upscale-delay", a->updelay, INT64_MAX, &updelay)))
		return rc;
	c.min_workers = (uint32_t)min;
	c.max_workers = (uint32_t)max;
	c.target_concurrency = (uint32_t)conc;
	c.idle_ttl = (int64_t)ttl;
	c.linger = (int64_t)linger;
	c.upscale_delay = (int64_t)updelay;
	o.warm = (uint32_t)warm;
	o.starting = (uint32_t)starting;
	o.demand = demand;
	o.idle = (int64_t)idle;
	o.surplus = (int64_t)surplus;
	o.over = (int64_t)over;
	if (mesh_as_plan(&c, &o, &p))
		return mesh_cli_usage("autoscale plan: need 1 <= --max, --min <= --max, --concurrency >= 1");
	size_t nrows;
	const struct mesh_as_row *rows = mesh_as_rows(&nrows);
	const char *row = p.row >= 0 ? rows[p.row].name : "none";
	if (a->json)
		print_json(json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:s}", "cmd", "plan", "action",
				     mesh_as_action_name(p.action), "code", p.action, "count", (int)p.count, "need",
				     (int)p.need, "after", (int)p.after, "row", row));
	else
		printf("plan warm=%u starting=%u demand=%llu idle=%llu surplus=%llu over=%llu -> %s %u (row %s; need=%u "
		       "after=%u)\n",
		       o.warm, o.starting, (unsigned long long)demand, (unsigned long long)idle,
		       (unsigned long long)surplus, (unsigned long long)over, mesh_as_action_name(p.action), p.count,
		       row, p.need, p.after);
	return p.action;
}

static int cmd_table(const struct args *a)
{
	size_t n;
	const struct mesh_as_row *rows = mesh_as_rows(&n);
	int rc;
	if ((rc = no_extra_options(a, "table", 0, 0)))
		return rc;
	if (a->npos || a->json)
		return mesh_cli_usage("usage: mesh autoscale table");
	printf("autoscale policy: the first row whose condition holds decides; none -> HOLD\n"
	       "  have = warm + starting; need = clamp(ceil(demand / concurrency), min, max)\n\n");
	printf("  %-4s %-11s %-6s %-20s %s\n", "row", "name", "action", "count", "when");
	for (size_t i = 0; i < n; i++)
		printf("  R%-3zu %-11s %-6s %-20s %s\n", i + 1, rows[i].name, mesh_as_action_name(rows[i].action),
		       rows[i].count, rows[i].when);
	printf("  %-4s %-11s %-6s %-20s %s\n", "-", "(none)", "HOLD", "0", "otherwise");
	printf("\n`decide warm demand idle ttl` is this table with min=0 max=1 concurrency=1 upscale_delay=0\n"
	       "linger=idle_ttl=ttl, warm and demand 0/1:\n"
	       "  demand and cold -> SPAWN; demand and warm -> SERVE;\n"
	       "  no demand, warm, idle >= ttl -> REAP; otherwise HOLD\n");
	return 0;
}

static int cmd_savings(const struct args *a)
{
	uint64_t warm, window;
	int rc;
	if ((rc = no_extra_options(a, "savings", 0, 0)))
		return rc;
	if (a->npos != 2)
		return mesh_cli_usage("usage: mesh autoscale savings <warm_sec> <window_sec>");
	if ((rc = num("warm_sec", a->pos[0], INT64_MAX, &warm)) || (rc = num("window_sec", a->pos[1], INT64_MAX, &window)))
		return rc;
	int pm = mesh_as_savings_permil((int64_t)warm, (int64_t)window);
	if (a->json)
		print_json(json_pack("{s:s, s:I, s:I, s:i}", "cmd", "savings", "warm_sec", (json_int_t)warm,
				     "window_sec", (json_int_t)window, "permil", pm));
	else
		printf("savings warm=%llus window=%llus -> %d permil (%d.%d%% of VRAM-seconds saved vs always-on)\n",
		       (unsigned long long)warm, (unsigned long long)window, pm, pm / 10, pm % 10);
	return 0;
}

int mesh_cmd_autoscale(int argc, char **argv)
{
	struct args a;
	int rc;
	if (mesh_cli_wants_help(argc, argv)) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (argc < 2)
		return mesh_cli_usage("autoscale needs a subcommand: decide, tick, plan, table, savings");
	if ((rc = parse_args(argc, argv, &a)))
		return rc;
	if (!strcmp(argv[1], "decide"))
		return cmd_decide(&a);
	if (!strcmp(argv[1], "tick"))
		return cmd_tick(&a);
	if (!strcmp(argv[1], "plan"))
		return cmd_plan(&a);
	if (!strcmp(argv[1], "table"))
		return cmd_table(&a);
	if (!strcmp(argv[1], "savings"))
		return cmd_savings(&a);
	return mesh_cli_usage("autoscale: unknown subcommand '%s' (decide, tick, plan, table, savings)", argv[1]);
}
