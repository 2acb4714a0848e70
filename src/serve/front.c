/* mesh serve's front: the clients.  The listener, accept, the bounded
 * queue of connections waiting for warm, the error answers (HTTP when the
 * client speaks it, then a linger), each connection's relay to the server,
 * and the addresses on both sides; and the registration of fds with the
 * loop's event_base.  See serve_int.h. */
#include "http/http.h"
#include "serve/serve_int.h"

#include "base/clock.h"
#include "base/err.h"

#include <event2/event.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h> /* the EPOLLIN / EPOLLOUT bits of a watch's mask (serve_int.h) */
#include <sys/socket.h>
#include <unistd.h>

/* A connection waits this long for the client to finish after an error
 * answer: closing with unread input would reset the connection and the
 * client could lose the answer. */
#define LINGER_NS (2ull * MESH_NS_PER_S)
/* A client to be refused that has not sent a byte yet gets this long to
 * show whether it speaks HTTP (and so can be told why). */
#define REJECT_WAIT_NS (300ull * MESH_NS_PER_MS)
#define ACCEPT_PAUSE_NS (100ull * MESH_NS_PER_MS)

/* The loop's registrations (see serve_int.h); serve.c's mesh__serve_on_fd
 * gets the events. */
void mesh__serve_watch_init(struct mesh_serve *s, struct mesh__watch *w, enum mesh__watch_kind kind, struct mesh__conn *conn)
{
	*w = (struct mesh__watch){.kind = kind, .conn = conn, .s = s, .fd = -1};
}

void mesh__serve_watch_free(struct mesh__watch *w)
{
	for (int i = 0; i < 2; i++)
		if (w->ev[i]) {
			event_free(w->ev[i]);
			w->ev[i] = NULL;
		}
	w->mask = 0;
}

int mesh__serve_watch(struct mesh_serve *s, struct mesh__watch *w, int fd, uint32_t want)
{
	static const uint32_t bit[2] = {EPOLLIN, EPOLLOUT};
	static const short flags[2] = {EV_READ | EV_PERSIST, EV_WRITE | EV_PERSIST};
	if (want == w->mask && fd == w->fd)
		return 0; /* the common case: the relay called after every pump */
	if (fd != w->fd) {
		/* Another fd (the server's next output pipe): the events are
		 * set again for it. */
		for (int i = 0; i < 2; i++)
			if (w->mask & bit[i])
				event_del(w->ev[i]);
		w->mask = 0;
		w->fd = fd;
		for (int i = 0; i < 2; i++)
			if (w->ev[i] && event_assign(w->ev[i], s->base, fd, flags[i], mesh__serve_on_fd, w) < 0)
				return -EINVAL;
	}
	/* A side that wants nothing is out of the set: a level-triggered
	 * EPOLLHUP on it would otherwise wake the loop for ever. */
	for (int i = 0; i < 2; i++) {
		if ((want & bit[i]) == (w->mask & bit[i]))
			continue;
		if (!(want & bit[i])) {
			event_del(w->ev[i]);
			w->mask &= ~bit[i];
			continue;
		}
		if (!w->ev[i] && !(w->ev[i] = event_new(s->base, fd, flags[i], mesh__serve_on_fd, w)))
			return -ENOMEM;
		errno = 0;
		if (event_add(w->ev[i], NULL) < 0)
			return errno ? -errno : -ENOMEM;
		w->mask |= bit[i];
	}
	return 0;
}

static void list_push(struct mesh__conn_list *l, struct mesh__conn *c)
{
	mesh_list_push(l, c, link);
	l->n++;
}

static void list_del(struct mesh__conn_list *l, struct mesh__conn *c)
{
	mesh_list_remove(l, c, link);
	l->n--;
}

/* Takes c out of the queue, and out of the demand it was part of. */
static void queue_del(struct mesh_serve *s, struct mesh__conn *c)
{
	list_del(&s->queue, c);
	if (c->wants) {
		c->wants = 0;
		s->queue_wanting--;
	}
}

