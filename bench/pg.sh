# Sourced by the PostgreSQL benchmarks (bench_store.sh, bench_store_prof.sh):
# bench_pg_start [SERVER OPTIONS] starts a PostgreSQL of their own (initdb +
# pg_ctl under a fresh /tmp directory $T, as the postgres user when run as
# root; fsync and synchronous_commit on), stopped and removed at exit, and
# sets URL.  Exits 0 saying "skipped" where the server programs are missing.
bench_pg_start() {
	PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | tail -1)
	[ -x "$PGBIN/pg_ctl" ] || { echo "   skipped: no PostgreSQL server programs (mk/deps.sh test)"; exit 0; }
	T=$(mktemp -d)
	chmod 755 "$T"
	[ "$(id -u)" = 0 ] && chown postgres "$T"
	trap bench_pg_cleanup EXIT INT TERM
	bench_pg_as "$PGBIN/initdb -D $T/data -A trust -N -U mesh" >/dev/null 2>&1 || { echo "   initdb failed"; exit 1; }
	bench_pg_as "$PGBIN/pg_ctl -D $T/data -l $T/log -w -o \"-k $T -c listen_addresses= -c max_connections=80 -c fsync=on -c synchronous_commit=on $*\" start" >/dev/null 2>&1 ||
		{ echo "   pg_ctl start failed"; cat "$T/log"; exit 1; }
	URL="postgresql:///postgres?host=$T&user=mesh"
}
bench_pg_as() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- sh -c "$1"; else sh -c "$1"; fi; }
bench_pg_cleanup() {
	bench_pg_as "$PGBIN/pg_ctl -D $T/data -m immediate stop" >/dev/null 2>&1
	rm -rf "$T"
}
# bench_pg_storage: "BEFORE AFTER DONE" -- the bytes of the job tables
# (tables, indexes, TOAST: what a job's chunks cost, nodes and results
# aside) as they are, and after VACUUM FULL (their dead row versions
# gone), and the DONE chunks of every job in them.
bench_pg_storage() {
	_s="SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = 'mesh' AND c.relkind = 'r'
		AND c.relname IN ('done_words', 'chunks', 'blocks', 'ranges', 'counts', 'jobs', 'copies', 'durations')"
	_b0=$(psql -X -q -A -t "$URL" -c "$_s")
	psql -X -q "$URL" -c "VACUUM FULL mesh.done_words, mesh.chunks, mesh.blocks, mesh.ranges, mesh.counts, mesh.jobs,
		mesh.copies, mesh.durations" >/dev/null
	_b1=$(psql -X -q -A -t "$URL" -c "$_s")
	echo "$_b0 $_b1 $(psql -X -q -A -t "$URL" -c "SELECT coalesce(sum(done), 0) FROM mesh.job_counts")"
}
