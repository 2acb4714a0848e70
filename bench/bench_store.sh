#!/bin/sh
# The job stores side by side (bench/bench_store.c): starts a PostgreSQL of
# its own (initdb + pg_ctl under a fresh /tmp directory, as the postgres
# user when run as root; fsync and synchronous_commit on), runs the
# benchmark against it and the file store, stops it.
# Usage: bench/bench_store.sh BUILD   (MESH_BENCH_STORE_CHUNKS, default 20000)
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
N=${MESH_BENCH_STORE_CHUNKS:-20000}
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1)
[ -x "$PGBIN/pg_ctl" ] || { echo "   skipped: no PostgreSQL server programs (mk/deps.sh test)"; exit 0; }
T=$(mktemp -d)
chmod 755 "$T"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- sh -c "$1"; else sh -c "$1"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$T"
cleanup() {
	as_pg "$PGBIN/pg_ctl -D $T/data -m immediate stop" >/dev/null 2>&1
	rm -rf "$T"
}
trap cleanup EXIT INT TERM
as_pg "$PGBIN/initdb -D $T/data -A trust -N -U mesh" >/dev/null 2>&1 || { echo "   initdb failed"; exit 1; }
as_pg "$PGBIN/pg_ctl -D $T/data -l $T/log -w -o \"-k $T -c listen_addresses= -c max_connections=80 -c fsync=on -c synchronous_commit=on\" start" >/dev/null 2>&1 ||
	{ echo "   pg_ctl start failed"; cat "$T/log"; exit 1; }
URL="postgresql:///postgres?host=$T&user=mesh"
"$B/mesh" store init "$URL" >/dev/null || exit 1
"$B/bench/bench_store" "$URL" "$N"
