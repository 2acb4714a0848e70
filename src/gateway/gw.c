/* The model gateway's object: open (the catalog, the listener, the event
 * loops, the accept thread), drain and free; the accept thread, which
 * counts each connection against the caps (max_conns, and
 * max_conns_per_peer by client address), closing an idle one to make room
 * where one is needed, and gives it to a loop (gw_loop.c serves it from
 * there).  See gw.h for the contract. */
#include "gateway/gw_answer.h"
#include "gateway/gw_loop.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/list.h"
#include "base/thread.h"
#include "host/host.h"
#include "http/http.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The answer of a connection past a cap, or while draining (why): sent
 * whole on the accepted socket (a few hundred bytes), then closed. */
static void turn_away(struct mesh_gw *g, int fd, const char *why)
{
	struct mesh_buf b = MESH_BUF_INIT;
	char h[MESH_GW_RID_MAX + 20] = "X-Request-Id: ";
	size_t n = 14 + mesh__gw_request_id(g, h + 14);
	memcpy(h + n, "\r\n", 2);
	if (mesh__gw_answer_error(&b, 503, "service_unavailable", NULL, why, 5, 1) == 0 &&
	    mesh__gw_answer_insert(&b, 0, h, n + 2) == 0) {
		if (send(fd, b.p, b.len, MSG_NOSIGNAL) < 0) {
			/* gone already: nothing to tell */
		}
	}
	mesh_buf_release(&b);
	close(fd);
}

/* ---- The client addresses' counts ---- */

/* The key of a client's address: an IPv4 address as ::ffff:a.b.c.d, an
 * IPv6 address's /64 (one host holds a /64: per address, it could open a
 * connection from each). */
static void peer_key(const struct sockaddr_storage *ss, unsigned char key[16])
{
	memset(key, 0, 16);
	if (ss->ss_family == AF_INET) {
		key[10] = key[11] = 0xff;
		memcpy(key + 12, &((const struct sockaddr_in *)ss)->sin_addr, 4);
	} else if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
		memcpy(key, a->s6_addr, IN6_IS_ADDR_V4MAPPED(a) ? 16 : 8);
	}
}

static size_t peer_home(const struct mesh_gw *g, const unsigned char key[16])
{
	uint64_t a, b;
	memcpy(&a, key, 8);
	memcpy(&b, key + 8, 8);
	uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ull);
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 29;
	return (size_t)x & (g->peers_cap - 1);
}

/* Under mu: key's entry, or the free one where it would go.  The table is
 * never more than half full (see mesh__gw_conn_link): the probe ends. */
static struct mesh__gw_peer *peer_at(struct mesh_gw *g, const unsigned char key[16])
{
	size_t i = peer_home(g, key);
	while (g->peers[i].n && memcmp(g->peers[i].key, key, 16))
		i = (i + 1) & (g->peers_cap - 1);
	return &g->peers[i];
}

/* Under mu: one connection less from key's address; its entry freed at 0
 * (the entries after it in its run moved back: no tombstones). */
static void peer_drop(struct mesh_gw *g, const unsigned char key[16])
{
	struct mesh__gw_peer *e = peer_at(g, key);
	size_t mask = g->peers_cap - 1, i = (size_t)(e - g->peers), j = i;
	if (!e->n || --e->n)
		return;
	for (;;) {
		j = (j + 1) & mask;
		if (!g->peers[j].n)
			break;
		size_t k = peer_home(g, g->peers[j].key);
		/* It stays when its home is cyclically in (i, j]. */
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		g->peers[i] = g->peers[j];
		i = j;
	}
	g->peers[i].n = 0;
	g->npeers--;
}

void mesh__gw_conn_link(struct mesh_gw *g, struct mesh__gw_conn *c)
{
	struct mesh__gw_peer *e = peer_at(g, c->peer);
	c->evicted = 0;
	mesh_list_insert_after(&g->conns, NULL, c, link);
	g->nconns++;
	/* At most max_conns are counted (the accept thread's admit), and the
	 * table has twice as many entries: at most half full. */
	if (!e->n++) {
		memcpy(e->key, c->peer, 16);
		g->npeers++;
	}
}

void mesh__gw_conn_unlink(struct mesh_gw *g, struct mesh__gw_conn *c)
{
	if (c->busy) {
		g->busy--;
		c->busy = 0;
	}
	mesh_list_remove(&g->conns, c, link);
	g->nconns--;
	if (c->evicted)
		g->nevicted--;
	else
		peer_drop(g, c->peer);
	pthread_cond_broadcast(&g->cv_all);
}

/* Under mu: the connection idle the longest (of key's address; NULL: of
 * any) is closed to make room: no longer counted against the caps, its
 * loop sees its end and frees it.  1, or 0 (none is idle). */
