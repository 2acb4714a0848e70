/* Engine benchmarks (make bench).  Each figure is printed beside its
 * reference, measured in the same run, with the ratio and the target:
 *   1. durable completions/s, 256 completer threads (group commit) vs one
 *      fsync per completion;                         target >= 100,000/s
 *   2. lease+complete with 5 million DONE records in the journal vs with
 *      none;                                          target ratio <= 1.5
 *   3. open (recovery) of a journal of 10 million DONE records vs reading
 *      the same bytes raw;                            target <= 2 s
 * The big journals are written the way the engine writes them: batches,
 * each followed by its COMMIT.  A journal written before COMMIT existed (no
 * COMMIT at all) is adopted once, at its first open: rows 2 and 3 also show
 * that one-time cost and that nothing after it pays again.
 * Files go to a fresh directory under /tmp, removed at the end. */
#include "base/clock.h"
#include "base/err.h"
#include "job/job.h"
#include "job/record.h"
#include "journal/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static char dir[256];

static const char *path_in(const char *name)
{
	static char buf[4][512];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
	return buf[k];
}

static struct mesh_job *open_job(const char *journal, const char *lockdir, const char *name)
{
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	struct mesh_job *j;
	int rc;
	o.journal = journal;
	o.lockdir = lockdir;
	o.name = name;
	o.node = "bench";
	rc = mesh_job_open(&j, &o);
	if (rc) {
		fprintf(stderr, "bench: cannot open '%s': %s\n", journal, mesh_strerror(rc));
		exit(1);
	}
	return j;
}

/* ratio < 0: mesh / ref. */
static void verdict(const char *what, double mesh, const char *unit, double ref, const char *ref_what, double ratio,
		    int met, const char *target)
{
	if (ratio < 0)
		ratio = ref > 0 ? mesh / ref : 0.0;
	printf("  %-44s %12.0f %s   reference (%s) %12.0f %s   ratio %.2f   target %s: %s\n", what, mesh, unit,
	       ref_what, ref, unit, ratio, target, met ? "MET" : "MISSED");
}

struct completer {
	struct mesh_job *j;
	uint64_t first, n;
	int errors;
};

static void *complete_loop(void *p)
{
	struct completer *c = p;
	for (uint64_t i = 0; i < c->n; i++)
		if (mesh_job_complete(c->j, c->first + i, 1000) != MESH_JOB_DONE)
			c->errors++;
	return NULL;
}

static void bench_group_commit(void)
{
	enum { THREADS = 256, PER = 800, SERIAL = 300 };
	const char *jp = path_in("gc.log");
	pthread_t th[THREADS];
	struct completer c[THREADS];
	struct mesh_job *j;
	uint64_t t0, t1;
	double serial_rate, group_rate;
	uint64_t f0, f1, r0, r1;
	int errors = 0;

	mesh_job_submit(jp, (uint64_t)THREADS * PER + SERIAL);
	j = open_job(jp, NULL, "bench");
	/* reference: one completion at a time, each its own fsync */
	t0 = mesh_mono_ns();
	for (uint64_t i = 0; i < SERIAL; i++)
		if (mesh_job_complete(j, (uint64_t)THREADS * PER + i, 1000) != MESH_JOB_DONE)
			errors++;
	t1 = mesh_mono_ns();
	serial_rate = SERIAL / ((double)(t1 - t0) / 1e9);
	mesh_job_commit_stats(j, &f0, &r0);
	t0 = mesh_mono_ns();
	for (int t = 0; t < THREADS; t++) {
		c[t] = (struct completer){j, (uint64_t)t * PER, PER, 0};
		pthread_create(&th[t], NULL, complete_loop, &c[t]);
	}
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		errors += c[t].errors;
	}
	t1 = mesh_mono_ns();
	group_rate = (double)THREADS * PER / ((double)(t1 - t0) / 1e9);
	mesh_job_commit_stats(j, &f1, &r1);
	mesh_job_close(j);
	printf("durable completions, one process (%d completer threads, group commit)%s\n", THREADS,
	       errors ? " -- ERRORS" : "");
	printf("  (this disk's fdatasync now: %.0f us each; %.1f completions shared each fsync)\n",
	       1e6 / serial_rate, f1 > f0 ? (double)(r1 - r0) / (double)(f1 - f0) : 0.0);
	verdict("completions/s, group commit", group_rate, "/s", serial_rate, "one fsync each", -1,
		group_rate >= 100000 && !errors, ">= 100000/s");
	unlink(jp);
}

