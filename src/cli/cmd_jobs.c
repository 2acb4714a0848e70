/* mesh submit|jobs|wait|results|cancel|rm: the jobs of a meshd (its
 * control API) or of a PostgreSQL store (--store), through one client
 * interface (jobs_client.h): the printing, the waiting and the paging are
 * these, once (docs/api.md, "Jobs"; docs/jobs.md; docs/cluster.md). */
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "cli/jobs_client.h"
#include "meshd/api/api.h"
#include "client/api_client.h"
#include "exec/input.h"
#include "exec/progress.h"
#include "host/manifest.h"
#include "job/job.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

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
	 "  ::: ARG...       one chunk an argument; options go before ::: (-- ends them); after it a\n"
	 "                   word that is one of these options (::: a --socket X) is refused unless\n"
	 "                   -- came before :::\n"
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
		 "75 its program is FAILED (a crash loop: nothing moves until `mesh start PROGRAM`).\n"
		 "A meshd that goes away once the wait began (a restart: the job is durable) is asked\n"
		 "again for up to 60 s, saying so on stderr; then the exit is 69.\n"},
	{"results", "usage: mesh results JOB [--no-wait] [--socket PATH | --store URL]\n\n"
		    "Writes each DONE chunk's result bytes, in chunk order, with nothing added between\n"
		    "them.  While the job runs it streams: chunk k+1 is written once chunk k is settled\n"
		    "(a buried chunk adds nothing).  --no-wait writes only what is DONE now and stops at\n"
		    "the first chunk that is not.  A DONE chunk whose result is missing is named on stderr\n"
		    "and skipped; the others are written, and the exit is 65.  A meshd that goes away once\n"
		    "the results began (a restart) is asked again for up to 60 s, from the next chunk not\n"
		    "yet written; then the exit is 69.\n"},
	{"cancel", "usage: mesh cancel JOB [--kill-workers] [--socket PATH | --store URL]\n\n"
		   "Stops job JOB for good: nothing more starts; what is DONE stays.  A worker in one of\n"
		   "its chunks ends that chunk, then stays warm (killed if that takes longer than its\n"
		   "program's stop_grace); idle workers stay warm: the next job starts on them.\n"
		   "  --kill-workers  the job's workers are killed at once, and the program's idle workers\n"
		   "                  are stopped too (meshd's jobs, not --store)\n"},
	{"rm", "usage: mesh rm JOB [--socket PATH]\n\n"
	       "Removes job JOB, which has ended (complete, failed, cancelled or error): its directory,\n"
	       "results and all, and meshd forgets it; its id is not given again.  A running job is\n"
	       "refused (exit 75): `mesh cancel JOB` stops it first.  meshd removes old jobs by itself\n"
	       "(`meshd --keep-jobs N --keep-for DURATION`, docs/jobs.md).\n"},
};

struct jopts {
	char sock[PATH_MAX];
	const char *store; /* --store URL, else $MESH_STORE unless --socket: the store's jobs (jobs_home.c) */
	const char *job;
	int json, quiet, no_wait, all, kill_workers;
};

/* The client of o's jobs (cmd's messages): -1, or an exit code. */
static int client(const struct jopts *o, const char *cmd, struct jclient **c)
{
	return o->store ? mesh__jclient_store(c, o->store, cmd) : mesh__jclient_api(c, o->sock);
}

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
	char near[128];
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
		else if (!strcmp(a, "--kill-workers") && !strcmp(cmd, "cancel"))
			o->kill_workers = 1;
		else if (a[0] == '-' && a[1])
			return mesh_cli_usage("%s: unknown option '%s'%s", cmd, a,
					      mesh_cli_did_you_mean(cmd, a, near, sizeof near));
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

/* The chunks' inputs, one a line, from --input or :::, through exec/input's
 * sources (as `mesh run` reads them).  0 or an exit code. */
static int build_input(const struct jsub *s, struct mesh_buf *out)
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

