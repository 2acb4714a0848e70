/* A worker for meshd's job tests.  Each chunk's reply is
 * "<chunk id>:<input>\n" (the chunk id from mesh_worker_chunk_id), except
 * for these inputs:
 *   crash     prints "crash line 1..5" and dies of SIGSEGV
 *   hang      never answers (sleeps)
 *   slow      answers after 20 ms
 *   who       answers "<chunk id>:pid=<its pid>" after 20 ms (the pid /proc
 *             names: in a PID namespace of its own getpid() says 2); with
 *             JOBTEST_GATE=<file>, not before <file> exists (60 s at most)
 *   fail      the handler fails ("refused: fail")
 *   d...      answers after 1 ms
 *   big<K>    answers K bytes ('x'..., the last a newline)
 *   exit0     exits with status 0 without answering
 *   stop-once the first worker to see it (JOBTEST_FIRST_STOP=<file>, made
 *             as for crash-once) stops itself with SIGSTOP inside the
 *             handler (a hung handler); every later one answers
 * JOBTEST_VERSION=<v>: every reply ends " v=<v>" before its newline (the
 * image a chunk ran on, for upgrade tests).
 * JOBTEST_FIRST_CRASH=<file>: the first worker to see a "crash-once"
 * input creates <file> and dies; every later one (the file exists) answers. */
#include <mesh/worker.h>

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct mesh_worker *w;

/* 1 for the first worker to get here: it made the file the environment
 * variable env names (O_EXCL); 0 for every later one, or without env. */
static int first_to_see(const char *env)
{
	const char *f = getenv(env);
	int fd = f ? open(f, O_WRONLY | O_CREAT | O_EXCL, 0600) : -1;
	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

static int handle(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *len)
{
	(void)ctx;
	if (n == 5 && !memcmp(req, "crash", 5)) {
		for (int i = 1; i <= 5; i++)
			printf("crash line %d\n", i);
		signal(SIGSEGV, SIG_DFL); /* a sanitizer's handler would exit 1 instead */
		raise(SIGSEGV);
	}
	if (n == 10 && !memcmp(req, "crash-once", 10) && first_to_see("JOBTEST_FIRST_CRASH"))
		raise(SIGKILL);
	if (n == 9 && !memcmp(req, "slow-once", 9) && first_to_see("JOBTEST_FIRST_SLOW"))
		sleep(4); /* the first to see it straggles (4 s); copies answer at once */
	if (n == 9 && !memcmp(req, "stop-once", 9) && first_to_see("JOBTEST_FIRST_STOP"))
		raise(SIGSTOP);
	if (n > 1 && ((const char *)req)[0] == 'd')
		usleep(1000); /* "d<anything>": a 1 ms chunk */
	if (n == 4 && !memcmp(req, "hang", 4))
		for (;;)
			pause();
	if (n == 4 && !memcmp(req, "slow", 4))
		usleep(20000);
	if (n == 5 && !memcmp(req, "exit0", 5))
		exit(0);
	if (n == 3 && !memcmp(req, "who", 3)) {
		const char *gate = getenv("JOBTEST_GATE");
		for (int i = 0; gate && i < 12000 && access(gate, F_OK) != 0; i++)
			usleep(5000);
		usleep(20000);
		char self[32] = "";
		ssize_t k = readlink("/proc/self", self, sizeof self - 1);
		self[k > 0 ? k : 0] = 0;
		*len = (size_t)snprintf(reply, cap, "%" PRIu64 ":pid=%s\n", mesh_worker_chunk_id(w), self);
		return 0;
	}
	if (n == 4 && !memcmp(req, "fail", 4)) {
		*len = (size_t)snprintf(reply, cap, "refused: fail");
		return -1;
	}
	if (n > 3 && n < 16 && !memcmp(req, "big", 3)) {
		char num[16];
		memcpy(num, (const char *)req + 3, n - 3);
		num[n - 3] = 0;
		size_t k = strtoul(num, NULL, 10);
		if (!k || k > cap)
			return -1;
		memset(reply, 'x', k - 1);
		((char *)reply)[k - 1] = '\n';
		*len = k;
		return 0;
	}
	int k = snprintf(reply, cap, "%" PRIu64 ":", mesh_worker_chunk_id(w));
	if (k < 0 || (size_t)k + n + 1 > cap)
		return -1;
	memcpy((char *)reply + k, req, n);
	size_t at = (size_t)k + n;
	const char *v = getenv("JOBTEST_VERSION");
	if (v) {
		int m = snprintf((char *)reply + at, cap - at, " v=%s", v);
		if (m < 0 || at + (size_t)m + 1 > cap)
			return -1;
		at += (size_t)m;
	}
	((char *)reply)[at] = '\n';
	*len = at + 1;
	return 0;
}

int main(void)
{
	int rc = mesh_worker_open(&w);
	if (rc < 0) {
		fprintf(stderr, "job_worker: %s\n", mesh_worker_strerror(rc));
		return 1;
	}
	rc = mesh_worker_serve(w, handle, NULL);
	mesh_worker_close(w);
	return rc < 0 ? 1 : 0;
}
