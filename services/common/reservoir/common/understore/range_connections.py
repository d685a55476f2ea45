"""Ranged GETs over kept-alive HTTP/1.1 connections whose body is received straight into
the caller's buffer: `recv_into` the block's own memory, a few large calls per block
(MSG_WAITALL), on a thread of this pool's own (the worker's event loop never blocks).

An SDK receives a body into its own buffers and hands out a copy (obstore: two, kernel
to hyper's chunks to one contiguous buffer); on a cold read that is most of a worker's
CPU. Here the kernel's copy into the caller's buffer is the only one. The request is
whatever the caller signed (a presigned URL: the signature is in the query).

At most `size` connections, idle ones kept for the next GET; a kept one the server closed
meanwhile is replaced once, silently (a GET is safe to send again). Timeouts: `timeout_s`
to connect and the longest the answer may stall, `deadline_s` for the whole of one GET.
TLS (https) goes through `ssl`, a TLS record (16 KiB) per call: still no copy of ours.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

# The answer's head is read in pieces of this size; what arrives past it is the body's
# start, copied into place (a few KiB of a MiB-sized block).
_HEAD_PIECE = 16 * 1024
_MAX_HEAD = 64 * 1024
# An error answer's body is read (to keep the connection) up to this size.
_MAX_ERROR_BODY = 64 * 1024


class AnswerBrokeOff(Exception):
    """The connection ended or stalled before the answer's head arrived (the request may
    be sent again)."""


class DeadlinePassed(TimeoutError):
    """The answer was still arriving when its GET's deadline (`deadline_s`) came."""


class BadAnswer(Exception):
    """An answer this client cannot read (no Content-Length on a body, a malformed head)."""


@dataclass(slots=True)
class RangeAnswer:
    status: int
    headers: dict[str, str]  # lower-cased names
    # The body: for a 2xx, how many bytes went into the caller's buffer (`complete` when
    # all `length` did); otherwise the error body, read whole.
    received: int = 0
    length: int = 0
    error_body: bytes = b""
    broke_off: BaseException | None = field(default=None)
    # A 2xx whose body is longer than the caller's buffer: not read (the connection is
    # closed), for the caller to tell a server that ignored the Range it sent.
    unread: bool = False

    @property
    def complete(self) -> bool:
        return self.broke_off is None and self.received == self.length


# One pool per origin and settings for the whole process: every store that GETs from an
# origin (a worker's mounts of one endpoint, however many) shares its connections and
# threads, and a store dropped at an unmount or remount leaves none behind.
_POOLS: dict[tuple[str, int, float, float, str], RangeConnections] = {}
_POOLS_LOCK = threading.Lock()


# Threads shared by the pools of many origins, by name and size (`connections_to`).
_SHARED_THREADS: dict[tuple[str, int], ThreadPoolExecutor] = {}


def connections_to(
    origin: str,
    size: int,
    timeout_s: float,
    deadline_s: float,
    cafile: str = "",
    shared_threads: str = "",
) -> RangeConnections:
    """The process's kept-alive connections to `origin` (scheme, host, port) with these
    settings: made at the first GET there, shared by every store after. With
    `shared_threads`, their GETs run on `size` threads of that name shared with every
    other origin given it: origins a store is redirected to (HDFS's datanodes, one for
    each block's replica) get one set of threads, not one each."""
    parts = urlsplit(origin)
    key = (f"{parts.scheme}://{parts.netloc}", size, timeout_s, deadline_s, cafile)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            threads = None
            if shared_threads:
                threads = _SHARED_THREADS.get((shared_threads, size))
                if threads is None:
                    threads = ThreadPoolExecutor(size, thread_name_prefix=shared_threads)
                    _SHARED_THREADS[(shared_threads, size)] = threads
            pool = RangeConnections(origin, size, timeout_s, deadline_s, cafile, threads)
            _POOLS[key] = pool
        return pool


def _forget_pools_in_child() -> None:
    # A forked child (a DataLoader worker) has none of the pools' threads, and must not
    # share their kept sockets with its parent: it opens its own.
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()
    _POOLS.clear()
    _SHARED_THREADS.clear()


