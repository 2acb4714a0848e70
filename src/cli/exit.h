/* The exit codes of `mesh`: one table for every subcommand (`mesh help
 * exit-codes` prints it).  Codes 0..9 carry answers; errors start at 64
 * (sysexits) so that no error can be read as an answer. */
#ifndef MESH_CLI_EXIT_H
#define MESH_CLI_EXIT_H

/* X(name, code, meaning) */
#define MESH_EXIT_MAP(X)                                                                              \
	X(OK, 0, "success; `job status`: COMPLETE; `autoscale`: HOLD")                                \
	X(INCOMPLETE, 1, "`job status`: INCOMPLETE; `autoscale`: SPAWN; `run`: some chunks failed")    \
	X(SERVE, 2, "`autoscale`: SERVE")                                                             \
	X(NONE, 3, "`job lease`: NONE, nothing can be leased now; `autoscale`: REAP")                  \
	X(COMPLETE, 4, "`job lease`: COMPLETE, the job is done")                                      \
	X(INTERRUPTED, 5, "`run`/`harvest`: stopped by a signal before the job was complete; rerun to resume") \
	X(USAGE, 64, "usage error: unknown command or option, missing or malformed argument")       \
	X(DATAERR, 65, "bad input: corrupt or foreign journal, a chunk count that conflicts, out-of-range chunk, path refused") \
	X(NOINPUT, 66, "an input file does not exist or cannot be read (a missing journal)")          \
	X(UNAVAILABLE, 69, "a service is not reachable (meshd not running, upstream refused)")        \
	X(SOFTWARE, 70, "internal error")                                                             \
	X(OSERR, 71, "the system refused (fork, memory, limits)")                                    \
	X(CANTCREAT, 73, "cannot create an output file or a lock directory (its parent is missing or read-only)")                                              \
	X(IOERR, 74, "write or fsync failed (a full disk): nothing was reported done that is not durable") \
	X(TEMPFAIL, 75, "temporary failure, try again (a lock held, a timeout, a conflicting state)") \
	X(PROTOCOL, 76, "a worker crashed or broke the protocol while serving the request (the report says how)") \
	X(NOPERM, 77, "permission denied: a read-only or immutable journal that a command must write")

/* `mesh run` answers as GNU parallel does: its exit code is the number of
 * failed chunks (1..100; 101: more than 100), so the error codes above
 * would read as failure counts there.  mesh run moves each of them up by
 * MESH_EXIT_RUN_SHIFT (usage 104, bad input 105, no input 106, ...) and has
 * these answers of its own.  X(name, code, meaning) */
#define MESH_EXIT_RUN_SHIFT 40
#define MESH_EXIT_RUN_MAP(X)                                                                          \
	X(RUN_OK, 0, "every chunk done, or no input at all")                                          \
	X(RUN_FAILED, 1, "1..100: that many chunks failed (after --retries; rerun to run them again); --halt on failure: the failed chunk's exit status") \
	X(RUN_FAILED_MANY, 101, "more than 100 chunks failed")                                        \
	X(RUN_INCOMPLETE, 102, "chunks left neither done nor failed (held by another node); rerun to resume") \
	X(RUN_ERRORS, 104, "104..116: mesh's own error, the code above + 40 (104 usage, 105 bad input, 106 no input, 114 I/O error, ...)") \
	X(RUN_INTERRUPTED, 130, "stopped by SIGINT/SIGTERM; rerun the same command to resume")          \
	X(RUN_CLOSED_STDOUT, 141, "standard output was closed (| head): stopped quietly as GNU parallel does; output not written stays not done")

enum {
#define MESH__EXIT_ENUM(name, code, msg) MESH_EXIT_##name = code,
	MESH_EXIT_MAP(MESH__EXIT_ENUM)
	MESH_EXIT_RUN_MAP(MESH__EXIT_ENUM)
#undef MESH__EXIT_ENUM
};

/* mesh run's code for a code of the shared table (see MESH_EXIT_RUN_MAP). */
int mesh_exit_run(int code);
/* The exit code for a library error code (negative). */
int mesh_exit_for(int err);
/* Prints "mesh: <what>: <strerror(err)>" to stderr and returns mesh_exit_for(err). */
int mesh_cli_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints "mesh: <message>" plus a usage hint to stderr; returns MESH_EXIT_USAGE. */
int mesh_cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* True when argv holds -h or --help before any "--". */
int mesh_cli_wants_help(int argc, char **argv);

#endif
