/* A loop that drives many runs on one thread (meshd's jobs): each run is a
 * chunk driver opened with mesh__exec_open (executor.h); the loop takes a
 * turn of a run when one of its fds is ready or its timeout has passed, and
 * one poll waits on the fds of all of them.  What one run's turn does is
 * what mesh__exec_drive's loop does for it alone; a run whose turn waits
 * (a lease on a store out of reach) makes the others on its loop wait too.
 *
 * Threads: the loop's own (mesh_thread_start), which alone calls into its
 * runs; mesh_exec_loop_add from any thread. */
#ifndef MESH_EXEC_LOOP_H
#define MESH_EXEC_LOOP_H

#include "exec/executor.h"

/* Called on the loop's thread once run d is over (mesh__exec_turn said
 * so), d no longer on the loop: the callee closes it (mesh__exec_close,
 * which may block: best on another thread). */
typedef void (*mesh_exec_over_fn)(void *arg, struct mesh__drive *d);

struct mesh_exec_loop;

/* A loop and its thread, named name (at most 15 bytes, for top -H).
 * 0 with *out, or -errno. */
int mesh_exec_loop_new(const char *name, struct mesh_exec_loop **out);
/* Hands run d to l until it is over; then over(arg, d).  0, or -ENOMEM
 * (d is still the caller's). */
int mesh_exec_loop_add(struct mesh_exec_loop *l, struct mesh__drive *d, mesh_exec_over_fn over, void *arg);
/* The runs l drives now and those handed to it (for choosing the least
 * busy of a few loops). */
unsigned mesh_exec_loop_runs(struct mesh_exec_loop *l);
/* Waits until every run handed to l is over, then stops and joins its
 * thread and frees l.  Whoever added the runs ends them first (a cancel):
 * a run that never ends keeps this waiting. */
void mesh_exec_loop_free(struct mesh_exec_loop *l);

#endif
