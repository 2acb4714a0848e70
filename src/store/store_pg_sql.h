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
 *                (store_pg_results.h).
 * mesh.durations (6) the completed chunks' durations: a log histogram
 *                (job/hist.h's buckets), one row a handle and bucket.
 * mesh.copies    (6) one row a live speculative copy of a straggler:
 *                its slot (1..spec_max_copies), holder, token, deadline.
 *                mesh.counts.spec counts the copies that won. */
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
	/* A fresh lease is one row a range (mesh.blocks: lo, hi, holder, a
	 * token a chunk derived from the block's, deadline, the count of its
	 * chunks neither DONE nor split out): a chunk of the range is leased
	 * by the block while it has no row of its own.  It gets one (split)
	 * when it is renewed, fails or is handed back; the whole range gets
	 * rows (unblock) when the block expires or its holder went silent,
	 * and then those rows are taken as any expired lease, one thief a
	 * chunk (the block's row lock, then each row's, SKIP LOCKED).
	 * Expired, let-go and silent nodes' chunk rows are found through the
	 * partial indexes (at most k candidates each), then locked with their
	 * condition checked again on the locked version. */
	"CREATE TABLE mesh.blocks (job int NOT NULL, lo bigint NOT NULL, hi bigint NOT NULL, holder bigint NOT NULL,\n"
	" token bigint NOT NULL, deadline bigint NOT NULL, started bigint NOT NULL, remaining int NOT NULL,\n"
	" PRIMARY KEY (job, lo));\n"
	"CREATE FUNCTION mesh.unblock(p_job int, p_lo bigint, p_state \"char\") RETURNS bigint LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE b mesh.blocks; got bigint;\n"
	"BEGIN\n"
	" DELETE FROM mesh.blocks x WHERE x.job = p_job AND x.lo = p_lo RETURNING * INTO b;\n"
	" IF b.job IS NULL THEN RETURN 0; END IF;\n"
	" INSERT INTO mesh.chunks (job, cid, state, attempt, token, holder, deadline, started)\n"
	"  SELECT p_job, g, p_state, 1, CASE WHEN p_state = 'l' THEN b.token + (g - b.lo) END,\n"
	"   CASE WHEN p_state = 'l' THEN b.holder END, b.deadline, b.started\n"
	"  FROM generate_series(b.lo, b.hi - 1) g LEFT JOIN mesh.done_words d ON d.job = p_job AND d.w = g / 64\n"
	"  WHERE coalesce(d.bits & (1::bigint << (g % 64)::int), 0) = 0 ON CONFLICT DO NOTHING;\n"
	" GET DIAGNOSTICS got = ROW_COUNT;\n"
	" RETURN got;\n"
	"END $f$;\n"
	"CREATE OR REPLACE FUNCTION mesh.lease(p_job int, p_k int, p_ttl_us bigint, p_holder bigint)\n"
	" RETURNS TABLE(cid bigint, attempt int, stolen boolean, deadline bigint, started bigint, token bigint)\n"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE t bigint := mesh.now_us(); got int := 0; lo bigint; hi bigint; silent bigint[]; cand bigint[];\n"
	" b record; tok bigint; nb int;\n"
	"BEGIN\n"
	" SELECT array_agg(n.holder) INTO silent FROM mesh.nodes n WHERE n.job = p_job AND n.beat + n.ttl_us < t;\n"
	" FOR b IN SELECT x.lo FROM mesh.blocks x WHERE x.job = p_job AND (x.deadline < t OR x.holder = ANY(silent))\n"
	"  FOR UPDATE SKIP LOCKED LOOP\n"
	"  PERFORM mesh.unblock(p_job, b.lo, 'l');\n"
	" END LOOP;\n"
	" SELECT array_agg(x.c) INTO cand FROM (\n"
	"  (SELECT ch.cid AS c FROM mesh.chunks ch WHERE ch.job = p_job AND ch.state = 'p' ORDER BY ch.cid LIMIT p_k)\n"
	"  UNION (SELECT ch.cid FROM mesh.chunks ch WHERE ch.job = p_job AND ch.state = 'l' AND ch.deadline < t\n"
	"   ORDER BY ch.deadline LIMIT p_k)\n"
	"  UNION (SELECT ch.cid FROM mesh.chunks ch WHERE silent IS NOT NULL AND ch.job = p_job AND ch.state = 'l'\n"
	"   AND ch.holder = ANY(silent) LIMIT p_k)) x;\n"
	" IF cand IS NOT NULL THEN\n"
	"  RETURN QUERY WITH c AS (SELECT ch.cid AS c, ch.state AS s FROM mesh.chunks ch WHERE ch.job = p_job\n"
	"    AND ch.cid = ANY(cand) AND (ch.state = 'p' OR (ch.state = 'l' AND (ch.deadline < t OR ch.holder = ANY(silent))))\n"
	"    ORDER BY ch.cid LIMIT p_k FOR UPDATE OF ch SKIP LOCKED)\n"
	"   UPDATE mesh.chunks ch SET state = 'l', attempt = ch.attempt + 1,\n"
	"    token = (random() * 9.2e18)::bigint, holder = p_holder, deadline = t + p_ttl_us, started = t\n"
	"    FROM c WHERE ch.job = p_job AND ch.cid = c.c\n"
	"    RETURNING ch.cid, ch.attempt, c.s = 'l', ch.deadline, ch.started, ch.token;\n"
	"  GET DIAGNOSTICS got = ROW_COUNT;\n"
	" END IF;\n"
	" IF got < p_k THEN\n"
	"  SELECT j.next, j.n INTO lo, hi FROM mesh.jobs j WHERE j.id = p_job FOR UPDATE;\n"
	"  hi := LEAST(hi, lo + p_k - got);\n"
	"  IF hi > lo THEN\n"
	"   UPDATE mesh.jobs SET next = hi WHERE id = p_job;\n"
	"   tok := (random() * 4.6e18)::bigint;\n"
	"   RETURN QUERY SELECT g, 1, false, t + p_ttl_us, t, tok + (g - lo)\n"
	"    FROM generate_series(lo, hi - 1) g LEFT JOIN mesh.done_words d ON d.job = p_job AND d.w = g / 64\n"
	"    WHERE coalesce(d.bits & (1::bigint << (g % 64)::int), 0) = 0\n"
	"     AND NOT EXISTS (SELECT 1 FROM mesh.chunks ch WHERE ch.job = p_job AND ch.cid = g);\n"
	"   GET DIAGNOSTICS nb = ROW_COUNT;\n"
	"   IF nb > 0 THEN\n"
	"    INSERT INTO mesh.blocks VALUES (p_job, lo, hi, p_holder, tok, t + p_ttl_us, t, nb);\n"
	"   END IF;\n"
	"  END IF;\n"
	" END IF;\n"
	"END $f$;\n"
	"DROP FUNCTION mesh.complete(int, bigint[]);\n"
	"CREATE FUNCTION mesh.complete(p_job int, p_cids bigint[], p_holder bigint) RETURNS SETOF boolean\n"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE res boolean[]; fresh bigint[]; rowed bigint[]; zeroed bigint[]; newc int; dupc int;\n"
	"BEGIN\n"
	" INSERT INTO mesh.done_words (job, w, bits) SELECT DISTINCT p_job, c / 64, 0::bigint\n"
	"  FROM unnest(p_cids) c ORDER BY 2 ON CONFLICT DO NOTHING;\n"
	" WITH u AS (SELECT c, i, row_number() OVER (PARTITION BY c ORDER BY i) AS r\n"
	"   FROM unnest(p_cids) WITH ORDINALITY AS x(c, i)),\n"
	"  old AS (SELECT d.w, d.bits FROM mesh.done_words d WHERE d.job = p_job\n"
	"   AND d.w IN (SELECT DISTINCT c / 64 FROM u) ORDER BY d.w FOR UPDATE),\n"
	"  v AS (SELECT u.c, u.i, u.r = 1 AND (o.bits & (1::bigint << (u.c % 64)::int)) = 0 AS isnew\n"
	"   FROM u JOIN old o ON o.w = u.c / 64)\n"
	" SELECT array_agg(v.isnew ORDER BY v.i), array_agg(v.c) FILTER (WHERE v.isnew) INTO res, fresh FROM v;\n"
	" UPDATE mesh.done_words d SET bits = d.bits | x.m FROM (SELECT c / 64 AS w,\n"
	"   bit_or(1::bigint << (c % 64)::int) AS m FROM unnest(fresh) c GROUP BY 1) x\n"
	"  WHERE d.job = p_job AND d.w = x.w;\n"
	" WITH del AS (DELETE FROM mesh.chunks WHERE job = p_job AND cid = ANY(fresh) AND fails = 0 RETURNING cid),\n"
	"  upd AS (UPDATE mesh.chunks SET state = 'd', token = NULL, holder = NULL, deadline = NULL\n"
	"   WHERE job = p_job AND cid = ANY(fresh) AND fails > 0 RETURNING cid)\n"
	" SELECT array_agg(x.cid) INTO rowed FROM (SELECT cid FROM del UNION ALL SELECT cid FROM upd) x;\n"
	" IF coalesce(array_length(fresh, 1), 0) > coalesce(array_length(rowed, 1), 0) THEN\n"
	"  WITH x AS (SELECT bl.lo, count(*) AS k FROM unnest(fresh) c\n"
	"    JOIN mesh.blocks bl ON bl.job = p_job AND bl.lo <= c AND bl.hi > c\n"
	"    WHERE rowed IS NULL OR NOT c = ANY(rowed) GROUP BY bl.lo),\n"
	"   z AS (UPDATE mesh.blocks b SET remaining = b.remaining - x.k FROM x WHERE b.job = p_job AND b.lo = x.lo\n"
	"    RETURNING b.lo, b.remaining)\n"
	"  SELECT array_agg(z.lo) FILTER (WHERE z.remaining <= 0) INTO zeroed FROM z;\n"
	"  IF zeroed IS NOT NULL THEN\n"
	"   DELETE FROM mesh.blocks WHERE job = p_job AND lo = ANY(zeroed);\n"
	"  END IF;\n"
	" END IF;\n"
	" newc := coalesce(array_length(fresh, 1), 0);\n"
	" dupc := coalesce(array_length(p_cids, 1), 0) - newc;\n"
	" INSERT INTO mesh.counts AS k (job, holder, done, dups) VALUES (p_job, p_holder, newc, dupc)\n"
	"  ON CONFLICT (job, holder) DO UPDATE SET done = k.done + excluded.done, dups = k.dups + excluded.dups;\n"
	" RETURN QUERY SELECT unnest(res);\n"
	"END $f$;\n"
	"CREATE FUNCTION mesh.split(p_job int, p_cid bigint, p_state \"char\", p_token bigint, p_deadline bigint)\n"
	" RETURNS boolean LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE b mesh.blocks; ins int;\n"
	"BEGIN\n"
	" SELECT * INTO b FROM mesh.blocks x WHERE x.job = p_job AND x.lo <= p_cid AND x.hi > p_cid FOR UPDATE;\n"
	" IF b.job IS NULL OR (p_token IS NOT NULL AND b.token + (p_cid - b.lo) <> p_token) THEN RETURN false; END IF;\n"
	" INSERT INTO mesh.chunks (job, cid, state, attempt, token, holder, deadline, started)\n"
	"  VALUES (p_job, p_cid, p_state, 1, CASE WHEN p_state = 'l' THEN p_token END,\n"
	"   CASE WHEN p_state = 'l' THEN b.holder END, p_deadline, b.started) ON CONFLICT DO NOTHING;\n"
	" GET DIAGNOSTICS ins = ROW_COUNT;\n"
	" IF ins > 0 THEN\n"
	"  UPDATE mesh.blocks SET remaining = remaining - 1 WHERE job = p_job AND lo = b.lo;\n"
	" END IF;\n"
	" RETURN ins > 0;\n"
	"END $f$;\n"
	"CREATE FUNCTION mesh.renew(p_job int, p_cid bigint, p_token bigint, p_ttl_us bigint) RETURNS bigint\n"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE dl bigint;\n"
	"BEGIN\n"
	" UPDATE mesh.chunks SET deadline = mesh.now_us() + p_ttl_us WHERE job = p_job AND cid = p_cid\n"
	"  AND token = p_token AND state = 'l' RETURNING deadline INTO dl;\n"
	" IF dl IS NULL AND NOT mesh.is_done(p_job, p_cid) THEN\n"
	"  dl := mesh.now_us() + p_ttl_us;\n"
	"  IF NOT mesh.split(p_job, p_cid, 'l', p_token, dl) THEN dl := NULL; END IF;\n"
	" END IF;\n"
	" RETURN dl;\n"
	"END $f$;\n"
	"CREATE FUNCTION mesh.release(p_job int, p_holder bigint) RETURNS bigint LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE n bigint; m bigint; b record;\n"
	"BEGIN\n"
	" UPDATE mesh.chunks SET state = 'p', token = NULL, holder = NULL\n"
	"  WHERE job = p_job AND holder = p_holder AND state = 'l';\n"
	" GET DIAGNOSTICS n = ROW_COUNT;\n"
	" FOR b IN SELECT x.lo FROM mesh.blocks x WHERE x.job = p_job AND x.holder = p_holder FOR UPDATE LOOP\n"
	"  m := mesh.unblock(p_job, b.lo, 'p');\n"
	"  n := n + m;\n"
	" END LOOP;\n"
	" PERFORM pg_notify('mesh', p_job::text);\n"
	" RETURN n;\n"
	"END $f$;\n"
	"DROP FUNCTION mesh.fail(int, bigint, int, int);\n"
	"CREATE FUNCTION mesh.fail(p_job int, p_cid bigint, p_status int, p_max int, p_holder bigint) RETURNS boolean\n"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE b boolean;\n"
	"BEGIN\n"
	" IF mesh.is_done(p_job, p_cid) THEN RETURN false; END IF;\n"
	" IF NOT mesh.split(p_job, p_cid, 'p', NULL, NULL) THEN\n"
	"  INSERT INTO mesh.chunks (job, cid, state) VALUES (p_job, p_cid, 'p') ON CONFLICT DO NOTHING;\n"
	" END IF;\n"
	" UPDATE mesh.chunks SET fails = fails + 1, last_status = p_status,\n"
	"  state = CASE WHEN fails + 1 - base >= p_max THEN 'b' ELSE 'p' END,\n"
	"  token = NULL, holder = NULL, deadline = NULL\n"
	"  WHERE job = p_job AND cid = p_cid RETURNING state = 'b' INTO b;\n"
	" INSERT INTO mesh.counts AS k (job, holder, failed) VALUES (p_job, p_holder, 1)\n"
	"  ON CONFLICT (job, holder) DO UPDATE SET failed = k.failed + 1;\n"
	" IF NOT b THEN PERFORM pg_notify('mesh', p_job::text); END IF;\n"
	" RETURN b;\n"
	"END $f$;\n"
	"CREATE FUNCTION mesh.held(p_job int, p_live boolean) RETURNS bigint LANGUAGE sql STABLE AS\n"
	" $$ SELECT (SELECT count(*) FROM mesh.chunks c WHERE c.job = p_job AND c.state = 'l'\n"
	"     AND (NOT p_live OR c.deadline >= mesh.now_us()))\n"
	"  + (SELECT coalesce(sum(b.remaining), 0) FROM mesh.blocks b WHERE b.job = p_job\n"
	"     AND (NOT p_live OR b.deadline >= mesh.now_us())) $$;\n",
	/* 4 -> 5: no call scans the job's DONE words.  Version 4's lease,
	 * completion and unblock joined mesh.done_words on the job alone
	 * (hash joins over every word of the job: 36 rows read a chunk at
	 * 100,000 chunks, growing with the job); now each reads only the
	 * words of its own chunks (a range, or w = ANY).  A completion also
	 * writes a word it is the first to reach with its bits at once (one
	 * INSERT; the lock-read-update of version 4 only for words that
	 * exist), and deletes a block it finishes without updating it
	 * first. */
	/* The fresh-lease cursor without a queue on the job's row: a fresh
	 * lease takes from a range carved off the cursor (SKIP LOCKED, one
	 * row a range: [lo, hi), lo moving up) while one is free, else from
	 * the cursor; one that finds the cursor's row locked by another
	 * waits for it, and then carves the next 32 leases' worth off for
	 * those behind it.  Chunks of a range are fresh as the cursor's
	 * are (a range exists only under contention: one node alone leases
	 * in cid order). */
	"CREATE TABLE mesh.ranges (job int NOT NULL, hi bigint NOT NULL, lo bigint NOT NULL, PRIMARY KEY (job, hi));\n"
	/* The DONE chunks of [lo, hi): the words of the range only
	 * (plpgsql: its plan is kept, a sql function's is made each call). */
	"CREATE FUNCTION mesh.done_in(p_job int, p_lo bigint, p_hi bigint) RETURNS bigint[] LANGUAGE plpgsql STABLE AS $f$\n"
	"BEGIN\n"
	" RETURN (SELECT coalesce(array_agg(d.w * 64 + b), '{}') FROM mesh.done_words d, generate_series(0, 63) b\n"
	"  WHERE d.job = p_job AND d.w >= p_lo / 64 AND d.w <= (p_hi - 1) / 64 AND d.bits <> 0\n"
	"   AND d.bits & (1::bigint << b) <> 0 AND d.w * 64 + b >= p_lo AND d.w * 64 + b < p_hi);\n"
	"END $f$;\n"
	"CREATE OR REPLACE FUNCTION mesh.unblock(p_job int, p_lo bigint, p_state \"char\") RETURNS bigint\n"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE b mesh.blocks; got bigint; skip bigint[];\n"
	"BEGIN\n"
	" DELETE FROM mesh.blocks x WHERE x.job = p_job AND x.lo = p_lo RETURNING * INTO b;\n"
	" IF b.job IS NULL THEN RETURN 0; END IF;\n"
	" skip := mesh.done_in(p_job, b.lo, b.hi);\n"
	" INSERT INTO mesh.chunks (job, cid, state, attempt, token, holder, deadline, started)\n"
	"  SELECT p_job, g, p_state, 1, CASE WHEN p_state = 'l' THEN b.token + (g - b.lo) END,\n"
	"   CASE WHEN p_state = 'l' THEN b.holder END, b.deadline, b.started\n"
	"  FROM generate_series(b.lo, b.hi - 1) g WHERE g <> ALL(skip)\n"
	"  ON CONFLICT DO NOTHING;\n"
	" GET DIAGNOSTICS got = ROW_COUNT;\n"
	" RETURN got;\n"
	"END $f$;\n"
	"CREATE OR REPLACE FUNCTION mesh.lease(p_job int, p_k int, p_ttl_us bigint, p_holder bigint)\n"
	" RETURNS TABLE(cid bigint, attempt int, stolen boolean, deadline bigint, started bigint, token bigint)\n"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE t bigint := mesh.now_us(); got int := 0; lo bigint; hi bigint; silent bigint[]; cand bigint[];\n"
	" b record; tok bigint; nb int; skip bigint[]; n bigint; rhi bigint;\n"
	"BEGIN\n"
	" SELECT array_agg(n.holder) INTO silent FROM mesh.nodes n WHERE n.job = p_job AND n.beat + n.ttl_us < t;\n"
	" FOR b IN SELECT x.lo FROM mesh.blocks x WHERE x.job = p_job AND (x.deadline < t OR x.holder = ANY(silent))\n"
	"  FOR UPDATE SKIP LOCKED LOOP\n"
	"  PERFORM mesh.unblock(p_job, b.lo, 'l');\n"
	" END LOOP;\n"
	" SELECT array_agg(x.c) INTO cand FROM (\n"
	"  (SELECT ch.cid AS c FROM mesh.chunks ch WHERE ch.job = p_job AND ch.state = 'p' ORDER BY ch.cid LIMIT p_k)\n"
	"  UNION (SELECT ch.cid FROM mesh.chunks ch WHERE ch.job = p_job AND ch.state = 'l' AND ch.deadline < t\n"
	"   ORDER BY ch.deadline LIMIT p_k)\n"
	"  UNION (SELECT ch.cid FROM mesh.chunks ch WHERE silent IS NOT NULL AND ch.job = p_job AND ch.state = 'l'\n"
	"   AND ch.holder = ANY(silent) LIMIT p_k)) x;\n"
	" IF cand IS NOT NULL THEN\n"
	"  RETURN QUERY WITH c AS (SELECT ch.cid AS c, ch.state AS s FROM mesh.chunks ch WHERE ch.job = p_job\n"
	"    AND ch.cid = ANY(cand) AND (ch.state = 'p' OR (ch.state = 'l' AND (ch.deadline < t OR ch.holder = ANY(silent))))\n"
	"    ORDER BY ch.cid LIMIT p_k FOR UPDATE OF ch SKIP LOCKED)\n"
	"   UPDATE mesh.chunks ch SET state = 'l', attempt = ch.attempt + 1,\n"
	"    token = (random() * 9.2e18)::bigint, holder = p_holder, deadline = t + p_ttl_us, started = t\n"
	"    FROM c WHERE ch.job = p_job AND ch.cid = c.c\n"
	"    RETURNING ch.cid, ch.attempt, c.s = 'l', ch.deadline, ch.started, ch.token;\n"
	"  GET DIAGNOSTICS got = ROW_COUNT;\n"
	" END IF;\n"
	" IF got < p_k THEN\n"
	/* a range carved off the cursor (below it) first */
	"  SELECT r.lo, r.hi INTO lo, rhi FROM mesh.ranges r WHERE r.job = p_job ORDER BY r.hi LIMIT 1\n"
	"   FOR UPDATE SKIP LOCKED;\n"
	"  IF FOUND THEN\n"
	"   hi := LEAST(rhi, lo + p_k - got);\n"
	"   IF hi >= rhi THEN DELETE FROM mesh.ranges WHERE job = p_job AND hi = rhi;\n"
	"   ELSE UPDATE mesh.ranges SET lo = lo + (p_k - got) WHERE job = p_job AND hi = rhi; END IF;\n"
	"  ELSE\n"
	"   SELECT j.next, j.n INTO lo, n FROM mesh.jobs j WHERE j.id = p_job FOR UPDATE SKIP LOCKED;\n"
	"   IF FOUND THEN\n"
	"    hi := LEAST(n, lo + p_k - got);\n"
	"    UPDATE mesh.jobs SET next = hi WHERE id = p_job AND hi > lo;\n"
	"   ELSE\n"
	/* another lease holds the cursor: wait for it, and carve the next
	 * leases' worth off for those behind */
	"    SELECT j.next, j.n INTO lo, n FROM mesh.jobs j WHERE j.id = p_job FOR UPDATE;\n"
	"    hi := LEAST(n, lo + p_k - got);\n"
	"    rhi := LEAST(n, hi + 32 * p_k);\n"
	"    IF rhi > hi THEN INSERT INTO mesh.ranges VALUES (p_job, rhi, hi); END IF;\n"
	"    UPDATE mesh.jobs SET next = rhi WHERE id = p_job AND rhi > lo;\n"
	"   END IF;\n"
	"  END IF;\n"
	"  IF hi > lo THEN\n"
	"   tok := (random() * 4.6e18)::bigint;\n"
	/* past the cursor a chunk may be DONE (a completion of a chunk never
	 * leased) or have a row (a failure reported for it): both skipped */
	"   SELECT mesh.done_in(p_job, lo, hi) || coalesce(array_agg(ch.cid), '{}') INTO skip FROM mesh.chunks ch\n"
	"    WHERE ch.job = p_job AND ch.cid >= lo AND ch.cid < hi;\n"
	"   RETURN QUERY SELECT g, 1, false, t + p_ttl_us, t, tok + (g - lo)\n"
	"    FROM generate_series(lo, hi - 1) g WHERE g <> ALL(skip);\n"
	"   GET DIAGNOSTICS nb = ROW_COUNT;\n"
	"   IF nb > 0 THEN\n"
	"    INSERT INTO mesh.blocks VALUES (p_job, lo, hi, p_holder, tok, t + p_ttl_us, t, nb);\n"
	"   END IF;\n"
	"  END IF;\n"
	" END IF;\n"
	"END $f$;\n"
	/* First completion wins.  A word no completion reached yet is
	 * inserted with the batch's bits (ON CONFLICT DO NOTHING: a
	 * concurrent first insert of the same word makes this one wait for
	 * it, then go the other way); the words that exist are locked
	 * (ascending) and read, and only the bits not yet set are new. */
	"CREATE OR REPLACE FUNCTION mesh.complete(p_job int, p_cids bigint[], p_holder bigint) RETURNS SETOF boolean\n"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE res boolean[]; fresh bigint[]; rowed bigint[]; ws bigint[]; ms bigint[]; ins bigint[];\n"
	" ow bigint[]; ob bigint[]; blo bigint[]; bk int[]; gone bigint[]; zeroed bigint[]; newc int; dupc int;\n"
	"BEGIN\n"
	" SELECT array_agg(x.w ORDER BY x.w), array_agg(x.m ORDER BY x.w) INTO ws, ms FROM (SELECT c / 64 AS w,\n"
	"   bit_or(1::bigint << (c % 64)::int) AS m FROM unnest(p_cids) c GROUP BY 1) x;\n"
	" WITH i AS (INSERT INTO mesh.done_words (job, w, bits) SELECT p_job, x.w, x.m FROM unnest(ws, ms) AS x(w, m)\n"
	"   ORDER BY x.w ON CONFLICT DO NOTHING RETURNING w)\n"
	" SELECT coalesce(array_agg(i.w), '{}') INTO ins FROM i;\n"
	" IF cardinality(ins) < cardinality(ws) THEN\n"
	"  SELECT array_agg(o.w ORDER BY o.w), array_agg(o.bits ORDER BY o.w) INTO ow, ob FROM (SELECT d.w, d.bits\n"
	"    FROM mesh.done_words d WHERE d.job = p_job AND d.w = ANY(ws) AND d.w <> ALL(ins) ORDER BY d.w FOR UPDATE) o;\n"
	" END IF;\n"
	" WITH u AS (SELECT c, i, row_number() OVER (PARTITION BY c ORDER BY i) AS r\n"
	"   FROM unnest(p_cids) WITH ORDINALITY AS x(c, i)),\n"
	"  v AS (SELECT u.c, u.i, u.r = 1 AND coalesce(o.bits & (1::bigint << (u.c % 64)::int), 0) = 0 AS isnew\n"
	"   FROM u LEFT JOIN unnest(ow, ob) AS o(w, bits) ON o.w = u.c / 64)\n"
	" SELECT array_agg(v.isnew ORDER BY v.i), array_agg(v.c) FILTER (WHERE v.isnew) INTO res, fresh FROM v;\n"
	" IF ow IS NOT NULL THEN\n"
	"  UPDATE mesh.done_words d SET bits = d.bits | x.m FROM (SELECT c / 64 AS w,\n"
	"    bit_or(1::bigint << (c % 64)::int) AS m FROM unnest(fresh) c WHERE c / 64 = ANY(ow) GROUP BY 1) x\n"
	"   WHERE d.job = p_job AND d.w = ANY(ow) AND d.w = x.w;\n"
	" END IF;\n"
	" WITH del AS (DELETE FROM mesh.chunks WHERE job = p_job AND cid = ANY(fresh) AND fails = 0 RETURNING cid),\n"
	"  upd AS (UPDATE mesh.chunks SET state = 'd', token = NULL, holder = NULL, deadline = NULL\n"
	"   WHERE job = p_job AND cid = ANY(fresh) AND fails > 0 RETURNING cid)\n"
	" SELECT array_agg(x.cid) INTO rowed FROM (SELECT cid FROM del UNION ALL SELECT cid FROM upd) x;\n"
	" IF coalesce(cardinality(fresh), 0) > coalesce(cardinality(rowed), 0) THEN\n"
	/* a chunk of no row of its own is leased by the block holding it:
	 * the job's live blocks are few (about one a node) */
	"  SELECT array_agg(x.lo ORDER BY x.lo), array_agg(x.k ORDER BY x.lo) INTO blo, bk FROM (SELECT bl.lo, count(*)::int AS k\n"
	"    FROM unnest(fresh) c JOIN (SELECT b.lo, b.hi FROM mesh.blocks b WHERE b.job = p_job\n"
	"     AND b.lo <= (SELECT max(f) FROM unnest(fresh) f)) bl ON bl.lo <= c AND bl.hi > c\n"
	"    WHERE rowed IS NULL OR c <> ALL(rowed) GROUP BY bl.lo) x;\n"
	"  IF blo IS NOT NULL THEN\n"
	/* a block this batch finishes goes at once; the others count down
	 * (and go when that reaches 0: a split between the two) */
	"   WITH d AS (DELETE FROM mesh.blocks b USING unnest(blo, bk) AS x(lo, k)\n"
	"     WHERE b.job = p_job AND b.lo = ANY(blo) AND b.lo = x.lo AND b.remaining <= x.k RETURNING b.lo)\n"
	"   SELECT coalesce(array_agg(d.lo), '{}') INTO gone FROM d;\n"
	"   IF cardinality(gone) < cardinality(blo) THEN\n"
	"    WITH z AS (UPDATE mesh.blocks b SET remaining = b.remaining - x.k FROM unnest(blo, bk) AS x(lo, k)\n"
	"      WHERE b.job = p_job AND b.lo = ANY(blo) AND b.lo <> ALL(gone) AND b.lo = x.lo RETURNING b.lo, b.remaining)\n"
	"    SELECT array_agg(z.lo) FILTER (WHERE z.remaining <= 0) INTO zeroed FROM z;\n"
	"    IF zeroed IS NOT NULL THEN\n"
	"     DELETE FROM mesh.blocks WHERE job = p_job AND lo = ANY(zeroed);\n"
	"    END IF;\n"
	"   END IF;\n"
	"  END IF;\n"
	" END IF;\n"
	" newc := coalesce(cardinality(fresh), 0);\n"
	" dupc := coalesce(cardinality(p_cids), 0) - newc;\n"
	" INSERT INTO mesh.counts AS k (job, holder, done, dups) VALUES (p_job, p_holder, newc, dupc)\n"
	"  ON CONFLICT (job, holder) DO UPDATE SET done = k.done + excluded.done, dups = k.dups + excluded.dups;\n"
	" RETURN QUERY SELECT unnest(res);\n"
	"END $f$;\n",
	/* 5 -> 6: speculation, the file store's rule (docs/job.md).  The
	 * straggler threshold needs the job's completed durations: each
	 * handle adds its own to mesh.durations (a log histogram, one row a
	 * handle and bucket), not in the completion's statement but every
	 * quarter second and when it runs out of work, so a completion costs
	 * what it did.  A copy of a straggler is a row of mesh.copies (at
	 * most one a slot, slots 1..spec_max_copies: the primary key), taken
	 * when its slot is free or its copy expired; the chunk's own lease
	 * (a row of mesh.chunks, or a block's) is left as it is.  A copy
	 * completes through mesh.spec_complete: the DONE of mesh.complete
	 * and, for a first completion, the win in mesh.counts.spec, in one
	 * transaction. */
	"ALTER TABLE mesh.counts ADD COLUMN spec bigint NOT NULL DEFAULT 0;\n"
	"CREATE OR REPLACE VIEW mesh.job_counts AS SELECT j.id, j.name, j.n, coalesce(sum(c.done), 0)::bigint AS done,\n"
	" coalesce(sum(c.dups), 0)::bigint AS dups, coalesce(sum(c.failed), 0)::bigint AS failed,\n"
	" coalesce(sum(c.spec), 0)::bigint AS spec FROM mesh.jobs j LEFT JOIN mesh.counts c ON c.job = j.id GROUP BY j.id;\n"
	"CREATE TABLE mesh.durations (job int NOT NULL, holder bigint NOT NULL, b int NOT NULL, n bigint NOT NULL,\n"
	" PRIMARY KEY (job, holder, b));\n"
	"CREATE TABLE mesh.copies (job int NOT NULL, cid bigint NOT NULL, slot int NOT NULL, holder bigint NOT NULL,\n"
	" token bigint NOT NULL, attempt int NOT NULL, deadline bigint NOT NULL, started bigint NOT NULL,\n"
	" PRIMARY KEY (job, cid, slot));\n"
	/* The live leases of other nodes (by name: a node never copies its
	 * own) that have run longer than p_thr_us and have a free copy slot,
	 * the longest-running first, each with its holder's speed (every
	 * handle of that name: chunks, summed durations). */
	"CREATE FUNCTION mesh.stragglers(p_job int, p_holder bigint, p_name text, p_copies int, p_thr_us bigint,\n"
	" p_limit int) RETURNS TABLE(cid bigint, elapsed bigint, attempt int, chunks bigint, busy_us bigint)\n"
	" LANGUAGE plpgsql STABLE AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE t bigint := mesh.now_us();\n"
	"BEGIN\n"
	" RETURN QUERY WITH live AS (\n"
	"   SELECT ch.cid AS c, ch.holder AS h, ch.started AS s, ch.attempt AS a FROM mesh.chunks ch\n"
	"    WHERE ch.job = p_job AND ch.state = 'l' AND ch.deadline >= t AND ch.holder <> p_holder\n"
	"     AND ch.started < t - p_thr_us\n"
	"   UNION ALL\n"
	"   SELECT g, b.holder, b.started, 1 FROM mesh.blocks b, generate_series(b.lo, b.hi - 1) g\n"
	"    WHERE b.job = p_job AND b.deadline >= t AND b.holder <> p_holder AND b.started < t - p_thr_us\n"
	"     AND NOT EXISTS (SELECT 1 FROM mesh.chunks ch WHERE ch.job = p_job AND ch.cid = g)\n"
	"     AND NOT mesh.is_done(p_job, g)),\n"
	"  named AS (SELECT l.c, l.s, l.a, n.name FROM live l LEFT JOIN mesh.nodes n ON n.holder = l.h)\n"
	" SELECT x.c, t - x.s, x.a, coalesce(sp.k, 0)::bigint, coalesce(sp.us, 0)::bigint FROM named x\n"
	"  LEFT JOIN LATERAL (SELECT sum(m.chunks) AS k, sum(m.busy_us) AS us FROM mesh.nodes m\n"
	"   WHERE m.job = p_job AND m.name = x.name) sp ON true\n"
	"  WHERE (x.name IS NULL OR x.name <> p_name)\n"
	"   AND (SELECT count(*) FROM mesh.copies cp WHERE cp.job = p_job AND cp.cid = x.c AND cp.deadline >= t) < p_copies\n"
	"   AND NOT EXISTS (SELECT 1 FROM mesh.copies cp WHERE cp.job = p_job AND cp.cid = x.c AND cp.holder = p_holder\n"
	"    AND cp.deadline >= t)\n"
	"  ORDER BY x.s, x.c LIMIT p_limit;\n"
	"END $f$;\n"
	/* A copy of p_cid for p_holder in the first free slot, while the chunk
	 * is not DONE and still leased by another: its slot, attempt (the
	 * lease's), deadline, start and token; no row when it cannot be. */
	"CREATE FUNCTION mesh.spec_claim(p_job int, p_cid bigint, p_copies int, p_holder bigint, p_ttl_us bigint)\n"
	" RETURNS TABLE(slot int, attempt int, deadline bigint, started bigint, token bigint) LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE t bigint := mesh.now_us(); a int;\n"
	"BEGIN\n"
	" DELETE FROM mesh.copies cp WHERE cp.job = p_job AND cp.deadline < t AND mesh.is_done(p_job, cp.cid);\n"
	" IF mesh.is_done(p_job, p_cid) THEN RETURN; END IF;\n"
	" SELECT ch.attempt INTO a FROM mesh.chunks ch WHERE ch.job = p_job AND ch.cid = p_cid AND ch.state = 'l'\n"
	"  AND ch.deadline >= t AND ch.holder <> p_holder;\n"
	" IF a IS NULL THEN\n"
	"  IF EXISTS (SELECT 1 FROM mesh.chunks ch WHERE ch.job = p_job AND ch.cid = p_cid) THEN RETURN; END IF;\n"
	"  IF NOT EXISTS (SELECT 1 FROM mesh.blocks b WHERE b.job = p_job AND b.lo <= p_cid AND b.hi > p_cid\n"
	"   AND b.deadline >= t AND b.holder <> p_holder) THEN RETURN; END IF;\n"
	"  a := 1;\n"
	" END IF;\n"
	" FOR k IN 1..p_copies LOOP\n"
	"  RETURN QUERY INSERT INTO mesh.copies AS cp VALUES (p_job, p_cid, k, p_holder, (random() * 9.2e18)::bigint, a,\n"
	"    t + p_ttl_us, t)\n"
	"   ON CONFLICT (job, cid, slot) DO UPDATE SET holder = excluded.holder, token = excluded.token,\n"
	"    attempt = excluded.attempt, deadline = excluded.deadline, started = excluded.started WHERE cp.deadline < t\n"
	"   RETURNING cp.slot, cp.attempt, cp.deadline, cp.started, cp.token;\n"
	"  IF FOUND THEN RETURN; END IF;\n"
	" END LOOP;\n"
	"END $f$;\n"
	/* Renews our copy (its token): the new deadline, or NULL (and the row
	 * gone) when the chunk is DONE or the copy was taken over. */
	"CREATE FUNCTION mesh.spec_renew(p_job int, p_cid bigint, p_token bigint, p_ttl_us bigint) RETURNS bigint\n"
	" LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE dl bigint;\n"
	"BEGIN\n"
	" IF NOT mesh.is_done(p_job, p_cid) THEN\n"
	"  UPDATE mesh.copies SET deadline = mesh.now_us() + p_ttl_us WHERE job = p_job AND cid = p_cid\n"
	"   AND token = p_token RETURNING deadline INTO dl;\n"
	" END IF;\n"
	" IF dl IS NULL THEN DELETE FROM mesh.copies WHERE job = p_job AND cid = p_cid AND token = p_token; END IF;\n"
	" RETURN dl;\n"
	"END $f$;\n"
	/* Completions of our copies (p_cids ascending): mesh.complete's
	 * answers; each DONE is a speculative win, counted in the same
	 * transaction; the copies' rows go. */
	"CREATE FUNCTION mesh.spec_complete(p_job int, p_cids bigint[], p_holder bigint, p_busy_us bigint)\n"
	" RETURNS SETOF boolean LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE res boolean[]; wins int;\n"
	"BEGIN\n"
	" UPDATE mesh.nodes SET chunks = chunks + cardinality(p_cids), busy_us = busy_us + p_busy_us,\n"
	"  beat = mesh.now_us() WHERE holder = p_holder;\n"
	" SELECT array_agg(r.x ORDER BY r.i) INTO res FROM mesh.complete(p_job, p_cids, p_holder) WITH ORDINALITY AS r(x, i);\n"
	" SELECT count(*) INTO wins FROM unnest(res) AS w(x) WHERE w.x;\n"
	" DELETE FROM mesh.copies WHERE job = p_job AND cid = ANY(p_cids) AND holder = p_holder;\n"
	" IF wins > 0 THEN\n"
	"  INSERT INTO mesh.counts AS k (job, holder, spec) VALUES (p_job, p_holder, wins)\n"
	"   ON CONFLICT (job, holder) DO UPDATE SET spec = k.spec + excluded.spec;\n"
	" END IF;\n"
	" RETURN QUERY SELECT unnest(res);\n"
	"END $f$;\n"
	/* A failed run of our copy: the copy goes, the attempt is counted on
	 * its chunk (a block's chunk split out first, its lease and token
	 * kept), and the chunk's own lease is left alone -- the primary runs
	 * on.  false when it was no longer our copy or the chunk is DONE. */
	"CREATE FUNCTION mesh.spec_fail(p_job int, p_cid bigint, p_token bigint, p_status int, p_holder bigint)\n"
	" RETURNS boolean LANGUAGE plpgsql AS $f$\n"
	"#variable_conflict use_column\n"
	"DECLARE b mesh.blocks;\n"
	"BEGIN\n"
	" DELETE FROM mesh.copies WHERE job = p_job AND cid = p_cid AND token = p_token;\n"
	" IF NOT FOUND OR mesh.is_done(p_job, p_cid) THEN RETURN false; END IF;\n"
	" SELECT * INTO b FROM mesh.blocks x WHERE x.job = p_job AND x.lo <= p_cid AND x.hi > p_cid;\n"
	" IF b.job IS NOT NULL THEN PERFORM mesh.split(p_job, p_cid, 'l', b.token + (p_cid - b.lo), b.deadline); END IF;\n"
	" UPDATE mesh.chunks SET fails = fails + 1, last_status = p_status WHERE job = p_job AND cid = p_cid;\n"
	" INSERT INTO mesh.counts AS k (job, holder, failed) VALUES (p_job, p_holder, 1)\n"
	"  ON CONFLICT (job, holder) DO UPDATE SET failed = k.failed + 1;\n"
	" RETURN true;\n"
	"END $f$;\n",
};
#define MESH_PG_NMIGRATIONS (sizeof MESH_PG_MIGRATIONS / sizeof MESH_PG_MIGRATIONS[0])

#endif
