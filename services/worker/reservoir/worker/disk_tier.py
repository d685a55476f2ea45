"""The disk tier: blocks as files in one directory (one device), kept across restarts.

Layout: `<dir>/v1/<first two hex digits of file_id>/<file_id>-<index>`, each file a block
file of `reservoir.common.blocks.block_file` (header with length, offset and CRC32C, then the
bytes), written under a temporary name and renamed into place. The name is the block's
identity: a file_id already encodes the object's URI, ETag, size and block size, so a
file found at start names exactly one byte range of one version of one object. The
two-digit fan-out keeps directories small (a 2 TB device of 4 MiB blocks holds ~500k).

This class keeps the index and the byte accounting, and does the file I/O; it is not
thread-safe by itself. `TieredStore` calls the bookkeeping methods on the event loop
and the I/O methods (`write`, `read`, `verify`, `unlink`, `scan`) on its disk threads.
Every byte read is verified against its checksum; a file that fails is never served.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from reservoir.common.blocks.block_file import (
    HEADER_SIZE,
    read_block_file,
    read_block_header,
    write_block_file,
)
from reservoir.common.errors import DataLoss
from reservoir.common.models import shm_block_name

from .eviction import EvictionPolicy
from .memory_tier import NO_PINS, BlockId, Pins

LAYOUT = "v1"
_NAME = re.compile(r"^([0-9a-f]{32})-(\d+)$")


@dataclass(slots=True)
class DiskBlock:
    length: int
    # Taken from the block's header the first time its bytes are read and verified; None
    # for a file found at start and not checked yet.
    crc: int | None
    offset: int | None
    written: bool = True  # False while the write is in flight
    # Wall-clock time the block landed in the worker (the file's mtime for one found at
    # start): TTLs count from it.
    landed_s: float = 0.0

    @property
    def footprint(self) -> int:
        return self.length + HEADER_SIZE


class DiskTier:
    name = "disk"

    def __init__(
        self,
        directory: str,
        capacity_bytes: int,
        policy: EvictionPolicy,
        *,
        high_watermark: float,
        low_watermark: float,
        fsync: bool,
    ) -> None:
        self.directory = Path(directory)
        self.root = self.directory / LAYOUT
        self.capacity_bytes = capacity_bytes
        self.policy = policy
        self.used_bytes = 0  # block files and writes in flight, headers included
        self.evictions = 0
        self.hits = 0
        self.in_service = True
        self._high = int(capacity_bytes * high_watermark)
        self._low = int(capacity_bytes * low_watermark)
        self._fsync = fsync
        self._blocks: dict[BlockId, DiskBlock] = {}
        self.pins: Pins = NO_PINS  # pinned blocks are never evicted from here
        # A block was refused for want of room while below the high watermark (the room
        # above it is smaller than a block): background eviction runs all the same.
        self.wants_room = False

    # ---- bookkeeping (event loop) ------------------------------------------------------

    def __contains__(self, block: BlockId) -> bool:
        return block in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def blocks(self) -> list[BlockId]:
        return list(self._blocks)

    def entry(self, block: BlockId) -> DiskBlock | None:
        return self._blocks.get(block)

    def reserve(self, block: BlockId, length: int, landed_s: float | None = None) -> bool:
        """Room for a block about to be written, if the policy admits it (a pinned block
        always is) and there is room without waiting for eviction (above the high
        watermark, eviction runs in the background; the space up to the capacity takes
        new blocks meanwhile)."""
        if not self.in_service or block in self._blocks:
            return False
        footprint = length + HEADER_SIZE
        if footprint > self.capacity_bytes:
            return False
        if (
            self.used_bytes + footprint > self._high
            and not self.pins.pinned(block)
            and not self.policy.admit(block, length)
        ):
            return False
        if self.used_bytes + footprint > self.capacity_bytes:
            self.wants_room = True
            return False
        landed = time.time() if landed_s is None else landed_s
        self._blocks[block] = DiskBlock(length, None, None, written=False, landed_s=landed)
        self.used_bytes += footprint
        return True

    def room_for(self, length: int) -> list[BlockId] | None:
        """Unpinned written blocks, coldest first, whose eviction leaves room for a block
        of `length` now (for a pinned block that must not wait for background eviction);
        None when even that would not make room."""
        excess = self.used_bytes + length + HEADER_SIZE - self.capacity_bytes
        chosen: list[BlockId] = []
        for block in self.policy.victims():
            if excess <= 0:
                break
            entry = self._blocks[block]
            if entry.written and not self.pins.pinned(block):
                chosen.append(block)
                excess -= entry.footprint
        return chosen if excess <= 0 else None

    def committed(self, block: BlockId, crc: int, offset: int) -> None:
        entry = self._blocks.get(block)
        if entry is not None:
            entry.crc, entry.offset, entry.written = crc, offset, True
            self.policy.on_admit(block, entry.length)

    def found(self, block: BlockId, length: int, landed_s: float) -> None:
        """A block file found at start (verified later, or when first read)."""
        if block not in self._blocks:
            self._blocks[block] = DiskBlock(length, None, None, landed_s=landed_s)
            self.used_bytes += length + HEADER_SIZE
            self.policy.on_admit(block, length)

    def forget(self, block: BlockId) -> DiskBlock | None:
        entry = self._blocks.pop(block, None)
        if entry is not None:
            self.used_bytes -= entry.footprint
            self.policy.remove(block)
        return entry

    def over_high_watermark(self) -> bool:
        return self.used_bytes > self._high

    def needs_eviction(self) -> bool:
        return self.over_high_watermark() or self.wants_room

    def victims_to_low_watermark(self) -> list[BlockId]:
        """Written, unpinned blocks to evict, coldest first, to come down to the low
        watermark (or as near as the pinned blocks allow)."""
        self.wants_room = False
        chosen: list[BlockId] = []
        excess = self.used_bytes - self._low
        for block in self.policy.victims():
            if excess <= 0:
                break
            entry = self._blocks[block]
            if not entry.written or self.pins.pinned(block):
                continue
            chosen.append(block)
            excess -= entry.footprint
        return chosen

    def pinned_bytes(self) -> int:
        pins = self.pins
        return sum(e.footprint for b, e in self._blocks.items() if pins.pinned(b))

    def take_out_of_service(self) -> list[BlockId]:
        """Stops using this directory; the blocks it held, now forgotten."""
        self.in_service = False
        gone = list(self._blocks)
        for block in gone:
            self.forget(block)
        return gone

    # ---- I/O (disk threads) ------------------------------------------------------------

    def path(self, block: BlockId) -> str:
        file_id, index = block
        return str(self.root / file_id[:2] / shm_block_name(file_id, index))

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def scan(self) -> list[tuple[BlockId, int, float]]:
        """The blocks in the directory by name, size and mtime, unverified. Leftover
        temporary files (a write cut short by a crash) and strangers are removed."""
        found: list[tuple[BlockId, int, float]] = []
        for fan in os.scandir(self.root):
            if not fan.is_dir(follow_symlinks=False):
                continue
            for item in os.scandir(fan.path):
                match = _NAME.match(item.name)
                st = item.stat(follow_symlinks=False) if match else None
                if (
                    match
                    and st
                    and item.is_file(follow_symlinks=False)
                    and st.st_size >= HEADER_SIZE
                ):
                    block = (match.group(1), int(match.group(2)))
                    found.append((block, st.st_size - HEADER_SIZE, st.st_mtime))
                else:
                    os.unlink(item.path)
        return found

    def write(self, block: BlockId, data: bytes, crc: int, offset: int, landed_s: float) -> None:
        path = self.path(block)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_block_file(path, data, crc, offset, fsync=self._fsync)
        # The mtime says when the block landed (a TTL counts from it after a restart).
        os.utime(path, (landed_s, landed_s))

    def read(self, block: BlockId, entry: DiskBlock) -> tuple[bytes, int, int]:
        """The block's bytes, CRC32C and offset, verified. FileNotFoundError when the
        file is gone (evicted meanwhile); DataLoss when it is not the block it should be."""
        path = self.path(block)
        if entry.crc is None or entry.offset is None:
            crc, length, offset = read_block_header(path)
            if length != entry.length:
                raise DataLoss(f"block file {path}: header says {length} bytes")
        else:
            crc, offset = entry.crc, entry.offset
        data, stored_crc = read_block_file(path, entry.length, offset)
        if stored_crc != crc:
            raise DataLoss(f"block file {path} was rewritten")
        return data, crc, offset

    def unlink(self, block: BlockId) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(block))
