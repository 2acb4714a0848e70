/* meshd jobs in the PostgreSQL store: specs, results, reports, the
 * followers' wake-up (store_pg_results.h). */
#include "store/store_pg_results.h"

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "store/store_pg_int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* bytes as the text of a bytea parameter ("\x0a1b..."), appended to b */
static int add_bytea(struct mesh_buf *b, const void *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = p;
	if (mesh_buf_add(b, "\\x", 2) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		char e[2] = {hex[s[i] >> 4], hex[s[i] & 15]};
		if (mesh_buf_add(b, e, 2) < 0)
			return -ENOMEM;
	}
	return 0;
}

int mesh_pgr_submit(struct mesh_pg *pg, const struct mesh_pgr_job *job, const void *input, size_t input_len,
		    uint64_t *id)
{
	char nt[24], mw[24], rt[24], to[24], out[24];
	struct mesh_buf in = MESH_BUF_INIT;
	int rc;
	if (input_len > MESH_PGR_INPUT_MAX)
		return MESH_E_TOOBIG;
	if (input && add_bytea(&in, input, input_len) < 0) {
		mesh_buf_release(&in);
		return -ENOMEM;
	}
	if (input && mesh_buf_add(&in, "", 1) < 0) {
		mesh_buf_release(&in);
		return -ENOMEM;
	}
	snprintf(nt, sizeof nt, "%" PRIu64, job->n);
	snprintf(mw, sizeof mw, "%u", job->max_workers);
	snprintf(rt, sizeof rt, "%" PRIu32, job->retries);
	snprintf(to, sizeof to, "%" PRIu64, job->timeout_ns);
	const char *vals[8] = {nt, job->program, mw, rt, to, job->speculate ? "t" : "f", job->name,
			       input ? in.p : NULL};
	/* One statement: the job row and its spec are one commit. */
	rc = mesh__pg_q1(pg,
		"WITH i AS (INSERT INTO mesh.jobs (id, name, n) SELECT x, 's' || x, $1"
		"  FROM nextval(pg_get_serial_sequence('mesh.jobs', 'id')) x RETURNING id),"
		" s AS (INSERT INTO mesh.specs (job, program, max_workers, retries, timeout_ns, speculate, name, input,"
		"  submitted) SELECT id, $2, $3, $4, $5, $6, $7, $8, mesh.now_us() FROM i RETURNING job)"
		" SELECT job, pg_notify('mesh_jobs', job::text) FROM s",
		8, vals, out, sizeof out);
	mesh_buf_release(&in);
	if (rc)
		return rc;
	*id = strtoull(out, NULL, 10);
	return *id ? 0 : MESH_E_PROTO;
}

int mesh_pgr_jobs(struct mesh_pg *pg, uint64_t id, int active, void (*fn)(const struct mesh_pgr_job *, void *),
		  void *arg)
{
	char it[24];
	const char *vals[2] = {it, active ? "t" : "f"};
	PGresult *r;
	int rc = 0;
	snprintf(it, sizeof it, "%" PRIu64, id);
	r = mesh__pg_qlp(pg, MESH__PG_PREP_JOBS,
		"SELECT j.id, j.n, s.program, s.name, s.max_workers, s.retries, s.timeout_ns, s.speculate, s.state = 'c',"
		" s.input IS NOT NULL, j.done, j.failed, j.dups, s.submitted,"
		" mesh.held(j.id, true),"
		" (SELECT count(*) FROM mesh.chunks c WHERE c.job = j.id AND c.state = 'b'), mesh.now_us()"
		" FROM mesh.specs s JOIN mesh.job_counts j ON j.id = s.job"
		" WHERE ($1 = 0 OR j.id = $1) AND (NOT $2 OR (s.state = 'r' AND j.done < j.n)) ORDER BY j.id",
		2, vals, &rc);
	if (r && id && PQntuples(r) == 0)
		rc = MESH_E_NOJOB;
	for (int i = 0; r && i < PQntuples(r); i++) {
		struct mesh_pgr_job j = {0};
		j.id = strtoull(PQgetvalue(r, i, 0), NULL, 10);
		j.n = strtoull(PQgetvalue(r, i, 1), NULL, 10);
		snprintf(j.program, sizeof j.program, "%s", PQgetvalue(r, i, 2));
		snprintf(j.name, sizeof j.name, "%s", PQgetvalue(r, i, 3));
		j.max_workers = (unsigned)strtoul(PQgetvalue(r, i, 4), NULL, 10);
		j.retries = (uint32_t)strtoul(PQgetvalue(r, i, 5), NULL, 10);
		j.timeout_ns = strtoull(PQgetvalue(r, i, 6), NULL, 10);
		j.speculate = PQgetvalue(r, i, 7)[0] == 't';
		j.cancelled = PQgetvalue(r, i, 8)[0] == 't';
		j.has_input = PQgetvalue(r, i, 9)[0] == 't';
		j.done = strtoull(PQgetvalue(r, i, 10), NULL, 10);
		j.failed = strtoull(PQgetvalue(r, i, 11), NULL, 10);
		j.dups = strtoull(PQgetvalue(r, i, 12), NULL, 10);
		j.submitted_ns = strtoull(PQgetvalue(r, i, 13), NULL, 10) * 1000;
		j.leased = strtoull(PQgetvalue(r, i, 14), NULL, 10);
		j.buried = strtoull(PQgetvalue(r, i, 15), NULL, 10);
		j.now_ns = strtoull(PQgetvalue(r, i, 16), NULL, 10) * 1000;
		fn(&j, arg);
	}
	PQclear(r);
	return rc;
}

