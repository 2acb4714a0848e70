/* Several hosts on one machine: network namespaces joined by veth pairs
 * to a bridge in a hub namespace, PostgreSQL listening on the bridge's
 * address (10.213.0.1, only inside these namespaces), one node per host
 * namespace on one job through TCP.  Then a host cut off (`ip link set
 * down` in its namespace) past its TTL: its chunk is taken by another
 * host, and once it is back its late completion is IGNORED and counted.
 * Needs root (network namespaces, tests/runner/netns.h); where the kernel
 * refuses them, the test says why and checks nothing. */
#include "base/exit.h"
#include "runner/netns.h"
#include "runner/store_env.h"
#include "runner/t.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MESH t_bin("mesh")
#define NHOSTS 3
#define DB_URL "postgresql://mesh@10.213.0.1:5432/postgres?connect_timeout=5"

static struct t_netns ns;

static long field(const char *out, const char *name)
{
	const char *p = strstr(out, name);
	return p ? atol(p + strlen(name)) : -1;
}

TEST_TIMEOUT(store_netns_hosts_share_a_job_and_a_cut_off_host, 120)
{
	struct store_env e;
	char out[NHOSTS][2048], o[4096];
	const long n = 300;
	if (t_netns_up(&ns, NHOSTS))
		SKIP("no network namespace here (see above)");
	ASSERT_EQ(store_env_start_tcp(&e, ns.hub, T_NETNS_HUB_ADDR, T_NETNS_CIDR), 0);

	/* one job, one node a host, every host through TCP on the bridge */
	ASSERT_EQ(t_sh(o, sizeof o, 1, "ip netns exec %s %s job submit '" DB_URL "#nj' %ld", ns.hosts[0], MESH, n), 0);
	pid_t pids[NHOSTS];
	for (int i = 0; i < NHOSTS; i++) {
		pids[i] = fork();
		ASSERT_GE(pids[i], 0);
		if (pids[i] == 0) {
			char cmd[1024];
			snprintf(cmd, sizeof cmd,
				 "ip netns exec %s %s job harvest '" DB_URL "#nj' x nj %ld 5 host%d -- true > h%d.out 2>&1",
				 ns.hosts[i], MESH, n, i, i);
			_exit(system(cmd) == 0 ? 0 : 1);
		}
	}
	long sum = 0;
	for (int i = 0; i < NHOSTS; i++) {
		int ws;
		char f[16];
		ASSERT_EQ(waitpid(pids[i], &ws, 0), pids[i]);
		EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
		snprintf(f, sizeof f, "h%d.out", i);
		char *s = t_read_file(f, NULL);
		ASSERT_TRUE(s != NULL);
		snprintf(out[i], sizeof out[i], "%s", s);
		free(s);
		EXPECT_CONTAINS(out[i], "COMPLETE");
		sum += field(out[i], ", done ");
	}
	/* the checker: every chunk DONE exactly once */
	EXPECT_EQ(sum, n);
	EXPECT_EQ(store_env_done_bits(&e, "nj"), n);
	EXPECT_EQ(store_env_sql(&e, "SELECT done FROM mesh.job_counts WHERE name = 'nj'"), n);
	EXPECT_EQ(store_env_sql(&e, "SELECT dups FROM mesh.job_counts WHERE name = 'nj'"), 0);
	EXPECT_EQ(store_env_sql(&e, "SELECT count(*) FROM mesh.nodes WHERE name LIKE 'host%' AND chunks > 0"),
		  NHOSTS); /* every host did a share */

	/* host 2 cuts itself off right after its chunk ran (its command sets
	 * its own link down): its completion cannot reach the database */
	const long m = 6;
	ASSERT_EQ(t_sh(o, sizeof o, 1, "ip netns exec %s %s job submit '" DB_URL "#cut' %ld", ns.hosts[0], MESH, m), 0);
	pid_t cut = fork();
	ASSERT_GE(cut, 0);
	if (cut == 0) {
		char cmd[1024];
		snprintf(cmd, sizeof cmd,
			 "ip netns exec %s %s job harvest '" DB_URL "#cut' x cut %ld 1 late 1 -- "
			 "sh -c 'ip link set eth0 down && touch cut.now' > late.out 2>&1",
			 ns.hosts[2], MESH, m);
		_exit(system(cmd) == 0 ? 0 : 1);
	}
	uint64_t t0 = t_now_ms();
	while (access("cut.now", F_OK) != 0 && t_now_ms() - t0 < 20000)
		usleep(10000);
	ASSERT_EQ(access("cut.now", F_OK), 0);
	/* past its TTL (1 s) host 0 takes its chunk and ends the job */
	ASSERT_EQ(t_sh(o, sizeof o, 1, "ip netns exec %s %s job harvest '" DB_URL "#cut' x cut %ld 1 taker -- true",
		       ns.hosts[0], MESH, m),
		  0);
	EXPECT_CONTAINS(o, "COMPLETE");
	EXPECT_EQ(field(o, ", done "), m);
	EXPECT_GE(t_now_ms() - t0, 900); /* not before the cut-off host's TTL */
	EXPECT_EQ(t_sh(o, sizeof o, 1, "ip netns exec %s %s nodes --store '" DB_URL "#cut' --job", ns.hosts[1], MESH), 0);
	EXPECT_CONTAINS(o, "silent");
	/* back: its late completion is IGNORED and counted */
	ASSERT_EQ(t_sh(o, sizeof o, 1, "ip -n %s link set eth0 up", ns.hosts[2]), 0);
	int ws;
	ASSERT_EQ(waitpid(cut, &ws, 0), cut);
	char *late = t_read_file("late.out", NULL);
	ASSERT_TRUE(late != NULL);
	EXPECT_CONTAINS(late, "ignored 1");
	EXPECT_EQ(field(late, ", done "), 0);
	if (!strstr(late, "ignored 1"))
		fprintf(stderr, "late: %s\n", late);
	free(late);
	EXPECT_EQ(store_env_done_bits(&e, "cut"), m);
	EXPECT_EQ(store_env_sql(&e, "SELECT done FROM mesh.job_counts WHERE name = 'cut'"), m);
	EXPECT_EQ(store_env_sql(&e, "SELECT dups FROM mesh.job_counts WHERE name = 'cut'"), 1);
	store_env_stop(&e);
	t_netns_down(&ns); /* a passing test ends without exit handlers */
}
