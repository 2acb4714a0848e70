-- 7 -> 8: a DONE chunk is never handed out again.  Every transaction
-- that makes a chunk's row or hands out its lease reads the chunk's
-- DONE bit only once it holds a lock that a completion of that chunk
-- takes before it reads the chunk's rows: the block that leases it
-- (an unblock, a split) or its DONE word (a failure's row of a chunk
-- of no block); so a completion either committed before (its bit is
-- read, no row is made) or waits for that commit (and sees the rows
-- made, and deletes them).  Version 7's completion deleted the rows
-- it could see, then counted down the blocks: a lease that unblocked
-- a block (reading the DONE bits, then inserting rows) while a
-- completion of its chunks ran left rows of DONE chunks, leased again
-- at each expiry and never deleted (an IGNORED completion deleted no
-- row); and a split meanwhile was counted twice in the block's
-- remaining count.  Now a completion locks the blocks over its words
-- (ascending, after its words) before it reads a chunk's row, deletes
-- the rows of every chunk it was sent (an IGNORED one's too), and
-- counts down only the blocks it locked; a lease reads the job's row
-- first (a LOCK TABLE of mesh.jobs makes it wait there, holding no
-- block or chunk row a completion would wait for), does not wait for
-- the cursor's row lock once it holds blocks or rows (it answers what
-- it has), and takes no row of a DONE chunk; a silent node's lease
-- is taken before its deadline only when that is further ahead than
-- the node's TTL (one renewed far ahead: the rule's purpose) -- a
-- node whose beat waited behind its own lease's lock wait keeps the
-- leases it just renewed, so a node that renewed a lease holds it
-- until its deadline (mesh run prints an attempt's output only while
-- it does); a renew answers NULL for a DONE chunk; a node
-- that stops hands its blocks back before its rows (the completion's
-- order).  Rows of DONE chunks that earlier versions left go, and
-- each live block's remaining count is counted again.
DELETE FROM mesh.chunks c USING mesh.done_words d WHERE c.fails = 0
 AND d.job = c.job AND d.w = c.cid / 64 AND d.bits & (1::bigint << (c.cid % 64)::int) <> 0;
UPDATE mesh.chunks c SET state = 'd', token = NULL, holder = NULL, deadline = NULL FROM mesh.done_words d
 WHERE c.fails > 0 AND c.state <> 'd'
  AND d.job = c.job AND d.w = c.cid / 64 AND d.bits & (1::bigint << (c.cid % 64)::int) <> 0;
UPDATE mesh.blocks b SET remaining = (SELECT count(*) FROM generate_series(b.lo, b.hi - 1) g
 WHERE NOT EXISTS (SELECT 1 FROM mesh.done_words d WHERE d.job = b.job AND d.w = g / 64
   AND d.bits & (1::bigint << (g % 64)::int) <> 0)
  AND NOT EXISTS (SELECT 1 FROM mesh.chunks c WHERE c.job = b.job AND c.cid = g));
DELETE FROM mesh.blocks WHERE remaining <= 0;
