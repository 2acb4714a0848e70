#!/bin/sh
# Runs every test binary under BUILD/tests (or only the tests whose name
# contains FILTER), JOBS binaries at a time (default 1), and ends with the
# line "N passed, N failed" (a line "N skipped" before it when any test was
# skipped).  Each binary's output is printed whole when it ends.  The
# slowest binaries of the last run start first (BUILD/tests.times, else
# tests/times).
# Usage: [JOBS=N] tests/run.sh BUILD [FILTER]
if [ "$1" = --one ]; then
	# One binary: its output into OUT/NAME.log, then printed whole.
	out=$2 t=$3 name=$4 filter=$5
	log="$out/$(echo "$name" | tr / _).log"
	start=$(date +%s%N)
	if [ -n "$filter" ]; then "$t" "$filter"; else "$t"; fi >"$log" 2>&1
	rc=$?
	echo "$(( ($(date +%s%N) - start) / 1000000 )) $name" >>"$out/times"
	{
		echo "== $name"
		grep -v -E '^[0-9]+ (passed, [0-9]+ failed|skipped)$' "$log"
		grep -q -E '^[0-9]+ passed, [0-9]+ failed$' "$log" || echo "FAIL $name: exited $rc without a summary"
	} >"$log.shown"
	flock "$out/lock" cat "$log.shown"
	exit 0
fi
BUILD=${1:-build}
FILTER=$2
JOBS=${JOBS:-1}
# Binaries that share the CPUs take longer: each test's timeout (a hang's
# bound, not a speed check) is doubled when several run at once.
if [ "$JOBS" -gt 1 ] && [ -z "$MESH_TEST_TIMEOUT_SCALE" ]; then
	MESH_TEST_TIMEOUT_SCALE=2
	export MESH_TEST_TIMEOUT_SCALE
fi
MESH_BUILD=$(cd "$BUILD" && pwd)
MESH_SRC=$(pwd)
export MESH_BUILD MESH_SRC
start=$(date +%s)
out=$(mktemp -d)
: >"$out/lock"
# Slowest first: the last run's times (a fresh build: tests/times, a run's
# on a 2-CPU machine), then the binaries it did not time.
find "$BUILD/tests" -type f -perm -u+x | sed "s|^$BUILD/tests/||" | sort >"$out/all"
times="$BUILD/tests.times"
[ -f "$times" ] || times=tests/times
if [ -f "$times" ]; then
	sort -rn "$times" | awk '{print $2}' | grep -x -F -f "$out/all" >"$out/order"
	grep -v -x -F -f "$out/order" "$out/all" >>"$out/order"
else
	cp "$out/all" "$out/order"
fi
while read -r name; do
	printf '%s\0%s\0%s\0%s\0%s\0' --one "$out" "$BUILD/tests/$name" "$name" "$FILTER"
done <"$out/order" | xargs -0 -n 5 -P "$JOBS" "$0"
passed=0 failed=0 skipped=0
for log in "$out"/*.log; do
	[ -e "$log" ] || continue
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
	s=$(grep -E '^[0-9]+ skipped$' "$log" | tail -n 1)
	s=${s%% skipped}
	skipped=$((skipped + ${s:-0}))
	if [ -z "$line" ]; then
		failed=$((failed + 1))
		continue
	fi
	p=${line%% passed*}
	f=${line#*, }; f=${f%% failed}
	passed=$((passed + p)); failed=$((failed + f))
done
[ -z "$FILTER" ] && cp "$out/times" "$BUILD/tests.times" 2>/dev/null
rm -rf "$out"
echo "tests took $(( $(date +%s) - start )) s${JOBS:+ ($JOBS at a time)}"
[ "$skipped" -gt 0 ] && echo "$skipped skipped"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
