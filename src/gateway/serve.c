#include "gateway/serve.h"

#include "autoscale/policy.h"
#include "autoscale/probe.h"
#include "gateway/relay.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "proc/proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* What an epoll registration points at. */
enum watch_kind { W_LISTEN, W_SIGNAL, W_OUTPUT, W_PROBE, W_CLIENT, W_UPSTREAM };

struct conn;
struct watch {
	enum watch_kind kind;
	struct conn *conn;
};

enum conn_state { C_QUEUED, C_CONNECTING, C_RELAY, C_REJECTING, C_LINGER };

struct conn {
	struct watch w[2]; /* [0] client, [1] upstream */
	int fd[2];
	uint32_t mask[2];  /* registered epoll mask; 0 = not registered */
	enum conn_state state;
	uint64_t deadline; /* queue wait or linger end */
	struct mesh_relay relay;
	int relaying;
	int reject_code, reject_waited;
	int dead; /* closed; freed after the current batch of events */
	const char *reject_why; /* a static string */
	struct conn *prev, *next;
};

struct list {
	struct conn *head, *tail;
	size_t n;
};

/* A connection waits this long for the client to finish after an error
 * answer: closing with unread input would reset the connection and the
 * client could lose the answer. */
#define LINGER_NS (2ull * MESH_NS_PER_S)
/* A client to be refused that has not sent a byte yet gets this long to
 * show whether it speaks HTTP (and so can be told why). */
#define REJECT_WAIT_NS (300ull * MESH_NS_PER_MS)
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
#define ACCEPT_PAUSE_NS (100ull * MESH_NS_PER_MS)

struct probe_msg {
	uint64_t gen;
	struct mesh_probe_result res;
};

struct mesh_serve {
	struct mesh_serve_config c;
	char **argv;
	char *path; /* argv[0] resolved */
	struct mesh_proc_spawner *sp;
	char *log_path;
	struct mesh_probe_target target;
	struct mesh_probe_opts popts;
	struct sockaddr_storage up_addr;
	socklen_t up_len;
	char listen_addr[80];

	int ep, lfd, sfd, logfd;
	struct watch w_listen, w_signal, w_output, w_probe;
	uint32_t listen_mask;
	uint64_t accept_resume;

	/* the probe thread */
	pthread_t probe_thread;
	int probe_started;
	int probe_req[2], probe_res[2];
	uint64_t probe_gen;
	int probe_inflight;
	uint64_t probe_next, probe_interval;

	/* the server */
	int state;
	pid_t pid;
	int leader_done, leader_status;
	int out_fd;
	uint32_t out_mask;
	uint64_t t_spawn, t_stop, start_deadline;
	struct mesh_proc_stop stop;
	int stop_reason_crash;
	struct mesh_proc_tail tail;
	const char *tail_view[MESH_PROC_TAIL_LINES + 1];

	struct list queue, active, rejecting, linger;
	struct conn *dead; /* closed connections, chained by next */
	uint64_t t_open, idle_since, warm_acc;
	int quitting;
	struct mesh_serve_stats st;
	struct mesh_as_config pol;
};

const char *mesh_serve_state_name(int state)
{
	static const char *names[] = {"cold", "starting", "warm", "stopping"};
	return state >= 0 && state < 4 ? names[state] : "?";
}

const char *mesh_serve_event_name(int kind)
{
	static const char *names[] = {"listening", "spawned", "spawn_failed", "warm",    "start_timeout", "crashed",
				      "reaping",   "killed",  "reaped",       "rejected", "status",        "exit"};
	return kind >= 0 && kind < (int)(sizeof names / sizeof names[0]) ? names[kind] : "?";
}

static void list_push(struct list *l, struct conn *c)
{
	c->next = NULL;
	c->prev = l->tail;
	if (l->tail)
		l->tail->next = c;
	else
		l->head = c;
	l->tail = c;
	l->n++;
}

