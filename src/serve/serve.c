/* mesh serve's loop and the supervisor of its one server process: spawn
 * it (proc/), its output into the log and the tail, the warmth probe on a
 * helper thread, the policy's answer acted on, the stop and reap of its
 * group; open and free.  The clients are front.c's.  See serve_int.h. */
#include "serve/serve_int.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/thread.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

/* The probe runs every PROBE_FAST_NS for the first PROBE_FAST_FOR_NS of a
 * start, then backs off by a quarter per probe up to PROBE_SLOW_NS: a fast
 * start is seen within a few ms; a model that loads for minutes is not
 * asked hundreds of times a second. */
#define PROBE_FIRST_NS (1ull * MESH_NS_PER_MS)
#define PROBE_FAST_NS (2ull * MESH_NS_PER_MS)
#define PROBE_FAST_FOR_NS (1ull * MESH_NS_PER_S)
#define PROBE_SLOW_NS (100ull * MESH_NS_PER_MS)
/* While a stop waits for the group to empty (and as a safety net). */
#define STOP_POLL_NS (20ull * MESH_NS_PER_MS)

struct probe_msg {
	uint64_t gen;
	struct mesh_probe_result res;
};

const char *mesh_serve_state_name(int state)
{
	static const char *names[] = {"cold", "starting", "warm", "stopping"};
	return state >= 0 && state < 4 ? names[state] : "?";
}

const char *mesh_serve_event_name(int kind)
{
	static const char *names[] = {"listening", "spawned", "spawn_failed", "warm",    "start_timeout", "crashed",
				      "reaping",   "killed",  "reaped",       "rejected", "status",        "exit",
				      "draining"};
	return kind >= 0 && kind < (int)(sizeof names / sizeof names[0]) ? names[kind] : "?";
}

static void stats_fill(const struct mesh_serve *s, struct mesh_serve_stats *o)
{
	uint64_t now = mesh_mono_ns();
	*o = s->st;
	o->state = s->state;
	o->pid = s->state == MESH_SERVE_COLD ? 0 : s->pid;
	o->window_ns = now - s->t_open;
	o->warm_ns = s->warm_acc + (s->state != MESH_SERVE_COLD ? now - s->t_spawn : 0);
	o->savings_permil = mesh_as_savings_permil((int64_t)o->warm_ns, (int64_t)o->window_ns);
	o->queued = s->queue.n;
	o->open = s->queue.n + s->active.n;
	o->inflight = s->inflight;
	o->demand = mesh__serve_demand(s);
	o->pipes = s->pool.pipes_out;
}

void mesh_serve_stats(const struct mesh_serve *s, struct mesh_serve_stats *out)
{
	stats_fill(s, out);
}

static void emit(struct mesh_serve *s, struct mesh_serve_event *ev)
{
	struct mesh_serve_stats st;
	if (!s->c.on_event)
		return;
	stats_fill(s, &st);
	ev->stats = &st;
	s->c.on_event(s->c.ctx, ev);
}

void mesh__serve_emit_simple(struct mesh_serve *s, int kind, int status, uint64_t elapsed, const char *reason)
{
	struct mesh_serve_event ev = {.kind = kind, .pid = s->pid, .status = status, .elapsed_ns = elapsed,
				      .reason = reason};
	emit(s, &ev);
}

/* Reads the server's output into the log file and the tail. */
static void drain_output(struct mesh_serve *s)
{
	char buf[8192];
	if (s->out_fd < 0)
		return;
	for (;;) {
		ssize_t n = read(s->out_fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			mesh__serve_watch(s, &s->w_output, s->out_fd, 0);
			close(s->out_fd);
			s->out_fd = -1;
			return;
		}
		if (s->logfd >= 0 && mesh_write_all(s->logfd, buf, (size_t)n) < 0) {
			/* A full disk must not stop the relay; the tail keeps going. */
			close(s->logfd);
			s->logfd = -1;
		}
		mesh_proc_tail_feed(&s->tail, buf, (size_t)n);
		/* A short read emptied the pipe; the loop calls again for more. */
		if ((size_t)n < sizeof buf)
			return;
	}
}

