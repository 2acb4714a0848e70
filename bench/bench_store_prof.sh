#!/bin/sh
# Where the PostgreSQL store's time goes, per chunk (a diagnosis, not part
# of `make bench`): starts a PostgreSQL of its own as bench_store.sh does,
# with pg_stat_statements (nested statements too, track=all), runs the
# PostgreSQL half of bench_store for one node count, then prints per chunk:
# statements and their server time, rows inserted/updated/deleted a table,
# WAL bytes and commits; and the server's CPU a node (with few chunks a
# node, e.g. 32 nodes of 64 chunks each: what a node's start costs).
# Usage: bench/bench_store_prof.sh BUILD [NODES [CHUNKS [sync|piped]]]
BUILD=${1:-build}
B=$(cd "$BUILD" && pwd)
NODES=${2:-8}
N=${3:-20000}
MODE=${4:-sync}
. "$(dirname "$0")/pg.sh"
bench_pg_start -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all -c track_functions=all
Q() { psql -X -q -A -t "$URL" -c "$1"; }
"$B/mesh" store init "$URL" >/dev/null || exit 1
Q "CREATE EXTENSION pg_stat_statements" >/dev/null
Q "SELECT pg_stat_statements_reset(); SELECT pg_stat_reset()" >/dev/null
W0=$(Q "SELECT pg_current_wal_lsn()")
X0=$(Q "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
PM=$(head -1 "$T/data/postmaster.pid")
# the server's CPU: its exited backends' (the postmaster's children's) and
# its own; the nodes' CPU: this shell's children's (times)
cpu() { awk '{print $14 + $15 + $16 + $17}' /proc/$PM/stat; }
C0=$(cpu)
${PERF:+perf record -a -g -o $PERF -- }"$B/bench/bench_store" "$URL" "$N" "$NODES" "$MODE"
sleep 1 # the stats of the nodes' backends reach the collector
C1=$(cpu)
HZ=$(getconf CLK_TCK)
echo "   CPU us a chunk: server $(( (C1 - C0) * 1000000 / HZ / N )); ms a node: server $(( (C1 - C0) * 1000 / HZ / NODES ))"
times
W1=$(Q "SELECT pg_current_wal_lsn()")
X1=$(Q "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
echo "   per chunk ($N chunks, $NODES nodes):"
Q "SELECT '   WAL bytes ' || round(pg_wal_lsn_diff('$W1', '$W0') / $N, 1) || ', commits ' || round(($X1 - $X0)::numeric / $N, 3)"
Q "SELECT '   ' || rpad(relname, 12) || ' ins ' || round(n_tup_ins::numeric / $N, 3) || ' upd ' || round(n_tup_upd::numeric / $N, 3)
	|| ' (hot ' || round(n_tup_hot_upd::numeric / $N, 3) || ') del ' || round(n_tup_del::numeric / $N, 3)
	|| ' | read: seq ' || round(coalesce(seq_tup_read, 0)::numeric / $N, 2) || ' idx ' || round(coalesce(idx_tup_fetch, 0)::numeric / $N, 2)
	FROM pg_stat_user_tables WHERE schemaname = 'mesh' ORDER BY relname"
echo "   statements: calls a chunk, server ms a 1000 chunks (total, nested ones within their callers'), rows a call"
Q "SELECT '   ' || lpad(round(calls::numeric / $N, 4)::text, 7) || lpad(round(total_exec_time::numeric * 1000 / $N, 2)::text, 9)
	|| lpad(round(rows::numeric / greatest(calls, 1), 1)::text, 7) || '  ' || left(regexp_replace(query, '\s+', ' ', 'g'), 110)
	FROM pg_stat_statements WHERE calls > 0 ORDER BY total_exec_time DESC LIMIT 25"
set -- $(bench_pg_storage)
echo "   storage a DONE chunk (the job's tables and indexes): $(( $1 / $3 )) bytes, $(echo "$2 $3" | awk '{printf "%.1f", $1 / $2}') after VACUUM FULL"
