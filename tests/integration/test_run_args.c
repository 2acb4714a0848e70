/* `mesh run` with GNU parallel's command line: reruns, argument sources,
 * replacement strings, options, exit codes -- the real binary. */
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MESH t_bin("mesh")

/* Removes the lock dirs that failed runs name in their hint (file err). */
static void drop_lockdirs(const char *err)
{
	t_sh(NULL, 0, 0, "sed -n 's/.*mesh job status [^ ]* \\(\\/tmp\\/mesh-run-[0-9a-f]*\\) .*/\\1/p' %s | xargs -r rm -rf",
	     err);
}

static int count_files(const char *glob)
{
	char out[64];
	t_sh(out, sizeof out, 0, "ls -d %s 2>/dev/null | wc -l", glob);
	return atoi(out);
}

/* A run that completes removes its default journal: the same command runs
 * afresh.  A failed run keeps it; the rerun says it resumes and runs only
 * the failed chunks.  A --journal is kept. */
TEST(run_args_rerun_after_complete_failed_and_explicit)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run echo ::: a b 2>err", MESH), 0);
	EXPECT_EQ(count_files(".mesh-run-*.log"), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run echo ::: a b 2>err | sort", MESH), 0);
	EXPECT_STREQ(out, "a\nb\n");

	/* b fails the first time only */
	const char *cmd = "sh -c 'echo {} >> side; [ {} != b ] || [ -e ok ]' ::: a b c";
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run %s 2>err", MESH, cmd), 1);
	EXPECT_EQ(count_files(".mesh-run-*.log"), 1);
	drop_lockdirs("err");
	t_write_file("ok", "");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run %s 2>err", MESH, cmd), 0);
	char *err = t_read_file("err", NULL);
	EXPECT_CONTAINS(err, "resuming: 2/3 chunks already done, 1 failed chunks run again");
	free(err);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "sort side | tr '\\n' ' '"), 0);
	EXPECT_STREQ(out, "a b b c ");
	EXPECT_EQ(count_files(".mesh-run-*.log"), 0);

	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --journal mine.log echo ::: a 2>/dev/null", MESH), 0);
	EXPECT_EQ(count_files("mine.log"), 1);
}

/* The summary line only on a terminal or when asked. */
TEST(run_args_summary_only_when_asked)
{
	char out[4096];
	/* stderr too, less the notice an ASan build prints about the spawner's
	 * stack (make check) */
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "%s run echo ::: a 2>e.txt; rc=$?; grep -v -e '^==[0-9]*==WARNING: ASan is ignoring' "
		       "-e '^False positive error reports' -e '^For details see https://github.com/google/sanitizers' "
		       "e.txt; exit $rc",
		       MESH),
		  0);
	EXPECT_STREQ(out, "a\n");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -v echo ::: a 2>&1 >/dev/null", MESH), 0);
	EXPECT_CONTAINS(out, "mesh run: complete: 1/1 done");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --eta echo ::: a 2>&1 >/dev/null", MESH), 0);
	EXPECT_CONTAINS(out, "complete: 1/1 done");
}

/* The command starts at the first argument that is not an option. */
TEST(run_args_command_after_options_without_dashdash)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j1 -k echo {} ::: a b 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "a\nb\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j1 -- echo -n {}: ::: a 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "a:");
	/* options of the command are the command's */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --jobs=1 echo -k ::: a 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "-k a\n");
}

/* After an input separator every word is an input, but one that is an
 * option of mesh run (--timeout, --jobs=2) is refused, naming it: it was
 * taken as an input silently (`::: a --timeout 10x` made three chunks).
 * "--" before the command takes such words as inputs, as GNU parallel
 * does; other words that start with '-' are inputs anyway. */
