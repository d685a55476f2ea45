"""A WebHDFS server as a process of its own, for webhdfs:// under-store tests, written from
the protocol (Hadoop's WebHDFS REST API): a local directory served as HDFS
(`webhdfs_namespace.py`), a "namenode" that answers metadata operations and redirects OPEN,
CREATE and APPEND (307) to a "datanode" on a port of its own, which serves and takes the
bytes, as HDFS does. Errors are RemoteException JSON with HDFS's statuses (IOExceptions it
has no better status for are 403).

Operations: GETFILESTATUS, LISTSTATUS, LISTSTATUS_BATCH (`--batch` entries a batch, as
dfs.ls.limit), OPEN (offset, length), CREATE (overwrite), APPEND, MKDIRS, RENAME (with
renameoptions=OVERWRITE: rename2), DELETE (recursive), CONCAT. Every request is recorded
(method, op, path, user.name), served at `/requests`, and the connections they came on
counted at `/connections`.

Options: `--require-user` refuses requests without user.name (403); `--datanode-host` is
the host the redirects name; `--standby-answers N` answers the first N namenode requests
as a standby does (StandbyException); `--read-only-user NAME` refuses that user's writes
(AccessControlException).

Run: `python -m tests.webhdfs_server --root DIR` prints the namenode's port, then the
datanode's, one a line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from .webhdfs_namespace import Namespace, RemoteError

_OCTET = "application/octet-stream"


class WebHdfsServer:
    """The server process; `uri(path)` is a webhdfs:// URI of a directory it serves."""

    def __init__(self, root: Path, *options: str) -> None:
        self.root = root
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.webhdfs_server", "--root", str(root), *options],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).parent.parent,
        )
        assert self._process.stdout is not None
        self.port = int(self._process.stdout.readline())
        self.datanode_port = int(self._process.stdout.readline())

    def uri(self, path: str = "", scheme: str = "webhdfs") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/{path}"

    def requests(self) -> list[dict[str, str]]:
        """Every request served so far: method, op, path, user ("" when none), and
        `node` (namenode or datanode)."""
        url = f"http://127.0.0.1:{self.port}/requests"
        with urllib.request.urlopen(url, timeout=10) as r:
            served: list[dict[str, str]] = json.load(r)
        return served

    def connections(self) -> dict[str, int]:
        """How many connections the requests came on, by node (namenode, datanode)."""
        url = f"http://127.0.0.1:{self.port}/connections"
        with urllib.request.urlopen(url, timeout=10) as r:
            counts: dict[str, int] = json.load(r)
        return counts

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=10)


def _truth(value: str | None) -> bool:
    return (value or "false").lower() == "true"


def _bad_op(op: str) -> RemoteError:
    return RemoteError(
        400,
        "IllegalArgumentException",
        f'Invalid value for webhdfs parameter "op": No enum constant for {op}',
    )


@dataclass
class Options:
    root: Path
    batch: int
    require_user: bool
    datanode_host: str
    standby_answers: int = 0
    read_only_user: str = ""
    datanode_port: int = 0
    namenode_port: int = 0


