/* The store conformance suite: the engine's rules (job/job.h), run the same
 * way against every store -- the file store (journal + lock directory)
 * and, where its harness can start one, PostgreSQL (tests/pg_harness.h);
 * speculation's cases are in test_store_conf_spec.c.
 * Each case is written once, as a function of a store_env, and registered
 * once per store. */
#include "base/clock.h"
#include "base/err.h"
#include "job/job.h"
#include "runner/t.h"
#include "store/store.h"
#include "runner/store_env.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MS MESH_NS_PER_MS
#define LONG_TTL (60ull * MESH_NS_PER_S)

static struct mesh_job *open_as(const struct store_env *e, const char *node, uint32_t max_attempts)
{
	struct mesh_job *j = NULL;
	int rc = store_env_open(e, &j, node, max_attempts);
	if (rc)
		FAIL("open %s as %s: %s", e->where, node, mesh_strerror(rc));
	return j;
}

static void conf_submit(const struct store_env *e)
{
	EXPECT_EQ(store_env_submit(e, 10), 0);
	EXPECT_EQ(store_env_submit(e, 10), 0);
	EXPECT_EQ(store_env_submit(e, 11), MESH_E_MISMATCH);
	struct mesh_job *j = open_as(e, "a", 0);
	EXPECT_UEQ(mesh_job_nchunks(j), 10);
	mesh_job_close(j);
}

static void conf_lease_complete_duplicate(const struct store_env *e)
{
	struct mesh_lease ls[8];
	struct mesh_job_status st;
	size_t got = 0;
	ASSERT_EQ(store_env_submit(e, 20), 0);
	struct mesh_job *j = open_as(e, "a", 0);
	ASSERT_EQ(mesh_job_lease_many(j, LONG_TTL, 0, ls, 5, &got), 0);
	ASSERT_EQ(got, 5);
	for (size_t i = 0; i < got; i++)
		for (size_t k = 0; k < i; k++)
			EXPECT_NE(ls[i].cid, ls[k].cid);
	EXPECT_EQ(mesh_job_complete(j, ls[0].cid, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_complete(j, ls[0].cid, 0), MESH_JOB_IGNORED);
	EXPECT_EQ(mesh_job_is_done(j, ls[0].cid), 1);
	EXPECT_EQ(mesh_job_is_done(j, ls[1].cid), 0);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.done, 1);
	EXPECT_UEQ(st.duplicates, 1);
	EXPECT_UEQ(st.leased, 4);
	EXPECT_UEQ(st.pending, 15);
	/* another node sees the same */
	struct mesh_job *b = open_as(e, "b", 0);
	ASSERT_EQ(mesh_job_status(b, &st), 0);
	EXPECT_UEQ(st.done, 1);
	EXPECT_UEQ(st.leased, 4);
	EXPECT_EQ(mesh_job_complete(b, ls[0].cid, 0), MESH_JOB_IGNORED);
	mesh_job_close(b);
	mesh_job_close(j);
}

static void conf_two_nodes_disjoint(const struct store_env *e)
{
	struct mesh_lease la[8], lb[8], l;
	size_t na = 0, nb = 0;
	ASSERT_EQ(store_env_submit(e, 12), 0);
	struct mesh_job *a = open_as(e, "a", 0), *b = open_as(e, "b", 0);
	ASSERT_EQ(mesh_job_lease_many(a, LONG_TTL, 0, la, 8, &na), 0);
	ASSERT_EQ(mesh_job_lease_many(b, LONG_TTL, 0, lb, 8, &nb), 0);
	EXPECT_EQ(na + nb, 12);
	for (size_t i = 0; i < na; i++)
		for (size_t k = 0; k < nb; k++)
			EXPECT_NE(la[i].cid, lb[k].cid);
	EXPECT_EQ(mesh_job_lease(a, LONG_TTL, 0, &l), MESH_JOB_NONE);
	EXPECT_EQ(mesh_job_lease(b, LONG_TTL, 0, &l), MESH_JOB_NONE);
	mesh_job_close(a);
	mesh_job_close(b);
}

/* Nodes in processes, some taking leases in batches, some one at a time,
 * all with long leases: no chunk is ever leased twice, so none is
 * completed twice. */
