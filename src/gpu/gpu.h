/* GPU accounting and placement for meshd: which GPUs there are, how much
 * memory each has free, which worker holds how much, where a new GPU
 * worker fits, and when a dead worker's memory is really back.
 *
 * Everything comes from NVML (gpu/nvml.h), loaded at run time; without it
 * there is no struct mesh_gpu ("gpu: none").  A worker is a process group:
 * NVML's processes are matched to it by their process group (read from
 * /proc), and the pids once matched are remembered, so a process that died
 * but that NVML still lists is still the worker's.
 *
 * A placement is a reservation: the worker's `vram` on each of its GPUs
 * counts as used from placement on, less what NVML already shows its group
 * holding there.  When the worker's process dies (a pidfd, watched by the
 * ledger's own thread), the reservation drains: it counts until NVML lists
 * no process of its group on any of its GPUs, and the time from the death
 * to then is its time_to_free.  One still listed after the grace is named
 * (an event) and stops blocking new placements; what NVML says it holds
 * still counts as used.  Processes NVML lists that are not ours count as
 * used too; one listed but dead when the ledger starts (a worker of a meshd
 * that was killed) drains like a worker.
 *
 * Threads: every function is thread-safe.  The library never logs: what
 * happened (memory back, a holder past the grace, leftovers at start) is
 * queued as events for the caller (mesh_gpu_next_event).
 *
 * Caller protocol:
 *   1. mesh_gpu_new(&g, &cfg, &why)  -- MESH_E_NOGPU: no NVML or no GPU
 *   2. per spawn of a GPU worker: mesh_gpu_settle (waits out draining
 *      memory, may block), mesh_gpu_place (CUDA_VISIBLE_DEVICES for it),
 *      the spawn, then mesh_gpu_bind(pid) -- or mesh_gpu_cancel if the
 *      spawn failed
 *   3. mesh_gpu_devices / mesh_gpu_use for ps; mesh_gpu_next_event to log
 *   4. mesh_gpu_free(g) */
#ifndef MESH_GPU_GPU_H
#define MESH_GPU_GPU_H

#include "gpu/nvml.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The most GPUs meshd manages, and that one worker may ask for. */
#define MESH_GPU_MAX 64u
#define MESH_GPU_PER_WORKER_MAX 16u
#define MESH_GPU_GRACE_NS (10ull * 1000000000ull)

struct mesh_gpu;

struct mesh_gpu_cfg {
	const char *nvml_path; /* NULL: $MESH_NVML_LIB, else libnvidia-ml.so.1 */
	uint64_t grace_ns;     /* a dead worker's memory is back within this, or it is named; 0 = MESH_GPU_GRACE_NS */
	uint64_t poll_ns;      /* NVML is read this often while memory drains; 0 = 10 ms */
};

/* 0; MESH_E_NOGPU with *why (malloc'd) saying why there is no GPU access;
 * -ENOMEM, or -errno when the ledger's thread cannot start. */
int mesh_gpu_new(struct mesh_gpu **out, const struct mesh_gpu_cfg *cfg, char **why);
/* Stops the thread, closes NVML.  NULL is fine. */
void mesh_gpu_free(struct mesh_gpu *g);
unsigned mesh_gpu_count(const struct mesh_gpu *g);

/* At load: could ngpus GPUs each with vram bytes exist here at all (the
 * count, each GPU's total)?  0 or MESH_E_NOGPU with *err. */
int mesh_gpu_check(struct mesh_gpu *g, const char *name, unsigned ngpus, uint64_t vram, char **err);

/* Waits until no reservation drains (a dead worker's memory not yet back
 * and not past its grace), at most timeout_ns.  0 or MESH_E_TIMEOUT. */
int mesh_gpu_settle(struct mesh_gpu *g, uint64_t timeout_ns);

/* Reserves ngpus GPUs with vram bytes free on each (0: no amount; the
 * GPUs with the most free memory are taken) for owner (a name for
 * messages, "echo#0").  *id names the reservation; *visible (malloc'd) is
 * the CUDA_VISIBLE_DEVICES value (UUIDs, comma-separated).  0, or
 * MESH_E_NOGPU with *err saying what each GPU has free and who holds it;
 * -ENOMEM. */
int mesh_gpu_place(struct mesh_gpu *g, const char *owner, unsigned ngpus, uint64_t vram, uint64_t *id, char **visible,
		   char **err);
/* The reservation's worker is process pid (its group's leader): its death
 * starts the drain.  0, or -errno when it cannot be watched (then it
 * drains now). */
int mesh_gpu_bind(struct mesh_gpu *g, uint64_t id, pid_t pid);
/* The spawn failed: the reservation is dropped. */
void mesh_gpu_cancel(struct mesh_gpu *g, uint64_t id);

/* A reservation, as ps shows it. */
enum mesh_gpu_state {
	MESH_GPU_NONE_,	    /* no such reservation (forgotten) */
	MESH_GPU_PLACED,    /* reserved, its process not bound yet */
	MESH_GPU_LIVE,	    /* its process runs */
	MESH_GPU_DRAINING,  /* its process died; NVML still lists its group */
	MESH_GPU_STUCK,	    /* draining past the grace */
	MESH_GPU_FREED,	    /* NVML lists none of its group: the memory is back */
};
const char *mesh_gpu_state_name(enum mesh_gpu_state s);

struct mesh_gpu_use {
	enum mesh_gpu_state state;
	uint64_t gpus;		 /* bit i: NVML GPU i */
	uint64_t vram;		 /* bytes NVML lists its group holding now */
	uint64_t peak;		 /* the most it was seen holding */
	uint64_t reserved;	 /* the vram it asked for, per GPU */
	int64_t time_to_free_ns; /* death to memory back; -1 until FREED */
	pid_t pid;
};
/* 0 or MESH_E_NOTFOUND (the last 256 ended reservations are kept). */
int mesh_gpu_use(struct mesh_gpu *g, uint64_t id, struct mesh_gpu_use *out);

struct mesh_gpu_dev {
	struct mesh_nvml_gpu nv;   /* index, name, uuid, total/used/free as NVML says */
	uint64_t reserved;	   /* placed but not yet in use (counted as used for placement) */
	uint64_t others;	   /* what processes that are no worker of ours hold */
	unsigned workers, draining;
};
/* Every GPU now (NVML read now).  *out malloc'd.  0, -ENOMEM, -EIO. */
int mesh_gpu_devices(struct mesh_gpu *g, struct mesh_gpu_dev **out, unsigned *n);

/* Under MPS: is a process of pid's group listed by NVML as an MPS client
 * on some GPU?  0, or MESH_E_REFUSED with *err. */
int mesh_gpu_mps_client(struct mesh_gpu *g, pid_t pid, char **err);

/* The oldest event not yet taken (malloc'd, one line), or NULL. */
char *mesh_gpu_next_event(struct mesh_gpu *g);

#endif
