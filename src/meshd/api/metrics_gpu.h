/* The GPU families of GET /metrics (docs/metrics.md): memory per GPU, VRAM
 * per worker, reservations by state, time_to_free.  Kept apart from
 * meshd/api/metrics.c, which calls meshd__gpu_metrics once after its own
 * families.  Without NVML ("gpu: none") nothing is written: the families
 * are left out, not shown as zeros. */
#ifndef MESH_MESHD_API_METRICS_GPU_H
#define MESH_MESHD_API_METRICS_GPU_H

#include "base/buf.h"
#include "meshd/core/ops.h"

/* Appends the GPU families for ps (a meshd_op_ps snapshot) to out.  A pure
 * function of ps.  0 or -ENOMEM. */
int meshd__gpu_metrics_render(const struct meshd_ps *ps, struct mesh_buf *out);
/* meshd_op_ps, then the render.  0 or -ENOMEM. */
int meshd__gpu_metrics(struct meshd_core *d, struct mesh_buf *out);

#endif
