/* meshd's program table (core_int.h): the catalog's programs loaded,
 * upgraded, rolled back, stopped and unloaded, and what ps, metrics and
 * logs report about them.
 *
 * Upgrade (a load of a changed image) and rollback: a new struct program
 * of the same name takes the old one's place; the old one is retired (gone
 * to find(), so nothing new reaches it): its workers finish the call or the
 * job chunks they hold, then exit, and the tick frees it once unused.
 * swap_mu serializes swaps; swap_mu is taken before d->mu, never under it. */
#include "meshd/core/core_int.h"

#include "base/buf.h"
#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "meshd/core/images.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOGS_CAP (1u << 20)

/* One image swap (upgrade, rollback) at a time. */
static pthread_mutex_t swap_mu = PTHREAD_MUTEX_INITIALIZER;

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
	pi->image_id = mesh_image_id(img);
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
	free(pi->failed);
	free(pi->warm_hist);
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

/* A program's own memory (its instances freed or never made). */
void meshd__program_free(struct program *p)
{
	mesh_image_release(&p->img);
	free(p->crash_report);
	free(p->failed);
	free(p->keep_dir);
	free(p->prev_dir);
	free(p);
}

/* p's image gets a kept copy (for a later rollback to it); without one
 * (a full disk, the catalog changed meanwhile) it cannot be rolled back
 * to, which is said in the log.  Off d->mu: it copies files. */
static void keep_image(struct meshd_core *d, struct program *p)
{
	char *e = NULL;
	if (meshd_image_keep(d->logs, &p->img, mesh_host_run_as(d->h, &p->img), mesh_host_caps(d->h), d->gpu,
			     &p->keep_dir, &e) != 0)
		mesh_warn("load name=%s: no copy of its image kept, so no rollback to it: %s", p->img.name,
			  e ? e : "out of memory");
	free(e);
}

/* Refuses an image whose workers' user cannot reach its binary (a catalog
 * under /root or a 0700 directory while meshd runs as root): every start
 * would fail, so the load does, saying what to change. */
static int check_reach(struct meshd_core *d, const struct mesh_image *img, char **err)
{
	const struct mesh_run_as *ra = mesh_host_run_as(d->h, img);
	char *e = NULL;
	int rc = meshd_image_reachable(img->bin_path, ra, &e);
	if (rc == -EACCES)
		rc = mesh_errf(err, MESH_E_REFUSED,
			       "'%s' cannot be run by its workers' user: %s; %s: name a user who can in its manifest "
			       "(user = \"...\") or put the catalog where '%s' can reach it",
			       img->name, e ? e : "permission denied", img->m.user ? "the manifest names that user"
									: "meshd runs as root, so workers run as that user unless the manifest names one",
			       ra->name);
	else if (rc)
		rc = mesh_errf(err, rc, "'%s': %s", img->name, e ? e : mesh_strerror(rc));
	free(e);
	return rc;
}

/* Records p's image as current, with its previous one (images.h). */
static void record_history(struct meshd_core *d, const struct program *p)
{
	int rc = meshd_image_history_save(d->logs, p->img.name, mesh_image_id(&p->img), p->prev_id);
	if (rc)
		mesh_warn("load name=%s: cannot record its image history (a rollback after a restart finds none): %s",
			  p->img.name, mesh_strerror(rc));
}

