#!/bin/sh
# Runs every fuzz target in BUILD/fuzz for SECONDS each, seeded from
# tests/fuzz/corpus/<target>/ when present.  Fails on the first crash.
# Usage: tests/fuzz/run.sh BUILD SECONDS
BUILD=${1:-build-fuzz}
SECS=${2:-15}
rc=0
for f in "$BUILD"/fuzz/fuzz_*; do
	[ -x "$f" ] || continue
	name=$(basename "$f")
	work=$(mktemp -d)
	[ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/"
	if "$f" -max_total_time="$SECS" -rss_limit_mb=2048 -print_final_stats=0 "$work" >"$work.log" 2>&1; then
		echo "fuzz $name: ok ($(grep -c . "$work.log" >/dev/null; grep -o 'cov: [0-9]*' "$work.log" | tail -n1), ${SECS}s)"
	else
		echo "fuzz $name: FAILED"
		tail -n 40 "$work.log"
		rc=1
	fi
	rm -rf "$work" "$work.log"
done
exit $rc