static void conf_processes_never_share_a_lease(const struct store_env *e)
{
	const uint64_t n = 600;
	const int procs = 6;
	pid_t pids[6];
	ASSERT_EQ(store_env_submit(e, n), 0);
	for (int p = 0; p < procs; p++) {
		pids[p] = fork();
		ASSERT_GE(pids[p], 0);
		if (pids[p] == 0) {
			char node[16];
			struct mesh_job *j;
			int bad = 0;
			snprintf(node, sizeof node, "p%d", p);
			if (store_env_open(e, &j, node, 0))
				_exit(2);
			for (;;) {
				struct mesh_lease ls[8];
				size_t got = 0;
				int rc = p % 2 ? mesh_job_lease_many(j, LONG_TTL, 0, ls, 1 + (size_t)p, &got)
					       : mesh_job_lease(j, LONG_TTL, 0, &ls[0]);
				if (rc == 0 && p % 2 == 0)
					got = 1;
				if (rc == MESH_JOB_COMPLETE || rc == MESH_JOB_NONE)
					break;
				if (rc < 0)
					_exit(3);
				for (size_t i = 0; i < got; i++)
					if (mesh_job_complete(j, ls[i].cid, 0) != MESH_JOB_DONE)
						bad++;
			}
			mesh_job_close(j);
			_exit(bad ? 4 : 0);
		}
	}
	for (int p = 0; p < procs; p++) {
		int ws;
		ASSERT_EQ(waitpid(pids[p], &ws, 0), pids[p]);
		EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
	}
	struct mesh_job *j = open_as(e, "check", 0);
	struct mesh_job_status st;
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	/* a node that saw NONE while others held the last chunks left early;
	 * finish here, then every chunk is DONE exactly once */
	struct mesh_job_drain_stats ds;
	EXPECT_EQ(mesh_job_drain(j, LONG_TTL, 0, 0, NULL, &ds), MESH_JOB_COMPLETE);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.done, n);
	EXPECT_UEQ(st.duplicates, 0);
	EXPECT_UEQ(st.leased, 0);
	mesh_job_close(j);
}

