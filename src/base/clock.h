/* Clocks: monotonic for durations and deadlines inside a process, wall
 * (realtime) for anything written to disk or shared between processes, and
 * boot time (CLOCK_BOOTTIME) beside the wall clock where processes of one
 * boot must agree on a deadline even when the wall clock steps. */
#ifndef MESH_BASE_CLOCK_H
#define MESH_BASE_CLOCK_H

#include <stdint.h>

uint64_t mesh_mono_ns(void);
uint64_t mesh_wall_ns(void);
/* Nanoseconds since boot, suspend included: never steps, and every process
 * of one boot (and one time namespace) reads the same value. */
uint64_t mesh_boot_ns(void);
/* now - then, or 0 when then is later (a stamp taken after now was read,
 * on another thread): a duration never wraps to centuries. */
static inline uint64_t mesh_ns_since(uint64_t now, uint64_t then)
{
	return now > then ? now - then : 0;
}
/* Sleeps ns nanoseconds, resuming after signals. */
void mesh_sleep_ns(uint64_t ns);

/* Test seam: simulates a step of the wall clock in this process --
 * mesh_wall_ns() returns the real wall clock plus offset_ns until the next
 * call (0 = no step).  Nothing but tests calls it. */
void mesh__clock_step_wall(int64_t offset_ns);

#define MESH_NS_PER_MS 1000000ull
#define MESH_NS_PER_S 1000000000ull

#endif