static void log_marker(struct mesh_serve *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_marker(struct mesh_serve *s, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n = snprintf(line, sizeof line, "--- mesh serve: ");
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof line - 2)
		n = (int)sizeof line - 2;
	line[n++] = '\n';
	if (s->logfd >= 0)
		(void)mesh_write_all(s->logfd, line, (size_t)n);
}

static int spawn_server(struct mesh_serve *s)
{
	int outp[2];
	extern char **environ;
	if (pipe2(outp, O_CLOEXEC) < 0)
		return -errno;
	struct mesh_proc_opts po = MESH_PROC_OPTS_INIT;
	po.path = s->path, po.argv = s->argv, po.envp = environ, po.out_fd = outp[1];
	pid_t pid;
	int rc = mesh_proc_spawn(s->sp, &po, &pid, NULL);
	close(outp[1]);
	if (rc < 0) {
		close(outp[0]);
		return rc;
	}
	fcntl(outp[0], F_SETFL, fcntl(outp[0], F_GETFL) | O_NONBLOCK);
	if (s->out_fd >= 0) {
		drain_output(s);
		if (s->out_fd >= 0) {
			mesh__serve_watch(s, &s->w_output, s->out_fd, 0);
			close(s->out_fd);
		}
	}
	s->out_fd = outp[0];
	mesh__serve_watch(s, &s->w_output, s->out_fd, EPOLLIN);
	s->pid = pid;
	return 0;
}

static void do_spawn(struct mesh_serve *s)
{
	char why[128];
	mesh_proc_tail_reset(&s->tail);
	int rc = spawn_server(s);
	if (rc < 0) {
		struct mesh_serve_event ev = {.kind = MESH_SERVE_EV_SPAWN_FAILED, .status = -1, .err = rc,
					      .reason = mesh_strerror(rc)};
		s->st.spawn_failures++;
		emit(s, &ev);
		mesh__serve_reject_queue(s, 502, "the server could not be started");
		return;
	}
	uint64_t now = mesh_mono_ns();
	s->state = MESH_SERVE_STARTING;
	s->t_spawn = now;
	s->start_deadline = now + s->c.start_timeout_ns;
	s->leader_done = 0;
	s->stop = (struct mesh_proc_stop){0};
	s->probe_gen++;
	s->probe_inflight = 0;
	s->probe_next = now + PROBE_FIRST_NS;
	s->last_probe[0] = 0;
	s->probe_interval = PROBE_FAST_NS;
	s->st.spawns++;
	log_marker(s, "spawned pid %d", (int)s->pid);
	snprintf(why, sizeof why, "%zu connection(s) waiting", s->queue.n);
	mesh__serve_emit_simple(s, MESH_SERVE_EV_SPAWNED, 0, 0, why);
}

/* Sends the stop signal to the group; the loop then waits for it to empty. */
static void begin_stop(struct mesh_serve *s, const char *why, int sig)
{
	uint64_t now = mesh_mono_ns();
	if (s->state == MESH_SERVE_COLD || s->state == MESH_SERVE_STOPPING)
		return;
	s->state = MESH_SERVE_STOPPING;
	s->t_stop = now;
	s->probe_gen++; /* a probe in flight no longer counts */
	mesh_proc_stop_begin(&s->stop, s->pid, sig, s->c.grace_ns, now);
	if (why) {
		log_marker(s, "stopping pid %d: %s", (int)s->pid, why);
		mesh__serve_emit_simple(s, MESH_SERVE_EV_REAPING, 0, 0, why);
	}
}

/* Reaps every exited child (the server and, as subreaper, its orphans). */
static void reap_children(struct mesh_serve *s)
{
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p <= 0)
			return;
		if (p == s->pid && !s->leader_done) {
			s->leader_done = 1;
			s->leader_status = mesh_proc_exit_code(st);
		}
	}
}

