/* The gateway's front door: the listener, each client connection's
 * requests (read, routed by model), the relay of each response as it comes
 * (http/hframe.h finds where it ends, so a keep-alive connection goes on
 * to its next request, and a cut stream is told from a whole one).  See
 * gw.h for the contract. */
#include "gateway/gw_loop.h"
#include "gateway/gw_json.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "http/http.h"
#include "http/hframe.h"
#include "host/host.h"

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX MESH_HFRAME_MAX_HEAD

void mesh__gw_log(struct mesh_gw *g, int level, const char *fmt, ...)
{
	char line[4096];
	va_list ap;
	if (!g->c.on_log)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	g->c.on_log(g->c.ctx, level, line);
}

void mesh__gw_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}

int mesh__gw_parse_head(const char *buf, size_t head_len, struct mesh__gw_req *r)
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

void mesh__gw_req_forward(char *buf, struct mesh__gw_req *r)
{
	r->fwd_off = mesh_hframe_head_forward(buf, &r->h);
}

static void set_busy(struct mesh__gw_client *c, int busy)
{
	pthread_mutex_lock(&c->g->mu);
	c->link.busy = busy;
	c->g->busy += busy ? 1u : (unsigned)-1;
	pthread_cond_broadcast(&c->g->cv_all);
	pthread_mutex_unlock(&c->g->mu);
}

int mesh__gw_grow(struct mesh__gw_client *c, size_t want)
{
	/* Doubling from 16 KiB: a head read in pieces is not a recv (and a
	 * realloc) per byte. */
	size_t cap = c->cap ? c->cap : 16384;
	while (cap < want)
		cap *= 2;
	if (cap == c->cap)
		return 0;
	char *nb = realloc(c->buf, cap);
	if (!nb)
		return -1;
	c->buf = nb;
	c->cap = cap;
	return 0;
}

