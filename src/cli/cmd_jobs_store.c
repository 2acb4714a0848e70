/* mesh submit|jobs|wait|results|cancel --store URL (or MESH_STORE): the
 * meshd jobs of a shared PostgreSQL store, read and written in the store
 * directly (store/store_pg_results.h), so they work on any host that
 * reaches the database, with or without a meshd there.  Every meshd
 * started with --store runs the jobs whose program its catalog has
 * (docs/cluster.md). */
#include "cli/jobs_store.h"

#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/io.h"
#include "cli/exit.h"
#include "store/store_pg.h"
#include "store/store_pg_results.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* `wait` and `results` sleep on the job's NOTIFY (mesh_pgr_wait_job: a
 * commit batch of its chunks, a bury, a cancel) and look again after this
 * long without one (a meshd that died between its commit and its NOTIFY,
 * a chunk buried by the engine's attempt limit: told at the next look). */
#define LOOK_NS (1000 * MESH_NS_PER_MS)

/* The store, or an exit code (a message printed). */
static int open_store(const char *cmd, const char *url, struct mesh_pg **pg)
{
	char why[512], safe[512];
	if (!mesh_pg_url_is(url))
		return mesh_cli_usage("%s: --store wants a postgresql:// URL", cmd);
	int ex = mesh_cli_store_url_refused(cmd, url);
	if (ex)
		return ex;
	mesh_pg_url_safe(url, safe, sizeof safe);
	int rc = mesh_pg_open(pg, url, why, sizeof why);
	if (rc) {
		fprintf(stderr, "mesh: %s: %s: %s%s%s\n", cmd, safe, mesh_strerror(rc), why[0] ? ": " : "", why);
		return mesh_exit_for(rc);
	}
	return -1;
}

static int fail(const char *cmd, int rc, const char *what)
{
	fprintf(stderr, "mesh: %s: %s: %s\n", cmd, what, rc == MESH_E_NOJOB ? "no such job in the store" : mesh_strerror(rc));
	return rc == MESH_E_NOJOB ? MESH_EXIT_DATAERR : mesh_exit_for(rc);
}

const char *mesh__sjob_state(const struct mesh_pgr_job *j)
{
	if (j->cancelled)
		return "cancelled";
	if (j->done >= j->n)
		return "complete";
	if (j->done + j->buried >= j->n)
		return "failed";
	return "running";
}

int mesh__sjobs_submit(const char *url, const struct mesh_pgr_job *spec, const void *input, size_t len,
		       uint64_t *out)
{
	struct mesh_pg *pg;
	uint64_t id;
	int ex = open_store("submit", url, &pg);
	if (ex >= 0)
		return ex;
	int rc = mesh_pgr_submit(pg, spec, input, len, &id);
	mesh_pg_close(pg);
	if (rc)
		return fail("submit", rc, "cannot submit the job");
	printf("%" PRIu64 "\n", id);
	if (out)
		*out = id;
	return 0;
}

static void list_row(const struct mesh_pgr_job *j, void *arg)
{
	json_t *arr = arg;
	if (arr) {
		uint64_t pend = j->n - j->done;
		pend = pend > j->leased + j->buried ? pend - j->leased - j->buried : 0;
		char id[24];
		snprintf(id, sizeof id, "%" PRIu64, j->id);
		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "id", id,
						     "program", j->program, "name", j->name, "state",
						     mesh__sjob_state(j), "chunks", (json_int_t)j->n, "done",
						     (json_int_t)j->done, "leased", (json_int_t)j->leased, "pending",
						     (json_int_t)pend, "buried", (json_int_t)j->buried, "failed_attempts",
						     (json_int_t)j->failed, "duplicates", (json_int_t)j->dups));
		return;
	}
	char done[48];
	uint64_t pend = j->n - j->done;
	pend = pend > j->leased + j->buried ? pend - j->leased - j->buried : 0;
	snprintf(done, sizeof done, "%" PRIu64 "/%" PRIu64, j->done, j->n);
	printf("%-5" PRIu64 " %-16s %-10s %10s %7" PRIu64 " %8" PRIu64 " %7" PRIu64 "%s%s\n", j->id, j->program,
	       mesh__sjob_state(j), done, j->leased, pend, j->buried, j->name[0] ? "  " : "", j->name);
}

int mesh__sjobs_list(const char *url, int json)
{
	struct mesh_pg *pg;
	int ex = open_store("jobs", url, &pg);
	if (ex >= 0)
		return ex;
	json_t *arr = json ? json_array() : NULL;
	if (!json)
		printf("%-5s %-16s %-10s %10s %7s %8s %7s\n", "ID", "PROGRAM", "STATE", "DONE", "LEASED", "PENDING",
		       "BURIED");
	int rc = mesh_pgr_jobs(pg, 0, 0, list_row, arr);
	mesh_pg_close(pg);
	if (rc) {
		json_decref(arr);
		return fail("jobs", rc, "cannot list the jobs");
	}
	if (arr) {
		json_t *o = json_pack("{s:o}", "jobs", arr);
		char *s = json_dumps(o, JSON_COMPACT);
		if (s)
			printf("%s\n", s);
		free(s);
		json_decref(o);
	}
	return 0;
}

