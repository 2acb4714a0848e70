#!/bin/sh
# `make gpu-bundle`: what tests/gpu/run.sh needs on a GPU machine that may
# have no network and none of the Debian packages the build uses, in
# BUILD/gpu-bundle/ and BUILD/gpu-bundle.tar.gz (docs/gpu.md):
#   bin/meshd, bin/mesh      libevent, jansson and zlib linked statically:
#                            they need only glibc (>= 2.34) at run time
#                            (tests/gpu/compat_arc4random.c: libevent's arc4random)
#   workers/cuda_worker      the CUDA example (CUDA runtime static; needs the driver)
#   python/mesh/             the Python SDK, libmeshworker.so.0 beside it
#   examples/torch_worker.py the PyTorch example
#   run.sh, run.py           the check itself
# Usage: tests/gpu/bundle.sh BUILD   (after `make BUILD=...`)
set -eu
B=${1:-build}
CC=${CC:-cc}
out=$B/gpu-bundle
rm -rf "$out" "$B/gpu-bundle.tar.gz"
mkdir -p "$out/bin" "$out/workers" "$out/python/mesh" "$out/examples"
static="-Wl,-Bstatic -levent_extra -levent_pthreads -levent -levent_core -ljansson -lz -Wl,-Bdynamic -lpthread -lm"
$CC -O2 -c -o "$out/compat.o" tests/gpu/compat_arc4random.c
$CC -Wl,--as-needed -o "$out/bin/meshd" "$B/obj/src/meshd/main.o" "$out/compat.o" "$B/libmesh.a" $static
rm -f "$out/compat.o"
$CC -Wl,--as-needed -o "$out/bin/mesh" "$B"/obj/src/cli/*.o "$B/libmesh.a" $static
if [ -x "$B/examples/gpu/cuda_worker" ]; then
	cp "$B/examples/gpu/cuda_worker" "$out/workers/"
else
	echo "bundle: no $B/examples/gpu/cuda_worker (nvcc missing?): the bundle has no CUDA worker" >&2
fi
cp sdk/python/mesh/*.py "$out/python/mesh/"
cp "$B/libmeshworker.so" "$out/python/mesh/libmeshworker.so.0"
cp examples/gpu/torch_worker.py "$out/examples/"
cp tests/gpu/run.sh tests/gpu/run.py "$out/"
for f in "$out/bin/meshd" "$out/bin/mesh"; do
	if ldd "$f" | grep -E 'libevent|jansson|libz' >/dev/null; then
		echo "bundle: $f still needs a shared libevent/jansson/zlib" >&2
		exit 1
	fi
	if objdump -T "$f" | grep -E 'GLIBC_2\.3[5-9]' >/dev/null; then
		echo "bundle: $f needs a glibc newer than 2.34" >&2
		exit 1
	fi
done
tar -czf "$B/gpu-bundle.tar.gz" -C "$B" gpu-bundle
echo "bundle: $B/gpu-bundle.tar.gz ($(du -k "$B/gpu-bundle.tar.gz" | cut -f1) KiB); on the GPU machine:"
echo "  tar xzf gpu-bundle.tar.gz && gpu-bundle/run.sh report.md"
