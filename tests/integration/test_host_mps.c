/* GPU workers under MPS, against a stand-in of nvidia-cuda-mps-control (no
 * GPU here): the pipe directory reaches the worker, the client check runs
 * after ready, and a stop asks the tool to terminate the client first. */
#include "base/clock.h"
#include "base/err.h"
#include "host/host.h"
#include "host/mps.h"
#include "integration/host_t.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S(x) ((uint64_t)(x) * MESH_NS_PER_S)

/* NVIDIA's tool as far as meshd uses it: `-d` starts a "daemon" (a
 * sleep, its pid in daemon.pid) and makes the control socket; a command
 * on stdin needs that socket ("Cannot find MPS control daemon process"
 * else); `quit` ends the daemon.  Every use is logged to tool.log, beside
 * the pipe directory.  $FAKE_MPS_FAIL: `-d` fails. */
static const char FAKE_TOOL[] =
	"#!/bin/sh\n"
	"d=\"$CUDA_MPS_PIPE_DIRECTORY\"\n"
	"if [ \"$1\" = -d ]; then\n"
	"  echo \"$d -d $CUDA_MPS_LOG_DIRECTORY\" >> \"$d/../tool.log\"\n"
	"  if [ -n \"$FAKE_MPS_FAIL\" ]; then echo 'An instance of this daemon is already running' >&2; exit 1; fi\n"
	"  sleep 30 </dev/null >/dev/null 2>&1 &\n"
	"  echo $! > \"$d/../daemon.pid\"\n"
	"  : > \"$d/control\"\n"
	"  exit 0\n"
	"fi\n"
	"read cmd\n"
	"echo \"$d $cmd\" >> \"$d/../tool.log\"\n"
	"[ -e \"$d/control\" ] || { echo 'Cannot find MPS control daemon process' >&2; exit 1; }\n"
	"case \"$cmd\" in\n"
	"  get_server_list) echo 4242;;\n"
	"  quit) rm -f \"$d/control\"; kill \"$(cat \"$d/../daemon.pid\")\";;\n"
	"esac\n";

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
	/* No daemon: the tool fails. */
	EXPECT_EQ(mesh_mps_control(mps, "get_server_list", &out, S(5)), MESH_E_REFUSED);
	EXPECT_TRUE(out == NULL);
	char ctl[PATH_MAX + 16];
	snprintf(ctl, sizeof ctl, "%s/control", mps);
	t_write_file(ctl, "");
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

/* ---- meshd finds or starts the control daemon (meshd__gpu_new) ---- */

static char out[1 << 16];

/* In meshd's child: no NVML (MESH_NVML_LIB=none). */
static void no_nvml(void)
{
	setenv("MESH_NVML_LIB", "none", 1);
}

static int pid_alive(void *arg)
{
	return kill(*(pid_t *)arg, 0) == 0;
}

static int pid_gone(void *arg)
{
	return !pid_alive(arg);
}

TEST(mps_meshd_finds_a_running_control_daemon_and_leaves_it)
{
	char mps[PATH_MAX], ctl[PATH_MAX + 16];
	setup(mps, sizeof mps);
	setenv("CUDA_MPS_PIPE_DIRECTORY", mps, 1);
	snprintf(ctl, sizeof ctl, "%s/control", mps);
	t_write_file(ctl, "");
	pid_t pid = meshd_t_start(.catalog = "cat", .sock = "meshd.sock", .args = "--isolation mps", .child = no_nvml,
				  .wait_accept = 1);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s' ps --socket meshd.sock", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "mps: control daemon found by meshd, pipe directory ");
	EXPECT_CONTAINS(out, mps);
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s' ps --json --socket meshd.sock", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "\"daemon\":\"found\"");
	EXPECT_EQ(meshd_t_stop(pid), 0);
	/* Asked once whether it answers; never started, never quit. */
	char *log = t_read_file("tool.log", NULL), want[PATH_MAX + 64];
	snprintf(want, sizeof want, "%s get_server_list\n", mps);
	EXPECT_CONTAINS(log, want);
	EXPECT_TRUE(log && !strstr(log, " -d") && !strstr(log, "quit"));
	free(log);
	EXPECT_EQ(access(ctl, F_OK), 0);
}

TEST(mps_meshd_starts_the_control_daemon_and_quits_it_at_exit)
{
	char mps[PATH_MAX], want[2 * PATH_MAX + 64], cwd[PATH_MAX - 64];
	setup(mps, sizeof mps);
	setenv("CUDA_MPS_PIPE_DIRECTORY", mps, 1);
	unsetenv("CUDA_MPS_LOG_DIRECTORY");
	rmdir(mps); /* meshd makes it */
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	pid_t pid = meshd_t_start(.catalog = "cat", .sock = "meshd.sock", .args = "--isolation mps", .child = no_nvml,
				  .wait_accept = 1);
	char *e = t_read_file("meshd.err", NULL);
	EXPECT_CONTAINS(e, "mps: started the control daemon");
	free(e);
	pid_t daemon = 0;
	char *dp = t_read_file("daemon.pid", NULL);
	ASSERT_TRUE(dp != NULL);
	daemon = (pid_t)atoi(dp);
	free(dp);
	ASSERT_TRUE(daemon > 0 && pid_alive(&daemon));
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s' ps --socket meshd.sock", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "mps: control daemon started by meshd");
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s' ps --json --socket meshd.sock", t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "\"daemon\":\"started\"");
	EXPECT_EQ(meshd_t_stop(pid), 0);
	char *log = t_read_file("tool.log", NULL);
	/* Started with both directories (the log one under --logs), then quit. */
	snprintf(want, sizeof want, "%s -d %s/logs/mps\n", mps, cwd);
	EXPECT_CONTAINS(log, want);
	snprintf(want, sizeof want, "%s quit\n", mps);
	EXPECT_CONTAINS(log, want);
	free(log);
	EXPECT_TRUE(t_wait_for(pid_gone, &daemon, 5000));
	e = t_read_file("meshd.err", NULL);
	EXPECT_CONTAINS(e, "mps: stopped the control daemon meshd started");
	free(e);
}

TEST(mps_meshd_without_a_control_daemon_does_not_start)
{
	char mps[PATH_MAX];
	setup(mps, sizeof mps);
	/* The tool fails to start one: exit 81, its words in the error. */
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "MESH_NVML_LIB=none FAKE_MPS_FAIL=1 CUDA_MPS_PIPE_DIRECTORY='%s' '%s' --catalog cat --logs logs "
		       "--socket meshd.sock --isolation mps",
		       mps, t_bin("meshd")),
		  81);
	EXPECT_CONTAINS(out, "cannot start: --isolation mps: nvidia-cuda-mps-control -d (pipe directory");
	EXPECT_CONTAINS(out, "failed: exit 1: An instance of this daemon is already running");
	/* No tool at all: exit 81 too. */
	EXPECT_EQ(t_sh(out, sizeof out, 1,
		       "PATH=/usr/bin:/bin MESH_NVML_LIB=none CUDA_MPS_PIPE_DIRECTORY='%s' '%s' --catalog cat --logs logs "
		       "--socket meshd.sock --isolation mps",
		       mps, t_bin("meshd")),
		  81);
	EXPECT_CONTAINS(out, "nvidia-cuda-mps-control is not in PATH");
	EXPECT_EQ(access("meshd.sock", F_OK), -1);
}
