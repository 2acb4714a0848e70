/* The supervisor of one HTTP program's start and run (gw_sup.c), and
 * its start's wait (gw_sup_wait.c: the listen tests, the probe, the first
 * request sent with the probe's answer).  One supervisor thread owns each
 * struct; fields of the program (p) are under g->mu as gw_prog.h says.
 * Not a public contract. */
#ifndef MESH_GATEWAY_GW_SUP_INT_H
#define MESH_GATEWAY_GW_SUP_INT_H

#include "gateway/gw_prog.h"

/* The start's wait (docs/gateway.md, "Cold start").  Until the port
 * listens, a bare connect on one socket kept for them (refused at once,
 * about 10 us of CPU, nothing for the program to answer) every 1/4000 of the
 * time since the spawn, at least LISTEN_MIN_NS, at most LISTEN_MAX_NS;
 * once it listens, the HTTP probe at once, and while that says "not yet"
 * (a model loading) it is repeated every 1/1000 of the time since the
 * spawn, at least PROBE_MIN_NS, at most PROBE_MAX_NS.  So the listen is
 * seen within 0.25 ms for the first second, within 0.5 ms of a 2 s start
 * and at most 5 ms of a long one (0.1 % if it listens while it loads),
 * and a loading server answers at most a probe every 2 ms. */
#define LISTEN_DIV 4000ull
#define LISTEN_MIN_NS 250000ull
#define LISTEN_MAX_NS 5000000ull
#define PROBE_MIN_NS 2000000ull
#define PROBE_MAX_NS 100000000ull

#define GPU_PIDS_MAX 64

struct mesh__gw_sup {
	struct mesh__gw_prog *p;
	struct mesh_proc_child c;
	int out, evfd, port, reaped, status;
	int refused; /* the last probe's connect was refused: nothing listens yet */
	int lfd;     /* the listen tests' socket, reused while refused (-1: none) */
	/* The start's connection to the program (-1: none): the listen test
	 * that connected, then the probes' while the program keeps it alive;
	 * at warm it goes to the pool, and the first request rides it. */
	int pfd;
	unsigned listen_tests, http_probes; /* of this start, until warm */
	/* For the warm line (mesh_mono_ns; 0: not yet): the spawn answered (the
	 * program exec'd), the last refused test, the first that connected,
	 * the last probe's start. */
	uint64_t t_exec, t_refused, t_listen, t_probe;
	struct mesh_proc_tail tail;
	char last_probe[256];
	uint64_t gen;	  /* the start this supervisor runs */
	char cgdir[600]; /* its cgroup ("" : none) */
	uint64_t next_measure;
	pid_t gpu_pids[GPU_PIDS_MAX]; /* its pids NVML was seen listing */
	size_t ngpu;
};

/* The pace above after elapsed ns since the spawn. */
uint64_t mesh__gw_sup_pace(uint64_t elapsed, uint64_t div, uint64_t lo, uint64_t hi);
/* Whether something listens on the program's port (a bare connect); 1
 * also when it cannot tell.  A test that connected is kept as s->pfd. */
int mesh__gw_sup_listening(struct mesh__gw_sup *s);
/* One probe, its answer within answer_ns (on s->pfd while it has one): 1
 * warm, 0 not (s->last_probe says why). */
int mesh__gw_sup_probe(struct mesh__gw_sup *s, uint64_t answer_ns);
/* Under mu, the program just warm: sends the first waiter's request on
 * s->pfd; when it went, its time, else 0. */
uint64_t mesh__gw_sup_send_first(struct mesh__gw_sup *s);

#endif
