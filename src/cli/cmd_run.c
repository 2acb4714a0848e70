/* mesh run: GNU parallel's everyday job on top of the journal, so that a
 * killed run resumes where it stopped.  Parsing and naming here; the loop is
 * exec/runner.h. */
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/parse.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "exec/input.h"
#include "exec/runner.h"
#include "job/job.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"usage: mesh run [options] (--chunks N | --input FILE) [--] CMD [ARG...]\n"
	"\n"
	"Runs CMD once per chunk on N local slots.  \"{}\" in CMD is the chunk's value\n"
	"(its line of FILE, else its chunk id), \"{#}\" the chunk id; with no \"{}\" the\n"
	"value is appended.  Completions are journaled: after Ctrl-C or kill -9 the\n"
	"same command again resumes and never re-runs a finished chunk.\n"
	"\n"
	"  -j, --jobs N       slots run at once (default: the number of cores)\n"
	"  --chunks N         chunks 0..N-1\n"
	"  --input FILE       one chunk per line of FILE\n"
	"  --journal F.log    the journal (default: .mesh-run-<hash>.log in the current\n"
	"                     directory, <hash> from CMD and the chunk source)\n"
	"  --retries K        a chunk is tried at most K times, then buried (default 3)\n"
	"  --timeout S        kill an attempt's process group after S seconds (a failure)\n"
	"  --ttl S            lease time-to-live, renewed while a chunk runs (default 5)\n"
	"  --speculate        idle slots run copies of stragglers; first finish wins\n"
	"  --results DIR      write DIR/<chunk>/{stdout,stderr,status} instead of printing\n"
	"  --node NAME        this node's name (default <host>.<pid>)\n"
	"  -h, --help         this help\n"
	"\n"
	"Exit: 0 every chunk done, 1 some chunks failed (buried), 5 interrupted\n"
	"(rerun to resume), 64 usage; others: `mesh help exit-codes`.  Details: docs/run.md\n";

struct run_args {
	uint64_t slots, chunks, retries, timeout_ns, ttl_ns;
	const char *journal, *input, *results, *node;
	int speculate, have_chunks;
	char **cmd;
};

static int need(int argc, char **argv, int i)
{
	if (i + 1 >= argc)
		return mesh_cli_usage("run: option '%s' needs a value", argv[i]);
	return 0;
}

static int num(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	int rc = mesh_parse_u64(s, max, out);
	if (rc == 0 && *out < min)
		rc = MESH_E_RANGE;
	if (rc < 0)
		return mesh_cli_usage("run: %s '%s': expected a whole number from %" PRIu64 " to %" PRIu64, opt, s,
				      min, max);
	return 0;
}

static int secs(const char *opt, const char *s, uint64_t *out)
{
	if (mesh_parse_seconds(s, 365ull * 86400 * MESH_NS_PER_S, out) < 0 || *out == 0)
		return mesh_cli_usage("run: %s '%s': expected seconds, e.g. 30 or 0.5", opt, s);
	return 0;
}

