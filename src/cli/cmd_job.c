/* mesh job: the swarm job engine's command line (docs/job.md). */
#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"
#include "base/path.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "exec/runner.h"
#include "job/job.h"
#include "job/record.h"
#include "job/results.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TTL_MAX_NS (365ull * 24 * 3600 * MESH_NS_PER_S)

static const char usage_job[] =
	"usage: mesh job <command> ...\n"
	"  submit   <journal.log> <nchunks>                       define chunks 0..n-1\n"
	"  lease    <journal.log> <lockdir> <job> <nchunks> <ttl_s> [--node NAME] [--speculate]\n"
	"  complete <journal.log> <lockdir> <job> <cid> <node>      durable DONE (or IGNORED)\n"
	"  status   <journal.log> <lockdir> <job> <nchunks> [--json]\n"
	"  harvest  <journal.log> <lockdir> <job> <nchunks> <ttl_s> <node> [maxiter] [--speculate] [-- CMD ARG...]\n"
	"  check    <journal.log> [--force]                        verify; cut a torn tail; repair\n"
	"  retry    <journal.log> [cid]                            un-bury failed chunks\n"
	"Each command has --help.  Exit codes: `mesh help exit-codes`; docs/job.md.\n";

struct sub {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
};

/* Positional arguments and flags of one subcommand.  Flags may appear
 * anywhere before "--"; what follows "--" is the command (harvest). */
struct args {
	char *pos[8];
	int npos;
	const char *node;
	int json, speculate, force;
	char **cmd;
};

static int parse_args(int argc, char **argv, struct args *a, const char *allowed)
{
	memset(a, 0, sizeof *a);
	for (int i = 1; i < argc; i++) {
		char *s = argv[i];
		if (!strcmp(s, "--")) {
			if (!strstr(allowed, "cmd"))
				return mesh_cli_usage("job %s: unexpected '--'", argv[0]);
			if (i + 1 >= argc)
				return mesh_cli_usage("job %s: no command after '--'", argv[0]);
			a->cmd = argv + i + 1;
			return 0;
		}
		if (!strcmp(s, "--node") && strstr(allowed, "node")) {
			if (++i >= argc)
				return mesh_cli_usage("job %s: --node needs a name", argv[0]);
			a->node = argv[i];
		} else if (!strncmp(s, "--node=", 7) && strstr(allowed, "node")) {
			a->node = s + 7;
		} else if (!strcmp(s, "--json") && strstr(allowed, "json")) {
			a->json = 1;
		} else if (!strcmp(s, "--speculate") && strstr(allowed, "spec")) {
			a->speculate = 1;
		} else if (!strcmp(s, "--force") && strstr(allowed, "force")) {
			a->force = 1;
		} else if (!strcmp(s, "--store-outage") && strstr(allowed, "outage")) {
			uint64_t ns;
			if (++i >= argc || mesh_parse_duration(argv[i], 365ull * 86400 * MESH_NS_PER_S, &ns) < 0 || !ns)
				return mesh_cli_usage("job %s: --store-outage needs a duration, e.g. 300, 30s or 5m", argv[0]);
			mesh_job_set_store_outage(ns);
		} else if (s[0] == '-' && s[1]) {
			char near[128];
			return mesh_cli_usage("job %s: unknown option '%s'%s", argv[0], s,
					      mesh_cli_did_you_mean("job", s, near, sizeof near));
		} else {
			if (a->npos >= (int)(sizeof a->pos / sizeof a->pos[0]))
				return mesh_cli_usage("job %s: too many arguments", argv[0]);
			a->pos[a->npos++] = s;
		}
	}
	return 0;
}

static int want_pos(const char *cmd, const struct args *a, int min, int max)
{
	if (a->npos < min)
		return mesh_cli_usage("job %s: missing arguments (see `mesh job %s --help`)", cmd, cmd);
	if (a->npos > max)
		return mesh_cli_usage("job %s: unexpected argument '%s'", cmd, a->pos[max]);
	return 0;
}

static int check_journal_path(const char *p)
{
	const char *why = "";
	if (mesh_job_is_store_url(p)) {
		/* A PostgreSQL store: a password in it would show in every
		 * process list and message; libpq takes it from elsewhere. */
		return mesh_cli_store_url_refused("job", p);
	}
	if (mesh_path_journal_ok(p, &why)) {
		fprintf(stderr, "mesh: journal '%s' refused: %s\n", p, why);
		return mesh_exit_for(MESH_E_PATH);
	}
	return 0;
}

