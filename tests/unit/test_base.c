#include "base/buf.h"
#include "base/clock.h"
#include "base/crc.h"
#include "base/err.h"
#include "base/io.h"
#include "base/parse.h"
#include "base/path.h"
#include "base/utf8.h"
#include "runner/t.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

TEST(parse_u64_table)
{
	static const struct {
		const char *s;
		uint64_t max;
		int rc;
		uint64_t v;
	} rows[] = {
		{"0", 10, 0, 0},
		{"10", 10, 0, 10},
		{"11", 10, MESH_E_RANGE, 0},
		{"12x", 100, MESH_E_PARSE, 0},
		{"-1", 100, MESH_E_PARSE, 0},
		{"+1", 100, MESH_E_PARSE, 0},
		{" 1", 100, MESH_E_PARSE, 0},
		{"", 100, MESH_E_PARSE, 0},
		{"18446744073709551615", UINT64_MAX, 0, UINT64_MAX},
		{"18446744073709551616", UINT64_MAX, MESH_E_RANGE, 0},
		{"99999999999999999999999", UINT64_MAX, MESH_E_RANGE, 0},
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		uint64_t v = 777;
		int rc = mesh_parse_u64(rows[i].s, rows[i].max, &v);
		EXPECT_EQ(rc, rows[i].rc);
		if (rc == 0)
			EXPECT_UEQ(v, rows[i].v);
		else
			EXPECT_UEQ(v, 777);
	}
}

TEST(parse_i64_and_seconds_and_size)
{
	int64_t v;
	uint64_t ns, sz;
	EXPECT_EQ(mesh_parse_i64("-5", -10, 10, &v), 0);
	EXPECT_EQ(v, -5);
	EXPECT_EQ(mesh_parse_i64("-11", -10, 10, &v), MESH_E_RANGE);
	EXPECT_EQ(mesh_parse_i64("-9223372036854775808", INT64_MIN, INT64_MAX, &v), 0);
	EXPECT_EQ(v, INT64_MIN);
	EXPECT_EQ(mesh_parse_i64("--1", -10, 10, &v), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_seconds("1.5", UINT64_MAX, &ns), 0);
	EXPECT_UEQ(ns, 1500000000ull);
	EXPECT_EQ(mesh_parse_seconds("2", UINT64_MAX, &ns), 0);
	EXPECT_UEQ(ns, 2000000000ull);
	EXPECT_EQ(mesh_parse_seconds("1.", UINT64_MAX, &ns), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_seconds(".5", UINT64_MAX, &ns), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_seconds("0.0000000001", UINT64_MAX, &ns), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_size("512M", UINT64_MAX, &sz), 0);
	EXPECT_UEQ(sz, 512ull << 20);
	EXPECT_EQ(mesh_parse_size("M", UINT64_MAX, &sz), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_size("99999999999T", UINT64_MAX, &sz), MESH_E_RANGE);
	/* Durations: mesh's one grammar, bare seconds or a unit (ms, s, m, h, d). */
	EXPECT_EQ(mesh_parse_duration("250ms", UINT64_MAX, &ns), 0);
	EXPECT_UEQ(ns, 250000000ull);
	EXPECT_EQ(mesh_parse_duration("1.5m", UINT64_MAX, &ns), 0);
	EXPECT_UEQ(ns, 90000000000ull);
	EXPECT_EQ(mesh_parse_duration("7d", UINT64_MAX, &ns), 0);
	EXPECT_UEQ(ns, 7ull * 86400 * 1000000000ull);
	EXPECT_EQ(mesh_parse_duration("300", UINT64_MAX, &ns), 0);
	EXPECT_UEQ(ns, 300ull * 1000000000ull);
	EXPECT_EQ(mesh_parse_duration("300s", UINT64_MAX, &ns), 0);
	EXPECT_UEQ(ns, 300ull * 1000000000ull);
	EXPECT_EQ(mesh_parse_duration("1.5h", UINT64_MAX, &ns), 0);
	EXPECT_UEQ(ns, 5400ull * 1000000000ull);
	EXPECT_EQ(mesh_parse_duration("0.5", UINT64_MAX, &ns), 0);
	EXPECT_UEQ(ns, 500000000ull);
	EXPECT_EQ(mesh_parse_duration("d", UINT64_MAX, &ns), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_duration("ms", UINT64_MAX, &ns), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_duration("10x", UINT64_MAX, &ns), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_duration("5 m", UINT64_MAX, &ns), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_duration("-5m", UINT64_MAX, &ns), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_duration("", UINT64_MAX, &ns), MESH_E_PARSE);
	EXPECT_EQ(mesh_parse_duration("2h", 3600ull * 1000000000ull, &ns), MESH_E_RANGE);
}

