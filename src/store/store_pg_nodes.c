/* The nodes of the PostgreSQL store (store_pg.h): each handle that leases
 * registers a row in mesh.nodes and beats it from a thread of its own, so
 * that a node busy on a long chunk still shows alive, and one that froze
 * or was cut off shows silent -- and mesh.lease() takes its leases.  A
 * meshd registers a row of no job besides (mesh_pg_node_host): the host
 * and its catalog, from its start.  A registration prunes the stopped rows
 * a day old that nothing counts any more. */
#include "base/thread.h"
#include "base/clock.h"
#include "base/err.h"
#include "store/store_pg_int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The smallest beat period: a tiny TTL (tests) must not spin. */
#define BEAT_MIN_NS (20 * MESH_NS_PER_MS)

/* What the node runs: the first word after "--" on this process's command
 * line (mesh run/harvest -- CMD), else the process's own name. */
static void program_of(char *buf, size_t cap)
{
	char line[4096];
	ssize_t n = 0;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	snprintf(buf, cap, "?");
	if (fd >= 0) {
		n = read(fd, line, sizeof line - 1);
		close(fd);
	}
	if (n <= 0)
		return;
	line[n] = 0;
	const char *first = line, *take = NULL;
	for (const char *p = line; p < line + n; p += strlen(p) + 1)
		if (!strcmp(p, "--") && p + 3 <= line + n) {
			take = p + 3;
			break;
		}
	if (!take) {
		take = strrchr(first, '/');
		take = take ? take + 1 : first;
	}
	size_t len = strnlen(take, cap - 1);
	memcpy(buf, take, len);
	buf[len] = 0;
	for (char *s = buf; *s; s++)
		if (*s == ' ' || *s == '\t')
			*s = 0; /* a shell line: its first word */
}

static void *beat_main(void *arg)
{
	struct mesh_pg *pg = arg;
	char htext[24];
	const char *vals[1] = {htext};
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	if (pg->cconn_wanted)
		mesh__pg_open_cconn(pg);
	pthread_mutex_lock(&pg->cmu);
	while (!pg->beat_stop) {
		struct timespec ts;
		uint64_t at = mesh_wall_ns() + pg->beat_ns;
		ts.tv_sec = (time_t)(at / MESH_NS_PER_S);
		ts.tv_nsec = (long)(at % MESH_NS_PER_S);
		pthread_cond_timedwait(&pg->bcv, &pg->cmu, &ts);
		if (pg->beat_stop)
			break;
		pthread_mutex_unlock(&pg->cmu);
		int rc = 0;
		pthread_mutex_lock(&pg->mu);
		/* no wait for the WAL flush: a beat lost in a server crash only
		 * ages the row until the next, and one that waited on a slow
		 * flush became visible late enough to make a live node silent */
		PQclear(mesh__pg_q(pg,
				   "UPDATE mesh.nodes SET beat = mesh.now_us()"
				   " FROM (SELECT set_config('synchronous_commit', 'off', true)) s WHERE holder = $1",
				   1, vals, &rc));
		pthread_mutex_unlock(&pg->mu);
		pthread_mutex_lock(&pg->cmu);
	}
	pthread_mutex_unlock(&pg->cmu);
	return NULL;
}

/* Removes up to MESH_PG_NODES_PRUNE_MAX stopped rows whose last beat is
 * MESH_PG_NODES_KEEP_US old (store_pg.h), of a job that no node runs (none
 * of its rows is not stopped: a running job's rows are its speed, for
 * mesh nodes, placement and speculation) and not a driver of a meshd that
 * runs (its row's CHUNKS); stopped rows by registration through the index
 * nodes_stopped (010.sql), the cutoff computed once (mesh.now_us() is
 * volatile: as a subquery it is a parameter of the index scan), the
 * job's test an anti join (as "job 0 OR NOT EXISTS" PostgreSQL priced it
 * past jit_above_cost at 100,000 rows: a second of JIT a call).  Rows
 * another transaction holds are skipped, and the commit does not wait
 * for the WAL flush (a prune lost in a crash is done by the next).  With
 * pg->mu held. */
