/* The command line of `mesh run`: GNU parallel's options and argument
 * sources, parsed into struct run_args.  Nothing here runs anything. */
#include "cli/run_opts.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/parse.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "exec/input.h"
#include "exec/runner.h"
#include "job/job.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
	"usage: mesh run [options] [--] [CMD [ARG...]] [::: ARGS | :::: FILES]...\n"
	"\n"
	"Runs CMD once per chunk on N local slots, as GNU parallel does; completions\n"
	"are journaled, so after Ctrl-C or kill -9 the same command again resumes and\n"
	"never re-runs a finished chunk.  A run that completes removes its journal.\n"
	"\n"
	"Chunks come from `::: a b c` (several: the cross product; `:::+`: paired),\n"
	"`:::: FILE` / -a FILE / --input FILE (one a line; `-` is standard input),\n"
	"standard input when no source is given, or --chunks N (values 0..N-1).\n"
	"In CMD: {} the value, {.} without extension, {/} basename, {//} dirname,\n"
	"{/.} basename without extension, {#} sequence number (1..), {%} slot, {1} {2}\n"
	"... the n-th argument ({1.} etc.).  No replacement string: the arguments are\n"
	"appended.  No CMD (or just {}): each input line is a shell command line; a\n"
	"one-word CMD with spaces ('echo {} | wc') runs under /bin/sh with the values\n"
	"quoted; otherwise nothing goes through a shell.  After ::: every word is an\n"
	"input, but one of the long options below (::: a --timeout 5) is refused unless\n"
	"-- came before CMD.\n"
	"\n"
	"  -j, --jobs N         slots at once: N, N% of the cores, +N, -N, 0 = 256\n"
	"                       (-P, --max-procs: the same)\n"
	"                       (default: the number of cores)\n"
	"  -a, --arg-file FILE  an argument source (as :::: FILE); repeatable\n"
	"  --input FILE         the same\n"
	"  --chunks N           chunks 0..N-1 instead of argument sources\n"
	"  -0, --null           records end at NUL bytes, not newlines\n"
	"  -d, --delimiter C    records end at C (\\n \\t \\0 \\\\ allowed)\n"
	"  -C, --colsep REGEX   split each record into {1} {2} ... (POSIX ERE)\n"
	"  --link               pair the sources (the shorter ones repeat), not their\n"
	"                       cross product\n"
	"  --arg-sep S, --arg-file-sep S   S instead of ::: and ::::\n"
	"  -N, -n, --max-args N N records a command ({1}..{N}; {} all of them; -N0:\n"
	"                       one record a command, which the command does not see)\n"
	"  -m, -X, --xargs      as many records a command as fit (4096, 128 KiB), spread\n"
	"                       over the slots (-m, -X); -X repeats a word around {}\n"
	"  --pipe               each chunk's records go to its standard input, not its\n"
	"                       arguments: blocks of --block SIZE (1M; k = 1000, K =\n"
	"                       1024) or of -N N records\n"
	"  -I S                 S instead of {} (also --extensionreplace, --er: {.};\n"
	"                       --bnr {/}; --dnr {//}; --bner {/.}; --seqreplace {#};\n"
	"                       --slotreplace {%}); -iS, --replace=S: S, else {}\n"
	"  --rpl 'TAG EXPR'     TAG is each value through EXPR: s/RE/REPL/gi, tr/a-z/A-Z/,\n"
	"                       $_ = uc, lc, seq(), ...; joined by ; and || (docs/run.md)\n"
	"  -q, --quote          never run CMD through a shell\n"
	"  -k, --keep-order     print outputs in input order (--no-keep-order: not)\n"
	"  --tag                start each output line with the arguments and a TAB\n"
	"  --tagstring STR      start it with STR (replacement strings allowed) and a TAB\n"
	"  --line-buffer, --lb  pass whole lines on as they come\n"
	"  -u, --ungroup        pass output on as it comes (--group: not, the default)\n"
	"  --joblog FILE        one line per finished attempt (GNU parallel's columns);\n"
	"                       a new run empties it; +FILE appends (so does a resumed run)\n"
	"  --halt WHEN,WHAT=N   stop at failures: now,fail=1  soon,fail=10%  now,success=1\n"
	"                       now,done=2; or 0 never, 1 soon,fail=1, 2 now,fail=1\n"
	"                       (also --halt-on-error)\n"
	"  --retries K          a chunk is tried at most K times (default 1)\n"
	"  --timeout T          kill an attempt after T (30, 1.5, 2m, 1h) or after N%\n"
	"                       of the median runtime (200%); a failure\n"
	"  --delay T            at least T between two starts\n"
	"  --load N             start nothing while the load average is >= N\n"
	"  --memfree SIZE       start nothing while less memory is free (K M G)\n"
	"  --nice N             run the commands with niceness N\n"
	"  --tmpdir DIR         where large outputs are spilled (it must exist)\n"
	"  --results DIR        write DIR/<chunk>/{stdout,stderr,status} instead\n"
	"  --dry-run            print the commands; run and journal nothing\n"
	"  --bar, --progress, --eta   the progress bar (also without a terminal)\n"
	"  -v, --verbose        the closing summary line (shown on a terminal anyway;\n"
	"                       --silent: never)\n"
	"  --resume, --resume-failed, -r, --will-cite, --gnu, --plain   accepted: every\n"
	"                       run resumes, failed chunks run again, empty input runs\n"
	"                       nothing\n"
	"  --store URL          the job in a PostgreSQL store instead (default $MESH_STORE;\n"
	"                       postgresql://host/db[#job]; docs/cluster.md)\n"
	"  --journal F.log      the journal (kept; default .mesh-run-<hash>.log here,\n"
	"                       named after CMD and the input, removed when complete)\n"
	"  --ttl T              lease time-to-live, renewed while a chunk runs (5)\n"
	"  --store-outage T     how long to wait for a store's database that stopped\n"
	"                       answering, keeping leases and output (5m); then exit 109\n"
	"  --speculate          idle slots run copies of stragglers; first wins\n"
	"  --node NAME          this node's name (default <host>.<pid>)\n"
	"  -h, --help           this help\n"
	"\n"
	"Exit: 0 all done; 1..100 the number of failed chunks, 101 more (--halt: as GNU\n"
	"parallel); 129 SIGHUP (running chunks finished, none started after it), 130\n"
	"interrupted (rerun to resume); 104 usage; others: `mesh help exit-codes`.\n"
	"Details and GNU parallel differences: docs/run.md\n";

