#!/bin/sh
# meshd's jobs, side by side in one run (docs/jobs.md):
#   - trivial chunks through warm echo workers (mesh submit) vs `mesh run`
#     starting one process per chunk for the same kind of work (`true`),
#     both durable (journaled), both on 2 slots/workers: chunks/s and ratio;
#   - from a submit with zero workers to the first result (the job's
#     first_result_s: from the submit request's arrival to the first DONE
#     that is durable -- its result synced, its DONE record fsynced --
#     spawn included) vs a worker's spawn-to-ready (`mesh start` of a cold
#     program, minus a `mesh ps` round trip), and vs the spawn-to-ready of
#     the very worker that served it (meshd's cold-start histogram, one
#     observation): the difference is what meshd adds on that path; the
#     path itself from meshd's log (docs/jobs.md, "The first result");
#   - after the last chunk: time until zero worker processes (idle_ttl 1 s;
#     meshd's timer is armed for the TTL's expiry), from the time meshd
#     logged the job's driver ended (its workers were given back just
#     before), polled every 1 ms.
# Usage: bench/bench_jobs.sh BUILD   (MESH_BENCH_CHUNKS: warm chunks, default 20000)
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
N=${MESH_BENCH_CHUNKS:-20000}
NRUN=${MESH_BENCH_RUN_CHUNKS:-1000}
. "$(dirname "$0")/lib.sh"
mkdir -p "$T/catalog/$TRIPLE" "$T/logs"
for p in echo cold; do
	cp "$B/examples/echo_worker" "$T/catalog/$TRIPLE/$p" || exit 1
	printf 'name = "%s"\nbackends = ["native"]\nmax_workers = 2\nidle_ttl = "1s"\n' "$p" >"$T/catalog/$p.toml"
done

# info: the job's "driver ended" line marks its last chunk (below).
bench_start_meshd --state "$T/state" --log-level info
now() { date +%s.%N; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
job() { curl -s --unix-socket "$S" "http://x/v1/jobs/$1" 2>/dev/null; }
workers() { ps -o pid= --ppid "$MESHD" | wc -l; }

# Cold: zero workers of echo (loaded: scaled to zero, not new), one chunk.
mesh load echo >/dev/null || exit 1
[ "$(workers)" -eq 0 ] || echo "   (workers before the cold job: $(workers))"
id=$(mesh submit echo --chunks 1) && mesh wait "$id" >/dev/null || { echo "   cold job failed"; exit 1; }
first=$(job "$id" | field first_result_s)
cold=$(curl -s --unix-socket "$S" http://x/metrics | awk '$1 == "mesh_cold_start_seconds_sum{program=\"echo\"}" {print $2}')
t0=$(now); mesh start cold >/dev/null; t1=$(now)
mesh ps >/dev/null; t2=$(now)
ready=$(echo "($t1 - $t0) - ($t2 - $t1)" | bc -l)
printf '   submit -> first result (zero workers):  %.2f ms   worker spawn-to-ready: %.2f ms   (target: <= spawn-to-ready + 2 ms)\n' \
	"$(echo "$first * 1000" | bc -l)" "$(echo "$ready * 1000" | bc -l)"
printf '   that first result vs its own worker'"'"'s spawn-to-ready (%.2f ms): +%.2f ms\n' \
	"$(echo "${cold:-0} * 1000" | bc -l)" "$(echo "($first - ${cold:-0}) * 1000" | bc -l)"
sed -n "s/.*job=$id first result durable after \([^(]*\)(since the submit): /     path (ms since the submit): /p" "$T/meshd.err"

# Warm: the two workers stay up (idle_ttl 1 s); N trivial chunks.
mesh start echo >/dev/null
c0=$(cpu)
t0=$(now)
id=$(mesh submit echo --chunks "$N" --max-workers 2) && mesh wait "$id" >/dev/null || { echo "   warm job failed"; exit 1; }
t1=$(now)
c1=$(cpu)
warm=$(echo "$N / ($t1 - $t0)" | bc -l)
percpu=$(echo "$N / ($c1 - $c0)" | bc -l)
rate=$(job "$id" | field rate)

# Back to zero after the last chunk.
zero=$(python3 - "$MESHD" "$T/meshd.err" "$id" <<'PY'
import datetime, glob, sys, time
t0 = time.monotonic()
def workers():
    n = 0
    for f in glob.glob("/proc/%s/task/*/children" % sys.argv[1]):
        try:
            n += len(open(f).read().split())
        except OSError:
            pass
    return n
while workers() > 0 and time.monotonic() - t0 < 30:
    time.sleep(0.001)
t_zero = time.time()
end = None
for line in open(sys.argv[2], errors="replace"):
    if "job=%s driver ended" % sys.argv[3] in line:
        end = datetime.datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ")
        end = end.replace(tzinfo=datetime.timezone.utc).timestamp()
print("%.3f" % (t_zero - end) if end else "-1")
PY
)

# The same kind of work as one process per chunk (mesh run, 2 slots, journaled).
cd "$T" || exit 1
t0=$(now)
"$B/mesh" run -j 2 --chunks "$NRUN" --journal "$T/run.log" true >/dev/null 2>&1
t1=$(now)
proc=$(echo "$NRUN / ($t1 - $t0)" | bc -l)

printf '   warm echo workers (2): %.0f chunks/s (driver rate %.0f/s)   mesh run, a process a chunk (-j 2): %.0f chunks/s   ratio %.1fx (target >= 50x; >= 100000 chunks/s)\n' \
	"$warm" "$rate" "$proc" "$(echo "$warm / $proc" | bc -l)"
printf '   meshd CPU for the warm job: %.2f s, %.0f chunks per meshd CPU-second\n' "$(echo "$c1 - $c0" | bc -l)" "$percpu"
printf '   last chunk -> zero workers: %.3f s (idle_ttl 1 s; target <= idle_ttl + grace)\n' "$zero"
