#!/bin/sh
# The job stores side by side (bench/bench_store.c): starts a PostgreSQL of
# its own (initdb + pg_ctl under a fresh /tmp directory, as the postgres
# user when run as root; fsync and synchronous_commit on), runs the
# benchmark against it and the file store, stops it.
# Usage: bench/bench_store.sh BUILD   (MESH_BENCH_STORE_CHUNKS, default 50000)
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
N=${MESH_BENCH_STORE_CHUNKS:-50000}
. "$(dirname "$0")/pg.sh"
bench_pg_start
"$B/mesh" store init "$URL" >/dev/null || exit 1
"$B/bench/bench_store" "$URL" "$N"
# What a DONE chunk costs in the database (issue: <= 64 bytes), over every
# job this run made (1, 8 and 32 nodes, sync and piped, the wake-up's and
# start-up's): as left (dead row versions of done_words and blocks that
# autovacuum has not taken back yet) and after VACUUM FULL.
set -- $(bench_pg_storage)
[ -n "$3" ] && [ "$3" -gt 0 ] && awk -v b0="$1" -v b1="$2" -v n="$3" 'BEGIN {
	printf "   storage a DONE chunk (the job tables and their indexes, %d DONE chunks of this run'"'"'s jobs):\n", n
	printf "     %.1f bytes as left, %.1f after VACUUM FULL   target <= 64 bytes\n", b0 / n, b1 / n }'