/* The one-letter and long names; value: 1 takes one, 2 takes one only
 * glued to it (-iS, --replace=S). */
enum {
	O_JOBS, O_ARGFILE, O_INPUT, O_CHUNKS, O_NULL, O_DELIM, O_COLSEP, O_KEEP, O_NOKEEP, O_TAG, O_TAGSTRING,
	O_LINEBUF, O_UNGROUP, O_GROUP, O_JOBLOG, O_HALT, O_RETRIES, O_TIMEOUT, O_DELAY, O_LOAD, O_MEMFREE, O_NICE,
	O_TMPDIR, O_RESULTS, O_DRYRUN, O_PROGRESS, O_VERBOSE, O_SILENT, O_JOURNAL, O_TTL, O_SPECULATE, O_NODE, O_HELP,
	O_MAXARGS, O_MULTI, O_CONTEXT, O_XARGS, O_PIPE, O_BLOCK, O_QUOTE, O_RPL, O_REPLACE, O_RENAME, O_LINK,
	O_ARGSEP, O_FILESEP, O_ACCEPT, O_OUTAGE,
};
static const struct opt {
	const char *name;
	char letter;
	int value, id, which; /* which: O_RENAME's built-in string */
} opts[] = {
	{"jobs", 'j', 1, O_JOBS, 0},
	{"max-procs", 'P', 1, O_JOBS, 0},
	{"arg-file", 'a', 1, O_ARGFILE, 0},
	{"input", 0, 1, O_INPUT, 0},
	{"chunks", 0, 1, O_CHUNKS, 0},
	{"null", '0', 0, O_NULL, 0},
	{"delimiter", 'd', 1, O_DELIM, 0},
	{"colsep", 'C', 1, O_COLSEP, 0},
	{"link", 0, 0, O_LINK, 0},
	{"xapply", 0, 0, O_LINK, 0},
	{"arg-sep", 0, 1, O_ARGSEP, 0},
	{"arg-file-sep", 0, 1, O_FILESEP, 0},
	{"keep-order", 'k', 0, O_KEEP, 0},
	{"no-keep-order", 0, 0, O_NOKEEP, 0},
	{"tag", 0, 0, O_TAG, 0},
	{"tagstring", 0, 1, O_TAGSTRING, 0},
	{"line-buffer", 0, 0, O_LINEBUF, 0},
	{"lb", 0, 0, O_LINEBUF, 0},
	{"ungroup", 'u', 0, O_UNGROUP, 0},
	{"group", 0, 0, O_GROUP, 0},
	{"joblog", 0, 1, O_JOBLOG, 0},
	{"jl", 0, 1, O_JOBLOG, 0},
	{"halt", 0, 1, O_HALT, 0},
	{"halt-on-error", 0, 1, O_HALT, 0},
	{"retries", 0, 1, O_RETRIES, 0},
	{"timeout", 0, 1, O_TIMEOUT, 0},
	{"delay", 0, 1, O_DELAY, 0},
	{"load", 0, 1, O_LOAD, 0},
	{"memfree", 0, 1, O_MEMFREE, 0},
	{"nice", 0, 1, O_NICE, 0},
	{"tmpdir", 0, 1, O_TMPDIR, 0},
	{"results", 0, 1, O_RESULTS, 0},
	{"res", 0, 1, O_RESULTS, 0},
	{"dry-run", 0, 0, O_DRYRUN, 0},
	{"bar", 0, 0, O_PROGRESS, 0},
	{"progress", 0, 0, O_PROGRESS, 0},
	{"eta", 0, 0, O_PROGRESS, 0},
	{"verbose", 'v', 0, O_VERBOSE, 0},
	{"silent", 0, 0, O_SILENT, 0},
	{"journal", 0, 1, O_JOURNAL, 0},
	{"store", 0, 1, O_JOURNAL, 0},
	{"ttl", 0, 1, O_TTL, 0},
	{"speculate", 0, 0, O_SPECULATE, 0},
	{"node", 0, 1, O_NODE, 0},
	{"help", 'h', 0, O_HELP, 0},
	{"max-args", 'n', 1, O_MAXARGS, 0},
	{"max-replace-args", 'N', 1, O_MAXARGS, 0},
	{"", 'm', 0, O_MULTI, 0},
	{"", 'X', 0, O_CONTEXT, 0},
	{"xargs", 0, 0, O_XARGS, 0},
	{"pipe", 0, 0, O_PIPE, 0},
	{"spreadstdin", 0, 0, O_PIPE, 0},
	{"block", 0, 1, O_BLOCK, 0},
	{"block-size", 0, 1, O_BLOCK, 0},
	{"store-outage", 0, 1, O_OUTAGE, 0},
	{"quote", 'q', 0, O_QUOTE, 0},
	{"rpl", 0, 1, O_RPL, 0},
	{"", 'I', 1, O_RENAME, MESH_EXEC_RPL_VALUE},
	{"replace", 'i', 2, O_REPLACE, MESH_EXEC_RPL_VALUE},
	{"extensionreplace", 0, 1, O_RENAME, MESH_EXEC_RPL_NOEXT},
	{"er", 0, 1, O_RENAME, MESH_EXEC_RPL_NOEXT},
	{"basenamereplace", 0, 1, O_RENAME, MESH_EXEC_RPL_BASE},
	{"bnr", 0, 1, O_RENAME, MESH_EXEC_RPL_BASE},
	{"dirnamereplace", 0, 1, O_RENAME, MESH_EXEC_RPL_DIR},
	{"dnr", 0, 1, O_RENAME, MESH_EXEC_RPL_DIR},
	{"basenameextensionreplace", 0, 1, O_RENAME, MESH_EXEC_RPL_BASENOEXT},
	{"bner", 0, 1, O_RENAME, MESH_EXEC_RPL_BASENOEXT},
	{"seqreplace", 0, 1, O_RENAME, MESH_EXEC_RPL_SEQ},
	{"slotreplace", 0, 1, O_RENAME, MESH_EXEC_RPL_SLOT},
	/* accepted, nothing to do: every run resumes through its journal and
	 * re-runs failed chunks; empty input runs nothing anyway */
	{"resume", 0, 0, O_ACCEPT, 0},
	{"resume-failed", 0, 0, O_ACCEPT, 0},
	{"no-run-if-empty", 'r', 0, O_ACCEPT, 0},
	{"will-cite", 0, 0, O_ACCEPT, 0},
	{"gnu", 0, 0, O_ACCEPT, 0},
	{"plain", 0, 0, O_ACCEPT, 0},
};

