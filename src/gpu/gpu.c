#include "gpu/gpu.h"

#include "base/thread.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "host/procfile.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#define KNOWN_MAX 32u
#define HISTORY_MAX 256u
#define EVENTS_MAX 64u
#define POLL_NS (10ull * MESH_NS_PER_MS)

struct res {
	struct res *next;
	uint64_t id;
	char owner[96];
	enum mesh_gpu_state st;
	unsigned ngpu;
	unsigned gpu[MESH_GPU_PER_WORKER_MAX];
	uint64_t vram;
	pid_t pgid;
	int pidfd;
	uint64_t dead_at, ttf;
	pid_t known[KNOWN_MAX]; /* pids seen in its group (a dead one is still its own) */
	unsigned nknown;
	unsigned listed;	/* processes of its group NVML lists, at the last read */
	uint64_t on[MESH_GPU_MAX]; /* bytes its group holds per GPU, at the last read */
	uint64_t held, peak;
};

/* One read of NVML: every GPU and its processes. */
struct snap {
	unsigned n;
	struct mesh_nvml_gpu gpu[MESH_GPU_MAX];
	struct mesh_nvml_proc *procs[MESH_GPU_MAX];
	size_t nprocs[MESH_GPU_MAX];
	int ok[MESH_GPU_MAX];
};

struct mesh_gpu {
	struct mesh_nvml *nv;
	pthread_mutex_t mu;    /* all of it (NVML is called without it: it is thread-safe) */
	pthread_cond_t cv;
	struct res *list;      /* live ones and the last HISTORY_MAX ended ones */
	uint64_t next_id;
	uint64_t grace_ns, poll_ns;
	char *events[EVENTS_MAX];
	unsigned ev_head, ev_n;
	int wakefd, stop;
	pthread_t thr;
	int thr_ok;
};

