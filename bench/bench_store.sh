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