TEST(path_law)
{
	const char *why = NULL;
	EXPECT_EQ(mesh_path_journal_ok("job.log", &why), 0);
	EXPECT_EQ(mesh_path_journal_ok("dir/job.log", &why), 0);
	EXPECT_EQ(mesh_path_journal_ok("job.txt", &why), MESH_E_PATH);
	EXPECT_EQ(mesh_path_journal_ok(".log", &why), MESH_E_PATH);
	EXPECT_EQ(mesh_path_journal_ok("a/../job.log", &why), MESH_E_PATH);
	EXPECT_CONTAINS(why, "..");
	EXPECT_EQ(mesh_path_lockdir_ok("locks", &why), 0);
	EXPECT_EQ(mesh_path_lockdir_ok("/tmp/x/locks", &why), 0);
	EXPECT_EQ(mesh_path_lockdir_ok("/var/locks", &why), MESH_E_PATH);
	EXPECT_EQ(mesh_path_lockdir_ok("a/b", &why), MESH_E_PATH);
	EXPECT_EQ(mesh_path_lockdir_ok("/tmp/../etc", &why), MESH_E_PATH);
	ASSERT_EQ(symlink("target.log", "link.log"), 0);
	EXPECT_EQ(mesh_path_journal_ok("link.log", &why), MESH_E_PATH);
	EXPECT_CONTAINS(why, "symlink");
	ASSERT_EQ(mkdir("real", 0755), 0);
	ASSERT_EQ(symlink("real", "ln"), 0);
	EXPECT_EQ(mesh_path_journal_ok("ln/j.log", &why), MESH_E_PATH);
	/* A program's own lock directory inside its private one (meshd's
	 * jobs): absolute, no '..', no symlink; never a user's path. */
	char here[4096], p[4200];
	ASSERT_TRUE(getcwd(here, sizeof here) != NULL);
	snprintf(p, sizeof p, "%s/real/leases", here);
	EXPECT_EQ(mesh_path_lockdir_private_ok(p, &why), 0);
	EXPECT_EQ(mesh_path_lockdir_private_ok("/var/lib/x/leases", &why), 0);
	EXPECT_EQ(mesh_path_lockdir_private_ok("leases", &why), MESH_E_PATH);
	EXPECT_EQ(mesh_path_lockdir_private_ok("/var/../tmp/x", &why), MESH_E_PATH);
	snprintf(p, sizeof p, "%s/ln/leases", here);
	EXPECT_EQ(mesh_path_lockdir_private_ok(p, &why), MESH_E_PATH);
	EXPECT_CONTAINS(why, "symlink");
}

TEST(crc32c_known_values)
{
	/* RFC 3720 test vector: 32 bytes of zeros -> 0x8a9136aa; "123456789" -> 0xe3069283. */
	unsigned char z[32] = {0};
	EXPECT_UEQ(mesh_crc32c(0, z, sizeof z), 0x8a9136aau);
	EXPECT_UEQ(mesh_crc32c(0, "123456789", 9), 0xe3069283u);
	/* Continuation equals one pass. */
	uint32_t c = mesh_crc32c(0, "1234", 4);
	EXPECT_UEQ(mesh_crc32c(c, "56789", 5), 0xe3069283u);
}

TEST(errors_have_names_and_text)
{
	EXPECT_STREQ(mesh_err_name(MESH_E_CORRUPT), "E_CORRUPT");
	EXPECT_STREQ(mesh_err_name(-ENOSPC), "ENOSPC");
	EXPECT_STREQ(mesh_strerror(MESH_E_FOREIGN), "not a mesh journal");
	EXPECT_STREQ(mesh_strerror(-ENOENT), "No such file or directory");
}

TEST(buf_grows)
{
	struct mesh_buf b = MESH_BUF_INIT;
	for (int i = 0; i < 1000; i++)
		ASSERT_EQ(mesh_buf_addf(&b, "%d,", i), 0);
	EXPECT_EQ(b.len, 3890);
	EXPECT_EQ(strncmp(b.p, "0,1,2,", 6), 0);
	mesh_buf_release(&b);
	EXPECT_TRUE(b.p == NULL);
}

/* An array grown an element at a time keeps every element; a capacity that
 * holds what is asked is left alone; an impossible size is refused with
 * the array and its capacity as they were. */