static void event(struct mesh_gpu *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void event(struct mesh_gpu *g, const char *fmt, ...)
{
	struct mesh_buf b = MESH_BUF_INIT;
	va_list ap;
	va_start(ap, fmt);
	mesh_buf_vaddf(&b, fmt, ap);
	va_end(ap);
	if (!b.p)
		return;
	if (g->ev_n == EVENTS_MAX) { /* the oldest goes */
		free(g->events[g->ev_head]);
		g->ev_head = (g->ev_head + 1) % EVENTS_MAX;
		g->ev_n--;
	}
	g->events[(g->ev_head + g->ev_n++) % EVENTS_MAX] = mesh_buf_detach(&b, NULL);
}

static double mib(uint64_t b)
{
	return (double)b / (1024.0 * 1024.0);
}

static int active(const struct res *r)
{
	return r->st != MESH_GPU_FREED && r->st != MESH_GPU_NONE_;
}

static int alive(pid_t pid)
{
	return kill(pid, 0) == 0 || errno == EPERM;
}

/* The process group of pid from /proc/<pid>/stat, or -1. */
static pid_t pgid_of(pid_t pid)
{
	char path[64], *s = NULL;
	size_t len;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if (mesh__read_proc(path, 4096, &s, &len) != 0)
		return -1;
	/* "pid (comm) state ppid pgrp ...": comm may hold anything but its last ')'. */
	const char *p = strrchr(s, ')');
	int pg = -1, ppid;
	char st;
	if (!p || sscanf(p + 1, " %c %d %d", &st, &ppid, &pg) != 3)
		pg = -1;
	free(s);
	return pg;
}

static void snap_release(struct snap *s)
{
	for (unsigned i = 0; i < s->n; i++)
		free(s->procs[i]);
	memset(s, 0, sizeof *s);
}

static void snap_read(struct mesh_gpu *g, struct snap *s)
{
	memset(s, 0, sizeof *s);
	s->n = mesh_nvml_count(g->nv);
	for (unsigned i = 0; i < s->n; i++)
		s->ok[i] = mesh_nvml_gpu(g->nv, i, &s->gpu[i]) == 0 &&
			   mesh_nvml_procs(g->nv, i, &s->procs[i], &s->nprocs[i]) == 0;
}

static struct res *owner_of(struct mesh_gpu *g, pid_t pid)
{
	for (struct res *r = g->list; r; r = r->next)
		if (active(r))
			for (unsigned k = 0; k < r->nknown; k++)
				if (r->known[k] == pid)
					return r;
	pid_t pg = pgid_of(pid);
	if (pg <= 0)
		return NULL;
	for (struct res *r = g->list; r; r = r->next)
		if (active(r) && r->pgid == pg) {
			if (r->nknown < KNOWN_MAX)
				r->known[r->nknown++] = pid;
			return r;
		}
	return NULL;
}

/* Each process NVML lists goes to its worker's reservation; what is left
 * is others' (per GPU, in others[]).  g->mu held. */
static void attribute(struct mesh_gpu *g, const struct snap *s, uint64_t *others)
{
	for (struct res *r = g->list; r; r = r->next)
		if (active(r)) {
			memset(r->on, 0, sizeof r->on);
			r->listed = 0;
			r->held = 0;
		}
	for (unsigned i = 0; i < s->n; i++) {
		if (others)
			others[i] = 0;
		for (size_t k = 0; k < s->nprocs[i]; k++) {
			const struct mesh_nvml_proc *p = &s->procs[i][k];
			uint64_t b = p->used == MESH_NVML_UNKNOWN ? 0 : p->used;
			struct res *r = owner_of(g, (pid_t)p->pid);
			if (r) {
				r->on[i] += b;
				r->held += b;
				r->listed++;
			} else if (others) {
				others[i] += b;
			}
		}
	}
	for (struct res *r = g->list; r; r = r->next)
		if (active(r) && r->held > r->peak)
			r->peak = r->held;
}

/* Placed but not yet in use on GPU i: each reservation's vram less what
 * its group holds there.  g->mu held. */
static uint64_t reserved_on(struct mesh_gpu *g, unsigned i)
{
	uint64_t sum = 0;
	for (struct res *r = g->list; r; r = r->next) {
		if (!active(r) || r->st == MESH_GPU_STUCK)
			continue;
		for (unsigned k = 0; k < r->ngpu; k++)
			if (r->gpu[k] == i && r->vram > r->on[i])
				sum += r->vram - r->on[i];
	}
	return sum;
}

/* Keeps the last HISTORY_MAX ended reservations.  g->mu held. */
static void prune(struct mesh_gpu *g)
{
	unsigned ended = 0;
	for (struct res **rp = &g->list; *rp;) {
		struct res *r = *rp;
		if (!active(r) && ++ended > HISTORY_MAX) {
			*rp = r->next;
			free(r);
			continue;
		}
		rp = &r->next;
	}
}

/* Draining reservations: memory back, or past the grace.  g->mu held. */
static void advance(struct mesh_gpu *g, uint64_t now)
{
	for (struct res *r = g->list; r; r = r->next) {
		if (r->st != MESH_GPU_DRAINING && r->st != MESH_GPU_STUCK)
			continue;
		/* dead_at may be a little after now: a caller saw the death
		 * first (deaths()) while this thread read NVML. */
		uint64_t t = mesh_ns_since(now, r->dead_at);
		if (r->listed == 0) {
			event(g, "gpu: %s (pid %d) memory back after %llu ms%s", r->owner, (int)r->pgid,
			      (unsigned long long)(t / MESH_NS_PER_MS), r->st == MESH_GPU_STUCK ? " (past the grace)" : "");
			r->st = MESH_GPU_FREED;
			r->ttf = t;
		} else if (r->st == MESH_GPU_DRAINING && t > g->grace_ns) {
			r->st = MESH_GPU_STUCK;
			struct mesh_buf b = MESH_BUF_INIT;
			for (unsigned i = 0; i < MESH_GPU_MAX; i++)
				if (r->on[i])
					mesh_buf_addf(&b, "%s%.0f MiB on GPU %u", b.len ? ", " : "", mib(r->on[i]), i);
			event(g, "gpu: %s (pid %d) still holds GPU memory %llu ms after it exited (%u process%s listed: %s)",
			      r->owner, (int)r->pgid, (unsigned long long)(t / MESH_NS_PER_MS), r->listed,
			      r->listed == 1 ? "" : "es", b.p ? b.p : "size unknown");
			mesh_buf_release(&b);
		}
	}
	prune(g);
	pthread_cond_broadcast(&g->cv);
}

static void refresh(struct mesh_gpu *g, uint64_t now)
{
	struct snap *s = malloc(sizeof *s);
	if (!s)
		return;
	snap_read(g, s);
	pthread_mutex_lock(&g->mu);
	attribute(g, s, NULL);
	advance(g, now);
	pthread_mutex_unlock(&g->mu);
	snap_release(s);
	free(s);
}

static void start_drain(struct res *r, uint64_t now)
{
	if (r->pidfd >= 0)
		close(r->pidfd);
	r->pidfd = -1;
	r->st = MESH_GPU_DRAINING;
	r->dead_at = now;
}

/* What the ledger's thread waits on: fds[0] its wake fd, then the pidfd
 * of each live reservation (ids[i]: fds[i]'s), k of them in use, cap of
 * room; whether any reservation drains or is stuck past its grace. */
struct watched {
	struct pollfd *fds;
	uint64_t *ids;
	size_t cap, k;
	int draining, stuck;
};

/* Fills w from g's reservations, growing it as needed; k is 0 when it
 * could not grow (out of memory).  g->mu held. */
static void watched_fill(struct mesh_gpu *g, struct watched *w)
{
	size_t n = 1;
	w->k = 0;
	w->draining = w->stuck = 0;
	for (struct res *r = g->list; r; r = r->next) {
		n += r->st == MESH_GPU_LIVE && r->pidfd >= 0;
		w->draining |= r->st == MESH_GPU_DRAINING;
		w->stuck |= r->st == MESH_GPU_STUCK;
	}
	if (n > w->cap) {
		struct pollfd *nf = realloc(w->fds, n * sizeof *w->fds);
		if (nf)
			w->fds = nf;
		uint64_t *ni = nf ? realloc(w->ids, n * sizeof *w->ids) : NULL;
		if (ni)
			w->ids = ni, w->cap = n;
	}
	if (n <= w->cap) {
		w->fds[w->k++] = (struct pollfd){.fd = g->wakefd, .events = POLLIN};
		for (struct res *r = g->list; r && w->k < n; r = r->next)
			if (r->st == MESH_GPU_LIVE && r->pidfd >= 0) {
				w->ids[w->k] = r->id;
				w->fds[w->k++] = (struct pollfd){.fd = r->pidfd, .events = POLLIN};
			}
	}
}

/* The deaths poll saw in w: NVML is read first (the process is gone
 * already), and each reservation turns DRAINING together with that
 * reading, so nobody sees it draining with the live worker's usage.
 * 0 if none died.  g->mu not held. */
static int take_deaths(struct mesh_gpu *g, const struct watched *w)
{
	int died = 0;
	for (size_t i = 1; i < w->k; i++)
		died |= w->fds[i].revents != 0;
	if (!died)
		return 0;
	struct snap *s = malloc(sizeof *s);
	if (s)
		snap_read(g, s);
	pthread_mutex_lock(&g->mu);
	uint64_t now = mesh_mono_ns();
	for (size_t i = 1; i < w->k; i++) {
		if (!w->fds[i].revents)
			continue;
		for (struct res *r = g->list; r; r = r->next)
			if (r->id == w->ids[i] && r->st == MESH_GPU_LIVE)
				start_drain(r, now);
	}
	if (s)
		attribute(g, s, NULL);
	advance(g, now);
	pthread_mutex_unlock(&g->mu);
	if (s) {
		snap_release(s);
		free(s);
	}
	return 1;
}

/* The ledger's thread: waits for a bound worker's death (its pidfd), then
 * reads NVML every poll_ns while anything drains. */
static void *watch(void *arg)
{
	struct mesh_gpu *g = arg;
	struct watched w = {0};
	for (;;) {
		pthread_mutex_lock(&g->mu);
		if (g->stop) {
			pthread_mutex_unlock(&g->mu);
			break;
		}
		watched_fill(g, &w);
		pthread_mutex_unlock(&g->mu);
		/* Draining: NVML every poll_ns; a holder past the grace: once a second. */
		int ms = w.draining ? (int)(g->poll_ns / MESH_NS_PER_MS) : w.stuck ? 1000 : -1;
		if (w.k)
			poll(w.fds, w.k, ms == 0 ? 1 : ms);
		else
			usleep(10000); /* out of memory: try again */
		uint64_t now = mesh_mono_ns();
		if (w.k && w.fds[0].revents)
			mesh_efd_quiet(g->wakefd);
		if (!take_deaths(g, &w) && (w.draining || w.stuck))
			refresh(g, now);
	}
	free(w.fds);
	free(w.ids);
	return NULL;
}

/* Deaths the thread has not seen yet (a caller may learn of one first,
 * from the host's own pidfd): drained from now.  g->mu held; 1 if any. */
static int deaths(struct mesh_gpu *g)
{
	int any = 0;
	for (struct res *r = g->list; r; r = r->next) {
		if (r->st != MESH_GPU_LIVE || r->pidfd < 0)
			continue;
		struct pollfd p = {.fd = r->pidfd, .events = POLLIN};
		if (poll(&p, 1, 0) == 1) {
			start_drain(r, mesh_mono_ns());
			any = 1;
		}
	}
	return any;
}

static void wake(struct mesh_gpu *g)
{
	mesh_efd_ring(g->wakefd);
}

static struct res *find_res(struct mesh_gpu *g, uint64_t id)
{
	for (struct res *r = g->list; r; r = r->next)
		if (r->id == id)
			return r;
	return NULL;
}

static struct res *new_res(struct mesh_gpu *g, const char *owner)
{
	struct res *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->id = ++g->next_id;
	r->pidfd = -1;
	snprintf(r->owner, sizeof r->owner, "%s", owner);
	r->next = g->list;
	g->list = r;
	return r;
}

/* At start: NVML's processes.  A dead one still listed (a worker of a
 * meshd that was killed, its memory not yet freed) drains like a worker of
 * ours; a living one is someone else's and counts as used. */
static void leftovers(struct mesh_gpu *g, uint64_t now)
{
	struct snap *s = malloc(sizeof *s);
	if (!s)
		return;
	snap_read(g, s);
	pthread_mutex_lock(&g->mu);
	for (unsigned i = 0; i < s->n; i++)
		for (size_t k = 0; k < s->nprocs[i]; k++) {
			const struct mesh_nvml_proc *p = &s->procs[i][k];
			char sz[48];
			if (p->used == MESH_NVML_UNKNOWN)
				snprintf(sz, sizeof sz, "an unknown amount");
			else
				snprintf(sz, sizeof sz, "%.0f MiB", mib(p->used));
			if (alive((pid_t)p->pid)) {
				event(g, "gpu: at start, pid %u holds %s on GPU %u (not a worker of this meshd; counted as used)",
				      p->pid, sz, i);
				continue;
			}
			char who[64];
			snprintf(who, sizeof who, "leftover pid %u", p->pid);
			struct res *r = owner_of(g, (pid_t)p->pid);
			if (!r && (r = new_res(g, who))) {
				r->pgid = (pid_t)p->pid;
				r->known[r->nknown++] = (pid_t)p->pid;
				r->dead_at = now;
				r->st = MESH_GPU_DRAINING;
				event(g, "gpu: at start, pid %u is gone but NVML lists it with %s on GPU %u: waiting for it",
				      p->pid, sz, i);
			}
			if (r && r->ngpu < MESH_GPU_PER_WORKER_MAX)
				r->gpu[r->ngpu++] = i;
		}
	attribute(g, s, NULL);
	pthread_mutex_unlock(&g->mu);
	snap_release(s);
	free(s);
}

int mesh_gpu_new(struct mesh_gpu **out, const struct mesh_gpu_cfg *cfg, char **why)
{
	*out = NULL;
	struct mesh_nvml *nv;
	int rc = mesh_nvml_open(cfg ? cfg->nvml_path : NULL, &nv, why);
	if (rc)
		return rc;
	struct mesh_gpu *g = calloc(1, sizeof *g);
	if (!g) {
		mesh_nvml_close(nv);
		return -ENOMEM;
	}
	g->nv = nv;
	g->grace_ns = cfg && cfg->grace_ns ? cfg->grace_ns : MESH_GPU_GRACE_NS;
	g->poll_ns = cfg && cfg->poll_ns ? cfg->poll_ns : POLL_NS;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	if ((g->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
		rc = -errno;
		goto bad;
	}
	leftovers(g, mesh_mono_ns());
	if ((rc = mesh_thread_start(&g->thr, watch, g)))
		goto bad;
	g->thr_ok = 1;
	*out = g;
	return 0;
bad:
	if (why && !*why)
		*why = mesh_strf("cannot start the GPU ledger: %s", mesh_strerror(rc));
	mesh_gpu_free(g);
	return rc;
}

void mesh_gpu_free(struct mesh_gpu *g)
{
	if (!g)
		return;
	if (g->thr_ok) {
		pthread_mutex_lock(&g->mu);
		g->stop = 1;
		pthread_mutex_unlock(&g->mu);
		wake(g);
		pthread_join(g->thr, NULL);
	}
	while (g->list) {
		struct res *r = g->list;
		g->list = r->next;
		if (r->pidfd >= 0)
			close(r->pidfd);
		free(r);
	}
	for (unsigned i = 0; i < g->ev_n; i++)
		free(g->events[(g->ev_head + i) % EVENTS_MAX]);
	if (g->wakefd >= 0)
		close(g->wakefd);
	mesh_nvml_close(g->nv);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cv);
	free(g);
}

unsigned mesh_gpu_count(const struct mesh_gpu *g)
{
	return mesh_nvml_count(g->nv);
}

static char *gib(char *buf, size_t n, uint64_t b)
{
	snprintf(buf, n, "%.1f GiB", (double)b / (1024.0 * 1024.0 * 1024.0));
	return buf;
}

int mesh_gpu_check(struct mesh_gpu *g, const char *name, unsigned ngpus, uint64_t vram, char **err)
{
	unsigned n = mesh_gpu_count(g), fit = 0;
	char a[32], b[32];
	uint64_t biggest = 0;
	if (ngpus > MESH_GPU_PER_WORKER_MAX || ngpus > n)
		return mesh_errf(err, MESH_E_NOGPU, "'%s' asks for %u GPUs and this machine has %u", name, ngpus, n);
	for (unsigned i = 0; i < n; i++) {
		struct mesh_nvml_gpu d;
		int rc = mesh_nvml_gpu(g->nv, i, &d);
		if (rc)
			continue;
		fit += d.total >= vram;
		if (d.total > biggest)
			biggest = d.total;
	}
	if (fit < ngpus)
		return mesh_errf(err, MESH_E_NOGPU, "'%s' asks for %s on each of %u GPU%s and the largest GPU here has %s",
				 name, gib(a, sizeof a, vram), ngpus, ngpus == 1 ? "" : "s", gib(b, sizeof b, biggest));
	return 0;
}

int mesh_gpu_settle(struct mesh_gpu *g, uint64_t timeout_ns)
{
	uint64_t deadline = mesh_mono_ns() + timeout_ns;
	int rc = 0;
	pthread_mutex_lock(&g->mu);
	if (deaths(g))
		wake(g);
	for (;;) {
		int draining = 0;
		for (struct res *r = g->list; r && !draining; r = r->next)
			draining = r->st == MESH_GPU_DRAINING;
		if (!draining)
			break;
		uint64_t now = mesh_mono_ns();
		if (now >= deadline) {
			rc = MESH_E_TIMEOUT;
			break;
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t w = deadline - now < 50 * MESH_NS_PER_MS ? deadline - now : 50 * MESH_NS_PER_MS;
		ts.tv_nsec += (long)w;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&g->cv, &g->mu, &ts);
	}
	pthread_mutex_unlock(&g->mu);
	return rc;
}

/* Why nothing fits: each GPU's free memory and who holds it. */
static int no_fit(struct mesh_gpu *g, const struct snap *s, const uint64_t *avail, const uint64_t *others,
		  const char *owner, unsigned ngpus, uint64_t vram, char **err)
{
	struct mesh_buf b = MESH_BUF_INIT;
	char x[32], y[32];
	mesh_buf_addf(&b, "cannot place %s: it needs %s free on %u GPU%s;", owner, gib(x, sizeof x, vram), ngpus,
		      ngpus == 1 ? "" : "s");
	for (unsigned i = 0; i < s->n; i++) {
		mesh_buf_addf(&b, " GPU %u (%s) has %s free of %s", i, s->gpu[i].name, gib(x, sizeof x, avail[i]),
			      gib(y, sizeof y, s->gpu[i].total));
		const char *sep = " (";
		for (struct res *r = g->list; r; r = r->next)
			if (active(r) && (r->on[i] || (r->vram && r->st != MESH_GPU_STUCK))) {
				int mine = 0;
				for (unsigned k = 0; k < r->ngpu; k++)
					mine |= r->gpu[k] == i;
				if (!mine && !r->on[i])
					continue;
				uint64_t v = r->on[i] > r->vram || r->st == MESH_GPU_STUCK ? r->on[i] : r->vram;
				mesh_buf_addf(&b, "%s%s %s%s", sep, r->owner, gib(x, sizeof x, v),
					      r->st == MESH_GPU_STUCK ? " still held after it exited" : "");
				sep = ", ";
			}
		if (others[i]) {
			mesh_buf_addf(&b, "%sother processes %s", sep, gib(x, sizeof x, others[i]));
			sep = ", ";
		}
		mesh_buf_adds(&b, *sep == ',' ? ");" : ";");
	}
	if (b.p && b.len)
		b.p[--b.len] = 0; /* the last ';' */
	int rc = MESH_E_NOGPU;
	if (err)
		*err = b.p ? mesh_buf_detach(&b, NULL) : NULL;
	mesh_buf_release(&b);
	return rc;
}

int mesh_gpu_place(struct mesh_gpu *g, const char *owner, unsigned ngpus, uint64_t vram, uint64_t *id, char **visible,
		   char **err)
{
	*id = 0;
	*visible = NULL;
	if (ngpus == 0)
		ngpus = 1;
	struct snap *s = malloc(sizeof *s);
	uint64_t *avail = calloc(MESH_GPU_MAX, sizeof *avail), *others = calloc(MESH_GPU_MAX, sizeof *others);
	int rc = 0;
	if (!s || !avail || !others) {
		free(s);
		free(avail);
		free(others);
		return -ENOMEM;
	}
	pthread_mutex_lock(&g->mu);
	if (deaths(g))
		wake(g);
	pthread_mutex_unlock(&g->mu);
	snap_read(g, s);
	pthread_mutex_lock(&g->mu);
	attribute(g, s, others);
	unsigned pick[MESH_GPU_PER_WORKER_MAX], np = 0;
	for (unsigned i = 0; i < s->n; i++) {
		uint64_t used = s->gpu[i].used + reserved_on(g, i);
		avail[i] = s->ok[i] && used < s->gpu[i].total ? s->gpu[i].total - used : 0;
	}
	/* The GPUs with the most memory available, each with enough. */
	int taken[MESH_GPU_MAX] = {0};
	while (np < ngpus) {
		int best = -1;
		for (unsigned i = 0; i < s->n; i++)
			if (!taken[i] && s->ok[i] && avail[i] >= vram && (vram || avail[i] > 0) &&
			    (best < 0 || avail[i] > avail[best]))
				best = (int)i;
		if (best < 0)
			break;
		taken[best] = 1;
		pick[np++] = (unsigned)best;
	}
	struct res *r = NULL;
	struct mesh_buf vis = MESH_BUF_INIT;
	if (np < ngpus) {
		rc = no_fit(g, s, avail, others, owner, ngpus, vram, err);
	} else if (!(r = new_res(g, owner))) {
		rc = -ENOMEM;
	} else {
		r->st = MESH_GPU_PLACED;
		r->vram = vram;
		r->ngpu = np;
		for (unsigned k = 0; k < np; k++) {
			r->gpu[k] = pick[k];
			if (*s->gpu[pick[k]].uuid)
				mesh_buf_addf(&vis, "%s%s", k ? "," : "", s->gpu[pick[k]].uuid);
			else
				mesh_buf_addf(&vis, "%s%u", k ? "," : "", pick[k]);
		}
		if (!vis.p) {
			r->st = MESH_GPU_NONE_;
			rc = -ENOMEM;
		} else {
			*id = r->id;
			*visible = mesh_buf_detach(&vis, NULL);
		}
	}
	prune(g);
	pthread_mutex_unlock(&g->mu);
	mesh_buf_release(&vis);
	snap_release(s);
	free(s);
	free(avail);
	free(others);
	return rc;
}

int mesh_gpu_bind(struct mesh_gpu *g, uint64_t id, pid_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0), rc = fd < 0 ? -errno : 0;
	pthread_mutex_lock(&g->mu);
	struct res *r = find_res(g, id);
	if (r && r->st == MESH_GPU_PLACED) {
		r->pgid = pid;
		r->known[0] = pid;
		r->nknown = 1;
		r->st = MESH_GPU_LIVE;
		r->pidfd = fd;
		fd = -1;
		if (rc)
			start_drain(r, mesh_mono_ns());
	}
	pthread_mutex_unlock(&g->mu);
	if (fd >= 0)
		close(fd);
	wake(g);
	return rc;
}

