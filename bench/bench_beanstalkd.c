/* Durable work-queue throughput: mesh's engine against beanstalkd, the
 * classic small work queue, in one run.
 *
 * beanstalkd runs with a binlog and `-f 0` (fsync after every write), the
 * setting under which a deleted (= completed) job is durable; each of C
 * clients loops put → reserve → delete.  mesh runs the same number of chunks
 * through lease → complete from C threads over one journal (complete fsyncs
 * before it answers; concurrent completions share an fsync).  Both figures
 * are jobs finished per second; the ratio is mesh / beanstalkd. */
#include "base/clock.h"
#include "job/job.h"

#include "bench_net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define JOBS_PER_CLIENT 2500

static int port;

/* Sends cmd and reads one reply line (plus a body when `RESERVED id n`). */
static int bs_cmd(int fd, const char *cmd, char *line, size_t cap)
{
	size_t n = strlen(cmd), got = 0;
	if (write(fd, cmd, n) != (ssize_t)n)
		return -1;
	for (;;) {
		ssize_t r = read(fd, line + got, cap - 1 - got);
		if (r <= 0)
			return -1;
		got += (size_t)r;
		line[got] = 0;
		char *eol = strstr(line, "\r\n");
		if (!eol)
			continue;
		unsigned long long id, bytes;
		if (sscanf(line, "RESERVED %llu %llu", &id, &bytes) == 2) {
			size_t need = (size_t)(eol - line) + 2 + bytes + 2;
			if (got < need)
				continue;
		}
		return 0;
	}
}

static void *bs_client(void *arg)
{
	char line[256], cmd[128];
	int fd = bench_connect_loopback(port);
	(void)arg;
	if (fd < 0)
		return (void *)1;
	for (int i = 0; i < JOBS_PER_CLIENT; i++) {
		unsigned long long id;
		if (bs_cmd(fd, "put 0 0 60 5\r\nchunk\r\n", line, sizeof line) || strncmp(line, "INSERTED", 8))
			return (void *)1;
		if (bs_cmd(fd, "reserve\r\n", line, sizeof line) || sscanf(line, "RESERVED %llu", &id) != 1)
			return (void *)1;
		snprintf(cmd, sizeof cmd, "delete %llu\r\n", id);
		if (bs_cmd(fd, cmd, line, sizeof line) || strncmp(line, "DELETED", 7))
			return (void *)1;
	}
	close(fd);
	return NULL;
}

static struct mesh_job *job;

static void *mesh_client(void *arg)
{
	(void)arg;
	for (;;) {
		struct mesh_lease l;
		int rc = mesh_job_lease(job, 60 * MESH_NS_PER_S, 0, &l);
		if (rc == MESH_JOB_COMPLETE || rc == MESH_JOB_NONE)
			return NULL;
		if (rc < 0)
			return (void *)1;
		rc = mesh_job_complete(job, l.cid, 0);
		if (rc < 0)
			return (void *)1;
	}
}

static double run_threads(void *(*fn)(void *), int n)
{
	pthread_t th[64];
	uint64_t t0 = mesh_mono_ns();
	int bad = 0;
	for (int i = 0; i < n; i++)
		pthread_create(&th[i], NULL, fn, NULL);
	for (int i = 0; i < n; i++) {
		void *r;
		pthread_join(th[i], &r);
		bad |= r != NULL;
	}
	if (bad)
		return -1;
	return (double)(mesh_mono_ns() - t0) / 1e9;
}

static pid_t start_beanstalkd(const char *dir)
{
	char portbuf[16];
	pid_t pid;
	port = 20000 + (int)(getpid() % 20000);
	snprintf(portbuf, sizeof portbuf, "%d", port);
	pid = fork();
	if (pid == 0) {
		execlp("beanstalkd", "beanstalkd", "-l", "127.0.0.1", "-p", portbuf, "-b", dir, "-f", "0",
		       (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 200; i++) {
		int fd = bench_connect_loopback(port);
		if (fd >= 0) {
			close(fd);
			return pid;
		}
		mesh_sleep_ns(10 * MESH_NS_PER_MS);
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	return -1;
}

int main(void)
{
	char dir[] = "/tmp/mesh-bench-bs.XXXXXX", path[256], cmd[300];
	static const int clients[] = {1, 8};
	if (!mkdtemp(dir))
		return 1;
	printf("   durable finished jobs per second (put/reserve/delete with fsync vs lease/complete with fsync)\n");
	for (size_t k = 0; k < sizeof clients / sizeof clients[0]; k++) {
		int c = clients[k];
		uint64_t n = (uint64_t)c * JOBS_PER_CLIENT;
		double tb = -1, tm;
		char bdir[280];
		snprintf(bdir, sizeof bdir, "%s/binlog%d", dir, c);
		mkdir(bdir, 0700);
		pid_t pid = start_beanstalkd(bdir);
		if (pid > 0) {
			tb = run_threads(bs_client, c);
			kill(pid, SIGTERM);
			waitpid(pid, NULL, 0);
		}
		snprintf(path, sizeof path, "%s/q%d.log", dir, c);
		struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
		o.journal = path;
		o.lockdir = dir;
		o.name = "bench";
		o.node = "bench";
		if (mesh_job_submit(path, n) || mesh_job_open(&job, &o)) {
			printf("   mesh: cannot open the job\n");
			return 1;
		}
		tm = run_threads(mesh_client, c);
		mesh_job_close(job);
		if (tb <= 0)
			printf("   %d client(s): mesh %.0f/s   beanstalkd: not run (is it installed?)\n", c, n / tm);
		else
			printf("   %d client(s): mesh %8.0f/s   beanstalkd -f0 %8.0f/s   ratio %.2fx\n", c, n / tm,
			       n / tb, tb / tm);
	}
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : 1;
}
