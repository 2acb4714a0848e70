/* The gateway's warm path on event loops (gw_loop.c) and what it shares with
 * the thread-per-connection path of gw.c: a client connection, a request's
 * parsed head, the end of a relay.  Internal to src/gateway (see gw_int.h). */
#ifndef MESH_GATEWAY_GW_LOOP_H
#define MESH_GATEWAY_GW_LOOP_H

#include "gateway/gw_int.h"
#include "http/hframe.h"

#include <stddef.h>
#include <stdint.h>

struct mesh__gw_req {
	char method[24];
	char target[2048];
	char version[16];
	size_t head_len;     /* bytes of the head, blank line included */
	/* Where the header lines that go to the program start: the request
	 * line before them is meshd's own (after the request line at first;
	 * mesh__gw_req_forward drops the hop-by-hop fields). */
	size_t fwd_off;
	uint64_t cl;
	int te, close, expect; /* te: the body is chunked; expect: as hframe's */
	struct mesh_hframe_head h; /* the parse */
};

/* One client connection: its socket and the bytes read and not yet used
 * (the head of the next request first). */
struct mesh__gw_client {
	struct mesh_gw *g;
	struct mesh__gw_conn link;
	char *buf;
	size_t have, cap;
};

/* How a relay of one response ended. */
struct mesh__gw_relay_out {
	int status;
	size_t bytes;
	int client_close; /* the response ended with the upstream's close, or was cut */
	int gone;	  /* the client went away first */
	int timeout;	  /* past a limit: 1 request, 2 response start, 3 idle stream */
};

/* gw.c */
/* The request head in buf[0..head_len) (its length from
 * mesh_hframe_head_end), read by hframe's strict parser (http/hframe.h:
 * RFC 9112, no whitespace before a colon, no obs-fold, no CTLs, one
 * Content-Length, no Content-Length with Transfer-Encoding, chunked alone,
 * CRLF lines) into r.  0, or the HTTP status to refuse it with: 400
 * malformed, 431 too long or too many fields, 414 a target of 2048 bytes
 * or more, 501 a method of 24 or more. */
int mesh__gw_parse_head(const char *buf, size_t head_len, struct mesh__gw_req *r);
/* Before r (parsed from buf) goes to a program: its hop-by-hop fields,
 * those its Connection names and Expect are dropped (hframe's
 * mesh_hframe_head_forward) and r->fwd_off set.  Once a request. */
void mesh__gw_req_forward(char *buf, struct mesh__gw_req *r);
/* Serves c on a thread of its own (blocking socket) until it closes; c is
 * linked in g->conns and counted.  0, or -1 (no thread: c is untouched). */
int mesh__gw_conn_thread(struct mesh__gw_client *c);
/* Unlinks c from g->conns, closes it, frees it. */
void mesh__gw_conn_free(struct mesh__gw_client *c);
/* Grows c's buffer to hold at least want bytes.  0 or -1 (no memory). */
int mesh__gw_grow(struct mesh__gw_client *c, size_t want);

/* gw_body.c */
/* After the relay of a request to p (code: the relay's, 0 whole, an HTTP
 * status not yet answered, -1 cut; the caller has released its place and
 * counted it): counts a limit passed, logs, and answers on fd what is to
 * answer.  Returns the status for the access line; sets *close_it when the
 * connection must end. */
int mesh__gw_relay_end(struct mesh_gw *g, struct mesh__gw_prog *p, int fd, int code,
		       const struct mesh__gw_relay_out *o, int port, int *close_it);
/* The access line of one request (t0: when its head was read). */
void mesh__gw_access(struct mesh_gw *g, const struct mesh__gw_req *r, const char *model, int status, int cold,
		     size_t bytes, uint64_t t0);

/* gw_loop.c */
/* Starts the event loops (n: 0 picks by the CPUs).  0 or a negative errno. */
int mesh__gw_loops_start(struct mesh_gw *g, unsigned n);
/* The size to allocate for a client connection (a loop's is larger). */
size_t mesh__gw_client_size(void);
/* Hands a new connection (linked and counted) to a loop; -1: no loop, the
 * caller serves it on a thread. */
int mesh__gw_loop_add(struct mesh__gw_client *c);
/* A connection served on a thread whose request was answered (not busy)
 * goes back to a loop, with the bytes it has read.  0, or -1 (no loop, or
 * meshd is draining: the thread keeps it). */
int mesh__gw_loop_back(struct mesh__gw_client *c);
/* Stops and joins the loops (after the drain: a connection left in one is
 * leaked with g). */
void mesh__gw_loops_stop(struct mesh_gw *g);

#endif
