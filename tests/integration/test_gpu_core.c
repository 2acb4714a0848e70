/* meshd's core with GPU programs, NVML being the fake library
 * (tests/gpu/fake_nvml.c) and the workers tests/workers/gpu_worker, which
 * "hold" fake GPU memory: placement, refusal, accounting in ps, and the
 * memory really back before the next worker starts. */
#include "base/clock.h"
#include "base/err.h"
#include "meshd/core/ops.h"
#include "gpu/nvml.h"
#include "host/image.h"
#include "integration/core_t.h"
#include "runner/t.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)
#define GIB (1024ull * 1024 * 1024)

/* A GPU program of gpu_worker: holds `bytes` (linger ms after death). */
static void program(const char *name, const char *bytes, const char *linger, const char *extra)
{
	char path[512], m[1024];
	mkdir("cat", 0755);
	mkdir("logs", 0755);
	snprintf(path, sizeof path, "cat/%s", mesh_target_triple());
	mkdir(path, 0755);
	snprintf(path, sizeof path, "cat/%s/%s", mesh_target_triple(), name);
	if (symlink(t_bin("tests-workers/gpu_worker"), path) != 0)
		FAIL("symlink");
	snprintf(m, sizeof m, "name = \"%s\"\nbackends = [\"native\"]\ndevice = \"gpu\"\nargs = [\"%s\", \"%s\"]\n%s", name,
		 bytes, linger, extra ? extra : "");
	snprintf(path, sizeof path, "cat/%s.toml", name);
	t_write_file(path, m);
}

static void fake_nvml(const char *state)
{
	char cwd[PATH_MAX - 32], p[PATH_MAX];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(p, sizeof p, "%s/nvml.state", cwd);
	t_write_file(p, state);
	setenv("FAKE_NVML_STATE", p, 1);
	setenv(MESH_NVML_ENV, t_bin("tests-gpu/fake_nvml.so"), 1);
}

/* The tests' core: four slots, no isolation. */
static const struct meshd_config GPU_CFG = {.slots = 4, .isolation = "none"};

static char *call(struct meshd_core *d, const char *name, const char *req, int *rc)
{
	void *rep = NULL;
	size_t n = 0;
	char *err = NULL;
	*rc = meshd_op_call(d, name, req, strlen(req), &rep, &n, S(10), &err);
	if (*rc) {
		free(rep);
		return err;
	}
	free(err);
	char *s = strndup(rep, n);
	free(rep);
	return s;
}

/* The first worker of name in ps. */
static struct meshd_worker_info worker(struct meshd_core *d, const char *name, struct meshd_ps *ps)
{
	struct meshd_worker_info wi;
	memset(&wi, 0, sizeof wi);
	ASSERT_EQ(meshd_op_ps(d, ps), 0);
	for (unsigned i = 0; i < ps->nprograms; i++)
		if (strcmp(ps->programs[i].name, name) == 0 && ps->programs[i].nworkers)
			wi = ps->programs[i].workers[0];
	return wi;
}

