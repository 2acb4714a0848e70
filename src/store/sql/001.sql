-- 0 -> 1: one row a job (n, identity, the fresh-lease cursor `next`, its
-- counters until version 4), one row a chunk that was leased, failed or
-- buried and is not DONE, and the DONE bits, 64 chunks a row.
CREATE SCHEMA mesh;
CREATE TABLE mesh.meta (version int NOT NULL);
INSERT INTO mesh.meta VALUES (1);
CREATE TABLE mesh.jobs (id serial PRIMARY KEY, name text UNIQUE NOT NULL, n bigint NOT NULL,
 identity bytea, next bigint NOT NULL DEFAULT 0, done bigint NOT NULL DEFAULT 0,
 dups bigint NOT NULL DEFAULT 0, failed bigint NOT NULL DEFAULT 0);
CREATE TABLE mesh.chunks (job int NOT NULL, cid bigint NOT NULL, state "char" NOT NULL,
 attempt int NOT NULL DEFAULT 0, fails int NOT NULL DEFAULT 0, base int NOT NULL DEFAULT 0,
 last_status int, token bigint, holder bigint, deadline bigint, started bigint,
 PRIMARY KEY (job, cid));
CREATE TABLE mesh.done_words (job int NOT NULL, w bigint NOT NULL, bits bigint NOT NULL,
 PRIMARY KEY (job, w));
