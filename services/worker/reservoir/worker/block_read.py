"""What a worker's read hands every front door (gRPC ReadBlock, ReadSmall, ReadBlocks,
the data port): the range of one block a request asks for, and that range's CRC32C."""

from __future__ import annotations

import os
from dataclasses import dataclass

from reservoir.common.blocks.block_file import checksum

from .memory_tier import BlockData, BlockFileRef

# A block as a read hands it on: a tier's bytes, or the read-only view of what the
# under-store client received for a block this read fetched (never copied on its way).
Fetched = BlockData | memoryview


@dataclass(frozen=True, slots=True)
class BlockRead:
    """`block[start:end]` is the range asked for; `crc` is its CRC32C (the block's own when
    the range is the whole block); `source` is the tier that held the block, or UFS when
    this read fetched it."""

    block: Fetched
    start: int
    end: int
    crc: int
    source: str

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end == len(self.block)

    def view(self) -> memoryview:
        """The range without a copy."""
        return memoryview(self.block)[self.start : self.end]

    def payload(self) -> bytes:
        """The range as `bytes` (what gRPC takes): the held block itself when it is all of
        it and bytes, else one copy of the range."""
        if self.whole and isinstance(self.block, bytes):
            return self.block
        return bytes(self.view())


@dataclass(frozen=True, slots=True)
class FileRead:
    """A whole block held as a file (the shared-memory tier), for a front door that sends
    it without loading it (sendfile); `ref.crc` is the checksum the reader checks."""

    ref: BlockFileRef
    source: str

    def open(self) -> int | None:
        """A descriptor of the block file, or None when it was evicted since the lookup.
        Once open, an eviction unlinks the name, not these bytes; the caller closes it."""
        try:
            return os.open(self.ref.path, os.O_RDONLY)
        except FileNotFoundError:
            return None


def window(offset: int, length: int, block_length: int) -> tuple[int, int]:
    """The [start, end) of a block of `block_length` bytes that `offset` and `length`
    (-1: to the end) ask for, clipped to the block."""
    start = min(offset, block_length)
    end = block_length if length < 0 else min(block_length, start + length)
    return start, end


def range_read(block: Fetched, block_crc: int, offset: int, length: int, source: str) -> BlockRead:
    start, end = window(offset, length, len(block))
    whole = (start, end) == (0, len(block))
    crc = block_crc if whole else checksum(memoryview(block)[start:end])
    return BlockRead(block, start, end, crc, source)
