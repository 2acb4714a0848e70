/* No orphan, ever, end to end (issue 9): the real meshd and mesh; a worker
 * whose child calls setsid() and forks again leaves nothing after `mesh
 * stop` or after `kill -9` of meshd; `mesh ps` says how workers are held,
 * counts the memory of the whole tree, and says what a memory limit bounds. */
#include "host/image.h"
#include "integration/contain_t.h"
#include "integration/meshd_t.h"
#include "runner/t.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

static char out[65536];

/* Program name running host_worker in mode, writing pids to <cwd>/name.pid. */
static void add_worker(const char *name, const char *mode, const char *extra)
{
	char tail[12000], cwd[4096];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(tail, sizeof tail, "args = [\"%s\", \"%s/%s.pid\"]\n%s", mode, cwd, name, extra ? extra : "");
	meshd_t_add_program(out, sizeof out, name, t_bin("tests-workers/host_worker"), tail);
}

static int mesh(const char *args)
{
	return t_sh(out, sizeof out, 0, "'%s' %s --socket " SOCK " 2>mesh.err", t_bin("mesh"), args);
}

static int wait_exit(pid_t pid, unsigned ms)
{
	uint64_t end = t_now_ms() + ms;
	int st;
	for (;;) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (t_now_ms() > end)
			return -1;
		usleep(5000);
	}
}

/* The first worker of `mesh ps --json`: its object (a new reference). */
static json_t *first_worker(void)
{
	if (mesh("ps --json") != 0)
		return NULL;
	json_t *j = json_loads(out, 0, NULL), *w = NULL;
	json_t *progs = j ? json_object_get(j, "programs") : NULL;
	for (size_t i = 0; !w && i < json_array_size(progs); i++) {
		json_t *ws = json_object_get(json_array_get(progs, i), "workers");
		if (json_array_size(ws))
			w = json_incref(json_array_get(ws, 0));
	}
	json_decref(j);
	return w;
}

TEST_TIMEOUT(meshd_stop_leaves_no_setsid_grandchild, 60)
{
	add_worker("orphan", "orphan", NULL);
	pid_t meshd = meshd_t_start(.wait_accept = 1);
	ASSERT_EQ(mesh("start orphan"), 0);
	pid_t gc = contain_t_read_pid("orphan.pid", 10000);
	ASSERT_GT(gc, 0);
	EXPECT_FALSE(contain_t_gone(&gc));
	/* ps says how workers are held, and the pid it gives is the worker's. */
	ASSERT_EQ(mesh("ps -v"), 0);
	EXPECT_CONTAINS(out, "containment of workers (what keeps track of their processes and kills them all): ");
	EXPECT_CONTAINS(out, "pid-namespace");
	json_t *w = first_worker();
	ASSERT_TRUE(w != NULL);
	pid_t pid = (pid_t)json_integer_value(json_object_get(w, "pid"));
	EXPECT_CONTAINS(json_string_value(json_object_get(w, "containment")), "pid-namespace");
	json_decref(w);
	char p[64];
	snprintf(p, sizeof p, "/proc/%d/comm", (int)pid);
	char *comm = t_read_file(p, NULL);
	EXPECT_STREQ(comm, "orphan\n");
	free(comm);
	ASSERT_EQ(mesh("stop orphan"), 0);
	int went = t_wait_for(contain_t_gone, &gc, 3000);
	EXPECT_TRUE(went);
	if (!went)
		kill(gc, SIGKILL);
	kill(meshd, SIGTERM);
	EXPECT_EQ(wait_exit(meshd, 15000), 0);
}

TEST_TIMEOUT(meshd_kill9_leaves_no_setsid_grandchild, 60)
{
	add_worker("orphan", "orphan", NULL);
	pid_t meshd = meshd_t_start(.wait_accept = 1);
	ASSERT_EQ(mesh("start orphan"), 0);
	pid_t gc = contain_t_read_pid("orphan.pid", 10000);
	ASSERT_GT(gc, 0);
	EXPECT_FALSE(contain_t_gone(&gc));
	kill(meshd, SIGKILL);
	EXPECT_EQ(wait_exit(meshd, 5000), 128 + SIGKILL);
	int went = t_wait_for(contain_t_gone, &gc, 3000);
	EXPECT_TRUE(went);
	if (!went)
		kill(gc, SIGKILL);
}

