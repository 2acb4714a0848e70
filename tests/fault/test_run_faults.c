/* `mesh run` meeting a failing disk (MESH_FAULT, base/io.h): it stops with
 * exit 114 (mesh run's 74) and a clear message, reports nothing done that is not durable,
 * and a later run on a healthy disk completes the job. */
#include "runner/t.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The cids named in "the output of chunk(s) A B ... was written" (a list
 * of up to 64), or -1 entries; how many. */
static int named_repeats(const char *err, int *cids, int cap)
{
	const char *p = err ? strstr(err, "the output of chunk") : NULL;
	int n = 0;
	if (!p)
		return 0;
	p = strchr(p, ' ') + 1;
	p = strchr(p, ' ') + 1;
	p = strchr(p, ' ') + 1; /* past "the output of" */
	p = strchr(p, ' ');	/* past "chunk(s)" */
	while (p && *p == ' ' && p[1] >= '0' && p[1] <= '9' && n < cap) {
		cids[n++] = atoi(p + 1);
		p = strchr(p + 1, ' ');
	}
	return n;
}

/* Output goes out before its DONE is durable (never a DONE without its
 * output), so a journal that fails after a chunk's output went out makes
 * the rerun print that chunk again.  The 114 message names exactly those
 * chunks: after the rerun, each named chunk's line is there twice and
 * every other chunk's once.  (Before: "run stopped (journal 'f.log'):
 * Input/output error" and nothing else; over 15 faulty runs the issue saw
 * 14 outputs twice.) */
TEST(run_journal_failure_names_the_chunks_whose_output_repeats)
{
	static const char *faults[] = {"fsync:EIO:4:sticky", "write:ENOSPC:6:sticky", "fsync:EIO:9", "fsync:EIO:3:sticky"};
	static const char *opts[] = {"-j2", "-j3", "-j4", "-j2 -u"};
	for (size_t f = 0; f < sizeof faults / sizeof faults[0]; f++) {
		char out[4096];
		t_sh(NULL, 0, 0, "rm -f f.log o1 o2 e1");
		int rc = t_sh(out, sizeof out, 0,
			      "MESH_FAULT=%s %s run %s --journal f.log --chunks 60 -- echo x >o1 2>e1; echo $?", faults[f],
			      MESH, opts[f]);
		EXPECT_EQ(rc, 0);
		EXPECT_EQ(atoi(out), 114);
		char *err = t_read_file("e1", NULL);
		int named[64], nn = named_repeats(err, named, 64);
		rc = t_sh(out, sizeof out, 1, "%s run %s --journal f.log --chunks 60 -- echo x >o2", MESH, opts[f]);
		EXPECT_EQ(rc, 0);
		int seen[60] = {0};
		for (int k = 1; k <= 2; k++) {
			char path[8], *s;
			snprintf(path, sizeof path, "o%d", k);
			s = t_read_file(path, NULL);
			for (char *l = s; l && *l;) {
				int c = atoi(l + 2);
				if (c >= 0 && c < 60)
					seen[c]++;
				l = strchr(l, '\n');
				l = l ? l + 1 : NULL;
			}
			free(s);
		}
		int twice = 0;
		for (int c = 0; c < 60; c++) {
			int is_named = 0;
			for (int i = 0; i < nn; i++)
				is_named |= named[i] == c;
			if (seen[c] != 1 + is_named)
				fprintf(stderr, "fault %s: chunk %d printed %d times, named %d; stderr: %s\n", faults[f], c,
					seen[c], is_named, err ? err : "");
			EXPECT_EQ(seen[c], 1 + is_named);
			twice += seen[c] == 2;
		}
		EXPECT_EQ(twice, nn);
		free(err);
	}
}
