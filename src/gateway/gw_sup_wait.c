/* A cold start's wait (docs/gateway.md, "Cold start"): the bare listen
 * tests until the program's port listens, the HTTP probe on the connection
 * the test made (kept alive), and the first waiter's request sent on it the
 * moment the probe passes.  The loop that paces them is gw_sup.c's. */
#include "gateway/gw_sup_int.h"

#include "autoscale/probe.h"
#include "base/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* The pace above after elapsed ns since the spawn. */
uint64_t mesh__gw_sup_pace(uint64_t elapsed, uint64_t div, uint64_t lo, uint64_t hi)
{
	uint64_t v = elapsed / div;
	return v < lo ? lo : v > hi ? hi : v;
}

/* Whether something listens on the program's port: a non-blocking
 * loopback connect, refused at once while nothing does (no HTTP, nothing
 * for the program to answer).  A connect still in progress counts as
 * listening: the HTTP probe says the rest.  A refused socket connects
 * again once its error is read and connect(AF_UNSPEC) reset it (else:
 * ECONNABORTED): one socket for all, 9 us of CPU a test against 12. */
int mesh__gw_sup_listening(struct mesh__gw_sup *s)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int up = 1, connected = 1;
	s->listen_tests++;
	if (s->lfd < 0 && (s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return 1; /* cannot tell: let the probe look */
	if (connect(s->lfd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		/* Loopback answers at once, but a non-blocking connect may still
		 * say "in progress": its outcome comes within microseconds. */
		struct pollfd pf = {s->lfd, POLLOUT, 0};
		int e = errno;
		socklen_t sl = sizeof e;
		if (e == EINPROGRESS && poll(&pf, 1, 5) == 1 && getsockopt(s->lfd, SOL_SOCKET, SO_ERROR, &e, &sl) < 0)
			e = errno;
		up = e != ECONNREFUSED;
		connected = e == EINPROGRESS ? 0 : !e; /* EINPROGRESS: poll's 5 ms passed */
	}
	if (up && connected && s->pfd < 0) {
		/* The probe's connection, then the first request's: the program
		 * accepts one connection for the whole start, not a bare one it
		 * must see closed, then the probe's, then the request's. */
		s->pfd = s->lfd;
		s->lfd = -1;
		return 1;
	}
	struct sockaddr reset = {.sa_family = AF_UNSPEC};
	if (up || connect(s->lfd, &reset, sizeof reset) < 0) {
		close(s->lfd); /* connected, or cannot be reused: a new one next time */
		s->lfd = -1;
	}
	if (up)
		return 1;
	s->t_refused = mesh_mono_ns();
	snprintf(s->last_probe, sizeof s->last_probe, "cold: nothing listens on 127.0.0.1:%d yet", s->port);
	return 0;
}

/* One probe of the program, its answer within answer_ns: 1 warm, 0 not
 * (s->last_probe says why). */
int mesh__gw_sup_probe(struct mesh__gw_sup *s, uint64_t answer_ns)
{
	const struct mesh_manifest *m = &s->p->m;
	struct mesh_probe_target t;
	struct mesh_probe_opts o = MESH_PROBE_OPTS_INIT;
	struct mesh_probe_result r;
	mesh_probe_target_default(&t);
	t.port = (uint16_t)s->port;
	snprintf(t.path, sizeof t.path, "%s", m->probe_path ? m->probe_path : MESH_PROBE_DEFAULT_PATH);
	o.connect_timeout_ns = 500000000ull;
	o.response_timeout_ns = answer_ns;
	o.model = m->probe_path ? NULL : m->models[0];
	s->refused = 0;
	if (s->pfd >= 0) {
		/* The start's kept connection (the warm state's periodic probes
		 * have none: a connection each, as before). */
		int keep = 0, rc = mesh_probe_fd(s->pfd, &t, &o, &r, &keep);
		if (!keep) {
			close(s->pfd);
			s->pfd = -1;
		}
		if (rc < 0)
			return 0;
	} else if (mesh_probe(&t, &o, &r) < 0) {
		return 0;
	}
	s->refused = r.err == -ECONNREFUSED;
	int warm = r.warm;
	if (m->probe_status) {
		warm = r.status == (int)m->probe_status && (r.warm || r.phase == MESH_PROBE_JUDGE);
		if (!warm && r.status)
			snprintf(r.reason, sizeof r.reason, "cold: HTTP %d, not %u, from GET %.180s", r.status,
				 m->probe_status, t.path);
	}
	snprintf(s->last_probe, sizeof s->last_probe, "%s", r.reason);
	if (!warm && s->pfd >= 0) {
		/* Kept only for the first request: "not yet" probes each get a
		 * new connection, as before (a kept one leaves the kernel's quick
		 * ACKs: a server's second write, Nagle's, waited 40 ms for the
		 * delayed ACK of its first, so each probe of a loading server
		 * took 40 ms, not 2). */
		close(s->pfd);
		s->pfd = -1;
	}
	return warm;
}

/* Under mu, the program just warm: the first waiter's request (p->first)
 * goes on the probe's connection now, from this thread, so the program
 * works on it while the waiter's thread wakes (on a loaded machine a
 * wake-up costs milliseconds).  At most 64 KiB of it, without blocking
 * (mu is held); the waiter sends the rest.  It takes the request's place
 * (as acquire would).  When it went: its time; else 0. */
uint64_t mesh__gw_sup_send_first(struct mesh__gw_sup *s)
{
	struct mesh__gw_prog *p = s->p;
	struct mesh__gw_first *f = p->first;
	if (!f || s->pfd < 0 || (p->m.max_concurrency && p->inflight >= p->m.max_concurrency))
		return 0;
	size_t cap = 65536, nl = f->nline < cap ? f->nline : cap, nr = f->nrest < cap - nl ? f->nrest : cap - nl;
	struct iovec iov[2] = {{(void *)f->line, nl}, {(void *)f->rest, nr}};
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = nr ? 2 : 1};
	ssize_t n = sendmsg(s->pfd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n <= 0)
		return 0; /* the waiter sends it (on this connection, from the pool, or a new one) */
	p->first = NULL;
	f->fd = s->pfd;
	f->sent = (size_t)n;
	f->port = s->port;
	f->t_sent = mesh_mono_ns();
	s->pfd = -1;
	p->inflight++;
	p->requests++;
	return f->t_sent;
}