static int close_idle(struct mesh_gw *g, const unsigned char *key)
{
	struct mesh__gw_conn *best = NULL;
	uint64_t best_t = 0;
	for (struct mesh__gw_conn *k = g->conns.head; k; k = k->link.next) {
		if (k->evicted || k->busy || (key && memcmp(k->peer, key, 16)))
			continue;
		uint64_t t = atomic_load_explicit(&k->idle_since, memory_order_relaxed);
		if (t && (!best || t < best_t)) {
			best = k;
			best_t = t;
		}
	}
	if (!best)
		return 0;
	best->evicted = 1;
	g->nevicted++;
	g->closed_idle++;
	peer_drop(g, best->peer);
	shutdown(best->fd, SHUT_RDWR);
	return 1;
}

/* Under mu: NULL when a connection from key's address may be served (an
 * idle one closed first where a cap was reached), else why not. */
static const char *admit(struct mesh_gw *g, const unsigned char key[16])
{
	if (g->draining)
		return "meshd is shutting down";
	if (peer_at(g, key)->n >= g->c.max_conns_per_peer && !close_idle(g, key)) {
		g->refused_peer++;
		return "too many connections from this client address";
	}
	if (g->nconns - g->nevicted >= g->c.max_conns && !close_idle(g, NULL)) {
		g->refused_full++;
		return "too many connections";
	}
	return NULL;
}

/* The connections turned away and closed for room, in a line at most
 * every 10 s (a crowd of them is one line, not one each). */
static void log_admissions(struct mesh_gw *g)
{
	uint64_t now = mesh_mono_ns(), peer, full, idle;
	pthread_mutex_lock(&g->mu);
	peer = g->refused_peer;
	full = g->refused_full;
	idle = g->closed_idle;
	int due = (peer || full || idle) && now - g->refused_logged >= 10000000000ull;
	if (due) {
		g->refused_peer = g->refused_full = g->closed_idle = 0;
		g->refused_logged = now;
	}
	pthread_mutex_unlock(&g->mu);
	if (due)
		mesh__gw_log(g, peer || full ? MESH_GW_WARN : MESH_GW_INFO,
			     "gateway connections: refused=%llu at an address's share (--http-max-conns-per-peer %u), "
			     "refused=%llu at --http-max-conns %u, idle closed for room=%llu",
			     (unsigned long long)peer, g->c.max_conns_per_peer, (unsigned long long)full, g->c.max_conns,
			     (unsigned long long)idle);
}

static void *accept_main(void *arg)
{
	struct mesh_gw *g = arg;
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof ss;
		unsigned char key[16];
		int fd = accept4(g->lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
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
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		peer_key(&ss, key);
		pthread_mutex_lock(&g->mu);
		const char *why = admit(g, key);
		pthread_mutex_unlock(&g->mu);
		/* Only this thread adds connections: the room admit saw stays. */
		if (why || mesh__gw_loop_add(g, fd, key))
			turn_away(g, fd, why ? why : "out of memory");
		log_admissions(g);
	}
}

/* The open files max_conns needs: a client's and, while relayed, a
 * program's connection each, and room for the loops' kept connections and
 * meshd's own besides. */
#define GW_FD_SPARE 512

/* Without the files for max_conns, the accept thread meets EMFILE before
 * the cap, and a new client waits in the listen backlog, unanswered (a
 * soft limit of 1,024 did so at about 1,000 connections): the soft limit is
 * raised to what max_conns needs, as far as the hard limit allows; short
 * of it, max_conns is lowered to fit, and said. */
static void fit_nofile(struct mesh_gw *g)
{
	struct rlimit rl;
	rlim_t want = 2 * (rlim_t)g->c.max_conns + GW_FD_SPARE;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= want)
		return;
	rlim_t was = rl.rlim_cur;
	rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		rl.rlim_cur = was;
	if (rl.rlim_cur >= want)
		return;
	rlim_t fit = rl.rlim_cur >= 2 * GW_FD_SPARE ? (rl.rlim_cur - GW_FD_SPARE) / 2 : rl.rlim_cur / 4;
	mesh__gw_log(g, MESH_GW_WARN,
		     "gateway: the open-files limit (%llu, hard %llu) holds %llu client connections: "
		     "--http-max-conns %u is lowered to it",
		     (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
		     (unsigned long long)(fit ? fit : 1), g->c.max_conns);
	g->c.max_conns = fit ? (uint32_t)fit : 1;
}

/* The configuration's defaults where it gives none (g->c), max_conns
 * fitted to the open-files limit before max_conns_per_peer follows it. */
