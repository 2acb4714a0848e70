/* The real meshd and mesh binaries with GPU programs: the fake NVML loaded
 * through MESH_NVML_LIB, `mesh ps` (text and JSON) showing VRAM per worker
 * and per GPU, time_to_free after a stop, and "gpu: none" without NVML. */
#include "base/clock.h"
#include "gpu/nvml.h"
#include "host/image.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GIB (1024ull * 1024 * 1024)

static char out[65536];

static void program(const char *name, const char *toml_extra, const char *bytes, const char *linger)
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
		 bytes, linger, toml_extra);
	snprintf(path, sizeof path, "cat/%s.toml", name);
	t_write_file(path, m);
}

static int mesh(const char *args)
{
	return t_sh(out, sizeof out, 1, "'%s' %s --socket run/meshd.sock", t_bin("mesh"), args);
}

static int freed(void *arg)
{
	return mesh("ps") == 0 && strstr(out, "time_to_free=") != NULL;
}

TEST(meshd_gpu_ps_shows_vram_per_worker_and_per_gpu)
{
	char cwd[PATH_MAX - 32], st[PATH_MAX], b[32];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(st, sizeof st, "%s/nvml.state", cwd);
	char text[128];
	snprintf(text, sizeof text, "gpu %llu 0 Fake H200\n", 80 * GIB);
	t_write_file(st, text);
	setenv("FAKE_NVML_STATE", st, 1);
	setenv(MESH_NVML_ENV, t_bin("tests-gpu/fake_nvml.so"), 1);
	snprintf(b, sizeof b, "%llu", 20 * GIB);
	program("g", "vram = \"20GiB\"\n", b, "200");
	pid_t d = meshd_t_start(.catalog = "cat", .wait_accept = 1);
	ASSERT_EQ(mesh("call g env"), 0);
	EXPECT_CONTAINS(out, "GPU-fake-0");
	ASSERT_EQ(mesh("ps"), 0);
	EXPECT_CONTAINS(out, "gpu 0: Fake H200, used 20.00G of 80.00G, free 60.00G, reserved 0B, 1 workers, 0 draining");
	EXPECT_CONTAINS(out, "vram=20.00G gpus=0 gpu=live");
	ASSERT_EQ(mesh("ps --json"), 0);
	EXPECT_CONTAINS(out, "\"gpu\":{\"access\":\"cuda\",\"none\":null,\"devices\":[{");
	EXPECT_CONTAINS(out, "\"vram\":21474836480");
	/* After a stop: the memory back, and how long it took. */
	ASSERT_EQ(mesh("stop g"), 0);
	ASSERT_TRUE(t_wait_for(freed, NULL, 5000));
	EXPECT_CONTAINS(out, "gpu=freed time_to_free=");
	EXPECT_CONTAINS(out, "used 0B of 80.00G");
	meshd_t_stop(d);
}

TEST(meshd_gpu_none_in_ps_and_refused_at_load)
{
	setenv(MESH_NVML_ENV, "/nonexistent/libnvidia-ml.so.1", 1);
	program("g", "", "0", "0");
	pid_t d = meshd_t_start(.catalog = "cat", .wait_accept = 1);
	ASSERT_EQ(mesh("ps"), 0);
	EXPECT_FALSE(strstr(out, "gpu: none") != NULL); /* a host line for -v */
	ASSERT_EQ(mesh("ps -v"), 0);
	EXPECT_CONTAINS(out, "gpu: none (cannot load /nonexistent/libnvidia-ml.so.1");
	EXPECT_EQ(mesh("load g"), 81); /* MESH_EXIT_NOGPU */
	EXPECT_CONTAINS(out, "gpu: none: cannot load");
	meshd_t_stop(d);
}

/* GET /metrics over the control socket into file; its text (malloc'd). */
static char *metrics(const char *file)
{
	ASSERT_EQ(t_sh(out, sizeof out, 1, "curl -sS -o %s --unix-socket run/meshd.sock http://x/metrics", file), 0);
	char *m = t_read_file(file, NULL);
	ASSERT_TRUE(m != NULL);
	return m;
}

static int metrics_freed(void *arg)
{
	char *m = metrics("m2.txt");
	int ok = strstr(m, "mesh_worker_gpu_time_to_free_seconds{program=\"g\",worker=\"0\"} ") != NULL;
	free(m);
	return ok;
}

