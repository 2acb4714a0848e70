#include "meshd/api/api_gpu.h"

static json_t *ms_or_null(int64_t ns)
{
	return ns >= 0 ? json_integer(ns / 1000000) : json_null();
}

json_t *meshd__gpu_ps_json(const struct meshd_ps *ps)
{
	json_t *devs = json_array();
	for (unsigned i = 0; devs && i < ps->ngpus; i++) {
		const struct mesh_gpu_dev *d = &ps->gpus[i];
		json_array_append_new(devs, json_pack("{s:I, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "index",
						      (json_int_t)d->nv.index, "name", d->nv.name, "uuid", d->nv.uuid, "total",
						      (json_int_t)d->nv.total, "used", (json_int_t)d->nv.used, "free",
						      (json_int_t)d->nv.free, "reserved", (json_int_t)d->reserved, "others",
						      (json_int_t)d->others, "workers", (json_int_t)d->workers, "draining",
						      (json_int_t)d->draining));
	}
	if (!devs)
		return NULL;
	json_t *mps = ps->gpu_mps ? json_pack("{s:s, s:s}", "daemon", ps->gpu_mps, "pipe_dir",
					      ps->gpu_mps_dir ? ps->gpu_mps_dir : "")
				  : json_null();
	return json_pack("{s:s, s:o, s:o, s:o}", "access", ps->gpu_access ? ps->gpu_access : "none", "none",
			 ps->gpu_none ? json_string(ps->gpu_none) : json_null(), "devices", devs, "mps",
			 mps ? mps : json_null());
}

json_t *meshd__gpu_worker_json(const struct meshd_worker_info *wi)
{
	const struct mesh_gpu_use *u = &wi->gpu;
	if (u->state == MESH_GPU_NONE_ && wi->gpu_last_free_ns < 0)
		return NULL;
	json_t *gpus = json_array();
	for (unsigned i = 0; gpus && i < 64; i++)
		if (u->gpus >> i & 1)
			json_array_append_new(gpus, json_integer(i));
	if (!gpus)
		return NULL;
	return json_pack("{s:s, s:o, s:I, s:I, s:I, s:o, s:o}", "state", mesh_gpu_state_name(u->state), "gpus", gpus,
			 "vram", (json_int_t)u->vram, "vram_peak", (json_int_t)u->peak, "vram_reserved",
			 (json_int_t)u->reserved, "time_to_free_ms", ms_or_null(u->time_to_free_ns),
			 "last_time_to_free_ms", ms_or_null(wi->gpu_last_free_ns));
}
