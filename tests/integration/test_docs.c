/* The README's blocks as a new user pastes them: each is taken from
 * README.md itself (so the test follows the text) and run whole by bash in
 * the test's directory, with build/ the real build. */
#include "base/asan.h"
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char out[65536];

/* The README's ```sh blocks that tests of their own run (with their own
 * meshd and checks), found by a piece of their text: the quick start and
 * the jobs block below, the Python block (test_python_map.c), and the
 * two make commands (CI runs `make test`; `make demo` is the demo). */
#define QUICK_START "build/meshd --catalog"
#define JOBS_BLOCK "mesh submit sha"
static const char *const own_test[] = {QUICK_START, JOBS_BLOCK, "pip install ./sdk/python", "make demo"};

/* Writes to file the ```lang block of README.md that contains marker; 0 or -1. */
static int readme_block_of(const char *lang, const char *marker, const char *file)
{
	char readme[4096];
	snprintf(readme, sizeof readme, "%s/README.md", getenv("MESH_SRC"));
	return t_sh(out, sizeof out, 1,
		    "awk -v m='%s' -v l='```%s' '/^```/ { if (inb) { if (hit) { printf \"%%s\", b; exit } inb = 0; b = \"\"; hit = 0; next }"
		    " if ($0 == l) { inb = 1; next } }"
		    " inb { b = b $0 \"\\n\"; if (index($0, m)) hit = 1 }' '%s' > '%s' && test -s '%s'",
		    marker, lang, readme, file, file) == 0
		       ? 0
		       : -1;
}

static int readme_block(const char *marker, const char *file)
{
	return readme_block_of("sh", marker, file);
}

/* Runs the README's ```sh block containing marker whole, with bash -e,
 * build/ the build under test, into out (printed too); bash's status.
 * Its own socket: the default is shared with whatever else runs here.
 * As a login shell has it (umask 022, no TMPDIR: the block's mktemp makes
 * its directory under /tmp, removed after; meshd's real default user);
 * meshd's output into a file, so that a block that fails early cannot
 * leave it holding our pipe. */
static int run_readme_block(const char *marker)
{
	ASSERT_EQ(readme_block(marker, "block.sh"), 0);
	ASSERT_EQ(symlink(getenv("MESH_BUILD"), "build"), 0);
	int rc = t_sh(out, sizeof out, 1,
		      "unset MESHD_DEFAULT_USER TMPDIR; umask 022; (cat block.sh; echo 'wait; rm -rf \"$Q\"') > run.sh;"
		      " MESH_SOCKET=\"$PWD/m.sock\" bash -e run.sh >block.out 2>&1");
	char *o = t_read_file("block.out", NULL);
	snprintf(out, sizeof out, "%s", o ? o : "");
	free(o);
	printf("%s", out);
	return rc;
}

/* The meshd quick start pasted as one block: `build/meshd ... &` and, on
 * the next line, `build/mesh call` (which once failed "cannot reach meshd":
 * the socket was not there yet), ps, curl on `mesh socket`, kill %1. */
TEST_TIMEOUT(docs_readme_meshd_quick_start_pasted_whole, 60)
{
	if (t_sh(out, sizeof out, 1, "command -v curl") != 0)
		SKIP_TOOL("curl is not installed (mk/deps.sh test installs it)");
	EXPECT_EQ(run_readme_block(QUICK_START), 0);
	EXPECT_CONTAINS(out, "hello");
	EXPECT_CONTAINS(out, "\"programs\"");
	EXPECT_CONTAINS(out, "mesh_slots ");
	EXPECT_FALSE(strstr(out, "cannot reach meshd") != NULL);
}

/* Runs mk/<unit> as systemd would, as far as a test can: the directories
 * it names made with its modes under the test's directory (root = "."),
 * its ExecStart with the specifiers a user unit uses (%E %L %S) expanded
 * there too, under `env -i` with what systemd gives the service (PATH, and
 * for a user unit HOME and XDG_RUNTIME_DIR); then a job through it. */
