/* mesh run: GNU parallel's command line on top of the journal, so that a
 * killed run resumes where it stopped.  Parsing (cli/run_opts.c), sources
 * and naming here; the loop is exec/runner.h. */
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"
#include "base/path.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "cli/run_opts.h"
#include "exec/input.h"
#include "exec/runner.h"
#include "exec/template.h"
#include "job/job.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* GNU parallel's several records a command: -N/-n a fixed number; -m and
 * -X as many as fit, spread evenly over the slots (ceil(records /
 * slots) each, as GNU parallel does when it has read all its input
 * before the first start); --xargs as many as fit.  "Fit" is mesh's
 * bound, not the system's ARG_MAX: MESH_EXEC_INPUT_MAX_ARGS arguments
 * and MULTI_BYTES of them joined. */
#define MULTI_BYTES (128u * 1024)
/* --pipe's default block, GNU parallel's 1M. */
#define PIPE_BLOCK (1024u * 1024)
static int group(const struct run_args *a, struct mesh_exec_input *in)
{
	uint64_t per = a->max_args;
	if (a->multi == 'N' && per == 0) {
		/* -N0: a record a chunk, which the command does not see; other
		 * commands than without -N0: another journal */
		in->no_args = 1;
		in->hash = mesh_fnv1a64(in->hash, "-N0", 4);
		return 0;
	}
	if (a->multi == 'N' && per == 1 && a->nsrc > 1)
		return 0; /* a record is one of the sources' combinations */
	if (a->pipe) /* -N N records a block, else blocks of bytes */
		return mesh_exec_input_blocks(in, per, per ? 0 : a->block ? a->block : PIPE_BLOCK, (char)a->delim);
	if (a->multi == 'm' || a->multi == 'X')
		per = a->slots > 1 ? (in->n + a->slots - 1) / a->slots : 0;
	else if (a->multi == 'x')
		per = 0;
	int rc = mesh_exec_input_group(in, a->have_colsep ? &a->colsep : NULL, per, a->multi == 'N' ? 0 : MULTI_BYTES);
	if (rc == 0 && a->multi == 'X') {
		/* other commands than -m's from the same chunks: another journal */
		in->context = 1;
		in->hash = mesh_fnv1a64(in->hash, "-X", 3);
	}
	return rc;
}

/* Loads the sources into in.  Returns 0 or an exit code (after saying why). */
static int load_sources(struct run_args *a, struct mesh_exec_input *in)
{
	struct mesh_exec_list *lists = calloc(a->nsrc ? a->nsrc : 1, sizeof *lists);
	struct mesh_exec_source *src = calloc(a->nsrc ? a->nsrc : 1, sizeof *src);
	int rc = 0, ex = 0;
	if (!lists || !src) {
		ex = mesh__run_fail(-ENOMEM, "cannot read the arguments");
		goto out;
	}
	for (size_t s = 0; s < a->nsrc && !ex; s++) {
		const struct run_src *rs = &a->src[s];
		src[s].list = &lists[s];
		src[s].linked = rs->linked;
		if (!rs->path) {
			if ((rc = mesh_exec_list_from_argv(&lists[s], rs->words, rs->nwords)) < 0)
				ex = mesh__run_fail(rc, "cannot read the arguments");
			continue;
		}
		char *data = NULL;
		size_t len = 0;
		uint64_t bad = 0;
		int from_stdin = !strcmp(rs->path, "-");
		rc = mesh_read_file(from_stdin ? "/dev/stdin" : rs->path, 1ull << 40, &data, &len);
		if (rc < 0) {
			ex = mesh__run_fail(rc, "cannot read '%s'", from_stdin ? "standard input" : rs->path);
			continue;
		}
		rc = mesh_exec_list_split(&lists[s], data, len, a->delim, &bad);
		free(data);
		if (rc == MESH_E_PARSE) {
			fprintf(stderr,
				"mesh: run: '%s' record %" PRIu64 " holds a NUL byte, which no argument can carry "
				"(-0 splits at NUL bytes)\n",
				from_stdin ? "standard input" : rs->path, bad);
			ex = mesh_exit_run(MESH_EXIT_DATAERR);
		} else if (rc < 0) {
			ex = mesh__run_fail(rc, "cannot read '%s'", rs->path);
		}
	}
	if (!ex && (rc = mesh_exec_input_combine(in, src, a->nsrc, a->have_colsep ? &a->colsep : NULL)) < 0)
		ex = mesh__run_fail(rc, "cannot combine the arguments");
	if (!ex && (a->multi || a->pipe) && (rc = group(a, in)) < 0)
		ex = rc == MESH_E_TOOBIG ? mesh__run_usage("-N %" PRIu64 ": more than %d arguments a command", a->max_args,
							  MESH_EXEC_INPUT_MAX_ARGS)
					 : mesh__run_fail(rc, "cannot group the arguments");
out:
	for (size_t s = 0; lists && s < a->nsrc; s++)
		mesh_exec_list_release(&lists[s]);
	free(lists);
	free(src);
	return ex;
}

