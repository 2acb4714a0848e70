/* A Python worker's round trip through a slot, beside the C worker's and a
 * Python Unix-socket echo server's, measured in the same run.
 *
 *   c worker:       build/examples/echo_worker through a slot (mesh_slot_call
 *                   as meshd calls: spinning MESH_SLOT_CALL_SPIN_NS on the reply)
 *   python worker:  examples/python/echo.py (mesh.worker, memoryview in,
 *                   bytes out) through a slot, the same way
 *   python socket:  examples/python/socket_echo.py, a length-prefixed echo
 *                   over an AF_UNIX stream socket (write + read per round)
 *
 * Both workers run with the library's default spin, requests back to back,
 * 64 bytes.  Targets (docs/python.md): the Python worker adds <= 5 us to the
 * C worker at p50, and is faster than the Python socket server.
 * Usage: bench_python [rounds]   (MESH_BENCH_QUICK=1: fewer rounds;
 * MESH_BUILD, MESH_SRC: the build and source trees, as bench/run.sh sets) */
#include "base/clock.h"
#include "base/err.h"
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define MSG 64
#define PYTHON "/usr/bin/python3"

static const char *build_dir, *src_dir;

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct lat {
	double p50, p99;
};

/* Sorts v (n round trips after the warm-up) into its percentiles, microseconds. */
static struct lat percentiles(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_u64);
	struct lat l = {v[n / 2] / 1000.0, v[(n * 99) / 100] / 1000.0};
	return l;
}

/* In a child: its output out of the figures' way. */
static void quiet(void)
{
	int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (fd >= 0)
		dup2(fd, 1);
}

/* Round trips through a slot to a worker program argv, started as meshd
 * starts one (its control channel as MESH_CONTROL_FD). */
static int slot_rtt(char *const argv[], size_t rounds, struct lat *out)
{
	struct mesh_ctl *ctl;
	struct mesh_slot *s;
	int child_fd;
	if (mesh_ctl_pair(&ctl, &child_fd) < 0 || mesh_slot_create(&s, 0, 1u << 16) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		char lib[4200], path[4200];
		dup2(child_fd, 10);
		quiet();
		setenv(MESH_CONTROL_FD_ENV, "10", 1);
		snprintf(lib, sizeof lib, "%s/libmeshworker.so", build_dir);
		snprintf(path, sizeof path, "%s/sdk/python", src_dir);
		setenv("MESH_WORKER_LIB", lib, 1);
		setenv("PYTHONPATH", path, 1);
		execv(argv[0], argv);
		_exit(127);
	}
	close(child_fd);
	int rc = -1;
	uint64_t *t = malloc((rounds + rounds / 10) * sizeof *t);
	struct mesh_ctl_msg m;
	if (t && mesh_ctl_wait(ctl, &m, 20 * MESH_NS_PER_S) == 0 && m.kind == MESH_CTL_READY &&
	    mesh_ctl_run(ctl, s, 1) == 0 && mesh_ctl_wait(ctl, &m, 20 * MESH_NS_PER_S) == 0 &&
	    m.kind == MESH_CTL_ONLINE) {
		char req[MSG];
		memset(req, 'r', sizeof req);
		rc = 0;
		for (size_t i = 0; i < rounds + rounds / 10 && rc == 0; i++) {
			void *rep;
			size_t n;
			uint64_t t0 = mesh_mono_ns();
			rc = mesh_slot_call(s, req, sizeof req, &rep, &n, 5 * MESH_NS_PER_S, MESH_SLOT_CALL_SPIN_NS);
			t[i] = mesh_mono_ns() - t0;
			if (rc == 0 && (n != MSG || memcmp(rep, req, MSG) != 0))
				rc = -1;
			free(rep);
		}
		mesh_ctl_exit(ctl, s);
	}
	if (rc != 0)
		kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	mesh_ctl_free(ctl);
	mesh_slot_free(s);
	if (rc == 0)
		*out = percentiles(t + rounds / 10, rounds);
	free(t);
	return rc;
}

