/* Slot round trip and ring throughput vs a Unix socket, measured in the same run.
 *
 *   round trip: meshd's mesh_slot_call to a forked libmeshworker echo worker
 *     (another process), 64-byte requests; once with both sides spinning,
 *     once with the worker asleep and meshd calling as it does (spinning
 *     MESH_SLOT_CALL_SPIN_NS on the reply), once with neither spinning
 *     (every hand-over is a futex wake-up);
 *     reference: a 64-byte write + read echo over an AF_UNIX stream socketpair.
 *   throughput: 64-byte messages one way through a 1 MiB ring to a consumer
 *     process; reference: 64-byte writes over an AF_UNIX stream socket.
 *
 * Targets (docs/worker-protocol.md): p50 <= 2 us spinning; sleeping never
 * slower than the socket; >= 2 million messages a second one way.
 * Usage: bench_ring [rounds]   (MESH_BENCH_QUICK=1: fewer rounds) */
#include "base/clock.h"
#include "base/err.h"
#include "mesh/worker.h"
#include "shm/shm.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MSG 64

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

struct lat {
	double p50, p99;
};

static struct lat percentiles(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof *v, cmp_u64);
	struct lat l = {v[n / 2] / 1000.0, v[(n * 99) / 100] / 1000.0};
	return l;
}

static int echo(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *len)
{
	memcpy(reply, req, n);
	*len = n;
	return 0;
}

/* Round trips through a slot served by a forked libmeshworker. */
static int slot_rtt(int spin, uint64_t caller_spin_ns, uint64_t gap_ns, size_t rounds, struct lat *out)
{
	struct mesh_ctl *ctl;
	int child_fd;
	struct mesh_slot *s;
	if (mesh_ctl_pair(&ctl, &child_fd) < 0 || mesh_slot_create(&s, 0, 1u << 16) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(child_fd, 10);
		setenv(MESH_CONTROL_FD_ENV, "10", 1);
		struct mesh_worker *w;
		if (mesh_worker_open(&w) < 0)
			_exit(1);
		mesh_worker_set_spin(w, spin ? 10 * MESH_NS_PER_S : 0);
		_exit(mesh_worker_serve(w, echo, NULL) < 0);
	}
	close(child_fd);
	struct mesh_ctl_msg m;
	if (mesh_ctl_wait(ctl, &m, 10 * MESH_NS_PER_S) < 0 || m.kind != MESH_CTL_READY ||
	    mesh_ctl_run(ctl, s, 1) < 0 || mesh_ctl_wait(ctl, &m, 10 * MESH_NS_PER_S) < 0 || m.kind != MESH_CTL_ONLINE)
		return -1;
	uint64_t *t = malloc(rounds * sizeof *t);
	char req[MSG];
	memset(req, 'r', sizeof req);
	uint64_t spin_ns = spin ? 10 * MESH_NS_PER_S : caller_spin_ns;
	int rc = 0;
	for (size_t i = 0; i < rounds + rounds / 10 && rc == 0; i++) {
		void *rep;
		size_t n;
		if (gap_ns)
			mesh_sleep_ns(gap_ns); /* idle long enough that the worker sleeps */
		uint64_t t0 = mesh_mono_ns();
		rc = mesh_slot_call(s, req, sizeof req, &rep, &n, 5 * MESH_NS_PER_S, spin_ns);
		uint64_t dt = mesh_mono_ns() - t0;
		if (rc == 0 && n != MSG)
			rc = -1;
		free(rep);
		if (i >= rounds / 10)
			t[i - rounds / 10] = dt;
	}
	mesh_ctl_exit(ctl, s);
	waitpid(pid, NULL, 0);
	mesh_ctl_free(ctl);
	mesh_slot_free(s);
	if (rc == 0)
		*out = percentiles(t, rounds);
	free(t);
	return rc;
}

static int read_full(int fd, void *b, size_t n)
{
	for (size_t o = 0; o < n;) {
		ssize_t k = read(fd, (char *)b + o, n - o);
		if (k <= 0)
			return -1;
		o += (size_t)k;
	}
	return 0;
}

static int sock_rtt(uint64_t gap_ns, size_t rounds, struct lat *out)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		char b[MSG];
		while (read_full(sv[1], b, MSG) == 0)
			if (write(sv[1], b, MSG) != MSG)
				break;
		_exit(0);
	}
	close(sv[1]);
	uint64_t *t = malloc(rounds * sizeof *t);
	char b[MSG];
	memset(b, 's', sizeof b);
	int rc = 0;
	for (size_t i = 0; i < rounds + rounds / 10 && rc == 0; i++) {
		if (gap_ns)
			mesh_sleep_ns(gap_ns);
		uint64_t t0 = mesh_mono_ns();
		if (write(sv[0], b, MSG) != MSG || read_full(sv[0], b, MSG) < 0)
			rc = -1;
		if (i >= rounds / 10)
			t[i - rounds / 10] = mesh_mono_ns() - t0;
	}
	close(sv[0]);
	waitpid(pid, NULL, 0);
	if (rc == 0)
		*out = percentiles(t, rounds);
	free(t);
	return rc;
}