static void prune_stopped(struct mesh_pg *pg)
{
	char ktext[24], ntext[24];
	const char *vals[2] = {ktext, ntext};
	int rc = 0;
	snprintf(ktext, sizeof ktext, "%llu", (unsigned long long)MESH_PG_NODES_KEEP_US);
	snprintf(ntext, sizeof ntext, "%d", MESH_PG_NODES_PRUNE_MAX);
	PQclear(mesh__pg_q(pg,
			   "DELETE FROM mesh.nodes d USING (SELECT set_config('synchronous_commit', 'off', true)) s"
			   " WHERE d.holder IN (SELECT n.holder FROM mesh.nodes n"
			   " WHERE n.stopped AND n.started < (SELECT mesh.now_us() - $1::bigint)"
			   " AND n.beat < (SELECT mesh.now_us() - $1::bigint)"
			   " AND NOT EXISTS (SELECT 1 FROM mesh.nodes a WHERE a.job = n.job AND a.job <> " MESH_PG_NO_JOB
			   " AND NOT a.stopped)"
			   " AND NOT EXISTS (SELECT 1 FROM mesh.nodes m WHERE m.job = " MESH_PG_NO_JOB
			   " AND NOT m.stopped AND m.name = n.name AND m.host = n.host AND m.started <= n.started)"
			   " LIMIT $2::int FOR UPDATE SKIP LOCKED)",
			   2, vals, &rc));
}

/* Inserts the node's row (of job jobtext), prunes the stopped rows of
 * old (prune_stopped: its failure fails nothing) and starts its beat
 * thread. */
static int node_start(struct mesh_pg *pg, const char *node, const char *program, const char *jobtext, uint64_t ttl_ns)
{
	char host[256], htext[24], ttext[24];
	const char *vals[6] = {htext, node && *node ? node : "?", host, program, jobtext, ttext};
	int rc = 0;
	pg->node_on = 1; /* once, whatever happens */
	if (gethostname(host, sizeof host) < 0)
		snprintf(host, sizeof host, "?");
	host[sizeof host - 1] = 0;
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	snprintf(ttext, sizeof ttext, "%" PRIu64, ttl_ns / 1000);
	pthread_mutex_lock(&pg->mu);
	PQclear(mesh__pg_q(pg,
			   "INSERT INTO mesh.nodes (holder, name, host, program, job, started, beat, ttl_us)"
			   " VALUES ($1, $2, $3, $4, $5, mesh.now_us(), mesh.now_us(), $6)",
			   6, vals, &rc));
	if (!rc)
		prune_stopped(pg);
	pthread_mutex_unlock(&pg->mu);
	if (rc)
		return rc;
	pg->beat_ns = ttl_ns / 3 > BEAT_MIN_NS ? ttl_ns / 3 : BEAT_MIN_NS;
	pg->cconn_wanted = strcmp(jobtext, MESH_PG_NO_JOB) != 0; /* a job's node: it completes */
	if (mesh_thread_start(&pg->beat, beat_main, pg)) {
		pg->beat_ns = 0;
		return -EAGAIN;
	}
	return 0;
}

int mesh__pg_node_start(struct mesh_pg *pg, const char *node, uint64_t ttl_ns)
{
	char prog[256];
	program_of(prog, sizeof prog);
	return node_start(pg, node, prog, pg->idtext, ttl_ns);
}

int mesh_pg_node_host(struct mesh_pg *pg, const char *name, const char *programs, uint64_t ttl_ns)
{
	if (pg->node_on)
		return MESH_E_STATE;
	return node_start(pg, name, programs, MESH_PG_NO_JOB, ttl_ns);
}

int mesh_pg_node_programs(struct mesh_pg *pg, const char *programs)
{
	char htext[24];
	const char *vals[2] = {htext, programs};
	int rc = 0;
	if (!pg->beat_ns)
		return MESH_E_STATE;
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	pthread_mutex_lock(&pg->mu);
	PQclear(mesh__pg_q(pg, "UPDATE mesh.nodes SET program = $2, beat = mesh.now_us() WHERE holder = $1", 2, vals,
			   &rc));
	pthread_mutex_unlock(&pg->mu);
	return rc;
}

void mesh__pg_node_stop(struct mesh_pg *pg)
{
	char htext[24];
	const char *vals[1] = {htext};
	int rc = 0;
	if (!pg->beat_ns)
		return;
	pthread_mutex_lock(&pg->cmu);
	pg->beat_stop = 1;
	pthread_cond_broadcast(&pg->bcv);
	pthread_mutex_unlock(&pg->cmu);
	pthread_join(pg->beat, NULL);
	pg->beat_ns = 0;
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	pthread_mutex_lock(&pg->mu);
	PQclear(mesh__pg_q(pg, "UPDATE mesh.nodes SET beat = mesh.now_us(), stopped = true WHERE holder = $1", 1,
			   vals, &rc));
	pthread_mutex_unlock(&pg->mu);
}

