#!/bin/sh
# What following meshd costs it (issue 36): a 100,000-chunk job through two
# warm echo workers with no follower of GET /v1/events, then with 10 (as 10
# open `mesh ui` pages would be: curl -N each), alternated three times; meshd's
# CPU time (user + system, all threads) over each job, and the followers'
# share of the job's.  Target: under 2 %.
# Usage: bench/bench_events.sh BUILD   (MESH_BENCH_EVENTS_CHUNKS, default 100000)
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
N=${MESH_BENCH_EVENTS_CHUNKS:-100000}
. "$(dirname "$0")/lib.sh"
FOLLOW=
bench_on_exit() {
	[ -n "$FOLLOW" ] && kill $FOLLOW 2>/dev/null
	return 0
}
mkdir -p "$T/catalog/$TRIPLE" "$T/logs"
cp "$B/examples/echo_worker" "$T/catalog/$TRIPLE/echo" || exit 1
printf 'name = "echo"\nbackends = ["native"]\nmax_workers = 2\nidle_ttl = "60s"\n' >"$T/catalog/echo.toml"
bench_start_meshd --state "$T/state"
mesh start echo >/dev/null && mesh start echo >/dev/null || { echo "   cannot start echo"; exit 1; }
# One job: meshd's CPU seconds over it, on stdout.
one() {
	c0=$(cpu)
	id=$(mesh submit echo --chunks "$N" --max-workers 2) && mesh wait "$id" >/dev/null || { echo "   job failed" >&2; exit 1; }
	c1=$(cpu)
	echo "$c1 - $c0" | bc -l
}
events=0
diffs=
for round in 1 2 3; do
	none=$(one)
	i=0
	while [ $i -lt 10 ]; do
		curl -sN --unix-socket "$S" http://x/v1/events >"$T/follow.$i" 2>/dev/null &
		FOLLOW="$FOLLOW $!"
		i=$((i + 1))
	done
	sleep 0.3
	ten=$(one)
	kill $FOLLOW 2>/dev/null
	wait $FOLLOW 2>/dev/null
	FOLLOW=
	events=$(cat "$T"/follow.* | grep -c '^event: ')
	rm -f "$T"/follow.*
	printf '   round %d: meshd CPU for %d chunks: %.3f s with no follower, %.3f s with 10 (%d events sent in all): %+.2f %% of the job'"'"'s (target < 2 %%)\n' \
		"$round" "$N" "$none" "$ten" "$events" "$(echo "($ten - $none) * 100 / $none" | bc -l)"
	diffs="$diffs $(echo "($ten - $none) * 100 / $none" | bc -l)"
done
# /proc's CPU times count in 10 ms ticks: one round's figure is +-1 % of a
# 1 s job; the median of the three is the one to read.
printf '   median of 3: %+.2f %% of the job'"'"'s meshd CPU for 10 followers (target < 2 %%)\n' \
	"$(echo $diffs | tr ' ' '\n' | sort -g | sed -n 2p)"
