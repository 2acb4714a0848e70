/* `mesh run`'s output: a chunk is DONE only once its output is written in
 * full (a full disk, a closed pipe, a spill file that cannot be written),
 * and GNU parallel's output modes (-k, --tag, --line-buffer, -u, --joblog). */
#include "base/clock.h"
#include "base/err.h"
#include "exec/input.h"
#include "exec/runner.h"
#include "job/job.h"
#include "runner/pty.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
	t_sh(NULL, 0, 0, "rm -rf %s j.log", lockdir);
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
 * outputs of 10 kB.  The run stops with 114 (mesh run's I/O error, 74 + 40) and a message; the chunks whose
 * output did not fit are not DONE, so the rerun prints exactly those. */
TEST(run_stdout_on_a_full_disk_stops_and_rerun_prints_the_rest)
{
	if (!can_mount_tmpfs())
		SKIP("cannot mount a tmpfs in a user+mount namespace here");
	char out[4096];
	/* 10 kB lines: six fit */
	t_write_file("gen.sh", "head -c 9999 /dev/zero | tr '\\0' x; echo\n");
	const char *cmd = "-- sh gen.sh";
	int rc = t_sh(out, sizeof out, 1,
		      "unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs mt && %s run -j2 --journal f.log "
		      "--chunks 20 %s > mt/out.txt; echo rc=$?; wc -l < mt/out.txt'",
		      MESH, cmd);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "rc=114");
	EXPECT_CONTAINS(out, "cannot write the output");
	int first = -1;
	char *w = strstr(out, "rc=114\n");
	if (w)
		first = atoi(w + 7);
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
		      "{ %s run -j2 --journal p.log --chunks 50 %s 2>err; echo $? > rc; } | head -1",
		      MESH, cmd);
	EXPECT_EQ(rc, 0);
	EXPECT_EQ(count_lines(out), 1);
	char *ex = t_read_file("rc", NULL);
	EXPECT_TRUE(ex && atoi(ex) == 141); /* quietly, as GNU parallel dies of SIGPIPE */
	free(ex);
	EXPECT_LT(t_now_ms() - t0, 5000);
	char *e = t_read_file("err", NULL);
	EXPECT_TRUE(e == NULL || strstr(e, "complete: 50/50") == NULL);
	free(e);
	rc = t_sh(out, sizeof out, 0, "%s run -j2 --journal p.log --chunks 50 %s 2>/dev/null | wc -l", MESH, cmd);
	EXPECT_EQ(rc, 0);
	EXPECT_GE(atoi(out), 40);
}

/* The reproduction: `mesh run ... | head -1`, then the same
 * command `> file`.  The chunks the first run wrote into the pipe were
 * DONE though its reader never read them; the file came out short with
 * exit 0.  Now a run whose stdout closed discards its default journal (and
 * says so), so the file gets every line; with an explicit --journal the
 * rerun resumes, as documented, and warns. */
