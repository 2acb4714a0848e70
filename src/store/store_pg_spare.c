/* Spare connections (store_pg.h, mesh_pg_spares_start): a thread keeps a
 * few connections to one database made and unused, and connect_db
 * (store_pg.c) takes one of them before it connects.  A connection's
 * start is a backend's fork and login on the server, 3 to 10 ms on these
 * 2 cores, and a meshd following a store opened two of them between a
 * job's NOTIFY and its first lease (the results' handle, then the job's).
 *
 * Only connections this thread made and nobody used are kept (no session
 * state to undo).  One taken is checked first: a socket with something to
 * read -- an idle backend sends nothing -- was closed by the server
 * (restarted, idle_session_timeout, a terminated backend) and is dropped.
 * One taken wakes the thread to make another.  A failed connect waits
 * RETRY_NS before the next, and the thread connects without blocking
 * (mesh__pg_connect_polled), so a stop does not wait for TCP to give up. */
#include "store/store_pg_int.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/thread.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SPARE_MAX 8
#define RETRY_NS (1 * MESH_NS_PER_S)
/* After one is taken, the next is made this much later: a backend's start
 * is CPU of the server's host, and the handle that took the spare is in
 * its own first statements now. */
#define REFILL_NS (100 * MESH_NS_PER_MS)

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	char *conninfo; /* the database they reach; NULL: none kept */
	unsigned want, n;
	PGconn *c[SPARE_MAX];
	int stop, on;
	pthread_t th;
	uint64_t made, taken, dropped;
} sp = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int keeper_stopped(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&sp.mu);
	int s = sp.stop;
	pthread_mutex_unlock(&sp.mu);
	return s;
}

/* Waits (sp.mu held) until the wall clock's at or a stop. */
static void wait_until(uint64_t at)
{
	struct timespec ts = {(time_t)(at / MESH_NS_PER_S), (long)(at % MESH_NS_PER_S)};
	while (!sp.stop && pthread_cond_timedwait(&sp.cv, &sp.mu, &ts) != ETIMEDOUT) {
	}
}

static void *keeper_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&sp.mu);
	while (!sp.stop) {
		if (sp.n >= sp.want) {
			pthread_cond_wait(&sp.cv, &sp.mu);
			if (!sp.stop && sp.n < sp.want)
				wait_until(mesh_wall_ns() + REFILL_NS);
			continue;
		}
		char *ci = sp.conninfo;
		pthread_mutex_unlock(&sp.mu);
		PGconn *c = mesh__pg_connect_polled(ci, keeper_stopped, NULL);
		if (c) {
			mesh__pg_warm(c);
			if (PQstatus(c) != CONNECTION_OK || PQtransactionStatus(c) != PQTRANS_IDLE) {
				PQfinish(c);
				c = NULL;
			}
		}
		pthread_mutex_lock(&sp.mu);
		if (c && !sp.stop && sp.n < SPARE_MAX) {
			sp.c[sp.n++] = c;
			sp.made++;
			continue;
		}
		if (c) {
			PQfinish(c);
			continue;
		}
		/* the database is not answering: not a connect a millisecond */
		wait_until(mesh_wall_ns() + RETRY_NS);
	}
	pthread_mutex_unlock(&sp.mu);
	return NULL;
}

int mesh_pg_spares_start(const char *url, unsigned n)
{
	char job[MESH_NODE_MAX + 1];
	if (!mesh_pg_url_is(url))
		return MESH_E_PARSE;
	char *ci = mesh__pg_conninfo(url, job, sizeof job);
	if (!ci)
		return MESH_E_PARSE;
	pthread_mutex_lock(&sp.mu);
	if (sp.on) {
		pthread_mutex_unlock(&sp.mu);
		free(ci);
		return MESH_E_STATE;
	}
	sp.conninfo = ci;
	sp.want = n < SPARE_MAX ? n : SPARE_MAX;
	sp.stop = 0;
	sp.made = sp.taken = sp.dropped = 0;
	int rc = mesh_thread_start(&sp.th, keeper_main, NULL);
	if (rc < 0) {
		sp.conninfo = NULL;
		free(ci);
	} else {
		sp.on = 1;
	}
	pthread_mutex_unlock(&sp.mu);
	return rc < 0 ? rc : 0;
}

void mesh_pg_spares_stop(void)
{
	pthread_mutex_lock(&sp.mu);
	if (!sp.on) {
		pthread_mutex_unlock(&sp.mu);
		return;
	}
	sp.stop = 1;
	pthread_cond_broadcast(&sp.cv);
	pthread_mutex_unlock(&sp.mu);
	pthread_join(sp.th, NULL);
	pthread_mutex_lock(&sp.mu);
	while (sp.n)
		PQfinish(sp.c[--sp.n]);
	free(sp.conninfo);
	sp.conninfo = NULL;
	sp.on = 0;
	pthread_mutex_unlock(&sp.mu);
}

void mesh_pg_spares_counts(uint64_t *made, uint64_t *taken, uint64_t *dropped)
{
	pthread_mutex_lock(&sp.mu);
	*made = sp.made;
	*taken = sp.taken;
	*dropped = sp.dropped;
	pthread_mutex_unlock(&sp.mu);
}

/* Still open on the server's side: nothing to read on an idle connection. */
static int alive(PGconn *c)
{
	struct pollfd p = {PQsocket(c), POLLIN | POLLRDHUP, 0};
	if (p.fd < 0 || PQstatus(c) != CONNECTION_OK)
		return 0;
	int r;
	while ((r = poll(&p, 1, 0)) < 0 && errno == EINTR) {
	}
	return r == 0;
}

PGconn *mesh__pg_spare_take(const char *conninfo)
{
	PGconn *c = NULL;
	pthread_mutex_lock(&sp.mu);
	if (sp.on && sp.conninfo && !strcmp(sp.conninfo, conninfo)) {
		while (sp.n && !c) {
			c = sp.c[--sp.n];
			if (!alive(c)) {
				PQfinish(c);
				c = NULL;
				sp.dropped++;
			}
		}
		if (c)
			sp.taken++;
		pthread_cond_broadcast(&sp.cv);
	}
	pthread_mutex_unlock(&sp.mu);
	return c;
}
