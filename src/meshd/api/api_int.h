/* The insides of meshd's control API, shared by api.c (the HTTP server:
 * requests taken in, the body bound, the socket, start and stop),
 * api_ops.c (each request's op thread and the delivery of its answer) and
 * api_json.c (answers, and the core's structs as JSON).  Not a contract:
 * meshd/api/api.h is. */
#ifndef MESH_MESHD_API_API_INT_H
#define MESH_MESHD_API_API_INT_H

#include "meshd/api/api.h"
#include "meshd/core/ops.h"
#include "meshd/core/feed.h"
#include "base/buf.h"

#include <sys/queue.h> /* before event2: TAILQ_INIT for struct evkeyvalq */
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

struct job;

struct meshd_api {
	const struct meshd_parts *parts; /* main.c's */
	struct meshd_core *core;	 /* parts->core */
	struct event_base *base; /* the core's (not ours to free) */
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	struct event *done_ev;	/* activated by an op thread: answers are queued */
	struct event *stream_ev; /* activated by an op thread: parts of a streamed answer are queued */
	int listen_fd;
	/* Out of fds (EMFILE): the reserve is closed to accept one client and
	 * answer it 503, then reopened; accepting pauses ACCEPT_PAUSE_MS. */
	int reserve_fd;
	struct event *accept_retry;
	uint64_t emfile_logged;	/* loop thread: when "out of fds" was last logged */
	unsigned emfile_refused; /* loop thread: clients refused since */
	struct meshd_api *reg_next; /* apis (reg_mu): the listener's callbacks get the evhttp */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	dev_t dev;	/* the socket file we bound, to unlink only our own */
	ino_t ino;
	int quiesced;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *done;	/* mu: answered, not sent yet (a stack) */
	struct job *streams;	/* mu: streaming, with parts not handed to evhttp yet */
	unsigned threads;	/* mu: op threads not finished */
	unsigned calls;		/* mu: those of them running a call */
	/* GET /v1/events (api_events.c), loop thread only: the followers; the
	 * feed's posts activate feed_ev; ping_ev every PING_EVERY_S. */
	struct follower *followers;
	struct event *feed_ev, *ping_ev;
	atomic_int stopping;	/* new requests get 503 */
	atomic_int inflight;	/* requests begun and not answered */
};

/* One request: what it asked (copied off the loop thread's objects) and
 * the answer its op thread made. */
struct job {
	struct meshd_api *a;
	struct evhttp_request *req;	/* loop thread only */
	struct job *next;
	const char *method;
	char *path;	/* percent-decoded */
	struct evkeyvalq args;
	struct mesh_buf body;
	uint64_t t0;
	int quiet;
	int is_call;		/* POST .../call: counted apart from control requests */
	atomic_int gone;	/* the client went away (its connection closed, or a streamed part
				   found it gone): a queued call gives up, a stream stops */
	struct event *watch;	/* loop thread: a call's connection closing (EV_CLOSED) */
	char what[160];	/* "METHOD /path" for the log line */
	/* the answer */
	unsigned status;
	const char *type, *allow;
	char *data;	/* malloc'd unless data_static */
	size_t len;
	int data_static;
	char type_buf[96]; /* a type made for this answer (job routes) */
	/* A streamed answer (a call whose worker sends parts): the parts wait
	 * in parts (mu) until the loop thread hands them to evhttp. */
	struct evbuffer *parts;	/* mu */
	int streaming;		/* mu: a part came; the answer is 200, chunked */
	int stream_queued;	/* mu: on a->streams */
	struct job *stream_next; /* mu */
	int started;		/* loop thread: the head went out */
};

/* api_events.c: GET /v1/events, on the loop thread (no op thread).  A
 * comment goes to each follower this often when nothing else did. */
#define PING_EVERY_S 15
int meshd__is_events(const char *path);
/* Loop thread: j's request becomes a follower of the feed (or is answered
 * 405/503); j is freed. */
void meshd__events_follow(struct meshd_api *a, struct job *j);
/* The callback of feed_ev (activated: what the followers have not had)
 * and of ping_ev (EV_TIMEOUT: the same, or a ping where nothing was new). */
void meshd__on_followers(evutil_socket_t fd, short what, void *arg);
/* The feed's wake hook (any thread): activates a->feed_ev. */
void meshd__feed_wake(void *arg);
/* Loop thread (or no loop running): the wake hook removed, every follower
 * told "bye" and its stream ended. */
void meshd__events_end(struct meshd_api *a);

/* api_json.c */
/* One event of the feed as its JSON object (NULL without memory). */
json_t *meshd__event_json(const struct meshd_event *e);
/* The answer: data (owned, or static when is_static) goes out as is. */
void meshd__set_answer(struct job *j, unsigned status, const char *type, char *data, size_t n, int is_static);
/* The answer: the JSON body j (consumed; NULL: out of memory, 503). */
void meshd__send_json(struct job *jb, unsigned status, json_t *j);
/* The answer: {"error": msg or err's text, "code": err's name}. */
void meshd__send_error(struct job *jb, unsigned status, int err, const char *msg);
/* meshd__send_error with a formatted message. */
void meshd__send_errorf(struct job *jb, unsigned status, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* An op failed: its message (freed here), or the error's text, with the
 * status meshd_api_status_for(err). */
void meshd__send_op_error(struct job *jb, int err, char *msg);
/* {"ok": true, "name", "action", "result": extra (consumed; NULL: none)}. */
void meshd__send_ok(struct job *jb, const char *name, const char *action, json_t *extra);
/* 405 with the Allow header allow (static). */
void meshd__send_method_not_allowed(struct job *jb, const char *allow);
/* A loaded program (load, rollback, ps) as JSON; NULL: no memory. */
json_t *meshd__program_json(const struct meshd_program_info *pi);
/* {"host": {...}, "programs": [{..., "workers": [...]}, ...]}; NULL: no memory. */
json_t *meshd__ps_json(const struct meshd_ps *ps);

/* api_ops.c */
/* An op thread (detached; arg: its struct job): runs the request, queues
 * its answer on a->done for the loop thread. */
void *meshd__op_main(void *arg);
/* Frees a request's record (not its evhttp request). */
void meshd__job_free(struct job *j);
/* Loop thread: sends j's answer, logs the request's line, frees j. */
void meshd__deliver(struct meshd_api *a, struct job *j);
/* Loop thread: sends every answer the op threads queued. */
void meshd__deliver_done(struct meshd_api *a);
/* a->done_ev's callback (arg: a): meshd__deliver_done. */
void meshd__on_done(evutil_socket_t fd, short what, void *arg);
/* a->stream_ev's callback (arg: a): the parts of streamed answers queued
 * by op threads go out as chunks. */
void meshd__on_streams(evutil_socket_t fd, short what, void *arg);

#endif
