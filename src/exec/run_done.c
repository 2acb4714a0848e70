/* The completer thread: finalizes results (fsyncs, renames) and completes
 * successful chunks, many at once, while the loop keeps launching. */
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "exec/run_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int finalize_results(struct mesh__item *it)
{
	int rc = 0;
	char *path = NULL;
	struct mesh_buf b = MESH_BUF_INIT;
	if (it->res_out >= 0 && (rc = mesh_fsync(it->res_out)) < 0)
		goto out;
	if (it->res_err >= 0 && (rc = mesh_fsync(it->res_err)) < 0)
		goto out;
	if (mesh_buf_addf(&b, "%s/stdout", it->res_dir) < 0)
		goto nomem;
	if (it->tmp_out && rename(it->tmp_out, b.p) < 0) {
		rc = -errno;
		goto out;
	}
	mesh_buf_reset(&b);
	if (mesh_buf_addf(&b, "%s/stderr", it->res_dir) < 0)
		goto nomem;
	if (it->tmp_err && rename(it->tmp_err, b.p) < 0) {
		rc = -errno;
		goto out;
	}
	mesh_buf_reset(&b);
	if (mesh_buf_addf(&b, "%s/status", it->res_dir) < 0)
		goto nomem;
	/* Written last: a status file says the other two are whole. */
	rc = mesh_write_file_atomic(b.p, it->status, strlen(it->status), 0644);
	goto out;
nomem:
	rc = -ENOMEM;
out:
	free(path);
	mesh_buf_release(&b);
	return rc;
}

void mesh__run_item_free(struct mesh__item *it)
{
	if (it->res_out >= 0)
		close(it->res_out);
	if (it->res_err >= 0)
		close(it->res_err);
	free(it->res_dir);
	free(it->tmp_out);
	free(it->tmp_err);
	free(it->status);
	free(it->res_p);
	free(it);
}

/* The completer's arrays for a batch of completions, grown as batches
 * grow (cap: what all of them hold). */
struct batch_bufs {
	uint64_t *cids, *durs;
	struct mesh_job_result *rv;
	int *res;
	struct mesh__item **its;
	size_t cap;
};

/* At least total in each array when memory allows (else cap stays, and
 * the completions past it fail with -ENOMEM). */
static void bufs_grow(struct batch_bufs *b, size_t total)
{
	if (total <= b->cap)
		return;
	size_t nc = total * 2;
	uint64_t *c2 = realloc(b->cids, nc * sizeof *c2), *d2 = NULL;
	if (c2)
		b->cids = c2;
	d2 = realloc(b->durs, nc * sizeof *d2);
	if (d2)
		b->durs = d2;
	int *r2 = realloc(b->res, nc * sizeof *r2);
	if (r2)
		b->res = r2;
	struct mesh__item **i2 = realloc(b->its, nc * sizeof *i2);
	if (i2)
		b->its = i2;
	struct mesh_job_result *v2 = realloc(b->rv, nc * sizeof *v2);
	if (v2)
		b->rv = v2;
	if (c2 && d2 && r2 && i2 && v2)
		b->cap = nc;
}

/* Makes a batch of completions durable, each item's result set: its
 * results file finished, the caller's results committed (its hook) before
 * their DONE, then one fsync of DONE records for the batch (two when
 * speculative copies ran under the second handle).  r->mu not held. */
static void complete_batch(struct mesh__runner *r, struct mesh__item *batch, struct batch_bufs *b)
{
	for (struct mesh__item *it = batch; it; it = it->next) {
		it->result = 0;
		if (it->res_dir)
			it->result = finalize_results(it);
	}
	/* The caller's results reach the disk before their DONE (those in
	 * their DONE with it). */
	if (r->o->hooks && r->o->hooks->commit) {
		int any = 0;
		for (struct mesh__item *it = batch; it && !any; it = it->next)
			any = it->complete && it->result == 0 && !it->res_p;
		int rc = any ? r->o->hooks->commit(r->o->hooks->arg) : 0;
		for (struct mesh__item *it = batch; it && rc < 0; it = it->next)
			if (it->complete && it->result == 0)
				it->result = rc;
	}
	for (int pass = 0; pass < 2; pass++) {
		struct mesh_job *jh = pass == 0 ? r->job : r->o->spec_job;
		size_t n = 0;
		if (!jh)
			continue;
		for (struct mesh__item *it = batch; it; it = it->next) {
			if (it->jh != jh || it->result != 0 || !it->complete)
				continue;
			if (n >= b->cap) {
				it->result = -ENOMEM;
				continue;
			}
			b->cids[n] = it->cid;
			b->durs[n] = it->dur_ns;
			b->rv[n].p = it->res_p;
			b->rv[n].len = it->res_len;
			b->its[n++] = it;
		}
		if (n) {
			int rc = mesh_job_complete_results(jh, b->cids, b->durs, b->rv, n, b->res);
			for (size_t i = 0; i < n; i++)
				b->its[i]->result =
					rc < 0 && b->res[i] >= 0 && b->res[i] != MESH_JOB_IGNORED ? rc : b->res[i];
		}
	}
	if (r->o->hooks && r->o->hooks->committed)
		r->o->hooks->committed(r->o->hooks->arg);
}