/* The server's leader exited while it was supposed to run: a crash. */
static void on_crash(struct mesh_serve *s)
{
	char why[160];
	uint64_t now = mesh_mono_ns();
	int was_starting = s->state == MESH_SERVE_STARTING;
	drain_output(s);
	size_t nt = mesh_proc_tail_lines(&s->tail, s->tail_view);
	snprintf(why, sizeof why, "%s exited with status %d %s", s->argv[0], s->leader_status,
		 was_starting ? "before it was warm" : "while warm");
	snprintf(s->fail_msg, sizeof s->fail_msg, "the server crashed while starting (%s)", why);
	struct mesh_serve_event ev = {.kind = MESH_SERVE_EV_CRASHED, .pid = s->pid, .status = s->leader_status,
				      .elapsed_ns = now - s->t_spawn, .reason = why, .tail = s->tail_view,
				      .ntail = nt};
	s->st.crashes++;
	log_marker(s, "pid %d exited with status %d", (int)s->pid, s->leader_status);
	emit(s, &ev);
	/* Its connections cannot be answered any more; the queued ones came
	 * for this start.  Later arrivals wait for the next one. */
	mesh__serve_close_active(s, "the server exited before it answered");
	mesh__serve_reject_queue(s, 502, s->fail_msg);
	/* Whatever the server left in its group goes now. */
	begin_stop(s, NULL, SIGKILL);
}

static void finish_stop(struct mesh_serve *s)
{
	uint64_t now = mesh_mono_ns();
	drain_output(s);
	s->warm_acc += now - s->t_spawn;
	s->state = MESH_SERVE_COLD;
	if (!s->stop_reason_crash) {
		s->st.reaps++;
		log_marker(s, "pid %d and its group are gone", (int)s->pid);
		mesh__serve_emit_simple(s, MESH_SERVE_EV_REAPED, s->leader_status, now - s->t_stop, NULL);
	}
	s->stop_reason_crash = 0;
	mesh__serve_close_active(s, "the server stopped before it answered");
	s->pid = 0;
}

static void step_stop(struct mesh_serve *s, uint64_t now)
{
	if (s->state != MESH_SERVE_STOPPING)
		return;
	reap_children(s); /* a SIGCHLD is coalesced; orphans of the group too */
	if (s->leader_done && mesh_proc_group_gone(s->pid)) {
		finish_stop(s);
		return;
	}
	if (mesh_proc_stop_step(&s->stop, now)) {
		log_marker(s, "grace over: SIGKILL to group %d", (int)s->pid);
		mesh__serve_emit_simple(s, MESH_SERVE_EV_KILLED, 0, now - s->t_stop, NULL);
	}
}

static void on_probe(struct mesh_serve *s)
{
	struct probe_msg m;
	ssize_t n;
	while ((n = read(s->probe_res[0], &m, sizeof m)) < 0 && errno == EINTR)
		;
	if (n != (ssize_t)sizeof m)
		return;
	if (m.gen != s->probe_gen || s->state != MESH_SERVE_STARTING)
		return;
	s->probe_inflight = 0;
	uint64_t now = mesh_mono_ns();
	snprintf(s->last_probe, sizeof s->last_probe, "%s", m.res.reason);
	if (m.res.warm) {
		mesh__serve_pin_upstream(s, m.res.addr);
		s->state = MESH_SERVE_WARM;
		log_marker(s, "pid %d warm after %.3f s", (int)s->pid, (double)(now - s->t_spawn) / 1e9);
		mesh__serve_emit_simple(s, MESH_SERVE_EV_WARM, 0, now - s->t_spawn, m.res.reason);
		return;
	}
	if (now - s->t_spawn >= PROBE_FAST_FOR_NS) {
		s->probe_interval += s->probe_interval / 4;
		if (s->probe_interval > PROBE_SLOW_NS)
			s->probe_interval = PROBE_SLOW_NS;
	}
	s->probe_next = now + s->probe_interval;
}

