/* meshd's core: the catalog's loaded programs, their worker instances, the
 * shared-memory slots, and the loop (daemon/ops.h).
 *
 * Locks: d->mu guards programs and slots; the host has its own lock.  Order:
 * d->mu may be held while calling a host function that does not wait
 * (warm, launch, halt, exit, state, stats); never across a wait. */
#include "daemon/ops.h"

#include "autoscale/policy.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "base/utf8.h"
#include "daemon/core_gpu.h"
#include "host/host.h"
#include "host/image.h"
#include "shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_SLOTS 8u
#define MAX_SLOTS 4096u
#define LOGS_CAP (1u << 20)
/* A caller waits this long for a worker that is already STOPPING to go. */
#define STOP_WAIT_NS (15ull * MESH_NS_PER_S)

struct worker {
	struct mesh_instance *inst;
	int slot;	  /* index into d->slots while on a slot, else -1 */
	unsigned inflight;
	uint64_t last_used;
	uint64_t gpu_res, gpu_prev; /* its GPU reservation (core_gpu.h), and the last one's */
};

struct program {
	struct program *next;
	struct mesh_image img;
	struct worker w[MESH_MAX_WORKERS_CAP];
	unsigned nw;
	unsigned refs; /* ops using it; unload waits for 0 */
	unsigned stops; /* stop_all calls: a call cut by one says so */
	int gone;
};

struct meshd_core {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct mesh_host *h;
	char *catalog, *logs;
	char *env[4];
	struct program *progs;
	struct mesh_slot **slots;
	unsigned nslots;
	unsigned *slot_busy; /* calls in flight on it */
	int *slot_taken;     /* given to a worker */
	atomic_int stop;
	enum mesh_gpu_access gpu;
	struct meshd__gpu G; /* NVML, placement, MPS (core_gpu.h) */
};



int meshd_core_new(struct meshd_core **out, const struct meshd_config *cfg, char **err)
{
	struct stat st;
	char *e = NULL;
	int rc;
	if (err)
		*err = NULL;
	if (!cfg->catalog || stat(cfg->catalog, &st) != 0 || !S_ISDIR(st.st_mode))
		return mesh_errf(err, MESH_E_NOTFOUND, "cannot use catalog '%s': %s", cfg->catalog ? cfg->catalog : "",
			   cfg->catalog && stat(cfg->catalog, &st) != 0 ? strerror(errno) : "not a directory");
	if (!cfg->logs || stat(cfg->logs, &st) != 0 || !S_ISDIR(st.st_mode))
		return mesh_errf(err, MESH_E_NOTFOUND, "cannot use logs directory '%s': %s", cfg->logs ? cfg->logs : "",
			   cfg->logs && stat(cfg->logs, &st) != 0 ? strerror(errno) : "not a directory");
	unsigned n = cfg->slots ? cfg->slots : DEFAULT_SLOTS;
	if (n > MAX_SLOTS)
		return mesh_errf(err, MESH_E_RANGE, "--slots %u is over %u", n, MAX_SLOTS);
	if (cfg->isolation && strcmp(cfg->isolation, "mps") != 0 && strcmp(cfg->isolation, "none") != 0)
		return mesh_errf(err, MESH_E_PARSE, "unknown isolation '%s' (none or mps)", cfg->isolation);

	struct meshd_core *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	d->nslots = n;
	char abs[PATH_MAX];
	d->catalog = strdup(realpath(cfg->catalog, abs) ? abs : cfg->catalog);
	d->logs = strdup(cfg->logs);
	const char *base = getenv("MESH_SERVICE_BASE"), *models = getenv("MESH_MODELS"), *sys = getenv("MESH_SYSTEM");
	d->env[0] = mesh_strf("MESH_SERVICE_BASE=%s", base ? base : d->catalog ? d->catalog : "");
	d->env[1] = models ? mesh_strf("MESH_MODELS=%s", models) : mesh_strf("MESH_MODELS=%s/models", d->catalog ? d->catalog : "");
	d->env[2] = mesh_strf("MESH_SYSTEM=%s", sys ? sys : mesh_target_triple());
	d->slots = calloc(n, sizeof *d->slots);
	d->slot_busy = calloc(n, sizeof *d->slot_busy);
	d->slot_taken = calloc(n, sizeof *d->slot_taken);
	if (!d->catalog || !d->logs || !d->env[0] || !d->env[1] || !d->env[2] || !d->slots || !d->slot_busy ||
	    !d->slot_taken) {
		rc = -ENOMEM;
		goto bad;
	}
	for (unsigned i = 0; i < n; i++)
		if ((rc = mesh_slot_create(&d->slots[i], i, 0))) {
			mesh_errf(err, rc, "cannot create slot %u: %s", i, mesh_strerror(rc));
			goto bad;
		}
	if ((rc = meshd__gpu_new(&d->G, cfg->isolation)))
		goto bad;
	d->gpu = d->G.access;
	struct mesh_host_cfg hc = {
		.logs = d->logs,
		.env = d->env,
		.ready_timeout_ns = cfg->ready_timeout_ns,
		.online_timeout_ns = cfg->online_timeout_ns,
		.log_max = cfg->log_max,
	};
	meshd__gpu_host_cfg(&d->G, &hc);
	if ((rc = mesh_host_new(&d->h, &hc, &e))) {
		if (err)
			*err = e;
		else
			free(e);
		goto bad;
	}
	*out = d;
	return 0;
bad:
	meshd_core_free(d); /* copes with a half-built core: no host, NULL slots */
	return rc;
}