static int check_lockdir(const char *p, const char *job)
{
	const char *why = "";
	if (mesh_path_lockdir_ok(p, &why)) {
		fprintf(stderr, "mesh: lock directory '%s' refused: %s\n", p, why);
		return mesh_exit_for(MESH_E_PATH);
	}
	if (!mesh_job_lease_name_ok(job)) {
		fprintf(stderr, "mesh: job name '%s' refused: use 1..64 of [A-Za-z0-9_.-], not starting with '.'\n", job);
		return mesh_exit_for(MESH_E_PATH);
	}
	if (mesh_job_lockdir_check(p) == MESH_E_NOTPRIVATE) {
		fprintf(stderr, "mesh: lock directory '%s' refused: %s (use one of your own, mode 0700)\n", p,
			mesh_strerror(MESH_E_NOTPRIVATE));
		return mesh_exit_for(MESH_E_NOTPRIVATE);
	}
	return 0;
}

static int parse_count(const char *what, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	int rc = mesh_parse_u64(s, UINT64_MAX, out);
	if (!rc && max == MESH_JOB_MAX_CHUNKS && *out > max) {
		fprintf(stderr,
			"mesh: %s '%s' refused: more than the engine handles (at most %" PRIu64
			"; every open job keeps two bits a chunk in memory)\n",
			what, s, max);
		return mesh_exit_for(MESH_E_RANGE);
	}
	if (!rc && (*out < min || *out > max))
		rc = MESH_E_RANGE;
	if (rc) {
		fprintf(stderr, "mesh: %s '%s' refused: %s (a whole number from %" PRIu64 " to %" PRIu64 ")\n", what, s,
			mesh_strerror(rc), min, max);
		/* malformed: a usage error; well-formed but out of range: bad data */
		return rc == MESH_E_PARSE ? MESH_EXIT_USAGE : mesh_exit_for(rc);
	}
	return 0;
}

static int parse_ttl(const char *s, uint64_t *ns)
{
	int rc = mesh_parse_duration(s, TTL_MAX_NS, ns);
	if (!rc && *ns == 0)
		rc = MESH_E_RANGE;
	if (rc) {
		fprintf(stderr, "mesh: ttl '%s' refused: %s (a duration > 0, e.g. 30, 0.5, 250ms or 2m)\n", s, mesh_strerror(rc));
		return rc == MESH_E_PARSE ? MESH_EXIT_USAGE : mesh_exit_for(rc);
	}
	return 0;
}

static const char *file_type_name(unsigned type)
{
	switch (type) {
	case S_IFDIR:
		return "a directory";
	case S_IFIFO:
		return "a FIFO";
	case S_IFCHR:
		return "a character device";
	case S_IFBLK:
		return "a block device";
	case S_IFSOCK:
		return "a socket";
	case S_IFLNK:
		return "a symlink";
	}
	return "not a regular file";
}

/* Names the file and the reason of a submit or open error (journal n may
 * be 0 when the command gave none); returns the exit code. */
