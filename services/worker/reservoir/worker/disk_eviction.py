"""How blocks leave the disk tiers, and how the owner learns they are gone.

- Background eviction: woken when a directory passes its high watermark, it evicts down
  to the low watermark (the disk's policy picks the victims); a pinned block may also
  make room at once (see DiskWriteDown).
- A block found missing or corrupt is forgotten.
- An I/O error (or a full device) takes a directory out of service with one log line;
  its blocks are forgotten and the worker serves on from the other tiers.

A block leaving a disk is reported gone only when memory does not hold it either.
Files are unlinked on the I/O pool, never on the event loop.
"""

from __future__ import annotations

import asyncio
import errno

from reservoir.common import logs

from .block_events import BlockEvents
from .disk_io import DiskIO
from .disk_tier import DiskTier
from .memory_tier import BlockId, MemoryTier

log = logs.get_logger(__name__)


class DiskEviction:
    def __init__(
        self, memory: MemoryTier, disks: list[DiskTier], events: BlockEvents, io: DiskIO
    ) -> None:
        self._memory = memory
        self._disks = disks
        self._events = events
        self._io = io
        self._evictor: asyncio.Task[None] | None = None
        self._wanted = asyncio.Event()

    def start(self) -> None:
        """Starts the background loop, with one pass now (the scan may have found more
        than fits)."""
        self._evictor = asyncio.get_running_loop().create_task(self._loop())
        self._wanted.set()

    def stop(self) -> None:
        if self._evictor is not None:
            self._evictor.cancel()

    def wake(self) -> None:
        """A directory may be past its high watermark: the loop checks them all."""
        self._wanted.set()

    async def _loop(self) -> None:
        while True:
            await self._wanted.wait()
            self._wanted.clear()
            for disk in self._disks:
                if not disk.in_service or not disk.needs_eviction():
                    continue
                self.evict(disk, disk.victims_to_low_watermark())

    def evict(self, disk: DiskTier, victims: list[BlockId]) -> None:
        """Evicts `victims` from `disk` now (their files go in the background)."""
        for block in victims:
            entry = disk.forget(block)
            disk.evictions += 1
            if entry is not None and block not in self._memory:
                self._events.block_gone(block, entry.length, disk.name)
        self.unlink_later(disk, victims)

    def unlink_later(self, disk: DiskTier, blocks: list[BlockId]) -> None:
        self._io.spawn(self.unlink(disk, blocks))

    async def unlink(self, disk: DiskTier, blocks: list[BlockId]) -> None:
        if not blocks:
            return
        try:
            await self._io.run(_unlink_all, disk, blocks)
        except OSError as exc:
            self.out_of_service(disk, exc)

    def forget(self, disk: DiskTier, block: BlockId) -> None:
        """Forgets a block whose file vanished or failed its checksum."""
        entry = disk.forget(block)
        if entry is not None and block not in self._memory:
            self._events.block_gone(block, entry.length, disk.name)

    def out_of_service(self, disk: DiskTier, exc: OSError) -> None:
        if not disk.in_service:
            return
        reason = "device full" if exc.errno == errno.ENOSPC else "I/O error"
        log.error(
            "disk_dir_out_of_service",
            directory=str(disk.directory),
            reason=reason,
            error=f"{type(exc).__name__}: {exc.strerror or exc}",
            blocks_lost=len(disk),
        )
        for block in disk.take_out_of_service():
            if block not in self._memory:
                self._events.block_gone(block, 0, disk.name)


def _unlink_all(disk: DiskTier, blocks: list[BlockId]) -> None:
    for block in blocks:
        disk.unlink(block)
