/* The engine under concurrency, crashes and failing disks. */
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "job/job.h"
#include "job/record.h"
#include "journal/journal.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS MESH_NS_PER_MS

static struct mesh_job *open_node(const char *journal, const char *node)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j = NULL;
	o.journal = journal;
	o.lockdir = "locks";
	o.name = "jb";
	o.node = node;
	if (mesh_job_open(&j, &o))
		return NULL;
	return j;
}

/* Counts DONE records per chunk straight from the journal file. */
struct per_cid {
	uint64_t n;
	uint32_t *count;
};
static int count_done(void *arg, const struct mesh_jrec *r)
{
	struct per_cid *p = arg;
	uint64_t cid;
	if (r->type != MESH_JREC_DONE)
		return 0;
	memcpy(&cid, r->data, 8);
	if (cid < p->n)
		p->count[cid]++;
	return 0;
}
static void expect_each_done_once(const char *path, uint64_t n)
{
	struct per_cid p = {n, calloc(n, sizeof(uint32_t))};
	struct mesh_journal *j;
	uint64_t zero = 0, many = 0;
	ASSERT_EQ(mesh_journal_open(&j, path, count_done, &p), 0);
	ASSERT_EQ(mesh_journal_recover(j, NULL), 0);
	mesh_journal_close(j);
	for (uint64_t c = 0; c < n; c++) {
		zero += p.count[c] == 0;
		many += p.count[c] > 1;
	}
	EXPECT_UEQ(zero, 0);
	EXPECT_UEQ(many, 0);
	free(p.count);
}

struct hold {
	uint64_t cid, start, end, deadline;
	int kind, result;
};

