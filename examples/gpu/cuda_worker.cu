/* A CUDA worker for meshd (libmeshworker): at setup it allocates its
 * "model" in GPU memory -- argv[1] bytes ("1GiB", "512MiB", "1048576";
 * default 256MiB) -- and fills it; then each request runs a real kernel:
 *
 *   "spin <ms>"  the GPU busy-waits <ms> milliseconds; replies "spun <ms>"
 *   "crash"      dies of SIGSEGV while its memory is allocated
 *   "vram"       replies the model's size in bytes
 *   anything else: out[i] = in[i] + model[i % size] (the model holds 1s,
 *                so each byte comes back plus one), computed on the GPU
 *
 * Built by `make` when nvcc is found (build/examples/gpu/cuda_worker); the
 * CUDA runtime is linked statically, so it needs only the driver
 * (libcuda.so.1) where it runs.  Not run on a GPU by this tree's tests. */
#include <mesh/worker.h>

#include <cuda_runtime.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct model {
	unsigned char *w; /* device: the model */
	size_t size;
	unsigned char *in, *out; /* device: one request's bytes */
	size_t cap;
	double clock_khz;
};

__global__ void add_model(const unsigned char *in, unsigned char *out, size_t n, const unsigned char *w, size_t wn)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		out[i] = (unsigned char)(in[i] + w[i % wn]);
}

__global__ void spin(long long cycles)
{
	long long start = clock64();
	while (clock64() - start < cycles)
		;
}

static size_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	size_t mul = 1;
	switch (*end) {
	case 'K': case 'k': mul = 1ull << 10; break;
	case 'M': case 'm': mul = 1ull << 20; break;
	case 'G': case 'g': mul = 1ull << 30; break;
	case 'T': case 't': mul = 1ull << 40; break;
	}
	return v > 0 ? (size_t)(v * (double)mul) : 0;
}

static int fail(void *reply, size_t cap, size_t *len, const char *what, cudaError_t e)
{
	int n = snprintf((char *)reply, cap, "%s: %s", what, cudaGetErrorString(e));
	*len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap;
	return -1;
}

static int handle(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *reply_len)
{
	struct model *m = (struct model *)ctx;
	cudaError_t e;
	if (n == 5 && memcmp(req, "crash", 5) == 0) {
		fprintf(stderr, "cuda_worker: crashing with %zu bytes of GPU memory held\n", m->size);
		signal(SIGSEGV, SIG_DFL);
		raise(SIGSEGV);
	}
	if (n == 4 && memcmp(req, "vram", 4) == 0) {
		*reply_len = (size_t)snprintf((char *)reply, cap, "%zu", m->size);
		return 0;
	}
	if (n > 5 && n < 32 && memcmp(req, "spin ", 5) == 0) {
		char num[32];
		memcpy(num, (const char *)req + 5, n - 5);
		num[n - 5] = 0;
		long ms = atol(num);
		spin<<<1, 1>>>((long long)(m->clock_khz * (double)ms));
		if ((e = cudaDeviceSynchronize()) != cudaSuccess)
			return fail(reply, cap, reply_len, "spin", e);
		*reply_len = (size_t)snprintf((char *)reply, cap, "spun %ld", ms);
		return 0;
	}
	if (n > cap)
		return -1;
	if (n > m->cap) {
		cudaFree(m->in);
		cudaFree(m->out);
		m->in = m->out = NULL;
		m->cap = 0;
		if ((e = cudaMalloc(&m->in, n)) != cudaSuccess || (e = cudaMalloc(&m->out, n)) != cudaSuccess)
			return fail(reply, cap, reply_len, "cudaMalloc", e);
		m->cap = n;
	}
	if (n) {
		if ((e = cudaMemcpy(m->in, req, n, cudaMemcpyHostToDevice)) != cudaSuccess)
			return fail(reply, cap, reply_len, "cudaMemcpy in", e);
		unsigned blocks = (unsigned)((n + 255) / 256 < 1024 ? (n + 255) / 256 : 1024);
		add_model<<<blocks, 256>>>(m->in, m->out, n, m->w, m->size);
		if ((e = cudaGetLastError()) != cudaSuccess)
			return fail(reply, cap, reply_len, "kernel", e);
		if ((e = cudaMemcpy(reply, m->out, n, cudaMemcpyDeviceToHost)) != cudaSuccess)
			return fail(reply, cap, reply_len, "cudaMemcpy out", e);
	}
	*reply_len = n;
	return 0;
}

int main(int argc, char **argv)
{
	struct mesh_worker *w;
	int rc = mesh_worker_open(&w);
	if (rc < 0) {
		fprintf(stderr, "cuda_worker: %s (start me from meshd)\n", mesh_worker_strerror(rc));
		return 1;
	}
	struct model m;
	memset(&m, 0, sizeof m);
	m.size = parse_size(argc > 1 ? argv[1] : "256MiB");
	if (!m.size) {
		fprintf(stderr, "cuda_worker: bad size '%s'\n", argv[1]);
		return 2;
	}
	cudaError_t e;
	int dev = 0, khz = 0;
	if ((e = cudaMalloc(&m.w, m.size)) != cudaSuccess || (e = cudaMemset(m.w, 1, m.size)) != cudaSuccess ||
	    (e = cudaDeviceSynchronize()) != cudaSuccess || (e = cudaGetDevice(&dev)) != cudaSuccess) {
		fprintf(stderr, "cuda_worker: cannot hold %zu bytes on the GPU: %s\n", m.size, cudaGetErrorString(e));
		return 1;
	}
	if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev) != cudaSuccess || khz <= 0)
		khz = 1500000; /* ~1.5 GHz when the attribute is not given (it is deprecated in CUDA 13) */
	m.clock_khz = khz;
	cudaDeviceProp p;
	if (cudaGetDeviceProperties(&p, dev) == cudaSuccess)
		printf("cuda_worker: %zu bytes held on %s (CUDA_VISIBLE_DEVICES=%s)\n", m.size, p.name,
		       getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "");
	if ((rc = mesh_worker_ready(w)) == 0)
		rc = mesh_worker_serve(w, handle, &m);
	if (rc < 0)
		fprintf(stderr, "cuda_worker: %s\n", mesh_worker_strerror(rc));
	cudaFree(m.w);
	cudaFree(m.in);
	cudaFree(m.out);
	mesh_worker_close(w);
	return rc < 0 ? 1 : 0;
}
