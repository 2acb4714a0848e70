"""mesh worker SDK: a Python binding of libmeshworker through ctypes.

A worker is a program meshd starts from its catalog (docs/python.md):

    import mesh.worker

    def handle(data):              # bytes in (or a memoryview), bytes out
        return data.upper()

    w = mesh.worker.open()         # first: line-buffered output, meshd's channel
    model = load_model()           # the expensive setup
    w.ready()                      # meshd counts the worker warm from here
    w.serve(handle)                # runs, halts, runs again; returns on EXIT
    w.close()

or, in one call, ``mesh.worker.main(handle, setup=load_model)``.

A handler written with two parameters, ``def handle(chunk_id, data)``, gets
the id of the job chunk it serves (meshd's CHUNK request, decoded by the C
library: the data is the chunk's input alone) and None for a plain call;
the form is read once from the handler's signature when serve() starts.

The node loop is the C library's own (include/mesh/worker.h): HALT, the
next run on another slot, and EXIT are honoured there.  An exception in the
handler becomes an error reply carrying its text and the worker goes on; a
reply longer than the message limit (16 MiB) becomes an error reply too.

A handler that is a generator streams its reply: each value it yields is
sent at once as one part (meshd's API passes it on as it comes, `mesh call`
prints it), and what it returns, if anything, is the last part:

    def handle(prompt):
        for token in generate(prompt):
            yield token.encode()

Importing this module loads libmeshworker and checks its API version; it
looks, in order, at $MESH_WORKER_LIB, next to this package (the wheel pip
builds carries it there, make install puts a link there), the build tree
this package sits in (build/ of the mesh source tree),
ctypes.util.find_library("meshworker"), then the dynamic linker's own
search for libmeshworker.so.0.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import faulthandler
import inspect
import os
import sys
import traceback
from typing import Any, Callable, Optional, Union

__all__ = ["API_VERSION", "ErrorReply", "Worker", "WorkerError", "open", "main", "library_path"]

# The MESH_WORKER_API_VERSION this module is written against.
API_VERSION = 3

_LIB_NAME = "libmeshworker.so.0"

# mesh_worker_chunk_id's "not a chunk" (UINT64_MAX, include/mesh/worker.h).
_NO_CHUNK = 0xFFFFFFFFFFFFFFFF


class WorkerError(OSError):
    """A libmeshworker call failed: errno is the library's (negative) code
    made positive, strerror its text."""


class ErrorReply(Exception):
    """Raised by a handler: an error reply whose text is str(e) itself
    (any other exception's is "Type: message")."""


def _candidates():
    env = os.environ.get("MESH_WORKER_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, _LIB_NAME)
    # Run from the source tree (sdk/python/mesh): its build/, make's default BUILD.
    sdk = os.path.dirname(os.path.dirname(here))
    if os.path.basename(sdk) == "sdk" and os.path.basename(os.path.dirname(here)) == "python":
        yield os.path.join(os.path.dirname(sdk), "build", "libmeshworker.so")
    found = ctypes.util.find_library("meshworker")
    if found:
        yield found
    yield _LIB_NAME


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (no such file)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        return lib, os.path.realpath(path) if os.sep in path else path
    raise ImportError("mesh.worker: cannot load libmeshworker; tried: " + "; ".join(tried)
                      + ". Set MESH_WORKER_LIB to its path, or run `make` in the mesh tree and pip install "
                      "sdk/python again (the wheel then carries it), or `make install`.")


def _check_version(lib, path):
    try:
        fn = lib.mesh_worker_api_version
    except AttributeError:
        raise ImportError("mesh.worker: %s has no mesh_worker_api_version(): it predates API version 1, "
                          "and this package needs API version %d" % (path, API_VERSION)) from None
    fn.restype = ctypes.c_int
    fn.argtypes = []
    have = fn()
    if have != API_VERSION:
        raise ImportError("mesh.worker: %s is libmeshworker API version %d, and this package needs "
                          "API version %d; install a matching pair" % (path, have, API_VERSION))


_lib, library_path = _load()
_check_version(_lib, library_path)

_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                            ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t))


