#include "gpu/nvml.h"

#include "base/buf.h"
#include "base/err.h"

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* NVML's ABI, as NVIDIA documents it (nvml.h, API version 12). */
typedef int nvml_ret;
typedef struct nvml_dev *nvml_dev;
enum { NVML_OK = 0, NVML_INSUFFICIENT_SIZE = 7 };
struct nvml_memory { /* nvmlMemory_t: the order is total, free, used */
	unsigned long long total, free, used;
};
struct nvml_proc_v1 { /* nvmlProcessInfo_v1_t: the unsuffixed calls */
	unsigned int pid;
	unsigned long long used;
};
struct nvml_proc_v2 { /* nvmlProcessInfo_t = _v2_t: the _v2 and _v3 calls */
	unsigned int pid;
	unsigned long long used;
	unsigned int gpu_instance, compute_instance;
};
_Static_assert(sizeof(struct nvml_proc_v1) == 16, "nvmlProcessInfo_v1_t is 16 bytes");
_Static_assert(sizeof(struct nvml_proc_v2) == 24, "nvmlProcessInfo_v2_t is 24 bytes");
_Static_assert(offsetof(struct nvml_proc_v2, used) == 8, "usedGpuMemory at 8");
_Static_assert(sizeof(struct nvml_memory) == 24, "nvmlMemory_t is 24 bytes");
#define NVML_NAME_LEN 96 /* NVML_DEVICE_NAME_V2_BUFFER_SIZE, _UUID_V2_ too */
#define MAX_GPUS 64

typedef nvml_ret (*procs_fn)(nvml_dev, unsigned int *, void *);

struct mesh_nvml {
	void *dl;
	char *path;
	nvml_ret (*shutdown)(void);
	nvml_ret (*mem)(nvml_dev, struct nvml_memory *);
	nvml_ret (*name)(nvml_dev, char *, unsigned int);
	nvml_ret (*uuid)(nvml_dev, char *, unsigned int);
	procs_fn compute, mps;
	size_t compute_sz, mps_sz; /* the entry size each takes (v1 or v2 layout) */
	unsigned n;
	nvml_dev dev[MAX_GPUS];
};

static void *sym(struct mesh_nvml *n, const char *a, const char *b)
{
	void *f = dlsym(n->dl, a);
	return f || !b ? f : dlsym(n->dl, b);
}

/* The newest of name_v3, name_v2, name that the library has, with the
 * entry size its ABI fills. */
static procs_fn procs_sym(struct mesh_nvml *n, const char *name, size_t *sz)
{
	char s[96];
	static const char *const suffix[] = {"_v3", "_v2", ""};
	for (int i = 0; i < 3; i++) {
		snprintf(s, sizeof s, "%s%s", name, suffix[i]);
		void *f = dlsym(n->dl, s);
		if (f) {
			*sz = i < 2 ? sizeof(struct nvml_proc_v2) : sizeof(struct nvml_proc_v1);
			return (procs_fn)f;
		}
	}
	return NULL;
}

static const char *nvml_err(struct mesh_nvml *n, nvml_ret r)
{
	const char *(*es)(nvml_ret) = (const char *(*)(nvml_ret))dlsym(n->dl, "nvmlErrorString");
	const char *s = es ? es(r) : NULL;
	return s ? s : "error";
}

