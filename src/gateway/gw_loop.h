/* The gateway's front (gw_loop.c): a few event loops that serve every
 * client connection from its accept to its close -- read each request,
 * route it, answer what meshd answers itself, wait for a place as an event
 * of the loop (a cold start, the queue, the budget), relay the response.
 * What gw.c (the gateway's open, drain and free, and the accept thread)
 * asks of it.  Internal to src/gateway. */
#ifndef MESH_GATEWAY_GW_LOOP_H
#define MESH_GATEWAY_GW_LOOP_H

#include "gateway/gw_prog.h"

#include <stddef.h>

/* Starts n event loops (0: by the CPUs) and sets g->look to theirs.
 * 0 or a negative errno (none is left running). */
int mesh__gw_loops_start(struct mesh_gw *g, unsigned n);
/* Gives a new client connection (fd, accepted, TCP_NODELAY set; peer: its
 * address's key, gw.c) to the next loop: linked in g->conns and counted
 * (mesh__gw_conn_link), made non-blocking.  0, or -1 (no memory, no loop:
 * fd is the caller's still). */
int mesh__gw_loop_add(struct mesh_gw *g, int fd, const unsigned char peer[16]);
/* Stops and joins the loops (after the drain: a connection left in one is
 * leaked with g).  Called again: nothing. */
void mesh__gw_loops_stop(struct mesh_gw *g);

/* The routing seams (tests/fuzz/fuzz_gw_route.c). */
/* Splits target "/upstream/<model>/P" into model (at most mcap - 1 bytes)
 * and the path "/P" the program gets (the query kept). */
void mesh__gw_upstream_split(const char *target, char *model, size_t mcap, char *path, size_t pcap);

#endif
