/* The schema of the PostgreSQL store, version by version (store_pg.h).
 * MIGRATIONS[v] takes a database from version v to v + 1; version 0 is
 * no schema.  Times are the database's clock in microseconds since the
 * epoch (mesh.now_us()).
 *
 * mesh.jobs      one row a job: n, identity, the fresh-lease cursor `next`
 *                (counters done, dups, failed until version 4).
 * mesh.counts    (4) one row a job and completer (its holder): done, dups,
 *                failed; the view mesh.job_counts sums them a job.
 * mesh.chunks    one row a chunk that was leased, failed or buried and is
 *                not DONE (a DONE chunk keeps its row only when it had
 *                failed attempts): state 'l' leased, 'p' let go (leasable
 *                at once), 'b' buried, 'd' done after failures.
 * mesh.done_words  the DONE bits, 64 chunks a row: what a done chunk costs.
 * mesh.nodes     (2) one row a node (a handle that leased): name, host,
 *                program, job, registered/last beat, TTL, chunks run and
 *                their summed durations (its speed), stopped.
 * mesh.specs     (3) one row a meshd job (`mesh submit --store`): its job
 *                row, program, options, the chunks' inputs, state 'r'
 *                running / 'c' cancelled.  Its job's name is s<id>.
 * mesh.results   (3) each chunk's reply (kind 'r'; written before the
 *                chunk's DONE bit, the first one kept) and the last
 *                failure report (kind 'f') of meshd jobs
 *                (store_pg_results.h). */
#ifndef MESH_STORE_STORE_PG_SQL_H
#define MESH_STORE_STORE_PG_SQL_H

