/* Helper threads of a process that handles its signals on one thread (meshd's
 * loop, mesh run's driver): such a thread must never be the one a signal is
 * delivered to. */
#ifndef MESH_BASE_THREAD_H
#define MESH_BASE_THREAD_H

#include <pthread.h>

/* pthread_create with every signal blocked in the new thread (the caller's
 * mask is put back before returning) and under the process's own policy,
 * never the SCHED_BATCH of a background run (MESH_THREAD_BG) that made it.
 * 0 or -errno.  For a thread that lives as long as what owns it (a
 * sampler, a loop); work that ends goes to mesh_thread_run. */
int mesh_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

/* Runs fn(arg) on a parked thread of the process's pool (every signal
 * blocked, as above), or on a new one when none is parked.  A thread parks
 * again after its fn returns; past the kept ones (mesh_thread_keep) it ends
 * after MESH_THREAD_PARK_NS parked, or at once when MESH_THREAD_PARK_MAX
 * are parked.  Each run is joined once (mesh_thread_join), which frees *t.
 * 0 or -errno (-ENOMEM, or pthread_create's).  Every thread of mesh is
 * made here or by mesh_thread_start (docs/threads.md).
 *
 * MESH_THREAD_BG: the run is background work (a sync that waits on the
 * disk): its thread runs under SCHED_BATCH, so that waking it never takes
 * the CPU from the thread that woke it (the kernel does not preempt for
 * such a task; it runs when a CPU is free or at the next tick).
 *
 * Why a pool: on the way to a cold job's first result meshd starts about a
 * dozen threads (its store, driver, completer, the syncs of mesh_sync_many)
 * beside the starting worker.  On the 2-CPU VM a pthread_create there cost
 * its caller 0.08-0.55 ms of CPU (the clone, the stack's mmap), and a
 * thread's end freed its stack (madvise); a parked thread is woken with one
 * futex call (docs/jobs.md, "Threads from a pool"). */
struct mesh_thread;
#define MESH_THREAD_BG 1
/* MESH_THREAD_DETACHED: nobody joins the run (out may be NULL, and is not
 * set): its handle is freed when fn returns.  Its owner counts it if it
 * must wait for it (meshd's API op threads). */
#define MESH_THREAD_DETACHED 2
int mesh_thread_run(struct mesh_thread **t, void *(*fn)(void *), void *arg, int flags);
/* The calling thread back to SCHED_OTHER: a background run whose start was
 * background work and whose rest is not (a job's driver: its files opened
 * while the submit that woke it spawns the job's first worker). */
void mesh_thread_fg(void);
/* Waits until fn has returned; its value in *ret (ret may be NULL). */
void mesh_thread_join(struct mesh_thread *t, void **ret);
/* Keeps n threads parked for good (a daemon's: the first work after a long
 * idle finds them), starting those missing now (they park within
 * microseconds).  0 or -errno. */
int mesh_thread_keep(unsigned n);

/* Threads parked now (tests, diagnostics). */
unsigned mesh_thread_parked(void);

#define MESH_THREAD_PARK_NS (10ull * 1000 * 1000 * 1000)
#define MESH_THREAD_PARK_MAX 64u

#endif
