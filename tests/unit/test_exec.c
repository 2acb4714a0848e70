#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "exec/capture.h"
#include "exec/input.h"
#include "exec/progress.h"
#include "exec/runner.h"
#include "exec/template.h"
#include "job/job.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void join_argv(char **av, char *out, size_t cap)
{
	out[0] = 0;
	for (size_t i = 0; av[i]; i++) {
		strncat(out, i ? "|" : "", cap - strlen(out) - 1);
		strncat(out, av[i], cap - strlen(out) - 1);
	}
}

TEST(template_table)
{
	static const struct {
		const char *argv[5];
		const char *value; /* NULL: the chunk id */
		uint64_t cid;
		const char *want;
	} rows[] = {
		{{"echo", NULL}, NULL, 7, "echo|7"},
		{{"echo", "{}", NULL}, NULL, 7, "echo|7"},
		{{"echo", "x{}y", "{#}", NULL}, "a b", 0, "echo|xa by|1"},
		{{"echo", "{}{}", NULL}, "ab", 0, "echo|abab"},
		{{"echo", "{#}", NULL}, "line", 0, "echo|1"}, /* a replacement string: nothing appended */
		{{"echo", NULL}, "line", 0, "echo|line"},	/* none: the value appended */
		{{"cp", "in/{}", "out/{}.png", NULL}, "tile", 0, "cp|in/tile|out/tile.png"},
		{{"echo", "{", "}", "{x}", NULL}, "v", 0, "echo|{|}|{x}|v"},
		{{"echo", "{}", NULL}, "", 0, "echo|"},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_exec_template t;
		struct mesh_buf b = MESH_BUF_INIT;
		ASSERT_EQ(mesh_exec_template_init(&t, (char *const *)rows[i].argv), 0);
		char **av = calloc(mesh_exec_template_slots(&t), sizeof *av);
		struct mesh_exec_input in = MESH_EXEC_INPUT_INIT;
		if (rows[i].value) {
			struct mesh_exec_list l;
			char *w[] = {(char *)rows[i].value};
			ASSERT_EQ(mesh_exec_list_from_argv(&l, w, 1), 0);
			struct mesh_exec_source src = {&l, 0};
			ASSERT_EQ(mesh_exec_input_combine(&in, &src, 1, NULL), 0);
			mesh_exec_list_release(&l);
		}
		ASSERT_EQ(mesh_exec_template_expand(&t, rows[i].value ? &in : NULL, rows[i].cid, 1, &b, av), 0);
		mesh_exec_input_release(&in);
		char got[256];
		join_argv(av, got, sizeof got);
		EXPECT_STREQ(got, rows[i].want);
		free(av);
		mesh_buf_release(&b);
		mesh_exec_template_release(&t);
	}
	struct mesh_exec_template t;
	const char *empty[] = {"", NULL}, *none[] = {NULL};
	EXPECT_EQ(mesh_exec_template_init(&t, (char *const *)empty), MESH_E_PARSE);
	mesh_exec_template_release(&t);
	EXPECT_EQ(mesh_exec_template_init(&t, (char *const *)none), MESH_E_PARSE);
	mesh_exec_template_release(&t);
}

TEST(input_lines)
{
	struct mesh_exec_input in;
	uint64_t bad = 0;
	size_t len;
	ASSERT_EQ(mesh_exec_input_from_mem("a b\n\nc", 6, &in, &bad), 0);
	EXPECT_UEQ(in.n, 3);
	EXPECT_STREQ(mesh_exec_input_line(&in, 0, &len), "a b");
	EXPECT_UEQ(len, 3);
	EXPECT_STREQ(mesh_exec_input_line(&in, 1, &len), "");
	EXPECT_UEQ(len, 0);
	EXPECT_STREQ(mesh_exec_input_line(&in, 2, &len), "c");
	EXPECT_UEQ(len, 1);
	EXPECT_TRUE(mesh_exec_input_line(&in, 3, NULL) == NULL);
	uint64_t h1 = in.hash;
	mesh_exec_input_release(&in);

	ASSERT_EQ(mesh_exec_input_from_mem("x\ny\n", 4, &in, &bad), 0);
	EXPECT_UEQ(in.n, 2);
	EXPECT_STREQ(mesh_exec_input_line(&in, 1, &len), "y");
	EXPECT_UEQ(len, 1);
	EXPECT_NE(in.hash, h1);
	mesh_exec_input_release(&in);

	EXPECT_EQ(mesh_exec_input_from_mem("", 0, &in, &bad), MESH_E_RANGE);
	mesh_exec_input_release(&in);
	EXPECT_EQ(mesh_exec_input_from_mem("ok\nb\0d\n", 7, &in, &bad), MESH_E_PARSE);
	EXPECT_UEQ(bad, 2);
	mesh_exec_input_release(&in);

	t_write_file("in.txt", "one\ntwo\n");
	ASSERT_EQ(mesh_exec_input_load("in.txt", &in, NULL), 0);
	EXPECT_UEQ(in.n, 2);
	EXPECT_STREQ(mesh_exec_input_line(&in, 0, NULL), "one");
	mesh_exec_input_release(&in);
	EXPECT_EQ(mesh_exec_input_load("missing.txt", &in, NULL), -ENOENT);
	mesh_exec_input_release(&in);
}