/* Writes a journal of n chunks whose first ndone are DONE, directly (the
 * bench's set-up, not what is measured): in batches of BATCH records, each
 * followed by a COMMIT as the engine writes them (its group commits are
 * smaller still), or, legacy = 1, with no COMMIT after them (a journal
 * written before COMMIT existed). */
static void write_done_journal(const char *jp, uint64_t n, uint64_t ndone, int legacy)
{
	unsigned char pay[16];
	struct mesh_jrec first = {MESH_JREC_SUBMIT, 0, 8, pay, 0};
	enum { BATCH = 4096 };
	size_t per = mesh_journal_size(16), cap = per * BATCH + MESH_JOURNAL_COMMIT_SIZE, len = 0;
	uint64_t fold = 0;
	unsigned char *buf = malloc(cap);
	int fd;
	memcpy(pay, &n, 8);
	unlink(jp);
	if (!buf || mesh_journal_create(jp, &first)) {
		fprintf(stderr, "bench: cannot create '%s'\n", jp);
		exit(1);
	}
	fd = open(jp, O_WRONLY | O_APPEND);
	for (uint64_t c = 0; c < ndone; c++) {
		uint32_t node = 1, dur = 1000;
		memcpy(pay, &c, 8);
		memcpy(pay + 8, &node, 4);
		memcpy(pay + 12, &dur, 4);
		mesh_journal_encode(buf + len, MESH_JREC_DONE, 0, pay, 16);
		fold = mesh_journal_fold(fold, buf + len);
		len += per;
		if (len + per + MESH_JOURNAL_COMMIT_SIZE > cap || c + 1 == ndone) {
			if (!legacy)
				len += mesh_journal_encode_commit(buf + len, fold);
			fold = 0;
			if (write(fd, buf, len) != (ssize_t)len) {
				fprintf(stderr, "bench: write: %s\n", strerror(errno));
				exit(1);
			}
			len = 0;
		}
	}
	fsync(fd);
	close(fd);
	free(buf);
}