/* Messages a second, one way through a ring to another process. */
static double ring_rate(size_t count)
{
	uint64_t cap = 1u << 20;
	uint8_t *mem = mmap(NULL, 4096 + cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return -1;
	_Atomic uint64_t *done = (_Atomic uint64_t *)(mem + 2048);
	struct mesh_ring p;
	mesh_ring_init(&p, (struct mesh_ring_ctl *)mem, mem + 4096, cap);
	pid_t pid = fork();
	if (pid == 0) {
		struct mesh_ring c;
		mesh_ring_attach(&c, (struct mesh_ring_ctl *)mem, mem + 4096, cap, 0);
		uint8_t b[MSG];
		uint64_t sum = 0;
		for (size_t i = 0; i < count;) {
			struct mesh_msg m;
			int rc = mesh_ring_peek(&c, &m);
			if (rc == -EAGAIN) {
				if (mesh_ring_wait_data(&c, MESH_NS_PER_S, 10 * MESH_NS_PER_S, NULL) < 0)
					_exit(1);
				continue;
			}
			if (rc < 0 || m.len != MSG)
				_exit(2);
			mesh_msg_copy(&m, b);
			sum += b[0];
			mesh_ring_pop(&c);
			i++;
		}
		atomic_store(done, mesh_mono_ns());
		_exit(sum == 0);
	}
	uint8_t b[MSG];
	memset(b, 1, sizeof b);
	uint64_t t0 = mesh_mono_ns();
	for (size_t i = 0; i < count; i++) {
		int rc;
		while ((rc = mesh_ring_put_nopub(&p, MESH_MSG_REQ, (uint32_t)i, b, MSG)) == -EAGAIN) {
			mesh_ring_flush(&p);
			mesh_ring_wait_space(&p, MSG, MESH_NS_PER_S, 10 * MESH_NS_PER_S, NULL);
		}
		if (rc < 0)
			break;
		if ((i & 63) == 63)
			mesh_ring_flush(&p);
	}
	mesh_ring_flush(&p);
	int st;
	waitpid(pid, &st, 0);
	double rate = -1;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		rate = (double)count / ((double)(atomic_load(done) - t0) / 1e9);
	munmap(mem, 4096 + cap);
	return rate;
}

static double sock_rate(size_t count)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		static char b[1 << 16];
		size_t total = 0;
		while (total < count * MSG) {
			ssize_t k = read(sv[1], b, sizeof b);
			if (k <= 0)
				_exit(1);
			total += (size_t)k;
		}
		_exit(0);
	}
	close(sv[1]);
	char b[MSG];
	memset(b, 1, sizeof b);
	uint64_t t0 = mesh_mono_ns();
	for (size_t i = 0; i < count; i++)
		if (write(sv[0], b, MSG) != MSG)
			break;
	int st;
	waitpid(pid, &st, 0);
	uint64_t dt = mesh_mono_ns() - t0;
	close(sv[0]);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? (double)count / ((double)dt / 1e9) : -1;
}

int main(int argc, char **argv)
{
	size_t rounds = getenv("MESH_BENCH_QUICK") ? 5000 : 50000;
	if (argc > 1)
		rounds = strtoul(argv[1], NULL, 10);
	if (rounds < 100)
		rounds = 100;
	signal(SIGPIPE, SIG_IGN);
	/* "Sleeping" rows leave 200 us between calls, far past the worker's
	 * spin, so each request finds the worker asleep on its futex; the
	 * socket reference for them gets the same gap. */
	const uint64_t gap = 200 * 1000;
	size_t srounds = rounds / 5;
	struct lat spin, sleep, sleep_meshd, sock, sock_gap;
	if (sock_rtt(0, rounds, &sock) < 0 || sock_rtt(gap, srounds, &sock_gap) < 0 ||
	    slot_rtt(1, 0, 0, rounds, &spin) < 0 || slot_rtt(0, 0, gap, srounds, &sleep) < 0 ||
	    slot_rtt(0, MESH_SLOT_CALL_SPIN_NS, gap, srounds, &sleep_meshd) < 0) {
		fprintf(stderr, "bench_ring: a round-trip run failed\n");
		return 1;
	}
	printf("   round trip, 64-byte request and reply, %zu rounds (p50 / p99, us):\n", rounds);
	printf("   %-28s %7.2f / %7.2f   unix socket %7.2f / %7.2f   ratio %5.2fx   target p50 <= 2 us: %s\n",
	       "slot, worker spinning", spin.p50, spin.p99, sock.p50, sock.p99, spin.p50 / sock.p50,
	       spin.p50 <= 2.0 ? "MET" : "MISSED");
	/* The target's case: the worker sleeps, meshd calls as it does (spinning
	 * MESH_SLOT_CALL_SPIN_NS on the reply).  Both sides sleeping is shown too. */
	printf("   %-28s %7.2f / %7.2f   unix socket %7.2f / %7.2f   ratio %5.2fx   target p50 <= socket: %s\n",
	       "slot, worker asleep", sleep_meshd.p50, sleep_meshd.p99, sock_gap.p50, sock_gap.p99,
	       sleep_meshd.p50 / sock_gap.p50, sleep_meshd.p50 <= sock_gap.p50 ? "MET" : "MISSED");
	printf("   %-28s %7.2f / %7.2f   unix socket %7.2f / %7.2f   ratio %5.2fx   (caller sleeps too)\n",
	       "slot, both sides asleep", sleep.p50, sleep.p99, sock_gap.p50, sock_gap.p99, sleep.p50 / sock_gap.p50);
	/* The socket is ~20x slower: fewer messages for it keep the run short. */
	double rr = ring_rate(rounds * 40), sr = sock_rate(rounds * 10);
	if (rr < 0 || sr < 0) {
		fprintf(stderr, "bench_ring: a throughput run failed\n");
		return 1;
	}
	printf("   %-28s %7.2f M msg/s       unix socket %7.2f M msg/s       ratio %5.2fx   target >= 2 M/s: %s\n",
	       "one way, 64-byte messages", rr / 1e6, sr / 1e6, rr / sr, rr >= 2e6 ? "MET" : "MISSED");
	return 0;
}
