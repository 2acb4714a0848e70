/* meshd's slot executor (job_exec.h): a job's attempts on warm workers'
 * slots, pipelined, for the chunk driver. */
#include "meshd/jobs/job_exec_int.h"

#include "autoscale/policy.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/list.h"
#include "base/log.h"
#include "meshd/core/ops.h"
#include "exec/runner.h"
#include "shm/shm.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* How long a dead worker's reaping is waited for (its report). */
#define DOWN_WAIT_NS (5 * MESH_NS_PER_S)
#define BACKOFF_MIN_NS (200 * MESH_NS_PER_MS)
#define BACKOFF_MAX_NS (5 * MESH_NS_PER_S)
#define BUSY_RETRY_NS (100 * MESH_NS_PER_MS)
/* Demand counts a worker as taking at most this many chunks: a deep
 * pipeline (D, for trivial chunks) fills the workers there are, and does
 * not leave a small job of slow chunks queued on one worker. */
#define DEMAND_CONCURRENCY 8u
/* A worker's chunks in flight: about PIPE_NS of its work at the pace it
 * answers (so that it does not wait for meshd between two of meshd's
 * turns, and slow chunks do not queue behind one worker while another
 * could take them), at least 2, at most D; CAP_START until it answered. */
#define PIPE_NS 2000000ull
#define CAP_START 8u

enum { U_FREE, U_QUEUED, U_SENT, U_ENDED };
enum { W_NONE, W_COMING, W_ON };

struct unit {
	int state;
	uint64_t cid;
	uint32_t attempt;
	const char *input; /* the driver's, valid until release */
	size_t len;
	uint64_t order;	   /* queue order: start order, kept when requeued */
	int w;		   /* SENT: the worker */
	MESH_LINK(struct unit) q; /* QUEUED: in the queue */
	struct mesh__exec_result res;
	char *out;	   /* ENDED: bytes for the sink, delivered by status */
	size_t out_len;
	int out_stream;	   /* 1 result, 0 a failure's text */
};

struct entry {
	int unit; /* index + 1 into u; 0 = an attempt that ended meanwhile (its reply is dropped) */
	uint32_t seq;
};

struct jworker {
	int state;
	struct meshd_job_worker h;
	struct meshd_job_ahead *g; /* W_COMING: its getter */
	struct entry *fifo;
	unsigned head, n;  /* entries in flight, in send order */
	uint64_t taken_base, answered;
	uint64_t t_head;   /* when the oldest entry reached the front (about when the worker took it) */
	uint64_t per_ns;   /* its time a chunk, averaged over its answers (0: none yet) */
	int unpaced;	   /* its next answers are no pace sample: t_head was reset past their start */
	unsigned cap;	   /* chunks in flight it may hold now (PIPE_NS) */
	int full;	   /* this pump: the ring had no room */
	int stale;	   /* this pump: its image was replaced (meshd_job_worker_stale) */
	int held;	   /* this pump: requests put, not published yet (one wake-up a pump) */
	int online;	   /* it said `online`: before, chunks wait in its ring and no --timeout runs */
	uint64_t limit_ns; /* a chunk's time on it: --timeout, else its program's call_timeout; 0 none */
	int halting;	   /* asked to halt at the executor's end (halt_owing) */
};

struct slot_ex {
	struct mesh__executor base;
	struct meshd_job_exec_cfg cfg;
	struct meshd_job_exec_stats *st;
	struct unit *u;
	struct jworker *w;
	int pool_efd;
	uint64_t order;
	MESH_LIST(struct unit) q; /* attempts waiting for a worker, by order */
	uint64_t next_get;
	unsigned get_fails;
	int need_pump; /* attempts went back to the queue, or a retry is due: pump at the next status */
	int fresh;     /* attempts started since the last pump: pump at the next status, whatever next_get */
	int speculate; /* the driver runs speculative copies */
	uint64_t checked_ns; /* check_timeouts ran for this now */
};

static struct slot_ex *sx(struct mesh__executor *ex)
{
	return (struct slot_ex *)ex;
}

/* ---- the queue of attempts waiting for a worker ---- */

static void q_insert(struct slot_ex *x, struct unit *u)
{
	struct unit *after = x->q.tail;
	while (after && after->order > u->order)
		after = after->q.prev;
	mesh_list_insert_after(&x->q, after, u, q);
	u->state = U_QUEUED;
}

static void q_remove(struct slot_ex *x, struct unit *u)
{
	mesh_list_remove(&x->q, u, q);
}

