/* Clocks: monotonic for durations and deadlines inside a process, wall
 * (realtime) for anything written to disk or shared between processes. */
#ifndef MESH_BASE_CLOCK_H
#define MESH_BASE_CLOCK_H

#include <stdint.h>

uint64_t mesh_mono_ns(void);
uint64_t mesh_wall_ns(void);
/* Sleeps ns nanoseconds, resuming after signals. */
void mesh_sleep_ns(uint64_t ns);

#define MESH_NS_PER_MS 1000000ull
#define MESH_NS_PER_S 1000000000ull

#endif
