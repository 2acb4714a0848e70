-- The store's functions, as this version of mesh defines them (the tables
-- are the steps 001.sql ... in this directory).  After the steps that a
-- migration runs, in the same transaction, every function of the schema
-- is dropped and these are made: a database migrated from any version
-- has the functions a fresh one has.  A change here is a new schema
-- version (a step file, comments alone where no table changes), so that
-- `mesh store migrate` brings it to existing databases.
--
-- Times are the database's clock in microseconds since the epoch.  A
-- lease is a row of mesh.chunks (state 'l') or, fresh off the cursor, a
-- block (mesh.blocks: lo, hi, holder, the token a chunk derives from
-- the block's, deadline, the count of its chunks neither DONE nor split
-- out).  First completion wins: a DONE bit in mesh.done_words.
--
-- The locking rule (version 8): every transaction that makes a chunk's
-- row or hands out its lease reads the chunk's DONE bit only once it
-- holds a lock that a completion of that chunk takes before it reads the
-- chunk's rows: the block that leases it (an unblock, a split) or its
-- DONE word (a failure's row of a chunk of no block); so a completion
-- either committed before (its bit is read, no row is made) or waits
-- for that commit (and sees the rows made, and deletes them).
DO $d$
DECLARE f regprocedure;
BEGIN
 FOR f IN SELECT p.oid FROM pg_proc p WHERE p.pronamespace = 'mesh'::regnamespace LOOP
  EXECUTE 'DROP FUNCTION ' || f::text;
 END LOOP;
END $d$;

-- The database's clock: microseconds since the epoch.
CREATE FUNCTION mesh.now_us() RETURNS bigint LANGUAGE sql VOLATILE AS
 $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint $$;

-- Whether chunk p_cid is DONE.
CREATE FUNCTION mesh.is_done(p_job int, p_cid bigint) RETURNS boolean LANGUAGE sql STABLE AS
 $$ SELECT coalesce((SELECT d.bits & (1::bigint << (p_cid % 64)::int) <> 0 FROM mesh.done_words d
    WHERE d.job = p_job AND d.w = p_cid / 64), false) $$;

-- The DONE chunks of [lo, hi): the words of the range only
-- (plpgsql: its plan is kept, a sql function's is made each call).
CREATE FUNCTION mesh.done_in(p_job int, p_lo bigint, p_hi bigint) RETURNS bigint[] LANGUAGE plpgsql STABLE AS $f$
BEGIN
 RETURN (SELECT coalesce(array_agg(d.w * 64 + b), '{}') FROM mesh.done_words d, generate_series(0, 63) b
  WHERE d.job = p_job AND d.w >= p_lo / 64 AND d.w <= (p_hi - 1) / 64 AND d.bits <> 0
   AND d.bits & (1::bigint << b) <> 0 AND d.w * 64 + b >= p_lo AND d.w * 64 + b < p_hi);
END $f$;

-- A block's whole range gets rows (state p_state: 'l' keeps the
-- block's holder, token and deadline; 'p' lets them go) when it
-- expires, its holder went silent or handed it back; the block goes.
-- The DONE bits are read under the block's row lock, which a completion
-- takes before it reads rows.  How many rows were made.
CREATE FUNCTION mesh.unblock(p_job int, p_lo bigint, p_state "char") RETURNS bigint
 LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE b mesh.blocks; got bigint; skip bigint[];
BEGIN
 DELETE FROM mesh.blocks x WHERE x.job = p_job AND x.lo = p_lo RETURNING * INTO b;
 IF b.job IS NULL THEN RETURN 0; END IF;
 skip := mesh.done_in(p_job, b.lo, b.hi);
 INSERT INTO mesh.chunks (job, cid, state, attempt, token, holder, deadline, started)
  SELECT p_job, g, p_state, 1, CASE WHEN p_state = 'l' THEN b.token + (g - b.lo) END,
   CASE WHEN p_state = 'l' THEN b.holder END, b.deadline, b.started
  FROM generate_series(b.lo, b.hi - 1) g WHERE g <> ALL(skip)
  ON CONFLICT DO NOTHING;
 GET DIAGNOSTICS got = ROW_COUNT;
 RETURN got;
END $f$;

-- Chunk p_cid of a block gets a row of its own (renewed, failed or
-- handed back), its lease kept when p_token is the block's token for
-- it; the DONE bit read again under the block's lock (a completion that
-- held it has committed).  false when no block holds it, the token is
-- not the block's, or it is DONE.
CREATE FUNCTION mesh.split(p_job int, p_cid bigint, p_state "char", p_token bigint, p_deadline bigint)
 RETURNS boolean LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE b mesh.blocks; ins int;
BEGIN
 SELECT * INTO b FROM mesh.blocks x WHERE x.job = p_job AND x.lo <= p_cid AND x.hi > p_cid FOR UPDATE;
 IF b.job IS NULL OR (p_token IS NOT NULL AND b.token + (p_cid - b.lo) <> p_token) THEN RETURN false; END IF;
 IF mesh.is_done(p_job, p_cid) THEN RETURN false; END IF;
 INSERT INTO mesh.chunks (job, cid, state, attempt, token, holder, deadline, started)
  VALUES (p_job, p_cid, p_state, 1, CASE WHEN p_state = 'l' THEN p_token END,
   CASE WHEN p_state = 'l' THEN b.holder END, p_deadline, b.started) ON CONFLICT DO NOTHING;
 GET DIAGNOSTICS ins = ROW_COUNT;
 IF ins > 0 THEN
  UPDATE mesh.blocks SET remaining = remaining - 1 WHERE job = p_job AND lo = b.lo;
 END IF;
 RETURN ins > 0;
END $f$;

-- Up to p_k leases for p_holder: expired and let-go chunk rows first,
-- and those of silent nodes (past their beat's TTL, when the lease is
-- further ahead than that: one renewed far ahead), found through the
-- partial indexes (at most p_k candidates each) and locked with their
-- condition checked again (SKIP LOCKED: one thief a chunk); an expired
-- or silent node's block is unblocked first.  Then fresh chunks as one
-- block: from a range carved off the cursor (mesh.ranges, SKIP LOCKED)
-- while one is free, else from the cursor (the job's row); one that
-- finds the cursor's row locked by another waits for it, and then
-- carves the next 32 leases' worth off for those behind it.  The job's
-- row is read first (a LOCK TABLE of mesh.jobs makes a lease wait there,
-- holding nothing a completion would wait for).  A lease that expired
-- while the database was down (its deadline before the server's start)
-- is not taken in its node's first TTL after that start, nor is the node
-- silent then: every node, which waited out the outage, renews what it
-- holds before another can take it.
CREATE FUNCTION mesh.lease(p_job int, p_k int, p_ttl_us bigint, p_holder bigint)
 RETURNS TABLE(cid bigint, attempt int, stolen boolean, deadline bigint, started bigint, token bigint)
 LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE t bigint; got int := 0; lo bigint; hi bigint; silent bigint[]; cand bigint[]; stale bigint[];
 b record; tok bigint; nb int; skip bigint[]; n bigint; rhi bigint; un int := 0; st bigint; kept bigint[];
BEGIN
 -- the job's row first (a table lock waited for here, holding
 -- nothing), and the clock after it; the nodes still in their first
 -- TTL since the database started (kept), and those silent
 st := (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint;
 SELECT x.t, (SELECT array_agg(n.holder) FROM mesh.nodes n WHERE n.job = p_job AND n.beat + n.ttl_us < x.t
   AND x.t >= st + n.ttl_us),
  (SELECT coalesce(array_agg(n.holder), '{}') FROM mesh.nodes n WHERE n.job = p_job AND x.t < st + n.ttl_us)
  INTO t, silent, kept FROM (SELECT mesh.now_us() AS t FROM mesh.jobs j WHERE j.id = p_job) x;
 FOR b IN SELECT x.lo FROM mesh.blocks x WHERE x.job = p_job AND ((x.deadline < t AND (x.deadline >= st OR x.holder <> ALL(kept))) OR (x.holder = ANY(silent)
   AND EXISTS (SELECT 1 FROM mesh.nodes n WHERE n.holder = x.holder AND x.deadline > t + n.ttl_us)))
  FOR UPDATE SKIP LOCKED LOOP
  PERFORM mesh.unblock(p_job, b.lo, 'l');
  un := un + 1;
 END LOOP;
 SELECT array_agg(x.c) FILTER (WHERE NOT mesh.is_done(p_job, x.c)), array_agg(x.c) FILTER (WHERE mesh.is_done(p_job, x.c))
  INTO cand, stale FROM (
  (SELECT ch.cid AS c FROM mesh.chunks ch WHERE ch.job = p_job AND ch.state = 'p' ORDER BY ch.cid LIMIT p_k)
  UNION (SELECT ch.cid FROM mesh.chunks ch WHERE ch.job = p_job AND ch.state = 'l' AND ch.deadline < t
   ORDER BY ch.deadline LIMIT p_k)
  UNION (SELECT ch.cid FROM mesh.chunks ch WHERE silent IS NOT NULL AND ch.job = p_job AND ch.state = 'l'
   AND ch.holder = ANY(silent) LIMIT p_k)) x;
 -- rows of DONE chunks no version 8 leaves (defence: they go)
 IF stale IS NOT NULL THEN
  DELETE FROM mesh.chunks ch WHERE ch.job = p_job AND ch.cid = ANY(stale) AND ch.fails = 0;
  UPDATE mesh.chunks ch SET state = 'd', token = NULL, holder = NULL, deadline = NULL
   WHERE ch.job = p_job AND ch.cid = ANY(stale) AND ch.fails > 0;
 END IF;
 IF cand IS NOT NULL THEN
  RETURN QUERY WITH c AS (SELECT ch.cid AS c, ch.state AS s FROM mesh.chunks ch WHERE ch.job = p_job
    AND ch.cid = ANY(cand) AND (ch.state = 'p' OR (ch.state = 'l' AND ((ch.deadline < t AND (ch.deadline >= st OR ch.holder <> ALL(kept))) OR
     (ch.holder = ANY(silent) AND EXISTS (SELECT 1 FROM mesh.nodes n WHERE n.holder = ch.holder AND ch.deadline > t + n.ttl_us)))))
    AND NOT mesh.is_done(p_job, ch.cid)
    ORDER BY ch.cid LIMIT p_k FOR UPDATE OF ch SKIP LOCKED)
   UPDATE mesh.chunks ch SET state = 'l', attempt = ch.attempt + 1,
    token = (random() * 9.2e18)::bigint, holder = p_holder, deadline = t + p_ttl_us, started = t
    FROM c WHERE ch.job = p_job AND ch.cid = c.c
    RETURNING ch.cid, ch.attempt, c.s = 'l', ch.deadline, ch.started, ch.token;
  GET DIAGNOSTICS got = ROW_COUNT;
 END IF;
 IF got < p_k THEN
  SELECT r.lo, r.hi INTO lo, rhi FROM mesh.ranges r WHERE r.job = p_job ORDER BY r.hi LIMIT 1
   FOR UPDATE SKIP LOCKED;
  IF FOUND THEN
   hi := LEAST(rhi, lo + p_k - got);
   IF hi >= rhi THEN DELETE FROM mesh.ranges WHERE job = p_job AND hi = rhi;
   ELSE UPDATE mesh.ranges SET lo = lo + (p_k - got) WHERE job = p_job AND hi = rhi; END IF;
  ELSE
   SELECT j.next, j.n INTO lo, n FROM mesh.jobs j WHERE j.id = p_job FOR UPDATE SKIP LOCKED;
   IF FOUND THEN
    hi := LEAST(n, lo + p_k - got);
    UPDATE mesh.jobs SET next = hi WHERE id = p_job AND hi > lo;
   ELSE
    -- a lease that holds rows or blocks already does not wait for the
    -- cursor with them (completions of their chunks would wait behind
    -- it): what it has is its answer
    IF got > 0 OR un > 0 THEN RETURN; END IF;
    SELECT j.next, j.n INTO lo, n FROM mesh.jobs j WHERE j.id = p_job FOR UPDATE;
    hi := LEAST(n, lo + p_k - got);
    rhi := LEAST(n, hi + 32 * p_k);
    IF rhi > hi THEN INSERT INTO mesh.ranges VALUES (p_job, rhi, hi); END IF;
    UPDATE mesh.jobs SET next = rhi WHERE id = p_job AND rhi > lo;
   END IF;
  END IF;
  IF hi > lo THEN
   tok := (random() * 4.6e18)::bigint;
   SELECT mesh.done_in(p_job, lo, hi) || coalesce(array_agg(ch.cid), '{}') INTO skip FROM mesh.chunks ch
    WHERE ch.job = p_job AND ch.cid >= lo AND ch.cid < hi;
   RETURN QUERY SELECT g, 1, false, t + p_ttl_us, t, tok + (g - lo)
    FROM generate_series(lo, hi - 1) g WHERE g <> ALL(skip);
   GET DIAGNOSTICS nb = ROW_COUNT;
   IF nb > 0 THEN
    INSERT INTO mesh.blocks VALUES (p_job, lo, hi, p_holder, tok, t + p_ttl_us, t, nb);
   END IF;
  END IF;
 END IF;
END $f$;

-- A lease's new deadline (a block's chunk is split out), or NULL when
-- the lease is not ours any more or the chunk is DONE.
CREATE FUNCTION mesh.renew(p_job int, p_cid bigint, p_token bigint, p_ttl_us bigint) RETURNS bigint
 LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE dl bigint;
BEGIN
 UPDATE mesh.chunks SET deadline = mesh.now_us() + p_ttl_us WHERE job = p_job AND cid = p_cid
  AND token = p_token AND state = 'l' AND NOT mesh.is_done(p_job, p_cid) RETURNING deadline INTO dl;
 IF dl IS NULL AND NOT mesh.is_done(p_job, p_cid) THEN
  dl := mesh.now_us() + p_ttl_us;
  IF NOT mesh.split(p_job, p_cid, 'l', p_token, dl) THEN dl := NULL; END IF;
 END IF;
 RETURN dl;
END $f$;

-- A stopping node hands back its leases (its blocks first, then its
-- rows: the completion's order); how many.
CREATE FUNCTION mesh.release(p_job int, p_holder bigint) RETURNS bigint LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE n bigint := 0; m bigint; b record;
BEGIN
 FOR b IN SELECT x.lo FROM mesh.blocks x WHERE x.job = p_job AND x.holder = p_holder ORDER BY x.lo FOR UPDATE LOOP
  m := mesh.unblock(p_job, b.lo, 'p');
  n := n + m;
 END LOOP;
 UPDATE mesh.chunks SET state = 'p', token = NULL, holder = NULL
  WHERE job = p_job AND holder = p_holder AND state = 'l' AND NOT mesh.is_done(p_job, cid);
 GET DIAGNOSTICS m = ROW_COUNT;
 PERFORM pg_notify('mesh', p_job::text);
 RETURN n + m;
END $f$;

-- A completion as DONE bits, a word (64 chunks) a row: p_ws ascending
-- and distinct, their masks, the holder, how many completions the masks
-- stand for.  Answers, a word each, the bits it set first.  A word no
-- completion reached yet is inserted with the batch's bits (a
-- concurrent first insert makes this one wait for it, then go the other
-- way); the words that exist are locked (ascending) and only the bits
-- not yet set are new.  Then the blocks over the words are locked
-- (ascending) before any chunk row is read, the rows of every chunk
-- sent go (an IGNORED one's too; a row with failures stays as 'd'), and
-- the locked blocks count down, a block going at 0.  No hot row: the
-- counters are one row a job and holder (mesh.counts).
CREATE FUNCTION mesh.complete_words(p_job int, p_ws bigint[], p_ms bigint[], p_holder bigint, p_n bigint)
 RETURNS SETOF bigint LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE ins bigint[]; fr bigint[]; rw bigint[]; rm bigint[]; blo bigint[]; bk int[]; gone bigint[]; zeroed bigint[];
 newc bigint; held bigint[];
BEGIN
 WITH i AS (INSERT INTO mesh.done_words (job, w, bits) SELECT p_job, x.w, x.m FROM unnest(p_ws, p_ms) AS x(w, m)
   ORDER BY x.w ON CONFLICT DO NOTHING RETURNING w)
 SELECT coalesce(array_agg(i.w), '{}') INTO ins FROM i;
 IF cardinality(ins) = cardinality(p_ws) THEN
  fr := p_ms;
 ELSE
  WITH o AS (SELECT d.w, d.bits FROM mesh.done_words d WHERE d.job = p_job AND d.w = ANY(p_ws) AND d.w <> ALL(ins)
    ORDER BY d.w FOR UPDATE)
  SELECT array_agg(CASE WHEN o.w IS NULL THEN x.m ELSE x.m & ~o.bits END ORDER BY x.i) INTO fr
   FROM unnest(p_ws, p_ms) WITH ORDINALITY AS x(w, m, i) LEFT JOIN o ON o.w = x.w;
  UPDATE mesh.done_words d SET bits = d.bits | x.m FROM unnest(p_ws, fr) AS x(w, m)
   WHERE d.job = p_job AND d.w = x.w AND x.m <> 0 AND d.w <> ALL(ins);
 END IF;
 -- the blocks over these words, before any chunk row is read
 SELECT coalesce(array_agg(b.lo), '{}') INTO held FROM (SELECT bl.lo FROM mesh.blocks bl
   WHERE bl.job = p_job AND bl.lo < p_ws[cardinality(p_ws)] * 64 + 64
    AND EXISTS (SELECT 1 FROM unnest(p_ws) AS x(w) WHERE bl.lo < x.w * 64 + 64 AND bl.hi > x.w * 64)
   ORDER BY bl.lo FOR UPDATE) b;
 WITH f AS (SELECT x.w, x.m FROM unnest(p_ws, p_ms) AS x(w, m)),
  del AS (DELETE FROM mesh.chunks c USING f WHERE c.job = p_job AND c.cid >= f.w * 64 AND c.cid < f.w * 64 + 64
   AND f.m & (1::bigint << (c.cid % 64)::int) <> 0 AND c.fails = 0 RETURNING c.cid),
  upd AS (UPDATE mesh.chunks c SET state = 'd', token = NULL, holder = NULL, deadline = NULL FROM f
   WHERE c.job = p_job AND c.cid >= f.w * 64 AND c.cid < f.w * 64 + 64
   AND f.m & (1::bigint << (c.cid % 64)::int) <> 0 AND c.fails > 0 RETURNING c.cid)
 SELECT array_agg(r.w ORDER BY r.w), array_agg(r.m ORDER BY r.w) INTO rw, rm FROM (SELECT x.cid / 64 AS w,
   bit_or(1::bigint << (x.cid % 64)::int) AS m FROM (SELECT cid FROM del UNION ALL SELECT cid FROM upd) x GROUP BY 1) r;
 IF cardinality(held) > 0 THEN
  WITH f AS (SELECT x.w, x.m & ~coalesce(r.m, 0) AS m FROM unnest(p_ws, fr) AS x(w, m)
    LEFT JOIN unnest(rw, rm) AS r(w, m) ON r.w = x.w WHERE x.m & ~coalesce(r.m, 0) <> 0),
   s AS (SELECT bl.lo, f.m & CASE WHEN least(bl.hi - f.w * 64, 64) - greatest(bl.lo - f.w * 64, 0) >= 64 THEN -1::bigint
      ELSE ~((-1)::bigint << (least(bl.hi - f.w * 64, 64) - greatest(bl.lo - f.w * 64, 0))::int)
       << greatest(bl.lo - f.w * 64, 0)::int END AS m
    FROM mesh.blocks bl JOIN f ON bl.lo < f.w * 64 + 64 AND bl.hi > f.w * 64
    WHERE bl.job = p_job AND bl.lo = ANY(held))
  SELECT array_agg(y.lo ORDER BY y.lo), array_agg(y.k ORDER BY y.lo) INTO blo, bk
   FROM (SELECT s.lo, sum(bit_count(s.m::bit(64)))::int AS k FROM s GROUP BY s.lo) y WHERE y.k > 0;
 END IF;
 IF blo IS NOT NULL THEN
  WITH d AS (DELETE FROM mesh.blocks b USING unnest(blo, bk) AS x(lo, k)
    WHERE b.job = p_job AND b.lo = ANY(blo) AND b.lo = x.lo AND b.remaining <= x.k RETURNING b.lo)
  SELECT coalesce(array_agg(d.lo), '{}') INTO gone FROM d;
  IF cardinality(gone) < cardinality(blo) THEN
   WITH z AS (UPDATE mesh.blocks b SET remaining = b.remaining - x.k FROM unnest(blo, bk) AS x(lo, k)
     WHERE b.job = p_job AND b.lo = ANY(blo) AND b.lo <> ALL(gone) AND b.lo = x.lo RETURNING b.lo, b.remaining)
   SELECT array_agg(z.lo) FILTER (WHERE z.remaining <= 0) INTO zeroed FROM z;
   IF zeroed IS NOT NULL THEN
    DELETE FROM mesh.blocks WHERE job = p_job AND lo = ANY(zeroed);
   END IF;
  END IF;
 END IF;
 SELECT coalesce(sum(bit_count(x.m::bit(64))), 0) INTO newc FROM unnest(fr) AS x(m);
 INSERT INTO mesh.counts AS k (job, holder, done, dups) VALUES (p_job, p_holder, newc, p_n - newc)
  ON CONFLICT (job, holder) DO UPDATE SET done = k.done + excluded.done, dups = k.dups + excluded.dups;
 RETURN QUERY SELECT unnest(fr);
END $f$;

-- complete_words for a list of chunks: one answer a cid, true for the
-- completion that set its bit (the first place of a cid in the list).
CREATE FUNCTION mesh.complete(p_job int, p_cids bigint[], p_holder bigint) RETURNS SETOF boolean
 LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE ws bigint[]; ms bigint[]; fr bigint[];
BEGIN
 SELECT array_agg(x.w ORDER BY x.w), array_agg(x.m ORDER BY x.w) INTO ws, ms FROM (SELECT c / 64 AS w,
   bit_or(1::bigint << (c % 64)::int) AS m FROM unnest(p_cids) c GROUP BY 1) x;
 IF ws IS NULL THEN RETURN; END IF;
 SELECT array_agg(f ORDER BY i) INTO fr FROM mesh.complete_words(p_job, ws, ms, p_holder, cardinality(p_cids))
  WITH ORDINALITY AS r(f, i);
 RETURN QUERY SELECT u.r = 1 AND f.m & (1::bigint << (u.c % 64)::int) <> 0
  FROM (SELECT c, i, row_number() OVER (PARTITION BY c ORDER BY i) AS r FROM unnest(p_cids) WITH ORDINALITY AS x(c, i)) u
  JOIN unnest(ws, fr) AS f(w, m) ON f.w = u.c / 64 ORDER BY u.i;
END $f$;

-- A failed attempt: counted on the chunk's row, buried ('b') at p_max
-- failures past its base, else let go.  true when buried; false too
-- when the chunk is DONE.  A completion's lock order (version 11): the
-- chunk's DONE word first (made with no bit where there is none), then
-- the block over the chunk (its chunk split out), then the row (made
-- for a chunk of no block, or kept where it has one already).  The
-- block taken first, then the word, deadlocked with a completion of
-- the same word.
CREATE FUNCTION mesh.fail(p_job int, p_cid bigint, p_status int, p_max int, p_holder bigint) RETURNS boolean
 LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE b boolean;
BEGIN
 IF mesh.is_done(p_job, p_cid) THEN RETURN false; END IF;
 INSERT INTO mesh.done_words (job, w, bits) VALUES (p_job, p_cid / 64, 0) ON CONFLICT DO NOTHING;
 PERFORM 1 FROM mesh.done_words d WHERE d.job = p_job AND d.w = p_cid / 64 FOR SHARE;
 IF mesh.is_done(p_job, p_cid) THEN RETURN false; END IF;
 IF NOT mesh.split(p_job, p_cid, 'p', NULL, NULL) THEN
  INSERT INTO mesh.chunks (job, cid, state) VALUES (p_job, p_cid, 'p') ON CONFLICT DO NOTHING;
 END IF;
 UPDATE mesh.chunks SET fails = fails + 1, last_status = p_status,
  state = CASE WHEN fails + 1 - base >= p_max THEN 'b' ELSE 'p' END,
  token = NULL, holder = NULL, deadline = NULL
  WHERE job = p_job AND cid = p_cid RETURNING state = 'b' INTO b;
 INSERT INTO mesh.counts AS k (job, holder, failed) VALUES (p_job, p_holder, 1)
  ON CONFLICT (job, holder) DO UPDATE SET failed = k.failed + 1;
 IF NOT b THEN PERFORM pg_notify('mesh', p_job::text); END IF;
 RETURN b;
END $f$;

-- How many chunks of the job are leased (p_live: and not expired).
CREATE FUNCTION mesh.held(p_job int, p_live boolean) RETURNS bigint LANGUAGE sql STABLE AS
 $$ SELECT (SELECT count(*) FROM mesh.chunks c WHERE c.job = p_job AND c.state = 'l'
     AND (NOT p_live OR c.deadline >= mesh.now_us()))
  + (SELECT coalesce(sum(b.remaining), 0) FROM mesh.blocks b WHERE b.job = p_job
     AND (NOT p_live OR b.deadline >= mesh.now_us())) $$;

-- Speculation (the file store's rule, docs/job.md): a copy of a
-- straggler is a row of mesh.copies (at most one a slot, slots
-- 1..p_copies: the primary key); the chunk's own lease is left as it
-- is.  The threshold comes from mesh.durations, which each handle adds
-- its own completed durations to.
--
-- The live leases of other nodes (by name: a node never copies its
-- own) that have run longer than p_thr_us and have a free copy slot,
-- the longest-running first, each with its holder's speed (every
-- handle of that name: chunks, summed durations).
CREATE FUNCTION mesh.stragglers(p_job int, p_holder bigint, p_name text, p_copies int, p_thr_us bigint,
 p_limit int) RETURNS TABLE(cid bigint, elapsed bigint, attempt int, chunks bigint, busy_us bigint)
 LANGUAGE plpgsql STABLE AS $f$
#variable_conflict use_column
DECLARE t bigint := mesh.now_us();
BEGIN
 RETURN QUERY WITH live AS (
   SELECT ch.cid AS c, ch.holder AS h, ch.started AS s, ch.attempt AS a FROM mesh.chunks ch
    WHERE ch.job = p_job AND ch.state = 'l' AND ch.deadline >= t AND ch.holder <> p_holder
     AND ch.started < t - p_thr_us
   UNION ALL
   SELECT g, b.holder, b.started, 1 FROM mesh.blocks b, generate_series(b.lo, b.hi - 1) g
    WHERE b.job = p_job AND b.deadline >= t AND b.holder <> p_holder AND b.started < t - p_thr_us
     AND NOT EXISTS (SELECT 1 FROM mesh.chunks ch WHERE ch.job = p_job AND ch.cid = g)
     AND NOT mesh.is_done(p_job, g)),
  named AS (SELECT l.c, l.s, l.a, n.name FROM live l LEFT JOIN mesh.nodes n ON n.holder = l.h)
 SELECT x.c, t - x.s, x.a, coalesce(sp.k, 0)::bigint, coalesce(sp.us, 0)::bigint FROM named x
  LEFT JOIN LATERAL (SELECT sum(m.chunks) AS k, sum(m.busy_us) AS us FROM mesh.nodes m
   WHERE m.job = p_job AND m.name = x.name) sp ON true
  WHERE (x.name IS NULL OR x.name <> p_name)
   AND (SELECT count(*) FROM mesh.copies cp WHERE cp.job = p_job AND cp.cid = x.c AND cp.deadline >= t) < p_copies
   AND NOT EXISTS (SELECT 1 FROM mesh.copies cp WHERE cp.job = p_job AND cp.cid = x.c AND cp.holder = p_holder
    AND cp.deadline >= t)
  ORDER BY x.s, x.c LIMIT p_limit;
END $f$;

-- A copy of p_cid for p_holder in the first free slot, while the chunk
-- is not DONE and still leased by another: its slot, attempt (the
-- lease's), deadline, start and token; no row when it cannot be.
CREATE FUNCTION mesh.spec_claim(p_job int, p_cid bigint, p_copies int, p_holder bigint, p_ttl_us bigint)
 RETURNS TABLE(slot int, attempt int, deadline bigint, started bigint, token bigint) LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE t bigint := mesh.now_us(); a int;
BEGIN
 DELETE FROM mesh.copies cp WHERE cp.job = p_job AND cp.deadline < t AND mesh.is_done(p_job, cp.cid);
 IF mesh.is_done(p_job, p_cid) THEN RETURN; END IF;
 SELECT ch.attempt INTO a FROM mesh.chunks ch WHERE ch.job = p_job AND ch.cid = p_cid AND ch.state = 'l'
  AND ch.deadline >= t AND ch.holder <> p_holder;
 IF a IS NULL THEN
  IF EXISTS (SELECT 1 FROM mesh.chunks ch WHERE ch.job = p_job AND ch.cid = p_cid) THEN RETURN; END IF;
  IF NOT EXISTS (SELECT 1 FROM mesh.blocks b WHERE b.job = p_job AND b.lo <= p_cid AND b.hi > p_cid
   AND b.deadline >= t AND b.holder <> p_holder) THEN RETURN; END IF;
  a := 1;
 END IF;
 FOR k IN 1..p_copies LOOP
  RETURN QUERY INSERT INTO mesh.copies AS cp VALUES (p_job, p_cid, k, p_holder, (random() * 9.2e18)::bigint, a,
    t + p_ttl_us, t)
   ON CONFLICT (job, cid, slot) DO UPDATE SET holder = excluded.holder, token = excluded.token,
    attempt = excluded.attempt, deadline = excluded.deadline, started = excluded.started WHERE cp.deadline < t
   RETURNING cp.slot, cp.attempt, cp.deadline, cp.started, cp.token;
  IF FOUND THEN RETURN; END IF;
 END LOOP;
END $f$;

-- Renews our copy (its token): the new deadline, or NULL (and the row
-- gone) when the chunk is DONE or the copy was taken over.
CREATE FUNCTION mesh.spec_renew(p_job int, p_cid bigint, p_token bigint, p_ttl_us bigint) RETURNS bigint
 LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE dl bigint;
BEGIN
 IF NOT mesh.is_done(p_job, p_cid) THEN
  UPDATE mesh.copies SET deadline = mesh.now_us() + p_ttl_us WHERE job = p_job AND cid = p_cid
   AND token = p_token RETURNING deadline INTO dl;
 END IF;
 IF dl IS NULL THEN DELETE FROM mesh.copies WHERE job = p_job AND cid = p_cid AND token = p_token; END IF;
 RETURN dl;
END $f$;

-- Completions of our copies (p_cids ascending): mesh.complete's
-- answers; each DONE is a speculative win, counted in the same
-- transaction; the copies' rows go; the node's row last, as a
-- completion's WITH updates it after mesh.complete_words (version 11:
-- it came first, and a completion of the same words on the node's other
-- connection, holding them and waiting for the node's row, deadlocked
-- with it).
CREATE FUNCTION mesh.spec_complete(p_job int, p_cids bigint[], p_holder bigint, p_busy_us bigint)
 RETURNS SETOF boolean LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE res boolean[]; wins int;
BEGIN
 SELECT array_agg(r.x ORDER BY r.i) INTO res FROM mesh.complete(p_job, p_cids, p_holder) WITH ORDINALITY AS r(x, i);
 SELECT count(*) INTO wins FROM unnest(res) AS w(x) WHERE w.x;
 DELETE FROM mesh.copies WHERE job = p_job AND cid = ANY(p_cids) AND holder = p_holder;
 IF wins > 0 THEN
  INSERT INTO mesh.counts AS k (job, holder, spec) VALUES (p_job, p_holder, wins)
   ON CONFLICT (job, holder) DO UPDATE SET spec = k.spec + excluded.spec;
 END IF;
 UPDATE mesh.nodes SET chunks = chunks + cardinality(p_cids), busy_us = busy_us + p_busy_us,
  beat = mesh.now_us() WHERE holder = p_holder;
 RETURN QUERY SELECT unnest(res);
END $f$;

-- A failed run of our copy: the copy goes, the attempt is counted on
-- its chunk (a block's chunk split out first, its lease and token
-- kept), and the chunk's own lease is left alone -- the primary runs
-- on.  false when it was no longer our copy or the chunk is DONE.
CREATE FUNCTION mesh.spec_fail(p_job int, p_cid bigint, p_token bigint, p_status int, p_holder bigint)
 RETURNS boolean LANGUAGE plpgsql AS $f$
#variable_conflict use_column
DECLARE b mesh.blocks;
BEGIN
 DELETE FROM mesh.copies WHERE job = p_job AND cid = p_cid AND token = p_token;
 IF NOT FOUND OR mesh.is_done(p_job, p_cid) THEN RETURN false; END IF;
 SELECT * INTO b FROM mesh.blocks x WHERE x.job = p_job AND x.lo <= p_cid AND x.hi > p_cid;
 IF b.job IS NOT NULL THEN PERFORM mesh.split(p_job, p_cid, 'l', b.token + (p_cid - b.lo), b.deadline); END IF;
 UPDATE mesh.chunks SET fails = fails + 1, last_status = p_status WHERE job = p_job AND cid = p_cid;
 INSERT INTO mesh.counts AS k (job, holder, failed) VALUES (p_job, p_holder, 1)
  ON CONFLICT (job, holder) DO UPDATE SET failed = k.failed + 1;
 RETURN true;
END $f$;