/* Gives back the slots of workers that left them, and replaces a slot that
 * a crash failed (no old process may still map it).  d->mu held. */
static void reconcile(struct meshd_core *d, struct program *p)
{
	for (unsigned i = 0; i < p->nw; i++) {
		struct worker *wk = &p->w[i];
		struct mesh_slot *bad = mesh_instance_take_failed_slot(wk->inst);
		if (wk->slot < 0)
			continue;
		if (mesh_instance_slot(wk->inst) == d->slots[wk->slot] && !bad)
			continue;
		enum mesh_istate st = mesh_instance_state(wk->inst);
		if (st == MESH_IS_LAUNCHING || st == MESH_IS_RUNNING || st == MESH_IS_HALTING ||
		    (st == MESH_IS_STARTING && !bad))
			continue; /* a launch on it is pending */
		unsigned s = (unsigned)wk->slot;
		if ((bad || mesh_slot_failed(d->slots[s])) && d->slot_busy[s] == 0) {
			struct mesh_slot *fresh = NULL;
			if (mesh_slot_create(&fresh, s, 0) == 0) {
				mesh_slot_free(d->slots[s]);
				d->slots[s] = fresh;
			}
		}
		d->slot_taken[s] = 0;
		wk->slot = -1;
	}
}

static int take_slot(struct meshd_core *d)
{
	for (unsigned i = 0; i < d->nslots; i++)
		if (!d->slot_taken[i] && d->slot_busy[i] == 0) {
			if (mesh_slot_failed(d->slots[i])) {
				struct mesh_slot *fresh = NULL;
				if (mesh_slot_create(&fresh, i, 0) != 0)
					continue;
				mesh_slot_free(d->slots[i]);
				d->slots[i] = fresh;
			}
			d->slot_taken[i] = 1;
			return (int)i;
		}
	return -1;
}

static struct program *find(struct meshd_core *d, const char *name)
{
	for (struct program *p = d->progs; p; p = p->next)
		if (!p->gone && strcmp(p->img.name, name) == 0)
			return p;
	return NULL;
}

/* The image's fields of pi; the strings are copies.  0 or -ENOMEM. */
static int image_info(const struct mesh_image *img, struct meshd_program_info *pi)
{
	memset(pi, 0, sizeof *pi);
	pi->name = strdup(img->name);
	pi->binary = strdup(img->bin_path);
	if (!pi->name || !pi->binary) {
		meshd_program_info_release(pi);
		return -ENOMEM;
	}
	pi->gpu = img->m.device == MESH_DEVICE_GPU;
	pi->image_hash = img->image_hash;
	pi->bin_hash = img->bin_hash;
	pi->bin_bytes = img->bin_bytes;
	pi->max_workers = img->m.max_workers;
	pi->limits = img->enforced;
	return 0;
}

void meshd_program_info_release(struct meshd_program_info *pi)
{
	if (!pi)
		return;
	free(pi->name);
	free(pi->binary);
	free(pi->workers);
	memset(pi, 0, sizeof *pi);
}

void meshd_ps_release(struct meshd_ps *ps)
{
	if (!ps)
		return;
	for (unsigned i = 0; i < ps->nprograms; i++)
		meshd_program_info_release(&ps->programs[i]);
	free(ps->programs);
	ps->programs = NULL;
	ps->nprograms = 0;
	free(ps->gpu_none);
	ps->gpu_none = NULL;
	free(ps->gpus);
	ps->gpus = NULL;
	ps->ngpus = 0;
}