class Nodes:
    """The namenode's and the datanode's handlers over one namespace, and the record of
    every request they served."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.space = Namespace(options.root)
        self.served: list[dict[str, str]] = []
        self.peers: set[tuple[str, object]] = set()

    def apps(self) -> tuple[web.Application, web.Application]:
        route = "/webhdfs/v1/{path:.*}"
        namenode = web.Application(middlewares=[_remote_errors])
        namenode.router.add_get("/requests", self.requests)
        namenode.router.add_get("/connections", self.connections)
        namenode.router.add_get(route, self.namenode_get)
        namenode.router.add_put(route, self.namenode_put)
        namenode.router.add_post(route, self.namenode_post)
        namenode.router.add_delete(route, self.namenode_delete)
        datanode = web.Application(middlewares=[_remote_errors], client_max_size=1 << 40)
        datanode.router.add_get(route, self.datanode_open)
        datanode.router.add_put(route, self.datanode_write)
        datanode.router.add_post(route, self.datanode_write)
        return namenode, datanode

    def _record(self, request: web.Request, node: str) -> tuple[str, str]:
        """The request's op and HDFS path, once recorded and let through: as a standby
        namenode, or a namenode that refuses the user, would not."""
        op = request.query.get("op", "").upper()
        path = "/" + request.match_info["path"]
        user = request.query.get("user.name", "")
        transport = request.transport
        self.peers.add((node, None if transport is None else transport.get_extra_info("peername")))
        self.served.append(
            {"node": node, "method": request.method, "op": op, "path": path, "user": user}
        )
        options = self.options
        if node == "namenode" and options.standby_answers > 0:
            options.standby_answers -= 1
            raise RemoteError(
                403, "StandbyException", "Operation category READ is not supported in state standby"
            )
        if user and user == options.read_only_user and request.method != "GET":
            raise RemoteError(
                403,
                "AccessControlException",
                f'Permission denied: user={user}, access=WRITE, inode="{path}":hdfs:supergroup',
            )
        if options.require_user and not user:
            raise RemoteError(
                403, "AccessControlException", "user.name is required (anonymous not allowed)"
            )
        return op, path

    def _redirect(self, request: web.Request, op: str, path: str) -> web.Response:
        """To the datanode, the query as given (user.name included), as a namenode does."""
        query = {**request.query, "op": op, "namenoderpcaddress": "127.0.0.1:8020"}
        location = (
            f"http://{self.options.datanode_host}:{self.options.datanode_port}/webhdfs/v1{path}"
            f"?{urlencode(query)}"
        )
        return web.Response(status=307, headers={"Location": location, "Content-Length": "0"})

    # ---- namenode ------------------------------------------------------------------------

    async def namenode_get(self, request: web.Request) -> web.StreamResponse:
        op, path = self._record(request, "namenode")
        if op == "GETFILESTATUS":
            return web.json_response({"FileStatus": self.space.status(path)})
        if op == "LISTSTATUS":
            return web.json_response({"FileStatuses": {"FileStatus": self.space.entries(path)}})
        if op == "LISTSTATUS_BATCH":
            after = request.query.get("startAfter", "")
            batch, remaining = self.space.batch(path, after, self.options.batch)
            listing = {
                "partialListing": {"FileStatuses": {"FileStatus": batch}},
                "remainingEntries": remaining,
            }
            return web.json_response({"DirectoryListing": listing})
        if op == "OPEN":
            self.space.file(path)
            if int(request.query.get("offset", "0")) < 0:
                raise RemoteError(400, "IllegalArgumentException", "Invalid offset")
            return self._redirect(request, "OPEN", path)
        raise _bad_op(op)

    async def namenode_put(self, request: web.Request) -> web.StreamResponse:
        op, path = self._record(request, "namenode")
        if op == "CREATE":
            self.space.creatable(path, _truth(request.query.get("overwrite")))
            return self._redirect(request, "CREATE", path)
        if op == "MKDIRS":
            self.space.mkdirs(path)
            return web.json_response({"boolean": True})
        if op == "RENAME":
            destination = request.query.get("destination", "")
            options = request.query.get("renameoptions", "")
            if not options:
                return web.json_response({"boolean": self.space.rename(path, destination)})
            overwrite = "OVERWRITE" in options.upper().split(",")
            self.space.rename2(path, destination, overwrite)
            return web.Response(status=200, content_type=_OCTET)
        raise _bad_op(op)

    async def namenode_post(self, request: web.Request) -> web.StreamResponse:
        op, path = self._record(request, "namenode")
        if op == "APPEND":
            self.space.file(path)
            return self._redirect(request, "APPEND", path)
        if op == "CONCAT":
            sources = [s for s in request.query.get("sources", "").split(",") if s]
            self.space.concat(path, sources)
            return web.Response(status=200, content_type=_OCTET)
        raise _bad_op(op)

    async def namenode_delete(self, request: web.Request) -> web.StreamResponse:
        op, path = self._record(request, "namenode")
        if op != "DELETE":
            raise _bad_op(op)
        deleted = self.space.delete(path, _truth(request.query.get("recursive")))
        return web.json_response({"boolean": deleted})

    async def requests(self, _: web.Request) -> web.Response:
        return web.json_response(self.served)

    async def connections(self, _: web.Request) -> web.Response:
        nodes = [node for node, _ in self.peers]
        return web.json_response({node: nodes.count(node) for node in ("namenode", "datanode")})

    # ---- datanode ------------------------------------------------------------------------

    async def datanode_open(self, request: web.Request) -> web.StreamResponse:
        op, path = self._record(request, "datanode")
        if op != "OPEN":
            raise _bad_op(op)
        with self.space.file(path).open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = int(request.query.get("offset", "0"))
            if offset > size:
                raise RemoteError(403, "EOFException", "Cannot seek after EOF")
            length = size - offset
            if "length" in request.query:
                length = min(length, int(request.query["length"]))
            f.seek(offset)
            response = web.StreamResponse(status=200, headers={"Content-Type": _OCTET})
            response.content_length = length
            await response.prepare(request)
            left = length
            while left:
                chunk = f.read(min(left, 1 << 20))
                if not chunk:
                    break
                await response.write(chunk)
                left -= len(chunk)
            await response.write_eof()
            return response

    async def datanode_write(self, request: web.Request) -> web.StreamResponse:
        op, path = self._record(request, "datanode")
        if op == "CREATE" and request.method == "PUT":
            local = self.space.creatable(path, _truth(request.query.get("overwrite")))
            local.parent.mkdir(parents=True, exist_ok=True)
            mode = "wb"
        elif op == "APPEND" and request.method == "POST":
            local, mode = self.space.file(path), "ab"
        else:
            raise _bad_op(op)
        # As HDFS: the file is there (growing) while it is written.
        with local.open(mode) as out:
            async for chunk in request.content.iter_chunked(1 << 20):
                out.write(chunk)
        if op == "APPEND":
            return web.Response(status=200)
        location = f"webhdfs://127.0.0.1:{self.options.namenode_port}{path}"
        return web.Response(status=201, headers={"Location": location})


@web.middleware
async def _remote_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except RemoteError as exc:
        return web.json_response(exc.body(), status=exc.status)


async def _serve(options: Options, sockets: tuple[socket.socket, socket.socket]) -> None:
    runners = []
    for app, sock in zip(Nodes(options).apps(), sockets, strict=True):
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        runners.append(runner)
    print(options.namenode_port, options.datanode_port, sep="\n", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=1000, help="LISTSTATUS_BATCH size")
    parser.add_argument("--require-user", action="store_true")
    parser.add_argument("--datanode-host", default="127.0.0.1")
    parser.add_argument("--read-only-user", default="", help="a user refused every write")
    parser.add_argument(
        "--standby-answers",
        type=int,
        default=0,
        help="answer the first N namenode requests as a standby namenode does",
    )
    args = parser.parse_args()
    sockets = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)  # connections made before the apps start wait in the backlog
        sockets.append(sock)
    options = Options(
        args.root.resolve(),
        args.batch,
        args.require_user,
        args.datanode_host,
        args.standby_answers,
        args.read_only_user,
        datanode_port=sockets[1].getsockname()[1],
        namenode_port=sockets[0].getsockname()[1],
    )
    asyncio.run(_serve(options, (sockets[0], sockets[1])))


if __name__ == "__main__":
    main()