static void list_del(struct list *l, struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		l->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		l->tail = c->prev;
	c->prev = c->next = NULL;
	l->n--;
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

static void emit_simple(struct mesh_serve *s, int kind, int status, uint64_t elapsed, const char *reason)
{
	struct mesh_serve_event ev = {.kind = kind, .pid = s->pid, .status = status, .elapsed_ns = elapsed,
				      .reason = reason};
	emit(s, &ev);
}

static int ep_set(struct mesh_serve *s, int fd, struct watch *w, uint32_t *cur, uint32_t want)
{
	struct epoll_event ev = {.events = want, .data.ptr = w};
	int op;
	if (want == *cur)
		return 0;
	/* A side that wants nothing is taken out of the set: a level-triggered
	 * EPOLLHUP on it would otherwise wake the loop for ever. */
	if (!want)
		op = EPOLL_CTL_DEL;
	else
		op = *cur ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	if (epoll_ctl(s->ep, op, fd, &ev) < 0)
		return -errno;
	*cur = want;
	return 0;
}

static void conn_free(struct mesh_serve *s, struct conn *c)
{
	for (int i = 0; i < 2; i++) {
		if (c->fd[i] >= 0) {
			ep_set(s, c->fd[i], &c->w[i], &c->mask[i], 0);
			close(c->fd[i]);
		}
	}
	if (c->relaying) {
		s->st.bytes_in += c->relay.dir[0].bytes;
		s->st.bytes_out += c->relay.dir[1].bytes;
		mesh_relay_release(&c->relay);
		c->relaying = 0;
	}
	/* The same batch of epoll events may still name c (its other fd):
	 * the memory lives until the batch is done. */
	c->fd[0] = c->fd[1] = -1;
	c->dead = 1;
	c->next = s->dead;
	s->dead = c;
}

static void free_dead(struct mesh_serve *s)
{
	while (s->dead) {
		struct conn *c = s->dead;
		s->dead = c->next;
		free(c);
	}
}

/* A connection left the demand: the idle clock starts when the last goes. */
static void demand_dropped(struct mesh_serve *s)
{
	if (s->queue.n + s->active.n == 0)
		s->idle_since = mesh_mono_ns();
}

static void conn_close_active(struct mesh_serve *s, struct conn *c)
{
	list_del(&s->active, c);
	conn_free(s, c);
	demand_dropped(s);
}

/* 1 when the first bytes the client sent look like an HTTP request line,
 * 0 when they do not (or it closed), -1 when it has sent nothing yet. */
static int looks_http(int fd)
{
	static const char *const methods[] = {"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ",
					      "CONNECT ", "TRACE "};
	char b[16];
	ssize_t n = recv(fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
	if (n < 0 && errno == EAGAIN)
		return -1;
	if (n <= 0)
		return 0;
	for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
		size_t k = strlen(methods[i]);
		if ((size_t)n >= k && !memcmp(b, methods[i], k))
			return 1;
		/* A method cut short: more bytes will tell. */
		if ((size_t)n < k && !memcmp(b, methods[i], (size_t)n))
			return -1;
	}
	return 0;
}

/* Answers a client that will not be relayed (if it speaks HTTP), then
 * lingers to let it read the answer.  c must be in no list. */
static void reject(struct mesh_serve *s, struct conn *c, int code, const char *why)
{
	static const char *const reasons[] = {[2] = "Bad Gateway", [3] = "Service Unavailable", [4] = "Gateway Timeout"};
	int sent = 0, http = looks_http(c->fd[0]);
	if (c->fd[1] >= 0) {
		ep_set(s, c->fd[1], &c->w[1], &c->mask[1], 0);
		close(c->fd[1]);
		c->fd[1] = -1;
	}
	if (c->relaying) {
		mesh_relay_release(&c->relay);
		c->relaying = 0;
	}
	if (http < 0 && !c->reject_waited) {
		c->state = C_REJECTING;
		c->reject_code = code;
		c->reject_why = why;
		c->reject_waited = 1;
		c->deadline = mesh_mono_ns() + REJECT_WAIT_NS;
		if (ep_set(s, c->fd[0], &c->w[0], &c->mask[0], EPOLLIN | EPOLLRDHUP) < 0) {
			conn_free(s, c);
			return;
		}
		list_push(&s->rejecting, c);
		return;
	}
	if (code >= 502 && code <= 504 && http == 1) {
		char msg[512];
		int n = snprintf(msg, sizeof msg,
				 "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n%s"
				 "Connection: close\r\n\r\nmesh serve: %s\n",
				 code, reasons[code - 500], strlen("mesh serve: \n") + strlen(why), code == 503 ? "Retry-After: 5\r\n" : "", why);
		/* Small enough for any socket buffer; a client that cannot take
		 * it now gets the close. */
		sent = send(c->fd[0], msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n;
	}
	s->st.rejected++;
	emit_simple(s, MESH_SERVE_EV_REJECTED, sent ? code : 0, 0, why);
	shutdown(c->fd[0], SHUT_WR);
	c->state = C_LINGER;
	c->deadline = mesh_mono_ns() + LINGER_NS;
	if (ep_set(s, c->fd[0], &c->w[0], &c->mask[0], EPOLLIN | EPOLLRDHUP) < 0) {
		conn_free(s, c);
		return;
	}
	list_push(&s->linger, c);
}

static void reject_queue(struct mesh_serve *s, int code, const char *why)
{
	while (s->queue.head) {
		struct conn *c = s->queue.head;
		list_del(&s->queue, c);
		reject(s, c, code, why);
	}
	demand_dropped(s);
}

static void close_active(struct mesh_serve *s)
{
	while (s->active.head)
		conn_close_active(s, s->active.head);
}

/* Starts the upstream connection of c (queued -> connecting). */
static void dispatch(struct mesh_serve *s, struct conn *c)
{
	int fd = socket(s->up_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0) {
		reject(s, c, 503, "cannot open a connection to the server (no fds?)");
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->fd[1] = fd;
	if (connect(fd, (struct sockaddr *)&s->up_addr, s->up_len) < 0 && errno != EINPROGRESS) {
		reject(s, c, 502, "the server refused the connection");
		return;
	}
	ep_set(s, c->fd[0], &c->w[0], &c->mask[0], 0);
	c->state = C_CONNECTING;
	if (ep_set(s, fd, &c->w[1], &c->mask[1], EPOLLOUT) < 0) {
		reject(s, c, 503, "cannot watch the server connection");
		return;
	}
	list_push(&s->active, c);
}

static void dispatch_queue(struct mesh_serve *s)
{
	while (s->queue.head) {
		struct conn *c = s->queue.head;
		list_del(&s->queue, c);
		dispatch(s, c);
	}
	demand_dropped(s);
}

/* Makes the relay's wishes the registered masks. */
static int relay_update(struct mesh_serve *s, struct conn *c)
{
	for (int i = 0; i < 2; i++) {
		int rc = ep_set(s, c->fd[i], &c->w[i], &c->mask[i], mesh_relay_events(&c->relay, i));
		if (rc < 0)
			return rc;
	}
	return 0;
}

static void on_upstream_connected(struct mesh_serve *s, struct conn *c)
{
	int err = 0;
	socklen_t el = sizeof err;
	if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		err = errno;
	if (err) {
		list_del(&s->active, c);
		demand_dropped(s);
		reject(s, c, 502, "the server refused the connection");
		return;
	}
	mesh_relay_init(&c->relay, c->fd[0], c->fd[1], s->c.relay_flags);
	c->relaying = 1;
	c->state = C_RELAY;
	s->st.served++;
	/* Whatever the client sent while it waited is already readable. */
	int rc = mesh_relay_pump(&c->relay);
	if (rc != 0 || relay_update(s, c) < 0)
		conn_close_active(s, c);
}

static void on_conn_event(struct mesh_serve *s, struct watch *w, uint32_t ev)
{
	struct conn *c = w->conn;
	if (c->dead)
		return;
	switch (c->state) {
	case C_QUEUED:
		/* Only RDHUP/HUP/ERR are watched while queued.  A client that
		 * closed without sending anything is gone; one that sent its
		 * request and half-closed still wants the answer. */
		if (ev & (EPOLLERR | EPOLLHUP)) {
			list_del(&s->queue, c);
			conn_free(s, c);
			demand_dropped(s);
			return;
		}
		{
			char b;
			ssize_t n = recv(c->fd[0], &b, 1, MSG_PEEK | MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
				list_del(&s->queue, c);
				conn_free(s, c);
				demand_dropped(s);
				return;
			}
			ep_set(s, c->fd[0], &c->w[0], &c->mask[0], 0);
		}
		return;
	case C_CONNECTING:
		if (w->kind == W_UPSTREAM)
			on_upstream_connected(s, c);
		return;
	case C_RELAY: {
		int rc = mesh_relay_pump_events(&c->relay, w->kind == W_CLIENT ? 0 : 1, ev);
		if (rc != 0 || relay_update(s, c) < 0)
			conn_close_active(s, c);
		return;
	}
	case C_REJECTING:
		list_del(&s->rejecting, c);
		reject(s, c, c->reject_code, c->reject_why);
		return;
	case C_LINGER: {
		char junk[4096];
		for (int i = 0; i < 16; i++) {
			ssize_t n = recv(c->fd[0], junk, sizeof junk, MSG_DONTWAIT);
			if (n > 0)
				continue;
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				return;
			list_del(&s->linger, c);
			conn_free(s, c);
			return;
		}
		return;
	}
	}
}

static void on_accept(struct mesh_serve *s)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* Out of fds: stop accepting for a moment instead of
				 * spinning on a listener that stays readable. */
				ep_set(s, s->lfd, &s->w_listen, &s->listen_mask, 0);
				s->accept_resume = mesh_mono_ns() + ACCEPT_PAUSE_NS;
			}
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		struct conn *c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			continue;
		}
		c->fd[0] = fd;
		c->fd[1] = -1;
		c->w[0] = (struct watch){W_CLIENT, c};
		c->w[1] = (struct watch){W_UPSTREAM, c};
		if (s->state == MESH_SERVE_WARM) {
			dispatch(s, c);
			continue;
		}
		if (s->queue.n >= s->c.max_queue) {
			reject(s, c, 503, "the queue of connections waiting for the server is full");
			continue;
		}
		c->state = C_QUEUED;
		c->deadline = mesh_mono_ns() + s->c.queue_timeout_ns;
		if (ep_set(s, fd, &c->w[0], &c->mask[0], EPOLLRDHUP) < 0) {
			conn_free(s, c);
			continue;
		}
		list_push(&s->queue, c);
		if (s->queue.n > s->st.queued_max)
			s->st.queued_max = s->queue.n;
	}
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
			ep_set(s, s->out_fd, &s->w_output, &s->out_mask, 0);
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
			ep_set(s, s->out_fd, &s->w_output, &s->out_mask, 0);
			close(s->out_fd);
		}
	}
	s->out_fd = outp[0];
	s->out_mask = 0;
	ep_set(s, s->out_fd, &s->w_output, &s->out_mask, EPOLLIN);
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
		reject_queue(s, 502, "the server could not be started");
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
	s->probe_interval = PROBE_FAST_NS;
	s->st.spawns++;
	log_marker(s, "spawned pid %d", (int)s->pid);
	snprintf(why, sizeof why, "%zu connection(s) waiting", s->queue.n);
	emit_simple(s, MESH_SERVE_EV_SPAWNED, 0, 0, why);
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
		emit_simple(s, MESH_SERVE_EV_REAPING, 0, 0, why);
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
	struct mesh_serve_event ev = {.kind = MESH_SERVE_EV_CRASHED, .pid = s->pid, .status = s->leader_status,
				      .elapsed_ns = now - s->t_spawn, .reason = why, .tail = s->tail_view,
				      .ntail = nt};
	s->st.crashes++;
	log_marker(s, "pid %d exited with status %d", (int)s->pid, s->leader_status);
	emit(s, &ev);
	/* Its connections cannot be answered any more; the queued ones came
	 * for this start.  Later arrivals wait for the next one. */
	close_active(s);
	reject_queue(s, 502, "the server crashed while starting");
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
		emit_simple(s, MESH_SERVE_EV_REAPED, s->leader_status, now - s->t_stop, NULL);
	}
	s->stop_reason_crash = 0;
	close_active(s);
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
		emit_simple(s, MESH_SERVE_EV_KILLED, 0, now - s->t_stop, NULL);
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
	if (m.res.warm) {
		/* Connect where the probe got through (a name may resolve to
		 * several addresses, and the server may listen on one). */
		char host[64];
		const char *a = m.res.addr;
		const char *colon = strrchr(a, ':');
		if (colon && colon > a) {
			size_t hl = (size_t)(colon - a);
			if (a[0] == '[' && hl >= 2 && a[hl - 1] == ']') {
				a++;
				hl -= 2;
			}
			if (hl < sizeof host) {
				memcpy(host, a, hl);
				host[hl] = 0;
				struct sockaddr_in *v4 = (struct sockaddr_in *)&s->up_addr;
				struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&s->up_addr;
				uint16_t port = htons(s->target.port);
				struct in6_addr a6;
				struct in_addr a4;
				if (inet_pton(AF_INET, host, &a4) == 1) {
					memset(&s->up_addr, 0, sizeof s->up_addr);
					v4->sin_family = AF_INET;
					v4->sin_addr = a4;
					v4->sin_port = port;
					s->up_len = sizeof *v4;
				} else if (inet_pton(AF_INET6, host, &a6) == 1) {
					memset(&s->up_addr, 0, sizeof s->up_addr);
					v6->sin6_family = AF_INET6;
					v6->sin6_addr = a6;
					v6->sin6_port = port;
					s->up_len = sizeof *v6;
				}
			}
		}
		s->state = MESH_SERVE_WARM;
		log_marker(s, "pid %d warm after %.3f s", (int)s->pid, (double)(now - s->t_spawn) / 1e9);
		emit_simple(s, MESH_SERVE_EV_WARM, 0, now - s->t_spawn, m.res.reason);
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
			emit_simple(s, MESH_SERVE_EV_STATUS, 0, 0, NULL);
			break;
		default:
			s->quitting = 1;
			break;
		}
	}
}