TEST(run_closed_stdout_then_the_same_command_to_a_file_gets_every_line)
{
	char out[512];
	const char *cmd = "-- sh -c 'echo {}; sleep 0.02'";
	int rc = t_sh(out, sizeof out, 0, "{ %s run -j2 --chunks 50 %s 2>err1; echo $? > rc; } | head -1", MESH, cmd);
	EXPECT_EQ(rc, 0);
	char *ex = t_read_file("rc", NULL), *e = t_read_file("err1", NULL);
	EXPECT_TRUE(ex && atoi(ex) == 141);
	EXPECT_CONTAINS(e, "standard output was closed");
	free(ex);
	free(e);
	rc = t_sh(out, sizeof out, 0, "%s run -j2 --chunks 50 %s >file 2>err2", MESH, cmd);
	EXPECT_EQ(rc, 0);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "sort -n file | uniq | wc -l; wc -l < file"), 0);
	EXPECT_STREQ(out, "50\n50\n");
	/* an explicit journal keeps the documented resume, and the rerun warns */
	rc = t_sh(out, sizeof out, 0, "{ %s run -j2 --journal p.log --chunks 50 %s 2>err3; echo $? > rc; } | head -1",
		  MESH, cmd);
	EXPECT_EQ(rc, 0);
	rc = t_sh(out, sizeof out, 0, "%s run -j2 --journal p.log --chunks 50 %s >file2 2>err4", MESH, cmd);
	EXPECT_EQ(rc, 0);
	e = t_read_file("err4", NULL);
	EXPECT_CONTAINS(e, "resuming");
	EXPECT_CONTAINS(e, "ended because its standard output was closed");
	free(e);
	EXPECT_EQ(t_sh(out, sizeof out, 0, "wc -l < file2"), 0);
	EXPECT_LT(atoi(out), 50);
	/* the mark is a record like the others: the journal checks whole */
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job check p.log", MESH), 0);
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
	if (!can_mount_tmpfs())
		SKIP("cannot mount a tmpfs in a user+mount namespace here");
	char out[8192];
	/* ignores a closed pipe and exits 0 whatever became of its output */
	t_write_file("spill.sh", "trap '' PIPE; head -c 6900000 /dev/zero | od -An -v | head -c 6900000; true\n");
	int rc = t_sh(out, sizeof out, 1,
		      "unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs mt && "
		      "TMPDIR=$PWD/mt %s run -v --journal s.log --retries 1 --chunks 2 -- sh spill.sh | wc -c > n.txt; "
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

/* ---- output modes (the library, driven directly) ---- */

/* Options for a library run: out to ./out, notes to ./notes. */
static struct mesh_exec_opts opts(char *const *argv, unsigned slots)
{
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	o.argv = argv;
	o.slots = slots;
	o.out_fd = open("out", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	o.err_fd = o.out_fd;
	o.note_fd = open("notes", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	o.handle_signals = 0;
	return o;
}

static void opts_close(struct mesh_exec_opts *o)
{
	close(o->out_fd);
	close(o->note_fd);
}

/* -k: chunks that end in reverse order still print in chunk order. */
TEST(runner_keep_order_prints_in_chunk_order)
{
	struct mesh_job *j = job_new(8, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"sh", "-c", "sleep 0.0$((8 - {})); echo {}; echo e{} >&2", NULL};
	struct mesh_exec_opts o = opts(argv, 8);
	o.keep_order = 1;
	o.err_fd = -1;
	EXPECT_EQ(mesh_exec_run(j, &o, NULL), MESH_EXEC_COMPLETE);
	opts_close(&o);
	char *s = t_read_file("out", NULL);
	EXPECT_STREQ(s, "0\n1\n2\n3\n4\n5\n6\n7\n");
	free(s);
	job_done(j);
}

/* -k with a failed chunk in the middle (buried at once) and a chunk DONE
 * before the run: the order holds and nothing waits forever. */
TEST(runner_keep_order_with_buried_and_done_chunks)
{
	struct mesh_job *j = job_new(5, 1);
	ASSERT_TRUE(j != NULL);
	struct mesh_lease l;
	ASSERT_EQ(mesh_job_lease(j, MESH_NS_PER_S, 0, &l), 0);
	ASSERT_EQ(mesh_job_complete(j, l.cid, 0), MESH_JOB_DONE); /* chunk 0, done before */
	char *const argv[] = {"sh", "-c", "sleep 0.0$((6 - {})); echo {}; [ {} != 2 ]", NULL};
	struct mesh_exec_opts o = opts(argv, 4);
	o.keep_order = 1;
	EXPECT_EQ(mesh_exec_run(j, &o, NULL), MESH_EXEC_FAILED);
	opts_close(&o);
	char *s = t_read_file("out", NULL);
	EXPECT_STREQ(s, "1\n2\n3\n4\n");
	free(s);
	job_done(j);
}

/* --tag: every line of both streams starts with the chunk's value and a TAB. */
TEST(runner_tag_prefixes_every_line)
{
	struct mesh_job *j = job_new(2, 1);
	ASSERT_TRUE(j != NULL);
	struct mesh_exec_input in;
	ASSERT_EQ(mesh_exec_input_from_mem("a b\nc\n", 6, &in, NULL), 0);
	char *const argv[] = {"sh", "-c", "printf 'x\\ny\\n'; echo e >&2; printf z", NULL};
	struct mesh_exec_opts o = opts(argv, 1);
	o.input = &in;
	o.tag = 1;
	o.err_fd = open("err", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	EXPECT_EQ(mesh_exec_run(j, &o, NULL), MESH_EXEC_COMPLETE);
	opts_close(&o);
	close(o.err_fd);
	char *s = t_read_file("out", NULL);
	/* a last line without a newline stays one line: the next chunk's
	 * output is grouped apart but follows on */
	EXPECT_STREQ(s, "a b\tx\na b\ty\na b\tzc\tx\nc\ty\nc\tz");
	free(s);
	s = t_read_file("err", NULL);
	EXPECT_STREQ(s, "a b\te\nc\te\n");
	free(s);
	mesh_exec_input_release(&in);
	job_done(j);

	/* no input: the chunk id */
	j = job_new(1, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv2[] = {"echo", "hi", NULL};
	o = opts(argv2, 1);
	o.tag = 1;
	EXPECT_EQ(mesh_exec_run(j, &o, NULL), MESH_EXEC_COMPLETE);
	opts_close(&o);
	s = t_read_file("out", NULL);
	EXPECT_STREQ(s, "0\thi 0\n");
	free(s);
	job_done(j);
}

static int file_has(void *arg)
{
	const char **a = arg;
	char *s = t_read_file(a[0], NULL);
	int ok = s && strcmp(s, a[1]) == 0;
	free(s);
	return ok;
}

/* A chunk that writes `first`, then waits for ./go; the run goes on a
 * thread so the test can watch the output file meanwhile. */
struct bg_run {
	struct mesh_job *j;
	struct mesh_exec_opts o;
	int rc;
};

static void *bg(void *arg)
{
	struct bg_run *b = arg;
	b->rc = mesh_exec_run(b->j, &b->o, NULL);
	return NULL;
}

#include <pthread.h>

static void live_output(int line_buffer, const char *script, const char *early, const char *all)
{
	struct bg_run b;
	b.j = job_new(1, 1);
	ASSERT_TRUE(b.j != NULL);
	char *const argv[] = {"sh", "-c", (char *)script, NULL};
	b.o = opts(argv, 1);
	b.o.line_buffer = line_buffer;
	b.o.ungroup = !line_buffer;
	pthread_t t;
	ASSERT_EQ(pthread_create(&t, NULL, bg, &b), 0);
	const char *want[] = {"out", early};
	/* out while the chunk still runs (it waits for ./go) */
	EXPECT_TRUE(t_wait_for(file_has, want, 5000));
	t_write_file("go", "");
	pthread_join(t, NULL);
	EXPECT_EQ(b.rc, MESH_EXEC_COMPLETE);
	opts_close(&b.o);
	char *s = t_read_file("out", NULL);
	EXPECT_STREQ(s, all);
	free(s);
	job_done(b.j);
}

/* --line-buffer: whole lines as they come; a partial line waits. */
TEST(runner_line_buffer_passes_whole_lines_while_running)
{
	live_output(1, "echo one; printf tw; while [ ! -e go ]; do sleep 0.01; done; echo o", "one\n", "one\ntwo\n");
}

/* -u: bytes as they come, a partial line included. */
TEST(runner_ungroup_passes_bytes_while_running)
{
	live_output(0, "printf part; while [ ! -e go ]; do sleep 0.01; done; echo ial", "part", "partial\n");
}

/* --joblog: GNU parallel's header and columns (times aside), appended to
 * by a later run without a second header. */
TEST(runner_joblog_has_gnu_parallel_columns)
{
	struct mesh_job *j = job_new(3, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"sh", "-c", "printf abc; [ {} = 1 ] && exit 3; [ {} = 2 ] && kill -9 $$; true", NULL};
	struct mesh_exec_opts o = opts(argv, 1);
	o.joblog = "jl";
	EXPECT_EQ(mesh_exec_run(j, &o, NULL), MESH_EXEC_FAILED);
	opts_close(&o);
	char *s = t_read_file("jl", NULL);
	ASSERT_TRUE(s != NULL);
	const char *head = "Seq\tHost\tStarttime\tJobRuntime\tSend\tReceive\tExitval\tSignal\tCommand\n";
	EXPECT_EQ(strncmp(s, head, strlen(head)), 0);
	EXPECT_EQ(count_lines(s), 4);
	char *save = NULL, *line = strtok_r(s + strlen(head), "\n", &save);
	for (int k = 0; line; k++, line = strtok_r(NULL, "\n", &save)) {
		unsigned seq = 0, send = 9, recv = 9;
		double start = 0, run = 0;
		int ev = -9, sig = -9, used = 0;
		char host[8];
		EXPECT_EQ(sscanf(line, "%u\t%7[^\t]\t%lf\t%lf\t%u\t%u\t%d\t%d\t%n", &seq, host, &start, &run, &send, &recv,
				 &ev, &sig, &used),
			  8);
		EXPECT_EQ((int)seq, k + 1);
		EXPECT_STREQ(host, ":");
		EXPECT_GT(start, 1e9);
		/* "%.3f" start, "%10.3f" runtime, as GNU parallel prints them */
		char *tab = strchr(line, '\t');
		tab = tab ? strchr(tab + 1, '\t') : NULL;
		EXPECT_TRUE(tab && tab[11] == '.' && tab[15] == '\t');
		EXPECT_TRUE(tab && tab[16 + 6] == '.' && tab[16 + 10] == '\t');
		EXPECT_EQ(send, 0);
		EXPECT_EQ(recv, 3);
		EXPECT_EQ(ev, k == 1 ? 3 : 0);
		EXPECT_EQ(sig, k == 2 ? 9 : 0);
		char want[256];
		/* the command as one shell line: a word a shell would read
		 * otherwise is quoted */
		snprintf(want, sizeof want, "sh -c 'printf abc; [ %d = 1 ] && exit 3; [ %d = 2 ] && kill -9 $$; true'", k, k);
		EXPECT_STREQ(line + used, want);
	}
	free(s);
	/* a resumed run appends, no second header */
	ASSERT_EQ(mesh_job_retry(j, UINT64_MAX), 2);
	o = opts(argv, 1);
	o.joblog = "jl";
	o.joblog_mode = MESH_EXEC_JOBLOG_APPEND;
	mesh_exec_run(j, &o, NULL);
	opts_close(&o);
	s = t_read_file("jl", NULL);
	EXPECT_EQ(count_lines(s), 6);
	EXPECT_TRUE(strstr(s + 1, "Seq\t") == NULL);
	free(s);
	/* a new run empties it (GNU parallel's --joblog FILE) ... */
	ASSERT_EQ(mesh_job_retry(j, UINT64_MAX), 2);
	o = opts(argv, 1);
	o.joblog = "jl";
	o.joblog_mode = MESH_EXEC_JOBLOG_NEW;
	mesh_exec_run(j, &o, NULL);
	opts_close(&o);
	s = t_read_file("jl", NULL);
	EXPECT_EQ(count_lines(s), 3);
	EXPECT_EQ(strncmp(s, head, strlen(head)), 0);
	free(s);
	/* ... and +FILE appends without a header, to a new file too */
	ASSERT_EQ(mesh_job_retry(j, UINT64_MAX), 2);
	o = opts(argv, 1);
	o.joblog = "jl2";
	o.joblog_mode = MESH_EXEC_JOBLOG_PLUS;
	mesh_exec_run(j, &o, NULL);
	opts_close(&o);
	s = t_read_file("jl2", NULL);
	EXPECT_EQ(count_lines(s), 2);
	EXPECT_TRUE(strstr(s, "Seq\t") == NULL);
	free(s);
	job_done(j);
}

/* The lease of a chunk is free again: another node takes it at once. */
static int leasable_now(uint64_t n)
{
	struct mesh_job *j = NULL;
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	o.journal = "j.log";
	o.lockdir = lockdir;
	o.name = "other";
	o.nchunks = n;
	if (mesh_job_open(&j, &o) != 0)
		return 0;
	struct mesh_lease l;
	int rc = mesh_job_lease(j, MESH_NS_PER_S, 0, &l);
	mesh_job_close(j);
	return rc == 0;
}

/* --halt now,fail=1: the first failure kills the running chunks (not
 * failures, leases released) and answers HALTED. */
TEST(runner_halt_now_on_first_failure)
{
	struct mesh_job *j = job_new(6, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"sh", "-c", "[ {} = 0 ] && exit 4; sleep 20", NULL};
	struct mesh_exec_opts o = opts(argv, 3);
	o.halt_mode = MESH_EXEC_HALT_NOW;
	o.halt_count = 1;
	struct mesh_exec_stats st;
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_HALTED);
	EXPECT_LT(t_now_ms() - t0, 5000);
	opts_close(&o);
	EXPECT_UEQ(st.failed, 1);
	EXPECT_UEQ(st.done, 0);
	EXPECT_GE(st.killed, 2);
	struct mesh_job_status js;
	ASSERT_EQ(mesh_job_status(j, &js), 0);
	EXPECT_UEQ(js.buried, 1);
	EXPECT_UEQ(js.failed_attempts, 1);
	EXPECT_TRUE(leasable_now(6));
	job_done(j);
}

/* --halt soon,fail=30%: start nothing more, let the running ones end. */
TEST(runner_halt_soon_on_a_share_of_failures)
{
	struct mesh_job *j = job_new(10, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"sh", "-c", "sleep 0.05; exit $(({} % 2))", NULL};
	struct mesh_exec_opts o = opts(argv, 2);
	o.halt_mode = MESH_EXEC_HALT_SOON;
	o.halt_percent = 30;
	struct mesh_exec_stats st;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_HALTED);
	opts_close(&o);
	EXPECT_UEQ(st.killed, 0);
	EXPECT_GE(st.failed, 3);
	EXPECT_LT(st.started, 10);
	EXPECT_UEQ(st.started, st.done + st.failed);
	job_done(j);
}

/* --halt now,success=1 */
TEST(runner_halt_now_on_first_success)
{
	struct mesh_job *j = job_new(4, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"sh", "-c", "[ {} = 2 ] && exit 0; sleep 20", NULL};
	struct mesh_exec_opts o = opts(argv, 4);
	o.halt_mode = MESH_EXEC_HALT_NOW;
	o.halt_what = MESH_EXEC_HALT_SUCCESS;
	o.halt_count = 1;
	struct mesh_exec_stats st;
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_HALTED);
	EXPECT_LT(t_now_ms() - t0, 5000);
	opts_close(&o);
	EXPECT_UEQ(st.done, 1);
	EXPECT_UEQ(st.failed, 0);
	job_done(j);
}

/* A command that cannot be executed is buried at its first attempt, even
 * when the job allows more. */
TEST(runner_exec_failure_is_buried_at_once)
{
	struct mesh_job *j = job_new(2, 5);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"./no-such-{}", NULL};
	struct mesh_exec_opts o = opts(argv, 1);
	struct mesh_exec_stats st;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_FAILED);
	opts_close(&o);
	EXPECT_UEQ(st.started, 2);
	EXPECT_UEQ(st.buried, 2);
	EXPECT_UEQ(st.failed, 2);
	char *n = t_read_file("notes", NULL);
	EXPECT_CONTAINS(n, "cannot run './no-such-0'");
	EXPECT_TRUE(strstr(n, "will retry") == NULL);
	free(n);
	job_done(j);
}

