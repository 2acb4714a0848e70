/* mesh serve's insides, shared by its two files: serve.c (the loop, and the
 * supervisor of the one server process: spawn it, its output and tail, the
 * warmth probe on its helper thread, the policy's actuation, stop and reap
 * of its group; open and free) and front.c (the clients: the listener,
 * accept, the bounded cold-start queue, the error answers, the relay of
 * each connection, the addresses; the loop's registrations of fds).
 * Everything runs on the loop's thread except probe_main.  Not a public
 * contract: see serve.h for that. */
#ifndef MESH_SERVE_SERVE_INT_H
#define MESH_SERVE_SERVE_INT_H

#include "autoscale/policy.h"
#include "autoscale/probe.h"
#include "base/list.h"
#include "http/hframe.h"
#include "http/relay.h"
#include "serve/serve.h"
#include "proc/proc.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* What a watch is for. */
enum mesh__watch_kind { W_LISTEN, W_SIGNAL, W_OUTPUT, W_PROBE, W_CLIENT, W_UPSTREAM };

struct event;
struct event_base;
struct mesh__conn;
/* One fd's registration with the loop's event_base: a read event and a
 * write event (made on first use), each added only while wanted, so that a
 * mask change costs what one epoll_ctl costs. */
struct mesh__watch {
	enum mesh__watch_kind kind;
	struct mesh__conn *conn;
	struct mesh_serve *s;
	int fd;              /* the fd the events were set for; -1: none yet */
	uint32_t mask;       /* wanted now: EPOLLIN / EPOLLOUT; 0 = not watched */
	struct event *ev[2]; /* [0] read, [1] write; NULL until first wanted */
};

enum mesh__conn_state { C_QUEUED, C_CONNECTING, C_RELAY, C_REJECTING, C_LINGER };

struct mesh__conn {
	struct mesh__watch w[2]; /* [0] client, [1] upstream */
	int fd[2];
	enum mesh__conn_state state;
	uint64_t deadline; /* queue wait or linger end */
	struct mesh_relay relay;
	int relaying;
	int reject_code, reject_waited;
	int dead; /* closed; freed after the current batch of events */
	int wants; /* queued: counts as demand (sent a byte, or TCP mode, or --start-on-connect) */
	char *reject_why; /* owned copy while it waits to be refused */
	struct mesh_serve *s;
	unsigned counted;   /* http: requests in flight on it, as added to s->inflight */
	uint64_t requests;  /* http: requests seen on it, as added to the stats */
	struct mesh_hframe hf; /* http: the framing of both directions */
	uint64_t head_t0, last_in; /* http: the current request head's start (0: none), the client's last byte */
	MESH_LINK(struct mesh__conn) link; /* on one of the lists below, or the dead chain */
};

struct mesh__conn_list {
	MESH_LIST(struct mesh__conn); /* head, tail */
	size_t n;
};

struct mesh_serve {
	struct mesh_serve_config c;
	char **argv;
	char *path; /* argv[0] resolved */
	struct mesh_proc_spawner *sp;
	char *log_path;
	struct mesh_probe_target target;
	struct mesh_probe_opts popts;
	struct sockaddr_storage up_addr;
	socklen_t up_len;
	char listen_addr[80];

	struct event_base *base;
	struct event *ev_pass;  /* activated by a batch of events: the pass runs after it */
	struct event *ev_timer; /* the nearest deadline: the pass then */
	int pass_queued;        /* ev_pass is active */
	uint64_t timer_at;      /* the deadline ev_timer is armed for (0: not armed) */
	int loop_err;          /* the loop could not go on (a timer not armed) */
	int lfd, sfd, logfd;
	int spare_fd; /* kept open to be given up when accept says EMFILE (see front.c) */
	struct mesh_relay_pool pool;
	struct mesh__watch w_listen, w_signal, w_output, w_probe;
	uint64_t accept_resume;
	uint64_t read_next; /* --http: the nearest read timeout of a relayed client (front.c); UINT64_MAX: none */

	/* the probe thread */
	pthread_t probe_thread;
	int probe_started;
	int probe_req[2], probe_res[2];
	uint64_t probe_gen;
	int probe_inflight;
	uint64_t probe_next, probe_interval;

	/* the server */
	int state;
	pid_t pid;
	int leader_done, leader_status;
	int out_fd;
	uint64_t t_spawn, t_stop, start_deadline;
	struct mesh_proc_stop stop;
	int stop_reason_crash;
	struct mesh_proc_tail tail;
	const char *tail_view[MESH_PROC_TAIL_LINES + 1];

