/* The GPU families of /metrics (meshd/api/metrics_gpu.h), fed a ps snapshot
 * by hand: per GPU, per worker, reservations by state, time_to_free, and
 * nothing at all without NVML. */
#include "meshd/api/metrics_gpu.h"
#include "runner/t.h"

#include <stdlib.h>
#include <string.h>

static char *render(const struct meshd_ps *ps)
{
	struct mesh_buf b = MESH_BUF_INIT;
	ASSERT_EQ(meshd__gpu_metrics_render(ps, &b), 0);
	return b.p ? mesh_buf_detach(&b, NULL) : strdup("");
}

TEST(metrics_gpu_families_from_a_snapshot)
{
	struct mesh_gpu_dev g[2] = {{.nv = {.index = 0, .name = "H\"200", .uuid = "GPU-a", .total = 100, .used = 60, .free = 40},
				     .reserved = 5,
				     .others = 7},
				    {.nv = {.index = 1, .name = "H200", .uuid = "GPU-b", .total = 100, .used = 0, .free = 100}}};
	struct meshd_worker_info w[3] = {
		{.gpu = {.state = MESH_GPU_LIVE, .vram = 50, .reserved = 48, .time_to_free_ns = -1}, .gpu_last_free_ns = 1500000000},
		{.gpu = {.state = MESH_GPU_DRAINING, .vram = 3, .time_to_free_ns = -1}, .gpu_last_free_ns = -1},
		{.gpu = {.state = MESH_GPU_NONE_, .time_to_free_ns = -1}, .gpu_last_free_ns = -1}, /* a CPU worker */
	};
	struct meshd_program_info p = {.name = "m", .workers = w, .nworkers = 3};
	struct meshd_ps ps = {.gpu_access = "cuda", .gpus = g, .ngpus = 2, .programs = &p, .nprograms = 1};
	char *t = render(&ps);
	EXPECT_CONTAINS(t, "# TYPE mesh_gpu_memory_total_bytes gauge\n");
	EXPECT_CONTAINS(t, "mesh_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-a\",name=\"H\\\"200\"} 60\n");
	EXPECT_CONTAINS(t, "mesh_gpu_memory_free_bytes{gpu=\"1\",uuid=\"GPU-b\",name=\"H200\"} 100\n");
	EXPECT_CONTAINS(t, "mesh_gpu_memory_reserved_bytes{gpu=\"0\",uuid=\"GPU-a\",name=\"H\\\"200\"} 5\n");
	EXPECT_CONTAINS(t, "mesh_gpu_memory_others_bytes{gpu=\"0\",uuid=\"GPU-a\",name=\"H\\\"200\"} 7\n");
	EXPECT_CONTAINS(t, "mesh_gpu_reservations{state=\"live\"} 1\nmesh_gpu_reservations{state=\"draining\"} 1\n");
	EXPECT_CONTAINS(t, "mesh_worker_vram_bytes{program=\"m\",worker=\"0\"} 50\n");
	EXPECT_CONTAINS(t, "mesh_worker_vram_bytes{program=\"m\",worker=\"1\"} 3\n");
	EXPECT_TRUE(!strstr(t, "worker=\"2\""));
	EXPECT_CONTAINS(t, "mesh_worker_vram_reserved_bytes{program=\"m\",worker=\"0\"} 48\n");
	EXPECT_CONTAINS(t, "mesh_worker_gpu_time_to_free_seconds{program=\"m\",worker=\"0\"} 1.500000000\n");
	EXPECT_TRUE(!strstr(t, "mesh_worker_gpu_time_to_free_seconds{program=\"m\",worker=\"1\"}"));
	free(t);
	/* gpu: none: the families are left out. */
	struct meshd_ps none = {.gpu_access = "none", .gpu_none = "cannot load libnvidia-ml.so.1"};
	t = render(&none);
	EXPECT_STREQ(t, "");
	free(t);
}
