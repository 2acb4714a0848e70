/* Errors of the mesh library: one table, one strerror.
 *
 * Every library function returns 0 (or a non-negative count) on success and a
 * negative code on failure; it never prints and never exits.  A code is either
 * a negated errno (-ENOSPC, -EIO, ...) from the system, or one of mesh's own
 * codes below, all <= MESH_E__BASE so they never collide with an errno. */
#ifndef MESH_BASE_ERR_H
#define MESH_BASE_ERR_H

#define MESH_E__BASE (-4000)

/* X(name, offset, message) */
#define MESH_ERR_MAP(X)                                                              \
	X(CORRUPT, 1, "corrupt record")                                              \
	X(FOREIGN, 2, "not a mesh journal")                                          \
	X(VERSION, 3, "unsupported format version")                                  \
	X(RANGE, 4, "value out of range")                                            \
	X(MISMATCH, 5, "conflicts with what is already recorded")                    \
	X(PATH, 6, "path refused by the path law")                                   \
	X(PARSE, 7, "malformed input")                                               \
	X(TIMEOUT, 8, "timed out")                                                   \
	X(NOJOB, 9, "no job submitted in this journal")                              \
	X(BURIED, 10, "chunk is buried after too many failed attempts")              \
	X(CLOSED, 11, "peer closed the connection")                                  \
	X(TOOBIG, 12, "too large")                                                   \
	X(STATE, 13, "not allowed in the current state")                             \
	X(PROTO, 14, "protocol violation")                                           \
	X(REFUSED, 15, "refused")                                                    \
	X(CRASHED, 16, "worker crashed")                                             \
	X(UNSUPPORTED, 17, "not supported on this machine")                          \
	X(NOTFOUND, 18, "not found")                                                 \
	X(DAMAGED, 19, "journal damaged before its end (repair: mesh job check --force)") \
	X(STALE, 20, "journal was cut or replaced under this process (reopen it)")                 \
	X(NOTPRIVATE, 21, "not private to this user: owned by another user or writable by group or others") \
	X(OUTPUT, 22, "cannot write the output")                                     \
	X(SCRIPT, 23, "a script, not a native executable")                           \
	X(ARCH, 24, "not an executable for this machine")                            \
	X(NOGPU, 25, "needs a GPU that this meshd does not give")                    \
	X(LIMITS, 26, "a limit cannot be enforced on this machine")                  \
	X(HANDLER, 27, "the worker's handler failed")                                \
	X(STOPPED, 28, "worker stopped while the call ran")                             \
	X(PEER, 29, "the socket is served by another user (neither you nor root)") \
	X(UNAVAILABLE, 30, "the job store's database cannot be reached or refused the login") \
	X(BUSY, 31, "in use by another process")

enum {
#define MESH__ERR_ENUM(name, off, msg) MESH_E_##name = MESH_E__BASE - (off),
	MESH_ERR_MAP(MESH__ERR_ENUM)
#undef MESH__ERR_ENUM
};

/* A static string describing err (mesh's own codes or a negated errno). */
const char *mesh_strerror(int err);
/* A short static name: "E_CORRUPT", "ENOSPC", ... */
const char *mesh_err_name(int err);

#endif
