/* Speculation in the PostgreSQL store (store_pg.h): what a node reads to
 * decide on a copy of a straggler, the copies' leases, and the counted
 * wins.  The rule is the caller's (job/spec.h, job/place.h); every time
 * is the database's clock.  None of this is on a fresh lease's or a
 * primary completion's path: a node calls it only when nothing was left
 * to lease, when it holds a copy, and to add its durations. */
#include "base/buf.h"
#include "base/err.h"
#include "store/store_pg_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "{a,b,...}" of n numbers (each at(i)) into b. */
static int add_array(struct mesh_buf *b, size_t n, uint64_t (*at)(const void *, size_t), const void *arg)
{
	int rc = mesh_buf_adds(b, "{");
	for (size_t i = 0; !rc && i < n; i++)
		rc = mesh_buf_addf(b, "%s%" PRIu64, i ? "," : "", at(arg, i));
	return rc ? rc : mesh_buf_adds(b, "}");
}

int mesh_pg_spec_view(struct mesh_pg *pg, const char *node, uint64_t *hist, size_t nb, struct mesh_pg_spec_view *v)
{
	const char *vals[2] = {pg->idtext, node};
	PGresult *r;
	int rc = 0;
	memset(v, 0, sizeof *v);
	r = mesh__pg_ql(pg,
		"SELECT 0, n, done FROM mesh.job_counts WHERE id = $1"
		" UNION ALL SELECT 1, b, sum(n)::bigint FROM mesh.durations WHERE job = $1 GROUP BY b"
		" UNION ALL SELECT 2, coalesce(sum(chunks), 0)::bigint, coalesce(sum(busy_us), 0)::bigint"
		"  FROM mesh.nodes WHERE job = $1 AND name = $2",
		2, vals, &rc);
	for (int i = 0; r && i < PQntuples(r); i++) {
		uint64_t a = strtoull(PQgetvalue(r, i, 1), NULL, 10), b = strtoull(PQgetvalue(r, i, 2), NULL, 10);
		switch (atoi(PQgetvalue(r, i, 0))) {
		case 0:
			v->n = a;
			v->done = b;
			break;
		case 1:
			if (a < nb) {
				hist[a] += b;
				v->hist_n += b;
			}
			break;
		default:
			v->self_chunks = a;
			v->self_busy_ns = b * 1000;
		}
	}
	if (r && !v->n)
		rc = MESH_E_NOJOB;
	PQclear(r);
	return rc;
}

struct sparse {
	const uint64_t *hist;
	size_t *at;
};
static uint64_t bucket_at(const void *arg, size_t i)
{
	const struct sparse *s = arg;
	return s->at[i];
}
static uint64_t count_at(const void *arg, size_t i)
{
	const struct sparse *s = arg;
	return s->hist[s->at[i]];
}

int mesh_pg_spec_durations(struct mesh_pg *pg, const uint64_t *hist, size_t nb)
{
	size_t *at = malloc(nb * sizeof *at), n = 0;
	struct mesh_buf bs = MESH_BUF_INIT, cs = MESH_BUF_INIT;
	char htext[24];
	int rc;
	if (!at)
		return -ENOMEM;
	for (size_t b = 0; b < nb; b++)
		if (hist[b])
			at[n++] = b;
	struct sparse sp = {hist, at};
	rc = add_array(&bs, n, bucket_at, &sp);
	if (!rc)
		rc = add_array(&cs, n, count_at, &sp);
	if (!rc && n) {
		snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
		const char *vals[4] = {pg->idtext, htext, bs.p, cs.p};
		PQclear(mesh__pg_ql(pg,
			"WITH i AS (INSERT INTO mesh.durations AS d (job, holder, b, n)"
			" SELECT $1, $2, x.b, x.n FROM unnest($3::int[], $4::bigint[]) AS x(b, n) ORDER BY x.b"
			" ON CONFLICT (job, holder, b) DO UPDATE SET n = d.n + excluded.n RETURNING 1)"
			" SELECT count(*), set_config('synchronous_commit', 'off', true) FROM i",
			4, vals, &rc));
	}
	mesh_buf_release(&bs);
	mesh_buf_release(&cs);
	free(at);
	return rc;
}

int mesh_pg_stragglers(struct mesh_pg *pg, const char *node, uint32_t copies, uint64_t thr_ns,
		       struct mesh_pg_straggler *out, size_t cap, size_t *got)
{
	char htext[24], ctext[16], ttext[24], ltext[16];
	const char *vals[6] = {pg->idtext, htext, node, ctext, ttext, ltext};
	PGresult *r;
	int rc = 0;
	*got = 0;
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	snprintf(ctext, sizeof ctext, "%" PRIu32, copies);
	snprintf(ttext, sizeof ttext, "%" PRIu64, thr_ns / 1000);
	snprintf(ltext, sizeof ltext, "%zu", cap);
	r = mesh__pg_ql(pg, "SELECT cid, elapsed, attempt, chunks, busy_us FROM mesh.stragglers($1, $2, $3, $4, $5, $6)",
			6, vals, &rc);
	for (int i = 0; r && i < PQntuples(r) && *got < cap; i++) {
		struct mesh_pg_straggler *s = &out[(*got)++];
		s->cid = strtoull(PQgetvalue(r, i, 0), NULL, 10);
		s->elapsed_ns = strtoull(PQgetvalue(r, i, 1), NULL, 10) * 1000;
		s->attempt = (uint32_t)strtoul(PQgetvalue(r, i, 2), NULL, 10);
		s->chunks = strtoull(PQgetvalue(r, i, 3), NULL, 10);
		s->busy_ns = strtoull(PQgetvalue(r, i, 4), NULL, 10) * 1000;
	}
	PQclear(r);
	return rc;
}