void mesh_gpu_cancel(struct mesh_gpu *g, uint64_t id)
{
	pthread_mutex_lock(&g->mu);
	struct res *r = find_res(g, id);
	if (r && r->st == MESH_GPU_PLACED)
		r->st = MESH_GPU_NONE_;
	prune(g);
	pthread_mutex_unlock(&g->mu);
}

const char *mesh_gpu_state_name(enum mesh_gpu_state s)
{
	switch (s) {
	case MESH_GPU_PLACED: return "placed";
	case MESH_GPU_LIVE: return "live";
	case MESH_GPU_DRAINING: return "draining";
	case MESH_GPU_STUCK: return "stuck";
	case MESH_GPU_FREED: return "freed";
	default: return "none";
	}
}

int mesh_gpu_use(struct mesh_gpu *g, uint64_t id, struct mesh_gpu_use *out)
{
	memset(out, 0, sizeof *out);
	out->time_to_free_ns = -1;
	pthread_mutex_lock(&g->mu);
	struct res *r = find_res(g, id);
	if (r) {
		out->state = r->st;
		for (unsigned k = 0; k < r->ngpu; k++)
			out->gpus |= 1ull << r->gpu[k];
		out->vram = r->held;
		out->peak = r->peak;
		out->reserved = r->vram;
		out->pid = r->pgid;
		if (r->st == MESH_GPU_FREED)
			out->time_to_free_ns = (int64_t)r->ttf;
	}
	pthread_mutex_unlock(&g->mu);
	return r ? 0 : MESH_E_NOTFOUND;
}