/* Finds or loads name, with a reference held (unref when done). */
int meshd__get_program(struct meshd_core *d, const char *name, struct program **out, char **err)
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
	if (!grc)
		grc = check_reach(d, &np->img, err);
	if (grc && !rc)
		mesh_image_release(&np->img);
	if ((rc = grc)) {
		free(np);
		return rc;
	}
	keep_image(d, np);
	/* The previous image recorded for this one (before meshd restarted). */
	if (np->keep_dir &&
	    meshd_image_history_prev(d->logs, name, mesh_image_id(&np->img), &np->prev_id, &np->prev_dir) != 0)
		np->prev_id = 0;
	pthread_mutex_lock(&d->mu);
	p = find(d, name);
	if (p) { /* loaded meanwhile by another caller */
		meshd__program_free(np);
	} else {
		p = np;
		p->next = d->progs;
		d->progs = p;
		meshd__ledger_open(d, p);
	}
	p->refs++;
	pthread_mutex_unlock(&d->mu);
	if (p == np && p->keep_dir) {
		/* Copies of other images from before (a restart, an unload) are
		 * no previous image of this one. */
		meshd_image_prune(d->logs, name, p->keep_dir, p->prev_dir);
		record_history(d, p);
	}
	*out = p;
	return 0;
}

void meshd__unref(struct meshd_core *d, struct program *p)
{
	pthread_mutex_lock(&d->mu);
	p->refs--;
	int freeable = p->refs == 0 && atomic_load(&p->retired);
	pthread_cond_broadcast(&d->cv);
	pthread_mutex_unlock(&d->mu);
	if (freeable)
		meshd__kick(d, 0); /* the loop frees it once its workers are down */
}

int meshd__failed(const struct program *p, char **err)
{
	if (!p->failed)
		return 0;
	return mesh_errf(err, MESH_E_CRASHED, "'%s' is FAILED: %s; `mesh start %s` clears it", p->img.name, p->failed,
			 p->img.name);
}

/* Workers of a retired p that hold nothing (no call, no job) are asked
 * to exit; the others are when they let go (call end, job_unhold).  The
 * number still holding something.  d->mu held. */
unsigned meshd__retire_sweep(struct meshd_core *d, struct program *p)
{
	unsigned held = 0;
	meshd__reconcile(d, p);
	for (unsigned i = 0; i < p->nw; i++) {
		struct worker *wk = &p->w[i];
		enum mesh_istate st = mesh_instance_state(wk->inst);
		if (st == MESH_IS_DOWN || mesh_istate_stopping(st))
			continue;
		if (wk->job || wk->busy)
			held++;
		else
			mesh_instance_exit(wk->inst);
	}
	return held;
}

/* np, a new image of *pp's program (a reference held on each), becomes
 * the program: new calls and job workers find it; *pp retires (its
 * workers finish what they hold, then exit; the tick frees it) and its
 * reference is dropped; *pp = np.  swap_mu held. */
static int replace(struct meshd_core *d, struct program **pp, struct program *np, const char *why, char **err)
{
	struct program *old = *pp;
	pthread_mutex_lock(&d->mu);
	if (old->gone) {
		pthread_mutex_unlock(&d->mu);
		meshd__program_free(np);
		return mesh_errf(err, MESH_E_STATE, "'%s' was unloaded meanwhile", old->img.name);
	}
	np->refs = 1;
	np->next = d->progs;
	d->progs = np;
	meshd__ledger_open(d, np);
	old->gone = 1;
	atomic_store(&old->retired, 1);
	unsigned held = meshd__retire_sweep(d, old);
	pthread_mutex_unlock(&d->mu);
	meshd__kick(d, 0);
	mesh_info("%s name=%s image=%012" PRIx64 " -> %012" PRIx64 ": new work goes to the new image; %u worker(s) of the "
		  "old one finish what they hold, then exit",
		  why, np->img.name, mesh_image_id(&old->img) >> 16, mesh_image_id(&np->img) >> 16, held);
	meshd_image_prune(d->logs, np->img.name, np->keep_dir, np->prev_dir);
	if (np->keep_dir)
		record_history(d, np);
	meshd__unref(d, old);
	*pp = np;
	return 0;
}

/* A load of a loaded program: the catalog is read again; an image that
 * changed (manifest or binary) replaces the running one (replace); the
 * same image changes nothing; one that does not load leaves the running
 * one as it is. */
