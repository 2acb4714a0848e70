"""A client of meshd's control API (docs/api.md): HTTP/1.1 and JSON over
meshd's unix socket, standard library only.

    from mesh.client import Client, MeshError
    c = Client()                      # the socket `mesh` would use
    c.load("echo"); c.start("echo")
    assert c.call("echo", b"hi") == b"hi"
    print(c.ps()["host"]["processes"])
    c.stop("echo")

    job = c.submit("echo", inputs=["a", "b", "c"], max_workers=2)
    job.wait(progress=lambda j: print(j["done"], "/", j["chunks"]))
    out = b"".join(job.results())     # each chunk's result, in chunk order

Every error meshd answers raises MeshError with its message (``str(e)``,
``e.message``), its code (``e.code``, a mesh error name such as
"E_NOTFOUND") and the HTTP status (``e.status``); an unreachable meshd
raises MeshUnreachable (a MeshError and a ConnectionError), and E_TIMEOUT
is MeshTimeout (a MeshError and a TimeoutError).
"""

from __future__ import annotations

import errno
import http.client
import json
import os
import socket
import struct
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

__all__ = ["Client", "Job", "MeshError", "MeshTimeout", "MeshUnreachable", "default_socket"]

# What a request or reply body may be.
Payload = Union[bytes, bytearray, memoryview, str]
JobObject = Dict[str, Any]

# The longest long poll meshd serves (wait=S, docs/api.md "Jobs").
_WAIT_MAX = 60.0
# A job's states once it ended (docs/api.md).
_ENDED = frozenset(("complete", "failed", "cancelled", "error"))


def default_socket() -> str:
    """The socket path meshd serves on and `mesh` talks to: $MESH_SOCKET,
    else $XDG_RUNTIME_DIR/mesh/meshd.sock (when absolute), else
    /tmp/mesh-<uid>/meshd.sock (src/client/api_client.c)."""
    env = os.environ.get("MESH_SOCKET")
    if env:
        return env
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and xdg.startswith("/"):
        return os.path.join(xdg, "mesh", "meshd.sock")
    return "/tmp/mesh-%d/meshd.sock" % os.getuid()