int mesh__run_usage(const char *fmt, ...)
{
	va_list ap;
	fputs("mesh: run: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\n(see `mesh run --help`)\n", stderr);
	return mesh_exit_run(MESH_EXIT_USAGE);
}

int mesh__run_fail(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	mesh_cli_vsay_fail("run: ", err, NULL, fmt, ap);
	va_end(ap);
	return mesh_exit_run(mesh_exit_for(err));
}

int mesh__run_fail_store(int err, const char *words, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	mesh_cli_vsay_fail("run: ", err, words, fmt, ap);
	va_end(ap);
	return mesh_exit_run(mesh_exit_for(err));
}

/* --block: GNU parallel's sizes, K M G (1024s) or k m g (1000s). */
static int block_size(const char *s, uint64_t *out)
{
	size_t n = strlen(s);
	const char *dec = "kmg";
	const char *at = n ? strchr(dec, s[n - 1]) : NULL;
	uint64_t v = 0, mul = 1;
	int rc;
	if (at && s[n - 1]) {
		char num[32];
		if (n - 1 >= sizeof num)
			return mesh__run_usage("--block '%s': expected a size, e.g. 1M, 512k or 65536", s);
		memcpy(num, s, n - 1);
		num[n - 1] = 0;
		for (const char *p = dec; p <= at; p++)
			mul *= 1000;
		rc = mesh_parse_u64(num, (1ull << 40) / mul, &v);
		v *= mul;
	} else {
		rc = mesh_parse_size(s, 1ull << 40, &v);
	}
	if (rc < 0 || v == 0)
		return mesh__run_usage("--block '%s': expected a size, e.g. 1M, 512k or 65536", s);
	*out = v;
	return 0;
}

