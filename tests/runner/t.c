#include "runner/t.h"

#include "runner/leftover.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct t_case {
	const char *name;
	t_fn fn;
	unsigned timeout_s;
};

static struct t_case cases[1024];
static int ncases;
int t__failed;

void t__register(const char *name, t_fn fn, unsigned timeout_s)
{
	if (ncases == (int)(sizeof cases / sizeof cases[0])) {
		fprintf(stderr, "t: too many tests\n");
		exit(2);
	}
	cases[ncases++] = (struct t_case){name, fn, timeout_s};
}

void t__fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "    %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	t__failed = 1;
}

void t__abort(void)
{
	exit(1);
}

void t__skip(int kind, const char *fmt, ...)
{
	va_list ap;
	printf("    skip: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	fflush(stderr);
	_exit(t__failed ? 1 : kind); /* what failed before the skip still fails */
}

uint64_t t_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static char pathbufs[4][4096];
static int pathslot;

const char *t_bin(const char *name)
{
	const char *b = getenv("MESH_BUILD");
	char *p = pathbufs[pathslot++ & 3];
	snprintf(p, 4096, "%s/%s", b ? b : "build", name);
	return p;
}

const char *t_src(const char *rel)
{
	const char *b = getenv("MESH_SRC");
	char *p = pathbufs[pathslot++ & 3];
	snprintf(p, 4096, "%s/%s", b ? b : ".", rel);
	return p;
}

/* ASan's three-line warning when a program switches stacks (a clone
 * with a stack of its own) is about ASan, not the program: a test that
 * reads a program's stderr under make check would see it now and then.
 * Removed from out in place. */
static void drop_asan_noise(char *out)
{
	static const char *const lines[] = {"WARNING: ASan is ignoring requested __asan_handle_no_return",
					    "False positive error reports may follow\n",
					    "For details see https://github.com/google/sanitizers/issues/189\n"};
	char *at;
	while ((at = strstr(out, lines[0]))) {
		char *start = at;
		while (start > out && start[-1] != '\n') /* "==PID==" before it */
			start--;
		char *end = strchr(at, '\n');
		end = end ? end + 1 : at + strlen(at);
		for (size_t i = 1; i < 3; i++)
			if (!strncmp(end, lines[i], strlen(lines[i])))
				end += strlen(lines[i]);
		memmove(start, end, strlen(end) + 1);
	}
}

int t_sh(char *out, size_t cap, int merge_err, const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	int pfd[2], st;
	pid_t pid;
	size_t got = 0;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(pfd[1], 1);
		if (merge_err)
			dup2(pfd[1], 2);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	for (;;) {
		char tmp[4096];
		ssize_t r = read(pfd[0], tmp, sizeof tmp);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (out && got + 1 < cap) {
			size_t n = (size_t)r;
			if (n > cap - 1 - got)
				n = cap - 1 - got;
			memcpy(out + got, tmp, n);
			got += n;
		}
	}
	if (out && cap) {
		out[got] = 0;
		drop_asan_noise(out);
	}
	close(pfd[0]);
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

void t_write_file(const char *path, const char *content)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(content, f) < 0 || fclose(f) != 0)
		FAIL("cannot write %s: %s", path, strerror(errno));
}

char *t_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;
	if (!f)
		return NULL;
	for (;;) {
		if (n + 4097 > cap) {
			cap = cap ? cap * 2 : 8192;
			buf = realloc(buf, cap);
		}
		size_t r = fread(buf + n, 1, cap - n - 1, f);
		n += r;
		if (r == 0)
			break;
	}
	fclose(f);
	buf[n] = 0;
	if (len)
		*len = n;
	return buf;
}

int t_wait_for(int (*cond_fn)(void *), void *arg, unsigned timeout_ms)
{
	uint64_t end = t_now_ms() + timeout_ms;
	for (;;) {
		if (cond_fn(arg))
			return 1;
		if (t_now_ms() >= end)
			return 0;
		usleep(5000);
	}
}

/* Entries of the directory path (not . and ..), or -1. */
static int count_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

int t_count_fds(void)
{
	int n = count_entries("/proc/self/fd");
	return n < 0 ? -1 : n - 1; /* the DIR's own fd */
}

int t_proc_fds(int pid)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd", pid);
	return count_entries(path);
}

long t_proc_status(int pid, const char *key)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/status", pid);
	char *st = t_read_file(path, NULL);
	size_t k = strlen(key);
	const char *h = st;
	while (h && strncmp(h, key, k))
		h = strchr(h, '\n') ? strchr(h, '\n') + 1 : NULL;
	long v = h ? atol(h + k) : -1;
	free(st);
	return v;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(p);
	return 0;
}

static int selected(const char *name, int argc, char **argv)
{
	if (argc <= 1)
		return 1;
	for (int i = 1; i < argc; i++)
		if (strstr(name, argv[i]))
			return 1;
	return 0;
}

static int kept;

enum { RUN_PASSED, RUN_FAILED, RUN_SKIPPED };