static void conn_free(struct mesh_serve *s, struct mesh__conn *c)
{
	for (int i = 0; i < 2; i++) {
		if (c->fd[i] >= 0) {
			mesh__serve_watch(s, &c->w[i], c->fd[i], 0);
			close(c->fd[i]);
		}
	}
	if (c->relaying) {
		s->st.bytes_in += c->relay.dir[0].bytes;
		s->st.bytes_out += c->relay.dir[1].bytes;
		mesh_relay_release(&c->relay);
		c->relaying = 0;
	}
	/* What was in flight on it ends with it. */
	s->inflight -= c->counted;
	c->counted = 0;
	free(c->reject_why);
	c->reject_why = NULL;
	/* Its events are out of the loop now; the memory lives until the
	 * pass after this batch (the callers up the stack still look at c). */
	c->fd[0] = c->fd[1] = -1;
	c->dead = 1;
	c->link.next = s->dead;
	s->dead = c;
}

void mesh__serve_free_dead(struct mesh_serve *s)
{
	while (s->dead) {
		struct mesh__conn *c = s->dead;
		s->dead = c->link.next;
		mesh__serve_watch_free(&c->w[0]);
		mesh__serve_watch_free(&c->w[1]);
		free(c);
	}
}

uint64_t mesh__serve_demand(const struct mesh_serve *s)
{
	if (!s->c.http)
		return s->queue.n + s->active.n;
	return s->inflight + s->queue_wanting;
}

static void conn_close_active(struct mesh_serve *s, struct mesh__conn *c)
{
	list_del(&s->active, c);
	conn_free(s, c);
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

static const char *reason_of(int code)
{
	switch (code) {
	case 400: return "Bad Request";
	case 408: return "Request Timeout";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	}
	return NULL;
}

/* Sends one short HTTP error answer; 1 when it went out whole. */
static int send_error(int fd, int code, const char *reason, const char *why)
{
	char body[768], msg[1024];
	int bl = snprintf(body, sizeof body, "mesh serve: %s\n", why);
	if (bl >= (int)sizeof body) {
		bl = (int)sizeof body - 1;
		body[bl - 1] = '\n';
	}
	int n = snprintf(msg, sizeof msg,
			 "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n%s"
			 "Connection: close\r\n\r\n%s",
			 code, reason, bl, code == 503 ? "Retry-After: 5\r\n" : "", body);
	/* Small enough for any socket buffer; a client that cannot take it
	 * now gets the close. */
	return send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) == n;
}

/* Answers a client that will not be relayed (if it speaks HTTP), then
 * lingers to let it read the answer.  c must be in no list. */
static void reject(struct mesh_serve *s, struct mesh__conn *c, int code, const char *why)
{
	/* --http: every client speaks it, and is answered at once. */
	int sent = 0, http = s->c.http ? 1 : looks_http(c->fd[0]);
	if (c->fd[1] >= 0) {
		mesh__serve_watch(s, &c->w[1], c->fd[1], 0);
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
		if (why != c->reject_why) {
			free(c->reject_why);
			c->reject_why = strdup(why);
			if (!c->reject_why) {
				conn_free(s, c);
				return;
			}
		}
		c->reject_waited = 1;
		c->deadline = mesh_mono_ns() + REJECT_WAIT_NS;
		if (mesh__serve_watch(s, &c->w[0], c->fd[0], EPOLLIN) < 0) {
			conn_free(s, c);
			return;
		}
		list_push(&s->rejecting, c);
		return;
	}
	if (reason_of(code) && http == 1)
		sent = send_error(c->fd[0], code, reason_of(code), why);
	s->st.rejected++;
	mesh__serve_emit_simple(s, MESH_SERVE_EV_REJECTED, sent ? code : 0, 0, why);
	free(c->reject_why);
	c->reject_why = NULL;
	shutdown(c->fd[0], SHUT_WR);
	c->state = C_LINGER;
	c->deadline = mesh_mono_ns() + LINGER_NS;
	if (mesh__serve_watch(s, &c->w[0], c->fd[0], EPOLLIN) < 0) {
		conn_free(s, c);
		return;
	}
	list_push(&s->linger, c);
}