class MeshError(Exception):
    """meshd refused or failed a request.  code: the mesh error name
    ("E_NOTFOUND", "E_CRASHED", an errno name, ...); status: the HTTP status
    (0 when meshd was not reached)."""

    def __init__(self, message: str, code: str = "E_PROTO", status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def __repr__(self) -> str:
        return "%s(%r, code=%r, status=%r)" % (type(self).__name__, self.message, self.code, self.status)


class MeshUnreachable(MeshError, ConnectionError):
    """Nobody serves at the socket (meshd is not running, or not there)."""


class MeshTimeout(MeshError, TimeoutError):
    """E_TIMEOUT: a wait, a call or an answer took longer than allowed;
    ``except TimeoutError`` catches it."""

    def __init__(self, message: str, code: str = "E_TIMEOUT", status: int = 0) -> None:
        super().__init__(message, code, status)


def _mesh_error(message: str, code: str, status: int = 0) -> MeshError:
    # The one place that picks the class of an error by its code.
    return (MeshTimeout if code == "E_TIMEOUT" else MeshError)(message, code, status)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()
            raise
        self.sock = s


_NAME_OK = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class Client:
    """One meshd.  socket: its path (default_socket() when None); timeout:
    seconds to wait for an answer beyond a call's own timeout."""

    def __init__(self, socket_path: Optional[str] = None, timeout: float = 60.0) -> None:
        self.socket_path = socket_path or default_socket()
        self.timeout = timeout

    def _request(self, method: str, target: str, body: Optional[bytes] = None,
                 timeout: Optional[float] = None) -> Tuple[http.client.HTTPResponse, bytes]:
        conn = _UnixConnection(self.socket_path, self.timeout if timeout is None else timeout)
        try:
            try:
                conn.connect()
            except OSError as e:
                name = errno.errorcode.get(e.errno, "E_CLOSED") if e.errno else "E_CLOSED"
                raise MeshUnreachable("cannot reach meshd at '%s': %s" % (self.socket_path, e.strerror or e),
                                      name) from None
            headers = {"Content-Type": "application/octet-stream"} if body is not None else {}
            try:
                conn.request(method, target, body=body if body is not None else b"", headers=headers)
                r = conn.getresponse()
                data = r.read()
            except socket.timeout:
                raise MeshTimeout("no answer from meshd at '%s' in time" % self.socket_path) from None
            except (http.client.HTTPException, OSError) as e:
                raise MeshError("meshd at '%s' broke the answer: %s" % (self.socket_path, e), "E_CLOSED") from None
        finally:
            conn.close()
        if r.status >= 400:
            raise _error(r.status, r.reason, data)
        return r, data

    def _json(self, method: str, target: str, body: Optional[bytes] = None,
              timeout: Optional[float] = None) -> Any:
        _, data = self._request(method, target, body=body, timeout=timeout)
        try:
            return json.loads(data)
        except ValueError:
            raise MeshError("meshd answered %s %s with something that is not JSON" % (method, target),
                            "E_PROTO") from None

    def _program(self, action: str, name: str) -> Any:
        j = self._json("POST", "/v1/programs/%s/%s" % (_name(name), action))
        return j.get("result", j)

    def load(self, name: str) -> Dict[str, Any]:
        """Checks the catalog entry (manifest, binary, limits); no process
        starts.  The image as `ps` shows it (dict)."""
        return self._program("load", name)

    def unload(self, name: str) -> None:
        """Its workers exit and the image is forgotten."""
        self._program("unload", name)

    def start(self, name: str) -> Dict[str, Any]:
        """Starts a worker and returns once it is ready: {"name", "pid", "state"}."""
        return self._program("start", name)

    def stop(self, name: str) -> None:
        """Its workers exit (stop signal, grace, SIGKILL); it stays loaded."""
        self._program("stop", name)

    def ps(self) -> Dict[str, Any]:
        """The stats table (docs/api.md, GET /v1/ps) as a dict."""
        return self._json("GET", "/v1/ps")

    def logs(self, name: str, tail: Optional[int] = None) -> bytes:
        """The last `tail` bytes of the program's log (all, at most 1 MiB, when None), as bytes."""
        q = "" if tail is None else "?tail=%d" % int(tail)
        _, data = self._request("GET", "/v1/programs/%s/logs%s" % (_name(name), q))
        return data

    def call(self, program: str, payload: Payload = b"", timeout: Optional[float] = None) -> bytes:
        """One request through a warm worker's slot (one is started if none
        is warm): the worker's reply bytes.  payload: bytes-like or str
        (UTF-8).  timeout: seconds meshd waits for the reply (its default 60)."""
        if isinstance(payload, str):
            payload = payload.encode("utf-8")
        q = ""
        wait = None
        if timeout is not None:
            q = "?timeout=%s" % _secs(timeout)
            wait = float(timeout) + self.timeout
        _, data = self._request("POST", "/v1/programs/%s/call%s" % (_name(program), q), body=bytes(payload),
                                timeout=wait)
        return data

    def submit(self, program: str, inputs: Optional[Iterable[Payload]] = None, chunks: Optional[int] = None,
               max_workers: Optional[int] = None, retries: Optional[int] = None, timeout: Optional[float] = None,
               speculate: bool = False, name: Optional[str] = None) -> Job:
        """Submits a job of `program` (POST /v1/jobs): give either inputs, an
        iterable of chunk inputs (str or bytes; one chunk each, without a
        newline or a NUL byte), or chunks=N (N chunks with empty inputs).
        max_workers: 1..64 (default the manifest's); retries: tries per
        chunk before it is buried (default 3); timeout: seconds a worker may
        hold one chunk; speculate: run copies of stragglers; name: a label.
        Returns the Job."""
        if (inputs is None) == (chunks is None):
            raise MeshError("give the chunks once: inputs=[...] or chunks=N", "E_PARSE", 400)
        q = [("program", _name(program))]
        body = None
        if chunks is not None:
            q.append(("chunks", "%d" % _whole(chunks, "chunks")))
        else:
            lines = []
            for x in inputs:
                b = x.encode("utf-8") if isinstance(x, str) else bytes(x)
                if b"\n" in b or b"\0" in b:
                    raise MeshError("a chunk input holds a newline or a NUL byte: %r" % b[:40], "E_PARSE", 400)
                lines.append(b)
            body = b"".join(b + b"\n" for b in lines)
        if max_workers is not None:
            q.append(("max_workers", "%d" % _whole(max_workers, "max_workers")))
        if retries is not None:
            q.append(("retries", "%d" % _whole(retries, "retries")))
        if timeout is not None:
            q.append(("timeout", _secs(timeout)))
        if speculate:
            q.append(("speculate", "1"))
        if name is not None:
            q.append(("name", str(name)))
        j = self._json("POST", "/v1/jobs?" + urllib.parse.urlencode(q), body=body)
        return Job(self, j["id"], j)

    def job(self, job_id: Union[int, str]) -> Job:
        """The Job of an id (an int or its decimal string); meshd is not
        asked.  MeshError E_PARSE for anything else."""
        return Job(self, job_id)

    def jobs(self, all: bool = False) -> List[Job]:
        """The running jobs and the 20 that ended last (all=True: every job
        meshd keeps, `meshd --keep-jobs`), by id: a list of Job (each with
        .info, the job object of docs/api.md, without failures)."""
        path = "/v1/jobs?all=1" if all else "/v1/jobs"
        return [Job(self, j["id"], j) for j in self._json("GET", path).get("jobs", [])]


class Job:
    """A job of meshd, by id.  info: the last job object read (docs/api.md
    "Jobs": state, chunks, done, leased, pending, buried, rate, eta_s,
    workers, ...), None until one was.  missing: the DONE chunks without a
    result that pages() passed (docs/jobs.md, "Nodes outside meshd")."""

    def __init__(self, client: Client, job_id: Union[int, str], info: Optional[JobObject] = None) -> None:
        self.client = client
        self.id = _job_id(job_id)  # an int, as meshd numbers jobs
        self.info = info
        self.missing: List[int] = []

    def __repr__(self) -> str:
        return "Job(%d, state=%r)" % (self.id, (self.info or {}).get("state"))

    def _path(self, tail: str = "") -> str:
        return "/v1/jobs/%d%s" % (self.id, tail)

    def status(self, wait: Optional[float] = None) -> JobObject:
        """GET /v1/jobs/<id>: the job object, with its failures; wait=S (at
        most 60) holds the answer up to S seconds while the job runs."""
        q = ""
        t = None
        if wait and float(wait) >= 0.001:
            w = min(float(wait), _WAIT_MAX)
            q = "?wait=%s" % _secs(w)
            t = w + self.client.timeout
        self.info = self.client._json("GET", self._path(q), timeout=t)
        return self.info

    @property
    def state(self) -> Optional[str]:
        """The state as last read (status(), wait())."""
        return (self.info or {}).get("state")

    def wait(self, progress: Optional[Callable[[JobObject], Any]] = None, timeout: Optional[float] = None) -> str:
        """Waits for the job to end and returns its final state ("complete",
        "failed", "cancelled" or "error"); the job object is self.info.
        Long polls (no busy loop): progress, when given, is called with the
        job object after each poll (every second at most while it runs, and
        once at the end).  timeout: seconds; past it MeshTimeout (E_TIMEOUT,
        a TimeoutError; the job runs on).
        While the job's program is FAILED, MeshError E_STATE at once."""
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        step = 1.0 if progress is not None else _WAIT_MAX
        w = 0  # the first look at once: a job that cannot move is told of before the long poll
        while True:
            if deadline is not None:
                w = min(w, max(deadline - time.monotonic(), 0.0))
            info = self.status(wait=w)
            if progress is not None:
                progress(info)
            if info.get("state") in _ENDED:
                return info["state"]
            if info.get("program_failed"):
                # A crash loop: nothing moves until `mesh start` (as `mesh wait` exits 75).
                raise MeshError("job %s waits: its program '%s' is FAILED: %s; `mesh start %s` clears it"
                                % (self.id, info.get("program"), info["program_failed"], info.get("program")),
                                "E_STATE", 0)
            if deadline is not None and time.monotonic() >= deadline:
                raise MeshTimeout("job %s is still %s after %gs" % (self.id, info.get("state"), timeout))
            w = step

    def pages(self, start: int = 0, wait: bool = True, framed: bool = False) -> Iterator[Tuple[int, int, bytes]]:
        """The paged long poll behind results(): yields (first, next, data)
        for each page: data is the results of chunks first..next-1
        concatenated (a buried chunk adds nothing); framed=True: each
        result behind its chunk id (u64 LE) and length (u32 LE).
        wait=False: what is settled now, stopping at the first gap."""
        k = int(start)
        while True:
            nxt, end, data = self.page(k, wait=_WAIT_MAX if wait else 0, framed=framed)
            if nxt > k or data:
                yield k, nxt, data
            if end:
                return
            if nxt == k and not wait:
                return
            k = nxt

    def page(self, start: int, wait: float = 0, framed: bool = False) -> Tuple[int, int, bytes]:
        """One page of results from chunk `start` (GET .../results):
        (next, end, data), waiting up to `wait` seconds (at most 60) when
        nothing could be added; a DONE chunk without its result is added
        to self.missing."""
        q = "?from=%d" % int(start)
        if framed:
            q += "&framed=1"
        t = None
        if wait and float(wait) >= 0.001:
            w = min(float(wait), _WAIT_MAX)
            q += "&wait=%s" % _secs(w)
            t = w + self.client.timeout
        r, data = self.client._request("GET", self._path("/results" + q), timeout=t)
        nxt, end, missing = _page_header(r.getheader("Content-Type", ""))
        if nxt is None:
            raise MeshError("meshd's results page has no next=K in its Content-Type", "E_PROTO", r.status)
        if missing is not None:
            self.missing.append(missing)
        return nxt, end, data

    def results(self, wait: bool = True, ids: bool = False) -> Iterator[Union[bytes, Tuple[int, bytes]]]:
        """Each DONE chunk's result, in chunk order, streamed while the job
        runs: one bytes object a chunk (ids=True: (chunk_id, bytes)); a
        buried chunk yields nothing.  b"".join(job.results()) is what
        `mesh results` prints.  Ends when every chunk is settled;
        wait=False: stops at the first chunk not settled yet.  DONE chunks
        without a result (self.missing) yield nothing; once the rest is
        yielded, MeshError E_CORRUPT names them."""
        self.missing = []
        for _, _, data in self.pages(wait=wait, framed=True):
            for cid, piece in _frames(data):
                yield (cid, piece) if ids else piece
        if self.missing:
            raise MeshError("job %s: %d DONE chunk(s) without a result (the results file lacks them): %s"
                            % (self.id, len(self.missing), ", ".join(str(c) for c in self.missing[:8])
                               + (", ..." if len(self.missing) > 8 else "")), "E_CORRUPT", 200)

    def cancel(self) -> None:
        """Stops the job for good (what is DONE stays DONE); MeshError
        E_STATE (409) once it has ended."""
        self.client._json("POST", self._path("/cancel"))


def _frames(data: bytes) -> Iterator[Tuple[int, bytes]]:
    """The (chunk id, result) records of a framed results page."""
    at = 0
    while at < len(data):
        if len(data) - at < 12:
            raise MeshError("meshd's framed results page ends inside a record header", "E_PROTO", 200)
        cid, n = struct.unpack_from("<QI", data, at)
        at += 12
        if len(data) - at < n:
            raise MeshError("meshd's framed results page ends inside chunk %d's result" % cid, "E_PROTO", 200)
        yield cid, data[at:at + n]
        at += n


def _job_id(v: Union[int, str]) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if isinstance(v, str) and v.isdigit() and v.isascii():
        return int(v)
    raise MeshError("%r is not a job id (a whole number)" % (v,), "E_PARSE", 400)


def _page_header(ctype: str) -> Tuple[Optional[int], bool, Optional[int]]:
    # "application/octet-stream; next=K; end=E[; missing=C]" (docs/api.md)
    nxt, end, missing = None, False, None
    for part in ctype.split(";")[1:]:
        k, _, v = part.strip().partition("=")
        try:
            if k == "next":
                nxt = int(v)
            elif k == "end":
                end = int(v) != 0
            elif k == "missing":
                missing = int(v)
        except ValueError:
            return None, False, None
    return nxt, end, missing


def _secs(v: float) -> str:
    # meshd takes seconds with at most 9 decimals (base/parse.h); repr() may write 17.
    return ("%.6f" % float(v)).rstrip("0").rstrip(".")


def _whole(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise MeshError("%s must be a whole number, not %r" % (what, v), "E_PARSE", 400)
    return v


def _name(name: str) -> str:
    # meshd refuses a bad name too (400); checked here so that nothing of
    # it is ever sent as a path.
    if not name or len(name) > 64 or name[0] == "-" or not set(name) <= _NAME_OK:
        raise MeshError("'%s' is not a program name (1 to 64 of A-Z a-z 0-9 _ -)" % name, "E_PARSE", 400)
    return name


def _error(status: int, reason: str, data: bytes) -> MeshError:
    try:
        j = json.loads(data)
        if isinstance(j, dict) and "error" in j:
            msg = j["error"]
            if j.get("tail"):
                msg = "%s\n%s" % (msg, j["tail"])
            return _mesh_error(msg, j.get("code") or "E_PROTO", status)
    except ValueError:
        pass
    return MeshError("meshd answered %d %s" % (status, reason), "E_PROTO", status)
