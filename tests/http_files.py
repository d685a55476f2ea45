"""A plain HTTP file server as a process of its own, for http(s) under-store tests:
aiohttp's static files (Range, ETag, Last-Modified, as a dataset mirror serves them)
under `/files/`, and a count of the requests it served at `/requests`.

Run: `python -m tests.http_files DIRECTORY` prints its port on the first line of stdout.
"""

from __future__ import annotations

import collections
import json
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class HttpFiles:
    """The server process; `url` is the prefix to mount (`http://127.0.0.1:PORT/files/`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.http_files", str(directory)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        assert self._process.stdout is not None
        self.port = int(self._process.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}/files/"

    def requests(self) -> dict[str, int]:
        """Requests served so far, by "METHOD /path"; and "connections": how many
        connections they came on."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/requests", timeout=10) as r:
            counts: dict[str, int] = json.load(r)
        return counts

    def gets(self, name: str) -> int:
        return self.requests().get(f"GET /files/{name}", 0)

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)


def _app(directory: Path) -> web.Application:
    counts: collections.Counter[str] = collections.Counter()
    peers: set[object] = set()

    @web.middleware
    async def counted(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != "/requests":
            counts[f"{request.method} {request.path}"] += 1
            transport = request.transport
            peers.add(None if transport is None else transport.get_extra_info("peername"))
            counts["connections"] = len(peers)
        return await handler(request)

    async def requests(_: web.Request) -> web.Response:
        return web.json_response(dict(counts))

    app = web.Application(middlewares=[counted])
    app.router.add_get("/requests", requests)
    app.router.add_static("/files/", directory)
    return app


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections made before the app starts wait in the backlog
    print(sock.getsockname()[1], flush=True)
    web.run_app(_app(Path(sys.argv[1])), sock=sock, print=None, access_log=None)


if __name__ == "__main__":
    main()
