/* The words --help prints, used as data (issue 35, item 11): "did you
 * mean" for a mistyped option of mesh and meshd, the shell completions
 * (`mesh completion bash|zsh|fish`) driven in the real shells, and the
 * manual pages (mk/man.sh) rendered by groff. */
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char out[65536];

/* A mistyped option: the exit code and the suggestion, for commands whose
 * options are parsed in different places (meshd's client commands, jobs,
 * submit, run's table, serve's getopt, job's subcommands, autoscale, meshd). */
TEST(cli_mistyped_option_says_did_you_mean)
{
	static const struct {
		const char *args, *says;
		int code;
	} cases[] = {
		{"submit echo --max-worker 3", "unknown option '--max-worker'; did you mean '--max-workers'?", 64},
		{"ps --jsn", "unknown option '--jsn'; did you mean '--json'?", 64},
		{"call --sockt /x echo hi", "did you mean '--socket'?", 64},
		{"jobs --al", "did you mean '--all'?", 64},
		{"run --keep-ordr echo ::: a", "unknown option '--keep-ordr'; did you mean '--keep-order'?", 104},
		{"serve --listn 127.0.0.1:1", "did you mean '--listen'?", 64},
		{"job lease --spec j l x 1 1", "did you mean '--speculate'?", 64},
		{"autoscale plan --wram 1", "did you mean '--warm'?", 64},
		{"submit echo --zzzz", "unknown option '--zzzz' (`mesh submit --help` lists them)", 64},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = t_sh(out, sizeof out, 1, "'%s' %s", t_bin("mesh"), cases[i].args);
		printf("mesh %s -> %d: %s", cases[i].args, rc, out);
		EXPECT_EQ(rc, cases[i].code);
		EXPECT_CONTAINS(out, cases[i].says);
	}
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' --http-memry 1G", t_bin("meshd")), 64);
	EXPECT_CONTAINS(out, "meshd: unknown argument '--http-memry'; did you mean '--http-memory'?");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' submt echo", t_bin("mesh")), 64);
	EXPECT_CONTAINS(out, "did you mean 'submit'?");
}

/* An option given last, without its value: the message says the value is
 * missing, never "unknown option '--x'; did you mean '--x'?" (serve's and
 * ui's getopt once answered that). */
TEST(cli_option_without_its_value_says_so)
{
	static const struct {
		const char *args, *says;
		int code; /* run's is GNU parallel's */
	} cases[] = {
		{"serve --idle", "serve: --idle wants a value", 64},
		{"serve --listen 127.0.0.1:1 --upstream", "serve: --upstream wants a value", 64},
		{"ui --listen", "ui: --listen wants a value", 64},
		{"run -j", "option '-j' needs a value", 104},
		{"submit --chunks", "--chunks needs a value", 64},
		{"ps --socket", "--socket needs a value", 64},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		int rc = t_sh(out, sizeof out, 1, "'%s' %s", t_bin("mesh"), cases[i].args);
		printf("mesh %s -> %d: %s", cases[i].args, rc, out);
		EXPECT_EQ(rc, cases[i].code);
		EXPECT_CONTAINS(out, cases[i].says);
		EXPECT_TRUE(strstr(out, "did you mean") == NULL);
	}
}

/* bash: what <TAB> offers after the words given (the last one is being
 * typed), through the function `mesh completion bash` defines. */
static const char *bash_offers(const char *words)
{
	static char got[8192];
	if (t_sh(got, sizeof got, 1,
		 "bash -c 'source <(\"$0\" completion bash) || exit 9; COMP_WORDS=(%s); COMP_CWORD=$((${#COMP_WORDS[@]} - 1));"
		 " _mesh; echo \"${COMPREPLY[*]}\"' '%s'",
		 words, t_bin("mesh")) != 0)
		return "(bash failed)";
	return got;
}

