/* The executor interface (exec/executor.h): the process executor followed
 * step by step through its protocol, and the chunk driver over an executor
 * that runs no process at all -- the shape of meshd's slot executor. */
#include "base/buf.h"
#include "base/clock.h"
#include "exec/executor.h"
#include "exec/loop.h"
#include "exec/runner.h"
#include "job/job.h"
#include "runner/t.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* ---- the process executor, by its protocol ---- */

struct got {
	struct mesh_buf out[3], err[3]; /* by slot */
};

static int got_output(void *arg, unsigned slot, int out, const void *p, size_t n)
{
	struct got *g = arg;
	return mesh_buf_add(out ? &g->out[slot] : &g->err[slot], p, n);
}

/* Steps 3-4 until the attempt in slot ENDED (or 5 s). */
static int wait_end(struct mesh__executor *ex, unsigned slot, struct mesh__exec_result *res)
{
	uint64_t give_up = mesh_mono_ns() + 5 * MESH_NS_PER_S;
	for (;;) {
		int st = ex->ops->status(ex, slot, mesh_mono_ns(), res);
		if (st == MESH__EXEC_ENDED || mesh_mono_ns() > give_up)
			return st;
		struct pollfd pf[MESH__EXEC_MAX_FDS];
		uint64_t wake = UINT64_MAX, now = mesh_mono_ns();
		unsigned n = ex->ops->events(ex, slot, pf, MESH__EXEC_MAX_FDS, &wake);
		int ms = wake == UINT64_MAX ? 1000 : wake <= now ? 0 : (int)((wake - now) / MESH_NS_PER_MS + 1);
		if (poll(pf, n, ms) > 0)
			for (unsigned i = 0; i < n; i++)
				if (pf[i].revents)
					ex->ops->dispatch(ex, slot, &pf[i]);
	}
}

TEST(executor_proc_follows_its_protocol)
{
	struct got g;
	for (int i = 0; i < 3; i++)
		g.out[i] = g.err[i] = (struct mesh_buf)MESH_BUF_INIT;
	struct mesh__exec_sink sink = {got_output, &g};
	struct mesh__executor *ex = NULL;
	struct mesh__exec_result res;

	EXPECT_EQ(mesh__exec_proc_new("/nonexistent/mesh-cmd", 2, 0, &sink, &ex), -ENOENT);
	EXPECT_TRUE(ex == NULL);
	/* A placeholder in argv[0]: each start looks its command up. */
	ASSERT_EQ(mesh__exec_proc_new("{}", 2, 0, &sink, &ex), 0);
	ASSERT_EQ(ex->nslots, 2u);

	/* An attempt that exits: its code, its streams apart, its env. */
	char *const a1[] = {"sh", "-c", "echo $MESH_CHUNK $MESH_ATTEMPT $MESH_SLOT; echo oops >&2; exit 3", NULL};
	struct mesh__exec_chunk c = {.cid = 7, .attempt = 2, .slot = 1, .argv = a1};
	ASSERT_EQ(ex->ops->start(ex, &c, &res), 0);
	ASSERT_EQ(wait_end(ex, 1, &res), MESH__EXEC_ENDED);
	EXPECT_EQ(res.code, 3);
	EXPECT_EQ(res.signal, 0);
	EXPECT_EQ(res.start_err, 0);
	ASSERT_EQ(mesh_buf_add(&g.out[1], "", 1), 0);
	ASSERT_EQ(mesh_buf_add(&g.err[1], "", 1), 0);
	EXPECT_STREQ(g.out[1].p, "7 2 1\n");
	EXPECT_STREQ(g.err[1].p, "oops\n");
	ex->ops->release(ex, 1);

	/* Cancelled: SIGKILL to its group, reported as that signal. */
	char *const a2[] = {"sh", "-c", "sleep 30 & sleep 30", NULL};
	c = (struct mesh__exec_chunk){.cid = 8, .attempt = 1, .slot = 2, .argv = a2};
	ASSERT_EQ(ex->ops->start(ex, &c, &res), 0);
	EXPECT_EQ(ex->ops->status(ex, 2, mesh_mono_ns(), &res), MESH__EXEC_RUNNING);
	ex->ops->signal(ex, 2, SIGKILL);
	uint64_t t0 = mesh_mono_ns();
	ASSERT_EQ(wait_end(ex, 2, &res), MESH__EXEC_ENDED);
	EXPECT_TRUE(mesh_mono_ns() - t0 < 3 * MESH_NS_PER_S); /* the group died: no pipe held open */
	EXPECT_EQ(res.code, 128 + SIGKILL);
	EXPECT_EQ(res.signal, SIGKILL);
	ex->ops->release(ex, 2);

	/* Cannot start: the result is there at once, the slot reusable. */
	char *const a3[] = {"/nonexistent/mesh-cmd", NULL};
	c = (struct mesh__exec_chunk){.cid = 9, .attempt = 1, .slot = 1, .argv = a3};
	ASSERT_EQ(ex->ops->start(ex, &c, &res), 1);
	EXPECT_EQ(res.code, 127);
	EXPECT_EQ(res.start_err, -ENOENT);
	EXPECT_EQ(ex->ops->status(ex, 1, mesh_mono_ns(), &res), MESH__EXEC_ENDED);
	ex->ops->release(ex, 1);

	/* Released while running: killed and reaped, nothing left. */
	char *const a4[] = {"sleep", "30", NULL};
	c = (struct mesh__exec_chunk){.cid = 10, .attempt = 1, .slot = 1, .argv = a4};
	ASSERT_EQ(ex->ops->start(ex, &c, &res), 0);
	ex->ops->release(ex, 1);
	ex->ops->free(ex);
	for (int i = 0; i < 3; i++) {
		mesh_buf_release(&g.out[i]);
		mesh_buf_release(&g.err[i]);
	}
}

