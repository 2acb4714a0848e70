/* The gateway's front: a few event loops, each a thread with a libevent
 * event_base of its own (raw edge-triggered events on non-blocking
 * sockets, buffers of its own), that serve every client connection from
 * its accept to its close.  A connection's requests, one at a time:
 *
 *   S_HEAD    its head is read (the framer's strict reading: http/hframe.h)
 *             and a Content-Length body; a chunked one is decoded by the
 *             framer as it comes (S_BODY) and goes on with Content-Length;
 *   route     by model: what meshd answers itself (GET /v1/models, the
 *             errors) is written to the connection (S_ANSWER), the others
 *             take a place in their program (gw_prog.c's mesh__gw_acquire);
 *   S_WAIT    a request that must wait (a cold start, the backoff after a
 *             failed one, the queue of a program at max_concurrency, room
 *             in the memory budget) is parked on its loop: an event, not a
 *             thread; the programs call the look hook when what it waits
 *             for changes, and the loop asks for its place again (a
 *             backoff's end is a timer; a client that leaves, its event);
 *   S_SEND,   the request goes to the program, the response is relayed as
 *   S_RELAY   it comes (a client that does not read stops the reading of
 *             the program's connection: backpressure), the framer finds its
 *             end; the limits (request, response start, idle stream) are
 *             checked by a scan every 20 ms; a client that closes (or
 *             half-closes, or resets) its connection takes its request with
 *             it.
 *
 * Each loop keeps its connections to the programs in its events from their
 * connect to their close (no epoll_ctl and no lock for them a request);
 * one the program closes while kept idle is closed.  The accept thread
 * (gw.c) gives connections to the loops in turn through an eventfd.  See
 * gw_loop.h; the locking of the programs' state, gw_prog.h. */
#include "gateway/gw_loop.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/list.h"
#include "base/thread.h"
#include "gateway/gw_answer.h"
#include "gateway/gw_json.h"
#include "http/hframe.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define SCAN_NS 20000000ull	      /* the limits' resolution */
#define KEEPALIVE_NS 300000000000ull /* a client connection silent this long between requests */
#define MAX_LOOPS 4
/* Idle connections a loop keeps, to all its programs. */
#define LOOP_IDLE_MAX 256
/* The scan's period while a loop keeps idle connections: one to a program
 * that is stopping is closed within it (an idle connection must not hold up
 * a graceful stop). */
#define IDLE_CHECK_NS 100000000ull

enum { S_HEAD, S_BODY, S_WAIT, S_SEND, S_RELAY, S_ANSWER, S_DEAD };

/* A request, its head parsed. */
struct req {
	char method[24];
	char target[2048];
	char version[16];
	size_t head_len; /* bytes of the head, blank line included */
	/* Where the header lines that go to the program start: the request
	 * line before them is meshd's own (after mesh_hframe_head_forward
	 * dropped the hop-by-hop fields). */
	size_t fwd_off;
	uint64_t cl;
	int te, close, expect; /* te: the body is chunked; expect: as hframe's */
	struct mesh_hframe_head h;
};

/* How a relay of one response ended. */
struct relay_out {
	int status;
	size_t bytes;
	int client_close; /* the response ended with the upstream's close, or was cut */
	int gone;	  /* the client went away first */
	int timeout;	  /* past a limit: 1 request, 2 response start, 3 idle stream */
	uint64_t t_first; /* when the answer's first byte went to the client (0: none yet) */
};

struct upc;

/* One client connection, on one loop for its whole life. */
struct lconn {
	struct mesh_gw *g;
	struct mesh__gw_conn link; /* in g->conns: the drain's view (fd, busy) */
	struct mesh__gw_loop *L;
	MESH_LINK(struct lconn) ln; /* the loop's connections (its scan); incoming: chained by ln.next */
	struct lconn *pnext;	   /* the loop's parked ones (S_WAIT), in order */
	int state;
	int readable; /* edge-triggered: the client may have bytes unread */
	int rdhup;    /* the client closed its sending side */
	int idle;     /* no request begun on it (link.idle_since set) */
	uint64_t last_io;
	/* The header timeout's start for the head being read: the accept for
	 * a new connection's first, the first byte for a later one (0: none
	 * begun on a kept connection). */
	uint64_t head_t0;
	char *buf; /* bytes read and not yet used (the next request's first) */
	size_t have, cap;
	size_t hscan; /* mesh_hframe_head_end's place in the buffer's head */
	/* The request in progress. */
	struct req r;
	char model[300], line[2300];
	size_t nline;
	int continued; /* 100 Continue sent */
	size_t bpos;   /* S_BODY: where the framer's reading is in buf */
	struct mesh_buf body; /* S_BODY: the chunked body decoded so far */
	struct mesh__gw_prog *p;
	/* The request's hold on its program (mesh__gw_hold), from its route
	 * to its end: p, or the program an answer of meshd's own was for. */
	struct mesh__gw_prog *held;
	int64_t keep;		/* its body's keep_alive (gw_json.h) */
	struct mesh__gw_wait w; /* its wait for a place */
	uint64_t t0, t_q;	/* the head read (routed; 0: not yet); the wait's start */
	uint64_t queued_ns;	/* how long it waited for a start or a place (0: none) */
	int waited;		/* the request was parked (waited) */
	int close_it;		/* the connection ends after the answer */
	/* Header lines every answer to the request carries (each ending CRLF,
	 * after the status line): for an allowed Origin, its CORS fields. */
	char xh[640];
	size_t nxh;
	char rid[MESH_GW_RID_MAX + 1]; /* the request's id (X-Request-Id; "": not yet) */
	int cors; /* xh names the Origin: the program's own CORS fields are dropped */
	struct upc *u; /* the program's connection of the request (NULL: none) */
	int port, up, reused, got, pending_line, done, cold; /* up: u's fd, or -1 */
	size_t sent; /* of the line and the rest, to the program */
	struct mesh_hframe f; /* the response's framing; S_BODY: the request's */
	struct relay_out o;
	uint64_t last_read;
	char pre[8192]; /* the response's first bytes, until its status line is whole */
	size_t npre;
	char *out; /* bytes for the client its socket did not take yet */
	size_t nout, outoff, outcap;
	struct lconn *dead_next;
	/* The client connection's event follows the struct (ev_client). */
};

/* A connection of a loop to a program: in the loop's events from its
 * connect to its close, the request's while one uses it, else in the
 * loop's idle list (no lock: only its loop uses it). */
struct upc {
	struct mesh__gw_loop *L;
	struct upc *next; /* idle list */
	struct mesh__gw_prog *p;
	int port, fd;
	/* The program closed its side (EV_CLOSED): the bytes read so far may
	 * not be the last, and no event will come for the close again. */
	int rdhup;
	struct lconn *owner; /* the request using it; NULL: idle */
	struct event *ev;
};

struct mesh__gw_loop {
	struct mesh_gw *g;
	struct event_base *base;
	struct event *wake, *tick; /* evfd's; the scan's timer */
	/* The first loop's: the programs' tick (mesh__gw_progs_tick) at
	 * progs_at (L->mu; 0: none), its timer set for progs_set (loop thread). */
	struct event *progs;
	uint64_t progs_at, progs_set;
	int evfd, tick_fast;	    /* tick is armed at SCAN_NS (else slower: arm_tick) */
	pthread_t th;
	int started;
	pthread_mutex_t mu;	/* incoming, stop, look */
	struct lconn *incoming;	/* from the accept thread, chained by ln.next */
	int stop, look;		/* asked by other threads */
	MESH_LIST(struct lconn) conns; /* newest first */
	struct lconn *dead;
	struct lconn *parked, *parked_tail; /* S_WAIT, oldest first */
	uint64_t parked_until;	/* the nearest backoff's end of a parked one (0: none) */
	unsigned nrelay;
	struct upc *idle; /* kept connections to programs, newest first */
	unsigned nidle;
	char buf[65536];
};

static void serve(struct lconn *lc);
static void relay(struct lconn *lc);
static void send_request(struct lconn *lc);
static void on_client_cb(evutil_socket_t fd, short what, void *arg);
static void on_up_cb(evutil_socket_t fd, short what, void *arg);
static void arm_tick(struct mesh__gw_loop *L, int fast);

/* ---- The client connection's life ---- */

/* Its event lives after the struct, in the same allocation, assigned with
 * event_assign: no allocation per connection. */
static struct event *ev_client(struct lconn *lc)
{
	return (struct event *)(void *)((char *)lc + ((sizeof *lc + 15) & ~(size_t)15));
}

static void unlink_conn(struct lconn *lc)
{
	mesh_list_remove(&lc->L->conns, lc, ln);
}

static void park(struct lconn *lc)
{
	struct mesh__gw_loop *L = lc->L;
	lc->state = S_WAIT;
	lc->waited = 1;
	lc->pnext = NULL;
	if (L->parked_tail)
		L->parked_tail->pnext = lc;
	else
		L->parked = lc;
	L->parked_tail = lc;
	if (lc->w.until && (!L->parked_until || lc->w.until < L->parked_until)) {
		L->parked_until = lc->w.until;
		arm_tick(L, L->tick_fast); /* its backoff's end */
	}
}

