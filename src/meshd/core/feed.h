/* meshd's feed: what happens, as a numbered stream of events -- workers
 * changing state, crashes with their reports, jobs running, moving and
 * ending, the savings ledger's ticks, the gateway's requests -- kept in a
 * bounded ring so that a follower who reconnects gets what it missed.
 * The control API serves it as server-sent events (GET /v1/events,
 * docs/api.md); the core and the job runner post, and render nothing (the
 * API makes the JSON).
 *
 * Threads: any thread posts and reads; one mutex inside, under which only
 * the wake hook's libevent lock is taken, so a post is allowed with d->mu
 * or a job's mu held.  A
 * post costs a copy and, while someone follows, one call of the wake hook.
 * Kinds that come often (job progress, gateway requests) are posted only
 * while meshd_feed_live() says someone follows. */
#ifndef MESH_MESHD_CORE_FEED_H
#define MESH_MESHD_CORE_FEED_H

#include <stdint.h>

enum meshd_ev_kind {
	MESHD_EV_WORKER,  /* name: program; word: its state; id: pid; n[0]: worker index */
	MESHD_EV_CRASH,	  /* name: program; id: pid (0: unknown); text: the report */
	MESHD_EV_JOB,	  /* id: job; name: program; word: state or "progress";
			   * n[0] done, n[1] failed (buried), n[2] chunks */
	MESHD_EV_SAVINGS, /* name: program; n[0] window, n[1] warm, n[2] always-on (ms); n[3] permil saved */
	MESHD_EV_REQUEST, /* name: program; text: model; n[0] status, n[1] µs, n[2] 1 when a cold start */
	MESHD_EV__N
};

struct meshd_event {
	uint64_t seq;	/* set by the post: 1, 2, ... within one meshd's life */
	int64_t at_ms;	/* set by the post: unix ms */
	enum meshd_ev_kind kind;
	char name[65];
	char word[24];
	uint64_t id;
	uint64_t n[4];
	char *text; /* malloc'd or NULL */
};

struct meshd_feed;

/* A feed keeping the last cap events (at least 16).  0 or -ENOMEM.  Its
 * boot is a random 64-bit number: event ids of another meshd's life
 * (a restart) are told apart by it. */
int meshd_feed_new(struct meshd_feed **out, unsigned cap);
void meshd_feed_free(struct meshd_feed *f);
uint64_t meshd_feed_boot(const struct meshd_feed *f);
/* Posts a copy of *e (its seq and at_ms are set); e->text is taken (freed
 * by the feed), whatever happens.  NULL f is a no-op (the text freed). */
void meshd_feed_post(struct meshd_feed *f, struct meshd_event *e);
/* Whether anyone follows now (followers counted by meshd_feed_follow). */
int meshd_feed_live(struct meshd_feed *f);
void meshd_feed_follow(struct meshd_feed *f, int delta);
/* wake(arg) is called by each post while someone follows, after the event
 * is in, on the posting thread with the feed's mutex held (it must not post
 * or read; activating an event is what it is for).  After set_wake(NULL)
 * returns, no wake runs any more. */
void meshd_feed_set_wake(struct meshd_feed *f, void (*wake)(void *arg), void *arg);
/* The seq of the newest event (0: none yet). */
uint64_t meshd_feed_last(struct meshd_feed *f);
/* Up to max events with seq > after, oldest first, into out (each text a
 * copy, freed with meshd_event_release); the count.  *lost: how many
 * events after `after` the ring no longer holds (0 when none). */
unsigned meshd_feed_read(struct meshd_feed *f, uint64_t after, struct meshd_event *out, unsigned max,
			 uint64_t *lost);
void meshd_event_release(struct meshd_event *e);
/* The kind's name ("worker", "crash", "job", "savings", "request"). */
const char *meshd_ev_kind_name(enum meshd_ev_kind k);

#endif