static void *probe_main(void *arg)
{
	struct mesh_serve *s = arg;
	for (;;) {
		struct probe_msg m;
		ssize_t n = read(s->probe_req[0], &m.gen, sizeof m.gen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof m.gen)
			return NULL;
		memset(&m.res, 0, sizeof m.res);
		if (mesh_probe(&s->target, &s->popts, &m.res) < 0)
			m.res.warm = 0;
		/* One message, atomic in a pipe (smaller than PIPE_BUF). */
		while (write(s->probe_res[1], &m, sizeof m) < 0 && errno == EINTR)
			;
	}
}

static void probe_kick(struct mesh_serve *s, uint64_t now)
{
	if (s->state != MESH_SERVE_STARTING || s->probe_inflight || now < s->probe_next)
		return;
	uint64_t g = s->probe_gen;
	if (write(s->probe_req[1], &g, sizeof g) == (ssize_t)sizeof g)
		s->probe_inflight = 1;
}

static void on_signal(struct mesh_serve *s)
{
	struct signalfd_siginfo si;
	while (read(s->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
		switch (si.ssi_signo) {
		case SIGCHLD:
			reap_children(s);
			break;
		case SIGUSR1:
			mesh__serve_emit_simple(s, MESH_SERVE_EV_STATUS, 0, 0, NULL);
			break;
		default:
			s->quitting++; /* a second one ends the drain at once */
			break;
		}
	}
}

/* The policy's view of now, and the actuation of its answer. */
static void step_policy(struct mesh_serve *s, uint64_t now)
{
	uint64_t demand = mesh__serve_demand(s);
	/* The idle clock starts when the last demand ends (the end of the
	 * last response with --http). */
	if (demand)
		s->busy = 1;
	else if (s->busy) {
		s->busy = 0;
		s->idle_since = now;
	}
	struct mesh_as_obs o = {
		.warm = s->state == MESH_SERVE_WARM,
		.starting = s->state == MESH_SERVE_STARTING,
		.demand = demand,
		.idle = demand ? 0 : (int64_t)(now - s->idle_since),
	};
	struct mesh_as_plan p;
	if (mesh_as_plan(&s->pol, &o, &p) < 0)
		return;
	switch (p.action) {
	case MESH_AS_SPAWN:
		if (s->state == MESH_SERVE_COLD && !s->quitting)
			do_spawn(s);
		break;
	case MESH_AS_SERVE:
		if (s->state == MESH_SERVE_WARM)
			mesh__serve_dispatch_queue(s);
		break;
	case MESH_AS_REAP:
		if (s->state == MESH_SERVE_WARM || s->state == MESH_SERVE_STARTING) {
			char why[64];
			snprintf(why, sizeof why, "idle %.1f s", (double)o.idle / 1e9);
			begin_stop(s, why, s->stop_sig);
		}
		break;
	default:
		break;
	}
}

static void step_timers(struct mesh_serve *s, uint64_t now)
{
	mesh__serve_front_timers(s, now);
	if (s->state == MESH_SERVE_STARTING && now >= s->start_deadline) {
		char why[96];
		drain_output(s);
		size_t nt = mesh_proc_tail_lines(&s->tail, s->tail_view);
		snprintf(why, sizeof why, "not warm within %.1f s", (double)s->c.start_timeout_ns / 1e9);
		/* The probe's last word says why (the model not listed, ...). */
		snprintf(s->fail_msg, sizeof s->fail_msg,
			 "the server did not become ready within the start timeout (%.1f s); last probe: %s",
			 (double)s->c.start_timeout_ns / 1e9, s->last_probe[0] ? s->last_probe : "none finished");
		struct mesh_serve_event ev = {.kind = MESH_SERVE_EV_START_TIMEOUT, .pid = s->pid,
					      .elapsed_ns = now - s->t_spawn, .reason = why, .tail = s->tail_view,
					      .ntail = nt};
		s->st.start_timeouts++;
		emit(s, &ev);
		mesh__serve_reject_queue(s, 504, s->fail_msg);
		begin_stop(s, why, s->stop_sig);
	}
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* The nearest deadline, or UINT64_MAX when none. */
static uint64_t next_deadline(struct mesh_serve *s, uint64_t now)
{
	uint64_t t = mesh__serve_front_deadline(s, UINT64_MAX);
	if (s->state == MESH_SERVE_STARTING) {
		t = min_u64(t, s->start_deadline);
		if (!s->probe_inflight)
			t = min_u64(t, s->probe_next);
	}
	if (s->state == MESH_SERVE_WARM && mesh__serve_demand(s) == 0)
		t = min_u64(t, s->idle_since + s->c.idle_ns);
	if (s->draining == 1)
		t = min_u64(t, s->drain_deadline);
	if (s->state == MESH_SERVE_STOPPING)
		t = min_u64(t, min_u64(now + STOP_POLL_NS, s->stop.killed ? UINT64_MAX : s->stop.deadline));
	return t;
}

/* Arms the timer for the nearest deadline, unless it is armed for that or
 * sooner already (then it may fire early: a pass that finds nothing due
 * arms it again).  So a relay's passes do not touch the timer. */
static void arm_timer(struct mesh_serve *s, uint64_t now)
{
	uint64_t t = next_deadline(s, now);
	if (s->timer_at && t >= s->timer_at)
		return;
	if (t == UINT64_MAX)
		t = now + 60 * MESH_NS_PER_S; /* a safety net; every change comes as an event */
	/* Round up: waking a little late beats spinning on a deadline. */
	uint64_t ms = t <= now ? 0 : (t - now + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS;
	struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
	if (evtimer_add(s->ev_timer, &tv) < 0) {
		s->loop_err = -ENOMEM;
		event_base_loopbreak(s->base);
		return;
	}
	s->timer_at = t; /* (it fires up to a ms later: the same deadline does not arm it again) */
}

/* After a stop signal: stop accepting, let what is in flight finish (up to
 * the drain timeout), then stop the server.  1 when the loop may end. */
static int step_drain(struct mesh_serve *s, uint64_t now)
{
	if (!s->draining) {
		s->draining = 1;
		s->drain_deadline = now + s->c.drain_timeout_ns;
		mesh__serve_unlisten(s);
		mesh__serve_close_idle(s);
		char why[96];
		uint64_t n = s->c.http ? s->inflight : s->active.n;
		snprintf(why, sizeof why, "%llu %s in flight, waiting up to %.1f s", (unsigned long long)n,
			 s->c.http ? "request(s)" : "connection(s)", (double)s->c.drain_timeout_ns / 1e9);
		mesh__serve_emit_simple(s, MESH_SERVE_EV_DRAINING, (int)n, 0, why);
	}
	if (s->draining == 1 && (s->active.n == 0 || now >= s->drain_deadline || s->quitting > 1)) {
		s->draining = 2;
		if (s->state == MESH_SERVE_STARTING || s->state == MESH_SERVE_WARM)
			begin_stop(s, "shutdown", s->stop_sig);
	}
	return s->draining == 2 && s->state == MESH_SERVE_COLD;
}

/* What the pass reads of the clients (its lists, the demand, what waits to
 * be freed): a relay event that leaves all of it as it was needs no pass. */
struct clients_view {
	size_t queued, wanting, active, rejecting, linger;
	uint64_t inflight;
	const struct mesh__conn *dead;
};

static struct clients_view clients_view(const struct mesh_serve *s)
{
	return (struct clients_view){s->queue.n, s->queue_wanting, s->active.n, s->rejecting.n,
				     s->linger.n, s->inflight,      s->dead};
}

static int clients_same(const struct clients_view *a, const struct clients_view *b)
{
	return a->queued == b->queued && a->wanting == b->wanting && a->active == b->active &&
	       a->rejecting == b->rejecting && a->linger == b->linger && a->inflight == b->inflight && a->dead == b->dead;
}

/* Something changed: the pass (timers, the policy, the drain) runs once
 * the current batch of events is done. */
static void kick(struct mesh_serve *s)
{
	if (s->pass_queued)
		return;
	s->pass_queued = 1;
	/* Activated now, it runs after the events this batch already has. */
	event_active(s->ev_pass, EV_TIMEOUT, 0);
}

void mesh__serve_on_fd(evutil_socket_t fd, short what, void *arg)
{
	struct mesh__watch *w = arg;
	struct mesh_serve *s = w->s;
	(void)fd;
	switch (w->kind) {
	case W_LISTEN:
		mesh__serve_accept(s);
		break;
	case W_SIGNAL:
		on_signal(s);
		break;
	case W_OUTPUT:
		drain_output(s);
		break;
	case W_PROBE:
		on_probe(s);
		break;
	case W_CLIENT:
	case W_UPSTREAM: {
		/* libevent reports a hang-up or an error as readable and
		 * writable, to the events that are added: the read or the write
		 * then sees it. */
		struct clients_view v = clients_view(s), after;
		mesh__serve_conn_event(s, w, (what & EV_READ ? EPOLLIN : 0) | (what & EV_WRITE ? EPOLLOUT : 0));
		after = clients_view(s);
		/* Bytes relayed, nothing else: most events of a busy relay. */
		if (clients_same(&v, &after))
			return;
		break;
	}
	}
	kick(s);
}


static void pass(struct mesh_serve *s);

static void on_pass(evutil_socket_t fd, short what, void *arg)
{
	struct mesh_serve *s = arg;
	(void)fd, (void)what;
	s->pass_queued = 0;
	pass(s);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct mesh_serve *s = arg;
	(void)fd, (void)what;
	s->timer_at = 0; /* it is not pending any more */
	pass(s);
}

/* After each batch of events, and at the next deadline: the connections
 * closed in the batch freed, the server's crash, stop, start timeout and
 * probe, the clients' deadlines, the policy's answer, the drain; then the
 * timer is armed for the nearest deadline. */
static void pass(struct mesh_serve *s)
{
	mesh__serve_free_dead(s);
	uint64_t now = mesh_mono_ns();
	if (s->leader_done && (s->state == MESH_SERVE_STARTING || s->state == MESH_SERVE_WARM)) {
		s->stop_reason_crash = 1;
		on_crash(s);
	}
	step_stop(s, now);
	step_timers(s, now);
	step_policy(s, now);
	probe_kick(s, now);
	mesh__serve_free_dead(s);
	now = mesh_mono_ns();
	if (s->quitting && step_drain(s, now)) {
		event_base_loopbreak(s->base);
		return;
	}
	arm_timer(s, now);
}

int mesh_serve_run(struct mesh_serve *s)
{
	int rc = 0;
	{
		struct mesh_serve_event ev = {.kind = MESH_SERVE_EV_LISTENING, .addr = s->listen_addr};
		emit(s, &ev);
	}
	kick(s);
	errno = 0;
	int r = event_base_dispatch(s->base);
	if (r != 0 || s->loop_err) {
		/* epoll_wait failed (r -1), or nothing was left to wait for (1):
		 * the loop cannot go on. */
		rc = s->loop_err ? s->loop_err : errno ? -errno : -EIO;
		s->quitting = 1;
	}
	if (s->state != MESH_SERVE_COLD) {
		/* The loop failed: stop the server without it. */
		mesh_proc_kill_group(s->pid, SIGKILL);
		while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
			;
		finish_stop(s);
	}
	mesh__serve_front_end(s);
	mesh__serve_emit_simple(s, MESH_SERVE_EV_EXIT, 0, 0, NULL);
	return rc;
}

/* The loop: epoll (O(1) per ready fd), no locks (one thread), the
 * environment not consulted (EVENT_NOEPOLL and the like). */
static struct event_base *base_new(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *b = NULL;
	if (!cfg)
		return NULL;
	if (event_config_require_features(cfg, EV_FEATURE_O1) == 0 &&
	    event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK | EVENT_BASE_FLAG_IGNORE_ENV) == 0)
		b = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return b;
}

/* A copy of c's command and log path in s.  0 or -ENOMEM. */
static int copy_command(struct mesh_serve *s, const struct mesh_serve_config *c)
{
	size_t argc = 0;
	while (c->argv[argc])
		argc++;
	s->argv = calloc(argc + 1, sizeof *s->argv);
	s->log_path = strdup(c->log_path ? c->log_path : "mesh-serve.log");
	if (!s->argv || !s->log_path)
		return -ENOMEM;
	for (size_t i = 0; i < argc; i++)
		if (!(s->argv[i] = strdup(c->argv[i])))
			return -ENOMEM;
	return 0;
}

/* The process as serve.h says: RLIMIT_NOFILE raised (and max_conns from
 * it), SIGPIPE ignored, a child subreaper, the signals the loop reads
 * blocked (set: them). */
static void take_process(struct mesh_serve *s, sigset_t *set)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	/* A relayed connection holds 2 fds (pipes only while bytes move): the
	 * default bound leaves room for the loop's own and the pipes. */
	s->max_conns = s->c.max_conns;
	if (!s->max_conns) {
		uint64_t lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : 1048576;
		s->max_conns = lim > 256 ? (uint32_t)((lim - 128) / 2 < UINT32_MAX ? (lim - 128) / 2 : UINT32_MAX) : 64;
	}
	s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	sigemptyset(set);
	sigaddset(set, SIGCHLD);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, set, NULL);
}