int mesh_gpu_devices(struct mesh_gpu *g, struct mesh_gpu_dev **out, unsigned *n)
{
	*out = NULL;
	*n = 0;
	struct snap *s = malloc(sizeof *s);
	uint64_t *others = calloc(MESH_GPU_MAX, sizeof *others);
	if (!s || !others) {
		free(s);
		free(others);
		return -ENOMEM;
	}
	snap_read(g, s);
	struct mesh_gpu_dev *d = s->n ? calloc(s->n, sizeof *d) : NULL;
	int rc = s->n && !d ? -ENOMEM : 0;
	pthread_mutex_lock(&g->mu);
	attribute(g, s, others);
	for (unsigned i = 0; d && i < s->n; i++) {
		d[i].nv = s->gpu[i];
		d[i].reserved = reserved_on(g, i);
		d[i].others = others[i];
		for (struct res *r = g->list; r; r = r->next)
			for (unsigned k = 0; active(r) && k < r->ngpu; k++)
				if (r->gpu[k] == i) {
					d[i].workers += r->st == MESH_GPU_LIVE || r->st == MESH_GPU_PLACED;
					d[i].draining += r->st == MESH_GPU_DRAINING || r->st == MESH_GPU_STUCK;
				}
	}
	pthread_mutex_unlock(&g->mu);
	if (!rc) {
		*out = d;
		*n = s->n;
	}
	snap_release(s);
	free(s);
	free(others);
	return rc;
}

