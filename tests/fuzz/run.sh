#!/bin/sh
# Runs every fuzz target in BUILD/fuzz for SECONDS each, seeded from
# tests/fuzz/corpus/<target>/ when present, JOBS targets at a time (each
# target is one process on one CPU; xargs -P, as tests/run.sh runs test
# binaries).  Fails when any target crashed, after all ran, with the
# crash's log.
# Usage: tests/fuzz/run.sh BUILD SECONDS [JOBS]
if [ "$1" = --one ]; then
	# One target: its verdict line (and on a crash its log's tail) in OUT/NAME.
	out=$2 f=$3 secs=$4
	name=$(basename "$f")
	work=$(mktemp -d)
	[ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/"
	if "$f" -max_total_time="$secs" -rss_limit_mb=2048 -print_final_stats=0 "$work" >"$work.log" 2>&1; then
		echo "fuzz $name: ok ($(grep -o 'cov: [0-9]*' "$work.log" | tail -n1), ${secs}s)" >"$out/$name"
	else
		{ echo "fuzz $name: FAILED"; tail -n 40 "$work.log"; } >"$out/$name"
	fi
	rm -rf "$work" "$work.log"
	exit 0
fi
BUILD=${1:-build-fuzz}
SECS=${2:-15}
JOBS=${3:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for f in "$BUILD"/fuzz/fuzz_*; do
	[ -x "$f" ] && printf '%s\0%s\0%s\0%s\0' --one "$out" "$f" "$SECS"
done | xargs -0 -r -n 4 -P "$JOBS" "$0"
rc=0
for r in "$out"/*; do
	[ -e "$r" ] || { echo "fuzz: no targets in $BUILD/fuzz"; exit 1; }
	cat "$r"
	grep -q ': FAILED$' "$r" && rc=1
done
exit $rc