static void defaults(struct mesh_gw *g)
{
	if (!g->c.max_body)
		g->c.max_body = 16u << 20;
	if (!g->c.max_queue)
		g->c.max_queue = 256;
	if (!g->c.max_conns)
		g->c.max_conns = 1024;
	fit_nofile(g);
	if (!g->c.max_conns_per_peer)
		g->c.max_conns_per_peer = g->c.max_conns > 1 ? g->c.max_conns / 2 : 1;
	if (!g->c.header_timeout_ns)
		g->c.header_timeout_ns = 60ull * 1000000000ull;
	if (!g->c.body_timeout_ns)
		g->c.body_timeout_ns = 60ull * 1000000000ull;
	if (!g->c.backoff_ns)
		g->c.backoff_ns = 500000000ull;
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
}

/* The listener (g->lfd) on ss (len bytes; name: its ADDR:PORT as given,
 * for the message), and the port it got (g->port).  0, or an error
 * (*err set; g->lfd may be open: mesh_gw_free closes it). */
static int listen_on(struct mesh_gw *g, struct sockaddr_storage *ss, socklen_t len, const char *name, char **err)
{
	int one = 1;
	g->lfd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (g->lfd < 0 || setsockopt(g->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(g->lfd, (struct sockaddr *)ss, len) < 0 || listen(g->lfd, 1024) < 0)
		return mesh_errf(err, -errno, "cannot listen on '%s': %s", name, strerror(errno));
	len = sizeof *ss;
	if (getsockname(g->lfd, (struct sockaddr *)ss, &len) < 0)
		return mesh_errf(err, -errno, "cannot learn the port of '%s': %s", name, strerror(errno));
	g->port = ntohs(ss->ss_family == AF_INET ? ((struct sockaddr_in *)ss)->sin_port
						 : ((struct sockaddr_in6 *)ss)->sin6_port);
	return 0;
}

int mesh_gw_open(struct mesh_gw **out, const struct mesh_gw_config *cfg, char **err)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int loopback = 0, rc;
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
	if (getrandom(&g->rid_boot, sizeof g->rid_boot, GRND_NONBLOCK) != sizeof g->rid_boot)
		g->rid_boot = (uint32_t)(mesh_mono_ns() ^ ((uint64_t)getpid() << 16));
	defaults(g);
	pthread_mutex_init(&g->mu, NULL);
	mesh__gw_cond_init(&g->cv_all);
	g->peers_cap = 16;
	while (g->peers_cap < 2 * (size_t)g->c.max_conns)
		g->peers_cap *= 2;
	g->peers = calloc(g->peers_cap, sizeof *g->peers);
	g->catalog = strdup(cfg->catalog);
	g->host = cfg->host;
	g->c.listen = NULL;
	if (!g->catalog || !g->peers) {
		rc = mesh_errf(err, -ENOMEM, "out of memory");
		goto fail;
	}
	rc = mesh__gw_guard_open(&g->guard, cfg, err);
	if (rc)
		goto fail;
	if (!g->host) {
		rc = mesh_errf(err, MESH_E_RANGE, "no host to run the programs");
		goto fail;
	}
	rc = mesh__gw_catalog(g, err);
	if (rc)
		goto fail;
	rc = listen_on(g, &ss, len, cfg->listen, err);
	if (rc)
		goto fail;
	if ((rc = mesh__gw_loops_start(g, g->c.threads))) {
		mesh_errf(err, rc, "cannot start the gateway's event loops: %s", strerror(-rc));
		goto fail;
	}
	if ((rc = mesh_thread_start(&g->accept_th, accept_main, g))) {
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
	for (struct mesh__gw_conn *k = g->conns.head; k; k = k->link.next)
		if (!k->busy)
			shutdown(k->fd, SHUT_RD);
	mesh__gw_look(g); /* the waiting requests are answered 503 */
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
	pthread_mutex_lock(&g->mu);
	for (size_t i = 0; i < g->nprogs; i++)
		if (g->progs[i]->img.m.stop_grace_ns > grace)
			grace = g->progs[i]->img.m.stop_grace_ns;
	pthread_mutex_unlock(&g->mu);
	mesh__gw_stop_all(g, mesh_mono_ns() + grace + 5000000000ull);
	pthread_mutex_lock(&g->mu);
	for (struct mesh__gw_conn *k = g->conns.head; k; k = k->link.next)
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
	int left = g->nconns || g->nlive;
	pthread_mutex_unlock(&g->mu);
	mesh__gw_loops_stop(g); /* none left after a drain; started by an open that failed after */
	if (left)
		return; /* a thread still holds it (a drain past its bounds): leaked, not freed under it */
	if (g->lfd >= 0)
		close(g->lfd);
	mesh__gw_progs_free(g);
	mesh__gw_guard_free(&g->guard);
	pthread_cond_destroy(&g->cv_all);
	pthread_mutex_destroy(&g->mu);
	free(g->catalog);
	free(g->peers);
	free(g);
}
