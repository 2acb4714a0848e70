/* The CLI's side of the exit codes: the table itself (MESH_EXIT_MAP,
 * mesh_exit_for) is base/exit.h, shared with meshd; here are mesh run's
 * mapping and the helpers that print an error and return its code. */
#ifndef MESH_CLI_EXIT_H
#define MESH_CLI_EXIT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "base/exit.h"

/* `mesh run` answers as GNU parallel does: its exit code is the number of
 * failed chunks (1..100; 101: more than 100), so the error codes of base/exit.h
 * would read as failure counts there.  mesh run moves each of them up by
 * MESH_EXIT_RUN_SHIFT (usage 104, bad input 105, no input 106, ...) and has
 * these answers of its own.  X(name, code, meaning) */
#define MESH_EXIT_RUN_SHIFT 40
#define MESH_EXIT_RUN_MAP(X)                                                                          \
	X(RUN_OK, 0, "every chunk done, or no input at all")                                          \
	X(RUN_FAILED, 1, "1..100: that many chunks failed (after --retries; rerun to run them again); with --halt, GNU parallel's: fail=1 the failed chunk's exit status, fail=N% the failed share in percent, fail=N their count") \
	X(RUN_FAILED_MANY, 101, "more than 100 chunks failed")                                        \
	X(RUN_INCOMPLETE, 102, "chunks left neither done nor failed (held by another node); rerun to resume") \
	X(RUN_ERRORS, 104, "104..123: mesh's own error, the code above + 40 (104 usage, 105 bad input, 106 no input, 113 results dir, joblog or --tmpdir unusable, 114 I/O error, ...)") \
	X(RUN_HANGUP, 129, "SIGHUP (a closed terminal): no chunk started after it, the running ones finished; rerun the same command to resume") \
	X(RUN_INTERRUPTED, 130, "stopped by SIGINT/SIGTERM; rerun the same command to resume")          \
	X(RUN_CLOSED_STDOUT, 141, "standard output was closed (| head): stopped as GNU parallel does; a default journal is removed (what the reader took cannot be known), a --journal kept and its rerun warns")

enum {
#define MESH__EXIT_ENUM(name, code, msg) MESH_EXIT_##name = code,
	MESH_EXIT_RUN_MAP(MESH__EXIT_ENUM)
#undef MESH__EXIT_ENUM
};

/* mesh run's code for a code of the shared table (see MESH_EXIT_RUN_MAP). */
int mesh_exit_run(int code);
/* Prints "mesh: <what>: <strerror(err)>" to stderr and returns mesh_exit_for(err). */
int mesh_cli_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* mesh_cli_fail with ": <words>" after it where words is not empty (a
 * job store's own words: mesh_job_store_error, mesh_job_why.store_msg). */
int mesh_cli_fail_store(int err, const char *words, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The line of both, after "mesh: <pre>". */
void mesh_cli_vsay_fail(const char *pre, int err, const char *words, const char *fmt, va_list ap);
/* Prints "mesh: <message>" plus a usage hint to stderr; returns MESH_EXIT_USAGE. */
int mesh_cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* 0 when url (a journal path or store URL, may be NULL) holds no
 * password; else says `mesh: CMD: a password in the store URL is
 * refused...` on stderr (never the URL) and returns 64 (MESH_EXIT_USAGE).
 * Every command that takes a store URL (or MESH_STORE) asks this first. */
int mesh_cli_store_url_refused(const char *cmd, const char *url);
/* The CLI's mesh_job_opts.on_store_wait (arg: the store's URL as given,
 * which never holds a password): says on stderr when the job store's
 * database stops answering (and the outage budget), while it does not
 * (at 10 s, 30 s, then each minute: for how long, how much longer), and
 * when it answers again or the budget ran out.  Stops the wait when a
 * run was told to stop (mesh_exec_stop_asked). */
int mesh_cli_store_wait(void *arg, int state, const char *why, uint64_t waited_ns, uint64_t budget_ns);
/* A journal damaged in the records that name its work (mesh_job_why
 * .identity_damaged): says so on stderr -- no repair keeps them, move it away to
 * start afresh -- and returns the exit code for rc. */
struct mesh_job_why;
int mesh_cli_identity_damaged(int rc, const char *journal, const struct mesh_job_why *w);
/* True when argv holds -h or --help before any "--". */
int mesh_cli_wants_help(int argc, char **argv);
/* The one rule for the words after an input separator (`:::` of `mesh
 * submit`, `:::` `:::+` `::::` `::::+` of `mesh run`): each is an input,
 * except that a word that is one of the command's own long options
 * (`--NAME` or `--NAME=VALUE`, where is_option(NAME, its length) says so:
 * the command's option table) is far more often a misplaced option than
 * an input, so it is refused.  For the first such word of words[0..n)
 * writes "'WORD' after 'SEP' would be an input, not an option of mesh; put
 * options before WHERE (or '--' before WHERE if it is an input)" into msg[cap] and
 * returns 1; else 0.  A caller whose command line had "--" before WHERE
 * does not ask (every word is an input then, as in GNU parallel). */
int mesh_cli_option_input(char *const *words, size_t n, const char *sep, const char *where,
			  int (*is_option)(const char *name, size_t len), char *msg, size_t cap);

#endif
