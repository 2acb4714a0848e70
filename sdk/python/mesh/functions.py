"""Python functions as meshd programs: @mesh.function writes a function's
catalog entry, mesh.map runs it over an iterable as a job of meshd and
yields the decoded results in order (docs/python.md, "Functions").

    import mesh

    @mesh.function(max_workers=2)
    def square(x):
        return x * x

    if __name__ == "__main__":
        print(list(mesh.map(square, range(10))))

The catalog entry (meshd's --catalog DIR: catalog=, else $MESH_CATALOG)
runs `python -m mesh._runner ...` with this interpreter (a venv's with the
manifest's `python`), which imports the function's file as a module other
than __main__ (so code under `if __name__ == "__main__":` does not run
there) and serves it with mesh.worker.  Each input is one chunk, encoded by
the codec: "json" (the default), "pickle", or "bytes" (raw: bytes-like
inputs without a newline or NUL byte, bytes-like results).

Importing this module loads no native library.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
import platform
import site
import sys
import time
import traceback
from typing import Any, Callable, Dict, Generic, Iterable, Iterator, List, Optional, TypeVar, Union

from . import __version__
from .client import Client, Job, MeshError, MeshTimeout, _frames, _name

__all__ = ["CODECS", "Function", "MapResults", "MeshChunkError", "function", "map", "target_triple"]

T = TypeVar("T")
R = TypeVar("R")

CODECS = ("json", "pickle", "bytes")

# The first bytes of a manifest mesh.function wrote (it replaces no other).
_MARK = b"# written by mesh.function"

# How long one results poll of map() waits before it looks at the job.
_POLL = 2.0

# Set by mesh._runner while a worker imports the function's file: map()
# there means the file runs it at import (no `if __name__ == "__main__":`).
_importing: Optional[str] = None


class MeshChunkError(MeshError):
    """A chunk of a map() failed for good (buried after its tries).
    chunk: its index (the position of its input); input: that input;
    job_id; attempts; status: the last attempt's (1 for an exception,
    128 + signal for a crash); report: meshd's report of the last attempt,
    with the function's traceback (str(e) holds it too)."""

    def __init__(self, job_id: int, chunk: int, input: Any, failure: Dict[str, Any]) -> None:
        attempts = int(failure.get("attempts") or 0)
        status = int(failure.get("status") or 0)
        report = str(failure.get("report") or "")
        super().__init__("chunk %d of job %d (input %s) failed after %d attempt%s:\n%s"
                         % (chunk, job_id, _short(input), attempts, "" if attempts == 1 else "s",
                            report.rstrip("\n")), "E_HANDLER" if status == 1 else "E_CRASHED", 0)
        self.job_id = job_id
        self.chunk = chunk
        self.input = input
        self.attempts = attempts
        self.status = status
        self.report = report

    def __reduce__(self) -> Any:
        return (MeshChunkError, (self.job_id, self.chunk, self.input,
                                 {"attempts": self.attempts, "status": self.status, "report": self.report}))