static int upgrade(struct meshd_core *d, struct program **pp, char **err)
{
	struct program *p = *pp, *np = calloc(1, sizeof *np);
	if (!np)
		return -ENOMEM;
	int rc = mesh_image_prepare(d->catalog, p->img.name, mesh_host_caps(d->h), d->gpu, &np->img, err);
	rc = meshd__gpu_load(&d->G, &np->img, rc, err);
	if (!rc)
		rc = check_reach(d, &np->img, err);
	if (rc || mesh_image_id(&np->img) == mesh_image_id(&p->img)) {
		meshd__program_free(np);
		return rc;
	}
	keep_image(d, np);
	if (p->keep_dir && !(np->prev_dir = strdup(p->keep_dir))) {
		meshd__program_free(np);
		return -ENOMEM;
	}
	np->prev_id = p->keep_dir ? mesh_image_id(&p->img) : 0;
	return replace(d, pp, np, "upgrade", err);
}

void meshd_on_catalog_change(struct meshd_core *d, void (*fn)(void *arg), void *arg)
{
	pthread_mutex_lock(&d->mu);
	d->catalog_fn = fn;
	d->catalog_arg = arg;
	pthread_mutex_unlock(&d->mu);
}

/* A program loaded: who follows the catalog may find work it left before. */
static void catalog_changed(struct meshd_core *d)
{
	pthread_mutex_lock(&d->mu);
	if (d->catalog_fn)
		d->catalog_fn(d->catalog_arg);
	pthread_mutex_unlock(&d->mu);
}

/* meshd_op_load; only_loaded: a program not loaded (any more) is left so,
 * and 1 returned. */
static int load(struct meshd_core *d, const char *name, int only_loaded, struct meshd_program_info *out, char **err)
{
	struct program *p;
	if (err)
		*err = NULL;
	pthread_mutex_lock(&swap_mu);
	pthread_mutex_lock(&d->mu);
	int loaded = find(d, name) != NULL;
	pthread_mutex_unlock(&d->mu);
	if (only_loaded && !loaded) {
		pthread_mutex_unlock(&swap_mu);
		return 1;
	}
	int rc = meshd__get_program(d, name, &p, err);
	if (rc) {
		pthread_mutex_unlock(&swap_mu);
		return rc;
	}
	struct program *was = p;
	if (loaded)
		rc = upgrade(d, &p, err);
	pthread_mutex_unlock(&swap_mu);
	if (rc == 0)
		catalog_changed(d);
	if (rc == 0 && out) {
		rc = image_info(&p->img, out);
		out->prev_id = p->prev_id;
		out->replaced = p != was;
	}
	meshd__unref(d, p);
	return rc;
}

int meshd_op_load(struct meshd_core *d, const char *name, struct meshd_program_info *out, char **err)
{
	return load(d, name, 0, out, err);
}

static unsigned live_programs(const struct meshd_core *d);

static void list_add(struct mesh_buf *b, const char *name, const char *why)
{
	mesh_buf_addf(b, "%s%s%s%s", b->len ? ", " : "", name, why ? ": " : "", why ? why : "");
}