int mesh_pg_nodes(struct mesh_pg *pg, int this_job, void (*fn)(const struct mesh_pg_node *, void *), void *arg)
{
	const char *vals[1] = {pg->job};
	PGresult *r;
	int rc = 0;
	pthread_mutex_lock(&pg->mu);
	/* A node of no job (a meshd's own row) shows what its meshd's
	 * drivers did (rows of the same name and host since it registered):
	 * their chunks, over the time they ran. */
	r = mesh__pg_q(pg,
		       "SELECT n.name, n.host, n.program, coalesce(j.name, ''),"
		       " CASE WHEN n.job = " MESH_PG_NO_JOB " THEN coalesce(d.chunks, 0) ELSE n.chunks END,"
		       " CASE WHEN n.job = " MESH_PG_NO_JOB " THEN coalesce(d.busy_us, 0) ELSE n.busy_us END,"
		       " n.started, n.beat, n.ttl_us, mesh.now_us() - n.beat, n.stopped,"
		       " CASE WHEN n.job = " MESH_PG_NO_JOB " THEN coalesce(d.span, 0) ELSE n.beat - n.started END"
		       " FROM mesh.nodes n LEFT JOIN mesh.jobs j ON j.id = n.job"
		       " LEFT JOIN LATERAL (SELECT sum(x.chunks) AS chunks, sum(x.busy_us) AS busy_us,"
		       " sum(greatest(x.beat - x.started, 0)) AS span FROM mesh.nodes x WHERE n.job = " MESH_PG_NO_JOB
		       " AND x.job <> " MESH_PG_NO_JOB " AND x.name = n.name AND x.host = n.host AND x.started >= n.started) d"
		       " ON true WHERE $1 = '' OR j.name = $1 ORDER BY n.started, n.holder",
		       1, this_job ? vals : (const char *const[]){""}, &rc);
	pthread_mutex_unlock(&pg->mu);
	for (int i = 0; r && i < PQntuples(r); i++) {
		struct mesh_pg_node nd = {0};
		nd.name = PQgetvalue(r, i, 0);
		nd.host = PQgetvalue(r, i, 1);
		nd.program = PQgetvalue(r, i, 2);
		nd.job = PQgetvalue(r, i, 3);
		nd.chunks = strtoull(PQgetvalue(r, i, 4), NULL, 10);
		nd.busy_ns = strtoull(PQgetvalue(r, i, 5), NULL, 10) * 1000;
		nd.started_ns = strtoull(PQgetvalue(r, i, 6), NULL, 10) * 1000;
		nd.beat_ns = strtoull(PQgetvalue(r, i, 7), NULL, 10) * 1000;
		nd.ttl_ns = strtoull(PQgetvalue(r, i, 8), NULL, 10) * 1000;
		long long age = strtoll(PQgetvalue(r, i, 9), NULL, 10);
		nd.age_ns = age > 0 ? (uint64_t)age * 1000 : 0;
		nd.stopped = PQgetvalue(r, i, 10)[0] == 't';
		nd.silent = !nd.stopped && nd.age_ns > nd.ttl_ns;
		long long span = strtoll(PQgetvalue(r, i, 11), NULL, 10);
		nd.chunks_per_s = span > 0 ? (double)nd.chunks * 1e6 / (double)span : 0;
		fn(&nd, arg);
	}
	PQclear(r);
	return rc;
}

int mesh_pg_job_nodes(struct mesh_pg *pg, void (*fn)(const struct mesh_pg_node *, void *), void *arg)
{
	const char *vals[1] = {pg->job};
	int rc = 0;
	PGresult *r = mesh__pg_qlp(pg, MESH__PG_PREP_JOB_NODES,
				   "SELECT n.name, n.chunks, n.busy_us FROM mesh.nodes n JOIN mesh.jobs j ON j.id = n.job"
				   " WHERE j.name = $1 ORDER BY n.started, n.holder",
				   1, vals, &rc);
	for (int i = 0; r && i < PQntuples(r); i++) {
		struct mesh_pg_node nd = {0};
		nd.name = PQgetvalue(r, i, 0);
		nd.host = nd.program = nd.job = "";
		nd.chunks = strtoull(PQgetvalue(r, i, 1), NULL, 10);
		nd.busy_ns = strtoull(PQgetvalue(r, i, 2), NULL, 10) * 1000;
		fn(&nd, arg);
	}
	PQclear(r);
	return rc;
}
