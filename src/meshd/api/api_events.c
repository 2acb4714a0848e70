/* GET /v1/events: the core's feed (meshd/core/feed.h) as server-sent
 * events, served on the loop thread itself -- a follower is a connection
 * and a few bytes, never a thread, so a page left open costs meshd nothing
 * while nothing happens.  A post wakes the loop (feed_ev), which writes
 * each follower what it has not had yet; every PING_EVERY_S a comment
 * keeps proxies and the client's idle timers quiet.
 *
 * Ids are "<boot>-<seq>" (boot: 16 hex digits, one meshd's life).  A
 * client that reconnects with Last-Event-ID of this life gets what it
 * missed, in order, none twice; of another life (meshd restarted) or
 * older than the ring keeps: an `event: reset` first (reason "restarted"
 * or "behind", with how many were lost), then what the ring has.  "0"
 * asks for everything the ring keeps (a page's history). */
#include "meshd/api/api_int.h"

#include "base/log.h"
#include "meshd/core/feed.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A follower whose unsent bytes pass this is skipped until they drain:
 * its events wait in the ring (or it is told it fell behind). */
#define BACKLOG_MAX (1u << 20)
#define READ_BATCH 64u
/* evhttp's idle timeout, for a stream: the pings write every 15 s, and a
 * client of server-sent events never writes. */
#define STREAM_TIMEOUT_S (7 * 24 * 3600)

struct follower {
	struct follower *next;
	struct meshd_api *a;
	struct evhttp_request *req;
	struct evhttp_connection *evcon;
	struct event *watch; /* EV_CLOSED on its socket */
	uint64_t after;	     /* the last seq it was sent */
};

/* One event as its SSE lines. */
static void add_event(struct evbuffer *o, uint64_t boot, const struct meshd_event *e)
{
	json_t *j = meshd__event_json(e);
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	json_decref(j);
	if (s)
		evbuffer_add_printf(o, "id: %016" PRIx64 "-%" PRIu64 "\nevent: %s\ndata: %s\n\n", boot, e->seq,
				    meshd_ev_kind_name(e->kind), s);
	free(s);
}

static void add_reset(struct evbuffer *o, const char *reason, uint64_t lost)
{
	evbuffer_add_printf(o, "event: reset\ndata: {\"reason\":\"%s\",\"lost\":%" PRIu64 "}\n\n", reason, lost);
}

