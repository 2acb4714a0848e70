/* A "GPU" worker for the fake NVML (tests/gpu/fake_nvml.c).  At setup it
 * says, in the fake's state file ($FAKE_NVML_STATE), that it holds
 * argv[1] bytes on its first visible GPU (CUDA_VISIBLE_DEVICES), listed
 * argv[2] ms more after it dies; then serves:
 *   "env"   -> its CUDA_VISIBLE_DEVICES
 *   "crash" -> dies of SIGSEGV
 *   else    -> the request back
 * argv[3] "child": a child in its process group holds the memory instead;
 * "mps": it is listed as a client of an MPS server. */
#include <mesh/worker.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int serve(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *reply_len)
{
	if (n == 5 && memcmp(req, "crash", 5) == 0) {
		signal(SIGSEGV, SIG_DFL);
		raise(SIGSEGV);
	}
	const char *v = getenv("CUDA_VISIBLE_DEVICES");
	if (n == 3 && memcmp(req, "env", 3) == 0) {
		req = v ? v : "(unset)";
		n = strlen(req);
	}
	if (n > cap)
		return -1;
	memcpy(reply, req, n);
	*reply_len = n;
	return 0;
}

static int mps;

/* This process's pid as the host sees it (NVML lists host pids): in meshd's
 * PID namespace getpid() says 2, while /proc (the host's, not remounted)
 * still names the host's pid. */
static int host_pid(void)
{
	char b[32];
	ssize_t n = readlink("/proc/self", b, sizeof b - 1);
	if (n <= 0)
		return (int)getpid();
	b[n] = 0;
	return atoi(b);
}

static void hold(const char *bytes, const char *linger)
{
	const char *vis = getenv("CUDA_VISIBLE_DEVICES"), *st = getenv("FAKE_NVML_STATE");
	if (!vis || !st)
		return;
	char gpu[128], line[256];
	snprintf(gpu, sizeof gpu, "%.*s", (int)strcspn(vis, ","), vis);
	int n = snprintf(line, sizeof line, "proc %s %d %s %s%s\n", gpu, host_pid(), bytes, linger, mps ? " mps" : "");
	int fd = open(st, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, line, (size_t)n) != n)
			perror("gpu_worker: state");
		close(fd);
	}
}

int main(int argc, char **argv)
{
	struct mesh_worker *w;
	int rc = mesh_worker_open(&w);
	if (rc < 0) {
		fprintf(stderr, "gpu_worker: %s\n", mesh_worker_strerror(rc));
		return 1;
	}
	const char *bytes = argc > 1 ? argv[1] : "0", *linger = argc > 2 ? argv[2] : "0";
	mps = argc > 3 && strcmp(argv[3], "mps") == 0;
	if (argc > 3 && strcmp(argv[3], "child") == 0) {
		int p[2];
		if (pipe(p) != 0)
			return 1;
		if (fork() == 0) {
			hold(bytes, linger);
			close(p[0]);
			if (write(p[1], "x", 1) != 1)
				_exit(1);
			for (;;)
				pause();
		}
		char c;
		close(p[1]);
		if (read(p[0], &c, 1) != 1)
			return 1;
	} else {
		hold(bytes, linger);
	}
	printf("gpu_worker: holds %s bytes on %s\n", bytes, getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "?");
	if ((rc = mesh_worker_ready(w)) == 0)
		rc = mesh_worker_serve(w, serve, NULL);
	mesh_worker_close(w);
	return rc < 0 ? 1 : 0;
}