os.register_at_fork(after_in_child=_forget_pools_in_child)


class RangeConnections:
    """Kept-alive connections to one HTTP(S) origin (scheme, host, port)."""

    def __init__(
        self,
        origin: str,
        size: int,
        timeout_s: float,
        deadline_s: float,
        cafile: str = "",
        threads: ThreadPoolExecutor | None = None,
    ) -> None:
        """`threads`: where the GETs run (by default, `size` threads of this pool's own)."""
        parts = urlsplit(origin)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self._host_header = parts.netloc
        self._address = (
            parts.hostname or "",
            parts.port or (443 if parts.scheme == "https" else 80),
        )
        self._tls: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._tls = ssl.create_default_context(cafile=cafile or None)
        self._timeout_s = timeout_s
        self._deadline_s = deadline_s
        self._size = max(1, size)
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()
        self._threads = threads or ThreadPoolExecutor(self._size, thread_name_prefix="ufs-get")

    async def get_into(self, target: str, headers: dict[str, str], out: memoryview) -> RangeAnswer:
        """GET `target` (path and query) with `headers`; a 2xx body goes into `out`."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, self._get_into, target, headers, out)

    # ---- on a pool thread ----------------------------------------------------------------

    def _get_into(self, target: str, headers: dict[str, str], out: memoryview) -> RangeAnswer:
        lines = [f"GET {target} HTTP/1.1", f"Host: {self._host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        deadline = time.monotonic() + self._deadline_s
        sock, kept = self._take()
        try:
            try:
                sock.sendall(request)
                head, rest = self._read_head(sock, deadline)
            except (AnswerBrokeOff, OSError):
                if not kept:
                    raise
                # The server closed a kept connection meanwhile: once more on a new one.
                sock.close()
                sock, kept = self._connect(), False
                sock.sendall(request)
                head, rest = self._read_head(sock, deadline)
            answer, keep = self._read_body(sock, head, rest, out, deadline)
        except BaseException:
            sock.close()
            raise
        if keep:
            self._give_back(sock)
        else:
            sock.close()
        return answer

    def _take(self) -> tuple[socket.socket, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._connect(), False

    def _give_back(self, sock: socket.socket) -> None:
        if self._tls is not None:
            # Its last receive may have been bounded by that GET's deadline; a TLS socket's
            # timeout bounds its sends too, so the next request starts with the stall bound.
            sock.settimeout(self._timeout_s)
        with self._lock:
            if len(self._idle) < self._size:
                self._idle.append(sock)
                return
        sock.close()

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self._address, timeout=self._timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                return self._tls.wrap_socket(sock, server_hostname=self._address[0])
            # Blocking, with the stall bound in the kernel: one recv_into may then wait
            # for a whole buffer (MSG_WAITALL), where Python's own timeout polls per call.
            sock.settimeout(None)
            whole, part = divmod(self._timeout_s, 1.0)
            bound = struct.pack("ll", int(whole), int(part * 1e6))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, bound)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, bound)
        except BaseException:
            sock.close()
            raise
        return sock

    def _receive(self, sock: socket.socket, view: memoryview, deadline: float) -> int:
        """Up to len(view) bytes (all of them unless the answer ends, stalls or reaches
        its deadline); 0 at its end. DeadlinePassed once the deadline came, TimeoutError
        on a stall."""
        self._wait_at_most(sock, deadline)
        try:
            if self._tls is not None:
                return sock.recv_into(view, len(view))
            return sock.recv_into(view, len(view), socket.MSG_WAITALL)
        except (BlockingIOError, TimeoutError) as exc:  # the wait ran out without a byte
            raise self._ran_out(deadline) from exc

    def _wait_at_most(self, sock: socket.socket, deadline: float) -> None:
        """The next receive waits for the stall bound at most, and never past `deadline`
        (a body still trickling in then returns what it has: it does not hold the GET)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlinePassed(f"the answer took longer than {self._deadline_s} s")
        wait = min(self._timeout_s, remaining)
        if self._tls is not None:
            sock.settimeout(wait)
            return
        whole, part = divmod(wait, 1.0)
        # At least a microsecond: a zero SO_RCVTIMEO means no bound at all.
        micros = max(int(part * 1e6), 0 if whole else 1)
        sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(whole), micros)
        )

    def _ran_out(self, deadline: float) -> TimeoutError:
        if time.monotonic() >= deadline:
            return DeadlinePassed(f"the answer took longer than {self._deadline_s} s")
        return TimeoutError(f"the answer stalled for {self._timeout_s} s")

    def _read_head(self, sock: socket.socket, deadline: float) -> tuple[bytes, bytes]:
        """The answer's head (through its blank line) and the bytes received past it."""
        buffer = bytearray()
        piece = bytearray(_HEAD_PIECE)
        while True:
            try:
                got = self._receive_some(sock, memoryview(piece), deadline)
            except OSError as exc:
                raise AnswerBrokeOff(f"{type(exc).__name__}: {exc}") from exc
            if got == 0:
                raise AnswerBrokeOff("the connection closed before an answer")
            buffer += piece[:got]
            end = buffer.find(b"\r\n\r\n")
            if end >= 0:
                return bytes(buffer[: end + 4]), bytes(buffer[end + 4 :])
            if len(buffer) > _MAX_HEAD:
                raise BadAnswer("an answer head over 64 KiB")

    def _receive_some(self, sock: socket.socket, view: memoryview, deadline: float) -> int:
        """Whatever has arrived (at least a byte), not a whole buffer: the head's size is
        not known in advance."""
        self._wait_at_most(sock, deadline)
        try:
            return sock.recv_into(view)
        except (BlockingIOError, TimeoutError) as exc:
            raise self._ran_out(deadline) from exc

    def _read_body(
        self, sock: socket.socket, head: bytes, rest: bytes, out: memoryview, deadline: float
    ) -> tuple[RangeAnswer, bool]:
        """The answer, and whether the connection may carry another request."""
        status, headers = _parsed_head(head)
        keep = headers.get("connection", "").lower() != "close"
        if "content-length" not in headers:
            if 200 <= status < 300:
                raise BadAnswer(f"a {status} answer without a Content-Length")
            # An error body of unknown length (chunked): what arrived names the error.
            return RangeAnswer(status, headers, error_body=rest), False
        length = int(headers["content-length"])
        if not 200 <= status < 300:
            body = bytearray(rest)
            if length > _MAX_ERROR_BODY:
                return RangeAnswer(status, headers, error_body=bytes(body)), False
            piece = bytearray(length)
            try:
                while len(body) < length:
                    got = self._receive_some(
                        sock, memoryview(piece)[: length - len(body)], deadline
                    )
                    if got == 0:
                        break
                    body += piece[:got]
            except OSError:
                keep = False
            return RangeAnswer(status, headers, error_body=bytes(body)), keep and len(
                body
            ) == length
        answer = RangeAnswer(status, headers, length=length)
        if length > len(out):
            answer.unread = True
            return answer, False
        first = min(len(rest), length)
        out[:first] = rest[:first]
        answer.received = first
        try:
            while answer.received < length:
                got = self._receive(sock, out[answer.received : length], deadline)
                if got == 0:
                    raise ConnectionError(
                        f"the connection closed after {answer.received} of {length} bytes"
                    )
                answer.received += got
        except OSError as exc:
            answer.broke_off = exc
            return answer, False
        return answer, keep and len(rest) <= length


def _parsed_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    try:
        version, code = lines[0].split(" ", 2)[:2]
        status = int(code)
    except ValueError as exc:
        raise BadAnswer(f"a malformed status line {lines[0][:80]!r}") from exc
    if not version.startswith("HTTP/1."):
        raise BadAnswer(f"not an HTTP/1 answer: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    if version == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
        headers["connection"] = "close"
    return status, headers


def cafile() -> str:
    """boto3's own override of its CAs, honoured here too."""
    return os.environ.get("AWS_CA_BUNDLE", "")
