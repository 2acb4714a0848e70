/* A command on a pseudo-terminal, for tests of what a program draws only
 * on a terminal (progress bars): its stdin, stdout and stderr are the
 * terminal's, the test reads what it wrote. */
#ifndef MESH_TEST_PTY_H
#define MESH_TEST_PTY_H

#include <stddef.h>
#include <sys/types.h>

struct t_pty {
	pid_t pid;
	int master; /* what the command writes; -1 once read to the end */
};

/* Starts `sh -c cmd` (printf-style) on a new terminal of 200 columns.
 * 0, or -1 (errno) when it could not. */
int t_pty_start(struct t_pty *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reads everything the command writes until it exits (into out,
 * NUL-terminated, truncated to cap - 1) and reaps it: its exit status,
 * 128+signal, or -1. */
int t_pty_finish(struct t_pty *p, char *out, size_t cap);

#endif