static int parse(int argc, char **argv, struct run_args *a)
{
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	a->slots = cores > 0 ? (uint64_t)cores : 1;
	a->retries = MESH_JOB_MAX_ATTEMPTS_DEFAULT;
	int i;
	for (i = 1; i < argc; i++) {
		const char *o = argv[i];
		int rc = 0;
		if (!strcmp(o, "--")) {
			i++;
			break;
		}
		if (o[0] != '-')
			break;
		if (!strncmp(o, "-j", 2) && o[2]) {
			rc = num("-j", o + 2, 1, 4096, &a->slots);
		} else if (!strcmp(o, "-j") || !strcmp(o, "--jobs")) {
			if (!(rc = need(argc, argv, i)))
				rc = num(o, argv[++i], 1, 4096, &a->slots);
		} else if (!strcmp(o, "--chunks")) {
			if (!(rc = need(argc, argv, i)))
				rc = num(o, argv[++i], 1, MESH_JOB_MAX_CHUNKS, &a->chunks);
			a->have_chunks = 1;
		} else if (!strcmp(o, "--retries")) {
			if (!(rc = need(argc, argv, i)))
				rc = num(o, argv[++i], 1, 1000000, &a->retries);
		} else if (!strcmp(o, "--timeout")) {
			if (!(rc = need(argc, argv, i)))
				rc = secs(o, argv[++i], &a->timeout_ns);
		} else if (!strcmp(o, "--ttl")) {
			if (!(rc = need(argc, argv, i)))
				rc = secs(o, argv[++i], &a->ttl_ns);
		} else if (!strcmp(o, "--journal")) {
			if (!(rc = need(argc, argv, i)))
				a->journal = argv[++i];
		} else if (!strcmp(o, "--input")) {
			if (!(rc = need(argc, argv, i)))
				a->input = argv[++i];
		} else if (!strcmp(o, "--results")) {
			if (!(rc = need(argc, argv, i)))
				a->results = argv[++i];
		} else if (!strcmp(o, "--node")) {
			if (!(rc = need(argc, argv, i)))
				a->node = argv[++i];
		} else if (!strcmp(o, "--speculate")) {
			a->speculate = 1;
		} else {
			return mesh_cli_usage("run: unknown option '%s'", o);
		}
		if (rc)
			return rc;
	}
	if (i >= argc)
		return mesh_cli_usage("run: no command given (mesh run ... -- CMD ARG...)");
	if (!argv[i][0])
		return mesh_cli_usage("run: the command is an empty string");
	if (a->have_chunks == !!a->input)
		return mesh_cli_usage("run: give exactly one of --chunks N or --input FILE");
	if (a->results && !a->results[0])
		return mesh_cli_usage("run: --results needs a directory");
	a->cmd = argv + i;
	return 0;
}

/* The default journal: the same command over the same chunks names the same
 * journal, so running it again resumes. */
static uint64_t run_hash(const struct run_args *a, const struct mesh_exec_input *in)
{
	uint64_t h = mesh_fnv1a64(MESH_FNV1A64_INIT, "mesh-run 1", 11);
	for (char **p = a->cmd; *p; p++)
		h = mesh_fnv1a64(h, *p, strlen(*p) + 1);
	char src[64];
	if (a->input)
		snprintf(src, sizeof src, "input %016" PRIx64, in->hash);
	else
		snprintf(src, sizeof src, "chunks %" PRIu64, a->chunks);
	return mesh_fnv1a64(h, src, strlen(src) + 1);
}

/* The lock dir follows the journal's absolute path: every run on one
 * journal meets in one lock dir, and two directories never share one. */
static int lockdir_for(const char *journal, char *out, size_t cap)
{
	char dir[PATH_MAX], abs[PATH_MAX + 256];
	const char *slash = strrchr(journal, '/');
	const char *base = slash ? slash + 1 : journal;
	if (slash) {
		char d[PATH_MAX];
		size_t dl = (size_t)(slash - journal);
		if (dl == 0)
			dl = 1;
		if (dl >= sizeof d)
			return -ENAMETOOLONG;
		memcpy(d, journal, dl);
		d[dl] = 0;
		if (!realpath(d, dir))
			return -errno;
	} else if (!getcwd(dir, sizeof dir)) {
		return -errno;
	}
	snprintf(abs, sizeof abs, "%s/%s", dir, base);
	uint64_t h = mesh_fnv1a64(MESH_FNV1A64_INIT, abs, strlen(abs));
	snprintf(out, cap, "/tmp/mesh-run-%016" PRIx64, h);
	return 0;
}

/* The identity of a run's work, recorded in its journal at submit: the
 * chunk source and the command (readable and cut to fit, then a hash of
 * the whole argv that makes it exact).  Reusing the journal for other work
 * is refused instead of skipping chunks that the other work finished.
 * out holds MESH_JOB_IDENTITY_MAX + 1 bytes; returns the length. */
