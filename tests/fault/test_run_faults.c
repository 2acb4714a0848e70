/* `mesh run` meeting a failing disk (MESH_FAULT, base/io.h): it stops with
 * exit 114 (mesh run's 74) and a clear message, reports nothing done that is not durable,
 * and a later run on a healthy disk completes the job. */
#include "runner/t.h"

#include <stdlib.h>

#define MESH t_bin("mesh")

static void fault_then_heal(const char *fault, const char *extra)
{
	char out[4096];
	int rc = t_sh(out, sizeof out, 1, "MESH_FAULT=%s %s run -j2 %s --journal f.log --chunks 40 -- true", fault,
		      MESH, extra);
	EXPECT_EQ(rc, 114);
	EXPECT_CONTAINS(out, "mesh: ");
	EXPECT_TRUE(strstr(out, "complete: 40/40") == NULL);
	rc = t_sh(out, sizeof out, 1, "%s run -v -j2 %s --journal f.log --chunks 40 -- true", MESH, extra);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "complete: 40/40 done");
	rc = t_sh(out, sizeof out, 1, "%s job check f.log", MESH);
	EXPECT_EQ(rc, 0);
}

TEST(run_fsync_eio_stops_with_74_then_resumes)
{
	fault_then_heal("fsync:EIO:4:sticky", "");
}

TEST(run_write_enospc_stops_with_74_then_resumes)
{
	fault_then_heal("write:ENOSPC:6:sticky", "");
}

TEST(run_results_fsync_failure_stops_with_74)
{
	fault_then_heal("fsync:EIO:8:sticky", "--results res");
	char out[64];
	/* every chunk's results are whole after the healthy run */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "cat res/*/status | grep -c 'exit 0'"), 0);
	EXPECT_EQ(atoi(out), 40);
}

/* The results files are written through the seam: a full disk met while
 * writing a chunk's stdout stops the run with 114 (74 + 40), and no chunk is DONE
 * without its whole stdout; a rerun completes the rest. */
TEST(run_results_write_enospc_never_done_without_output)
{
	char out[4096];
	int rc = t_sh(out, sizeof out, 1,
		      "MESH_FAULT=write:ENOSPC:30:sticky %s run -j2 --results res --journal w.log --chunks 40 -- "
		      "echo hello",
		      MESH);
	EXPECT_EQ(rc, 114); /* mesh run's I/O error: 74 + 40 */
	rc = t_sh(out, sizeof out, 1, "%s run -v -j2 --results res --journal w.log --chunks 40 -- echo hello", MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "complete: 40/40 done");
	/* every chunk's stdout is whole */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "cat res/*/stdout | grep -c '^hello [0-9]*$'"), 0);
	EXPECT_EQ(atoi(out), 40);
}
