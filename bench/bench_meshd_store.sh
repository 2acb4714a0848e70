#!/bin/sh
# meshd's jobs on a shared PostgreSQL store (docs/cluster.md) beside the
# same job on meshd's own journal, in one run: trivial chunks through 2
# warm echo workers, durable both ways (PostgreSQL's synchronous commit on;
# the journal's fsyncs), from `mesh submit` to `mesh wait` returning.
# Starts a PostgreSQL of its own (bench/pg.sh) and one meshd following it
# (`meshd --store URL`); the store's job is submitted to the database
# (`mesh submit --store`), the other one to meshd.  Then the time an idle
# meshd takes to start on a newly submitted job (below).
# Usage: bench/bench_meshd_store.sh BUILD   (MESH_BENCH_CHUNKS, default 20000)
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
N=${MESH_BENCH_CHUNKS:-20000}
. "$(dirname "$0")/pg.sh"
bench_pg_start
PGT=$T
"$B/mesh" store init "$URL" >/dev/null || exit 1
. "$(dirname "$0")/lib.sh"
# lib.sh's exit trap ends meshd, then this: the server and its directory
bench_on_exit() {
	bench_pg_as "$PGBIN/pg_ctl -D $PGT/data -m immediate stop" >/dev/null 2>&1
	rm -rf "$PGT"
}
mkdir -p "$T/catalog/$TRIPLE" "$T/logs"
cp "$B/examples/echo_worker" "$T/catalog/$TRIPLE/echo" || exit 1
printf 'name = "echo"\nbackends = ["native"]\nmax_workers = 2\nidle_ttl = "30s"\n' >"$T/catalog/echo.toml"
bench_start_meshd --state "$T/state" --store "$URL"
now() { date +%s.%N; }
st() { "$B/mesh" "$@" --store "$URL"; }

# warm both ways first (the workers up, each path's first plans made)
id=$(st submit echo --chunks 200 --max-workers 2) && st wait "$id" >/dev/null ||
	{ echo "   store warm-up job failed"; cat "$T/meshd.err"; exit 1; }
id=$(mesh submit echo --chunks 200 --max-workers 2) && mesh wait "$id" >/dev/null || { echo "   warm-up job failed"; exit 1; }

t0=$(now)
id=$(st submit echo --chunks "$N" --max-workers 2) && st wait "$id" >/dev/null || { echo "   store job failed"; cat "$T/meshd.err"; exit 1; }
t1=$(now)
id=$(mesh submit echo --chunks "$N" --max-workers 2) && mesh wait "$id" >/dev/null || { echo "   journal job failed"; exit 1; }
t2=$(now)
pg=$(echo "$N / ($t1 - $t0)" | bc -l)
jr=$(echo "$N / ($t2 - $t1)" | bc -l)
printf '   meshd, %d trivial chunks on 2 warm echo workers, submit to wait:\n' "$N"
printf '     on the PostgreSQL store: %9.0f chunks/s   on its own journal: %9.0f chunks/s   store/journal %.2f\n' \
	"$pg" "$jr" "$(echo "$pg / $jr" | bc -l)"

# An idle meshd starting on a newly submitted job (issue: <= 10 ms): from
# the submit's statement (mesh.specs.submitted) to the meshd's first lease
# of it (its node row's start: a driver registers at its first lease), both
# the database's clock; the workers warm, one chunk a job, 9 jobs 0.3 s
# apart, nothing else running meanwhile (no `mesh wait`).
ids=""
for k in 1 2 3 4 5 6 7 8 9; do
	id=$(st submit echo --chunks 1 --max-workers 2) || { echo "   pick-up job failed"; exit 1; }
	ids="$ids${ids:+,}$id"
	sleep 0.3
done
psql -X -A -t -F ' ' "$URL" -c "SELECT (n.started - s.submitted) / 1000.0 FROM mesh.specs s
	JOIN mesh.nodes n ON n.job = s.job WHERE s.job IN ($ids) ORDER BY 1" 2>/dev/null | awk '
	{ v[++n] = $1 }
	END { if (n == 0) { print "   pick-up: no node row (the jobs were not taken)"; exit }
	  printf "   an idle meshd starts on a new job (submit -> its first lease, the database'"'"'s clock), %d jobs:\n", n
	  printf "     median %.2f ms (min %.2f, max %.2f)   target <= 10 ms\n", v[int((n + 1) / 2)], v[1], v[n] }'