static void unpark(struct lconn *lc)
{
	struct mesh__gw_loop *L = lc->L;
	struct lconn **pp = &L->parked, *prev = NULL;
	while (*pp && *pp != lc) {
		prev = *pp;
		pp = &(*pp)->pnext;
	}
	if (!*pp)
		return;
	*pp = lc->pnext;
	if (L->parked_tail == lc)
		L->parked_tail = prev;
	lc->pnext = NULL;
}

static void up_close(struct lconn *lc);

/* A request is begun on it (or it ends): it is no longer one a cap may
 * close for room. */
static void set_begun(struct lconn *lc)
{
	if (lc->idle) {
		lc->idle = 0;
		atomic_store_explicit(&lc->link.idle_since, 0, memory_order_relaxed);
	}
}

/* No request is begun on it since now. */
static void set_unbegun(struct lconn *lc, uint64_t now)
{
	lc->idle = 1;
	atomic_store_explicit(&lc->link.idle_since, now, memory_order_relaxed);
}

/* Ends the connection; freed when the event's callback returns (the
 * functions it called may still look at it). */
static void kill_conn(struct lconn *lc)
{
	if (lc->state == S_DEAD)
		return;
	if (lc->state == S_WAIT) {
		unpark(lc);
		mesh__gw_acquire_cancel(&lc->w);
	}
	lc->state = S_DEAD;
	set_begun(lc);
	unlink_conn(lc);
	event_del(ev_client(lc));
	up_close(lc);
	lc->dead_next = lc->L->dead;
	lc->L->dead = lc;
}

/* Frees the connections ended by this callback. */
static void reap_dead(struct mesh__gw_loop *L)
{
	while (L->dead) {
		struct lconn *lc = L->dead;
		struct mesh_gw *g = lc->g;
		L->dead = lc->dead_next;
		pthread_mutex_lock(&g->mu);
		mesh__gw_conn_unlink(g, &lc->link);
		pthread_mutex_unlock(&g->mu);
		shutdown(lc->link.fd, SHUT_WR);
		/* What the client sent that was not read goes first: a close
		 * with bytes unread sends a reset, which may overtake the
		 * answer just written (a 408, a 400) and lose it. */
		char junk[4096];
		for (int i = 0; i < 16 && recv(lc->link.fd, junk, sizeof junk, MSG_DONTWAIT) > 0; i++) {
		}
		close(lc->link.fd);
		mesh__gw_unhold(lc->held);
		mesh_buf_release(&lc->body);
		free(lc->out);
		free(lc->buf);
		free(lc);
	}
}

/* Grows the buffer to hold at least want bytes (doubling from 16 KiB: a
 * head read in pieces is not a realloc per piece).  0 or -1. */
static int grow(struct lconn *lc, size_t want)
{
	size_t cap = lc->cap ? lc->cap : 16384;
	while (cap < want)
		cap *= 2;
	if (cap == lc->cap)
		return 0;
	char *nb = realloc(lc->buf, cap);
	if (!nb)
		return -1;
	lc->buf = nb;
	lc->cap = cap;
	return 0;
}

/* Reads what the client sent into the buffer: 1 bytes came, 0 none now
 * (the next come with an event), -1 the client is gone (or no memory). */
static int read_client(struct lconn *lc)
{
	for (;;) {
		if (!lc->readable)
			return 0;
		if (lc->have == lc->cap && grow(lc, lc->cap + 1) < 0)
			return -1;
		ssize_t n = recv(lc->link.fd, lc->buf + lc->have, lc->cap - lc->have, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			lc->readable = 0;
			return 0;
		}
		if (n <= 0)
			return -1;
		if ((size_t)n < lc->cap - lc->have)
			lc->readable = 0; /* a short read took what there was */
		lc->have += (size_t)n;
		lc->last_io = mesh_mono_ns();
		if (lc->state == S_HEAD && !lc->r.head_len) {
			set_begun(lc);
			if (!lc->head_t0)
				lc->head_t0 = lc->last_io;
		}
		return 1;
	}
}

/* Sends what is pending for the client.  0 all sent, 1 the socket is full
 * (its EV_WRITE resumes), -1 the client is gone. */
