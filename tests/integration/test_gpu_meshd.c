/* The real meshd and mesh binaries with GPU programs: the fake NVML loaded
 * through MESH_NVML_LIB, `mesh ps` (text and JSON) showing VRAM per worker
 * and per GPU, time_to_free after a stop, and "gpu: none" without NVML. */
#include "base/clock.h"
#include "gpu/nvml.h"
#include "host/image.h"
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

static int serving(void *arg)
{
	return mesh("ps") == 0;
}

static pid_t meshd(void)
{
	mkdir("run", 0700);
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		execl(t_bin("meshd"), "meshd", "--catalog", "cat", "--logs", "logs", "--socket", "run/meshd.sock", (char *)NULL);
		_exit(127);
	}
	if (!t_wait_for(serving, NULL, 15000))
		FAIL("meshd did not serve");
	return pid;
}

static void stop(pid_t pid)
{
	kill(pid, SIGTERM);
	waitpid(pid, NULL, 0);
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
	pid_t d = meshd();
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
	stop(d);
}

TEST(meshd_gpu_none_in_ps_and_refused_at_load)
{
	setenv(MESH_NVML_ENV, "/nonexistent/libnvidia-ml.so.1", 1);
	program("g", "", "0", "0");
	pid_t d = meshd();
	ASSERT_EQ(mesh("ps"), 0);
	EXPECT_CONTAINS(out, "gpu: none (cannot load /nonexistent/libnvidia-ml.so.1");
	EXPECT_EQ(mesh("load g"), 81); /* MESH_EXIT_NOGPU */
	EXPECT_CONTAINS(out, "gpu: none: cannot load");
	stop(d);
}
