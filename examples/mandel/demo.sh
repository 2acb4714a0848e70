#!/bin/sh
# make demo-mandel: meshd runs a job, from zero workers back to zero.
#
#   1. meshd starts with an empty state directory and zero workers;
#   2. a 300-tile Mandelbrot job goes to the `mandel` program (at most 2 workers);
#   3. workers spawn because chunks are pending;
#   4. after about a third of the chunks, meshd is killed with SIGKILL (its workers die with it);
#   5. meshd starts again on the same --state, finds the job and finishes it;
#   6. the results are assembled into a PNG (every tile exactly once);
#   7. after the idle TTL (2 s) the workers are reaped: zero processes again;
#   8. the savings (warm worker-seconds against always-on, over the time the program was
#      loaded, across the restart) come from GET /metrics, the same numbers mesh ps shows.
# `mesh ui` serves the page of it all from the start (its URL is printed then, and again as
# the last line of `make demo`; MESH_DEMO_KEEP=1 leaves meshd and mesh ui up at the end).
#
# Usage: examples/mandel/demo.sh BUILD      (MANDEL_MAXIT: iterations a pixel, default 3000;
#        MESH_DEMO_UI: mesh ui's --listen, default 127.0.0.1:0)
# Needs the job commands of meshd (mesh submit/jobs/wait/results, meshd --state) and curl.
set -eu
B=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
MAXIT=${MANDEL_MAXIT:-3000}
for p in mesh meshd examples/mandel/mandel examples/mandel/assemble; do
	[ -x "$B/$p" ] || { echo "demo: '$B/$p' is not built (run: make demo-mandel)" >&2; exit 1; }
