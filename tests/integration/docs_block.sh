#!/bin/bash
# Runs one ```sh block of the docs as a reader pastes it, in a directory
# that has what the docs assume a reader has:
#   - `mesh` and `meshd` on PATH (the build under test) and `build/` there;
#   - a running meshd (MESH_SOCKET) whose catalog has the README's programs:
#     echo (examples/echo_worker) and sha256 (examples/sha256_worker),
#     with --state, so jobs run;
#   - the files the examples name: ./render-tile (a stand-in for the
#     reader's renderer: it prints its tile's number), urls.txt (file://
#     URLs), files.txt, big.log, a few *.txt and *.log files;
#   - `llama-server` on PATH: tests/workers/openai_server.py behind
#     llama-server's `-m FILE --port P` (llama.cpp is not installed here);
#   - /srv/ (the docs' stand-in for the reader's own directories) is a
#     directory of the test's.
# As root the block runs in a network namespace of its own (the fixed
# ports the docs use cannot meet another test's).
# Usage: docs_block.sh BLOCK_FILE DIR    (exit: the block's; killed after 90 s)
set -e
block=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
mkdir -p "$2"
dir=$(cd "$2" && pwd)
mkdir -p "$dir/bin" "$dir/meshd/catalog/x86_64-linux-gnu" "$dir/meshd/logs" "$dir/work"
cd "$dir"
chmod 0755 . meshd meshd/catalog meshd/catalog/x86_64-linux-gnu
cp "$MESH_BUILD/examples/echo_worker" meshd/catalog/x86_64-linux-gnu/echo
cp "$MESH_BUILD/examples/sha256_worker" meshd/catalog/x86_64-linux-gnu/sha256
printf 'name = "echo"\nbackends = ["native"]\n' >meshd/catalog/echo.toml
printf 'name = "sha256"\nbackends = ["native"]\nmax_workers = 4\n' >meshd/catalog/sha256.toml
cat >bin/llama-server <<EOF
#!/bin/sh
# llama-server's -m FILE --port P, served by the test upstream.
port= model=
while [ \$# -gt 0 ]; do
	case \$1 in -m) model=\$(basename "\$2" .gguf); shift ;; --port) port=\$2; shift ;; esac
	shift
done
exec python3 '$MESH_SRC/tests/workers/openai_server.py' --port "\$port" --models "\$model"
EOF
chmod 0755 bin/llama-server
ln -s "$MESH_BUILD/meshd" bin/meshd
ln -s "$MESH_BUILD/mesh" bin/mesh
cd work
ln -s "$MESH_BUILD" build
printf '#!/bin/sh\necho "tile $1"\n' >render-tile
chmod 0755 render-tile
for i in 1 2 3; do echo "text $i" >"t$i.txt"; echo "log $i" >"l$i.log"; done
for i in 1 2 3; do echo "file://$PWD/t$i.txt"; done >urls.txt
seq 1 50 >files.txt
for i in $(seq 1 2000); do echo "line $i"; [ $((i % 500)) = 0 ] && echo "ERROR at $i"; done >big.log
export PATH="$dir/bin:$PATH" MESH_SOCKET="$dir/meshd/m.sock"
run() {
	cd "$dir/work"
	[ -z "$NETNS" ] || ip link set lo up
	meshd --catalog "$dir/meshd/catalog" --logs "$dir/meshd/logs" --state "$dir/meshd/state" \
		--socket "$MESH_SOCKET" >"$dir/meshd.out" 2>&1 &
	m=$!
	# The docs assume a meshd that is running: its socket there first.
	for _ in $(seq 300); do [ -S "$MESH_SOCKET" ] && break; sleep 0.1; done
	set +e
	(sed "s|/srv/|$dir/srv/|g" "$block"; echo 'wait') >"$dir/run.sh"
	# In a session of its own, its output into a file: whatever the block
	# leaves running (a server it started and did not stop, because a
	# line failed) is killed with it and cannot hold our output open.
	setsid bash -e "$dir/run.sh" >"$dir/block.out" 2>&1 </dev/null &
	b=$!
	(sleep 90; kill -TERM -- -$b; sleep 5; kill -KILL -- -$b) >/dev/null 2>&1 &
	w=$!
	wait $b
	rc=$?
	pkill -P $w 2>/dev/null
	kill $w 2>/dev/null
	kill -KILL -- -$b 2>/dev/null
	cat "$dir/block.out"
	kill $m
	for _ in $(seq 100); do kill -0 $m 2>/dev/null || break; sleep 0.1; done
	kill -KILL $m 2>/dev/null
	wait $m
	return $rc
}
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null; then
	export -f run
	export dir block NETNS=1
	unshare -n bash -c run
else
	run
fi