TEST_TIMEOUT(meshd_ps_memory_is_the_whole_tree_and_says_what_is_bounded, 60)
{
	add_worker("alloc", "alloc-child", NULL);
	add_worker("limited", "echo", "[limits]\nmemory = \"64M\"\n");
	pid_t meshd = meshd_t_start(.wait_accept = 1);
	ASSERT_EQ(mesh("start alloc"), 0);
	ASSERT_GT(contain_t_read_pid("alloc.pid", 10000), 0);
	/* Sampled about once a second. */
	long long rss = 0, procs = 0;
	uint64_t end = t_now_ms() + 5000;
	while (rss < (50ll << 20) && t_now_ms() < end) {
		json_t *w = first_worker();
		rss = w ? json_integer_value(json_object_get(w, "rss")) : 0;
		procs = w ? json_integer_value(json_object_get(w, "processes")) : 0;
		json_decref(w);
		if (rss < (50ll << 20))
			usleep(200 * 1000);
	}
	EXPECT_GE(rss, 50ll << 20);
	EXPECT_GE(procs, 2);
	/* A memory limit is a per-process data segment: ps and load say so. */
	ASSERT_EQ(t_sh(out, sizeof out, 1, "'%s' load limited --socket " SOCK, t_bin("mesh")), 0);
	EXPECT_CONTAINS(out, "per-process data segment");
	ASSERT_EQ(mesh("ps -v"), 0);
	EXPECT_CONTAINS(out, "memory:per-process data segment (rlimit)");
	kill(meshd, SIGTERM);
	EXPECT_EQ(wait_exit(meshd, 15000), 0);
}

/* meshd as root: a program runs as its `user`, and one without runs
 * unprivileged (nobody here), not as root. */
TEST_TIMEOUT(meshd_workers_run_as_their_user_never_root_by_default, 60)
{
	unsetenv("MESHD_DEFAULT_USER"); /* the runner's; here the real default */
	/* The workers reach their binaries: meshd names them by absolute path. */
	chmod(".", 0755);
	chmod("..", 0711);
	add_worker("who", "whoami", NULL);
	add_worker("who2", "whoami", "user = 65533\n");
	add_worker("who0", "whoami", "user = \"root\"\n");
	pid_t meshd = meshd_t_start(.wait_accept = 1);
	if (mesh("start who") != 0) {
		char *e = t_read_file("mesh.err", NULL);
		FAIL("start who: %s", e ? e : "?");
	}
	ASSERT_EQ(mesh("start who2"), 0);
	ASSERT_EQ(mesh("start who0"), 0);
	struct contain_t_log_has a = {"logs/who.log", "uid=65534 gid=65534"}, b = {"logs/who2.log", "uid=65533 gid=65533"},
		       c = {"logs/who0.log", "uid=0 gid=0"};
	EXPECT_TRUE(t_wait_for(contain_t_log_has, &a, 5000));
	EXPECT_TRUE(t_wait_for(contain_t_log_has, &b, 5000));
	EXPECT_TRUE(t_wait_for(contain_t_log_has, &c, 5000));
	kill(meshd, SIGTERM);
	EXPECT_EQ(wait_exit(meshd, 15000), 0);
}

/* The worker's init is the mesh-init binary beside meshd (libc alone), not
 * meshd re-executed: an exec of meshd, 29 shared libraries, cost 6.1-6.9 ms
 * of CPU at every spawn here, against 0.8-1.1 ms for /bin/true. */
TEST_TIMEOUT(meshd_worker_init_is_the_small_mesh_init_binary, 60)
{
	add_worker("orphan", "orphan", NULL);
	pid_t meshd = meshd_t_start(.wait_accept = 1);
	ASSERT_EQ(mesh("start orphan"), 0);
	pid_t gc = contain_t_read_pid("orphan.pid", 10000);
	json_t *w = first_worker();
	ASSERT_TRUE(w != NULL);
	pid_t pid = (pid_t)json_integer_value(json_object_get(w, "pid"));
	json_decref(w);
	char p[64], exe[4096], want[4096];
	/* The worker's parent, as meshd's namespace sees it: mesh-init. */
	snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
	char *st = t_read_file(p, NULL);
	ASSERT_TRUE(st != NULL);
	const char *rp = strrchr(st, ')');
	int ppid = 0;
	ASSERT_TRUE(rp && sscanf(rp + 2, "%*c %d", &ppid) == 1);
	free(st);
	snprintf(p, sizeof p, "/proc/%d/comm", ppid);
	char *comm = t_read_file(p, NULL);
	EXPECT_STREQ(comm, "mesh-init\n");
	free(comm);
	snprintf(p, sizeof p, "/proc/%d/exe", ppid);
	ssize_t n = readlink(p, exe, sizeof exe - 1);
	ASSERT_GT(n, 0);
	exe[n] = 0;
	ASSERT_TRUE(realpath(t_bin("mesh-init"), want) != NULL);
	EXPECT_STREQ(exe, want);
	ASSERT_EQ(mesh("stop orphan"), 0);
	if (gc > 0 && !t_wait_for(contain_t_gone, &gc, 3000))
		kill(gc, SIGKILL);
	kill(meshd, SIGTERM);
	EXPECT_EQ(wait_exit(meshd, 15000), 0);
}
