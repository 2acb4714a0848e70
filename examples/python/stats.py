"""A numpy worker: the request is little-endian float64 values, read in place
from the slot (a memoryview, no copy); the reply is their count, sum, mean
and standard deviation as four float64.  The setup (importing numpy) runs
before `ready`, so meshd counts the worker warm only once numpy is loaded."""
import sys

import mesh.worker

w = mesh.worker.open()  # first: line-buffered output, meshd's channel
import numpy as np  # noqa: E402 -- the expensive setup, after open()

print("stats.py: numpy %s loaded" % np.__version__)


def stats(view):
    if len(view) % 8:
        raise ValueError("the request is %d bytes, not a whole number of float64" % len(view))
    x = np.frombuffer(view, dtype="<f8")
    if x.size == 0:
        raise ValueError("no values")
    return np.array([x.size, x.sum(), x.mean(), x.std()], dtype="<f8").tobytes()


w.ready()
w.serve(stats, view=True)
w.close()
sys.exit(0)