TEST(run_args_own_option_after_a_separator_is_refused)
{
	char out[4096];
	static const struct {
		const char *args, *word, *sep, *where;
	} bad[] = {
		{"echo ::: a --timeout 10x", "--timeout", ":::", "the command"},
		{"echo ::: a ::: --jobs=2", "--jobs=2", ":::", "the command"},
		{"echo ::: a :::+ b --tag", "--tag", ":::+", "the command"},
		{"echo :::: f1 --null", "--null", "::::", "the command"},
		{"::: 'echo a' --keep-order", "--keep-order", ":::", "':::'"},
		{"--arg-sep ,, echo ,, a --jobs 2", "--jobs", ",,", "the command"},
	};
	t_write_file("f1", "x\n");
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char want[512];
		EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run %s", MESH, bad[i].args), 104);
		snprintf(want, sizeof want,
			 "mesh: run: '%s' after '%s' would be an input, not an option of mesh; put options before %s "
			 "(or '--' before %s if it is an input)",
			 bad[i].word, bad[i].sep, bad[i].where, bad[i].where);
		EXPECT_CONTAINS(out, want);
	}
	EXPECT_EQ(count_files(".mesh-run-*.log"), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j1 -k -- echo ::: a --timeout 10x 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "a\n--timeout\n10x\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j1 -k echo ::: -- -k --no-such-option -1 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "--\n-k\n--no-such-option\n-1\n");
}

TEST(run_args_sources)
{
	char out[4096];
	t_write_file("f1", "x\ny\n");
	t_write_file("f2", "1\n2\n");
	static const struct {
		const char *cmd, *want;
	} rows[] = {
		{"echo ::: a b ::: 1 2", "a 1\na 2\nb 1\nb 2\n"},
		{"echo ::: a b c :::+ 1 2", "a 1\nb 2\n"},
		{"echo :::: f1 :::: f2", "x 1\nx 2\ny 1\ny 2\n"},
		{"-a f1 echo", "x\ny\n"},
		{"--input f1 echo", "x\ny\n"},
		{"echo < f1", "x\ny\n"},
		{"-- echo {} < f2", "1\n2\n"},
		{"--input - echo < f2", "1\n2\n"},
		{"-0 echo < nul", "a b\nc\n"},
		{"-d , echo < commas", "p\nq r\n"},
		{"--colsep , echo {2}-{1} < csv", "b-a\nd-c\n"},
		{"--colsep=, echo < csv", "a b\nc d\n"},
		{"echo < /dev/null", ""},
	};
	t_write_file("nul", "a b\0c" "\0");
	t_sh(out, sizeof out, 0, "printf 'a b\\0c\\0' > nul; printf 'p,q r' > commas; printf 'a,b\\nc,d\\n' > csv");
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		int rc = t_sh(out, sizeof out, 0, "%s run %s 2>err | sort", MESH, rows[i].cmd);
		EXPECT_EQ(rc, 0);
		EXPECT_STREQ(out, rows[i].want);
	}
}

TEST(run_args_replacement_strings)
{
	char out[4096];
	static const struct {
		const char *cmd, *want;
	} rows[] = {
		{"echo {.} {/} {//} {/.} ::: d/a.tar.gz", "d/a.tar a.tar.gz d a.tar\n"},
		{"echo {#} {} ::: a b", "1 a\n2 b\n"},
		{"-j1 echo {%} ::: a", "1\n"},
		{"echo {2}/{1} {1.} {2/} ::: a.x ::: p/q", "p/q/a.x a q\n"},
		{"echo {x} {} { } ::: v", "{x} v { }\n"},	  /* unknown: left as it is, nothing appended */
		{"echo {3} {1} ::: a ::: b", "a\n"},		  /* past the arguments: gone */
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run %s 2>err | sort", MESH, rows[i].cmd), 0);
		EXPECT_STREQ(out, rows[i].want);
	}
	/* --chunks: the value is the chunk id, {#} the sequence number */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --chunks 2 echo {} {#} 2>err | sort", MESH), 0);
	EXPECT_STREQ(out, "0 1\n1 2\n");
}

/* A command line as the input line, or one word with shell syntax. */
TEST(run_args_command_from_input_and_shell_lines)
{
	char out[4096];
	t_write_file("cmds.txt", "echo one\necho two | tr o 0\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --input cmds.txt 2>err | sort", MESH), 0);
	EXPECT_STREQ(out, "one\ntw0\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -- {} < cmds.txt 2>err | sort", MESH), 0);
	EXPECT_STREQ(out, "one\ntw0\n");
	/* values are quoted for the shell: no injection through the input */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run 'echo {} | wc -w' ::: 'a b; echo x' 2>err", MESH), 0);
	EXPECT_STREQ(out, "4\n");
}