void mesh__serve_reject_queue(struct mesh_serve *s, int code, const char *why)
{
	while (s->queue.head) {
		struct mesh__conn *c = s->queue.head;
		queue_del(s, c);
		reject(s, c, code, why);
	}
}

/* --http: c's relay is to end with the server's side gone (closed, reset,
 * its process gone) or a malformed request (code 400) while a request on
 * it waits for its answer and nothing of that answer went to the client:
 * the client is answered code and why (and the connection ends), not left
 * with an empty reply.  1 when so (c is out of the active list), 0 when
 * not (nothing waits, or an answer is under way: the end of the connection
 * without the answer's end is what tells the client). */
static int answer_instead(struct mesh_serve *s, struct mesh__conn *c, int code, const char *why)
{
	/* A 400 or a 408 answers the request being read alone: none before it
	 * waits. */
	unsigned waiting = c->hf.inflight;
	if (!s->c.http || c->state != C_RELAY || !waiting || ((code == 400 || code == 408) && waiting != 1) ||
	    mesh_hframe_answer_begun(&c->hf) || c->relay.dir[1].pending)
		return 0;
	list_del(&s->active, c);
	s->inflight -= c->counted; /* not demand while it lingers */
	c->counted = 0;
	s->st.bytes_in += c->relay.dir[0].bytes;
	s->st.bytes_out += c->relay.dir[1].bytes;
	reject(s, c, code, why); /* releases the relay */
	return 1;
}

void mesh__serve_close_active(struct mesh_serve *s, const char *why)
{
	while (s->active.head)
		if (!answer_instead(s, s->active.head, 502, why))
			conn_close_active(s, s->active.head);
}

/* Starts the upstream connection of c (queued -> connecting). */
static void dispatch(struct mesh_serve *s, struct mesh__conn *c)
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
	mesh__serve_watch(s, &c->w[0], c->fd[0], 0);
	c->state = C_CONNECTING;
	if (mesh__serve_watch(s, &c->w[1], fd, EPOLLOUT) < 0) {
		reject(s, c, 503, "cannot watch the server connection");
		return;
	}
	list_push(&s->active, c);
}

void mesh__serve_dispatch_queue(struct mesh_serve *s)
{
	while (s->queue.head) {
		struct mesh__conn *c = s->queue.head;
		queue_del(s, c);
		dispatch(s, c);
	}
}

/* --http, a relayed connection: when the client will have taken too long
 * over the request it is sending (UINT64_MAX: it sends none).  While the
 * server has not taken what the client sent, the scan puts the body's
 * clock on (read_timeouts): that wait is the server's. */
static uint64_t read_deadline(const struct mesh_serve *s, const struct mesh__conn *c)
{
	if (!s->c.http || c->state != C_RELAY || c->dead)
		return UINT64_MAX;
	switch (mesh_hframe_reading(&c->hf, 0)) {
	case 1:
		return c->head_t0 ? c->head_t0 + s->c.header_timeout_ns : UINT64_MAX;
	case 2:
		return c->last_in + s->c.body_timeout_ns;
	}
	return UINT64_MAX;
}

/* The read timeouts: a client past one is answered 408 when no answer is
 * under way on its connection (else the connection is cut), which ends
 * its request's demand.  Run when the nearest deadline comes (read_next);
 * finds the next.  A byte of a body moves its deadline on without a scan:
 * the scan that finds it early only looks again later. */
static void read_timeouts(struct mesh_serve *s, uint64_t now)
{
	s->read_next = UINT64_MAX;
	for (struct mesh__conn *c = s->active.head, *next; c; c = next) {
		next = c->link.next;
		if (c->state == C_RELAY && c->relay.dir[0].pending)
			c->last_in = now; /* the server's wait is not the client's: look again later */
		uint64_t d = read_deadline(s, c);
		if (d > now) {
			if (d < s->read_next)
				s->read_next = d;
			continue;
		}
		char why[128];
		int head = mesh_hframe_reading(&c->hf, 0) == 1;
		snprintf(why, sizeof why,
			 head ? "the request head did not arrive whole within the header timeout (%.1f s)"
			      : "no byte of the request body came within the body timeout (%.1f s)",
			 (double)(head ? s->c.header_timeout_ns : s->c.body_timeout_ns) / 1e9);
		if (!answer_instead(s, c, 408, why)) {
			mesh__serve_emit_simple(s, MESH_SERVE_EV_REJECTED, 0, 0, why);
			conn_close_active(s, c);
		}
	}
}