/* An expired lease is stolen by exactly one of several nodes. */
static void conf_expired_lease_stolen_once(const struct store_env *e)
{
	const int procs = 6;
	struct mesh_lease l;
	int pfd[2], gofd[2];
	ASSERT_EQ(store_env_submit(e, 1), 0);
	struct mesh_job *a = open_as(e, "a", 0);
	ASSERT_EQ(mesh_job_lease(a, 30 * MS, 0, &l), 0);
	ASSERT_EQ(pipe(pfd), 0);
	ASSERT_EQ(pipe(gofd), 0);
	mesh_sleep_ns(40 * MS); /* the lease's own deadline: a time, not an event */
	for (int p = 0; p < procs; p++) {
		pid_t pid = fork();
		ASSERT_GE(pid, 0);
		if (pid == 0) {
			char node[16];
			struct mesh_job *j;
			struct mesh_lease m;
			snprintf(node, sizeof node, "t%d", p);
			if (store_env_open(e, &j, node, 0))
				_exit(2);
			char c = mesh_job_lease(j, LONG_TTL, 0, &m) == 0 && m.kind == MESH_LEASE_STOLEN ? 'w' : 'l';
			if (write(pfd[1], &c, 1) != 1)
				_exit(3);
			/* alive, holding it, until every node has tried: a
			 * holder that is gone may be stolen from at once */
			close(gofd[1]);
			while (read(gofd[0], &c, 1) > 0) {
			}
			_exit(0);
		}
	}
	close(pfd[1]);
	close(gofd[0]);
	int wins = 0, seen = 0;
	char c;
	while (seen < procs && read(pfd[0], &c, 1) == 1) {
		seen++;
		wins += c == 'w';
	}
	close(gofd[1]);
	while (wait(NULL) > 0) {
	}
	EXPECT_EQ(seen, procs);
	EXPECT_EQ(wins, 1);
	/* the first holder's late completion still counts once */
	EXPECT_EQ(mesh_job_complete(a, l.cid, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_complete(a, l.cid, 0), MESH_JOB_IGNORED);
	mesh_job_close(a);
}

static void conf_fail_bury_retry(const struct store_env *e)
{
	struct mesh_lease l;
	struct mesh_job_status st;
	ASSERT_EQ(store_env_submit(e, 1), 0);
	struct mesh_job *j = open_as(e, "a", 2);
	ASSERT_EQ(mesh_job_lease(j, LONG_TTL, 0, &l), 0);
	EXPECT_EQ(l.attempt, 1);
	EXPECT_EQ(mesh_job_fail(j, l.cid, 3), 0);
	ASSERT_EQ(mesh_job_lease(j, LONG_TTL, 0, &l), 0);
	EXPECT_EQ(l.attempt, 2);
	EXPECT_EQ(mesh_job_fail(j, l.cid, 3), 1);
	EXPECT_EQ(mesh_job_lease(j, LONG_TTL, 0, &l), MESH_JOB_NONE);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.buried, 1);
	EXPECT_UEQ(st.failed_attempts, 2);
	EXPECT_UEQ(st.pending, 0);
	EXPECT_EQ(mesh_job_retry(j, UINT64_MAX), 1);
	ASSERT_EQ(mesh_job_lease(j, LONG_TTL, 0, &l), 0);
	EXPECT_EQ(mesh_job_complete(j, l.cid, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_lease(j, LONG_TTL, 0, &l), MESH_JOB_COMPLETE);
	mesh_job_close(j);
}

/* A lease handed back (renew to 1 ns) is another node's at once; a batch
 * of a node that closes goes with it. */
static void conf_hand_back_and_close(const struct store_env *e)
{
	struct mesh_lease ls[4], l;
	size_t got = 0;
	ASSERT_EQ(store_env_submit(e, 4), 0);
	struct mesh_job *a = open_as(e, "a", 0), *b = open_as(e, "b", 0);
	ASSERT_EQ(mesh_job_lease_many(a, LONG_TTL, 0, ls, 4, &got), 0);
	ASSERT_EQ(got, 4);
	EXPECT_EQ(mesh_job_lease(b, LONG_TTL, 0, &l), MESH_JOB_NONE);
	EXPECT_EQ(mesh_job_renew(a, &ls[2], LONG_TTL), 0);
	EXPECT_EQ(mesh_job_renew(a, &ls[1], 1), 0);
	ASSERT_EQ(mesh_job_lease(b, LONG_TTL, 0, &l), 0);
	EXPECT_UEQ(l.cid, ls[1].cid);
	EXPECT_EQ(mesh_job_renew(a, &ls[1], LONG_TTL), MESH_E_STATE); /* it is b's now */
	EXPECT_EQ(mesh_job_complete(a, ls[0].cid, 0), MESH_JOB_DONE);
	mesh_job_close(a);
	size_t n2 = 0;
	struct mesh_lease lb[4];
	ASSERT_EQ(mesh_job_lease_many(b, LONG_TTL, 0, lb, 4, &n2), 0);
	EXPECT_EQ(n2, 2); /* ls[2], ls[3]: a's close let them go */
	mesh_job_close(b);
}

/* lease k at once: k = 0 is refused, more than a block counts as a block,
 * fewer left than asked gives what is left; then COMPLETE. */
static void conf_lease_k(const struct store_env *e)
{
	struct mesh_lease ls[MESH_JOB_LEASE_MANY_MAX + 8];
	size_t got = 7;
	ASSERT_EQ(store_env_submit(e, 70), 0);
	struct mesh_job *j = open_as(e, "a", 0);
	EXPECT_EQ(mesh_job_lease_many(j, LONG_TTL, 0, ls, 0, &got), MESH_E_RANGE);
	EXPECT_EQ(got, 0);
	ASSERT_EQ(mesh_job_lease_many(j, LONG_TTL, 0, ls, MESH_JOB_LEASE_MANY_MAX + 8, &got), 0);
	EXPECT_EQ(got, MESH_JOB_LEASE_MANY_MAX);
	size_t more = 0;
	ASSERT_EQ(mesh_job_lease_many(j, LONG_TTL, 0, ls + got, 8, &more), 0);
	EXPECT_EQ(more, 70 - MESH_JOB_LEASE_MANY_MAX);
	for (size_t i = 0; i < got + more; i++) {
		EXPECT_EQ(ls[i].attempt, 1);
		EXPECT_EQ(ls[i].kind, MESH_LEASE_FRESH);
		EXPECT_GT(ls[i].deadline_ns, ls[i].started_ns);
		for (size_t k = 0; k < i; k++)
			EXPECT_NE(ls[i].cid, ls[k].cid);
	}
	EXPECT_EQ(mesh_job_lease_many(j, LONG_TTL, 0, ls, 4, &more), MESH_JOB_NONE);
	EXPECT_EQ(more, 0);
	uint64_t cids[70];
	int res[70];
	for (size_t i = 0; i < 70; i++)
		cids[i] = ls[i].cid;
	ASSERT_EQ(mesh_job_complete_many(j, cids, NULL, 70, res), 0);
	EXPECT_EQ(mesh_job_lease_many(j, LONG_TTL, 0, ls, 4, &more), MESH_JOB_COMPLETE);
	mesh_job_close(j);
}

/* A renewed lease holds past its first deadline; once it expires another
 * node steals it (attempt + 1); the old holder can no longer renew, yet
 * its late completion is the first and wins; the thief's is IGNORED. */
static void conf_renew_steal_first_wins(const struct store_env *e)
{
	struct mesh_lease la, lb;
	struct mesh_job_status st;
	ASSERT_EQ(store_env_submit(e, 1), 0);
	struct mesh_job *a = open_as(e, "a", 0), *b = open_as(e, "b", 0);
	ASSERT_EQ(mesh_job_lease(a, 300 * MS, 0, &la), 0);
	EXPECT_EQ(mesh_job_lease(b, LONG_TTL, 0, &lb), MESH_JOB_NONE);
	uint64_t dl = la.deadline_ns;
	ASSERT_EQ(mesh_job_renew(a, &la, LONG_TTL), 0);
	EXPECT_GT(la.deadline_ns, dl);
	mesh_sleep_ns(400 * MS); /* past the first deadline: a time, not an event */
	EXPECT_EQ(mesh_job_lease(b, LONG_TTL, 0, &lb), MESH_JOB_NONE); /* renewed: still live */
	ASSERT_EQ(mesh_job_renew(a, &la, 50 * MS), 0);
	mesh_sleep_ns(100 * MS);
	ASSERT_EQ(mesh_job_lease(b, LONG_TTL, 0, &lb), 0);
	EXPECT_EQ(lb.kind, MESH_LEASE_STOLEN);
	EXPECT_EQ(lb.attempt, 2);
	EXPECT_EQ(mesh_job_renew(a, &la, LONG_TTL), MESH_E_STATE);
	EXPECT_EQ(mesh_job_complete(a, 0, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_complete(b, 0, 0), MESH_JOB_IGNORED);
	EXPECT_EQ(mesh_job_renew(b, &lb, LONG_TTL), MESH_E_STATE); /* DONE: nothing to renew */
	ASSERT_EQ(mesh_job_status(b, &st), 0);
	EXPECT_UEQ(st.done, 1);
	EXPECT_GE(st.duplicates, 1);
	mesh_job_close(a);
	mesh_job_close(b);
}

/* complete_many: one batch, answers per chunk (a chunk twice in the batch,
 * one DONE before); a batch with a chunk out of range is refused whole. */
static void conf_complete_batched(const struct store_env *e)
{
	uint64_t cids[] = {0, 1, 1, 4, 2};
	int res[5];
	struct mesh_job_status st;
	ASSERT_EQ(store_env_submit(e, 5), 0);
	struct mesh_job *j = open_as(e, "a", 0);
	EXPECT_EQ(mesh_job_complete(j, 2, 0), MESH_JOB_DONE);
	ASSERT_EQ(mesh_job_complete_many(j, cids, NULL, 5, res), 0);
	EXPECT_EQ(res[0], MESH_JOB_DONE);
	EXPECT_EQ(res[1], MESH_JOB_DONE);
	EXPECT_EQ(res[2], MESH_JOB_IGNORED);
	EXPECT_EQ(res[3], MESH_JOB_DONE);
	EXPECT_EQ(res[4], MESH_JOB_IGNORED);
	uint64_t bad[] = {3, 5};
	EXPECT_EQ(mesh_job_complete_many(j, bad, NULL, 2, res), MESH_E_RANGE);
	EXPECT_EQ(res[1], MESH_E_RANGE);
	EXPECT_EQ(mesh_job_is_done(j, 3), 0); /* nothing of a refused batch is done */
	EXPECT_EQ(mesh_job_is_done(j, 5), MESH_E_RANGE);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.done, 4);
	mesh_job_close(j);
}

/* A batch that crosses DONE words (64 chunks a word) and kinds of lease:
 * chunks of two block leases, a chunk with a failed attempt (a row of its
 * own in PostgreSQL), a chunk this node never took, and a duplicate; then
 * every other chunk, until the job is COMPLETE with nothing left leased
 * (a block's count of what it still leases is right, or its chunks are
 * lost or stay leased). */
static void conf_complete_across_words_and_blocks(const struct store_env *e)
{
	enum { N = 300 };
	struct mesh_lease ls[64];
	struct mesh_job_status s0, s1;
	size_t got = 0, n = 0;
	uint64_t held[N], cids[N];
	int res[N];
	ASSERT_EQ(store_env_submit(e, N), 0);
	struct mesh_job *j = open_as(e, "a", 0);
	while (n < 130) { /* 5 first: the next blocks start off a word's edge */
		ASSERT_EQ(mesh_job_lease_many(j, LONG_TTL, 0, ls, n ? 64 : 5, &got), 0);
		for (size_t i = 0; i < got; i++)
			held[n++] = ls[i].cid;
	}
	int taken[N] = {0};
	for (size_t i = 0; i < n; i++)
		taken[held[i]] = 1;
	uint64_t never = N - 1;
	while (taken[never])
		never--;
	EXPECT_EQ(mesh_job_fail(j, held[5], 1), 0); /* pending again, one failed attempt */
	ASSERT_EQ(mesh_job_status(j, &s0), 0);
	uint64_t batch[] = {held[64], held[0], never, held[5], held[63], held[64], held[n - 1]};
	ASSERT_EQ(mesh_job_complete_many(j, batch, NULL, 7, res), 0);
	int want[] = {MESH_JOB_DONE, MESH_JOB_DONE, MESH_JOB_DONE, MESH_JOB_DONE,
		      MESH_JOB_DONE, MESH_JOB_IGNORED, MESH_JOB_DONE};
	for (int i = 0; i < 7; i++)
		EXPECT_EQ(res[i], want[i]);
	ASSERT_EQ(mesh_job_status(j, &s1), 0);
	EXPECT_UEQ(s1.done, s0.done + 6);
	EXPECT_UEQ(s1.duplicates, s0.duplicates + 1);
	EXPECT_UEQ(s1.failed_attempts, 1);
	EXPECT_UEQ(s1.leased + s1.pending, s0.leased + s0.pending - 6);
	EXPECT_TRUE(s1.leased + 4 <= s0.leased);
	/* the rest this node holds, last first, and `never` again */
	size_t k = 0;
	for (size_t i = n; i-- > 0;) {
		int in = 0;
		for (size_t b = 0; b < 7; b++)
			in |= batch[b] == held[i];
		if (!in)
			cids[k++] = held[i];
	}
	cids[k++] = never;
	ASSERT_EQ(mesh_job_complete_many(j, cids, NULL, k, res), 0);
	for (size_t i = 0; i < k; i++)
		EXPECT_EQ(res[i], i + 1 < k ? MESH_JOB_DONE : MESH_JOB_IGNORED);
	int rounds = 0, rc;
	while ((rc = mesh_job_lease_many(j, LONG_TTL, 0, ls, 64, &got)) == 0 && rounds++ < 20) {
		for (size_t i = 0; i < got; i++)
			cids[i] = ls[i].cid;
		ASSERT_EQ(mesh_job_complete_many(j, cids, NULL, got, res), 0);
		for (size_t i = 0; i < got; i++)
			EXPECT_EQ(res[i], MESH_JOB_DONE);
	}
	EXPECT_EQ(rc, MESH_JOB_COMPLETE);
	ASSERT_EQ(mesh_job_status(j, &s1), 0);
	EXPECT_UEQ(s1.done, N);
	EXPECT_UEQ(s1.leased, 0);
	EXPECT_UEQ(s1.pending, 0);
	EXPECT_UEQ(s1.duplicates, 2);
	mesh_job_close(j);
}

struct racer {
	struct mesh_job *j;
	uint64_t n, done, ignored, errors;
};
static void *race_all(void *arg)
{
	struct racer *r = arg;
	for (uint64_t c = 0; c < r->n; c += 8) {
		uint64_t cids[8];
		int res[8];
		size_t k = 0;
		for (; k < 8 && c + k < r->n; k++)
			cids[k] = c + k;
		if (mesh_job_complete_many(r->j, cids, NULL, k, res)) {
			r->errors++;
			continue;
		}
		for (size_t i = 0; i < k; i++) {
			r->done += res[i] == MESH_JOB_DONE;
			r->ignored += res[i] == MESH_JOB_IGNORED;
			r->errors += res[i] != MESH_JOB_DONE && res[i] != MESH_JOB_IGNORED;
		}
	}
	return NULL;
}

/* Concurrent completers (threads of two handles) of the same chunks: each
 * chunk is DONE exactly once, every other answer IGNORED and counted. */
static void conf_first_completion_wins_duplicates_counted(const struct store_env *e)
{
	enum { N = 200, T = 4 };
	struct mesh_job_status st;
	ASSERT_EQ(store_env_submit(e, N), 0);
	struct mesh_job *a = open_as(e, "a", 0), *b = open_as(e, "b", 0);
	pthread_t th[T];
	struct racer r[T];
	for (int i = 0; i < T; i++) {
		r[i] = (struct racer){i % 2 ? b : a, N, 0, 0, 0};
		ASSERT_EQ(pthread_create(&th[i], NULL, race_all, &r[i]), 0);
	}
	uint64_t done = 0, ignored = 0;
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		EXPECT_UEQ(r[i].errors, 0);
		done += r[i].done;
		ignored += r[i].ignored;
	}
	EXPECT_UEQ(done, N);
	EXPECT_UEQ(ignored, (uint64_t)N * (T - 1));
	mesh_job_close(a);
	mesh_job_close(b);
	struct mesh_job *c = open_as(e, "c", 0);
	ASSERT_EQ(mesh_job_status(c, &st), 0);
	EXPECT_UEQ(st.done, N);
	EXPECT_UEQ(st.duplicates, (uint64_t)N * (T - 1));
	mesh_job_close(c);
}

