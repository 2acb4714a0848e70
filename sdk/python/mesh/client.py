"""A client of meshd's control API (docs/api.md): HTTP/1.1 and JSON over
meshd's unix socket, standard library only.

    from mesh.client import Client, MeshError
    c = Client()                      # the socket `mesh` would use
    c.load("echo"); c.start("echo")
    assert c.call("echo", b"hi") == b"hi"
    print(c.ps()["host"]["processes"])
    c.stop("echo")

Every error meshd answers raises MeshError with its message (``str(e)``,
``e.message``), its code (``e.code``, a mesh error name such as
"E_NOTFOUND") and the HTTP status (``e.status``); an unreachable meshd
raises MeshUnreachable (a MeshError and a ConnectionError).

Jobs (submit, wait, results, cancel) are coming with meshd jobs.
"""

import errno
import http.client
import json
import os
import socket
import urllib.parse

__all__ = ["Client", "MeshError", "MeshUnreachable", "default_socket"]


def default_socket():
    """The socket path meshd serves on and `mesh` talks to: $MESH_SOCKET,
    else $XDG_RUNTIME_DIR/mesh/meshd.sock (when absolute), else
    /tmp/mesh-<uid>/meshd.sock (src/daemon/api_client.c)."""
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

    def _json(self, method, target):
        _, data = self._request(method, target)
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
            q = "?timeout=%s" % urllib.parse.quote(repr(float(timeout)))
            wait = float(timeout) + self.timeout
        _, data = self._request("POST", "/v1/programs/%s/call%s" % (_name(program), q), body=bytes(payload),
                                timeout=wait)
        return data


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