int mesh_pgr_cancelled(struct mesh_pg *pg, const uint64_t *ids, size_t n, void (*fn)(uint64_t id, void *), void *arg)
{
	struct mesh_buf b = MESH_BUF_INIT;
	int rc = 0;
	if (!n)
		return 0;
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = mesh_buf_addf(&b, "%c%" PRIu64, i ? ',' : '{', ids[i]);
	if (rc == 0)
		rc = mesh_buf_add(&b, "}", 1);
	if (rc < 0) {
		mesh_buf_release(&b);
		return rc;
	}
	const char *vals[1] = {b.p};
	PGresult *r = mesh__pg_qlp(pg, MESH__PG_PREP_CANCELLED,
				   "SELECT job FROM mesh.specs WHERE job = ANY($1::int[]) AND state = 'c'", 1, vals, &rc);
	for (int i = 0; r && i < PQntuples(r); i++)
		fn(strtoull(PQgetvalue(r, i, 0), NULL, 10), arg);
	PQclear(r);
	mesh_buf_release(&b);
	return rc;
}

/* A bytea column's value, unescaped (malloc'd). */
static unsigned char *bytea_of(PGresult *r, int row, int col, size_t *len)
{
	return PQunescapeBytea((const unsigned char *)PQgetvalue(r, row, col), len);
}

int mesh_pgr_input(struct mesh_pg *pg, uint64_t id, char **data, size_t *len)
{
	char it[24];
	const char *vals[1] = {it};
	PGresult *r;
	int rc = 0;
	*data = NULL;
	*len = 0;
	snprintf(it, sizeof it, "%" PRIu64, id);
	r = mesh__pg_ql(pg, "SELECT input FROM mesh.specs WHERE job = $1", 1, vals, &rc);
	if (r && PQntuples(r) != 1)
		rc = MESH_E_NOJOB;
	else if (r && !PQgetisnull(r, 0, 0)) {
		size_t n;
		unsigned char *u = bytea_of(r, 0, 0, &n);
		if (!u || !(*data = malloc(n + 1))) {
			rc = -ENOMEM;
		} else {
			memcpy(*data, u, n);
			(*data)[n] = 0;
			*len = n;
		}
		PQfreemem(u);
	}
	PQclear(r);
	return rc;
}

int mesh_pgr_cancel(struct mesh_pg *pg, uint64_t id)
{
	char it[24], out[24];
	const char *vals[1] = {it};
	snprintf(it, sizeof it, "%" PRIu64, id);
	int rc = mesh__pg_q1(pg,
		"WITH u AS (UPDATE mesh.specs SET state = 'c' WHERE job = $1 RETURNING job)"
		" SELECT count(*), pg_notify('mesh_jobs', $1::text), pg_notify('mesh_job_' || $1, '') FROM u",
		1, vals, out, sizeof out);
	return rc ? rc : atoi(out) == 1 ? 0 : MESH_E_NOJOB;
}