/* The default journal: the same command over the same chunks names the same
 * journal, so running it again resumes.  One function, so that what names a
 * run is in one place. */
static void journal_name(const struct run_args *a, const struct mesh_exec_input *in, char *out, size_t cap)
{
	uint64_t h = mesh_fnv1a64(MESH_FNV1A64_INIT, "mesh-run 2", 11);
	char src[96];
	for (char **p = a->cmd; p && *p; p++)
		h = mesh_fnv1a64(h, *p, strlen(*p) + 1);
	if (a->have_chunks)
		snprintf(src, sizeof src, "chunks %" PRIu64, a->chunks);
	else
		snprintf(src, sizeof src, "input %016" PRIx64 " %" PRIu64, in->hash, in->n);
	h = mesh_fnv1a64(h, src, strlen(src) + 1);
	if (a->have_colsep)
		h = mesh_fnv1a64(h, a->colsep_text, strlen(a->colsep_text) + 1);
	snprintf(out, cap, ".mesh-run-%016" PRIx64 ".log", h);
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
	if (a->have_chunks)
		snprintf(src, sizeof src, "chunks %" PRIu64, a->chunks);
	else
		snprintf(src, sizeof src, "input %016" PRIx64 " (%" PRIu64 " lines)", in->hash, in->n);
	/* src, ", command '", cmd, "...", "' #", 16 hex digits */
	room = MESH_JOB_IDENTITY_MAX - strlen(src) - 11 - 3 - 3 - 16;
	for (char **p = a->cmd; p && *p; p++) {
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
	if (a->have_colsep) /* other columns are other arguments */
		h = mesh_fnv1a64(h, a->colsep_text, strlen(a->colsep_text) + 1);
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
	return mesh_exit_run(mesh_exit_for(MESH_E_MISMATCH));
}

struct failures {
	unsigned shown;
};

static void print_failure(const struct mesh_job_failure *f, void *arg)
{
	struct failures *fs = arg;
	if (!f->buried)
		return;
	if (fs->shown++ >= 10)
		return;
	int s = f->last_status, sig = s > 128 && s < 128 + 65;
	fprintf(stderr, "mesh: chunk %" PRIu64 " buried after %" PRIu32 " attempt%s (last: %s %d)\n", f->cid, f->attempts,
		f->attempts == 1 ? "" : "s", sig ? "signal" : "exit", sig ? s - 128 : s);
}

/* Prints what would run (--dry-run), one command a line, as the joblog
 * shows it (mesh_exec_template_render). */
static int dry_run(const struct run_args *a, const struct mesh_exec_input *in, uint64_t n)
{
	struct mesh_exec_template t;
	struct mesh_buf line = MESH_BUF_INIT;
	int rc = mesh_exec_template_init_rpls(&t, a->argv, &a->rpls);
	t.total = n;
	for (uint64_t c = 0; rc == 0 && c < n; c++) {
		if ((rc = mesh_exec_template_render(&t, in, c, 1, &line)) == 0 && (rc = mesh_buf_add(&line, "\n", 1)) == 0)
			rc = mesh_write_all(1, line.p, line.len);
	}
	mesh_buf_release(&line);
	mesh_exec_template_release(&t);
	return rc < 0 ? mesh__run_fail(rc, "dry run") : MESH_EXIT_OK;
}

/* "mesh: run: cannot WHAT 'path': reason" (an output file or directory):
 * the exit code for it. */
static int cant_create(int err, const char *what, const char *path)
{
	fprintf(stderr, "mesh: run: cannot %s '%s': %s\n", what, path, mesh_strerror(err));
	return mesh_exit_run(MESH_EXIT_CANTCREAT);
}

/* --results is made (with its parents, as GNU parallel does) and --tmpdir
 * must be a directory, before anything runs.  0 or an exit code. */
static int check_dirs(const struct run_args *a)
{
	struct stat st;
	int rc;
	if (a->tmpdir && a->tmpdir[0]) {
		rc = stat(a->tmpdir, &st) < 0 ? -errno : !S_ISDIR(st.st_mode) ? -ENOTDIR : access(a->tmpdir, W_OK | X_OK) < 0 ? -errno : 0;
		if (rc < 0)
			return cant_create(rc, "use --tmpdir", a->tmpdir);
	}
	if (a->results && (rc = mesh_path_mkdirs(a->results, 0755)) < 0)
		return cant_create(rc, "create the results directory", a->results);
	return 0;
}

/* Opens the job (and the speculation handle).  Returns 0 or an exit code. */
static int open_job(struct run_args *a, const struct mesh_exec_input *in, const char *lockdir, struct mesh_job **job,
		    struct mesh_job **spec, char *specnode, size_t cap)
{
	struct mesh_job_why why;
	char ident[MESH_JOB_IDENTITY_MAX + 1];
	size_t ident_len = run_identity(a, in, ident);
	if (a->store_outage_ns)
		mesh_job_set_store_outage(a->store_outage_ns);
	mesh_job_set_store_app("mesh run", 1);
	mesh_job_set_store_start_wait(mesh_cli_store_wait, (void *)a->journal);
	int rc = mesh_job_submit_id(a->journal, a->chunks, ident, ident_len, &why);
	if (rc == MESH_E_MISMATCH)
		return other_work(a->journal, &why, ident);
	if (rc < 0)
		return mesh__run_fail_store(rc, why.store_msg, "cannot submit to '%s'", a->journal);
	struct mesh_job_opts jo = MESH_JOB_OPTS_INIT;
	memset(&why, 0, sizeof why);
	jo.why = &why;
	jo.journal = a->journal;
	jo.lockdir = lockdir;
	jo.name = "run";
	jo.nchunks = a->chunks;
	jo.node = a->node;
	jo.max_attempts = (uint32_t)a->retries;
	jo.identity = ident;
	jo.identity_len = ident_len;
	jo.on_store_wait = mesh_cli_store_wait;
	jo.on_store_wait_arg = (void *)a->journal;
	if ((rc = mesh_job_open(job, &jo)) < 0 && why.identity_damaged)
		return mesh_exit_run(mesh_cli_identity_damaged(rc, a->journal, &why));
	if (rc < 0)
		return mesh__run_fail_store(rc, why.store_msg, "cannot open journal '%s'", a->journal);
	if (a->speculate) {
		/* A second node name for copies of our own stragglers. */
		snprintf(specnode, cap, "%.56s.spec", mesh_job_node(*job));
		jo.node = specnode;
		if ((rc = mesh_job_open(spec, &jo)) < 0)
			return mesh__run_fail_store(rc, why.store_msg, "cannot open journal '%s'", a->journal);
	}
	return 0;
}

/* A rerun resumes, and a node that starts while others hold leases joins
 * them: it says which, and gives failed chunks new attempts.  1 when the
 * journal holds work done or failed before this run. */
static int resume(struct run_args *a, struct mesh_job *job)
{
	struct mesh_job_status js;
	if (mesh_job_status(job, &js) < 0)
		return 0;
	if (js.closed && js.done)
		fprintf(stderr,
			"mesh run: warning: a run on journal '%s' ended because its standard output was closed; "
			"the chunks done are skipped, though their output may not have been read (remove the "
			"journal to run every chunk again)\n",
			a->journal);
	if ((js.done == 0 && js.buried == 0 && js.leased == 0) || js.done == js.n)
		return js.done > 0;
	int retried = js.buried ? mesh_job_retry(job, UINT64_MAX) : 0;
	/* live leases before this node's first: other nodes run the job now */
	if (js.leased)
		fprintf(stderr, "mesh run: joining: %" PRIu64 "/%" PRIu64 " chunks already done, %" PRIu64
			" leased by other nodes", js.done, js.n, js.leased);
	else
		fprintf(stderr, "mesh run: resuming: %" PRIu64 "/%" PRIu64 " chunks already done", js.done, js.n);
	if (retried > 0)
		fprintf(stderr, ", %d failed chunks run again", retried);
	fprintf(stderr, " (journal %s)\n", a->journal);
	return js.done > 0 || js.buried > 0;
}

static void exec_opts(const struct run_args *a, const struct mesh_exec_input *in, struct mesh_job *spec, int resumed,
		      struct mesh_exec_opts *eo)
{
	eo->argv = a->argv;
	eo->slots = (unsigned)a->slots;
	eo->input = a->have_chunks ? NULL : in;
	/* Short: after a kill -9 the rerun waits this long for the chunks the
	 * dead run held.  Renewal every ttl/4 keeps live leases safe. */
	eo->ttl_ns = a->ttl_ns ? a->ttl_ns : 5 * MESH_NS_PER_S;
	eo->timeout_ns = a->timeout_ns;
	eo->timeout_pct = a->timeout_pct;
	eo->speculate = a->speculate;
	eo->spec_job = spec;
	eo->results_dir = a->results;
	eo->progress_fd = a->progress || isatty(2) ? 2 : -1;
	eo->keep_order = a->keep_order;
	eo->tag = a->tag;
	eo->tagstring = a->tagstring;
	eo->rpls = &a->rpls;
	eo->line_buffer = a->line_buffer;
	eo->ungroup = a->ungroup;
	eo->joblog = a->joblog;
	eo->joblog_mode = a->joblog_plus ? MESH_EXEC_JOBLOG_PLUS : resumed ? MESH_EXEC_JOBLOG_APPEND : MESH_EXEC_JOBLOG_NEW;
	eo->halt_mode = a->halt_mode;
	eo->halt_what = a->halt_what;
	eo->halt_count = a->halt_count;
	eo->halt_percent = a->halt_percent;
	eo->delay_ns = a->delay_ns;
	eo->load_max = a->load_max;
	eo->memfree_bytes = a->memfree;
	/* --nice 0 is no --nice, as GNU parallel reads it. */
	eo->nice = a->nice ? a->nice : MESH_EXEC_NICE_INHERIT;
	eo->tmpdir = a->tmpdir;
}

/* A run stopped by an error names the chunks whose output went out but
 * that are not DONE: the same command prints them again (output is
 * at-least-once across a failed journal, docs/run.md). */
static void say_repeats(const struct mesh_exec_stats *es)
{
	if (!es->repeat)
		return;
	fprintf(stderr, "mesh: run: the output of chunk%s", es->repeat > 1 ? "s" : "");
	for (uint64_t i = 0; i < es->repeat && i < MESH_EXEC_REPEAT_SHOWN; i++)
		fprintf(stderr, " %" PRIu64, es->repeat_cids[i]);
	if (es->repeat > MESH_EXEC_REPEAT_SHOWN)
		fprintf(stderr, " and %" PRIu64 " more", es->repeat - MESH_EXEC_REPEAT_SHOWN);
	fprintf(stderr, " was written, but %s not journaled as done: the same command prints %s again\n",
		es->repeat > 1 ? "they are" : "it is", es->repeat > 1 ? "them" : "it");
}

/* Standard output was closed (`| head -1`): the chunks whose output went
 * into the pipe are DONE, but what its reader took before it left cannot
 * be known.  A default journal is discarded as a complete run's is (1: the
 * caller removes it), so the same command with another output gets every
 * chunk; an explicit one is kept and marked, and its rerun warns. */
static int closed_stdout(const struct run_args *a, struct mesh_job *job)
{
	if (!a->explicit_journal) {
		fprintf(stderr, "mesh run: standard output was closed; what its reader took cannot be known, so the "
				"journal is removed: the same command runs every chunk again\n");
		return 1;
	}
	if (mesh_job_note_closed(job) == 0)
		fprintf(stderr,
			"mesh run: standard output was closed; journal '%s' is kept: a rerun skips the chunks done, "
			"whose output may not have been read\n",
			a->journal);
	return 0;
}

/* GNU parallel's exit code under --halt: the failed chunk's status when
 * one failure met the rule (fail=1, or a share that is one chunk); the
 * failed share in percent (rounded up) for fail=N% and done=N%, the count
 * (101 at most) for fail=N; 0 for success=; and when the rule was never
 * met, the failed share of the chunks started (N%) or the count (N). */
static int halt_exit_code(const struct run_args *a, int halted, const struct mesh_exec_stats *es, uint64_t n)
{
	uint64_t failed = halted ? es->halt_failed : es->buried;
	if (halted && a->halt_what == MESH_EXEC_HALT_SUCCESS)
		return MESH_EXIT_OK;
	if (halted && (a->halt_percent ? (double)n * ((double)a->halt_percent / 100) == 1.0 : a->halt_count == 1))
		return es->halt_status & 255;
	if (a->halt_percent) {
		uint64_t of = halted ? n : es->started ? es->started : 1;
		return (int)((failed * 100 + of - 1) / of);
	}
	return failed > 100 ? 101 : (int)failed;
}

/* The exit code of a run that ended with answer rc: GNU parallel's. */
static int run_exit_code(const struct run_args *a, struct mesh_job *job, int rc, const struct mesh_job_status *js,
			 const struct mesh_exec_stats *es, const char *lockdir)
{
	struct failures fs = {0};
	if (rc == MESH_EXEC_INTERRUPTED)
		return MESH_EXIT_RUN_INTERRUPTED;
	if (rc == MESH_EXEC_HANGUP)
		return MESH_EXIT_RUN_HANGUP;
	if (js->buried)
		mesh_job_failures(job, print_failure, &fs);
	if (fs.shown > 10)
		fprintf(stderr, "mesh: ... and %u more failed chunks\n", fs.shown - 10);
	if (js->buried)
		fprintf(stderr,
			"mesh: %" PRIu64 " chunk%s failed; the same command runs %s again; "
			"details: mesh job status %s %s run %" PRIu64 "\n",
			js->buried, js->buried == 1 ? "" : "s", js->buried == 1 ? "it" : "them", a->journal, lockdir, js->n);
	if (a->halt_mode != MESH_EXEC_HALT_NEVER && (rc == MESH_EXEC_HALTED || js->buried))
		return halt_exit_code(a, rc == MESH_EXEC_HALTED, es, js->n);
	if (js->buried)
		return js->buried > 100 ? 101 : (int)js->buried;
	return rc == MESH_EXEC_COMPLETE ? MESH_EXIT_OK : MESH_EXIT_RUN_INCOMPLETE;
}

/* Where the run's job lives: $MESH_STORE when no --journal says; a
 * PostgreSQL store's URL (no lock directory; the job is the URL's #name,
 * else the one the default journal would be named after, so that the same
 * command meets the same job: docs/cluster.md), or a journal file (by
 * default named after the command and its input, jbuf) and its lock
 * directory.  0 or an exit code (said). */
static int where_journal(struct run_args *a, const struct mesh_exec_input *in, char jbuf[64], char surl[1024],
			 char lockdir[128])
{
	if (!a->journal && getenv("MESH_STORE") && *getenv("MESH_STORE")) {
		a->journal = getenv("MESH_STORE");
		a->explicit_journal = 1;
	}
	if (a->journal && mesh_job_is_store_url(a->journal)) {
		int ex = mesh_cli_store_url_refused("run", a->journal);
		if (ex)
			return ex;
		mesh_job_url_safe(a->journal, surl, 1024);
		if (!strchr(a->journal, '#')) {
			journal_name(a, in, jbuf, 64);
			snprintf(surl, 1024, "%s#%.*s", a->journal, (int)(strlen(jbuf) - 5), jbuf + 1);
			a->journal = surl;
		}
		lockdir[0] = 0;
		return 0;
	}
	if (!a->journal) {
		journal_name(a, in, jbuf, 64);
		a->journal = jbuf;
	}
	int rc = lockdir_for(a->journal, lockdir, 128);
	return rc < 0 ? mesh__run_fail(rc, "cannot resolve '%s'", a->journal) : 0;
}

/* The exit code of a run that stopped with rc < 0, said; *discard set when
 * its default journal is not to be kept. */
static int run_failed(const struct run_args *a, struct mesh_job *job, int rc, const struct mesh_exec_stats *es,
		      int *discard)
{
	struct mesh_job_status js;
	int ex;
	if (rc == -EPIPE) { /* stdout closed (| head): GNU parallel dies of SIGPIPE */
		*discard = closed_stdout(a, job);
		return MESH_EXIT_RUN_CLOSED_STDOUT;
	}
	if (es->failed_at == MESH_EXEC_AT_COMMAND) {
		ex = mesh__run_fail(rc, "cannot run '%s'", a->argv[0]);
		/* Nothing ran: a default journal with nothing done is not
		 * left behind (a hidden file nobody asked for). */
		if (mesh_job_status(job, &js) == 0 && js.done == 0)
			*discard = 1;
	} else if (es->failed_at == MESH_EXEC_AT_JOBLOG) {
		ex = cant_create(rc, "open the joblog", a->joblog);
	} else if (es->failed_at == MESH_EXEC_AT_RESULTS) {
		ex = cant_create(rc, "create the results directory", a->results);
	} else if (rc == MESH_E_OUTPUT) { /* the note said which and why */
		ex = mesh_exit_run(mesh_exit_for(rc));
	} else {
		char words[400];
		mesh_job_store_error(job, words, sizeof words);
		ex = mesh__run_fail_store(rc, words, "run stopped (journal '%s')", a->journal);
	}
	say_repeats(es);
	return ex;
}

int mesh_cmd_run(int argc, char **argv)
{
	struct run_args a;
	struct mesh_exec_input in = MESH_EXEC_INPUT_INIT;
	struct mesh_job *job = NULL, *spec = NULL;
	char jbuf[64], lockdir[128] = "", specnode[72], surl[1024];
	int rc, ex, finished = 0, discard = 0;
	if ((ex = mesh__run_parse(argc, argv, &a)) != 0 || a.help)
		goto out;
	if (!a.have_chunks) {
		if ((ex = load_sources(&a, &in)) != 0)
			goto out;
		a.chunks = in.n;
	}
	if (a.chunks == 0) /* nothing to do, as `xargs -r` */
		goto out;
	if (a.dry_run) {
		ex = dry_run(&a, a.have_chunks ? NULL : &in, a.chunks);
		goto out;
	}
	if ((ex = where_journal(&a, &in, jbuf, surl, lockdir)) != 0 || (ex = check_dirs(&a)) != 0 || (ex = open_job(&a, &in, lockdir, &job, &spec, specnode, sizeof specnode)) != 0)
		goto out;
	int resumed = resume(&a, job);

	struct mesh_exec_opts eo = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats es;
	struct mesh_job_status js;
	exec_opts(&a, &in, spec, resumed, &eo);
	rc = mesh_exec_run(job, &eo, &es);
	if (rc < 0) {
		ex = run_failed(&a, job, rc, &es, &discard);
		goto out;
	}
	if (mesh_job_status(job, &js) < 0)
		memset(&js, 0, sizeof js);
	ex = run_exit_code(&a, job, rc, &js, &es, lockdir);
	finished = rc == MESH_EXEC_COMPLETE && js.buried == 0 && js.done == js.n;
	if (!a.silent && (a.verbose || a.progress || isatty(2)))
		fprintf(stderr,
			"mesh run: %s: %" PRIu64 "/%" PRIu64 " done, %" PRIu64 " failed, %" PRIu64
			" duplicates ignored, %" PRIu64 " speculative wins, %.2f s (%" PRIu64 " run here; journal %s%s)\n",
			finished ? "complete"
			: rc == MESH_EXEC_INTERRUPTED || rc == MESH_EXEC_HANGUP
				? "interrupted, rerun the same command to resume"
				: "incomplete, rerun the same command to resume",
			js.done, js.n, js.buried, js.duplicates, js.speculative_wins, (double)es.wall_ns / 1e9,
			es.started, a.journal, finished && !a.explicit_journal ? ", removed" : "");
	else if (rc == MESH_EXEC_INTERRUPTED || rc == MESH_EXEC_HANGUP)
		fprintf(stderr, "mesh run: interrupted; rerun the same command to resume (journal %s)\n", a.journal);
out:
	if (spec)
		mesh_job_close(spec);
	if (job)
		mesh_job_close(job);
	if (finished || discard) {
		/* Resume is for work that did not finish: a complete run leaves
		 * no default journal, so the same command runs afresh next time.
		 * An empty lock dir goes too (fails harmlessly while another node
		 * still has a file there). */
		if (!a.explicit_journal)
			unlink(a.journal);
		if (lockdir[0])
			rmdir(lockdir);
	}
	mesh_exec_input_release(&in);
	mesh__run_args_release(&a);
	return ex;
}
