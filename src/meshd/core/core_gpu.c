#include "meshd/core/core_gpu.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "host/mps.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The MPS control daemon for G->mps_dir, found or started. */
static int mps_up(struct meshd__gpu *G, const char *logs, char **err)
{
	char abs[PATH_MAX];
	const char *ld = getenv("CUDA_MPS_LOG_DIRECTORY");
	char *log = ld && *ld ? strdup(ld) : mesh_strf("%s/mps", realpath(logs ? logs : ".", abs) ? abs : logs);
	if (!log)
		return -ENOMEM;
	int rc = mesh_mps_daemon_up(G->mps_dir, log, 5 * MESH_NS_PER_S, &G->mps_started, err);
	if (!rc)
		mesh_info("mps: %s the control daemon (pipe directory %s%s%s)", G->mps_started ? "started" : "found",
			  G->mps_dir, G->mps_started ? ", log directory " : "", G->mps_started ? log : "");
	free(log);
	return rc;
}

int meshd__gpu_new(struct meshd__gpu *G, const char *isolation, const char *logs, char **err)
{
	memset(G, 0, sizeof *G);
	int mps = isolation && strcmp(isolation, "mps") == 0;
	const char *gr = getenv("MESH_GPU_GRACE_MS");
	G->grace_ns = gr && atoll(gr) > 0 ? (uint64_t)atoll(gr) * MESH_NS_PER_MS : MESH_GPU_GRACE_NS;
	struct mesh_gpu_cfg cfg = {.grace_ns = G->grace_ns};
	int rc = mesh_gpu_new(&G->g, &cfg, &G->none);
	if (rc && rc != MESH_E_NOGPU)
		return rc;
	if (rc)
		mesh_info("gpu: none (%s)", G->none ? G->none : "?");
	struct mesh_gpu_dev *d = NULL;
	unsigned n = 0;
	if (G->g && mesh_gpu_devices(G->g, &d, &n) == 0)
		for (unsigned k = 0; k < n; k++)
			mesh_info("gpu %u: %s %s total=%llu used=%llu free=%llu", k, d[k].nv.name, d[k].nv.uuid,
				  (unsigned long long)d[k].nv.total, (unsigned long long)d[k].nv.used,
				  (unsigned long long)d[k].nv.free);
	free(d);
	G->access = mps ? MESH_GPU_MPS : G->g ? MESH_GPU_CUDA : MESH_GPU_NONE;
	if (mps) {
		const char *pd = getenv("CUDA_MPS_PIPE_DIRECTORY");
		if (!(G->mps_dir = strdup(pd && *pd ? pd : "/tmp/nvidia-mps")))
			return -ENOMEM;
		if ((rc = mps_up(G, logs, err)))
			return rc;
	}
	meshd__gpu_log(G);
	return 0;
}

void meshd__gpu_free(struct meshd__gpu *G)
{
	char *e = NULL;
	/* One meshd found is someone else's: only ours is stopped. */
	if (G->mps_started && mesh_mps_daemon_quit(G->mps_dir, &e))
		mesh_warn("mps: cannot stop the control daemon meshd started (pipe directory %s): %s", G->mps_dir, e);
	else if (G->mps_started)
		mesh_info("mps: stopped the control daemon meshd started (pipe directory %s)", G->mps_dir);
	free(e);
	mesh_gpu_free(G->g);
	free(G->none);
	free(G->mps_dir);
	memset(G, 0, sizeof *G);
}

/* MPS with NVML: the weak check (meshd's pipe directory, the control
 * socket), then NVML must list the worker as an MPS client. */
static int mps_check(void *ctx, pid_t pid, char **err)
{
	struct meshd__gpu *G = ctx;
	int rc = mesh_mps_check_client(G->mps_dir, pid, err);
	return rc || !G->g ? rc : mesh_gpu_mps_client(G->g, pid, err);
}

static int mps_stop(void *ctx, pid_t pid, char **err)
{
	struct meshd__gpu *G = ctx;
	return mesh_mps_terminate_client(G->mps_dir, pid, err);
}

void meshd__gpu_host_cfg(struct meshd__gpu *G, struct mesh_host_cfg *hc)
{
	hc->gpu = G->access;
	hc->mps_pipe_dir = G->mps_dir;
	if (G->access == MESH_GPU_MPS) {
		hc->check_gpu_client = mps_check;
		hc->stop_gpu_client = mps_stop;
		hc->gpu_ctx = G;
	}
}