/* mesh submit's options: the table its parser and its ::: rule
 * (mesh_cli_option_input) both read.  value: it takes one. */
enum { S_SOCKET, S_STORE, S_CHUNKS, S_INPUT, S_MAX_WORKERS, S_RETRIES, S_TIMEOUT, S_SPECULATE, S_WAIT, S_NAME, S_HELP };
static const struct {
	const char *name;
	int value;
} sub_opts[] = {
	[S_SOCKET] = {"socket", 1},   [S_STORE] = {"store", 1},		[S_CHUNKS] = {"chunks", 1},
	[S_INPUT] = {"input", 1},     [S_MAX_WORKERS] = {"max-workers", 1}, [S_RETRIES] = {"retries", 1},
	[S_TIMEOUT] = {"timeout", 1}, [S_SPECULATE] = {"speculate", 0},	[S_WAIT] = {"wait", 0},
	[S_NAME] = {"name", 1},	      [S_HELP] = {"help", 0},
};

/* The index of long option name[0..n) in sub_opts, or -1. */
static int sub_opt(const char *name, size_t n)
{
	for (size_t k = 0; k < sizeof sub_opts / sizeof sub_opts[0]; k++)
		if (strlen(sub_opts[k].name) == n && !strncmp(sub_opts[k].name, name, n))
			return (int)k;
	return -1;
}

static int is_sub_opt(const char *name, size_t n)
{
	return sub_opt(name, n) >= 0;
}

static int wait_for(struct jclient *c, const char *id, int quiet);

/* Option k of mesh submit with its value v (NULL when it takes none) into
 * o, s and *wait; -1, or an exit code. */
static int sub_apply(int k, const char *v, struct jopts *o, struct jsub *s, int *wait)
{
	switch (k) {
	case S_SOCKET: return set_sock(o, "submit", v);
	case S_STORE: o->store = v; return -1;
	case S_CHUNKS:
		if (mesh_parse_u64(v, MESH_JOB_MAX_CHUNKS, &s->chunks) < 0 || !s->chunks)
			return mesh_cli_usage("submit: --chunks wants a whole number from 1 to %llu, not '%s'",
					      (unsigned long long)MESH_JOB_MAX_CHUNKS, v);
		s->have_chunks = 1;
		return -1;
	case S_INPUT: s->input = v; return -1;
	case S_MAX_WORKERS:
		if (mesh_parse_u64(v, 64, &s->max_workers) < 0 || !s->max_workers)
			return mesh_cli_usage("submit: --max-workers wants 1 to 64, not '%s'", v);
		return -1;
	case S_RETRIES:
		if (mesh_parse_u64(v, 1000000, &s->retries) < 0 || !s->retries)
			return mesh_cli_usage("submit: --retries wants 1 to 1000000, not '%s'", v);
		return -1;
	case S_TIMEOUT:
		if (mesh_parse_duration(v, 86400ull * MESH_NS_PER_S, &s->timeout_ns) < 0 || !s->timeout_ns)
			return mesh_cli_usage("submit: --timeout wants a duration (0 < T <= 1d: 30, 250ms, 5m, 1.5h), not '%s'", v);
		return -1;
	case S_SPECULATE: s->speculate = 1; return -1;
	case S_WAIT: *wait = 1; return -1;
	case S_NAME: s->name = v; return -1;
	case S_HELP: print_help("submit"); return 0;
	}
	return -1;
}

/* mesh submit's options into o and s; -1, or an exit code (--help: 0).
 * Options go anywhere before ::: ("--" ends them); after it every word is
 * a chunk's input, and one that is an option of the table is refused
 * unless "--" came first (mesh_cli_option_input, as mesh run does). */