TEST(grow_doubles_and_refuses_what_cannot_be)
{
	size_t cap = 0, n = 0;
	uint32_t *v = NULL;
	for (uint32_t i = 0; i < 1000; i++) {
		uint32_t *nv = mesh_grow(v, &cap, n + 1, sizeof *nv);
		ASSERT_TRUE(nv != NULL);
		v = nv;
		v[n++] = i * 7;
	}
	EXPECT_UEQ(cap, 1024);
	for (uint32_t i = 0; i < 1000; i++)
		if (v[i] != i * 7)
			FAIL("element %u is %u", i, v[i]);
	EXPECT_TRUE(mesh_grow(v, &cap, 1024, sizeof *v) == v);
	EXPECT_UEQ(cap, 1024);
	EXPECT_TRUE(mesh_grow(v, &cap, SIZE_MAX / 2, sizeof *v) == NULL);
	EXPECT_TRUE(mesh_grow(v, &cap, SIZE_MAX, 1) == NULL);
	EXPECT_UEQ(cap, 1024);
	EXPECT_UEQ(v[999], 999 * 7);
	free(v);
	cap = 0;
	void *first = mesh_grow(NULL, &cap, 1, 8);
	ASSERT_TRUE(first != NULL);
	EXPECT_UEQ(cap, 16);
	free(first);
}

/* A bell: rung any number of times, one poll wakes, one quiet empties
 * it; a count at its limit still counts as rung; a quiet of an empty one
 * does not block. */
TEST(eventfd_bell_rings_and_quiets)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	ASSERT_GE(fd, 0);
	struct pollfd pf = {fd, POLLIN, 0};
	EXPECT_EQ(poll(&pf, 1, 0), 0);
	mesh_efd_quiet(fd); /* empty: returns at once */
	EXPECT_EQ(mesh_efd_ring(fd), 0);
	EXPECT_EQ(mesh_efd_ring(fd), 0);
	EXPECT_EQ(poll(&pf, 1, 0), 1);
	mesh_efd_quiet(fd);
	EXPECT_EQ(poll(&pf, 1, 0), 0);
	uint64_t most = UINT64_MAX - 1; /* the count's limit: the next write would block */
	ASSERT_EQ(write(fd, &most, sizeof most), (ssize_t)sizeof most);
	EXPECT_EQ(mesh_efd_ring(fd), 0);
	EXPECT_EQ(poll(&pf, 1, 0), 1);
	close(fd);
	EXPECT_EQ(mesh_efd_ring(fd), -EBADF);
}

TEST(fault_injection_fails_the_nth_write)
{
	int fd = open("f", O_WRONLY | O_CREAT, 0644);
	ASSERT_GE(fd, 0);
	mesh_fault_arm(MESH_FAULT_WRITE, ENOSPC, 2, 0);
	EXPECT_EQ(mesh_write_all(fd, "a", 1), 0);
	EXPECT_EQ(mesh_write_all(fd, "b", 1), 0);
	EXPECT_EQ(mesh_write_all(fd, "c", 1), -ENOSPC);
	EXPECT_EQ(mesh_write_all(fd, "d", 1), 0);
	mesh_fault_arm(MESH_FAULT_FSYNC, EIO, 0, 1);
	EXPECT_EQ(mesh_fsync(fd), -EIO);
	EXPECT_EQ(mesh_fsync(fd), -EIO);
	mesh_fault_disarm();
	EXPECT_EQ(mesh_fsync(fd), 0);
	close(fd);
	size_t n;
	char *s = t_read_file("f", &n);
	EXPECT_STREQ(s, "abd");
	free(s);
}

TEST(atomic_write_replaces_whole_file)
{
	char *s;
	ASSERT_EQ(mesh_write_file_atomic("state", "one", 3, 0644), 0);
	ASSERT_EQ(mesh_write_file_atomic("state", "two!", 4, 0644), 0);
	size_t n;
	ASSERT_EQ(mesh_read_file("state", 100, &s, &n), 0);
	EXPECT_STREQ(s, "two!");
	free(s);
	mesh_fault_arm(MESH_FAULT_FSYNC, ENOSPC, 0, 0);
	EXPECT_EQ(mesh_write_file_atomic("state", "three", 5, 0644), -ENOSPC);
	ASSERT_EQ(mesh_read_file("state", 100, &s, &n), 0);
	EXPECT_STREQ(s, "two!");
	free(s);
	EXPECT_EQ(mesh_read_file("state", 2, &s, &n), MESH_E_TOOBIG);
}