static int io_full(int fd, void *b, size_t n, int wr)
{
	for (size_t o = 0; o < n;) {
		ssize_t k = wr ? write(fd, (char *)b + o, n - o) : read(fd, (char *)b + o, n - o);
		if (k <= 0)
			return -1;
		o += (size_t)k;
	}
	return 0;
}

/* Round trips to the Python socket echo server (4-byte length, payload). */
static int python_socket_rtt(size_t rounds, struct lat *out)
{
	char script[4200];
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof sa.sun_path, "/tmp/mesh-bench-python-%d.sock", (int)getpid());
	snprintf(script, sizeof script, "%s/examples/python/socket_echo.py", src_dir);
	pid_t pid = fork();
	if (pid == 0) {
		quiet();
		execl(PYTHON, "python3", script, sa.sun_path, (char *)NULL);
		_exit(127);
	}
	int fd = -1;
	for (int i = 0; i < 2000 && fd < 0; i++) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
			close(fd);
			fd = -1;
			mesh_sleep_ns(10 * MESH_NS_PER_MS); /* python3 is starting */
		}
	}
	int rc = fd < 0 ? -1 : 0;
	uint64_t *t = malloc((rounds + rounds / 10) * sizeof *t);
	uint8_t b[4 + MSG];
	for (size_t i = 0; t && i < rounds + rounds / 10 && rc == 0; i++) {
		uint32_t len = MSG;
		memcpy(b, &len, 4); /* little-endian: x86-64, aarch64 */
		memset(b + 4, 's', MSG);
		uint64_t t0 = mesh_mono_ns();
		if (io_full(fd, b, sizeof b, 1) < 0 || io_full(fd, b, sizeof b, 0) < 0)
			rc = -1;
		t[i] = mesh_mono_ns() - t0;
	}
	if (fd >= 0)
		close(fd);
	if (rc != 0)
		kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	unlink(sa.sun_path);
	if (rc == 0 && t)
		*out = percentiles(t + rounds / 10, rounds);
	free(t);
	return t ? rc : -1;
}

int main(int argc, char **argv)
{
	size_t rounds = getenv("MESH_BENCH_QUICK") ? 2000 : 20000;
	if (argc > 1)
		rounds = strtoul(argv[1], NULL, 10);
	if (rounds < 10)
		rounds = 10;
	build_dir = getenv("MESH_BUILD") ? getenv("MESH_BUILD") : "build";
	src_dir = getenv("MESH_SRC") ? getenv("MESH_SRC") : ".";
	if (access(PYTHON, X_OK) != 0) {
		printf("   skipped: no %s (mk/deps.sh test installs python3)\n", PYTHON);
		return 0;
	}
	char c_worker[4200], py_worker[4200];
	snprintf(c_worker, sizeof c_worker, "%s/examples/echo_worker", build_dir);
	snprintf(py_worker, sizeof py_worker, "%s/examples/python/echo.py", src_dir);
	char *c_argv[] = {c_worker, NULL};
	char *py_argv[] = {PYTHON, py_worker, NULL};
	struct lat c, py, sock;
	if (slot_rtt(c_argv, rounds, &c) < 0 || slot_rtt(py_argv, rounds, &py) < 0 ||
	    python_socket_rtt(rounds, &sock) < 0) {
		fprintf(stderr, "bench_python: a round trip failed\n");
		return 1;
	}
	printf("   round trip, %d-byte echo, %zu rounds     p50 us   p99 us\n", MSG, rounds);
	printf("   c worker through a slot              %8.2f %8.2f\n", c.p50, c.p99);
	printf("   python worker through a slot         %8.2f %8.2f\n", py.p50, py.p99);
	printf("   python unix-socket echo server       %8.2f %8.2f\n", sock.p50, sock.p99);
	printf("   python worker adds %.2f us to the c worker at p50 (target <= 5): %s\n", py.p50 - c.p50,
	       py.p50 - c.p50 <= 5.0 ? "ok" : "MISSED");
	printf("   python worker vs python socket server at p50: %.2fx faster (target > 1): %s\n", sock.p50 / py.p50,
	       py.p50 < sock.p50 ? "ok" : "MISSED");
	return 0;
}
