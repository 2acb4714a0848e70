/* mesh completion bash|zsh|fish: a completion script for the shell, made
 * from the commands' own --help texts (cli/help.c), so that it offers
 * exactly the commands, subcommands and options --help names. */
#include "base/buf.h"
#include "cli/cmds.h"
#include "cli/exit.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The commands besides the table's: "help" (its topics: exit-codes,
 * lifecycle, the commands) and "version". */
static const char *const extra[][2] = {
	{"help", "a command's help; exit-codes; lifecycle"},
	{"version", "print the version"},
};

static int help(void)
{
	printf("usage: mesh completion bash|zsh|fish\n\n"
	       "Prints a completion script for the shell: the commands, their subcommands and\n"
	       "options, taken from each command's --help (so they cannot disagree).\n\n"
	       "  bash   source <(mesh completion bash)        (or save it as\n"
	       "         ~/.local/share/bash-completion/completions/mesh)\n"
	       "  zsh    source <(mesh completion zsh)         (in ~/.zshrc)\n"
	       "  fish   mesh completion fish | source         (or save it as\n"
	       "         ~/.config/fish/completions/mesh.fish)\n\n"
	       "`make install` installs all three where the shells look.\n"
	       "Exit codes: 0; 64 usage.\n");
	return 0;
}

/* The words of cmd's --help: options and subcommands (help: its topics),
 * each list ending in a space or empty; 0 or -1. */
static int words(const char *cmd, struct mesh_buf *opts, struct mesh_buf *subs)
{
	if (!strcmp(cmd, "help")) {
		mesh_buf_adds(subs, "exit-codes lifecycle ");
		for (size_t i = 0; i < mesh__cli_ncmds(); i++)
			mesh_buf_addf(subs, "%s ", mesh__cli_cmd(i, NULL));
		return 0;
	}
	if (!strcmp(cmd, "version"))
		return 0;
	return mesh__cli_help_words(cmd, opts, subs);
}

/* Each command: its name, summary, options, subcommands; fn prints it. */
static int each_cmd(void (*fn)(const char *name, const char *summary, const char *opts, const char *subs))
{
	size_t n = mesh__cli_ncmds();
	for (size_t i = 0; i < n + sizeof extra / sizeof extra[0]; i++) {
		const char *summary, *name = i < n ? mesh__cli_cmd(i, &summary) : extra[i - n][0];
		if (i >= n)
			summary = extra[i - n][1];
		struct mesh_buf o = MESH_BUF_INIT, s = MESH_BUF_INIT;
		if (words(name, &o, &s) < 0 || mesh_buf_add(&o, "", 1) < 0 || mesh_buf_add(&s, "", 1) < 0) {
			mesh_buf_release(&o);
			mesh_buf_release(&s);
			return -1;
		}
		fn(name, summary, o.p, s.p);
		mesh_buf_release(&o);
		mesh_buf_release(&s);
	}
	return 0;
}

static void bash_case(const char *name, const char *summary, const char *opts, const char *subs)
{
	printf("\t%s) opts='%s' subs='%s' ;;\n", name, opts, subs);
}

static void bash_names(const char *name, const char *summary, const char *opts, const char *subs)
{
	printf("%s ", name);
}

static int bash(void)
{
	printf("# bash completion for mesh, made by `mesh completion bash` from each command's --help\n"
	       "_mesh() {\n"
	       "\tlocal cur=${COMP_WORDS[COMP_CWORD]} opts= subs=\n"
	       "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n"
	       "\t\tCOMPREPLY=($(compgen -W '");
	if (each_cmd(bash_names) < 0)
		return -1;
	printf("' -- \"$cur\"))\n"
	       "\t\treturn\n"
	       "\tfi\n"
	       "\tcase ${COMP_WORDS[1]} in\n");
	if (each_cmd(bash_case) < 0)
		return -1;
	printf("\tesac\n"
	       "\tif [[ $cur == -* ]]; then\n"
	       "\t\tCOMPREPLY=($(compgen -W \"$opts\" -- \"$cur\"))\n"
	       "\telif [ \"$COMP_CWORD\" -eq 2 ] && [ -n \"$subs\" ]; then\n"
	       "\t\tCOMPREPLY=($(compgen -W \"$subs\" -- \"$cur\"))\n"
	       "\telse\n"
	       "\t\tCOMPREPLY=($(compgen -f -- \"$cur\"))\n"
	       "\tfi\n"
	       "}\n"
	       "complete -o filenames -F _mesh mesh\n");
	return 0;
}

/* A fish string: single quotes, with ' and \ escaped. */
static void fish_quoted(const char *s)
{
	putchar('\'');
	for (; *s; s++) {
		if (*s == '\'' || *s == '\\')
			putchar('\\');
		putchar(*s);
	}
	putchar('\'');
}

static void fish_cmd(const char *name, const char *summary, const char *opts, const char *subs)
{
	printf("complete -c mesh -n __fish_use_subcommand -a %s -d ", name);
	fish_quoted(summary);
	putchar('\n');
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", opts);
	for (char *w = strtok(buf, " "); w; w = strtok(NULL, " "))
		printf("complete -c mesh -n '__fish_seen_subcommand_from %s' -%s %s\n", name, w[1] == '-' ? "l" : "s",
		       w + (w[1] == '-' ? 2 : 1));
	if (*subs)
		printf("complete -c mesh -n '__fish_seen_subcommand_from %s; and test (count (commandline -opc)) -eq 2'"
		       " -f -a '%s'\n",
		       name, subs);
}

static int fish(void)
{
	printf("# fish completion for mesh, made by `mesh completion fish` from each command's --help\n");
	return each_cmd(fish_cmd);
}

int mesh_cmd_completion(int argc, char **argv)
{
	if (mesh_cli_wants_help(argc, argv))
		return help();
	if (argc != 2)
		return mesh_cli_usage("completion: which shell? (mesh completion bash|zsh|fish)");
	int rc;
	if (!strcmp(argv[1], "bash")) {
		rc = bash();
	} else if (!strcmp(argv[1], "zsh")) {
		/* zsh runs bash's function through its bashcompinit. */
		printf("# zsh completion for mesh, made by `mesh completion zsh`: bash's, through bashcompinit\n"
		       "(( $+functions[compdef] )) || { autoload -U compinit && compinit; }\n"
		       "autoload -U bashcompinit && bashcompinit\n");
		rc = bash();
	} else if (!strcmp(argv[1], "fish")) {
		rc = fish();
	} else {
		return mesh_cli_usage("completion: no shell '%s' (bash, zsh or fish)", argv[1]);
	}
	if (rc < 0)
		return mesh_cli_fail(-ENOMEM, "completion: cannot read the commands' help");
	return fflush(stdout) == 0 ? 0 : mesh_cli_fail(-EIO, "completion: cannot write");
}
