-- 2 -> 3: meshd jobs in the store.  A chunk's result row is written
-- (committed) before its DONE bit, so a DONE chunk always has one;
-- a result of a chunk that is not DONE (a node died between the
-- two commits) is harmless: the rerun's insert keeps the first.
CREATE TABLE mesh.specs (job int PRIMARY KEY, program text NOT NULL, max_workers int NOT NULL,
 retries int NOT NULL, timeout_ns bigint NOT NULL, speculate boolean NOT NULL, name text NOT NULL,
 input bytea, state "char" NOT NULL DEFAULT 'r', submitted bigint NOT NULL);
CREATE TABLE mesh.results (job int NOT NULL, cid bigint NOT NULL, kind "char" NOT NULL,
 data bytea NOT NULL, PRIMARY KEY (job, kind, cid));