static int job_fail(int rc, const struct mesh_job_why *w, const char *journal, const char *lockdir, uint64_t n)
{
	int denied = rc == -EACCES || rc == -EPERM || rc == -EROFS;
	if (w->store_msg[0]) {
		fprintf(stderr, "mesh: store '%s': %s: %s\n", journal, mesh_strerror(rc), w->store_msg);
		return mesh_exit_for(rc);
	}
	if (w->at == MESH_JOB_AT_LOCKDIR && (rc == -ENOENT || rc == -ENOTDIR || denied)) {
		fprintf(stderr, "mesh: cannot %s lock directory '%s': %s\n", rc == -ENOENT ? "create" : "use", lockdir,
			mesh_strerror(rc));
		return MESH_EXIT_CANTCREAT;
	}
	if (w->at == MESH_JOB_AT_LOCKDIR)
		return mesh_cli_fail(rc, "lock directory '%s' refused", lockdir);
	if (w->at == MESH_JOB_AT_JOURNAL_WRITE && denied) {
		fprintf(stderr, "mesh: journal '%s' cannot be written: %s (this command writes it; `mesh job status` only reads)\n",
			journal, mesh_strerror(rc));
		return MESH_EXIT_NOPERM;
	}
	if (w->at == MESH_JOB_AT_JOURNAL_WRITE)
		return mesh_cli_fail(rc, "cannot write journal '%s'", journal);
	if (rc == MESH_E_PATH && w->file_type) {
		fprintf(stderr, "mesh: journal '%s' is %s, not a journal file\n", journal, file_type_name(w->file_type));
		return mesh_exit_for(rc);
	}
	if (rc == MESH_E_MISMATCH && n && w->n != n)
		return mesh_cli_fail(rc, "journal '%s' holds %" PRIu64 " chunks, not %" PRIu64, journal, w->n, n);
	if (rc == MESH_E_MISMATCH && w->owned) {
		fprintf(stderr,
			"mesh: journal '%s' belongs to %.*s; only its owner completes chunks there (a chunk completed "
			"here would have no result), so this command, which writes it, is refused; `mesh job status` "
			"reads it\n",
			journal, (int)w->identity_len, (const char *)w->identity);
		return mesh_exit_for(rc);
	}
	if (rc == MESH_E_MISMATCH)
		return mesh_cli_fail(rc, "journal '%s' belongs to other work (%.*s)", journal, (int)w->identity_len,
				     (const char *)w->identity);
	if (rc == MESH_E_RANGE && w->n)
		return mesh_cli_fail(rc, "journal '%s' holds %" PRIu64 " chunks, more than the engine handles (%" PRIu64 ")",
				     journal, w->n, (uint64_t)MESH_JOB_MAX_CHUNKS);
	if ((rc == MESH_E_CORRUPT || rc == MESH_E_DAMAGED) && w->identity_damaged)
		return mesh_cli_identity_damaged(rc, journal, w);
	if (rc == MESH_E_CORRUPT && w->size) {
		fprintf(stderr,
			"mesh: journal '%s' is damaged at offset %" PRIu64 " (of %" PRIu64
			" bytes); this command changes nothing: `mesh job check%s %s` %s it\n",
			journal, w->damage_off, w->size, w->torn ? "" : " --force", journal,
			w->torn ? "cuts the torn tail and repairs" : "keeps every whole record and repairs");
		return mesh_exit_for(rc);
	}
	if (rc == MESH_E_CORRUPT)
		return mesh_cli_fail(rc, "cannot open '%s' (`mesh job check %s` reports the damage)", journal, journal);
	return mesh_cli_fail(rc, "cannot open '%s'", journal);
}

static int open_job_as(struct mesh_job **j, const char *journal, const char *lockdir, const char *name, uint64_t n,
		       const char *node, int read_only)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job_why why;
	int rc;
	o.journal = journal;
	o.lockdir = lockdir;
	o.name = name;
	o.nchunks = n;
	o.node = node;
	o.read_only = read_only;
	o.why = &why;
	o.on_store_wait = mesh_cli_store_wait;
	o.on_store_wait_arg = (void *)journal;
	rc = mesh_job_open(j, &o);
	if (rc == 0 && why.torn && why.size)
		fprintf(stderr,
			"mesh: journal '%s' ends in a torn record at offset %" PRIu64 " (of %" PRIu64
			" bytes), not counted; the next writer or `mesh job check %s` cuts it\n",
			journal, why.damage_off, why.size, journal);
	if (rc == MESH_E_PARSE && !why.store_msg[0])
		return mesh_cli_fail(rc, "node name '%s' refused (1..64 of [A-Za-z0-9_.:@-])", node ? node : "");
	if (rc)
		return job_fail(rc, &why, journal, lockdir, n);
	return 0;
}

static int open_job(struct mesh_job **j, const char *journal, const char *lockdir, const char *name, uint64_t n,
		    const char *node)
{
	return open_job_as(j, journal, lockdir, name, n, node, 0);
}

static int cmd_submit(int argc, char **argv)
{
	struct args a;
	struct mesh_job_why why;
	uint64_t n;
	int rc = parse_args(argc, argv, &a, "");
	if (rc || (rc = want_pos("submit", &a, 2, 2)) || (rc = check_journal_path(a.pos[0])) ||
	    (rc = parse_count("chunk count", a.pos[1], 1, MESH_JOB_MAX_CHUNKS, &n)))
		return rc;
	rc = mesh_job_submit_id(a.pos[0], n, NULL, 0, &why);
	if (rc)
		return job_fail(rc, &why, a.pos[0], NULL, n);
	printf("SUBMITTED %" PRIu64 "\n", n);
	return MESH_EXIT_OK;
}