/* The longest a batch waits for more (the completer, below). */
#define GATHER_MAX_NS (10 * MESH_NS_PER_MS)

void *mesh__run_completer(void *arg)
{
	struct mesh__runner *r = arg;
	struct batch_bufs b = {0};
	uint64_t last_end = 0, last_took = 0;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->q_in && !r->quit)
			pthread_cond_wait(&r->cv, &r->mu);
		if (!r->q_in)
			break;
		/* Group commit under a steady stream: completions that came
		 * within twice the last batch's commit time of its end wait
		 * that long (at most GATHER_MAX_NS), so that one sync covers
		 * those that come meanwhile; a completion after a pause goes at
		 * once.  Without it a completer that is never short of CPU
		 * syncs many small batches (docs/jobs.md, "Group commit"). */
		uint64_t now = mesh_mono_ns();
		if (last_took && now - last_end < 2 * last_took && !r->quit) {
			uint64_t w = 2 * last_took < GATHER_MAX_NS ? 2 * last_took : GATHER_MAX_NS;
			struct timespec ts = {(time_t)(w / MESH_NS_PER_S), (long)(w % MESH_NS_PER_S)};
			pthread_mutex_unlock(&r->mu);
			nanosleep(&ts, NULL);
			pthread_mutex_lock(&r->mu);
		}
		struct mesh__item *batch = r->q_in;
		r->q_in = NULL;
		r->q_in_tail = &r->q_in;
		pthread_mutex_unlock(&r->mu);

		size_t total = 0;
		for (struct mesh__item *it = batch; it; it = it->next)
			total++;
		bufs_grow(&b, total);
		uint64_t t0 = mesh_mono_ns();
		complete_batch(r, batch, &b);
		last_end = mesh_mono_ns();
		last_took = last_end - t0;
		pthread_mutex_lock(&r->mu);
		struct mesh__item *last = batch;
		while (last->next)
			last = last->next;
		last->next = r->q_out;
		r->q_out = batch;
		r->in_flight -= (unsigned)total;
		mesh_efd_ring(r->evfd);
	}
	pthread_mutex_unlock(&r->mu);
	free(b.cids);
	free(b.durs);
	free(b.res);
	free(b.its);
	free(b.rv);
	return NULL;
}

/* ---- completions in flight ----
 * A chunk's output is printed before its completion is sent (never DONE
 * without it), so from then until the completion commits, a lease that
 * expires lets another node, or this one, run the chunk and print it a
 * second time.  A completion commits in milliseconds, but one held up in
 * the store (a lock a DBA holds, a slow WAL flush, a busy server) can take
 * longer than the lease had left: the loop renews these leases as it
 * renews those of running chunks, and runs no chunk again whose
 * completion it has in flight. */

/* At the tail, due at now + ttl/4 (every item there is due no later). */
static void fl_append(struct mesh__runner *r, struct mesh__item *it, uint64_t now)
{
	uint64_t step = r->ttl / 4;
	it->renew_at = now + (step > MESH_NS_PER_MS ? step : MESH_NS_PER_MS);
	mesh_list_push(&r->fl, it, fl);
}

/* A completion is on the list from its queueing (mesh__run_queue) until
 * the loop takes it back; a results-only item never is. */
void mesh__run_taken(struct mesh__runner *r, struct mesh__item *it)
{
	if (it->complete)
		mesh_list_remove(&r->fl, it, fl);
}

void mesh__run_flight_renew(struct mesh__runner *r, uint64_t now)
{
	struct mesh__item *it;
	while ((it = r->fl.head) && it->renew_at <= now) {
		mesh_list_remove(&r->fl, it, fl);
		/* MESH_E_STATE: DONE (by this completion or another), or
		 * taken over; anything else (the store out of reach) is tried
		 * again at the next turn. */
		if (!it->lease_gone && mesh_job_renew(it->jh, &it->l, r->ttl) == MESH_E_STATE)
			it->lease_gone = 1;
		fl_append(r, it, now);
	}
}

void mesh__run_queue(struct mesh__runner *r, struct mesh__item *it)
{
	if (it->complete)
		fl_append(r, it, mesh_mono_ns());
	pthread_mutex_lock(&r->mu);
	it->next = NULL;
	*r->q_in_tail = it;
	r->q_in_tail = &it->next;
	r->in_flight++;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