TEST(sync_many_syncs_each_and_says_the_first_error)
{
	int fds[4];
	unsigned char data[4] = {1, 1, 0, 1};
	const char *names[4] = {"s0", "s1", ".", "s3"};
	for (int i = 0; i < 4; i++) {
		fds[i] = open(names[i], i == 2 ? O_RDONLY | O_DIRECTORY : O_WRONLY | O_CREAT, 0644);
		ASSERT_GE(fds[i], 0);
		if (i != 2)
			EXPECT_EQ(mesh_write_all(fds[i], "x", 1), 0);
	}
	EXPECT_EQ(mesh_sync_many(fds, data, 4), 0);
	/* One of the four fails (which one depends on the threads): the
	 * call fails with it, and the other three still ran. */
	mesh_fault_arm(MESH_FAULT_FSYNC, EIO, 3, 0);
	EXPECT_EQ(mesh_sync_many(fds, data, 4), -EIO);
	mesh_fault_disarm();
	/* A closed descriptor is an error too, not a skip. */
	int bad[2] = {fds[0], -1};
	EXPECT_EQ(mesh_sync_many(bad, data, 2), -EBADF);
	int many[MESH_SYNC_MANY_MAX + 1];
	unsigned char d[MESH_SYNC_MANY_MAX + 1] = {0};
	for (int i = 0; i <= MESH_SYNC_MANY_MAX; i++)
		many[i] = fds[0];
	EXPECT_EQ(mesh_sync_many(many, d, MESH_SYNC_MANY_MAX + 1), -EINVAL);
	EXPECT_EQ(mesh_sync_many(many, d, MESH_SYNC_MANY_MAX), 0);
	for (int i = 0; i < 4; i++)
		close(fds[i]);
}

TEST(clock_moves_forward)
{
	uint64_t a = mesh_mono_ns();
	mesh_sleep_ns(2 * MESH_NS_PER_MS);
	EXPECT_GE(mesh_mono_ns() - a, 2 * MESH_NS_PER_MS);
}

/* meshd's loop reads its clock, then waits for the core's lock while a
 * call ends and stamps its worker: that use is after the loop's now, no
 * idle time at all, never a wrap to centuries that reaps the worker (a
 * start waiting for ready then hung: the worker went away unasked). */
TEST(clock_since_a_later_stamp_is_no_time)
{
	EXPECT_UEQ(mesh_ns_since(100, 40), 60);
	EXPECT_UEQ(mesh_ns_since(100, 100), 0);
	EXPECT_UEQ(mesh_ns_since(100, 101), 0);
	EXPECT_UEQ(mesh_ns_since(0, UINT64_MAX), 0);
}

TEST(buf_is_terminated_after_grow_and_read_file_reads_proc)
{
	struct mesh_buf b = MESH_BUF_INIT;
	ASSERT_EQ(mesh_buf_grow(&b, 10), 0);
	EXPECT_EQ(b.p[0], 0);
	mesh_buf_release(&b);
	char *s;
	size_t n;
	ASSERT_EQ(mesh_read_file("/proc/self/status", 1 << 20, &s, &n), 0);
	EXPECT_GT(n, 0);
	EXPECT_CONTAINS(s, "VmRSS");
	free(s);
}

TEST(utf8_sanitize_replaces_each_invalid_byte)
{
	static const struct {
		const char *in;
		size_t n;
		const char *out;
	} rows[] = {
		{"plain", 5, "plain"},
		{"caf\xc3\xa9", 5, "caf\xc3\xa9"},				/* valid 2-byte */
		{"caf\xe9", 4, "caf\xef\xbf\xbd"},				/* Latin-1 */
		{"cut \xe2\x82", 6, "cut \xef\xbf\xbd\xef\xbf\xbd"},		/* cut in the middle */
		{"\x80x", 2, "\xef\xbf\xbdx"},					/* stray continuation */
		{"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},			/* overlong */
		{"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},	/* surrogate */
		{"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
		{"\xf0\x9f\x98\x80", 4, "\xf0\x9f\x98\x80"},			/* a 4-byte emoji */
		{"a\0b", 3, "a\xef\xbf\xbd" "b"},				/* NUL */
		{"\xef\xbb\xbf", 3, "\xef\xbb\xbf"},				/* BOM is valid */
	};
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		size_t n = 0;
		char *s = mesh_utf8_sanitize(rows[i].in, rows[i].n, &n);
		ASSERT_TRUE(s != NULL);
		EXPECT_STREQ(s, rows[i].out);
		EXPECT_UEQ(n, strlen(rows[i].out));
		EXPECT_UEQ(mesh_utf8_valid_prefix(s, n), n);
		free(s);
	}
	EXPECT_UEQ(mesh_utf8_valid_prefix("ab\xe9", 3), 2);
}
