/* The job stores side by side (run by bench/bench_store.sh, which starts
 * a PostgreSQL and gives its URL; run alone it says so and does nothing):
 *   1. durable lease+complete throughput with 1, 8 and 32 node processes,
 *      each leasing 64 chunks a call and completing them in one batch
 *      before its next lease; and again with each node pipelined as
 *      mesh's executor is (exec/run_done.c): the node goes on leasing
 *      while a thread of its own completes, in one call, every chunk
 *      leased since its last call (the chunks run in no time, so what
 *      is measured is the store):
 *      the PostgreSQL store vs the file store, beside River's PUBLISHED
 *      figure (46k jobs/s, on its hardware, not measured here;
 *      graphile-worker is measured on the same PostgreSQL and machine by
 *      bench/bench_graphile.sh, which runs this program's piped nodes);
 *      target >= 50,000 chunks/s with PostgreSQL.  Beside the whole job's
 *      rate (from the first fork to the last exit) the PostgreSQL store's
 *      steady rate: the chunks completed from when every node holds its
 *      first lease (every node that leased any) to the last completion,
 *      over that time; and its
 *      start-up: when the last node held its first lease, and a node's
 *      mean time from its fork to its first lease (its connection, the
 *      statements that open the job, its first lease: they all start at
 *      once on 2 cores, so this is their sum over the cores more than
 *      one node's cost -- for that, 3.);
 *   2. NOTIFY wake-up: an idle node (everything leased by another) until
 *      it holds a chunk let go by the other;          target <= 10 ms;
 *   3. one node's start-up alone (nothing else running): mesh_job_open,
 *      then its first lease, then its first completion, median of 5.
 * Usage: bench_store URL [chunks [nodes [sync|piped]]]  (files under a
 * fresh /tmp directory; nodes: one count only, the PostgreSQL store only,
 * no wake-up, and one kind of node where named: what
 * bench/bench_store_prof.sh measures) */
#include "base/clock.h"
#include "job/job.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define TTL_NS (60ull * MESH_NS_PER_S)
#define MAX_NODES 64
#define LOG_MAX 8192 /* completion batches a node logs (the last takes any more) */

/* What a node saw, in memory shared with the parent (mesh_mono_ns: one
 * clock for every process). */
struct node_log {
	uint64_t opened, first; /* mesh_job_open returned; the first lease */
	size_t nlog;
	struct {
		uint64_t t, n;
	} log[LOG_MAX];
};
static struct node_log *logs;

/* A pipelined node's chunks leased and not yet handed to a completion. */
struct pipe {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t *q;
	size_t n, cap;
	int end, rc;
	struct mesh_job *j;
	struct node_log *lg;
};

static void *completer(void *arg)
{
	struct pipe *p = arg;
	uint64_t *cids = NULL;
	int *res = NULL;
	size_t cap = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->n && !p->end)
			pthread_cond_wait(&p->cv, &p->mu);
		if (!p->n)
			break;
		size_t k = p->n;
		if (k > cap) {
			uint64_t *c2 = realloc(cids, k * sizeof *c2);
			if (c2)
				cids = c2;
			int *r2 = realloc(res, k * sizeof *r2);
			if (r2)
				res = r2;
			if (!c2 || !r2) {
				p->rc = 4;
				break;
			}
			cap = k;
		}
		memcpy(cids, p->q, k * sizeof *cids);
		p->n = 0;
		pthread_mutex_unlock(&p->mu);
		int rc = mesh_job_complete_many(p->j, cids, NULL, k, res);
		struct node_log *lg = p->lg;
		size_t at = lg->nlog < LOG_MAX ? lg->nlog++ : LOG_MAX - 1;
		lg->log[at].t = mesh_mono_ns();
		lg->log[at].n += k;
		pthread_mutex_lock(&p->mu);
		if (rc) {
			p->rc = 3;
			break;
		}
	}
	pthread_mutex_unlock(&p->mu);
	free(cids);
	free(res);
	return NULL;
}

/* Hands got leases to the completer; 0 or -1 (out of memory, or the
 * completer failed). */
static int pipe_put(struct pipe *p, const struct mesh_lease *ls, size_t got)
{
	pthread_mutex_lock(&p->mu);
	if (p->n + got > p->cap) {
		size_t nc = (p->n + got) * 2;
		uint64_t *q2 = realloc(p->q, nc * sizeof *q2);
		if (!q2)
			p->rc = 4;
		else
			p->q = q2, p->cap = nc;
	}
	int rc = p->rc;
	for (size_t k = 0; !rc && k < got; k++)
		p->q[p->n++] = ls[k].cid;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
	return rc ? -1 : 0;
}

static int piped; /* the nodes are pipelined (see the top; the PostgreSQL store's only) */

