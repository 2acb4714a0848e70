/* The gateway's event loops themselves (see gw_loop.c for what they serve):
 * a thread per loop, each with a libevent event_base of its own, the accept
 * thread's hand-over through an eventfd, the timer of the limits, and the
 * connections each loop keeps to the programs -- in its events from their
 * connect to their close, so a request costs no epoll_ctl and no lock for
 * them. */
#include "gateway/gw_loop_int.h"

#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* The client's event lives after the struct, in the same allocation (gw.c
 * allocates mesh__gw_client_size()), assigned with event_assign: no
 * allocation per connection. */
struct event *mesh__gwl_ev_client(struct lconn *lc)
{
	return (struct event *)(void *)((char *)lc + ((sizeof *lc + 15) & ~(size_t)15));
}

static void on_up_cb(evutil_socket_t fd, short what, void *arg);

/* fd (a connection to p's process on port) into the loop, both directions
 * and the program's close (EPOLLRDHUP), edge-triggered, for lc's request.
 * 0, or -1 (fd is closed). */
int mesh__gwl_up_wrap(struct lconn *lc, int fd)
{
	struct upc *u = calloc(1, sizeof *u);
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
	free(u);
}

/* Closes the request's connection to the program. */
void mesh__gwl_up_close(struct lconn *lc)
{
	if (lc->u)
		upc_free(lc->u);
	lc->u = NULL;
	lc->up = -1;
}

/* The request's connection, whose response ended whole, kept by the loop
 * for the next request to the same process. */
void mesh__gwl_up_keep(struct lconn *lc)
{
	struct mesh__gw_loop *L = lc->L;
	struct upc *u = lc->u;
	if (L->nidle >= LOOP_IDLE_MAX) {
		mesh__gwl_up_close(lc);
		return;
	}
	u->owner = NULL;
	u->next = L->idle;
	L->idle = u;
	L->nidle++;
	lc->u = NULL;
	lc->up = -1;
}

/* A kept connection to lc's program, for its request: 0, or -1 (none). */
int mesh__gwl_up_take(struct lconn *lc)
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
		mesh__gwl_send_request(lc);
	else if (lc->state == S_RELAY && !lc->nout && (what & (EV_READ | EV_CLOSED)))
		mesh__gwl_relay(lc);
	mesh__gwl_reap_dead(L);
}

/* The scan's timer: every SCAN_NS while a request is in flight, else every
 * IDLE_CHECK_NS while the loop keeps connections to programs, else every
 * second (the keep-alive bound needs no finer). */
static void arm_tick(struct mesh__gw_loop *L, int fast)
{
	uint64_t ns = fast ? SCAN_NS : L->idle ? IDLE_CHECK_NS : 1000000000ull;
	struct timeval tv = {(time_t)(ns / 1000000000ull), (suseconds_t)(ns % 1000000000ull / 1000)};
	L->tick_fast = fast;
	event_add(L->tick, &tv);
}

void mesh__gwl_relay_begins(struct mesh__gw_loop *L)
{
	if (L->nrelay++ == 0 && !L->tick_fast)
		arm_tick(L, 1);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct mesh__gw_loop *L = arg;
	(void)fd;
	(void)what;
	mesh__gwl_scan(L, mesh_mono_ns());
	mesh__gwl_reap_dead(L);
	idle_check(L, 0);
	arm_tick(L, L->nrelay > 0);
}

/* The connections the accept thread gave: into the loop's list and its
 * events (whose first report says what they have already sent); the loop
 * ends when it is to stop. */
static void on_wake(evutil_socket_t fd, short what, void *arg)
{
	struct mesh__gw_loop *L = arg;
	uint64_t v;
	(void)what;
	if (read(fd, &v, sizeof v) < 0) {
		/* nothing new: a spurious wake-up */
	}
	pthread_mutex_lock(&L->mu);
	struct lconn *in = L->incoming;
	int stop = L->stop;
	L->incoming = NULL;
	pthread_mutex_unlock(&L->mu);
	while (in) {
		struct lconn *lc = in;
		in = in->next;
		lc->prev = NULL;
		lc->next = L->conns;
		if (L->conns)
			L->conns->prev = lc;
		L->conns = lc;
		event_assign(mesh__gwl_ev_client(lc), L->base, lc->c.link.fd, EV_READ | EV_WRITE | EV_CLOSED | EV_ET | EV_PERSIST,
			     mesh__gwl_on_client_cb, lc);
		event_add(mesh__gwl_ev_client(lc), NULL);
	}
	if (stop)
		event_base_loopbreak(L->base);
}

