"""The build backend of the package `mesh` (PEP 517, PEP 660): the standard
library only, so `pip install ./sdk/python` needs nothing from an index
(pyproject.toml: requires = [], backend-path = ["_backend"]).

The wheel holds mesh/*.py, mesh/py.typed and, when one is found, the
libmeshworker the package loads, as mesh/libmeshworker.so.0 (mesh.worker
looks there second, after $MESH_WORKER_LIB).  Which library, the first
that exists of:

  1. the config setting `libmeshworker` (pip install -C libmeshworker=PATH);
  2. $MESH_WORKER_LIB;
  3. build/libmeshworker.so of the source tree this directory sits in
     (sdk/python/../../build: what `make` builds).

A wheel with the library is tagged for this platform (py3-none-linux_<arch>);
without one (pip install before make, or a client-only install) it is pure
(py3-none-any) and mesh.worker finds the library by its other rules
(docs/python.md, "Which libmeshworker").  An editable install (pip install -e)
puts a .pth file naming this directory on the path: the package then runs
from the tree and loads the tree's build/libmeshworker.so.
"""

import base64
import hashlib
import io
import os
import re
import sysconfig
import tarfile
import zipfile

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # sdk/python
_PKG = "mesh"
_LIB = "libmeshworker.so.0"
# A fixed date for the files in the archives: the same sources give the same
# wheel (zip cannot hold a date before 1980).
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _project():
    # The [project] table's strings (what pyproject.toml holds: key = "text").
    fields = {}
    table = None
    with open(os.path.join(_HERE, "pyproject.toml"), encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("["):
                table = line.strip("[]").strip()
                continue
            m = re.match(r'^([A-Za-z0-9_-]+)\s*=\s*"([^"\\]*)"\s*(#.*)?$', line)
            if m and table == "project":
                fields[m.group(1)] = m.group(2)
    for key in ("name", "version"):
        if key not in fields:
            raise RuntimeError("%s: [project] has no %s" % (os.path.join(_HERE, "pyproject.toml"), key))
    return fields


def _dist(fields):
    return "%s-%s" % (re.sub(r"[-_.]+", "_", fields["name"]).lower(), fields["version"])


def _metadata(fields):
    lines = ["Metadata-Version: 2.1", "Name: %s" % fields["name"], "Version: %s" % fields["version"]]
    if "description" in fields:
        lines.append("Summary: %s" % fields["description"])
    if "requires-python" in fields:
        lines.append("Requires-Python: %s" % fields["requires-python"])
    readme = os.path.join(_HERE, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = f.read()
    return ("\n".join(lines) + "\n\n" + body).encode("utf-8")


def _library(config_settings):
    """The libmeshworker to carry (a path), or None.  One named (the
    setting or $MESH_WORKER_LIB) must exist."""
    for what, path in (("libmeshworker", (config_settings or {}).get("libmeshworker")),
                       ("MESH_WORKER_LIB", os.environ.get("MESH_WORKER_LIB"))):
        if path:
            if not os.path.isfile(path):
                raise RuntimeError("mesh_build: %s=%s: no such file" % (what, path))
            return os.path.realpath(path)
    tree = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "build", "libmeshworker.so")
    return os.path.realpath(tree) if os.path.isfile(tree) else None


def _platform_tag():
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def _sources():
    """(path in the archive, path on disk) of the package's files."""
    d = os.path.join(_HERE, _PKG)
    for name in sorted(os.listdir(d)):
        if name.endswith(".py") or name == "py.typed":
            yield "%s/%s" % (_PKG, name), os.path.join(d, name)


class _Wheel:
    def __init__(self, path):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record = []

    def add(self, arcname, data, mode=0o644):
        info = zipfile.ZipInfo(arcname, _EPOCH)
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        self.record.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

    def close(self, dist_info):
        arcname = dist_info + "/RECORD"
        text = "\n".join(self.record + ["%s,," % arcname]) + "\n"
        info = zipfile.ZipInfo(arcname, _EPOCH)
        info.external_attr = 0o100644 << 16
        self.zip.writestr(info, text.encode("utf-8"))
        self.zip.close()


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _write_dist_info(whl, fields, dist_info, tag, pure):
    whl.add(dist_info + "/METADATA", _metadata(fields))
    whl.add(dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: mesh_build\nRoot-Is-Purelib: %s\nTag: %s\n"
                                   % ("true" if pure else "false", tag)).encode("ascii"))
    whl.add(dist_info + "/top_level.txt", (_PKG + "\n").encode("ascii"))


def _build(wheel_directory, config_settings, editable):
    fields = _project()
    dist = _dist(fields)
    lib = None if editable else _library(config_settings)
    tag = "py3-none-" + (_platform_tag() if lib else "any")
    name = "%s-%s.whl" % (dist, tag)
    whl = _Wheel(os.path.join(wheel_directory, name))
    try:
        if editable:
            whl.add("__editable___%s.pth" % dist, (_HERE + "\n").encode("utf-8"))
        else:
            for arcname, path in _sources():
                whl.add(arcname, _read(path))
            if lib:
                whl.add("%s/%s" % (_PKG, _LIB), _read(lib), 0o755)
        _write_dist_info(whl, fields, dist + ".dist-info", tag, lib is None)
    finally:
        whl.close(dist + ".dist-info")
    return name


# PEP 517

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, config_settings, False)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _build(wheel_directory, config_settings, True)


def build_sdist(sdist_directory, config_settings=None):
    fields = _project()
    dist = _dist(fields)
    name = dist + ".tar.gz"
    files = [("pyproject.toml", os.path.join(_HERE, "pyproject.toml")),
             ("README.md", os.path.join(_HERE, "README.md")),
             ("_backend/mesh_build.py", os.path.abspath(__file__))] + list(_sources())
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(arcname, data):
            info = tarfile.TarInfo("%s/%s" % (dist, arcname))
            info.size = len(data)
            info.mtime = 315532800
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        for arcname, path in files:
            if os.path.exists(path):
                add(arcname, _read(path))
        add("PKG-INFO", _metadata(fields))
    return name