int meshd__gpu_load(struct meshd__gpu *G, const struct mesh_image *img, int rc, char **err)
{
	if (rc == MESH_E_NOGPU && G->none && err && *err) {
		char *m = mesh_strf("%s (gpu: none: %s)", *err, G->none);
		if (m) {
			free(*err);
			*err = m;
		}
		return rc;
	}
	if (rc || !G->g || img->m.device != MESH_DEVICE_GPU)
		return rc;
	return mesh_gpu_check(G->g, img->name, img->m.gpus, img->m.vram, err);
}

int meshd__gpu_before_spawn(struct meshd__gpu *G, pthread_mutex_t *mu, int may_wait, const struct mesh_image *img,
			    unsigned widx, struct mesh_instance *inst, uint64_t *res, char **err)
{
	*res = 0;
	if (!G->g || img->m.device != MESH_DEVICE_GPU)
		return 0;
	if (may_wait && mesh_gpu_settle(G->g, 0) == MESH_E_TIMEOUT) {
		/* A dead worker's memory is still coming back: no new worker
		 * starts beside it until it is (or its grace passes). */
		pthread_mutex_unlock(mu);
		mesh_gpu_settle(G->g, G->grace_ns + MESH_NS_PER_S);
		pthread_mutex_lock(mu);
		return 1;
	}
	char owner[96], *vis = NULL;
	snprintf(owner, sizeof owner, "'%s' worker %u", img->name, widx);
	int rc = mesh_gpu_place(G->g, owner, img->m.gpus, img->m.vram, res, &vis, err);
	if (rc)
		return rc;
	char *kv = mesh_strf("CUDA_VISIBLE_DEVICES=%s", vis);
	free(vis);
	if (!kv || (rc = mesh_instance_set_env(inst, kv))) {
		free(kv);
		mesh_gpu_cancel(G->g, *res);
		*res = 0;
		return -ENOMEM;
	}
	free(kv);
	return 0;
}

void meshd__gpu_settle(struct meshd__gpu *G, const struct mesh_image *img)
{
	if (G->g && img->m.device == MESH_DEVICE_GPU)
		mesh_gpu_settle(G->g, G->grace_ns + MESH_NS_PER_S);
}

void meshd__gpu_after_spawn(struct meshd__gpu *G, uint64_t res, struct mesh_instance *inst, int rc)
{
	if (!G->g || !res)
		return;
	pid_t pid = rc == 0 ? mesh_instance_pid(inst) : 0;
	if (pid > 0)
		mesh_gpu_bind(G->g, res, pid);
	else
		mesh_gpu_cancel(G->g, res);
}

void meshd__gpu_worker(struct meshd__gpu *G, uint64_t res, uint64_t prev, struct meshd_worker_info *wi)
{
	memset(&wi->gpu, 0, sizeof wi->gpu);
	wi->gpu.time_to_free_ns = -1;
	wi->gpu_last_free_ns = -1;
	if (!G->g)
		return;
	struct mesh_gpu_use u;
	if (res)
		mesh_gpu_use(G->g, res, &wi->gpu);
	if (prev && mesh_gpu_use(G->g, prev, &u) == 0)
		wi->gpu_last_free_ns = u.time_to_free_ns;
	if (wi->gpu.state == MESH_GPU_FREED)
		wi->gpu_last_free_ns = wi->gpu.time_to_free_ns;
}

int meshd__gpu_ps(struct meshd__gpu *G, struct meshd_ps *ps)
{
	ps->gpu_access = mesh_gpu_access_name(G->access);
	ps->gpu_mps = G->access != MESH_GPU_MPS ? NULL : G->mps_started ? "started" : "found";
	ps->gpu_mps_dir = G->mps_dir;
	if (!G->g)
		return G->none && !(ps->gpu_none = strdup(G->none)) ? -ENOMEM : 0;
	int rc = mesh_gpu_devices(G->g, &ps->gpus, &ps->ngpus);
	return rc == -EIO ? 0 : rc;
}

void meshd__gpu_log(struct meshd__gpu *G)
{
	char *e;
	while (G->g && (e = mesh_gpu_next_event(G->g))) {
		if (strstr(e, "still holds") || strstr(e, "is gone but"))
			mesh_warn("%s", e);
		else
			mesh_info("%s", e);
		free(e);
	}
}
