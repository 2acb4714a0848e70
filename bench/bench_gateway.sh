#!/bin/sh
# bench_gateway: meshd --http (the model gateway) beside a direct connection
# and haproxy (`mode http`), in one run, over loopback (docs/gateway.md).
#
#   warm relay   POST /v1/chat/completions (routed by "model") to one nginx:
#                requests/s and p50/p99 at 32 connections (wrk, keep-alive),
#                direct / haproxy / gateway; target: gateway >= haproxy's
#                rate; and the CPU nginx, haproxy and meshd spent per request
#                over the same run (/proc/PID/stat), which a loaded machine
#                skews less than the rates; then the p50 at 1 connection,
#                where a proxy's added latency is its own (at 32 it is mostly
#                queueing: 32 / the rate); target: p50 added <= 50 us
#   paced        the latency a proxy adds at 32 connections below saturation:
#                an open-loop load at fixed offered rates (BENCH_GATEWAY_RATES,
#                default 2000 5000 10000 requests/s in all), timed from each
#                request's due time (bench/paced_client.c: no coordinated
#                omission), direct / haproxy / gateway in turn, medians of
#                BENCH_GATEWAY_PACED_ROUNDS (3) rounds of
#                BENCH_GATEWAY_PACED_SECONDS (2) each: p50 and p99 added
#   streaming    time to first token (tests/workers/openai_server.py, SSE),
#                gateway minus direct, median of 30; target <= 1 ms
#   cold start   first byte minus the program's own spawn-to-ready for a 2 s
#                start; target <= 5 ms.  The program: bench/cold_upstream.c
#                (a sleep, a listen, a ready file holding the time of its
#                first instruction and of its listen; answers in
#                microseconds), through the gateway and started by the
#                script itself (fork and exec to its ready file), in turn,
#                COLD_ROUNDS (9) rounds, medians; also each round's own
#                start (its first instruction to its listen) subtracted,
#                which removes the start's jitter from the difference
# Usage: bench/bench_gateway.sh BUILD.  Skipped without wrk, haproxy, nginx.
# BENCH_GATEWAY_PARTS: the parts to run (default "warm paced stream cold").
B=$(cd "${1:-build}" && pwd)
PARTS=" ${BENCH_GATEWAY_PARTS:-warm paced stream cold} "
part() { case $PARTS in *" $1 "*) return 0 ;; esac; return 1; }
if part cold && [ ! -x "$B/bench/cold_upstream" ]; then
	echo "   cold start skipped: no $B/bench/cold_upstream (make bench builds it)"
	PARTS=$(echo "$PARTS" | sed 's/ cold / /')
fi
for t in wrk haproxy nginx python3 curl; do
	command -v $t >/dev/null 2>&1 || [ -x /usr/sbin/$t ] || { echo "   skipped: $t is not installed (mk/deps.sh bench)"; exit 0; }
done
PATH=$PATH:/usr/sbin
. bench/lib.sh
HAPROXY=
bench_on_exit() { [ -n "$HAPROXY" ] && kill "$HAPROXY" 2>/dev/null && wait "$HAPROXY" 2>/dev/null; }
OA=$(pwd)/tests/workers/openai_server.py
# The interpreter itself, not what `python3` names in PATH: a version
# manager's shim there (pyenv's is a shell script) costs hundreds of ms a
# start, which the direct start below, from inside python, would not pay.
PY=$(python3 -c 'import sys; print(sys.executable)')
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GP=$(free_port)
mkdir -p "$T/catalog" "$T/logs" "$T/tmp"
cat >"$T/nginx.conf.in" <<NGX
daemon off; master_process on; worker_processes 1; pid nginx.pid;
error_log error.log warn; events { worker_connections 1024; }
http { access_log off; client_body_temp_path tmp; proxy_temp_path tmp;
  fastcgi_temp_path tmp; uwsgi_temp_path tmp; scgi_temp_path tmp; keepalive_requests 1000000;
  server { listen 127.0.0.1:@PORT@; location / { return 200 "{\"object\":\"chat.completion\",\"choices\":[]}\n"; } } }
