"""The worker of a mesh.function (its catalog entry runs
`python -m mesh._runner CODEC KIND TARGET ROOT QUALNAME`): imports the
function -- KIND "file": TARGET, a script, as the module __mesh_main__ (and
__main__, so that pickled objects of the script resolve), "module": TARGET by
name -- with ROOT first on sys.path, then serves it with mesh.worker, each
request decoded and its result encoded by CODEC (mesh.functions)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Callable, List


def _load(kind: str, target: str, root: str, qual: str) -> Callable[..., Any]:
    from . import functions

    sys.path[0:1] = [root]  # -m put meshd's directory there
    functions._importing = target
    try:
        if kind == "file":
            spec = importlib.util.spec_from_file_location("__mesh_main__", target)
            if spec is None or spec.loader is None:
                raise ImportError("mesh._runner: cannot import %s" % target)
            mod = importlib.util.module_from_spec(spec)
            sys.modules["__mesh_main__"] = mod
            sys.modules["__main__"] = mod
            spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(target)
    finally:
        functions._importing = None
    obj: Any = mod
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj.fn if isinstance(obj, functions.Function) else obj


def main(argv: List[str]) -> int:
    if len(argv) != 5:
        print("usage: python -m mesh._runner CODEC file|module TARGET ROOT QUALNAME (written by mesh.function)",
              file=sys.stderr)
        return 64
    codec, kind, target, root, qual = argv
    import mesh.worker
    from . import functions

    w = mesh.worker.open()  # first: line-buffered output, so a failing import shows whole in the log
    try:
        fn = _load(kind, target, root, qual)
        w.ready()
        w.serve(functions._serve(functions._check_codec(codec), fn))
    finally:
        w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