/* The policy's view of now, and the actuation of its answer. */
static void step_policy(struct mesh_serve *s, uint64_t now)
{
	uint64_t demand = s->queue.n + s->active.n;
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
			dispatch_queue(s);
		break;
	case MESH_AS_REAP:
		if (s->state == MESH_SERVE_WARM || s->state == MESH_SERVE_STARTING) {
			char why[64];
			snprintf(why, sizeof why, "idle %.1f s", (double)o.idle / 1e9);
			begin_stop(s, why, SIGTERM);
		}
		break;
	default:
		break;
	}
}

static void step_timers(struct mesh_serve *s, uint64_t now)
{
	while (s->queue.head && s->queue.head->deadline <= now) {
		struct conn *c = s->queue.head;
		list_del(&s->queue, c);
		reject(s, c, 503, "the server was not ready within the queue timeout");
		demand_dropped(s);
	}
	while (s->rejecting.head && s->rejecting.head->deadline <= now) {
		struct conn *c = s->rejecting.head;
		list_del(&s->rejecting, c);
		reject(s, c, c->reject_code, c->reject_why);
	}
	while (s->linger.head && s->linger.head->deadline <= now) {
		struct conn *c = s->linger.head;
		list_del(&s->linger, c);
		conn_free(s, c);
	}
	if (s->state == MESH_SERVE_STARTING && now >= s->start_deadline) {
		char why[96];
		drain_output(s);
		size_t nt = mesh_proc_tail_lines(&s->tail, s->tail_view);
		snprintf(why, sizeof why, "not warm within %.1f s", (double)s->c.start_timeout_ns / 1e9);
		struct mesh_serve_event ev = {.kind = MESH_SERVE_EV_START_TIMEOUT, .pid = s->pid,
					      .elapsed_ns = now - s->t_spawn, .reason = why, .tail = s->tail_view,
					      .ntail = nt};
		s->st.start_timeouts++;
		emit(s, &ev);
		reject_queue(s, 504, "the server did not become ready within the start timeout");
		begin_stop(s, why, SIGTERM);
	}
	if (!s->listen_mask && s->lfd >= 0 && !s->quitting && now >= s->accept_resume)
		ep_set(s, s->lfd, &s->w_listen, &s->listen_mask, EPOLLIN);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* How long the loop may sleep: until the nearest deadline. */
static int next_wait_ms(struct mesh_serve *s, uint64_t now)
{
	uint64_t t = now + 60 * MESH_NS_PER_S;
	if (s->queue.head)
		t = min_u64(t, s->queue.head->deadline);
	if (s->linger.head)
		t = min_u64(t, s->linger.head->deadline);
	if (s->rejecting.head)
		t = min_u64(t, s->rejecting.head->deadline);
	if (s->state == MESH_SERVE_STARTING) {
		t = min_u64(t, s->start_deadline);
		if (!s->probe_inflight)
			t = min_u64(t, s->probe_next);
	}
	if (s->state == MESH_SERVE_WARM && s->queue.n + s->active.n == 0)
		t = min_u64(t, s->idle_since + s->c.idle_ns);
	if (s->state == MESH_SERVE_STOPPING)
		t = min_u64(t, min_u64(now + STOP_POLL_NS, s->stop.killed ? UINT64_MAX : s->stop.deadline));
	if (!s->listen_mask && s->lfd >= 0 && !s->quitting)
		t = min_u64(t, s->accept_resume);
	if (t <= now)
		return 0;
	/* Round up: waking a little late beats spinning on a deadline. */
	return (int)((t - now + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS);
}

int mesh_serve_run(struct mesh_serve *s)
{
	struct epoll_event evs[64];
	int rc = 0;
	{
		struct mesh_serve_event ev = {.kind = MESH_SERVE_EV_LISTENING, .addr = s->listen_addr};
		emit(s, &ev);
	}
	for (;;) {
		uint64_t now = mesh_mono_ns();
		if (s->quitting) {
			if (s->lfd >= 0) {
				ep_set(s, s->lfd, &s->w_listen, &s->listen_mask, 0);
				close(s->lfd);
				s->lfd = -1;
				reject_queue(s, 503, "mesh serve is shutting down");
				if (s->state != MESH_SERVE_COLD && s->state != MESH_SERVE_STOPPING)
					begin_stop(s, "shutdown", SIGTERM);
			}
			if (s->state == MESH_SERVE_COLD)
				break;
		}
		int n = epoll_wait(s->ep, evs, 64, next_wait_ms(s, now));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			s->quitting = 1;
			break;
		}
		for (int i = 0; i < n; i++) {
			struct watch *w = evs[i].data.ptr;
			switch (w->kind) {
			case W_LISTEN:
				on_accept(s);
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
			case W_UPSTREAM:
				on_conn_event(s, w, evs[i].events);
				break;
			}
		}
		free_dead(s);
		now = mesh_mono_ns();
		if (s->leader_done && (s->state == MESH_SERVE_STARTING || s->state == MESH_SERVE_WARM)) {
			s->stop_reason_crash = 1;
			on_crash(s);
		}
		step_stop(s, now);
		step_timers(s, now);
		step_policy(s, now);
		probe_kick(s, now);
	}
	if (s->state != MESH_SERVE_COLD) {
		/* The loop failed: stop the server without it. */
		mesh_proc_kill_group(s->pid, SIGKILL);
		while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
			;
		finish_stop(s);
	}
	close_active(s);
	/* Those still being refused get their answer now, not a silent close. */
	while (s->rejecting.head) {
		struct conn *c = s->rejecting.head;
		list_del(&s->rejecting, c);
		reject(s, c, c->reject_code, c->reject_why);
	}
	while (s->linger.head) {
		struct conn *c = s->linger.head;
		list_del(&s->linger, c);
		conn_free(s, c);
	}
	free_dead(s);
	emit_simple(s, MESH_SERVE_EV_EXIT, 0, 0, NULL);
	return rc;
}

/* "host:port" / "[v6]:port" into its parts; 0 or MESH_E_PARSE. */
static int split_hostport(const char *spec, char *host, size_t hl, char *port, size_t pl)
{
	const char *h = spec, *he, *p;
	if (*spec == '[') {
		h = spec + 1;
		he = strchr(h, ']');
		if (!he || he[1] != ':')
			return MESH_E_PARSE;
		p = he + 2;
	} else {
		he = strrchr(spec, ':');
		if (!he || memchr(spec, ':', (size_t)(he - spec)))
			return MESH_E_PARSE;
		p = he + 1;
	}
	if (he == h || (size_t)(he - h) >= hl || !*p || strlen(p) >= pl)
		return MESH_E_PARSE;
	for (const char *q = p; *q; q++)
		if (*q < '0' || *q > '9')
			return MESH_E_PARSE;
	if (atol(p) > 65535)
		return MESH_E_PARSE;
	memcpy(host, h, (size_t)(he - h));
	host[he - h] = 0;
	strcpy(port, p);
	return 0;
}

static void format_addr(const struct sockaddr *sa, char *out, size_t n)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *v6 = (const void *)sa;
		inet_ntop(AF_INET6, &v6->sin6_addr, ip, sizeof ip);
		snprintf(out, n, "[%s]:%u", ip, ntohs(v6->sin6_port));
	} else {
		const struct sockaddr_in *v4 = (const void *)sa;
		inet_ntop(AF_INET, &v4->sin_addr, ip, sizeof ip);
		snprintf(out, n, "%s:%u", ip, ntohs(v4->sin_port));
	}
}

