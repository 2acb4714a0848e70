/* The CLI's help texts read as data: the options and subcommands each
 * command's --help names are what "did you mean" suggests and what the
 * shell completion scripts offer (mesh completion bash|zsh|fish), so the
 * words a user can complete are always the words --help prints. */
#include "base/buf.h"
#include "base/near.h"
#include "cli/cmds.h"
#include "cli/exit.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

int mesh__cli_help_words(const char *cmd, struct mesh_buf *opts, struct mesh_buf *subs)
{
	struct mesh_buf help = MESH_BUF_INIT;
	int rc = mesh__cli_help_text(cmd, &help);
	if (rc < 0 || mesh_buf_add(&help, "", 1) < 0) {
		mesh_buf_release(&help);
		return rc < 0 ? rc : -1;
	}
	if (opts && mesh_help_options(help.p, opts) < 0) {
		mesh_buf_release(&help);
		return -1;
	}
	char prefix[64];
	snprintf(prefix, sizeof prefix, "mesh %s ", cmd);
	size_t plen = strlen(prefix);
	int sub_table = 0; /* the usage line says "<command>": two-space rows name them */
	for (char *line = help.p; *line;) {
		char *end = strchr(line, '\n');
		if (!end)
			end = line + strlen(line);
		/* Subcommands: "mesh CMD WORD" (usage lines), "mesh CMD a|b|c", and
		 * after "mesh CMD <command>" the rows "  WORD   ...". */
		if (subs) {
			char *at = strstr(line, prefix);
			if (at && at < end) {
				char *w = at + plen;
				if (!strncmp(w, "<command>", 9))
					sub_table = 1;
				while (islower((unsigned char)*w)) {
					size_t n = 0;
					while (islower((unsigned char)w[n]) || w[n] == '-')
						n++;
					mesh_word_set_add(subs, w, n);
					if (w[n] != '|')
						break;
					w += n + 1;
				}
			} else if (sub_table && line[0] == ' ' && line[1] == ' ' && islower((unsigned char)line[2])) {
				size_t n = 0;
				while (islower((unsigned char)line[2 + n]))
					n++;
				if (line[2 + n] == ' ')
					mesh_word_set_add(subs, line + 2, n);
			}
		}
		line = *end ? end + 1 : end;
	}
	mesh_buf_release(&help);
	return 0;
}

const char *mesh_cli_did_you_mean(const char *cmd, const char *opt, char *buf, size_t cap)
{
	struct mesh_buf help = MESH_BUF_INIT;
	char name[32], best[64];
	snprintf(name, sizeof name, "%.*s", (int)strcspn(cmd, " "), cmd);
	const char *near = NULL;
	if (mesh__cli_help_text(name, &help) == 0 && mesh_buf_add(&help, "", 1) == 0)
		near = mesh_help_nearest_option(help.p, opt, best, sizeof best);
	mesh_buf_release(&help);
	if (near)
		snprintf(buf, cap, "; did you mean '%s'?", near);
	else
		snprintf(buf, cap, " (`mesh %s --help` lists them)", name);
	return buf;
}
