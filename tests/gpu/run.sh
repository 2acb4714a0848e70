#!/bin/sh
# The GPU check of mesh, for a machine with an NVIDIA GPU (docs/gpu.md):
# meshd with the CUDA and the PyTorch example workers; writes a table of
# what it measured to REPORT.  Runs from the source tree (after `make`) or
# from the bundle `make gpu-bundle` makes (no packages, no network needed).
#
# Usage: tests/gpu/run.sh REPORT
# Exit: 0 all checks passed; 1 a check failed; 77 no GPU here (nothing
# measured; REPORT says so); 2 usage or a missing piece.
# RUN_GPU_PYTHON: the python3 that has torch (default: python3 on PATH).
# RUN_GPU_FAKE=1: the same steps against the fake NVML (plumbing only).
set -u
if [ $# -ne 1 ]; then
	echo "usage: tests/gpu/run.sh REPORT" >&2
	exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/meshd" ]; then # the bundle
	bin=$here/bin
	cuda=$here/workers/cuda_worker
	torch=$here/examples/torch_worker.py
	py=$here/python
	fake=
else # the source tree
	root=$(cd "$here/../.." && pwd)
	build=${MESH_BUILD_DIR:-build}
	case $build in /*) ;; *) build=$root/$build ;; esac
	bin=$build
	cuda=$build/examples/gpu/cuda_worker
	torch=$root/examples/gpu/torch_worker.py
	py=$root/sdk/python
	fake=$build/tests-gpu/fake_nvml.so
fi
python=${RUN_GPU_PYTHON:-$(command -v python3 || true)}
for f in "$bin/meshd" "$bin/mesh"; do
	if [ ! -x "$f" ]; then
		echo "run.sh: $f is missing: run make (or make gpu-bundle) first" >&2
		exit 2
	fi
done
if [ -z "$python" ]; then
	echo "run.sh: no python3 (RUN_GPU_PYTHON names one)" >&2
	exit 2
fi
if [ "${RUN_GPU_FAKE:-}" = 1 ]; then
	[ -n "$fake" ] && [ -f "$fake" ] || { echo "run.sh: RUN_GPU_FAKE needs the source tree's tests build (make tests-build)" >&2; exit 2; }
	state=$(mktemp)
	echo "gpu 85899345920 0 Fake GPU" >"$state"
	export MESH_NVML_LIB="$fake" FAKE_NVML_STATE="$state"
	cuda=$bin/tests-workers/gpu_worker
	torch=
fi
# A missing CUDA worker is said once a GPU is found (run.py): without a
# GPU the answer is "no GPU" (77) whatever was built (a sanitizer build
# or one without nvcc has no CUDA worker).
[ -x "$cuda" ] || cuda_missing=1
export RUN_GPU_CUDA_MISSING="${cuda_missing:-}"
export RUN_GPU_BIN="$bin" RUN_GPU_CUDA_WORKER="$cuda" RUN_GPU_TORCH_WORKER="$torch" RUN_GPU_PYTHON="$python"
export PYTHONPATH="$py${PYTHONPATH:+:$PYTHONPATH}"
# The whole run stays under 6 minutes.
exec timeout -k 10 350 "$python" "$here/run.py" "$1"