static int submit_parse(int argc, char **argv, struct jopts *o, struct jsub *s, int *wait)
{
	int i, ex, dashdash = 0;
	char msg[512];
	for (i = 1; i < argc && strcmp(argv[i], ":::") && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return sub_apply(S_HELP, NULL, o, s, wait);
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *eq = strchr(a, '=');
		if (!strcmp(a, ":::")) {
			s->words = argv + i + 1;
			s->nwords = (size_t)(argc - i - 1);
			if (!s->nwords)
				return mesh_cli_usage("submit: ::: needs at least one argument");
			if (!dashdash && mesh_cli_option_input(s->words, s->nwords, ":::", "':::'", is_sub_opt, msg, sizeof msg))
				return mesh_cli_usage("submit: %s", msg);
			break;
		}
		if (!strcmp(a, "--") && !dashdash) {
			dashdash = 1;
			continue;
		}
		if (a[0] == '-' && a[1] && !dashdash) {
			int k = a[1] == '-' ? sub_opt(a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2)) : -1;
			const char *v = eq ? eq + 1 : NULL;
			if (k < 0) {
				char near[128];
				return mesh_cli_usage("submit: unknown option '%s'%s", a,
						      mesh_cli_did_you_mean("submit", a, near, sizeof near));
			}
			if (!sub_opts[k].value && eq)
				return mesh_cli_usage("submit: --%s takes no value", sub_opts[k].name);
			if (sub_opts[k].value && !eq && (v = i + 1 < argc ? argv[++i] : NULL) == NULL)
				return mesh_cli_usage("submit: --%s needs a value", sub_opts[k].name);
			if ((ex = sub_apply(k, v, o, s, wait)) >= 0)
				return ex;
		} else if (!s->program) {
			s->program = a;
		} else {
			return mesh_cli_usage("submit: unexpected argument '%s' (chunk arguments go after :::)", a);
		}
	}
	if (!s->program)
		return mesh_cli_usage("submit: which program? (mesh submit PROGRAM --chunks N | --input FILE | ::: ARG...)");
	if (!mesh_manifest_name_ok(s->program))
		return mesh_cli_usage("submit: bad program name '%s': 1 to 64 letters, digits, '_' or '-'", s->program);
	if (s->have_chunks + (s->input != NULL) + (s->words != NULL) != 1)
		return mesh_cli_usage("submit: give the chunks once: --chunks N, --input FILE or ::: ARG...");
	store_default(o);
	return o->store ? -1 : default_sock(o, "submit");
}

int mesh_cmd_submit(int argc, char **argv)
{
	struct jopts o;
	struct jsub s = {0};
	struct jclient *c = NULL;
	struct mesh_buf body = MESH_BUF_INIT;
	char id[32];
	int wait = 0;
	memset(&o, 0, sizeof o);
	int ex = submit_parse(argc, argv, &o, &s, &wait);
	if (ex >= 0)
		return ex;
	if (!s.have_chunks && (ex = build_input(&s, &body)) != 0) {
		mesh_buf_release(&body);
		return ex;
	}
	if ((ex = client(&o, "submit", &c)) < 0)
		ex = c->ops->submit(c, &s, &body, id, sizeof id);
	mesh_buf_release(&body);
	if (ex < 0) {
		printf("%s\n", id);
		/* The id is out before the wait: a caller that reads it can look. */
		if (wait) {
			fflush(stdout);
			ex = wait_for(c, id, 0);
		}
	}
	if (c)
		c->ops->close(c);
	return ex < 0 ? 0 : ex;
}

/* ---- jobs ---- */

static void fmt_eta(char *b, size_t n, double s)
{
	if (s < 0)
		snprintf(b, n, "-");
	else if (s < 3600)
		snprintf(b, n, "%d:%02d", (int)s / 60, (int)s % 60);
	else
		snprintf(b, n, "%dh%02dm", (int)(s / 3600), ((int)s % 3600) / 60);
}

/* One row of `mesh jobs` (v NULL: the header); arg: the client's ops
 * (rate, ETA and workers where it knows them). */
