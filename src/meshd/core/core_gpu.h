/* meshd's GPU glue: the core's calls into the GPU ledger (gpu/gpu.h), so
 * that core.c keeps only the call sites.
 *
 * Caller protocol (meshd/core/core.c):
 *   1. meshd__gpu_new at start: NVML or "gpu: none"; it picks the GPU access
 *      (cuda with NVML, mps when asked, none) and the MPS hooks
 *   2. meshd__gpu_load after a GPU program's image is prepared
 *   3. around each spawn of a GPU worker (its instance DOWN):
 *      meshd__gpu_before_spawn, the warm/launch, meshd__gpu_after_spawn
 *   4. meshd__gpu_worker / meshd__gpu_ps for ps; meshd__gpu_log each tick
 *   5. meshd__gpu_free after the host is gone */
#ifndef MESH_MESHD_CORE_CORE_GPU_H
#define MESH_MESHD_CORE_CORE_GPU_H

#include "meshd/core/ops.h"
#include "gpu/gpu.h"
#include "host/image.h"

#include <pthread.h>

struct meshd__gpu {
	struct mesh_gpu *g;	/* NULL: gpu: none */
	char *none;		/* why there is no NVML (when g is NULL) */
	enum mesh_gpu_access access;
	char *mps_dir;		/* --isolation mps: CUDA_MPS_PIPE_DIRECTORY */
	int mps_started;	/* meshd started its control daemon (else found it): quit at free */
	uint64_t grace_ns;	/* a dead worker's memory comes back within this */
};

/* isolation: "none" or "mps".  0, -ENOMEM; a missing NVML is no error.
 * mps: the MPS control daemon for the pipe directory is found or started
 * (mesh_mps_daemon_up; its log directory $CUDA_MPS_LOG_DIRECTORY, else
 * <logs>/mps); MESH_E_NOGPU with *err when neither. */
int meshd__gpu_new(struct meshd__gpu *G, const char *isolation, const char *logs, char **err);
/* Quits the MPS control daemon when meshd started it. */
void meshd__gpu_free(struct meshd__gpu *G);
/* The host's MPS hooks and their context for this access. */
void meshd__gpu_host_cfg(struct meshd__gpu *G, struct mesh_host_cfg *hc);
/* An image the core could not prepare with MESH_E_NOGPU: says why there
 * is no GPU (*err grows).  A prepared GPU image: can it ever be placed
 * here?  0 or MESH_E_NOGPU with *err. */
int meshd__gpu_load(struct meshd__gpu *G, const struct mesh_image *img, int rc, char **err);

/* Before inst (DOWN, of img) is spawned; mu (the core's, held) is dropped
 * while memory drains when may_wait: then 1 (look again).  0: placed (*res,
 * its CUDA_VISIBLE_DEVICES set on inst) or not a GPU worker (*res 0);
 * MESH_E_NOGPU with *err: it does not fit. */
int meshd__gpu_before_spawn(struct meshd__gpu *G, pthread_mutex_t *mu, int may_wait, const struct mesh_image *img,
			    unsigned widx, struct mesh_instance *inst, uint64_t *res, char **err);
/* A GPU program's worker may be started soon: waits (at most the grace)
 * while a dead worker's memory is still coming back. */
void meshd__gpu_settle(struct meshd__gpu *G, const struct mesh_image *img);
/* After the spawn (rc its result): the reservation follows its process. */
void meshd__gpu_after_spawn(struct meshd__gpu *G, uint64_t res, struct mesh_instance *inst, int rc);
/* ps: a worker's reservation now (res), or the last one's (prev). */
void meshd__gpu_worker(struct meshd__gpu *G, uint64_t res, uint64_t prev, struct meshd_worker_info *wi);
/* ps: the GPU section.  0 or -ENOMEM. */
int meshd__gpu_ps(struct meshd__gpu *G, struct meshd_ps *ps);
/* The ledger's events, to meshd's log. */
void meshd__gpu_log(struct meshd__gpu *G);

#endif