static int cmp_hold(const void *a, const void *b)
{
	const struct hold *x = a, *y = b;
	if (x->cid != y->cid)
		return x->cid < y->cid ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

struct racer {
	struct mesh_job *j;
	FILE *f;
	pthread_mutex_t *fmu;
	int rc;
};

/* One completer thread of a racing process: lease, complete, log. */
static void *racer_loop(void *p)
{
	struct racer *r = p;
	for (;;) {
		struct mesh_lease l;
		int rc = mesh_job_lease(r->j, 30 * MESH_NS_PER_S, 0, &l);
		if (rc == MESH_JOB_COMPLETE)
			return NULL;
		if (rc == MESH_JOB_NONE) {
			mesh_sleep_ns(MS);
			continue;
		}
		if (rc) {
			r->rc = 11;
			return NULL;
		}
		rc = mesh_job_complete(r->j, l.cid, 0);
		uint64_t end = mesh_wall_ns();
		if (rc < 0) {
			r->rc = 12;
			return NULL;
		}
		pthread_mutex_lock(r->fmu);
		fprintf(r->f, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %d %d\n", l.cid, l.started_ns, end,
			l.deadline_ns, (int)l.kind, rc);
		pthread_mutex_unlock(r->fmu);
	}
}

/* 8 processes (4 completer threads each) race lease/complete over 20,000 chunks.  Each logs its
 * holdings (wall-clock start, end, deadline); afterwards every chunk is DONE
 * exactly once and no two holdings of a chunk overlap unless the later one
 * was a steal after the earlier one's deadline. */
TEST_TIMEOUT(job_eight_processes_race_20000_chunks, 120)
{
	enum { P = 8, N = 20000, THREADS = 4 };
	pid_t pids[P];
	ASSERT_EQ(mesh_job_submit("j.log", N), 0);
	for (int p = 0; p < P; p++) {
		pids[p] = fork();
		if (pids[p] == 0) {
			char node[16], logname[32];
			snprintf(node, sizeof node, "p%d", p);
			snprintf(logname, sizeof logname, "hold.%d", p);
			struct mesh_job *j = open_node("j.log", node);
			FILE *f = fopen(logname, "w");
			if (!j || !f)
				_exit(10);
			struct racer r[THREADS];
			pthread_t th[THREADS];
			pthread_mutex_t fmu = PTHREAD_MUTEX_INITIALIZER;
			for (int t = 0; t < THREADS; t++) {
				r[t] = (struct racer){j, f, &fmu, 0};
				pthread_create(&th[t], NULL, racer_loop, &r[t]);
			}
			for (int t = 0; t < THREADS; t++) {
				pthread_join(th[t], NULL);
				if (r[t].rc)
					_exit(r[t].rc);
			}
			fclose(f);
			mesh_job_close(j);
			_exit(0);
		}
	}
	for (int p = 0; p < P; p++) {
		int st;
		waitpid(pids[p], &st, 0);
		ASSERT_TRUE(WIFEXITED(st));
		EXPECT_EQ(WEXITSTATUS(st), 0);
	}
	struct hold *h = calloc(N * 2, sizeof *h);
	uint32_t *done = calloc(N, sizeof *done);
	size_t nh = 0;
	for (int p = 0; p < P; p++) {
		char logname[32];
		snprintf(logname, sizeof logname, "hold.%d", p);
		FILE *f = fopen(logname, "r");
		ASSERT_TRUE(f != NULL);
		struct hold x;
		while (nh < N * 2 && fscanf(f, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %d %d", &x.cid, &x.start,
					    &x.end, &x.deadline, &x.kind, &x.result) == 6) {
			ASSERT_LT(x.cid, N);
			h[nh++] = x;
			if (x.result == MESH_JOB_DONE)
				done[x.cid]++;
		}
		fclose(f);
	}
	uint64_t not_once = 0, overlaps = 0;
	for (uint64_t c = 0; c < N; c++)
		not_once += done[c] != 1;
	EXPECT_UEQ(not_once, 0);
	/* holdings by chunk, in start order: compare neighbours */
	qsort(h, nh, sizeof *h, cmp_hold);
	for (size_t i = 1; i < nh; i++)
		if (h[i].cid == h[i - 1].cid && h[i].start < h[i - 1].end &&
		    !(h[i].kind == MESH_LEASE_STOLEN && h[i].start >= h[i - 1].deadline))
			overlaps++;
	EXPECT_UEQ(overlaps, 0);
	EXPECT_GE(nh, N);
	free(h);
	free(done);
	expect_each_done_once("j.log", N);
}

static pid_t start_harvest(int i, const char *n)
{
	pid_t pid = fork();
	if (pid == 0) {
		char node[16];
		snprintf(node, sizeof node, "h%d", i);
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 1);
		execl(t_bin("mesh"), "mesh", "job", "harvest", "j.log", "locks", "jb", n, "0.3", node, (char *)NULL);
		_exit(127);
	}
	return pid;
}

/* Harvest nodes are SIGKILLed at random instants, over and over, and
 * restarted; in the end the job is COMPLETE and each chunk DONE once. */
TEST_TIMEOUT(job_sigkill_harvest_nodes_repeatedly, 90)
{
	enum { H = 4, N = 4000 };
	pid_t pids[H];
	char out[4096];
	int kills = 0;
	srand((unsigned)getpid());
	ASSERT_EQ(mesh_job_submit("j.log", N), 0);
	for (int i = 0; i < H; i++)
		pids[i] = start_harvest(i, "4000");
	uint64_t until = t_now_ms() + 3000;
	while (t_now_ms() < until) {
		usleep(10000 + (useconds_t)(rand() % 90000));
		int v = rand() % H;
		kill(pids[v], SIGKILL);
		waitpid(pids[v], NULL, 0);
		kills++;
		pids[v] = start_harvest(v, "4000");
	}
	int finished = 0;
	for (int i = 0; i < H; i++) {
		int st;
		waitpid(pids[i], &st, 0);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
			finished++;
	}
	EXPECT_GT(kills, 10);
	EXPECT_EQ(finished, H);
	int rc = t_sh(out, sizeof out, 1, "%s job status j.log locks jb 4000", t_bin("mesh"));
	EXPECT_EQ(rc, 0);
	EXPECT_CONTAINS(out, "done 4000,");
	EXPECT_CONTAINS(out, "COMPLETE");
	expect_each_done_once("j.log", N);
}