static int num(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	int rc = mesh_parse_u64(s, max, out);
	if (rc == 0 && *out < min)
		rc = MESH_E_RANGE;
	if (rc < 0)
		return mesh__run_usage("%s '%s': expected a whole number from %" PRIu64 " to %" PRIu64, opt, s, min,
				       max);
	return 0;
}

/* A duration (mesh_parse_duration's grammar), more than 0, at most a year. */
static int duration(const char *opt, const char *s, uint64_t *out)
{
	if (mesh_parse_duration(s, 365ull * 86400 * MESH_NS_PER_S, out) < 0 || *out == 0)
		return mesh__run_usage("%s '%s': expected a duration, e.g. 30, 0.5, 250ms, 2m or 1h", opt, s);
	return 0;
}

/* A whole number followed by '%'; 0 when s has no '%'. */
static int percent(const char *s, uint64_t max, uint64_t *out)
{
	size_t n = strlen(s);
	if (n < 2 || s[n - 1] != '%')
		return 0;
	return mesh_parse_u64n(s, n - 1, max, out) == 0 ? 1 : -1;
}

/* -j: N, N% of the cores, +N, -N (cores plus or minus N), 0 (as many as
 * possible, capped at 256). */
static int jobs(const char *s, uint64_t *out)
{
	long c = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t cores = c > 0 ? (uint64_t)c : 1, v;
	int p = percent(s, 100000, &v);
	if (p > 0) {
		v = cores * v / 100;
	} else if (p == 0 && (s[0] == '+' || s[0] == '-') && mesh_parse_u64(s + 1, 4096, &v) == 0) {
		v = s[0] == '+' ? cores + v : cores > v ? cores - v : 1;
	} else if (p < 0 || mesh_parse_u64(s, 4096, &v) < 0) {
		return mesh__run_usage("-j '%s': expected N (1..4096), N%%, +N, -N or 0", s);
	} else if (v == 0) {
		v = 256;
	}
	*out = v < 1 ? 1 : v > 4096 ? 4096 : v;
	return 0;
}

/* --halt: GNU parallel's WHEN,WHAT=N[%] or its old numbers (0 never,
 * 1 soon,fail=1, 2 now,fail=1, -1 soon,success=1, -2 now,success=1, N%
 * soon,fail=N%). */