def _short(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 60 else r[:57] + "..."


# Codecs: an input becomes one line (no newline, no NUL); a result is the
# chunk's reply as it is.

def _encode_input(codec: str, x: Any) -> bytes:
    if codec == "json":
        return json.dumps(x, separators=(",", ":")).encode("ascii")  # ensure_ascii: \n and NUL escaped
    if codec == "pickle":
        return base64.b64encode(pickle.dumps(x, protocol=pickle.DEFAULT_PROTOCOL))
    b = x.encode("utf-8") if isinstance(x, str) else bytes(x)
    if b"\n" in b or b"\0" in b:
        raise MeshError("codec 'bytes': input %s holds a newline or a NUL byte (a chunk's input is one line); "
                        "use codec 'json' or 'pickle'" % _short(x), "E_PARSE", 400)
    return b


def _decode_input(codec: str, b: bytes) -> Any:
    if codec == "json":
        return json.loads(b)
    if codec == "pickle":
        return pickle.loads(base64.b64decode(b))
    return b


def _encode_result(codec: str, v: Any) -> bytes:
    if codec == "json":
        return json.dumps(v).encode("utf-8")
    if codec == "pickle":
        return pickle.dumps(v, protocol=pickle.DEFAULT_PROTOCOL)
    if v is None:
        return b""
    return v.encode("utf-8") if isinstance(v, str) else bytes(memoryview(v).cast("B"))


def _decode_result(codec: str, b: bytes) -> Any:
    if codec == "json":
        return json.loads(b)
    if codec == "pickle":
        if "__mesh_main__" not in sys.modules and "__main__" in sys.modules:
            # A worker's __main__ is the script imported as __mesh_main__.
            sys.modules["__mesh_main__"] = sys.modules["__main__"]
        return pickle.loads(b)
    return b


def _check_codec(codec: str) -> str:
    if codec not in CODECS:
        raise ValueError("codec must be one of %s, not %r" % (", ".join(CODECS), codec))
    return codec


def target_triple() -> str:
    """This machine's `<arch>-linux-<libc>`, the catalog's binary directory
    (mesh_target_triple(), src/host/image.c)."""
    arch = {"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "powerpc64le"}.get(platform.machine().lower(),
                                                                                platform.machine())
    libc = "gnu" if platform.libc_ver()[0] == "glibc" else "musl"
    return "%s-linux-%s" % (arch, libc)


def _toml(s: str) -> str:
    return json.dumps(s)  # a TOML basic string: JSON's escapes are TOML's


class Function(Generic[R]):
    """A function meshd runs (made by @mesh.function).  Calling it runs it
    here; map() runs it on meshd's workers.  Its program: name; the
    catalog entry: manifest() and deploy()."""

    def __init__(self, fn: Callable[..., R], name: Optional[str] = None, max_workers: Optional[int] = None,
                 codec: str = "json", catalog: Optional[str] = None, idle_ttl: Optional[str] = None,
                 ready_timeout: Optional[str] = None, call_timeout: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None) -> None:
        self.fn = fn
        self.name = _name(name or getattr(fn, "__name__", ""))
        self.max_workers = max_workers
        self.codec = _check_codec(codec)
        self.catalog = catalog
        self.idle_ttl = idle_ttl
        self.ready_timeout = ready_timeout
        self.call_timeout = call_timeout
        self.env = dict(env or {})
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __repr__(self) -> str:
        return "<mesh.function %r of %r>" % (self.name, self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.fn(*args, **kwargs)

    def _where(self) -> List[str]:
        """The runner's arguments naming the function: kind, file or
        module, the sys.path entry it needs, its qualified name."""
        fn = self.fn
        qual = getattr(fn, "__qualname__", "")
        if not qual or "<" in qual:
            raise MeshError("mesh.function %r: %r is not a module-level function (meshd's workers import it "
                            "by name)" % (self.name, fn), "E_PARSE", 400)
        mod = sys.modules.get(getattr(fn, "__module__", "") or "")
        path = getattr(mod, "__file__", None)
        if not path:
            raise MeshError("mesh.function %r: %s is not in a file (an interactive session?): meshd's workers "
                            "import the function from its file" % (self.name, fn.__module__), "E_PARSE", 400)
        path = os.path.abspath(path)
        if fn.__module__ == "__main__":
            return ["file", path, os.path.dirname(path), qual]
        root = path
        if os.path.basename(path).startswith("__init__."):
            root = os.path.dirname(root)
        for _ in fn.__module__.split("."):
            root = os.path.dirname(root)
        return ["module", fn.__module__, root, qual]

    def _file(self) -> str:
        where = self._where()
        return where[1] if where[0] == "file" else os.path.abspath(sys.modules[where[1]].__file__ or "")

    def manifest(self) -> str:
        """The catalog entry's manifest (TOML): the runner with this
        interpreter (the venv's: `python`), [env] PYTHONPATH as this
        process has it plus this package's directory when the interpreter
        would not find it, `user` this process's uid, source.hash the
        function's file (a new file is a new image)."""
        lines = [_MARK.decode("ascii") + " (%s): it is rewritten when that changes" % self._file(),
                 "name = %s" % _toml(self.name), 'backends = ["native"]']
        venv = _venv()
        if venv:
            lines.append("python = %s" % _toml(venv))
        args = ["-m", "mesh._runner", self.codec] + self._where()
        lines.append("args = [%s]" % ", ".join(_toml(a) for a in args))
        if self.max_workers is not None:
            lines.append("max_workers = %d" % self.max_workers)
        if self.idle_ttl is not None:
            lines.append("idle_ttl = %s" % _toml(self.idle_ttl))
        lines.append("user = %d" % os.getuid())
        env = {}
        path = _pythonpath()
        if path:
            env["PYTHONPATH"] = path
        env.update(self.env)
        if env:
            lines.append("[env]")
            lines.extend("%s = %s" % (k, _toml(str(v))) for k, v in sorted(env.items()))
        life = [(k, v) for k, v in (("ready_timeout", self.ready_timeout), ("call_timeout", self.call_timeout))
                if v is not None]
        if life:
            lines.append("[lifecycle]")
            lines.extend("%s = %s" % (k, _toml(v)) for k, v in life)
        h = hashlib.sha256()
        with open(self._file(), "rb") as f:
            h.update(f.read())
        lines += ["[source]", "hash = %s" % _toml("sha256:%s mesh %s" % (h.hexdigest(), __version__))]
        return "\n".join(lines) + "\n"

    def deploy(self, catalog: Optional[str] = None, client: Optional[Client] = None) -> bool:
        """Writes the catalog entry (the manifest and the interpreter's link
        in <catalog>/<triple>/) unless it is there already; with client,
        meshd loads it (a changed entry is an upgrade: new work goes to
        workers of the new image).  catalog: meshd's --catalog DIR (default
        the one given to @mesh.function, else $MESH_CATALOG).  True when
        something was written.  An entry of that name that mesh.function
        did not write is left alone: MeshError E_MISMATCH."""
        cat = catalog or self.catalog or os.environ.get("MESH_CATALOG")
        if not cat:
            raise MeshError("mesh.function %r: which catalog does meshd read? give catalog=DIR or set "
                            "MESH_CATALOG to meshd's --catalog DIR" % self.name, "E_PARSE", 400)
        cat = os.path.abspath(cat)
        if not os.path.isdir(cat):
            raise MeshError("mesh.function %r: the catalog '%s' is not a directory (meshd's --catalog DIR)"
                            % (self.name, cat), "E_NOTFOUND", 404)
        text = self.manifest()
        toml = os.path.join(cat, self.name + ".toml")
        try:
            with open(toml, "rb") as f:
                head = f.read(len(_MARK))
        except FileNotFoundError:
            head = _MARK
        if head != _MARK:
            raise MeshError("mesh.function %r: %s is a catalog entry mesh.function did not write; give the function "
                            "another name= (or remove that entry)" % (self.name, toml), "E_MISMATCH", 409)
        wrote = _put_link(os.path.join(cat, target_triple(), self.name), _interpreter())
        wrote = _put_file(toml, text.encode("utf-8")) or wrote
        if client is not None:
            client.load(self.name)
        return wrote

    def map(self, iterable: Iterable[Any], **options: Any) -> MapResults:
        """mesh.map(self, iterable, **options)."""
        return map(self, iterable, **options)


def function(fn: Optional[Callable[..., R]] = None, *, name: Optional[str] = None,
             max_workers: Optional[int] = None, codec: str = "json", catalog: Optional[str] = None,
             idle_ttl: Optional[str] = None, ready_timeout: Optional[str] = None,
             call_timeout: Optional[str] = None, env: Optional[Dict[str, str]] = None) -> Any:
    """@mesh.function or @mesh.function(name=..., max_workers=..., ...):
    makes fn a Function, which map() runs on meshd's workers.  name: the
    program's (default the function's name); max_workers: workers a job
    may use (1..64; meshd's default 1); codec: "json", "pickle" or "bytes";
    catalog: meshd's --catalog DIR (default $MESH_CATALOG); idle_ttl,
    ready_timeout, call_timeout: the manifest's durations ("300s");
    env: more [env] for the workers.  Nothing is written until the first
    map() (or deploy())."""
    def wrap(f: Callable[..., R]) -> Function[R]:
        return Function(f, name=name, max_workers=max_workers, codec=codec, catalog=catalog, idle_ttl=idle_ttl,
                        ready_timeout=ready_timeout, call_timeout=call_timeout, env=env)
    return wrap(fn) if fn is not None else wrap


class MapResults(Iterator[Any]):
    """What map() returns: the job (submitted already) and an iterator of
    its decoded results in input order.  Iterating raises MeshChunkError
    at the first chunk that failed for good, MeshTimeout (a TimeoutError)
    past map()'s timeout, MeshError E_STATE while the program cannot start
    (its log's tail in the message); any of these, or close() before the
    end, cancels what is left of the job."""

    def __init__(self, client: Client, job: Optional[Job], codec: str, inputs: List[Any],
                 timeout: Optional[float]) -> None:
        self.client = client
        self.job = job
        self.codec = codec
        self._inputs = inputs
        self._deadline = None if timeout is None else time.monotonic() + float(timeout)
        self._timeout = timeout
        self._gen = self._results()

    def __iter__(self) -> MapResults:
        return self

    def __next__(self) -> Any:
        return next(self._gen)

    def close(self) -> None:
        """Stops: the job's chunks not run yet are cancelled."""
        self._gen.close()

    def __enter__(self) -> MapResults:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _results(self) -> Iterator[Any]:
        job = self.job
        if job is None:
            return
        n = len(self._inputs)
        done = False
        try:
            k = 0
            while k < n:
                wait = _POLL
                if self._deadline is not None:
                    wait = min(wait, self._deadline - time.monotonic())
                    if wait <= 0:
                        self._stuck()
                nxt, end, data = job.page(k, wait=wait, framed=True)
                for cid, piece in _frames(data):
                    if cid > k:
                        self._failed(k)
                    yield _decode_result(self.codec, piece)
                    k = cid + 1
                if nxt > k or (end and k < n):
                    self._failed(k)
                if nxt == k and not data:
                    self._stuck()
                k = max(k, nxt)
            done = True
        finally:
            if not done:
                _cancel(job)

    def _stuck(self) -> None:
        # Nothing came for a poll, or the time is up: past the deadline, or
        # a program that cannot start, raises.
        job = self.job
        assert job is not None
        if self._deadline is not None and time.monotonic() >= self._deadline:
            info = job.status()
            raise MeshTimeout("job %d: %d of %d chunks done after %gs (map's timeout); the rest is cancelled"
                              % (job.id, info.get("done", 0), info.get("chunks", 0), self._timeout))
        info = job.status()
        if info.get("program_failed"):
            prog = info.get("program") or ""
            try:
                tail = self.client.logs(prog, tail=3000).decode("utf-8", "replace")
            except MeshError:
                tail = ""
            raise MeshError("job %d cannot run: its program '%s' is FAILED: %s\nthe end of its log:\n%s"
                            % (job.id, prog, info["program_failed"], tail.rstrip("\n")), "E_STATE", 0)

    def _failed(self, k: int) -> None:
        # Chunk k settled without a result: buried, cancelled or lost.
        job = self.job
        assert job is not None
        info = job.status()
        for f in info.get("failures") or []:
            if f.get("chunk") == k and f.get("buried"):
                raise MeshChunkError(job.id, k, self._inputs[k], f)
        if k in job.missing:
            raise MeshError("job %d: chunk %d is DONE but its result is lost (docs/jobs.md)" % (job.id, k),
                            "E_CORRUPT", 0)
        raise MeshError("job %d ended %s without chunk %d's result" % (job.id, info.get("state"), k), "E_STATE", 0)


def _cancel(job: Job) -> None:
    try:
        job.cancel()
    except MeshError:
        pass  # ended meanwhile, or meshd is gone


def map(fn: Union[Function[Any], Callable[..., Any], str], iterable: Iterable[Any], *,
        codec: Optional[str] = None, max_workers: Optional[int] = None, retries: Optional[int] = None,
        timeout: Optional[float] = None, chunk_timeout: Optional[float] = None,
        client: Optional[Client] = None, catalog: Optional[str] = None) -> MapResults:
    """Runs fn on each item of iterable as one job of meshd (a chunk an
    item) and returns its results, decoded, in order (MapResults, an
    iterator; .job is the Job).  fn: a Function (its catalog entry is
    written, or checked, and loaded first), a plain function (made one
    with the defaults), or a program's name (codec, default "json", says
    how its inputs and results are written).  max_workers, retries (tries
    a chunk gets, meshd's default 3), chunk_timeout (seconds a worker may
    hold a chunk): the job's (docs/jobs.md); timeout: seconds for the
    whole map, past which iterating raises MeshTimeout.  client: the
    meshd (default Client(): $MESH_SOCKET ...)."""
    if _importing is not None:
        raise RuntimeError("mesh.map called while a mesh worker imports %s: the file runs it at import; put "
                           "the code that calls it under `if __name__ == \"__main__\":`" % _importing)
    c = client or Client()
    if isinstance(fn, str):
        name = fn
        codec = _check_codec(codec or "json")
    else:
        f = fn if isinstance(fn, Function) else Function(fn)
        name = f.name
        codec = _check_codec(codec or f.codec)
        if codec != f.codec:
            raise ValueError("codec %r: the function %r was registered with codec %r" % (codec, name, f.codec))
        f.deploy(catalog=catalog, client=c)
    items = list(iterable)
    if not items:
        return MapResults(c, None, codec, items, timeout)
    lines = [_encode_input(codec, x) for x in items]
    job = c.submit(name, inputs=lines, max_workers=max_workers, retries=retries, timeout=chunk_timeout)
    return MapResults(c, job, codec, items, timeout)


# The interpreter and its environment, as the catalog entry names them.

def _venv() -> Optional[str]:
    """This interpreter's virtual environment (sys.prefix), or None."""
    if sys.prefix != getattr(sys, "base_prefix", sys.prefix) and \
            os.path.isfile(os.path.join(sys.prefix, "pyvenv.cfg")):
        return sys.prefix
    return None


def _interpreter() -> str:
    venv = _venv()
    if venv:
        return os.path.join(venv, "bin", "python")  # what the manifest's `python` checks
    exe = sys.executable
    if not exe:
        raise MeshError("mesh.function: this Python does not know its own executable (sys.executable)",
                        "E_NOTFOUND", 404)
    return os.path.realpath(exe)


def _pythonpath() -> str:
    """PYTHONPATH as this process has it, and this package's directory when
    the interpreter would not find it by itself (run from the source tree)."""
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    known = set(os.path.abspath(p) for p in getattr(site, "getsitepackages", list)() if p)
    if here not in known and here not in (os.path.abspath(p) for p in parts):
        parts.append(here)
    return os.pathsep.join(os.path.abspath(p) for p in parts)


def _put_file(path: str, data: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return False
    except OSError:
        pass
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)
    return True


def _put_link(path: str, target: str) -> bool:
    try:
        if os.readlink(path) == target:
            return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = "%s.tmp-%d" % (path, os.getpid())
    try:
        os.unlink(tmp)
    except OSError:
        pass
    os.symlink(target, tmp)
    os.rename(tmp, path)
    return True


def _serve(codec: str, fn: Callable[..., Any]) -> Callable[[bytes], bytes]:
    """The worker's handler for fn (mesh._runner): decode, call, encode;
    an exception is an error reply holding its traceback."""
    import mesh.worker

    def handle(data: bytes) -> bytes:
        try:
            return _encode_result(codec, fn(_decode_input(codec, data)))
        except Exception as e:
            tb = e.__traceback__.tb_next if e.__traceback__ is not None else None  # not this frame
            raise mesh.worker.ErrorReply("".join(traceback.format_exception(type(e), e, tb))) from None
    return handle

