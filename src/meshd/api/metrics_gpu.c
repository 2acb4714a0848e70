/* The GPU families of /metrics (meshd/api/metrics_gpu.h). */
#include "meshd/api/metrics_gpu.h"

#include "meshd/api/metrics.h"

#include <errno.h>
#include <stdio.h>

/* name{gpu="0",uuid="GPU-...",name="..."} value */
static void per_gpu(struct meshd_metrics_text *w, const struct meshd_ps *ps, const char *name, const char *help, size_t which)
{
	meshd_metrics_family(w, name, "gauge", help);
	for (unsigned i = 0; i < ps->ngpus; i++) {
		const struct mesh_gpu_dev *d = &ps->gpus[i];
		uint64_t v[] = {d->nv.total, d->nv.used, d->nv.free, d->reserved, d->others};
		meshd_metrics_put(w, "%s{gpu=\"%u\",uuid=\"", name, d->nv.index);
		meshd_metrics_put_label(w, d->nv.uuid);
		meshd_metrics_put(w, "\",name=\"");
		meshd_metrics_put_label(w, d->nv.name);
		meshd_metrics_put(w, "\"} %llu\n", (unsigned long long)v[which]);
	}
}

/* A worker with a GPU reservation now, or a previous one's time_to_free. */
static int gpu_worker(const struct meshd_worker_info *wi)
{
	return wi->gpu.state != MESH_GPU_NONE_ || wi->gpu_last_free_ns >= 0;
}

/* name{program="p",worker="i"} -- the caller puts the value. */
static void open_worker(struct meshd_metrics_text *w, const char *name, const char *prog, unsigned i)
{
	meshd_metrics_put(w, "%s{program=\"", name);
	meshd_metrics_put_label(w, prog);
	meshd_metrics_put(w, "\",worker=\"%u\"} ", i);
}

int meshd__gpu_metrics_render(const struct meshd_ps *ps, struct mesh_buf *out)
{
	struct meshd_metrics_text w = {out, 0};
	if (ps->gpu_none || !ps->ngpus)
		return 0;
	per_gpu(&w, ps, "mesh_gpu_memory_total_bytes", "A GPU's memory, as NVML says.", 0);
	per_gpu(&w, ps, "mesh_gpu_memory_used_bytes", "A GPU's memory in use, as NVML says (every process).", 1);
	per_gpu(&w, ps, "mesh_gpu_memory_free_bytes", "A GPU's memory free, as NVML says.", 2);
	per_gpu(&w, ps, "mesh_gpu_memory_reserved_bytes",
		"Memory placed for workers that have not allocated it yet (counted as used for placement).", 3);
	per_gpu(&w, ps, "mesh_gpu_memory_others_bytes", "Memory held by processes that are no worker of this meshd.", 4);

	/* Reservations by state: what ps's workers hold now. */
	static const enum mesh_gpu_state states[] = {MESH_GPU_PLACED, MESH_GPU_LIVE, MESH_GPU_DRAINING, MESH_GPU_STUCK};
	unsigned count[sizeof states / sizeof states[0]] = {0};
	for (unsigned p = 0; p < ps->nprograms; p++)
		for (unsigned i = 0; i < ps->programs[p].nworkers; i++)
			for (size_t s = 0; s < sizeof states / sizeof states[0]; s++)
				count[s] += ps->programs[p].workers[i].gpu.state == states[s];
	meshd_metrics_family(&w, "mesh_gpu_reservations", "gauge",
	       "GPU reservations of workers, by state: placed (not yet started), live, draining (dead, its memory not yet "
	       "back), stuck (draining past the grace).");
	for (size_t s = 0; s < sizeof states / sizeof states[0]; s++)
		meshd_metrics_put(&w, "mesh_gpu_reservations{state=\"%s\"} %u\n", mesh_gpu_state_name(states[s]), count[s]);

	meshd_metrics_family(&w, "mesh_worker_vram_bytes", "gauge",
	       "GPU memory NVML lists a worker's process group holding, over its GPUs (0 once it is back).");
	for (unsigned p = 0; p < ps->nprograms; p++)
		for (unsigned i = 0; i < ps->programs[p].nworkers; i++)
			if (gpu_worker(&ps->programs[p].workers[i])) {
				open_worker(&w, "mesh_worker_vram_bytes", ps->programs[p].name, i);
				meshd_metrics_put(&w, "%llu\n", (unsigned long long)ps->programs[p].workers[i].gpu.vram);
			}
	meshd_metrics_family(&w, "mesh_worker_vram_reserved_bytes", "gauge", "The vram a worker's manifest asks for on each of its GPUs.");
	for (unsigned p = 0; p < ps->nprograms; p++)
		for (unsigned i = 0; i < ps->programs[p].nworkers; i++)
			if (gpu_worker(&ps->programs[p].workers[i])) {
				open_worker(&w, "mesh_worker_vram_reserved_bytes", ps->programs[p].name, i);
				meshd_metrics_put(&w, "%llu\n", (unsigned long long)ps->programs[p].workers[i].gpu.reserved);
			}
	meshd_metrics_family(&w, "mesh_worker_gpu_time_to_free_seconds", "gauge",
	       "For a worker's last process that exited: from its death until NVML listed none of its group.");
	for (unsigned p = 0; p < ps->nprograms; p++)
		for (unsigned i = 0; i < ps->programs[p].nworkers; i++) {
			int64_t ns = ps->programs[p].workers[i].gpu_last_free_ns;
			if (ns < 0)
				continue;
			open_worker(&w, "mesh_worker_gpu_time_to_free_seconds", ps->programs[p].name, i);
			meshd_metrics_put(&w, "%lld.%09lld\n", (long long)(ns / 1000000000), (long long)(ns % 1000000000));
		}
	return w.rc;
}

int meshd__gpu_metrics(struct meshd_core *d, struct mesh_buf *out)
{
	struct meshd_ps ps;
	int rc = meshd_op_ps(d, &ps);
	if (rc)
		return rc;
	rc = meshd__gpu_metrics_render(&ps, out);
	meshd_ps_release(&ps);
	return rc;
}