static int halt(const char *s, struct run_args *a)
{
	static const char *old[] = {"0", "1", "2", "-1", "-2"};
	static const char *whats[] = {"fail", "success", "done"};
	char when[8], what[8];
	const char *eq;
	int n = 0, p;
	uint64_t v;
	a->halt_count = 0;
	a->halt_percent = 0;
	for (size_t i = 0; i < sizeof old / sizeof old[0]; i++) {
		if (strcmp(s, old[i]))
			continue;
		a->halt_mode = i == 0 ? MESH_EXEC_HALT_NEVER : (i == 1 || i == 3) ? MESH_EXEC_HALT_SOON : MESH_EXEC_HALT_NOW;
		a->halt_what = i >= 3 ? MESH_EXEC_HALT_SUCCESS : MESH_EXEC_HALT_FAIL;
		a->halt_count = 1;
		return 0;
	}
	if (!strcmp(s, "never")) {
		a->halt_mode = MESH_EXEC_HALT_NEVER;
		return 0;
	}
	if ((p = percent(s, 100, &v)) > 0 && v > 0 && v < 100) {
		a->halt_mode = MESH_EXEC_HALT_SOON;
		a->halt_what = MESH_EXEC_HALT_FAIL;
		a->halt_percent = (unsigned)v;
		return 0;
	}
	if (sscanf(s, "%7[a-z],%7[a-z]=%n", when, what, &n) != 2 || !(eq = strchr(s, '=')) || n == 0)
		goto bad;
	if (!strcmp(when, "now"))
		a->halt_mode = MESH_EXEC_HALT_NOW;
	else if (!strcmp(when, "soon"))
		a->halt_mode = MESH_EXEC_HALT_SOON;
	else
		goto bad;
	a->halt_what = -1;
	for (size_t i = 0; i < sizeof whats / sizeof whats[0]; i++)
		if (!strcmp(what, whats[i]))
			a->halt_what = (int)i;
	if (a->halt_what < 0)
		goto bad;
	p = percent(eq + 1, 100, &v);
	if (p > 0 && v > 0) {
		a->halt_percent = (unsigned)v;
		return 0;
	}
	if (p == 0 && mesh_parse_u64(eq + 1, UINT64_MAX, &v) == 0 && v > 0) {
		a->halt_count = v;
		return 0;
	}
bad:
	return mesh__run_usage("--halt '%s': expected now|soon,fail|success|done=N or N%%, e.g. now,fail=1; or 0, 1, "
			       "2, -1, -2, N%%",
			       s);
}

/* -d: one byte, C escapes allowed. */
static int delimiter(const char *s, int *out)
{
	static const char esc[] = "n\nt\t0\0\\\\r\ra\a";
	if (s[0] && !s[1]) {
		*out = (unsigned char)s[0];
		return 0;
	}
	if (s[0] == '\\' && s[1] && !s[2])
		for (size_t i = 0; i + 1 < sizeof esc; i += 2)
			if (esc[i] == s[1]) {
				*out = (unsigned char)esc[i + 1];
				return 0;
			}
	return mesh__run_usage("-d '%s': expected one character (or \\n \\t \\0 \\\\)", s);
}

static int colsep(const char *s, struct run_args *a)
{
	/* GNU parallel's regexes are Perl's: \t, \s, \d ... as far as POSIX goes */
	const char *why = NULL;
	if (a->have_colsep)
		regfree(&a->colsep);
	a->have_colsep = 0;
	if (!*s || mesh_exec_regcomp_perl(&a->colsep, s, strlen(s), 0, &why) != 0)
		return mesh__run_usage("--colsep '%s': %s", s, why ? why : "not a regular expression");
	a->have_colsep = 1;
	a->colsep_text = s;
	return 0;
}

static int add_src(struct run_args *a, const char *path, char **words, size_t n, int linked)
{
	struct run_src *s = realloc(a->src, (a->nsrc + 1) * sizeof *s);
	if (!s)
		return mesh__run_fail(-ENOMEM, "arguments");
	a->src = s;
	s[a->nsrc++] = (struct run_src){path, words, n, linked};
	return 0;
}