/* Reads until buf holds want bytes.  0, or -1 when the client went away. */
static int fill(struct mesh__gw_client *c, size_t want)
{
	if (mesh__gw_grow(c, want) < 0)
		return -1;
	while (c->have < want) {
		ssize_t n = recv(c->link.fd, c->buf + c->have, c->cap - c->have, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		c->have += (size_t)n;
	}
	return 0;
}

/* The head of the next request: its length, 0 when the client went away,
 * or -1 when it is too long. */
static long read_head(struct mesh__gw_client *c)
{
	size_t scanned = 0, n;
	for (;;) {
		if ((n = mesh_hframe_head_end(c->buf, c->have, &scanned)))
			return (long)n;
		if (c->have >= HEAD_MAX)
			return -1;
		if (fill(c, c->have + 1) < 0)
			return 0;
	}
}

/* Forwards the request (head with its line replaced by line, then body) to
 * the program at port and relays the response as it comes.  sent: NULL,
 * or the request a cold start's supervisor already sent (sent->sent bytes
 * of it, on sent->fd, which this takes).  0 when the
 * response went through whole; else an HTTP status to answer (nothing sent
 * yet), or -1 (the response was cut: the client must see its connection
 * end). */
static int forward(struct mesh__gw_client *c, struct mesh__gw_prog *prog, const struct mesh__gw_req *r, const char *line, int port,
		   int cold, uint64_t t_req, struct mesh__gw_relay_out *o, struct mesh__gw_first *sent)
{
	const struct mesh_gw_config *gc = &c->g->c;
	uint64_t req_deadline = t_req + gc->request_timeout_ns, last_read;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct mesh_hframe f;
	char buf[65536], pre[8192];
	size_t npre = 0, body = (size_t)r->cl;
	int one = 1, done = 0, rc = 0, got = 0; /* got: a byte of the response came */
	/* A kept connection first; one the program closed meanwhile (nothing
	 * came back on it) is replaced by a new one, once. */
	int given = sent && sent->fd >= 0;
	int up = given ? sent->fd : mesh__gw_pool_get(prog, port), reused = up >= 0 && !given;
	size_t nline = strlen(line), skip = given ? sent->sent : 0;
	memset(o, 0, sizeof *o);
	const char *rest = c->buf + r->fwd_off;
	size_t nrest = r->head_len - r->fwd_off + body;
	if (given)
		sent->fd = -1;
again:
	if (up < 0) {
		reused = 0;
		up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (up < 0)
			return 502;
		setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (connect(up, (struct sockaddr *)&sa, sizeof sa) < 0) {
			close(up);
			return 502;
		}
	}
	mesh_hframe_init(&f);
	/* What the supervisor did not send yet (all of it but on its connection). */
	size_t sl = skip < nline ? nline - skip : 0, sr = skip > nline ? skip - nline : 0;
	if (mesh_hframe_feed(&f, 0, line, nline) || mesh_hframe_feed(&f, 0, rest, nrest) ||
	    mesh__gw_send_all(up, line + nline - sl, sl) || mesh__gw_send_all(up, rest + sr, nrest - sr)) {
		close(up);
		up = -1;
		if (reused)
			goto again;
		return 502;
	}
	int pending_line = 1; /* the status line not yet passed on */
	last_read = mesh_mono_ns();
	while (!done) {
		/* While the program thinks, watch the client: one that closed its
		 * connection (or its sending side) is gone, and its request with it.
		 * And the limits: the first byte's, the next read's, the whole's. */
		struct pollfd pf[2] = {{up, POLLIN, 0}, {c->link.fd, POLLRDHUP, 0}};
		uint64_t now = mesh_mono_ns(),
			 read_deadline = last_read + (got ? gc->idle_stream_timeout_ns : gc->response_timeout_ns),
			 deadline = read_deadline < req_deadline ? read_deadline : req_deadline;
		if (now >= deadline) {
			o->timeout = deadline == req_deadline ? 1 : got ? 3 : 2;
			rc = o->bytes ? -1 : 504;
			break;
		}
		uint64_t wait_ms = (deadline - now + 999999) / 1000000;
		if (poll(pf, 2, wait_ms > 60000 ? 60000 : (int)wait_ms) < 0 && errno != EINTR) {
			rc = o->bytes ? -1 : 502;
			break;
		}
		if (!pf[0].revents && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
			o->gone = 1;
			rc = -1;
			break;
		}
		if (!pf[0].revents)
			continue;
		ssize_t n = recv(up, buf, sizeof buf, 0);
		if (n < 0 && errno == EINTR)
			continue;
		/* ACK at once: on a kept connection the kernel's delayed ACK
		 * would hold a program that writes a stream in small pieces
		 * without TCP_NODELAY (Nagle) 40 ms per piece. */
		setsockopt(up, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
		last_read = mesh_mono_ns();
		if (n <= 0 && !got && reused) { /* a kept connection the program had closed */
			close(up);
			up = -1;
			goto again;
		}
		got |= n > 0;
		if (n <= 0) {
			mesh_hframe_eof(&f, 1);
			if (f.inflight == 0 && !pending_line) {
				o->client_close = 1;
				break;
			}
			rc = o->bytes ? -1 : 502;
			break;
		}
		if (mesh_hframe_feed(&f, 1, buf, (size_t)n)) {
			rc = o->bytes ? -1 : 502;
			break;
		}
		done = f.inflight == 0;
		/* Kept for the next request when the response ended whole and
		 * neither side asked for the connection's end; before its last
		 * bytes go to the client, whose next request may want it. */
		if (done && !r->close && strcmp(r->version, "HTTP/1.0") && !f.tunnel) {
			mesh__gw_pool_put(prog, port, up);
			up = -1;
		}
		const char *p = buf;
		size_t len = (size_t)n;
		if (pending_line) {
			size_t take = len < sizeof pre - npre ? len : sizeof pre - npre;
			memcpy(pre + npre, p, take);
			npre += take;
			p += take;
			len -= take;
			char *nl = memchr(pre, '\n', npre);
			if (!nl && npre < sizeof pre && !done)
				continue;
			pending_line = 0;
			sscanf(pre, "HTTP/1.%*d %d", &o->status);
			size_t first = nl ? (size_t)(nl + 1 - pre) : npre;
			static const char hdr[] = "X-Mesh-Cold-Start: 1\r\n";
			if (mesh__gw_send_all(c->link.fd, pre, first) || (cold && nl && mesh__gw_send_all(c->link.fd, hdr, sizeof hdr - 1)) ||
			    mesh__gw_send_all(c->link.fd, pre + first, npre - first)) {
				rc = -1;
				break;
			}
			o->bytes += npre;
		}
		if (len && mesh__gw_send_all(c->link.fd, p, len)) {
			rc = -1;
			break;
		}
		o->bytes += len;
	}
	if (up >= 0)
		close(up);
	if (rc == -1)
		o->client_close = 1;
	return rc;
}

/* The chunked body after the head r in c->buf, read whole and decoded (by
 * the framer: the strict reading of the head's): the buffer becomes the
 * head without Transfer-Encoding, with Content-Length, the body, then the
 * bytes after it (the next request's); r parsed again.  0, an HTTP status
 * (400 malformed, 413 past max_body or a chunk size too long), or -1 (the
 * client went away, no memory). */
static int dechunk(struct mesh__gw_client *c, struct mesh__gw_req *r)
{
	struct mesh_hframe f;
	struct mesh_hframe_ev ev;
	struct mesh_buf body = MESH_BUF_INIT, nb = MESH_BUF_INIT;
	size_t pos = r->head_len, max = c->g->c.max_body;
	int rc = 0;
	mesh_hframe_init(&f);
	mesh_hframe_feed(&f, 0, c->buf, r->head_len); /* it parsed: the body's first byte is next */
	for (;;) {
		if (pos == c->have && fill(c, c->have + 1) < 0) {
			rc = -1;
			break;
		}
		long k = mesh_hframe_step(&f, 0, c->buf + pos, c->have - pos, &ev);
		if (k < 0) {
			rc = k == MESH_E_TOOBIG ? 413 : 400;
			break;
		}
		pos += (size_t)k;
		if ((ev.what & MESH_HFRAME_EV_CHUNK) && (uint64_t)ev.size > max - body.len) {
			rc = 413;
			break;
		}
		if ((ev.what & MESH_HFRAME_EV_DATA) && mesh_buf_add(&body, ev.p, ev.n) < 0) {
			rc = -1;
			break;
		}
		if (ev.what & MESH_HFRAME_EV_END)
			break;
	}
	if (rc) {
		mesh_buf_release(&body);
		return rc;
	}
	/* The head's lines (CRLF each: it parsed) but Transfer-Encoding,
	 * then Content-Length. */
	for (size_t at = r->h.line_off; at + 2 < r->head_len;) {
		const char *l = c->buf + at, *nl = memchr(l, '\n', r->head_len - at);
		size_t len = (size_t)(nl + 1 - l);
		if (at == r->h.line_off || strncasecmp(l, "transfer-encoding:", 18))
			mesh_buf_add(&nb, l, len);
		at += len;
	}
	mesh_buf_addf(&nb, "Content-Length: %zu\r\n\r\n", body.len);
	size_t head = nb.len;
	if (body.len)
		mesh_buf_add(&nb, body.p, body.len);
	mesh_buf_add(&nb, c->buf + pos, c->have - pos);
	mesh_buf_release(&body);
	if (!nb.p) {
		mesh_buf_release(&nb);
		return -1;
	}
	free(c->buf);
	c->cap = nb.cap;
	c->buf = mesh_buf_detach(&nb, &c->have);
	return mesh__gw_parse_head(c->buf, head, r) ? 400 : 0;
}

/* The model a request is for, from the JSON body; NULL if none. */
static char *body_model(const char *body, size_t n)
{
	const char *fm;
	size_t fl;
	if (mesh__gw_json_model(body, n, &fm, &fl) == 0) /* the usual body, without jansson */
		return fm && fl ? strndup(fm, fl) : NULL;
	json_t *j = json_loadb(body, n, 0, NULL);
	const char *m = j ? json_string_value(json_object_get(j, "model")) : NULL;
	char *out = m && *m ? strdup(m) : NULL;
	json_decref(j);
	return out;
}

/* The fuzz seam (tests/fuzz/fuzz_gw_route.c). */
char *mesh__gw_body_model(const char *body, size_t n)
{
	return body_model(body, n);
}

void mesh__gw_upstream_split(const char *target, char *model, size_t mcap, char *path, size_t pcap)
{
	const char *mname = target + 10;
	size_t mlen = strcspn(mname, "/?");
	snprintf(model, mcap, "%.*s", (int)(mlen < mcap - 1 ? mlen : mcap - 1), mname);
	snprintf(path, pcap, "%s%s", mname[mlen] == '/' ? "" : "/", mname + mlen);
}

/* One request: read, route, answer.  0 to read the next one on this
 * connection, -1 to close it. */
static int one_request(struct mesh__gw_client *c)
{
	struct mesh_gw *g = c->g;
	struct mesh__gw_req r;
	char model[300] = "", path[2100], line[2300];
	long hl = read_head(c);
	if (hl == 0)
		return -1;
	if (hl < 0) {
		mesh__gw_send_error(c->link.fd, 431, "invalid_request_error", NULL, "the request head is longer than 64 KiB", 0, 1);
		return -1;
	}
	int code = mesh__gw_parse_head(c->buf, (size_t)hl, &r);
	if (code) {
		char m[160];
		snprintf(m, sizeof m, "malformed HTTP request: %s",
			 code == 414 ? "the target is 2048 bytes or longer"
			 : code == 501 ? "no such method here"
				       : r.h.why ? r.h.why : "?");
		mesh__gw_send_error(c->link.fd, code, "invalid_request_error", NULL, m, 0, 1);
		return -1;
	}
	if (r.expect > 1) {
		mesh__gw_send_error(c->link.fd, 417, "invalid_request_error", NULL, "the only expectation taken is 100-continue",
				    0, 1);
		return -1;
	}
	if (r.te) {
		if (r.expect && c->have == (size_t)hl && mesh__gw_send_all(c->link.fd, "HTTP/1.1 100 Continue\r\n\r\n", 25))
			return -1;
		code = dechunk(c, &r);
		if (code) {
			if (code > 0)
				mesh__gw_send_error(c->link.fd, code, "invalid_request_error", NULL,
					   code == 413 ? "the request body is larger than the gateway takes"
						       : "malformed chunked request body",
					   0, 1);
			return -1;
		}
		hl = (long)r.head_len;
	}
	if (r.cl > g->c.max_body) {
		char m[128];
		snprintf(m, sizeof m, "the request body is larger than %zu bytes", g->c.max_body);
		mesh__gw_send_error(c->link.fd, 413, "invalid_request_error", NULL, m, 0, 1);
		return -1;
	}
	if (r.expect && r.cl && c->have < (size_t)hl + r.cl &&
	    mesh__gw_send_all(c->link.fd, "HTTP/1.1 100 Continue\r\n\r\n", 25))
		return -1;
	if (fill(c, (size_t)hl + (size_t)r.cl) < 0)
		return -1;
	mesh__gw_req_forward(c->buf, &r);

	uint64_t t0 = mesh_mono_ns();
	set_busy(c, 1);
	int close_it = r.close, status = 0, cold = 0;
	size_t bytes = 0;
	struct mesh__gw_prog *p = NULL;
	size_t qlen = strcspn(r.target, "?");
	snprintf(path, sizeof path, "%s", r.target);
	if (!strncmp(r.target, "/upstream/", 10)) {
		mesh__gw_upstream_split(r.target, model, sizeof model, path, sizeof path);
	} else if ((qlen == 10 || qlen == 11) && !strncmp(r.target, "/v1/models/", qlen)) {
		if (strcmp(r.method, "GET") && strcmp(r.method, "HEAD")) {
			status = 405;
			mesh__gw_send_error(c->link.fd, 405, "invalid_request_error", NULL, "GET /v1/models lists the models", 0, close_it);
		} else {
			status = 200;
			if (mesh__gw_send_models(g, c->link.fd, close_it))
				close_it = 1;
		}
		goto done;
	} else if (!strcmp(r.method, "POST") && !strncmp(r.target, "/v1/", 4)) {
		char *m = body_model(c->buf + hl, (size_t)r.cl);
		if (!m) {
			status = 400;
			mesh__gw_send_error(c->link.fd, 400, "invalid_request_error", "missing_model",
				   "the body must be JSON with a \"model\" string: meshd routes by it", 0, close_it);
			goto done;
		}
		snprintf(model, sizeof model, "%.299s", m);
		free(m);
	} else {
		status = 404;
		mesh__gw_send_error(c->link.fd, 404, "invalid_request_error", NULL,
			   "no route: POST /v1/... with a model, GET /v1/models, or /upstream/<model>/...", 0, close_it);
		goto done;
	}
	p = mesh__gw_find(g, model);
	if (!p) {
		status = 404;
		mesh__gw_send_unknown_model(g, c->link.fd, model, close_it);
		goto done;
	}
	int port = 0;
	unsigned retry = 0;
	char *why = NULL;
	uint64_t t_q = mesh_mono_ns();
	/* Made before the wait: a cold start's supervisor may send it itself. */
	snprintf(line, sizeof line, "%s %s %s\r\n", r.method, path, r.version);
	struct mesh__gw_first first = {.line = line, .nline = strlen(line), .rest = c->buf + r.fwd_off,
				       .nrest = r.head_len - r.fwd_off + (size_t)r.cl, .fd = -1};
	code = mesh__gw_acquire(p, c->link.fd, &port, &cold, &why, &retry, &first);
	t_q = cold || code ? mesh_mono_ns() - t_q : 0;
	if (code == 499) {
		status = code;
		close_it = 1;
		mesh__gw_count(p, 0, t_q);
		mesh__gw_log(g, MESH_GW_INFO, "%s", why);
		free(why);
		goto done;
	}
	if (code) {
		mesh__gw_count(p, 0, t_q);
		status = code;
		mesh__gw_send_error(c->link.fd, code, code == 503 ? "service_unavailable" : "upstream_error", NULL, why, retry,
			   close_it);
		free(why);
		goto done;
	}
	struct mesh__gw_relay_out o;
	code = forward(c, p, &r, line, port, cold, t0, &o, &first);
	mesh__gw_release(p);
	bytes = o.bytes;
	mesh__gw_count(p, code == 0, t_q);
	status = mesh__gw_relay_end(g, p, c->link.fd, code, &o, port, &close_it);
done:
	mesh__gw_access(g, &r, model, status, cold, bytes, t0);
	/* What is left in buf is the next request's. */
	size_t used = (size_t)hl + (size_t)r.cl;
	memmove(c->buf, c->buf + used, c->have - used);
	c->have -= used;
	set_busy(c, 0);
	pthread_mutex_lock(&g->mu);
	if (g->draining)
		close_it = 1;
	pthread_mutex_unlock(&g->mu);
	return close_it ? -1 : 0;
}

void mesh__gw_conn_free(struct mesh__gw_client *c)
{
	struct mesh_gw *g = c->g;
	pthread_mutex_lock(&g->mu);
	if (c->link.prev)
		c->link.prev->next = c->link.next;
	else
		g->conns = c->link.next;
	if (c->link.next)
		c->link.next->prev = c->link.prev;
	g->nconns--;
	pthread_cond_broadcast(&g->cv_all);
	pthread_mutex_unlock(&g->mu);
	shutdown(c->link.fd, SHUT_WR);
	close(c->link.fd);
	free(c->buf);
	free(c);
}

static void *conn_main(void *arg)
{
	struct mesh__gw_client *c = arg;
	/* Its request answered, a connection goes back to a loop (the warm
	 * path); this thread serves it only while it needs one. */
	while (one_request(c) == 0)
		if (mesh__gw_loop_back(c) == 0)
			return NULL;
	mesh__gw_conn_free(c);
	return NULL;
}

int mesh__gw_conn_thread(struct mesh__gw_client *c)
{
	pthread_t th;
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 512 << 10);
	int rc = pthread_create(&th, &at, conn_main, c);
	pthread_attr_destroy(&at);
	return rc ? -1 : 0;
}

static void *accept_main(void *arg)
{
	struct mesh_gw *g = arg;
	for (;;) {
		int fd = accept4(g->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				mesh_sleep_ns(10000000ull);
				continue;
			}
			return NULL; /* the listener was shut down */
		}
		int one = 1;
		/* A keep-alive connection idle this long is closed (on a thread: its
		 * recv times out; on a loop: its scan). */
		struct timeval idle = {300, 0};
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);
		pthread_mutex_lock(&g->mu);
		int full = g->nconns >= g->c.max_conns, draining = g->draining;
		pthread_mutex_unlock(&g->mu);
		if (full || draining) {
			mesh__gw_send_error(fd, 503, "service_unavailable", NULL,
				   draining ? "meshd is shutting down" : "too many connections", 5, 1);
			close(fd);
			continue;
		}
		struct mesh__gw_client *c = calloc(1, mesh__gw_client_size());
		if (!c) {
			close(fd);
			continue;
		}
		c->g = g;
		c->link.fd = fd;
		pthread_mutex_lock(&g->mu);
		c->link.next = g->conns;
		if (g->conns)
			g->conns->prev = &c->link;
		g->conns = &c->link;
		g->nconns++;
		pthread_mutex_unlock(&g->mu);
		/* An event loop serves it; a thread when there is none. */
		if (mesh__gw_loop_add(c) && mesh__gw_conn_thread(c))
			mesh__gw_conn_free(c);
	}
}