static int open_listener(struct mesh_serve *s, char *why, size_t why_len)
{
	char host[256], port[8];
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai;
	if (split_hostport(s->c.listen, host, sizeof host, port, sizeof port) < 0) {
		snprintf(why, why_len, "bad listen address '%s' (want ADDR:PORT or [V6]:PORT)", s->c.listen);
		return MESH_E_PARSE;
	}
	int g = getaddrinfo(host, port, &hints, &ai);
	if (g) {
		snprintf(why, why_len, "cannot resolve listen address '%s': %s", s->c.listen, gai_strerror(g));
		return g == EAI_SYSTEM ? -errno : MESH_E_NOTFOUND;
	}
	int rc = -EADDRNOTAVAIL, one = 1;
	for (struct addrinfo *a = ai; a; a = a->ai_next) {
		int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, a->ai_addr, a->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
			rc = -errno;
			close(fd);
			continue;
		}
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		getsockname(fd, (struct sockaddr *)&ss, &sl);
		format_addr((struct sockaddr *)&ss, s->listen_addr, sizeof s->listen_addr);
		s->lfd = fd;
		rc = 0;
		break;
	}
	freeaddrinfo(ai);
	if (rc < 0)
		snprintf(why, why_len, "cannot listen on '%s'", s->c.listen);
	return rc;
}

