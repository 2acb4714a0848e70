/* The gateway's warm path on a few event loops: each client connection is
 * served by one loop thread (a libevent event_base of its own: raw
 * edge-triggered events on non-blocking sockets, buffers of its own)
 * while its requests go to a program that is warm and has a place; a
 * request that needs anything else (a cold start or a wait for a place,
 * a chunked body, Expect, an error answer of meshd's own, GET /v1/models)
 * hands its connection to a thread of its own (gw.c's one_request, which
 * reads the request again from the buffered bytes), which gives it back
 * once that request is answered.  Why: a thread per connection costs two thread wake-ups and a
 * poll per request; a loop under load serves many events a wake-up.
 * Same behaviour as gw.c's relay: the response is passed on as it comes
 * (a client that does not read stops the reading of the program's
 * connection), hframe finds its end, the limits (request, response start,
 * idle stream) are checked by a scan every 20 ms, a client that closes
 * (or half-closes, or resets) its connection takes its request with it.
 * The loops themselves, and the connections they keep to the programs:
 * gw_loop_run.c. */
#include "gateway/gw_loop_int.h"

#include "base/clock.h"
#include "http/hframe.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

static void unlink_conn(struct lconn *lc)
{
	struct mesh__gw_loop *L = lc->L;
	if (lc->prev)
		lc->prev->next = lc->next;
	else
		L->conns = lc->next;
	if (lc->next)
		lc->next->prev = lc->prev;
	lc->prev = lc->next = NULL;
}

/* Ends the connection; freed when the event's callback returns (the
 * functions it called may still look at it). */
static void kill_conn(struct lconn *lc)
{
	if (lc->state == S_DEAD)
		return;
	lc->state = S_DEAD;
	unlink_conn(lc);
	event_del(mesh__gwl_ev_client(lc));
	mesh__gwl_up_close(lc);
	lc->dead_next = lc->L->dead;
	lc->L->dead = lc;
}

/* Gives the connection to a thread of its own, which reads the request
 * again from the buffer (after this batch of events). */
static void hand_off(struct lconn *lc)
{
	lc->handoff = 1;
	kill_conn(lc);
}

/* The request's end for the drain: not busy; the connection ends when
 * meshd is draining. */
static void set_idle(struct lconn *lc, int *close_it)
{
	struct mesh_gw *g = lc->c.g;
	pthread_mutex_lock(&g->mu);
	lc->c.link.busy = 0;
	g->busy--;
	pthread_cond_broadcast(&g->cv_all);
	if (g->draining)
		*close_it = 1;
	pthread_mutex_unlock(&g->mu);
}

/* A place for a request to p when it is warm and has one now (nothing
 * waits before it), with a kept connection to it if there is one: the
 * warm half of gw_prog.c's mesh__gw_acquire and mesh__gw_pool_get under
 * one lock.  0, or -1 (the request goes to a thread, which waits). */
static int try_acquire(struct lconn *lc, struct mesh__gw_prog *p)
{
	struct mesh_gw *g = lc->c.g;
	int rc = -1;
	lc->up = -1;
	pthread_mutex_lock(&g->mu);
	if (!g->draining && p->state == GW_WARM && !p->waiting &&
	    (!p->m.max_concurrency || p->inflight < p->m.max_concurrency)) {
		p->inflight++;
		p->requests++;
		lc->port = p->port;
		lc->c.link.busy = 1;
		g->busy++;
		rc = 0;
	}
	pthread_mutex_unlock(&g->mu);
	return rc;
}

/* The framer of the response: the request is framed here already (a head
 * parsed, Content-Length or no body), not fed to it byte by byte. */
static void start_frame(struct lconn *lc)
{
	mesh_hframe_init(&lc->f);
	mesh_hframe_request(&lc->f, !strcmp(lc->r.method, "HEAD"), !strcmp(lc->r.method, "CONNECT"));
}

static void serve(struct lconn *lc);

/* A new connection to the program (none kept, or the kept one was closed
 * by it), and the request sent on it. */
