"""A worker shaped like a model server: a slow setup (loading weights) that
meshd waits for before it counts the worker warm, then cheap requests that
stream their reply token by token.

The "model" is a bigram table over a small vocabulary, built from a seed
(MODEL_SEED) after a simulated load time (MODEL_LOAD_S seconds, default 2:
think torch.load).  A request is a prompt; the reply is the prompt's words
followed by up to MODEL_TOKENS generated ones, each yielded as soon as it
exists (a generator handler: `mesh call` prints the parts as they come).
As a job chunk (handle(chunk_id, data)) the reply is one line:
"<chunk id>\t<completion>\n".

The manifest, catalog/pymodel.toml, gives it a long ready_timeout and an
idle_ttl that keeps the loaded model warm between bursts."""
import os
import time

import mesh.worker

VOCAB = ("the mesh runs every chunk once on warm workers and the model answers "
         "fast because its weights stay loaded between requests").split()


def load_model():
    import numpy as np

    time.sleep(float(os.environ.get("MODEL_LOAD_S", "2")))  # the expensive part
    rng = np.random.default_rng(int(os.environ.get("MODEL_SEED", "7")))
    weights = rng.random((len(VOCAB), len(VOCAB)))
    return weights / weights.sum(axis=1, keepdims=True)


w = mesh.worker.open()  # first, so meshd sees the setup's output
t0 = time.monotonic()
WEIGHTS = load_model()
TOKENS = int(os.environ.get("MODEL_TOKENS", "8"))
print("model_server.py: model loaded in %.2f s" % (time.monotonic() - t0))


def generate(prompt):
    words = prompt.split()
    last = VOCAB.index(words[-1]) if words and words[-1] in VOCAB else 0
    for i in range(TOKENS):
        # The most likely next word, or the 2nd or 3rd (no loop on one
        # pair); deterministic, so a rerun chunk answers the same.
        last = int(WEIGHTS[last].argsort()[-1 - i % 3])
        yield VOCAB[last]


def handle(chunk_id, data):
    prompt = bytes(data).decode("utf-8", "replace")
    if chunk_id is not None:  # a job's chunk: one line, all at once
        return ("%d\t%s\n" % (chunk_id, " ".join(generate(prompt)))).encode()

    def stream():  # a call: each token goes out as it is made
        for tok in generate(prompt):
            yield (" " + tok).encode()
    return stream()


w.ready()
w.serve(handle)
w.close()
