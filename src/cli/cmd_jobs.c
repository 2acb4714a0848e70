/* mesh submit|jobs|wait|results|cancel|rm: thin clients of meshd's job routes
 * (docs/api.md, "Jobs"; docs/jobs.md). */
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "cli/jobs_store.h"
#include "meshd/api/api.h"
#include "client/api_client.h"
#include "exec/input.h"
#include "exec/progress.h"
#include "host/manifest.h"
#include "job/job.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define REQ_TIMEOUT_NS (600ull * MESH_NS_PER_S)
/* A long poll asks meshd to hold the answer this long (it may answer sooner). */
#define POLL_WAIT "20"
#define BAR_WAIT "0.2"

static const char *const helps[][2] = {
	{"submit",
	 "usage: mesh submit PROGRAM [--chunks N | --input FILE | ::: ARG...] [--max-workers K]\n"
	 "                   [--retries K] [--timeout S] [--speculate] [--name NAME]\n"
	 "                   [--socket PATH | --store URL]\n\n"
	 "Submits a job to meshd: its chunks are served by workers of PROGRAM (from meshd's\n"
	 "catalog), started from zero as the pending chunks ask and reaped when idle.  Prints the\n"
	 "job's id alone on stdout.\n\n"
	 "  --chunks N       N chunks with empty input (chunk ids 0..N-1)\n"
	 "  --input FILE     one chunk a line of FILE ('-': standard input), the line without its\n"
	 "                   newline is the chunk's input\n"
	 "  ::: ARG...       one chunk an argument\n"
	 "  --max-workers K  at most K workers at once (default: the manifest's max_workers)\n"
	 "  --retries K      a chunk is tried at most K times, then buried (default 3)\n"
	 "  --timeout S      a chunk held longer by a worker gets the worker killed and replaced\n"
	 "  --speculate      stragglers get a copy on another worker; the first result wins\n"
	 "  --name NAME      a label shown by `mesh jobs`\n"
	 "  --wait           then wait for its end as `mesh wait` does (the id first, then the\n"
	 "                   progress; its exit code)\n"
	 "  --store URL      submit to a shared PostgreSQL store instead (default $MESH_STORE unless\n"
	 "                   --socket): every `meshd --store URL` whose catalog has PROGRAM runs it;\n"
	 "                   jobs, wait, results and cancel take --store too (docs/cluster.md)\n"},
	{"jobs", "usage: mesh jobs [--all] [--json] [--socket PATH | --store URL]\n\n"
		 "The running jobs and the 20 that ended last: id, program, state, chunks\n"
		 "done/leased/pending/buried, rate, ETA and workers.  --all: every job meshd keeps\n"
		 "(`meshd --keep-jobs`, `--keep-for`).  --json prints meshd's answer as it is.\n"},
	{"wait", "usage: mesh wait JOB [--quiet] [--socket PATH | --store URL]\n\n"
		 "Waits until job JOB ends; a progress bar on stderr when it is a terminal (--quiet: none).\n"
		 "Exit: 0 complete; 1 it ended with buried chunks; 6 cancelled; 70 it stopped on an error;\n"
		 "75 its program is FAILED (a crash loop: nothing moves until `mesh start PROGRAM`).\n"},
	{"results", "usage: mesh results JOB [--no-wait] [--socket PATH | --store URL]\n\n"
		    "Writes each DONE chunk's result bytes, in chunk order, with nothing added between\n"
		    "them.  While the job runs it streams: chunk k+1 is written once chunk k is settled\n"
		    "(a buried chunk adds nothing).  --no-wait writes only what is DONE now and stops at\n"
		    "the first chunk that is not.  A DONE chunk whose result is missing is named on stderr\n"
		    "and skipped; the others are written, and the exit is 65.\n"},
	{"cancel", "usage: mesh cancel JOB [--socket PATH | --store URL]\n\n"
		   "Stops job JOB for good: running chunks are cut, nothing more starts; what is DONE stays.\n"},
	{"rm", "usage: mesh rm JOB [--socket PATH]\n\n"
	       "Removes job JOB, which has ended (complete, failed, cancelled or error): its directory,\n"
	       "results and all, and meshd forgets it; its id is not given again.  A running job is\n"
	       "refused (exit 75): `mesh cancel JOB` stops it first.  meshd removes old jobs by itself\n"
	       "(`meshd --keep-jobs N --keep-for DURATION`, docs/jobs.md).\n"},
};