/* status: every chunk is counted once, as done, leased, buried or
 * pending, from any node. */
static void conf_status_counts(const struct store_env *e)
{
	struct mesh_lease ls[4], l;
	struct mesh_job_status st;
	size_t got = 0;
	ASSERT_EQ(store_env_submit(e, 10), 0);
	struct mesh_job *j = open_as(e, "a", 1);
	ASSERT_EQ(mesh_job_status(j, &st), 0);
	EXPECT_UEQ(st.n, 10);
	EXPECT_UEQ(st.pending, 10);
	ASSERT_EQ(mesh_job_lease_many(j, LONG_TTL, 0, ls, 4, &got), 0);
	ASSERT_EQ(got, 4);
	EXPECT_EQ(mesh_job_complete(j, ls[0].cid, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_fail(j, ls[1].cid, 9), 1); /* max_attempts 1: buried */
	struct mesh_job *k = open_as(e, "b", 1);
	ASSERT_EQ(mesh_job_lease(k, LONG_TTL, 0, &l), 0);
	for (int pass = 0; pass < 2; pass++) {
		ASSERT_EQ(mesh_job_status(pass ? k : j, &st), 0);
		EXPECT_UEQ(st.n, 10);
		EXPECT_UEQ(st.done, 1);
		EXPECT_UEQ(st.buried, 1);
		EXPECT_UEQ(st.leased, 3);
		EXPECT_UEQ(st.pending, 5);
		EXPECT_UEQ(st.failed_attempts, 1);
		EXPECT_UEQ(st.duplicates, 0);
	}
	mesh_job_close(k);
	mesh_job_close(j);
}

struct fed {
	uint64_t cids[64];
	size_t n;
};
static void fed_one(uint64_t cid, void *arg)
{
	struct fed *f = arg;
	if (f->n < 64)
		f->cids[f->n++] = cid;
}

/* The completion feed: each DONE chunk once, in cid order, whoever
 * completed it; a call with nothing new hands out nothing. */
static void conf_completion_feed(const struct store_env *e)
{
	struct mesh_job_feed feed = MESH_JOB_FEED_INIT;
	struct fed f = {{0}, 0};
	ASSERT_EQ(store_env_submit(e, 130), 0);
	struct mesh_job *a = open_as(e, "a", 0), *b = open_as(e, "b", 0);
	ASSERT_EQ(mesh_job_feed(a, &feed, fed_one, &f), 0);
	EXPECT_EQ(f.n, 0);
	EXPECT_EQ(mesh_job_complete(b, 129, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_complete(a, 3, 0), MESH_JOB_DONE);
	EXPECT_EQ(mesh_job_complete(b, 64, 0), MESH_JOB_DONE);
	ASSERT_EQ(mesh_job_feed(a, &feed, fed_one, &f), 0);
	ASSERT_EQ(f.n, 3);
	EXPECT_UEQ(f.cids[0], 3);
	EXPECT_UEQ(f.cids[1], 64);
	EXPECT_UEQ(f.cids[2], 129);
	ASSERT_EQ(mesh_job_feed(a, &feed, fed_one, &f), 0);
	EXPECT_EQ(f.n, 3);
	EXPECT_EQ(mesh_job_complete(a, 3, 0), MESH_JOB_IGNORED); /* a duplicate is not news */
	EXPECT_EQ(mesh_job_complete(b, 4, 0), MESH_JOB_DONE);
	ASSERT_EQ(mesh_job_feed(a, &feed, fed_one, &f), 0);
	ASSERT_EQ(f.n, 4);
	EXPECT_UEQ(f.cids[3], 4);
	mesh_job_feed_free(&feed);
	mesh_job_close(a);
	mesh_job_close(b);
}

/* A fast node may take more than it is handed (the file store's block
 * reserve): those count as leased, never reach another node while it
 * lives, and go with its close: every chunk is then DONE exactly once.
 * PostgreSQL too (job_pg.c: one lease statement for several batches of
 * a fast node). */
static void conf_fast_node_reserve(const struct store_env *e)
{
	const uint64_t n = 3000;
	enum { HELD_MAX = 2048, FLUSH = 256 };
	static uint64_t cids[HELD_MAX];
	static int res[HELD_MAX];
	struct mesh_lease ls[7];
	struct mesh_job_status st;
	uint64_t done = 0;
	size_t held = 0;
	ASSERT_EQ(store_env_submit(e, n), 0);
	struct mesh_job *a = open_as(e, "a", 0), *b = open_as(e, "b", 0);
	uint64_t t0 = mesh_mono_ns();
	/* paced (7 chunks a ms at most) for 250 ms: long enough for a's rate
	 * to be measured (100 ms windows), short of the job's end.  Completed
	 * FLUSH at a time: a's lease rate, which sizes its reserve, must not
	 * hang on an fsync a batch (under ASan on a busy disk it fell below
	 * what makes a reserve at all, once in CI) */
	while (mesh_mono_ns() - t0 < 250 * MS || held) {
		size_t got = 0;
		int more = mesh_mono_ns() - t0 < 250 * MS;
		if (more) {
			mesh_sleep_ns(1 * MS);
			ASSERT_EQ(mesh_job_lease_many(a, LONG_TTL, 0, ls, 7, &got), 0);
			for (size_t i = 0; i < got; i++)
				cids[held++] = ls[i].cid;
		}
		if (held && (held >= FLUSH || !more)) {
			ASSERT_EQ(mesh_job_complete_many(a, cids, NULL, held, res), 0);
			for (size_t i = 0; i < held; i++)
				EXPECT_EQ(res[i], MESH_JOB_DONE);
			done += held;
			held = 0;
		}
	}
	/* The reserve can be empty at an instant (its last chunks just handed
	 * out: 1 run in 5 here once); the next lease of one then takes a new
	 * block and keeps the rest. */
	for (int i = 0; i < 3; i++) {
		size_t got = 0;
		ASSERT_EQ(mesh_job_status(b, &st), 0);
		if (st.leased > 0)
			break;
		ASSERT_EQ(mesh_job_lease_many(a, LONG_TTL, 0, ls, 1, &got), 0);
		ASSERT_EQ(got, 1);
		cids[0] = ls[0].cid;
		ASSERT_EQ(mesh_job_complete_many(a, cids, NULL, 1, res), 0);
		EXPECT_EQ(res[0], MESH_JOB_DONE);
		done++;
	}
	ASSERT_EQ(mesh_job_status(b, &st), 0);
	EXPECT_UEQ(st.done, done);
	EXPECT_UEQ(st.done + st.leased + st.pending, n);
	EXPECT_GT(st.leased, 0); /* a's reserve: taken, not handed out */
	mesh_job_close(a);
	ASSERT_EQ(mesh_job_status(b, &st), 0);
	EXPECT_UEQ(st.leased, 0);
	/* b takes the rest, a's reserve included */
	struct mesh_lease lb[MESH_JOB_LEASE_MANY_MAX];
	uint64_t bc[MESH_JOB_LEASE_MANY_MAX], bdone = 0;
	int bres[MESH_JOB_LEASE_MANY_MAX], rc;
	size_t got = 0;
	while ((rc = mesh_job_lease_many(b, LONG_TTL, 0, lb, MESH_JOB_LEASE_MANY_MAX, &got)) == 0) {
		for (size_t i = 0; i < got; i++)
			bc[i] = lb[i].cid;
		ASSERT_EQ(mesh_job_complete_many(b, bc, NULL, got, bres), 0);
		for (size_t i = 0; i < got; i++)
			bdone += bres[i] == MESH_JOB_DONE;
	}
	EXPECT_EQ(rc, MESH_JOB_COMPLETE);
	EXPECT_UEQ(bdone, n - done);
	ASSERT_EQ(mesh_job_status(b, &st), 0);
	EXPECT_UEQ(st.done, n);
	EXPECT_UEQ(st.duplicates, 0);
	mesh_job_close(b);
}

/* Placement: a node's lease batch is its share of the speed of all the
 * job's nodes (job/place.h): a node ten times slower than the fastest
 * takes a tenth of what it asks for, the fastest all of it. */
static void conf_placement_by_speed(const struct store_env *e)
{
	struct mesh_lease ls[16];
	size_t got = 0;
	ASSERT_EQ(store_env_submit(e, 200), 0);
	struct mesh_job *fast = open_as(e, "fast", 0), *slow = open_as(e, "slow", 0);
	for (int i = 0; i < 3; i++) {
		struct mesh_lease l;
		ASSERT_EQ(mesh_job_lease(fast, LONG_TTL, 0, &l), 0);
		EXPECT_EQ(mesh_job_complete(fast, l.cid, 2 * MS), MESH_JOB_DONE);
		ASSERT_EQ(mesh_job_lease(slow, LONG_TTL, 0, &l), 0);
		EXPECT_EQ(mesh_job_complete(slow, l.cid, 20 * MS), MESH_JOB_DONE);
	}
	/* handles opened now see the speeds from their first batch on */
	mesh_job_close(fast);
	mesh_job_close(slow);
	fast = open_as(e, "fast", 0);
	slow = open_as(e, "slow", 0);
	ASSERT_EQ(mesh_job_lease_many(slow, LONG_TTL, 0, ls, 10, &got), 0);
	EXPECT_EQ(got, 1);
	ASSERT_EQ(mesh_job_lease_many(fast, LONG_TTL, 0, ls, 10, &got), 0);
	EXPECT_EQ(got, 10);
	/* a node never seen takes what it asks for */
	struct mesh_job *fresh = open_as(e, "fresh", 0);
	ASSERT_EQ(mesh_job_lease_many(fresh, LONG_TTL, 0, ls, 10, &got), 0);
	EXPECT_EQ(got, 10);
	mesh_job_close(fresh);
	mesh_job_close(fast);
	mesh_job_close(slow);
}

#define CONF STORE_CONF
#define CONF_ALL(store)                                   \
	CONF(store, submit)                               \
	CONF(store, lease_complete_duplicate)             \
	CONF(store, two_nodes_disjoint)                   \
	CONF(store, processes_never_share_a_lease)        \
	CONF(store, expired_lease_stolen_once)            \
	CONF(store, fail_bury_retry)                      \
	CONF(store, hand_back_and_close)                  \
	CONF(store, lease_k)                              \
	CONF(store, renew_steal_first_wins)               \
	CONF(store, complete_batched)                     \
	CONF(store, complete_across_words_and_blocks)     \
	CONF(store, first_completion_wins_duplicates_counted) \
	CONF(store, status_counts)                        \
	CONF(store, completion_feed)                      \
	CONF(store, fast_node_reserve)                    \
	CONF(store, placement_by_speed)

CONF_ALL(file)
CONF_ALL(postgresql)

/* File store only: what a batch costs on disk. */
TEST(store_file_batch_is_one_lease_file)
{
	struct store_env e;
	struct mesh_lease ls[8];
	size_t got = 0, files = 0;
	ASSERT_EQ(store_env_start(&e, "file"), 0);
	ASSERT_EQ(store_env_submit(&e, 100), 0);
	struct mesh_job *j = open_as(&e, "a", 0);
	ASSERT_EQ(mesh_job_lease_many(j, LONG_TTL, 0, ls, 8, &got), 0);
	EXPECT_EQ(got, 8);
	DIR *d = opendir(e.lockdir);
	ASSERT_TRUE(d != NULL);
	struct dirent *de;
	while ((de = readdir(d)))
		files += de->d_name[0] != '.';
	closedir(d);
	EXPECT_EQ(files, 1);
	for (size_t i = 0; i < got; i++)
		EXPECT_EQ(mesh_job_complete(j, ls[i].cid, 0), MESH_JOB_DONE);
	d = opendir(e.lockdir);
	files = 0;
	while ((de = readdir(d)))
		files += de->d_name[0] != '.';
	closedir(d);
	EXPECT_EQ(files, 1); /* released with its last chunk: kept, free, for the next block */
	mesh_job_close(j);
	d = opendir(e.lockdir);
	files = 0;
	while ((de = readdir(d)))
		files += de->d_name[0] != '.';
	closedir(d);
	EXPECT_EQ(files, 0); /* and removed by the close */
}

TEST(store_block_line_codec)
{
	struct mesh_lease_stamp st = {.deadline_ns = 5, .started_ns = 4, .attempt = 2, .token = 0xabc}, back;
	char buf[MESH_LEASE_BLOCK_MAX];
	uint64_t mask = 0;
	strcpy(st.node, "n1");
	size_t n = mesh_lease_block_format(buf, sizeof buf, &st, 0x8000000000000005ull);
	ASSERT_GT(n, 0);
	ASSERT_EQ(mesh_lease_block_parse(buf, n, &back, &mask), 0);
	EXPECT_UEQ(mask, 0x8000000000000005ull);
	EXPECT_UEQ(back.token, 0xabc);
	EXPECT_STREQ(back.node, "n1");
	/* every cut and every flipped byte is refused */
	for (size_t cut = 0; cut < n; cut++)
		EXPECT_EQ(mesh_lease_block_parse(buf, cut, &back, &mask), MESH_E_PARSE);
	for (size_t i = 0; i < n; i++) {
		buf[i] ^= 0x01;
		EXPECT_EQ(mesh_lease_block_parse(buf, n, &back, &mask), MESH_E_PARSE);
		buf[i] ^= 0x01;
	}
	/* a plain lease line is not a block */
	n = mesh_lease_format(buf, sizeof buf, &st);
	EXPECT_EQ(mesh_lease_block_parse(buf, n, &back, &mask), MESH_E_PARSE);
	EXPECT_EQ(mesh_lease_format(buf, 10, &st), 0);
	EXPECT_EQ(mesh_lease_block_format(buf, 10, &st, 1), 0);
}
