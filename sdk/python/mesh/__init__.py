"""mesh for Python: write workers that meshd hosts (mesh.worker, through
libmeshworker) and talk to meshd (mesh.client, standard library only).

Importing `mesh` loads no native library; `import mesh.worker` does.
See docs/python.md in the mesh source tree."""

from .client import Client, Job, MeshError, MeshTimeout, MeshUnreachable

__version__ = "0.1.0"
__all__ = ["Client", "Job", "MeshError", "MeshTimeout", "MeshUnreachable", "__version__"]