/* --timeout 300%: a chunk far slower than the median of the done ones is
 * killed once a few are done. */
TEST(runner_timeout_percent_of_the_median)
{
	struct mesh_job *j = job_new(6, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"sh", "-c", "if [ {} = 5 ]; then sleep 20; else sleep 0.05; fi", NULL};
	struct mesh_exec_opts o = opts(argv, 1);
	o.timeout_pct = 300;
	struct mesh_exec_stats st;
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_FAILED);
	EXPECT_LT(t_now_ms() - t0, 5000);
	opts_close(&o);
	EXPECT_UEQ(st.timeouts, 1);
	EXPECT_UEQ(st.done, 5);
	job_done(j);
}

/* --delay: starts at least this far apart, whatever the slots. */
TEST(runner_delay_spaces_the_starts)
{
	struct mesh_job *j = job_new(4, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"true", NULL};
	struct mesh_exec_opts o = opts(argv, 4);
	o.delay_ns = 100 * MESH_NS_PER_MS;
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(mesh_exec_run(j, &o, NULL), MESH_EXEC_COMPLETE);
	EXPECT_GE(t_now_ms() - t0, 300);
	opts_close(&o);
	job_done(j);
}

/* --memfree above what any machine has: one chunk at a time (one always
 * runs), never two together. */