static int cmd_lease(int argc, char **argv)
{
	struct args a;
	uint64_t n, ttl;
	struct mesh_job *j;
	struct mesh_lease l;
	int rc = parse_args(argc, argv, &a, "node spec");
	if (rc || (rc = want_pos("lease", &a, 5, 5)) || (rc = check_journal_path(a.pos[0])) ||
	    (rc = check_lockdir(a.pos[1], a.pos[2])) ||
	    (rc = parse_count("chunk count", a.pos[3], 1, MESH_JOB_MAX_CHUNKS, &n)) || (rc = parse_ttl(a.pos[4], &ttl)) ||
	    (rc = open_job(&j, a.pos[0], a.pos[1], a.pos[2], n, a.node)))
		return rc;
	mesh_job_detach_leases(j); /* this process exits while the caller works */
	rc = mesh_job_lease(j, ttl, a.speculate, &l);
	mesh_job_close(j);
	if (rc == MESH_JOB_NONE) {
		puts("NONE");
		return MESH_EXIT_NONE;
	}
	if (rc == MESH_JOB_COMPLETE) {
		puts("COMPLETE");
		return MESH_EXIT_COMPLETE;
	}
	if (rc)
		return mesh_cli_fail(rc, "cannot lease from '%s'", a.pos[0]);
	printf("%" PRIu64 "\n", l.cid);
	return MESH_EXIT_OK;
}

static int cmd_complete(int argc, char **argv)
{
	struct args a;
	uint64_t cid;
	struct mesh_job *j;
	int rc = parse_args(argc, argv, &a, "");
	if (rc || (rc = want_pos("complete", &a, 5, 5)) || (rc = check_journal_path(a.pos[0])) ||
	    (rc = check_lockdir(a.pos[1], a.pos[2])) ||
	    (rc = parse_count("chunk id", a.pos[3], 0, MESH_JOB_MAX_CHUNKS - 1, &cid)))
		return rc;
	if (!mesh_job_node_ok(a.pos[4])) {
		fprintf(stderr, "mesh: node name '%s' refused (1..64 of [A-Za-z0-9_.:@-])\n", a.pos[4]);
		return MESH_EXIT_USAGE;
	}
	if ((rc = open_job(&j, a.pos[0], a.pos[1], a.pos[2], 0, a.pos[4])))
		return rc;
	rc = mesh_job_complete(j, cid, 0);
	if (rc == MESH_E_RANGE)
		fprintf(stderr, "mesh: chunk %" PRIu64 " is out of range: the job has %" PRIu64 " chunks\n", cid,
			mesh_job_nchunks(j));
	mesh_job_close(j);
	if (rc == MESH_JOB_DONE) {
		printf("DONE %" PRIu64 "\n", cid);
		return MESH_EXIT_OK;
	}
	if (rc == MESH_JOB_IGNORED) {
		printf("IGNORED %" PRIu64 "\n", cid);
		return MESH_EXIT_OK;
	}
	if (rc == MESH_E_RANGE)
		return mesh_exit_for(rc);
	return mesh_cli_fail(rc, "cannot complete chunk %" PRIu64 " in '%s' (it is not DONE)", cid, a.pos[0]);
}

struct fail_list {
	json_t *arr;
	uint64_t shown, total;
};

static void print_failure(const struct mesh_job_failure *f, void *arg)
{
	struct fail_list *fl = arg;
	fl->total++;
	if (fl->arr) {
		json_array_append_new(fl->arr, json_pack("{s:I, s:i, s:i, s:b}", "cid", (json_int_t)f->cid, "attempts",
							 (int)f->attempts, "last_status", f->last_status, "buried",
							 f->buried));
		return;
	}
	if (fl->shown >= 1000)
		return;
	if (!fl->shown)
		puts("failed chunks:");
	fl->shown++;
	printf("  chunk %" PRIu64 ": %u failed attempt%s, last exit status %d%s\n", f->cid, f->attempts,
	       f->attempts == 1 ? "" : "s", f->last_status, f->buried ? ", buried" : "");
}

static void node_json(const struct mesh_job_node_stat *s, void *arg)
{
	json_array_append_new((json_t *)arg, json_pack("{s:s, s:I, s:f}", "name", s->name, "completions",
						       (json_int_t)s->completions, "mean_ms",
						       (double)s->mean_ns / 1e6));
}