int mesh_pg_spec_claim(struct mesh_pg *pg, uint64_t cid, uint32_t copies, uint64_t ttl_ns, struct mesh_pg_lease *l)
{
	char ctext[24], ktext[16], htext[24], ttext[24];
	const char *vals[5] = {pg->idtext, ctext, ktext, htext, ttext};
	PGresult *r;
	int rc = 0;
	snprintf(ctext, sizeof ctext, "%" PRIu64, cid);
	snprintf(ktext, sizeof ktext, "%" PRIu32, copies);
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	snprintf(ttext, sizeof ttext, "%" PRIu64, ttl_ns / 1000);
	r = mesh__pg_ql(pg, "SELECT attempt, deadline, started, token FROM mesh.spec_claim($1, $2, $3, $4, $5)", 5,
			vals, &rc);
	if (r && PQntuples(r) == 1) {
		memset(l, 0, sizeof *l);
		l->cid = cid;
		l->attempt = (uint32_t)strtoul(PQgetvalue(r, 0, 0), NULL, 10);
		l->deadline_ns = strtoull(PQgetvalue(r, 0, 1), NULL, 10) * 1000;
		l->started_ns = strtoull(PQgetvalue(r, 0, 2), NULL, 10) * 1000;
		l->token = (uint64_t)strtoll(PQgetvalue(r, 0, 3), NULL, 10);
	} else if (r) {
		rc = MESH_E_STATE;
	}
	PQclear(r);
	return rc;
}

int mesh_pg_spec_renew(struct mesh_pg *pg, uint64_t cid, uint64_t token, uint64_t ttl_ns, uint64_t *deadline_ns)
{
	char ctext[24], ttext[24], ltext[24], out[24];
	const char *vals[4] = {pg->idtext, ctext, ttext, ltext};
	int rc;
	snprintf(ctext, sizeof ctext, "%" PRIu64, cid);
	snprintf(ttext, sizeof ttext, "%" PRId64, (int64_t)token);
	snprintf(ltext, sizeof ltext, "%" PRIu64, ttl_ns / 1000);
	rc = mesh__pg_q1(pg, "SELECT mesh.spec_renew($1, $2, $3, $4)", 4, vals, out, sizeof out);
	if (rc)
		return rc;
	if (!out[0])
		return MESH_E_STATE;
	*deadline_ns = strtoull(out, NULL, 10) * 1000;
	return 0;
}

struct ordered {
	const uint64_t *cids;
	const size_t *order;
};
static uint64_t cid_at(const void *arg, size_t i)
{
	const struct ordered *o = arg;
	return o->cids[o->order[i]];
}

int mesh_pg_spec_complete(struct mesh_pg *pg, const uint64_t *cids, const uint64_t *durs_ns, size_t n, int *results)
{
	size_t *order = malloc((n + 1) * sizeof *order);
	struct mesh_buf arr = MESH_BUF_INIT;
	char htext[24], btext[24];
	uint64_t busy_us = 0;
	PGresult *r;
	int rc = 0;
	if (!order)
		return -ENOMEM;
	/* ascending: mesh.complete's one lock order (insertion sort: a
	 * node holds a copy or two) */
	for (size_t i = 0; i < n; i++) {
		size_t k = i;
		for (; k > 0 && cids[order[k - 1]] > cids[i]; k--)
			order[k] = order[k - 1];
		order[k] = i;
		busy_us += durs_ns ? durs_ns[i] / 1000 : 0;
	}
	struct ordered o = {cids, order};
	rc = add_array(&arr, n, cid_at, &o);
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	snprintf(btext, sizeof btext, "%" PRIu64, busy_us);
	const char *vals[4] = {pg->idtext, arr.p, htext, btext};
	r = rc ? NULL : mesh__pg_ql(pg, "SELECT * FROM mesh.spec_complete($1, $2::bigint[], $3, $4)", 4, vals, &rc);
	if (r && (size_t)PQntuples(r) != n)
		rc = MESH_E_PROTO;
	for (size_t i = 0; i < n; i++)
		results[order[i]] = rc ? rc : PQgetvalue(r, (int)i, 0)[0] == 't' ? 0 : 1;
	PQclear(r);
	mesh_buf_release(&arr);
	free(order);
	return rc;
}

int mesh_pg_spec_fail(struct mesh_pg *pg, uint64_t cid, uint64_t token, int status)
{
	char ctext[24], ttext[24], stext[16], htext[24], out[8];
	const char *vals[5] = {pg->idtext, ctext, ttext, stext, htext};
	snprintf(ctext, sizeof ctext, "%" PRIu64, cid);
	snprintf(ttext, sizeof ttext, "%" PRId64, (int64_t)token);
	snprintf(stext, sizeof stext, "%d", status);
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	return mesh__pg_q1(pg, "SELECT mesh.spec_fail($1, $2, $3, $4, $5)", 5, vals, out, sizeof out);
}

int mesh_pg_spec_release(struct mesh_pg *pg)
{
	char htext[24];
	const char *vals[2] = {pg->idtext, htext};
	int rc = 0;
	snprintf(htext, sizeof htext, "%" PRIu64, pg->holder);
	PQclear(mesh__pg_ql(pg, "DELETE FROM mesh.copies WHERE job = $1 AND holder = $2", 2, vals, &rc));
	return rc;
}