static size_t backlog(struct follower *fl)
{
	struct bufferevent *bev = evhttp_connection_get_bufferevent(fl->evcon);
	return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

/* Loop thread: what fl has not had yet, as far as its backlog allows;
 * ping: a comment even when nothing was new. */
static void pump(struct follower *fl, int ping)
{
	struct meshd_feed *f = meshd_core_feed(fl->a->core);
	struct evbuffer *o = evbuffer_new();
	struct meshd_event ev[READ_BATCH];
	if (!o)
		return;
	while (backlog(fl) + evbuffer_get_length(o) < BACKLOG_MAX) {
		uint64_t lost;
		unsigned n = meshd_feed_read(f, fl->after, ev, READ_BATCH, &lost);
		if (lost)
			add_reset(o, "behind", lost);
		for (unsigned i = 0; i < n; i++) {
			add_event(o, meshd_feed_boot(f), &ev[i]);
			fl->after = ev[i].seq;
			meshd_event_release(&ev[i]);
		}
		if (n < READ_BATCH)
			break;
	}
	if (ping && !evbuffer_get_length(o))
		evbuffer_add_printf(o, ": ping\n\n");
	if (evbuffer_get_length(o))
		evhttp_send_reply_chunk(fl->req, o);
	evbuffer_free(o);
}

/* Loop thread: fl leaves the list and the feed's count (its request is
 * evhttp's to free). */
static void unlink_follower(struct follower *fl)
{
	struct meshd_api *a = fl->a;
	for (struct follower **pp = &a->followers; *pp; pp = &(*pp)->next)
		if (*pp == fl) {
			*pp = fl->next;
			break;
		}
	if (fl->watch)
		event_free(fl->watch);
	meshd_feed_follow(meshd_core_feed(a->core), -1);
	free(fl);
}

/* evhttp closes the connection (the client went, a write failed, or we
 * freed it below): the request goes with it. */
static void on_follower_close(struct evhttp_connection *evcon, void *arg)
{
	(void)evcon;
	unlink_follower(arg);
}

/* The client closed its end: the connection is freed now, not at the
 * next ping's failed write. */
static void on_follower_gone(evutil_socket_t fd, short what, void *arg)
{
	struct follower *fl = arg;
	(void)fd;
	(void)what;
	evhttp_connection_free(fl->evcon); /* calls on_follower_close */
}

void meshd__on_followers(evutil_socket_t fd, short what, void *arg)
{
	struct meshd_api *a = arg;
	(void)fd;
	for (struct follower *fl = a->followers; fl; fl = fl->next)
		pump(fl, what & EV_TIMEOUT);
}

/* Any thread, the feed's mutex held: the loop writes to the followers. */
void meshd__feed_wake(void *arg)
{
	struct meshd_api *a = arg;
	event_active(a->feed_ev, EV_READ, 0);
}

/* Where a follower that sent Last-Event-ID (or ?last_event_id=) resumes:
 * *after, or a reset's reason. */
static const char *resume_at(struct meshd_feed *f, const char *last, uint64_t *after)
{
	*after = meshd_feed_last(f);
	if (!last || !*last)
		return NULL;
	if (!strcmp(last, "0")) {
		*after = 0; /* everything kept, from this life's start */
		return NULL;
	}
	uint64_t boot, seq;
	int used = 0;
	if (sscanf(last, "%16" SCNx64 "-%" SCNu64 "%n", &boot, &seq, &used) != 2 || last[used])
		return "unknown"; /* not ours: from now, and it is told so */
	if (boot != meshd_feed_boot(f)) {
		*after = 0; /* this life's events, as far as the ring has them */
		return "restarted";
	}
	if (seq < *after)
		*after = seq;
	return NULL;
}

int meshd__is_events(const char *path)
{
	return !strcmp(path, "/v1/events");
}

void meshd__events_follow(struct meshd_api *a, struct job *j)
{
	struct evhttp_request *req = j->req;
	struct meshd_feed *f = meshd_core_feed(a->core);
	if (strcmp(j->method, "GET")) {
		meshd__send_method_not_allowed(j, "GET");
		meshd__deliver(a, j);
		return;
	}
	struct follower *fl = calloc(1, sizeof *fl);
	struct evbuffer *o = evbuffer_new();
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	if (!fl || !o || !bev) {
		free(fl);
		if (o)
			evbuffer_free(o);
		meshd__send_error(j, 503, -ENOMEM, NULL);
		meshd__deliver(a, j);
		return;
	}
	const char *last = evhttp_find_header(evhttp_request_get_input_headers(req), "Last-Event-ID");
	if (!last)
		last = evhttp_find_header(&j->args, "last_event_id");
	const char *why = resume_at(f, last, &fl->after);
	fl->a = a;
	fl->req = req;
	fl->evcon = evcon;
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", "text/event-stream");
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_send_reply_start(req, 200, "OK");
	evhttp_connection_set_timeout(evcon, STREAM_TIMEOUT_S);
	/* The client reconnects after 1 s; hello says which life this is. */
	evbuffer_add_printf(o, "retry: 1000\nevent: hello\ndata: {\"boot\":\"%016" PRIx64 "\",\"last\":\"%016" PRIx64
			       "-%" PRIu64 "\"}\n\n",
			    meshd_feed_boot(f), meshd_feed_boot(f), meshd_feed_last(f));
	if (why)
		add_reset(o, why, 0);
	evhttp_send_reply_chunk(req, o);
	evbuffer_free(o);
	fl->next = a->followers;
	a->followers = fl;
	meshd_feed_follow(f, 1);
	evhttp_connection_set_closecb(evcon, on_follower_close, fl);
	evutil_socket_t cfd = bufferevent_getfd(bev);
	if (cfd >= 0 && (fl->watch = event_new(a->base, cfd, EV_CLOSED, on_follower_gone, fl)))
		event_add(fl->watch, NULL);
	mesh_log(MESH_LOG_DEBUG, "api request=\"%s\" status=200 events=1%s%s", j->what, why ? " reset=" : "",
		 why ? why : "");
	/* The request is the follower's now; the job that carried it goes. */
	j->req = NULL;
	meshd__job_free(j);
	atomic_fetch_sub(&a->inflight, 1);
	pump(fl, 0);
}

void meshd__events_end(struct meshd_api *a)
{
	meshd_feed_set_wake(meshd_core_feed(a->core), NULL, NULL);
	while (a->followers) {
		struct follower *fl = a->followers;
		evhttp_connection_set_closecb(fl->evcon, NULL, NULL);
		struct evbuffer *o = evbuffer_new();
		if (o) {
			evbuffer_add_printf(o, "event: bye\ndata: {\"reason\":\"meshd is stopping\"}\n\n");
			evhttp_send_reply_chunk(fl->req, o);
			evbuffer_free(o);
		}
		evhttp_send_reply_end(fl->req);
		unlink_follower(fl);
	}
}
