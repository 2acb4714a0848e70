/* The chunk driver: leases chunks for N slots, starts them on an executor
 * (executor.h), renews their leases, applies timeouts, takes speculative
 * copies and kills a race's loser, batches completions (run_done.c), and
 * decides when the run is over -- the loop behind mesh_exec_run. */
#include "exec/runner.h"

#include "base/buf.h"
#include "base/thread.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/path.h"
#include "exec/capture.h"
#include "exec/input.h"
#include "exec/progress.h"
#include "exec/run_int.h"
#include "exec/executor.h"
#include "exec/template.h"
#include "job/job.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#define TTL_DEFAULT (10 * MESH_NS_PER_S)
/* How long a driver that found nothing to lease waits before it asks
 * again (expired leases wake nobody); MESH_RETRY_MS sets it (read once a
 * run, into r->retry). */
static uint64_t retry_ns(void)
{
	const char *e = getenv("MESH_RETRY_MS");
	char *end = "";
	unsigned long ms = e && *e ? strtoul(e, &end, 10) : 0;
	return (ms >= 1 && ms <= 3600000 && !*end ? ms : 200) * MESH_NS_PER_MS;
}
#define DRAW_NS (100 * MESH_NS_PER_MS)
/* --load / --memfree: how often a blocked start looks again. */
#define THROTTLE_NS (250 * MESH_NS_PER_MS)

static int sig_w = -1, sig_r = -1;
static volatile sig_atomic_t stop_asked;

int mesh_exec_stop_asked(void)
{
	return stop_asked != 0;
}

static void on_signal(int sig)
{
	int e = errno;
	unsigned char c = (unsigned char)sig;
	if (sig == SIGINT || sig == SIGTERM)
		stop_asked = 1;
	if (sig_w >= 0 && write(sig_w, &c, 1) < 0) {
		/* the pipe is full: enough signals are pending */
	}
	errno = e;
}

/* A running attempt's lease was taken over: its renewals came too late
 * (a stalled machine, a TTL too short for it).  It runs on; said once. */
void mesh__run_lease_lost(struct mesh__runner *r, struct mesh__slot *s, uint64_t now)
{
	const struct mesh_exec_hooks *h = r->o->hooks;
	uint64_t since = now - s->t_renewed;
	s->lost = 1;
	r->st->lost++;
	mesh__run_note(r,
		       "mesh: chunk %" PRIu64 ": its lease was taken over while it ran (last renewed %" PRIu64
		       " ms ago, lease %" PRIu64 " ms); it may be run twice. A longer --ttl avoids this on a loaded machine",
		       s->l.cid, (uint64_t)(since / MESH_NS_PER_MS), (uint64_t)(r->ttl / MESH_NS_PER_MS));
	if (h && h->lease_lost)
		h->lease_lost(h->arg, s->l.cid, since, r->ttl);
}

void mesh__run_note(struct mesh__runner *r, const char *fmt, ...)
{
	if (r->o->note_fd < 0)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	if (r->drawn && r->o->progress_fd == r->o->note_fd)
		mesh_write_all_raw(r->o->progress_fd, "\r\033[K", 4);
	mesh_write_all_raw(r->o->note_fd, line, (size_t)n);
}

char *mesh__run_strf(const char *fmt, ...)
{
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	va_start(ap, fmt);
	int rc = mesh_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	if (rc < 0) {
		mesh_buf_release(&b);
		return NULL;
	}
	return mesh_buf_detach(&b, NULL);
}

static void take_results(struct mesh__runner *r)
{
	mesh_efd_quiet(r->evfd);
	pthread_mutex_lock(&r->mu);
	struct mesh__item *list = r->q_out;
	r->q_out = NULL;
	pthread_mutex_unlock(&r->mu);
	while (list) {
		struct mesh__item *it = list;
		list = it->next;
		mesh__run_taken(r, it);
		if (it->result < 0) {
			/* Not DONE: let a rerun take the chunk at once.  Its
			 * output went out already (never after its DONE): the
			 * rerun writes it again. */
			mesh_job_renew(it->jh, &it->l, 1);
			if (it->complete && !r->o->results_dir)
				mesh__run_repeat(r, it->cid);
			/* a store that stopped waiting for its database
			 * because we were told to stop: an interruption */
			if (!r->fatal && !(it->result == MESH_E_UNAVAILABLE && stop_asked)) {
				r->fatal = it->result;
				mesh__run_stop_all(r, SIGKILL);
			}
		} else if (it->complete) {
			if (it->result == MESH_JOB_DONE)
				r->st->done++;
			else
				r->st->ignored++;
			/* First completion wins: a local copy still running lost
			 * (looked for only where one may be: a look through every
			 * slot for every completion was 2% of meshd's CPU). */
			unsigned look = mesh__slot_busy_with(r, it->cid) ? r->nslots : 0;
			for (unsigned i = 0; i < look; i++) {
				struct mesh__slot *s = &r->slots[i];
				if (s->busy && s->l.cid == it->cid && !s->exited && s->why == END_NORMAL) {
					s->why = END_KILLED;
					mesh__slot_kill(r, s, SIGKILL);
					r->st->killed++;
				}
			}
		}
		mesh__run_item_free(it);
	}
}