/* ---- the driver over an executor without processes ---- */

/* Like a worker's slot: the chunk goes in, a wakeup fd says its answer is
 * there.  Chunk 5 fails its first attempt; chunk 99 (none here) never
 * ends; with hang set every attempt runs until cancelled. */
struct fake_slot {
	int evfd, running, ended, code, sig, away;
	uint64_t cid;
	uint32_t attempt;
	char word[32];
};
struct fake {
	struct mesh__executor base;
	struct fake_slot s[4];
	int hang;
	unsigned starts, cancels, max_busy, busy;
	/* away: the driver's thread is held away past the lease's TTL (a host
	 * cut off from its store) at its first look at an attempt; meanwhile
	 * the attempt's answer comes, and thief takes the expired lease and
	 * completes the chunk first. */
	uint64_t away_ns;
	struct mesh_job *thief;
	int thief_lease, thief_complete;
	/* with away: the thief only takes the lease (the first attempt's),
	 * and the attempt is still running when the driver is back (it ends
	 * at the next look; a later attempt at once) */
	int steal_only;
	unsigned lost_calls;
	uint64_t lost_cid, lost_since, lost_ttl;
};

static struct fake_slot *fslot(struct mesh__executor *ex, unsigned slot)
{
	return &((struct fake *)ex)->s[slot - 1];
}

static void poke(struct fake_slot *s)
{
	uint64_t one = 1;
	if (write(s->evfd, &one, sizeof one) < 0)
		abort();
}

static int fake_start(struct mesh__executor *ex, const struct mesh__exec_chunk *c, struct mesh__exec_result *res)
{
	struct fake *f = (struct fake *)ex;
	struct fake_slot *s = fslot(ex, c->slot);
	if (s->running || !c->argv[1])
		return -EINVAL;
	*s = (struct fake_slot){.evfd = s->evfd, .running = 1, .cid = c->cid, .attempt = c->attempt};
	snprintf(s->word, sizeof s->word, "%s", c->argv[1]); /* the expanded "{}" */
	f->starts++;
	if (++f->busy > f->max_busy)
		f->max_busy = f->busy;
	if (!f->hang)
		poke(s);
	return 0;
}

static unsigned fake_events(struct mesh__executor *ex, unsigned slot, struct pollfd *pf, unsigned cap,
			    uint64_t *wake)
{
	pf[0] = (struct pollfd){.fd = fslot(ex, slot)->evfd, .events = POLLIN};
	return 1;
}

