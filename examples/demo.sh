#!/bin/sh
# make demo: a real job through `mesh run` -- a Mandelbrot image rendered as
# 300 tiles on 2 slots.  The run is killed with SIGKILL midway, the same
# command resumes it (no finished tile is rendered again), and the tiles are
# assembled into a PNG.
# Usage: examples/demo.sh BUILD
set -eu
B=$(cd "${1:-build}" && pwd)
MESH=$B/mesh
TILE=$B/examples/mandel_tile
for p in "$MESH" "$TILE"; do
	[ -x "$p" ] || { echo "demo: '$p' is not built (run: make demo)" >&2; exit 1; }
done
WORK=$B/demo
rm -rf "$WORK"
mkdir -p "$WORK/tiles"
cd "$WORK"
N=$("$TILE" tiles)
# --ttl 2: the chunks the killed run held are taken over 2 s after it died.
run() { exec "$MESH" run -v -j2 --ttl 2 --chunks "$N" -- "$TILE" render {} tiles; }
count() { find tiles -name '*.rgb' | wc -l; }

echo "== mesh demo: a 960x720 Mandelbrot image as $N tiles, 2 slots, in $WORK"
echo "\$ mesh run -j2 --ttl 2 --chunks $N -- mandel_tile render {} tiles"
# exec: $! is then mesh itself, not a subshell around it
(run) >run1.out 2>run1.err &
pid=$!
half=$((N / 3))
while [ "$(count)" -lt "$half" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
echo "== killed it with SIGKILL after $(count) of $N tiles"
echo "== the same command again resumes from the journal:"
t0=$(date +%s%N)
(run) >run2.out 2>run2.err || { cat run2.err >&2; exit 1; }
t1=$(date +%s%N)
grep -v '^mesh run: complete' run2.err || true
again=$(grep -c '^tile' run2.out || true)
echo "== the resumed run rendered $again tiles in $(( (t1 - t0) / 1000000 )) ms"
"$TILE" assemble tiles mandelbrot.png
echo "== output: $WORK/mandelbrot.png"
grep '^mesh run: complete' run2.err