static int flush_out(struct lconn *lc)
{
	while (lc->outoff < lc->nout) {
		ssize_t w = send(lc->link.fd, lc->out + lc->outoff, lc->nout - lc->outoff, MSG_NOSIGNAL);
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

/* Passes the pieces to the client; what its socket does not take now is
 * kept (out: the program's connection is not read meanwhile, and an
 * answer's end waits for it).  0, 1 (kept), -1 (the client is gone). */
static int to_client(struct lconn *lc, struct iovec *iov, int niov)
{
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
	size_t total = 0, w = 0;
	for (int i = 0; i < niov; i++)
		total += iov[i].iov_len;
	for (;;) {
		ssize_t n = sendmsg(lc->link.fd, &mh, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			return -1;
		w = n > 0 ? (size_t)n : 0;
		break;
	}
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
	lc->nout = lc->outoff = 0;
	for (int i = 0; i < niov; i++) {
		size_t len = iov[i].iov_len;
		if (w >= len) {
			w -= len;
			continue;
		}
		memcpy(lc->out + lc->nout, (char *)iov[i].iov_base + w, len - w);
		lc->nout += len - w;
		w = 0;
	}
	return 1;
}

/* The request's end for the drain: not busy; the connection ends when
 * meshd is draining. */
static void set_idle(struct lconn *lc)
{
	struct mesh_gw *g = lc->g;
	pthread_mutex_lock(&g->mu);
	if (lc->link.busy) {
		lc->link.busy = 0;
		g->busy--;
		pthread_cond_broadcast(&g->cv_all);
	}
	if (g->draining)
		lc->close_it = 1;
	pthread_mutex_unlock(&g->mu);
}

/* The request is done (answered, relayed, or refused): its bytes leave the
 * buffer; the next request on the connection, or its end. */
static void next_request(struct lconn *lc)
{
	size_t used = lc->r.head_len + (size_t)lc->r.cl;
	if (used > lc->have)
		used = lc->have;
	memmove(lc->buf, lc->buf + used, lc->have - used);
	lc->have -= used;
	memset(&lc->r, 0, sizeof lc->r);
	lc->hscan = 0;
	lc->continued = 0;
	lc->p = NULL;
	mesh__gw_unhold(lc->held);
	lc->held = NULL;
	lc->t0 = 0;
	lc->nxh = 0;
	lc->cors = 0;
	lc->rid[0] = 0;
	set_idle(lc);
	lc->state = S_HEAD;
	lc->last_io = mesh_mono_ns();
	/* Pipelined bytes begin the next head now; else its first byte will. */
	lc->head_t0 = lc->have ? lc->last_io : 0;
	if (!lc->have && !lc->close_it)
		set_unbegun(lc, lc->last_io);
	if (lc->close_it) {
		kill_conn(lc);
		return;
	}
	serve(lc);
}

/* The request's id (the client's X-Request-Id, id[0..n), when sane, else a
 * new one) as the first of the fields its answers carry. */
static void rid_field(struct lconn *lc, const char *id, size_t n)
{
	if (id) {
		memcpy(lc->rid, id, n);
		lc->rid[n] = 0;
	} else {
		n = mesh__gw_request_id(lc->g, lc->rid);
	}
	memcpy(lc->xh, "X-Request-Id: ", 14);
	memcpy(lc->xh + 14, lc->rid, n);
	memcpy(lc->xh + 14 + n, "\r\n", 2);
	lc->nxh = 16 + n;
}

/* An answer of meshd's own in b (status for the access line; close_it:
 * the connection ends after it) goes to the client, then the next request.
 * To HEAD, only its head (Content-Length kept: the GET's).  b is released. */
static void answer(struct lconn *lc, struct mesh_buf *b, int status, int close_it)
{
	if (!lc->nxh)
		rid_field(lc, NULL, 0); /* refused before it was routed */
	if (lc->nxh && mesh__gw_answer_insert(b, 0, lc->xh, lc->nxh) < 0)
		mesh_buf_release(b);
	if (b->p && !strcmp(lc->r.method, "HEAD")) {
		const char *end = memmem(b->p, b->len, "\r\n\r\n", 4);
		if (end)
			b->len = (size_t)(end + 4 - b->p);
	}
	struct iovec iov = {b->p, b->len};
	int rc = b->p ? to_client(lc, &iov, 1) : -1;
	mesh_buf_release(b);
	if (lc->t0) /* a request that was routed (a refused one is not) */
		mesh__gw_access(lc->g, lc->r.method, lc->r.target, lc->model, lc->p ? lc->p->img.name : NULL, status,
				lc->w.cold, 0, lc->t0, lc->rid);
	lc->close_it |= close_it;
	if (rc < 0) {
		kill_conn(lc);
		return;
	}
	if (rc == 1) {
		lc->state = S_ANSWER; /* the rest with EV_WRITE */
		return;
	}
	next_request(lc);
}

/* An error answer (OpenAI's shape) to the request in progress. */
static void answer_error(struct lconn *lc, int code, const char *type, const char *errcode, const char *msg,
			 unsigned retry_after, int close_it)
{
	struct mesh_buf b = MESH_BUF_INIT;
	mesh__gw_answer_error(&b, code, type, errcode, msg, retry_after, close_it);
	answer(lc, &b, code, close_it);
}

/* A request that could not be read: refused, and the connection ends. */
static void refuse(struct lconn *lc, int code, const char *msg)
{
	answer_error(lc, code, "invalid_request_error", NULL, msg, 0, 1);
}

/* ---- Reading a request ---- */

/* The request head in buf[0..head_len) read by the framer's strict parser
 * into r.  0, or the HTTP status to refuse it with: 400 malformed, 431 too
 * long or too many fields, 414 a target of 2048 bytes or more, 501 a
 * method of 24 or more. */
static int parse_head(const char *buf, size_t head_len, struct req *r)
{
	struct mesh_hframe_head *h = &r->h;
	int rc = mesh_hframe_parse_request(buf, head_len, h);
	r->head_len = head_len;
	r->method[0] = r->target[0] = r->version[0] = 0;
	if (rc)
		return rc == MESH_E_TOOBIG ? 431 : 400;
	if (h->method_len >= sizeof r->method)
		return 501;
	if (h->target_len >= sizeof r->target)
		return 414;
	memcpy(r->method, buf + h->line_off, h->method_len);
	r->method[h->method_len] = 0;
	memcpy(r->target, buf + h->target_off, h->target_len);
	r->target[h->target_len] = 0;
	memcpy(r->version, buf + h->target_off + h->target_len + 1, 8);
	r->version[8] = 0;
	r->fwd_off = h->line_off + h->line_len;
	r->cl = h->content_length;
	r->te = h->chunked;
	r->close = h->close;
	r->expect = h->expect;
	return 0;
}

/* 100 Continue, once, to a client that waits for it before its body. */
static int send_continue(struct lconn *lc)
{
	struct iovec iov = {(void *)"HTTP/1.1 100 Continue\r\n\r\n", 25};
	lc->continued = 1;
	return to_client(lc, &iov, 1) < 0 ? -1 : 0;
}

/* A head was read whole (its length hl): refused, or its body is to come. */
static void head_read(struct lconn *lc, size_t hl)
{
	struct req *r = &lc->r;
	int code = parse_head(lc->buf, hl, r);
	if (code) {
		char m[160];
		snprintf(m, sizeof m, "malformed HTTP request: %s",
			 code == 414   ? "the target is 2048 bytes or longer"
			 : code == 501 ? "no such method here"
				       : r->h.why ? r->h.why : "?");
		refuse(lc, code, m);
		return;
	}
	if (r->expect > 1) {
		refuse(lc, 417, "the only expectation taken is 100-continue");
		return;
	}
	if (r->te) {
		/* The framer reads the chunked body as it comes. */
		mesh_hframe_init(&lc->f);
		mesh_hframe_feed(&lc->f, 0, lc->buf, hl);
		lc->bpos = hl;
		lc->state = S_BODY;
		if (r->expect && lc->have == hl && send_continue(lc) < 0)
			kill_conn(lc);
		return;
	}
	if (r->cl > lc->g->c.max_body) {
		char m[128];
		snprintf(m, sizeof m, "the request body is larger than %zu bytes", lc->g->c.max_body);
		refuse(lc, 413, m);
		return;
	}
	if (grow(lc, hl + (size_t)r->cl) < 0) {
		kill_conn(lc);
		return;
	}
	if (r->expect && r->cl && lc->have < hl + r->cl && !lc->continued && send_continue(lc) < 0)
		kill_conn(lc);
}

/* The chunked body whole (decoded in lc->body, its end at bpos): the
 * buffer becomes the head without Transfer-Encoding, with Content-Length,
 * the body, then the bytes after it (the next request's); r parsed again.
 * 0, or -1 (no memory). */
static int unchunk(struct lconn *lc)
{
	struct req *r = &lc->r;
	struct mesh_buf nb = MESH_BUF_INIT;
	/* The head's lines (CRLF each: it parsed) but Transfer-Encoding,
	 * then Content-Length. */
	for (size_t at = r->h.line_off; at + 2 < r->head_len;) {
		const char *l = lc->buf + at, *nl = memchr(l, '\n', r->head_len - at);
		size_t len = (size_t)(nl + 1 - l);
		if (at == r->h.line_off || strncasecmp(l, "transfer-encoding:", 18))
			mesh_buf_add(&nb, l, len);
		at += len;
	}
	mesh_buf_addf(&nb, "Content-Length: %zu\r\n\r\n", lc->body.len);
	size_t head = nb.len;
	if (lc->body.len)
		mesh_buf_add(&nb, lc->body.p, lc->body.len);
	mesh_buf_add(&nb, lc->buf + lc->bpos, lc->have - lc->bpos);
	mesh_buf_release(&lc->body);
	if (!nb.p || mesh_buf_grow(&nb, 1)) {
		mesh_buf_release(&nb);
		return -1;
	}
	free(lc->buf);
	lc->cap = nb.cap;
	lc->buf = mesh_buf_detach(&nb, &lc->have);
	lc->hscan = 0;
	return parse_head(lc->buf, head, r) ? -1 : 0;
}

/* S_BODY: the chunked body's bytes read so far, decoded by the framer.
 * 1 whole (the buffer is the request with Content-Length), 0 more to come,
 * -1 refused or the connection ended. */
static int body_chunked(struct lconn *lc)
{
	struct mesh_hframe_ev ev;
	size_t max = lc->g->c.max_body;
	while (lc->bpos < lc->have) {
		long k = mesh_hframe_step(&lc->f, 0, lc->buf + lc->bpos, lc->have - lc->bpos, &ev);
		if (k < 0) {
			mesh_buf_release(&lc->body);
			if (k == MESH_E_TOOBIG)
				refuse(lc, 413, "the request body is larger than the gateway takes");
			else
				refuse(lc, 400, "malformed chunked request body");
			return -1;
		}
		lc->bpos += (size_t)k;
		if ((ev.what & MESH_HFRAME_EV_CHUNK) && (uint64_t)ev.size > max - lc->body.len) {
			mesh_buf_release(&lc->body);
			refuse(lc, 413, "the request body is larger than the gateway takes");
			return -1;
		}
		if ((ev.what & MESH_HFRAME_EV_DATA) && mesh_buf_add(&lc->body, ev.p, ev.n) < 0) {
			kill_conn(lc);
			return -1;
		}
		if (ev.what & MESH_HFRAME_EV_END) {
			if (unchunk(lc) < 0) {
				kill_conn(lc);
				return -1;
			}
			return 1;
		}
	}
	return 0;
}

/* ---- Routing ---- */

void mesh__gw_upstream_split(const char *target, char *model, size_t mcap, char *path, size_t pcap)
{
	const char *mname = target + 10;
	size_t mlen = strcspn(mname, "/?");
	snprintf(model, mcap, "%.*s", (int)(mlen < mcap - 1 ? mlen : mcap - 1), mname);
	snprintf(path, pcap, "%s%s", mname[mlen] == '/' ? "" : "/", mname + mlen);
}

/* 1 if /upstream/ may reach path (the program's own, "/P[?Q]") of the
 * program manifest m: its upstream_paths has "*", or an entry that is a
 * prefix of the path's whole segments, and the path has nothing a program
 * could read as another path (a "." or ".." segment, an escaped '.', '/'
 * or '\\', a backslash). */
static int upstream_allowed(const struct mesh_manifest *m, const char *path)
{
	size_t n = strcspn(path, "?");
	for (size_t i = 0; i < m->nupstream_paths; i++)
		if (!strcmp(m->upstream_paths[i], "*"))
			return 1;
	for (size_t i = 0; i < n; i++) {
		const char *c = path + i;
		if (*c == '\\' ||
		    (*c == '%' && (!strncasecmp(c, "%2e", 3) || !strncasecmp(c, "%2f", 3) || !strncasecmp(c, "%5c", 3))))
			return 0;
		if (*c == '/' && c[1] == '.' &&
		    (i + 2 == n || c[2] == '/' || (c[2] == '.' && (i + 3 == n || c[3] == '/'))))
			return 0;
	}
	for (size_t i = 0; i < m->nupstream_paths; i++) {
		const char *e = m->upstream_paths[i];
		size_t el = strlen(e);
		if (el <= n && !memcmp(path, e, el) && (el == n || path[el] == '/' || e[el - 1] == '/'))
			return 1;
	}
	return 0;
}

static void set_busy(struct lconn *lc)
{
	struct mesh_gw *g = lc->g;
	pthread_mutex_lock(&g->mu);
	lc->link.busy = 1;
	g->busy++;
	pthread_mutex_unlock(&g->mu);
}

static void place(struct lconn *lc);

/* The fields every answer to the request carries (lc->xh): for an Origin
 * that may use the gateway (d), the CORS ones naming it, so that its page
 * may read the answer (and the fields a script may want). */
static void cors_fields(struct lconn *lc, const struct mesh__gw_door *d)
{
	static const char a[] = "Access-Control-Allow-Origin: ",
			  b[] = "\r\nVary: Origin\r\nAccess-Control-Expose-Headers: X-Mesh-Cold-Start\r\n";
	size_t need = sizeof a - 1 + d->norigin + sizeof b - 1;
	if (!d->origin || lc->nxh + need > sizeof lc->xh)
		return;
	char *w = lc->xh + lc->nxh;
	memcpy(w, a, sizeof a - 1);
	memcpy(w + sizeof a - 1, d->origin, d->norigin);
	memcpy(w + sizeof a - 1 + d->norigin, b, sizeof b - 1);
	lc->nxh += need;
	lc->cors = 1;
}

/* The request's body becomes body (what its program's filters, aliases
 * and the keep_alive made of it): the buffer is rebuilt as the bytes before
 * the forwarded fields, those fields but Content-Length, a Content-Length
 * of the new body, the body, then the bytes after the request (the next
 * one's).  0, or -1 (no memory). */
static int rebody(struct lconn *lc, const struct mesh_buf *body)
{
	struct req *r = &lc->r;
	struct mesh_buf nb = MESH_BUF_INIT;
	size_t at = r->fwd_off, l = at, after = r->head_len + (size_t)r->cl, nlen, vlen;
	const char *name, *val;
	int rc = mesh_buf_add(&nb, lc->buf, r->fwd_off);
	for (; !rc && mesh_hframe_field(lc->buf, r->head_len, &at, &name, &nlen, &val, &vlen); l = at)
		if (nlen != 14 || strncasecmp(name, "content-length", 14))
			rc = mesh_buf_add(&nb, lc->buf + l, at - l);
	rc = rc ? rc : mesh_buf_addf(&nb, "Content-Length: %zu\r\n\r\n", body->len);
	size_t head = nb.len;
	rc = rc ? rc : mesh_buf_add(&nb, body->p, body->len);
	rc = rc ? rc : mesh_buf_add(&nb, lc->buf + after, lc->have - after);
	if (rc || mesh_buf_grow(&nb, 1)) {
		mesh_buf_release(&nb);
		return -1;
	}
	free(lc->buf);
	lc->cap = nb.cap;
	lc->buf = mesh_buf_detach(&nb, &lc->have);
	r->head_len = head;
	r->cl = body->len;
	return 0;
}

/* A request routed by its body's model to p: its body rewritten when p's
 * manifest asks (upstream_model, [filters]) or it has a keep_alive (taken
 * off, into lc->keep).  0, or -1: answered (a bad keep_alive) or killed. */
static int edit_body(struct lconn *lc, const struct mesh__gw_prog *p)
{
	const struct mesh_manifest *m = &p->img.m;
	struct mesh__gw_edit e = {.model = m->upstream_model, .strip = m->strip_params, .nstrip = m->nstrip_params,
				  .defaults = m->defaults, .ndefaults = m->ndefaults};
	struct req *r = &lc->r;
	struct mesh_buf nb = MESH_BUF_INIT;
	char why[256];
	if (!mesh__gw_body_needs_edit(lc->buf + r->head_len, (size_t)r->cl, &e))
		return 0;
	int rc = mesh__gw_body_edit(lc->buf + r->head_len, (size_t)r->cl, &e, &nb, &lc->keep, why, sizeof why);
	if (rc == MESH_E_PARSE) {
		answer_error(lc, 400, "invalid_request_error", "invalid_keep_alive", why, 0, lc->close_it);
		return -1;
	}
	if (rc || rebody(lc, &nb)) {
		mesh_buf_release(&nb);
		kill_conn(lc);
		return -1;
	}
	mesh_buf_release(&nb);
	return 0;
}

/* The request's door (gw_guard.h: key, Host, Origin; /health (health) and
 * a CORS preflight need no key), then its start: its id and CORS fields,
 * its hop-by-hop fields, those its Connection names and Expect dropped,
 * its routing state reset, the connection busy (g->mu, a moment).  1 if
 * it is answered here (refused, or a preflight), else 0. */
static int door(struct lconn *lc, int health)
{
	struct mesh_gw *g = lc->g;
	struct req *r = &lc->r;
	const char *why = NULL, *code = NULL;
	struct mesh__gw_door d;
	struct mesh_buf pre = MESH_BUF_INIT;
	int refused = mesh__gw_guard_check(&g->guard, g->c.allow_origins, g->c.nallow_origins, lc->buf, r->h.len,
					   r->h.line_off + r->h.line_len, !health, !strcmp(r->method, "OPTIONS"), &d,
					   &why, &code);
	rid_field(lc, d.rid, d.nrid);
	cors_fields(lc, &d);
	if (d.preflight && !refused)
		mesh__gw_answer_preflight(&pre, d.req_headers, d.nreq_headers, r->close);
	r->fwd_off = mesh_hframe_head_forward(lc->buf, &r->h);
	lc->t0 = mesh_mono_ns();
	lc->model[0] = 0;
	lc->keep = MESH__GW_KEEP_ABSENT;
	lc->close_it = r->close;
	memset(&lc->w, 0, sizeof lc->w);
	lc->w.rid = lc->rid;
	set_busy(lc);
	if (refused) {
		answer_error(lc, refused, "invalid_request_error", code, why, 0, lc->close_it);
		return 1;
	}
	if (d.preflight) {
		answer(lc, &pre, 204, 0);
		return 1;
	}
	return 0;
}

/* 1 if the request is a GET or a HEAD (what meshd's own answers take). */
static int get_or_head(const struct req *r)
{
	return !strcmp(r->method, "GET") || !strcmp(r->method, "HEAD");
}

/* GET /metrics: meshd's metrics text (behind the key: the door). */
static void answer_metrics(struct lconn *lc)
{
	struct mesh_gw *g = lc->g;
	struct mesh_buf t = MESH_BUF_INIT, b = MESH_BUF_INIT;
	if (!get_or_head(&lc->r))
		answer_error(lc, 405, "invalid_request_error", NULL, "GET /metrics is meshd's metrics", 0,
			     lc->close_it);
	else if (g->c.metrics(g->c.metrics_ctx, &t) < 0 ||
		 mesh__gw_answer_text(&b, g->c.metrics_type, t.p ? t.p : "", t.len, lc->close_it) < 0) {
		mesh_buf_release(&b); /* the head may be in it */
		answer_error(lc, 503, "service_unavailable", NULL, "the metrics could not be rendered", 0,
			     lc->close_it);
	} else
		answer(lc, &b, 200, 0);
	mesh_buf_release(&t);
}

/* GET /v1/models/{id} (the target's first qlen bytes, its query after):
 * the model id describes. */
static void answer_model(struct lconn *lc, size_t qlen)
{
	struct req *r = &lc->r;
	char id[300];
	snprintf(id, sizeof id, "%.*s", (int)(qlen - 11 < sizeof id - 1 ? qlen - 11 : sizeof id - 1), r->target + 11);
	struct mesh_buf b = MESH_BUF_INIT;
	int st = get_or_head(r) ? mesh__gw_answer_model(lc->g, &b, id, lc->close_it) : 405;
	if (st == 405)
		answer_error(lc, 405, "invalid_request_error", NULL, "GET /v1/models/{id} describes a model", 0,
			     lc->close_it);
	else
		answer(lc, &b, st, 0);
}

/* The requests meshd answers itself, no program's: /health (health),
 * /metrics, /v1/models and /v1/models/{id} (qlen: the target's length
 * before its query).  1 if the request was one (it is answered), else 0. */
static int answer_own(struct lconn *lc, size_t qlen, int health)
{
	struct mesh_gw *g = lc->g;
	struct req *r = &lc->r;
	struct mesh_buf b = MESH_BUF_INIT;
	if (health) {
		mesh__gw_answer_health(&b, lc->close_it);
		answer(lc, &b, 200, 0);
	} else if (qlen == 8 && !strncmp(r->target, "/metrics", 8) && g->c.metrics && g->c.metrics_type) {
		answer_metrics(lc);
	} else if (qlen > 11 && !strncmp(r->target, "/v1/models/", 11)) {
		answer_model(lc, qlen);
	} else if ((qlen == 10 || qlen == 11) && !strncmp(r->target, "/v1/models/", qlen)) {
		if (!get_or_head(r)) {
			answer_error(lc, 405, "invalid_request_error", NULL, "GET /v1/models lists the models", 0, lc->close_it);
		} else {
			mesh__gw_answer_models(g, &b, lc->close_it);
			answer(lc, &b, 200, 0);
		}
	} else {
		return 0;
	}
	return 1;
}

/* The model a request for a program names (into lc->model): /upstream/'s
 * in its target (its path there into upath, upath's cap ucap), or the
 * model of a POST /v1/...'s body.  The path the program gets (upath or the
 * target), or NULL: the request is answered (no model, no route). */
static const char *route_model(struct lconn *lc, char *upath, size_t ucap)
{
	struct req *r = &lc->r;
	if (!strncmp(r->target, "/upstream/", 10)) {
		mesh__gw_upstream_split(r->target, lc->model, sizeof lc->model, upath, ucap);
		return upath;
	}
	if (!strcmp(r->method, "POST") && !strncmp(r->target, "/v1/", 4)) {
		char *m = mesh__gw_body_model(lc->buf + r->head_len, (size_t)r->cl);
		if (!m) {
			answer_error(lc, 400, "invalid_request_error", "missing_model",
				     "the body must be JSON with a \"model\" string: meshd routes by it", 0, lc->close_it);
			return NULL;
		}
		snprintf(lc->model, sizeof lc->model, "%.299s", m);
		free(m);
		return r->target;
	}
	answer_error(lc, 404, "invalid_request_error", NULL,
		     "no route: POST /v1/... with a model, GET /v1/models, or /upstream/<model>/...", 0, lc->close_it);
	return NULL;
}

/* /upstream/ to upath, a path p's manifest does not open: 403, counted,
 * with what would open it. */
static void refuse_upstream(struct lconn *lc, struct mesh__gw_prog *p, const char *upath)
{
	char m[1400];
	snprintf(m, sizeof m,
		 "/upstream/ does not reach '%.200s' of program '%s': its manifest's upstream_paths %s; add "
		 "upstream_paths = [\"%.*s\"] (path prefixes) or [\"*\"] to %s/%s.toml to open it",
		 upath, p->img.m.name, p->img.m.nupstream_paths ? "does not list it" : "lists no path (off by default)",
		 (int)(strcspn(upath, "?") < 200 ? strcspn(upath, "?") : 200), upath, lc->g->catalog, p->img.m.name);
	uint64_t now = mesh_mono_ns();
	mesh__gw_count(p, lc->model, 403, lc->t0, now, now, 0, 0);
	answer_error(lc, 403, "invalid_request_error", "upstream_path_not_allowed", m, 0, lc->close_it);
}

/* The request line to the program, "METHOD path VERSION\r\n", into lc->line
 * without printf's cost. */
static void request_line(struct lconn *lc, const char *path)
{
	struct req *r = &lc->r;
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
}

/* A whole request in the buffer (head, Content-Length body): what it is
 * for, and the answer of meshd's own or the wait for its program's place. */
static void route(struct lconn *lc)
{
	struct mesh_gw *g = lc->g;
	struct req *r = &lc->r;
	char upath[2100];
	size_t qlen = strcspn(r->target, "?");
	int health = qlen == 7 && !strncmp(r->target, "/health", 7);
	if (door(lc, health) || answer_own(lc, qlen, health))
		return;
	const char *path = route_model(lc, upath, sizeof upath);
	if (!path)
		return;
	struct mesh__gw_prog *p = mesh__gw_find(g, lc->model);
	mesh__gw_unhold(lc->held); /* none: the last request's ended */
	lc->held = p;
	if (!p) {
		struct mesh_buf b = MESH_BUF_INIT;
		mesh__gw_answer_unknown_model(g, &b, lc->model, lc->close_it);
		answer(lc, &b, 404, 0);
		return;
	}
	if (path == upath && !upstream_allowed(&p->img.m, upath)) {
		refuse_upstream(lc, p, upath);
		return;
	}
	if (path != upath && edit_body(lc, p))
		return;
	/* Made before the wait: a cold start's supervisor may send it itself. */
	request_line(lc, path);
	lc->p = p;
	lc->w.p = p;
	lc->w.first = (struct mesh__gw_first){.line = lc->line, .nline = lc->nline, .rest = lc->buf + r->fwd_off,
					      .nrest = r->head_len - r->fwd_off + (size_t)r->cl, .fd = -1};
	lc->t_q = mesh_mono_ns();
	lc->waited = 0;
	place(lc);
}

/* S_HEAD: reads until the buffer holds a whole request, then routes it. */
static void serve(struct lconn *lc)
{
	for (;;) {
		if (lc->state == S_BODY) {
			int rc = body_chunked(lc);
			if (rc < 0)
				return;
			if (rc == 1) {
				lc->state = S_HEAD;
				route(lc);
				return;
			}
		} else if (lc->state != S_HEAD) {
			return;
		} else if (!lc->r.head_len) {
			size_t hl = mesh_hframe_head_end(lc->buf, lc->have, &lc->hscan);
			if (hl) {
				head_read(lc, hl);
				continue;
			}
			if (lc->have >= MESH_HFRAME_MAX_HEAD) {
				refuse(lc, 431, "the request head is longer than 64 KiB");
				return;
			}
		} else if (lc->have >= lc->r.head_len + (size_t)lc->r.cl) {
			route(lc);
			return;
		}
		int rc = read_client(lc);
		if (rc < 0) {
			kill_conn(lc);
			return;
		}
		if (rc == 0)
			return; /* the next bytes come with an event */
	}
}

/* ---- The connections to the programs ---- */

/* fd (a connection to lc->p's process on lc->port) into the loop, both
 * directions and the program's close (EPOLLRDHUP), edge-triggered, for
 * lc's request.  0, or -1 (fd is closed). */
static int up_wrap(struct lconn *lc, int fd)
{
	struct upc *u = calloc(1, sizeof *u);
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	if (u)
		u->ev = event_new(lc->L->base, fd, EV_READ | EV_WRITE | EV_CLOSED | EV_ET | EV_PERSIST, on_up_cb, u);
	if (!u || !u->ev || event_add(u->ev, NULL) < 0) {
		if (u && u->ev)
			event_free(u->ev);
		free(u);
		close(fd);
		return -1;
	}
	u->L = lc->L;
	u->p = lc->p;
	mesh__gw_hold(u->p); /* lc's hold keeps it meanwhile */
	u->port = lc->port;
	u->fd = fd;
	u->owner = lc;
	lc->u = u;
	lc->up = fd;
	return 0;
}

static void upc_free(struct upc *u)
{
	event_free(u->ev);
	close(u->fd);
	mesh__gw_unhold(u->p);
	free(u);
}

/* Closes the request's connection to the program (none: nothing). */
static void up_close(struct lconn *lc)
{
	if (lc->u)
		upc_free(lc->u);
	lc->u = NULL;
	lc->up = -1;
}

/* The request's connection, whose response ended whole, kept by the loop
 * for the next request to the same process. */
static void up_keep(struct lconn *lc)
{
	struct mesh__gw_loop *L = lc->L;
	struct upc *u = lc->u;
	if (L->nidle >= LOOP_IDLE_MAX) {
		up_close(lc);
		return;
	}
	u->owner = NULL;
	u->next = L->idle;
	L->idle = u;
	L->nidle++;
	lc->u = NULL;
	lc->up = -1;
}

/* A kept connection to lc's program and port for its request: 0 or -1. */
static int up_take(struct lconn *lc)
{
	struct mesh__gw_loop *L = lc->L;
	for (struct upc **pp = &L->idle; *pp; pp = &(*pp)->next) {
		struct upc *u = *pp;
		if (u->p == lc->p && u->port == lc->port) {
			*pp = u->next;
			L->nidle--;
			u->owner = lc;
			lc->u = u;
			lc->up = u->fd;
			return 0;
		}
	}
	return -1;
}

/* A new connection to the program (none kept, or the kept one was closed
 * by it), in the loop for the request. */
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
	return up_wrap(lc, fd);
}

/* Closes the loop's kept connections whose process is no longer the warm
 * one (all of them: every). */
static void idle_check(struct mesh__gw_loop *L, int every)
{
	struct mesh_gw *g = L->g;
	if (!L->idle)
		return;
	pthread_mutex_lock(&g->mu);
	for (struct upc **pp = &L->idle; *pp;) {
		struct upc *u = *pp;
		if (every || u->p->state != GW_WARM || u->p->port != u->port) {
			*pp = u->next;
			L->nidle--;
			upc_free(u);
		} else {
			pp = &u->next;
		}
	}
	pthread_mutex_unlock(&g->mu);
}

static void on_up_cb(evutil_socket_t fd, short what, void *arg)
{
	struct upc *u = arg;
	struct lconn *lc = u->owner;
	struct mesh__gw_loop *L = u->L;
	(void)fd;
	if (what & EV_CLOSED)
		u->rdhup = 1;
	if (!lc) { /* kept idle: the program closed it (or spoke out of turn) */
		if (what & (EV_READ | EV_CLOSED)) {
			struct upc **pp = &L->idle;
			while (*pp != u)
				pp = &(*pp)->next;
			*pp = u->next;
			L->nidle--;
			upc_free(u);
		}
		return;
	}
	if (lc->state == S_SEND)
		send_request(lc);
	else if (lc->state == S_RELAY && !lc->nout && (what & (EV_READ | EV_CLOSED)))
		relay(lc);
	reap_dead(L);
}

/* ---- A place, the request sent, the response relayed ---- */

/* The framer of the response: the request is framed here already (a head
 * parsed, Content-Length or no body), not fed to it byte by byte. */
static void start_frame(struct lconn *lc)
{
	mesh_hframe_init(&lc->f);
	mesh_hframe_request(&lc->f, !strcmp(lc->r.method, "HEAD"), !strcmp(lc->r.method, "CONNECT"));
}

/* After the relay of a request (code: 0 whole, an HTTP status not yet
 * answered, -1 cut; its place given back and counted): counts a limit
 * passed, logs, and appends to b what is to answer.  The status for the
 * access line; lc->close_it set when the connection must end. */
static int relay_end(struct lconn *lc, int code, struct mesh_buf *b)
{
	struct mesh_gw *g = lc->g;
	struct mesh__gw_prog *p = lc->p;
	const struct relay_out *o = &lc->o;
	int status = o->status;
	if (o->client_close)
		lc->close_it = 1;
	if (o->timeout) {
		static const char *const what[] = {"", "request timeout", "response timeout", "idle stream timeout"};
		const struct mesh_gw_config *gc = &g->c;
		uint64_t lim = o->timeout == 1 ? gc->request_timeout_ns
			       : o->timeout == 2 ? gc->response_timeout_ns : gc->idle_stream_timeout_ns;
		char m[300];
		mesh__gw_count_timeout(p, o->timeout);
		snprintf(m, sizeof m, "program '%s' %s: %s (%.1f s)%s", p->img.m.name,
			 o->timeout == 1   ? "did not end its response within the request timeout"
			 : o->timeout == 2 ? "sent no byte of its response within the response timeout"
					   : "sent nothing more of its response within the idle stream timeout",
			 what[o->timeout], (double)lim / 1e9, code < 0 ? "; the response is cut" : "");
		mesh__gw_log(g, MESH_GW_WARN, "%s", m);
		if (code > 0) {
			status = code;
			mesh__gw_answer_error(b, code, "timeout", "timeout", m, 0, lc->close_it);
		} else {
			status = status ? status : 504;
		}
	} else if (code > 0) {
		char m[256];
		status = code;
		snprintf(m, sizeof m, "program '%s' closed the connection without an answer (request id %s)", p->img.m.name,
			 lc->rid);
		mesh__gw_log(g, MESH_GW_WARN, "program=%s request=%s port=%d: closed the connection without an answer",
			     p->img.m.name, lc->rid, lc->port);
		mesh__gw_answer_error(b, code, "upstream_error", NULL, m, 0, lc->close_it);
	} else if (code < 0 && o->gone) {
		/* nginx's word for it, also when the program's status went (a
		 * stream the client left): the answer did not reach its end. */
		if (status)
			mesh__gw_log(g, MESH_GW_INFO, "program=%s client went away after %zu bytes (status %d sent; request=%s)",
				     p->img.m.name, o->bytes, status, lc->rid);
		else
			mesh__gw_log(g, MESH_GW_INFO, "program=%s client went away after %zu bytes (request=%s)", p->img.m.name,
				     o->bytes, lc->rid);
		status = 499;
	} else if (code < 0) {
		status = status ? status : 502;
		mesh__gw_log(g, MESH_GW_WARN, "program=%s response cut after %zu bytes", p->img.m.name, o->bytes);
	}
	return status;
}

/* The request's end: the program's connection kept or closed, the counts,
 * the access line; then the next request on the connection, if any. */
static void end_request(struct lconn *lc, int code)
{
	struct mesh_gw *g = lc->g;
	struct mesh__gw_prog *p = lc->p;
	struct mesh_buf b = MESH_BUF_INIT;
	lc->L->nrelay--;
	up_close(lc); /* not kept (relay() keeps a whole response's) */
	if (code == -1)
		lc->o.client_close = 1;
	mesh__gw_release(p, lc->keep);
	int status = relay_end(lc, code, &b);
	uint64_t now = mesh_mono_ns();
	mesh__gw_count(p, lc->model, status, lc->t0, b.len ? now : lc->o.t_first, now, lc->queued_ns,
		       code < 0 && !lc->o.gone);
	mesh__gw_access(g, lc->r.method, lc->r.target, lc->model, lc->p ? lc->p->img.name : NULL, status, lc->cold,
			lc->o.bytes, lc->t0, lc->rid);
	lc->nout = lc->outoff = 0;
	if (b.len && lc->nxh && mesh__gw_answer_insert(&b, 0, lc->xh, lc->nxh) < 0)
		mesh_buf_release(&b);
	if (b.len) {
		/* meshd's own answer: nothing of the program's went. */
		struct iovec iov = {b.p, b.len};
		int rc = to_client(lc, &iov, 1);
		mesh_buf_release(&b);
		if (rc < 0) {
			kill_conn(lc);
			return;
		}
		if (rc == 1) {
			lc->p = NULL;
			lc->t0 = 0; /* logged */
			lc->state = S_ANSWER;
			return;
		}
	}
	mesh_buf_release(&b);
	next_request(lc);
}

/* Placed: the request goes to the program, on the connection its start
 * sent it on, one this loop keeps, one the start kept, or a new one. */
static void begin_relay(struct lconn *lc)
{
	memset(&lc->o, 0, sizeof lc->o);
	lc->port = lc->w.port;
	lc->cold = lc->w.cold;
	lc->got = lc->done = 0;
	lc->pending_line = 1;
	lc->npre = lc->sent = 0;
	lc->up = -1;
	lc->L->nrelay++;
	if (!lc->L->tick_fast)
		arm_tick(lc->L, 1);
	lc->state = S_SEND;
	start_frame(lc);
	if (lc->w.first.fd >= 0) {
		/* Its start sent it (or its first bytes) on the probe's
		 * connection: the rest goes there. */
		int fd = lc->w.first.fd;
		lc->w.first.fd = -1;
		lc->sent = lc->w.first.sent;
		lc->reused = 0;
		if (up_wrap(lc, fd) < 0) {
			end_request(lc, 502);
			return;
		}
	} else {
		lc->reused = up_take(lc) == 0;
		if (!lc->reused) {
			int fd = mesh__gw_pool_get(lc->p, lc->port);
			lc->reused = fd >= 0 && up_wrap(lc, fd) == 0;
		}
		if (!lc->reused && up_connect(lc)) {
			end_request(lc, 502);
			return;
		}
	}
	send_request(lc);
}

/* Asks for the request's place: placed, it goes; else it is parked until
 * the programs say to look again (or its backoff ends), or answered. */
static void place(struct lconn *lc)
{
	char *why = NULL;
	unsigned retry = 0;
	int code = mesh__gw_acquire(&lc->w, &why, &retry);
	if (code == 0) {
		lc->queued_ns = lc->waited ? mesh_mono_ns() - lc->t_q : 0;
		begin_relay(lc);
		return;
	}
	if (code == 1) {
		park(lc);
		return;
	}
	uint64_t now = mesh_mono_ns();
	mesh__gw_count(lc->p, lc->model, code, lc->t0, now, now, lc->waited ? now - lc->t_q : 0, 0);
	/* The client gets the reason's first line and the request's id; the
	 * rest (a failed start's report and the program's output) goes to
	 * meshd's log under that id. */
	char m[1000];
	const char *nl = strchr(why, '\n');
	if (nl)
		mesh__gw_log(lc->g, MESH_GW_WARN, "program=%s request=%s answered %d: %s", lc->p->img.m.name, lc->rid, code,
			     nl + 1);
	snprintf(m, sizeof m, "%.*s (request id %s%s)", (int)strcspn(why, "\n"), why, lc->rid,
		 nl ? "; meshd's log has the details" : "");
	answer_error(lc, code, code == 503 ? "service_unavailable" : "upstream_error", NULL, m, retry, lc->close_it);
	free(why);
}

/* The client of a parked request went away: its wait ends (499). */
static void parked_gone(struct lconn *lc)
{
	struct mesh_gw *g = lc->g;
	unpark(lc);
	mesh__gw_acquire_cancel(&lc->w);
	lc->state = S_HEAD; /* not parked: kill_conn must not cancel it again */
	uint64_t now = mesh_mono_ns();
	mesh__gw_count(lc->p, lc->model, 499, lc->t0, 0, now, now - lc->t_q, 0);
	mesh__gw_log(g, MESH_GW_INFO, "the client went away while it waited for program '%s'", lc->p->img.m.name);
	mesh__gw_access(g, lc->r.method, lc->r.target, lc->model, lc->p->img.name, 499, lc->w.cold, 0, lc->t0,
			lc->rid);
	kill_conn(lc);
}

/* Every parked request asks again, in the order they came (those still
 * waiting stay, in that order). */
static void look_again(struct mesh__gw_loop *L)
{
	struct lconn *lc = L->parked;
	L->parked = L->parked_tail = NULL;
	L->parked_until = 0;
	while (lc) {
		struct lconn *next = lc->pnext;
		lc->pnext = NULL;
		lc->state = S_HEAD; /* not parked while it asks */
		place(lc);
		lc = next;
	}
}

/* Sends the rest of the request to the program. */
static void send_request(struct lconn *lc)
{
	const char *rest = lc->buf + lc->r.fwd_off;
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
			up_close(lc);
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
		relay(lc);
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

/* 1 if the header line l[0..n) of a response is one meshd answers itself
 * (the program's is dropped): the CORS fields when meshd adds its own. */
static int own_field(const struct lconn *lc, const char *l, size_t n)
{
	return lc->cors && n > 15 && !strncasecmp(l, "Access-Control-", 15);
}

/* Drops from the response's head in pre[from..end) the fields meshd
 * answers itself; the bytes after end move up. */
static void drop_fields(struct lconn *lc, size_t from, size_t end)
{
	size_t w = from, r = from;
	while (r < end) {
		const char *nl = memchr(lc->pre + r, '\n', end - r);
		size_t len = nl ? (size_t)(nl + 1 - (lc->pre + r)) : end - r;
		if (!own_field(lc, lc->pre + r, len)) {
			memmove(lc->pre + w, lc->pre + r, len);
			w += len;
		}
		r += len;
	}
	memmove(lc->pre + w, lc->pre + end, lc->npre - end);
	lc->npre -= end - w;
}

/* The response's first bytes, its head whole (or pre full): on to the
 * client, with meshd's fields after the status line (xh; X-Mesh-Cold-Start
 * when the request waited for a start), without the program's of the same
 * names, then p[0..len).  As to_client. */
static int first_bytes(struct lconn *lc, const char *p, size_t len)
{
	static const char hdr[] = "X-Mesh-Cold-Start: 1\r\n";
	const char *nl = memchr(lc->pre, '\n', lc->npre);
	size_t first = nl ? (size_t)(nl + 1 - lc->pre) : lc->npre, scanned = 0;
	struct iovec iov[5];
	int k = 0;
	lc->pending_line = 0;
	lc->o.status = status_of(lc->pre, lc->npre);
	lc->o.t_first = mesh_mono_ns();
	if (nl && lc->cors) {
		size_t end = mesh_hframe_head_end(lc->pre, lc->npre, &scanned);
		drop_fields(lc, first, end ? end : lc->npre);
	}
	iov[k++] = (struct iovec){lc->pre, first};
	if (lc->cold && nl)
		iov[k++] = (struct iovec){(void *)hdr, sizeof hdr - 1};
	if (nl && lc->nxh)
		iov[k++] = (struct iovec){lc->xh, lc->nxh};
	iov[k++] = (struct iovec){lc->pre + first, lc->npre - first};
	iov[k++] = (struct iovec){(void *)p, len};
	lc->o.bytes += lc->npre + len; /* what the client gets: meshd's fields too */
	for (int i = 1; i < k - 2; i++)
		lc->o.bytes += iov[i].iov_len;
	return to_client(lc, iov, k);
}

/* The program's connection said its end (n 0) or failed (n < 0): a kept
 * one it had closed before answering is replaced and the request sent
 * again; else the response ends (whole when it was delimited by the close). */
static void relay_eof(struct lconn *lc)
{
	if (!lc->got && lc->reused) { /* a kept connection the program had closed */
		up_close(lc);
		if (up_connect(lc)) {
			end_request(lc, 502);
			return;
		}
		lc->state = S_SEND;
		lc->sent = 0;
		start_frame(lc);
		send_request(lc);
		return;
	}
	mesh_hframe_eof(&lc->f, 1);
	if (lc->f.inflight == 0 && !lc->pending_line) {
		lc->o.client_close = 1;
		end_request(lc, 0);
	} else {
		end_request(lc, lc->o.bytes ? -1 : 502);
	}
}

/* n bytes of the response, read into L->buf: framed, passed on.  0 to
 * read on, 1 the relay waits (an event, the client's socket) or ended. */
static int relay_bytes(struct lconn *lc, size_t n)
{
	static const int one = 1;
	struct mesh__gw_loop *L = lc->L;
	if (mesh_hframe_feed(&lc->f, 1, L->buf, n)) {
		end_request(lc, lc->o.bytes ? -1 : 502);
		return 1;
	}
	lc->done = lc->f.inflight == 0;
	/* Kept for the next request when the response ended whole and
	 * neither side asked for the connection's end; before its last
	 * bytes go to the client, whose next request may want it. */
	if (lc->done && !lc->r.close && strcmp(lc->r.version, "HTTP/1.0") && !lc->f.tunnel) {
		up_keep(lc);
	} else if (!lc->done) {
		/* ACK at once while more is to come: on a kept connection the
		 * kernel's delayed ACK would hold a program that writes a stream
		 * in small pieces without TCP_NODELAY (Nagle) 40 ms per piece. */
		setsockopt(lc->up, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
	}
	const char *p = L->buf;
	size_t len = n;
	int rc;
	if (lc->pending_line) {
		size_t take = len < sizeof lc->pre - lc->npre ? len : sizeof lc->pre - lc->npre;
		memcpy(lc->pre + lc->npre, p, take);
		lc->npre += take;
		p += take;
		len -= take;
		size_t scanned = 0;
		/* The status line (the head, when the program's fields are to be
		 * looked at) whole first. */
		if ((lc->cors ? !mesh_hframe_head_end(lc->pre, lc->npre, &scanned) : !memchr(lc->pre, '\n', lc->npre)) &&
		    lc->npre < sizeof lc->pre && !lc->done)
			return 0;
		rc = first_bytes(lc, p, len);
	} else {
		struct iovec iov = {(void *)p, len};
		lc->o.bytes += len;
		rc = to_client(lc, &iov, 1);
	}
	if (rc < 0) {
		end_request(lc, -1);
		return 1;
	}
	if (lc->done && rc == 0) {
		end_request(lc, 0);
		return 1;
	}
	return rc;
}

/* Reads the program's response while the client takes it. */
static void relay(struct lconn *lc)
{
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
		if (n <= 0) {
			relay_eof(lc);
			return;
		}
		lc->got = 1;
		if (relay_bytes(lc, (size_t)n))
			return;
		/* A short read took all there was, and the next bytes come
		 * with an event; but a close that came with these bytes was
		 * reported with them (EV_CLOSED), and will not be again: read
		 * on to it. */
		if ((size_t)n < sizeof L->buf && !(lc->u && lc->u->rdhup))
			return;
	}
}

/* A request being read: past the header timeout from its head's start
 * (its bytes do not put it off), or past the body timeout from the last
 * byte of its body, it is answered 408 and the connection ends (a new
 * connection that sent nothing is closed without an answer); a kept
 * connection idle between requests, past the keep-alive bound, ends. */
static void read_deadlines(struct lconn *lc, uint64_t now)
{
	const struct mesh_gw_config *gc = &lc->g->c;
	char m[128];
	if (lc->state == S_HEAD && !lc->r.head_len) {
		if (!lc->head_t0) {
			if (now - lc->last_io >= KEEPALIVE_NS)
				kill_conn(lc);
			return;
		}
		if (now - lc->head_t0 < gc->header_timeout_ns)
			return;
		snprintf(m, sizeof m, "the request head did not arrive whole within the header timeout (%.1f s)",
			 (double)gc->header_timeout_ns / 1e9);
	} else {
		if (now - lc->last_io < gc->body_timeout_ns)
			return;
		snprintf(m, sizeof m, "no byte of the request body came within the body timeout (%.1f s)",
			 (double)gc->body_timeout_ns / 1e9);
	}
	if (!lc->have || lc->nout) /* nothing asked, or an answer's rest still to go */
		kill_conn(lc);
	else
		refuse(lc, 408, m);
}

/* The limits of the requests being read and of those in flight, the
 * keep-alive bound of the others (but those that wait for a place: their
 * program's start has its own bound). */
static void scan(struct mesh__gw_loop *L, uint64_t now)
{
	const struct mesh_gw_config *gc = &L->g->c;
	for (struct lconn *lc = L->conns.head, *next; lc; lc = next) {
		next = lc->ln.next;
		if (lc->state == S_WAIT)
			continue;
		if (lc->state == S_HEAD || lc->state == S_BODY) {
			read_deadlines(lc, now);
			continue;
		}
		if (lc->state != S_SEND && lc->state != S_RELAY) {
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

/* A read event on the client while its request is not being read: bytes
 * of its next request (pipelined: kept for later), or its end.  libevent
 * reports an error or a hang-up as EV_READ | EV_WRITE without EV_CLOSED:
 * one peek tells. */
static int client_gone(struct lconn *lc)
{
	char b;
	ssize_t n = recv(lc->link.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
}

static void on_client(struct lconn *lc, short ev)
{
	if (ev & EV_CLOSED)
		lc->rdhup = 1;
	if (ev & (EV_READ | EV_CLOSED))
		lc->readable = 1;
	if (lc->nout && (lc->state == S_HEAD || lc->state == S_BODY || lc->state == S_ANSWER)) {
		/* An answer's rest (or a 100 Continue's) first. */
		int rc = flush_out(lc);
		if (rc < 0) {
			kill_conn(lc);
			return;
		}
		if (rc)
			return;
		if (lc->state == S_ANSWER) {
			next_request(lc);
			return;
		}
	}
	switch (lc->state) {
	case S_HEAD:
	case S_BODY:
		serve(lc);
		break;
	case S_WAIT:
		if (!lc->rdhup && (ev & EV_READ) && client_gone(lc))
			lc->rdhup = 1;
		if (lc->rdhup)
			parked_gone(lc);
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
			relay(lc); /* resumes the program's side after a full client socket */
		break;
	}
}

static void on_client_cb(evutil_socket_t fd, short what, void *arg)
{
	struct lconn *lc = arg;
	struct mesh__gw_loop *L = lc->L;
	(void)fd;
	on_client(lc, what);
	reap_dead(L);
}

/* ---- The loops ---- */

/* The scan's timer: every SCAN_NS while a request is in flight, else every
 * IDLE_CHECK_NS while the loop keeps connections to programs, else every
 * second (the keep-alive bound needs no finer); sooner at the end of a
 * parked request's backoff. */
static void arm_tick(struct mesh__gw_loop *L, int fast)
{
	uint64_t ns = fast ? SCAN_NS : L->idle ? IDLE_CHECK_NS : 1000000000ull;
	if (L->parked_until) {
		uint64_t now = mesh_mono_ns(), left = L->parked_until > now ? L->parked_until - now : 0;
		if (left < ns)
			ns = left;
	}
	struct timeval tv = {(time_t)(ns / 1000000000ull), (suseconds_t)(ns % 1000000000ull / 1000)};
	L->tick_fast = fast;
	event_add(L->tick, &tv);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct mesh__gw_loop *L = arg;
	uint64_t now = mesh_mono_ns();
	(void)fd;
	(void)what;
	scan(L, now);
	if (L->parked_until && now >= L->parked_until)
		look_again(L);
	reap_dead(L);
	idle_check(L, 0);
	arm_tick(L, L->nrelay > 0);
}

/* The programs' timer set for at (mesh_mono_ns; 0: none).  Loop thread. */
static void progs_timer(struct mesh__gw_loop *L, uint64_t at)
{
	uint64_t now = mesh_mono_ns(), ns = at > now ? at - now : 0;
	struct timeval tv = {(time_t)(ns / 1000000000ull), (suseconds_t)(ns % 1000000000ull / 1000)};
	L->progs_set = at;
	if (at)
		event_add(L->progs, &tv);
	else
		event_del(L->progs);
}

/* The programs' tick, when they asked for it; again when it says. */
static void on_progs(evutil_socket_t fd, short what, void *arg)
{
	struct mesh__gw_loop *L = arg;
	(void)fd;
	(void)what;
	pthread_mutex_lock(&L->mu);
	L->progs_at = 0;
	pthread_mutex_unlock(&L->mu);
	uint64_t next = mesh__gw_progs_tick(L->g);
	pthread_mutex_lock(&L->mu);
	if (next && (!L->progs_at || next < L->progs_at))
		L->progs_at = next;
	uint64_t at = L->progs_at;
	pthread_mutex_unlock(&L->mu);
	progs_timer(L, at);
	reap_dead(L);
}

/* g->arm: the programs' tick on the first loop at or before at (under
 * g->mu; L->mu is taken after it). */
static void loops_arm(struct mesh_gw *g, uint64_t at)
{
	struct mesh__gw_loop *L = &g->loops[0];
	pthread_mutex_lock(&L->mu);
	int sooner = !L->progs_at || at < L->progs_at;
	if (sooner)
		L->progs_at = at;
	pthread_mutex_unlock(&L->mu);
	if (sooner)
		mesh_efd_ring(L->evfd);
}

/* The connections the accept thread gave, into the loop's list and its
 * events (whose first report says what they have already sent); the
 * parked requests' look again when the programs asked; the programs'
 * tick re-armed when they asked for a sooner one; the loop's end when it
 * is to stop. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
	struct mesh__gw_loop *L = arg;
	(void)what;
	mesh_efd_quiet(fd); /* nothing there: a spurious wake-up */
	pthread_mutex_lock(&L->mu);
	struct lconn *in = L->incoming;
	int stop = L->stop, look = L->look;
	uint64_t progs_at = L->progs_at;
	L->incoming = NULL;
	L->look = 0;
	pthread_mutex_unlock(&L->mu);
	if (L->progs && progs_at != L->progs_set)
		progs_timer(L, progs_at);
	while (in) {
		struct lconn *lc = in;
		in = in->ln.next;
		mesh_list_insert_after(&L->conns, NULL, lc, ln);
		event_assign(ev_client(lc), L->base, lc->link.fd, EV_READ | EV_WRITE | EV_CLOSED | EV_ET | EV_PERSIST,
			     on_client_cb, lc);
		event_add(ev_client(lc), NULL);
	}
	if (look && L->parked) {
		look_again(L);
		reap_dead(L);
		if (L->parked_until)
			arm_tick(L, L->tick_fast);
	}
	if (stop)
		event_base_loopbreak(L->base);
}

/* g->look: every loop's parked requests ask again (under g->mu; L->mu is
 * taken after it, never before). */
static void loops_look(struct mesh_gw *g)
{
	for (unsigned i = 0; i < g->nloops; i++) {
		struct mesh__gw_loop *L = &g->loops[i];
		pthread_mutex_lock(&L->mu);
		int was = L->look;
		L->look = 1;
		pthread_mutex_unlock(&L->mu);
		if (!was)
			mesh_efd_ring(L->evfd);
	}
}

static void *loop_main(void *arg)
{
	struct mesh__gw_loop *L = arg;
	event_base_loop(L->base, EVLOOP_NO_EXIT_ON_EMPTY);
	reap_dead(L);
	idle_check(L, 1);
	return NULL;
}

/* A base for one thread: no lock (only its thread touches it; the accept
 * thread and the programs' look go through evfd). */
static struct event_base *new_base(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *b = NULL;
	if (cfg && !event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK) &&
	    !event_config_require_features(cfg, EV_FEATURE_ET | EV_FEATURE_EARLY_CLOSE))
		b = event_base_new_with_config(cfg);
	if (cfg)
		event_config_free(cfg);
	return b;
}

int mesh__gw_loops_start(struct mesh_gw *g, unsigned n)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	/* Half the CPUs (the programs and their clients need the rest), at
	 * least two where there are two (on 2 CPUs two loops served 1.12-1.22x
	 * haproxy's rate where one served 0.98-1.05x: docs/gateway.md), at most
	 * MAX_LOOPS; one on one CPU. */
	if (!n)
		n = cpus < 2 ? 1 : cpus < 4 ? 2 : cpus / 2 > MAX_LOOPS ? MAX_LOOPS : (unsigned)(cpus / 2);
	g->loops = calloc(n, sizeof *g->loops);
	if (!g->loops)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		g->loops[i].g = g;
		g->loops[i].evfd = -1;
		pthread_mutex_init(&g->loops[i].mu, NULL);
	}
	g->nloops = n;
	for (unsigned i = 0; i < n; i++) {
		struct mesh__gw_loop *L = &g->loops[i];
		int rc = -ENOMEM;
		L->base = new_base();
		L->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (L->base && L->evfd >= 0) {
			L->wake = event_new(L->base, L->evfd, EV_READ | EV_PERSIST, on_wake, L);
			L->tick = evtimer_new(L->base, on_tick, L);
			if (i == 0)
				L->progs = evtimer_new(L->base, on_progs, L);
		}
		if (L->tick)
			arm_tick(L, 0); /* before its thread: the base has no lock */
		if (!L->wake || !L->tick || (i == 0 && !L->progs) || event_add(L->wake, NULL) < 0 ||
		    (rc = mesh_thread_start(&L->th, loop_main, L)) < 0) {
			mesh__gw_loops_stop(g);
			return rc;
		}
		L->started = 1;
	}
	pthread_mutex_lock(&g->mu);
	g->look = loops_look;
	g->arm = loops_arm;
	pthread_mutex_unlock(&g->mu);
	return 0;
}

int mesh__gw_loop_add(struct mesh_gw *g, int fd, const unsigned char peer[16])
{
	/* the struct, then its event, 16-byte aligned (ev_client) */
	struct lconn *lc = calloc(1, ((sizeof(struct lconn) + 15) & ~(size_t)15) + event_get_struct_event_size());
	if (!lc || !g->nloops) {
		free(lc);
		return -1;
	}
	struct mesh__gw_loop *L = &g->loops[g->next_loop++ % g->nloops];
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	lc->g = g;
	lc->L = L;
	lc->link.fd = fd;
	lc->up = -1;
	lc->state = S_HEAD;
	lc->last_io = lc->head_t0 = mesh_mono_ns();
	set_unbegun(lc, lc->last_io);
	memcpy(lc->link.peer, peer, sizeof lc->link.peer);
	pthread_mutex_lock(&g->mu);
	mesh__gw_conn_link(g, &lc->link);
	pthread_mutex_unlock(&g->mu);
	pthread_mutex_lock(&L->mu);
	lc->ln.next = L->incoming;
	L->incoming = lc;
	pthread_mutex_unlock(&L->mu);
	mesh_efd_ring(L->evfd);
	return 0;
}

void mesh__gw_loops_stop(struct mesh_gw *g)
{
	pthread_mutex_lock(&g->mu);
	unsigned n = g->nloops;
	g->nloops = 0;
	g->look = NULL;
	g->arm = NULL;
	pthread_mutex_unlock(&g->mu);
	for (unsigned i = 0; i < n; i++) {
		struct mesh__gw_loop *L = &g->loops[i];
		if (L->started) {
			pthread_mutex_lock(&L->mu);
			L->stop = 1;
			pthread_mutex_unlock(&L->mu);
			mesh_efd_ring(L->evfd);
			pthread_join(L->th, NULL);
		}
		if (L->wake)
			event_free(L->wake);
		if (L->tick)
			event_free(L->tick);
		if (L->progs)
			event_free(L->progs);
		if (L->base)
			event_base_free(L->base);
		if (L->evfd >= 0)
			close(L->evfd);
		pthread_mutex_destroy(&L->mu);
	}
	free(g->loops);
	g->loops = NULL;
}
