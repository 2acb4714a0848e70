#!/bin/sh
# graphile-worker (npm, node) beside mesh's PostgreSQL store on one
# PostgreSQL (bench/pg.sh: its own, fsync and synchronous_commit on), the
# same machine, the same number of jobs and chunks, alternated in one run:
# two rounds of graphile-worker batched, graphile-worker with its defaults,
# then mesh at 1, 8 and 32 nodes; a fresh database of that server each.
#   a graphile-worker job: a row with a payload ({"i": n}), queued up front
#     with graphile-worker's addJobs, its task a no-op; timed from the
#     worker pool's start until every job ran and the pool stopped (its
#     completions committed); one node process, 24 concurrent jobs, a pool
#     of 25 (bench/graphile_peer.mjs).  batched: localQueue.size 500,
#     completeJobBatchDelay 0, failJobBatchDelay 0 (the options of its
#     published 183k jobs/s); defaults: nothing else set (no local queue, a
#     fetch and a completion a job);
#   a mesh chunk: a bit of a job submitted up front; mesh's side is
#     bench_store's pipelined nodes (the PostgreSQL store through libmesh as
#     mesh run's executor uses it: leases of 64, a completer thread), the
#     whole job's rate from the first fork to the last exit, its steady
#     rate (from when every node holds a lease) beside.
# ratio = mesh / graphile-worker, both start to finish.  graphile-worker is
# installed from the npm registry into BUILD/node-graphile (pinned below;
# 0.18 wants node >= 22.18); without node, npm or the registry it says SKIP
# and exits 0 (without PostgreSQL, pg.sh's "skipped").
# Usage: bench/bench_graphile.sh BUILD   (MESH_BENCH_GRAPHILE_JOBS, default 20000)
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
N=${MESH_BENCH_GRAPHILE_JOBS:-20000}
GRAPHILE_NPM_VERSION=0.17.3
G=$B/node-graphile
PEER=$(cd "$(dirname "$0")" && pwd)/graphile_peer.mjs

skip() { echo "   SKIP graphile-worker: $1"; exit 0; }
command -v node >/dev/null 2>&1 || skip "no node on PATH (mk/deps.sh test)"
command -v npm >/dev/null 2>&1 || skip "no npm on PATH (mk/deps.sh test)"
[ "$(node -p 'process.versions.node.split(".")[0]')" -ge 14 ] 2>/dev/null || skip "node $(node --version) is older than 14"
if [ "$(node -p "require('$G/node_modules/graphile-worker/package.json').version" 2>/dev/null)" != "$GRAPHILE_NPM_VERSION" ]; then
	mkdir -p "$G"
	echo '{"private": true}' >"$G/package.json"
	npm install --prefix "$G" --no-audit --no-fund --no-save --ignore-scripts \
		"graphile-worker@$GRAPHILE_NPM_VERSION" >"$G/npm.log" 2>&1 ||
		skip "npm install graphile-worker@$GRAPHILE_NPM_VERSION failed (see $G/npm.log)"
fi

. "$(dirname "$0")/pg.sh"
bench_pg_start
# the node or bench_store running now, ended at exit with the server
CHILD=
graphile_cleanup() {
	[ -n "$CHILD" ] && kill "$CHILD" 2>/dev/null && wait "$CHILD" 2>/dev/null
	CHILD=
	bench_pg_cleanup
}
trap graphile_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# fresh NAME: creates database NAME on the server; its URL in DB.
fresh() {
	psql -X -q "$URL" -c "CREATE DATABASE $1" >/dev/null || exit 1
	DB="postgresql:///$1?host=$T&user=mesh"
}
# graphile MODE NAME: graphile-worker's jobs/s in a fresh database NAME, in
# R ("failed" where it failed).
graphile() {
	fresh "$2"
	(cd "$T" && GRAPHILE_DIR="$G" PGHOST="$T" PGUSER=mesh PGDATABASE="$2" exec node "$PEER" "$1" "$N") >"$T/peer.out" &
	CHILD=$!
	wait "$CHILD"
	CHILD=
	R=$(awk '$1 == "RESULT" { r = $4 } END { print (r > 0 ? r : "failed") }' "$T/peer.out")
}
# mesh_store NAME: mesh's chunks/s at 1, 8 and 32 nodes in a fresh database
# NAME, in M1 M8 M32 ("failed" for a count that failed), their steady rates
# in S1 S8 S32 (bench_store's: from when every node holds a lease).
mesh_store() {
	fresh "$1"
	"$B/mesh" store init "$DB" >/dev/null || exit 1
	for _n in 1 8 32; do
		"$B/bench/bench_store" "$DB" "$N" "$_n" piped >"$T/mesh.out" &
		CHILD=$!
		wait "$CHILD"
		CHILD=
		eval "M$_n=$(awk -v n="$_n" '$1 == n { r = $4 } END { print (r > 0 ? sprintf("%.0f", r) : "failed") }' "$T/mesh.out")"
		eval "S$_n=$(awk -v n="$_n" '$1 == n { r = $5 } END { printf "%.0f", r }' "$T/mesh.out")"
	done
}
# rate R WHAT: "R WHAT/s", or "failed".
rate() { [ "$1" = failed ] && echo failed || echo "$1 $2/s"; }
# ratio A B: A / B, or "-" where either failed.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.1f x", a / b; else printf "-" }'; }

echo "   $N graphile-worker $GRAPHILE_NPM_VERSION jobs (a row with a payload, its task a no-op, queued up front;"
echo "   one node process, 24 concurrent jobs, a pool of 25; batched: localQueue.size 500,"
echo "   completeJobBatchDelay 0, failJobBatchDelay 0, as its published figure; defaults: no local"
echo "   queue, no completion batching) and $N mesh chunks (a bit of a job submitted up front,"
echo "   bench_store's piped nodes: leases of 64, completions on a thread of their own, as mesh"
echo "   run's executor) on one PostgreSQL (fsync, synchronous_commit on), a fresh database each;"
echo "   start to finish, the worker's or the nodes' start-up included; ratio = mesh / graphile;"
echo "   mesh's steady rate beside (from when every node holds a lease: its start-up left out)"
for round in 1 2; do
	graphile batched "g${round}b"
	gb=$R
	graphile defaults "g${round}d"
	gd=$R
	mesh_store "m$round"
	set -- "$M1" "$S1" "$M8" "$S8" "$M32" "$S32"
	echo "   round $round: graphile-worker batched: $(rate "$gb" jobs)   defaults: $(rate "$gd" jobs)"
	for n in 1 8 32; do
		printf "     mesh %2d node%s: %15s   ratio %s batched, %s defaults   (steady %s)\n" "$n" \
			"$([ "$n" = 1 ] && echo " " || echo s)" "$(rate "$1" chunks)" "$(ratio "$1" "$gb")" "$(ratio "$1" "$gd")" "$2"
		shift 2
	done
done
