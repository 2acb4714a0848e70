/* `mesh run`'s output: a chunk is DONE only once its output is written in
 * full (a full disk, a closed pipe, a spill file that cannot be written),
 * and GNU parallel's output modes (-k, --tag, --line-buffer, -u, --joblog). */
#include "base/clock.h"
#include "base/err.h"
#include "exec/input.h"
#include "exec/runner.h"
#include "job/job.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MESH t_bin("mesh")

static char lockdir[64];

static struct mesh_job *job_new(uint64_t n, uint32_t max_attempts)
{
	struct mesh_job *j = NULL;
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	snprintf(lockdir, sizeof lockdir, "/tmp/mesh-test-out-%d", (int)getpid());
	if (mesh_job_submit("j.log", n) < 0)
		return NULL;
	o.journal = "j.log";
	o.lockdir = lockdir;
	o.name = "t";
	o.nchunks = n;
	o.max_attempts = max_attempts;
	return mesh_job_open(&j, &o) == 0 ? j : NULL;
}

static void job_done(struct mesh_job *j)
{
	mesh_job_close(j);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}

static uint64_t ndone(struct mesh_job *j)
{
	struct mesh_job_status js;
	return mesh_job_status(j, &js) == 0 ? js.done : UINT64_MAX;
}

static int count_lines(const char *s)
{
	int n = 0;
	for (; s && *s; s++)
		n += *s == '\n';
	return n;
}

/* A tmpfs of 64 KiB at ./mt in a mount namespace of our own: returns 1, or
 * 0 (the machine does not allow one; the caller skips). */
static int can_mount_tmpfs(void)
{
	char out[256];
	return t_sh(out, sizeof out, 1, "unshare -rm sh -c 'mkdir -p mt && mount -t tmpfs -o size=64k tmpfs mt'") == 0;
}

/* A destination that refuses every write: nothing is DONE, the answer says
 * why, and the note names the chunk and the errno. */
TEST(runner_output_write_error_marks_nothing_done)
{
	struct mesh_job *j = job_new(5, 1);
	ASSERT_TRUE(j != NULL);
	int full = open("/dev/full", O_WRONLY | O_CLOEXEC);
	ASSERT_TRUE(full >= 0);
	int notes = open("notes", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char *const argv[] = {"echo", "hello", NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.slots = 2;
	o.out_fd = full;
	o.note_fd = notes;
	o.handle_signals = 0;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_E_OUTPUT);
	EXPECT_UEQ(st.done, 0);
	EXPECT_UEQ(ndone(j), 0);
	close(full);
	close(notes);
	char *n = t_read_file("notes", NULL);
	EXPECT_CONTAINS(n, "cannot write the output of chunk");
	EXPECT_CONTAINS(n, "No space left on device");
	free(n);
	/* a healthy destination then gets all five */
	int fd = open("out", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	o.out_fd = fd;
	o.note_fd = -1;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_COMPLETE);
	close(fd);
	char *s = t_read_file("out", NULL);
	EXPECT_EQ(count_lines(s), 5);
	free(s);
	job_done(j);
}

/* The case on a real full disk: stdout on a 64 KiB tmpfs, 20
 * outputs of 10 kB.  The run stops with 74 and a message; the chunks whose
 * output did not fit are not DONE, so the rerun prints exactly those. */
TEST(run_stdout_on_a_full_disk_stops_and_rerun_prints_the_rest)
{
	if (!can_mount_tmpfs()) {
		printf("  SKIP: cannot mount a tmpfs in a user+mount namespace here; not tested\n");
		return;
	}
	char out[4096];
	/* 10 kB lines: six fit */
	t_write_file("gen.sh", "head -c 9999 /dev/zero | tr '\\0' x; echo\n");
	const char *cmd = "-- sh gen.sh";
	int rc = t_sh(out, sizeof out, 1,
		      "unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs mt && %s run -j2 --journal f.log "
		      "--chunks 20 %s > mt/out.txt; echo rc=$?; wc -l < mt/out.txt'",
		      MESH, cmd);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "rc=74");
	EXPECT_CONTAINS(out, "cannot write the output");
	int first = -1;
	char *w = strstr(out, "rc=74\n");
	if (w)
		first = atoi(w + 6);
	EXPECT_GT(first, 0);
	EXPECT_LT(first, 20);
	rc = t_sh(out, sizeof out, 0, "%s run -j2 --journal f.log --chunks 20 %s 2>/dev/null | wc -l", MESH, cmd);
	EXPECT_EQ(rc, 0);
	/* every output that did not reach the full disk whole comes now */
	EXPECT_GE(atoi(out), 20 - first);
	EXPECT_LE(atoi(out), 20 - first + 1);
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job check f.log", MESH), 0);
}