static void fake_dispatch(struct mesh__executor *ex, unsigned slot, const struct pollfd *pf)
{
	struct fake_slot *s = fslot(ex, slot);
	uint64_t v;
	if (read(s->evfd, &v, sizeof v) < 0 || s->ended)
		return;
	char line[64];
	int n = snprintf(line, sizeof line, "chunk %s\n", s->word);
	s->ended = 1;
	if (s->sig)
		return;
	if (s->cid == 5 && s->attempt == 1) {
		s->code = 3;
		ex->sink.output(ex->sink.arg, slot, 0, "failed\n", 7);
		return;
	}
	ex->sink.output(ex->sink.arg, slot, 1, line, (size_t)n);
}

static int fake_status(struct mesh__executor *ex, unsigned slot, uint64_t now, struct mesh__exec_result *res)
{
	struct fake *f = (struct fake *)ex;
	struct fake_slot *s = fslot(ex, slot);
	if (f->away_ns && s->running && !s->ended && s->attempt == 1 && !s->away++) {
		struct mesh_lease l;
		mesh_sleep_ns(f->away_ns);
		f->thief_lease = mesh_job_lease(f->thief, f->away_ns, 0, &l);
		if (f->steal_only)
			return MESH__EXEC_RUNNING;
		if (f->thief_lease == 0)
			f->thief_complete = mesh_job_complete(f->thief, l.cid, 0);
		poke(s);
	} else if (f->steal_only && (s->away == 2 || s->attempt > 1) && !s->ended) {
		poke(s); /* the look after the one away (its test counted it) */
	}
	if (!s->ended)
		return MESH__EXEC_RUNNING;
	*res = (struct mesh__exec_result){s->sig ? 128 + s->sig : s->code, s->sig, 0};
	return MESH__EXEC_ENDED;
}

static void fake_signal(struct mesh__executor *ex, unsigned slot, int sig)
{
	struct fake_slot *s = fslot(ex, slot);
	if ((sig == SIGKILL || sig == SIGTERM) && !s->ended && !s->sig) {
		((struct fake *)ex)->cancels++;
		s->sig = sig;
		poke(s);
	}
}

static void fake_release(struct mesh__executor *ex, unsigned slot)
{
	struct fake_slot *s = fslot(ex, slot);
	if (s->running)
		((struct fake *)ex)->busy--;
	s->running = s->ended = 0;
}

static void fake_free(struct mesh__executor *ex)
{
	/* The test keeps the fake to look at; the driver only lets go. */
}

static const struct mesh__executor_ops fake_ops = {
	.start = fake_start,
	.events = fake_events,
	.dispatch = fake_dispatch,
	.status = fake_status,
	.signal = fake_signal,
	.release = fake_release,
	.free = fake_free,
};

static int fake_make(void *arg, const struct mesh_exec_opts *o, unsigned nslots, const struct mesh__exec_sink *sink,
		     struct mesh__executor **out)
{
	struct fake *f = arg;
	if (nslots > 4)
		return -EINVAL;
	f->base.ops = &fake_ops;
	f->base.sink = *sink;
	f->base.nslots = nslots;
	*out = &f->base;
	return 0;
}

static char lockdir[64];

/* A job of n chunks journaled in path, its leases named name. */
static struct mesh_job *job_new_at(uint64_t n, const char *path, const char *name)
{
	struct mesh_job *j = NULL;
	struct mesh_job_opts o = MESH_JOB_OPTS_INIT;
	snprintf(lockdir, sizeof lockdir, "/tmp/mesh-test-executor-%d", (int)getpid());
	if (mesh_job_submit(path, n) < 0)
		return NULL;
	o.journal = path;
	o.lockdir = lockdir;
	o.name = name;
	o.nchunks = n;
	return mesh_job_open(&j, &o) == 0 ? j : NULL;
}

static struct mesh_job *job_new(uint64_t n)
{
	return job_new_at(n, "j.log", "t");
}