TEST(meshd_gpu_metrics_show_vram_per_gpu_and_per_worker)
{
	char cwd[PATH_MAX - 32], st[PATH_MAX], b[32], text[128];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(st, sizeof st, "%s/nvml.state", cwd);
	snprintf(text, sizeof text, "gpu %llu %llu Fake H200\n", 80 * GIB, 1 * GIB);
	t_write_file(st, text);
	setenv("FAKE_NVML_STATE", st, 1);
	setenv(MESH_NVML_ENV, t_bin("tests-gpu/fake_nvml.so"), 1);
	snprintf(b, sizeof b, "%llu", 20 * GIB);
	program("g", "vram = \"20GiB\"\n", b, "100");
	pid_t d = meshd_t_start(.catalog = "cat", .wait_accept = 1);
	ASSERT_EQ(mesh("call g env"), 0);
	char *m = metrics("m1.txt");
	char want[256];
	const char *lb = "{gpu=\"0\",uuid=\"GPU-fake-0\",name=\"Fake H200\"} ";
	snprintf(want, sizeof want, "mesh_gpu_memory_total_bytes%s%llu\n", lb, 80 * GIB);
	EXPECT_CONTAINS(m, want);
	snprintf(want, sizeof want, "mesh_gpu_memory_used_bytes%s%llu\n", lb, 21 * GIB);
	EXPECT_CONTAINS(m, want);
	snprintf(want, sizeof want, "mesh_gpu_memory_free_bytes%s%llu\n", lb, 59 * GIB);
	EXPECT_CONTAINS(m, want);
	snprintf(want, sizeof want, "mesh_gpu_memory_others_bytes%s%llu\n", lb, 0ull);
	EXPECT_CONTAINS(m, want);
	EXPECT_CONTAINS(m, "# TYPE mesh_gpu_memory_reserved_bytes gauge\n");
	snprintf(want, sizeof want, "mesh_worker_vram_bytes{program=\"g\",worker=\"0\"} %llu\n", 20 * GIB);
	EXPECT_CONTAINS(m, want);
	snprintf(want, sizeof want, "mesh_worker_vram_reserved_bytes{program=\"g\",worker=\"0\"} %llu\n", 20 * GIB);
	EXPECT_CONTAINS(m, want);
	EXPECT_CONTAINS(m, "mesh_gpu_reservations{state=\"live\"} 1\n");
	EXPECT_CONTAINS(m, "mesh_gpu_reservations{state=\"draining\"} 0\n");
	EXPECT_TRUE(!strstr(m, "mesh_worker_gpu_time_to_free_seconds{"));
	/* The job/program families are still there: one text. */
	EXPECT_CONTAINS(m, "mesh_calls_total{program=\"g\",result=\"ok\"} 1\n");
	meshd_t_promtool_ok("m1.txt");
	free(m);
	/* Stopped: its memory back, and how long that took. */
	ASSERT_EQ(mesh("stop g"), 0);
	ASSERT_TRUE(t_wait_for(metrics_freed, NULL, 5000));
	m = t_read_file("m2.txt", NULL);
	EXPECT_CONTAINS(m, "mesh_worker_vram_bytes{program=\"g\",worker=\"0\"} 0\n");
	snprintf(want, sizeof want, "mesh_gpu_memory_used_bytes%s%llu\n", lb, 1 * GIB);
	EXPECT_CONTAINS(m, want);
	EXPECT_CONTAINS(m, "mesh_gpu_reservations{state=\"live\"} 0\n");
	const char *t = strstr(m, "mesh_worker_gpu_time_to_free_seconds{program=\"g\",worker=\"0\"} ");
	ASSERT_TRUE(t != NULL);
	/* The fake lists the dead worker 100 ms longer, counted from the
	 * sample that first saw it dead; meshd counts from its own death
	 * stamp, which can come after that sample on a slow machine (a
	 * sanitizer run saw less than 0.1): well over half of it. */
	double ttf = strtod(strchr(t, '}') + 2, NULL);
	if (ttf < 0.1)
		printf("    time to free %.3f s\n", ttf);
	EXPECT_TRUE(ttf >= 0.05 && ttf < 2.5);
	meshd_t_promtool_ok("m2.txt");
	free(m);
	meshd_t_stop(d);
}

TEST(meshd_gpu_metrics_left_out_without_nvml)
{
	setenv(MESH_NVML_ENV, "none", 1);
	mkdir("cat", 0755);
	mkdir("logs", 0755);
	pid_t d = meshd_t_start(.catalog = "cat", .wait_accept = 1);
	char *m = metrics("m.txt");
	EXPECT_CONTAINS(m, "mesh_slots ");
	EXPECT_TRUE(!strstr(m, "mesh_gpu_") && !strstr(m, "mesh_worker_vram"));
	free(m);
	meshd_t_stop(d);
}