static void print_row(void *arg, const struct jview *v)
{
	const struct jclient_ops *ops = arg;
	char done[48], eta[24];
	if (!v) {
		printf("%-5s %-16s %-10s %10s %7s %8s %7s", "ID", "PROGRAM", "STATE", "DONE", "LEASED", "PENDING", "BURIED");
		if (ops->live)
			printf(" %9s %7s %s", "RATE/s", "ETA", "WORKERS");
		printf("\n");
		return;
	}
	snprintf(done, sizeof done, "%" PRIu64 "/%" PRIu64, v->done, v->n);
	printf("%-5s %-16s %-10s %10s %7" PRIu64 " %8" PRIu64 " %7" PRIu64, v->id, v->program, v->state, done, v->leased,
	       v->pending, v->buried);
	if (ops->live) {
		fmt_eta(eta, sizeof eta, v->eta_s);
		printf(" %9.1f %7s %" PRIu64 "/%" PRIu64, v->rate, eta, v->workers, v->max_workers);
	}
	printf("%s%s\n", *v->name ? "  " : "", v->name);
}

int mesh_cmd_jobs(int argc, char **argv)
{
	struct jopts o;
	struct jclient *c;
	uint64_t older = 0;
	int ex = parse(argc, argv, &o, 0);
	if (ex >= 0 || (ex = client(&o, "jobs", &c)) >= 0)
		return ex;
	ex = c->ops->list(c, o.all, o.json, print_row, (void *)c->ops, &older);
	if (ex < 0 && older)
		printf("%" PRIu64 " older jobs not shown (mesh jobs --all)\n", older);
	c->ops->close(c);
	return ex < 0 ? 0 : ex;
}

/* ---- wait ---- */

