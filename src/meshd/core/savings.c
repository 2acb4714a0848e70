/* The savings ledger: for each program name, the worker-time its workers
 * were up (warm) against what max_workers always-on workers would have
 * held over the time it was loaded (the window), carried across image
 * changes, unloads and meshd's restarts.  One ledger a name, kept in
 * <logs>/.savings/<name> (written when a worker starts or ends, at unload,
 * every 10 s and at exit), so mesh ps, /metrics and the API give one
 * number over one stated window.  A meshd killed with SIGKILL loses what
 * came after the last write (at most 10 s); the time meshd was down is in
 * no window. */
#include "autoscale/policy.h"
#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/io.h"
#include "base/log.h"
#include "base/parse.h"
#include "meshd/core/core_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define LEDGER_MAGIC "mesh-savings 1\n"
#define LEDGER_FLUSH_EVERY_NS (10 * MESH_NS_PER_S)

struct meshd__ledger {
	struct meshd__ledger *next;
	char *name;
	/* Closed parts: before `since` (earlier runs, earlier loads, freed
	 * programs' workers).  since: when this run loaded it (monotonic), 0
	 * while not loaded; max_workers: the loaded image's. */
	uint64_t window_ns, always_ns, warm_ns;
	uint64_t since;
	unsigned max_workers;
	int64_t first; /* the window's start, unix seconds (its first load) */
};

static char *path_of(const struct meshd_core *d, const char *name)
{
	return mesh_strf("%s/.savings/%s", d->logs, name);
}

/* "key N\n" at *p: 0 (*p past it) or MESH_E_PARSE. */
static int num_line(const char **p, const char *key, uint64_t *v)
{
	size_t k = strlen(key), n = 0;
	char digits[24];
	if (strncmp(*p, key, k) || (*p)[k] != ' ')
		return MESH_E_PARSE;
	const char *s = *p + k + 1;
	while (n < sizeof digits - 1 && s[n] >= '0' && s[n] <= '9')
		digits[n] = s[n], n++;
	digits[n] = 0;
	if (s[n] != '\n' || mesh_parse_u64(digits, UINT64_MAX / 2, v) < 0)
		return MESH_E_PARSE;
	*p = s + n + 1;
	return 0;
}

/* What an earlier run left for l's name: its closed totals.  A missing
 * file is a first load; a damaged one is said and started afresh. */
static void read_ledger(const struct meshd_core *d, struct meshd__ledger *l)
{
	char *path = path_of(d, l->name), *text = NULL;
	size_t len = 0;
	uint64_t first = 0;
	int rc = path ? mesh_read_file(path, 512, &text, &len) : -ENOMEM;
	const char *at = text;
	if (rc == 0 && (strncmp(at, LEDGER_MAGIC, strlen(LEDGER_MAGIC)) ||
			(at += strlen(LEDGER_MAGIC), num_line(&at, "since", &first)) || num_line(&at, "window_ns", &l->window_ns) ||
			num_line(&at, "always_ns", &l->always_ns) || num_line(&at, "warm_ns", &l->warm_ns))) {
		mesh_warn("savings name=%s: '%s' is damaged: its window starts again now", l->name, path);
		l->window_ns = l->always_ns = l->warm_ns = 0;
		first = 0;
	} else if (rc != 0 && rc != -ENOENT) {
		mesh_warn("savings name=%s: cannot read '%s' (%s): its window starts again now", l->name, path ? path : "",
			  mesh_strerror(rc));
	}
	l->first = first ? (int64_t)first : (int64_t)time(NULL);
	free(text);
	free(path);
}

static struct meshd__ledger *find(struct meshd_core *d, const char *name)
{
	for (struct meshd__ledger *l = d->ledgers; l; l = l->next)
		if (!strcmp(l->name, name))
			return l;
	return NULL;
}

/* The open part of l's window closes at now (it stays open). */
static void close_open(struct meshd__ledger *l, uint64_t now)
{
	if (!l->since)
		return;
	uint64_t dt = mesh_ns_since(now, l->since);
	l->window_ns += dt;
	l->always_ns += dt * (l->max_workers ? l->max_workers : 1);
	l->since = now;
}

void meshd__ledger_open(struct meshd_core *d, const struct program *p)
{
	uint64_t now = mesh_mono_ns();
	struct meshd__ledger *l = find(d, p->img.name);
	if (!l) {
		if (!(l = calloc(1, sizeof *l)) || !(l->name = strdup(p->img.name))) {
			free(l);
			return; /* no memory: this program shows no savings */
		}
		read_ledger(d, l);
		l->next = d->ledgers;
		d->ledgers = l;
	}
	close_open(l, now);
	l->since = now;
	l->max_workers = p->img.m.max_workers;
}

