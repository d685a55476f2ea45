"""The `integrity` level's responses (`reservoir.common.blocks.data_protection`): header,
bytes in clear, then a 16-byte GMAC tag over the request, the header and the bytes.

The bytes pass through the tag in pieces small enough to stay in the CPU's cache between
the copy that brings them and the GMAC that reads them: a block file is read a piece at a
time (`preadv` into one buffer per connection), tagged and sent from that buffer. (Sent,
not `sendfile`d from the page cache: the reader then copies bytes the worker just had in
its cache, and the two together spend less.) A small response leaves in one write, its
tag with it; a large one says more follows (MSG_MORE) with every write but the tag's.

The tag is the block's checksum at this level, keyed (the reader checks no CRC32C of its
own): so the CRC32C the block landed with is checked here, over the same pieces while they
are in the cache, before the last piece and the tag go out. Bytes that changed since they
landed raise DataLoss; the reader then sees its connection closed, and reads elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from reservoir.common.blocks.block_file import checksum
from reservoir.common.blocks.data_protection import ResponseSeal, ResponseTag
from reservoir.common.errors import DataLoss

from .data_port_transport import ByteChannel

# A piece of a block between its copy and its GMAC: inside one core's L2 cache.
_PIECE = 512 * 1024
# Header, bytes and tag of a response this small are joined (a copy of a few microseconds)
# and written at once: one system call, not three.
_ONE_WRITE_BELOW = 64 * 1024


class SealedResponses:
    def __init__(self, channel: ByteChannel, seal: ResponseSeal) -> None:
        self._channel = channel
        self._seal = seal
        self._buffer: memoryview | None = None  # taken on the first block file sent

    def tag(self, request: bytes, header: bytes, body: bytes) -> bytes:
        """A whole small response's tag (an error's message)."""
        return self._seal.tag(request, header, body)

    async def send_view(self, request: bytes, header: bytes, view: memoryview, crc: int) -> None:
        """`view`, whose CRC32C should be `crc`, as a sealed response."""
        pieces = (view[start : start + _PIECE] for start in range(0, len(view), _PIECE))
        await self._send(self._seal.begin(request, header), header, pieces, len(view), crc)

    async def send_file(
        self, request: bytes, header: bytes, fd: int, offset: int, count: int, crc: int
    ) -> None:
        """`count` bytes of block file `fd` from `offset`, whose CRC32C should be `crc`, as
        a sealed response."""
        pieces = self._file_pieces(fd, offset, count)
        await self._send(self._seal.begin(request, header), header, pieces, count, crc)

    async def _send(
        self,
        running: ResponseTag,
        header: bytes,
        pieces: Iterator[memoryview],
        length: int,
        crc: int,
    ) -> None:
        """Header, the `length` bytes of `pieces` and the tag; DataLoss (the last piece
        and the tag not sent) when the bytes' CRC32C is not `crc`."""
        if length < _ONE_WRITE_BELOW:
            body = b"".join(pieces)
            _check_crc(checksum(body), crc)
            await self._channel.send(b"".join((header, body, running.update(body).finish())))
            return
        await self._channel.send(header, more=True)
        computed = sent = 0
        for piece in pieces:
            running.update(piece)
            computed = checksum(piece, computed)
            sent += len(piece)
            if sent == length:
                _check_crc(computed, crc)
            await self._channel.send(piece, more=True)
        await self._channel.send(running.finish())

    def _file_pieces(self, fd: int, offset: int, count: int) -> Iterator[memoryview]:
        """The file's bytes, a piece at a time, each in this connection's one buffer (so
        each piece is done with before the next is read)."""
        if self._buffer is None:
            self._buffer = memoryview(bytearray(_PIECE))
        while count > 0:
            n = min(count, _PIECE)
            filled = 0
            while filled < n:
                got = os.preadv(fd, [self._buffer[filled:n]], offset + filled)
                if got == 0:
                    raise ConnectionError("block file shorter than its entry")
                filled += got
            yield self._buffer[:n]
            offset, count = offset + n, count - n


def _check_crc(computed: int, crc: int) -> None:
    if computed != crc:
        raise DataLoss("the block's bytes no longer match the checksum they landed with")
