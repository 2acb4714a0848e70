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
#include "host/host.h"
#include "host/image.h"
#include "host/mps.h"
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
};

struct program {
	struct program *next;
	struct mesh_image img;
	struct worker w[MESH_MAX_WORKERS_CAP];
	unsigned nw;
	unsigned refs; /* ops using it; unload waits for 0 */
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
	char *mps_dir; /* --isolation mps: CUDA_MPS_PIPE_DIRECTORY */
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
	enum mesh_gpu_access gpu = MESH_GPU_NONE;
	if (cfg->isolation && strcmp(cfg->isolation, "mps") == 0)
		gpu = MESH_GPU_MPS;
	else if (cfg->isolation && strcmp(cfg->isolation, "none") != 0)
		return mesh_errf(err, MESH_E_PARSE, "unknown isolation '%s' (none or mps)", cfg->isolation);

	struct meshd_core *d = calloc(1, sizeof *d);
	if (!d)
		return -ENOMEM;
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	d->gpu = gpu;
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
	if (gpu == MESH_GPU_MPS) {
		const char *pd = getenv("CUDA_MPS_PIPE_DIRECTORY");
		if (!(d->mps_dir = strdup(pd ? pd : "/tmp/nvidia-mps"))) {
			rc = -ENOMEM;
			goto bad;
		}
	}
	struct mesh_host_cfg hc = {
		.logs = d->logs,
		.env = d->env,
		.gpu = gpu,
		.mps_pipe_dir = d->mps_dir,
		.check_gpu_client = gpu == MESH_GPU_MPS ? mesh_mps_check_client : NULL,
		.stop_gpu_client = gpu == MESH_GPU_MPS ? mesh_mps_terminate_client : NULL,
		.gpu_ctx = d->mps_dir,
		.ready_timeout_ns = cfg->ready_timeout_ns,
		.online_timeout_ns = cfg->online_timeout_ns,
	};
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

static json_t *hex64(uint64_t v)
{
	char b[24];
	snprintf(b, sizeof b, "%016llx", (unsigned long long)v);
	return json_string(b);
}

static json_t *image_json(const struct mesh_image *img)
{
	char lim[128];
	mesh_limits_describe(img->enforced, lim, sizeof lim);
	json_t *j = json_object();
	if (!j)
		return NULL;
	json_object_set_new(j, "name", json_string(img->name));
	json_object_set_new(j, "device", json_string(img->m.device == MESH_DEVICE_GPU ? "gpu" : "cpu"));
	json_object_set_new(j, "binary", json_string(img->bin_path));
	json_object_set_new(j, "image_hash", hex64(img->image_hash));
	json_object_set_new(j, "bin_hash", hex64(img->bin_hash));
	json_object_set_new(j, "bin_bytes", json_integer((json_int_t)img->bin_bytes));
	json_object_set_new(j, "max_workers", json_integer(img->m.max_workers));
	json_object_set_new(j, "limits", json_string(lim));
	return j;
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
	if (rc) {
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

int meshd_op_load(struct meshd_core *d, const char *name, json_t **out, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	int rc = get_program(d, name, &p, err);
	if (rc)
		return rc;
	if (out)
		*out = image_json(&p->img);
	unref(d, p);
	return 0;
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
		if (st != MESH_IS_DOWN && st != MESH_IS_STOPPING) {
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
	int rc = mesh_instance_warm(p->w[down].inst, err);
	return rc ? rc : down;
}

int meshd_op_start(struct meshd_core *d, const char *name, json_t **out, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	int rc = get_program(d, name, &p, err);
	if (rc)
		return rc;
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
	if (rc == 0 && out) {
		struct mesh_instance_stats st = mesh_instance_stats(inst);
		*out = json_pack("{s:s, s:i, s:s}", "name", p->img.name, "pid", (int)st.pid, "state",
				 mesh_istate_name(st.state));
	}
	unref(d, p);
	return rc;
}

/* Every worker of p exits and is waited for (off d->mu). */
static void stop_all(struct meshd_core *d, struct program *p)
{
	pthread_mutex_lock(&d->mu);
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

int meshd_op_ps(struct meshd_core *d, json_t **out)
{
	json_t *progs = json_array(), *root = json_object(), *host = json_object();
	if (!progs || !root || !host) {
		json_decref(progs);
		json_decref(root);
		json_decref(host);
		return -ENOMEM;
	}
	struct mesh_host_totals t = mesh_host_totals(d->h);
	const struct mesh_limits_caps *caps = mesh_host_caps(d->h);
	char lim[160];
	mesh_limits_describe(caps->avail, lim, sizeof lim);
	json_object_set_new(host, "processes", json_integer(t.procs));
	json_object_set_new(host, "cpu_pct", json_real(t.cpu_pct));
	json_object_set_new(host, "rss", json_integer((json_int_t)t.rss));
	json_object_set_new(host, "spawns", json_integer(t.spawns));
	json_object_set_new(host, "crashes", json_integer(t.crashes));
	json_object_set_new(host, "limits_available", json_string(lim));
	json_object_set_new(host, "cgroup", json_string(*caps->cgroup_why ? caps->cgroup_why : "delegated"));
	json_object_set_new(host, "slots", json_integer(d->nslots));
	pthread_mutex_lock(&d->mu);
	for (struct program *p = d->progs; p; p = p->next) {
		if (p->gone)
			continue;
		reconcile(d, p);
		json_t *pj = image_json(&p->img), *ws = json_array();
		uint32_t spawns = 0, crashes = 0;
		for (unsigned i = 0; i < p->nw; i++) {
			struct mesh_instance_stats st = mesh_instance_stats(p->w[i].inst);
			char el[128];
			mesh_limits_describe(st.limits, el, sizeof el);
			spawns += st.spawns;
			crashes += st.crashes;
			json_t *wj = json_object();
			json_object_set_new(wj, "state", json_string(mesh_istate_name(st.state)));
			json_object_set_new(wj, "pid", json_integer(st.pid));
			json_object_set_new(wj, "slot", p->w[i].slot >= 0 ? json_integer(p->w[i].slot) : json_null());
			json_object_set_new(wj, "cpu_pct", json_real(st.cpu_pct));
			json_object_set_new(wj, "rss", json_integer((json_int_t)st.rss));
			json_object_set_new(wj, "cpu_ns", json_integer((json_int_t)st.cpu_ns));
			json_object_set_new(wj, "spawns", json_integer(st.spawns));
			json_object_set_new(wj, "crashes", json_integer(st.crashes));
			json_object_set_new(wj, "last_exit", st.last_exit >= 0 ? json_integer(st.last_exit) : json_null());
			json_object_set_new(wj, "limits_enforced", json_string(st.pid ? el : ""));
			json_array_append_new(ws, wj);
		}
		json_object_set_new(pj, "spawns", json_integer(spawns));
		json_object_set_new(pj, "crashes", json_integer(crashes));
		json_object_set_new(pj, "workers", ws);
		json_array_append_new(progs, pj);
	}
	pthread_mutex_unlock(&d->mu);
	json_object_set_new(root, "host", host);
	json_object_set_new(root, "programs", progs);
	*out = root;
	return 0;
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
			int rc = mesh_instance_launch(p->w[cand].inst, d->slots[s], err);
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
	pthread_mutex_unlock(&d->mu);
	uint64_t t = timeout_ns ? timeout_ns : 30ull * MESH_NS_PER_S;
	void *rep = NULL;
	size_t rl = 0;
	rc = mesh_slot_call(slot, req, n, &rep, &rl, t, MESH_SLOT_CALL_SPIN_NS);
	if (rc == MESH_E_REFUSED) {
		if (err)
			*err = rep ? mesh_strf("the worker's handler failed: %.*s", (int)rl, (char *)rep) : NULL;
		free(rep);
		rep = NULL;
	} else if (rc == MESH_E_STATE || rc == MESH_E_CORRUPT) {
		/* The slot failed: most likely its worker died.  Give the host a
		 * moment to reap it and write the report. */
		mesh_instance_wait(inst, 1u << MESH_IS_DOWN, 5 * MESH_NS_PER_S, NULL);
		char *r = mesh_instance_last_report(inst);
		if (mesh_instance_state(inst) == MESH_IS_DOWN && r) {
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

/* Scale to zero: each warm worker is put to the autoscale policy with its
 * own demand (requests in flight) and idle time; REAP makes it exit. */
void meshd__tick(struct meshd_core *d, uint64_t now)
{
	pthread_mutex_lock(&d->mu);
	for (struct program *p = d->progs; p; p = p->next) {
		if (p->gone)
			continue;
		reconcile(d, p);
		for (unsigned i = 0; i < p->nw; i++) {
			struct worker *wk = &p->w[i];
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
	free(d->mps_dir);
	pthread_mutex_destroy(&d->mu);
	pthread_cond_destroy(&d->cv);
	free(d);
}