/* Finds or loads name, with a reference held (unref when done). */
static int get_program(struct meshd_core *d, const char *name, struct program **out, char **err)
{
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	if (p) {
		p->refs++;
		pthread_mutex_unlock(&d->mu);
		*out = p;
		return 0;
	}
	pthread_mutex_unlock(&d->mu);
	/* Prepare off the lock: it reads and hashes files. */
	struct program *np = calloc(1, sizeof *np);
	if (!np)
		return -ENOMEM;
	int rc = mesh_image_prepare(d->catalog, name, mesh_host_caps(d->h), d->gpu, &np->img, err);
	int grc = meshd__gpu_load(&d->G, &np->img, rc, err);
	if (grc && !rc)
		mesh_image_release(&np->img);
	if ((rc = grc)) {
		free(np);
		return rc;
	}
	pthread_mutex_lock(&d->mu);
	p = find(d, name);
	if (p) { /* loaded meanwhile by another caller */
		mesh_image_release(&np->img);
		free(np);
	} else {
		p = np;
		p->next = d->progs;
		d->progs = p;
	}
	p->refs++;
	pthread_mutex_unlock(&d->mu);
	*out = p;
	return 0;
}

static void unref(struct meshd_core *d, struct program *p)
{
	pthread_mutex_lock(&d->mu);
	p->refs--;
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
}

int meshd_op_load(struct meshd_core *d, const char *name, struct meshd_program_info *out, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	int rc = get_program(d, name, &p, err);
	if (rc)
		return rc;
	if (out)
		rc = image_info(&p->img, out);
	unref(d, p);
	return rc;
}

static uint64_t start_wait_ns(const struct program *p, const struct meshd_core *d)
{
	(void)d;
	return p->img.m.ready_timeout_ns + p->img.m.online_timeout_ns + STOP_WAIT_NS;
}

/* A worker of p that is up or coming up, or a new one warmed; d->mu held.
 * Returns its index or a negative code. */
static int pick_or_warm(struct meshd_core *d, struct program *p, char **err)
{
	int down = -1;
	for (unsigned i = 0; i < p->nw; i++) {
		enum mesh_istate st = mesh_instance_state(p->w[i].inst);
		if (st != MESH_IS_DOWN && !mesh_istate_stopping(st)) {
			/* A no-op on a live worker, but it makes this the request
			 * whose failures the caller's wait reports. */
			int rc = mesh_instance_warm(p->w[i].inst, err);
			return rc ? rc : (int)i;
		}
		if (st == MESH_IS_DOWN && down < 0)
			down = (int)i;
	}
	if (down < 0) {
		if (p->nw >= p->img.m.max_workers)
			return mesh_errf(err, MESH_E_STATE, "'%s' has %u workers stopping; try again", p->img.name, p->nw);
		int rc = mesh_instance_new(d->h, &p->img, &p->w[p->nw].inst);
		if (rc)
			return rc;
		p->w[p->nw].slot = -1;
		down = (int)p->nw++;
	}
	struct worker *wk = &p->w[down];
	uint64_t res;
	int rc = meshd__gpu_before_spawn(&d->G, &d->mu, 0, &p->img, (unsigned)down, wk->inst, &res, err);
	if (rc)
		return rc;
	rc = mesh_instance_warm(wk->inst, err);
	meshd__gpu_after_spawn(&d->G, res, wk->inst, rc);
	if (res)
		wk->gpu_prev = wk->gpu_res, wk->gpu_res = res;
	return rc ? rc : down;
}

int meshd_op_start(struct meshd_core *d, const char *name, struct mesh_instance_stats *out, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	int rc = get_program(d, name, &p, err);
	if (rc)
		return rc;
	meshd__gpu_settle(&d->G, &p->img);
	pthread_mutex_lock(&d->mu);
	int i = pick_or_warm(d, p, err);
	struct mesh_instance *inst = i >= 0 ? p->w[i].inst : NULL;
	if (i >= 0)
		p->w[i].last_used = mesh_mono_ns();
	pthread_mutex_unlock(&d->mu);
	if (i < 0) {
		unref(d, p);
		return i;
	}
	rc = mesh_instance_wait(inst, 1u << MESH_IS_IDLE | 1u << MESH_IS_RUNNING | 1u << MESH_IS_LAUNCHING,
				start_wait_ns(p, d), err);
	if (rc == 0 && out)
		*out = mesh_instance_stats(inst);
	unref(d, p);
	return rc;
}