/* The relay's watcher (--http): the framing of both directions, and the
 * requests in flight it finds, added to the server's count. */
static int conn_watch(void *ctx, int dir, const char *p, size_t n)
{
	struct mesh__conn *c = ctx;
	struct mesh_serve *s = c->s;
	int rc = p ? mesh_hframe_feed(&c->hf, dir, p, n) : mesh_hframe_eof(&c->hf, dir);
	s->inflight = s->inflight - c->counted + c->hf.inflight;
	c->counted = c->hf.inflight;
	s->st.requests += c->hf.requests - c->requests;
	c->requests = c->hf.requests;
	if (dir == 0 && p) {
		/* the client's bytes: the read timeouts' clocks */
		c->last_in = mesh_mono_ns();
		if (mesh_hframe_reading(&c->hf, 0) != 1)
			c->head_t0 = 0;
		else if (!c->head_t0)
			c->head_t0 = c->last_in;
		uint64_t d = read_deadline(s, c);
		if (d < s->read_next)
			s->read_next = d;
	}
	/* The server's side ended while a request waits for its answer's
	 * first byte: the relay ends before the client's side is shut, so
	 * that the client can be answered (relay_after). */
	if (!p && dir == 1 && c->hf.inflight && !mesh_hframe_answer_begun(&c->hf))
		return MESH_E_CLOSED;
	return rc < 0 ? rc : 0;
}

/* Makes the relay's wishes the registered masks. */
static int relay_update(struct mesh_serve *s, struct mesh__conn *c)
{
	for (int i = 0; i < 2; i++) {
		int rc = mesh__serve_watch(s, &c->w[i], c->fd[i], mesh_relay_events(&c->relay, i));
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int conn_idle(const struct mesh__conn *c);

/* After a pump: the relay's end, its masks, the drain. */
static void relay_after(struct mesh_serve *s, struct mesh__conn *c, int rc)
{
	if (rc == MESH_E_PROTO || rc == MESH_E_TOOBIG) {
		char why[160];
		int d = c->hf.side[0].err ? 0 : 1;
		snprintf(why, sizeof why, "malformed HTTP from the %s: %s", d ? "server" : "client", mesh_hframe_why(&c->hf, d));
		if (answer_instead(s, c, d ? 502 : 400, why))
			return; /* the refusal that answers says why */
		mesh__serve_emit_simple(s, MESH_SERVE_EV_REJECTED, 0, 0, why);
	} else if (rc == MESH_E_CLOSED || (rc < 0 && c->relay.failed_side == 1)) {
		char why[160];
		snprintf(why, sizeof why, "the server %s the connection before it answered",
			 rc == MESH_E_CLOSED ? "closed" : "reset");
		if (answer_instead(s, c, 502, why))
			return;
	}
	if (rc != 0 || relay_update(s, c) < 0) {
		conn_close_active(s, c);
		return;
	}
	if (s->draining && s->c.http && conn_idle(c))
		conn_close_active(s, c);
}

static void on_upstream_connected(struct mesh_serve *s, struct mesh__conn *c)
{
	int err = 0;
	socklen_t el = sizeof err;
	if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &err, &el) < 0)
		err = errno;
	if (err) {
		list_del(&s->active, c);
		reject(s, c, 502, "the server refused the connection");
		return;
	}
	struct mesh_relay_opts ro = {s->c.relay_flags, &s->pool, s->c.http ? conn_watch : NULL, c};
	if (s->c.http)
		mesh_hframe_init(&c->hf);
	mesh_relay_init_opts(&c->relay, c->fd[0], c->fd[1], &ro);
	c->relaying = 1;
	c->state = C_RELAY;
	s->st.served++;
	/* Whatever the client sent while it waited is already readable. */
	relay_after(s, c, mesh_relay_pump(&c->relay));
}

