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
	X(ps, mesh_cmd_ps, "meshd: the stats table of workers and host")                         \
	X(logs, mesh_cmd_logs, "meshd: a program's output log")                                   \
	X(socket, mesh_cmd_socket, "meshd: print the control socket's path mesh talks to")       \
	X(call, mesh_cmd_call, "meshd: send one request through a worker's slot, print the reply") \
	X(submit, mesh_cmd_submit, "meshd: submit a job (chunks for a program's workers); prints its id") \
	X(jobs, mesh_cmd_jobs, "meshd: the jobs and their progress")                              \
	X(wait, mesh_cmd_wait, "meshd: wait for a job to end (progress bar on a terminal)")      \
	X(results, mesh_cmd_results, "meshd: a job's results in chunk order, streamed while it runs") \
	X(cancel, mesh_cmd_cancel, "meshd: cancel a job")                                        \
	X(rm, mesh_cmd_rm, "meshd: remove a job that ended, its files and all")

/* Prints the help of cmd from a table of {command, text} rows, then what
 * every meshd client command shares (--socket, the exit codes). */
void mesh__meshd_cmd_help(const char *const helps[][2], size_t n, const char *cmd);

#define MESH__CMD_DECL(name, fn, summary) int fn(int argc, char **argv);
MESH_CMD_MAP(MESH__CMD_DECL)
#undef MESH__CMD_DECL

#endif