int meshd_op_reload(struct meshd_core *d, char **summary)
{
	struct mesh_buf up = MESH_BUF_INIT, bad = MESH_BUF_INIT, s = MESH_BUF_INIT;
	unsigned nup = 0, nbad = 0, same = 0, k = 0;
	*summary = NULL;
	pthread_mutex_lock(&d->mu);
	unsigned n = live_programs(d);
	char **names = calloc(n ? n : 1, sizeof *names);
	for (struct program *p = d->progs; names && p; p = p->next)
		if (!p->gone && k < n && (names[k] = strdup(p->img.name)))
			k++;
	pthread_mutex_unlock(&d->mu);
	if (!names)
		return -ENOMEM;
	for (unsigned i = 0; i < k; i++) {
		struct meshd_program_info pi;
		char *e = NULL;
		int rc = load(d, names[i], 1, &pi, &e);
		if (rc == 0 && pi.replaced) {
			list_add(&up, names[i], NULL);
			nup++;
		} else if (rc == 0) {
			same++;
		} else if (rc < 0) {
			list_add(&bad, names[i], e ? e : mesh_strerror(rc));
			nbad++;
		}
		if (rc == 0)
			meshd_program_info_release(&pi);
		free(e);
		free(names[i]);
	}
	free(names);
	if (k) {
		mesh_buf_adds(&s, "native programs reloaded:");
		if (nup)
			mesh_buf_addf(&s, " %u upgraded (%s),", nup, up.p);
		if (nbad)
			mesh_buf_addf(&s, " %u refused (%s),", nbad, bad.p);
		mesh_buf_addf(&s, " %u unchanged", same);
	}
	mesh_buf_release(&up);
	mesh_buf_release(&bad);
	if (k && !(*summary = mesh_buf_detach(&s, NULL)))
		return -ENOMEM;
	if (*summary && nbad)
		mesh_warn("%s", *summary);
	else if (*summary)
		mesh_info("%s", *summary);
	return nbad ? MESH_E_PARSE : 0;
}

int meshd_op_rollback(struct meshd_core *d, const char *name, struct meshd_program_info *out, char **err)
{
	if (err)
		*err = NULL;
	pthread_mutex_lock(&swap_mu);
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	char *prev = p && p->prev_dir ? strdup(p->prev_dir) : NULL;
	if (p)
		p->refs++;
	pthread_mutex_unlock(&d->mu);
	int rc = 0;
	struct program *np = NULL;
	if (!p)
		rc = mesh_errf(err, MESH_E_NOTFOUND, "'%s' is not loaded", name);
	else if (!prev)
		rc = mesh_errf(err, MESH_E_NOTFOUND,
			       "'%s' has no previous image to roll back to (meshd keeps the one before the last `mesh "
			       "load` that changed it)",
			       name);
	else if (!(np = calloc(1, sizeof *np)))
		rc = -ENOMEM;
	char *e = NULL;
	if (np && (rc = meshd__gpu_load(&d->G, &np->img,
					mesh_image_prepare(prev, name, mesh_host_caps(d->h), d->gpu, &np->img, &e), &e)) != 0) {
		rc = mesh_errf(err, rc, "the previous image of '%s' (kept in '%s') does not load: %s", name, prev,
			       e ? e : mesh_strerror(rc));
		meshd__program_free(np);
		np = NULL;
	}
	free(e);
	e = NULL;
	/* Its workers must be able to run the copy (it may have been kept by
	 * a meshd that left it root's alone), or the rollback would leave the
	 * program FAILED: refused instead, the running image kept. */
	const struct mesh_run_as *ra = np ? mesh_host_run_as(d->h, &np->img) : NULL;
	if (np && ((rc = meshd_image_share(d->logs, name, prev, ra, &e)) != 0 ||
		   (rc = meshd_image_reachable(np->img.bin_path, ra, &e)) != 0)) {
		rc = mesh_errf(err, rc == -EACCES ? MESH_E_REFUSED : rc,
			       "the previous image of '%s' (kept in '%s') cannot be run by its workers' user: %s%s", name,
			       prev, e ? e : mesh_strerror(rc),
			       rc == -EACCES ? " (that user must be able to pass every directory above the copy, "
					       "--logs included, as for the catalog)"
					     : "");
		meshd__program_free(np);
		np = NULL;
	}
	free(e);
	if (np) {
		np->keep_dir = prev, prev = NULL;
		np->prev_id = p->keep_dir ? mesh_image_id(&p->img) : 0;
		if (p->keep_dir && !(np->prev_dir = strdup(p->keep_dir)))
			np->prev_id = 0;
		rc = replace(d, &p, np, "rollback", err);
	}
	pthread_mutex_unlock(&swap_mu);
	free(prev);
	if (rc == 0 && out) {
		rc = image_info(&p->img, out);
		out->prev_id = p->prev_id;
		out->replaced = 1;
	}
	if (p)
		meshd__unref(d, p);
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
	meshd__reconcile(d, p);
	pthread_mutex_unlock(&d->mu);
}

