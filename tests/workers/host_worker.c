/* A worker that misbehaves on request, for the host's tests.  argv[1]:
 *   echo               a normal echo worker
 *   crash-before-ready prints 40 numbered lines, then dies of SIGABRT before `ready`
 *   exit-before-ready  prints 40 numbered lines, then exits 3 before `ready`
 *   crash-on-call      serves; a request makes it print 40 lines and die of SIGSEGV
 *   slow-call          serves; each request takes 30 s
 *   fail-latin1        serves; its handler fails every request with a message
 *                      holding a Latin-1 byte and a character cut in the middle
 *   ignore-term        ignores SIGTERM, says ready, then never reads its channel
 *   fork               forks a child (same process group) that sleeps forever,
 *                      writes "<child pid>\n" to the file argv[2], then serves
 *   orphan             like fork, but the child calls setsid() and forks again:
 *                      the grandchild (no parent, no group, no session of the
 *                      worker's) writes its pid to argv[2] and sleeps forever
 *   alloc-child        like fork, the child first touching 50 MiB of heap
 *   whoami             prints "uid=<uid> gid=<gid>", then tries to open
 *                      $HW_PEEK (another process's fd through /proc) and
 *                      prints "peek=ok" or "peek=<errno name>"; then serves
 *   never-ready        sleeps forever without saying ready
 *   bad-reply          serves; a request makes it scribble an impossible head
 *                      into its reply ring, wake meshd and sleep forever; with
 *                      a file argv[2]: only while that file does not exist (it
 *                      creates it), else it echoes
 *   hang-on-hang       serves; a request "hang" sleeps 30 s, others echo
 *   slow-200ms         serves; each request takes 200 ms, then echoes
 *   slow-online        says ready, sleeps 300 ms (meshd's `run` waits in its
 *                      channel), then serves (its `online` 300 ms late)
 *   crash-after-ready  says ready, then dies of SIGABRT before it reads `run`
 *   slow-ready         sleeps 400 ms before it says ready, then serves (a slow
 *                      model load)
 *   run-before-ready   before its `ready`, waits up to 3 s for a command in
 *                      its channel (MSG_PEEK: it stays there) and prints
 *                      "run waiting before ready: yes" or "...: no"; serves
 * (pids are written as /proc shows them -- the host's -- not as getpid()
 * returns them in a worker's own PID namespace.) */
#include <mesh/worker.h>

#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The pid /proc/self names: this process's pid in the host's view. */
static int proc_pid(void)
{
	char b[32];
	ssize_t n = readlink("/proc/self", b, sizeof b - 1);
	if (n <= 0)
		return (int)getpid();
	b[n] = 0;
	return atoi(b);
}

/* Writes "<pid>\n" to path whole (temp + rename): a reader never sees half. */
static void write_pid(const char *path, int pid)
{
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%d\n", pid);
	if (fclose(f) == 0)
		rename(tmp, path);
}

static void lines(const char *what)
{
	for (int i = 1; i <= 40; i++)
		printf("%s line %d\n", what, i);
}

/* The reply ring's control in this process's mapping of its slot (the
 * worker maps only its own: the one "memfd:mesh-slot-N" in its maps). */
static struct mesh_ring_ctl *reply_ring(void)
{
	char line[512];
	void *at = NULL;
	FILE *f = fopen("/proc/self/maps", "r");
	while (f && !at && fgets(line, sizeof line, f))
		if (strstr(line, "memfd:mesh-slot-"))
			at = (void *)strtoul(line, NULL, 16);
	if (f)
		fclose(f);
	return at ? &((struct mesh_slot_hdr *)at)->rep : NULL;
}

static const char *once_file;