static int resolve_upstream(struct mesh_serve *s, char *why, size_t why_len)
{
	char host[256], port[8];
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai;
	if (split_hostport(s->c.upstream, host, sizeof host, port, sizeof port) < 0 || !strcmp(port, "0")) {
		snprintf(why, why_len, "bad upstream address '%s' (want ADDR:PORT or [V6]:PORT)", s->c.upstream);
		return MESH_E_PARSE;
	}
	const char *path = s->c.probe_path ? s->c.probe_path : MESH_PROBE_DEFAULT_PATH;
	if (path[0] != '/' || strlen(path) >= sizeof s->target.path || strpbrk(path, " \t\r\n")) {
		snprintf(why, why_len, "bad probe path '%s' (want /PATH)", path);
		return MESH_E_PARSE;
	}
	mesh_probe_target_default(&s->target);
	snprintf(s->target.host, sizeof s->target.host, "%s", host);
	s->target.port = (uint16_t)atoi(port);
	snprintf(s->target.path, sizeof s->target.path, "%s", path);
	int g = getaddrinfo(host, port, &hints, &ai);
	if (g) {
		snprintf(why, why_len, "cannot resolve upstream '%s': %s", s->c.upstream, gai_strerror(g));
		return g == EAI_SYSTEM ? -errno : MESH_E_NOTFOUND;
	}
	memcpy(&s->up_addr, ai->ai_addr, ai->ai_addrlen);
	s->up_len = ai->ai_addrlen;
	freeaddrinfo(ai);
	return 0;
}