TEST(core_gpu_none_refuses_at_load_and_says_why)
{
	setenv(MESH_NVML_ENV, "/nonexistent/libnvidia-ml.so.1", 1);
	program("g", "0", "0", NULL);
	struct core_t c;
	core_t_up(&c, GPU_CFG);
	struct meshd_core *d = c.d;
	struct meshd_program_info pi;
	char *err = NULL;
	EXPECT_EQ(meshd_op_load(d, "g", &pi, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "needs a GPU");
	EXPECT_CONTAINS(err, "(gpu: none: cannot load /nonexistent/libnvidia-ml.so.1");
	free(err);
	struct meshd_ps ps;
	ASSERT_EQ(meshd_op_ps(d, &ps), 0);
	EXPECT_STREQ(ps.gpu_access, "none");
	EXPECT_CONTAINS(ps.gpu_none, "cannot load");
	EXPECT_EQ(ps.ngpus, 0);
	meshd_ps_release(&ps);
	core_t_down(&c);
}

TEST(core_gpu_places_accounts_and_refuses)
{
	char st[256];
	snprintf(st, sizeof st, "gpu %llu 0 Fake H200\ngpu %llu 0 Fake H200\n", 80 * GIB, 80 * GIB);
	fake_nvml(st);
	char b30[32], b60[32];
	snprintf(b30, sizeof b30, "%llu", 30 * GIB);
	snprintf(b60, sizeof b60, "%llu", 60 * GIB);
	program("a", b30, "0", "vram = \"30GiB\"\n");
	program("b", b60, "0", "vram = \"60GiB\"\n");
	program("c", b60, "0", "vram = \"60GiB\"\n");
	program("kid", b30, "0", "vram = \"30GiB\"\n");
	program("huge", "0", "0", "vram = \"100GiB\"\n");
	program("many", "0", "0", "gpus = 3\n");
	struct core_t c;
	core_t_up(&c, GPU_CFG);
	struct meshd_core *d = c.d;
	char *err = NULL;
	int rc;
	/* What can never fit is refused at load. */
	struct meshd_program_info pi;
	EXPECT_EQ(meshd_op_load(d, "huge", &pi, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "'huge' asks for 100.0 GiB on each of 1 GPU and the largest GPU here has 80.0 GiB");
	free(err);
	EXPECT_EQ(meshd_op_load(d, "many", &pi, &err), MESH_E_NOGPU);
	EXPECT_CONTAINS(err, "asks for 3 GPUs and this machine has 2");
	free(err);
	/* a: GPU 0; its worker sees it. */
	char *r = call(d, "a", "env", &rc);
	ASSERT_EQ(rc, 0);
	EXPECT_STREQ(r, "GPU-fake-0");
	free(r);
	/* b: 60 GiB do not fit beside a's 30 on GPU 0: GPU 1. */
	r = call(d, "b", "env", &rc);
	ASSERT_EQ(rc, 0);
	EXPECT_STREQ(r, "GPU-fake-1");
	free(r);
	/* c: 60 GiB fit nowhere now: refused, naming who holds what. */
	r = call(d, "c", "env", &rc);
	EXPECT_EQ(rc, MESH_E_NOGPU);
	EXPECT_CONTAINS(r, "cannot place 'c' worker 0: it needs 60.0 GiB free on 1 GPU;");
	EXPECT_CONTAINS(r, "GPU 0 (Fake H200) has 50.0 GiB free of 80.0 GiB ('a' worker 0 30.0 GiB)");
	EXPECT_CONTAINS(r, "GPU 1 (Fake H200) has 20.0 GiB free of 80.0 GiB ('b' worker 0 60.0 GiB)");
	free(r);
	EXPECT_EQ(meshd_op_start(d, "c", NULL, &err), MESH_E_NOGPU);
	free(err);
	/* ps: VRAM per worker and per GPU. */
	struct meshd_ps ps;
	struct meshd_worker_info wi = worker(d, "a", &ps);
	EXPECT_STREQ(ps.gpu_access, "cuda");
	EXPECT_TRUE(ps.gpu_none == NULL);
	ASSERT_EQ(ps.ngpus, 2);
	EXPECT_UEQ(ps.gpus[0].nv.used, 30 * GIB);
	EXPECT_UEQ(ps.gpus[1].nv.used, 60 * GIB);
	EXPECT_EQ(ps.gpus[0].workers, 1);
	EXPECT_EQ(wi.gpu.state, MESH_GPU_LIVE);
	EXPECT_UEQ(wi.gpu.vram, 30 * GIB);
	EXPECT_UEQ(wi.gpu.gpus, 1);
	EXPECT_UEQ(wi.gpu.reserved, 30 * GIB);
	EXPECT_EQ(wi.gpu.pid, wi.st.pid);
	meshd_ps_release(&ps);
	core_t_down(&c);
}

TEST(core_gpu_counts_the_whole_process_group)
{
	char st[256];
	snprintf(st, sizeof st, "gpu %llu 0 G\n", 80 * GIB);
	fake_nvml(st);
	char b[32];
	snprintf(b, sizeof b, "%llu", 7 * GIB);
	program("k", b, "0", "vram = \"10GiB\"\n");
	/* Its child holds the memory: args = [bytes, linger, "child"]. */
	char m[512];
	snprintf(m, sizeof m, "name = \"k\"\nbackends = [\"native\"]\ndevice = \"gpu\"\nargs = [\"%s\", \"0\", \"child\"]\n", b);
	t_write_file("cat/k.toml", m);
	struct core_t c;
	core_t_up(&c, GPU_CFG);
	struct meshd_core *d = c.d;
	int rc;
	char *r = call(d, "k", "x", &rc);
	ASSERT_EQ(rc, 0);
	free(r);
	struct meshd_ps ps;
	struct meshd_worker_info wi = worker(d, "k", &ps);
	EXPECT_UEQ(wi.gpu.vram, 7 * GIB);
	EXPECT_UEQ(ps.gpus[0].others, 0);
	meshd_ps_release(&ps);
	core_t_down(&c);
}

/* REAP/stop and crash: the memory counts until NVML lists none of the
 * worker's group (the fake: 300 ms after it first finds the pid gone), and
 * the next worker on that GPU waits for it.  meshd's time-to-free counts
 * from its own stamp of the death, which can come a little after the
 * fake's (the sampler reads NVML while another thread reaps): so at least
 * 250 ms, as the wait, not 300 (299.9 ms was seen under load). */
TEST(core_gpu_next_worker_waits_for_memory_really_back)
{
	char st[256];
	snprintf(st, sizeof st, "gpu %llu 0 G\n", 80 * GIB);
	fake_nvml(st);
	char b[32];
	snprintf(b, sizeof b, "%llu", 50 * GIB);
	program("m", b, "300", "vram = \"50GiB\"\n");
	program("n", b, "300", "vram = \"50GiB\"\n");
	struct core_t c;
	core_t_up(&c, GPU_CFG);
	struct meshd_core *d = c.d;
	char *err = NULL;
	int rc;
	char *r = call(d, "m", "x", &rc);
	ASSERT_EQ(rc, 0);
	free(r);
	/* m holds 50 of 80: n does not fit beside it. */
	r = call(d, "n", "x", &rc);
	EXPECT_EQ(rc, MESH_E_NOGPU);
	free(r);
	ASSERT_EQ(meshd_op_stop(d, "m", &err), 0);
	uint64_t t0 = t_now_ms();
	r = call(d, "n", "x", &rc);
	uint64_t waited = t_now_ms() - t0;
	ASSERT_EQ(rc, 0);
	free(r);
	EXPECT_GE(waited, 250);
	EXPECT_LT(waited, 3000);
	struct meshd_ps ps;
	struct meshd_worker_info wi = worker(d, "m", &ps);
	EXPECT_EQ(wi.gpu.state, MESH_GPU_FREED);
	EXPECT_GE(wi.gpu.time_to_free_ns, (int64_t)(250 * 1000000ll));
	EXPECT_LT(wi.gpu.time_to_free_ns, (int64_t)(2500 * 1000000ll));
	EXPECT_EQ(wi.gpu_last_free_ns, wi.gpu.time_to_free_ns);
	EXPECT_UEQ(wi.gpu.peak, 50 * GIB);
	meshd_ps_release(&ps);
	/* A crash mid-call: the same. */
	r = call(d, "n", "crash", &rc);
	EXPECT_EQ(rc, MESH_E_CRASHED);
	free(r);
	t0 = t_now_ms();
	r = call(d, "m", "x", &rc);
	waited = t_now_ms() - t0;
	ASSERT_EQ(rc, 0);
	free(r);
	EXPECT_GE(waited, 250);
	wi = worker(d, "n", &ps);
	EXPECT_EQ(wi.gpu.state, MESH_GPU_FREED);
	EXPECT_GE(wi.gpu.time_to_free_ns, (int64_t)(250 * 1000000ll));
	meshd_ps_release(&ps);
	core_t_down(&c);
}

/* meshd restarted after a kill -9: NVML still lists a dead worker's
 * memory (for 400 ms) and a living process that is no worker of ours. */
TEST(core_gpu_restart_does_not_place_on_leftovers)
{
	pid_t dead = fork();
	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	pid_t live = fork();
	if (live == 0) {
		for (;;)
			pause();
	}
	char st[256];
	snprintf(st, sizeof st, "gpu %llu 0 G\nproc 0 %d %llu 400\nproc 0 %d %llu\n", 80 * GIB, (int)dead, 60 * GIB,
		 (int)live, 10 * GIB);
	fake_nvml(st);
	char b[32];
	snprintf(b, sizeof b, "%llu", 50 * GIB);
	program("n", b, "0", "vram = \"50GiB\"\n");
	program("big", b, "0", "vram = \"75GiB\"\n");
	struct core_t c;
	uint64_t t0 = t_now_ms();
	core_t_up(&c, GPU_CFG);
	struct meshd_core *d = c.d;
	char *err = NULL;
	struct mesh_instance_stats s;
	/* Waits for the dead one's memory, not for the living one's. */
	ASSERT_EQ(meshd_op_start(d, "n", &s, &err), 0);
	EXPECT_GE(t_now_ms() - t0, 350);
	ASSERT_EQ(meshd_op_stop(d, "n", &err), 0);
	int rc;
	char *r = call(d, "big", "x", &rc);
	EXPECT_EQ(rc, MESH_E_NOGPU);
	EXPECT_CONTAINS(r, "other processes 10.0 GiB");
	free(r);
	core_t_down(&c);
	kill(live, SIGKILL);
	waitpid(live, NULL, 0);
}

/* --isolation mps with NVML: `ready` counts only from a worker that NVML
 * lists as an MPS client (the fake's "mps" flag); the control socket and
 * the tool are stand-ins. */
TEST(core_gpu_mps_client_check_through_nvml)
{
	char st[256], cwd[PATH_MAX - 64], dir[PATH_MAX], path[PATH_MAX + 16];
	snprintf(st, sizeof st, "gpu %llu 0 G\n", 80 * GIB);
	fake_nvml(st);
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(dir, sizeof dir, "%s/mps", cwd);
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/control", dir);
	t_write_file(path, "");
	setenv("CUDA_MPS_PIPE_DIRECTORY", dir, 1);
	mkdir("bin", 0755);
	t_write_file("bin/nvidia-cuda-mps-control", "#!/bin/sh\nread cmd\necho \"$cmd\" >> \"$CUDA_MPS_PIPE_DIRECTORY/tool.log\"\n");
	chmod("bin/nvidia-cuda-mps-control", 0755);
	snprintf(path, sizeof path, "%s/bin:%s", cwd, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	setenv("PATH", path, 1);
	program("client", "1024", "0", NULL);
	t_write_file("cat/client.toml", "name = \"client\"\nbackends = [\"native\"]\ndevice = \"gpu\"\n"
					"args = [\"1048576\", \"0\", \"mps\"]\n");
	program("plain", "1048576", "0", NULL);
	struct core_t c;
	core_t_up(&c, (struct meshd_config){.slots = 4, .isolation = "mps"});
	struct meshd_core *d = c.d;
	char *err = NULL;
	EXPECT_EQ(meshd_op_start(d, "client", NULL, &err), 0);
	free(err);
	err = NULL;
	EXPECT_EQ(meshd_op_start(d, "plain", NULL, &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "not a client of meshd's MPS server: NVML lists pid");
	EXPECT_CONTAINS(err, "but not as a client of an MPS server");
	free(err);
	core_t_down(&c);
}
