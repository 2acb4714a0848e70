/* A prepared program image: everything known before a process exists.
 *
 * Catalog layout (docs/catalog.md):
 *   <catalog>/<name>.toml            the manifest
 *   <catalog>/<triple>/<name>        the executable, triple = mesh_target_triple()
 *
 * Preparing reads the manifest (strict TOML subset), checks the binary (a
 * regular executable file, an ELF for this machine), hashes both, refuses a
 * GPU program the host cannot give a GPU to, and chooses how each limit is
 * enforced (refusing one that cannot be).  It does file I/O: run it off the
 * event loop. */
#ifndef MESH_HOST_IMAGE_H
#define MESH_HOST_IMAGE_H

#include "autoscale/probe.h"
#include "host/limits.h"
#include "host/manifest.h"

#include <stdint.h>
#include <sys/socket.h>

/* How workers that use the GPU (device = "gpu") reach it. */
enum mesh_gpu_access {
	MESH_GPU_NONE,	/* no GPU on this machine: GPU programs refused at load */
	MESH_GPU_BLINK, /* CUDA time-sliced against resident kernels: refused at load */
	MESH_GPU_MPS,	/* CUDA MPS: a client of meshd's MPS server, checked after ready */
	MESH_GPU_METAL, /* Apple's API: does not exist on Linux, refused by name */
	MESH_GPU_CUDA,	/* NVML found GPUs: each worker gets its own by CUDA_VISIBLE_DEVICES */
};

struct mesh_image {
	char *name;
	char *manifest_path, *bin_path;
	char *argv0; /* the worker's argv[0]: bin_path, or <python>/bin/python for a manifest's `python` */
	struct mesh_manifest m;
	uint64_t image_hash; /* FNV-1a 64 over the manifest's bytes, a 0 byte, source.hash */
	uint64_t bin_hash;   /* FNV-1a 64 over the executable */
	uint64_t bin_bytes;
	unsigned enforced;   /* MESH_LIM_* bits: how its limits are enforced */
	struct mesh_run_as run_as; /* the manifest's `user`, resolved (set = 0: none given) */
	/* backend = "http" (mesh_image_http): where its readiness is probed.
	 * naddrs 0: 127.0.0.1 on a free loopback port picked at each spawn
	 * (its command's {port}); else these addresses, tried in turn (mesh
	 * serve's upstream).  probe: the probe's Host, port (with addrs) and
	 * path; probe_model: the model its answer must list (malloc'd; NULL:
	 * any 2xx, or m.probe_status). */
	struct mesh_probe_target probe;
	char *probe_model;
	struct sockaddr_storage addrs[8];
	socklen_t lens[8];
	unsigned naddrs;
	char *log_path; /* its output's file instead of <logs>/<name>.log (malloc'd; NULL: that) */
};

/* The image's identity: FNV-1a 64 over image_hash then bin_hash (8 bytes
 * each, little-endian), so a new binary under the same manifest is a new
 * image too.  meshd shows its first 12 hex digits as `image` and names its
 * kept copies by all 16 (docs/meshd.md, Upgrade and rollback). */
uint64_t mesh_image_id(const struct mesh_image *img);

/* This machine's target triple, e.g. "x86_64-linux-gnu" (arch, kernel, libc). */
const char *mesh_target_triple(void);

/* Prepares <catalog>/<name>.  0, or a negative code with *err a malloc'd
 * message (caller frees): MESH_E_NOTFOUND (no manifest or no binary),
 * MESH_E_PARSE (manifest, "file:line:col: ..."), MESH_E_SCRIPT (the binary
 * is a #! script), MESH_E_ARCH (not an executable for this machine),
 * MESH_E_NOGPU (a GPU program here), MESH_E_LIMITS (a limit that cannot be
 * enforced), MESH_E_REFUSED (the manifest or binary is not a regular file:
 * a FIFO, a directory, a device -- refused without blocking -- or the binary
 * has no x permission, or a `user` that this meshd cannot run workers as:
 * not root), MESH_E_NOTFOUND also for a `user` that does not exist or a
 * `python` that is no virtual environment (no pyvenv.cfg), MESH_E_MISMATCH
 * for a binary that is not the bytes of that environment's bin/python,
 * MESH_E_PATH (a bad name), -errno.  On
 * success release *img with mesh_image_release. */
int mesh_image_prepare(const char *catalog, const char *name, const struct mesh_limits_caps *caps,
		       enum mesh_gpu_access gpu, struct mesh_image *img, char **err);
void mesh_image_release(struct mesh_image *img);

/* An HTTP program's image (backend = "http", docs/gateway.md), from *m,
 * which it takes (*m is zeroed; on an error too, img holds it and its
 * name: release img either way): its [limits] planned against caps, its
 * `user` resolved, its probe from probe_path (default /v1/models listing
 * its first model) on 127.0.0.1.  0, or a code with *err malloc'd:
 * MESH_E_STATE (not an HTTP program), MESH_E_LIMITS (a limit that cannot
 * be enforced here), mesh_limits_run_as's codes, -ENOMEM. */
int mesh_image_http(struct mesh_image *img, struct mesh_manifest *m, const struct mesh_limits_caps *caps, char **err);

const char *mesh_gpu_access_name(enum mesh_gpu_access g);

#endif
