-- 5 -> 6: speculation, the file store's rule (docs/job.md).  The
-- straggler threshold needs the job's completed durations: each
-- handle adds its own to mesh.durations (a log histogram, one row a
-- handle and bucket), not in the completion's statement but every
-- quarter second and when it runs out of work, so a completion costs
-- what it did.  A copy of a straggler is a row of mesh.copies (at
-- most one a slot, slots 1..spec_max_copies: the primary key), taken
-- when its slot is free or its copy expired; the chunk's own lease
-- (a row of mesh.chunks, or a block's) is left as it is.  A copy
-- completes through mesh.spec_complete: the DONE of mesh.complete
-- and, for a first completion, the win in mesh.counts.spec, in one
-- transaction.
ALTER TABLE mesh.counts ADD COLUMN spec bigint NOT NULL DEFAULT 0;
CREATE OR REPLACE VIEW mesh.job_counts AS SELECT j.id, j.name, j.n, coalesce(sum(c.done), 0)::bigint AS done,
 coalesce(sum(c.dups), 0)::bigint AS dups, coalesce(sum(c.failed), 0)::bigint AS failed,
 coalesce(sum(c.spec), 0)::bigint AS spec FROM mesh.jobs j LEFT JOIN mesh.counts c ON c.job = j.id GROUP BY j.id;
CREATE TABLE mesh.durations (job int NOT NULL, holder bigint NOT NULL, b int NOT NULL, n bigint NOT NULL,
 PRIMARY KEY (job, holder, b));
CREATE TABLE mesh.copies (job int NOT NULL, cid bigint NOT NULL, slot int NOT NULL, holder bigint NOT NULL,
 token bigint NOT NULL, attempt int NOT NULL, deadline bigint NOT NULL, started bigint NOT NULL,
 PRIMARY KEY (job, cid, slot));