TEST(capture_spills_and_keeps_order)
{
	struct mesh__capture c = MESH__CAPTURE_INIT;
	c.mem_max = 100;
	struct mesh_buf want = MESH_BUF_INIT;
	for (int i = 0; i < 50; i++) {
		char line[32];
		int n = snprintf(line, sizeof line, "line %d\n", i);
		ASSERT_EQ(mesh__capture_add(&c, line, (size_t)n), 0);
		mesh_buf_add(&want, line, (size_t)n);
	}
	EXPECT_TRUE(c.spill_fd >= 0);
	int fd = open("out", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ASSERT_TRUE(fd >= 0);
	ASSERT_EQ(mesh__capture_flush(&c, fd, NULL, 0), 0);
	close(fd);
	EXPECT_EQ(c.spill_fd, -1);
	char *got = t_read_file("out", NULL);
	EXPECT_STREQ(got, want.p);
	free(got);
	/* reusable after a flush, in memory again */
	ASSERT_EQ(mesh__capture_add(&c, "x", 1), 0);
	EXPECT_EQ(c.spill_fd, -1);
	ASSERT_EQ(mesh__capture_flush(&c, -1, NULL, 0), 0);
	mesh__capture_release(&c);
	mesh_buf_release(&want);
}

/* A spill that cannot be written loses nothing already held, and says
 * where it tried. */
TEST(capture_failed_spill_keeps_what_it_held)
{
	struct mesh__capture c = MESH__CAPTURE_INIT;
	c.mem_max = 10;
	c.dir = "no-such-dir";
	ASSERT_EQ(mesh__capture_add(&c, "hello", 5), 0);
	EXPECT_EQ(mesh__capture_add(&c, "0123456789", 10), -ENOENT);
	EXPECT_STREQ(c.spill_dir, "no-such-dir");
	EXPECT_EQ(c.spill_fd, -1);
	EXPECT_UEQ(c.total, 5);
	EXPECT_EQ(mesh__capture_spill(&c), -ENOENT);
	int fd = open("out", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ASSERT_EQ(mesh__capture_flush(&c, fd, NULL, 0), 0);
	close(fd);
	char *got = t_read_file("out", NULL);
	EXPECT_STREQ(got, "hello");
	free(got);
	/* --line-buffer: whole lines out, the partial one kept */
	ASSERT_EQ(mesh__capture_add(&c, "a\nb", 3), 0);
	struct mesh__tag t = {"T", 1, 0};
	fd = open("out", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ASSERT_EQ(mesh__capture_flush_lines(&c, fd, &t), 0);
	EXPECT_UEQ(c.total, 1);
	ASSERT_EQ(mesh__capture_flush(&c, fd, &t, 0), 0);
	close(fd);
	got = t_read_file("out", NULL);
	EXPECT_STREQ(got, "T\ta\nT\tb");
	free(got);
	mesh__capture_release(&c);
}

TEST(progress_format_table)
{
	char b[256];
	struct mesh__progress p = {.done = 50, .total = 100, .elapsed_ns = 10 * MESH_NS_PER_S, .running = 2, .width = 80};
	mesh__progress_format(b, sizeof b, &p);
	EXPECT_CONTAINS(b, " 50/100 50%  5.0/s  ETA 0:10  2 running");
	EXPECT_TRUE(strchr(b, '\033') == NULL);
	EXPECT_LE(strlen(b), 79);
	p.done_at_start = 50; /* nothing done by this run yet: no rate, no ETA */
	mesh__progress_format(b, sizeof b, &p);
	EXPECT_CONTAINS(b, "0.0/s  ETA --:--");
	p.done_at_start = 0;
	p.failed = 3;
	p.color = 1;
	mesh__progress_format(b, sizeof b, &p);
	EXPECT_CONTAINS(b, "  3 failed");
	EXPECT_CONTAINS(b, "\033[32m");
	/* mesh wait's words: chunks in flight (not workers running), buried */
	p.running_word = "in flight";
	p.failed_word = "buried";
	mesh__progress_format(b, sizeof b, &p);
	EXPECT_CONTAINS(b, "  2 in flight  3 buried");
	p.done = p.total = 0;
	p.elapsed_ns = 0;
	mesh__progress_format(b, sizeof b, &p);
	EXPECT_CONTAINS(b, " 0/0 0%");
	EXPECT_EQ(mesh__progress_format(b, 8, &p), 7);
}

/* A job in the test's temp dir. */
static struct mesh_job *job_new(uint64_t n, const char *lockdir)
{
	struct mesh_job *j = NULL;
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	if (mesh_job_submit("j.log", n) < 0)
		return NULL;
	o.journal = "j.log";
	o.lockdir = lockdir;
	o.name = "t";
	o.nchunks = n;
	return mesh_job_open(&j, &o) == 0 ? j : NULL;
}

static char lockdir[64];
static void set_lockdir(void)
{
	snprintf(lockdir, sizeof lockdir, "/tmp/mesh-test-exec-%d", (int)getpid());
}

TEST(runner_groups_output_per_chunk)
{
	set_lockdir();
	struct mesh_job *j = job_new(6, lockdir);
	ASSERT_TRUE(j != NULL);
	int fd = open("out", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	/* each chunk writes three lines with pauses between: interleaving would
	 * show if output were not grouped */
	char *const argv[] = {"sh", "-c", "echo {} a; sleep 0.05; echo {} b; sleep 0.05; echo {} c", NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.slots = 3;
	o.out_fd = fd;
	o.handle_signals = 0;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_COMPLETE);
	close(fd);
	EXPECT_UEQ(st.started, 6);
	EXPECT_UEQ(st.done, 6);
	char *out = t_read_file("out", NULL);
	ASSERT_TRUE(out != NULL);
	char *save = NULL, *line = strtok_r(out, "\n", &save);
	int lines = 0, seen[6] = {0};
	while (line) {
		int cid = -1;
		char c = 0;
		EXPECT_EQ(sscanf(line, "%d %c", &cid, &c), 2);
		ASSERT_TRUE(cid >= 0 && cid < 6);
		EXPECT_EQ(c, 'a' + lines % 3); /* a, b, c of one chunk in a row */
		if (lines % 3 == 0) {
			EXPECT_EQ(seen[cid], 0);
			seen[cid] = 1;
		}
		lines++;
		line = strtok_r(NULL, "\n", &save);
	}
	EXPECT_EQ(lines, 18);
	free(out);
	/* running again: nothing left */
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_COMPLETE);
	EXPECT_UEQ(st.started, 0);
	mesh_job_close(j);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}

TEST(runner_timeout_kills_the_whole_group)
{
	set_lockdir();
	struct mesh_job_opts jo = MESH_JOB_OPTS_INIT;
	struct mesh_job *j = NULL;
	ASSERT_EQ(mesh_job_submit("j.log", 2), 0);
	jo.journal = "j.log";
	jo.lockdir = lockdir;
	jo.name = "t";
	jo.max_attempts = 1;
	ASSERT_EQ(mesh_job_open(&j, &jo), 0);
	/* chunk 1 finishes; chunk 0 leaves a grandchild that would outlive it */
	char *const argv[] = {"sh", "-c", "if [ {} = 0 ]; then sleep 30 & echo $! > bg.pid; wait; fi", NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.slots = 2;
	o.timeout_ns = 300 * MESH_NS_PER_MS;
	o.note_fd = -1;
	o.handle_signals = 0;
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_FAILED);
	EXPECT_LT(t_now_ms() - t0, 10000);
	EXPECT_UEQ(st.timeouts, 1);
	EXPECT_UEQ(st.buried, 1);
	EXPECT_UEQ(st.done, 1);
	char *s = t_read_file("bg.pid", NULL);
	ASSERT_TRUE(s != NULL);
	pid_t bg = (pid_t)atoi(s);
	free(s);
	ASSERT_GT(bg, 1);
	/* killed with its group (it may linger as a zombie of init briefly) */
	char path[64], *stat = NULL;
	for (int i = 0; i < 200; i++) {
		snprintf(path, sizeof path, "/proc/%d/stat", (int)bg);
		free(stat);
		stat = t_read_file(path, NULL);
		if (!stat || strstr(stat, ") Z "))
			break;
		mesh_sleep_ns(10 * MESH_NS_PER_MS);
	}
	EXPECT_TRUE(stat == NULL || strstr(stat, ") Z ") != NULL);
	free(stat);
	struct mesh_job_status js;
	ASSERT_EQ(mesh_job_status(j, &js), 0);
	EXPECT_UEQ(js.done, 1);
	EXPECT_UEQ(js.buried, 1);
	mesh_job_close(j);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}

static void first_failure(const struct mesh_job_failure *f, void *arg)
{
	int *last = arg;
	if (*last == -1)
		*last = f->last_status;
}

TEST(runner_exit_status_recorded_with_signals)
{
	set_lockdir();
	struct mesh_job_opts jo = MESH_JOB_OPTS_INIT;
	struct mesh_job *j = NULL;
	ASSERT_EQ(mesh_job_submit("j.log", 1), 0);
	jo.journal = "j.log";
	jo.lockdir = lockdir;
	jo.name = "t";
	jo.max_attempts = 2;
	ASSERT_EQ(mesh_job_open(&j, &jo), 0);
	char *const argv[] = {"sh", "-c", "kill -USR1 $$", NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.note_fd = -1;
	o.handle_signals = 0;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_FAILED);
	EXPECT_UEQ(st.failed, 2);
	int last = -1;
	mesh_job_failures(j, first_failure, &last);
	EXPECT_EQ(last, 128 + SIGUSR1);
	mesh_job_close(j);

	/* a command that is not there fails before anything runs */
	ASSERT_TRUE((j = job_new(1, lockdir)) != NULL);
	char *const bad[] = {"no-such-command-xyz", NULL};
	o.argv = bad;
	EXPECT_EQ(mesh_exec_run(j, &o, &st), -ENOENT);
	EXPECT_UEQ(st.started, 0);
	mesh_job_close(j);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}

TEST(runner_results_dir_and_max_chunks)
{
	set_lockdir();
	struct mesh_job *j = job_new(4, lockdir);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"sh", "-c", "echo out{}; echo err{} >&2; exit $(({} % 2 * 7))", NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.slots = 2;
	o.results_dir = "res";
	o.max_chunks = 2;
	o.note_fd = -1;
	o.out_fd = o.err_fd = -1;
	o.handle_signals = 0;
	int fds = t_count_fds();
	EXPECT_EQ(mesh_exec_run(j, &o, &st), MESH_EXEC_LIMIT);
	EXPECT_UEQ(st.started, 2);
	EXPECT_EQ(t_count_fds(), fds);
	char *s = t_read_file("res/0/stdout", NULL);
	EXPECT_STREQ(s, "out0\n");
	free(s);
	s = t_read_file("res/0/stderr", NULL);
	EXPECT_STREQ(s, "err0\n");
	free(s);
	s = t_read_file("res/0/status", NULL);
	EXPECT_STREQ(s, "exit 0\n");
	free(s);
	s = t_read_file("res/1/status", NULL);
	EXPECT_STREQ(s, "exit 7\n");
	free(s);
	char out[256];
	EXPECT_EQ(t_sh(out, sizeof out, 0, "ls -A res/0 | tr '\\n' ' '"), 0);
	EXPECT_STREQ(out, "status stderr stdout ");
	mesh_job_close(j);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}

/* The line splitter against a plain reference on many random inputs (the
 * parser's property test; the alphabet makes empty lines, missing final
 * newlines and NUL bytes common). */
TEST(input_random_against_reference)
{
	unsigned seed = 12345;
	for (int round = 0; round < 3000; round++) {
		char buf[64];
		size_t n = (size_t)(rand_r(&seed) % 40);
		for (size_t i = 0; i < n; i++) {
			int k = rand_r(&seed) % 10;
			buf[i] = k < 6 ? (char)('a' + k) : k < 9 ? '\n' : (round % 4 == 0 ? '\0' : 'z');
		}
		/* reference */
		size_t nl = 0, start = 0, want_lines = 0;
		int has_nul = memchr(buf, 0, n) != NULL;
		for (size_t i = 0; i < n; i++)
			if (buf[i] == '\n')
				nl++;
		want_lines = nl + (n > 0 && buf[n - 1] != '\n');
		struct mesh_exec_input in;
		uint64_t bad = 0;
		int rc = mesh_exec_input_from_mem(buf, n, &in, &bad);
		if (want_lines == 0) {
			EXPECT_EQ(rc, MESH_E_RANGE);
		} else if (has_nul) {
			EXPECT_EQ(rc, MESH_E_PARSE);
			EXPECT_GE(bad, 1);
			EXPECT_LE(bad, want_lines);
		} else {
			ASSERT_EQ(rc, 0);
			ASSERT_UEQ(in.n, want_lines);
			uint64_t li = 0;
			for (size_t i = 0; i <= n; i++) {
				if (i == n && start == n)
					break;
				if (i == n || buf[i] == '\n') {
					size_t len;
					const char *l = mesh_exec_input_line(&in, li++, &len);
					ASSERT_TRUE(l != NULL);
					EXPECT_UEQ(len, i - start);
					EXPECT_TRUE(memcmp(l, buf + start, i - start) == 0 && l[len] == 0);
					start = i + 1;
				}
			}
			EXPECT_UEQ(li, in.n);
		}
		mesh_exec_input_release(&in);
		start = 0;
	}
}