/* Ends an attempt: code, and bytes (owned, may be NULL) for stream. */
static void end_unit(struct unit *u, int code, char *out, size_t n, int stream)
{
	u->state = U_ENDED;
	u->res = (struct mesh__exec_result){code, code > 128 && code < 128 + 65 ? code - 128 : 0, 0};
	free(u->out);
	u->out = out;
	u->out_len = n;
	u->out_stream = stream;
}

static void end_unit_text(struct unit *u, int code, const char *text)
{
	char *t = text ? strdup(text) : NULL;
	end_unit(u, code, t, t ? strlen(t) : 0, 0);
}

/* ---- workers ---- */

/* Takes the worker's entries out: the one it works on (when taken) ends
 * with code and text, the rest go back to the queue unstarted. */
static void empty_fifo(struct slot_ex *x, struct jworker *w, int code, const char *text)
{
	uint64_t taken = w->h.slot ? mesh_slot_taken(w->h.slot) : 0;
	int working = taken > w->taken_base && taken - w->taken_base > w->answered;
	for (unsigned i = 0; i < w->n; i++) {
		struct entry *e = &w->fifo[(w->head + i) % x->cfg.depth];
		if (!e->unit)
			continue;
		struct unit *u = &x->u[e->unit - 1];
		if (i == 0 && working) {
			end_unit_text(u, code, text);
		} else {
			q_insert(x, u);
			atomic_fetch_add_explicit(&x->st->requeued, 1, memory_order_relaxed);
		}
	}
	w->n = w->head = 0;
}

/* A worker could not come up (rc, err): one waiting attempt fails with the
 * reason (so a program that never comes up buries its chunks instead of
 * spawning for ever), and the next try waits (or, rc -EAGAIN: busy, soon). */
static void came_not_up(struct slot_ex *x, int rc, const char *err)
{
	uint64_t now = mesh_mono_ns();
	x->need_pump = 1;
	if (rc == -EAGAIN) {
		x->next_get = now + BUSY_RETRY_NS;
		return;
	}
	uint64_t b = BACKOFF_MIN_NS << (x->get_fails < 5 ? x->get_fails : 5);
	x->get_fails++;
	x->next_get = now + (b < BACKOFF_MAX_NS ? b : BACKOFF_MAX_NS);
	struct unit *u = x->q.head;
	if (u) {
		q_remove(x, u);
		end_unit_text(u, 127, err ? err : mesh_strerror(rc));
	}
}

/* 1 when the worker took a request from its ring (so it came online,
 * whatever its getter saw: the host may tell its death first). */
static int took_any(const struct jworker *w)
{
	return w->h.slot && mesh_slot_taken(w->h.slot) > w->taken_base;
}

/* The worker leaves the job: killed (kill_it), or dead already.  A getter
 * still waiting for its `online` is waited for once the worker is put
 * back (killed, it ends soon); a worker that did not come online counts
 * as one that could not come up. */
static void drop_worker(struct slot_ex *x, struct jworker *w, int kill_it, int code, const char *text)
{
	int took = took_any(w);
	if (kill_it && w->h.slot)
		mesh_slot_fail(w->h.slot, "worker killed by its job");
	empty_fifo(x, w, code, text);
	meshd_job_worker_put(x->cfg.core, &w->h, kill_it);
	w->state = W_NONE;
	x->need_pump = 1;
	if (w->online)
		atomic_fetch_sub_explicit(&x->st->workers, 1, memory_order_relaxed);
	w->online = 0;
	if (kill_it)
		atomic_fetch_add_explicit(&x->st->worker_kills, 1, memory_order_relaxed);
	struct meshd_job_ahead *g = w->g;
	w->g = NULL;
	if (g) {
		mesh__jx_getter_join(g);
		if (g->online_rc && !took)
			came_not_up(x, g->online_rc, g->online_err);
		mesh__jx_getter_free(g);
	}
}

/* The worker's slot failed: most likely it died.  Its report names the
 * chunk it was working on. */
static void worker_died(struct slot_ex *x, struct jworker *w)
{
	int status = -1;
	char *report = NULL;
	int down = meshd_job_worker_down(x->cfg.core, &w->h, DOWN_WAIT_NS, &status, &report) == 0;
	if (!report) {
		const char *why = mesh_slot_failed(w->h.slot);
		report = mesh_strf("worker of '%s' (pid %d) failed: %s", x->cfg.program, (int)w->h.pid,
				   why ? why : "its slot was shut down");
	}
	int code = status > 0 ? status : status == 0 ? 1 : 128 + SIGKILL;
	if (status == 0 && report) {
		/* Status 0 is no success here (no answer came): the attempt's own
		 * status is 1, and its report says why, above the worker's. */
		char *r = mesh_strf("the worker exited with status 0 before it answered: the attempt fails with status %d\n%s",
				    code, report);
		if (r) {
			free(report);
			report = r;
		}
	}
	atomic_fetch_add_explicit(&x->st->worker_deaths, 1, memory_order_relaxed);
	drop_worker(x, w, !down, code, report);
	if (!down)
		atomic_fetch_sub_explicit(&x->st->worker_kills, 1, memory_order_relaxed); /* not ours */
	free(report);
}

