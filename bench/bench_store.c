/* The job stores side by side (run by bench/bench_store.sh, which starts
 * a PostgreSQL and gives its URL; run alone it says so and does nothing):
 *   1. durable lease+complete throughput with 1, 8 and 32 node processes,
 *      each leasing 64 chunks a call and completing them in one batch:
 *      the PostgreSQL store vs the file store, beside the PUBLISHED
 *      figures of River (46k jobs/s) and graphile-worker (183k jobs/s) --
 *      published by those projects on their hardware, not measured here;
 *      target >= 50,000 chunks/s with PostgreSQL;
 *   2. NOTIFY wake-up: an idle node (everything leased by another) until
 *      it holds a chunk let go by the other;          target <= 10 ms.
 * Usage: bench_store URL [chunks [nodes]]  (files under a fresh /tmp
 * directory; nodes: one count only, the PostgreSQL store only, no
 * wake-up: what bench/bench_store_prof.sh measures) */
#include "base/clock.h"
#include "job/job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define TTL_NS (60ull * MESH_NS_PER_S)

/* One node: lease 64, complete 64, until the job is COMPLETE. */
static int node_main(const char *where, const char *lockdir, const char *job, int i)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j;
	struct mesh_lease ls[MESH_JOB_LEASE_MANY_MAX];
	uint64_t cids[MESH_JOB_LEASE_MANY_MAX];
	int res[MESH_JOB_LEASE_MANY_MAX];
	char node[32];
	snprintf(node, sizeof node, "bench%d", i);
	o.journal = where;
	o.lockdir = lockdir;
	o.name = job;
	o.node = node;
	if (mesh_job_open(&j, &o))
		return 1;
	for (;;) {
		size_t got = 0;
		int rc = mesh_job_lease_many(j, TTL_NS, 0, ls, MESH_JOB_LEASE_MANY_MAX, &got);
		if (rc == MESH_JOB_COMPLETE)
			break;
		if (rc == MESH_JOB_NONE) {
			mesh_job_wait_work(j, MESH_NS_PER_MS);
			continue;
		}
		if (rc)
			return 2;
		for (size_t k = 0; k < got; k++)
			cids[k] = ls[k].cid;
		if (mesh_job_complete_many(j, cids, NULL, got, res))
			return 3;
	}
	mesh_job_close(j);
	return 0;
}

/* chunks/s for n chunks by `nodes` processes, or -1. */
static double throughput(const char *where, const char *lockdir, const char *job, uint64_t n, int nodes)
{
	if (mesh_job_submit(where, n))
		return -1;
	uint64_t t0 = mesh_mono_ns();
	pid_t pids[64];
	for (int i = 0; i < nodes; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(node_main(where, lockdir, job, i));
	}
	int bad = 0;
	for (int i = 0; i < nodes; i++) {
		int ws;
		if (waitpid(pids[i], &ws, 0) != pids[i] || !WIFEXITED(ws) || WEXITSTATUS(ws))
			bad = 1;
	}
	uint64_t dt = mesh_mono_ns() - t0;
	return bad ? -1 : (double)n * 1e9 / (double)dt;
}

/* ms from a chunk let go to an idle node holding it (median of 5). */
static double notify_ms(const char *url)
{
	double v[5];
	for (int r = 0; r < 5; r++) {
		char where[700];
		int p[2];
		snprintf(where, sizeof where, "%s#wake%d", url, r);
		if (mesh_job_submit(where, 1) || pipe(p))
			return -1;
		struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
		struct mesh_job *a;
		struct mesh_lease l;
		o.journal = where;
		o.name = "wake";
		if (mesh_job_open(&a, &o) || mesh_job_lease(a, TTL_NS, 0, &l))
			return -1;
		pid_t pid = fork();
		if (pid == 0) {
			struct mesh_job *b;
			struct mesh_lease lb;
			o.node = "idle";
			if (mesh_job_open(&b, &o))
				_exit(1);
			while (mesh_job_lease(b, TTL_NS, 0, &lb) != 0)
				mesh_job_wait_work(b, MESH_NS_PER_S);
			uint64_t t = mesh_mono_ns();
			_exit(write(p[1], &t, sizeof t) == sizeof t ? 0 : 1);
		}
		mesh_sleep_ns(300 * MESH_NS_PER_MS); /* b finds nothing and waits */
		uint64_t t0 = mesh_mono_ns(), t1 = 0;
		mesh_job_fail(a, l.cid, 1);
		if (read(p[0], &t1, sizeof t1) != sizeof t1)
			return -1;
		waitpid(pid, NULL, 0);
		mesh_job_close(a);
		close(p[0]);
		close(p[1]);
		v[r] = (double)(t1 - t0) / 1e6;
	}
	for (int i = 0; i < 5; i++)
		for (int k = i + 1; k < 5; k++)
			if (v[k] < v[i]) {
				double x = v[i];
				v[i] = v[k];
				v[k] = x;
			}
	return v[2];
}

int main(int argc, char **argv)
{
	if (argc < 2 || strncmp(argv[1], "postgres", 8)) {
		printf("   (run by bench/bench_store.sh, which starts the PostgreSQL it needs)\n");
		return 0;
	}
	const char *url = argv[1];
	uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 20000;
	char dir[] = "/tmp/mesh-bench-store-XXXXXX";
	if (!mkdtemp(dir) || chdir(dir))
		return 1;
	int counts[] = {1, 8, 32}, ncounts = 3, only = argc > 3 ? atoi(argv[3]) : 0;
	if (only > 0 && only <= 64) {
		counts[0] = only;
		ncounts = 1;
	}
	printf("   durable lease+complete, %llu chunks, batches of 64     chunks/s\n", (unsigned long long)n);
	printf("   %-7s %14s %14s %8s\n", "nodes", "PostgreSQL", "file store", "pg/file");
	for (int c = 0; c < ncounts; c++) {
		char where[700], job[32], journal[64], locks[32];
		snprintf(job, sizeof job, "t%d", counts[c]);
		snprintf(where, sizeof where, "%s#%s", url, job);
		snprintf(journal, sizeof journal, "%s.log", job);
		snprintf(locks, sizeof locks, "locks%d", counts[c]);
		double pg = throughput(where, NULL, job, n, counts[c]);
		double f = only ? 0 : throughput(journal, locks, job, n, counts[c]);
		printf("   %-7d %14.0f %14.0f %8.2f\n", counts[c], pg, f, f > 0 ? pg / f : 0);
	}
	if (!only) {
		printf("   published, not measured here: River 46,000 jobs/s; graphile-worker 183,000 jobs/s\n");
		printf("   (target: >= 50,000 chunks/s with PostgreSQL, synchronous_commit on)\n");
		printf("   NOTIFY wake-up, a chunk let go -> the idle node holds it: %.2f ms median of 5"
		       " (target <= 10 ms)\n",
		       notify_ms(url));
	}
	if (chdir("/tmp") == 0) {
		char cmd[300];
		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		if (system(cmd)) {
		}
	}
	return 0;
}