static void unit_runs_a_job(const char *unit, int user)
{
	char script[8192];
	/* The test's directory must be reachable by the workers' user (nobody
	 * when the test runs as root), as / is for the real unit. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "chmod 0711 .. && chmod 0755 ."), 0);
	snprintf(script, sizeof script,
		 "set -e; umask 022\n"
		 "U='%s/mk/%s'; R=$PWD/root\n"
		 "mkdir -p $R/run/user $R/home\n"
		 /* systemd's directories: Configuration -> etc or %%E, State -> var/lib or %%S,
		  * Logs -> var/log or %%L, Runtime -> run */
		 "if [ %d = 1 ]; then E=$R/home/.config S=$R/home/.local/state L=$R/home/.local/state/log; RT=$R/run/user;\n"
		 "else E=$R/etc S=$R/var/lib L=$R/var/log; RT=$R/run; fi\n"
		 "mode() { sed -n \"s/^$1DirectoryMode=//p\" $U; }\n"
		 "mk() { for d in $(sed -n \"s/^$1Directory=//p\" $U); do m=$(mode $1); mkdir -p $2/$d; chmod ${m:-0755} $2/$d; done; }\n"
		 "mk Configuration $E; mk State $S; mk Logs $L; mk Runtime $RT\n"
		 "chmod 0700 $R/run/user\n"
		 "cmd=$(sed -n 's/^ExecStart=//p' $U | sed -e \"s|/usr/local/bin/meshd|$MESH_BUILD/meshd|\" "
		 "-e \"s|%%E|$E|g\" -e \"s|%%L|$L|g\" -e \"s|%%S|$S|g\" -e \"s| /etc/| $R/etc/|g\" "
		 "-e \"s| /var/| $R/var/|g\" -e \"s| /run/| $R/run/|g\")\n"
		 "cat=$(echo \"$cmd\" | sed 's/.*--catalog \\([^ ]*\\).*/\\1/')\n"
		 "mkdir -p $cat/x86_64-linux-gnu; chmod 0755 $cat/x86_64-linux-gnu\n"
		 "cp $MESH_BUILD/examples/echo_worker $cat/x86_64-linux-gnu/echo; chmod 0755 $cat/x86_64-linux-gnu/echo\n"
		 "printf 'name = \"echo\"\\nbackends = [\"native\"]\\n' > $cat/echo.toml; chmod 0644 $cat/echo.toml\n"
		 "if [ %d = 1 ]; then ENV=\"HOME=$R/home XDG_RUNTIME_DIR=$RT\"; SOCK=$RT/mesh/meshd.sock;\n"
		 "else ENV=; SOCK=$(echo \"$cmd\" | sed 's/.*--socket \\([^ ]*\\).*/\\1/'); fi\n"
		 "env -i PATH=/usr/bin:/bin $ENV $cmd >meshd.out 2>meshd.err &\n"
		 "trap 'kill %%1 2>/dev/null; wait' EXIT\n"
		 "id=$(env -i PATH=/usr/bin:/bin $ENV $MESH_BUILD/mesh submit echo --socket \"$SOCK\" ::: a b c)\n"
		 "env -i PATH=/usr/bin:/bin $ENV $MESH_BUILD/mesh wait \"$id\" --socket \"$SOCK\" >/dev/null\n"
		 "env -i PATH=/usr/bin:/bin $ENV $MESH_BUILD/mesh results \"$id\" --socket \"$SOCK\"\n"
		 "ls $S/mesh/jobs >/dev/null 2>&1 || ls $S/jobs >/dev/null\n",
		 getenv("MESH_SRC"), unit, user, user);
	t_write_file("unit.sh", script);
	int rc = t_sh(out, sizeof out, 1, "bash unit.sh 2>&1");
	printf("%s", out);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "abc"); /* the echo worker's replies, in chunk order */
	char *err = t_read_file("meshd.err", NULL);
	EXPECT_TRUE(err && !strstr(err, "no jobs"));
	free(err);
}

/* The system unit: its catalog reachable by nobody (the workers' default
 * user when meshd is root), a state directory although a system service
 * has no $HOME (once: "this meshd runs no jobs"). */
TEST_TIMEOUT(docs_system_unit_runs_a_job, 60)
{
	unit_runs_a_job("meshd.service", 0);
}

/* The user unit (systemctl --user): the default socket under
 * $XDG_RUNTIME_DIR, so plain `mesh` finds it. */
TEST_TIMEOUT(docs_user_unit_runs_a_job, 60)
{
	unit_runs_a_job("meshd-user.service", 1);
}

/* As root, a catalog in a directory only root may enter (/root, a 0700
 * temp dir): the load says so and what to change, at once (before: each
 * call started a worker that died "Permission denied", five times, then
 * FAILED). */
