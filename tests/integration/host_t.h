/* Helpers shared by the tests that host tests-workers/host_worker through a
 * catalog of their own (test_host*.c, test_core_heal.c, test_host_cycles.c):
 * a catalog entry, and a host with an instance of one of its programs,
 * warmed.
 * Header-only (static inline). */
#ifndef MESH_TESTS_HOST_T_H
#define MESH_TESTS_HOST_T_H

#include "base/clock.h"
#include "base/err.h"
#include "host/host.h"
#include "host/image.h"
#include "runner/t.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Program name in the catalog "cat" (logs: "logs"): cat/<triple>/<name>, a
 * link to host_worker, and cat/<name>.toml: name, the native backend, then
 * tail (more manifest lines: args, [env], ...). */
static inline void host_t_program(const char *name, const char *tail)
{
	char path[512], m[4096];
	mkdir("cat", 0755);
	mkdir("logs", 0755);
	snprintf(path, sizeof path, "cat/%s", mesh_target_triple());
	mkdir(path, 0755);
	snprintf(path, sizeof path, "cat/%s/%s", mesh_target_triple(), name);
	unlink(path);
	if (symlink(t_bin("tests-workers/host_worker"), path) != 0)
		FAIL("symlink: %s", strerror(errno));
	snprintf(m, sizeof m, "name = \"%s\"\nbackends = [\"native\"]\n%s", name, tail);
	snprintf(path, sizeof path, "cat/%s.toml", name);
	t_write_file(path, m);
}

/* A host, the image of one program of "cat", and an instance of it. */
struct host_t_fx {
	struct mesh_host *h;
	struct mesh_image img;
	struct mesh_instance *w;
};

/* f: a host with cfg, program name of "cat" prepared for it, an instance. */
static inline void host_t_open(const struct mesh_host_cfg *cfg, const char *name, struct host_t_fx *f)
{
	char *err = NULL;
	if (mesh_host_new(&f->h, cfg, &err))
		FAIL("host: %s", err);
	struct mesh_limits_caps caps = *mesh_host_caps(f->h);
	if (mesh_image_prepare("cat", name, &caps, MESH_GPU_NONE, &f->img, &err))
		FAIL("prepare: %s", err);
	ASSERT_EQ(mesh_instance_new(f->h, &f->img, &f->w), 0);
}

static inline void host_t_close(struct host_t_fx *f)
{
	mesh_host_free(f->h);
	mesh_image_release(&f->img);
}

/* f's instance warmed and up (idle or running) within 20 s. */
static inline void host_t_warm(struct host_t_fx *f)
{
	char *err = NULL;
	int rc = mesh_instance_warm(f->w, &err);
	if (rc)
		FAIL("warm: %s", err);
	rc = mesh_instance_wait(f->w, 1u << MESH_IS_IDLE | 1u << MESH_IS_RUNNING, 20 * MESH_NS_PER_S, &err);
	if (rc)
		FAIL("wait ready: %s (%s)", err, mesh_strerror(rc));
}

#endif