/* w answered got chunks in the time since (its pace: w->cap). */
static void pace(struct slot_ex *x, struct jworker *w, uint64_t since, uint64_t now, unsigned got)
{
	if (!got || now <= since)
		return;
	uint64_t one = (now - since) / got;
	w->per_ns = w->per_ns ? (3 * w->per_ns + one) / 4 : one;
	uint64_t c = w->per_ns ? PIPE_NS / w->per_ns : x->cfg.depth;
	if (c < 2)
		c = 2;
	w->cap = c > x->cfg.depth ? x->cfg.depth : (unsigned)c;
}

/* Takes every reply the worker's ring holds (its bell rang).  1 when
 * the worker turned out dead or broken (worker_died was called), else 0. */
static int drain(struct slot_ex *x, struct jworker *w)
{
	uint64_t now = mesh_mono_ns(), since = w->t_head;
	unsigned got = 0;
	for (;;) {
		struct mesh_slot_reply r;
		int rc = mesh_slot_recv(w->h.slot, &r);
		if (rc == -EAGAIN || rc == -ENOMEM)
			break;
		if (rc == MESH_E_STATE || rc == MESH_E_CORRUPT) {
			worker_died(x, w);
			return 1;
		}
		if (rc < 0)
			break;
		struct entry *e = w->n ? &w->fifo[w->head] : NULL;
		if (!e || e->seq != r.seq) {
			/* Nothing of ours sent that: the worker is broken. */
			free(r.data);
			mesh_slot_fail(w->h.slot, "reply %u answers no chunk of this job", r.seq);
			worker_died(x, w);
			return 1;
		}
		w->head = (w->head + 1) % x->cfg.depth;
		w->n--;
		w->answered++;
		w->t_head = now;
		got++;
		if (!e->unit) {
			free(r.data);
			atomic_fetch_add_explicit(&x->st->ignored_replies, 1, memory_order_relaxed);
			continue;
		}
		struct unit *u = &x->u[e->unit - 1];
		if (r.kind == MESH_MSG_REP) {
			uint64_t zero = 0;
			atomic_compare_exchange_strong(&x->st->first_reply_ns, &zero, now);
			end_unit(u, 0, r.data, r.len, 1);
		} else {
			end_unit(u, 1, r.data, r.len, 0);
		}
	}
	if (got && w->unpaced)
		w->unpaced = 0; /* timed from its `online` seen, not from their start */
	else
		pace(x, w, since, now, got);
	return 0;
}

/* The worker joins (its slot armed; maybe not online yet: w->g then waits
 * for that, and tells the pool's eventfd).  Its slot's bell is polled from
 * the next poll on (sx_shared_events). */
static void attach(struct slot_ex *x, struct jworker *w)
{
	w->state = W_ON;
	w->head = w->n = 0;
	w->answered = 0;
	w->per_ns = 0;
	w->unpaced = 0;
	w->cap = CAP_START < x->cfg.depth ? CAP_START : x->cfg.depth;
	w->taken_base = mesh_slot_taken(w->h.slot);
	w->online = 0; /* collect() says when */
	w->limit_ns = x->cfg.timeout_ns ? x->cfg.timeout_ns : meshd_job_worker_call_timeout(&w->h);
	mesh_efd_quiet(mesh_slot_bell(w->h.slot)); /* rung for its slot's last user */
	mesh__jx_stamp_first(&x->st->first_worker_ns);
}

/* Getters that got their worker: it joins at once, armed, before its
 * `online` (chunks sent now are the first it reads); those whose worker
 * came online are freed; failures count. */
