"""A numpy job worker doing real work per chunk: chunk k's input is a
matrix size n (a decimal line; empty: 128); the worker builds an n x n
matrix from a generator seeded with the chunk id, takes its singular values
(LAPACK's SVD) and replies one line:

    <chunk id> n=<n> smax=<largest> smin=<smallest> cond=<smax/smin>

The seed is the chunk id, so a rerun of a chunk (after a worker died) gives
the same line.  Submit it from Python (examples/python/submit.py) or with
`mesh submit pymatrix ::: 64 128 256`; a plain `mesh call pymatrix 64`
uses seed 0.  Its manifest: catalog/pymatrix.toml."""
import mesh.worker

w = mesh.worker.open()  # first: line-buffered output, meshd's channel
import numpy as np  # noqa: E402 -- the setup, after open(), before ready()

MAX_N = 2048


def handle(chunk_id, data):
    text = bytes(data).strip()
    n = int(text) if text else 128
    if not 1 <= n <= MAX_N:
        raise ValueError("matrix size %d is not in 1..%d" % (n, MAX_N))
    seed = 0 if chunk_id is None else chunk_id
    a = np.random.default_rng(seed).standard_normal((n, n))
    s = np.linalg.svd(a, compute_uv=False)
    return b"%d n=%d smax=%.6g smin=%.6g cond=%.6g\n" % (seed, n, s[0], s[-1], s[0] / s[-1])


print("matrix.py: numpy %s, ready" % np.__version__)
w.ready()
w.serve(handle)
w.close()