/* One node: lease 64, complete 64 (or hand them to its completer, when
 * piped), until the job is COMPLETE. */
static int node_main(const char *where, const char *lockdir, const char *job, int i)
{
	struct node_log *lg = &logs[i];
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
	lg->opened = mesh_mono_ns();
	struct pipe p = {.j = j, .lg = lg};
	pthread_t th;
	if (piped) {
		pthread_mutex_init(&p.mu, NULL);
		pthread_cond_init(&p.cv, NULL);
		if (pthread_create(&th, NULL, completer, &p))
			return 4;
	}
	int bad = 0;
	for (;;) {
		size_t got = 0;
		int rc = mesh_job_lease_many(j, TTL_NS, 0, ls, MESH_JOB_LEASE_MANY_MAX, &got);
		if (rc == MESH_JOB_COMPLETE)
			break;
		if (rc == MESH_JOB_NONE) {
			mesh_job_wait_work(j, MESH_NS_PER_MS);
			continue;
		}
		if (rc) {
			bad = 2;
			break;
		}
		if (!lg->first)
			lg->first = mesh_mono_ns();
		if (piped) {
			if (pipe_put(&p, ls, got)) {
				bad = 3;
				break;
			}
			continue;
		}
		for (size_t k = 0; k < got; k++)
			cids[k] = ls[k].cid;
		if (mesh_job_complete_many(j, cids, NULL, got, res))
			return 3;
		size_t at = lg->nlog < LOG_MAX ? lg->nlog++ : LOG_MAX - 1;
		lg->log[at].t = mesh_mono_ns();
		lg->log[at].n += got;
	}
	if (piped) {
		pthread_mutex_lock(&p.mu);
		p.end = 1;
		pthread_cond_signal(&p.cv);
		pthread_mutex_unlock(&p.mu);
		pthread_join(th, NULL);
		if (p.rc)
			bad = p.rc;
		free(p.q);
	}
	mesh_job_close(j);
	return bad;
}

/* A run's figures: the whole job's rate, the steady rate (see the top),
 * when the last node held its first lease and a node's mean time to its
 * first lease (ms from the first fork). */
struct run {
	double rate, steady, all_ms, first_ms;
};

static void steady_of(struct run *r, uint64_t t0, int nodes)
{
	uint64_t all = 0, end = 0, after = 0;
	double sum = 0;
	int leased = 0;
	for (int i = 0; i < nodes; i++) {
		if (!logs[i].first)
			continue; /* found nothing left to lease */
		if (logs[i].first > all)
			all = logs[i].first;
		sum += (double)(logs[i].first - t0) / 1e6;
		leased++;
		for (size_t b = 0; b < logs[i].nlog; b++)
			if (logs[i].log[b].t > end)
				end = logs[i].log[b].t;
	}
	for (int i = 0; i < nodes; i++)
		for (size_t b = 0; b < logs[i].nlog; b++)
			if (logs[i].log[b].t > all)
				after += logs[i].log[b].n;
	r->all_ms = (double)(all - t0) / 1e6;
	r->first_ms = leased ? sum / leased : 0;
	r->steady = end > all ? (double)after * 1e9 / (double)(end - all) : 0;
}

/* n chunks by `nodes` processes: r's figures, or -1. */
static int throughput(const char *where, const char *lockdir, const char *job, uint64_t n, int nodes, struct run *r)
{
	memset(r, 0, sizeof *r);
	memset(logs, 0, MAX_NODES * sizeof *logs);
	if (mesh_job_submit(where, n))
		return -1;
	uint64_t t0 = mesh_mono_ns();
	pid_t pids[MAX_NODES];
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
	if (bad)
		return -1;
	/* every chunk DONE once, none twice */
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j;
	struct mesh_job_status st;
	o.journal = where;
	o.lockdir = lockdir;
	o.name = job;
	o.node = "check";
	if (mesh_job_open(&j, &o))
		return -1;
	int rc = mesh_job_status(j, &st);
	mesh_job_close(j);
	if (rc || st.done != n || st.duplicates) {
		fprintf(stderr, "bench_store: %s: done %llu of %llu, %llu duplicates\n", where,
			(unsigned long long)st.done, (unsigned long long)n, (unsigned long long)st.duplicates);
		return -1;
	}
	r->rate = (double)n * 1e9 / (double)dt;
	steady_of(r, t0, nodes);
	return 0;
}

/* One node alone: ms to open the job, then to its first lease, then to
 * its first completion (median of 5 each, a job of its own each). */