static void collect(struct slot_ex *x)
{
	for (unsigned i = 0; i < x->cfg.max_workers; i++) {
		struct jworker *w = &x->w[i];
		struct meshd_job_ahead *g = w->g;
		int st = g ? mesh__jx_getter_state(g) : 0;
		if (st == 0)
			continue;
		if (w->state == W_COMING && g->rc == 0) {
			pthread_mutex_lock(&g->mu);
			w->h = g->h;
			pthread_mutex_unlock(&g->mu);
			attach(x, w);
			if (st < 2)
				continue; /* online comes later */
		}
		if (w->state == W_ON && !w->h.pid) {
			/* Got before its spawn returned: its pid now, if known. */
			pthread_mutex_lock(&g->mu);
			w->h.pid = g->h.pid;
			pthread_mutex_unlock(&g->mu);
		}
		if (st < 2 && w->state == W_ON)
			continue;
		w->g = NULL;
		mesh__jx_getter_join(g);
		if (w->state == W_COMING) {
			w->state = W_NONE;
			came_not_up(x, g->rc, g->err);
		} else if (g->launch_rc && !took_any(w)) {
			/* Its spawn failed after its slot was armed: what was
			 * sent there goes back, and it counts as a start that
			 * failed, as one that failed before.  (One that took a
			 * chunk came up, and died before the core's start
			 * returned: a death, below.) */
			drop_worker(x, w, 0, 127, g->online_err);
			came_not_up(x, g->launch_rc, g->online_err);
		} else if (g->online_rc == MESH_E_REFUSED) {
			/* Alive, off its slot: what we sent it is requeued. */
			drop_worker(x, w, 1, 127, g->online_err);
			came_not_up(x, g->online_rc, g->online_err);
		} else if (g->online_rc) {
			/* It died coming up (its slot is failed; launch_rc
			 * sets online_rc too): as any death,
			 * then as a start that failed unless it took a chunk
			 * (that chunk's attempt failed with its death). */
			int took = took_any(w);
			/* Whole replies in its ring answer chunks it finished
			 * before it died: taken first, so that the attempt that
			 * fails is the one it died on (the first in its ring
			 * failed, a chunk already answered: issue 31 item 8). */
			if (!drain(x, w))
				worker_died(x, w);
			if (!took)
				came_not_up(x, g->online_rc, g->online_err);
		} else {
			x->get_fails = 0;
			/* Chunks that waited in its ring while it started are
			 * timed from now (--timeout, pace). */
			mesh_fault_pause("jobs.online"); /* a busy driver: the worker serves meanwhile */
			w->online = 1;
			atomic_fetch_add_explicit(&x->st->workers, 1, memory_order_relaxed);
			/* It may have answered some already (its replies not
			 * taken yet), or be in one: timed from now, they would
			 * make a pace of nearly nothing a chunk, and a cap of
			 * D (the node would lease its whole K x D pipeline). */
			w->unpaced = w->n != 0;
			if (w->n)
				w->t_head = mesh_mono_ns();
		}
		mesh__jx_getter_free(g);
	}
}

/* 1 when w holds an attempt of chunk cid (a worker takes its ring in
 * order: a speculative copy behind its own original could never win). */
static int holds(const struct slot_ex *x, const struct jworker *w, uint64_t cid)
{
	for (unsigned k = 0; k < w->n; k++) {
		const struct entry *e = &w->fifo[(w->head + k) % x->cfg.depth];
		if (e->unit && x->u[e->unit - 1].cid == cid)
			return 1;
	}
	return 0;
}

/* The attempts queued for a worker and in workers' rings (not those
 * dropped that a worker still works on). */
static size_t outstanding(const struct slot_ex *x)
{
	size_t n = 0;
	for (const struct unit *q = x->q.head; q; q = q->q.next)
		n++;
	for (unsigned i = 0; i < x->cfg.max_workers; i++) {
		const struct jworker *w = &x->w[i];
		for (unsigned k = 0; w->state == W_ON && k < w->n; k++)
			n += w->fifo[(w->head + k) % x->cfg.depth].unit != 0;
	}
	return n;
}

/* Sends the attempts that wait to the workers with room, each to the
 * least loaded (a copy never to its original's worker), in queue order;
 * then what went into each ring goes out to its worker at once: one
 * wake-up of a sleeping worker for the whole pump. */