TEST_TIMEOUT(docs_root_catalog_out_of_the_workers_reach_refused_at_load, 60)
{
	if (geteuid() != 0)
		SKIP("meshd runs workers as another user only as root");
	ASSERT_EQ(symlink(getenv("MESH_BUILD"), "build"), 0);
	int rc = t_sh(out, sizeof out, 1,
		      "set -e; unset MESHD_DEFAULT_USER; chmod 0711 .. .; mkdir -m 0700 private; cd private; mkdir -p catalog/x86_64-linux-gnu logs\n"
		      "cp ../build/examples/echo_worker catalog/x86_64-linux-gnu/echo\n"
		      "printf 'name = \"echo\"\\nbackends = [\"native\"]\\n' > catalog/echo.toml\n"
		      "../build/meshd --catalog catalog --logs logs --socket \"$PWD/m.sock\" >meshd.out 2>meshd.err &\n"
		      "M=$!; trap 'kill $M; wait' EXIT\n"
		      "set +e; ../build/mesh load echo --socket \"$PWD/m.sock\"; echo rc=$?\n"
		      "../build/mesh call echo hi --socket \"$PWD/m.sock\"; echo rc=$?\n");
	printf("%s", out);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "'echo' cannot be run by its workers' user: user 'nobody' cannot pass '");
	EXPECT_CONTAINS(out, "/private' (mode 0700");
	EXPECT_CONTAINS(out, "user = \"...\"");
	EXPECT_CONTAINS(out, "rc=78\n");
	EXPECT_FALSE(strstr(out, "rc=0\n") != NULL);
}

/* meshd --help and docs/meshd.md name the same exit codes (they once
 * disagreed: 65 and 81 missing from --help, 75 from the docs). */
TEST(docs_meshd_exit_codes_agree_with_help)
{
	char help[2048], docs[2048];
	ASSERT_EQ(t_sh(help, sizeof help, 1,
		       "'%s' --help | sed -n '/^Exit codes:/,$p' | grep -o '[0-9][0-9]*' | sort -n | uniq | tr '\\n' ' '",
		       t_bin("meshd")),
		  0);
	ASSERT_EQ(t_sh(docs, sizeof docs, 1,
		       "sed -n '/^Exit codes:/,/^$/p' '%s/docs/meshd.md' | sed 's/([^)]*)//g; s/--[a-z]*//g' |"
		       " grep -o '\\b[0-9][0-9]*\\b' | sort -n | uniq | tr '\\n' ' '",
		       getenv("MESH_SRC")),
		  0);
	printf("  --help: %s\n  docs:   %s\n", help, docs);
	EXPECT_STREQ(help, docs);
	EXPECT_CONTAINS(help, "0 64 65 66 69 70 71 75 77 81 ");
}

/* The README's C worker: it builds against libmeshworker as shown, started
 * by hand it says why it cannot run (it once exited 1 silently), and under
 * meshd it answers a call. */
TEST_TIMEOUT(docs_readme_c_worker_builds_says_why_by_hand_and_serves, 60)
{
	const char *b = getenv("MESH_BUILD"), *src = getenv("MESH_SRC");
	ASSERT_EQ(readme_block_of("c", "mesh_worker_open", "w.c"), 0);
#ifdef MESH_UNDER_ASAN
	/* The library under test was built so, by clang (make check). */
	const char *cc = "clang -fsanitize=address,undefined";
#else
	const char *cc = "cc";
#endif
	int rc = t_sh(out, sizeof out, 1, "%s -Wall -Werror -I'%s/include' -o w w.c '%s/libmeshworker.a' -lpthread 2>&1", cc,
		      src, b);
	printf("%s", out);
	ASSERT_EQ(rc, 0);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "env -u MESH_CONTROL_FD ./w"), 1);
	EXPECT_CONTAINS(out, "started outside meshd: MESH_CONTROL_FD is not set");
	rc = t_sh(out, sizeof out, 1,
		  "mkdir -p catalog/x86_64-linux-gnu logs && cp w catalog/x86_64-linux-gnu/w &&"
		  " printf 'name = \"w\"\\nbackends = [\"native\"]\\n' > catalog/w.toml &&"
		  " ('%s/meshd' --catalog catalog --logs logs --socket \"$PWD/m.sock\" >meshd.out 2>&1 & echo $! > pid) &&"
		  " '%s/mesh' call w hello --socket \"$PWD/m.sock\"; r=$?; kill $(cat pid); exit $r",
		  b, b);
	EXPECT_EQ(rc, 0);
	EXPECT_STREQ(out, "hello");
}

