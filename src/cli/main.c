/* mesh: the command-line front end.  Each subcommand lives in its own file
 * (cli/cmd_<name>.c) as a thin layer over a library call. */
#include "base/buf.h"
#include "base/err.h"
#include "base/near.h"
#include "cli/cmds.h"
#include "cli/exit.h"
#include "host/host.h"
#include "job/job.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const struct {
	const char *name;
	int (*fn)(int, char **);
	const char *summary;
} cmds[] = {
#define MESH__CMD_ROW(name, fn, summary) {#name, fn, summary},
	MESH_CMD_MAP(MESH__CMD_ROW)
#undef MESH__CMD_ROW
};

static void usage(FILE *f)
{
	fprintf(f, "usage: mesh <command> [args...]\n\n"
		   "mesh runs compute work on workers that hold expensive resources only while there is work.\n\n"
		   "commands:\n");
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
		fprintf(f, "  %-10s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "  %-10s %s\n", "help",
		"this text; `mesh help exit-codes` lists the exit codes, `mesh help lifecycle` meshd's worker table");
	fprintf(f, "  %-10s %s\n", "version", "print the version");
	fprintf(f, "\n`mesh <command> --help` describes a command.\n");
}

/* The command nearest to cmd (git's "did you mean"): within 2 edits, or 1
 * for names of 3 letters or fewer; NULL when none or a tie. */
static const char *nearest(const char *cmd)
{
	static const char *const more[] = {"help", "version"};
	const char *best = NULL;
	unsigned bd = strlen(cmd) <= 3 ? 2 : 3, ties = 0;
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0] + 2; i++) {
		const char *name = i < sizeof cmds / sizeof cmds[0] ? cmds[i].name : more[i - sizeof cmds / sizeof cmds[0]];
		unsigned d = mesh_edit_distance(cmd, name);
		if (d < bd)
			best = name, bd = d, ties = 0;
		else if (d == bd && best)
			ties++;
	}
	return ties ? NULL : best;
}

size_t mesh__cli_ncmds(void)
{
	return sizeof cmds / sizeof cmds[0];
}

const char *mesh__cli_cmd(size_t i, const char **summary)
{
	if (summary)
		*summary = cmds[i].summary;
	return cmds[i].name;
}

int mesh__cli_help_text(const char *cmd, struct mesh_buf *out)
{
	size_t i;
	for (i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
		if (!strcmp(cmd, cmds[i].name))
			break;
	if (i == sizeof cmds / sizeof cmds[0])
		return -1;
	/* The command prints its help on stdout: that, into a memfd. */
	fflush(stdout);
	int fd = memfd_create("mesh-help", MFD_CLOEXEC), saved = dup(1);
	if (fd < 0 || saved < 0 || dup2(fd, 1) < 0) {
		if (fd >= 0)
			close(fd);
		if (saved >= 0)
			close(saved);
		return -1;
	}
	char *av[] = {(char *)cmd, "--help", NULL};
	cmds[i].fn(2, av);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	char b[4096];
	ssize_t n;
	off_t at = 0;
	while ((n = pread(fd, b, sizeof b, at)) > 0) {
		mesh_buf_add(out, b, (size_t)n);
		at += n;
	}
	close(fd);
	return 0;
}

static void exit_codes(void)
{
	printf("mesh exit codes (the same for every subcommand; `run` moves them, see below):\n");
#define MESH__EXIT_ROW(name, code, msg) printf("  %3d  %-12s %s\n", code, #name, msg);
	MESH_EXIT_MAP(MESH__EXIT_ROW)
	printf("\n`mesh run` answers as GNU parallel (the count of failed chunks), so its own codes differ:\n");
	MESH_EXIT_RUN_MAP(MESH__EXIT_ROW)
#undef MESH__EXIT_ROW
}

/* meshd's worker lifecycle, every cell of the host's table (docs/host.md). */
static int lifecycle(void)
{
	struct mesh_buf b = MESH_BUF_INIT;
	int rc = mesh_lifecycle_describe(&b);
	if (rc == 0)
		fwrite(b.p, 1, b.len, stdout);
	mesh_buf_release(&b);
	return rc ? mesh_cli_fail(rc, "cannot describe the lifecycle") : 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		usage(stderr);
		return MESH_EXIT_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		if (argc > 2 && !strcmp(argv[2], "exit-codes")) {
			exit_codes();
			return 0;
		}
		if (argc > 2 && !strcmp(argv[2], "lifecycle"))
			return lifecycle();
		if (argc > 2) {
			for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
				if (!strcmp(argv[2], cmds[i].name)) {
					char *av[] = {argv[2], "--help", NULL};
					return cmds[i].fn(2, av);
				}
			}
			return mesh_cli_usage("no help topic '%s'", argv[2]);
		}
		usage(stdout);
		return 0;
	}
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
		printf("mesh %s\n", MESH_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
		if (!strcmp(cmd, cmds[i].name)) {
			/* what its store connections are called (mesh run and
			 * mesh job harvest name their job too) */
			char app[64];
			snprintf(app, sizeof app, "mesh %s", cmds[i].name);
			mesh_job_set_store_app(app, 0);
			return cmds[i].fn(argc - 1, argv + 1);
		}
	}
	const char *near = nearest(cmd);
	if (near)
		return mesh_cli_usage("unknown command '%s'; did you mean '%s'?", cmd, near);
	return mesh_cli_usage("unknown command '%s'", cmd);
}