static void send_waiting(struct slot_ex *x)
{
	unsigned K = x->cfg.max_workers, D = x->cfg.depth;
	struct unit *u = x->q.head;
	while (u) {
		struct jworker *best = NULL;
		int room = 0;
		for (unsigned i = 0; i < K; i++) {
			struct jworker *w = &x->w[i];
			/* Not behind a dropped attempt the worker still works on. */
			if (w->state != W_ON || w->stale || w->full || w->n >= w->cap || (w->n && !w->fifo[w->head].unit))
				continue;
			room = 1;
			if ((!best || w->n < best->n) && !(x->speculate && holds(x, w, u->cid)))
				best = w;
		}
		if (!room)
			break;
		if (!best) {
			u = u->q.next; /* a copy waits for a worker other than its original's */
			continue;
		}
		struct unit *next = u->q.next;
		uint8_t h[MESH_CHUNK_HDR];
		for (int k = 0; k < 8; k++)
			h[k] = (uint8_t)(u->cid >> (8 * k));
		for (int k = 0; k < 4; k++)
			h[8 + k] = (uint8_t)(u->attempt >> (8 * k));
		uint32_t seq;
		int rc = mesh_slot_send_held(best->h.slot, MESH_MSG_CHUNK, h, sizeof h, u->input ? u->input : "",
					     u->len, &seq);
		if (rc == MESH_E_TOOBIG) {
			/* A submit refuses such an input; one in a job from elsewhere
			 * (a store, an older meshd) can never be carried. */
			q_remove(x, u);
			char msg[160];
			snprintf(msg, sizeof msg, "the chunk's input (%zu bytes) is over the %u bytes a chunk's input may have",
				 u->len, (unsigned)MESH_CHUNK_INPUT_MAX);
			end_unit_text(u, 1, msg);
			u = next;
			continue;
		}
		if (rc < 0) {
			/* No room now (-EAGAIN; an input larger than the ring goes
			 * in pieces once the worker holds no other chunk), or the
			 * slot failed: its bell says so. */
			best->full = 1;
			continue;
		}
		q_remove(x, u);
		mesh__jx_stamp_first(&x->st->first_sent_ns);
		u->state = U_SENT;
		u->w = (int)(best - x->w);
		if (best->n == 0)
			best->t_head = mesh_mono_ns();
		best->fifo[(best->head + best->n) % D] = (struct entry){(int)(u - x->u) + 1, seq};
		best->n++;
		best->held = 1;
		u = next;
	}
	for (unsigned i = 0; i < K; i++)
		if (x->w[i].held)
			mesh_slot_publish(x->w[i].h.slot);
}

/* Demand: the attempts in flight, put to the autoscale policy with a
 * worker's concurrency min(D, DEMAND_CONCURRENCY) and at most K workers
 * (its replica count: ceil(in flight / that), from zero at once); a
 * getter starts for each worker more it wants.  waiting: attempts waited
 * for a worker when the pump began. */
static void ask_workers(struct slot_ex *x, int waiting)
{
	unsigned K = x->cfg.max_workers, D = x->cfg.depth;
	unsigned inflight = (unsigned)outstanding(x), warm = 0, starting = 0;
	for (unsigned i = 0; i < K; i++) {
		struct jworker *w = &x->w[i];
		warm += w->state == W_ON && w->online && !w->stale;
		starting += w->state == W_COMING || (w->state == W_ON && !w->online);
	}
	unsigned have = warm + starting, want = have;
	struct mesh_as_config c = {0, K, D < DEMAND_CONCURRENCY ? D : DEMAND_CONCURRENCY, 0, 0, 0};
	struct mesh_as_obs o = {warm, starting, inflight, 0, 0, 0};
	struct mesh_as_plan plan;
	if (mesh_as_plan(&c, &o, &plan) == 0 && plan.action == MESH_AS_SPAWN)
		want = have + plan.count;
	if (want > K)
		want = K;
	if (have >= want || (!x->q.head && !waiting))
		return;
	if (mesh_mono_ns() < x->next_get) {
		x->need_pump = 1; /* once the wait is over */
		return;
	}
	for (unsigned i = 0; i < K && have < want; i++) {
		struct jworker *w = &x->w[i];
		if (w->state != W_NONE)
			continue;
		if (mesh__jx_getter_start(x->cfg.core, x->cfg.program, x->st, x->pool_efd, &w->g) < 0)
			break;
		w->state = W_COMING;
		have++;
	}
}

/* Sends what waits to workers with room; asks for workers as demand says. */
static void pump(struct slot_ex *x)
{
	collect(x);
	x->need_pump = 0;
	x->fresh = 0;
	unsigned K = x->cfg.max_workers;
	/* Attempts waited for a worker when this pump began: demand may ask
	 * for more even once they all went into rings (a worker online since
	 * the submit takes the first chunks at once; the job still gets the
	 * workers its demand says). */
	int waiting = x->q.head != NULL;
	for (unsigned i = 0; i < K; i++) {
		struct jworker *w = &x->w[i];
		w->full = 0;
		w->held = 0;
		/* Its image was replaced (mesh load, rollback): nothing more is
		 * sent to it; once it answered what it holds it goes back (and
		 * exits), and demand asks for a worker of the new image. */
		w->stale = w->state == W_ON && meshd_job_worker_stale(&w->h);
		if (w->stale && !w->n)
			drop_worker(x, w, 0, 0, NULL);
	}
	send_waiting(x);
	ask_workers(x, waiting);
}

/* A worker that held the chunk at the head of its ring past its limit
 * (--timeout, else its program's call_timeout) hangs: it is killed, the
 * chunk it was running fails with a report that says so, and the chunks
 * behind it, not started, go to another worker. */