static int startup_ms(const char *url, double ms[3])
{
	double v[3][5];
	for (int r = 0; r < 5; r++) {
		char where[700], name[32];
		snprintf(name, sizeof name, "start%d", r);
		snprintf(where, sizeof where, "%s#%s", url, name);
		if (mesh_job_submit(where, 64))
			return -1;
		struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
		struct mesh_job *j;
		struct mesh_lease l;
		int res;
		o.journal = where;
		o.name = name;
		o.node = "start";
		uint64_t t0 = mesh_mono_ns();
		if (mesh_job_open(&j, &o))
			return -1;
		uint64_t t1 = mesh_mono_ns();
		if (mesh_job_lease(j, TTL_NS, 0, &l))
			return -1;
		uint64_t t2 = mesh_mono_ns();
		if (mesh_job_complete_many(j, &l.cid, NULL, 1, &res))
			return -1;
		uint64_t t3 = mesh_mono_ns();
		mesh_job_close(j);
		v[0][r] = (double)(t1 - t0) / 1e6;
		v[1][r] = (double)(t2 - t1) / 1e6;
		v[2][r] = (double)(t3 - t2) / 1e6;
	}
	for (int f = 0; f < 3; f++) {
		for (int i = 0; i < 5; i++)
			for (int k = i + 1; k < 5; k++)
				if (v[f][k] < v[f][i]) {
					double x = v[f][i];
					v[f][i] = v[f][k];
					v[f][k] = x;
				}
		ms[f] = v[f][2];
	}
	return 0;
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
	uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 50000;
	char dir[] = "/tmp/mesh-bench-store-XXXXXX";
	if (!mkdtemp(dir) || chdir(dir))
		return 1;
	int counts[] = {1, 8, 32}, ncounts = 3, only = argc > 3 ? atoi(argv[3]) : 0;
	int mode = argc > 4 ? (!strcmp(argv[4], "sync") ? 1 : !strcmp(argv[4], "piped") ? 2 : 0) : 0;
	logs = mmap(NULL, MAX_NODES * sizeof *logs, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (logs == MAP_FAILED)
		return 1;
	if (only > 0 && only <= MAX_NODES) {
		counts[0] = only;
		ncounts = 1;
	}
	printf("   durable lease+complete, %llu chunks, leases of 64, chunks/s; each node: lease, then complete\n"
	       "   (sync), or pipelined (piped, PostgreSQL only: completes on a thread of its own what it leased\n"
	       "   since its last completion, as mesh's executor does); PostgreSQL's start-up (sync), ms\n",
	       (unsigned long long)n);
	printf("   %-6s %10s %10s %10s %10s %10s %8s %11s %9s\n", "nodes", "pg sync", "steady", "pg piped", "steady",
	       "file sync", "pg/file", "leasing at", "node mean");
	for (int c = 0; c < ncounts; c++) {
		char where[700], job[32], journal[64], locks[32];
		snprintf(job, sizeof job, "t%d", counts[c]);
		snprintf(where, sizeof where, "%s#%s", url, job);
		snprintf(journal, sizeof journal, "%s.log", job);
		snprintf(locks, sizeof locks, "locks%d", counts[c]);
		struct run pg = {0}, pp = {0}, f = {0};
		piped = 0;
		if (mode != 2 && throughput(where, NULL, job, n, counts[c], &pg))
			pg.rate = -1;
		if (!only && throughput(journal, locks, job, n, counts[c], &f))
			f.rate = -1;
		piped = 1;
		snprintf(job, sizeof job, "p%d", counts[c]);
		snprintf(where, sizeof where, "%s#%s", url, job);
		if (mode != 1 && throughput(where, NULL, job, n, counts[c], &pp))
			pp.rate = -1;
		printf("   %-6d %10.0f %10.0f %10.0f %10.0f %10.0f %8.2f %11.1f %9.1f\n", counts[c], pg.rate, pg.steady,
		       pp.rate, pp.steady, f.rate, f.rate > 0 ? pg.rate / f.rate : 0, pg.all_ms, pg.first_ms);
		fflush(stdout);
	}
	if (!only) {
		printf("   published, not measured here: River 46,000 jobs/s (graphile-worker publishes 183,000;\n"
		       "   bench_graphile.sh measures it beside this store on this machine)\n");
		printf("   (target: >= 50,000 chunks/s with PostgreSQL, synchronous_commit on)\n");
		printf("   NOTIFY wake-up, a chunk let go -> the idle node holds it: %.2f ms median of 5"
		       " (target <= 10 ms)\n",
		       notify_ms(url));
		double ms[3];
		if (startup_ms(url, ms) == 0)
			printf("   a node's start alone, median of 5: open %.2f ms, first lease %.2f ms,"
			       " first completion %.2f ms\n",
			       ms[0], ms[1], ms[2]);
	}
	if (chdir("/tmp") == 0) {
		char cmd[300];
		snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
		if (system(cmd)) {
		}
	}
	return 0;
}