static void add_watch(struct mesh_serve *s, int fd, struct watch *w, enum watch_kind k)
{
	uint32_t cur = 0;
	w->kind = k;
	w->conn = NULL;
	ep_set(s, fd, w, &cur, EPOLLIN);
}

int mesh_serve_open(struct mesh_serve **out, const struct mesh_serve_config *c, char *why, size_t why_len)
{
	char dummy[8];
	int rc;
	if (!why) {
		why = dummy;
		why_len = sizeof dummy;
	}
	*why = 0;
	if (!c->argv || !c->argv[0] || !c->listen || !c->upstream || !c->idle_ns || !c->max_queue) {
		snprintf(why, why_len, "incomplete configuration");
		return MESH_E_RANGE;
	}
	struct mesh_serve *s = calloc(1, sizeof *s);
	if (!s)
		return -ENOMEM;
	s->c = *c;
	s->ep = s->lfd = s->sfd = s->logfd = s->out_fd = -1;
	s->probe_req[0] = s->probe_req[1] = s->probe_res[0] = s->probe_res[1] = -1;
	size_t argc = 0;
	while (c->argv[argc])
		argc++;
	s->argv = calloc(argc + 1, sizeof *s->argv);
	s->log_path = strdup(c->log_path ? c->log_path : "mesh-serve.log");
	if (!s->argv || !s->log_path) {
		rc = -ENOMEM;
		goto fail;
	}
	for (size_t i = 0; i < argc; i++)
		if (!(s->argv[i] = strdup(c->argv[i]))) {
			rc = -ENOMEM;
			goto fail;
		}
	if ((rc = mesh_proc_resolve(s->argv[0], &s->path)) < 0) {
		snprintf(why, why_len, "cannot run '%s'", s->argv[0]);
		goto fail;
	}
	if ((rc = resolve_upstream(s, why, why_len)) < 0)
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
	if ((rc = open_listener(s, why, why_len)) < 0)
		goto fail;

	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	s->sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	s->ep = epoll_create1(EPOLL_CLOEXEC);
	if (s->sfd < 0 || s->ep < 0 || pipe2(s->probe_req, O_CLOEXEC) < 0 ||
	    pipe2(s->probe_res, O_CLOEXEC | O_NONBLOCK) < 0) {
		rc = -errno;
		snprintf(why, why_len, "cannot set up the event loop");
		goto fail;
	}
	add_watch(s, s->lfd, &s->w_listen, W_LISTEN);
	s->listen_mask = EPOLLIN;
	add_watch(s, s->sfd, &s->w_signal, W_SIGNAL);
	add_watch(s, s->probe_res[0], &s->w_probe, W_PROBE);
	s->w_output = (struct watch){W_OUTPUT, NULL};
	if ((rc = -pthread_create(&s->probe_thread, NULL, probe_main, s)) < 0) {
		snprintf(why, why_len, "cannot start the probe thread");
		goto fail;
	}
	s->probe_started = 1;
	/* After the mask above: the spawner blocks everything on its thread. */
	if ((rc = mesh_proc_spawner_new(&s->sp)) < 0) {
		snprintf(why, why_len, "cannot start the spawner thread");
		goto fail;
	}
	s->t_open = s->idle_since = mesh_mono_ns();
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
	struct list *lists[] = {&s->queue, &s->active, &s->rejecting, &s->linger};
	for (int i = 0; i < 4; i++)
		while (lists[i]->head) {
			struct conn *c = lists[i]->head;
			list_del(lists[i], c);
			conn_free(s, c);
		}
	free_dead(s);
	if (s->probe_req[1] >= 0)
		close(s->probe_req[1]); /* the probe thread ends at EOF */
	if (s->probe_started)
		pthread_join(s->probe_thread, NULL);
	int fds[] = {s->probe_req[0], s->probe_res[0], s->probe_res[1], s->ep, s->lfd, s->sfd, s->logfd, s->out_fd};
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