done
case $(uname -m) in
x86_64) TRIPLE=x86_64-linux-gnu ;;
aarch64) TRIPLE=aarch64-linux-gnu ;;
*) echo "demo: no catalog triple for $(uname -m)" >&2; exit 1 ;;
esac

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mesh-mandel.XXXXXX")
S=$WORK/run/meshd.sock
MESHD=
UI=
cleanup() {
	[ -n "$MESHD" ] && kill "$MESHD" 2>/dev/null && wait "$MESHD" 2>/dev/null
	[ -n "$UI" ] && kill "$UI" 2>/dev/null && wait "$UI" 2>/dev/null
	return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$WORK/catalog/$TRIPLE" "$WORK/logs" "$WORK/run" "$WORK/state"
# meshd run as root starts workers as an unprivileged user (`nobody` unless
# the manifest names one): they must reach the catalog's binary.
chmod 755 "$WORK" "$WORK/catalog" "$WORK/catalog/$TRIPLE"
chmod 700 "$WORK/run" "$WORK/state"
cp "$B/examples/mandel/mandel" "$WORK/catalog/$TRIPLE/mandel"
cp "$HERE/catalog/mandel.toml" "$WORK/catalog/"
cd "$WORK"

say() { printf '\n== %s\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }
mesh() { "$B/mesh" "$@" --socket "$S"; }
metrics() { curl -s --unix-socket "$S" http://x/metrics 2>/dev/null || true; }
# The value of one sample of /metrics, or empty.
metric() { metrics | awk -v k="$1" '$1 == k { print $2; exit }'; }
procs() { v=$(metric mesh_worker_processes); echo "${v:-0}"; }
start_meshd() {
	"$B/meshd" --catalog catalog --logs logs --socket "$S" --state state --log-level warn 2>>meshd.err &
	MESHD=$!
	i=0
	while ! mesh ps >/dev/null 2>&1; do
		i=$((i + 1))
		[ $i -lt 500 ] || { echo "demo: meshd did not start:" >&2; cat meshd.err >&2; exit 1; }
		kill -0 "$MESHD" 2>/dev/null || { echo "demo: meshd exited:" >&2; cat meshd.err >&2; exit 1; }
		sleep 0.01
	done
}
done_chunks() {
	v=$(metric 'mesh_chunks{state="done"}')
	echo "${v:-?}"
}

say "mesh demo: a ${TRIPLE%%-*} Mandelbrot, 1200x1000 in 300 tiles, through meshd; in $WORK"
say "meshd starts with an empty --state and no workers"
printf '$ meshd --catalog catalog --logs logs --state state --socket %s &\n' "$S"
start_meshd
# The page (docs/ui.md): its URL now, to watch the rest live (a free port;
# the demo goes on without it if it cannot serve).
"$B/mesh" ui --listen "${MESH_DEMO_UI:-127.0.0.1:0}" --socket "$S" >ui.out 2>ui.err &
UI=$!
i=0
while ! grep -q 'token=' ui.out 2>/dev/null && kill -0 "$UI" 2>/dev/null && [ $i -lt 300 ]; do
	sleep 0.01
	i=$((i + 1))
done
URL=$(sed -n 's/^  open //p' ui.out)
if [ -n "$URL" ]; then
	printf '$ mesh ui &\nwatch it in a browser on this machine: %s\n' "$URL"
else
	echo "(mesh ui did not start: $(cat ui.err 2>/dev/null); the demo goes on without it)"
	UI=
fi
run mesh ps
echo "(worker processes: $(procs))"

seq 0 299 | sed "s/\$/ $MAXIT/" >tiles.txt
say "submit the job: one chunk a tile (each line 'TILE MAXIT'), at most 2 workers"
printf '$ mesh submit mandel --input tiles.txt --max-workers 2\n'
JOB=$(mesh submit mandel --input tiles.txt --max-workers 2)
echo "$JOB"

say "pending chunks are demand: workers spawn from zero"
i=0
while [ "$(procs)" = 0 ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
run mesh ps

say "kill meshd with SIGKILL after about a third of the chunks"
third=100
i=0
while :; do
	d=$(done_chunks)
	case $d in
	'?') # no chunk count in /metrics: kill after a second instead
		[ $i -ge 100 ] && break ;;
	*) [ "${d%.*}" -ge $third ] && break ;;
	esac
	kill -0 "$MESHD" 2>/dev/null || break
	[ $i -lt 6000 ] || { echo "demo: no progress in 60 s:" >&2; mesh jobs >&2; tail -5 meshd.err >&2; exit 1; }
	sleep 0.01
	i=$((i + 1))
done
echo "done chunks before the kill: $(done_chunks) of 300"
run mesh jobs || true
printf '$ kill -9 %s\n' "$MESHD"
kill -9 "$MESHD"
wait "$MESHD" 2>/dev/null || true
MESHD=
sleep 0.2
left=$(pgrep -f "$WORK/catalog" | wc -l || true)
echo "meshd is gone; mandel processes left: $left (they die with meshd)"

say "start meshd again on the same --state: it finds the job and finishes it"
printf '$ meshd --catalog catalog --logs logs --state state --socket %s &\n' "$S"
start_meshd
run mesh jobs
t0=$(date +%s%N)
run mesh wait "$JOB"
t1=$(date +%s%N)
echo "(finished $(( (t1 - t0) / 1000000 )) ms after the restart)"
run mesh jobs

say "assemble the results (each tile exactly once) into a PNG"
printf '$ mesh results %s | mandel-assemble > mandel.png\n' "$JOB"
mesh results "$JOB" | "$B/examples/mandel/assemble" >mandel.png
echo "wrote $WORK/mandel.png"

say "the job is done: after the idle TTL (2 s) the workers are reaped"
i=0
while [ "$(procs)" != 0 ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done
run mesh ps
echo "(worker processes: $(procs))"

say "savings over mandel's window: the time it was loaded, across the restart (GET /metrics)"
m=$(metrics)
echo "$m" | grep -E '^mesh_(warm_seconds_total|always_on_seconds_total|window_seconds|savings_ratio|spawns_total|cold_start_seconds_(count|sum)|calls_total|chunk_completions_total|chunk_duplicates_total)' |
	grep -v ' 0$' || true
get() { echo "$m" | awk -v k="$1{program=\"mandel\"}" '$1 == k { print $2; exit }'; }
printf 'savings: %s over %.1f s loaded (with what the SIGKILLed meshd had written): %.2f worker-seconds warm of %.2f that 2 always-on workers would hold\n' \
	"$(get mesh_savings_ratio)" "$(get mesh_window_seconds)" "$(get mesh_warm_seconds_total)" "$(get mesh_always_on_seconds_total)"
echo "(mesh ps and GET /v1/ps give the same numbers: one definition, one window kept in logs/.savings)"

# The page's URL for the last line of `make demo` ($B/demo-ui.txt).
rm -f "$B/demo-ui.txt"
if [ -n "$UI" ] && [ "${MESH_DEMO_KEEP:-0}" = 1 ]; then
	printf 'mesh ui: %s\n  (meshd %s and mesh ui %s keep running on %s: kill %s %s to stop them)\n' \
		"$URL" "$MESHD" "$UI" "$S" "$MESHD" "$UI" >"$B/demo-ui.txt"
	MESHD= UI=
	say "done: $WORK/mandel.png (meshd and mesh ui left running: MESH_DEMO_KEEP=1)"
	exit 0
fi
[ -n "$UI" ] && printf 'mesh ui: %s showed this demo live (MESH_DEMO_KEEP=1 make demo leaves it up at the end)\n' \
	"$URL" >"$B/demo-ui.txt"
printf '$ kill %s\n' "$MESHD"
kill "$MESHD"
wait "$MESHD" 2>/dev/null || true
MESHD=
say "done: $WORK/mandel.png"