static void take_one(const struct mesh_pgr_job *j, void *arg)
{
	*(struct mesh_pgr_job *)arg = *j;
}

static int get_job(struct mesh_pg *pg, uint64_t id, struct mesh_pgr_job *j)
{
	memset(j, 0, sizeof *j);
	return mesh_pgr_jobs(pg, id, 0, take_one, j);
}

static void print_buried(const struct mesh_pgr_buried *b, void *arg)
{
	(void)arg;
	size_t n = strlen(b->report);
	fprintf(stderr, "mesh: chunk %" PRIu64 " buried after %" PRIu32 " attempts, last status %d%s\n%s%s", b->cid,
		b->attempts, b->status, n ? ":" : "", b->report, n && b->report[n - 1] != '\n' ? "\n" : "");
}

static void draw(const struct mesh_pgr_job *j, int final)
{
	struct mesh__progress p = {
		.done = j->done,
		.total = j->n,
		.running = j->leased,
		.failed = j->buried,
		.elapsed_ns = j->now_ns > j->submitted_ns ? j->now_ns - j->submitted_ns : 0,
	};
	mesh__wait_draw(&p, final);
}

int mesh__sjobs_wait(const char *url, uint64_t id, int quiet)
{
	struct mesh_pg *pg;
	struct mesh_pgr_job j;
	int ex = open_store("wait", url, &pg), rc, bar = !quiet && isatty(2);
	if (ex >= 0)
		return ex;
	/* Listening before the first look: no news between the two is lost. */
	rc = mesh_pgr_wait_job(pg, id, 0);
	while (rc >= 0 && (rc = get_job(pg, id, &j)) == 0) {
		int running = !strcmp(mesh__sjob_state(&j), "running");
		if (bar)
			draw(&j, !running);
		if (!running)
			break;
		rc = mesh_pgr_wait_job(pg, id, LOOK_NS);
	}
	if (rc) {
		mesh_pg_close(pg);
		return fail("wait", rc, "cannot read the job");
	}
	const char *st = mesh__sjob_state(&j);
	ex = !strcmp(st, "complete") ? MESH_EXIT_OK : !strcmp(st, "cancelled") ? MESH_EXIT_CANCELLED : MESH_EXIT_INCOMPLETE;
	if (ex == MESH_EXIT_INCOMPLETE && !quiet) {
		fprintf(stderr, "mesh: job %" PRIu64 " ended with %" PRIu64 " buried chunks\n", id, j.buried);
		mesh_pgr_buried(pg, id, print_buried, NULL);
	}
	mesh_pg_close(pg);
	return ex;
}

struct rd {
	uint64_t next;
	int werr;
};

static int one_result(uint64_t cid, const void *p, size_t n, void *arg)
{
	struct rd *r = arg;
	if (cid != r->next)
		return 1; /* a gap: not settled yet */
	r->next++;
	if (p && n && (r->werr = mesh_write_all_raw(1, p, n)) < 0)
		return 1;
	return 0;
}

int mesh__sjobs_results(const char *url, uint64_t id, int no_wait)
{
	struct mesh_pg *pg;
	struct mesh_pgr_job j;
	struct rd r = {0, 0};
	int ex = open_store("results", url, &pg), rc, ended = 0;
	if (ex >= 0)
		return ex;
	if ((!no_wait && (rc = mesh_pgr_wait_job(pg, id, 0)) < 0) || (rc = get_job(pg, id, &j)) != 0)
		goto out;
	while (r.next < j.n) {
		uint64_t from = r.next;
		if ((rc = mesh_pgr_results(pg, id, from, one_result, &r)) < 0 || r.werr < 0)
			break;
		rc = 0;
		if (r.next > from)
			continue;
		/* Nothing settled at r.next: done unless the job still runs
		 * (one more look once it ended: its last batch may have
		 * landed after ours). */
		if (no_wait || ended || (rc = get_job(pg, id, &j)) != 0)
			break;
		if (strcmp(mesh__sjob_state(&j), "running")) {
			ended = 1;
			continue;
		}
		if ((rc = mesh_pgr_wait_job(pg, id, LOOK_NS)) < 0)
			break;
		rc = 0;
	}
out:
	mesh_pg_close(pg);
	if (r.werr < 0)
		return r.werr == -EPIPE ? 0 : mesh_cli_fail(r.werr, "results: cannot write the output");
	return rc ? fail("results", rc, "cannot read the results") : 0;
}

int mesh__sjobs_cancel(const char *url, uint64_t id)
{
	struct mesh_pg *pg;
	int ex = open_store("cancel", url, &pg);
	if (ex >= 0)
		return ex;
	int rc = mesh_pgr_cancel(pg, id);
	mesh_pg_close(pg);
	if (rc)
		return fail("cancel", rc, "cannot cancel the job");
	printf("cancelled job %" PRIu64 "\n", id);
	return 0;
}
