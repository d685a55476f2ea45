"""A WebHDFS server as a process of its own, for webhdfs:// under-store tests, written from
the protocol (Hadoop's WebHDFS REST API): a local directory served as HDFS, a "namenode" that
answers metadata operations and redirects OPEN and CREATE (307) to a "datanode" on a port of
its own, which serves and takes the bytes, as HDFS does. Errors are RemoteException JSON with
HDFS's statuses (IOExceptions it has no better status for are 403).

Operations: GETFILESTATUS, LISTSTATUS, LISTSTATUS_BATCH (`--batch` entries a batch, as
dfs.ls.limit), OPEN (offset, length), CREATE (overwrite), APPEND, MKDIRS, RENAME (with
renameoptions=OVERWRITE: rename2), DELETE (recursive), CONCAT. Every request is recorded
(method, op, path, user.name), served at `/requests`, and the connections they came on
counted at `/connections`. `--require-user` refuses requests
without user.name (403); `--datanode-host` is the host the redirects name;
`--standby-answers N` answers the first N namenode requests as a standby (StandbyException);
`--read-only-user NAME` refuses that user's writes (AccessControlException).

Run: `python -m tests.webhdfs_server --root DIR` prints the namenode's port, then the
datanode's, one a line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
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


class RemoteError(Exception):
    """Answered as a RemoteException: HDFS's `exception` name, and its status."""

    def __init__(self, status: int, exception: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.exception = exception

    def response(self) -> web.Response:
        java = {
            "FileNotFoundException": "java.io.FileNotFoundException",
            "IllegalArgumentException": "java.lang.IllegalArgumentException",
            "SecurityException": "java.lang.SecurityException",
        }.get(self.exception, f"org.apache.hadoop.fs.{self.exception}")
        body = {
            "RemoteException": {
                "exception": self.exception,
                "javaClassName": java,
                "message": str(self),
            }
        }
        return web.json_response(body, status=self.status)


def _not_found(path: str) -> RemoteError:
    return RemoteError(404, "FileNotFoundException", f"File does not exist: {path}")


def _truth(value: str | None) -> bool:
    return (value or "false").lower() == "true"


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


class Namespace:
    """HDFS paths ("/a/b") as files below the served root."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def local(self, path: str) -> Path:
        names = [n for n in path.split("/") if n]
        if any(n in (".", "..") for n in names):
            raise RemoteError(400, "IllegalArgumentException", f"Invalid path name {path}")
        return self.root.joinpath(*names)

    def parents_are_directories(self, path: str) -> None:
        local = self.local(path)
        for parent in reversed(local.parents):
            if parent == self.root or self.root not in parent.parents:
                continue
            if parent.exists() and not parent.is_dir():
                raise RemoteError(
                    403, "ParentNotDirectoryException", f"{parent} (is not a directory)"
                )

    def status(self, local: Path, suffix: str) -> dict[str, Any]:
        st = local.stat()
        directory = local.is_dir()
        return {
            "accessTime": 0 if directory else st.st_atime_ns // 1_000_000,
            "blockSize": 0 if directory else 134217728,
            "childrenNum": len(os.listdir(local)) if directory else 0,
            "fileId": st.st_ino,
            "group": "supergroup",
            "length": 0 if directory else st.st_size,
            "modificationTime": st.st_mtime_ns // 1_000_000,
            "owner": "webuser",
            "pathSuffix": suffix,
            "permission": "755" if directory else "644",
            "replication": 0 if directory else 1,
            "storagePolicy": 0,
            "type": "DIRECTORY" if directory else "FILE",
        }

    def entries(self, path: str) -> list[dict[str, Any]]:
        local = self.local(path)
        if not local.exists():
            raise _not_found(path)
        if not local.is_dir():
            return [self.status(local, "")]
        names = sorted(os.listdir(local), key=lambda n: n.encode())
        return [self.status(local / n, n) for n in names]


def _app(options: Options, served: list[dict[str, str]]) -> tuple[web.Application, web.Application]:
    space = Namespace(options.root)
    peers: set[tuple[str, object]] = set()

    def query_of(request: web.Request) -> dict[str, str]:
        return {k: v for k, v in request.query.items() if k != "op"}

    def record(request: web.Request, node: str) -> str:
        op = request.query.get("op", "").upper()
        path = "/" + request.match_info["path"]
        transport = request.transport
        peers.add((node, None if transport is None else transport.get_extra_info("peername")))
        served.append(
            {
                "node": node,
                "method": request.method,
                "op": op,
                "path": path,
                "user": request.query.get("user.name", ""),
            }
        )
        if node == "namenode" and options.standby_answers > 0:
            options.standby_answers -= 1
            raise RemoteError(
                403, "StandbyException", "Operation category READ is not supported in state standby"
            )
        user = request.query.get("user.name", "")
        if user and user == options.read_only_user and request.method != "GET":
            raise RemoteError(
                403,
                "AccessControlException",
                f'Permission denied: user={user}, access=WRITE, inode="{path}":hdfs:supergroup',
            )
        if options.require_user and not request.query.get("user.name"):
            raise RemoteError(
                403, "AccessControlException", "user.name is required (anonymous not allowed)"
            )
        return op

    def redirect(request: web.Request, op: str, path: str) -> web.Response:
        query = {"op": op, **query_of(request), "namenoderpcaddress": "127.0.0.1:8020"}
        location = (
            f"http://{options.datanode_host}:{options.datanode_port}/webhdfs/v1{path}"
            f"?{urlencode(query)}"
        )
        return web.Response(status=307, headers={"Location": location, "Content-Length": "0"})

    @web.middleware
    async def remote_errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response: web.StreamResponse = await handler(request)
            return response
        except RemoteError as exc:
            return exc.response()

    # ---- namenode ------------------------------------------------------------------------

    async def namenode_get(request: web.Request) -> web.StreamResponse:
        op = record(request, "namenode")
        path = "/" + request.match_info["path"]
        local = space.local(path)
        if op == "GETFILESTATUS":
            if not local.exists():
                raise _not_found(path)
            return web.json_response({"FileStatus": space.status(local, "")})
        if op == "LISTSTATUS":
            return web.json_response({"FileStatuses": {"FileStatus": space.entries(path)}})
        if op == "LISTSTATUS_BATCH":
            entries = space.entries(path)
            after = request.query.get("startAfter", "").encode()
            if after:
                entries = [e for e in entries if e["pathSuffix"].encode() > after]
            batch = entries[: options.batch]
            listing = {
                "partialListing": {"FileStatuses": {"FileStatus": batch}},
                "remainingEntries": len(entries) - len(batch),
            }
            return web.json_response({"DirectoryListing": listing})
        if op == "OPEN":
            if not local.exists():
                raise _not_found(path)
            if not local.is_file():
                raise RemoteError(404, "FileNotFoundException", f"Path is not a file: {path}")
            if int(request.query.get("offset", "0")) < 0:
                raise RemoteError(400, "IllegalArgumentException", "Invalid offset")
            return redirect(request, "OPEN", path)
        raise _bad_op(op)

    async def namenode_put(request: web.Request) -> web.StreamResponse:
        op = record(request, "namenode")
        path = "/" + request.match_info["path"]
        local = space.local(path)
        if op == "CREATE":
            space.parents_are_directories(path)
            if local.is_dir():
                raise RemoteError(
                    403, "FileAlreadyExistsException", f"{path} already exists as a directory"
                )
            if local.exists() and not _truth(request.query.get("overwrite")):
                raise RemoteError(403, "FileAlreadyExistsException", f"{path} already exists")
            return redirect(request, "CREATE", path)
        if op == "MKDIRS":
            space.parents_are_directories(path)
            if local.exists() and not local.is_dir():
                raise RemoteError(
                    403, "FileAlreadyExistsException", f"Path is not a directory: {path}"
                )
            local.mkdir(parents=True, exist_ok=True)
            return web.json_response({"boolean": True})
        if op == "RENAME":
            return rename(request, path, local)
        raise _bad_op(op)

    def rename(request: web.Request, path: str, local: Path) -> web.Response:
        destination = request.query.get("destination", "")
        if not destination.startswith("/"):
            raise RemoteError(400, "IllegalArgumentException", "Invalid destination")
        target = space.local(destination)
        options_given = request.query.get("renameoptions", "")
        if not options_given:
            # rename(): false rather than an exception, and into an existing directory.
            if target.is_dir():
                target = target / local.name
            if not local.exists() or target.exists() or not target.parent.is_dir():
                return web.json_response({"boolean": False})
            os.rename(local, target)
            return web.json_response({"boolean": True})
        overwrite = "OVERWRITE" in options_given.upper().split(",")
        if not local.exists():
            raise RemoteError(404, "FileNotFoundException", f"rename source {path} is not found.")
        if not target.parent.is_dir():
            raise RemoteError(
                404, "FileNotFoundException", f"rename destination parent {destination} not found."
            )
        if target.exists():
            if not overwrite:
                raise RemoteError(
                    403,
                    "FileAlreadyExistsException",
                    f"rename destination {destination} already exists.",
                )
            if target.is_dir() != local.is_dir():
                raise RemoteError(
                    403,
                    "IOException",
                    f"Source {path} and destination {destination} must both be directories or files",
                )
            if target.is_dir() and os.listdir(target):
                raise RemoteError(
                    403, "IOException", f"rename destination directory is not empty: {destination}"
                )
        os.replace(local, target)
        return web.Response(status=200, content_type=_OCTET)

    async def namenode_post(request: web.Request) -> web.StreamResponse:
        op = record(request, "namenode")
        path = "/" + request.match_info["path"]
        local = space.local(path)
        if op == "APPEND":
            if not local.is_file():
                raise _not_found(path)
            return redirect(request, "APPEND", path)
        if op == "CONCAT":
            return concat(request, path, local)
        raise _bad_op(op)

    def concat(request: web.Request, path: str, local: Path) -> web.Response:
        sources = [s for s in request.query.get("sources", "").split(",") if s]
        if not sources:
            raise RemoteError(400, "HadoopIllegalArgumentException", "No sources given")
        if not local.is_file():
            raise _not_found(path)
        seen: set[Path] = set()
        for source in sources:
            src = space.local(source)
            if not src.is_file():
                raise _not_found(source)
            if src == local or src in seen:
                raise RemoteError(
                    400,
                    "HadoopIllegalArgumentException",
                    f"concat: the source file {source} is the target or repeated",
                )
            if src.parent != local.parent:
                raise RemoteError(
                    400,
                    "HadoopIllegalArgumentException",
                    f"concat: source file {source} and target file {path} should be in the same directory",
                )
            if src.stat().st_size == 0:
                raise RemoteError(
                    400,
                    "HadoopIllegalArgumentException",
                    f"concat: source file {source} is invalid or empty or underConstruction",
                )
            seen.add(src)
        with local.open("ab") as out:
            for source in sources:
                with space.local(source).open("rb") as f:
                    shutil.copyfileobj(f, out)
        for source in sources:
            space.local(source).unlink()
        return web.Response(status=200, content_type=_OCTET)

    async def namenode_delete(request: web.Request) -> web.StreamResponse:
        op = record(request, "namenode")
        path = "/" + request.match_info["path"]
        local = space.local(path)
        if op != "DELETE":
            raise _bad_op(op)
        if local == space.root:
            return web.json_response({"boolean": False})
        if not local.exists():
            return web.json_response({"boolean": False})
        if local.is_dir():
            if os.listdir(local) and not _truth(request.query.get("recursive")):
                raise RemoteError(403, "PathIsNotEmptyDirectoryException", f"{path} is non empty")
            shutil.rmtree(local)
        else:
            local.unlink()
        return web.json_response({"boolean": True})

    async def requests(_: web.Request) -> web.Response:
        return web.json_response(served)

    async def connections(_: web.Request) -> web.Response:
        nodes = [node for node, _ in peers]
        return web.json_response({node: nodes.count(node) for node in ("namenode", "datanode")})

    # ---- datanode ------------------------------------------------------------------------

    async def datanode_open(request: web.Request) -> web.StreamResponse:
        op = record(request, "datanode")
        path = "/" + request.match_info["path"]
        if op != "OPEN":
            raise _bad_op(op)
        local = space.local(path)
        if not local.is_file():
            raise _not_found(path)
        with local.open("rb") as f:
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

    async def datanode_write(request: web.Request) -> web.StreamResponse:
        op = record(request, "datanode")
        path = "/" + request.match_info["path"]
        local = space.local(path)
        if op == "CREATE" and request.method == "PUT":
            space.parents_are_directories(path)
            if local.exists() and not _truth(request.query.get("overwrite")):
                raise RemoteError(403, "FileAlreadyExistsException", f"{path} already exists")
            local.parent.mkdir(parents=True, exist_ok=True)
            mode = "wb"
        elif op == "APPEND" and request.method == "POST":
            if not local.is_file():
                raise _not_found(path)
            mode = "ab"
        else:
            raise _bad_op(op)
        # As HDFS: the file is there (growing) while it is written.
        with local.open(mode) as out:
            async for chunk in request.content.iter_chunked(1 << 20):
                out.write(chunk)
        if op == "APPEND":
            return web.Response(status=200)
        location = f"webhdfs://127.0.0.1:{options.namenode_port}{path}"
        return web.Response(status=201, headers={"Location": location})

    route = "/webhdfs/v1/{path:.*}"
    namenode = web.Application(middlewares=[remote_errors])
    namenode.router.add_get("/requests", requests)
    namenode.router.add_get("/connections", connections)
    namenode.router.add_get(route, namenode_get)
    namenode.router.add_put(route, namenode_put)
    namenode.router.add_post(route, namenode_post)
    namenode.router.add_delete(route, namenode_delete)
    datanode = web.Application(middlewares=[remote_errors], client_max_size=1 << 40)
    datanode.router.add_get(route, datanode_open)
    datanode.router.add_put(route, datanode_write)
    datanode.router.add_post(route, datanode_write)
    return namenode, datanode


def _bad_op(op: str) -> RemoteError:
    return RemoteError(
        400,
        "IllegalArgumentException",
        f'Invalid value for webhdfs parameter "op": No enum constant for {op}',
    )


async def _serve(options: Options, sockets: tuple[socket.socket, socket.socket]) -> None:
    served: list[dict[str, str]] = []
    apps = _app(options, served)
    runners = []
    for app, sock in zip(apps, sockets, strict=True):
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
