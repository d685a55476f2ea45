"""How the worker's data port moves bytes on one connection: plain TCP, or TLS.

The data port's protocol (parse, look up, respond: `data_port.py`) is one; only the bytes'
way differs, behind `ByteChannel`. Plain TCP sends block files by `sendfile` and views
of held blocks straight from where they lie. TLS encrypts in this process, as a layer over
the plain channel (`ssl.SSLObject` over memory buffers: asyncio's `sock_*` refuse an
`SSLSocket`, and an `SSLSocket` makes a system call per 16 KiB record), so a block file is
read in chunks and written; there is no `sendfile` through userspace TLS (kernel TLS
would give it back; Python 3.11's `ssl` cannot turn it on).
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from typing import Protocol, cast

from reservoir.common.blocks.data_protection import SEALED_ALPN

# A TLS write of this much is encrypted and handed to the kernel in one go: big enough that
# the per-call cost vanishes, small enough that a slow reader holds little in flight.
_TLS_CHUNK = 1 << 20
# What one receive may take: many TLS records (pipelined requests) at once.
_RECEIVE_BYTES = 256 * 1024


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
    """TLS over a `PlainChannel`: OpenSSL encrypts and decrypts in memory
    (`ssl.SSLObject` over two `MemoryBIO`s), the plain channel moves the ciphertext. A
    response's records go out in one `send` (not one system call per 16 KiB record, as
    an `SSLSocket` makes), and one `recv` takes many records. Only the writing side
    flushes: what the reading side makes OpenSSL produce (a key update's answer) goes out
    with the next response, in order."""

    def __init__(
        self,
        raw: PlainChannel,
        context: ssl.SSLContext,
    ) -> None:
        self._raw = raw
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._held = b""
        self._buffer = memoryview(bytearray(_RECEIVE_BYTES))

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
        channel = cls(PlainChannel(sock, idle_timeout_s, write_timeout_s), context)
        async with asyncio.timeout(idle_timeout_s):
            while not channel._handshake_done():
                await channel._flush()
                if not await channel._fill():
                    raise ConnectionError("closed during the TLS handshake")
            await channel._flush()
        return channel

    @property
    def offers_sealed_records(self) -> bool:
        """The reader asked for sealed records after the handshake (`sealed_channel.py`)."""
        return self._tls.selected_alpn_protocol() == SEALED_ALPN

    @property
    def raw(self) -> PlainChannel:
        return self._raw

    def leftover(self) -> bytes:
        """What the peer sent after TLS's last record: the start of what follows TLS."""
        return self._incoming.read()

    def _handshake_done(self) -> bool:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        return True

    async def receive_into(self, view: memoryview) -> int:
        while True:
            try:
                # With a buffer, read returns the count (typeshed says bytes).
                return cast(int, self._tls.read(len(view), view))  # type: ignore[arg-type]
            except ssl.SSLWantReadError:
                if not await self._fill():
                    return 0
            except ssl.SSLZeroReturnError:
                return 0
            except ssl.SSLError as exc:
                raise ConnectionError(f"TLS: {exc}") from exc

    async def send(self, data: bytes | memoryview, *, more: bool = False) -> None:
        if more:
            # A header: it goes into the same TLS record as the start of its body (one
            # record to seal and open, not two).
            self._held += bytes(data)
            return
        view = memoryview(data)
        if self._held:
            first = min(len(view), _TLS_CHUNK)
            self._tls.write(self._held + bytes(view[:first]))
            self._held = b""
            view = view[first:]
            await self._flush()
        for start in range(0, len(view), _TLS_CHUNK):
            self._tls.write(view[start : start + _TLS_CHUNK])
            await self._flush()

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
        self._raw.close()

    async def _flush(self) -> None:
        if self._outgoing.pending:
            await self._raw.send(self._outgoing.read())

    async def _fill(self) -> bool:
        """More ciphertext from the peer; False at the end of the stream."""
        n = await self._raw.receive_into(self._buffer)
        if n == 0:
            return False
        self._incoming.write(self._buffer[:n])
        return True