/* MESH_TEST_TIMEOUT_SCALE (a whole number, 1..10; tests/run.sh sets 2
 * when it runs several binaries at once): each test's timeout times it.
 * A timeout catches a hang; tests that share the CPUs take longer. */
unsigned t_slack(void)
{
	const char *v = getenv("MESH_TEST_TIMEOUT_SCALE");
	unsigned k = v ? (unsigned)strtoul(v, NULL, 10) : 1;
	return k >= 1 && k <= 10 ? k : 1;
}

/* A tool's skip fails the run where every tool is meant to be installed. */
static int strict(void)
{
	const char *s = getenv("MESH_TEST_STRICT");
	return s && *s && strcmp(s, "0") != 0;
}

static int run_one(const struct t_case *c, const char *tmproot)
{
	char dir[8300];
	pid_t pid;
	int st = 0;
	uint64_t start = t_now_ms(), deadline;
	int timed_out = 0;
	snprintf(dir, sizeof dir, "%s/%s.XXXXXX", tmproot, c->name);
	if (!mkdtemp(dir)) {
		fprintf(stderr, "t: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "t: fork: %s\n", strerror(errno));
		return 1;
	}
	if (pid == 0) {
		setpgid(0, 0);
		if (chdir(dir) < 0)
			_exit(3);
		setenv("TMPDIR", dir, 1);
		setenv("T_DIR", dir, 1);
		/* A meshd a test starts keeps its jobs here, never in the
		 * user's own state directory (docs/jobs.md). */
		setenv("XDG_STATE_HOME", dir, 1);
		c->fn();
		fflush(stdout);
		fflush(stderr);
		_exit(t__failed ? 1 : 0);
	}
	setpgid(pid, pid);
	unsigned limit_s = c->timeout_s * t_slack();
	deadline = start + (uint64_t)limit_s * 1000;
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR) {
			st = 0xff00;
			break;
		}
		if (t_now_ms() >= deadline) {
			timed_out = 1;
			kill(-pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		usleep(2000);
	}
	/* Whatever the test started in its group goes with it; what it
	 * started outside (runner/leftover.h) is taken down here. */
	kill(-pid, SIGKILL);
	int left = t_leftover_reap(dir);
	int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	int skipped = !timed_out && (code == T_SKIP_HOST || code == T_SKIP_TOOL);
	int failed = timed_out || (code != 0 && !skipped) || (code == T_SKIP_TOOL && strict());
	uint64_t ms = t_now_ms() - start;
	if (skipped && failed)
		printf("FAIL %s: skipped for a missing tool, and MESH_TEST_STRICT is set\n", c->name);
	else if (skipped)
		printf("SKIP %s (%llu ms)\n", c->name, (unsigned long long)ms);
	else if (timed_out)
		printf("FAIL %s: timed out after %u s\n", c->name, limit_s);
	else if (WIFSIGNALED(st))
		printf("FAIL %s: killed by signal %d (%s)\n", c->name, WTERMSIG(st), strsignal(WTERMSIG(st)));
	else if (failed)
		printf("FAIL %s (%llu ms)%s%s\n", c->name, (unsigned long long)ms, getenv("T_KEEP") ? "  kept in " : "",
		       getenv("T_KEEP") ? dir : "");
	else
		printf("ok   %s (%llu ms)\n", c->name, (unsigned long long)ms);
	if (left)
		printf("     it left %d server(s) or namespace(s) up; taken down\n", left);
	fflush(stdout);
	const char *keep = getenv("T_KEEP"); /* set: a failed test's directory stays; "all": every test's */
	if (keep && !failed && strcmp(keep, "all") == 0)
		printf("     kept in %s\n", dir);
	if (keep && (failed || strcmp(keep, "all") == 0))
		kept = 1;
	else
		nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return failed ? RUN_FAILED : skipped ? RUN_SKIPPED : RUN_PASSED;
}

int main(int argc, char **argv)
{
	char tmproot[4096];
	const char *tmp = getenv("TMPDIR");
	int n[3] = {0, 0, 0};
	signal(SIGPIPE, SIG_IGN);
	/* Workers of a root meshd run as nobody unless told; tests' dirs are
	 * root's own (0700), so tests run them as root unless a test says. */
	setenv("MESHD_DEFAULT_USER", "root", 0);
	snprintf(tmproot, sizeof tmproot, "%s/mesh-t.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(tmproot)) {
		perror("t: mkdtemp");
		return 2;
	}
	for (int i = 0; i < ncases; i++) {
		if (!selected(cases[i].name, argc, argv))
			continue;
		n[run_one(&cases[i], tmproot)]++;
	}
	if (kept)
		rmdir(tmproot); /* fails, keeping the failed tests' dirs, when any is left */
	else
		nftw(tmproot, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	if (n[RUN_SKIPPED])
		printf("%d skipped\n", n[RUN_SKIPPED]);
	printf("%d passed, %d failed\n", n[RUN_PASSED], n[RUN_FAILED]);
	return n[RUN_FAILED] ? 1 : 0;
}
