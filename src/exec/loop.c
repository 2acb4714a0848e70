/* Many chunk drivers on one thread (loop.h): one poll over the fds of all
 * its runs, a run's turn taken only when it has news (a ready fd) or its
 * own timeout passed, as its own thread would have been woken. */
#include "exec/loop.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/io.h"
#include "base/thread.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <unistd.h>

/* A run on the loop: its poll set (the driver's, valid until its next
 * turn), where it sits in the loop's one array, and when its timeout ends. */
struct run {
	struct mesh__drive *d;
	mesh_exec_over_fn over;
	void *arg;
	struct run *next; /* on l->incoming only */
	struct pollfd *pf;
	nfds_t n, at; /* at: its first fd in l->all, NOT_POLLED when it is not there */
	uint64_t due_ns; /* its turn comes at this time even without news */
	int fresh;	 /* no turn yet: taken before the next poll */
};

#define NOT_POLLED ((nfds_t)-1)

struct mesh_exec_loop {
	pthread_t th;
	char name[16];
	int efd; /* written by add and free */
	pthread_mutex_t mu;
	pthread_cond_t cv;   /* every run over (free waits on it) */
	struct run *incoming; /* mu */
	unsigned count;	      /* mu: runs handed to the loop and not over */
	int stop;	      /* mu */
	/* the loop thread's */
	struct run **runs;
	size_t nruns, cap;
	struct pollfd *all;
	size_t all_cap;
};


/* The runs handed over since the last look join the loop (their first
 * turn at once); 1 when told to stop and nothing is left. */
static int take_incoming(struct mesh_exec_loop *l)
{
	mesh_efd_quiet(l->efd);
	pthread_mutex_lock(&l->mu);
	struct run *in = l->incoming;
	l->incoming = NULL;
	int stop = l->stop && !l->count && !in;
	pthread_mutex_unlock(&l->mu);
	while (in) {
		struct run *next = in->next;
		struct run **runs = mesh_grow(l->runs, &l->cap, l->nruns + 1, sizeof *runs);
		if (!runs) {
			/* Put back, tried at the next wake-up (the eventfd is
			 * written again so that there is one). */
			pthread_mutex_lock(&l->mu);
			struct run **tail = &in;
			while (*tail)
				tail = &(*tail)->next;
			*tail = l->incoming;
			l->incoming = in;
			pthread_mutex_unlock(&l->mu);
			mesh_efd_ring(l->efd);
			break;
		}
		l->runs = runs;
		in->next = NULL;
		in->fresh = 1;
		l->runs[l->nruns++] = in;
		in = next;
	}
	return stop;
}

/* Run i's turn (what its last poll said was taken in): its next poll
 * set and due time; 1 when it was over and has left the loop (the array's
 * last run is in its place now). */
static int turn(struct mesh_exec_loop *l, size_t i)
{
	struct run *r = l->runs[i];
	int timeout;
	if (mesh__exec_turn(r->d, &r->pf, &r->n, &timeout)) {
		l->runs[i] = l->runs[--l->nruns];
		r->over(r->arg, r->d);
		free(r);
		pthread_mutex_lock(&l->mu);
		if (!--l->count)
			pthread_cond_broadcast(&l->cv);
		pthread_mutex_unlock(&l->mu);
		return 1;
	}
	r->fresh = 0;
	r->due_ns = timeout < 0 ? UINT64_MAX : mesh_mono_ns() + (uint64_t)timeout * MESH_NS_PER_MS;
	return 0;
}

/* The poll set of every run laid into l->all (a new run's first turn
 * taken), then the loop's eventfd; the poll's timeout (ms, -1 none), from
 * the nearest due time. */
