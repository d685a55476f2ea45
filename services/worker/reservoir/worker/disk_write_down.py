"""The write-down queue: blocks on their way from memory (or a fetch) to a disk tier.

Writes are write-behind within `disk_write_queue_bytes`: past it a block is just not
written (counted in `skipped`), so a burst of fetches never waits on the disks. A pinned
block skips that limit and, if its directory is full, makes room at once by evicting
unpinned blocks. Each block goes to the first directory in service, in the block's
rendezvous order, that reserves room for it. A block being written is served from the
queue meanwhile (it may have left memory already).
"""

from __future__ import annotations

import asyncio
import hashlib

from .disk_eviction import DiskEviction
from .disk_io import DiskIO
from .disk_tier import DiskTier
from .memory_tier import BlockId, Pins


class DiskWriteDown:
    def __init__(
        self,
        disks: list[DiskTier],
        pins: Pins,
        io: DiskIO,
        eviction: DiskEviction,
        *,
        queue_bytes: int,
    ) -> None:
        self._disks = disks
        self._pins = pins
        self._io = io
        self._eviction = eviction
        self._queue_limit = queue_bytes
        self._queued_bytes = 0
        self.skipped = 0
        # Blocks on their way to disk, served from here meanwhile (a block that left
        # memory while its write was in flight is still held).
        self._writing: dict[BlockId, tuple[bytes, int]] = {}
        self.writes: set[asyncio.Task[None]] = set()

    def pending(self, block: BlockId) -> tuple[bytes, int] | None:
        """The bytes and checksum of a block whose write is in flight."""
        return self._writing.get(block)

    def offer(self, block: BlockId, data: bytes, crc: int, offset: int, landed_s: float) -> bool:
        """Queues a block no disk holds for writing; True if a directory took it."""
        pinned = self._pins.pinned(block)
        if self._queued_bytes + len(data) > self._queue_limit and not pinned:
            self.skipped += 1
            return False
        for disk in self._ranked(block):
            reserved = disk.reserve(block, len(data), landed_s)
            if not reserved and pinned and disk.in_service:
                victims = disk.room_for(len(data))
                if victims:
                    self._eviction.evict(disk, victims)
                    reserved = disk.reserve(block, len(data), landed_s)
            if disk.needs_eviction():
                self._eviction.wake()
            if reserved:
                self._queued_bytes += len(data)
                self._writing[block] = (data, crc)
                self._io.spawn(self._write(disk, block, data, crc, offset, landed_s), self.writes)
                return True
        return False

    async def drain(self, timeout_s: float) -> None:
        """Waits for the writes in flight, at most `timeout_s`."""
        if self.writes:
            await asyncio.wait(list(self.writes), timeout=timeout_s)

    def _ranked(self, block: BlockId) -> list[DiskTier]:
        """The directories in service, in the block's rendezvous order (spreads blocks
        evenly, and a block keeps its directory while the set does not change)."""
        live = [d for d in self._disks if d.in_service]
        if len(live) < 2:
            return live
        key = f"{block[0]}-{block[1]}"
        return sorted(
            live,
            key=lambda d: hashlib.blake2b(f"{key}@{d.directory}".encode(), digest_size=8).digest(),
            reverse=True,
        )

    async def _write(
        self, disk: DiskTier, block: BlockId, data: bytes, crc: int, off: int, landed_s: float
    ) -> None:
        entry = disk.entry(block)
        try:
            await self._io.run(disk.write, block, data, crc, off, landed_s)
        except OSError as exc:
            self._eviction.out_of_service(disk, exc)
            return
        finally:
            self._queued_bytes -= len(data)
            self._writing.pop(block, None)
        if entry is not None and disk.entry(block) is entry:
            disk.committed(block, crc, off)
        elif disk.entry(block) is None:  # dropped while it was being written
            await self._eviction.unlink(disk, [block])