struct jopts {
	char sock[PATH_MAX];
	const char *store; /* --store URL, else $MESH_STORE unless --socket: the store's jobs (cmd_jobs_store.c) */
	const char *job;
	int json, quiet, no_wait, all;
};

static void print_help(const char *cmd)
{
	mesh__meshd_cmd_help(helps, sizeof helps / sizeof helps[0], cmd);
}

static int set_sock(struct jopts *o, const char *cmd, const char *v)
{
	if (!v || !*v || strlen(v) >= sizeof o->sock)
		return mesh_cli_usage("%s: --socket wants a path", cmd);
	strcpy(o->sock, v);
	return -1;
}

/* MESH_STORE selects the store unless --socket names a meshd. */
static void store_default(struct jopts *o)
{
	const char *env = getenv("MESH_STORE");
	if (!o->store && !o->sock[0] && env && *env)
		o->store = env;
}

static int default_sock(struct jopts *o, const char *cmd)
{
	if (!o->sock[0] && meshd_socket_default(o->sock, sizeof o->sock) < 0)
		return mesh_cli_usage("%s: the default socket path is too long; give --socket PATH", cmd);
	return -1;
}

/* One request; on failure prints why and returns the exit code, else -1. */
static int request(const struct jopts *o, const char *what, const char *method, const char *target, const void *body,
		   size_t n, struct meshd_reply *r)
{
	int rc = meshd_client_request(o->sock, method, target, body, n, REQ_TIMEOUT_NS, r);
	if (rc < 0) {
		if (meshd_client_unreachable(rc)) {
			fprintf(stderr, "mesh: cannot reach meshd at '%s': %s\n", o->sock, mesh_strerror(rc));
			return MESH_EXIT_UNAVAILABLE;
		}
		return mesh_cli_fail(rc, "%s: no answer from meshd at '%s'", what, o->sock);
	}
	if (r->status >= 400) {
		char *msg = NULL;
		int err = meshd_reply_error(r, &msg);
		fprintf(stderr, "mesh: %s: %s\n", what, msg ? msg : "error");
		free(msg);
		meshd_reply_release(r);
		return mesh_exit_for(err);
	}
	return -1;
}