char *meshd_core_program_failed(struct meshd_core *d, const char *name)
{
	char *why = NULL;
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	if (p && p->failed)
		why = strdup(p->failed);
	pthread_mutex_unlock(&d->mu);
	return why;
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
	meshd__unref(d, p);
	return 0;
}

unsigned meshd_op_stop_idle(struct meshd_core *d, const char *name)
{
	unsigned n = 0;
	pthread_mutex_lock(&d->mu);
	struct program *p = find(d, name);
	for (unsigned i = 0; p && i < p->nw; i++) {
		struct worker *wk = &p->w[i];
		enum mesh_istate st = mesh_instance_state(wk->inst);
		if (st == MESH_IS_DOWN || mesh_istate_stopping(st) || wk->job || wk->busy)
			continue;
		mesh_instance_exit(wk->inst);
		n++;
	}
	pthread_mutex_unlock(&d->mu);
	return n;
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
	meshd__reconcile(d, p);
	meshd__ledger_forget(d, p);
	if (!find(d, name))
		meshd__ledger_close(d, name);
	pthread_mutex_unlock(&d->mu);
	meshd__ledger_flush(d, 1);
	for (unsigned i = 0; i < p->nw; i++)
		mesh_instance_free(p->w[i].inst);
	meshd__program_free(p);
	return 0;
}

/* pi's ps fields: its workers and their counts; d->mu held.  0 or -ENOMEM. */
static int program_ps(struct meshd_core *d, struct program *p, struct meshd_program_info *pi)
{
	meshd__reconcile(d, p);
	int rc = image_info(&p->img, pi);
	if (rc)
		return rc;
	if (p->nw && !(pi->workers = calloc(p->nw, sizeof *pi->workers)))
		return -ENOMEM;
	pi->nworkers = p->nw;
	if (p->failed && !(pi->failed = strdup(p->failed)))
		return -ENOMEM;
	for (unsigned i = 0; i < p->nw; i++) {
		struct meshd_worker_info *wi = &pi->workers[i];
		wi->st = mesh_instance_stats(p->w[i].inst);
		wi->slot = p->w[i].slot;
		wi->ring = wi->slot >= 0 ? mesh_slot_ring_cap(d->slots[wi->slot]) : 0;
		meshd__gpu_worker(&d->G, p->w[i].gpu_res, p->w[i].gpu_prev, wi);
		wi->image_id = pi->image_id;
		wi->busy = p->w[i].busy || p->w[i].job;
		pi->spawns += wi->st.spawns;
		pi->crashes += wi->st.crashes;
		pi->warm += wi->st.state == MESH_IS_IDLE || wi->st.state == MESH_IS_RUNNING;
	}
	meshd__ledger_read(d, p->img.name, mesh_mono_ns(), &pi->savings);
	pthread_mutex_lock(&d->metrics_mu);
	pi->cold_starts = p->cold_start.count;
	pi->cold_sum_ns = p->cold_start.sum_ns;
	pi->cold_last_ns = p->cold_last_ns;
	pthread_mutex_unlock(&d->metrics_mu);
	if (p->warm_n && !(pi->warm_hist = malloc(p->warm_n * sizeof *pi->warm_hist)))
		return -ENOMEM;
	for (unsigned i = 0; i < p->warm_n; i++)
		pi->warm_hist[i] = p->warm_hist[(p->warm_at + i) % WARM_HIST];
	pi->nwarm_hist = p->warm_n;
	pi->prev_id = p->prev_id;
	return 0;
}

/* The workers of retired images of p's program that are still up (they
 * finish what they hold) join pi's, each with its own image.  d->mu held.
 * 0 or -ENOMEM. */