TEST(runner_memfree_holds_starts)
{
	struct mesh_job *j = job_new(4, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"sh", "-c", "mkdir lk || exit 9; sleep 0.05; rmdir lk", NULL};
	struct mesh_exec_opts o = opts(argv, 4);
	o.memfree_bytes = UINT64_C(1) << 62;
	struct mesh_exec_stats st;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_COMPLETE);
	opts_close(&o);
	EXPECT_UEQ(st.done, 4);
	job_done(j);
	/* and a load limit nobody reaches changes nothing */
	j = job_new(4, 1);
	ASSERT_TRUE(j != NULL);
	o = opts(argv, 1);
	o.load_max = 1e9;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_COMPLETE);
	opts_close(&o);
	job_done(j);
}

/* --nice: the chunks run with the niceness raised. */
TEST(runner_nice_raises_the_chunks_niceness)
{
	struct mesh_job *j = job_new(1, 1);
	ASSERT_TRUE(j != NULL);
	char out[32];
	t_sh(out, sizeof out, 0, "nice");
	int base = atoi(out);
	char *const argv[] = {"sh", "-c", "nice; true", NULL};
	struct mesh_exec_opts o = opts(argv, 1);
	o.nice = 7;
	EXPECT_EQ(mesh_exec_run(j, &o, NULL), MESH_EXEC_COMPLETE);
	opts_close(&o);
	char *s = t_read_file("out", NULL);
	EXPECT_EQ(s ? atoi(s) : -1, base + 7 > 19 ? 19 : base + 7);
	free(s);
	job_done(j);
}