static int apply(struct run_args *a, const struct opt *o, const char *v)
{
	char name[32];
	if (o->letter)
		snprintf(name, sizeof name, "-%c", o->letter);
	else
		snprintf(name, sizeof name, "--%s", o->name);
	switch (o->id) {
	case O_JOBS: return jobs(v, &a->slots);
	case O_ARGFILE:
	case O_INPUT: return add_src(a, v, NULL, 0, 0);
	case O_CHUNKS: a->have_chunks = 1; return num(name, v, 0, MESH_JOB_MAX_CHUNKS, &a->chunks);
	case O_NULL: a->delim = 0; return 0;
	case O_DELIM: return delimiter(v, &a->delim);
	case O_COLSEP: return colsep(v, a);
	case O_LINK: a->link = 1; return 0;
	case O_ARGSEP:
	case O_FILESEP:
		if (!*v || !strcmp(v, "--"))
			return mesh__run_usage("%s '%s': expected a separator such as ,,", name, v);
		*(o->id == O_ARGSEP ? &a->arg_sep : &a->file_sep) = v;
		return 0;
	case O_KEEP: a->keep_order = 1; return 0;
	case O_NOKEEP: a->keep_order = 0; return 0;
	case O_TAG: a->tag = 1; return 0;
	case O_TAGSTRING: a->tag = 1, a->tagstring = v; return 0;
	case O_LINEBUF: a->line_buffer = 1; return 0;
	case O_UNGROUP: a->ungroup = 1; return 0;
	case O_GROUP: a->ungroup = a->line_buffer = 0; return 0;
	case O_JOBLOG:
		a->joblog_plus = v[0] == '+';
		a->joblog = v + a->joblog_plus;
		return *a->joblog ? 0 : mesh__run_usage("%s needs a file name", name);
	case O_HALT: return halt(v, a);
	case O_RETRIES: return num(name, v, 1, 1000000, &a->retries);
	case O_TIMEOUT: {
		uint64_t p;
		int r = percent(v, 100000, &p);
		if (r > 0 && p > 0) {
			a->timeout_pct = (unsigned)p;
			return 0;
		}
		return duration(name, v, &a->timeout_ns);
	}
	case O_DELAY: return duration(name, v, &a->delay_ns);
	case O_LOAD: {
		char *end;
		a->load_max = strtod(v, &end);
		if (end == v || *end || !(a->load_max > 0))
			return mesh__run_usage("--load '%s': expected a load average above 0, e.g. 4 or 2.5", v);
		return 0;
	}
	case O_MEMFREE:
		if (mesh_parse_size(v, UINT64_MAX, &a->memfree) < 0)
			return mesh__run_usage("--memfree '%s': expected a size, e.g. 512M or 2G", v);
		return 0;
	case O_NICE: {
		int64_t n;
		if (mesh_parse_i64(v, -20, 19, &n) < 0)
			return mesh__run_usage("--nice '%s': expected a niceness from -20 to 19", v);
		a->nice = (int)n;
		return 0;
	}
	case O_TMPDIR: a->tmpdir = v; return 0;
	case O_RESULTS:
		a->results = v;
		return *v ? 0 : mesh__run_usage("--results needs a directory");
	case O_DRYRUN: a->dry_run = 1; return 0;
	case O_PROGRESS: a->progress = 1; return 0;
	case O_VERBOSE: a->verbose = 1, a->silent = 0; return 0;
	case O_SILENT: a->silent = 1, a->verbose = 0; return 0;
	case O_JOURNAL: a->journal = v, a->explicit_journal = 1; return 0;
	case O_TTL: return duration(name, v, &a->ttl_ns);
	case O_OUTAGE: return duration(name, v, &a->store_outage_ns);
	case O_SPECULATE: a->speculate = 1; return 0;
	case O_NODE: a->node = v; return 0;
	case O_HELP: a->help = 1; return 0;
	case O_MAXARGS: a->multi = 'N'; return num(name, v, 0, MESH_EXEC_INPUT_MAX_ARGS, &a->max_args);
	case O_MULTI: a->multi = a->multi == 'N' ? 'N' : 'm'; return 0;
	case O_CONTEXT: a->multi = a->multi == 'N' ? 'N' : 'X'; return 0;
	case O_XARGS: a->multi = a->multi == 'N' ? 'N' : 'x'; return 0;
	case O_PIPE: a->pipe = 1; return 0;
	case O_BLOCK: return block_size(v, &a->block);
	case O_QUOTE: a->quote = 1; return 0;
	case O_RPL: {
		const char **d = realloc(a->rpl_defs, (a->nrpl_defs + 1) * sizeof *d);
		if (!d)
			return mesh__run_fail(-ENOMEM, "arguments");
		a->rpl_defs = d;
		d[a->nrpl_defs++] = v;
		return 0;
	}
	case O_REPLACE: a->rename[o->which] = v ? v : "{}"; return 0;
	case O_RENAME: a->rename[o->which] = v; return 0;
	case O_ACCEPT: return 0;
	}
	return 0;
}

/* The long option name[0..n) of the table, or NULL. */
static const struct opt *long_opt(const char *name, size_t n)
{
	for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++)
		if (opts[k].name[0] && strlen(opts[k].name) == n && !strncmp(opts[k].name, name, n))
			return &opts[k];
	return NULL;
}

static int is_long_opt(const char *name, size_t n)
{
	return long_opt(name, n) != NULL;
}

