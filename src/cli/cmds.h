/* The subcommands of `mesh`.  Each takes argv starting at its own name
 * (argv[0] = "job", ...) and returns the process exit code (cli/exit.h). */
#ifndef MESH_CLI_CMDS_H
#define MESH_CLI_CMDS_H

#include <stddef.h>

/* X(name, function, one-line summary) */
#define MESH_CMD_MAP(X)                                                                     \
	X(run, mesh_cmd_run, "run a command per chunk on N local slots, crash-proof and resumable") \
	X(job, mesh_cmd_job, "the swarm job engine: submit, lease, complete, status, harvest, check, retry") \
	X(store, mesh_cmd_store, "the PostgreSQL job store: init, migrate, status of its schema")  \
	X(nodes, mesh_cmd_nodes, "the nodes of a PostgreSQL job store on every host: program, speed, heartbeat") \
	X(autoscale, mesh_cmd_autoscale, "the scale-to-zero policy: decide, tick (probe + decide)")  \
	X(serve, mesh_cmd_serve, "scale-to-zero activator in front of any local server")         \
	X(load, mesh_cmd_load, "meshd: load a program from the catalog")                          \
	X(unload, mesh_cmd_unload, "meshd: unload a program (its workers exit)")                   \
	X(rollback, mesh_cmd_rollback, "meshd: go back to a program's previous image")            \
	X(start, mesh_cmd_start, "meshd: start a worker now and wait for ready")                   \
	X(stop, mesh_cmd_stop, "meshd: stop a program's workers")                                 \
	X(reload, mesh_cmd_reload, "meshd: read the catalog again: HTTP programs, loaded native ones") \
	X(ps, mesh_cmd_ps, "meshd: the stats table of workers and host")                         \
	X(logs, mesh_cmd_logs, "meshd: a program's output log")                                   \
	X(socket, mesh_cmd_socket, "meshd: print the control socket's path mesh talks to")       \
	X(call, mesh_cmd_call, "meshd: send one request through a worker's slot, print the reply") \
	X(submit, mesh_cmd_submit, "meshd: submit a job (chunks for a program's workers); prints its id") \
	X(jobs, mesh_cmd_jobs, "meshd: the jobs and their progress")                              \
	X(wait, mesh_cmd_wait, "meshd: wait for a job to end (progress bar on a terminal)")      \
	X(results, mesh_cmd_results, "meshd: a job's results in chunk order, streamed while it runs") \
	X(cancel, mesh_cmd_cancel, "meshd: cancel a job")                                        \
	X(rm, mesh_cmd_rm, "meshd: remove a job that ended, its files and all")                   \
	X(ui, mesh_cmd_ui, "meshd: a live web page of jobs, workers, savings and crashes")      \
	X(completion, mesh_cmd_completion, "print a shell completion script: bash, zsh or fish")

/* Prints the help of cmd from a table of {command, text} rows, then what
 * every meshd client command shares (--socket, the exit codes). */
void mesh__meshd_cmd_help(const char *const helps[][2], size_t n, const char *cmd);

/* The text `mesh CMD --help` prints, into out (appended); 0, or -1 when
 * there is no command CMD. */
struct mesh_buf;
int mesh__cli_help_text(const char *cmd, struct mesh_buf *out);
/* The commands of the table (help and version are not in it): how many,
 * and the i-th one's name (its one-line summary into *summary unless NULL). */
size_t mesh__cli_ncmds(void);
const char *mesh__cli_cmd(size_t i, const char **summary);
/* The words CMD's --help names (cli/help.c): its options ("--name",
 * "-x") into opts and its subcommands into subs (either may be NULL),
 * each word followed by a space, each once.  0 or -1. */
int mesh__cli_help_words(const char *cmd, struct mesh_buf *opts, struct mesh_buf *subs);
/* What to say after "unknown option 'OPT'" for the command cmd (its first
 * word names the --help read: "job lease" reads `mesh job --help`):
 * "; did you mean '--max-workers'?" when one option is near, else a
 * pointer at --help.  Written into buf; returns buf. */
const char *mesh_cli_did_you_mean(const char *cmd, const char *opt, char *buf, size_t cap);

#define MESH__CMD_DECL(name, fn, summary) int fn(int argc, char **argv);
MESH_CMD_MAP(MESH__CMD_DECL)
#undef MESH__CMD_DECL

#endif