/* --tmpdir: where output spills; a spill that fails names it. */
TEST(runner_tmpdir_is_where_output_spills)
{
	struct mesh_job *j = job_new(1, 1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"sh", "-c", "head -c 5000000 /dev/zero", NULL};
	struct mesh_exec_opts o = opts(argv, 1);
	o.tmpdir = "no-such-dir";
	struct mesh_exec_stats st;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_FAILED);
	opts_close(&o);
	EXPECT_UEQ(st.done, 0);
	char *n = t_read_file("notes", NULL);
	EXPECT_CONTAINS(n, "cannot keep the output in no-such-dir: No such file or directory");
	free(n);
	char *s = t_read_file("out", NULL);
	EXPECT_STREQ(s, "");
	free(s);
	job_done(j);
	/* a directory that works: the output is whole */
	j = job_new(1, 1);
	ASSERT_TRUE(j != NULL);
	mkdir("spills", 0755);
	o = opts(argv, 1);
	o.tmpdir = "spills";
	EXPECT_EQ(mesh_exec_run(j, &o, NULL), MESH_EXEC_COMPLETE);
	opts_close(&o);
	size_t len = 0;
	s = t_read_file("out", &len);
	EXPECT_UEQ(len, 5000000);
	free(s);
	job_done(j);
}

