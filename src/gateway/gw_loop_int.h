/* gw_loop.c and gw_loop_run.c: a loop's client connections and its
 * connections to the programs.  Internal to src/gateway (see gw_loop.h). */
#ifndef MESH_GATEWAY_GW_LOOP_INT_H
#define MESH_GATEWAY_GW_LOOP_INT_H

#include "gateway/gw_loop.h"
#include "http/hframe.h"

#include <event2/event.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SCAN_NS 20000000ull	      /* the limits' resolution */
#define KEEPALIVE_NS 300000000000ull /* a client connection silent this long between requests */
#define MAX_LOOPS 4

enum { S_HEAD, S_SEND, S_RELAY, S_DEAD };

struct lconn {
	struct mesh__gw_client c; /* first: a thread handed it frees it as the client */
	struct mesh__gw_loop *L;
	struct lconn *prev, *next; /* the loop's connections (its scan) */
	int state, handoff;
	int readable; /* edge-triggered: the client may have bytes unread */
	int rdhup;    /* the client closed its sending side */
	uint64_t last_io;
	/* The request in progress (S_SEND, S_RELAY). */
	struct mesh__gw_req r;
	char model[300], line[2300];
	size_t nline;
	size_t hscan; /* mesh_hframe_head_end's place in the buffer's head */
	struct mesh__gw_prog *p;
	struct upc *u; /* the program's connection of the request (NULL: none) */
	int port, up, reused, got, pending_line, done; /* up: u's fd, or -1 */
	size_t sent;  /* of the line and the rest, to the program */
	struct mesh_hframe f;
	struct mesh__gw_relay_out o;
	uint64_t t0, last_read;
	char pre[8192]; /* the response's first bytes, until its status line is whole */
	size_t npre;
	char *out;	/* bytes for the client its socket did not take yet */
	size_t nout, outoff, outcap;
	struct lconn *dead_next;
	/* The client connection's event follows the struct (mesh__gwl_ev_client). */
};

/* A connection of a loop to a program: in the loop's events from its
 * connect to its close (no epoll_ctl per request), the request's while one
 * uses it, else in the loop's idle list (no lock: only its loop uses it). */
struct upc {
	struct mesh__gw_loop *L;
	struct upc *next;	  /* idle list */
	struct mesh__gw_prog *p;
	int port, fd;
	/* The program closed its side (EV_CLOSED): the bytes read so far may
	 * not be the last, and no event will come for the close again. */
	int rdhup;
	struct lconn *owner;	  /* the request using it; NULL: idle */
	struct event *ev;
};

struct mesh__gw_loop {
	struct mesh_gw *g;
	struct event_base *base;
	struct event *wake, *tick; /* evfd's; the scan's timer */
	int evfd, tick_fast;	    /* tick is armed at SCAN_NS (else slower: arm_tick) */
	pthread_t th;
	int started, stop;
	pthread_mutex_t mu;	/* incoming, stop */
	struct lconn *incoming;	/* from the accept thread */
	struct lconn *conns, *dead;
	unsigned nrelay;
	struct upc *idle;	/* kept connections to programs, newest first */
	unsigned nidle;
	char buf[65536];
};

/* Idle connections a loop keeps, to all its programs. */
#define LOOP_IDLE_MAX 256
/* The scan's period while a loop keeps idle connections: one to a program
 * that is stopping is closed within it (an idle connection must not hold up
 * a graceful stop; gw_prog.c's pool is closed by the supervisor itself). */
#define IDLE_CHECK_NS 100000000ull

/* gw_loop_run.c: the loop threads, the events, the kept connections. */
/* The client's event: after the struct, in the same allocation (gw.c
 * allocates mesh__gw_client_size()). */
struct event *mesh__gwl_ev_client(struct lconn *lc);
/* fd (a connection to lc->p's process on lc->port) into the loop for lc's
 * request.  0, or -1 (fd is closed). */
int mesh__gwl_up_wrap(struct lconn *lc, int fd);
/* Closes the request's connection to the program (none: nothing). */
void mesh__gwl_up_close(struct lconn *lc);
/* Keeps the request's connection (its response ended whole) for the next. */
void mesh__gwl_up_keep(struct lconn *lc);
/* A kept connection to lc's program and port for its request: 0 or -1. */
int mesh__gwl_up_take(struct lconn *lc);
/* A request goes in flight on L (the limits' timer at its finer period). */
void mesh__gwl_relay_begins(struct mesh__gw_loop *L);

/* gw_loop.c: the requests. */
void mesh__gwl_send_request(struct lconn *lc);
void mesh__gwl_relay(struct lconn *lc);
/* Frees (or hands to a thread) the connections ended by this callback. */
void mesh__gwl_reap_dead(struct mesh__gw_loop *L);
/* The limits and the keep-alive bound at now. */
void mesh__gwl_scan(struct mesh__gw_loop *L, uint64_t now);
void mesh__gwl_on_client_cb(evutil_socket_t fd, short what, void *arg);

#endif