/* The README's jobs block, pasted whole: meshd from zero workers, a job of
 * three chunks, its results in order, mesh jobs. */
TEST_TIMEOUT(docs_readme_jobs_block_pasted_whole, 60)
{
	EXPECT_EQ(run_readme_block(JOBS_BLOCK), 0);
	/* sha256("alpha"), ("beta"), ("gamma"), one a line */
	EXPECT_CONTAINS(out, "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8\n"
			     "f44e64e75f3948e9f73f8dfa94721c4ce8cbb4f265c4790c702b2d41cfbf2753\n"
			     "be9d587defa1f0c09ef49eb17e206983a5f8f8289e4281860bd0ee5a19592c67\n");
	EXPECT_CONTAINS(out, "complete          3/3");
}

/* "FILE LINE LANG" for each block of README.md and docs/<name>.md, one a line
 * (LANG "-" when the opening fence names none), into list. */
static void list_blocks(char *list, size_t cap)
{
	ASSERT_EQ(t_sh(list, cap, 0,
		       "cd '%s' && for f in README.md docs/*.md; do awk -v f=\"$f\" '/^```/ { if (inb) { inb = 0; next }"
		       " inb = 1; l = substr($0, 4); print f, NR, (l == \"\" ? \"-\" : l) }' \"$f\"; done",
		       getenv("MESH_SRC")),
		  0);
}

/* Every block says what it is: `sh` is a command the test below runs,
 * anything else (text, toml, json, c, python) is not a command to paste
 * as it is.  An unmarked block is how a stale command hides. */
TEST(docs_every_block_names_its_language)
{
	static char list[65536];
	list_blocks(list, sizeof list);
	int n = 0;
	for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n"), n++)
		if (strlen(line) > 2 && strcmp(line + strlen(line) - 2, " -") == 0)
			t__fail(__FILE__, __LINE__, "a block without a language at %s", line);
	EXPECT_GT(n, 50);
}

/* Every ```sh block of README.md and docs/<name>.md, pasted whole into bash -e
 * in a directory that has what the docs assume (docs_block.sh: meshd with
 * the README's programs, mesh on PATH, the files the examples name), must
 * succeed; the README's blocks with tests of their own run there. */
TEST_TIMEOUT(docs_every_sh_block_runs_as_pasted, 300)
{
	static char list[65536];
	char blk[64], cmd[8192], file[256];
	list_blocks(list, sizeof list);
	if (t_sh(out, sizeof out, 1, "command -v curl && command -v python3") != 0)
		SKIP_TOOL("curl or python3 is not installed (mk/deps.sh test installs them)");
	int n = 0, ran = 0;
	char *save = NULL;
	for (char *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++) {
		int at;
		char lang[32];
		if (sscanf(line, "%255s %d %31s", file, &at, lang) != 3 || strcmp(lang, "sh") != 0)
			continue;
		snprintf(blk, sizeof blk, "b%d.sh", n);
		snprintf(cmd, sizeof cmd, "awk -v s=%d 'NR > s && /^```/ { exit } NR > s' '%s/%s' > %s", at,
			 getenv("MESH_SRC"), file, blk);
		ASSERT_EQ(t_sh(out, sizeof out, 1, "%s", cmd), 0);
		char *text = t_read_file(blk, NULL);
		ASSERT_TRUE(text != NULL);
		int skip = 0;
		for (size_t i = 0; i < sizeof own_test / sizeof own_test[0]; i++)
			skip |= strcmp(file, "README.md") == 0 && strstr(text, own_test[i]) != NULL;
		free(text);
		if (skip)
			continue;
		ran++;
		int rc = t_sh(out, sizeof out, 1, "'%s/tests/integration/docs_block.sh' %s d%d 2>&1", getenv("MESH_SRC"), blk,
			      n);
		printf("== %s:%d: exit %d\n", file, at, rc);
		fflush(stdout);
		if (rc != 0) {
			printf("%s", out);
			t__fail(__FILE__, __LINE__, "%s:%d: the block exited %d", file, at, rc);
		}
	}
	EXPECT_GE(ran, 8);
}