/* One option at argv[*i] (which starts with '-'); moves *i past its value. */
static int option(int argc, char **argv, int *i, struct run_args *a)
{
	const char *arg = argv[*i];
	if (arg[1] == '-') {
		const char *eq = strchr(arg, '=');
		size_t n = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
		const struct opt *o = long_opt(arg + 2, n);
		if (o) {
			if (!o->value && eq)
				return mesh__run_usage("option '--%s' takes no value", o->name);
			if (o->value == 1 && !eq && *i + 1 >= argc)
				return mesh__run_usage("option '--%s' needs a value", o->name);
			return apply(a, o, eq ? eq + 1 : o->value == 1 ? argv[++*i] : NULL);
		}
		char near[128];
		return mesh__run_usage("unknown option '%.*s'%s", (int)(eq ? (size_t)(eq - arg) : strlen(arg)), arg,
				       mesh_cli_did_you_mean("run", arg, near, sizeof near));
	}
	for (const char *p = arg + 1; *p; p++) {
		const struct opt *o = NULL;
		for (size_t k = 0; k < sizeof opts / sizeof opts[0] && !o; k++)
			if (opts[k].letter == *p)
				o = &opts[k];
		if (!o)
			return mesh__run_usage("unknown option '-%c'", *p);
		if (!o->value) {
			int rc = apply(a, o, NULL);
			if (rc)
				return rc;
			continue;
		}
		if (p[1])
			return apply(a, o, p + 1);
		if (o->value == 2)
			return apply(a, o, NULL);
		if (*i + 1 >= argc)
			return mesh__run_usage("option '-%c' needs a value", *p);
		return apply(a, o, argv[++*i]);
	}
	return 0;
}

/* ::: :::+ :::: ::::+, or what --arg-sep and --arg-file-sep made of them:
 * 0 none, else 1 (args) or 2 (files), + 4 when linked. */
static int marker(const struct run_args *a, const char *s)
{
	size_t na = strlen(a->arg_sep), nf = strlen(a->file_sep);
	if (!strncmp(s, a->file_sep, nf) && (!s[nf] || !strcmp(s + nf, "+")))
		return 2 | (s[nf] ? 4 : 0);
	if (!strncmp(s, a->arg_sep, na) && (!s[na] || !strcmp(s + na, "+")))
		return 1 | (s[na] ? 4 : 0);
	return 0;
}

/* The ::: and :::: sources from argv[i] on.  A word among them that is
 * one of mesh run's long options is refused unless "--" ended the options
 * (mesh_cli_option_input: the rule mesh submit's ::: follows too). */
static int sources(int argc, char **argv, int i, struct run_args *a)
{
	char msg[512], where[64];
	if (a->cmd[0] || i >= argc)
		snprintf(where, sizeof where, "the command");
	else
		snprintf(where, sizeof where, "'%.60s'", argv[i]);
	while (i < argc) {
		const char *m = argv[i++];
		int kind = marker(a, m), files = kind & 2, linked = (kind & 4) != 0;
		int j = i;
		while (j < argc && !marker(a, argv[j]))
			j++;
		if (!a->dashdash &&
		    mesh_cli_option_input(argv + i, (size_t)(j - i), m, where, is_long_opt, msg, sizeof msg))
			return mesh__run_usage("%s", msg);
		int rc = 0;
		if (!files)
			rc = add_src(a, NULL, argv + i, (size_t)(j - i), linked);
		for (int k = i; files && k < j && !rc; k++)
			rc = add_src(a, argv[k], NULL, 0, linked && k == i);
		if (rc)
			return rc;
		if (files && j == i)
			return mesh__run_usage("'%s' needs at least one file", m);
		i = j;
	}
	return 0;
}

/* The replacement strings: renamed first, then --rpl's (GNU parallel's
 * order, whatever the command line's). */
static int replacement_strings(struct run_args *a)
{
	static const char *opt[MESH_EXEC_RPL_BUILTIN] = {"-I", "--extensionreplace", "--basenamereplace",
							 "--dirnamereplace", "--basenameextensionreplace",
							 "--seqreplace", "--slotreplace"};
	const char *why;
	int rc = mesh_exec_rpls_init(&a->rpls);
	for (int k = 0; rc == 0 && k < MESH_EXEC_RPL_BUILTIN; k++)
		if (a->rename[k] && (rc = mesh_exec_rpls_rename(&a->rpls, k, a->rename[k])) == MESH_E_PARSE)
			return mesh__run_usage("%s: the replacement string is empty", opt[k]);
	for (size_t k = 0; rc == 0 && k < a->nrpl_defs; k++)
		if ((rc = mesh_exec_rpls_define(&a->rpls, a->rpl_defs[k], &why)) == MESH_E_PARSE)
			return mesh__run_usage("--rpl '%s': %s", a->rpl_defs[k], why);
	return rc < 0 ? mesh__run_fail(rc, "replacement strings") : 0;
}