/* The state letter of /proc/<pid>/stat ('T' stopped), or 0. */
static char pid_state(int pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	char *s = t_read_file(path, NULL);
	char *p = s ? strrchr(s, ')') : NULL, c = p && p[1] ? p[2] : 0;
	free(s);
	return c;
}

/* The same for the pid a file holds. */
static int file_pid(const char *pidfile)
{
	char *s = t_read_file(pidfile, NULL);
	int pid = s ? atoi(s) : 0;
	free(s);
	return pid;
}

static char proc_state(const char *pidfile)
{
	int pid = file_pid(pidfile);
	return pid > 0 ? pid_state(pid) : 0;
}

/* Stopped: 'T', or 'D' over a stopped child -- dash vforks `sleep`, and a
 * vfork parent waits in 'D' for a child that SIGSTOP caught before exec. */
static int stopped(const char *pidfile)
{
	int pid = file_pid(pidfile);
	char c = pid > 0 ? pid_state(pid) : 0, path[96];
	if (c != 'D')
		return c == 'T';
	snprintf(path, sizeof path, "/proc/%d/task/%d/children", pid, pid);
	char *kids = t_read_file(path, NULL), *save = NULL;
	int r = 0;
	for (char *k = kids ? strtok_r(kids, " \n", &save) : NULL; k && !r; k = strtok_r(NULL, " \n", &save))
		r = pid_state(atoi(k)) == 'T';
	free(kids);
	return r;
}

