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
raises MeshUnreachable (a MeshError and a ConnectionError).
"""

import errno
import http.client
import json
import os
import socket
import struct
import time
import urllib.parse

__all__ = ["Client", "Job", "MeshError", "MeshUnreachable", "default_socket"]

# The longest long poll meshd serves (wait=S, docs/api.md "Jobs").
_WAIT_MAX = 60.0
# A job's states once it ended (docs/api.md).
_ENDED = frozenset(("complete", "failed", "cancelled", "error"))


def default_socket():
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

    def __init__(self, message, code="E_PROTO", status=0):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def __repr__(self):
        return "MeshError(%r, code=%r, status=%r)" % (self.message, self.code, self.status)


class MeshUnreachable(MeshError, ConnectionError):
    """Nobody serves at the socket (meshd is not running, or not there)."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
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

    def __init__(self, socket_path=None, timeout=60.0):
        self.socket_path = socket_path or default_socket()
        self.timeout = timeout

    def _request(self, method, target, body=None, timeout=None):
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
                raise MeshError("no answer from meshd at '%s' in time" % self.socket_path, "E_TIMEOUT") from None
            except (http.client.HTTPException, OSError) as e:
                raise MeshError("meshd at '%s' broke the answer: %s" % (self.socket_path, e), "E_CLOSED") from None
        finally:
            conn.close()
        if r.status >= 400:
            raise _error(r.status, r.reason, data)
        return r, data

    def _json(self, method, target, body=None, timeout=None):
        _, data = self._request(method, target, body=body, timeout=timeout)
        try:
            return json.loads(data)
        except ValueError:
            raise MeshError("meshd answered %s %s with something that is not JSON" % (method, target),
                            "E_PROTO") from None

    def _program(self, action, name):
        j = self._json("POST", "/v1/programs/%s/%s" % (_name(name), action))
        return j.get("result", j)

    def load(self, name):
        """Checks the catalog entry (manifest, binary, limits); no process
        starts.  The image as `ps` shows it (dict)."""
        return self._program("load", name)

    def unload(self, name):
        """Its workers exit and the image is forgotten."""
        self._program("unload", name)

    def start(self, name):
        """Starts a worker and returns once it is ready: {"name", "pid", "state"}."""
        return self._program("start", name)

    def stop(self, name):
        """Its workers exit (stop signal, grace, SIGKILL); it stays loaded."""
        self._program("stop", name)

    def ps(self):
        """The stats table (docs/api.md, GET /v1/ps) as a dict."""
        return self._json("GET", "/v1/ps")

    def logs(self, name, tail=None):
        """The last `tail` bytes of the program's log (all, at most 1 MiB, when None), as bytes."""
        q = "" if tail is None else "?tail=%d" % int(tail)
        _, data = self._request("GET", "/v1/programs/%s/logs%s" % (_name(name), q))
        return data

    def call(self, program, payload=b"", timeout=None):
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

    def submit(self, program, inputs=None, chunks=None, max_workers=None, retries=None, timeout=None,
               speculate=False, name=None):
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

    def job(self, job_id):
        """The Job of an id (an int or its decimal string); meshd is not asked."""
        return Job(self, str(job_id))

    def jobs(self, all=False):
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

    def __init__(self, client, job_id, info=None):
        self.client = client
        self.id = str(job_id)
        self.info = info
        self.missing = []

    def __repr__(self):
        return "Job(%r, state=%r)" % (self.id, (self.info or {}).get("state"))

    def _path(self, tail=""):
        return "/v1/jobs/%s%s" % (urllib.parse.quote(self.id, safe=""), tail)

    def status(self, wait=None):
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
    def state(self):
        """The state as last read (status(), wait())."""
        return (self.info or {}).get("state")

    def wait(self, progress=None, timeout=None):
        """Waits for the job to end and returns its final state ("complete",
        "failed", "cancelled" or "error"); the job object is self.info.
        Long polls (no busy loop): progress, when given, is called with the
        job object after each poll (every second at most while it runs, and
        once at the end).  timeout: seconds; past it MeshError E_TIMEOUT.
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
                raise MeshError("job %s is still %s after %gs" % (self.id, info.get("state"), timeout),
                                "E_TIMEOUT", 0)
            w = step

    def pages(self, start=0, wait=True, framed=False):
        """The paged long poll behind results(): yields (first, next, data)
        for each page: data is the results of chunks first..next-1
        concatenated (a buried chunk adds nothing); framed=True: each
        result behind its chunk id (u64 LE) and length (u32 LE).
        wait=False: what is settled now, stopping at the first gap."""
        k = int(start)
        while True:
            q = "?from=%d" % k
            if framed:
                q += "&framed=1"
            t = None
            if wait:
                q += "&wait=%d" % int(_WAIT_MAX)
                t = _WAIT_MAX + self.client.timeout
            r, data = self.client._request("GET", self._path("/results" + q), timeout=t)
            nxt, end, missing = _page_header(r.getheader("Content-Type", ""))
            if nxt is None:
                raise MeshError("meshd's results page has no next=K in its Content-Type", "E_PROTO", r.status)
            if missing is not None:
                self.missing.append(missing)
            if nxt > k or data:
                yield k, nxt, data
            if end:
                return
            if nxt == k and not wait:
                return
            k = nxt

    def results(self, wait=True, ids=False):
        """Each DONE chunk's result, in chunk order, streamed while the job
        runs: one bytes object a chunk (ids=True: (chunk_id, bytes)); a
        buried chunk yields nothing.  b"".join(job.results()) is what
        `mesh results` prints.  Ends when every chunk is settled;
        wait=False: stops at the first chunk not settled yet.  DONE chunks
        without a result (self.missing) yield nothing; once the rest is
        yielded, MeshError E_CORRUPT names them."""
        self.missing = []
        for _, _, data in self.pages(wait=wait, framed=True):
            at = 0
            while at < len(data):
                if len(data) - at < 12:
                    raise MeshError("meshd's framed results page ends inside a record header", "E_PROTO", 200)
                cid, n = struct.unpack_from("<QI", data, at)
                at += 12
                if len(data) - at < n:
                    raise MeshError("meshd's framed results page ends inside chunk %d's result" % cid,
                                    "E_PROTO", 200)
                piece = data[at:at + n]
                at += n
                yield (cid, piece) if ids else piece
        if self.missing:
            raise MeshError("job %s: %d DONE chunk(s) without a result (the results file lacks them): %s"
                            % (self.id, len(self.missing), ", ".join(str(c) for c in self.missing[:8])
                               + (", ..." if len(self.missing) > 8 else "")), "E_CORRUPT", 200)

    def cancel(self):
        """Stops the job for good (what is DONE stays DONE); MeshError
        E_STATE (409) once it has ended."""
        self.client._json("POST", self._path("/cancel"))


def _page_header(ctype):
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


def _secs(v):
    # meshd takes seconds with at most 9 decimals (base/parse.h); repr() may write 17.
    return ("%.6f" % float(v)).rstrip("0").rstrip(".")


def _whole(v, what):
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise MeshError("%s must be a whole number, not %r" % (what, v), "E_PARSE", 400)
    return v


def _name(name):
    # meshd refuses a bad name too (400); checked here so that nothing of
    # it is ever sent as a path.
    if not name or len(name) > 64 or name[0] == "-" or not set(name) <= _NAME_OK:
        raise MeshError("'%s' is not a program name (1 to 64 of A-Z a-z 0-9 _ -)" % name, "E_PARSE", 400)
    return name


def _error(status, reason, data):
    try:
        j = json.loads(data)
        if isinstance(j, dict) and "error" in j:
            msg = j["error"]
            if j.get("tail"):
                msg = "%s\n%s" % (msg, j["tail"])
            return MeshError(msg, j.get("code") or "E_PROTO", status)
    except ValueError:
        pass
    return MeshError("meshd answered %d %s" % (status, reason), "E_PROTO", status)
