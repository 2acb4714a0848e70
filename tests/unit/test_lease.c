/* The rules that free a lease (store.h), row by row, and the file store's
 * private lock directory. */
#include "base/clock.h"
#include "base/err.h"
#include "runner/t.h"
#include "store/store.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S MESH_NS_PER_S

static const struct mesh_lease_holder judge = {
	.boot_id = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac, 0xad, 0xae, 0xaf, 0xb0},
	.timens = 11,
	.pidns = 22,
	.pid = 100,
	.pid_start = 5};

TEST(lease_expiry_table)
{
	const uint64_t wall = 1000000 * S, boot = 500 * S;
	struct mesh_lease_holder other_boot = judge, other_timens = judge, unknown = {0};
	other_boot.boot_id[0] ^= 1;
	other_timens.timens = 12;
	static const char *why[] = {
		"same boot: wall clock stepped 2 h ahead, boot deadline ahead: live",
		"same boot: wall clock stepped 2 h back, boot deadline passed: expired",
		"same boot, boot deadline exactly now: expired",
		"other boot (another host): wall deadline 1 s ago, within the skew: live",
		"other boot: wall deadline skew + 1 ns ago: expired",
		"unknown boot (format 1): within the skew: live",
		"unknown boot (format 1): past the skew: expired",
		"same boot, other time namespace: judged by the wall clock: live",
		"same boot, no boot deadline: judged by the wall clock: expired",
		"a deadline at the end of time: live",
	};
	struct {
		uint64_t deadline, boot_deadline;
		const struct mesh_lease_holder *holder;
		int expired;
	} rows[] = {
		{wall - 2 * 3600 * S, boot + 10 * S, &judge, 0},
		{wall + 2 * 3600 * S, boot - 1, &judge, 1},
		{wall + 10 * S, boot, &judge, 1},
		{wall - S, boot - 100 * S, &other_boot, 0},
		{wall - MESH_LEASE_SKEW_NS - 1, boot + 100 * S, &other_boot, 1},
		{wall - S, 0, &unknown, 0},
		{wall - MESH_LEASE_SKEW_NS, 0, &unknown, 1},
		{wall - S, boot - 100 * S, &other_timens, 0},
		{wall - 2 * MESH_LEASE_SKEW_NS, 0, &judge, 1},
		{UINT64_MAX, 0, &unknown, 0},
	};
	struct mesh_lease_clock now = {.wall_ns = wall, .boot_ns = boot, .self = judge};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		struct mesh_lease_stamp st = {.deadline_ns = rows[i].deadline,
					      .boot_deadline_ns = rows[i].boot_deadline,
					      .holder = *rows[i].holder};
		if (mesh_lease_expired(&st, &now) != rows[i].expired)
			t__fail(__FILE__, __LINE__, "row %zu (%s): expired %d", i, why[i], !rows[i].expired);
	}
}

static int is_zombie(void *arg)
{
	char path[64], *text, *p;
	size_t len;
	int z = 0;
	snprintf(path, sizeof path, "/proc/%d/stat", *(pid_t *)arg);
	text = t_read_file(path, &len);
	if (text && (p = strrchr(text, ')')) && p[1] == ' ')
		z = p[2] == 'Z';
	free(text);
	return z;
}

TEST(lease_holder_gone_only_when_certain)
{
	struct mesh_lease_holder me, h;
	mesh_lease_holder_self(&me);
	if (!me.pidns || !me.pid_start)
		SKIP("/proc does not tell this process's identity");
	EXPECT_EQ(mesh_lease_holder_gone(&me, &me), 0); /* alive */
	h = me;
	h.pid_start++; /* our pid, but another start: the holder was an earlier process */
	EXPECT_EQ(mesh_lease_holder_gone(&h, &me), 1);
	pid_t c = fork();
	if (c == 0)
		_exit(0);
	ASSERT_TRUE(t_wait_for(is_zombie, &c, 2000)); /* exited, not yet reaped */
	h = me;
	h.pid = (uint32_t)c;
	h.pid_start = 0;
	EXPECT_EQ(mesh_lease_holder_gone(&h, &me), 1);
	waitpid(c, NULL, 0);
	EXPECT_EQ(mesh_lease_holder_gone(&h, &me), 1); /* the pid is free */
	/* not certain: nothing is concluded */
	struct mesh_lease_holder other = h;
	other.boot_id[3] ^= 0x40; /* another boot (a host of the same name) */
	EXPECT_EQ(mesh_lease_holder_gone(&other, &me), 0);
	other = h;
	other.pidns++; /* another PID namespace */
	EXPECT_EQ(mesh_lease_holder_gone(&other, &me), 0);
	other = h;
	other.pid = 0; /* not bound to a process (mesh job lease) */
	EXPECT_EQ(mesh_lease_holder_gone(&other, &me), 0);
	memset(&other, 0, sizeof other); /* format 1: unknown */
	other.pid = h.pid;
	EXPECT_EQ(mesh_lease_holder_gone(&other, &me), 0);
}

