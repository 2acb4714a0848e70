/* mesh's test runner (after beanstalkd's ct and libuv's runner).
 *
 *   #include "runner/t.h"
 *   TEST(journal_appends) { ... EXPECT_EQ(n, 3); ... }
 *   TEST_TIMEOUT(slow_thing, 120) { ... }
 *
 * Each test runs in its own forked process and process group, in a fresh
 * temporary directory (its cwd), under a timeout (30 s unless given, times
 * MESH_TEST_TIMEOUT_SCALE: tests/run.sh sets 2 for parallel runs); after
 * it ends, its whole process group is killed.  A test binary runs all its
 * tests, or those whose name contains any argument.  Each EXPECT prints the
 * expression and both values on failure and marks the test failed; ASSERT
 * also ends it; SKIP ends it as skipped, with its reason.  The last line of
 * output is "N passed, N failed" (a line "N skipped" before it when any
 * was).
 *
 * Environment for tests: MESH_BUILD (absolute build dir: $MESH_BUILD/mesh,
 * $MESH_BUILD/meshd, $MESH_BUILD/examples/...), MESH_SRC (the source tree). */
#ifndef MESH_TEST_T_H
#define MESH_TEST_T_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef void (*t_fn)(void);
void t__register(const char *name, t_fn fn, unsigned timeout_s);
void t__fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void t__abort(void) __attribute__((noreturn));
enum { T_SKIP_HOST = 77, T_SKIP_TOOL = 78 };
void t__skip(int kind, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
extern int t__failed;

#define TEST_TIMEOUT(name, secs)                                          \
	static void name(void);                                           \
	__attribute__((constructor)) static void t__reg_##name(void)      \
	{                                                                 \
		t__register(#name, name, secs);                           \
	}                                                                 \
	static void name(void)
#define TEST(name) TEST_TIMEOUT(name, 30)

#define T__CMP(a, op, b, fatal)                                                                          \
	do {                                                                                             \
		long long t__a = (long long)(a), t__b = (long long)(b);                                  \
		if (!(t__a op t__b)) {                                                                   \
			t__fail(__FILE__, __LINE__, "expected %s %s %s: %lld vs %lld", #a, #op, #b, t__a, \
				t__b);                                                                   \
			if (fatal)                                                                       \
				t__abort();                                                              \
		}                                                                                        \
	} while (0)
#define T__UCMP(a, op, b, fatal)                                                                         \
	do {                                                                                             \
		unsigned long long t__a = (unsigned long long)(a), t__b = (unsigned long long)(b);       \
		if (!(t__a op t__b)) {                                                                   \
			t__fail(__FILE__, __LINE__, "expected %s %s %s: %llu vs %llu", #a, #op, #b, t__a, \
				t__b);                                                                   \
			if (fatal)                                                                       \
				t__abort();                                                              \
		}                                                                                        \
	} while (0)
#define T__STR(a, b, want_eq, fatal)                                                                      \
	do {                                                                                              \
		const char *t__a = (a), *t__b = (b);                                                      \
		int t__eq = t__a && t__b && strcmp(t__a, t__b) == 0;                                      \
		if (t__eq != (want_eq)) {                                                                 \
			t__fail(__FILE__, __LINE__, "expected %s %s %s: \"%s\" vs \"%s\"", #a,            \
				(want_eq) ? "==" : "!=", #b, t__a ? t__a : "(null)", t__b ? t__b : "(null)"); \
			if (fatal)                                                                        \
				t__abort();                                                               \
		}                                                                                         \
	} while (0)
#define T__CONTAINS(hay, needle, fatal)                                                                    \
	do {                                                                                               \
		const char *t__h = (hay), *t__n = (needle);                                                \
		if (!t__h || !t__n || !strstr(t__h, t__n)) {                                               \
			t__fail(__FILE__, __LINE__, "expected %s to contain %s: \"%s\" does not contain \"%s\"", \
				#hay, #needle, t__h ? t__h : "(null)", t__n ? t__n : "(null)");            \
			if (fatal)                                                                         \
				t__abort();                                                                \
		}                                                                                          \
	} while (0)

#define EXPECT_EQ(a, b) T__CMP(a, ==, b, 0)
#define EXPECT_NE(a, b) T__CMP(a, !=, b, 0)
#define EXPECT_LT(a, b) T__CMP(a, <, b, 0)
#define EXPECT_LE(a, b) T__CMP(a, <=, b, 0)
#define EXPECT_GT(a, b) T__CMP(a, >, b, 0)
#define EXPECT_GE(a, b) T__CMP(a, >=, b, 0)
/* The same for doubles (T__CMP compares as long long: 0.5 > 0.3 fails
 * there): EXPECT_DBL(x, >=, 1.4). */
#define EXPECT_DBL(a, op, b)                                                                               \
	do {                                                                                               \
		double t__a = (double)(a), t__b = (double)(b);                                             \
		if (!(t__a op t__b))                                                                       \
			t__fail(__FILE__, __LINE__, "expected %s %s %s: %.6g vs %.6g", #a, #op, #b, t__a, t__b); \
	} while (0)
#define EXPECT_UEQ(a, b) T__UCMP(a, ==, b, 0)
#define EXPECT_TRUE(x) T__CMP(!!(x), ==, 1, 0)
#define EXPECT_FALSE(x) T__CMP(!!(x), ==, 0, 0)
#define EXPECT_STREQ(a, b) T__STR(a, b, 1, 0)
#define EXPECT_STRNE(a, b) T__STR(a, b, 0, 0)
#define EXPECT_CONTAINS(h, n) T__CONTAINS(h, n, 0)
#define ASSERT_EQ(a, b) T__CMP(a, ==, b, 1)
#define ASSERT_NE(a, b) T__CMP(a, !=, b, 1)
#define ASSERT_LT(a, b) T__CMP(a, <, b, 1)
#define ASSERT_LE(a, b) T__CMP(a, <=, b, 1)
#define ASSERT_GT(a, b) T__CMP(a, >, b, 1)
#define ASSERT_GE(a, b) T__CMP(a, >=, b, 1)
#define ASSERT_UEQ(a, b) T__UCMP(a, ==, b, 1)
#define ASSERT_TRUE(x) T__CMP(!!(x), ==, 1, 1)
#define ASSERT_FALSE(x) T__CMP(!!(x), ==, 0, 1)
#define ASSERT_STREQ(a, b) T__STR(a, b, 1, 1)
#define ASSERT_CONTAINS(h, n) T__CONTAINS(h, n, 1)
#define FAIL(...) (t__fail(__FILE__, __LINE__, __VA_ARGS__), t__abort())
/* Ends the test as skipped, saying why (printf-style): SKIP where this
 * machine cannot run it (the kernel refuses a namespace, no IPv6
 * loopback); SKIP_TOOL where an optional tool that `mk/deps.sh test`
 * installs is missing.  A skip is neither passed nor failed; under
 * MESH_TEST_STRICT=1 (CI, which installs every tool) a SKIP_TOOL counts as
 * failed. */
#define SKIP(...) t__skip(T_SKIP_HOST, __VA_ARGS__)
#define SKIP_TOOL(...) t__skip(T_SKIP_TOOL, __VA_ARGS__)

/* Helpers for tests that drive real programs. */

/* Absolute path of a built program: t_bin("mesh") -> $MESH_BUILD/mesh. Static buffer per call slot (4 rotating). */
const char *t_bin(const char *name);
/* Absolute path under the source tree. Same buffer rules. */
const char *t_src(const char *rel);
/* Runs `sh -c cmd` (printf-style), captures stdout (and stderr when
 * merge_err) into out (NUL-terminated, truncated to cap-1).  Returns the exit
 * status, 128+signal for a signal death, -1 if it could not run. */
int t_sh(char *out, size_t cap, int merge_err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Writes a file (whole), or fails the test. */
void t_write_file(const char *path, const char *content);
/* Reads a file into a malloc'd NUL-terminated string, or NULL. */
char *t_read_file(const char *path, size_t *len);
/* Polls cond_fn(arg) every 5 ms until true or timeout_ms passes; returns 1 if it became true. */
int t_wait_for(int (*cond_fn)(void *), void *arg, unsigned timeout_ms);
/* Milliseconds on a monotonic clock. */
uint64_t t_now_ms(void);
/* How many times slower than an idle machine this run may be: 1, or
 * MESH_TEST_TIMEOUT_SCALE (2 where tests/run.sh runs several binaries at
 * once).  Each test's timeout is multiplied by it, and so is a latency a
 * test bounds (a reap within the TTL and 150 ms): the bound still tells a
 * hang or a missed wake-up from a busy machine. */
unsigned t_slack(void);
/* Number of open fds in this process. */
int t_count_fds(void);
/* Number of open fds of process pid (/proc/<pid>/fd), or -1. */
int t_proc_fds(int pid);
/* The number after key ("VmRSS:", "Threads:") at a line's start in
 * /proc/<pid>/status, or -1. */
long t_proc_status(int pid, const char *key);

#endif