int mesh_gw_open(struct mesh_gw **out, const struct mesh_gw_config *cfg, char **err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int loopback = 0, rc, one = 1;
	struct mesh_gw *g;
	*out = NULL;
	if (mesh_addr_parse(cfg->listen, &ss, &len, &loopback) < 0)
		return mesh_errf(err, MESH_E_PARSE, "'%s' is not ADDR:PORT (a numeric address, or localhost)", cfg->listen);
	if (!loopback && !cfg->allow_public)
		return mesh_errf(err, MESH_E_REFUSED,
				 "'%s' is not a loopback address: give --http-public to serve the gateway there",
				 cfg->listen);
	if (!(g = calloc(1, sizeof *g)))
		return mesh_errf(err, -ENOMEM, "out of memory");
	g->c = *cfg;
	g->lfd = -1;
	if (!g->c.max_body)
		g->c.max_body = 16u << 20;
	if (!g->c.max_queue)
		g->c.max_queue = 256;
	if (!g->c.max_conns)
		g->c.max_conns = 1024;
	if (!g->c.backoff_ns)
		g->c.backoff_ns = 500000000ull;
	if (!g->c.log_max)
		g->c.log_max = MESH_HOST_LOG_MAX;
	if (!g->c.request_timeout_ns)
		g->c.request_timeout_ns = 1800ull * 1000000000ull;
	if (!g->c.response_timeout_ns)
		g->c.response_timeout_ns = 300ull * 1000000000ull;
	if (!g->c.idle_stream_timeout_ns)
		g->c.idle_stream_timeout_ns = 300ull * 1000000000ull;
	if (!g->c.probe_interval_ns)
		g->c.probe_interval_ns = 10ull * 1000000000ull;
	if (!g->c.probe_failures)
		g->c.probe_failures = 3;
	pthread_mutex_init(&g->mu, NULL);
	mesh__gw_cond_init(&g->cv_all);
	mesh__gw_cond_init(&g->cv_budget);
	g->catalog = strdup(cfg->catalog);
	g->logs = strdup(cfg->logs);
	g->c.listen = NULL;
	if (!g->catalog || !g->logs) {
		rc = mesh_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	rc = mesh__gw_catalog(g, err);
	if (rc)
		goto fail;
	rc = mesh_proc_spawner_new(&g->sp);
	if (rc) {
		mesh_errf(err, rc, "cannot start the spawner thread: %s", strerror(-rc));
		goto fail;
	}
	g->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g->lfd < 0 || setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(g->lfd, (struct sockaddr *)&ss, len) < 0 || listen(g->lfd, 1024) < 0) {
		rc = mesh_errf(err, -errno, "cannot listen on '%s': %s", cfg->listen, strerror(errno));
		goto fail;
	}
	len = sizeof ss;
	getsockname(g->lfd, (struct sockaddr *)&ss, &len);
	g->port = ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
						: ((struct sockaddr_in6 *)&ss)->sin6_port);
	if ((rc = mesh__gw_loops_start(g, g->c.threads)))
		mesh__gw_log(g, MESH_GW_WARN, "gateway: no event loop (%s): a thread per connection", strerror(-rc));
	if ((rc = -pthread_create(&g->accept_th, NULL, accept_main, g))) {
		mesh_errf(err, rc, "cannot start the accept thread");
		goto fail;
	}
	g->accept_started = 1;
	*out = g;
	return 0;