TEST(lease_store_lockdir_private)
{
	struct mesh_store *s;
	struct stat sb;
	ASSERT_EQ(mesh_store_file_open(&s, "fresh", "jb", 1), 0);
	s->ops->close(s);
	ASSERT_EQ(stat("fresh", &sb), 0);
	EXPECT_EQ(sb.st_mode & 0777, 0700);
	ASSERT_EQ(mkdir("gw", 0700), 0);
	ASSERT_EQ(chmod("gw", 0770), 0);
	EXPECT_EQ(mesh_store_file_open(&s, "gw", "jb", 1), MESH_E_NOTPRIVATE);
	EXPECT_EQ(mesh_store_file_check_dir("gw"), MESH_E_NOTPRIVATE);
	ASSERT_EQ(chmod("gw", 01777), 0); /* sticky does not make it private */
	EXPECT_EQ(mesh_store_file_open(&s, "gw", "jb", 1), MESH_E_NOTPRIVATE);
	ASSERT_EQ(chmod("gw", 0755), 0); /* others may read, not write: fine */
	ASSERT_EQ(mesh_store_file_open(&s, "gw", "jb", 1), 0);
	s->ops->close(s);
	ASSERT_EQ(mkdir("theirs", 0700), 0);
	ASSERT_EQ(chown("theirs", 4242, 4242), 0);
	EXPECT_EQ(mesh_store_file_open(&s, "theirs", "jb", 1), MESH_E_NOTPRIVATE);
	ASSERT_EQ(symlink("fresh", "link"), 0);
	EXPECT_EQ(mesh_store_file_open(&s, "link", "jb", 1), MESH_E_PATH);
	EXPECT_EQ(mesh_store_file_check_dir("missing"), 0);
	EXPECT_EQ(access("missing", F_OK), -1);
}

TEST(lease_store_remove_dir)
{
	struct mesh_store *s;
	struct mesh_lease_stamp st = {.deadline_ns = mesh_wall_ns() + 60 * S, .attempt = 1, .token = 7, .node = "n"};
	ASSERT_EQ(mesh_store_file_open(&s, "run", "jb", 1), 0);
	ASSERT_EQ(s->ops->claim(s, 0, 0, &st), 0);
	ASSERT_EQ(s->ops->claim(s, 1, 1, &st), 0);
	s->ops->close(s);
	EXPECT_EQ(mesh_store_file_remove_dir("run", 0), 0);
	EXPECT_EQ(access("run", F_OK), -1);
	EXPECT_EQ(mesh_store_file_remove_dir("run", 0), 0); /* already gone */
	ASSERT_EQ(mesh_store_file_open(&s, "keep", "jb", 1), 0);
	ASSERT_EQ(s->ops->claim(s, 0, 0, &st), 0);
	s->ops->close(s);
	t_write_file("keep/notes.txt", "mine\n");
	EXPECT_EQ(mesh_store_file_remove_dir("keep", 0), -ENOTEMPTY);
	EXPECT_EQ(access("keep/notes.txt", F_OK), 0);
	EXPECT_EQ(access("keep/jb.0.lease", F_OK), -1);
	ASSERT_EQ(chmod("keep", 0777), 0);
	t_write_file("keep/jb.1.lease", "planted\n");
	EXPECT_EQ(mesh_store_file_remove_dir("keep", 0), MESH_E_NOTPRIVATE);
	EXPECT_EQ(access("keep/jb.1.lease", F_OK), 0); /* untouched */
}
