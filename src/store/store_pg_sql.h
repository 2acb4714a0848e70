/* The schema of the PostgreSQL store (store_pg.h), from the .sql files
 * of src/store/sql, embedded at build time (mk/sql2c.sh).
 * mesh__pg_steps[v] (sql/NNN.sql, NNN = v + 1) takes the tables from
 * version v to v + 1 (version 0 is no schema) and calls no function (a
 * fresh database has none while its steps run); mesh__pg_functions
 * (sql/functions.sql) then drops every function of the schema and makes
 * this version's.  mesh_pg_schema runs the steps a database lacks, the
 * functions and the new version number in one transaction.  Times are
 * the database's clock in microseconds since the epoch (mesh.now_us()).
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
 * mesh.blocks    (4) one row a fresh lease of a range of chunks with no
 *                row of their own: lo, hi, holder, token, deadline, the
 *                count of its chunks neither DONE nor split out.
 * mesh.ranges    (5) ranges carved off the cursor for the leases queued
 *                behind it.
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

/* MESH_PG_SCHEMA_VERSION entries (the build checks it). */
extern const char *const mesh__pg_steps[];
extern const char mesh__pg_functions[];

#endif
