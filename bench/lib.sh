# Shared by the meshd benchmarks (bench/bench_*.sh), sourced after they set
# B (the build directory, absolute): a temporary directory T removed on exit
# with the meshd started in it, the catalog's triple, meshd on $T/meshd.sock
# up and answering, `mesh` against it and `cpu` (its CPU seconds).  Not a
# benchmark itself (run.sh runs bench_*.sh only).

T=$(mktemp -d)
# meshd run as root starts workers as an unprivileged user (`nobody` unless a
# manifest names one): they must reach the catalog's binaries under $T.
chmod 755 "$T"
MESHD=
# A benchmark may define bench_on_exit to end more processes of its own.
bench_cleanup() {
	[ -n "$MESHD" ] && kill "$MESHD" 2>/dev/null && wait "$MESHD" 2>/dev/null
	command -v bench_on_exit >/dev/null 2>&1 && bench_on_exit
	rm -rf "$T"
}
trap bench_cleanup EXIT INT TERM

# TRIPLE: the catalog's binary directory for this machine; a machine without
# one skips the benchmark.
case $(uname -m) in
x86_64) TRIPLE=x86_64-linux-gnu ;;
aarch64) TRIPLE=aarch64-linux-gnu ;;
*) echo "   skipped: no catalog triple for $(uname -m)"; exit 0 ;;
esac

# Starts meshd on S=$T/meshd.sock with the catalog in $T/catalog, logs in
# $T/logs, stderr in $T/meshd.err and more options "$@"; waits up to 5 s for
# its socket (the benchmark ends when it does not come).
bench_start_meshd() {
	S=$T/meshd.sock
	"$B/meshd" --catalog "$T/catalog" --logs "$T/logs" --socket "$S" --log-level warn "$@" 2>"$T/meshd.err" &
	MESHD=$!
	i=0
	while [ ! -S "$S" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
	[ -S "$S" ] || { echo "   meshd did not start:"; cat "$T/meshd.err"; exit 1; }
}

mesh() { "$B/mesh" "$@" --socket "$S"; }
# meshd's resident memory now, KiB.
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$MESHD/status"; }
# meshd's CPU time so far (user + system, all threads, the ended ones too), seconds.
cpu() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / hz }' "/proc/$MESHD/stat"; }