static void kill_hung(struct slot_ex *x, struct jworker *w)
{
	const struct entry *e = &w->fifo[w->head];
	uint64_t cid = e->unit ? x->u[e->unit - 1].cid : 0;
	unsigned long long ms = (unsigned long long)(w->limit_ns / MESH_NS_PER_MS);
	char *why = x->cfg.timeout_ns
			    ? mesh_strf("chunk %llu ran past the job's --timeout (%llu ms): its worker (pid %d) was killed",
					(unsigned long long)cid, ms, (int)w->h.pid)
			    : mesh_strf("the worker hung: chunk %llu ran past its program's call_timeout (%llu ms); the "
					"worker (pid %d) was killed",
					(unsigned long long)cid, ms, (int)w->h.pid);
	mesh_warn("job worker name=%s pid=%d: %s; a fresh worker serves the job's chunks", x->cfg.program,
		  (int)w->h.pid, why ? why : "hung");
	drop_worker(x, w, 1, 128 + SIGKILL, why ? why : "the worker hung past its chunk's time limit and was killed");
	free(why);
}

/* Once a pass of the driver (it asks each busy slot's status with the
 * same now). */
static void check_timeouts(struct slot_ex *x, uint64_t now)
{
	if (now == x->checked_ns)
		return;
	x->checked_ns = now;
	for (unsigned i = 0; i < x->cfg.max_workers; i++) {
		struct jworker *w = &x->w[i];
		if (w->state == W_ON && w->online && w->n && w->limit_ns && now >= w->t_head + w->limit_ns)
			kill_hung(x, w);
	}
}

/* ---- executor.h ---- */

static int sx_start(struct mesh__executor *ex, const struct mesh__exec_chunk *c, struct mesh__exec_result *res)
{
	struct slot_ex *x = sx(ex);
	struct unit *u = &x->u[c->slot - 1];
	(void)res;
	memset(u, 0, sizeof *u);
	u->cid = c->cid;
	u->attempt = c->attempt;
	u->input = c->input;
	u->len = c->input ? c->input_len : 0;
	u->order = ++x->order;
	mesh__jx_stamp_first(&x->st->first_start_ns);
	q_insert(x, u);
	/* Sent at the driver's next status or dispatch, with every attempt
	 * it starts meanwhile (its leases come in blocks): one pump, one
	 * wake-up of each worker, for all of them. */
	x->fresh = 1;
	return 0;
}

static unsigned sx_events(struct mesh__executor *ex, unsigned slot, struct pollfd *pf, unsigned cap, uint64_t *wake)
{
	struct slot_ex *x = sx(ex);
	struct unit *u = &x->u[slot - 1];
	/* No fds of its own: the pool's and each worker's are shared
	 * (sx_shared_events); only its wake-up time. */
	switch (u->state) {
	case U_QUEUED:
		if (x->fresh)
			*wake = 0;
		else if (x->need_pump && x->next_get < *wake)
			*wake = x->next_get; /* a worker may be asked for again then */
		return 0;
	case U_SENT: {
		struct jworker *w = &x->w[u->w];
		if (w->limit_ns && w->online && w->n && w->t_head + w->limit_ns < *wake)
			*wake = w->t_head + w->limit_ns;
		return 0;
	}
	default:
		*wake = 0; /* ENDED: status says so at once */
		return 0;
	}
}

/* The pool's eventfd (a worker got, came online or could not, for the
 * queue) and each joined worker's bell (its replies, room for a request's
 * pieces, its slot's failure), once for all the slots (a worker holds up
 * to depth of them): read once a wake-up, not once a slot.  Each bell is
 * asked for here, before the poll; one whose worker has news already is
 * rung at once, so that the poll returns with it. */
static unsigned sx_shared_events(struct mesh__executor *ex, struct pollfd *pf, unsigned cap)
{
	struct slot_ex *x = sx(ex);
	unsigned n = 0;
	if (n < cap)
		pf[n++] = (struct pollfd){.fd = x->pool_efd, .events = POLLIN};
	for (unsigned i = 0; i < x->cfg.max_workers && n < cap; i++) {
		struct jworker *w = &x->w[i];
		if (w->state != W_ON)
			continue;
		int bell = mesh_slot_bell(w->h.slot);
		if (mesh_slot_bell_arm(w->h.slot))
			mesh_efd_ring(bell);
		pf[n++] = (struct pollfd){.fd = bell, .events = POLLIN};
	}
	return n;
}

