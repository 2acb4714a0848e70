"""A plain Python echo server on a unix stream socket: the reference that
bench_python measures a Python mesh worker against.  Each message is a
4-byte little-endian length and its bytes; the reply is the same.
Usage: socket_echo.py PATH"""
import os
import socket
import struct
import sys


def recv_exact(c, n):
    b = bytearray()
    while len(b) < n:
        k = c.recv(n - len(b))
        if not k:
            return None
        b += k
    return bytes(b)


def main(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    s.bind(path)
    s.listen(1)
    print("listening", flush=True)
    c, _ = s.accept()
    while True:
        h = recv_exact(c, 4)
        if h is None:
            return 0
        (n,) = struct.unpack("<I", h)
        data = recv_exact(c, n)
        if data is None:
            return 0
        c.sendall(h + data)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
