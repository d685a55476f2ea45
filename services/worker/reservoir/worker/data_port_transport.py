"""How the worker's data port moves bytes on one connection: plain TCP, or TLS.

The data port's protocol (parse, look up, respond: `data_port.py`) is one; only the bytes'
way differs, behind `ByteChannel`. Plain TCP sends block files by `sendfile` and views
of held blocks straight from where they lie. TLS encrypts in this process (the `ssl`
module's non-blocking sockets on the event loop's readiness callbacks; asyncio's `sock_*`
refuse an `SSLSocket`, and its streams would copy every byte through a transport buffer),
so a block file is read in chunks and written; there is no `sendfile` through userspace TLS.
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from typing import Protocol

# A TLS write of this much is encrypted and handed to the kernel in one go: big enough that
# the per-call cost vanishes, small enough that a slow reader holds little in flight.
_TLS_CHUNK = 1 << 20
_TLS_RECORD = 16 * 1024
# Waiting for the other direction of a TLS socket (a read that must write, a write that
# must read: a key update) is rare; polling then keeps each direction's readiness callback
# its own.
_CROSS_WAIT_S = 0.001


class ByteChannel(Protocol):
    async def receive_into(self, view: memoryview) -> int:
        """Up to len(view) bytes into `view`; 0 when the reader closed. TimeoutError after
        the idle timeout without a byte."""
        ...

    async def send(self, data: bytes | memoryview, *, more: bool = False) -> None:
        """All of `data`; `more`: bytes follow at once (a header before its body). Timeout
        Error when the reader takes no bytes for the write timeout."""
        ...

    async def send_file(self, fd: int, offset: int, count: int) -> None:
        """`count` bytes of file `fd` from `offset`."""
        ...

    def close(self) -> None: ...


async def _ready(fd: int, *, write: bool, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def resolve() -> None:
        if not ready.done():
            ready.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, resolve)
    try:
        async with asyncio.timeout(timeout_s):
            await ready
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


class PlainChannel:
    """A non-blocking TCP socket: block files by sendfile, views without a copy."""

    def __init__(self, sock: socket.socket, idle_timeout_s: float, write_timeout_s: float) -> None:
        self._sock = sock
        self._idle_timeout_s = idle_timeout_s
        self._write_timeout_s = write_timeout_s

    async def receive_into(self, view: memoryview) -> int:
        # Pipelined requests are usually here already: read them without a loop turn.
        try:
            return self._sock.recv_into(view)
        except (BlockingIOError, InterruptedError):
            pass
        loop = asyncio.get_running_loop()
        # asyncio.timeout, not wait_for: no task (and loop turn) per receive.
        async with asyncio.timeout(self._idle_timeout_s):
            return await loop.sock_recv_into(self._sock, view)

    async def send(self, data: bytes | memoryview, *, more: bool = False) -> None:
        # MSG_MORE: the kernel holds a header for its body: one segment, and one wake-up
        # of the reader, not two.
        try:
            sent = self._sock.send(data, socket.MSG_MORE if more else 0)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent == len(data):
            return
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._write_timeout_s):
            await loop.sock_sendall(self._sock, memoryview(data)[sent:])

    async def send_file(self, fd: int, offset: int, count: int) -> None:
        out = self._sock.fileno()
        while count > 0:
            try:
                sent = os.sendfile(out, fd, offset, count)
            except BlockingIOError:
                await _ready(out, write=True, timeout_s=self._write_timeout_s)
                continue
            if sent == 0:
                raise ConnectionError("block file shorter than its entry")
            offset += sent
            count -= sent

    def close(self) -> None:
        self._sock.close()


class TlsChannel:
    """A non-blocking `SSLSocket`, its handshake done by `open`."""

    def __init__(self, sock: ssl.SSLSocket, idle_timeout_s: float, write_timeout_s: float) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._idle_timeout_s = idle_timeout_s
        self._write_timeout_s = write_timeout_s
        # A header held back to go out in one TLS record with the start of its body.
        self._held = b""

    @classmethod
    async def open(
        cls,
        sock: socket.socket,
        context: ssl.SSLContext,
        idle_timeout_s: float,
        write_timeout_s: float,
    ) -> TlsChannel:
        """The server side of the handshake on an accepted socket; ssl.SSLError (or
        OSError, TimeoutError) when the peer does not speak TLS with us."""
        tls = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        try:
            async with asyncio.timeout(idle_timeout_s):
                while True:
                    try:
                        tls.do_handshake()
                        break
                    except ssl.SSLWantReadError:
                        await _ready(tls.fileno(), write=False, timeout_s=idle_timeout_s)
                    except ssl.SSLWantWriteError:
                        await _ready(tls.fileno(), write=True, timeout_s=write_timeout_s)
        except BaseException:
            tls.close()
            raise
        return cls(tls, idle_timeout_s, write_timeout_s)

    async def receive_into(self, view: memoryview) -> int:
        while True:
            try:
                return self._sock.recv_into(view)
            except ssl.SSLWantReadError:
                await _ready(self._fd, write=False, timeout_s=self._idle_timeout_s)
            except ssl.SSLWantWriteError:
                await asyncio.sleep(_CROSS_WAIT_S)
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS: {exc}") from exc

    async def send(self, data: bytes | memoryview, *, more: bool = False) -> None:
        if more:
            self._held += bytes(data)
            return
        view = memoryview(data)
        if self._held:
            # One TLS record (at most 16 KiB) for the header and the start of its body.
            take = min(len(view), _TLS_RECORD - len(self._held))
            head, self._held = self._held + bytes(view[:take]), b""
            await self._write(head)
            view = view[take:]
        for start in range(0, len(view), _TLS_CHUNK):
            await self._write(view[start : start + _TLS_CHUNK])

    async def _write(self, chunk: bytes | memoryview) -> None:
        """One chunk; a write that would block is retried with the same chunk, as
        OpenSSL requires."""
        view = memoryview(chunk)
        while view:
            try:
                view = view[self._sock.send(view) :]
            except ssl.SSLWantWriteError:
                await _ready(self._fd, write=True, timeout_s=self._write_timeout_s)
            except ssl.SSLWantReadError:
                await asyncio.sleep(_CROSS_WAIT_S)
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS: {exc}") from exc

    async def send_file(self, fd: int, offset: int, count: int) -> None:
        buffer = memoryview(bytearray(min(count, _TLS_CHUNK)))
        while count > 0:
            n = os.preadv(fd, [buffer[: min(count, len(buffer))]], offset)
            if n == 0:
                raise ConnectionError("block file shorter than its entry")
            await self.send(buffer[:n])
            offset += n
            count -= n

    def close(self) -> None:
        self._sock.close()