/* Adds s to b percent-encoded for a query value. */
static int add_qvalue(struct mesh_buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char e[3] = {'%', hex[c >> 4], hex[c & 15]};
		int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
			    c == '_' || c == '.' || c == '~';
		if (mesh_buf_add(b, plain ? (const char *)&c : e, plain ? 1 : 3) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* The job id argument: digits (meshd's ids are 1, 2, 3, ...). */
static int job_arg(struct jopts *o, const char *cmd, const char *a)
{
	uint64_t id;
	if (o->job)
		return mesh_cli_usage("%s: unexpected argument '%s'", cmd, a);
	if (mesh_parse_u64(a, UINT64_MAX, &id) < 0 || id == 0)
		return mesh_cli_usage("%s: '%s' is not a job id (ids are 1, 2, 3, ...; see `mesh jobs`)", cmd, a);
	o->job = a;
	return -1;
}

/* Common options of jobs, wait, results, cancel. */
static int parse(int argc, char **argv, struct jopts *o, int want_job)
{
	const char *cmd = argv[0];
	memset(o, 0, sizeof *o);
	if (mesh_cli_wants_help(argc, argv)) {
		print_help(cmd);
		return 0;
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		int ex = -1;
		if (!strncmp(a, "--socket=", 9))
			ex = set_sock(o, cmd, a + 9);
		else if (!strncmp(a, "--store=", 8))
			o->store = a + 8;
		else if (!strcmp(a, "--store") && i + 1 < argc)
			o->store = argv[++i];
		else if (!strcmp(a, "--socket"))
			ex = set_sock(o, cmd, i + 1 < argc ? argv[++i] : NULL);
		else if (!strcmp(a, "--json") && !strcmp(cmd, "jobs"))
			o->json = 1;
		else if (!strcmp(a, "--all") && !strcmp(cmd, "jobs"))
			o->all = 1;
		else if (!strcmp(a, "--quiet") && !strcmp(cmd, "wait"))
			o->quiet = 1;
		else if (!strcmp(a, "--no-wait") && !strcmp(cmd, "results"))
			o->no_wait = 1;
		else if (a[0] == '-' && a[1])
			return mesh_cli_usage("%s: unknown option '%s'", cmd, a);
		else if (want_job)
			ex = job_arg(o, cmd, a);
		else
			return mesh_cli_usage("%s: unexpected argument '%s'", cmd, a);
		if (ex >= 0)
			return ex;
	}
	if (want_job && !o->job)
		return mesh_cli_usage("%s: which job? (mesh %s JOB; `mesh jobs` lists them)", cmd, cmd);
	store_default(o);
	return o->store ? -1 : default_sock(o, cmd);
}

/* ---- submit ---- */

struct sub {
	const char *program, *input, *name;
	char **words;
	size_t nwords;
	uint64_t chunks, max_workers, retries, timeout_ns;
	int have_chunks, speculate;
};

/* The chunks' inputs, one a line, from --input or :::, through exec/input's
 * sources (as `mesh run` reads them).  0 or an exit code. */
static int build_input(const struct sub *s, struct mesh_buf *out)
{
	struct mesh_exec_list list = MESH_EXEC_LIST_INIT;
	struct mesh_exec_source src = {&list, 0};
	struct mesh_exec_input in = MESH_EXEC_INPUT_INIT;
	int rc, ex = 0;
	if (s->input) {
		char *data = NULL;
		size_t len = 0;
		uint64_t bad = 0;
		int from_stdin = !strcmp(s->input, "-");
		rc = mesh_read_file(from_stdin ? "/dev/stdin" : s->input, MESHD_API_MAX_BODY, &data, &len);
		if (rc == MESH_E_TOOBIG) {
			/* meshd takes the inputs in one request body */
			fprintf(stderr, "mesh: submit: '%s' is too large: a job's input is at most %u bytes (16 MiB)\n",
				from_stdin ? "standard input" : s->input, MESHD_API_MAX_BODY);
			return mesh_exit_for(rc);
		}
		if (rc < 0)
			return mesh_cli_fail(rc, "submit: cannot read '%s'", from_stdin ? "standard input" : s->input);
		rc = mesh_exec_list_split(&list, data, len, '\n', &bad);
		free(data);
		if (rc == MESH_E_PARSE) {
			fprintf(stderr, "mesh: submit: line %" PRIu64 " of '%s' holds a NUL byte\n", bad, s->input);
			ex = MESH_EXIT_DATAERR;
			goto out;
		}
	} else {
		for (size_t i = 0; i < s->nwords; i++)
			if (strchr(s->words[i], '\n')) {
				ex = mesh_cli_usage("submit: argument %zu holds a newline, which no chunk input may", i + 1);
				goto out;
			}
		rc = mesh_exec_list_from_argv(&list, s->words, s->nwords);
	}
	if (rc < 0) {
		ex = mesh_cli_fail(rc, "submit: cannot read the chunks");
		goto out;
	}
	if ((rc = mesh_exec_input_combine(&in, &src, 1, NULL)) < 0) {
		ex = mesh_cli_fail(rc, "submit: cannot read the chunks");
		goto out;
	}
	if (!in.n) {
		fprintf(stderr, "mesh: submit: no chunks (the input is empty)\n");
		ex = MESH_EXIT_DATAERR;
		goto out;
	}
	for (uint64_t i = 0; i < in.n && !ex; i++) {
		size_t len;
		const char *line = mesh_exec_input_line(&in, i, &len);
		if (mesh_buf_add(out, line, len) < 0 || mesh_buf_add(out, "\n", 1) < 0)
			ex = mesh_cli_fail(-ENOMEM, "submit");
	}
out:
	mesh_exec_input_release(&in);
	mesh_exec_list_release(&list);
	return ex;
}

static int sub_value(int argc, char **argv, int *i, const char **v)
{
	const char *a = argv[*i], *eq = strchr(a, '=');
	if (eq) {
		*v = eq + 1;
		return -1;
	}
	if (*i + 1 >= argc)
		return mesh_cli_usage("submit: %s needs a value", a);
	*v = argv[++*i];
	return -1;
}

static int opt_is(const char *a, const char *name)
{
	size_t n = strlen(name);
	return !strncmp(a, name, n) && (a[n] == 0 || a[n] == '=');
}

/* mesh submit --store: the job goes to the store itself (any meshd that
 * follows it and has the program runs it). */
static int wait_for(const struct jopts *o);

static int submit_store(const struct jopts *o, const struct sub *s, const struct mesh_buf *body, uint64_t *id)
{
	struct mesh_pgr_job pj = {0};
	snprintf(pj.program, sizeof pj.program, "%s", s->program);
	snprintf(pj.name, sizeof pj.name, "%s", s->name ? s->name : "");
	pj.n = s->chunks;
	if (!s->have_chunks)
		for (size_t i = 0; i < body->len; i++)
			pj.n += body->p[i] == '\n';
	pj.max_workers = (unsigned)s->max_workers;
	pj.retries = s->retries ? (uint32_t)s->retries : MESH_JOB_MAX_ATTEMPTS_DEFAULT;
	pj.timeout_ns = s->timeout_ns;
	pj.speculate = s->speculate;
	return mesh__sjobs_submit(o->store, &pj, s->have_chunks ? NULL : body->p, s->have_chunks ? 0 : body->len, id);
}

int mesh_cmd_submit(int argc, char **argv)
{
	struct jopts o;
	struct sub s = {0};
	memset(&o, 0, sizeof o);
	int i, ex, wait = 0;
	for (i = 1; i < argc && strcmp(argv[i], ":::"); i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			print_help("submit");
			return 0;
		}
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		ex = -1;
		if (!strcmp(a, ":::")) {
			s.words = argv + i + 1;
			s.nwords = (size_t)(argc - i - 1);
			if (!s.nwords)
				return mesh_cli_usage("submit: ::: needs at least one argument");
			break;
		}
		if (opt_is(a, "--socket")) {
			if ((ex = sub_value(argc, argv, &i, &v)) < 0)
				ex = set_sock(&o, "submit", v);
		} else if (opt_is(a, "--store")) {
			if ((ex = sub_value(argc, argv, &i, &v)) < 0)
				o.store = v;
		} else if (opt_is(a, "--chunks")) {
			if ((ex = sub_value(argc, argv, &i, &v)) < 0 &&
			    (mesh_parse_u64(v, MESH_JOB_MAX_CHUNKS, &s.chunks) < 0 || !s.chunks))
				return mesh_cli_usage("submit: --chunks wants a whole number from 1 to %llu, not '%s'",
						      (unsigned long long)MESH_JOB_MAX_CHUNKS, v);
			s.have_chunks = 1;
		} else if (opt_is(a, "--input")) {
			if ((ex = sub_value(argc, argv, &i, &v)) < 0)
				s.input = v;
		} else if (opt_is(a, "--max-workers")) {
			if ((ex = sub_value(argc, argv, &i, &v)) < 0 &&
			    (mesh_parse_u64(v, 64, &s.max_workers) < 0 || !s.max_workers))
				return mesh_cli_usage("submit: --max-workers wants 1 to 64, not '%s'", v);
		} else if (opt_is(a, "--retries")) {
			if ((ex = sub_value(argc, argv, &i, &v)) < 0 &&
			    (mesh_parse_u64(v, 1000000, &s.retries) < 0 || !s.retries))
				return mesh_cli_usage("submit: --retries wants 1 to 1000000, not '%s'", v);
		} else if (opt_is(a, "--timeout")) {
			if ((ex = sub_value(argc, argv, &i, &v)) < 0 &&
			    (mesh_parse_duration(v, 86400ull * MESH_NS_PER_S, &s.timeout_ns) < 0 || !s.timeout_ns))
				return mesh_cli_usage("submit: --timeout wants a duration (0 < T <= 1d: 30, 250ms, 5m, 1.5h), not '%s'", v);
		} else if (!strcmp(a, "--speculate")) {
			s.speculate = 1;
		} else if (!strcmp(a, "--wait")) {
			wait = 1;
		} else if (opt_is(a, "--name")) {
			if ((ex = sub_value(argc, argv, &i, &v)) < 0)
				s.name = v;
		} else if (a[0] == '-' && a[1]) {
			return mesh_cli_usage("submit: unknown option '%s'", a);
		} else if (!s.program) {
			s.program = a;
		} else {
			return mesh_cli_usage("submit: unexpected argument '%s' (chunk arguments go after :::)", a);
		}
		if (ex >= 0)
			return ex;
	}
	if (!s.program)
		return mesh_cli_usage("submit: which program? (mesh submit PROGRAM --chunks N | --input FILE | ::: ARG...)");
	if (!mesh_manifest_name_ok(s.program))
		return mesh_cli_usage("submit: bad program name '%s': 1 to 64 letters, digits, '_' or '-'", s.program);
	if (s.have_chunks + (s.input != NULL) + (s.words != NULL) != 1)
		return mesh_cli_usage("submit: give the chunks once: --chunks N, --input FILE or ::: ARG...");
	store_default(&o);
	if (!o.store && (ex = default_sock(&o, "submit")) >= 0)
		return ex;
	struct mesh_buf body = MESH_BUF_INIT, t = MESH_BUF_INIT;
	if (!s.have_chunks && (ex = build_input(&s, &body)) != 0) {
		mesh_buf_release(&body);
		return ex;
	}
	if (o.store) {
		uint64_t sid = 0;
		ex = submit_store(&o, &s, &body, &sid);
		mesh_buf_release(&body);
		if (ex || !wait)
			return ex;
		fflush(stdout);
		return mesh__sjobs_wait(o.store, sid, 0);
	}
	mesh_buf_adds(&t, "/v1/jobs?program=");
	add_qvalue(&t, s.program);
	if (s.have_chunks)
		mesh_buf_addf(&t, "&chunks=%" PRIu64, s.chunks);
	if (s.max_workers)
		mesh_buf_addf(&t, "&max_workers=%" PRIu64, s.max_workers);
	if (s.retries)
		mesh_buf_addf(&t, "&retries=%" PRIu64, s.retries);
	if (s.timeout_ns)
		mesh_buf_addf(&t, "&timeout=%" PRIu64 ".%09" PRIu64, (uint64_t)(s.timeout_ns / MESH_NS_PER_S),
			      (uint64_t)(s.timeout_ns % MESH_NS_PER_S));
	if (s.speculate)
		mesh_buf_adds(&t, "&speculate=1");
	if (s.name) {
		mesh_buf_adds(&t, "&name=");
		add_qvalue(&t, s.name);
	}
	struct meshd_reply r;
	char what[128];
	snprintf(what, sizeof what, "cannot submit a job of '%s'", s.program);
	ex = t.p ? request(&o, what, "POST", t.p, body.p ? body.p : "", body.len, &r) : mesh_cli_fail(-ENOMEM, "submit");
	mesh_buf_release(&t);
	mesh_buf_release(&body);
	if (ex >= 0)
		return ex;
	json_t *j = json_loadb(r.body, r.len, 0, NULL);
	const char *id = j ? json_string_value(json_object_get(j, "id")) : NULL;
	char idbuf[32];
	/* An id of digits alone: it goes into the wait's URL. */
	int id_ok = id && *id && strlen(id) < sizeof idbuf && strspn(id, "0123456789") == strlen(id);
	if (id_ok) {
		printf("%s\n", id);
		snprintf(idbuf, sizeof idbuf, "%s", id);
	} else {
		fprintf(stderr, "mesh: submit: meshd's answer names no job id\n");
	}
	json_decref(j);
	meshd_reply_release(&r);
	if (!id_ok)
		return MESH_EXIT_PROTOCOL;
	if (!wait)
		return 0;
	/* The id is out before the wait: a caller that reads it can look. */
	fflush(stdout);
	o.job = idbuf;
	return wait_for(&o);
}

/* ---- jobs ---- */

static uint64_t num(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

static double real(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_number(v) ? json_number_value(v) : -1;
}

static const char *str(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static void fmt_eta(char *b, size_t n, double s)
{
	if (s < 0)
		snprintf(b, n, "-");
	else if (s < 3600)
		snprintf(b, n, "%d:%02d", (int)s / 60, (int)s % 60);
	else
		snprintf(b, n, "%dh%02dm", (int)(s / 3600), ((int)s % 3600) / 60);
}

int mesh_cmd_jobs(int argc, char **argv)
{
	struct jopts o;
	struct meshd_reply r;
	int ex = parse(argc, argv, &o, 0);
	if (ex >= 0)
		return ex;
	if (o.store)
		return mesh__sjobs_list(o.store, o.json);
	if ((ex = request(&o, "cannot list the jobs", "GET", o.all ? "/v1/jobs?all=1" : "/v1/jobs", NULL, 0, &r)) >= 0)
		return ex;
	if (o.json) {
		fwrite(r.body, 1, r.len, stdout);
		meshd_reply_release(&r);
		return 0;
	}
	json_t *j = json_loadb(r.body, r.len, 0, NULL), *arr = j ? json_object_get(j, "jobs") : NULL, *e;
	size_t i;
	printf("%-5s %-16s %-10s %10s %7s %8s %7s %9s %7s %s\n", "ID", "PROGRAM", "STATE", "DONE", "LEASED", "PENDING",
	       "BURIED", "RATE/s", "ETA", "WORKERS");
	json_array_foreach(arr, i, e)
	{
		char done[48], eta[24];
		snprintf(done, sizeof done, "%" PRIu64 "/%" PRIu64, num(e, "done"), num(e, "chunks"));
		fmt_eta(eta, sizeof eta, real(e, "eta_s"));
		printf("%-5s %-16s %-10s %10s %7" PRIu64 " %8" PRIu64 " %7" PRIu64 " %9.1f %7s %" PRIu64 "/%" PRIu64 "%s%s\n",
		       str(e, "id"), str(e, "program"), str(e, "state"), done, num(e, "leased"), num(e, "pending"),
		       num(e, "buried"), real(e, "rate") > 0 ? real(e, "rate") : 0.0, eta, num(e, "workers"),
		       num(e, "max_workers"), *str(e, "name") ? "  " : "", str(e, "name"));
	}
	if (num(j, "older"))
		printf("%" PRIu64 " older jobs not shown (mesh jobs --all)\n", num(j, "older"));
	json_decref(j);
	meshd_reply_release(&r);
	return 0;
}

/* ---- wait ---- */

void mesh__wait_draw(struct mesh__progress *p, int final)
{
	struct winsize ws;
	p->width = ioctl(2, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 80;
	p->color = getenv("NO_COLOR") == NULL || !getenv("NO_COLOR")[0];
	char line[512];
	size_t n = mesh__progress_format(line, sizeof line, p);
	fprintf(stderr, "\r\033[K%.*s%s", (int)n, line, final ? "\n" : "");
	fflush(stderr);
}

static void draw(json_t *e, int final)
{
	struct mesh__progress p = {
		.done = num(e, "done"),
		.total = num(e, "chunks"),
		.running = num(e, "leased"),
		.failed = num(e, "buried"),
		.elapsed_ns = (uint64_t)(real(e, "elapsed_s") > 0 ? real(e, "elapsed_s") * 1e9 : 0),
	};
	mesh__wait_draw(&p, final);
}

/* Each buried chunk: its status and its last failure's report. */
static void print_buried(json_t *j)
{
	json_t *f;
	size_t i;
	json_array_foreach(json_object_get(j, "failures"), i, f)
	{
		if (!json_is_true(json_object_get(f, "buried")))
			continue;
		const char *rep = str(f, "report");
		size_t n = strlen(rep);
		fprintf(stderr, "mesh: chunk %" PRIu64 " buried after %" PRIu64 " attempts, last status %" PRIu64 "%s\n%s%s",
			num(f, "chunk"), num(f, "attempts"), num(f, "status"), n ? ":" : "", rep,
			n && rep[n - 1] != '\n' ? "\n" : "");
	}
}

int mesh_cmd_wait(int argc, char **argv)
{
	struct jopts o;
	int ex = parse(argc, argv, &o, 1);
	if (ex >= 0)
		return ex;
	if (o.store)
		return mesh__sjobs_wait(o.store, strtoull(o.job, NULL, 10), o.quiet);
	return wait_for(&o);
}

/* Waits for job o->job on meshd; the exit code is its outcome. */
static int wait_for(const struct jopts *o)
{
	int ex;
	int bar = !o->quiet && isatty(2);
	char target[96], now[96], what[96];
	snprintf(target, sizeof target, "/v1/jobs/%s?wait=%s", o->job, bar ? BAR_WAIT : POLL_WAIT);
	snprintf(now, sizeof now, "/v1/jobs/%s", o->job);
	snprintf(what, sizeof what, "cannot wait for job %s", o->job);
	for (int first = 1;; first = 0) {
		struct meshd_reply r;
		/* the first look answers at once: a job that cannot move is
		 * told about before the long poll */
		if ((ex = request(o, what, "GET", first ? now : target, NULL, 0, &r)) >= 0)
			return ex;
		json_t *j = json_loadb(r.body, r.len, 0, NULL);
		meshd_reply_release(&r);
		if (!j) {
			fprintf(stderr, "mesh: %s: meshd's answer is not JSON\n", what);
			return MESH_EXIT_PROTOCOL;
		}
		const char *st = str(j, "state");
		int running = !strcmp(st, "running");
		if (bar)
			draw(j, !running);
		if (running) {
			/* Its program in a crash loop: nothing moves until a
			 * `mesh start`, so the wait ends here, saying so (it
			 * waited for good before). */
			const char *failed = json_string_value(json_object_get(j, "program_failed"));
			if (failed) {
				fprintf(stderr,
					"%smesh: job %s waits: its program '%s' is FAILED: %s; `mesh start %s` clears it, "
					"then `mesh wait %s` again\n",
					bar ? "\n" : "", o->job, str(j, "program"), failed, str(j, "program"), o->job);
				json_decref(j);
				return MESH_EXIT_TEMPFAIL;
			}
			json_decref(j);
			continue;
		}
		if (!strcmp(st, "complete"))
			ex = MESH_EXIT_OK;
		else if (!strcmp(st, "cancelled"))
			ex = MESH_EXIT_CANCELLED;
		else if (!strcmp(st, "failed"))
			ex = MESH_EXIT_INCOMPLETE;
		else
			ex = MESH_EXIT_SOFTWARE;
		if (ex == MESH_EXIT_INCOMPLETE && !o->quiet) {
			fprintf(stderr, "mesh: job %s ended with %" PRIu64 " buried chunks\n", o->job, num(j, "buried"));
			print_buried(j);
		}
		if (ex == MESH_EXIT_SOFTWARE)
			fprintf(stderr, "mesh: job %s stopped: %s\n", o->job, str(j, "error"));
		json_decref(j);
		return ex;
	}
}

/* ---- results ---- */

/* The next=K; end=E[; missing=C] parameters of the results' Content-Type
 * (*missing: UINT64_MAX when the page names none). */
static int page_params(const char *type, uint64_t *next, int *end, uint64_t *missing)
{
	const char *n = strstr(type, "next="), *e = strstr(type, "end="), *m = strstr(type, "missing=");
	if (!n || !e)
		return -1;
	*next = strtoull(n + 5, NULL, 10);
	*end = e[4] == '1';
	*missing = m ? strtoull(m + 8, NULL, 10) : UINT64_MAX;
	return 0;
}

/* Says which DONE chunks had no result (the first few by id), once the
 * others are out; the exit code. */
static int report_missing(const char *job, uint64_t count, const uint64_t *first, size_t nfirst)
{
	fprintf(stderr, "mesh: job %s: %" PRIu64 " DONE chunk%s without a result (the results file lacks %s: chunk%s", job,
		count, count == 1 ? "" : "s", count == 1 ? "it" : "them", nfirst == 1 ? "" : "s");
	for (size_t i = 0; i < nfirst; i++)
		fprintf(stderr, "%s %" PRIu64, i ? "," : "", first[i]);
	fprintf(stderr, "%s); every other result was written\n", count > nfirst ? ", ..." : "");
	return mesh_exit_for(MESH_E_CORRUPT);
}

int mesh_cmd_results(int argc, char **argv)
{
	struct jopts o;
	int ex = parse(argc, argv, &o, 1);
	if (ex >= 0)
		return ex;
	if (o.store)
		return mesh__sjobs_results(o.store, strtoull(o.job, NULL, 10), o.no_wait);
	uint64_t from = 0, nmissing = 0, first[8];
	char what[96];
	snprintf(what, sizeof what, "cannot read the results of job %s", o.job);
	for (;;) {
		char target[128];
		struct meshd_reply r;
		snprintf(target, sizeof target, "/v1/jobs/%s/results?from=%" PRIu64 "&wait=%s", o.job, from,
			 o.no_wait ? "0" : POLL_WAIT);
		if ((ex = request(&o, what, "GET", target, NULL, 0, &r)) >= 0)
			return ex;
		uint64_t next, missing;
		int end;
		if (page_params(r.type, &next, &end, &missing) < 0) {
			meshd_reply_release(&r);
			fprintf(stderr, "mesh: %s: meshd's answer has no page position\n", what);
			return MESH_EXIT_PROTOCOL;
		}
		int rc = r.len ? mesh_write_all_raw(1, r.body, r.len) : 0;
		meshd_reply_release(&r);
		if (rc < 0)
			return rc == -EPIPE ? 0 : mesh_cli_fail(rc, "results: cannot write the output");
		if (missing != UINT64_MAX) {
			/* Named at once too: a stream may run a long while. */
			fprintf(stderr, "mesh: job %s: chunk %" PRIu64 " is DONE but has no result; going on\n", o.job,
				missing);
			if (nmissing < sizeof first / sizeof first[0])
				first[nmissing] = missing;
			nmissing++;
		}
		if (end || (o.no_wait && next == from)) {
			if (!nmissing)
				return 0;
			fflush(stdout);
			return report_missing(o.job, nmissing, first,
					      nmissing < sizeof first / sizeof first[0] ? (size_t)nmissing
											: sizeof first / sizeof first[0]);
		}
		from = next;
	}
}

/* ---- cancel, rm ---- */

/* One action on job o->job (method on /v1/jobs/<id><suffix>); prints
 * "<did> job <id>". */
static int job_action(const struct jopts *o, const char *method, const char *suffix, const char *verb, const char *did)
{
	struct meshd_reply r;
	char target[96], what[96];
	int ex;
	snprintf(target, sizeof target, "/v1/jobs/%s%s", o->job, suffix);
	snprintf(what, sizeof what, "cannot %s job %s", verb, o->job);
	if ((ex = request(o, what, method, target, NULL, 0, &r)) >= 0)
		return ex;
	meshd_reply_release(&r);
	printf("%s job %s\n", did, o->job);
	return 0;
}

int mesh_cmd_cancel(int argc, char **argv)
{
	struct jopts o;
	int ex = parse(argc, argv, &o, 1);
	if (ex >= 0)
		return ex;
	if (o.store)
		return mesh__sjobs_cancel(o.store, strtoull(o.job, NULL, 10));
	return job_action(&o, "POST", "/cancel", "cancel", "cancelled");
}

int mesh_cmd_rm(int argc, char **argv)
{
	struct jopts o;
	int ex = parse(argc, argv, &o, 1);
	if (ex >= 0)
		return ex;
	if (o.store)
		return mesh_cli_usage("rm: removes meshd's jobs, not a store's (--store)");
	return job_action(&o, "DELETE", "", "remove", "removed");
}