static size_t run_identity(const struct run_args *a, const struct mesh_exec_input *in, char *out)
{
	char src[80], cmd[MESH_JOB_IDENTITY_MAX + 1];
	size_t n = 0, room;
	int cut = 0;
	uint64_t h = MESH_FNV1A64_INIT;
	if (a->input)
		snprintf(src, sizeof src, "input %016" PRIx64 " (%" PRIu64 " lines)", in->hash, in->n);
	else
		snprintf(src, sizeof src, "chunks %" PRIu64, a->chunks);
	/* src, ", command '", cmd, "...", "' #", 16 hex digits */
	room = MESH_JOB_IDENTITY_MAX - strlen(src) - 11 - 3 - 3 - 16;
	for (char **p = a->cmd; *p; p++) {
		h = mesh_fnv1a64(h, *p, strlen(*p) + 1);
		for (const char *c = *p; *c && !cut; c++) {
			if (n == room)
				cut = 1;
			else
				cmd[n++] = (unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c;
		}
		if (p[1] && !cut) {
			if (n == room)
				cut = 1;
			else
				cmd[n++] = ' ';
		}
	}
	return (size_t)snprintf(out, MESH_JOB_IDENTITY_MAX + 1, "%s, command '%.*s%s' #%016" PRIx64, src, (int)n, cmd,
				cut ? "..." : "", h);
}

/* The message for a journal that holds other work; returns the exit code. */
static int other_work(const char *journal, const struct mesh_job_why *w, const char *mine)
{
	if (w->identity_len)
		fprintf(stderr, "mesh: journal '%s' belongs to other work (it holds: %.*s; this run: %s); ", journal,
			(int)w->identity_len, (const char *)w->identity, mine);
	else
		fprintf(stderr, "mesh: journal '%s' belongs to other work (it holds %" PRIu64 " chunks; this run: %s); ",
			journal, w->n, mine);
	fprintf(stderr, "remove it or choose another --journal to start afresh\n");
	return mesh_exit_for(MESH_E_MISMATCH);
}

static void print_failure(const struct mesh_job_failure *f, void *arg)
{
	unsigned *shown = arg;
	if (!f->buried)
		return;
	if ((*shown)++ >= 10)
		return;
	int s = f->last_status;
	if (s > 128 && s < 128 + 65)
		fprintf(stderr, "mesh: chunk %" PRIu64 " buried after %" PRIu32 " attempts (last: signal %d)\n", f->cid,
			f->attempts, s - 128);
	else
		fprintf(stderr, "mesh: chunk %" PRIu64 " buried after %" PRIu32 " attempts (last: exit %d)\n", f->cid,
			f->attempts, s);
}

int mesh_cmd_run(int argc, char **argv)
{
	struct run_args a;
	struct mesh_exec_input in = MESH_EXEC_INPUT_INIT;
	struct mesh_job *job = NULL, *spec = NULL;
	struct mesh_job_why why;
	char jbuf[64], lockdir[128], specnode[72], ident[MESH_JOB_IDENTITY_MAX + 1];
	size_t ident_len;
	int rc, ex = MESH_EXIT_SOFTWARE, done_all = 0;
	memset(&a, 0, sizeof a);
	if (mesh_cli_wants_help(argc, argv)) {
		fputs(usage, stdout);
		return MESH_EXIT_OK;
	}
	if ((rc = parse(argc, argv, &a)) != 0)
		return rc;
	if (a.input) {
		uint64_t bad = 0;
		rc = mesh_exec_input_load(a.input, &in, &bad);
		if (rc == MESH_E_PARSE) {
			fprintf(stderr, "mesh: input '%s' line %" PRIu64 " holds a NUL byte, which no argument can carry\n",
				a.input, bad);
			ex = MESH_EXIT_DATAERR;
		}
		else if (rc == MESH_E_RANGE)
			ex = mesh_cli_usage("run: input '%s' is empty: no chunks", a.input);
		else if (rc < 0)
			ex = mesh_cli_fail(rc, "cannot read '%s'", a.input);
		if (rc < 0)
			goto out;
		a.chunks = in.n;
	}
	if (!a.journal) {
		snprintf(jbuf, sizeof jbuf, ".mesh-run-%016" PRIx64 ".log", run_hash(&a, &in));
		a.journal = jbuf;
	}
	ident_len = run_identity(&a, &in, ident);
	if ((rc = lockdir_for(a.journal, lockdir, sizeof lockdir)) < 0) {
		ex = mesh_cli_fail(rc, "cannot resolve '%s'", a.journal);
		goto out;
	}
	rc = mesh_job_submit_id(a.journal, a.chunks, ident, ident_len, &why);
	if (rc == MESH_E_MISMATCH) {
		ex = other_work(a.journal, &why, ident);
		goto out;
	}
	if (rc < 0) {
		ex = mesh_cli_fail(rc, "cannot submit to '%s'", a.journal);
		goto out;
	}
	struct mesh_job_opts jo = MESH_JOB_OPTS_INIT;
	jo.journal = a.journal;
	jo.lockdir = lockdir;
	jo.name = "run";
	jo.nchunks = a.chunks;
	jo.node = a.node;
	jo.max_attempts = (uint32_t)a.retries;
	jo.identity = ident;
	jo.identity_len = ident_len;
	if ((rc = mesh_job_open(&job, &jo)) < 0) {
		ex = mesh_cli_fail(rc, "cannot open journal '%s'", a.journal);
		goto out;
	}
	if (a.speculate) {
		/* A second node name for copies of our own stragglers. */
		snprintf(specnode, sizeof specnode, "%.56s.spec", mesh_job_node(job));
		jo.node = specnode;
		if ((rc = mesh_job_open(&spec, &jo)) < 0) {
			ex = mesh_cli_fail(rc, "cannot open journal '%s'", a.journal);
			goto out;
		}
	}
	struct mesh_job_status js;
	if (mesh_job_status(job, &js) == 0 && js.done > 0 && js.done < js.n)
		fprintf(stderr, "mesh run: resuming: %" PRIu64 "/%" PRIu64 " chunks already done (journal %s)\n",
			js.done, js.n, a.journal);

	struct mesh_exec_opts eo = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats es;
	eo.argv = a.cmd;
	eo.slots = (unsigned)a.slots;
	eo.input = a.input ? &in : NULL;
	/* Short: after a kill -9 the rerun waits this long for the chunks the
	 * dead run held.  Renewal every ttl/4 keeps live leases safe. */
	eo.ttl_ns = a.ttl_ns ? a.ttl_ns : 5 * MESH_NS_PER_S;
	eo.timeout_ns = a.timeout_ns;
	eo.speculate = a.speculate;
	eo.spec_job = spec;
	eo.results_dir = a.results;
	eo.progress_fd = isatty(2) ? 2 : -1;
	rc = mesh_exec_run(job, &eo, &es);
	if (rc < 0) {
		if (rc == -ENOENT || rc == -EACCES)
			ex = mesh_cli_fail(rc, "cannot run '%s'", a.cmd[0]);
		else
			ex = mesh_cli_fail(rc, "run stopped (journal '%s')", a.journal);
		goto out;
	}
	if (mesh_job_status(job, &js) < 0)
		memset(&js, 0, sizeof js);
	if (rc == MESH_EXEC_FAILED) {
		unsigned shown = 0;
		mesh_job_failures(job, print_failure, &shown);
		if (shown > 10)
			fprintf(stderr, "mesh: ... and %u more buried chunks (mesh job status %s)\n", shown - 10,
				a.journal);
	}
	fprintf(stderr,
		"mesh run: %s: %" PRIu64 "/%" PRIu64 " done, %" PRIu64 " failed, %" PRIu64
		" duplicates ignored, %" PRIu64 " speculative wins, %.2f s (%" PRIu64 " run here; journal %s)\n",
		rc == MESH_EXEC_COMPLETE ? "complete"
		: rc == MESH_EXEC_INTERRUPTED ? "interrupted, rerun the same command to resume"
					      : "incomplete",
		js.done, js.n, js.buried, js.duplicates, js.speculative_wins, (double)es.wall_ns / 1e9, es.started,
		a.journal);
	/* A finished job holds no leases: leave no empty lock dir in /tmp
	 * (fails harmlessly while another node still has a file there). */
	done_all = rc == MESH_EXEC_COMPLETE;
	ex = rc == MESH_EXEC_COMPLETE	 ? MESH_EXIT_OK
	     : rc == MESH_EXEC_INTERRUPTED ? MESH_EXIT_INTERRUPTED
					   : MESH_EXIT_INCOMPLETE;
out:
	if (spec)
		mesh_job_close(spec);
	if (job)
		mesh_job_close(job);
	if (done_all)
		rmdir(lockdir);
	mesh_exec_input_release(&in);
	return ex;
}