static int echo(void *ctx, const void *req, size_t n, void *reply, size_t cap, size_t *reply_len)
{
	const char *mode = ctx;
	if (strcmp(mode, "crash-on-call") == 0) {
		lines("call");
		fprintf(stderr, "about to crash\n");
		/* The default action, even under a sanitizer that catches SEGV. */
		signal(SIGSEGV, SIG_DFL);
		raise(SIGSEGV);
	}
	if (strcmp(mode, "bad-reply") == 0 && (!once_file || access(once_file, F_OK) != 0)) {
		struct mesh_ring_ctl *r = reply_ring();
		if (once_file) {
			FILE *f = fopen(once_file, "w");
			if (f)
				fclose(f);
		}
		if (r) {
			/* Far past anything written: meshd must refuse it. */
			atomic_store(&r->head, atomic_load(&r->head) + (1ull << 40));
			atomic_fetch_add(&r->data_futex, 1);
			syscall(SYS_futex, &r->data_futex, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
		}
		for (;;)
			pause();
	}
	if (strcmp(mode, "hang-on-hang") == 0 && n == 4 && memcmp(req, "hang", 4) == 0) {
		printf("hanging\n");
		fflush(stdout);
		sleep(30);
	}
	if (strcmp(mode, "slow-200ms") == 0)
		usleep(200000);
	if (strcmp(mode, "slow-call") == 0) {
		printf("slow call begins\n");
		fflush(stdout);
		sleep(30);
	}
	if (strcmp(mode, "fail-latin1") == 0) {
		static const char msg[] = "caf\xe9 refused, cut \xe2\x82";
		size_t m = sizeof msg - 1 < cap ? sizeof msg - 1 : cap;
		memcpy(reply, msg, m);
		*reply_len = m;
		return -1;
	}
	if (n > cap)
		return -1;
	memcpy(reply, req, n);
	*reply_len = n;
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "echo";
	if (strcmp(mode, "bad-reply") == 0 && argc > 2)
		once_file = argv[2];
	struct mesh_worker *w;
	int rc = mesh_worker_open(&w);
	if (rc < 0) {
		fprintf(stderr, "host_worker: %s\n", mesh_worker_strerror(rc));
		return 1;
	}
	if (strcmp(mode, "crash-before-ready") == 0) {
		lines("setup");
		signal(SIGABRT, SIG_DFL);
		abort();
	}
	if (strcmp(mode, "exit-before-ready") == 0) {
		lines("setup");
		exit(3);
	}
	if (strcmp(mode, "never-ready") == 0)
		for (;;)
			pause();
	if (strcmp(mode, "fork") == 0 || strcmp(mode, "alloc-child") == 0) {
		pid_t c = fork();
		if (c == 0) {
			if (strcmp(mode, "alloc-child") == 0) {
				size_t n = 50u << 20;
				char *p = malloc(n);
				if (p)
					memset(p, 1, n);
				/* p escapes: no compiler may drop the unread block. */
				__asm__ volatile("" : : "r"(p) : "memory");
			}
			if (argc > 2)
				write_pid(argv[2], proc_pid());
			for (;;)
				pause();
		}
	}
	if (strcmp(mode, "orphan") == 0 && fork() == 0) {
		setsid();
		if (fork() == 0) {
			if (argc > 2)
				write_pid(argv[2], proc_pid());
			for (;;)
				pause();
		}
		_exit(0);
	}
	if (strcmp(mode, "whoami") == 0) {
		const char *peek = getenv("HW_PEEK");
		printf("uid=%u gid=%u\n", (unsigned)getuid(), (unsigned)getgid());
		if (peek && *peek) {
			int fd = open(peek, O_RDWR);
			int e = errno;
			printf("peek=%s\n", fd >= 0 ? "ok" : e == EACCES ? "EACCES" : e == EPERM ? "EPERM" : strerror(e));
			if (fd >= 0)
				close(fd);
		}
		fflush(stdout);
	}
	if (strcmp(mode, "ignore-term") == 0) {
		signal(SIGTERM, SIG_IGN);
		printf("ignoring SIGTERM\n");
		if (mesh_worker_ready(w) < 0)
			return 1;
		for (;;)
			pause();
	}
	if (strcmp(mode, "slow-ready") == 0)
		usleep(400000);
	if (strcmp(mode, "run-before-ready") == 0) {
		const char *cfd = getenv("MESH_CONTROL_FD");
		struct pollfd pf = {.fd = cfd ? atoi(cfd) : -1, .events = POLLIN};
		char c;
		int got = poll(&pf, 1, 3000) == 1 && recv(pf.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1;
		printf("run waiting before ready: %s\n", got ? "yes" : "no");
		fflush(stdout);
	}
	printf("host_worker %s: ready\n", mode);
	if ((rc = mesh_worker_ready(w)) == 0 && strcmp(mode, "slow-online") == 0)
		usleep(300000); /* meshd's `run` waits in the channel meanwhile */
	if (rc == 0 && strcmp(mode, "crash-after-ready") == 0) {
		signal(SIGABRT, SIG_DFL);
		abort();
	}
	if (rc == 0)
		rc = mesh_worker_serve(w, echo, (void *)mode);
	mesh_worker_close(w);
	return rc < 0 ? 1 : 0;
}
