"""A TCP relay in front of an S3 server that adds a first-byte latency and counts requests.

    python bench/speed/latency_proxy.py --upstream 127.0.0.1:8333 --port 9000 --latency-ms 20

moto's server (`reservoir.local.s3server`) injects latency and counts requests itself;
SeaweedFS has no such option, so the bench puts this relay in front of it. It speaks the
same admin endpoints as the moto wrapper (GET /_reservoir/stats, POST /_reservoir/reset,
POST /_reservoir/config?latency_ms=N), so `LocalCluster.s3_counts()` and
`LocalCluster.s3_config()` work against either.

Cost: the request direction is read in Python (a request line is parsed to count it and
hold it back `latency_ms`; the hold is a sleep, no CPU). The response direction, where
the bytes are, is moved by `os.splice` through a pipe, so payload never enters Python.
One thread per direction per connection. With `--keep-dir` the relay also keeps every
byte it passes on, as a cache would: `tee(2)` duplicates the pipe's pages and a second
splice writes them into one unlinked file per connection there (new tmpfs pages on
/dev/shm), kept while the connection lasts. HTTP/1.1 clients (botocore, aiohttp) do not
pipeline, so a chunk that starts with a method and an HTTP version is a new request.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import fcntl
import json
import os
import signal
import socket
import threading
import time
from collections import Counter
from urllib.parse import parse_qs, urlsplit

ADMIN = "/_reservoir/"
PIPE_BYTES = 1 << 20
METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ")
DELAYED = ("GET", "HEAD", "LIST")


def request_kind(method: str, target: str) -> str:
    """The same kinds as `reservoir.local.s3server.S3Observer.kind` (path-style URLs)."""
    split = urlsplit(target)
    parts = [p for p in split.path.split("/") if p]
    if method == "GET":
        if len(parts) >= 2 and "uploads" not in split.query:
            return "GET"
        return "LIST" if len(parts) == 1 else "OTHER"
    if method in ("HEAD", "PUT", "DELETE", "POST"):
        return method
    return "OTHER"


def request_line(chunk: bytes) -> tuple[str, str] | None:
    """(method, target) if `chunk` starts an HTTP request, else None (a body chunk)."""
    if not chunk.startswith(METHODS):
        return None
    line = chunk.split(b"\r\n", 1)[0].decode("latin-1")
    fields = line.split(" ")
    if len(fields) != 3 or not fields[2].startswith("HTTP/1."):
        return None
    return fields[0], fields[1]


_libc = ctypes.CDLL(None, use_errno=True)


def tee(read_end: int, write_end: int, n: int) -> int:
    """tee(2), which the os module lacks: up to `n` bytes of one pipe duplicated into
    another (pages shared, not copied), leaving them in the first."""
    got = _libc.tee(read_end, write_end, ctypes.c_size_t(n), 0)
    if got < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(got)


class LatencyRelay:
    def __init__(
        self, upstream: tuple[str, int], latency_ms: float, keep_dir: str | None = None
    ) -> None:
        self.upstream = upstream
        self.keep_dir = keep_dir
        self.latency_s = latency_ms / 1000
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def serve(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, client: socket.socket) -> None:
        try:
            server = socket.create_connection(self.upstream, timeout=30)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        for s in (client, server):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        back = threading.Thread(target=self._responses, args=(server, client), daemon=True)
        back.start()
        try:
            self._requests(client, server)
        finally:
            back.join()
            client.close()
            server.close()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        while True:
            try:
                chunk = client.recv(256 * 1024)
            except OSError:
                chunk = b""
            if not chunk:
                with contextlib.suppress(OSError):
                    server.shutdown(socket.SHUT_WR)
                return
            line = request_line(chunk)
            if line is not None:
                method, target = line
                if target.startswith(ADMIN):
                    self._admin(client, server, target)
                    return
                kind = request_kind(method, target)
                with self._lock:
                    self.counts[kind] += 1
                if kind in DELAYED and self.latency_s > 0:
                    time.sleep(self.latency_s)
            try:
                server.sendall(chunk)
            except OSError:
                return

    def _responses(self, server: socket.socket, client: socket.socket) -> None:
        read_end, write_end = _pipe()
        kept = None
        if self.keep_dir is not None:
            kept = os.open(self.keep_dir, os.O_TMPFILE | os.O_RDWR, 0o600)
            copy_read, copy_write = _pipe()
        try:
            while True:
                n = os.splice(server.fileno(), write_end, PIPE_BYTES)
                if n == 0:
                    break
                if kept is None:
                    _drain(read_end, client.fileno(), n)
                    continue
                while n:
                    teed = tee(read_end, copy_write, n)
                    _drain(copy_read, client.fileno(), teed)
                    _drain(read_end, kept, teed)
                    n -= teed
        except OSError:
            pass
        finally:
            os.close(read_end)
            os.close(write_end)
            if kept is not None:
                for fd in (kept, copy_read, copy_write):
                    os.close(fd)
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)

    def _admin(self, client: socket.socket, server: socket.socket, target: str) -> None:
        split = urlsplit(target)
        action = split.path[len(ADMIN) :]
        query = parse_qs(split.query)
        with self._lock:
            if action == "reset":
                self.counts.clear()
            elif action == "config" and "latency_ms" in query:
                self.latency_s = float(query["latency_ms"][0]) / 1000
            body = json.dumps(
                {"counts": dict(self.counts), "latency_ms": self.latency_s * 1000}
            ).encode()
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        with contextlib.suppress(OSError):
            client.sendall(head + body)
            client.shutdown(socket.SHUT_WR)
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_RDWR)


def _pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return read_end, write_end


def _drain(read_end: int, out: int, n: int) -> None:
    """`n` bytes of the pipe spliced into `out` (a socket, or a file at its position)."""
    while n:
        n -= os.splice(read_end, out, n)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="host:port of the S3 server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--keep-dir", help="also keep the response bytes in files here")
    args = parser.parse_args(argv)
    host, port = args.upstream.rsplit(":", 1)
    relay = LatencyRelay((host, int(port)), args.latency_ms, args.keep_dir)
    listener = socket.create_server((args.host, args.port), backlog=256)
    signal.signal(signal.SIGTERM, lambda *_: listener.close())
    print(f"latency relay on {args.host}:{args.port} -> {args.upstream}", flush=True)
    relay.serve(listener)


if __name__ == "__main__":
    main()