/* `| head -1` (SIGPIPE ignored by mesh): the run ends, and nothing whose
 * output was not written is DONE -- the rerun prints the rest. */
TEST(run_closed_stdout_ends_the_run_and_keeps_the_rest)
{
	char out[512];
	const char *cmd = "-- sh -c 'echo {}; sleep 0.02'";
	uint64_t t0 = t_now_ms();
	int rc = t_sh(out, sizeof out, 0,
		      "%s run -j2 --journal p.log --chunks 50 %s 2>err | head -1; echo \"${PIPESTATUS:-x}\" >/dev/null",
		      MESH, cmd);
	EXPECT_EQ(rc, 0);
	EXPECT_EQ(count_lines(out), 1);
	EXPECT_LT(t_now_ms() - t0, 5000);
	char *e = t_read_file("err", NULL);
	EXPECT_TRUE(e == NULL || strstr(e, "complete: 50/50") == NULL);
	free(e);
	rc = t_sh(out, sizeof out, 0, "%s run -j2 --journal p.log --chunks 50 %s 2>/dev/null | wc -l", MESH, cmd);
	EXPECT_EQ(rc, 0);
	EXPECT_GE(atoi(out), 40);
}

/* The library's answer to a closed pipe: -EPIPE, nothing DONE. */
TEST(runner_epipe_answer_and_nothing_done)
{
	signal(SIGPIPE, SIG_IGN);
	struct mesh_job *j = job_new(20, 1);
	ASSERT_TRUE(j != NULL);
	int p[2];
	ASSERT_EQ(pipe(p), 0);
	close(p[0]);
	char *const argv[] = {"echo", NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.slots = 4;
	o.out_fd = p[1];
	o.note_fd = -1;
	o.handle_signals = 0;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), -EPIPE);
	EXPECT_UEQ(ndone(j), 0);
	EXPECT_LT(st.started, 20);
	close(p[1]);
	job_done(j);
}

/* The spill file under TMPDIR cannot be written (a 64 KiB tmpfs; outputs
 * of 6.9 MB): the chunk fails with a message naming TMPDIR and the errno,
 * also when the command ignores SIGPIPE -- never DONE with a part. */
TEST(run_spill_failure_fails_the_chunk_naming_tmpdir)
{
	if (!can_mount_tmpfs()) {
		printf("  SKIP: cannot mount a tmpfs in a user+mount namespace here; not tested\n");
		return;
	}
	char out[8192];
	/* ignores a closed pipe and exits 0 whatever became of its output */
	t_write_file("spill.sh", "trap '' PIPE; head -c 6900000 /dev/zero | od -An -v | head -c 6900000; true\n");
	int rc = t_sh(out, sizeof out, 1,
		      "unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs mt && "
		      "TMPDIR=$PWD/mt %s run --journal s.log --retries 1 --chunks 2 -- sh spill.sh | wc -c > n.txt; "
		      "echo rc=$?'",
		      MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "cannot keep the output");
	EXPECT_CONTAINS(out, "/mt");
	EXPECT_CONTAINS(out, "No space left on device");
	EXPECT_TRUE(strstr(out, "signal 13") == NULL);
	EXPECT_CONTAINS(out, "0/2 done");
	/* not a byte of a partial output went to stdout */
	char *n = t_read_file("n.txt", NULL);
	EXPECT_TRUE(n && atoi(n) == 0);
	free(n);
}