/* ---- the loop ---- */

static void draw(struct mesh__runner *r, int final)
{
	int fd = r->o->progress_fd;
	if (fd < 0)
		return;
	uint64_t now = mesh_mono_ns();
	if (!final && now < r->next_draw)
		return;
	r->next_draw = now + DRAW_NS;
	struct mesh_job_status js;
	if (mesh_job_status(r->job, &js) < 0)
		return;
	struct winsize ws;
	struct mesh__progress p = {
		.done = js.done,
		.total = js.n,
		.done_at_start = r->done_at_start,
		.running = r->busy,
		.failed = js.buried,
		.elapsed_ns = now - r->t0,
		.width = r->bar_tty && ioctl(fd, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 80,
		/* escape sequences only on a terminal: a file or a pipe gets the
		 * text alone */
		.color = r->bar_tty && (getenv("NO_COLOR") == NULL || !getenv("NO_COLOR")[0]),
	};
	char line[512];
	size_t n = r->bar_tty ? 4 : 1;
	memcpy(line, "\r\033[K", n);
	n += mesh__progress_format(line + n, sizeof line - n - 1, &p);
	if (final) {
		line[n++] = '\n';
		r->drawn = 0;
	} else {
		r->drawn = r->bar_tty;
	}
	mesh_write_all_raw(fd, line, n);
}

void mesh__run_repeat(struct mesh__runner *r, uint64_t cid)
{
	if (r->st->repeat < MESH_EXEC_REPEAT_SHOWN)
		r->st->repeat_cids[r->st->repeat] = cid;
	r->st->repeat++;
}

void mesh__run_stop_all(struct mesh__runner *r, int sig)
{
	uint64_t now = mesh_mono_ns();
	for (unsigned i = 0; i < r->nslots; i++) {
		struct mesh__slot *s = &r->slots[i];
		if (!s->busy || s->exited)
			continue;
		if (s->why == END_NORMAL) {
			s->why = END_KILLED;
			r->st->killed++;
		}
		mesh__slot_kill(r, s, sig);
		if (!s->term_sent) {
			s->term_sent = 1;
			s->t_kill = now + MESH__RUN_KILL_GRACE;
		}
	}
}

/* --delay, --load, --memfree: 1 when a start may go ahead now (else
 * hold_until says when to look again). */
static int may_start(struct mesh__runner *r)
{
	const struct mesh_exec_opts *o = r->o;
	if (!o->delay_ns && o->load_max <= 0 && !o->memfree_bytes)
		return 1;
	uint64_t now = mesh_mono_ns();
	if (r->hold_until && now < r->hold_until)
		return 0;
	r->hold_until = 0;
	if (o->delay_ns && r->last_start && now < r->last_start + o->delay_ns) {
		r->hold_until = r->last_start + o->delay_ns;
		return 0;
	}
	/* One chunk always runs: a load that never falls must not hang us. */
	if (r->busy && !mesh__out_resources_ok(r)) {
		r->hold_until = now + THROTTLE_NS;
		return 0;
	}
	return 1;
}

/* Whether the chunk of lease l (not a fresh one) is this node's already:
 * its completion in flight, its output waiting for its turn (-k), or (a
 * lease taken over from this node itself, whose loop waited in the store
 * past the earlier lease's end) an attempt still in a slot.  Then it is
 * not run again, and a lease taken over becomes the one kept renewed
 * (the store knows a chunk's lease by the latest).  A speculative copy of
 * a chunk running here still runs (a local straggler). */
static int adopt(struct mesh__runner *r, struct mesh_job *jh, const struct mesh_lease *l, uint64_t t_expire)
{
	struct mesh__item *it = NULL;
	int stolen = l->kind == MESH_LEASE_STOLEN;
	for (struct mesh__item *x = r->fl.head; x && !it; x = x->fl.next)
		if (x->cid == l->cid && x->jh == jh)
			it = x;
	for (struct mesh__hold *h = r->hold.head; h && !it; h = h->link.next)
		if (h->cid == l->cid && h->it && h->it->complete && h->it->jh == jh)
			it = h->it;
	if (it) {
		if (stolen) {
			it->l = *l;
			it->lease_gone = 0;
		}
		return 1;
	}
	if (!stolen || !mesh__slot_busy_with(r, l->cid))
		return 0;
	for (unsigned i = 0; i < r->nslots; i++) {
		struct mesh__slot *s = &r->slots[i];
		if (s->busy && s->jh == jh && s->l.cid == l->cid && s->why == END_NORMAL) {
			s->l = *l;
			s->t_expire = t_expire;
			s->lost = 0;
			return 1;
		}
	}
	return 0;
}

/* Leases and starts chunks for the free slots. */
static int fill(struct mesh__runner *r)
{
	while (r->busy < r->nslots && !r->stopping && !r->fatal && !r->halted && !r->hup) {
		if (r->o->max_chunks && r->st->started >= r->o->max_chunks)
			return 0;
		if (r->retry_at && mesh_mono_ns() < r->retry_at)
			return 0;
		if (!may_start(r))
			return 0;
		/* Leases for every free slot at once (block leases, job.h);
		 * one at a time where each start is paced. */
		struct mesh_lease ls[MESH_JOB_LEASE_MANY_MAX];
		struct mesh_job *jh = r->job;
		size_t k = r->nslots - r->busy, got = 0;
		if (r->ex->ops->room) {
			/* Leased is held: not more than the executor will start
			 * soon, so that other nodes get what this one would only
			 * queue (its completions wake us for more). */
			size_t room = r->ex->ops->room(r->ex);
			if (!room)
				return 0;
			if (k > room)
				k = room;
		}
		if (k > MESH_JOB_LEASE_MANY_MAX)
			k = MESH_JOB_LEASE_MANY_MAX;
		if (r->o->max_chunks && r->o->max_chunks - r->st->started < k)
			k = (size_t)(r->o->max_chunks - r->st->started);
		if (r->o->delay_ns || r->o->load_max > 0 || r->o->memfree_bytes)
			k = 1;
		uint64_t t_asked = mesh_mono_ns();
		int rc = mesh_job_lease_many(jh, r->ttl, r->o->speculate, ls, k, &got);
		if (rc == MESH_JOB_NONE && r->o->speculate && r->o->spec_job) {
			jh = r->o->spec_job;
			rc = mesh_job_lease(jh, r->ttl, 1, &ls[0]);
			got = rc == 0;
		}
		if (rc < 0)
			return rc;
		if (rc == MESH_JOB_COMPLETE) {
			r->complete_seen = 1;
			return 0;
		}
		if (rc == MESH_JOB_NONE) {
			r->none_seen = 1;
			r->retry_at = mesh_mono_ns() + r->retry;
			return 0;
		}
		r->none_seen = 0;
		for (size_t i = 0; i < got; i++) {
			/* the store's clock, both: the time the lease had left */
			uint64_t t_expire =
				t_asked + (ls[i].deadline_ns > ls[i].started_ns ? ls[i].deadline_ns - ls[i].started_ns : 0);
			if (ls[i].kind != MESH_LEASE_FRESH && adopt(r, jh, &ls[i], t_expire))
				continue;
			struct mesh__slot *s = NULL;
			for (unsigned m = 0; m < r->nslots; m++)
				if (!r->slots[m].busy) {
					s = &r->slots[m];
					break;
				}
			s->jh = jh;
			s->l = ls[i];
			s->t_expire = t_expire;
			if ((rc = mesh__slot_start(r, s)) < 0) {
				/* Not started: hand the rest back at once. */
				for (size_t m = i + 1; m < got; m++)
					mesh_job_renew(jh, &ls[m], 1);
				return rc;
			}
		}
	}
	return 0;
}

/* Decides whether the run is over; returns 1 with *answer set. */
static int over(struct mesh__runner *r, int *answer)
{
	if (r->busy)
		return 0;
	pthread_mutex_lock(&r->mu);
	unsigned in_flight = r->in_flight;
	pthread_mutex_unlock(&r->mu);
	if (in_flight)
		return 0;
	/* Results the completer handed over but the loop has not seen yet
	 * (a fatal error among them) count before deciding. */
	take_results(r);
	if (r->fatal) {
		mesh__out_hold_drop(r);
		*answer = r->fatal;
		return 1;
	}
	struct mesh_job_status js;
	int rc = mesh_job_status(r->job, &js);
	if (rc < 0) {
		*answer = rc == MESH_E_UNAVAILABLE && stop_asked ? MESH_EXEC_INTERRUPTED : rc;
		return 1;
	}
	int end;
	if (r->halted)
		end = MESH_EXEC_HALTED;
	else if (r->stopping)
		end = MESH_EXEC_INTERRUPTED;
	else if (r->complete_seen || js.done >= js.n)
		end = MESH_EXEC_COMPLETE;
	else if (r->hup)
		end = MESH_EXEC_HANGUP;
	else if (r->o->max_chunks && r->st->started >= r->o->max_chunks)
		end = MESH_EXEC_LIMIT;
	else if (r->none_seen && (js.done + js.buried >= js.n || r->hold.head))
		end = MESH_EXEC_FAILED;
	else
		return 0;
	if (r->hold.head) {
		/* -k: nothing more will come from here; what waits goes out in
		 * order, and its completions decide the answer. */
		mesh__out_emit_ready(r, 1);
		return 0;
	}
	*answer = end;
	return 1;
}

/* Ctrl-Z: the chunks stop with us (each runs in its own process group, out
 * of the terminal's reach), and go on with us. */
static void suspend(struct mesh__runner *r)
{
	for (unsigned i = 0; i < r->nslots; i++)
		mesh__slot_kill(r, &r->slots[i], SIGSTOP);
	uint64_t t = mesh_mono_ns();
	/* SIGSTOP, not SIGTSTP: the latter is discarded in an orphaned
	 * process group, and mesh must stop whenever its chunks did. */
	kill(getpid(), SIGSTOP);
	uint64_t now = mesh_mono_ns(), away = now - t;
	for (unsigned i = 0; i < r->nslots; i++) {
		struct mesh__slot *s = &r->slots[i];
		if (!s->busy || s->exited)
			continue;
		mesh__slot_kill(r, s, SIGCONT);
		/* The time stopped is not the chunk's; its lease may be near
		 * its end: renew now. */
		s->t_start += away;
		if (s->t_deadline)
			s->t_deadline += away;
		s->t_renew = now;
	}
	r->hold_renew = now;
}

/* The attempt in s as it stands now: what its executor has for it already
 * (an answer that came while this thread was away: a renew or a lease
 * that waited on a store out of reach) is taken in first.  Its status. */
static int take_in(struct mesh__runner *r, struct mesh__slot *s)
{
	const struct mesh__executor_ops *ex = r->ex->ops;
	struct pollfd pf[MESH__EXEC_MAX_FDS + MESH__EXEC_MAX_SHARED];
	uint64_t wake = UINT64_MAX;
	unsigned k = ex->events(r->ex, s->idx, pf, MESH__EXEC_MAX_FDS, &wake), own = k;
	if (ex->shared_events)
		k += ex->shared_events(r->ex, pf + k, MESH__EXEC_MAX_SHARED);
	if (k && poll(pf, k, 0) > 0)
		for (unsigned i = 0; i < k; i++)
			if (pf[i].revents)
				ex->dispatch(r->ex, i < own ? s->idx : 0, &pf[i]);
	return ex->status(r->ex, s->idx, mesh_mono_ns(), &s->res);
}

static void handle_signals(struct mesh__runner *r, int fd)
{
	unsigned char buf[16];
	ssize_t n = read(fd, buf, sizeof buf);
	for (ssize_t i = 0; i < n; i++) {
		if (buf[i] == SIGTSTP) {
			suspend(r);
			continue;
		}
		if (buf[i] == SIGHUP) {
			/* GNU parallel's: start nothing more, let the running
			 * chunks finish (and be recorded). */
			if (!r->hup && !r->stopping)
				mesh__run_note(r,
					       "mesh: SIGHUP received: no new chunk starts; waiting for the %u running to "
					       "finish (SIGTERM or SIGINT stops them now)",
					       r->busy);
			r->hup = 1;
			continue;
		}
		r->sigs++;
		r->stopping = 1;
		mesh__run_stop_all(r, r->sigs > 1 ? SIGKILL : SIGTERM);
	}
}

/* One turn's poll set: the fds gather put in pf, and whose each is. */
struct turn {
	struct pollfd *pf;
	struct mesh__slot **who; /* NULL: the driver's own fd; &shared: the executor's shared ones */
	nfds_t n;
	int timeout; /* ms; -1: none */
	int wake_fd, cancel_fd;
};

static struct mesh__slot shared; /* who of a shared pollfd: slot 0 */

/* Before the poll: the signal pipe, the completer's eventfd, a cancel,
 * each busy slot's event source (its executor's fds) and the executor's
 * shared ones, a store's wake-up when others hold every chunk; and the
 * timeout, from the nearest of every deadline. */
static void gather(struct mesh__runner *r, struct turn *t)
{
	const struct mesh__executor_ops *ex = r->ex->ops;
	struct pollfd *pf = t->pf;
	struct mesh__slot **who = t->who;
	nfds_t n = 0;
	uint64_t now = mesh_mono_ns(), wake = UINT64_MAX;
	if (sig_r >= 0) {
		pf[n] = (struct pollfd){.fd = sig_r, .events = POLLIN};
		who[n++] = NULL;
	}
	pf[n] = (struct pollfd){.fd = r->evfd, .events = POLLIN};
	who[n++] = NULL;
	int cancel_fd = t->cancel_fd = r->o->hooks && !r->stopping ? r->o->hooks->cancel_fd : -1;
	if (cancel_fd >= 0) {
		pf[n] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
		who[n++] = NULL;
	}
	for (unsigned i = 0; i < r->nslots; i++) {
		struct mesh__slot *s = &r->slots[i];
		if (!s->busy)
			continue;
		unsigned k = ex->events(r->ex, s->idx, pf + n, MESH__EXEC_MAX_FDS, &wake);
		for (unsigned j = 0; j < k; j++)
			who[n++] = s;
		if (s->exited)
			continue;
		if (s->t_renew < wake)
			wake = s->t_renew;
		uint64_t d = mesh__slot_deadline(r, s);
		if (d && s->why == END_NORMAL && d < wake)
			wake = d;
		if (s->term_sent && s->t_kill < wake)
			wake = s->t_kill;
	}
	if (ex->shared_events && r->busy) {
		unsigned k = ex->shared_events(r->ex, pf + n, MESH__EXEC_MAX_SHARED);
		for (unsigned j = 0; j < k; j++)
			who[n++] = &shared;
	}
	int can_start = r->busy < r->nslots && !r->stopping && !r->halted && !r->hup;
	if (r->retry_at && can_start && r->retry_at < wake)
		wake = r->retry_at;
	/* Others hold every chunk: a store that tells when work appears
	 * (PostgreSQL's NOTIFY) wakes us before the retry. */
	int wake_fd = r->retry_at && r->none_seen && can_start ? mesh_job_wake_fd(r->job) : -1;
	if (wake_fd >= 0 && mesh_job_wait_work(r->job, 0) > 0) {
		/* The wake-up came in with the last reply: it waits in
		 * the client's queue, and the socket has nothing to tell. */
		r->retry_at = 0;
		wake = now;
		wake_fd = -1;
	}
	if (wake_fd >= 0) {
		pf[n] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
		who[n++] = NULL;
	}
	if (r->hold_until && can_start && r->hold_until < wake)
		wake = r->hold_until;
	if (r->fl.head && r->fl.head->renew_at < wake)
		wake = r->fl.head->renew_at;
	if (r->hold.head && r->hold_renew < wake)
		wake = r->hold_renew;
	if (r->hold.head && wake > now + r->retry)
		wake = now + r->retry; /* -k: a chunk another node runs may be done */
	if (r->o->progress_fd >= 0 && r->next_draw < wake)
		wake = r->next_draw;
	t->timeout = -1;
	if (wake != UINT64_MAX)
		t->timeout = wake <= now ? 0 : (int)((wake - now + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS);
	t->wake_fd = wake_fd;
	t->n = n;
}

/* After it: what each ready fd says, then each busy slot's status (its
 * end, its deadlines, its lease's renewal), then the held outputs and the
 * completions in flight. */
static void after(struct mesh__runner *r, const struct turn *t, int k)
{
	const struct mesh__executor_ops *ex = r->ex->ops;
	struct pollfd *pf = t->pf;
	for (nfds_t i = 0; k > 0 && i < t->n; i++) {
		if (!pf[i].revents)
			continue;
		if (t->who[i])
			ex->dispatch(r->ex, t->who[i]->idx, &pf[i]);
		else if (pf[i].fd == r->evfd)
			take_results(r);
		else if (pf[i].fd == t->wake_fd) {
			/* taken; whatever it was, lease again now (a spurious
			 * wake-up costs one lease call) */
			mesh_job_wait_work(r->job, 0);
			r->retry_at = 0;
		}
		else if (pf[i].fd == t->cancel_fd) {
			/* Cancelled by the caller: as a first SIGTERM. */
			r->stopping = 1;
			mesh__run_stop_all(r, SIGTERM);
		} else
			handle_signals(r, pf[i].fd);
	}
	uint64_t now = mesh_mono_ns();
	for (unsigned i = 0; i < r->nslots; i++) {
		struct mesh__slot *s = &r->slots[i];
		if (!s->busy)
			continue;
		int st = ex->status(r->ex, s->idx, now, &s->res);
		s->exited = st != MESH__EXEC_RUNNING;
		if (!s->exited) {
			uint64_t d = mesh__slot_deadline(r, s);
			if (d && s->why == END_NORMAL && now >= d) {
				s->why = END_TIMEOUT;
				mesh__slot_kill(r, s, SIGKILL);
			}
			if (s->term_sent && now >= s->t_kill)
				mesh__slot_kill(r, s, SIGKILL);
			if (now >= s->t_renew) {
				s->t_renew = now + r->ttl / 4;
				int rc = mesh_job_renew(s->jh, &s->l, r->ttl);
				if (rc == 0) {
					s->t_renewed = mesh_mono_ns();
					s->t_expire = now + r->ttl;
				}
				if (rc == MESH_E_STATE && mesh_job_is_done(r->job, s->l.cid) == 1 &&
				    s->why == END_NORMAL && (st = take_in(r, s)) == MESH__EXEC_RUNNING) {
					s->why = END_KILLED;
					mesh__slot_kill(r, s, SIGKILL);
					r->st->killed++;
				} else if (rc == MESH_E_STATE && !s->lost && s->why == END_NORMAL)
					mesh__run_lease_lost(r, s, mesh_mono_ns());
				s->exited = st != MESH__EXEC_RUNNING;
			}
		}
		if (st == MESH__EXEC_ENDED)
			mesh__slot_finish(r, s);
	}
	if (r->hold.head) {
		mesh__out_hold_renew(r, now);
		mesh__out_emit_ready(r, 0);
	}
	if (r->fl.head)
		mesh__run_flight_renew(r, now);
}

/* A run in steps (executor.h): its runner, its turn's poll set, its
 * caught signals and its answer once over. */
struct mesh__drive {
	struct mesh__runner r;
	struct turn t;
	struct catches *sigs;
	int answer, looped;
};

/* A turn's first half: leases and starts, then the poll set and timeout
 * (gather); 1 when the run is over. */
int mesh__exec_turn(struct mesh__drive *d, struct pollfd **pf, nfds_t *n, int *timeout)
{
	struct mesh__runner *r = &d->r;
	d->looped = 1;
	int rc = fill(r);
	if (rc == MESH_E_UNAVAILABLE && stop_asked)
		rc = 0; /* told to stop while the store waited: the signal is read below */
	if (rc < 0 && !r->fatal) {
		r->fatal = rc;
		mesh__run_stop_all(r, SIGKILL);
	}
	if (over(r, &d->answer))
		return 1;
	draw(r, 0);
	gather(r, &d->t);
	*pf = d->t.pf;
	*n = d->t.n;
	*timeout = d->t.timeout;
	return 0;
}

/* Its second half: what the poll of the turn's set said (k fds ready, or
 * -errno: the poll failed; -EINTR is none ready). */
void mesh__exec_polled(struct mesh__drive *d, int k)
{
	struct mesh__runner *r = &d->r;
	if (k < 0 && k != -EINTR) {
		r->fatal = k;
		mesh__run_stop_all(r, SIGKILL);
		return;
	}
	after(r, &d->t, k);
}

static int setup_slots(struct mesh__runner *r)
{
	r->slots = calloc(r->nslots, sizeof *r->slots);
	if (!r->slots)
		return -ENOMEM;
	uint64_t cap = 64;
	while (cap < 4 * (uint64_t)r->nslots && cap < (1ull << 24))
		cap *= 2;
	r->busy_by_cid = calloc(cap, sizeof *r->busy_by_cid); /* NULL: every completion looks */
	r->busy_mask = cap - 1;
	for (unsigned i = 0; i < r->nslots; i++) {
		struct mesh__slot *s = &r->slots[i];
		s->idx = i + 1;
		s->res_out = s->res_err = -1;
		s->cout = (struct mesh__capture)MESH__CAPTURE_INIT;
		s->cerr = (struct mesh__capture)MESH__CAPTURE_INIT;
		s->cout.dir = s->cerr.dir = r->tmpdir;
		s->argbuf = (struct mesh_buf)MESH_BUF_INIT;
	}
	/* After the slots are set: a failure here leaves them fit for the
	 * cleanup (no capture with fd 0 as its spill file). */
	r->argv_tmp = calloc(mesh_exec_template_slots(&r->tmpl), sizeof *r->argv_tmp);
	return r->argv_tmp ? 0 : -ENOMEM;
}

static void settle_buried(const struct mesh_job_failure *f, void *arg)
{
	if (f->buried)
		mesh__out_settle(arg, f->cid);
}

/* -k: which chunks are settled already (buried before this call). */
static int setup_order(struct mesh__runner *r)
{
	if (!r->o->keep_order)
		return 0;
	r->settled = calloc(r->n / 8 + 1, 1);
	if (!r->settled)
		return -ENOMEM;
	return mesh_job_failures(r->job, settle_buried, r);
}

/* The signals a run that handles them catches, their old actions, and
 * the self-pipe their handler writes. */
static const int caught[] = {SIGINT, SIGTERM, SIGTSTP, SIGHUP};
struct catches {
	struct sigaction old[4];
	int have[4];
	int pipe[2];
};

static int catch_signals(struct catches *c)
{
	if (pipe2(c->pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	sig_w = c->pipe[1];
	stop_asked = 0;
	sig_r = c->pipe[0];
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	for (int i = 0; i < 4; i++) {
		/* An ignored SIGTSTP (no job control) or SIGHUP (nohup)
		 * stays ignored. */
		if ((caught[i] == SIGTSTP || caught[i] == SIGHUP) && sigaction(caught[i], NULL, &c->old[i]) == 0 &&
		    c->old[i].sa_handler == SIG_IGN)
			continue;
		c->have[i] = sigaction(caught[i], &sa, &c->old[i]) == 0;
	}
	return 0;
}

/* The old actions back, the pipe closed (nothing caught: nothing done). */
static void uncatch_signals(struct catches *c)
{
	for (int i = 0; i < 4; i++)
		if (c->have[i])
			sigaction(caught[i], &c->old[i], NULL);
	sig_w = -1;
	sig_r = -1;
	if (c->pipe[0] >= 0)
		close(c->pipe[0]);
	if (c->pipe[1] >= 0)
		close(c->pipe[1]);
}

/* The end of a run, whatever its point: the completer stopped (its
 * results taken), every slot cleared (a running attempt killed and
 * reaped), the executor and every file of the run let go. */
static void runner_release(struct mesh__runner *r)
{
	if (r->thr_started) {
		pthread_mutex_lock(&r->mu);
		r->quit = 1;
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&r->mu);
		mesh_thread_join(r->thr, NULL);
		take_results(r);
	}
	mesh__out_hold_drop(r);
	if (r->slots) {
		for (unsigned i = 0; i < r->nslots; i++) {
			struct mesh__slot *s = &r->slots[i];
			/* A running attempt is killed and reaped here. */
			mesh__slot_clear(r, s);
			mesh__capture_release(&s->cout);
			mesh__capture_release(&s->cerr);
			mesh_buf_release(&s->argbuf);
			mesh_buf_release(&s->tagbuf);
			free(s->argv);
		}
		free(r->slots);
	}
	free(r->busy_by_cid);
	free(r->argv_tmp);
	if (r->ex)
		r->ex->ops->free(r->ex);
	if (r->evfd >= 0)
		close(r->evfd);
	if (r->joblog >= 0)
		close(r->joblog);
	mesh_exec_template_release(&r->tmpl);
	mesh_exec_template_release(&r->tagtmpl);
	mesh__out_median_free(&r->med);
	free(r->settled);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->cv);
}

/* The runner of job under o, its stats in stats: its settings, none of
 * its fds or threads yet (runner_release copes). */
static void runner_init(struct mesh__runner *r, struct mesh_job *job, const struct mesh_exec_opts *o,
			struct mesh_exec_stats *stats)
{
	memset(r, 0, sizeof *r);
	r->job = job;
	r->o = o;
	r->st = stats;
	r->evfd = r->joblog = -1;
	r->self = getpid();
	r->t0 = mesh_mono_ns();
	r->nslots = o->slots ? o->slots : 1;
	r->ttl = o->ttl_ns ? o->ttl_ns : TTL_DEFAULT;
	r->retry = retry_ns();
	r->n = mesh_job_nchunks(job);
	r->q_in_tail = &r->q_in;
	r->tmpdir = o->tmpdir && o->tmpdir[0] ? o->tmpdir : getenv("TMPDIR");
	if (!r->tmpdir || !r->tmpdir[0])
		r->tmpdir = "/tmp";
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
}

/* The command's template and the tag's (--tagstring), over the job's
 * chunks; an input list shorter than the job is MESH_E_RANGE.  0 or a
 * negative code. */
static int templates_init(struct mesh__runner *r)
{
	const struct mesh_exec_opts *o = r->o;
	int rc = mesh_exec_template_init_rpls(&r->tmpl, o->argv, o->rpls);
	if (rc < 0)
		return rc;
	r->tmpl.total = r->n;
	if (o->tag && o->tagstring) {
		r->tagargv[0] = (char *)o->tagstring;
		if ((rc = mesh_exec_template_init_rpls(&r->tagtmpl, r->tagargv, o->rpls)) < 0)
			return rc;
		r->tagtmpl.total = r->n;
	}
	return o->input && o->input->n < r->n ? MESH_E_RANGE : 0;
}

/* The end of a run in steps, at any point after runner_init: its answer
 * rc (or an error), and d freed. */
static int drive_end(struct mesh__drive *d, int rc)
{
	struct mesh__runner *r = &d->r;
	if (d->looped)
		draw(r, 1);
	runner_release(r);
	if (d->sigs) {
		uncatch_signals(d->sigs);
		free(d->sigs);
	}
	r->st->wall_ns = mesh_mono_ns() - r->t0;
	free(d->t.pf);
	free(d->t.who);
	free(d);
	return rc;
}

int mesh__exec_open(struct mesh_job *job, const struct mesh_exec_opts *o, mesh__exec_make_fn make, void *arg,
		    struct mesh_exec_stats *stats, struct mesh__drive **out)
{
	static struct mesh_exec_stats dummy; /* written, never read */
	struct mesh__drive *d = calloc(1, sizeof *d);
	struct mesh__runner *r;
	int rc;
	*out = NULL;
	if (!stats)
		stats = &dummy;
	memset(stats, 0, sizeof *stats);
	if (!d)
		return -ENOMEM;
	r = &d->r;
	runner_init(r, job, o, stats);
	d->t = (struct turn){NULL, NULL, 0, -1, -1, -1};
	if ((rc = templates_init(r)) < 0)
		return drive_end(d, rc);
	/* Our pipes and files must never land on 0..2 (the child's dup2s). */
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) < 0)
			return drive_end(d, -errno);
	r->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->evfd < 0)
		return drive_end(d, -errno);
	if (o->handle_signals) {
		if (!(d->sigs = calloc(1, sizeof *d->sigs)))
			return drive_end(d, -ENOMEM);
		d->sigs->pipe[0] = d->sigs->pipe[1] = -1;
		if ((rc = catch_signals(d->sigs)) < 0)
			return drive_end(d, rc);
	}
	/* After our handlers (a process executor's children reset them), and
	 * before anything is created on disk (its argv[0] lookup may fail). */
	struct mesh__exec_sink sink = {mesh__slot_output, r};
	if ((rc = make(arg, o, r->nslots, &sink, &r->ex)) < 0) {
		stats->failed_at = MESH_EXEC_AT_COMMAND;
		return drive_end(d, rc);
	}
	if (o->results_dir && (rc = mesh_path_mkdirs(o->results_dir, 0755)) < 0) {
		stats->failed_at = MESH_EXEC_AT_RESULTS;
		return drive_end(d, rc);
	}
	if ((rc = setup_slots(r)) < 0 || (rc = setup_order(r)) < 0)
		return drive_end(d, rc);
	if ((rc = mesh__out_joblog_open(r)) < 0) {
		stats->failed_at = MESH_EXEC_AT_JOBLOG;
		return drive_end(d, rc);
	}
	if (o->progress_fd >= 0) {
		r->bar_tty = isatty(o->progress_fd);
		/* The bar's rate counts this run's share alone.  Without a bar,
		 * no status before the first lease: on a shared store it is a
		 * query on the way to it. */
		struct mesh_job_status js;
		if ((rc = mesh_job_status(job, &js)) < 0)
			return drive_end(d, rc);
		r->done_at_start = js.done;
	}
	size_t cap = 4 + MESH__EXEC_MAX_FDS * (size_t)r->nslots + MESH__EXEC_MAX_SHARED;
	d->t.pf = calloc(cap, sizeof *d->t.pf);
	d->t.who = calloc(cap, sizeof *d->t.who);
	if (!d->t.pf || !d->t.who)
		return drive_end(d, -ENOMEM);
	/* The helper thread must not take our signals. */
	if ((rc = mesh_thread_run(&r->thr, mesh__run_completer, r, 0)) < 0)
		return drive_end(d, rc);
	r->thr_started = 1;
	*out = d;
	return 0;
}