static int up_connect(struct lconn *lc)
{
	static const int one = 1;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)lc->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	lc->reused = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
		close(fd);
		return -1;
	}
	return mesh__gwl_up_wrap(lc, fd);
}

/* The request's end: the program's connection kept or closed, the counts,
 * the access line; then the next request on the connection, if any. */
static void end_request(struct lconn *lc, int code)
{
	struct mesh_gw *g = lc->c.g;
	struct mesh__gw_prog *p = lc->p;
	int close_it = lc->r.close;
	lc->L->nrelay--;
	mesh__gwl_up_close(lc); /* not kept (mesh__gwl_relay() keeps a whole response's) */
	if (code == -1)
		lc->o.client_close = 1;
	mesh__gw_release(p);
	mesh__gw_count(p, code == 0, 0);
	int status = mesh__gw_relay_end(g, p, lc->c.link.fd, code, &lc->o, lc->port, &close_it);
	mesh__gw_access(g, &lc->r, lc->model, status, 0, lc->o.bytes, lc->t0);
	size_t used = lc->r.head_len + (size_t)lc->r.cl;
	memmove(lc->c.buf, lc->c.buf + used, lc->c.have - used);
	lc->c.have -= used;
	lc->hscan = 0;
	lc->nout = lc->outoff = 0;
	set_idle(lc, &close_it);
	lc->state = S_HEAD;
	lc->last_io = mesh_mono_ns();
	if (close_it) {
		kill_conn(lc);
		return;
	}
	serve(lc);
}

/* Sends what is pending for the client.  0 all sent, 1 the socket is full
 * (its EV_WRITE resumes), -1 the client is gone. */
