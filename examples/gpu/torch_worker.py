"""A PyTorch worker for meshd (the Python SDK, sdk/python): at setup it
builds an image classifier with random weights -- torchvision's ResNet-50
when torchvision is there, else a small ResNet-like network defined here;
nothing is downloaded -- puts it on the GPU and warms it with one batch;
then it serves inference:

    request: bytes of an image (uint8), cut or zero-padded to 3x224x224
    reply:   the top 5 classes as text, "class:score class:score ..."
    "vram":  torch.cuda.memory_allocated() and memory_reserved()
    "crash": dies of SIGSEGV with its memory held

Catalog entry (docs/gpu.md): <catalog>/x86_64-linux-gnu/torch is a symbolic
link to the Python interpreter that has torch, and <catalog>/torch.toml says

    name = "torch"
    backends = ["native"]
    device = "gpu"
    vram = "4GiB"
    args = ["/path/to/examples/gpu/torch_worker.py"]

Not run by this tree's tests: the machine it was written on has no torch
and no GPU.  Options by environment ([env] of the manifest):
TORCH_WORKER_MODEL (resnet18, resnet50; default resnet50),
TORCH_WORKER_DTYPE (float16, float32; default float16).
"""
import os
import signal
import sys
import time

import mesh.worker

SIDE = 224
state = {}


def small_resnet(torch, classes=1000):
    """A ResNet-like network in plain torch (when torchvision is absent)."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.skip = None
            if stride != 1 or cin != cout:
                self.skip = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return torch.relu(y + (x if self.skip is None else self.skip(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def setup():
    t0 = time.monotonic()
    import torch

    t_import = time.monotonic() - t0
    if not torch.cuda.is_available():
        print("torch_worker: no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)"
              % os.environ.get("CUDA_VISIBLE_DEVICES", ""), file=sys.stderr)
        sys.exit(1)
    name = os.environ.get("TORCH_WORKER_MODEL", "resnet50")
    dtype = getattr(torch, os.environ.get("TORCH_WORKER_DTYPE", "float16"))
    torch.manual_seed(0)
    try:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None)
        kind = "torchvision " + name
    except ImportError:
        model = small_resnet(torch)
        kind = "small ResNet (no torchvision)"
    dev = torch.device("cuda")
    model = model.eval().to(dev, dtype=dtype)
    with torch.inference_mode():
        model(torch.zeros(8, 3, SIDE, SIDE, device=dev, dtype=dtype))
    torch.cuda.synchronize()
    state.update(torch=torch, model=model, dev=dev, dtype=dtype)
    print("torch_worker: %s on %s, import torch %.2f s, setup %.2f s, %d MiB allocated"
          % (kind, torch.cuda.get_device_name(0), t_import, time.monotonic() - t0,
             torch.cuda.memory_allocated() >> 20))


def handle(data):
    torch = state["torch"]
    data = bytes(data)
    if data == b"crash":
        print("torch_worker: crashing with its GPU memory held", file=sys.stderr)
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGSEGV)
    if data == b"vram":
        return b"%d %d" % (torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
    need = 3 * SIDE * SIDE
    raw = data[:need].ljust(need, b"\0")
    x = torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(state["dev"])
    x = (x.to(state["dtype"]) / 255.0 - 0.5).reshape(1, 3, SIDE, SIDE)
    with torch.inference_mode():
        p = torch.softmax(state["model"](x).float(), dim=1)[0]
    top = torch.topk(p, 5)
    return " ".join("%d:%.4f" % (int(i), float(s)) for s, i in zip(top.values, top.indices)).encode()


if __name__ == "__main__":
    mesh.worker.main(handle, setup=setup)
