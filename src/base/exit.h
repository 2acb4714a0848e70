/* The exit codes of mesh's programs (`mesh` and `meshd`): one table
 * (`mesh help exit-codes` prints it).  Codes 0..9 carry answers; errors
 * start at 64 (sysexits) so that no error can be read as an answer. */
#ifndef MESH_BASE_EXIT_H
#define MESH_BASE_EXIT_H

/* X(name, code, meaning) */
#define MESH_EXIT_MAP(X)                                                                              \
	X(OK, 0, "success; `job status`: COMPLETE; `autoscale`: HOLD")                                \
	X(INCOMPLETE, 1, "`job status`: INCOMPLETE; `autoscale`: SPAWN; `run`: some chunks failed")    \
	X(SERVE, 2, "`autoscale`: SERVE")                                                             \
	X(NONE, 3, "`job lease`: NONE, nothing can be leased now; `autoscale`: REAP")                  \
	X(COMPLETE, 4, "`job lease`: COMPLETE, the job is done")                                      \
	X(INTERRUPTED, 5, "`run`/`harvest`: stopped by a signal before the job was complete; rerun to resume") \
	X(CANCELLED, 6, "`wait`: the job was cancelled (`mesh cancel`); `wait` answers 1 when it ended with buried chunks") \
	X(WRONGMODEL, 7, "`autoscale tick --model`: warm but wrong model (the server answers, its list lacks the model)") \
	X(USAGE, 64, "usage error: unknown command or option, missing or malformed argument")       \
	X(DATAERR, 65, "bad input: corrupt or foreign journal, a chunk count that conflicts, out-of-range chunk, path refused, a journal only its owner (meshd) writes; `results`: DONE chunks without a result (the others are written)") \
	X(NOINPUT, 66, "an input file does not exist or cannot be read (a missing journal)")          \
	X(UNAVAILABLE, 69, "a service is not reachable (meshd not running or gone, upstream refused)") \
	X(SOFTWARE, 70, "internal error")                                                             \
	X(OSERR, 71, "the system refused (fork, memory, limits)")                                    \
	X(CANTCREAT, 73, "cannot create an output file or a lock directory (its parent is missing or read-only)")                                              \
	X(IOERR, 74, "write or fsync failed (a full disk): nothing was reported done that is not durable") \
	X(TEMPFAIL, 75, "temporary failure, try again (a lock held, a timeout, a conflicting state)") \
	X(PROTOCOL, 76, "a worker crashed or broke the protocol while serving the request (the report says how)") \
	X(NOPERM, 77, "permission denied: a read-only or immutable journal that a command must write; a meshd socket served by another user") \
	X(REFUSED, 78, "meshd refused: a worker refused `run`, a GPU client check failed, a non-regular file") \
	X(SCRIPT, 79, "the program's binary is a script (#!); meshd runs native executables only")  \
	X(ARCH, 80, "the program's binary is not an executable for this machine (another architecture or OS)") \
	X(NOGPU, 81, "the program needs a GPU and this meshd gives none (run it with --isolation mps)") \
	X(LIMITS, 82, "a limit in the program's manifest cannot be enforced on this machine")      \
	X(HANDLER, 83, "the worker's handler failed the request (its message is printed)")

enum {
#define MESH__EXIT_ENUM(name, code, msg) MESH_EXIT_##name = code,
	MESH_EXIT_MAP(MESH__EXIT_ENUM)
#undef MESH__EXIT_ENUM
};

/* The exit code (MESH_EXIT_*) for a library result: 0 -> MESH_EXIT_OK, a
 * negative mesh or errno code -> its class; MESH_EXIT_SOFTWARE when the
 * code has none. */
int mesh_exit_for(int err);

#endif
