/* The PostgreSQL store's wake-ups (store_pg.h): a connection LISTENs on
 * channel 'mesh'; the store NOTIFYs the job's id when work appears. */
#include "base/clock.h"
#include "store/store_pg_int.h"

#include <poll.h>
#include <string.h>

/* LISTEN on the connection, under pg->mu, unless done: 0 or an error.
 * A NOTIFY sent before it reached nobody, so the next wait says "look
 * again" at once (listen_fresh). */
static int listen_once(struct mesh_pg *pg)
{
	int rc = 0;
	if (pg->listening)
		return 0;
	PQclear(mesh__pg_q(pg, "LISTEN mesh", 0, NULL, &rc));
	if (!rc)
		pg->listening = pg->listen_fresh = 1;
	return rc;
}

int mesh_pg_wake_fd(struct mesh_pg *pg)
{
	pthread_mutex_lock(&pg->mu);
	int fd = listen_once(pg) ? -1 : PQsocket(pg->conn);
	pthread_mutex_unlock(&pg->mu);
	return fd;
}

int mesh_pg_wait(struct mesh_pg *pg, uint64_t timeout_ns)
{
	uint64_t end = mesh_mono_ns() + timeout_ns;
	int rc, woke = 0;
	pthread_mutex_lock(&pg->mu);
	if ((rc = listen_once(pg))) {
		pthread_mutex_unlock(&pg->mu);
		return rc;
	}
	woke = pg->listen_fresh;
	pg->listen_fresh = 0;
	while (!woke) {
		PGnotify *nt;
		uint64_t now = mesh_mono_ns();
		if (!PQconsumeInput(pg->conn))
			break; /* the connection is gone: the next call makes it again */
		while ((nt = PQnotifies(pg->conn))) {
			woke |= !strcmp(nt->extra, pg->idtext);
			PQfreemem(nt);
		}
		if (woke || now >= end)
			break;
		struct pollfd pfd = {PQsocket(pg->conn), POLLIN, 0};
		uint64_t ms = (end - now + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS;
		int prc;
		if (pfd.fd < 0)
			break;
		/* Other threads may use the connection meanwhile: a NOTIFY
		 * their call reads waits in libpq's queue for us. */
		pthread_mutex_unlock(&pg->mu);
		prc = poll(&pfd, 1, ms > 50 ? 50 : (int)ms);
		pthread_mutex_lock(&pg->mu);
		if (prc < 0)
			break;
	}
	if (!woke && PQstatus(pg->conn) != CONNECTION_OK)
		pg->listening = 0; /* a new connection listens anew */
	pthread_mutex_unlock(&pg->mu);
	return woke;
}
