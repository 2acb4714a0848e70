/* The model gateway's object: open (the catalog, the listener, the event
 * loops, the accept thread), drain and free; the accept thread, which gives
 * each connection to a loop (gw_loop.c serves it from there).  See gw.h for
 * the contract. */
#include "gateway/gw_answer.h"
#include "gateway/gw_loop.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
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
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The answer of a connection past max_conns, or while draining: sent
 * whole on the accepted socket (a few hundred bytes), then closed. */
static void turn_away(struct mesh_gw *g, int fd, int draining)
{
	struct mesh_buf b = MESH_BUF_INIT;
	char h[MESH_GW_RID_MAX + 20] = "X-Request-Id: ";
	size_t n = 14 + mesh__gw_request_id(g, h + 14);
	memcpy(h + n, "\r\n", 2);
	if (mesh__gw_answer_error(&b, 503, "service_unavailable", NULL,
				  draining ? "meshd is shutting down" : "too many connections", 5, 1) == 0 &&
	    mesh__gw_answer_insert(&b, 0, h, n + 2) == 0) {
		if (send(fd, b.p, b.len, MSG_NOSIGNAL) < 0) {
			/* gone already: nothing to tell */
		}
	}
	mesh_buf_release(&b);
	close(fd);
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
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		pthread_mutex_lock(&g->mu);
		int full = g->nconns >= g->c.max_conns, draining = g->draining;
		pthread_mutex_unlock(&g->mu);
		if (full || draining || mesh__gw_loop_add(g, fd))
			turn_away(g, fd, draining);
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
	if (getrandom(&g->rid_boot, sizeof g->rid_boot, GRND_NONBLOCK) != sizeof g->rid_boot)
		g->rid_boot = (uint32_t)(mesh_mono_ns() ^ ((uint64_t)getpid() << 16));
	if (!g->c.max_body)
		g->c.max_body = 16u << 20;
	if (!g->c.max_queue)
		g->c.max_queue = 256;
	if (!g->c.max_conns)
		g->c.max_conns = 1024;
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
	pthread_mutex_init(&g->mu, NULL);
	mesh__gw_cond_init(&g->cv_all);
	g->catalog = strdup(cfg->catalog);
	g->host = cfg->host;
	g->c.listen = NULL;
	if (!g->catalog) {
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
	for (struct mesh__gw_conn *k = g->conns; k; k = k->next)
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
	for (size_t i = 0; i < g->nprogs; i++)
		if (g->progs[i].img.m.stop_grace_ns > grace)
			grace = g->progs[i].img.m.stop_grace_ns;
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
	free(g);
}