static void draw(const struct jview *v, int final)
{
	struct mesh__progress p = {
		.done = v->done,
		.total = v->n,
		.running = v->leased,
		.failed = v->buried,
		.elapsed_ns = (uint64_t)(v->elapsed_s * 1e9),
		/* chunks sent to the workers (a worker holds several), and the
		 * word `mesh jobs` uses */
		.running_word = "in flight",
		.failed_word = "buried",
	};
	struct winsize ws;
	p.width = ioctl(2, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 80;
	p.color = getenv("NO_COLOR") == NULL || !getenv("NO_COLOR")[0];
	char line[512];
	size_t n = mesh__progress_format(line, sizeof line, &p);
	fprintf(stderr, "\r\033[K%.*s%s", (int)n, line, final ? "\n" : "");
	fflush(stderr);
}

/* A buried chunk: its status and its last failure's report. */
static void print_buried(uint64_t cid, uint64_t attempts, long long status, const char *rep)
{
	size_t n = strlen(rep);
	fprintf(stderr, "mesh: chunk %" PRIu64 " buried after %" PRIu64 " attempt%s, last status %lld%s\n%s%s", cid,
		attempts, attempts == 1 ? "" : "s", status, n ? ":" : "", rep, n && rep[n - 1] != '\n' ? "\n" : "");
}

/* The exit code of a job that ended in state st. */
static int exit_of(const char *st)
{
	return !strcmp(st, "complete")	  ? MESH_EXIT_OK
	       : !strcmp(st, "cancelled") ? MESH_EXIT_CANCELLED
	       : !strcmp(st, "failed")	  ? MESH_EXIT_INCOMPLETE
					  : MESH_EXIT_SOFTWARE;
}

/* Waits for job id; the exit code is its outcome. */
static int wait_for(struct jclient *c, const char *id, int quiet)
{
	int bar = !quiet && isatty(2);
	for (int first = 1;; first = 0) {
		struct jview v;
		int ex = c->ops->get(c, id, first ? JW_NOW : bar ? JW_TICK : JW_NEWS, &v);
		if (ex >= 0)
			return ex;
		int running = !strcmp(v.state, "running");
		if (bar)
			draw(&v, !running);
		if (running && v.program_failed) {
			/* Its program in a crash loop: nothing moves until a
			 * `mesh start`, so the wait ends here, saying so (it
			 * waited for good before). */
			fprintf(stderr,
				"%smesh: job %s waits: its program '%s' is FAILED: %s; `mesh start %s` clears it, "
				"then `mesh wait %s` again\n",
				bar ? "\n" : "", id, v.program, v.program_failed, v.program, id);
			return MESH_EXIT_TEMPFAIL;
		}
		if (running)
			continue;
		ex = exit_of(v.state);
		if (ex == MESH_EXIT_INCOMPLETE && !quiet) {
			fprintf(stderr, "mesh: job %s ended with %" PRIu64 " buried chunks\n", id, v.buried);
			c->ops->buried(c, id, print_buried);
		}
		if (ex == MESH_EXIT_SOFTWARE)
			fprintf(stderr, "mesh: job %s stopped: %s\n", id, v.error);
		return ex;
	}
}

int mesh_cmd_wait(int argc, char **argv)
{
	struct jopts o;
	struct jclient *c;
	int ex = parse(argc, argv, &o, 1);
	if (ex >= 0 || (ex = client(&o, "wait", &c)) >= 0)
		return ex;
	ex = wait_for(c, o.job, o.quiet);
	c->ops->close(c);
	return ex;
}

/* ---- results ---- */

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

/* Results to standard output; the first write error is kept. */
static int write_out(void *arg, const void *p, size_t n)
{
	int *err = arg;
	if (*err == 0)
		*err = mesh_write_all_raw(1, p, n);
	return *err < 0;
}

/* Every page of job id's results, written in chunk order. */
static int results_of(struct jclient *c, const char *id, int no_wait)
{
	uint64_t from = 0, nmissing = 0, first[8];
	const size_t nf = sizeof first / sizeof first[0];
	for (;;) {
		struct jpage pg;
		int werr = 0, ex = c->ops->results(c, id, from, !no_wait, write_out, &werr, &pg);
		if (werr < 0)
			return werr == -EPIPE ? 0 : mesh_cli_fail(werr, "results: cannot write the output");
		if (ex >= 0)
			return ex;
		if (pg.missing != UINT64_MAX) {
			/* Named at once too: a stream may run a long while. */
			fprintf(stderr, "mesh: job %s: chunk %" PRIu64 " is DONE but has no result; going on\n", id,
				pg.missing);
			if (nmissing < nf)
				first[nmissing] = pg.missing;
			nmissing++;
		}
		if (pg.end || (no_wait && pg.next == from)) {
			if (!nmissing)
				return 0;
			fflush(stdout);
			return report_missing(id, nmissing, first, nmissing < nf ? (size_t)nmissing : nf);
		}
		from = pg.next;
	}
}

int mesh_cmd_results(int argc, char **argv)
{
	struct jopts o;
	struct jclient *c;
	int ex = parse(argc, argv, &o, 1);
	if (ex >= 0 || (ex = client(&o, "results", &c)) >= 0)
		return ex;
	ex = results_of(c, o.job, o.no_wait);
	c->ops->close(c);
	return ex;
}

/* ---- cancel, rm ---- */

int mesh_cmd_cancel(int argc, char **argv)
{
	struct jopts o;
	struct jclient *c;
	int ex = parse(argc, argv, &o, 1);
	if (ex >= 0 || (ex = client(&o, "cancel", &c)) >= 0)
		return ex;
	if ((ex = c->ops->cancel(c, o.job, o.kill_workers)) < 0)
		printf("cancelled job %s%s\n", o.job, o.kill_workers ? "; its workers are killed" : "");
	c->ops->close(c);
	return ex < 0 ? 0 : ex;
}

int mesh_cmd_rm(int argc, char **argv)
{
	struct jopts o;
	struct jclient *c;
	int ex = parse(argc, argv, &o, 1);
	if (ex >= 0 || (ex = client(&o, "rm", &c)) >= 0)
		return ex;
	if (!c->ops->remove)
		ex = mesh_cli_usage("rm: removes meshd's jobs, not a store's (--store)");
	else if ((ex = c->ops->remove(c, o.job)) < 0)
		printf("removed job %s\n", o.job);
	c->ops->close(c);
	return ex < 0 ? 0 : ex;
}