static int retired_ps(struct meshd_core *d, const struct program *p, struct meshd_program_info *pi)
{
	for (struct program *q = d->progs; q; q = q->next) {
		if (!atomic_load(&q->retired) || strcmp(q->img.name, p->img.name))
			continue;
		meshd__reconcile(d, q);
		for (unsigned i = 0; i < q->nw; i++) {
			struct mesh_instance_stats st = mesh_instance_stats(q->w[i].inst);
			if (st.state == MESH_IS_DOWN)
				continue;
			struct meshd_worker_info *nw = realloc(pi->workers, (pi->nworkers + 1) * sizeof *nw);
			if (!nw)
				return -ENOMEM;
			pi->workers = nw;
			struct meshd_worker_info *wi = &nw[pi->nworkers++];
			memset(wi, 0, sizeof *wi);
			wi->st = st;
			wi->slot = q->w[i].slot;
			wi->ring = wi->slot >= 0 ? mesh_slot_ring_cap(d->slots[wi->slot]) : 0;
			wi->image_id = mesh_image_id(&q->img);
			wi->retired = 1;
			wi->busy = q->w[i].busy || q->w[i].job;
		}
	}
	return 0;
}

/* How many programs are loaded and not being unloaded; d->mu held. */
static unsigned live_programs(const struct meshd_core *d)
{
	unsigned n = 0;
	for (const struct program *p = d->progs; p; p = p->next)
		n += !p->gone;
	return n;
}

int meshd_op_ps(struct meshd_core *d, struct meshd_ps *out)
{
	memset(out, 0, sizeof *out);
	out->host = mesh_host_totals(d->h);
	out->caps = *mesh_host_caps(d->h);
	out->slots = d->nslots;
	int rc = meshd__gpu_ps(&d->G, out);
	pthread_mutex_lock(&d->mu);
	unsigned n = live_programs(d);
	if (n && !(out->programs = calloc(n, sizeof *out->programs)))
		rc = -ENOMEM;
	for (struct program *p = d->progs; p && !rc; p = p->next)
		if (!p->gone && !(rc = program_ps(d, p, &out->programs[out->nprograms++])))
			rc = retired_ps(d, p, &out->programs[out->nprograms - 1]);
	pthread_mutex_unlock(&d->mu);
	if (rc)
		meshd_ps_release(out);
	return rc;
}

/* A worker's spawn to its `ready`: a C worker in about a millisecond, a
 * model server in tens of seconds.  The `le` texts exactly as Prometheus
 * clients print them; the last bucket (+Inf) is implicit. */
static const struct mesh_hist_bound cold_bounds[] = {
	{1000000, "0.001"},	    {2500000, "0.0025"},     {5000000, "0.005"},       {10000000, "0.01"},
	{25000000, "0.025"},	    {50000000, "0.05"},	     {100000000, "0.1"},       {250000000, "0.25"},
	{500000000, "0.5"},	    {1000000000, "1"},	     {2500000000ull, "2.5"},   {5000000000ull, "5"},
	{10000000000ull, "10"},	    {30000000000ull, "30"},  {60000000000ull, "60"},   {120000000000ull, "120"},
};
/* A call through a warm slot takes microseconds; one that waits for a cold
 * start, seconds. */
static const struct mesh_hist_bound call_bounds[] = {
	{10000, "1e-05"},	 {25000, "2.5e-05"},	  {50000, "5e-05"},	     {100000, "0.0001"},
	{250000, "0.00025"},	 {500000, "0.0005"},	  {1000000, "0.001"},	     {2500000, "0.0025"},
	{5000000, "0.005"},	 {10000000, "0.01"},	  {25000000, "0.025"},	     {50000000, "0.05"},
	{100000000, "0.1"},	 {250000000, "0.25"},	  {500000000, "0.5"},	     {1000000000, "1"},
	{2500000000ull, "2.5"},	 {5000000000ull, "5"},	  {10000000000ull, "10"},
};
_Static_assert(sizeof cold_bounds / sizeof cold_bounds[0] < MESH_HIST_BUCKETS, "cold buckets fit");
_Static_assert(sizeof call_bounds / sizeof call_bounds[0] < MESH_HIST_BUCKETS, "call buckets fit");
const struct mesh_hist_bounds meshd_cold_start_bounds = {cold_bounds, sizeof cold_bounds / sizeof cold_bounds[0]};
const struct mesh_hist_bounds meshd_call_bounds = {call_bounds, sizeof call_bounds / sizeof call_bounds[0]};