/* Standard input names the journal by its content. */
TEST(run_args_stdin_names_the_journal)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "printf 'a\\nb\\n' | %s run false 2>err1; echo $?", MESH), 0);
	EXPECT_STREQ(out, "2\n");
	EXPECT_EQ(count_files(".mesh-run-*.log"), 1);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "printf 'c\\n' | %s run false 2>err2; echo $?", MESH), 0);
	EXPECT_STREQ(out, "1\n");
	EXPECT_EQ(count_files(".mesh-run-*.log"), 2);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "printf 'a\\nb\\n' | %s run false 2>err3", MESH), 2);
	char *err = t_read_file("err3", NULL);
	EXPECT_CONTAINS(err, "resuming");
	free(err);
	drop_lockdirs("err1 err2 err3");
}

TEST(run_args_dry_run_runs_and_journals_nothing)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --dry-run touch {} ::: a 'b c' 2>&1 | sort", MESH), 0);
	EXPECT_STREQ(out, "touch 'b c'\ntouch a\n");
	EXPECT_EQ(count_files("a"), 0);
	EXPECT_EQ(count_files(".mesh-run-*"), 0);
}

/* GNU parallel's exit codes: the number of failed chunks, 101 for more
 * than 100; empty input is a no-op; mesh's own errors at 104+. */
TEST_TIMEOUT(run_args_exit_codes, 60)
{
	char out[8192];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run 'exit {}' ::: 0 1 2 3 2>err1", MESH), 3);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -j8 false ::: $(seq 102) 2>err2", MESH), 101);
	drop_lockdirs("err1 err2");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run true < /dev/null", MESH), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --frob true ::: a", MESH), 104);
	EXPECT_CONTAINS(out, "mesh run --help");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s help exit-codes", MESH), 0);
	EXPECT_CONTAINS(out, "RUN_INTERRUPTED");
	EXPECT_CONTAINS(out, "104..123");
}

/* The hint for failed chunks is a command that works. */
TEST(run_args_failed_hint_runs)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run false ::: a 2>err; cat err", MESH), 0);
	char *p = strstr(out, "mesh job status ");
	ASSERT_TRUE(p != NULL);
	char cmd[512];
	snprintf(cmd, sizeof cmd, "%s%.*s", MESH, (int)strcspn(p + 4, "\n"), p + 4);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s", cmd), 1); /* INCOMPLETE: the job's answer, not a usage error */
	EXPECT_CONTAINS(out, "buried 1");
	drop_lockdirs("err");
}

/* Every option parses, in GNU parallel's forms; bad values are usage
 * errors.  108 runs of mesh: 1.8 s alone, 29 s under ASan four binaries
 * at a time, past 60 s (the 30 s doubled) with a build beside it. */
TEST_TIMEOUT(run_args_options_parse, 90)
{
	static const char *ok[] = {
		"--jobs=2", "-j2", "-j 200%", "-j +1", "-j -1", "-j 0", "-k", "--keep-order", "--tag", "--line-buffer",
		"-u", "--ungroup", "--joblog jl", "--halt now,fail=1", "--halt soon,fail=10%", "--halt now,success=1",
		"--halt 2", "--halt never", "--retries 3", "--timeout 1m", "--timeout 200%", "--timeout 0.5",
		"--delay 0.01", "--load 1000", "--memfree 1K", "--nice 1", "--tmpdir .", "--bar", "--progress", "--eta",
		"-v", "--ttl 2", "--node n1", "--results res", "-kv", "--speculate", "-P2", "--max-procs 2", "--lb",
		"--group", "-r", "--no-run-if-empty", "--halt-on-error 1", "--halt now,done=1", "--halt 10%",
		"--halt -2", "--silent", "--resume", "--resume-failed", "--will-cite", "--gnu", "--plain",
		"--joblog +jl", "--jl jl", "--res res", "--no-keep-order", "-q", "--quote", "--tagstring {#}", "-N0",
		"--link", "--xapply", "--rpl '{x} s/a/b/'", "-I ,,", "-i", "-i,,", "--replace", "--replace=,,",
		"--er E", "--extensionreplace E", "--bnr B", "--basenamereplace B", "--dnr D", "--dirnamereplace D",
		"--bner X", "--basenameextensionreplace X", "--seqreplace S", "--slotreplace L", "--spreadstdin",
	};
	static const char *bad[] = {
		"-j x", "--halt sometimes,fail=1", "--halt now,fail=0", "--timeout 0", "--timeout x%", "--load x",
		"--memfree lots", "--nice 40", "--delay -1", "--colsep '('", "-d ab", "--line-buffer -u", "--tag=1",
		"--halt now,often=1", "--halt 100%", "--rpl '{x} system(1)'", "--rpl '{x} s/a*?//'", "-I ''",
		"--joblog +", "--arg-sep ''", "--colsep 'a*?'", "--pipe -N0",
	};
	char out[16384];
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		int rc = t_sh(out, sizeof out, 1, "%s run %s echo ::: a", MESH, ok[i]);
		EXPECT_EQ(rc, 0);
		if (rc != 0)
			fprintf(stderr, "option %s: %s\n", ok[i], out);
	}
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int rc = t_sh(out, sizeof out, 1, "%s run %s echo ::: a", MESH, bad[i]);
		EXPECT_EQ(rc, 104);
		if (rc != 104)
			fprintf(stderr, "option %s: %s\n", bad[i], out);
	}
	/* --help lists every option, as text (no printf escapes left in it) */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --help", MESH), 0);
	EXPECT_TRUE(strstr(out, "%%") == NULL);
	EXPECT_CONTAINS(out, "soon,fail=10% ");
	static const char *names[] = {"--jobs", "--arg-file", "--input", "--chunks", "--null", "--delimiter",
				      "--colsep", "--keep-order", "--tag", "--line-buffer", "--ungroup", "--joblog",
				      "--halt", "--retries", "--timeout", "--delay", "--load", "--memfree", "--nice",
				      "--tmpdir", "--results", "--dry-run", "--bar", "--progress", "--eta", "--verbose",
				      "--journal", "--ttl", "--speculate", "--node", "--help", ":::", "::::", "--rpl",
				      "--tagstring", "--link", "--quote", "--arg-sep", "-I S", "--max-procs", "--silent",
				      "--resume"};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		EXPECT_CONTAINS(out, names[i]);
}