static void *loop_main(void *arg)
{
	struct mesh__gw_loop *L = arg;
	event_base_loop(L->base, EVLOOP_NO_EXIT_ON_EMPTY);
	mesh__gwl_reap_dead(L);
	idle_check(L, 1);
	return NULL;
}

/* A base for one thread: no lock (only its thread touches it; the accept
 * thread and the threads that give connections back go through evfd). */
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
		errno = 0;
		L->base = new_base();
		L->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (L->base && L->evfd >= 0) {
			L->wake = event_new(L->base, L->evfd, EV_READ | EV_PERSIST, on_wake, L);
			L->tick = evtimer_new(L->base, on_tick, L);
		}
		if (L->tick)
			arm_tick(L, 0); /* before its thread: the base has no lock */
		if (!L->wake || !L->tick || event_add(L->wake, NULL) < 0 ||
		    pthread_create(&L->th, NULL, loop_main, L)) {
			int rc = -(errno ? errno : EAGAIN);
			mesh__gw_loops_stop(g);
			return rc;
		}
		L->started = 1;
	}
	return 0;
}

size_t mesh__gw_client_size(void)
{
	/* the struct, then its event, 16-byte aligned (ev_client) */
	return ((sizeof(struct lconn) + 15) & ~(size_t)15) + event_get_struct_event_size();
}

/* Gives lc to the next loop (its socket made non-blocking). */
static void to_loop(struct mesh_gw *g, struct lconn *lc)
{
	struct mesh__gw_loop *L = &g->loops[g->next_loop++ % g->nloops];
	uint64_t one = 1;
	int fl = fcntl(lc->c.link.fd, F_GETFL);
	fcntl(lc->c.link.fd, F_SETFL, fl | O_NONBLOCK);
	memset((char *)lc + sizeof lc->c, 0, sizeof *lc - sizeof lc->c);
	lc->L = L;
	lc->up = -1;
	lc->state = S_HEAD;
	lc->last_io = mesh_mono_ns();
	pthread_mutex_lock(&L->mu);
	lc->next = L->incoming;
	L->incoming = lc;
	pthread_mutex_unlock(&L->mu);
	if (write(L->evfd, &one, sizeof one) < 0) {
		/* the counter is full: readable anyway */
	}
}

int mesh__gw_loop_add(struct mesh__gw_client *c)
{
	if (!c->g->nloops)
		return -1;
	to_loop(c->g, (struct lconn *)c);
	return 0;
}

int mesh__gw_loop_back(struct mesh__gw_client *c)
{
	struct mesh_gw *g = c->g;
	int rc = -1;
	/* Under mu: the loops are stopped (after a drain) under it too. */
	pthread_mutex_lock(&g->mu);
	if (g->nloops && !g->draining) {
		to_loop(g, (struct lconn *)c);
		rc = 0;
	}
	pthread_mutex_unlock(&g->mu);
	return rc;
}

void mesh__gw_loops_stop(struct mesh_gw *g)
{
	pthread_mutex_lock(&g->mu);
	unsigned n = g->nloops;
	g->nloops = 0; /* no thread gives a connection back from now on */
	pthread_mutex_unlock(&g->mu);
	for (unsigned i = 0; i < n; i++) {
		struct mesh__gw_loop *L = &g->loops[i];
		uint64_t one = 1;
		if (L->started) {
			pthread_mutex_lock(&L->mu);
			L->stop = 1;
			pthread_mutex_unlock(&L->mu);
			if (write(L->evfd, &one, sizeof one) < 0) {
				/* full: readable anyway */
			}
			pthread_join(L->th, NULL);
		}
		if (L->wake)
			event_free(L->wake);
		if (L->tick)
			event_free(L->tick);
		if (L->base)
			event_base_free(L->base);
		if (L->evfd >= 0)
			close(L->evfd);
		pthread_mutex_destroy(&L->mu);
	}
	free(g->loops);
	g->loops = NULL;
}