int mesh__exec_close(struct mesh__drive *d)
{
	return drive_end(d, d->answer);
}

int mesh__exec_drive(struct mesh_job *job, const struct mesh_exec_opts *o, mesh__exec_make_fn make, void *arg,
		     struct mesh_exec_stats *stats)
{
	struct mesh__drive *d;
	int rc = mesh__exec_open(job, o, make, arg, stats, &d);
	return rc < 0 ? rc : mesh__exec_go(d);
}

int mesh__exec_go(struct mesh__drive *d)
{
	for (;;) {
		struct pollfd *pf;
		nfds_t n;
		int timeout;
		if (mesh__exec_turn(d, &pf, &n, &timeout))
			break;
		int k = poll(pf, n, timeout);
		mesh__exec_polled(d, k < 0 ? -errno : k);
	}
	return mesh__exec_close(d);
}

static int make_proc(void *arg, const struct mesh_exec_opts *o, unsigned nslots, const struct mesh__exec_sink *sink,
		     struct mesh__executor **out)
{
	return mesh__exec_proc_new(o->argv[0], nslots, o->nice, sink, out);
}

int mesh_exec_run(struct mesh_job *job, const struct mesh_exec_opts *o, struct mesh_exec_stats *stats)
{
	return mesh__exec_drive(job, o, make_proc, NULL, stats);
}