/* Every worker of p exits and is waited for (off d->mu). */
static void stop_all(struct meshd_core *d, struct program *p)
{
	pthread_mutex_lock(&d->mu);
	p->stops++;
	unsigned n = p->nw;
	struct mesh_instance *list[MESH_MAX_WORKERS_CAP];
	for (unsigned i = 0; i < n; i++) {
		list[i] = p->w[i].inst;
		mesh_instance_exit(list[i]);
	}
	pthread_mutex_unlock(&d->mu);
	for (unsigned i = 0; i < n; i++)
		mesh_instance_wait(list[i], 1u << MESH_IS_DOWN, p->img.m.stop_grace_ns + STOP_WAIT_NS, NULL);
	pthread_mutex_lock(&d->mu);
	reconcile(d, p);
	pthread_mutex_unlock(&d->mu);
}

int meshd_op_stop(struct meshd_core *d, const char *name, char **err)
{
	if (err)
		*err = NULL;
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	if (p)
		p->refs++;
	pthread_mutex_unlock(&d->mu);
	if (!p)
		return mesh_errf(err, MESH_E_NOTFOUND, "'%s' is not loaded", name);
	stop_all(d, p);
	unref(d, p);
	return 0;
}

int meshd_op_unload(struct meshd_core *d, const char *name, char **err)
{
	if (err)
		*err = NULL;
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	if (!p) {
		pthread_mutex_unlock(&d->mu);
		return mesh_errf(err, MESH_E_NOTFOUND, "'%s' is not loaded", name);
	}
	p->gone = 1;
	p->refs++;
	pthread_mutex_unlock(&d->mu);
	stop_all(d, p);
	pthread_mutex_lock(&d->mu);
	p->refs--;
	while (p->refs)
		pthread_cond_wait(&d->cv, &d->mu);
	for (struct program **pp = &d->progs; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	reconcile(d, p);
	pthread_mutex_unlock(&d->mu);
	for (unsigned i = 0; i < p->nw; i++)
		mesh_instance_free(p->w[i].inst);
	mesh_image_release(&p->img);
	free(p);
	return 0;
}

/* pi's ps fields: its workers and their counts; d->mu held.  0 or -ENOMEM. */
static int program_ps(struct meshd_core *d, struct program *p, struct meshd_program_info *pi)
{
	reconcile(d, p);
	int rc = image_info(&p->img, pi);
	if (rc)
		return rc;
	if (p->nw && !(pi->workers = calloc(p->nw, sizeof *pi->workers)))
		return -ENOMEM;
	pi->nworkers = p->nw;
	for (unsigned i = 0; i < p->nw; i++) {
		struct meshd_worker_info *wi = &pi->workers[i];
		wi->st = mesh_instance_stats(p->w[i].inst);
		wi->slot = p->w[i].slot;
		meshd__gpu_worker(&d->G, p->w[i].gpu_res, p->w[i].gpu_prev, wi);
		pi->spawns += wi->st.spawns;
		pi->crashes += wi->st.crashes;
	}
	return 0;
}

int meshd_op_ps(struct meshd_core *d, struct meshd_ps *out)
{
	memset(out, 0, sizeof *out);
	out->host = mesh_host_totals(d->h);
	out->caps = *mesh_host_caps(d->h);
	out->slots = d->nslots;
	int rc = meshd__gpu_ps(&d->G, out);
	pthread_mutex_lock(&d->mu);
	unsigned n = 0;
	for (struct program *p = d->progs; p; p = p->next)
		n += !p->gone;
	if (n && !(out->programs = calloc(n, sizeof *out->programs)))
		rc = -ENOMEM;
	for (struct program *p = d->progs; p && !rc; p = p->next)
		if (!p->gone)
			rc = program_ps(d, p, &out->programs[out->nprograms++]);
	pthread_mutex_unlock(&d->mu);
	if (rc)
		meshd_ps_release(out);
	return rc;
}

int meshd_op_logs(struct meshd_core *d, const char *name, size_t tail_bytes, char **text, size_t *len, char **err)
{
	if (err)
		*err = NULL;
	if (!mesh_manifest_name_ok(name))
		return mesh_errf(err, MESH_E_PATH, "'%s' is not a program name", name);
	char *path = mesh_strf("%s/%s.log", d->logs, name);
	if (!path)
		return -ENOMEM;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		int rc = e == ENOENT ? mesh_errf(err, MESH_E_NOTFOUND, "no log for '%s' yet", name)
				     : mesh_errf(err, -e, "cannot open '%s': %s", path, strerror(e));
		free(path);
		return rc;
	}
	free(path);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	size_t want = tail_bytes == 0 || tail_bytes > LOGS_CAP ? LOGS_CAP : tail_bytes;
	off_t off = st.st_size > (off_t)want ? st.st_size - (off_t)want : 0;
	size_t n = (size_t)(st.st_size - off);
	char *buf = malloc(n + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	ssize_t r = mesh_pread_full(fd, buf, n, off);
	close(fd);
	if (r < 0) {
		free(buf);
		return (int)r;
	}
	buf[r] = 0;
	*text = buf;
	*len = (size_t)r;
	return 0;
}

/* A worker of p on a slot, serving; its index, with inflight counted, or a
 * negative code.  Spawns or launches as needed. */
static int acquire(struct meshd_core *d, struct program *p, uint64_t deadline, int *slot_out, char **err)
{
	for (;;) {
		pthread_mutex_lock(&d->mu);
		reconcile(d, p);
		int best = -1, waitfor = -1;
		for (unsigned i = 0; i < p->nw; i++) {
			enum mesh_istate st = mesh_instance_state(p->w[i].inst);
			if (st == MESH_IS_RUNNING && p->w[i].slot >= 0 &&
			    (best < 0 || p->w[i].inflight < p->w[best].inflight))
				best = (int)i;
			if ((st == MESH_IS_STARTING || st == MESH_IS_LAUNCHING) && p->w[i].slot >= 0)
				waitfor = (int)i;
		}
		if (best >= 0) {
			struct worker *wk = &p->w[best];
			wk->inflight++;
			wk->last_used = mesh_mono_ns();
			d->slot_busy[wk->slot]++;
			*slot_out = wk->slot;
			pthread_mutex_unlock(&d->mu);
			return best;
		}
		if (waitfor < 0) {
			/* Put an idle one on a slot, or a new one (spawned on launch). */
			int cand = -1;
			for (unsigned i = 0; i < p->nw && cand < 0; i++)
				if (mesh_instance_state(p->w[i].inst) == MESH_IS_IDLE)
					cand = (int)i;
			for (unsigned i = 0; i < p->nw && cand < 0; i++)
				if (mesh_instance_state(p->w[i].inst) == MESH_IS_STARTING)
					cand = (int)i;
			for (unsigned i = 0; i < p->nw && cand < 0; i++)
				if (mesh_instance_state(p->w[i].inst) == MESH_IS_DOWN)
					cand = (int)i;
			if (cand < 0 && p->nw < p->img.m.max_workers) {
				int rc = mesh_instance_new(d->h, &p->img, &p->w[p->nw].inst);
				if (rc) {
					pthread_mutex_unlock(&d->mu);
					return rc;
				}
				p->w[p->nw].slot = -1;
				cand = (int)p->nw++;
			}
			if (cand < 0) {
				/* All are stopping: wait for one to go. */
				struct mesh_instance *inst = p->w[0].inst;
				pthread_mutex_unlock(&d->mu);
				mesh_instance_wait(inst, 1u << MESH_IS_DOWN, STOP_WAIT_NS, NULL);
				if (mesh_mono_ns() >= deadline)
					return mesh_errf(err, MESH_E_TIMEOUT, "no worker of '%s' could take the call in time",
						   p->img.name);
				continue;
			}
			int s = take_slot(d);
			if (s < 0) {
				pthread_mutex_unlock(&d->mu);
				return mesh_errf(err, MESH_E_STATE, "no free slot for '%s' (all %u are in use)", p->img.name,
					   d->nslots);
			}
			struct worker *wk = &p->w[cand];
			uint64_t res = 0;
			int rc = 0;
			if (mesh_instance_state(wk->inst) == MESH_IS_DOWN &&
			    (rc = meshd__gpu_before_spawn(&d->G, &d->mu, 1, &p->img, (unsigned)cand, wk->inst, &res, err))) {
				d->slot_taken[s] = 0;
				pthread_mutex_unlock(&d->mu);
				if (rc == 1)
					continue; /* waited for GPU memory with d->mu dropped: look again */
				return rc;
			}
			rc = mesh_instance_launch(wk->inst, d->slots[s], err);
			meshd__gpu_after_spawn(&d->G, res, wk->inst, rc);
			if (res)
				wk->gpu_prev = wk->gpu_res, wk->gpu_res = res;
			if (rc) {
				d->slot_taken[s] = 0;
				pthread_mutex_unlock(&d->mu);
				return rc;
			}
			p->w[cand].slot = s;
			waitfor = cand;
		}
		struct mesh_instance *inst = p->w[waitfor].inst;
		pthread_mutex_unlock(&d->mu);
		uint64_t now = mesh_mono_ns();
		if (now >= deadline)
			return mesh_errf(err, MESH_E_TIMEOUT, "'%s' did not come online in time", p->img.name);
		int rc = mesh_instance_wait(inst, 1u << MESH_IS_RUNNING | 1u << MESH_IS_DOWN | 1u << MESH_IS_IDLE,
					    deadline - now, err);
		if (rc)
			return rc;
		if (mesh_instance_state(inst) == MESH_IS_DOWN) {
			char *r = mesh_instance_last_report(inst);
			if (err)
				*err = r ? r : mesh_strf("'%s' exited before it came online", p->img.name);
			else
				free(r);
			return MESH_E_CRASHED;
		}
	}
}

int meshd_op_call(struct meshd_core *d, const char *name, const void *req, size_t n, void **reply, size_t *reply_len,
		  uint64_t timeout_ns, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	*reply = NULL;
	*reply_len = 0;
	int rc = get_program(d, name, &p, err);
	if (rc)
		return rc;
	uint64_t start = mesh_mono_ns();
	uint64_t launch_deadline = start + start_wait_ns(p, d);
	int s = -1;
	int wi = acquire(d, p, launch_deadline, &s, err);
	if (wi < 0) {
		unref(d, p);
		return wi;
	}
	struct mesh_slot *slot;
	struct mesh_instance *inst;
	pthread_mutex_lock(&d->mu);
	slot = d->slots[s];
	inst = p->w[wi].inst;
	unsigned stops = p->stops;
	pthread_mutex_unlock(&d->mu);
	uint64_t t = timeout_ns ? timeout_ns : 30ull * MESH_NS_PER_S;
	void *rep = NULL;
	size_t rl = 0;
	rc = mesh_slot_call(slot, req, n, &rep, &rl, t, MESH_SLOT_CALL_SPIN_NS);
	if (rc == MESH_E_REFUSED) {
		rc = MESH_E_HANDLER;
		if (err)
			*err = rep ? mesh_strf("the worker's handler failed: %.*s", (int)rl, (char *)rep) : NULL;
		free(rep);
		rep = NULL;
	} else if (rc == MESH_E_STATE || rc == MESH_E_CORRUPT) {
		/* The slot failed: most likely its worker died.  Give the host a
		 * moment to reap it and write the report. */
		mesh_instance_wait(inst, 1u << MESH_IS_DOWN, 5 * MESH_NS_PER_S, NULL);
		char *r = mesh_instance_last_report(inst);
		pthread_mutex_lock(&d->mu);
		int stopped = p->stops != stops;
		pthread_mutex_unlock(&d->mu);
		if (stopped && mesh_instance_state(inst) == MESH_IS_DOWN) {
			/* Asked to exit (mesh stop, unload, meshd stopping): no crash. */
			rc = MESH_E_STOPPED;
			if (err)
				*err = mesh_strf("worker of '%s' stopped while the call ran (stop, unload or meshd "
						 "stopping); the call may not have completed",
						 name);
		} else if (mesh_instance_state(inst) == MESH_IS_DOWN && r) {
			rc = MESH_E_CRASHED;
			if (err)
				*err = r, r = NULL;
		} else if (err) {
			const char *why = mesh_slot_failed(slot);
			*err = mesh_strf("slot %d failed: %s", s, why ? why : mesh_strerror(rc));
		}
		free(r);
	} else if (rc == MESH_E_TIMEOUT && err) {
		*err = mesh_strf("'%s' did not reply within %llu ms", name, (unsigned long long)(t / MESH_NS_PER_MS));
	} else if (rc && err) {
		*err = mesh_strf("call to '%s' failed: %s", name, mesh_strerror(rc));
	}
	pthread_mutex_lock(&d->mu);
	p->w[wi].inflight--;
	p->w[wi].last_used = mesh_mono_ns();
	d->slot_busy[s]--;
	reconcile(d, p);
	pthread_mutex_unlock(&d->mu);
	unref(d, p);
	if (rc == 0) {
		*reply = rep;
		*reply_len = rl;
	}
	return rc;
}

/* One line of a report for the log: control bytes as '?', valid UTF-8. */
static char *log_text(const char *s, size_t n)
{
	char *t = mesh_utf8_sanitize(s, n, NULL);
	for (char *c = t; c && *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			*c = '?';
	return t;
}

/* Logs a failure report (reported once, taken from the host): its first
 * line (who, how, the exit status) and the last line of output before it,
 * so a crash that no caller saw -- while idle -- is in meshd's own log. */
static void log_report(const char *name, char *r)
{
	const char *nl = strchr(r, '\n');
	size_t head = nl ? (size_t)(nl - r) : strlen(r);
	const char *tail = nl ? strstr(nl, "---\n") : NULL;
	const char *last = NULL;
	size_t lastn = 0;
	if (tail) {
		/* The last non-empty line of the output tail. */
		const char *e = r + strlen(r);
		while (e > tail + 4 && e[-1] == '\n')
			e--;
		const char *b = e;
		while (b > tail + 4 && b[-1] != '\n')
			b--;
		if (b < e) {
			last = b;
			lastn = (size_t)(e - b);
		}
	}
	char *h = log_text(r, head), *l = last ? log_text(last, lastn) : NULL;
	mesh_warn("failed name=%s: %s; last output: %s", name, h ? h : "?", l ? l : "(none)");
	free(h);
	free(l);
	free(r);
}

/* Scale to zero: each warm worker is put to the autoscale policy with its
 * own demand (requests in flight) and idle time; REAP makes it exit. */
void meshd__tick(struct meshd_core *d, uint64_t now)
{
	meshd__gpu_log(&d->G);
	pthread_mutex_lock(&d->mu);
	for (struct program *p = d->progs; p; p = p->next) {
		if (p->gone)
			continue;
		reconcile(d, p);
		for (unsigned i = 0; i < p->nw; i++) {
			struct worker *wk = &p->w[i];
			char *r = mesh_instance_crashed(wk->inst);
			if (r)
				log_report(p->img.name, r);
			enum mesh_istate st = mesh_instance_state(wk->inst);
			if ((st != MESH_IS_IDLE && st != MESH_IS_RUNNING) || !wk->last_used)
				continue;
			/* Used after now (a call ended while this pass waited for
			 * d->mu): not idle at all, never a wrapped difference. */
			uint64_t since = now > wk->last_used ? now - wk->last_used : 0;
			int64_t idle = (int64_t)(since / MESH_NS_PER_MS);
			int64_t ttl = (int64_t)(p->img.m.idle_ttl_ns / MESH_NS_PER_MS);
			if (mesh_as_decide(1, wk->inflight > 0, idle, ttl) == MESH_AS_REAP)
				mesh_instance_exit(wk->inst);
		}
	}
	pthread_mutex_unlock(&d->mu);
}

int meshd_core_run(struct meshd_core *d)
{
	uint64_t last = 0;
	while (!atomic_load(&d->stop)) {
		mesh_host_poll(d->h, 250 * MESH_NS_PER_MS);
		uint64_t now = mesh_mono_ns();
		if (now - last >= 500 * MESH_NS_PER_MS) {
			meshd__tick(d, now);
			last = now;
		}
	}
	return 0;
}

void meshd_core_stop(struct meshd_core *d)
{
	atomic_store(&d->stop, 1);
	mesh_host_wake(d->h);
}

void meshd_core_free(struct meshd_core *d)
{
	if (!d)
		return;
	/* The host exits every worker (grace, SIGKILL of the group) and reaps. */
	mesh_host_free(d->h);
	while (d->progs) {
		struct program *p = d->progs;
		d->progs = p->next;
		mesh_image_release(&p->img);
		free(p);
	}
	for (unsigned i = 0; d->slots && i < d->nslots; i++)
		mesh_slot_free(d->slots[i]);
	free(d->slots);
	free(d->slot_busy);
	free(d->slot_taken);
	for (int i = 0; i < 3; i++)
		free(d->env[i]);
	free(d->catalog);
	free(d->logs);
	meshd__gpu_free(&d->G);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->cv);
	free(d);
}
