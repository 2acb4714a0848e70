#include "base/clock.h"

#include <errno.h>
#include <time.h>

static int64_t wall_step_ns;

static uint64_t now(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * MESH_NS_PER_S + (uint64_t)ts.tv_nsec;
}

uint64_t mesh_mono_ns(void)
{
	return now(CLOCK_MONOTONIC);
}

uint64_t mesh_wall_ns(void)
{
	return now(CLOCK_REALTIME) + (uint64_t)wall_step_ns;
}

uint64_t mesh_boot_ns(void)
{
	return now(CLOCK_BOOTTIME);
}

void mesh__clock_step_wall(int64_t offset_ns)
{
	wall_step_ns = offset_ns;
}

void mesh_sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / MESH_NS_PER_S), (long)(ns % MESH_NS_PER_S)};
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}
