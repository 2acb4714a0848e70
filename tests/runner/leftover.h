/* What a test starts that outlives its process group.  The runner kills
 * a test's whole group when it ends (a timeout included), but pg_ctl
 * puts the PostgreSQL server in a session of its own and a network
 * namespace is no process at all: a test that timed out or died left
 * them behind, a server and its shared memory for every later test to
 * share the 2 CPUs with.  So whoever makes one notes it in the test's
 * directory, and the runner takes down whatever is still up after the
 * test, however the test ended. */
#ifndef MESH_TEST_LEFTOVER_H
#define MESH_TEST_LEFTOVER_H

#include <sys/types.h>

/* Note kind ("pg": a server's directory, the parent of its data
 * directory; "netns": a namespace's name) in the running test's list
 * (T_DIR, set by the runner; nothing outside the runner). */
void t_leftover_note(const char *kind, const char *what);
/* Runner: take down what the list in dir notes and is still up (a
 * server: SIGQUIT, PostgreSQL's immediate stop, then SIGKILL after 5 s,
 * and its directory removed; a namespace deleted).  The number of
 * things it found still up. */
int t_leftover_reap(const char *dir);
/* The postmaster of the server in pgdir while one runs (its
 * postmaster.pid names it and /proc says it is a postgres), else 0. */
pid_t t_leftover_postmaster(const char *pgdir);

#endif
