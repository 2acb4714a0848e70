/* A fake libnvidia-ml.so.1 for tests: the calls meshd uses, with NVML's
 * ABI, answering from a text file named by $FAKE_NVML_STATE, read again on
 * every call (a test or a test worker edits it while meshd runs):
 *
 *   gpu <total bytes> <used bytes besides the processes> <name...>
 *   proc <gpu index or UUID> <pid> <bytes|?> [linger_ms] [mps]
 *   fail-init
 *
 * GPU i has the UUID GPU-fake-<i>.  A proc line is listed while its pid is
 * alive (not a zombie: a process's GPU memory goes with its files, before
 * it is reaped), and for linger_ms after the fake first finds it gone: a
 * driver still freeing a dead process's memory.  `?` is a size NVML
 * cannot tell.  A GPU's used memory is its base plus its listed processes'.
 * Its own types are declared here from NVIDIA's documentation, apart from
 * src/gpu/nvml.c's, so that one checks the other.  Thread-safe, as NVML is
 * (meshd's GPU watcher and the gateway's tick call it at once): one call
 * at a time, each reading the file into the one table. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

#define OK 0
#define E_UNINIT 1
#define E_ARG 2
#define E_DRIVER 9
#define E_SIZE 7
#define MAXG 16
#define MAXP 256

struct gpu {
	unsigned long long total, base;
	char name[96];
};
struct proc {
	int gpu;
	unsigned pid;
	unsigned long long bytes;
	unsigned linger_ms;
	int mps;
};
static struct gpu gpus[MAXG];
static struct proc procs[MAXP];
static int ngpus, nprocs, fail_init, inited; /* inited: nvmlInit calls not yet shut down */

/* When the fake first found each dead pid gone (ns: whole ms would end a
 * linger up to 1 ms early), for the linger. */
static struct {
	unsigned pid;
	uint64_t at;
} gone[MAXP];
static int ngone;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int gpu_of(const char *s)
{
	if (strncmp(s, "GPU-fake-", 9) == 0)
		s += 9;
	char *end;
	long v = strtol(s, &end, 10);
	return *end || v < 0 || v >= MAXG ? -1 : (int)v;
}

static void load(void)
{
	ngpus = nprocs = fail_init = 0;
	const char *path = getenv("FAKE_NVML_STATE");
	FILE *f = path ? fopen(path, "re") : NULL;
	if (!f)
		return;
	char line[512];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char w[64], g[128], sz[32], extra1[32] = "", extra2[32] = "";
		unsigned long long a, b;
		int off = 0;
		if (sscanf(line, "gpu %llu %llu %n", &a, &b, &off) == 2 && off && ngpus < MAXG) {
			gpus[ngpus].total = a;
			gpus[ngpus].base = b;
			snprintf(gpus[ngpus].name, sizeof gpus[ngpus].name, "%s", line + off);
			ngpus++;
		} else if (nprocs < MAXP &&
			   sscanf(line, "proc %127s %u %31s %31s %31s", g, &procs[nprocs].pid, sz, extra1, extra2) >= 3) {
			struct proc *p = &procs[nprocs];
			p->gpu = gpu_of(g);
			p->bytes = strcmp(sz, "?") == 0 ? ~0ull : strtoull(sz, NULL, 10);
			p->linger_ms = 0;
			p->mps = 0;
			const char *ex[2] = {extra1, extra2};
			for (int i = 0; i < 2; i++) {
				if (strcmp(ex[i], "mps") == 0)
					p->mps = 1;
				else if (*ex[i])
					p->linger_ms = (unsigned)strtoul(ex[i], NULL, 10);
			}
			if (p->gpu >= 0)
				nprocs++;
		} else if (sscanf(line, "%63s", w) == 1 && strcmp(w, "fail-init") == 0) {
			fail_init = 1;
		}
	}
	fclose(f);
}