int mesh_pgr_put_results(struct mesh_pg *pg, uint64_t id, size_t n, const uint64_t *cids, const void *const *data,
			 const size_t *lens)
{
	struct mesh_buf c = MESH_BUF_INIT, d = MESH_BUF_INIT;
	char it[24], out[24];
	int rc = 0;
	if (!n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (lens[i] > MESH_PGR_RESULT_MAX)
			return MESH_E_TOOBIG;
	snprintf(it, sizeof it, "%" PRIu64, id);
	/* Two array parameters: the chunk ids and the replies in hex. */
	mesh_buf_add(&c, "{", 1);
	mesh_buf_add(&d, "{", 1);
	for (size_t i = 0; i < n; i++) {
		mesh_buf_addf(&c, "%s%" PRIu64, i ? "," : "", cids[i]);
		mesh_buf_adds(&d, i ? ",\"" : "\"");
		add_bytea(&d, data[i], lens[i]);
		/* The array's quoting eats the backslash: "x0a1b" arrives,
		 * hence substr(.., 2) below. */
		mesh_buf_adds(&d, "\"");
	}
	mesh_buf_add(&c, "}", 2);
	if (mesh_buf_add(&d, "}", 2) < 0 || !c.p || !d.p) {
		rc = -ENOMEM;
		goto out;
	}
	const char *vals[3] = {it, c.p, d.p};
	rc = mesh__pg_q1(pg,
		"WITH u AS (INSERT INTO mesh.results (job, cid, kind, data)"
		" SELECT $1, x.c, 'r', decode(substr(x.d, 2), 'hex') FROM unnest($2::bigint[], $3::text[]) AS x(c, d)"
		" ON CONFLICT DO NOTHING RETURNING 1) SELECT count(*) FROM u",
		3, vals, out, sizeof out);
out:
	mesh_buf_release(&c);
	mesh_buf_release(&d);
	return rc;
}

int mesh_pgr_put_report(struct mesh_pg *pg, uint64_t id, uint64_t cid, const void *p, size_t n)
{
	struct mesh_buf d = MESH_BUF_INIT;
	char it[24], ct[24], out[8];
	int rc;
	if (n > MESH_PGR_RESULT_MAX)
		n = MESH_PGR_RESULT_MAX; /* a report is for people: its head is enough */
	snprintf(it, sizeof it, "%" PRIu64, id);
	snprintf(ct, sizeof ct, "%" PRIu64, cid);
	if (add_bytea(&d, p, n) < 0 || mesh_buf_add(&d, "", 1) < 0) {
		mesh_buf_release(&d);
		return -ENOMEM;
	}
	const char *vals[3] = {it, ct, d.p};
	rc = mesh__pg_q1(pg,
		"INSERT INTO mesh.results (job, cid, kind, data) VALUES ($1, $2, 'f', $3)"
		" ON CONFLICT (job, kind, cid) DO UPDATE SET data = EXCLUDED.data",
		3, vals, out, sizeof out);
	mesh_buf_release(&d);
	return rc;
}

int mesh_pgr_bury(struct mesh_pg *pg, uint64_t id, uint64_t cid, int status, const char *report)
{
	char it[24], ct[24], st[24], ht[24], out[8];
	const char *vals[4] = {it, ct, st, ht};
	snprintf(it, sizeof it, "%" PRIu64, id);
	snprintf(ct, sizeof ct, "%" PRIu64, cid);
	snprintf(st, sizeof st, "%d", status);
	snprintf(ht, sizeof ht, "%" PRIu64, pg->holder);
	int rc = mesh_pgr_put_report(pg, id, cid, report, strlen(report));
	/* mesh.fail with at most one attempt buries at once */
	return rc ? rc
		  : mesh__pg_q1(pg, "SELECT mesh.fail($1, $2, $3, 1, $4), pg_notify('mesh_job_' || $1, '')", 4, vals,
				out, sizeof out);
}

int mesh_pgr_results(struct mesh_pg *pg, uint64_t id, uint64_t from,
		     int (*fn)(uint64_t cid, const void *p, size_t n, void *arg), void *arg)
{
	char it[24], ft[24];
	const char *vals[2] = {it, ft};
	PGresult *r;
	int rc = 0;
	snprintf(it, sizeof it, "%" PRIu64, id);
	snprintf(ft, sizeof ft, "%" PRIu64, from);
	pthread_mutex_lock(&pg->mu);
	/* A result row of a chunk that is not DONE is not its result yet. */
	r = mesh__pg_q(pg,
		"SELECT cid, data FROM (SELECT r.cid, r.data FROM mesh.results r WHERE r.job = $1 AND r.kind = 'r'"
		"  AND r.cid >= $2 AND r.cid < $2 + 1000 AND mesh.is_done($1, r.cid)"
		" UNION ALL SELECT c.cid, NULL FROM mesh.chunks c WHERE c.job = $1 AND c.state = 'b'"
		"  AND c.cid >= $2 AND c.cid < $2 + 1000) x ORDER BY cid",
		2, vals, &rc);
	pthread_mutex_unlock(&pg->mu);
	for (int i = 0; r && !rc && i < PQntuples(r); i++) {
		uint64_t cid = strtoull(PQgetvalue(r, i, 0), NULL, 10);
		if (PQgetisnull(r, i, 1)) {
			rc = fn(cid, NULL, 0, arg);
			continue;
		}
		size_t n;
		unsigned char *u = bytea_of(r, i, 1, &n);
		rc = u ? fn(cid, u, n, arg) : -ENOMEM;
		PQfreemem(u);
	}
	PQclear(r);
	return rc;
}

int mesh_pgr_buried(struct mesh_pg *pg, uint64_t id, void (*fn)(const struct mesh_pgr_buried *, void *), void *arg)
{
	char it[24];
	const char *vals[1] = {it};
	PGresult *r;
	int rc = 0;
	snprintf(it, sizeof it, "%" PRIu64, id);
	r = mesh__pg_ql(pg,
		"SELECT c.cid, c.fails, coalesce(c.last_status, 0), coalesce(convert_from(r.data, 'UTF8'), '')"
		" FROM mesh.chunks c LEFT JOIN mesh.results r ON r.job = c.job AND r.kind = 'f' AND r.cid = c.cid"
		" WHERE c.job = $1 AND c.state = 'b' ORDER BY c.cid",
		1, vals, &rc);
	for (int i = 0; r && i < PQntuples(r); i++) {
		struct mesh_pgr_buried b = {strtoull(PQgetvalue(r, i, 0), NULL, 10),
					    (uint32_t)strtoul(PQgetvalue(r, i, 1), NULL, 10), atoi(PQgetvalue(r, i, 2)),
					    PQgetvalue(r, i, 3)};
		fn(&b, arg);
	}
	PQclear(r);
	return rc;
}

int mesh_pgr_notify(struct mesh_pg *pg, uint64_t id)
{
	char it[24], out[8];
	const char *vals[1] = {it};
	snprintf(it, sizeof it, "%" PRIu64, id);
	return mesh__pg_q1(pg, "SELECT pg_notify('mesh_job_' || $1, '')", 1, vals, out, sizeof out);
}

/* Waits for a NOTIFY on channel (LISTEN once a call: a connection made
 * again, after a restart, listens anew), or wake_fd (>= 0) readable: 2. */
static int wait_on(struct mesh_pg *pg, const char *channel, uint64_t timeout_ns, int wake_fd)
{
	uint64_t end = mesh_mono_ns() + timeout_ns;
	int rc = 0, woke = 0;
	char listen[64];
	snprintf(listen, sizeof listen, "LISTEN %s", channel);
	pthread_mutex_lock(&pg->mu);
	PGresult *r = mesh__pg_q(pg, listen, 0, NULL, &rc);
	PQclear(r);
	while (!rc && !woke) {
		PGnotify *nt;
		uint64_t now = mesh_mono_ns();
		if (!PQconsumeInput(pg->conn))
			break;
		while ((nt = PQnotifies(pg->conn))) {
			woke |= !strcmp(nt->relname, channel);
			PQfreemem(nt);
		}
		if (woke || now >= end)
			break;
		struct pollfd pfd[2] = {{PQsocket(pg->conn), POLLIN, 0}, {wake_fd, POLLIN, 0}};
		uint64_t ms = (end - now + MESH_NS_PER_MS - 1) / MESH_NS_PER_MS;
		if (pfd[0].fd < 0 || poll(pfd, wake_fd >= 0 ? 2 : 1, ms > 1000 ? 1000 : (int)ms) < 0)
			break;
		if (wake_fd >= 0 && (pfd[1].revents & POLLIN))
			woke = 2;
	}
	pthread_mutex_unlock(&pg->mu);
	return rc ? rc : woke;
}

int mesh_pgr_wait(struct mesh_pg *pg, uint64_t timeout_ns, int wake_fd)
{
	return wait_on(pg, "mesh_jobs", timeout_ns, wake_fd);
}

int mesh_pgr_wait_job(struct mesh_pg *pg, uint64_t id, uint64_t timeout_ns)
{
	char ch[48];
	snprintf(ch, sizeof ch, "mesh_job_%" PRIu64, id);
	return wait_on(pg, ch, timeout_ns, -1);
}
