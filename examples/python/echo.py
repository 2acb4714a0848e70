"""The smallest useful mesh worker in Python: replies with its request.

Catalog entry (docs/python.md): <catalog>/x86_64-linux-gnu/pyecho is a
symbolic link to the Python interpreter, and <catalog>/pyecho.toml says
    name = "pyecho"
    backends = ["native"]
    args = ["/path/to/examples/python/echo.py"]
"""
import mesh.worker


def echo(data):
    return data


if __name__ == "__main__":
    print("echo.py: ready")
    mesh.worker.main(echo, view=True)