/* A results directory is made with its parents, as GNU parallel makes it;
 * one that cannot be is named as the problem (it was "cannot run 'echo'"
 * with 106, and a file in the way was blamed on the journal with 110). */
TEST(run_args_results_dir_problems_are_named)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --results miss/sub/res echo ::: a", MESH), 0);
	char *s = t_read_file("miss/sub/res/0/stdout", NULL);
	EXPECT_STREQ(s ? s : "", "a\n");
	free(s);
	t_write_file("afile", "");
	static const char *bad[] = {"afile", "afile/x"};
	for (size_t i = 0; i < 2; i++) {
		EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --results %s echo ::: a", MESH, bad[i]), 113);
		char want[128];
		snprintf(want, sizeof want, "mesh: run: cannot create the results directory '%s': Not a directory", bad[i]);
		EXPECT_CONTAINS(out, want);
		EXPECT_TRUE(strstr(out, "journal") == NULL);
		EXPECT_TRUE(strstr(out, "cannot run") == NULL);
	}
	EXPECT_EQ(count_files(".mesh-run-*.log"), 0); /* refused before anything ran */
	/* a joblog that cannot be opened: named too */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --joblog nodir/jl echo ::: a", MESH), 113);
	EXPECT_CONTAINS(out, "mesh: run: cannot open the joblog 'nodir/jl': No such file or directory");
	drop_lockdirs("/dev/null");
	/* the results directory taken away while the run goes: the results are
	 * named, not the journal */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j1 --results gone 'rm -rf gone; echo {}' ::: a b 2>&1 | tee err", MESH),
		  0);
	EXPECT_CONTAINS(out, "mesh: cannot write the results of chunk 1");
	EXPECT_TRUE(strstr(out, "journal '") == NULL);
	drop_lockdirs("err");
}

/* --tmpdir must be a directory mesh can write: refused before anything
 * runs (it was taken, and spilling failed later, chunk by chunk). */
TEST(run_args_tmpdir_must_exist)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --tmpdir /nonexistent/x echo ::: a", MESH), 113);
	EXPECT_CONTAINS(out, "mesh: run: cannot use --tmpdir '/nonexistent/x': No such file or directory");
	t_write_file("f", "");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --tmpdir f echo ::: a", MESH), 113);
	EXPECT_CONTAINS(out, "Not a directory");
	EXPECT_EQ(count_files(".mesh-run-*.log"), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --tmpdir . echo ::: a", MESH), 0);
	EXPECT_STREQ(out, "a\n");
}

/* An empty ::: among several is one empty argument, as GNU parallel runs
 * it (it ran nothing); all of them empty: nothing. */