TEST(cli_bash_completion_offers_what_help_names)
{
	EXPECT_STREQ(bash_offers("mesh subm"), "submit\n");
	EXPECT_STREQ(bash_offers("mesh submit --max-w"), "--max-workers\n");
	EXPECT_STREQ(bash_offers("mesh job le"), "lease\n");
	EXPECT_STREQ(bash_offers("mesh store mi"), "migrate\n");
	EXPECT_STREQ(bash_offers("mesh autoscale pl"), "plan\n");
	EXPECT_STREQ(bash_offers("mesh help exit"), "exit-codes\n");
	EXPECT_STREQ(bash_offers("mesh run --keep-o"), "--keep-order\n");
	EXPECT_STREQ(bash_offers("mesh ps --js"), "--json\n");
	EXPECT_CONTAINS(bash_offers("mesh \"\""), "completion");
	/* every option submit's --help names is offered, and only those */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s' submit --help | grep -o -- '--[a-z][a-z-]*' | sort -u | tr '\\n' ' '",
		       t_bin("mesh")),
		  0);
	static char want[sizeof out];
	snprintf(want, sizeof want, "%s", out);
	const char *got = bash_offers("mesh submit --");
	ASSERT_EQ(t_sh(out, sizeof out, 1, "echo '%s' | tr ' ' '\\n' | grep . | sort -u | tr '\\n' ' '", got), 0);
	EXPECT_STREQ(out, want);
}

TEST(cli_fish_completion_offers_what_help_names)
{
	if (t_sh(out, sizeof out, 1, "command -v fish") != 0)
		SKIP_TOOL("fish is not installed (mk/deps.sh test installs it)");
	ASSERT_EQ(t_sh(out, sizeof out, 1,
		       "fish -c '\"$argv[1]\" completion fish | source; complete -C \"mesh subm\"; complete -C \"mesh submit --max-w\";"
		       " complete -C \"mesh job le\"' '%s'",
		       t_bin("mesh")),
		  0);
	printf("%s", out);
	EXPECT_CONTAINS(out, "submit\tmeshd: submit a job");
	EXPECT_CONTAINS(out, "--max-workers\n");
	EXPECT_CONTAINS(out, "lease\n");
}

/* zsh runs bash's function through bashcompinit: the script loads and
 * defines it without an error.  (Driving zsh's completion widget needs a
 * terminal; bash's test above holds what the function offers.) */
TEST(cli_zsh_completion_loads)
{
	if (t_sh(out, sizeof out, 1, "command -v zsh") != 0)
		SKIP_TOOL("zsh is not installed (mk/deps.sh test installs it)");
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "HOME=$PWD zsh -f -c 'source <(\"$0\" completion zsh) && whence -w _mesh && complete -p mesh' '%s'",
		       t_bin("mesh")),
		  0);
	printf("%s", out);
	EXPECT_CONTAINS(out, "_mesh: function");
	EXPECT_CONTAINS(out, "complete -o filenames -F _mesh mesh");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s' completion tcsh", t_bin("mesh")), 64);
	EXPECT_CONTAINS(out, "no shell 'tcsh' (bash, zsh or fish)");
}

/* The manual pages: one for every command `mesh help` lists and meshd's;
 * groff renders each without a warning; a page holds its --help. */
TEST(cli_man_pages_render_and_hold_the_help)
{
	if (t_sh(out, sizeof out, 1, "command -v groff") != 0)
		SKIP_TOOL("groff is not installed (man-db brings it)");
	const char *b = getenv("MESH_BUILD");
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s/mk/man.sh' '%s' man 0.1.0 && ls man | tr '\\n' ' '", getenv("MESH_SRC"), b), 0);
	EXPECT_CONTAINS(out, "mesh.1 ");
	EXPECT_CONTAINS(out, "meshd.8 ");
	char cmds[4096];
	ASSERT_EQ(t_sh(cmds, sizeof cmds, 1, "'%s/mesh' help | sed -n 's/^  \\([a-z][a-z]*\\) .*/\\1/p' | grep -v -x -e help -e version",
		       b),
		  0);
	int n = 0;
	for (char *c = strtok(cmds, "\n"); c; c = strtok(NULL, "\n"), n++) {
		char page[64];
		snprintf(page, sizeof page, "mesh-%s.1 ", c);
		EXPECT_CONTAINS(out, page);
	}
	EXPECT_GT(n, 20);
	/* every page renders, with no warning */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "for p in man/*; do groff -man -ww -z \"$p\" || echo \"$p failed\"; done"), 0);
	EXPECT_STREQ(out, "");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "groff -man -Tascii man/mesh-submit.1 | col -b | tr -s \" \""), 0);
	EXPECT_CONTAINS(out, "mesh-submit - meshd: submit a job");
	EXPECT_CONTAINS(out, "--max-workers K at most K workers");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "groff -man -Tascii man/meshd.8 | col -b | tr -s \" \""), 0);
	EXPECT_CONTAINS(out, "--http-memory");
}