/* Drain: a connection with nothing in flight and nothing on its way has
 * no more business (a keep-alive client reconnects elsewhere). */
static int conn_idle(const struct mesh__conn *c)
{
	return c->state == C_CONNECTING || (c->state == C_RELAY && !c->counted && !mesh_relay_busy(&c->relay));
}

void mesh__serve_close_idle(struct mesh_serve *s)
{
	if (!s->c.http)
		return;
	for (struct mesh__conn *c = s->active.head, *next; c; c = next) {
		next = c->link.next;
		if (conn_idle(c))
			conn_close_active(s, c);
	}
}

void mesh__serve_conn_event(struct mesh_serve *s, struct mesh__watch *w, uint32_t ev)
{
	struct mesh__conn *c = w->conn;
	if (c->dead)
		return;
	switch (c->state) {
	case C_QUEUED:
		/* Watched only until its first byte.  A client that closed
		 * (or was reset) without sending anything is gone; one that
		 * sent its request and half-closed still wants the answer. */
		{
			char b;
			ssize_t n = recv(c->fd[0], &b, 1, MSG_PEEK | MSG_DONTWAIT);
			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
				queue_del(s, c);
				conn_free(s, c);
				return;
			}
			if (n > 0 && !c->wants) {
				/* --http: its first byte makes it demand; its wait
				 * for the server starts now. */
				list_del(&s->queue, c);
				c->wants = 1;
				s->queue_wanting++;
				c->deadline = mesh_mono_ns() + s->c.queue_timeout_ns;
				list_push(&s->queue, c);
			}
			if (n > 0)
				mesh__serve_watch(s, &c->w[0], c->fd[0], 0);
		}
		return;
	case C_CONNECTING:
		if (w->kind == W_UPSTREAM)
			on_upstream_connected(s, c);
		return;
	case C_RELAY:
		relay_after(s, c, mesh_relay_pump_events(&c->relay, w->kind == W_CLIENT ? 0 : 1, ev));
		return;
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

/* Out of fds: the spare fd is given up for the time it takes to accept one
 * client and tell it so (503 to an HTTP client), so that a flood past the
 * fd limit is answered instead of left hanging in the backlog. */
static int refuse_without_fds(struct mesh_serve *s)
{
	if (s->spare_fd < 0)
		return 0;
	close(s->spare_fd);
	s->spare_fd = -1;
	int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), sent = 0;
	if (fd >= 0) {
		static const char why[] = "no file descriptors left for another connection";
		if (s->c.http || looks_http(fd) == 1)
			sent = send_error(fd, 503, "Service Unavailable", why);
		shutdown(fd, SHUT_WR);
		close(fd);
		s->st.rejected++;
		mesh__serve_emit_simple(s, MESH_SERVE_EV_REJECTED, sent ? 503 : 0, 0, why);
	}
	s->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return fd >= 0;
}

void mesh__serve_accept(struct mesh_serve *s)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;
		if (fd < 0) {
			if ((errno == EMFILE || errno == ENFILE) && refuse_without_fds(s))
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				/* Out of fds: stop accepting for a moment instead of
				 * spinning on a listener that stays readable. */
				mesh__serve_watch(s, &s->w_listen, s->lfd, 0);
				s->accept_resume = mesh_mono_ns() + ACCEPT_PAUSE_NS;
			}
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		struct mesh__conn *c = calloc(1, sizeof *c);
		if (!c) {
			close(fd);
			continue;
		}
		c->fd[0] = fd;
		c->fd[1] = -1;
		c->s = s;
		mesh__serve_watch_init(s, &c->w[0], W_CLIENT, c);
		mesh__serve_watch_init(s, &c->w[1], W_UPSTREAM, c);
		if (s->queue.n + s->active.n >= s->max_conns) {
			reject(s, c, 503, "too many connections (--max-conns)");
			continue;
		}
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
		/* --http: a connection is demand from its first byte (watched
		 * for), unless --start-on-connect. */
		c->wants = !s->c.http || s->c.start_on_connect;
		if (mesh__serve_watch(s, &c->w[0], fd, EPOLLIN) < 0) {
			conn_free(s, c);
			continue;
		}
		s->queue_wanting += (size_t)c->wants;
		list_push(&s->queue, c);
		if (s->queue.n > s->st.queued_max)
			s->st.queued_max = s->queue.n;
	}
}