/* What runs: the command, or the shell for a command line in one word
 * (one with shell syntax, or one that starts with a replacement string:
 * the input is then the command), or for the input line as the command.
 * -q: never the shell for a command given. */
static void pick_argv(struct run_args *a)
{
	a->argv = a->cmd;
	const char *c = a->cmd[0];
	if (c && (a->cmd[1] || a->quote))
		return;
	if (c && !mesh_exec_rpls_starts(&a->rpls, c) && !strpbrk(c, " \t\n|&;<>()$`\\\"'*?~"))
		return;
	a->shargv[0] = "/bin/sh";
	a->shargv[1] = "-c";
	a->shargv[2] = c ? (char *)c : (char *)mesh_exec_rpls_name(&a->rpls, MESH_EXEC_RPL_VALUE);
	a->argv = a->shargv;
}

int mesh__run_parse(int argc, char **argv, struct run_args *a)
{
	int i, rc;
	memset(a, 0, sizeof *a);
	a->delim = '\n';
	a->retries = 1;
	a->arg_sep = ":::";
	a->file_sep = "::::";
	if ((rc = jobs("100%", &a->slots)) != 0)
		return rc;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			a->dashdash = 1;
			i++;
			break;
		}
		if (argv[i][0] != '-' || !argv[i][1])
			break;
		if ((rc = option(argc, argv, &i, a)) != 0)
			return rc;
		if (a->help) {
			fputs(usage, stdout);
			return 0;
		}
	}
	if ((rc = replacement_strings(a)) != 0)
		return rc;
	int c0 = i;
	while (i < argc && !marker(a, argv[i]))
		i++;
	if (!(a->cmd = calloc((size_t)(i - c0) + 1, sizeof *a->cmd)))
		return mesh__run_fail(-ENOMEM, "arguments");
	memcpy(a->cmd, argv + c0, (size_t)(i - c0) * sizeof *a->cmd);
	if ((rc = sources(argc, argv, i, a)) != 0)
		return rc;
	if (a->cmd[0] && !a->cmd[0][0])
		return mesh__run_usage("the command is an empty string");
	if (a->have_chunks && a->nsrc)
		return mesh__run_usage("--chunks N gives the chunks: no argument source (:::, ::::, -a, --input) with it");
	if (!a->have_chunks && !a->nsrc && (rc = add_src(a, "-", NULL, 0, 0)) != 0)
		return rc;
	if (!a->cmd[0] && a->have_chunks)
		return mesh__run_usage("no command given (mesh run [options] CMD [ARG...] ::: ARGS)");
	if (a->line_buffer && a->ungroup)
		return mesh__run_usage("--line-buffer and --ungroup exclude each other");
	if (a->pipe && a->multi && a->multi != 'N')
		return mesh__run_usage("--pipe takes -N N (records a block) or --block SIZE, not -m, -X or --xargs");
	if (a->pipe && a->multi == 'N' && a->max_args == 0)
		return mesh__run_usage("--pipe takes -N N with N at least 1");
	if (a->block && !a->pipe)
		return mesh__run_usage("--block SIZE splits --pipe's input: give --pipe too");
	if (a->pipe && a->have_chunks)
		return mesh__run_usage("--pipe splits input records into blocks: not with --chunks N");
	if (a->pipe && a->nsrc > 1)
		return mesh__run_usage("--pipe splits one input (standard input, -a FILE or ::::); %zu given", a->nsrc);
	if (a->multi && a->have_chunks)
		return mesh__run_usage("-N, -n, -m, -X and --xargs group input records: not with --chunks N");
	if (a->multi && a->nsrc > 1 && !(a->multi == 'N' && a->max_args <= 1))
		return mesh__run_usage("-N, -n, -m, -X and --xargs group the records of one argument source; "
				       "%zu given", a->nsrc);
	for (size_t s = 1; a->link && s < a->nsrc; s++)
		a->src[s].linked = 2;
	pick_argv(a);
	return 0;
}

void mesh__run_args_release(struct run_args *a)
{
	if (a->have_colsep)
		regfree(&a->colsep);
	mesh_exec_rpls_release(&a->rpls);
	free(a->rpl_defs);
	free(a->cmd);
	free(a->src);
	memset(a, 0, sizeof *a);
}
