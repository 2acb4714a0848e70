/* An HTTP program's readiness and liveness, on its host's loop: what takes
 * the place of a native worker's `ready` (docs/host.md, "Kinds of
 * program").  The instance that owns one (host.c) knows it only through
 * this contract; it knows no instance.
 *
 * The start's wait (docs/gateway.md, "Cold start"): until the program's
 * port listens, a bare non-blocking connect (refused at once, nothing for
 * the program to answer; one socket for all of them) every 1/4000 of the
 * time since the spawn, at least LISTEN_MIN_NS, at most LISTEN_MAX_NS; the
 * moment one connects, the warmth probe (autoscale/probe.h) on that
 * connection; while it says "not yet" (a model loading) it is repeated
 * every 1/1000 of the time since the spawn, at least 2 ms, at most 100 ms,
 * each on a new connection.  Warm: the probe's connection is kept when it
 * can carry a request (mesh__probing_take).
 * Warm: with an interval, the program is probed every interval on a new
 * connection, its answer awaited at most the interval (at least 0.2 s, at
 * most 1 s); after `failures` failed probes in a row it is hung.
 *
 * Its sockets are in the owner's epoll set (level-triggered) with the
 * owner's data word; when one is ready, or at mesh__probing_next's time,
 * the owner calls mesh__probing_step.  Nothing here blocks.
 *
 * Caller protocol:
 *   1. mesh__probing_init(&pr, epfd, tag); fill the target fields below
 *   2. at each spawn, once the program exec'd: mesh__probing_start
 *   3. on its sockets' events and at its deadline: mesh__probing_step, until
 *      it says WARM (the start), or HUNG (warm, with an interval)
 *   4. mesh__probing_close when the process stops or ends (its sockets
 *      closed, nothing pending); then 2 again for the next spawn. */
#ifndef MESH_HOST_PROBING_H
#define MESH_HOST_PROBING_H

#include "autoscale/probe.h"

#include <stdint.h>
#include <sys/socket.h>

#define MESH__PROBING_ADDRS 8

enum { MESH__PROBING_NOT_YET, MESH__PROBING_WARM, MESH__PROBING_HUNG };

struct mesh__probing {
	/* The target, set by the owner before a start. */
	struct mesh_probe_target t; /* host (the request's Host, the messages), port, path */
	struct mesh_probe_opts o;   /* o.model: the model its answer must list (NULL: none) */
	unsigned want_status;	    /* 0: the probe's judgement; else warm iff this status */
	struct sockaddr_storage addrs[MESH__PROBING_ADDRS]; /* tried in order */
	socklen_t lens[MESH__PROBING_ADDRS];
	unsigned naddrs;
	uint64_t interval;	    /* warm: probed this often (0: never) */
	unsigned failures;	    /* warm: hung after this many failed probes in a row */
	/* What it found (the owner reads them). */
	char last[256];		    /* the last probe's (or listen test's) reason */
	char addr[64];		    /* where the warm probe got through */
	unsigned listen_tests, probes;
	/* mesh_mono_ns (0: not yet): the spawn began, the program exec'd, the
	 * last refused test, the first that connected, the last probe's start,
	 * warm; and this thread's CPU spent on the start's tests and probes. */
	uint64_t t0, t_exec, t_refused, t_listen, t_probe, t_warm, cpu_ns;
	/* Private. */
	int epfd;
	uint64_t tag;
	int phase, lfd, pfd, listens, watched;
	int checking; /* warm: the connects and probes are the periodic ones */
	unsigned cur, fails;
	uint64_t due, conn_deadline;
	struct mesh_probe_conn pc;
};

void mesh__probing_init(struct mesh__probing *pr, int epfd, uint64_t tag);
/* The spawn began at t0 and the program exec'd at t_exec: the start's wait
 * begins (its first listen test LISTEN_MIN_NS after t_exec). */
void mesh__probing_start(struct mesh__probing *pr, uint64_t t0, uint64_t t_exec);
/* A step at now (a socket's event, or the time due): NOT_YET, WARM (once,
 * when the start's probe passed: from then on, with an interval, the
 * periodic probe), or HUNG (failures in a row while warm). */
int mesh__probing_step(struct mesh__probing *pr, uint64_t now);
/* When the next step is due without an event (mesh_mono_ns; 0: none). */
uint64_t mesh__probing_next(const struct mesh__probing *pr);
/* The warm probe's connection (non-blocking, TCP_NODELAY), kept for a
 * first request, or -1: the caller's from here. */
int mesh__probing_take(struct mesh__probing *pr);
/* Stops: its sockets closed, out of the epoll set, nothing due. */
void mesh__probing_close(struct mesh__probing *pr);

#endif