static void sx_dispatch(struct mesh__executor *ex, unsigned slot, const struct pollfd *pf)
{
	struct slot_ex *x = sx(ex);
	(void)slot;
	if (pf->fd == x->pool_efd) {
		mesh_efd_quiet(x->pool_efd);
	} else {
		mesh_fault_pause("jobs.bell"); /* the replies late: a getter's news may come first */
		/* A getter's news first (a worker's start that failed, told
		 * while its replies waited): collect takes both in order. */
		collect(x);
		for (unsigned i = 0; i < x->cfg.max_workers; i++) {
			struct jworker *w = &x->w[i];
			if (w->state != W_ON || mesh_slot_bell(w->h.slot) != pf->fd)
				continue;
			mesh_efd_quiet(pf->fd);
			(void)drain(x, w);
			break;
		}
	}
	pump(x);
}

static int sx_status(struct mesh__executor *ex, unsigned slot, uint64_t now, struct mesh__exec_result *res)
{
	struct slot_ex *x = sx(ex);
	struct unit *u = &x->u[slot - 1];
	check_timeouts(x, now);
	if (x->fresh || (x->need_pump && now >= x->next_get))
		pump(x);
	if (u->state != U_ENDED)
		return MESH__EXEC_RUNNING;
	if (u->out && u->out_len)
		ex->sink.output(ex->sink.arg, slot, u->out_stream, u->out, u->out_len);
	free(u->out);
	u->out = NULL;
	u->out_len = 0;
	*res = u->res;
	return MESH__EXEC_ENDED;
}

/* Ends the attempt in slot now.  One already in a worker's ring stays
 * there: a request cannot be taken back, and a worker cannot be told to
 * drop what it works on; its reply, when it comes, is dropped and counted
 * (a lost speculative race).  Hung workers are the timeout's business, and
 * a worker still owing replies when the executor ends is killed. */
static void cancel_unit(struct slot_ex *x, struct unit *u, int sig)
{
	if (u->state == U_QUEUED) {
		q_remove(x, u);
		end_unit(u, 128 + sig, NULL, 0, 0);
	} else if (u->state == U_SENT) {
		struct jworker *w = &x->w[u->w];
		int idx = (int)(u - x->u) + 1;
		uint64_t taken = mesh_slot_taken(w->h.slot);
		int working = w->n && w->fifo[w->head].unit == idx && taken > w->taken_base &&
			      taken - w->taken_base > w->answered;
		for (unsigned i = 0; i < w->n; i++) {
			struct entry *e = &w->fifo[(w->head + i) % x->cfg.depth];
			if (e->unit == idx) {
				e->unit = 0;
			} else if (working && e->unit) {
				/* Not left waiting behind a straggler nobody needs:
				 * to another worker (this one's reply is dropped). */
				q_insert(x, &x->u[e->unit - 1]);
				e->unit = 0;
				atomic_fetch_add_explicit(&x->st->requeued, 1, memory_order_relaxed);
				x->need_pump = 1;
			}
		}
		end_unit(u, 128 + sig, NULL, 0, 0);
	}
}

static void sx_signal(struct mesh__executor *ex, unsigned slot, int sig)
{
	if (sig == SIGSTOP || sig == SIGCONT || sig == SIGTSTP)
		return;
	struct slot_ex *x = sx(ex);
	cancel_unit(x, &x->u[slot - 1], sig);
	pump(x);
}

static void sx_release(struct mesh__executor *ex, unsigned slot)
{
	struct slot_ex *x = sx(ex);
	struct unit *u = &x->u[slot - 1];
	cancel_unit(x, u, SIGKILL);
	free(u->out);
	memset(u, 0, sizeof *u);
}

/* A cancelled job (cfg.leave HALT): each worker online that owes replies
 * (dropped attempts) is asked to halt -- the chunk in hand ends, the rest
 * of its ring goes with the slot, no later user sees those replies -- so
 * that it goes back warm rather than killed; all at once, so that they
 * share one stop grace.  When that grace ends (0: none asked). */
static uint64_t halt_owing(struct slot_ex *x)
{
	uint64_t by = 0, grace;
	if (!x->cfg.leave || atomic_load(x->cfg.leave) != MESHD_JOB_LEAVE_HALT)
		return 0;
	for (unsigned i = 0; x->w && i < x->cfg.max_workers; i++) {
		struct jworker *w = &x->w[i];
		if (w->state != W_ON || !w->n || !w->online)
			continue;
		if (meshd_job_worker_halt(x->cfg.core, &w->h, &grace) != 0)
			continue;
		w->halting = 1;
		if (mesh_mono_ns() + grace > by)
			by = mesh_mono_ns() + grace;
	}
	return by;
}