static int cmd_status(int argc, char **argv)
{
	struct args a;
	uint64_t n;
	struct mesh_job *j;
	struct mesh_job_status st;
	struct fail_list fl = {NULL, 0, 0};
	int complete;
	int rc = parse_args(argc, argv, &a, "json");
	if (rc || (rc = want_pos("status", &a, 4, 4)) || (rc = check_journal_path(a.pos[0])) ||
	    (rc = check_lockdir(a.pos[1], a.pos[2])) ||
	    (rc = parse_count("chunk count", a.pos[3], 1, MESH_JOB_MAX_CHUNKS, &n)) ||
	    (rc = open_job_as(&j, a.pos[0], a.pos[1], a.pos[2], n, NULL, 1)))
		return rc;
	rc = mesh_job_status(j, &st);
	if (rc) {
		mesh_job_close(j);
		return mesh_cli_fail(rc, "cannot read the status of '%s'", a.pos[0]);
	}
	complete = st.done == st.n;
	if (a.json) {
		json_t *o = json_object(), *nodes = json_array();
		fl.arr = json_array();
		mesh_job_failures(j, print_failure, &fl);
		mesh_job_nodes(j, node_json, nodes);
		json_object_set_new(o, "job", json_string(a.pos[2]));
		json_object_set_new(o, "chunks", json_integer((json_int_t)st.n));
		json_object_set_new(o, "done", json_integer((json_int_t)st.done));
		json_object_set_new(o, "leased", json_integer((json_int_t)st.leased));
		json_object_set_new(o, "pending", json_integer((json_int_t)st.pending));
		json_object_set_new(o, "buried", json_integer((json_int_t)st.buried));
		json_object_set_new(o, "failed_attempts", json_integer((json_int_t)st.failed_attempts));
		json_object_set_new(o, "duplicates", json_integer((json_int_t)st.duplicates));
		json_object_set_new(o, "speculative_wins", json_integer((json_int_t)st.speculative_wins));
		json_object_set_new(o, "verdict", json_string(complete ? "COMPLETE" : "INCOMPLETE"));
		json_object_set_new(o, "failures", fl.arr);
		json_object_set_new(o, "nodes", nodes);
		json_dumpf(o, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
		putchar('\n');
		json_decref(o);
	} else {
		printf("job %s: %" PRIu64 " chunks\n", a.pos[2], st.n);
		printf("done %" PRIu64 ", leased %" PRIu64 ", pending %" PRIu64 ", buried %" PRIu64 "\n", st.done,
		       st.leased, st.pending, st.buried);
		printf("failed attempts %" PRIu64 ", duplicates ignored %" PRIu64 ", speculative wins %" PRIu64 "\n",
		       st.failed_attempts, st.duplicates, st.speculative_wins);
		mesh_job_failures(j, print_failure, &fl);
		if (fl.total > fl.shown)
			printf("  ... and %" PRIu64 " more (--json lists all)\n", fl.total - fl.shown);
		puts(complete ? "COMPLETE" : "INCOMPLETE");
	}
	mesh_job_close(j);
	return complete ? MESH_EXIT_OK : MESH_EXIT_INCOMPLETE;
}

static volatile int stop_flag;
static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

/* harvest -- CMD: one node, one slot, through the exec runner. */
static int harvest_cmd(struct mesh_job *j, const struct args *a, uint64_t ttl, uint64_t maxiter)
{
	struct mesh_exec_opts eo = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats es;
	int rc;
	eo.argv = a->cmd;
	eo.slots = 1;
	eo.ttl_ns = ttl;
	eo.speculate = a->speculate;
	eo.max_chunks = maxiter;
	rc = mesh_exec_run(j, &eo, &es);
	char words[400];
	mesh_job_store_error(j, words, sizeof words);
	mesh_job_close(j);
	if (rc < 0)
		return mesh_cli_fail_store(rc, words, "harvest of '%s' stopped", a->pos[0]);
	fprintf(stderr, "harvest %s: started %" PRIu64 ", done %" PRIu64 ", ignored %" PRIu64 ", failed %" PRIu64
	       ", buried %" PRIu64 ", speculative %" PRIu64 "\n",
	       a->pos[5], es.started, es.done, es.ignored, es.failed, es.buried, es.speculative);
	switch (rc) {
	case MESH_EXEC_COMPLETE:
		fputs("COMPLETE\n", stderr);
		return MESH_EXIT_OK;
	case MESH_EXEC_INTERRUPTED:
	case MESH_EXEC_HANGUP:
		fputs("INTERRUPTED\n", stderr);
		return MESH_EXIT_INTERRUPTED;
	case MESH_EXEC_FAILED:
		fputs("INCOMPLETE: only buried chunks are left (mesh job retry)\n", stderr);
		return MESH_EXIT_INCOMPLETE;
	default:
		fputs("INCOMPLETE\n", stderr);
		return MESH_EXIT_INCOMPLETE;
	}
}

static int cmd_harvest(int argc, char **argv)
{
	struct args a;
	uint64_t n, ttl, maxiter = 0;
	struct mesh_job *j;
	struct mesh_job_drain_stats ds;
	struct sigaction sa;
	int rc = parse_args(argc, argv, &a, "spec cmd outage");
	if (rc || (rc = want_pos("harvest", &a, 6, 7)) || (rc = check_journal_path(a.pos[0])) ||
	    (rc = check_lockdir(a.pos[1], a.pos[2])) ||
	    (rc = parse_count("chunk count", a.pos[3], 1, MESH_JOB_MAX_CHUNKS, &n)) || (rc = parse_ttl(a.pos[4], &ttl)))
		return rc;
	if (!mesh_job_node_ok(a.pos[5])) {
		fprintf(stderr, "mesh: node name '%s' refused (1..64 of [A-Za-z0-9_.:@-])\n", a.pos[5]);
		return MESH_EXIT_USAGE;
	}
	if (a.npos == 7 && (rc = parse_count("maxiter", a.pos[6], 1, UINT64_MAX, &maxiter)))
		return rc;
	mesh_job_set_store_app("mesh job harvest", 1);
	mesh_job_set_store_start_wait(mesh_cli_store_wait, (void *)a.pos[0]);
	if ((rc = open_job(&j, a.pos[0], a.pos[1], a.pos[2], n, a.pos[5])))
		return rc;
	if (a.cmd)
		return harvest_cmd(j, &a, ttl, maxiter);
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = mesh_job_drain(j, ttl, maxiter, a.speculate, &stop_flag, &ds);
	char words[400];
	mesh_job_store_error(j, words, sizeof words);
	mesh_job_close(j);
	if (rc < 0 && rc != MESH_E_BURIED)
		return mesh_cli_fail_store(rc, words, "harvest of '%s' stopped", a.pos[0]);
	fprintf(stderr, "harvest %s: leased %" PRIu64 ", done %" PRIu64 ", ignored %" PRIu64 ", stolen %" PRIu64
	       ", speculative %" PRIu64 "\n",
	       a.pos[5], ds.leased, ds.done, ds.ignored, ds.stolen, ds.speculative);
	switch (rc) {
	case MESH_JOB_COMPLETE:
		fputs("COMPLETE\n", stderr);
		return MESH_EXIT_OK;
	case MESH_JOB_INTERRUPTED:
		fputs("INTERRUPTED\n", stderr);
		return MESH_EXIT_INTERRUPTED;
	case MESH_E_BURIED:
		fputs("INCOMPLETE: only buried chunks are left (mesh job retry)\n", stderr);
		return MESH_EXIT_INCOMPLETE;
	default:
		fputs("INCOMPLETE\n", stderr);
		return MESH_EXIT_INCOMPLETE;
	}
}

/* A meshd job's journal has its results file beside it (docs/jobs.md):
 * every DONE chunk must have its result.  0 (none there, or all whole),
 * MESH_E_CORRUPT (said what is missing), or an exit code after saying
 * why it could not be read. */
static int check_results(const char *journal)
{
	struct mesh_results_report r;
	const char *slash = strrchr(journal, '/');
	char path[PATH_MAX];
	int len = slash ? (int)(slash - journal + 1) : 0;
	if (snprintf(path, sizeof path, "%.*sresults.bin", len, journal) >= (int)sizeof path || access(path, F_OK) < 0)
		return 0;
	int rc = mesh_results_check(path, journal, &r);
	if (rc < 0 && rc != MESH_E_CORRUPT)
		return mesh_cli_fail(rc, "cannot check the results file '%s'", path);
	printf("results %s: %" PRIu64 " bytes; %" PRIu64 " DONE chunks: %" PRIu64 " results in the file, %" PRIu64
	       " carried by their DONE record only\n",
	       path, r.size, r.done, r.in_file, r.in_done);
	if (r.missing) {
		printf("%" PRIu64 " DONE chunks have no result (lost):", r.missing);
		for (uint64_t i = 0; i < r.missing && i < MESH_RESULTS_REPORT_MISSING; i++)
			printf(" %" PRIu64, r.first_missing[i]);
		puts(r.missing > MESH_RESULTS_REPORT_MISSING ? " ..." : "");
	}
	if (r.tail)
		printf("results: %" PRIu64 " bytes after the last whole record at offset %" PRIu64
		       " (torn or damaged; not cut)\n",
		       r.tail, r.size - r.tail);
	return rc;
}

static int cmd_check(int argc, char **argv)
{
	struct args a;
	struct mesh_journal_report r;
	int rc = parse_args(argc, argv, &a, "force");
	if (rc || (rc = want_pos("check", &a, 1, 1)) || (rc = check_journal_path(a.pos[0])))
		return rc;
	rc = mesh_job_journal_check(a.pos[0], a.force ? 2 : 1, &r);
	if (rc && rc != MESH_E_CORRUPT)
		return mesh_cli_fail(rc, "cannot check '%s'", a.pos[0]);
	printf("journal %s: format version %d, %" PRIu64 " bytes, %" PRIu64 " whole records (submit %" PRIu64
	       ", node %" PRIu64 ", done %" PRIu64 ", fail %" PRIu64 ", retry %" PRIu64 ", dup %" PRIu64
	       ", commit %" PRIu64 ")\n",
	       a.pos[0], MESH_JOURNAL_VERSION, r.size, r.records, r.by_type[MESH_JREC_SUBMIT], r.by_type[MESH_JREC_NODE],
	       r.by_type[MESH_JREC_DONE], r.by_type[MESH_JREC_FAIL], r.by_type[MESH_JREC_RETRY],
	       r.by_type[MESH_JREC_DUP], r.by_type[MESH_JREC_COMMIT]);
	if (r.header_bad)
		printf("header: bad checksum or size: %s\n",
		       r.repaired ? "rewritten" : "not repaired (--force rewrites it when the first record is a SUBMIT)");
	if (r.ndropped && r.torn)
		printf("torn tail: %" PRIu64 " bytes at offset %" PRIu64 " %s\n", r.dropped_bytes, r.bad_off,
		       r.repaired ? "cut" : "not cut");
	else if (r.ndropped) {
		printf("damage at offset %" PRIu64 ": %zu damaged ranges, %" PRIu64 " bytes, %" PRIu64
		       " whole records after the first one (kept)\n",
		       r.bad_off, r.ndropped, r.dropped_bytes, r.after_bad);
		for (size_t i = 0; i < r.ndropped && i < MESH_JOURNAL_RANGES; i++)
			printf("  %s bytes %" PRIu64 "..%" PRIu64 " (%" PRIu64 " bytes)\n", r.repaired ? "dropped" : "damaged",
			       r.dropped[i].off, r.dropped[i].off + r.dropped[i].len, r.dropped[i].len);
		if (r.ndropped > MESH_JOURNAL_RANGES)
			printf("  ... and %zu more ranges\n", r.ndropped - MESH_JOURNAL_RANGES);
		if (!r.identity)
			puts(r.repaired ? "rewritten without the damaged ranges (a chunk whose DONE was in them runs again)"
					: "not repaired: `mesh job check --force` rewrites the journal without the damaged ranges");
	}
	if (r.adopted)
		printf("%" PRIu64 " whole records after the last COMMIT (a writer gone before it, a COMMIT torn or "
		       "lost, or a journal older than COMMITs): committed, as every writer would\n",
		       r.adopted);
	if (r.identity) {
		printf("not repaired: the damage is in the records that name the work (SUBMIT, WORK), which a "
		       "repair would drop, leaving a journal of no work or of any command's. To start afresh, "
		       "move it away (`mv %s %s.damaged`): every chunk runs again\n",
		       a.pos[0], a.pos[0]);
	}
	if (!rc && (rc = check_results(a.pos[0])) > 0)
		return rc; /* could not check them: said why */
	if (rc) {
		puts("CORRUPT");
		return mesh_exit_for(rc);
	}
	puts(r.repaired ? "REPAIRED" : "OK");
	return MESH_EXIT_OK;
}

static int cmd_retry(int argc, char **argv)
{
	struct args a;
	uint64_t cid = UINT64_MAX;
	struct mesh_job *j;
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	int rc = parse_args(argc, argv, &a, "");
	if (rc || (rc = want_pos("retry", &a, 1, 2)) || (rc = check_journal_path(a.pos[0])))
		return rc;
	if (a.npos == 2 && (rc = parse_count("chunk id", a.pos[1], 0, MESH_JOB_MAX_CHUNKS - 1, &cid)))
		return rc;
	struct mesh_job_why why;
	o.journal = a.pos[0];
	o.why = &why;
	rc = mesh_job_open(&j, &o);
	if (rc)
		return job_fail(rc, &why, a.pos[0], NULL, 0);
	rc = mesh_job_retry(j, cid);
	mesh_job_close(j);
	if (rc == MESH_E_RANGE)
		return mesh_cli_fail(rc, "chunk %" PRIu64, cid);
	if (rc < 0)
		return mesh_cli_fail(rc, "cannot retry in '%s'", a.pos[0]);
	printf("RETRIED %d\n", rc);
	return MESH_EXIT_OK;
}

static const struct sub subs[] = {
	{"submit", cmd_submit,
	 "usage: mesh job submit <journal.log> <nchunks>\n"
	 "Defines the chunks 0..nchunks-1 in the journal (created if missing).  Submitting the\n"
	 "same count again does nothing; a different count is an error (exit 65).\n"
	 "Prints SUBMITTED <n>.\n"},
	{"lease", cmd_lease,
	 "usage: mesh job lease <journal.log> <lockdir> <job> <nchunks> <ttl_s> [--node NAME] [--speculate]\n"
	 "Claims the next pending chunk (else steals an expired lease; with --speculate, else a\n"
	 "copy of a straggler) for ttl_s seconds and prints its id (exit 0).  Prints NONE (exit 3)\n"
	 "when nothing can be leased now, COMPLETE (exit 4) when every chunk is done.\n"},
	{"complete", cmd_complete,
	 "usage: mesh job complete <journal.log> <lockdir> <job> <cid> <node>\n"
	 "Records chunk cid as DONE, durably, and prints DONE <cid>; a chunk already done prints\n"
	 "IGNORED <cid>.  Both exit 0.  A write or fsync failure exits 74 and the chunk is not done.\n"},
	{"status", cmd_status,
	 "usage: mesh job status <journal.log> <lockdir> <job> <nchunks> [--json]\n"
	 "Prints done / leased / pending / buried counts, failed chunks (attempts, last exit\n"
	 "status) and the verdict.  Exit 0 when COMPLETE, 1 when INCOMPLETE.  It changes\n"
	 "nothing: a damaged journal is reported (exit 65) and left to `mesh job check`; a\n"
	 "missing lock directory means nothing is leased.\n"},
	{"harvest", cmd_harvest,
	 "usage: mesh job harvest <journal.log> <lockdir> <job> <nchunks> <ttl_s> <node> [maxiter]\n"
	 "                        [--speculate] [--store-outage T] [-- CMD ARG...]\n"
	 "One node's drain loop: lease, run, complete, until the job is complete (exit 0), maxiter\n"
	 "leases were taken (exit 1), or SIGINT/SIGTERM (exit 5).  Without a command each chunk\n"
	 "is completed at once (a simulated run); with -- CMD the command runs per chunk, '{}'\n"
	 "replaced by the chunk id; exit 0 completes it, anything else fails the attempt.\n"
	 "--store-outage T: how long a PostgreSQL store's node waits for its database when it\n"
	 "stops answering (5m), keeping its leases; past it exit 69.\n"},
	{"check", cmd_check,
	 "usage: mesh job check <journal.log> [--force]\n"
	 "Verifies the header and every record's checksum.  A torn tail (a partial last append)\n"
	 "is cut, every whole record kept, and whole records left without their COMMIT are\n"
	 "committed as every writer would (exit 0).  Damage followed by whole records, or a bad\n"
	 "header, is reported with the damaged byte ranges (exit 65); --force rewrites the journal\n"
	 "(temp file, fsync, rename) keeping every whole record before and after the damage --\n"
	 "except damage in the records that name the work (SUBMIT, WORK), which nothing repairs:\n"
	 "move the journal away to start afresh.\n"
	 "A meshd job's journal (results.bin beside it) is checked against its results too: a DONE\n"
	 "chunk without its result, or bytes past the file's whole records, is CORRUPT (exit 65);\n"
	 "the results file is not changed.\n"},
	{"retry", cmd_retry,
	 "usage: mesh job retry <journal.log> [cid]\n"
	 "Un-buries every buried chunk (or only cid) so it is leased again; prints RETRIED <count>.\n"},
};

int mesh_cmd_job(int argc, char **argv)
{
	if (argc < 2) {
		fputs(usage_job, stderr);
		return MESH_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		fputs(usage_job, stdout);
		return MESH_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof subs / sizeof subs[0]; i++) {
		if (strcmp(argv[1], subs[i].name))
			continue;
		if (mesh_cli_wants_help(argc - 1, argv + 1)) {
			fputs(subs[i].help, stdout);
			return MESH_EXIT_OK;
		}
		return subs[i].fn(argc - 1, argv + 1);
	}
	return mesh_cli_usage("job: unknown command '%s'", argv[1]);
}