static int all_stopped(void *arg)
{
	(void)arg;
	return proc_state("mesh.pid") == 'T' && stopped("p0") && stopped("p1");
}

static int all_running(void *arg)
{
	(void)arg;
	char a = proc_state("p0"), b = proc_state("p1");
	return a && a != 'T' && b && b != 'T' && proc_state("mesh.pid") != 'T';
}

/* Ctrl-Z: SIGTSTP to mesh stops its chunks' process groups and mesh
 * itself; SIGCONT resumes all of them and the run finishes. */
TEST(run_sigtstp_stops_the_chunks_and_sigcont_resumes_them)
{
	char out[512];
	t_write_file("chunk.sh", "echo $$ > p$1.tmp; mv p$1.tmp p$1; while [ ! -e go ]; do sleep 0.02; done\n");
	EXPECT_EQ(t_sh(out, sizeof out, 0,
		       "%s run -v -j2 --journal z.log --chunks 2 -- sh chunk.sh >out.txt 2>err.txt & echo $! > mesh.pid",
		       MESH),
		  0);
	ASSERT_TRUE(t_wait_for(all_running, NULL, 10000));
	EXPECT_EQ(t_sh(out, sizeof out, 0, "kill -TSTP $(cat mesh.pid)"), 0);
	EXPECT_TRUE(t_wait_for(all_stopped, NULL, 5000));
	t_write_file("go", "");
	/* stopped, they cannot see ./go */
	mesh_sleep_ns(200 * MESH_NS_PER_MS);
	EXPECT_TRUE(stopped("p0"));
	EXPECT_EQ(t_sh(out, sizeof out, 0, "kill -CONT $(cat mesh.pid)"), 0);
	/* the shell that started mesh is gone: wait for the pid to end */
	int gone = 0;
	for (int i = 0; i < 500 && !gone; i++) {
		gone = t_sh(out, sizeof out, 0, "kill -0 $(cat mesh.pid) 2>/dev/null") != 0;
		if (!gone)
			mesh_sleep_ns(20 * MESH_NS_PER_MS);
	}
	EXPECT_TRUE(gone);
	char *e = t_read_file("err.txt", NULL);
	EXPECT_CONTAINS(e, "complete: 2/2 done");
	free(e);
}

