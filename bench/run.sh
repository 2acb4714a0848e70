#!/bin/sh
# make bench: runs every benchmark, each printing its figures beside the
# reference tool's, measured in the same run, as ratios.
# Usage: bench/run.sh BUILD
BUILD=${1:-build}
MESH_BUILD=$(cd "$BUILD" && pwd)
MESH_SRC=$(pwd)
export MESH_BUILD MESH_SRC
echo "mesh benchmarks on $(nproc) cores, $(uname -r), $(date -u +%FT%TZ)"
for b in "$BUILD"/bench/bench_*; do
	[ -x "$b" ] || continue
	echo "== $(basename "$b")"
	"$b" || echo "   (exited $?)"
done
for s in bench/bench_*.sh; do
	[ -f "$s" ] || continue
	echo "== $(basename "$s")"
	sh "$s" "$BUILD" || echo "   (exited $?)"
done
