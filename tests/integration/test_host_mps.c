/* GPU workers under MPS, against a stand-in of nvidia-cuda-mps-control (no
 * GPU here): the pipe directory reaches the worker, the client check runs
 * after ready, and a stop asks the tool to terminate the client first. */
#include "base/clock.h"
#include "base/err.h"
#include "host/host.h"
#include "host/mps.h"
#include "integration/host_t.h"
#include "runner/t.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)

static const char FAKE_TOOL[] =
	"#!/bin/sh\n"
	"read cmd\n"
	"echo \"$CUDA_MPS_PIPE_DIRECTORY $cmd\" >> \"$CUDA_MPS_PIPE_DIRECTORY/../tool.log\"\n"
	"case \"$cmd\" in get_server_list) echo 4242;; esac\n";

static void setup(char *mps, size_t cap)
{
	char cwd[PATH_MAX - 64], path[PATH_MAX];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	mkdir("bin", 0755);
	t_write_file("bin/" MESH_MPS_CONTROL, FAKE_TOOL);
	chmod("bin/" MESH_MPS_CONTROL, 0755);
	snprintf(path, sizeof path, "%s/bin:%s", cwd, getenv("PATH") ? getenv("PATH") : "/usr/bin:/bin");
	setenv("PATH", path, 1);
	snprintf(mps, cap, "%s/mps", cwd);
	mkdir(mps, 0755);
	host_t_program("g", "device = \"gpu\"\nargs = [\"echo\"]\n");
}

TEST(mps_tool_stand_in)
{
	char mps[PATH_MAX], *out = NULL;
	setup(mps, sizeof mps);
	ASSERT_EQ(mesh_mps_control(mps, "get_server_list", &out, S(5)), 0);
	EXPECT_STREQ(out, "4242\n");
	free(out);
}

TEST(mps_gpu_worker_checked_and_terminated_through_the_tool)
{
	char mps[PATH_MAX], *err = NULL;
	setup(mps, sizeof mps);
	struct mesh_host *h;
	struct mesh_host_cfg cfg = {.logs = "logs",
				    .gpu = MESH_GPU_MPS,
				    .mps_pipe_dir = mps,
				    .check_gpu_client = mesh_mps_check_client,
				    .stop_gpu_client = mesh_mps_terminate_client,
				    .gpu_ctx = mps};
	ASSERT_EQ(mesh_host_new(&h, &cfg, &err), 0);
	struct mesh_image img;
	struct mesh_limits_caps caps = *mesh_host_caps(h);
	ASSERT_EQ(mesh_image_prepare("cat", "g", &caps, MESH_GPU_MPS, &img, &err), 0);
	struct mesh_instance *w;
	ASSERT_EQ(mesh_instance_new(h, &img, &w), 0);
	/* No MPS server (no control socket): the check after ready fails it. */
	ASSERT_EQ(mesh_instance_warm(w, &err), 0);
	EXPECT_EQ(mesh_instance_wait(w, 1u << MESH_IS_IDLE, S(20), &err), MESH_E_REFUSED);
	EXPECT_CONTAINS(err, "no MPS control socket");
	free(err);
	/* With one, it passes; the worker got the pipe directory. */
	char ctl[PATH_MAX + 16];
	snprintf(ctl, sizeof ctl, "%s/control", mps);
	t_write_file(ctl, "");
	ASSERT_EQ(mesh_instance_warm(w, &err), 0);
	int rc = mesh_instance_wait(w, 1u << MESH_IS_IDLE, S(20), &err);
	if (rc)
		FAIL("warm: %s", err);
	pid_t pid = mesh_instance_pid(w);
	ASSERT_EQ(mesh_instance_exit(w), 0);
	ASSERT_EQ(mesh_instance_wait(w, 1u << MESH_IS_DOWN, S(10), &err), 0);
	char *log = t_read_file("tool.log", NULL);
	char want[PATH_MAX + 64];
	snprintf(want, sizeof want, "%s terminate_client 4242 %d\n", mps, (int)pid);
	EXPECT_CONTAINS(log, want);
	free(log);
	mesh_host_free(h);
	mesh_image_release(&img);
}
