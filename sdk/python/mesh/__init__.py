"""mesh for Python: write workers that meshd hosts (mesh.worker, through
libmeshworker), talk to meshd (mesh.client, standard library only), and run
Python functions on meshd's workers (mesh.function, mesh.map).

Importing `mesh` loads no native library; `import mesh.worker` does.
See docs/python.md in the mesh source tree."""

__version__ = "0.1.0"

from .client import Client, Job, MeshError, MeshTimeout, MeshUnreachable  # noqa: E402
from .functions import Function, MapResults, MeshChunkError, function, map  # noqa: E402

__all__ = ["Client", "Function", "Job", "MapResults", "MeshChunkError", "MeshError", "MeshTimeout",
           "MeshUnreachable", "function", "map", "__version__"]