def _bind(name, restype, *argtypes):
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_open = _bind("mesh_worker_open", ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_ready = _bind("mesh_worker_ready", ctypes.c_int, ctypes.c_void_p)
_serve = _bind("mesh_worker_serve", ctypes.c_int, ctypes.c_void_p, _HANDLER, ctypes.c_void_p)
_close = _bind("mesh_worker_close", None, ctypes.c_void_p)
_set_spin = _bind("mesh_worker_set_spin", None, ctypes.c_void_p, ctypes.c_uint64)
_gen = _bind("mesh_worker_gen", ctypes.c_uint32, ctypes.c_void_p)
_slot = _bind("mesh_worker_slot", ctypes.c_uint32, ctypes.c_void_p)
_chunk_id = _bind("mesh_worker_chunk_id", ctypes.c_uint64, ctypes.c_void_p)
_strerror = _bind("mesh_worker_strerror", ctypes.c_char_p, ctypes.c_int)
_reply_part = _bind("mesh_worker_reply_part", ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t)


# A read-only memoryview ("B" format) of C memory, without a copy.
_memview = ctypes.pythonapi.PyMemoryView_FromMemory
_memview.restype = ctypes.py_object
_memview.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int]
_PyBUF_READ = 0x100


def _view(p, n):
    return _memview(p, n, _PyBUF_READ)


def _check(rc, what):
    if rc < 0:
        raise WorkerError(-rc, "%s: %s" % (what, _strerror(rc).decode("utf-8", "replace")))
    return rc


def _line_buffered():
    # The C library's setvbuf reaches C's stdio only; Python's io layer keeps
    # its own buffer, which a crash would lose.  faulthandler prints the
    # Python stack on SIGSEGV/SIGABRT/..., so a crash in native code still
    # names the Python line that led there in meshd's crash report.
    for f in (sys.stdout, sys.stderr):
        try:
            f.reconfigure(line_buffering=True)
        except (AttributeError, ValueError):
            pass
    if not faulthandler.is_enabled():
        try:
            faulthandler.enable(all_threads=True)
        except (AttributeError, ValueError, RuntimeError, OSError):
            pass


def _as_bytes(out):
    if out is None:
        return b""
    if isinstance(out, bytes):
        return out
    return bytes(memoryview(out).cast("B"))


def _wants_chunk_id(handler):
    # True for handle(chunk_id, data), False for handle(data); read once.
    # The rule: two positional parameters without a default.  A callable
    # Python cannot introspect (a builtin) takes the one-parameter form.
    try:
        sig = inspect.signature(handler)
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    required = [p for p in sig.parameters.values() if p.kind in positional and p.default is p.empty]
    if len(required) > 2:
        raise TypeError("mesh.worker: the handler %r takes %d parameters; it must be handle(data) or "
                        "handle(chunk_id, data)" % (handler, len(required)))
    return len(required) == 2


def _error_text(e: BaseException) -> bytes:
    if isinstance(e, ErrorReply):
        return str(e).encode("utf-8", "replace")
    return ("%s: %s" % (type(e).__name__, e) if str(e) else type(e).__name__).encode("utf-8", "replace")


def _die(e):
    # A BaseException that is not an Exception (SystemExit, KeyboardInterrupt)
    # cannot unwind through the C node loop; the process ends here instead.
    code = 130 if isinstance(e, KeyboardInterrupt) else 1
    if isinstance(e, SystemExit):
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
    else:
        traceback.print_exception(type(e), e, e.__traceback__)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    os._exit(code & 0xFF)


