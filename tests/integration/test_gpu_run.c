/* tests/gpu/run.sh, the GPU machine's script, where there is no GPU: it
 * says so and exits 77; and its steps run against the fake NVML
 * (RUN_GPU_FAKE=1: the plumbing, nothing measured on a GPU). */
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char out[65536];

static const char *here(void)
{
	static char cwd[4096];
	return getcwd(cwd, sizeof cwd) ? cwd : ".";
}

TEST(gpu_run_sh_without_a_gpu_exits_77)
{
	int rc = t_sh(out, sizeof out, 1,
		      "cd '%s' && MESH_BUILD_DIR=\"$MESH_BUILD\" MESH_NVML_LIB=/nonexistent/libnvidia-ml.so.1 tests/gpu/run.sh '%s/r.md'",
		      t_src("."), here());
	EXPECT_EQ(rc, 77);
	EXPECT_CONTAINS(out, "run.sh: no GPU: meshd says gpu: none (cannot load /nonexistent/libnvidia-ml.so.1");
	char *r = t_read_file("r.md", NULL);
	EXPECT_CONTAINS(r, "# mesh GPU check: NOT RUN");
	free(r);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "'%s/tests/gpu/run.sh'", t_src(".")), 2);
	EXPECT_CONTAINS(out, "usage: tests/gpu/run.sh REPORT");
}

TEST_TIMEOUT(gpu_run_sh_steps_against_the_fake_nvml, 90)
{
	int rc = t_sh(out, sizeof out, 1, "cd '%s' && RUN_GPU_FAKE=1 MESH_BUILD_DIR='%s' tests/gpu/run.sh '%s/r.md'",
		      t_src("."), getenv("MESH_BUILD"), here());
	EXPECT_EQ(rc, 0);
	char *r = t_read_file("r.md", NULL);
	EXPECT_CONTAINS(r, "# mesh GPU check (FAKE NVML: plumbing only, no GPU measured)");
	EXPECT_CONTAINS(r, "| 1000 calls to the CUDA worker | ok | 0 wrong replies;");
	EXPECT_CONTAINS(r, "| CUDA worker: REAP (idle 2 s), VRAM back to baseline | ok |");
	EXPECT_CONTAINS(r, "| CUDA worker crashes mid-call, VRAM back | ok | call answered E_CRASHED");
	EXPECT_CONTAINS(r, "| kill -9 of meshd mid-call, VRAM back (seen by a new meshd) | ok | worker pid");
	free(r);
}
