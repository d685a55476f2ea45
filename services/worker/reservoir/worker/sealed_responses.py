"""The `integrity` level's responses (`reservoir.common.blocks.data_protection`): header,
bytes in clear, then a 16-byte GMAC tag over the request, the header and the bytes.

The bytes pass through the tag in pieces small enough to stay in the CPU's cache between
the copy that brings them and the GMAC that reads them: a block file is read a piece at a
time (`preadv` into one buffer per connection) and the piece then goes out by `sendfile`
from the page cache it was just read from, so the block is copied once, as at the other
levels, and read once more, from the cache, for the tag.
"""

from __future__ import annotations

import os

from reservoir.common.blocks.data_protection import ResponseSeal

from .data_port_transport import ByteChannel

# A piece of a block between its copy and its GMAC: well inside one core's L2 cache.
_PIECE = 256 * 1024


class SealedResponses:
    def __init__(self, channel: ByteChannel, seal: ResponseSeal) -> None:
        self._channel = channel
        self._seal = seal
        self._buffer: memoryview | None = None  # taken on the first block file sent

    def tag(self, request: bytes, header: bytes, body: bytes) -> bytes:
        """A whole small response's tag (an error's message)."""
        return self._seal.tag(request, header, body)

    async def send_view(self, request: bytes, header: bytes, view: memoryview) -> None:
        running = self._seal.begin(request, header)
        await self._channel.send(header, more=True)
        for start in range(0, len(view), _PIECE):
            piece = view[start : start + _PIECE]
            running.update(piece)
            await self._channel.send(piece, more=True)
        await self._channel.send(running.finish())

    async def send_file(
        self, request: bytes, header: bytes, fd: int, offset: int, count: int
    ) -> None:
        if self._buffer is None:
            self._buffer = memoryview(bytearray(_PIECE))
        running = self._seal.begin(request, header)
        await self._channel.send(header, more=True)
        while count > 0:
            n = os.preadv(fd, [self._buffer[: min(count, _PIECE)]], offset)
            if n == 0:
                raise ConnectionError("block file shorter than its entry")
            running.update(self._buffer[:n])
            await self._channel.send_file(fd, offset, n)
            offset, count = offset + n, count - n
        await self._channel.send(running.finish())
