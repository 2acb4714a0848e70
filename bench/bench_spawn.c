/* Spawn-to-ready of examples/echo_worker through the host, beside a bare
 * posix_spawn + socket handshake of the same worker, measured in the same
 * run; and the resident memory of a process running only meshd's core. */
#include "base/clock.h"
#include "base/err.h"
#include "meshd/core/ops.h"
#include "host/host.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 200

extern char **environ;

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* The reference: posix_spawn, the worker's control fd as fd 3, wait for "ready". */
static uint64_t bare_once(const char *bin)
{
	int sv[2], out[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return 0;
	if (pipe2(out, O_CLOEXEC) < 0)
		return 0;
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
	/* Its output to a pipe, as the host does. */
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_adddup2(&fa, out[1], 2);
	char *argv[] = {(char *)bin, NULL};
	char *envp[] = {"MESH_CONTROL_FD=3", NULL};
	uint64_t t0 = mesh_mono_ns();
	pid_t pid;
	if (posix_spawn(&pid, bin, &fa, NULL, argv, envp) != 0)
		return 0;
	close(sv[1]);
	close(out[1]);
	char buf[64];
	ssize_t n = recv(sv[0], buf, sizeof buf, 0);
	uint64_t t = mesh_mono_ns() - t0;
	posix_spawn_file_actions_destroy(&fa);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(sv[0]);
	close(out[0]);
	return n == 5 ? t : 0;
}

static long vmrss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

int main(void)
{
	const char *build = getenv("MESH_BUILD");
	char bin[1024], dir[] = "/tmp/mesh-bench-spawn.XXXXXX", p[1200];
	if (!build || !mkdtemp(dir)) {
		fprintf(stderr, "bench_spawn: set MESH_BUILD\n");
		return 1;
	}
	snprintf(bin, sizeof bin, "%s/examples/echo_worker", build);

	/* meshd's core alone, no worker: measured first, before the benchmark's own buffers. */
	snprintf(p, sizeof p, "%s/cat", dir);
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/cat/%s", dir, mesh_target_triple());
	mkdir(p, 0755);
	snprintf(p, sizeof p, "%s/cat/%s/echo", dir, mesh_target_triple());
	if (symlink(bin, p) != 0)
		return 1;
	snprintf(p, sizeof p, "%s/cat/echo.toml", dir);
	FILE *mf = fopen(p, "w");
	fputs("name = \"echo\"\nbackends = [\"native\"]\n[lifecycle]\nstop_grace = \"1s\"\n", mf);
	fclose(mf);
	snprintf(p, sizeof p, "%s/logs", dir);
	mkdir(p, 0755);
	char cat[1200], logs[1200];
	snprintf(cat, sizeof cat, "%s/cat", dir);
	snprintf(logs, sizeof logs, "%s/logs", dir);
	long rss0 = vmrss_kb();
	struct meshd_config cfg = {.catalog = cat, .logs = logs, .slots = 8};
	struct meshd_core *d;
	char *err = NULL;
	if (meshd_core_new(&d, &cfg, &err)) {
		fprintf(stderr, "bench_spawn: %s\n", err);
		return 1;
	}
	long rss1 = vmrss_kb();
	meshd_core_free(d);

	struct mesh_host *h;
	struct mesh_host_cfg hc = {.logs = logs};
	if (mesh_host_new(&h, &hc, &err)) {
		fprintf(stderr, "bench_spawn: %s\n", err);
		return 1;
	}
	struct mesh_image img;
	struct mesh_limits_caps caps = *mesh_host_caps(h);
	if (mesh_image_prepare(cat, "echo", &caps, MESH_GPU_NONE, &img, &err)) {
		fprintf(stderr, "bench_spawn: %s\n", err);
		return 1;
	}
	struct mesh_instance *w;
	mesh_instance_new(h, &img, &w);
	static uint64_t mesh_t[N], bare_t[N];
	for (int i = 0; i < N + 10; i++) {
		uint64_t b = bare_once(bin);
		uint64_t t0 = mesh_mono_ns();
		if (mesh_instance_warm(w, &err) || mesh_instance_wait(w, 1u << MESH_IS_IDLE, 10 * MESH_NS_PER_S, &err)) {
			fprintf(stderr, "bench_spawn: %s\n", err ? err : "?");
			return 1;
		}
		uint64_t m = mesh_mono_ns() - t0;
		mesh_instance_exit(w);
		mesh_instance_wait(w, 1u << MESH_IS_DOWN, 10 * MESH_NS_PER_S, NULL);
		if (i >= 10 && b) { /* the first rounds warm the caches */
			mesh_t[i - 10] = m;
			bare_t[i - 10] = b;
		}
	}
	qsort(mesh_t, N, sizeof mesh_t[0], cmp);
	qsort(bare_t, N, sizeof bare_t[0], cmp);
	double mm = mesh_t[N / 2] / 1000.0, bm = bare_t[N / 2] / 1000.0;
	double ratio = mm / bm;
	printf("   spawn-to-ready (echo_worker, median of %d): mesh host %.0f us, bare posix_spawn+handshake %.0f us, "
	       "ratio %.2fx, target <= 1.5x: %s\n",
	       N, mm, bm, ratio, ratio <= 1.5 ? "MET" : "MISSED");
	printf("   p90: mesh host %.0f us, bare %.0f us\n", mesh_t[N * 9 / 10] / 1000.0, bare_t[N * 9 / 10] / 1000.0);
	double core_mb = rss1 / 1024.0;
	printf("   resident memory of a process running meshd's core (8 slots, no worker): %.2f MB "
	       "(%.2f MB before the core started; target <= 4 MB: %s)\n",
	       core_mb, rss0 / 1024.0, core_mb <= 4.0 ? "MET" : "MISSED");
	mesh_instance_free(w);
	mesh_host_free(h);
	mesh_image_release(&img);
	char cmd[1300];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		return 1;
	return 0;
}