/* The loop: its signalfd (set), the probe's pipes, the event_base and
 * the events of the listener, the signals and the probe's answers; the
 * probe's thread.  0 or a negative code with why set. */
static int loop_setup(struct mesh_serve *s, const sigset_t *set, char *why, size_t why_len)
{
	int rc = -ENOMEM;
	s->sfd = signalfd(-1, set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (s->sfd < 0 || pipe2(s->probe_req, O_CLOEXEC) < 0 || pipe2(s->probe_res, O_CLOEXEC | O_NONBLOCK) < 0) {
		snprintf(why, why_len, "cannot set up the event loop");
		return -errno;
	}
	s->base = base_new();
	/* EV_PERSIST: only ever activated; run, it is not taken out. */
	s->ev_pass = s->base ? event_new(s->base, -1, EV_PERSIST, on_pass, s) : NULL;
	s->ev_timer = s->base ? evtimer_new(s->base, on_timer, s) : NULL;
	if (!s->ev_pass || !s->ev_timer || (rc = mesh__serve_watch(s, &s->w_listen, s->lfd, EPOLLIN)) < 0 ||
	    (rc = mesh__serve_watch(s, &s->w_signal, s->sfd, EPOLLIN)) < 0 ||
	    (rc = mesh__serve_watch(s, &s->w_probe, s->probe_res[0], EPOLLIN)) < 0) {
		snprintf(why, why_len, "cannot set up the event loop");
		return !s->ev_pass || !s->ev_timer ? -ENOMEM : rc;
	}
	if ((rc = mesh_thread_start(&s->probe_thread, probe_main, s)) < 0) {
		snprintf(why, why_len, "cannot start the probe thread");
		return rc;
	}
	s->probe_started = 1;
	return 0;
}

int mesh_serve_open(struct mesh_serve **out, const struct mesh_serve_config *c, char *why, size_t why_len)
{
	char dummy[8];
	sigset_t set;
	int rc;
	if (!why) {
		why = dummy;
		why_len = sizeof dummy;
	}
	*why = 0;
	if (!c->argv || !c->argv[0] || !c->listen || !c->upstream || !c->idle_ns || !c->max_queue ||
	    !c->header_timeout_ns || !c->body_timeout_ns) {
		snprintf(why, why_len, "incomplete configuration");
		return MESH_E_RANGE;
	}
	struct mesh_serve *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->c = *c;
	s->lfd = s->sfd = s->logfd = s->out_fd = s->spare_fd = -1;
	s->stop_sig = c->stop_signal > 0 ? c->stop_signal : SIGTERM;
	mesh_relay_pool_init(&s->pool, 16);
	s->probe_req[0] = s->probe_req[1] = s->probe_res[0] = s->probe_res[1] = -1;
	mesh__serve_watch_init(s, &s->w_listen, W_LISTEN, NULL);
	mesh__serve_watch_init(s, &s->w_signal, W_SIGNAL, NULL);
	mesh__serve_watch_init(s, &s->w_output, W_OUTPUT, NULL);
	mesh__serve_watch_init(s, &s->w_probe, W_PROBE, NULL);
	if ((rc = copy_command(s, c)) < 0)
		goto fail;
	if ((rc = mesh_proc_resolve(s->argv[0], &s->path)) < 0) {
		snprintf(why, why_len, "cannot run '%s'", s->argv[0]);
		goto fail;
	}
	if ((rc = mesh__serve_resolve_upstream(s, why, why_len)) < 0)
		goto fail;
	s->popts = (struct mesh_probe_opts)MESH_PROBE_OPTS_INIT;
	s->popts.model = c->model && *c->model ? c->model : NULL;
	s->pol = (struct mesh_as_config){.min_workers = 0, .max_workers = 1, .target_concurrency = 1,
					 .idle_ttl = (int64_t)c->idle_ns, .linger = (int64_t)c->idle_ns};
	s->logfd = open(s->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (s->logfd < 0) {
		rc = -errno;
		snprintf(why, why_len, "cannot open log file '%s'", s->log_path);
		goto fail;
	}
	if ((rc = mesh__serve_listen(s, why, why_len)) < 0)
		goto fail;
	take_process(s, &set);
	if ((rc = loop_setup(s, &set, why, why_len)) < 0)
		goto fail;
	/* After the mask above: the spawner blocks everything on its thread. */
	if ((rc = mesh_proc_spawner_new(&s->sp)) < 0) {
		snprintf(why, why_len, "cannot start the spawner thread");
		goto fail;
	}
	s->t_open = s->idle_since = mesh_mono_ns();
	s->read_next = UINT64_MAX;
	s->state = MESH_SERVE_COLD;
	*out = s;
	return 0;
fail:
	mesh_serve_free(s);
	return rc;
}

void mesh_serve_free(struct mesh_serve *s)
{
	if (!s)
		return;
	if (s->state != MESH_SERVE_COLD && s->pid > 0) {
		mesh_proc_kill_group(s->pid, SIGKILL);
		while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	mesh__serve_front_free(s);
	if (s->probe_req[1] >= 0)
		close(s->probe_req[1]); /* the probe thread ends at EOF */
	if (s->probe_started)
		pthread_join(s->probe_thread, NULL);
	mesh_relay_pool_release(&s->pool);
	struct mesh__watch *ws[] = {&s->w_listen, &s->w_signal, &s->w_output, &s->w_probe};
	for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
		mesh__serve_watch_free(ws[i]);
	if (s->ev_pass)
		event_free(s->ev_pass);
	if (s->ev_timer)
		event_free(s->ev_timer);
	if (s->base)
		event_base_free(s->base);
	int fds[] = {s->probe_req[0], s->probe_res[0], s->probe_res[1], s->lfd, s->sfd, s->logfd, s->out_fd, s->spare_fd};
	for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (s->argv)
		for (size_t i = 0; s->argv[i]; i++)
			free(s->argv[i]);
	free(s->argv);
	free(s->path);
	mesh_proc_spawner_free(s->sp);
	free(s->log_path);
	free(s);
}