void mesh__serve_front_timers(struct mesh_serve *s, uint64_t now)
{
	while (s->queue.head && s->queue.head->deadline <= now) {
		struct mesh__conn *c = s->queue.head;
		queue_del(s, c);
		reject(s, c, 503, "the server was not ready within the queue timeout");
	}
	while (s->rejecting.head && s->rejecting.head->deadline <= now) {
		struct mesh__conn *c = s->rejecting.head;
		list_del(&s->rejecting, c);
		reject(s, c, c->reject_code, c->reject_why);
	}
	while (s->linger.head && s->linger.head->deadline <= now) {
		struct mesh__conn *c = s->linger.head;
		list_del(&s->linger, c);
		conn_free(s, c);
	}
	if (now >= s->read_next)
		read_timeouts(s, now);
	if (!s->w_listen.mask && s->lfd >= 0 && !s->quitting && now >= s->accept_resume)
		mesh__serve_watch(s, &s->w_listen, s->lfd, EPOLLIN);
}

uint64_t mesh__serve_front_deadline(const struct mesh_serve *s, uint64_t t)
{
	const struct mesh__conn_list *lists[] = {&s->queue, &s->linger, &s->rejecting};
	for (int i = 0; i < 3; i++)
		if (lists[i]->head && lists[i]->head->deadline < t)
			t = lists[i]->head->deadline;
	if (!s->w_listen.mask && s->lfd >= 0 && !s->quitting && s->accept_resume < t)
		t = s->accept_resume;
	if (s->read_next < t)
		t = s->read_next;
	return t;
}

void mesh__serve_unlisten(struct mesh_serve *s)
{
	if (s->lfd < 0)
		return;
	mesh__serve_watch(s, &s->w_listen, s->lfd, 0);
	close(s->lfd);
	s->lfd = -1;
	mesh__serve_reject_queue(s, 503, "mesh serve is shutting down");
}

void mesh__serve_front_end(struct mesh_serve *s)
{
	mesh__serve_close_active(s, "mesh serve stopped before the server answered");
	/* Those still being refused get their answer now, not a silent close. */
	while (s->rejecting.head) {
		struct mesh__conn *c = s->rejecting.head;
		list_del(&s->rejecting, c);
		reject(s, c, c->reject_code, c->reject_why);
	}
	while (s->linger.head) {
		struct mesh__conn *c = s->linger.head;
		list_del(&s->linger, c);
		conn_free(s, c);
	}
	mesh__serve_free_dead(s);
}

void mesh__serve_front_free(struct mesh_serve *s)
{
	struct mesh__conn_list *lists[] = {&s->queue, &s->active, &s->rejecting, &s->linger};
	for (int i = 0; i < 4; i++)
		while (lists[i]->head) {
			struct mesh__conn *c = lists[i]->head;
			if (lists[i] == &s->queue)
				queue_del(s, c);
			else
				list_del(lists[i], c);
			conn_free(s, c);
		}
	mesh__serve_free_dead(s);
}

void mesh__serve_pin_upstream(struct mesh_serve *s, const char *a)
{
	char host[64];
	const char *colon = strrchr(a, ':');
	if (!colon || colon == a)
		return;
	size_t hl = (size_t)(colon - a);
	if (a[0] == '[' && hl >= 2 && a[hl - 1] == ']') {
		a++;
		hl -= 2;
	}
	if (hl >= sizeof host)
		return;
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

int mesh__serve_listen(struct mesh_serve *s, char *why, size_t why_len)
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
		mesh_addr_text((struct sockaddr *)&ss, s->listen_addr, sizeof s->listen_addr);
		s->lfd = fd;
		rc = 0;
		break;
	}
	freeaddrinfo(ai);
	if (rc < 0)
		snprintf(why, why_len, "cannot listen on '%s'", s->c.listen);
	return rc;
}

int mesh__serve_resolve_upstream(struct mesh_serve *s, char *why, size_t why_len)
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
