/* Helper threads of a process that handles its signals on one thread (meshd's
 * loop, mesh run's driver): such a thread must never be the one a signal is
 * delivered to. */
#ifndef MESH_BASE_THREAD_H
#define MESH_BASE_THREAD_H

#include <pthread.h>

/* pthread_create with every signal blocked in the new thread (the caller's
 * mask is put back before returning).  0 or -errno. */
int mesh_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