int mesh_gpu_mps_client(struct mesh_gpu *g, pid_t pid, char **err)
{
	struct snap *s = malloc(sizeof *s);
	if (!s)
		return -ENOMEM;
	snap_read(g, s);
	int found = 0, other = 0;
	for (unsigned i = 0; i < s->n && !found; i++)
		for (size_t k = 0; k < s->nprocs[i] && !found; k++) {
			const struct mesh_nvml_proc *p = &s->procs[i][k];
			int ours = (pid_t)p->pid == pid || pgid_of((pid_t)p->pid) == pid;
			found = ours && p->mps;
			other |= ours && !p->mps;
		}
	snap_release(s);
	free(s);
	if (found)
		return 0;
	return mesh_errf(err, MESH_E_REFUSED,
			 other ? "NVML lists pid %d on a GPU, but not as a client of an MPS server"
			       : "NVML does not list pid %d (or its group) as an MPS client on any GPU",
			 (int)pid);
}

char *mesh_gpu_next_event(struct mesh_gpu *g)
{
	char *e = NULL;
	pthread_mutex_lock(&g->mu);
	if (g->ev_n) {
		e = g->events[g->ev_head];
		g->ev_head = (g->ev_head + 1) % EVENTS_MAX;
		g->ev_n--;
	}
	pthread_mutex_unlock(&g->mu);
	return e;
}