NGX
cat >"$T/catalog/web.toml" <<TOML
name = "web"
backend = "http"
models = ["nginx"]
probe_path = "/"
probe_status = 200
command = ["sh", "-c", "sed s/@PORT@/{port}/ $T/nginx.conf.in > $T/nginx.conf && exec nginx -p $T -e $T/error.log -c $T/nginx.conf"]
[lifecycle]
stop_signal = "QUIT"
TOML
cat >"$T/catalog/oa.toml" <<TOML
name = "oa"
backend = "http"
models = ["test-model"]
command = ["$PY", "$OA", "--port", "{port}", "--tokens", "3"]
TOML
cat >"$T/catalog/cold.toml" <<TOML
name = "cold"
backend = "http"
models = ["cold-model"]
idle_ttl = "1s"
command = ["$B/bench/cold_upstream", "{port}", "cold-model", "2", "$T/ready"]
TOML
# Its programs write under $T and run python3 from this PATH: as meshd's user
# (a root meshd would run them as nobody otherwise).
MESHD_DEFAULT_USER=${MESHD_DEFAULT_USER:-$(id -un)} bench_start_meshd --http 127.0.0.1:$GP
G=http://127.0.0.1:$GP
# Warm nginx through the gateway, then find its port.
curl -sS -o /dev/null -X POST -d '{"model":"nginx"}' $G/v1/chat/completions || { cat "$T/meshd.err"; exit 1; }
NP=$(mesh ps --json | python3 -c 'import json,sys; print([p["port"] for p in json.load(sys.stdin)["http"] if p["name"]=="web"][0])')
HP=$(free_port)
cat >"$T/haproxy.cfg" <<HAP
global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend f
  bind 127.0.0.1:$HP
  default_backend b
backend b
  server s1 127.0.0.1:$NP