const char *meshd_call_result_name(enum meshd_call_result r)
{
	static const char *const n[MESHD_CALL__N] = {"ok", "handler_error", "timeout", "crashed", "stopped", "error"};
	return (unsigned)r < MESHD_CALL__N ? n[r] : "error";
}

enum meshd_call_result meshd_call_result_of(int rc)
{
	switch (rc) {
	case 0:
		return MESHD_CALL_OK;
	case MESH_E_HANDLER:
		return MESHD_CALL_HANDLER;
	case MESH_E_TIMEOUT:
	case -ETIMEDOUT:
		return MESHD_CALL_TIMEOUT;
	case MESH_E_CRASHED:
		return MESHD_CALL_CRASHED;
	case MESH_E_STOPPED:
		return MESHD_CALL_STOPPED;
	}
	return MESHD_CALL_ERROR;
}

void meshd_core_metrics_release(struct meshd_core_metrics *m)
{
	if (!m)
		return;
	for (unsigned i = 0; i < m->nprograms; i++)
		free(m->programs[i].name);
	free(m->programs);
	m->programs = NULL;
	m->nprograms = 0;
}

/* p's metrics into pm; d->mu held.  0 or -ENOMEM. */
static int program_metrics(struct meshd_core *d, struct program *p, uint64_t now, struct meshd_program_metrics *pm)
{
	if (!(pm->name = strdup(p->img.name)))
		return -ENOMEM;
	pm->max_workers = p->img.m.max_workers;
	for (unsigned i = 0; i < p->nw; i++) {
		struct mesh_instance_stats st = mesh_instance_stats(p->w[i].inst);
		if ((unsigned)st.state < MESH_IS__N)
			pm->workers[st.state]++;
		pm->spawns += st.spawns;
		pm->crashes += st.crashes;
	}
	meshd__ledger_read(d, p->img.name, now, &pm->savings);
	pthread_mutex_lock(&d->metrics_mu);
	pm->cold_start = p->cold_start;
	pm->call = p->call;
	memcpy(pm->calls, p->calls, sizeof pm->calls);
	pthread_mutex_unlock(&d->metrics_mu);
	return 0;
}

int meshd_op_metrics(struct meshd_core *d, struct meshd_core_metrics *out)
{
	memset(out, 0, sizeof *out);
	struct mesh_host_totals t = mesh_host_totals(d->h);
	out->spawns = t.spawns;
	out->crashes = t.crashes;
	out->processes = t.procs;
	out->slots = d->nslots;
	uint64_t now = mesh_mono_ns();
	int rc = 0;
	pthread_mutex_lock(&d->mu);
	for (unsigned i = 0; i < d->nslots; i++)
		out->slots_in_use += !!d->slot_taken[i];
	unsigned n = live_programs(d);
	if (n && !(out->programs = calloc(n, sizeof *out->programs)))
		rc = -ENOMEM;
	for (struct program *p = d->progs; p && !rc; p = p->next)
		if (!p->gone)
			rc = program_metrics(d, p, now, &out->programs[out->nprograms++]);
	pthread_mutex_unlock(&d->mu);
	if (rc)
		meshd_core_metrics_release(out);
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

unsigned meshd_program_max_workers(struct meshd_core *d, const char *name, char **err)
{
	struct program *p;
	if (meshd__get_program(d, name, &p, err))
		return 0;
	unsigned n = p->img.m.max_workers;
	meshd__unref(d, p);
	return n;
}