TEST(run_args_empty_list_in_a_cross_product)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run -k echo x{1}y{2}z ::: a b ::: 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "xayz\nxbyz\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run printf '[%%s]' ::: :::: /dev/null ::: c 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "[][][c]");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run echo ::: ::: 2>&1", MESH), 0);
	EXPECT_STREQ(out, "");
}

/* The joblog: a new run empties it (header first), a resumed run appends,
 * +FILE appends without a header (GNU parallel's); its Command is the
 * command as a shell line (it was the words joined, quotes lost). */
TEST(run_args_joblog_modes_and_command)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --joblog jl echo {} x ::: 'a b' >/dev/null 2>&1; cut -f 9 jl", MESH), 0);
	EXPECT_STREQ(out, "Command\necho 'a b' x\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --joblog jl echo ::: c >/dev/null 2>&1; cut -f 9 jl", MESH), 0);
	EXPECT_STREQ(out, "Command\necho c\n");
	/* resumed: the failed chunk runs again, the lines are appended */
	const char *cmd = "--joblog jl sh -c '[ {} != b ] || [ -e ok ]' ::: a b";
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run %s 2>err", MESH, cmd), 1);
	drop_lockdirs("err");
	t_write_file("ok", "");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run %s 2>err", MESH, cmd), 0);
	/* the first run's two lines in the order its two slots ended them */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "cut -f 1,7 jl > c; sed -n 1p c; sed -n 2,3p c | sort; sed -n '4,$p' c"), 0);
	EXPECT_STREQ(out, "Seq\tExitval\n1\t0\n2\t1\n2\t0\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --joblog +jl2 echo ::: a >/dev/null 2>&1; %s run --joblog +jl2 echo ::: b "
					   ">/dev/null 2>&1; cut -f 1,9 jl2",
		       MESH, MESH),
		  0);
	EXPECT_STREQ(out, "1\techo a\n1\techo b\n");
}

/* --halt's exit code is GNU parallel's: the failed share in percent for
 * fail=N%, the count for fail=N, the failed chunk's status for fail=1 (it
 * was always the status of the last failure). */
TEST(run_args_halt_exit_codes)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j1 --halt soon,fail=20%% 'exit {}' ::: 0 3 0 0 4 5 0 0 0 0 2>err",
		       MESH),
		  20);
	drop_lockdirs("err");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j1 --halt soon,fail=2 'exit {}' ::: 3 0 4 5 2>err", MESH), 2);
	drop_lockdirs("err");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j1 --halt now,fail=1 'exit {}' ::: 0 7 0 2>err", MESH), 7);
	drop_lockdirs("err");
	t_sh(NULL, 0, 0, "rm -f .mesh-run-*.log"); /* not a resumed run */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j1 --halt soon,fail=50%% 'exit {}' ::: 0 3 0 0 4 5 0 0 0 0 2>err",
		       MESH),
		  30); /* never met: the failed share of those started */
	drop_lockdirs("err");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -j1 --halt now,done=50%% 'exit {}' ::: 0 4 5 6 2>err", MESH), 25);
	drop_lockdirs("err");
}

/* The summary line: -v asks for it, --silent keeps it away (also from a
 * terminal). */
TEST(run_args_silent)
{
	char out[4096];
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run -v --silent echo ::: a", MESH), 0);
	EXPECT_STREQ(out, "a\n");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s run --silent -v echo ::: a", MESH), 0);
	EXPECT_CONTAINS(out, "mesh run: complete");
}

/* What docs/run.md warns of: the quoting holds where the shell reads the
 * value once, as a word of its own; inside the user's own quotes, or read
 * a second time (eval), a value runs as shell code -- in GNU parallel too. */
TEST(run_args_own_quotes_and_eval_undo_the_quoting)
{
	char out[4096];
	/* bare: the value stays text */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run 'echo {}' ::: '$(touch bare)' 2>/dev/null", MESH), 0);
	EXPECT_STREQ(out, "$(touch bare)\n");
	EXPECT_EQ(access("bare", F_OK), -1);
	/* inside double quotes of one's own, and under eval: it runs */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run 'echo \"{}\"' ::: '$(touch quoted)' 2>/dev/null", MESH), 0);
	EXPECT_EQ(access("quoted", F_OK), 0);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run 'eval echo {}' ::: '$(touch evaled)' 2>/dev/null", MESH), 0);
	EXPECT_EQ(access("evaled", F_OK), 0);
}