fail:
	g->drained = 1; /* nothing was served: nothing to drain */
	mesh_gw_free(g);
	return rc;
}

int mesh_gw_port(const struct mesh_gw *g)
{
	return g->port;
}

void mesh_gw_drain(struct mesh_gw *g)
{
	uint64_t t0 = mesh_mono_ns(), deadline = t0 + g->c.drain_timeout_ns;
	pthread_mutex_lock(&g->mu);
	if (g->drained) {
		pthread_mutex_unlock(&g->mu);
		return;
	}
	g->draining = g->drained = 1;
	/* Idle connections end now; busy ones after their response. */
	for (struct mesh__gw_conn *k = g->conns; k; k = k->next)
		if (!k->busy)
			shutdown(k->fd, SHUT_RD);
	for (size_t i = 0; i < g->nprogs; i++)
		pthread_cond_broadcast(&g->progs[i].cv);
	pthread_cond_broadcast(&g->cv_budget);
	unsigned busy = g->busy;
	pthread_mutex_unlock(&g->mu);
	if (g->lfd >= 0)
		shutdown(g->lfd, SHUT_RDWR);
	if (g->accept_started) {
		pthread_join(g->accept_th, NULL);
		g->accept_started = 0;
	}
	mesh__gw_log(g, MESH_GW_INFO, "gateway draining: requests=%u in flight", busy);
	pthread_mutex_lock(&g->mu);
	while (g->busy) {
		struct timespec ts = {(time_t)(deadline / 1000000000ull), (long)(deadline % 1000000000ull)};
		if (pthread_cond_timedwait(&g->cv_all, &g->mu, &ts) == ETIMEDOUT)
			break;
	}
	busy = g->busy;
	pthread_mutex_unlock(&g->mu);
	if (busy)
		mesh__gw_log(g, MESH_GW_WARN, "gateway drain timeout: requests=%u cut", busy);
	/* Every program stops (a request still in flight sees its end). */
	uint64_t grace = 0;
	for (size_t i = 0; i < g->nprogs; i++)
		if (g->progs[i].m.stop_grace_ns > grace)
			grace = g->progs[i].m.stop_grace_ns;
	mesh__gw_stop_all(g, mesh_mono_ns() + grace + 5000000000ull);
	pthread_mutex_lock(&g->mu);
	for (struct mesh__gw_conn *k = g->conns; k; k = k->next)
		shutdown(k->fd, SHUT_RDWR);
	uint64_t end = mesh_mono_ns() + 5000000000ull;
	while (g->nconns) {
		struct timespec ts = {(time_t)(end / 1000000000ull), (long)(end % 1000000000ull)};
		if (pthread_cond_timedwait(&g->cv_all, &g->mu, &ts) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&g->mu);
	mesh__gw_loops_stop(g);
	mesh__gw_log(g, MESH_GW_INFO, "gateway drained in %.1f ms", (double)(mesh_mono_ns() - t0) / 1e6);
}

void mesh_gw_free(struct mesh_gw *g)
{
	if (!g)
		return;
	mesh_gw_drain(g);
	pthread_mutex_lock(&g->mu);
	int left = g->nconns || g->nsup;
	pthread_mutex_unlock(&g->mu);
	mesh__gw_loops_stop(g); /* none left after a drain; started by an open that failed after */
	if (left)
		return; /* a thread still holds it (a drain past its bounds): leaked, not freed under it */
	if (g->lfd >= 0)
		close(g->lfd);
	mesh_proc_spawner_free(g->sp);
	mesh__gw_progs_free(g);
	pthread_cond_destroy(&g->cv_all);
	pthread_cond_destroy(&g->cv_budget);
	pthread_mutex_destroy(&g->mu);
	free(g->catalog);
	free(g->logs);
	free(g);
}
