#!/bin/sh
# Runs every test binary under BUILD/tests (or only tests whose name contains
# FILTER) and ends with the line "N passed, N failed".
# Usage: tests/run.sh BUILD [FILTER]
BUILD=${1:-build}
FILTER=$2
MESH_BUILD=$(cd "$BUILD" && pwd)
MESH_SRC=$(pwd)
export MESH_BUILD MESH_SRC
passed=0 failed=0 start=$(date +%s)
log=$(mktemp)
for t in $(find "$BUILD/tests" -type f -perm -u+x | sort); do
	name=${t#"$BUILD"/tests/}
	echo "== $name"
	if [ -n "$FILTER" ]; then "$t" "$FILTER"; else "$t"; fi >"$log" 2>&1
	rc=$?
	grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$log"
	line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
	if [ -z "$line" ]; then
		echo "FAIL $name: exited $rc without a summary"
		failed=$((failed + 1))
		continue
	fi
	p=${line%% passed*}
	f=${line#*, }; f=${f%% failed}
	passed=$((passed + p)); failed=$((failed + f))
done
rm -f "$log"
echo "tests took $(( $(date +%s) - start )) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