static const char *const MESH_PG_MIGRATIONS[] = {
	/* 0 -> 1 */
	"CREATE SCHEMA mesh;"
	"CREATE TABLE mesh.meta (version int NOT NULL);"
	"INSERT INTO mesh.meta VALUES (1);"
	"CREATE TABLE mesh.jobs (id serial PRIMARY KEY, name text UNIQUE NOT NULL, n bigint NOT NULL,"
	" identity bytea, next bigint NOT NULL DEFAULT 0, done bigint NOT NULL DEFAULT 0,"
	" dups bigint NOT NULL DEFAULT 0, failed bigint NOT NULL DEFAULT 0);"
	"CREATE TABLE mesh.chunks (job int NOT NULL, cid bigint NOT NULL, state \"char\" NOT NULL,"
	" attempt int NOT NULL DEFAULT 0, fails int NOT NULL DEFAULT 0, base int NOT NULL DEFAULT 0,"
	" last_status int, token bigint, holder bigint, deadline bigint, started bigint,"
	" PRIMARY KEY (job, cid));"
	"CREATE TABLE mesh.done_words (job int NOT NULL, w bigint NOT NULL, bits bigint NOT NULL,"
	" PRIMARY KEY (job, w));"
	"CREATE FUNCTION mesh.now_us() RETURNS bigint LANGUAGE sql VOLATILE AS"
	" $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint $$;"
	"CREATE FUNCTION mesh.is_done(p_job int, p_cid bigint) RETURNS boolean LANGUAGE sql STABLE AS"
	" $$ SELECT coalesce((SELECT d.bits & (1::bigint << (p_cid % 64)::int) <> 0 FROM mesh.done_words d"
	"    WHERE d.job = p_job AND d.w = p_cid / 64), false) $$;"
	/* Expired and let-go chunks first (one thief: row locks, SKIP
	 * LOCKED), then fresh ones from the cursor (the job row's lock). */
	"CREATE FUNCTION mesh.lease(p_job int, p_k int, p_ttl_us bigint, p_holder bigint)"
	" RETURNS TABLE(cid bigint, attempt int, stolen boolean, deadline bigint, started bigint, token bigint)"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE t bigint := mesh.now_us(); got int; lo bigint; hi bigint;\n"
	"BEGIN\n"
	" RETURN QUERY WITH c AS (SELECT ch.cid AS c, ch.state AS s FROM mesh.chunks ch WHERE ch.job = p_job"
	"   AND (ch.state = 'p' OR (ch.state = 'l' AND ch.deadline < t)) ORDER BY ch.cid LIMIT p_k"
	"   FOR UPDATE SKIP LOCKED)"
	"  UPDATE mesh.chunks ch SET state = 'l', attempt = ch.attempt + 1,"
	"   token = (random() * 9.2e18)::bigint, holder = p_holder, deadline = t + p_ttl_us, started = t"
	"   FROM c WHERE ch.job = p_job AND ch.cid = c.c"
	"   RETURNING ch.cid, ch.attempt, c.s = 'l', ch.deadline, ch.started, ch.token;\n"
	" GET DIAGNOSTICS got = ROW_COUNT;\n"
	" IF got < p_k THEN\n"
	"  SELECT j.next, j.n INTO lo, hi FROM mesh.jobs j WHERE j.id = p_job FOR UPDATE;\n"
	"  hi := LEAST(hi, lo + p_k - got);\n"
	"  IF hi > lo THEN\n"
	"   UPDATE mesh.jobs SET next = hi WHERE id = p_job;\n"
	"   RETURN QUERY INSERT INTO mesh.chunks AS ch (job, cid, state, attempt, token, holder, deadline, started)"
	"    SELECT p_job, g, 'l', 1, (random() * 9.2e18)::bigint, p_holder, t + p_ttl_us, t"
	"    FROM generate_series(lo, hi - 1) g WHERE NOT mesh.is_done(p_job, g) ON CONFLICT DO NOTHING"
	"    RETURNING ch.cid, ch.attempt, false, ch.deadline, ch.started, ch.token;\n"
	"  END IF;\n"
	" END IF;\n"
	"END $f$;"
	/* First completion wins: a DONE bit set here is new; one already set
	 * (or the same chunk earlier in the batch) is a duplicate, counted.
	 * Set-based: the words are locked in one order (ascending). */
	"CREATE FUNCTION mesh.complete(p_job int, p_cids bigint[]) RETURNS SETOF boolean"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE res boolean[]; fresh bigint[]; newc int; dupc int;\n"
	"BEGIN\n"
	" INSERT INTO mesh.done_words (job, w, bits) SELECT DISTINCT p_job, c / 64, 0::bigint"
	"  FROM unnest(p_cids) c ORDER BY 2 ON CONFLICT DO NOTHING;\n"
	" WITH u AS (SELECT c, i, row_number() OVER (PARTITION BY c ORDER BY i) AS r"
	"   FROM unnest(p_cids) WITH ORDINALITY AS x(c, i)),"
	"  old AS (SELECT d.w, d.bits FROM mesh.done_words d WHERE d.job = p_job"
	"   AND d.w IN (SELECT DISTINCT c / 64 FROM u) ORDER BY d.w FOR UPDATE),"
	"  v AS (SELECT u.c, u.i, u.r = 1 AND (o.bits & (1::bigint << (u.c % 64)::int)) = 0 AS isnew"
	"   FROM u JOIN old o ON o.w = u.c / 64)"
	" SELECT array_agg(v.isnew ORDER BY v.i), array_agg(v.c) FILTER (WHERE v.isnew) INTO res, fresh FROM v;\n"
	" UPDATE mesh.done_words d SET bits = d.bits | x.m FROM (SELECT c / 64 AS w,"
	"   bit_or(1::bigint << (c % 64)::int) AS m FROM unnest(fresh) c GROUP BY 1) x"
	"  WHERE d.job = p_job AND d.w = x.w;\n"
	" DELETE FROM mesh.chunks WHERE job = p_job AND cid = ANY(fresh) AND fails = 0;\n"
	" UPDATE mesh.chunks SET state = 'd', token = NULL, holder = NULL, deadline = NULL"
	"  WHERE job = p_job AND cid = ANY(fresh);\n"
	" newc := coalesce(array_length(fresh, 1), 0);\n"
	" dupc := coalesce(array_length(p_cids, 1), 0) - newc;\n"
	" UPDATE mesh.jobs SET done = done + newc, dups = dups + dupc WHERE id = p_job;\n"
	" RETURN QUERY SELECT unnest(res);\n"
	"END $f$;"
	"CREATE FUNCTION mesh.fail(p_job int, p_cid bigint, p_status int, p_max int) RETURNS boolean"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE b boolean;\n"
	"BEGIN\n"
	" IF mesh.is_done(p_job, p_cid) THEN RETURN false; END IF;\n"
	" INSERT INTO mesh.chunks (job, cid, state) VALUES (p_job, p_cid, 'p') ON CONFLICT DO NOTHING;\n"
	" UPDATE mesh.chunks SET fails = fails + 1, last_status = p_status,"
	"  state = CASE WHEN fails + 1 - base >= p_max THEN 'b' ELSE 'p' END,"
	"  token = NULL, holder = NULL, deadline = NULL"
	"  WHERE job = p_job AND cid = p_cid RETURNING state = 'b' INTO b;\n"
	" UPDATE mesh.jobs SET failed = failed + 1 WHERE id = p_job;\n"
	" IF NOT b THEN PERFORM pg_notify('mesh', p_job::text); END IF;\n"
	" RETURN b;\n"
	"END $f$;",
	/* 1 -> 2: nodes.  A node (a handle that leased) beats every third of
	 * its TTL; one silent past its TTL has its leases taken even before
	 * their own deadlines (a long lease renewed far ahead by a host that
	 * then froze or was cut off). */
	"CREATE TABLE mesh.nodes (holder bigint PRIMARY KEY, name text NOT NULL, host text NOT NULL,"
	" program text NOT NULL, job int NOT NULL, started bigint NOT NULL, beat bigint NOT NULL,"
	" ttl_us bigint NOT NULL, chunks bigint NOT NULL DEFAULT 0, busy_us bigint NOT NULL DEFAULT 0,"
	" stopped boolean NOT NULL DEFAULT false);"
	"CREATE OR REPLACE FUNCTION mesh.lease(p_job int, p_k int, p_ttl_us bigint, p_holder bigint)"
	" RETURNS TABLE(cid bigint, attempt int, stolen boolean, deadline bigint, started bigint, token bigint)"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE t bigint := mesh.now_us(); got int; lo bigint; hi bigint;\n"
	"BEGIN\n"
	" RETURN QUERY WITH c AS (SELECT ch.cid AS c, ch.state AS s FROM mesh.chunks ch WHERE ch.job = p_job"
	"   AND (ch.state = 'p' OR (ch.state = 'l' AND (ch.deadline < t OR ch.holder IN"
	"    (SELECT n.holder FROM mesh.nodes n WHERE n.job = p_job AND n.beat + n.ttl_us < t))))"
	"   ORDER BY ch.cid LIMIT p_k FOR UPDATE OF ch SKIP LOCKED)"
	"  UPDATE mesh.chunks ch SET state = 'l', attempt = ch.attempt + 1,"
	"   token = (random() * 9.2e18)::bigint, holder = p_holder, deadline = t + p_ttl_us, started = t"
	"   FROM c WHERE ch.job = p_job AND ch.cid = c.c"
	"   RETURNING ch.cid, ch.attempt, c.s = 'l', ch.deadline, ch.started, ch.token;\n"
	" GET DIAGNOSTICS got = ROW_COUNT;\n"
	" IF got < p_k THEN\n"
	"  SELECT j.next, j.n INTO lo, hi FROM mesh.jobs j WHERE j.id = p_job FOR UPDATE;\n"
	"  hi := LEAST(hi, lo + p_k - got);\n"
	"  IF hi > lo THEN\n"
	"   UPDATE mesh.jobs SET next = hi WHERE id = p_job;\n"
	"   RETURN QUERY INSERT INTO mesh.chunks AS ch (job, cid, state, attempt, token, holder, deadline, started)"
	"    SELECT p_job, g, 'l', 1, (random() * 9.2e18)::bigint, p_holder, t + p_ttl_us, t"
	"    FROM generate_series(lo, hi - 1) g WHERE NOT mesh.is_done(p_job, g) ON CONFLICT DO NOTHING"
	"    RETURNING ch.cid, ch.attempt, false, ch.deadline, ch.started, ch.token;\n"
	"  END IF;\n"
	" END IF;\n"
	"END $f$;",
	/* 2 -> 3: meshd jobs in the store.  A chunk's result row is written
	 * (committed) before its DONE bit, so a DONE chunk always has one;
	 * a result of a chunk that is not DONE (a node died between the
	 * two commits) is harmless: the rerun's insert keeps the first. */
	"CREATE TABLE mesh.specs (job int PRIMARY KEY, program text NOT NULL, max_workers int NOT NULL,"
	" retries int NOT NULL, timeout_ns bigint NOT NULL, speculate boolean NOT NULL, name text NOT NULL,"
	" input bytea, state \"char\" NOT NULL DEFAULT 'r', submitted bigint NOT NULL);"
	"CREATE TABLE mesh.results (job int NOT NULL, cid bigint NOT NULL, kind \"char\" NOT NULL,"
	" data bytea NOT NULL, PRIMARY KEY (job, kind, cid));",
	/* 3 -> 4: no hot row.  The job's counters were one row that every
	 * completion updated (its lock held through its WAL flush) and every
	 * fresh lease locked: each node's commit waited on the others', so
	 * PostgreSQL's group commit could not merge them.  The counters are
	 * now one row a completer (its holder; summed by the view
	 * mesh.job_counts), so concurrent completions of different nodes
	 * touch no common row but a shared DONE word; the job row is locked
	 * only by the fresh-lease cursor, in transactions that do not wait
	 * for a flush.  And a lease finds let-go, expired and silent nodes'
	 * chunks through partial indexes instead of passing every live lease
	 * of the job. */
	"CREATE TABLE mesh.counts (job int NOT NULL, holder bigint NOT NULL, done bigint NOT NULL DEFAULT 0,"
	" dups bigint NOT NULL DEFAULT 0, failed bigint NOT NULL DEFAULT 0, PRIMARY KEY (job, holder));"
	"INSERT INTO mesh.counts (job, holder, done, dups, failed) SELECT id, 0, done, dups, failed FROM mesh.jobs;"
	"ALTER TABLE mesh.jobs DROP COLUMN done, DROP COLUMN dups, DROP COLUMN failed;"
	"CREATE VIEW mesh.job_counts AS SELECT j.id, j.name, j.n, coalesce(sum(c.done), 0)::bigint AS done,"
	" coalesce(sum(c.dups), 0)::bigint AS dups, coalesce(sum(c.failed), 0)::bigint AS failed"
	" FROM mesh.jobs j LEFT JOIN mesh.counts c ON c.job = j.id GROUP BY j.id;"
	"CREATE INDEX chunks_let_go ON mesh.chunks (job, cid) WHERE state = 'p';"
	"CREATE INDEX chunks_leased ON mesh.chunks (job, deadline) WHERE state = 'l';"
	"CREATE INDEX chunks_holder ON mesh.chunks (job, holder) WHERE state = 'l';"
	"CREATE INDEX nodes_job ON mesh.nodes (job);"
	/* Candidates from the three indexes (at most k each), then the same
	 * rows locked FOR UPDATE SKIP LOCKED with their condition checked
	 * again on the locked version: one thief a chunk. */
	"CREATE OR REPLACE FUNCTION mesh.lease(p_job int, p_k int, p_ttl_us bigint, p_holder bigint)"
	" RETURNS TABLE(cid bigint, attempt int, stolen boolean, deadline bigint, started bigint, token bigint)"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE t bigint := mesh.now_us(); got int := 0; lo bigint; hi bigint; silent bigint[]; cand bigint[];\n"
	"BEGIN\n"
	" SELECT array_agg(n.holder) INTO silent FROM mesh.nodes n WHERE n.job = p_job AND n.beat + n.ttl_us < t;\n"
	" SELECT array_agg(x.c) INTO cand FROM ("
	"  (SELECT ch.cid AS c FROM mesh.chunks ch WHERE ch.job = p_job AND ch.state = 'p' ORDER BY ch.cid LIMIT p_k)"
	"  UNION (SELECT ch.cid FROM mesh.chunks ch WHERE ch.job = p_job AND ch.state = 'l' AND ch.deadline < t"
	"   ORDER BY ch.deadline LIMIT p_k)"
	"  UNION (SELECT ch.cid FROM mesh.chunks ch WHERE silent IS NOT NULL AND ch.job = p_job AND ch.state = 'l'"
	"   AND ch.holder = ANY(silent) LIMIT p_k)) x;\n"
	" IF cand IS NOT NULL THEN\n"
	"  RETURN QUERY WITH c AS (SELECT ch.cid AS c, ch.state AS s FROM mesh.chunks ch WHERE ch.job = p_job"
	"    AND ch.cid = ANY(cand) AND (ch.state = 'p' OR (ch.state = 'l' AND (ch.deadline < t OR ch.holder = ANY(silent))))"
	"    ORDER BY ch.cid LIMIT p_k FOR UPDATE OF ch SKIP LOCKED)"
	"   UPDATE mesh.chunks ch SET state = 'l', attempt = ch.attempt + 1,"
	"    token = (random() * 9.2e18)::bigint, holder = p_holder, deadline = t + p_ttl_us, started = t"
	"    FROM c WHERE ch.job = p_job AND ch.cid = c.c"
	"    RETURNING ch.cid, ch.attempt, c.s = 'l', ch.deadline, ch.started, ch.token;\n"
	"  GET DIAGNOSTICS got = ROW_COUNT;\n"
	" END IF;\n"
	" IF got < p_k THEN\n"
	"  SELECT j.next, j.n INTO lo, hi FROM mesh.jobs j WHERE j.id = p_job FOR UPDATE;\n"
	"  hi := LEAST(hi, lo + p_k - got);\n"
	"  IF hi > lo THEN\n"
	"   UPDATE mesh.jobs SET next = hi WHERE id = p_job;\n"
	"   RETURN QUERY INSERT INTO mesh.chunks AS ch (job, cid, state, attempt, token, holder, deadline, started)"
	"    SELECT p_job, g, 'l', 1, (random() * 9.2e18)::bigint, p_holder, t + p_ttl_us, t"
	"    FROM generate_series(lo, hi - 1) g LEFT JOIN mesh.done_words d ON d.job = p_job AND d.w = g / 64"
	"    WHERE coalesce(d.bits & (1::bigint << (g % 64)::int), 0) = 0 ON CONFLICT DO NOTHING"
	"    RETURNING ch.cid, ch.attempt, false, ch.deadline, ch.started, ch.token;\n"
	"  END IF;\n"
	" END IF;\n"
	"END $f$;"
	/* As before, the counters going to the completer's own row. */
	"DROP FUNCTION mesh.complete(int, bigint[]);"
	"CREATE FUNCTION mesh.complete(p_job int, p_cids bigint[], p_holder bigint) RETURNS SETOF boolean"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE res boolean[]; fresh bigint[]; newc int; dupc int;\n"
	"BEGIN\n"
	" INSERT INTO mesh.done_words (job, w, bits) SELECT DISTINCT p_job, c / 64, 0::bigint"
	"  FROM unnest(p_cids) c ORDER BY 2 ON CONFLICT DO NOTHING;\n"
	" WITH u AS (SELECT c, i, row_number() OVER (PARTITION BY c ORDER BY i) AS r"
	"   FROM unnest(p_cids) WITH ORDINALITY AS x(c, i)),"
	"  old AS (SELECT d.w, d.bits FROM mesh.done_words d WHERE d.job = p_job"
	"   AND d.w IN (SELECT DISTINCT c / 64 FROM u) ORDER BY d.w FOR UPDATE),"
	"  v AS (SELECT u.c, u.i, u.r = 1 AND (o.bits & (1::bigint << (u.c % 64)::int)) = 0 AS isnew"
	"   FROM u JOIN old o ON o.w = u.c / 64)"
	" SELECT array_agg(v.isnew ORDER BY v.i), array_agg(v.c) FILTER (WHERE v.isnew) INTO res, fresh FROM v;\n"
	" UPDATE mesh.done_words d SET bits = d.bits | x.m FROM (SELECT c / 64 AS w,"
	"   bit_or(1::bigint << (c % 64)::int) AS m FROM unnest(fresh) c GROUP BY 1) x"
	"  WHERE d.job = p_job AND d.w = x.w;\n"
	" DELETE FROM mesh.chunks WHERE job = p_job AND cid = ANY(fresh) AND fails = 0;\n"
	" UPDATE mesh.chunks SET state = 'd', token = NULL, holder = NULL, deadline = NULL"
	"  WHERE job = p_job AND cid = ANY(fresh);\n"
	" newc := coalesce(array_length(fresh, 1), 0);\n"
	" dupc := coalesce(array_length(p_cids, 1), 0) - newc;\n"
	" INSERT INTO mesh.counts AS k (job, holder, done, dups) VALUES (p_job, p_holder, newc, dupc)"
	"  ON CONFLICT (job, holder) DO UPDATE SET done = k.done + excluded.done, dups = k.dups + excluded.dups;\n"
	" RETURN QUERY SELECT unnest(res);\n"
	"END $f$;"
	"DROP FUNCTION mesh.fail(int, bigint, int, int);"
	"CREATE FUNCTION mesh.fail(p_job int, p_cid bigint, p_status int, p_max int, p_holder bigint) RETURNS boolean"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE b boolean;\n"
	"BEGIN\n"
	" IF mesh.is_done(p_job, p_cid) THEN RETURN false; END IF;\n"
	" INSERT INTO mesh.chunks (job, cid, state) VALUES (p_job, p_cid, 'p') ON CONFLICT DO NOTHING;\n"
	" UPDATE mesh.chunks SET fails = fails + 1, last_status = p_status,"
	"  state = CASE WHEN fails + 1 - base >= p_max THEN 'b' ELSE 'p' END,"
	"  token = NULL, holder = NULL, deadline = NULL"
	"  WHERE job = p_job AND cid = p_cid RETURNING state = 'b' INTO b;\n"
	" INSERT INTO mesh.counts AS k (job, holder, failed) VALUES (p_job, p_holder, 1)"
	"  ON CONFLICT (job, holder) DO UPDATE SET failed = k.failed + 1;\n"
	" IF NOT b THEN PERFORM pg_notify('mesh', p_job::text); END IF;\n"
	" RETURN b;\n"
	"END $f$;",
};
#define MESH_PG_NMIGRATIONS (sizeof MESH_PG_MIGRATIONS / sizeof MESH_PG_MIGRATIONS[0])

#endif