static void sx_free(struct mesh__executor *ex)
{
	struct slot_ex *x = sx(ex);
	for (unsigned i = 0; x->w && i < x->cfg.max_workers; i++) {
		struct jworker *w = &x->w[i];
		if (w->g && w->state == W_COMING) {
			/* Its worker, once got, is given back below (by drop_worker,
			 * which also waits for the rest of it). */
			mesh__jx_getter_join(w->g);
			if (w->g->rc == 0) {
				w->h = w->g->h;
				w->state = W_ON;
				w->online = 1; /* counted, for drop_worker's count */
				atomic_fetch_add_explicit(&x->st->workers, 1, memory_order_relaxed);
			} else {
				mesh__jx_getter_free(w->g);
				w->g = NULL;
			}
		}
	}
	uint64_t halt_by = halt_owing(x);
	for (unsigned i = 0; x->w && i < x->cfg.max_workers; i++) {
		struct jworker *w = &x->w[i];
		if (w->state == W_ON && w->halting) {
			uint64_t now = mesh_mono_ns();
			int rc = meshd_job_worker_halted(x->cfg.core, &w->h, halt_by > now ? halt_by - now : 0);
			drop_worker(x, w, rc != 0, 128 + SIGKILL, NULL);
		} else if (w->state == W_ON) {
			/* Requests still in its ring (dropped attempts): no later
			 * user may see their replies; a clean one goes back warm. */
			drop_worker(x, w, w->n > 0, 128 + SIGKILL, NULL);
		}
		free(w->fifo);
	}
	if (x->pool_efd >= 0)
		close(x->pool_efd);
	for (unsigned i = 0; x->u && i < x->base.nslots; i++)
		free(x->u[i].out);
	free(x->u);
	free(x->w);
	free(x);
}

/* The driver's lease limit (executor.h): about two caps of chunks a
 * worker, in its ring and queued for it (CAP_START for a worker not
 * there yet), less what is there.  Trivial chunks (a cap of D) leave the
 * driver's K x D slots the only bound; slow ones keep a node from holding
 * chunks it would only queue while another node (a meshd on the same
 * store, a `mesh job harvest` on the same journal) idles. */
static size_t sx_room(struct mesh__executor *ex)
{
	struct slot_ex *x = sx(ex);
	unsigned start = CAP_START < x->cfg.depth ? CAP_START : x->cfg.depth;
	size_t want = 0, have = outstanding(x);
	for (unsigned i = 0; i < x->cfg.max_workers; i++) {
		const struct jworker *w = &x->w[i];
		want += 2 * (size_t)(w->state == W_ON && w->cap ? w->cap : start);
	}
	return want > have ? want - have : 0;
}

static const struct mesh__executor_ops slot_ops = {
	.start = sx_start,
	.events = sx_events,
	.shared_events = sx_shared_events,
	.dispatch = sx_dispatch,
	.status = sx_status,
	.signal = sx_signal,
	.release = sx_release,
	.free = sx_free,
	.room = sx_room,
};

int meshd_job_exec_make(void *arg, const struct mesh_exec_opts *o, unsigned nslots, const struct mesh__exec_sink *sink,
			struct mesh__executor **out)
{
	struct meshd_job_exec_arg *a = arg;
	struct meshd_job_ahead *ahead = a->ahead;
	a->ahead = NULL; /* ours now, whatever happens */
	if (!a->cfg.max_workers || !a->cfg.depth || !a->stats) {
		meshd_job_ahead_drop(ahead);
		return -EINVAL;
	}
	struct slot_ex *x = calloc(1, sizeof *x);
	if (!x) {
		meshd_job_ahead_drop(ahead);
		return -ENOMEM;
	}
	x->base.ops = &slot_ops;
	x->base.sink = *sink;
	x->base.nslots = nslots;
	x->base.argv_unused = 1; /* a worker takes the chunk's input, not a command */
	x->cfg = a->cfg;
	x->st = a->stats;
	x->speculate = o->speculate;
	x->pool_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	x->u = calloc(nslots, sizeof *x->u);
	x->w = calloc(x->cfg.max_workers, sizeof *x->w);
	if (!x->u || !x->w || x->pool_efd < 0) {
		sx_free(&x->base);
		meshd_job_ahead_drop(ahead);
		return -ENOMEM;
	}
	int rc = 0;
	for (unsigned i = 0; i < x->cfg.max_workers; i++) {
		struct jworker *w = &x->w[i];
		w->fifo = calloc(x->cfg.depth, sizeof *w->fifo);
		if (!w->fifo)
			rc = -ENOMEM;
	}
	if (rc) {
		sx_free(&x->base);
		meshd_job_ahead_drop(ahead);
		return rc;
	}
	if (ahead) {
		/* The first worker, coming since the submit: its getter tells
		 * our pool when it is done (or has already). */
		pthread_mutex_lock(&ahead->mu);
		ahead->kick_fd = x->pool_efd;
		pthread_mutex_unlock(&ahead->mu);
		x->w[0].g = ahead;
		x->w[0].state = W_COMING;
	}
	*out = &x->base;
	return 0;
}