static int lay_out(struct mesh_exec_loop *l, nfds_t *total)
{
	uint64_t next = UINT64_MAX;
	nfds_t n = 0;
	for (size_t i = 0; i < l->nruns;) {
		struct run *r = l->runs[i];
		if (r->fresh && turn(l, i))
			continue;
		struct pollfd *all = mesh_grow(l->all, &l->all_cap, n + r->n + 1, sizeof *all);
		if (!all) {
			/* Not polled this time: as a poll with nothing ready. */
			r->at = NOT_POLLED;
			next = 0;
			i++;
			continue;
		}
		l->all = all;
		memcpy(l->all + n, r->pf, r->n * sizeof *r->pf);
		r->at = n;
		n += r->n;
		if (r->due_ns < next)
			next = r->due_ns;
		i++;
	}
	l->all[n++] = (struct pollfd){.fd = l->efd, .events = POLLIN};
	*total = n;
	uint64_t now = mesh_mono_ns();
	if (next == UINT64_MAX)
		return -1;
	return next <= now ? 0 : (int)((next - now + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS);
}

/* After the poll (k its answer, err its -errno): each run with news or
 * past its due time takes in what its fds said and at once its next
 * turn, as its own thread would (a worker's ring filled again right
 * after its replies were taken). */
static void take_news(struct mesh_exec_loop *l, int k, int err)
{
	uint64_t now = mesh_mono_ns();
	for (size_t i = 0; i < l->nruns;) {
		struct run *r = l->runs[i];
		int ready = 0;
		if (r->at != NOT_POLLED)
			for (nfds_t j = 0; j < r->n; j++) {
				r->pf[j].revents = k > 0 ? l->all[r->at + j].revents : 0;
				ready += r->pf[j].revents != 0;
			}
		if (err && err != -EINTR)
			mesh__exec_polled(r->d, err);
		else if (ready || now >= r->due_ns || r->at == NOT_POLLED)
			mesh__exec_polled(r->d, ready);
		else {
			i++;
			continue;
		}
		if (!turn(l, i))
			i++;
	}
}

static void *loop_main(void *arg)
{
	struct mesh_exec_loop *l = arg;
	prctl(PR_SET_NAME, l->name);
	for (;;) {
		if (take_incoming(l))
			break;
		/* An array that could not grow is grown at the next turn. */
		struct pollfd *all = mesh_grow(l->all, &l->all_cap, 1, sizeof *all);
		if (!all) {
			poll(NULL, 0, 10);
			continue;
		}
		l->all = all;
		nfds_t n;
		int timeout = lay_out(l, &n);
		int k = poll(l->all, n, timeout);
		take_news(l, k, k < 0 ? -errno : 0);
	}
	return NULL;
}

int mesh_exec_loop_new(const char *name, struct mesh_exec_loop **out)
{
	struct mesh_exec_loop *l = calloc(1, sizeof *l);
	*out = NULL;
	if (!l)
		return -ENOMEM;
	snprintf(l->name, sizeof l->name, "%s", name);
	l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (l->efd < 0) {
		int rc = -errno;
		free(l);
		return rc;
	}
	pthread_mutex_init(&l->mu, NULL);
	pthread_cond_init(&l->cv, NULL);
	int rc = mesh_thread_start(&l->th, loop_main, l);
	if (rc < 0) {
		close(l->efd);
		pthread_mutex_destroy(&l->mu);
		pthread_cond_destroy(&l->cv);
		free(l);
		return rc;
	}
	*out = l;
	return 0;
}

int mesh_exec_loop_add(struct mesh_exec_loop *l, struct mesh__drive *d, mesh_exec_over_fn over, void *arg)
{
	struct run *r = calloc(1, sizeof *r);
	if (!r)
		return -ENOMEM;
	r->d = d;
	r->over = over;
	r->arg = arg;
	pthread_mutex_lock(&l->mu);
	r->next = l->incoming;
	l->incoming = r;
	l->count++;
	pthread_mutex_unlock(&l->mu);
	mesh_efd_ring(l->efd);
	return 0;
}

unsigned mesh_exec_loop_runs(struct mesh_exec_loop *l)
{
	pthread_mutex_lock(&l->mu);
	unsigned n = l->count;
	pthread_mutex_unlock(&l->mu);
	return n;
}

void mesh_exec_loop_free(struct mesh_exec_loop *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->mu);
	while (l->count)
		pthread_cond_wait(&l->cv, &l->mu);
	l->stop = 1;
	pthread_mutex_unlock(&l->mu);
	mesh_efd_ring(l->efd);
	pthread_join(l->th, NULL);
	close(l->efd);
	pthread_mutex_destroy(&l->mu);
	pthread_cond_destroy(&l->cv);
	free(l->runs);
	free(l->all);
	free(l);
}
