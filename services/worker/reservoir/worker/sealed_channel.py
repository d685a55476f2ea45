"""The worker's side of a `privacy` data port connection once TLS has agreed its keys:
records sealed with AES-GCM on the bare TCP connection
(`reservoir.common.blocks.sealed_records`, where the format and the reasons are).

A block is sealed from where it lies (a view of a held block, or read from its block file
into a plaintext buffer), one record per MiB, each handed to the kernel in one `send`.
AES-GCM writes the record beside its input, never over it: `cryptography` refuses
overlapping buffers (from 51 on). Buffers are shared by the port's connections (those in
use by a send, a few kept), not held per connection.
"""

from __future__ import annotations

import os

from reservoir.common.blocks.sealed_records import (
    KEY_BYTES,
    LENGTH,
    MAX_PLAINTEXT,
    MAX_RECORD,
    RecordOpener,
    RecordSealer,
    new_key,
)

from .data_port_transport import PlainChannel, TlsChannel

# Held back together with the body they precede (a response header): sealed in one record
# when the body's first piece is this small, so a small block costs one record, not two.
_JOIN_BELOW = 64 * 1024


class _RecordBuffers:
    """Buffers of one full record, lent to a send and given back: the port's connections
    share a few instead of each holding a MiB."""

    def __init__(self, kept: int = 8) -> None:
        self._free: list[bytearray] = []
        self._kept = kept

    def take(self) -> memoryview:
        return memoryview(self._free.pop() if self._free else bytearray(LENGTH.size + MAX_RECORD))

    def give(self, buffer: memoryview) -> None:
        if len(self._free) < self._kept:
            self._free.append(buffer.obj)  # type: ignore[arg-type]


_buffers = _RecordBuffers()


class SealedChannel:
    """A `ByteChannel` of sealed records over a plain one."""

    def __init__(
        self, raw: PlainChannel, opener: RecordOpener, sealer: RecordSealer, pending: bytes
    ) -> None:
        self._raw = raw
        self._opener = opener
        self._sealer = sealer
        self._pending = memoryview(pending)  # bytes that came with TLS's last record
        self._plain = memoryview(b"")  # opened, not taken yet
        self._held = b""
        # One record received and opened at a time (a new one only once `_plain` is all
        # taken): two buffers, grown to the largest record seen, serve every request.
        self._body = bytearray()
        self._opened = bytearray()

    @classmethod
    async def agree(cls, tls: TlsChannel) -> SealedChannel:
        """The keys, exchanged inside `tls` (the reader's first, then ours), and the
        channel that speaks records from then on."""
        theirs = bytearray(KEY_BYTES)
        view, filled = memoryview(theirs), 0
        while filled < KEY_BYTES:
            got = await tls.receive_into(view[filled:])
            if got == 0:
                raise ConnectionError("closed before the record keys were agreed")
            filled += got
        mine = new_key()
        await tls.send(mine)
        return cls(tls.raw, RecordOpener(bytes(theirs)), RecordSealer(mine), tls.leftover())

    async def receive_into(self, view: memoryview) -> int:
        if not self._plain:
            header = bytearray(LENGTH.size)
            if not await self._fill(memoryview(header), at_boundary=True):
                return 0
            size = self._opener.body_size(header)
            if len(self._body) < size:
                self._body, self._opened = bytearray(size), bytearray(size)
            body = memoryview(self._body)[:size]
            await self._fill(body, at_boundary=False)
            plain = memoryview(self._opened)
            self._plain = plain[: self._opener.open_into(bytes(header), body, plain)]
        n = min(len(view), len(self._plain))
        view[:n] = self._plain[:n]
        self._plain = self._plain[n:]
        return n

    async def send(self, data: bytes | memoryview, *, more: bool = False) -> None:
        if more:
            self._held += bytes(data)
            return
        view = memoryview(data)
        if self._held:
            if len(view) < _JOIN_BELOW:
                view, self._held = memoryview(self._held + bytes(view)), b""
            else:
                held, self._held = self._held, b""
                await self._raw.send(memoryview(self._sealer.seal(held)), more=True)
        if not view:
            return
        record = _buffers.take()
        try:
            for start in range(0, len(view), MAX_PLAINTEXT):
                piece = view[start : start + MAX_PLAINTEXT]
                last = start + MAX_PLAINTEXT >= len(view)
                await self._raw.send(self._sealer.seal_into(piece, record), more=not last)
        finally:
            _buffers.give(record)

    async def send_file(self, fd: int, offset: int, count: int) -> None:
        # Read into a plaintext buffer (after a held header), sealed into the record's.
        head, self._held = self._held, b""
        plain, record = _buffers.take(), _buffers.take()
        try:
            while count > 0 or head:
                plain[: len(head)] = head
                room = plain[len(head) : len(head) + min(count, MAX_PLAINTEXT - len(head))]
                n = os.preadv(fd, [room], offset) if len(room) else 0
                if len(room) and n == 0:
                    raise ConnectionError("block file shorter than its entry")
                sealed = self._sealer.seal_into(plain[: len(head) + n], record)
                head, offset, count = b"", offset + n, count - n
                await self._raw.send(sealed, more=count > 0)
        finally:
            _buffers.give(record)
            _buffers.give(plain)

    def close(self) -> None:
        self._raw.close()

    async def _fill(self, view: memoryview, *, at_boundary: bool) -> bool:
        """`view` filled with raw bytes; False when the reader closed before the first
        one at a record boundary, ConnectionError when it closed inside a record."""
        filled = 0
        if self._pending:
            filled = min(len(view), len(self._pending))
            view[:filled] = self._pending[:filled]
            self._pending = self._pending[filled:]
        while filled < len(view):
            got = await self._raw.receive_into(view[filled:])
            if got == 0:
                if at_boundary and filled == 0:
                    return False
                raise ConnectionError(f"closed inside a sealed record ({filled} bytes)")
            filled += got
        return True