static int running(unsigned pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%u/stat", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

/* Listed now: alive, or dead for less than its linger. */
static int listed(const struct proc *p)
{
	if (running(p->pid)) {
		for (int i = 0; i < ngone; i++)
			if (gone[i].pid == p->pid)
				gone[i] = gone[--ngone]; /* the pid lives again */
		return 1;
	}
	uint64_t t = now_ns();
	for (int i = 0; i < ngone; i++)
		if (gone[i].pid == p->pid)
			return t - gone[i].at < (uint64_t)p->linger_ms * 1000000ull;
	if (ngone < MAXP) {
		gone[ngone].pid = p->pid;
		gone[ngone++].at = t;
	}
	return p->linger_ms > 0;
}

static int dev_index(nvmlDevice_t d)
{
	intptr_t i = (intptr_t)d - 1;
	return i >= 0 && i < ngpus ? (int)i : -1;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void unlock(int *held)
{
	(void)held;
	pthread_mutex_unlock(&mu);
}

/* The table is this call's until it returns. */
#define LOCKED                                                     \
	pthread_mutex_lock(&mu);                                   \
	__attribute__((cleanup(unlock))) int held_ = 1;            \
	(void)held_

nvmlReturn_t nvmlInit_v2(void)
{
	LOCKED;
	load();
	if (fail_init)
		return E_DRIVER;
	inited++; /* counted, as NVML's: each init undone by one shutdown */
	return OK;
}

nvmlReturn_t nvmlShutdown(void)
{
	LOCKED;
	if (!inited)
		return E_UNINIT;
	inited--;
	return OK;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case OK: return "Success";
	case E_UNINIT: return "Uninitialized";
	case E_ARG: return "Invalid Argument";
	case E_SIZE: return "Insufficient Size";
	case E_DRIVER: return "Driver Not Loaded";
	default: return "Unknown Error";
	}
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	LOCKED;
	if (!inited)
		return E_UNINIT;
	load();
	*n = (unsigned)ngpus;
	return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	LOCKED;
	if (!inited)
		return E_UNINIT;
	load();
	if (i >= (unsigned)ngpus)
		return E_ARG;
	*d = (nvmlDevice_t)(intptr_t)(i + 1);
	return OK;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	LOCKED;
	load();
	int i = dev_index(d);
	if (!inited || i < 0)
		return inited ? E_ARG : E_UNINIT;
	unsigned long long used = gpus[i].base;
	for (int k = 0; k < nprocs; k++)
		if (procs[k].gpu == i && procs[k].bytes != ~0ull && listed(&procs[k]))
			used += procs[k].bytes;
	m->total = gpus[i].total;
	m->used = used < gpus[i].total ? used : gpus[i].total;
	m->free = gpus[i].total - m->used;
	return OK;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len)
{
	LOCKED;
	load();
	int i = dev_index(d);
	if (!inited || i < 0 || !len)
		return E_ARG;
	snprintf(name, len, "%s", gpus[i].name);
	return OK;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len)
{
	LOCKED;
	load();
	int i = dev_index(d);
	if (!inited || i < 0 || !len)
		return E_ARG;
	snprintf(uuid, len, "GPU-fake-%d", i);
	return OK;
}

static nvmlReturn_t list(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *out, int mps)
{
	LOCKED;
	load();
	int i = dev_index(d);
	if (!inited || i < 0)
		return inited ? E_ARG : E_UNINIT;
	unsigned n = 0;
	for (int k = 0; k < nprocs; k++) {
		if (procs[k].gpu != i || procs[k].mps != mps || !listed(&procs[k]))
			continue;
		if (n < *count && out)
			out[n] = (nvmlProcessInfo_t){.pid = procs[k].pid, .usedGpuMemory = procs[k].bytes};
		n++;
	}
	nvmlReturn_t r = n > *count ? E_SIZE : OK;
	*count = n;
	return r;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *out)
{
	return list(d, count, out, 0);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *out)
{
	return list(d, count, out, 1);
}
