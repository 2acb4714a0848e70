#!/bin/sh
# meshd at rest and through its control API, side by side with references
# measured in the same run:
#   - meshd's resident memory with no worker (target <= 4 MB), beside an idle
#     beanstalkd (another small C daemon) when it is installed;
#   - worker processes while no program is warm (target 0);
#   - `mesh call` round trip through meshd (a process start, the HTTP request,
#     the slot's rings) vs a plain `curl --unix-socket` GET /v1/ps.
# Usage: bench/bench_meshd.sh BUILD   (MESH_BUILD is set by bench/run.sh)
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
N=${MESH_BENCH_CALLS:-100}
. "$(dirname "$0")/lib.sh"
BEANS=
bench_on_exit() { [ -n "$BEANS" ] && kill "$BEANS" 2>/dev/null; }
mkdir -p "$T/catalog/$TRIPLE" "$T/logs"
cp "$B/examples/echo_worker" "$T/catalog/$TRIPLE/echo" || exit 1
printf 'name = "echo"\nbackends = ["native"]\n' >"$T/catalog/echo.toml"

bench_start_meshd

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
children() { ps -o pid= --ppid "$1" | wc -l; }
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v <= t) ? "MET" : "MISSED" }'; }

mesh load echo >/dev/null || { echo "   load failed"; exit 1; }
sleep 0.3
rss=$(rss_kb "$MESHD")
ref="-"
if command -v beanstalkd >/dev/null 2>&1; then
	beanstalkd -l 127.0.0.1 -p 0 >/dev/null 2>&1 &
	BEANS=$!
	sleep 0.3
	ref=$(rss_kb "$BEANS" 2>/dev/null || echo "-")
fi
printf '   %-34s %10s %12s %8s %10s  %s\n' "figure" "mesh" "reference" "ratio" "target" "verdict"
ratio=$(awk -v a="$rss" -v b="$ref" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "-" }')
printf '   %-34s %8s kB %9s kB %8s %7s kB  %s\n' "meshd RSS, loaded, no worker" "$rss" "$ref" "$ratio" 4096 \
	"$(verdict "$rss" 4096) (reference: idle beanstalkd)"
w=$(children "$MESHD")
printf '   %-34s %10s %12s %8s %10s  %s\n' "worker processes, none warm" "$w" "-" "-" 0 "$(verdict "$w" 0)"

# Round trips: the first call starts the worker; time only warm ones.
mesh call echo warm >/dev/null || { echo "   call failed:"; tail -n 5 "$T/meshd.err"; exit 1; }
t0=$(date +%s%N)
i=0
while [ $i -lt "$N" ]; do mesh call echo ping >/dev/null || exit 1; i=$((i + 1)); done
t1=$(date +%s%N)
i=0
while [ $i -lt "$N" ]; do curl -s --unix-socket "$S" http://x/v1/ps >/dev/null || exit 1; i=$((i + 1)); done
t2=$(date +%s%N)
call_us=$(( (t1 - t0) / N / 1000 ))
curl_us=$(( (t2 - t1) / N / 1000 ))
ratio=$(awk -v a="$call_us" -v b="$curl_us" 'BEGIN { printf "%.2f", a / b }')
printf '   %-34s %7s us %9s us %8s %10s  %s\n' "mesh call round trip (mean of $N)" "$call_us" "$curl_us" "$ratio" "-" \
	"(reference: curl --unix-socket GET /v1/ps; both include a process start)"
rss2=$(rss_kb "$MESHD")
printf '   %-34s %8s kB\n' "meshd RSS after the calls" "$rss2"

# The same requests without a process start each: one curl, one keep-alive
# connection, $M requests (URL globbing), for the call and for /v1/ps.
M=$((N * 5))
t0=$(date +%s%N)
curl -s --unix-socket "$S" -d ping "http://x/v1/programs/echo/call?n=[1-$M]" >/dev/null || exit 1
t1=$(date +%s%N)
curl -s --unix-socket "$S" "http://x/v1/ps?n=[1-$M]" >/dev/null || exit 1
t2=$(date +%s%N)
call_us=$(( (t1 - t0) / M / 1000 ))
ps_us=$(( (t2 - t1) / M / 1000 ))
ratio=$(awk -v a="$call_us" -v b="$ps_us" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }')
printf '   %-34s %7s us %9s us %8s %10s  %s\n' "call over one connection ($M)" "$call_us" "$ps_us" "$ratio" "-" \
	"(reference: GET /v1/ps over one connection)"

# Where the resident memory goes: libpq and what it links (GnuTLS, OpenSSL,
# Kerberos, LDAP, SASL; about 5 MB of RSS) used to be mapped by every meshd
# (and GnuTLS before that through Debian's libmicrohttpd, 2.3 MB); libpq is
# now loaded only by a store's first connection (src/store/pq.h), so this
# stays 0 for a meshd without --store.
tls=$(awk '/^[0-9a-f]+-/ {lib = $6} /^Rss:/ && lib ~ /(libpq|libssl|libcrypto|krb5|gssapi|ldap|lber|sasl|gnutls|p11-kit|nettle|hogweed|gmp|tasn1|idn2|unistring|ffi)/ {s += $2} END {print s + 0}' "/proc/$MESHD/smaps")
pss=$(awk '/^Pss:/ {print $2}' "/proc/$MESHD/smaps_rollup")
printf '   %-34s %8s kB  (of the RSS: libpq, TLS, Kerberos, LDAP; 0 without --store)\n' "RSS in libpq and its libraries" "$tls"
printf '   %-34s %8s kB  (RSS minus those)\n' "RSS without them" "$((rss2 - tls))"
printf '   %-34s %8s kB  (proportional set size: shared pages divided among their users)\n' "meshd PSS" "$pss"
mesh stop echo >/dev/null
sleep 0.2
w=$(children "$MESHD")
printf '   %-34s %10s %12s %8s %10s  %s\n' "worker processes after stop" "$w" "-" "-" 0 "$(verdict "$w" 0)"