static int flush_out(struct lconn *lc)
{
	while (lc->outoff < lc->nout) {
		ssize_t w = send(lc->c.link.fd, lc->out + lc->outoff, lc->nout - lc->outoff, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			return 1;
		if (w <= 0)
			return -1;
		lc->outoff += (size_t)w;
	}
	lc->nout = lc->outoff = 0;
	return 0;
}

/* Passes a..an then b..bn to the client; what its socket does not take
 * now is kept (out) and the program's connection is not read meanwhile.
 * 0, 1 (kept), -1 (the client is gone). */
static int to_client(struct lconn *lc, const char *a, size_t an, const char *b, size_t bn)
{
	struct iovec iov[2] = {{(void *)a, an}, {(void *)b, bn}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
	size_t total = an + bn, w = 0;
	for (;;) {
		ssize_t n = sendmsg(lc->c.link.fd, &mh, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return -1;
		w = n > 0 ? (size_t)n : 0;
		break;
	}
	lc->o.bytes += total;
	if (w == total)
		return 0;
	size_t left = total - w;
	if (left > lc->outcap) {
		char *nb = realloc(lc->out, left);
		if (!nb)
			return -1;
		lc->out = nb;
		lc->outcap = left;
	}
	lc->nout = 0;
	lc->outoff = 0;
	if (w < an) {
		memcpy(lc->out, a + w, an - w);
		lc->nout = an - w;
		w = 0;
	} else {
		w -= an;
	}
	if (bn > w) { /* b may be NULL when there is no second piece */
		memcpy(lc->out + lc->nout, b + w, bn - w);
		lc->nout += bn - w;
	}
	return 1;
}

/* The status of a response's first bytes "HTTP/1.x NNN ...", 0 if none. */
static int status_of(const char *p, size_t n)
{
	size_t i = 7;
	int st = 0;
	if (n < 12 || memcmp(p, "HTTP/1.", 7))
		return 0;
	while (i < n && p[i] >= '0' && p[i] <= '9')
		i++;
	while (i < n && p[i] == ' ')
		i++;
	for (int k = 0; k < 3 && i < n && p[i] >= '0' && p[i] <= '9'; k++)
		st = st * 10 + (p[i++] - '0');
	return st;
}

/* Sends the rest of the request to the program. */
void mesh__gwl_send_request(struct lconn *lc)
{
	const char *rest = lc->c.buf + lc->r.fwd_off;
	size_t nline = lc->nline, nrest = lc->r.head_len - lc->r.fwd_off + (size_t)lc->r.cl;
	while (lc->sent < nline + nrest) {
		struct iovec iov[2];
		int k = 0;
		if (lc->sent < nline)
			iov[k++] = (struct iovec){lc->line + lc->sent, nline - lc->sent};
		size_t roff = lc->sent > nline ? lc->sent - nline : 0;
		iov[k++] = (struct iovec){(void *)(rest + roff), nrest - roff};
		struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
		ssize_t n = sendmsg(lc->up, &mh, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return; /* its EV_WRITE (or a connect's end) resumes */
		if (n <= 0) {
			mesh__gwl_up_close(lc);
			if (lc->reused && up_connect(lc) == 0) { /* a kept connection the program had closed */
				lc->sent = 0;
				continue;
			}
			end_request(lc, 502);
			return;
		}
		lc->sent += (size_t)n;
	}
	lc->state = S_RELAY;
	lc->last_read = mesh_mono_ns();
	/* The answer comes with an event (the connection is in the loop
	 * already): no recv that would find nothing yet. */
	if (lc->rdhup)
		mesh__gwl_relay(lc);
}

/* Reads the program's response while the client takes it. */
void mesh__gwl_relay(struct lconn *lc)
{
	static const int one = 1;
	struct mesh__gw_loop *L = lc->L;
	if (lc->rdhup) { /* the client left (or half-closed) before its answer's end */
		lc->o.gone = 1;
		end_request(lc, -1);
		return;
	}
	while (lc->state == S_RELAY && !lc->nout) {
		ssize_t n = recv(lc->up, L->buf, sizeof L->buf, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		lc->last_read = mesh_mono_ns();
		if (n <= 0 && !lc->got && lc->reused) { /* a kept connection the program had closed */
			mesh__gwl_up_close(lc);
			if (up_connect(lc)) {
				end_request(lc, 502);
				return;
			}
			lc->state = S_SEND;
			lc->sent = 0;
			start_frame(lc);
			mesh__gwl_send_request(lc);
			return;
		}
		lc->got |= n > 0;
		if (n <= 0) {
			mesh_hframe_eof(&lc->f, 1);
			if (lc->f.inflight == 0 && !lc->pending_line) {
				lc->o.client_close = 1;
				end_request(lc, 0);
			} else {
				end_request(lc, lc->o.bytes ? -1 : 502);
			}
			return;
		}
		if (mesh_hframe_feed(&lc->f, 1, L->buf, (size_t)n)) {
			end_request(lc, lc->o.bytes ? -1 : 502);
			return;
		}
		lc->done = lc->f.inflight == 0;
		/* Kept for the next request when the response ended whole and
		 * neither side asked for the connection's end; before its last
		 * bytes go to the client, whose next request may want it. */
		if (lc->done && !lc->r.close && strcmp(lc->r.version, "HTTP/1.0") && !lc->f.tunnel) {
			mesh__gwl_up_keep(lc);
		} else if (!lc->done) {
			/* ACK at once while more is to come: on a kept connection
			 * the kernel's delayed ACK would hold a program that writes
			 * a stream in small pieces without TCP_NODELAY (Nagle) 40 ms
			 * per piece. */
			setsockopt(lc->up, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
		}
		const char *p = L->buf;
		size_t len = (size_t)n;
		int rc;
		if (lc->pending_line) {
			size_t take = len < sizeof lc->pre - lc->npre ? len : sizeof lc->pre - lc->npre;
			memcpy(lc->pre + lc->npre, p, take);
			lc->npre += take;
			p += take;
			len -= take;
			if (!memchr(lc->pre, '\n', lc->npre) && lc->npre < sizeof lc->pre && !lc->done)
				continue;
			lc->pending_line = 0;
			lc->o.status = status_of(lc->pre, lc->npre);
			rc = to_client(lc, lc->pre, lc->npre, p, len);
		} else {
			rc = to_client(lc, p, len, NULL, 0);
		}
		if (rc < 0) {
			end_request(lc, -1);
			return;
		}
		if (lc->done && rc == 0) {
			end_request(lc, 0);
			return;
		}
		/* A short read took all there was, and the next bytes come
		 * with an event; but a close that came with these bytes was
		 * reported with them (EV_CLOSED), and will not be again: read
		 * on to it. */
		if ((size_t)n < sizeof L->buf && !(lc->u && lc->u->rdhup))
			return;
	}
}

/* The request(s) in the buffer: served here when warm, else handed off. */
static void serve(struct lconn *lc)
{
	struct mesh__gw_client *c = &lc->c;
	struct mesh_gw *g = c->g;
	for (;;) {
		if (lc->state != S_HEAD)
			return;
		size_t hl = mesh_hframe_head_end(c->buf, c->have, &lc->hscan);
		if (!hl) {
			if (c->have >= MESH_HFRAME_MAX_HEAD) {
				hand_off(lc); /* 431 */
				return;
			}
		} else {
			struct mesh__gw_req *r = &lc->r;
			/* A thread answers what is refused (reading it again). */
			if (mesh__gw_parse_head(c->buf, hl, r) || r->te || r->expect || r->cl > g->c.max_body) {
				hand_off(lc);
				return;
			}
			if (c->have >= hl + (size_t)r->cl)
				break;
			if (mesh__gw_grow(c, hl + (size_t)r->cl) < 0) {
				kill_conn(lc);
				return;
			}
		}
		if (!lc->readable)
			return; /* the next bytes come with an event */
		if (c->have == c->cap && mesh__gw_grow(c, c->cap + 1) < 0) {
			kill_conn(lc);
			return;
		}
		ssize_t n = recv(c->link.fd, c->buf + c->have, c->cap - c->have, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			lc->readable = 0;
			return;
		}
		if (n <= 0) {
			kill_conn(lc);
			return;
		}
		if ((size_t)n < c->cap - c->have)
			lc->readable = 0; /* a short read took what there was */
		c->have += (size_t)n;
		lc->last_io = mesh_mono_ns();
	}
	/* Routing, as gw.c's one_request; what it does not serve warm here
	 * goes to a thread. */
	struct mesh__gw_req *r = &lc->r;
	char upath[2100];
	const char *path = r->target;
	size_t qlen = strcspn(r->target, "?");
	lc->model[0] = 0;
	if (!strncmp(r->target, "/upstream/", 10)) {
		mesh__gw_upstream_split(r->target, lc->model, sizeof lc->model, upath, sizeof upath);
		path = upath;
	} else if (!strcmp(r->method, "POST") && !strncmp(r->target, "/v1/", 4) &&
		   !((qlen == 10 || qlen == 11) && !strncmp(r->target, "/v1/models/", qlen))) {
		char *m = mesh__gw_body_model(c->buf + r->head_len, (size_t)r->cl);
		if (m)
			snprintf(lc->model, sizeof lc->model, "%.299s", m);
		free(m);
	}
	struct mesh__gw_prog *p = lc->model[0] ? mesh__gw_find(g, lc->model) : NULL;
	if (!p || try_acquire(lc, p)) {
		hand_off(lc);
		return;
	}
	lc->p = p;
	lc->t0 = mesh_mono_ns();
	mesh__gw_req_forward(c->buf, r);
	/* The request line as gw.c's "%s %s %s\r\n", without printf's cost. */
	size_t ml = strlen(r->method), pl = strlen(path), vl = strlen(r->version);
	if (ml + pl + vl + 5 > sizeof lc->line) /* cannot be: 24 + 2100 + 16 */
		pl = sizeof lc->line - ml - vl - 5;
	char *w = lc->line;
	memcpy(w, r->method, ml);
	w += ml;
	*w++ = ' ';
	memcpy(w, path, pl);
	w += pl;
	*w++ = ' ';
	memcpy(w, r->version, vl);
	w += vl;
	memcpy(w, "\r\n", 3);
	lc->nline = (size_t)(w + 2 - lc->line);
	memset(&lc->o, 0, sizeof lc->o);
	lc->got = lc->done = 0;
	lc->pending_line = 1;
	lc->npre = lc->sent = 0;
	mesh__gwl_relay_begins(lc->L);
	lc->state = S_SEND;
	/* A connection this loop keeps; else one gw_prog.c's pool keeps (a
	 * thread's), into this loop for good; else a new one. */
	lc->reused = mesh__gwl_up_take(lc) == 0;
	if (!lc->reused) {
		int fd = mesh__gw_pool_get(p, lc->port);
		lc->reused = fd >= 0 && mesh__gwl_up_wrap(lc, fd) == 0;
	}
	start_frame(lc);
	if (!lc->reused && up_connect(lc)) {
		end_request(lc, 502);
		return;
	}
	mesh__gwl_send_request(lc);
}

/* The limits of the requests in flight, the keep-alive bound of the idle
 * connections. */
void mesh__gwl_scan(struct mesh__gw_loop *L, uint64_t now)
{
	const struct mesh_gw_config *gc = &L->g->c;
	for (struct lconn *lc = L->conns, *next; lc; lc = next) {
		next = lc->next;
		if (lc->state == S_HEAD) {
			if (now - lc->last_io >= KEEPALIVE_NS)
				kill_conn(lc);
			continue;
		}
		uint64_t req_deadline = lc->t0 + gc->request_timeout_ns,
			 read_deadline = lc->last_read + (lc->got ? gc->idle_stream_timeout_ns : gc->response_timeout_ns),
			 deadline = read_deadline < req_deadline ? read_deadline : req_deadline;
		if (lc->state == S_SEND)
			deadline = req_deadline;
		if (now >= deadline) {
			lc->o.timeout = deadline == req_deadline ? 1 : lc->got ? 3 : 2;
			end_request(lc, lc->o.bytes ? -1 : 504);
		}
	}
}

/* A read event on the client while its request is in flight: bytes of its
 * next request (pipelined: kept for later), or its end.  libevent reports an
 * error or a hang-up as EV_READ | EV_WRITE without EV_CLOSED: one peek
 * tells. */
static int client_gone(struct lconn *lc)
{
	char b;
	ssize_t n = recv(lc->c.link.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

static void on_client(struct lconn *lc, short ev)
{
	if (ev & EV_CLOSED)
		lc->rdhup = 1;
	if (ev & (EV_READ | EV_CLOSED))
		lc->readable = 1;
	switch (lc->state) {
	case S_HEAD:
		serve(lc);
		break;
	case S_SEND:
		if (!lc->rdhup && (ev & EV_READ) && client_gone(lc))
			lc->rdhup = 1;
		if (lc->rdhup) {
			lc->o.gone = 1;
			end_request(lc, -1);
		}
		break;
	case S_RELAY:
		if (lc->nout) {
			int rc = flush_out(lc);
			if (rc < 0) {
				end_request(lc, -1);
				return;
			}
			if (rc == 0 && lc->done) {
				end_request(lc, 0);
				return;
			}
			if (rc)
				return;
		}
		if (!lc->rdhup && (ev & EV_READ) && client_gone(lc))
			lc->rdhup = 1;
		if (lc->rdhup) {
			lc->o.gone = 1;
			end_request(lc, -1);
			return;
		}
		if (ev & EV_WRITE)
			mesh__gwl_relay(lc); /* resumes the program's side after a full client socket */
		break;
	}
}

void mesh__gwl_reap_dead(struct mesh__gw_loop *L)
{
	while (L->dead) {
		struct lconn *lc = L->dead;
		L->dead = lc->dead_next;
		free(lc->out);
		lc->out = NULL;
		if (lc->handoff) {
			int fd = lc->c.link.fd, fl = fcntl(fd, F_GETFL);
			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
			if (mesh__gw_conn_thread(&lc->c) == 0)
				continue;
		}
		mesh__gw_conn_free(&lc->c);
	}
}

void mesh__gwl_on_client_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lconn *lc = arg;
	struct mesh__gw_loop *L = lc->L;
	(void)fd;
	on_client(lc, what);
	mesh__gwl_reap_dead(L);
}