	/* the clients: queue waits for warm, active is connecting or relayed,
	 * rejecting waits to see whether it speaks HTTP, linger was answered */
	struct mesh__conn_list queue, active, rejecting, linger;
	struct mesh__conn *dead; /* closed connections, chained by link.next */
	uint64_t t_open, idle_since, warm_acc;
	int quitting;      /* stop signals received */
	int draining;      /* 1 draining, 2 drained (the server is being stopped) */
	uint64_t drain_deadline;
	uint64_t inflight; /* http: requests in flight over all connections */
	size_t queue_wanting; /* queued connections that are demand */
	int busy;          /* demand was > 0 at the last look (idle_since runs when 0) */
	int stop_sig;
	uint32_t max_conns;
	char last_probe[256]; /* the last cold probe's reason */
	char fail_msg[512];   /* the reason given to clients of a failed start */
	struct mesh_serve_stats st;
	struct mesh_as_config pol;
};

/* serve.c */

/* The events' callback: the fd of w (arg) is ready; what is libevent's
 * EV_READ / EV_WRITE. */
void mesh__serve_on_fd(int fd, short what, void *arg);
/* Calls c.on_event (if set) with an event of kind for the current pid. */
void mesh__serve_emit_simple(struct mesh_serve *s, int kind, int status, uint64_t elapsed, const char *reason);

/* front.c */

/* Makes want (EPOLLIN and/or EPOLLOUT; 0: none) what the loop watches fd
 * for through w (level-triggered; a new fd replaces the old one's
 * registration).  0 or a negative code (epoll_ctl's, -ENOMEM). */
int mesh__serve_watch(struct mesh_serve *s, struct mesh__watch *w, int fd, uint32_t want);
/* Sets up w (unwatched) for kind and conn. */
void mesh__serve_watch_init(struct mesh_serve *s, struct mesh__watch *w, enum mesh__watch_kind kind, struct mesh__conn *conn);
/* Frees w's events (taking them out of the loop). */
void mesh__serve_watch_free(struct mesh__watch *w);

/* Resolves c.upstream into up_addr and the probe's target (host, port,
 * c.probe_path).  0, MESH_E_PARSE or a resolver's code; why gets the
 * subject. */
int mesh__serve_resolve_upstream(struct mesh_serve *s, char *why, size_t why_len);
/* Binds and listens on c.listen: lfd, listen_addr.  Same returns. */
int mesh__serve_listen(struct mesh_serve *s, char *why, size_t why_len);
/* After a warm probe: connect to addr ("ip:port", "[v6]:port"), where the
 * probe got through, from now on (a name may resolve to several
 * addresses, and the server may listen on one).  Ignores what is not an
 * address. */
void mesh__serve_pin_upstream(struct mesh_serve *s, const char *addr);
/* The listener is readable: accepts, relays (warm), queues or refuses. */
void mesh__serve_accept(struct mesh_serve *s);
/* An event on a connection's client or upstream side (EPOLLIN and/or
 * EPOLLOUT: readable (or closed, or in error), writable). */
void mesh__serve_conn_event(struct mesh_serve *s, struct mesh__watch *w, uint32_t ev);
/* Frees the connections closed during the last batch of events. */
void mesh__serve_free_dead(struct mesh_serve *s);
/* Every queued connection to the server (warm) / refused with code. */
void mesh__serve_dispatch_queue(struct mesh_serve *s);
void mesh__serve_reject_queue(struct mesh_serve *s, int code, const char *why);
/* Closes every connection to the server (connecting or relayed); --http:
 * one whose request waits for an answer of which nothing went to the
 * client is answered 502 with why first. */
void mesh__serve_close_active(struct mesh_serve *s, const char *why);
/* What the policy sees: requests in flight and demand-queued (http), else
 * open connections (queued and active). */
uint64_t mesh__serve_demand(const struct mesh_serve *s);
/* Drain start: closes the connections with nothing in flight (http). */
void mesh__serve_close_idle(struct mesh_serve *s);
/* The clients' deadlines (queue wait, refusal, linger, accept pause). */
void mesh__serve_front_timers(struct mesh_serve *s, uint64_t now);
/* The nearest of those deadlines, or t if none is nearer. */
uint64_t mesh__serve_front_deadline(const struct mesh_serve *s, uint64_t t);
/* A stop: closes the listener, refuses the queue (503). */
void mesh__serve_unlisten(struct mesh_serve *s);
/* The loop's end: closes what is relayed, answers those being refused,
 * drops those lingering. */
void mesh__serve_front_end(struct mesh_serve *s);
/* Closes every connection without a word (mesh_serve_free). */
void mesh__serve_front_free(struct mesh_serve *s);

#endif
