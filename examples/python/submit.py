"""Submits a job from Python and follows it (mesh.client, standard library
only): one chunk per matrix size given, served by examples/python/matrix.py
(catalog/pymatrix.toml), a progress line while it runs, each result as it
is settled, in chunk order.

    python3 submit.py [PROGRAM] [SIZE...]     (default: pymatrix, 64 sizes of 200)
"""
import sys

from mesh.client import Client, MeshError


def main(argv):
    program = argv[1] if len(argv) > 1 else "pymatrix"
    sizes = argv[2:] or ["200"] * 64
    c = Client()
    try:
        job = c.submit(program, inputs=sizes, max_workers=2, retries=3)
        print("job %s: %d chunks of %s" % (job.id, len(sizes), program), file=sys.stderr)
        for piece in job.results():  # streamed while the job runs
            sys.stdout.buffer.write(piece)
            sys.stdout.flush()
        state = job.wait(progress=lambda j: print("  %(done)d/%(chunks)d done, %(rate).0f/s" % j,
                                                  file=sys.stderr))
    except MeshError as e:
        print("mesh: %s (%s)" % (e, e.code), file=sys.stderr)
        return 1
    print("job %s: %s" % (job.id, state), file=sys.stderr)
    return 0 if state == "complete" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