struct fault_arg {
	struct mesh_job *j;
	uint64_t first, n;
	int errors, done;
};
static void *complete_range(void *p)
{
	struct fault_arg *a = p;
	for (uint64_t c = a->first; c < a->first + a->n; c++) {
		int rc = mesh_job_complete(a->j, c, 0);
		if (rc < 0)
			a->errors++;
		else if (rc == MESH_JOB_DONE)
			a->done++;
	}
	return NULL;
}

TEST(job_complete_reports_write_and_fsync_failures)
{
	static const struct {
		enum mesh_fault_op op;
		int err;
	} rows[] = {{MESH_FAULT_WRITE, ENOSPC}, {MESH_FAULT_FSYNC, EIO}, {MESH_FAULT_WRITE, EIO},
		    {MESH_FAULT_FSYNC, ENOSPC}};
	ASSERT_EQ(mesh_job_submit("j.log", 100), 0);
	struct mesh_job *j = open_node("j.log", "n1");
	ASSERT_TRUE(j != NULL);
	for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
		mesh_fault_arm(rows[i].op, rows[i].err, 0, 0);
		EXPECT_EQ(mesh_job_complete(j, i, 0), -rows[i].err);
		mesh_fault_disarm();
		EXPECT_EQ(mesh_job_is_done(j, i), 0);
		struct mesh_job *k = open_node("j.log", "n2"); /* a fresh reader agrees */
		EXPECT_EQ(mesh_job_is_done(k, i), 0);
		mesh_job_close(k);
		EXPECT_EQ(mesh_job_complete(j, i, 0), MESH_JOB_DONE);
	}
	/* a sticky failure under concurrent completers (group commit): nobody
	 * is told DONE, nothing is in the journal */
	mesh_fault_arm(MESH_FAULT_FSYNC, EIO, 0, 1);
	pthread_t th[4];
	struct fault_arg a[4];
	for (int t = 0; t < 4; t++) {
		a[t] = (struct fault_arg){j, 10 + (uint64_t)t * 20, 20, 0, 0};
		pthread_create(&th[t], NULL, complete_range, &a[t]);
	}
	for (int t = 0; t < 4; t++) {
		pthread_join(th[t], NULL);
		EXPECT_EQ(a[t].errors, 20);
		EXPECT_EQ(a[t].done, 0);
	}
	mesh_fault_disarm();
	struct mesh_job_status st;
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.done, 4);
	mesh_job_close(j);
	struct mesh_journal_report rep;
	EXPECT_EQ(mesh_job_journal_check("j.log", 0, &rep), 0);
	EXPECT_UEQ(rep.by_type[MESH_JREC_DONE], 4);
}

/* A real `mesh job complete` meets a full disk / failing fsync through
 * MESH_FAULT: it says so, exits 74, and the chunk is not DONE. */
TEST(job_cli_complete_under_injected_faults)
{
	static const char *faults[] = {"write:ENOSPC:0", "fsync:EIO:0", "write:EIO:0", "fsync:ENOSPC:0"};
	char out[4096];
	const char *mesh = t_bin("mesh");
	ASSERT_EQ(t_sh(out, sizeof out, 1, "%s job submit j.log 10", mesh), 0);
	for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) {
		int rc = t_sh(out, sizeof out, 1, "MESH_FAULT=%s %s job complete j.log locks jb 3 n1", faults[i], mesh);
		EXPECT_EQ(rc, 74);
		EXPECT_CONTAINS(out, "mesh: cannot complete chunk 3");
		EXPECT_TRUE(strstr(out, "DONE 3") == NULL);
		rc = t_sh(out, sizeof out, 1, "%s job status j.log locks jb 10", mesh);
		EXPECT_EQ(rc, 1);
		EXPECT_CONTAINS(out, "done 0,");
	}
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job complete j.log locks jb 3 n1", mesh), 0);
	EXPECT_CONTAINS(out, "DONE 3");
	EXPECT_EQ(t_sh(out, sizeof out, 1, "%s job check j.log", mesh), 0);
	EXPECT_CONTAINS(out, "done 1,");
}
