/* `mesh run` ended by a signal, as a closed terminal or `kill -9` ends it:
 * no process of a chunk outlives it, and the rerun runs no chunk twice. */
#include "runner/t.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MESH t_bin("mesh")

/* The pids (up to cap) of the processes whose command line holds marker as
 * one of its words; how many there are. */
static int marked(const char *marker, pid_t *pids, int cap)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char path[300], buf[4096];
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t len = read(fd, buf, sizeof buf - 1);
		close(fd);
		for (ssize_t i = 0; i < len; i += (ssize_t)strlen(buf + i) + 1) {
			buf[len] = 0;
			if (!strcmp(buf + i, marker)) {
				if (n < cap)
					pids[n] = (pid_t)atoi(e->d_name);
				n++;
				break;
			}
		}
	}
	closedir(d);
	return n;
}

struct want {
	const char *marker;
	int n;
};

static int marked_is(void *arg)
{
	const struct want *w = arg;
	pid_t p[16];
	return marked(w->marker, p, 16) == w->n;
}

static int file_has_line(void *arg)
{
	char *s = t_read_file(arg, NULL);
	int ok = s && strchr(s, '\n');
	free(s);
	return ok;
}

/* Whatever a failed test left running goes, so that no later test shares
 * the CPUs with it. */
static void kill_marked(const char *marker)
{
	pid_t p[16];
	int n = marked(marker, p, 16);
	for (int i = 0; i < n && i < 16; i++)
		kill(p[i], SIGKILL);
}

/* The marker: a sleep's argument no other test uses. */
static void make_marker(char *m, size_t cap, const char *whole)
{
	snprintf(m, cap, "%s.%d", whole, (int)getpid() % 100000);
}

/* The reproduction: `mesh run -j2 'sleep 7.5 & wait; echo {}'
 * ::: 1 2 3 & sleep 1; kill -HUP $!`.  As GNU parallel does on SIGHUP
 * (its man page, "COMPLETE RUNNING JOBS BUT DO NOT START NEW JOBS"): no
 * new chunk starts, the running ones finish and are recorded, and it says
 * so; then no process of the chunks is left, and the rerun runs only the
 * chunk that never started. */
TEST_TIMEOUT(run_sighup_finishes_the_running_chunks_and_starts_no_more, 90)
{
	char m[32], out[4096];
	make_marker(m, sizeof m, "2");
	/* mesh run keeps an inherited ignored SIGHUP (nohup): a suite run
	 * under nohup must not make this mesh run one. */
	signal(SIGHUP, SIG_DFL);
	EXPECT_EQ(t_sh(out, sizeof out, 0,
		       "(%s run -j2 'sleep %s & wait; echo {}' ::: 1 2 3 >out1 2>err1 & echo $! > pid;"
		       " wait $!; echo $? > rc1) >/dev/null 2>&1 &",
		       MESH, m),
		  0);
	struct want two = {m, 2}, none = {m, 0};
	ASSERT_TRUE(t_wait_for(marked_is, &two, 20000));
	EXPECT_EQ(t_sh(out, sizeof out, 0, "kill -HUP $(cat pid)"), 0);
	ASSERT_TRUE(t_wait_for(file_has_line, "rc1", 30000));
	char *rc1 = t_read_file("rc1", NULL), *out1 = t_read_file("out1", NULL), *err1 = t_read_file("err1", NULL);
	int left = t_wait_for(marked_is, &none, 100) ? 0 : marked(m, (pid_t[16]){0}, 16);
	kill_marked(m);
	EXPECT_EQ(left, 0);
	EXPECT_STREQ(rc1, "129\n");
	EXPECT_CONTAINS(err1, "SIGHUP");
	EXPECT_CONTAINS(err1, "no new chunk");
	/* the two running chunks finished and printed */
	EXPECT_EQ(t_sh(out, sizeof out, 0, "sort out1 | tr '\\n' ' '"), 0);
	EXPECT_STREQ(out, "1 2 ");
	free(rc1);
	free(out1);
	free(err1);
	/* the rerun runs the one chunk left */
	int rc = t_sh(out, sizeof out, 0, "%s run -j2 'sleep %s & wait; echo {}' ::: 1 2 3 2>err2", MESH, m);
	EXPECT_EQ(rc, 0);
	EXPECT_STREQ(out, "3\n");
	char *err2 = t_read_file("err2", NULL);
	EXPECT_CONTAINS(err2, "resuming: 2/3");
	free(err2);
}

/* kill -9 of mesh run: the chunks' whole process groups go with it (the
 * shell's background child too), within a short bound, and the rerun runs
 * them again (they were not DONE). */
TEST_TIMEOUT(run_sigkill_leaves_no_chunk_process, 60)
{
	char m[32], out[4096];
	make_marker(m, sizeof m, "30");
	EXPECT_EQ(t_sh(out, sizeof out, 0,
		       "%s run -j2 'sleep %s & wait; echo {}' ::: 1 2 3 >out1 2>err1 & echo $! > pid", MESH, m),
		  0);
	struct want two = {m, 2}, none = {m, 0};
	ASSERT_TRUE(t_wait_for(marked_is, &two, 20000));
	uint64_t t0 = t_now_ms();
	EXPECT_EQ(t_sh(out, sizeof out, 0, "kill -9 $(cat pid)"), 0);
	/* 2 s: the keeper's kill comes within milliseconds; the rest is for a
	 * loaded 2-CPU machine */
	int gone = t_wait_for(marked_is, &none, 2000);
	uint64_t took = t_now_ms() - t0;
	kill_marked(m);
	EXPECT_TRUE(gone);
	EXPECT_LT(took, 2100);
	char *out1 = t_read_file("out1", NULL);
	EXPECT_STREQ(out1, "");
	free(out1);
}

/* The other signals that end a process by default (here SIGUSR1 and
 * SIGALRM, which mesh run does not catch; SIGQUIT is ignored in a
 * background job of a shell without job control) take the chunks' groups
 * too. */
TEST_TIMEOUT(run_uncaught_signal_leaves_no_chunk_process, 60)
{
	static const char *sigs[] = {"USR1", "ALRM"};
	for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
		char m[32], out[4096];
		make_marker(m, sizeof m, i ? "31" : "32");
		EXPECT_EQ(t_sh(out, sizeof out, 0,
			       "%s run -j2 'sleep %s & wait; echo {}' ::: 1 2 3 >/dev/null 2>&1 & echo $! > pid", MESH,
			       m),
			  0);
		struct want two = {m, 2}, none = {m, 0};
		ASSERT_TRUE(t_wait_for(marked_is, &two, 20000));
		EXPECT_EQ(t_sh(out, sizeof out, 0, "kill -%s $(cat pid)", sigs[i]), 0);
		int gone = t_wait_for(marked_is, &none, 2000);
		kill_marked(m);
		EXPECT_TRUE(gone);
	}
}
