/* NVIDIA's management library (NVML), loaded at run time.
 *
 * meshd links nothing of NVIDIA's: mesh_nvml_open dlopen()s
 * libnvidia-ml.so.1 (or the file named by $MESH_NVML_LIB; "none" there
 * means no NVML) and looks up the few calls used below.  The types of that
 * ABI are declared in nvml.c from NVIDIA's documentation (no NVIDIA header
 * is in the tree); tests load tests/gpu/fake_nvml.c through the same seam.
 *
 * Caller protocol:
 *   1. mesh_nvml_open(NULL, &n, &why)   -- MESH_E_NOGPU: no library, no GPU
 *   2. mesh_nvml_count / _gpu / _procs from any thread (NVML is thread-safe)
 *   3. mesh_nvml_close(n) */
#ifndef MESH_GPU_NVML_H
#define MESH_GPU_NVML_H

#include <stddef.h>
#include <stdint.h>

#define MESH_NVML_ENV "MESH_NVML_LIB"
#define MESH_NVML_DEFAULT "libnvidia-ml.so.1"
/* A process's memory that NVML could not tell (no permission, MIG). */
#define MESH_NVML_UNKNOWN UINT64_MAX

struct mesh_nvml;

struct mesh_nvml_gpu {
	unsigned index;		  /* NVML's index */
	char name[96], uuid[96];  /* "NVIDIA H200", "GPU-8c1e..." */
	uint64_t total, used, free; /* bytes */
};

struct mesh_nvml_proc {
	uint32_t pid;	/* as NVML sees it (meshd's pid namespace when it is the host's) */
	uint64_t used;	/* bytes, or MESH_NVML_UNKNOWN */
	int mps;	/* listed as a client of an MPS server */
};

/* path NULL: $MESH_NVML_LIB, else MESH_NVML_DEFAULT.  0; or MESH_E_NOGPU
 * with *why (malloc'd, when why is not NULL) saying what is missing (the
 * library, a symbol, nvmlInit failed, no GPU); -ENOMEM. */
int mesh_nvml_open(const char *path, struct mesh_nvml **out, char **why);
/* nvmlShutdown and dlclose.  NULL is fine. */
void mesh_nvml_close(struct mesh_nvml *n);
/* The library's path as opened. */
const char *mesh_nvml_path(const struct mesh_nvml *n);

/* The number of GPUs (found at open).  */
unsigned mesh_nvml_count(const struct mesh_nvml *n);
/* GPU i: name, UUID and memory now.  0 or -EIO (NVML failed; *g zeroed
 * except index). */
int mesh_nvml_gpu(struct mesh_nvml *n, unsigned i, struct mesh_nvml_gpu *g);
/* The processes holding a context on GPU i now: its compute processes and
 * (where the library has the call) its MPS clients, each pid once.  *out
 * is malloc'd (NULL when none), *nout its length.  0, -EIO or -ENOMEM. */
int mesh_nvml_procs(struct mesh_nvml *n, unsigned i, struct mesh_nvml_proc **out, size_t *nout);

#endif
