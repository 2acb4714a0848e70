/* Where `mesh submit|jobs|wait|results|cancel|rm` (cmd_jobs.c) find the
 * jobs: one interface, two clients:
 *   meshd  (jobs_api.c): meshd's job routes over its control API
 *          (docs/api.md, "Jobs"), for the jobs of its state directory;
 *   store  (jobs_home.c): a PostgreSQL store's jobs straight from the
 *          database (job/home.h), on any host that reaches it, with or
 *          without a meshd there (--store URL, MESH_STORE).
 * cmd_jobs.c prints, waits and pages once, over these calls.
 *
 * Every call prints its own failure (the client's words: what it asked
 * and of whom) and returns that failure's exit code; -1 when it went
 * well.  Strings a call hands back stay valid until the next call on the
 * same client. */
#ifndef MESH_CLI_JOBS_CLIENT_H
#define MESH_CLI_JOBS_CLIENT_H

#include "base/buf.h"

#include <stddef.h>
#include <stdint.h>

/* A job as `mesh jobs` and `mesh wait` show it. */
struct jview {
	const char *id, *program, *name, *state;
	uint64_t n, done, leased, pending, buried, workers, max_workers;
	double rate, eta_s, elapsed_s; /* eta_s < 0: unknown */
	const char *error;	       /* state "error": why ("" none) */
	const char *program_failed;    /* running: its program is FAILED, why; NULL when not */
};

/* What `mesh submit` asks for. */
struct jsub {
	const char *program, *input, *name;
	char **words;
	size_t nwords;
	uint64_t chunks, max_workers, retries, timeout_ns;
	int have_chunks, speculate;
};

/* How long a look at a job may wait for news of it first. */
enum jwait {
	JW_NOW,	 /* not at all */
	JW_NEWS, /* until it moves (meshd holds the answer up to 20 s; the store looks again each second) */
	JW_TICK, /* ... or a progress bar's tick (meshd: 0.2 s) */
};

/* A page of results (results). */
struct jpage {
	uint64_t next;	  /* the first chunk not taken */
	int end;	  /* nothing more will come */
	uint64_t missing; /* a DONE chunk named without its result, UINT64_MAX none */
};

struct jclient;
struct jclient_ops {
	/* Rate, ETA and workers are known (meshd's); a store's rows have none. */
	int live;
	/* Submits s (its chunks' inputs in input, one a line; none with
	 * s->have_chunks): the new job's id into id. */
	int (*submit)(struct jclient *c, const struct jsub *s, const struct mesh_buf *input, char *id, size_t cap);
	/* The jobs (all: every one kept, else the running and the recent):
	 * with json printed as JSON; else row(arg, NULL) once (the header),
	 * then row(arg, v) for each, and *older the ones left out. */
	int (*list)(struct jclient *c, int all, int json, void (*row)(void *arg, const struct jview *v), void *arg,
		    uint64_t *older);
	/* Job id, after waiting as w says. */
	int (*get)(struct jclient *c, const char *id, enum jwait w, struct jview *v);
	/* Each buried chunk of job id (the last get's, where it had them). */
	int (*buried)(struct jclient *c, const char *id,
		      void (*fn)(uint64_t cid, uint64_t attempts, long long status, const char *report));
	/* The results of job id from chunk from on, each DONE chunk's bytes
	 * through out (non-zero: stop there), waiting for the next one first
	 * when wait is set and none is there. */
	int (*results)(struct jclient *c, const char *id, uint64_t from, int wait,
		       int (*out)(void *arg, const void *p, size_t n), void *arg, struct jpage *pg);
	/* Job id stops for good; kill_workers: its workers are killed at
	 * once and its program's idle ones stopped (a meshd's; a store's
	 * client refuses it). */
	int (*cancel)(struct jclient *c, const char *id, int kill_workers);
	/* NULL: the client's jobs are not removed this way. */
	int (*remove)(struct jclient *c, const char *id);
	void (*close)(struct jclient *c);
};

struct jclient {
	const struct jclient_ops *ops;
};

/* meshd at socket sock (copied). */
int mesh__jclient_api(struct jclient **out, const char *sock);
/* The store at url (borrowed), for command cmd (its messages): nothing is
 * opened before the first call.  A URL that is not a store's, or holds a
 * password, is a usage error (its exit code, the message printed). */
int mesh__jclient_store(struct jclient **out, const char *url, const char *cmd);

#endif