/* ns per lease+complete pair, over k pairs. */
static double lease_complete_ns(struct mesh_job *j, int k)
{
	uint64_t t0 = mesh_mono_ns();
	for (int i = 0; i < k; i++) {
		struct mesh_lease l;
		if (mesh_job_lease(j, 60 * MESH_NS_PER_S, 0, &l) || mesh_job_complete(j, l.cid, 0) != MESH_JOB_DONE) {
			fprintf(stderr, "bench: lease/complete failed\n");
			exit(1);
		}
	}
	return (double)(mesh_mono_ns() - t0) / k;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static double ms_since(uint64_t t0)
{
	return (double)(mesh_mono_ns() - t0) / 1e6;
}

/* ms of CPU this process has used (user + system): on a shared machine a
 * steadier figure of the work done than the wall clock. */
static double cpu_ms(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

static void bench_cost_with_history(void)
{
	/* ROUNDS short rounds of K / ROUNDS pairs on each journal, in a
	 * rotating order; each round's ratio compares figures taken a few ms
	 * apart, and the median round is the figure: the disk is shared, and
	 * a burst of someone else's writes then lands in a few rounds, not in
	 * the whole figure of one journal. */
	enum { K = 1500, ROUNDS = 50, NJ = 3 };
	const uint64_t big = 5000000;
	const char *path[NJ] = {path_in("empty.log"), path_in("full.log"), path_in("legacy.log")};
	const char *name[NJ] = {"empty", "full", "legacy"};
	char locks[300];
	struct mesh_job *j[NJ];
	double cost[NJ][ROUNDS], ratio[NJ][ROUNDS], med[NJ], mratio[NJ], open_ms[NJ];
	snprintf(locks, sizeof locks, "%s/locks", dir);
	write_done_journal(path[0], big + 10000, 0, 0);
	write_done_journal(path[1], big + 10000, big, 0);
	write_done_journal(path[2], big + 10000, big, 1);
	for (int k = 0; k < NJ; k++) {
		uint64_t t0 = mesh_mono_ns();
		j[k] = open_job(path[k], locks, name[k]);
		open_ms[k] = ms_since(t0);
	}
	for (int r = 0; r < ROUNDS; r++)
		for (int i = 0; i < NJ; i++) {
			int k = (r + i) % NJ;
			cost[k][r] = lease_complete_ns(j[k], K / ROUNDS);
		}
	for (int k = 0; k < NJ; k++) {
		mesh_job_close(j[k]);
		for (int r = 0; r < ROUNDS; r++)
			ratio[k][r] = cost[k][r] / cost[0][r];
	}
	for (int k = 0; k < NJ; k++) {
		med[k] = median(cost[k], ROUNDS);
		mratio[k] = median(ratio[k], ROUNDS);
		unlink(path[k]);
	}
	printf("lease+complete (durable) with 5,000,000 DONE records in the journal\n");
	printf("  (medians of %d rounds; the ratio is the median of the rounds' ratios)\n", ROUNDS);
	verdict("ns per lease+complete, 5M DONE", med[1], "ns", med[0], "0 DONE", mratio[1], mratio[1] <= 1.5,
		"ratio <= 1.5");
	printf("  the same journal written before COMMIT existed (no COMMIT): adopted at its open, once\n");
	printf("    open: %.0f ms (with COMMITs: %.0f ms); then %.0f ns per lease+complete, ratio %.2f to 0 DONE\n",
	       open_ms[2], open_ms[1], med[2], mratio[2]);
	if (rmdir(locks) < 0)
		fprintf(stderr, "bench: cannot remove %s: %s\n", locks, strerror(errno));
}

/* ms to open the journal at jp and index it (*cpu: CPU ms of it); *done
 * gets its DONE count. */
static double open_ms_of(const char *jp, uint64_t *done, double *cpu)
{
	struct mesh_job_status st;
	struct mesh_job *j;
	double c0 = cpu_ms(), ms;
	uint64_t t0 = mesh_mono_ns();
	j = open_job(jp, NULL, "bench");
	ms = ms_since(t0);
	*cpu = cpu_ms() - c0;
	mesh_job_status(j, &st);
	mesh_job_close(j);
	*done = st.done;
	return ms;
}

static void bench_recovery(void)
{
	const uint64_t n = 10000000;
	const char *jp = path_in("recover.log");
	uint64_t t0, done, ldone1, ldone2;
	double raw, ms, legacy1, legacy2, cpu, cpu1, cpu2;
	char *buf = malloc(1 << 20);
	int fd;
	write_done_journal(jp, n, n, 0);
	/* reference: read the same bytes (page cache, like the open below) */
	fd = open(jp, O_RDONLY);
	t0 = mesh_mono_ns();
	while (read(fd, buf, 1 << 20) > 0)
		;
	raw = ms_since(t0);
	close(fd);
	ms = open_ms_of(jp, &done, &cpu);
	printf("recovery (open) of a journal of 10,000,000 DONE records (%s done)\n", done == n ? "all" : "NOT all");
	verdict("ms to open + index", ms, "ms", raw, "raw read", -1, ms <= 2000 && done == n, "<= 2000 ms");
	printf("  (CPU: %.0f ms)\n", cpu);
	/* The same records written before COMMIT existed: the first open
	 * adopts them (fdatasync + one COMMIT), the next is a plain open. */
	write_done_journal(jp, n, n, 1);
	legacy1 = open_ms_of(jp, &ldone1, &cpu1);
	legacy2 = open_ms_of(jp, &ldone2, &cpu2);
	printf("  written before COMMIT existed (%s done): first open (adopts) %.0f ms (CPU %.0f ms), "
	       "next open %.0f ms (CPU %.0f ms)\n",
	       ldone1 == n && ldone2 == n ? "all" : "NOT all", legacy1, cpu1, legacy2, cpu2);
	free(buf);
	unlink(jp);
}

int main(void)
{
	/* under /tmp: the path law allows a lock directory there */
	snprintf(dir, sizeof dir, "/tmp/mesh-bench-engine.XXXXXX");
	if (!mkdtemp(dir)) {
		perror("bench: mkdtemp");
		return 1;
	}
	bench_group_commit();
	bench_cost_with_history();
	bench_recovery();
	rmdir(dir);
	return 0;
}
