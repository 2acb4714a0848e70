-- 3 -> 4: no hot row.  The job's counters were one row that every
-- completion updated (its lock held through its WAL flush) and every
-- fresh lease locked: each node's commit waited on the others', so
-- PostgreSQL's group commit could not merge them.  The counters are
-- now one row a completer (its holder; summed by the view
-- mesh.job_counts), so concurrent completions of different nodes
-- touch no common row but a shared DONE word; the job row is locked
-- only by the fresh-lease cursor, in transactions that do not wait
-- for a flush.  And a lease finds let-go, expired and silent nodes'
-- chunks through partial indexes instead of passing every live lease
-- of the job.
CREATE TABLE mesh.counts (job int NOT NULL, holder bigint NOT NULL, done bigint NOT NULL DEFAULT 0,
 dups bigint NOT NULL DEFAULT 0, failed bigint NOT NULL DEFAULT 0, PRIMARY KEY (job, holder));
INSERT INTO mesh.counts (job, holder, done, dups, failed) SELECT id, 0, done, dups, failed FROM mesh.jobs;
ALTER TABLE mesh.jobs DROP COLUMN done, DROP COLUMN dups, DROP COLUMN failed;
CREATE VIEW mesh.job_counts AS SELECT j.id, j.name, j.n, coalesce(sum(c.done), 0)::bigint AS done,
 coalesce(sum(c.dups), 0)::bigint AS dups, coalesce(sum(c.failed), 0)::bigint AS failed
 FROM mesh.jobs j LEFT JOIN mesh.counts c ON c.job = j.id GROUP BY j.id;
CREATE INDEX chunks_let_go ON mesh.chunks (job, cid) WHERE state = 'p';
CREATE INDEX chunks_leased ON mesh.chunks (job, deadline) WHERE state = 'l';
CREATE INDEX chunks_holder ON mesh.chunks (job, holder) WHERE state = 'l';
CREATE INDEX nodes_job ON mesh.nodes (job);
-- A fresh lease is one row a range (mesh.blocks: lo, hi, holder, a
-- token a chunk derived from the block's, deadline, the count of its
-- chunks neither DONE nor split out): a chunk of the range is leased
-- by the block while it has no row of its own.  It gets one (split)
-- when it is renewed, fails or is handed back; the whole range gets
-- rows (unblock) when the block expires or its holder went silent,
-- and then those rows are taken as any expired lease, one thief a
-- chunk (the block's row lock, then each row's, SKIP LOCKED).
-- Expired, let-go and silent nodes' chunk rows are found through the
-- partial indexes (at most k candidates each), then locked with their
-- condition checked again on the locked version.
CREATE TABLE mesh.blocks (job int NOT NULL, lo bigint NOT NULL, hi bigint NOT NULL, holder bigint NOT NULL,
 token bigint NOT NULL, deadline bigint NOT NULL, started bigint NOT NULL, remaining int NOT NULL,
 PRIMARY KEY (job, lo));
