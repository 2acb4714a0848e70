#!/bin/sh
# Python workers through a meshd job vs a Python process per chunk, side by
# side in one run, the same work (the SHA-256 of each chunk's input, in hex,
# one line a chunk), both durable (journaled), both on 2 workers/slots:
#   - a job submitted from Python (mesh.client) to a pool of 2 warm Python
#     workers (mesh.worker, handle(chunk_id, data)): submit to COMPLETE;
#   - `mesh run -j 2 python3 -c ...`: one interpreter started per chunk.
# Prints chunks/s of each and the ratio (target >= 100x, docs/python.md),
# after checking that both produced the same lines.
# Usage: bench/bench_python_jobs.sh BUILD   (MESH_BENCH_PY_CHUNKS: job chunks,
# default 20000; MESH_BENCH_PY_RUN_CHUNKS: process-per-chunk chunks, default 200)
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
SRC=${MESH_SRC:-$(pwd)}
N=${MESH_BENCH_PY_CHUNKS:-20000}
NRUN=${MESH_BENCH_PY_RUN_CHUNKS:-200}
PY=/usr/bin/python3
. "$(dirname "$0")/lib.sh"
[ -x "$PY" ] || { echo "   skipped: no $PY"; exit 0; }
[ -f "$B/libmeshworker.so" ] || { echo "   skipped: no $B/libmeshworker.so"; exit 0; }

# The package with the library of this build beside it (as `make install` lays it out).
mkdir -p "$T/py/mesh" "$T/catalog/$TRIPLE" "$T/logs"
for f in "$SRC"/sdk/python/mesh/*.py; do ln -s "$f" "$T/py/mesh/"; done
ln -s "$B/libmeshworker.so" "$T/py/mesh/libmeshworker.so.0"
cat >"$T/hash.py" <<'PYEOF'
import hashlib
import mesh.worker


def handle(chunk_id, data):
    return hashlib.sha256(data).hexdigest().encode() + b"\n"


mesh.worker.main(handle)
PYEOF
ln -s "$PY" "$T/catalog/$TRIPLE/pyhash"
printf 'name = "pyhash"\nbackends = ["native"]\nargs = ["%s/hash.py"]\nmax_workers = 2\nidle_ttl = "60s"\n[env]\nPYTHONPATH = "%s/py"\n' \
	"$T" "$T" >"$T/catalog/pyhash.toml"
i=0
while [ $i -lt "$N" ]; do echo "chunk-$i"; i=$((i + 1)); done >"$T/in.txt"
head -n "$NRUN" "$T/in.txt" >"$T/in-run.txt"

bench_start_meshd --state "$T/state"

# The job, from Python: the two workers started (warm) first, then timed
# from submit to COMPLETE; the results checked against hashlib here.
job=$(PYTHONPATH="$T/py" "$PY" - "$S" "$T/in.txt" "$T/job.out" <<'PYEOF'
import sys, time
from mesh.client import Client
c = Client(sys.argv[1])
ins = open(sys.argv[2]).read().split("\n")[:-1]
c.start("pyhash"); c.start("pyhash")
t0 = time.monotonic()
job = c.submit("pyhash", inputs=ins, max_workers=2)
state = job.wait()
t1 = time.monotonic()
out = b"".join(job.results())
open(sys.argv[3], "wb").write(out)
print(state, len(ins) / (t1 - t0), job.info["rate"], job.info["workers"])
PYEOF
) || { echo "   the job failed"; cat "$T/meshd.err"; exit 1; }
set -- $job
[ "$1" = complete ] || { echo "   the job ended $1"; exit 1; }
jobrate=$2
driver=$3

# One interpreter per chunk (mesh run, 2 slots, journaled), the same work.
cd "$T" || exit 1
t0=$(date +%s.%N)
"$B/mesh" run -j 2 -k --input "$T/in-run.txt" --journal "$T/run.log" "$PY" -c \
	'import hashlib, sys; print(hashlib.sha256(sys.argv[1].encode()).hexdigest())' >"$T/run.out" 2>"$T/run.err" ||
	{ echo "   mesh run failed:"; tail -5 "$T/run.err"; exit 1; }
t1=$(date +%s.%N)
proc=$(echo "$NRUN / ($t1 - $t0)" | bc -l)
head -n "$NRUN" "$T/job.out" | cmp -s - "$T/run.out" || { echo "   the two ways disagree on the results"; exit 1; }

printf '   python workers (2) via a meshd job: %.0f chunks/s (driver rate %.0f/s; %d chunks)   mesh run, python3 -c a chunk (-j 2): %.1f chunks/s (%d chunks)   ratio %.0fx (target >= 100x)\n' \
	"$jobrate" "$driver" "$N" "$proc" "$NRUN" "$(echo "$jobrate / $proc" | bc -l)"
