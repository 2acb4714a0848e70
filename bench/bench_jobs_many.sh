#!/bin/sh
# Many jobs at once: 8 jobs of echo chunks on 4 programs (2 warm workers
# each, a worker for each job), all submitted together.  Prints how many
# chunks a second meshd completes for all of them, and meshd's threads idle
# and while they run (docs/threads.md: a home's running jobs are driven by
# a few job loops, not a thread each).
#
# MESH_BENCH_MANY_CHUNKS: chunks a job (default 50,000).
# BENCH_JOBS_OLD=DIR: another build (another commit's) measured the same
# way in the same run, alternated with this one, twice each.
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
N=${MESH_BENCH_MANY_CHUNKS:-50000}
. "$(dirname "$0")/lib.sh"

threads() { awk '/^Threads:/ {print $2}' "/proc/$MESHD/status"; }
now() { date +%s.%N; }

# One build's round: "chunks/s idle-threads busy-threads" on stdout.
measure() {
	rm -rf "$T/catalog" "$T/logs" "$T/state"
	mkdir -p "$T/catalog/$TRIPLE" "$T/logs"
	for p in p1 p2 p3 p4; do
		cp "$B/examples/echo_worker" "$T/catalog/$TRIPLE/$p" || exit 1
		printf 'name = "%s"\nbackends = ["native"]\nmax_workers = 2\nidle_ttl = "60s"\n' "$p" >"$T/catalog/$p.toml"
	done
	bench_start_meshd --state "$T/state"
	for p in p1 p2 p3 p4; do mesh start "$p" >/dev/null || exit 1; done
	sleep 0.3
	idle=$(threads)
	t0=$(now)
	ids=
	for p in p1 p2 p3 p4 p1 p2 p3 p4; do
		ids="$ids $(mesh submit "$p" --chunks "$N" --max-workers 1)" || exit 1
	done
	sleep 0.3
	busy=$(threads)
	for id in $ids; do mesh wait "$id" >/dev/null || exit 1; done
	t1=$(now)
	kill "$MESHD" && wait "$MESHD" 2>/dev/null
	MESHD=
	echo "$(echo "8 * $N / ($t1 - $t0)" | bc -l | cut -d. -f1) $idle $busy"
}

if [ -z "$BENCH_JOBS_OLD" ]; then
	set -- $(measure)
	printf '   8 jobs x %d echo chunks on 4 programs: %d chunks/s; meshd threads %d idle, %d while they run\n' "$N" "$1" "$2" "$3"
	exit 0
fi
NEW=$B
OLD=$(cd "$BENCH_JOBS_OLD" && pwd)
for round in 1 2; do
	B=$NEW
	set -- $(measure)
	new=$1 ni=$2 nb=$3
	B=$OLD
	set -- $(measure)
	printf '   round %d, 8 jobs x %d echo chunks on 4 programs: %d chunks/s (threads %d idle, %d busy), %s: %d chunks/s (threads %d, %d): %.2fx\n' \
		"$round" "$N" "$new" "$ni" "$nb" "$BENCH_JOBS_OLD" "$1" "$2" "$3" "$(echo "$new / $1" | bc -l)"
done
B=$NEW