int mesh_nvml_open(const char *path, struct mesh_nvml **out, char **why)
{
	*out = NULL;
	if (why)
		*why = NULL;
	if (!path)
		path = getenv(MESH_NVML_ENV);
	if (!path || !*path)
		path = MESH_NVML_DEFAULT;
	if (strcmp(path, "none") == 0)
		return mesh_errf(why, MESH_E_NOGPU, "NVML disabled (%s=none)", MESH_NVML_ENV);
	struct mesh_nvml *n = calloc(1, sizeof *n);
	if (!n || !(n->path = strdup(path))) {
		free(n);
		return -ENOMEM;
	}
	int rc = 0;
	if (!(n->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
		const char *e = dlerror();
		rc = mesh_errf(why, MESH_E_NOGPU, "cannot load %s: %s", path, e ? e : "?");
		goto bad;
	}
	nvml_ret (*init)(void) = (nvml_ret(*)(void))sym(n, "nvmlInit_v2", "nvmlInit");
	nvml_ret (*count)(unsigned int *) = (nvml_ret(*)(unsigned int *))sym(n, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
	nvml_ret (*handle)(unsigned int, nvml_dev *) =
		(nvml_ret(*)(unsigned int, nvml_dev *))sym(n, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
	n->shutdown = (nvml_ret(*)(void))sym(n, "nvmlShutdown", NULL);
	n->mem = (nvml_ret(*)(nvml_dev, struct nvml_memory *))sym(n, "nvmlDeviceGetMemoryInfo", NULL);
	n->name = (nvml_ret(*)(nvml_dev, char *, unsigned int))sym(n, "nvmlDeviceGetName", NULL);
	n->uuid = (nvml_ret(*)(nvml_dev, char *, unsigned int))sym(n, "nvmlDeviceGetUUID", NULL);
	n->compute = procs_sym(n, "nvmlDeviceGetComputeRunningProcesses", &n->compute_sz);
	n->mps = procs_sym(n, "nvmlDeviceGetMPSComputeRunningProcesses", &n->mps_sz); /* optional */
	if (!init || !count || !handle || !n->shutdown || !n->mem || !n->name || !n->uuid || !n->compute) {
		rc = mesh_errf(why, MESH_E_NOGPU, "%s lacks a call meshd needs (nvmlInit_v2, nvmlDeviceGetCount_v2, ...)",
			       path);
		goto bad;
	}
	nvml_ret r = init();
	if (r != NVML_OK) {
		rc = mesh_errf(why, MESH_E_NOGPU, "nvmlInit failed: %s (%d)", nvml_err(n, r), r);
		goto bad;
	}
	unsigned c = 0;
	if ((r = count(&c)) != NVML_OK || c == 0) {
		rc = r != NVML_OK ? mesh_errf(why, MESH_E_NOGPU, "nvmlDeviceGetCount failed: %s (%d)", nvml_err(n, r), r)
				  : mesh_errf(why, MESH_E_NOGPU, "NVML sees no GPU");
		n->shutdown();
		goto bad;
	}
	if (c > MAX_GPUS)
		c = MAX_GPUS;
	for (unsigned i = 0; i < c; i++)
		if ((r = handle(i, &n->dev[i])) != NVML_OK) {
			rc = mesh_errf(why, MESH_E_NOGPU, "nvmlDeviceGetHandleByIndex(%u) failed: %s (%d)", i,
				       nvml_err(n, r), r);
			n->shutdown();
			goto bad;
		}
	n->n = c;
	*out = n;
	return 0;
bad:
	if (n->dl)
		dlclose(n->dl);
	free(n->path);
	free(n);
	return rc;
}

void mesh_nvml_close(struct mesh_nvml *n)
{
	if (!n)
		return;
	n->shutdown();
	dlclose(n->dl);
	free(n->path);
	free(n);
}

const char *mesh_nvml_path(const struct mesh_nvml *n)
{
	return n->path;
}

unsigned mesh_nvml_count(const struct mesh_nvml *n)
{
	return n->n;
}

int mesh_nvml_gpu(struct mesh_nvml *n, unsigned i, struct mesh_nvml_gpu *g)
{
	memset(g, 0, sizeof *g);
	g->index = i;
	if (i >= n->n)
		return -EINVAL;
	struct nvml_memory m;
	if (n->mem(n->dev[i], &m) != NVML_OK)
		return -EIO;
	g->total = m.total, g->used = m.used, g->free = m.free;
	if (n->name(n->dev[i], g->name, sizeof g->name) != NVML_OK)
		snprintf(g->name, sizeof g->name, "GPU %u", i);
	if (n->uuid(n->dev[i], g->uuid, sizeof g->uuid) != NVML_OK)
		g->uuid[0] = 0;
	g->name[sizeof g->name - 1] = g->uuid[sizeof g->uuid - 1] = 0;
	return 0;
}

/* Appends fn's list for dev to *v (each pid once), marked mps. */
static int add_procs(nvml_dev dev, procs_fn fn, size_t sz, int mps, struct mesh_nvml_proc **v, size_t *nv)
{
	unsigned cap = 64, cnt;
	void *buf = NULL;
	nvml_ret r;
	for (int tries = 0;; tries++) {
		void *nb = realloc(buf, (size_t)cap * sz);
		if (!nb) {
			free(buf);
			return -ENOMEM;
		}
		buf = nb;
		cnt = cap;
		r = fn(dev, &cnt, buf);
		if (r != NVML_INSUFFICIENT_SIZE || tries == 3)
			break;
		cap = cnt + 16; /* processes come and go between the calls */
	}
	if (r != NVML_OK) {
		free(buf);
		return -EIO;
	}
	int rc = 0;
	for (unsigned k = 0; k < cnt && k < cap && !rc; k++) {
		const char *e = (const char *)buf + (size_t)k * sz;
		uint32_t pid;
		uint64_t used;
		if (sz == sizeof(struct nvml_proc_v2)) {
			const struct nvml_proc_v2 *p = (const void *)e;
			pid = p->pid, used = p->used;
		} else {
			const struct nvml_proc_v1 *p = (const void *)e;
			pid = p->pid, used = p->used;
		}
		size_t j = 0;
		while (j < *nv && (*v)[j].pid != pid)
			j++;
		if (j < *nv) {
			(*v)[j].mps |= mps;
			continue;
		}
		struct mesh_nvml_proc *nn = realloc(*v, (*nv + 1) * sizeof **v);
		if (!nn) {
			rc = -ENOMEM;
			break;
		}
		*v = nn;
		/* NVML_VALUE_NOT_AVAILABLE is all ones. */
		nn[(*nv)++] = (struct mesh_nvml_proc){.pid = pid, .used = used == ~0ull ? MESH_NVML_UNKNOWN : used, .mps = mps};
	}
	free(buf);
	return rc;
}

int mesh_nvml_procs(struct mesh_nvml *n, unsigned i, struct mesh_nvml_proc **out, size_t *nout)
{
	*out = NULL;
	*nout = 0;
	if (i >= n->n)
		return -EINVAL;
	int rc = add_procs(n->dev[i], n->compute, n->compute_sz, 0, out, nout);
	/* Not every GPU or driver answers the MPS call: its failure is no error. */
	if (!rc && n->mps && add_procs(n->dev[i], n->mps, n->mps_sz, 1, out, nout) == -ENOMEM)
		rc = -ENOMEM;
	if (rc) {
		free(*out);
		*out = NULL;
		*nout = 0;
	}
	return rc;
}
