/* meshd's feed (feed.h): a ring of the last cap events under one mutex. */
#include "meshd/core/feed.h"

#include "base/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct meshd_feed {
	pthread_mutex_t mu;
	struct meshd_event *ring; /* mu: event seq s at ring[s % cap] */
	unsigned cap;
	uint64_t last;	/* mu: the newest seq */
	uint64_t boot;
	atomic_int followers;
	void (*wake)(void *arg);
	void *wake_arg;
};

int meshd_feed_new(struct meshd_feed **out, unsigned cap)
{
	struct meshd_feed *f = calloc(1, sizeof *f);
	if (cap < 16)
		cap = 16;
	if (f)
		f->ring = calloc(cap, sizeof *f->ring);
	if (!f || !f->ring) {
		free(f);
		return -ENOMEM;
	}
	f->cap = cap;
	pthread_mutex_init(&f->mu, NULL);
	if (getrandom(&f->boot, sizeof f->boot, GRND_NONBLOCK) != (ssize_t)sizeof f->boot)
		f->boot = (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid() ^ mesh_mono_ns();
	*out = f;
	return 0;
}

void meshd_feed_free(struct meshd_feed *f)
{
	if (!f)
		return;
	for (unsigned i = 0; i < f->cap; i++)
		free(f->ring[i].text);
	free(f->ring);
	pthread_mutex_destroy(&f->mu);
	free(f);
}

uint64_t meshd_feed_boot(const struct meshd_feed *f)
{
	return f->boot;
}

void meshd_feed_post(struct meshd_feed *f, struct meshd_event *e)
{
	if (!f) {
		free(e->text);
		e->text = NULL;
		return;
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	e->at_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	e->name[sizeof e->name - 1] = 0;
	e->word[sizeof e->word - 1] = 0;
	pthread_mutex_lock(&f->mu);
	e->seq = ++f->last;
	struct meshd_event *slot = &f->ring[e->seq % f->cap];
	free(slot->text);
	*slot = *e;
	if (f->wake && atomic_load(&f->followers) > 0)
		f->wake(f->wake_arg); /* under mu: meshd_feed_set_wake(NULL) is a barrier */
	pthread_mutex_unlock(&f->mu);
	e->text = NULL; /* the ring's now */
}

int meshd_feed_live(struct meshd_feed *f)
{
	return f && atomic_load(&f->followers) > 0;
}

void meshd_feed_follow(struct meshd_feed *f, int delta)
{
	atomic_fetch_add(&f->followers, delta);
}

void meshd_feed_set_wake(struct meshd_feed *f, void (*wake)(void *arg), void *arg)
{
	pthread_mutex_lock(&f->mu);
	f->wake = wake;
	f->wake_arg = arg;
	pthread_mutex_unlock(&f->mu);
}

uint64_t meshd_feed_last(struct meshd_feed *f)
{
	pthread_mutex_lock(&f->mu);
	uint64_t s = f->last;
	pthread_mutex_unlock(&f->mu);
	return s;
}

unsigned meshd_feed_read(struct meshd_feed *f, uint64_t after, struct meshd_event *out, unsigned max,
			 uint64_t *lost)
{
	unsigned n = 0;
	*lost = 0;
	pthread_mutex_lock(&f->mu);
	uint64_t oldest = f->last >= f->cap ? f->last - f->cap + 1 : 1;
	if (after > f->last)
		after = f->last; /* a seq from the future (another life's): from now */
	if (after + 1 < oldest) {
		*lost = oldest - after - 1;
		after = oldest - 1;
	}
	for (uint64_t s = after + 1; s <= f->last && n < max; s++) {
		const struct meshd_event *e = &f->ring[s % f->cap];
		out[n] = *e;
		out[n].text = e->text ? strdup(e->text) : NULL;
		n++;
	}
	pthread_mutex_unlock(&f->mu);
	return n;
}

void meshd_event_release(struct meshd_event *e)
{
	free(e->text);
	e->text = NULL;
}

const char *meshd_ev_kind_name(enum meshd_ev_kind k)
{
	static const char *const names[MESHD_EV__N] = {"worker", "crash", "job", "savings", "request"};
	return (unsigned)k < MESHD_EV__N ? names[k] : "?";
}
