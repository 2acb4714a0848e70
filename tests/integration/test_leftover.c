/* The runner takes down what a test left up outside its process group
 * (runner/leftover.h): a PostgreSQL server (pg_ctl gives it a session of
 * its own) and network namespaces, left by a test that died without its
 * clean-up, as one killed at its timeout does. */
#include "runner/leftover.h"
#include "runner/netns.h"
#include "runner/store_env.h"
#include "runner/t.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

TEST_TIMEOUT(runner_takes_down_the_server_and_namespaces_a_killed_test_left, 90)
{
	char cwd[300], sub[400], pgdir[300] = "", hub[64] = "", host[64] = "", path[400];
	ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
	snprintf(sub, sizeof sub, "%s/killed", cwd);
	ASSERT_EQ(mkdir(sub, 0700), 0);
	pid_t child = fork();
	ASSERT_GE(child, 0);
	if (child == 0) {
		/* a test of its own (its list in sub), killed before its end */
		struct store_env e;
		struct t_netns ns;
		setenv("T_DIR", sub, 1);
		if (store_env_start(&e, "postgresql"))
			_exit(3);
		int no_ns = t_netns_up(&ns, 1);
		FILE *f = fopen("names", "w");
		if (!f)
			_exit(4);
		fprintf(f, "%s\n%s\n%s\n", e.pgdir, no_ns ? "-" : ns.hub, no_ns ? "-" : ns.hosts[0]);
		fclose(f);
		kill(getpid(), SIGKILL);
		_exit(5);
	}
	int st;
	ASSERT_EQ(waitpid(child, &st, 0), child);
	ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	FILE *f = fopen("names", "r");
	ASSERT_TRUE(f != NULL);
	ASSERT_EQ(fscanf(f, "%299s %63s %63s", pgdir, hub, host), 3);
	fclose(f);
	/* should this test fail below, its own list takes them down */
	t_leftover_note("pg", pgdir);
	pid_t pm = t_leftover_postmaster(pgdir);
	ASSERT_TRUE(alive(pm)); /* the group's kill did not reach it */
	int with_ns = strcmp(hub, "-") != 0;
	if (with_ns) {
		t_leftover_note("netns", hub);
		t_leftover_note("netns", host);
		snprintf(path, sizeof path, "/run/netns/%s", hub);
		ASSERT_TRUE(exists(path));
	}

	EXPECT_EQ(t_leftover_reap(sub), with_ns ? 3 : 1);
	EXPECT_FALSE(alive(pm));
	EXPECT_FALSE(exists(pgdir));
	if (with_ns) {
		snprintf(path, sizeof path, "/run/netns/%s", hub);
		EXPECT_FALSE(exists(path));
		snprintf(path, sizeof path, "/run/netns/%s", host);
		EXPECT_FALSE(exists(path));
	}
	/* nothing left: a second pass finds nothing up */
	EXPECT_EQ(t_leftover_reap(sub), 0);
}
