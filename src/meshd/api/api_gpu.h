/* The GPU parts of meshd's ps answer as JSON (meshd/api/api.c renders the
 * rest).  Each returns a new reference, or NULL when there is nothing to
 * say (a worker that is no GPU worker) or no memory. */
#ifndef MESH_MESHD_API_API_GPU_H
#define MESH_MESHD_API_API_GPU_H

#include "meshd/core/ops.h"

#include <jansson.h>

/* {"access": "cuda", "nvml": "none: why" | "loaded", "devices": [{index,
 * name, uuid, total, used, free, reserved, others, workers, draining}]} */
json_t *meshd__gpu_ps_json(const struct meshd_ps *ps);
/* {"state", "gpus": [0, ...], "vram", "vram_peak", "vram_reserved",
 * "time_to_free_ms" (this process's, once its memory is back), "last_time_to_free_ms"} */
json_t *meshd__gpu_worker_json(const struct meshd_worker_info *wi);

#endif
