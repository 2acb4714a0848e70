#!/bin/sh
# mesh run -j2 vs xargs -P2 vs GNU parallel -j2: N chunks of `true` (2000
# unless BENCH_RUN_N is set), best of 3 after a warm-up, all in this run.
# mesh keeps its default durable journal (fsync'd completions) on the disk
# of the build directory.  Targets: mesh <= 1.3x xargs' wall time, and
# >= 4x faster than GNU parallel.
# Usage: bench/bench_run.sh BUILD
set -u
B=$(cd "${1:-build}" && pwd)
MESH=$B/mesh
N=${BENCH_RUN_N:-2000}
W=$(mktemp -d "$B/bench-run.XXXXXX")
trap 'rm -rf "$W"' EXIT
cd "$W"
have_parallel=1
command -v parallel >/dev/null 2>&1 || have_parallel=0

now() { date +%s%N; }
# best of 3 wall times in ms for: $1 = label, rest = shell command
best() {
	b=
	for i in 1 2 3; do
		rm -f .mesh-run-*.log
		t0=$(now)
		sh -c "$1" >/dev/null 2>&1 || { echo "   $1: failed" >&2; }
		t1=$(now)
		ms=$(( (t1 - t0) / 1000000 ))
		if [ -z "$b" ] || [ "$ms" -lt "$b" ]; then b=$ms; fi
	done
	echo "$b"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "inf" }'; }
verdict() { awk -v r="$1" -v t="$2" -v op="$3" 'BEGIN { ok = (op == "le") ? (r <= t) : (r >= t); print ok ? "MET" : "MISSED" }'; }

MESH_CMD="$MESH run -j2 --chunks $N -- true"
XARGS_CMD="seq 0 $((N - 1)) | xargs -P2 -n1 true"
PAR_CMD="seq 0 $((N - 1)) | parallel --will-cite -j2 true"

# warm-up: page cache, binaries, parallel's perl modules
sh -c "$MESH run -j2 --chunks 50 -- true" >/dev/null 2>&1
sh -c "seq 0 49 | xargs -P2 -n1 true" >/dev/null 2>&1
[ $have_parallel = 1 ] && sh -c "seq 0 49 | parallel --will-cite -j2 true" >/dev/null 2>&1

m=$(best "$MESH_CMD")
x=$(best "$XARGS_CMD")
echo "   $N chunks of 'true', 2 slots, best of 3 (wall ms):"
printf '   %-34s %8s ms\n' "mesh run -j2 (durable journal)" "$m"
printf '   %-34s %8s ms\n' "xargs -P2" "$x"
r=$(ratio "$m" "$x")
echo "   mesh / xargs      = ${r}x   target <= 1.30x   $(verdict "$r" 1.30 le)"
if [ $have_parallel = 1 ]; then
	p=$(best "$PAR_CMD")
	printf '   %-34s %8s ms\n' "GNU parallel -j2" "$p"
	r=$(ratio "$p" "$m")
	echo "   parallel / mesh   = ${r}x   target >= 4.00x   $(verdict "$r" 4.00 ge)"
else
	echo "   GNU parallel not installed (apt-get install parallel): no reference"
fi
# the journal really is durable: every chunk DONE
"$MESH" run -v -j2 --chunks "$N" -- true >/dev/null 2>"$W/err"
grep -o "[0-9]*/[0-9]* done" "$W/err" | sed 's/^/   check: /'