static void fake_init(struct fake *f)
{
	memset(f, 0, sizeof *f);
	for (int i = 0; i < 4; i++)
		f->s[i].evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

static void fake_fini(struct fake *f)
{
	for (int i = 0; i < 4; i++)
		close(f->s[i].evfd);
}

TEST(executor_driver_runs_chunks_without_processes)
{
	struct fake f;
	fake_init(&f);
	struct mesh_job *j = job_new(8);
	ASSERT_TRUE(j != NULL);
	int fd = open("out", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char *const argv[] = {"work", "{}", NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.slots = 3;
	o.out_fd = fd;
	o.err_fd = -1;
	o.note_fd = -1;
	o.keep_order = 1;
	o.handle_signals = 0;
	EXPECT_EQ(mesh__exec_drive(j, &o, fake_make, &f, &st), MESH_EXEC_COMPLETE);
	close(fd);
	EXPECT_UEQ(st.started, 9);
	EXPECT_UEQ(st.done, 8);
	EXPECT_UEQ(st.failed, 1);
	EXPECT_EQ(f.starts, 9u);
	EXPECT_TRUE(f.max_busy <= 3);
	EXPECT_EQ(f.busy, 0u); /* every attempt released */
	char *out = t_read_file("out", NULL);
	ASSERT_TRUE(out != NULL);
	EXPECT_STREQ(out, "chunk 0\nchunk 1\nchunk 2\nchunk 3\nchunk 4\nchunk 5\nchunk 6\nchunk 7\n");
	free(out);
	struct mesh_job_status js;
	ASSERT_EQ(mesh_job_status(j, &js), 0);
	EXPECT_UEQ(js.done, 8);
	mesh_job_close(j);
	fake_fini(&f);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}

TEST(executor_driver_cancels_an_attempt_past_its_timeout)
{
	struct fake f;
	fake_init(&f);
	f.hang = 1;
	struct mesh_job *j = job_new(1);
	ASSERT_TRUE(j != NULL);
	char *const argv[] = {"work", "{}", NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.out_fd = o.err_fd = o.note_fd = -1;
	o.timeout_ns = 20 * MESH_NS_PER_MS;
	o.handle_signals = 0;
	EXPECT_EQ(mesh__exec_drive(j, &o, fake_make, &f, &st), MESH_EXEC_FAILED);
	/* three attempts (the default), each cancelled at its deadline */
	EXPECT_UEQ(st.started, 3);
	EXPECT_UEQ(st.timeouts, 3);
	EXPECT_UEQ(st.buried, 1);
	EXPECT_EQ(f.cancels, 3u);
	EXPECT_EQ(f.busy, 0u);
	mesh_job_close(j);
	fake_fini(&f);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}

/* A one-chunk job whose attempts hang, with the driver's thread held away
 * 300 ms at its first look, and a second node, the thief, on the job. */
static struct mesh_job *away_with_thief(struct fake *f)
{
	fake_init(f);
	f->hang = 1;
	f->away_ns = 300 * MESH_NS_PER_MS;
	struct mesh_job *j = job_new(1);
	ASSERT_TRUE(j != NULL);
	struct mesh_job_opts to = MESH_JOB_OPTS_INIT;
	to.journal = "j.log";
	to.lockdir = lockdir;
	to.name = "t";
	to.node = "thief";
	ASSERT_EQ(mesh_job_open(&f->thief, &to), 0);
	return j;
}

static void on_lease_lost(void *arg, uint64_t cid, uint64_t since_ns, uint64_t ttl_ns)
{
	struct fake *f = arg;
	f->lost_calls++;
	f->lost_cid = cid;
	f->lost_since = since_ns;
	f->lost_ttl = ttl_ns;
}

/* The driver's thread held away past the lease's TTL while the attempt
 * runs, and another node took the expired lease: back, the renew answers
 * "not ours" and the chunk is not DONE.  The attempt runs on, and that is
 * said once, with how late the renewal was: a note and the lease_lost hook
 * (meshd logs it), and counted.  When it ends its outcome is dropped (the
 * node that holds the lease runs the chunk: that run's output is the one
 * printed); here the thief never completes, so once its lease expired the
 * chunk is leased and run again here. */
TEST(executor_driver_says_when_a_running_attempt_lost_its_lease)
{
	struct fake f;
	struct mesh_job *j = away_with_thief(&f);
	f.steal_only = 1;
	int nfd = open("notes", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char *const argv[] = {"work", "{}", NULL};
	struct mesh_exec_hooks hooks = {.lease_lost = on_lease_lost, .cancel_fd = -1, .arg = &f};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.out_fd = o.err_fd = -1;
	o.note_fd = nfd;
	o.ttl_ns = 100 * MESH_NS_PER_MS;
	o.handle_signals = 0;
	o.hooks = &hooks;
	EXPECT_EQ(mesh__exec_drive(j, &o, fake_make, &f, &st), MESH_EXEC_COMPLETE);
	close(nfd);
	EXPECT_EQ(f.thief_lease, 0);
	EXPECT_UEQ(st.started, 2); /* the lost attempt, then one after the thief's lease expired */
	EXPECT_UEQ(st.done, 1);
	EXPECT_UEQ(st.lost, 1);
	EXPECT_UEQ(st.killed, 0);
	EXPECT_EQ(f.lost_calls, 1u);
	EXPECT_UEQ(f.lost_cid, 0);
	EXPECT_GE(f.lost_since, 300 * MESH_NS_PER_MS);
	EXPECT_UEQ(f.lost_ttl, 100 * MESH_NS_PER_MS);
	char *notes = t_read_file("notes", NULL);
	ASSERT_TRUE(notes != NULL);
	EXPECT_CONTAINS(notes, "mesh: chunk 0: its lease was taken over while it ran (last renewed ");
	EXPECT_CONTAINS(notes, "lease 100 ms); it may be run twice");
	free(notes);
	mesh_job_close(f.thief);
	mesh_job_close(j);
	fake_fini(&f);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}

/* A host cut off from its store (issue 10's partition, as the meshd store
 * test meets it): the driver's thread is held away past the lease's TTL;
 * meanwhile the attempt ended, and another node took the expired lease and
 * completed the chunk.  Back, the attempt that ended is checked before its
 * output goes out (less than half its TTL was left): the renew answers
 * "not ours" and the chunk is DONE.  It is completed anyway (IGNORED,
 * counted as a duplicate), not cancelled and dropped unseen; but its
 * output is never printed (issue 32: an IGNORED chunk's output never is). */
TEST(executor_driver_completes_an_attempt_that_ended_while_its_lease_was_taken)
{
	struct fake f;
	struct mesh_job *j = away_with_thief(&f);
	int fd = open("out", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char *const argv[] = {"work", "{}", NULL};
	struct mesh_exec_opts o = MESH_EXEC_OPTS_INIT;
	struct mesh_exec_stats st;
	o.argv = argv;
	o.out_fd = fd;
	o.err_fd = o.note_fd = -1;
	o.ttl_ns = 100 * MESH_NS_PER_MS;
	o.handle_signals = 0;
	EXPECT_EQ(mesh__exec_drive(j, &o, fake_make, &f, &st), MESH_EXEC_COMPLETE);
	close(fd);
	/* the thief stole the lease and was first */
	EXPECT_EQ(f.thief_lease, 0);
	EXPECT_EQ(f.thief_complete, MESH_JOB_DONE);
	/* ours ended meanwhile: sent, IGNORED and counted, not printed; nothing cancelled */
	EXPECT_UEQ(st.started, 1);
	EXPECT_UEQ(st.done, 0);
	EXPECT_UEQ(st.ignored, 1);
	EXPECT_UEQ(st.killed, 0);
	EXPECT_EQ(f.cancels, 0u);
	EXPECT_EQ(f.busy, 0u);
	struct mesh_job_status js;
	ASSERT_EQ(mesh_job_status(j, &js), 0);
	EXPECT_UEQ(js.done, 1);
	EXPECT_UEQ(js.duplicates, 1);
	char *out = t_read_file("out", NULL);
	ASSERT_TRUE(out != NULL);
	EXPECT_STREQ(out, "");
	free(out);
	mesh_job_close(f.thief);
	mesh_job_close(j);
	fake_fini(&f);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}

/* ---- many runs on one loop (exec/loop.h) ---- */

struct ended {
	pthread_mutex_t mu;
	int answers[3];
	unsigned n;
};

struct run_of {
	struct ended *e;
	int i;
};

/* On the loop's thread: the run is over; closed here (a test may block). */
static void on_over(void *arg, struct mesh__drive *d)
{
	struct run_of *r = arg;
	int rc = mesh__exec_close(d);
	pthread_mutex_lock(&r->e->mu);
	r->e->answers[r->i] = rc;
	r->e->n++;
	pthread_mutex_unlock(&r->e->mu);
}

/* Three runs on one loop thread: two complete in chunk order, each to its
 * own output; the third, whose attempts never end, waits for its cancel,
 * then stops.  Every run handed over is over before the loop goes. */
TEST(executor_loop_drives_many_runs_on_one_thread)
{
	struct fake f[3];
	struct mesh_job *j[3];
	int fd[3], cancel = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	char *const argv[] = {"work", "{}", NULL};
	struct mesh_exec_opts o[3];
	struct mesh_exec_stats st[3];
	struct mesh_exec_hooks hooks = {.cancel_fd = cancel};
	struct ended e = {.mu = PTHREAD_MUTEX_INITIALIZER, .answers = {1, 1, 1}};
	struct run_of ro[3];
	struct mesh_exec_loop *l;
	ASSERT_TRUE(cancel >= 0);
	ASSERT_EQ(mesh_exec_loop_new("test-loop", &l), 0);
	for (int i = 0; i < 3; i++) {
		char path[16], name[8], outp[16];
		snprintf(path, sizeof path, "j%d.log", i);
		snprintf(name, sizeof name, "t%d", i);
		snprintf(outp, sizeof outp, "out%d", i);
		fake_init(&f[i]);
		f[i].hang = i == 2;
		j[i] = job_new_at(8, path, name);
		ASSERT_TRUE(j[i] != NULL);
		fd[i] = open(outp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		o[i] = (struct mesh_exec_opts)MESH_EXEC_OPTS_INIT;
		o[i].argv = argv;
		o[i].slots = 3;
		o[i].out_fd = fd[i];
		o[i].err_fd = o[i].note_fd = -1;
		o[i].keep_order = 1;
		o[i].handle_signals = 0;
		if (i == 2)
			o[i].hooks = &hooks;
		struct mesh__drive *d;
		ASSERT_EQ(mesh__exec_open(j[i], &o[i], fake_make, &f[i], &st[i], &d), 0);
		ro[i] = (struct run_of){&e, i};
		ASSERT_EQ(mesh_exec_loop_add(l, d, on_over, &ro[i]), 0);
	}
	/* The two that complete end while the third still runs. */
	unsigned n = 0;
	for (uint64_t until = mesh_mono_ns() + 10 * MESH_NS_PER_S; n < 2 && mesh_mono_ns() < until;) {
		mesh_sleep_ns(5 * MESH_NS_PER_MS);
		pthread_mutex_lock(&e.mu);
		n = e.n;
		pthread_mutex_unlock(&e.mu);
	}
	ASSERT_EQ(n, 2u);
	EXPECT_EQ(mesh_exec_loop_runs(l), 1u);
	EXPECT_EQ(e.answers[0], MESH_EXEC_COMPLETE);
	EXPECT_EQ(e.answers[1], MESH_EXEC_COMPLETE);
	EXPECT_TRUE(f[2].starts >= 1);
	uint64_t one = 1;
	ASSERT_EQ(write(cancel, &one, sizeof one), (ssize_t)sizeof one);
	mesh_exec_loop_free(l); /* waits for the third to be over */
	EXPECT_EQ(e.n, 3u);
	EXPECT_EQ(e.answers[2], MESH_EXEC_INTERRUPTED);
	for (int i = 0; i < 3; i++) {
		char outp[16];
		snprintf(outp, sizeof outp, "out%d", i);
		close(fd[i]);
		char *out = t_read_file(outp, NULL);
		ASSERT_TRUE(out != NULL);
		EXPECT_STREQ(out, i < 2 ? "chunk 0\nchunk 1\nchunk 2\nchunk 3\nchunk 4\nchunk 5\nchunk 6\nchunk 7\n" : "");
		free(out);
		EXPECT_EQ(f[i].busy, 0u);
		mesh_job_close(j[i]);
		fake_fini(&f[i]);
	}
	EXPECT_UEQ(st[0].done, 8);
	EXPECT_UEQ(st[1].done, 8);
	EXPECT_UEQ(st[2].done, 0);
	close(cancel);
	t_sh(NULL, 0, 0, "rm -rf %s", lockdir);
}