/* --results on a full disk (a 64 KiB tmpfs), with a command that ignores
 * its write errors: the run stops with 114 (mesh run's I/O error, 74 + 40), and every DONE chunk's results
 * are whole -- the rest run again on a rerun. */
TEST(run_results_on_a_full_disk_never_done_with_a_part)
{
	if (!can_mount_tmpfs())
		SKIP("cannot mount a tmpfs in a user+mount namespace here");
	char out[8192];
	t_write_file("gen.sh", "head -c 9999 /dev/zero | tr '\\0' x 2>/dev/null; echo; true\n");
	int rc = t_sh(out, sizeof out, 1,
		      "unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs mt && %s run -j2 --journal r.log "
		      "--chunks 20 --results mt/res -- sh gen.sh; echo rc=$?; "
		      "for d in mt/res/*/; do [ -e $d/status ] && wc -c < $d/stdout; done | sort | uniq -c'",
		      MESH);
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "rc=114");
	EXPECT_CONTAINS(out, "cannot write the results");
	/* every status'd result holds the whole 10000 bytes */
	char *p = strstr(out, "rc=114\n");
	ASSERT_TRUE(p != NULL);
	int cnt = 0, size = 0;
	EXPECT_EQ(sscanf(p + 7, "%d %d", &cnt, &size), 2);
	EXPECT_EQ(size, 10000);
	EXPECT_GT(cnt, 0);
	EXPECT_LT(cnt, 20);
	/* what the journal holds DONE is what has whole results */
	char lk[64];
	snprintf(lk, sizeof lk, "/tmp/mesh-test-res-%d", (int)getpid());
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j = NULL;
	o.journal = "r.log";
	o.lockdir = lk;
	o.name = "peek";
	ASSERT_EQ(mesh_job_open(&j, &o), 0);
	EXPECT_UEQ(ndone(j), (uint64_t)cnt);
	mesh_job_close(j);
	t_sh(NULL, 0, 0, "rm -rf %s", lk);
}

/* The progress bar writes escape sequences only to a terminal: a file or
 * a pipe gets the text alone, each redraw after a \r (the colour codes
 * went into files); on a terminal it is coloured unless NO_COLOR is set. */
TEST(run_bar_escapes_only_on_a_terminal)
{
	char out[65536];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "%s run --bar 'sleep 0.{}' ::: 1 2 3 2>bar.txt", t_bin("mesh")), 0);
	char *s = t_read_file("bar.txt", NULL);
	ASSERT_TRUE(s != NULL);
	EXPECT_TRUE(strchr(s, '\033') == NULL);
	EXPECT_CONTAINS(s, "\r[########################################] 3/3 100%");
	EXPECT_CONTAINS(s, "mesh run: complete: 3/3 done");
	free(s);
	struct t_pty p;
	ASSERT_EQ(t_pty_start(&p, "%s run --bar 'sleep 0.{}' ::: 1 2 3", t_bin("mesh")), 0);
	EXPECT_EQ(t_pty_finish(&p, out, sizeof out), 0);
	EXPECT_CONTAINS(out, "\033[32m");
	EXPECT_CONTAINS(out, "\r\033[K");
	ASSERT_EQ(t_pty_start(&p, "NO_COLOR=1 %s run --bar 'sleep 0.{}' ::: 1 2 3", t_bin("mesh")), 0);
	EXPECT_EQ(t_pty_finish(&p, out, sizeof out), 0);
	EXPECT_TRUE(strstr(out, "\033[32m") == NULL);
	EXPECT_CONTAINS(out, "3/3 100%");
}