void meshd__ledger_close(struct meshd_core *d, const char *name)
{
	struct meshd__ledger *l = find(d, name);
	if (!l)
		return;
	close_open(l, mesh_mono_ns());
	l->since = 0;
}

/* The worker-time of p's workers so far. */
static uint64_t warm_of(const struct program *p)
{
	uint64_t warm = 0;
	for (unsigned i = 0; i < p->nw; i++)
		warm += mesh_instance_stats(p->w[i].inst).alive_ns;
	return warm;
}

void meshd__ledger_forget(struct meshd_core *d, const struct program *p)
{
	struct meshd__ledger *l = find(d, p->img.name);
	if (l)
		l->warm_ns += warm_of(p);
}

int meshd__ledger_read(struct meshd_core *d, const char *name, uint64_t now, struct meshd_savings *s)
{
	struct meshd__ledger *l = find(d, name);
	memset(s, 0, sizeof *s);
	if (!l)
		return MESH_E_NOTFOUND;
	uint64_t open = l->since ? mesh_ns_since(now, l->since) : 0;
	s->window_ns = l->window_ns + open;
	s->always_ns = l->always_ns + open * (l->max_workers ? l->max_workers : 1);
	s->warm_ns = l->warm_ns;
	for (const struct program *p = d->progs; p; p = p->next)
		if (!strcmp(p->img.name, name))
			s->warm_ns += warm_of(p);
	s->since = l->first;
	s->permil = mesh_as_savings_permil((int64_t)(s->warm_ns > INT64_MAX ? INT64_MAX : s->warm_ns),
					   (int64_t)(s->always_ns > INT64_MAX ? INT64_MAX : s->always_ns));
	return 0;
}

uint64_t meshd__ledger_flush(struct meshd_core *d, int force)
{
	uint64_t now = mesh_mono_ns();
	struct mesh_buf files = MESH_BUF_INIT; /* "<path>\0<text>\0" each */
	pthread_mutex_lock(&d->mu);
	if (!force && now < d->ledger_flush_at) {
		pthread_mutex_unlock(&d->mu);
		return d->ledger_flush_at;
	}
	uint64_t next = d->ledger_flush_at = now + LEDGER_FLUSH_EVERY_NS;
	for (struct meshd__ledger *l = d->ledgers; l; l = l->next) {
		struct meshd_savings s;
		meshd__ledger_read(d, l->name, now, &s);
		mesh_buf_addf(&files, "%s/.savings/%s%c" LEDGER_MAGIC "since %" PRId64 "\nwindow_ns %" PRIu64
				      "\nalways_ns %" PRIu64 "\nwarm_ns %" PRIu64 "\n%c",
			      d->logs, l->name, 0, l->first, s.window_ns, s.always_ns, s.warm_ns, 0);
		if (meshd_feed_live(d->feed)) { /* the tick, for those who follow */
			struct meshd_event e = {.kind = MESHD_EV_SAVINGS,
						.n = {s.window_ns / MESH_NS_PER_MS, s.warm_ns / MESH_NS_PER_MS,
						      s.always_ns / MESH_NS_PER_MS, (uint64_t)(s.permil < 0 ? 0 : s.permil)}};
			snprintf(e.name, sizeof e.name, "%s", l->name);
			meshd_feed_post(d->feed, &e);
		}
	}
	pthread_mutex_unlock(&d->mu);
	/* The files off d->mu: a write may wait for the disk. */
	char *dir = mesh_strf("%s/.savings", d->logs);
	int rc = !dir ? -ENOMEM : mkdir(dir, 0700) < 0 && errno != EEXIST ? -errno : 0;
	for (size_t at = 0; !rc && at < files.len;) {
		const char *path = files.p + at, *text = path + strlen(path) + 1;
		at = (size_t)(text - files.p) + strlen(text) + 1;
		rc = mesh_write_file_atomic(path, text, strlen(text), 0600);
	}
	if (rc && !d->ledger_warned) {
		mesh_warn("savings: cannot write under '%s' (%s): the savings windows will not survive a restart",
			  dir ? dir : d->logs, mesh_strerror(rc));
		d->ledger_warned = 1;
	}
	free(dir);
	mesh_buf_release(&files);
	return next;
}

void meshd__ledgers_free(struct meshd_core *d)
{
	while (d->ledgers) {
		struct meshd__ledger *l = d->ledgers;
		d->ledgers = l->next;
		free(l->name);
		free(l);
	}
}