class Worker:
    """One worker's channel to meshd (libmeshworker's struct mesh_worker).

    One thread drives it; the handler runs on that thread."""

    def __init__(self) -> None:
        _line_buffered()
        p = ctypes.c_void_p()
        _check(_open(ctypes.byref(p)), "mesh_worker_open (is this started by meshd?)")
        self._w = p
        self._cb = None

    def ready(self) -> None:
        """Tells meshd the setup is done (serve() does it too, if not yet)."""
        _check(_ready(self._w), "mesh_worker_ready")

    def serve(self, handler: Callable[..., Any], view: bool = False) -> None:
        """Serves requests until meshd says EXIT; HALT and the next run are
        handled inside.  handler(data) gets the request as bytes, or with
        view=True as a read-only memoryview of the request in the slot
        (no copy; valid only during the call); handler(chunk_id, data),
        a handler with two parameters, gets before it the job chunk's id
        (an int; None for a plain call, see _wants_chunk_id); it returns a bytes-like
        reply (None is an empty one), or is a generator: each bytes-like
        value it yields goes to the caller at once as a part of the reply
        (reply_part), and its return value is the last part.  An exception
        becomes an error reply with its text (after parts: the call fails);
        ErrorReply(text) one with text alone.
        Raises WorkerError when meshd goes away; TypeError for a handler
        with more than two required parameters."""

        with_id = _wants_chunk_id(handler)
        def call(ctx, req, n, reply, cap, reply_len):
            try:
                if view:
                    data = _view(req, n) if n else memoryview(b"")
                else:
                    data = ctypes.string_at(req, n) if n else b""
                if with_id:
                    c = _chunk_id(self._w)
                    out = handler(None if c == _NO_CHUNK else c, data)
                else:
                    out = handler(data)
                if inspect.isgenerator(out):
                    out = self._stream(out)
                out = _as_bytes(out)
                if len(out) > cap:
                    raise ValueError("reply of %d bytes is longer than the message limit (%d)" % (len(out), cap))
                ctypes.memmove(reply, out, len(out))
                reply_len[0] = len(out)
                return 0
            except Exception as e:
                text = _error_text(e)[:cap]
                ctypes.memmove(reply, text, len(text))
                reply_len[0] = len(text)
                return -1
            except BaseException as e:
                _die(e)

        # ctypes frees a callback's trampoline with its Python object: keep it
        # for as long as C may call it.
        self._cb = _HANDLER(call)
        try:
            _check(_serve(self._w, self._cb, None), "mesh_worker_serve")
        finally:
            self._cb = None

    def reply_part(self, data: Union[bytes, bytearray, memoryview]) -> None:
        """Inside the handler: sends data (bytes-like, at most 16 MiB) to the
        caller now as the next part of the reply.  Raises WorkerError when
        meshd stopped taking this reply (halt or exit: return from the
        handler) or outside a handler."""
        data = _as_bytes(data)
        _check(_reply_part(self._w, data, len(data)), "mesh_worker_reply_part")

    def _stream(self, parts):
        # Each yielded value is a part; the generator's return value is the last.
        try:
            while True:
                self.reply_part(next(parts))
        except StopIteration as stop:
            return stop.value
        finally:
            parts.close()

    def set_spin(self, seconds: float) -> None:
        """How long the node loop spins on an empty ring before it sleeps."""
        _set_spin(self._w, int(seconds * 1e9))

    @property
    def gen(self) -> int:
        """The run being served (inside the handler): its generation."""
        return _gen(self._w)

    @property
    def slot(self) -> int:
        """The run being served (inside the handler): its slot."""
        return _slot(self._w)

    @property
    def chunk_id(self) -> Optional[int]:
        """Inside the handler: the job chunk being handled, or None for a plain call."""
        c = _chunk_id(self._w)
        return None if c == _NO_CHUNK else c

    def close(self) -> None:
        if self._w:
            _close(self._w)
            self._w = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open() -> Worker:  # noqa: A001 -- the C library's name for it
    """Connects to meshd (mesh_worker_open) and makes output line-buffered.
    Call it first, before the expensive setup."""
    return Worker()


def main(handler: Callable[..., Any], setup: Optional[Callable[[], Any]] = None, view: bool = False) -> int:
    """The whole worker: open, setup() (its result is not kept), ready,
    serve(handler), close.  Returns 0 when meshd said EXIT; raises otherwise."""
    with open() as w:
        if setup is not None:
            setup()
        w.ready()
        w.serve(handler, view=view)
    return 0