HAP
haproxy -db -f "$T/haproxy.cfg" >"$T/haproxy.log" 2>&1 &
HAPROXY=$!
i=0
until curl -s -o /dev/null -X POST -d x http://127.0.0.1:$HP/ || [ $i -ge 200 ]; do sleep 0.01; i=$((i + 1)); done
cat >"$T/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"model":"nginx","messages":[{"role":"user","content":"hi"}]}'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  io.write(string.format("RESULT %.0f %.1f %.1f %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50), latency:percentile(99), summary.errors.status + summary.errors.connect + summary.errors.read))
end
LUA
DUR=${BENCH_GATEWAY_SECONDS:-4}
# CPU (user + system, every thread) a process spent, in clock ticks: a
# proxy's CPU per request is skewed less than its rate by a loaded machine.
cpu_ticks() { awk '{print $14 + $15}' /proc/$1/stat 2>/dev/null || echo 0; }
NGINX=$(pgrep -P "$(pgrep -o -f "nginx -p $T")" 2>/dev/null | head -1); NGINX=${NGINX:-$MESHD}
HZ=$(getconf CLK_TCK)
# run_wrk URL PID [CONNECTIONS]: "req/s p50 p99 errors us-of-PID's-CPU-per-request"
run_wrk() {
	nc=${3:-32}
	c0=$(cpu_ticks $2)
	r=$(wrk -t$((nc < 2 ? 1 : 2)) -c$nc -d${DUR}s -s "$T/post.lua" "$1/v1/chat/completions" 2>&1 | awk '/^RESULT/ {print $2, $3, $4, $5}')
	c1=$(cpu_ticks $2)
	echo "$r" | awk -v c="$((c1 - c0))" -v hz="$HZ" -v d="$DUR" '{ printf "%s %s %s %s %.1f\n", $1, $2, $3, $4,
		($1 > 0 ? c * 1e6 / hz / ($1 * d) : 0) }'
}
# What meshd holds as requests go through it (a daemon left up for months
# must not grow with them): its resident memory after the warm-up, and after
# the warm and paced parts, with the requests it relayed meanwhile.
requests_total() { curl -s --unix-socket "$S" http://mesh/metrics | awk '/^mesh_gateway_requests_total/ { n += $NF } END { printf "%.0f", n }'; }
RSS0=$(rss_kb) REQ0=$(requests_total)
if part warm; then
set -- $(run_wrk http://127.0.0.1:$NP $NGINX); D_RPS=$1 D_P50=$2 D_P99=$3 D_ERR=$4 D_CPU=$5
set -- $(run_wrk http://127.0.0.1:$HP $HAPROXY); H_RPS=$1 H_P50=$2 H_P99=$3 H_ERR=$4 H_CPU=$5
set -- $(run_wrk $G $MESHD); G_RPS=$1 G_P50=$2 G_P99=$3 G_ERR=$4 G_CPU=$5
echo "   warm relay to nginx, 32 connections, ${DUR} s each (wrk; latency in us; CPU: us of nginx's, haproxy's,"
echo "   meshd's CPU per request; $(uptime | sed 's/.*load/load/')):"
printf '   %-10s %10s %9s %9s %7s %7s\n' "" "req/s" "p50" "p99" "errors" "CPU/req"
printf '   %-10s %10s %9s %9s %7s %7s\n' direct "$D_RPS" "$D_P50" "$D_P99" "$D_ERR" "$D_CPU"
printf '   %-10s %10s %9s %9s %7s %7s\n' haproxy "$H_RPS" "$H_P50" "$H_P99" "$H_ERR" "$H_CPU"
printf '   %-10s %10s %9s %9s %7s %7s\n' gateway "$G_RPS" "$G_P50" "$G_P99" "$G_ERR" "$G_CPU"
awk -v g="$G_RPS" -v h="$H_RPS" -v gc="$G_CPU" -v hc="$H_CPU" -v gp="$G_P50" -v hp="$H_P50" -v dp="$D_P50" 'BEGIN {
	printf "   gateway/haproxy rate %.2fx (target >= 1.0); p50 added at 32 connections (queueing): gateway %+.0f us, haproxy %+.0f us\n",
		(h > 0 ? g / h : 0), gp - dp, hp - dp
	printf "   CPU per request: gateway %.1f us, haproxy %.1f us (%.2fx)\n", gc, hc, (hc > 0 ? gc / hc : 0) }'
# One connection: no queue, so the p50 added is the proxy's own time (at 32
# connections the mean latency is 32 / the rate, Little's law).
set -- $(run_wrk http://127.0.0.1:$NP $NGINX 1); D1_RPS=$1 D1_P50=$2
set -- $(run_wrk http://127.0.0.1:$HP $HAPROXY 1); H1_RPS=$1 H1_P50=$2 H1_CPU=$5
set -- $(run_wrk $G $MESHD 1); G1_RPS=$1 G1_P50=$2 G1_CPU=$5
awk -v d="$D1_P50" -v h="$H1_P50" -v g="$G1_P50" -v dr="$D1_RPS" -v hr="$H1_RPS" -v gr="$G1_RPS" -v hc="$H1_CPU" -v gc="$G1_CPU" 'BEGIN {
	printf "   1 connection: p50 direct %.0f us, haproxy %.0f (%+.0f), gateway %.0f (%+.0f) (target: added <= 50 us);\n", d, h, h - d, g, g - d
	printf "     req/s %s / %s / %s; CPU per request haproxy %.1f us, gateway %.1f us\n", dr, hr, gr, hc, gc }'
fi

# Below saturation: 32 connections at fixed offered rates, open loop (a
# request's latency from its due time), direct, haproxy, gateway in turn,
# BENCH_GATEWAY_PACED_ROUNDS rounds (medians: one round on a shared machine
# moves by milliseconds).  What a proxy adds here is its own time plus the
# queueing its CPU makes at that rate, not 32 / its maximum rate; its CPU
# per request (/proc/PID/stat) is the figure a loaded machine skews least.
if part paced && [ -x "$B/bench/paced_client" ]; then
	PDUR=${BENCH_GATEWAY_PACED_SECONDS:-2}
	ROUNDS=${BENCH_GATEWAY_PACED_ROUNDS:-3}
	echo "   paced (open loop), 32 connections, ${PDUR} s each, medians of $ROUNDS alternating rounds; latency from"
	echo "   each request's due time in us; CPU: us of nginx's, haproxy's, meshd's CPU per request ($(uptime | sed 's/.*load/load/')):"
	printf '   %-8s %-8s %9s %7s %7s %7s %7s %7s %6s\n' rate "" done p50 p99 "p50+" "p99+" CPU/req late
	for rate in ${BENCH_GATEWAY_RATES:-2000 5000 10000}; do
		: >"$T/paced"
		k=0
		while [ $k -lt "$ROUNDS" ]; do
			for w in direct:$NP:$NGINX haproxy:$HP:$HAPROXY gateway:$GP:$MESHD; do
				n=${w%%:*} pid=${w##*:} port=${w#*:}
				port=${port%%:*}
				c0=$(cpu_ticks $pid)
				r=$("$B/bench/paced_client" "$port" "$rate" 32 "$PDUR" nginx 2>&1 | awk '/^PACED/ {print $3, $4, $6, $9}')
				c1=$(cpu_ticks $pid)
				[ -n "$r" ] && echo "$n $r $((c1 - c0))" >>"$T/paced"
			done
			k=$((k + 1))
		done
		awk -v rate="$rate" -v hz="$HZ" -v d="$PDUR" '
			function med(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
				return n ? (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2) : 0 }
			{ n = ++cnt[$1]; done[$1, n] = $2; p50[$1, n] = $3; p99[$1, n] = $4; late[$1, n] = $5
			  cpu[$1, n] = $2 > 0 ? $6 * 1e6 / hz / ($2 * d) : 0 }
			END { split("direct haproxy gateway", ws, " ")
			  for (w = 1; w <= 3; w++) { x = ws[w]; n = cnt[x]
			    if (!n) { printf "   %-8s %-8s failed\n", rate, x; continue }
			    for (i = 1; i <= n; i++) { A[i] = done[x, i]; B[i] = p50[x, i]; C[i] = p99[x, i]; D[i] = late[x, i]; E[i] = cpu[x, i] }
			    md = med(A, n); m50[x] = med(B, n); m99[x] = med(C, n); ml = med(D, n); mc = med(E, n)
			    printf "   %-8s %-8s %9.0f %7.0f %7.0f %+7.0f %+7.0f %7.1f %6.0f\n", rate, x, md, m50[x], m99[x],
				m50[x] - m50["direct"], m99[x] - m99["direct"], mc, ml } }' "$T/paced"
	done
	echo "   (p50+/p99+: the medians' difference from direct's at the same offered rate; target p50 added <= 50 us;"
	echo "   late: requests the client sent over 100 us after their due time, of ${PDUR} s x rate: the machine's noise)"
fi
echo "   meshd resident: $RSS0 KiB after the warm-up, $(rss_kb) KiB after $(($(requests_total) - REQ0)) more requests relayed"

# Streaming and the cold start: Python clients timing the first token/byte.
B="$B" OA="$OA" PY="$PY" python3 - "$G" "$T" "$PARTS" <<'PY'
import http.client, json, os, shutil, socket, statistics, subprocess, sys, tempfile, time, urllib.request
g, t, parts = sys.argv[1], sys.argv[2], sys.argv[3].split()
gport = int(g.rsplit(":", 1)[1])
body = json.dumps({"model": "test-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]})

def ttft(port, path="/v1/chat/completions", b=body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    t0 = time.perf_counter()
    c.request("POST", path, b, {"Content-Type": "application/json"})
    r = c.getresponse()
    while True:
        line = r.fp.readline()
        if line.startswith(b"data: "):
            break
        if not line:
            raise SystemExit("no token")
    t1 = time.perf_counter()
    while line and line != b"0\r\n":  # the rest, raw, to the last chunk
        line = r.fp.readline()
    c.close()
    return (t1 - t0) * 1e6

if "stream" in parts:
    ttft(gport)  # cold start of oa, not timed
    # oa's own port, from meshd's list (its log has no spawn line at --log-level warn).
    ps = json.loads(subprocess.run([os.path.join(os.environ["B"], "mesh"), "ps", "--json", "--socket",
                                    os.path.join(t, "meshd.sock")], capture_output=True, check=True).stdout)
    oport = [p["port"] for p in ps["http"] if p["name"] == "oa"][0]
    d, w = [], []
    for i in range(30):
        d.append(ttft(oport))
        w.append(ttft(gport))
    dm, wm = statistics.median(d), statistics.median(w)
    print("   streaming time to first token, median of 30 (us): direct %.0f, gateway %.0f, added %+.0f us "
          "(target <= 1000)" % (dm, wm, wm - dm))
if "cold" not in parts:
    sys.exit(0)
# Cold start: a program whose own start takes 2 s (bench/cold_upstream.c),
# through the gateway and started by this script itself (fork and exec, as
# a user would start it: its spawn-to-ready from before the fork to the
# listen its ready file records, then the same request at once), in turn,
# COLD_ROUNDS rounds (the program is reaped to cold in between: idle_ttl
# 1 s); medians.  The ready file's first stamp is the program's first
# instruction: each round's own start (that stamp to its listen) is known on
# both sides, so the "paired" figure subtracts it round by round and keeps
# only the start's jitter-free parts: meshd's spawn, the listen's detection,
# the probe, the request's relay (and the program's two answers).
import subprocess
up = os.path.join(os.environ["B"], "bench", "cold_upstream")
b = json.dumps({"model": "cold-model", "messages": [{"role": "user", "content": "hi"}]})
req = ("POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
       "Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(b), b)).encode()
def first_byte(port):
    s = socket.create_connection(("127.0.0.1", port))
    t0 = time.time()
    s.sendall(req)
    s.recv(1)
    t1 = time.time()
    s.close()
    return t0, t1
def state():
    ms = json.load(urllib.request.urlopen(g + "/v1/models"))["data"]
    return [m.get("state") for m in ms if m["id"] == "cold-model"][0]
def stamps(path):
    started, ready = open(path).read().split()
    return int(started) / 1e9, int(ready) / 1e9
def direct_once():
    d = tempfile.mkdtemp()
    ps = socket.socket(); ps.bind(("127.0.0.1", 0)); port = ps.getsockname()[1]; ps.close()
    rf = os.path.join(d, "ready")
    u0 = time.time()
    pr = subprocess.Popen([up, str(port), "cold-model", "2", rf])
    while not os.path.exists(rf) or not os.path.getsize(rf):
        time.sleep(0.0002)
    v0, v1 = first_byte(port)
    pr.terminate()
    pr.wait()
    started, ready = stamps(rf)
    shutil.rmtree(d, ignore_errors=True)
    # spawn-to-ready, first byte, fork to its first instruction (ms)
    return (ready - u0) * 1e3, (v1 - u0) * 1e3, (started - u0) * 1e3
rounds = int(os.environ.get("COLD_ROUNDS", "9"))
gws, owns, drs, dfs, dpres, lines = [], [], [], [], [], []
for i in range(rounds):
    dr, df, dpre = direct_once()
    drs.append(dr)
    dfs.append(df)
    dpres.append(dpre)
    if i:
        w0 = time.time()
        while state() != "cold" and time.time() - w0 < 15:
            time.sleep(0.02)
    try:
        os.unlink(os.path.join(t, "ready"))
    except FileNotFoundError:
        pass
    t0, t1 = first_byte(gport)
    gws.append((t1 - t0) * 1e3)
    started, ready = stamps(os.path.join(t, "ready"))
    owns.append((ready - started) * 1e3)
    with open(os.path.join(t, "logs", "cold.log")) as f:
        lines.append([l for l in f if "[meshd] warm pid " in l][-1])
md = statistics.median
gw_first = md(gws)
print("   cold start (2 s), median of %d rounds: first byte through the gateway %.2f ms; the same program "
      "started directly: spawn-to-ready %.2f ms, first byte %.2f ms" % (rounds, gw_first, md(drs), md(dfs)))
print("     the gateway's first byte minus the program's own spawn-to-ready: %.2f ms (target <= 5); minus its own "
      "first byte: %.2f ms" % (gw_first - md(drs), gw_first - md(dfs)))
paired = [a - o - md(dpres) for a, o in zip(gws, owns)]
print("     paired (each round's first byte minus its own start, first instruction to listen, minus the direct "
      "fork to first instruction, %.2f ms): %.2f ms (median; rounds %s)"
      % (md(dpres), md(paired), ", ".join("%.1f" % x for x in paired)))
def num(line, after):
    try:
        return float(line.split(after)[1].split(" ")[0].rstrip(")"))
    except (IndexError, ValueError):
        return None
steps = [(num(l, "; spawn "), num(l, "(within "), num(l, "the probe answered in "),
          float(l.split(" in ")[1].split(" ms")[0])) for l in lines]
ok = [(sp, wi, an, gw - wm) for (sp, wi, an, wm), gw in zip(steps, gws) if None not in (sp, wi, an)]
if ok:
    print("     of which (medians): meshd's spawn to the program's exec %.2f ms; its listen seen within %.2f ms; the "
          "probe answered in %.2f ms; the first byte %.2f ms after warm (the request, relayed at once, and its answer)"
          % tuple(md([x[k] for x in ok]) for k in range(4)))
l = lines[-1]
if "waited with " in l:
    print("     meshd's wait for it (the last round): %s" % l.split("waited with ")[1].split(";")[0])
PY
