"""A worker's disk directories at start: scanned, then verified in the background.

The blocks found are held at once (reported to the master in the first full report) and
checked against their checksum in the background, `disk_scan_parallelism` at a time. A
block that fails is dropped; a read of a block not verified yet verifies it first (every
disk read does), so a verification finding a block already read skips it.
"""

from __future__ import annotations

import asyncio
import time

from reservoir.common import logs
from reservoir.common.errors import DataLoss

from .block_events import BlockEvents
from .disk_eviction import DiskEviction
from .disk_io import DiskIO
from .disk_tier import DiskBlock, DiskTier
from .memory_tier import BlockId

log = logs.get_logger(__name__)


class DiskStartupScan:
    def __init__(
        self,
        disks: list[DiskTier],
        events: BlockEvents,
        io: DiskIO,
        eviction: DiskEviction,
        *,
        parallelism: int,
    ) -> None:
        self._disks = disks
        self._events = events
        self._io = io
        self._eviction = eviction
        self._parallelism = max(1, parallelism)

    async def scan(self) -> None:
        """Scans each directory (a block found in two is held by the first) and starts
        verifying what was found in the background."""
        for disk in self._disks:
            started = time.monotonic()
            try:
                found = await self._io.run(_prepare_and_scan, disk)
            except OSError as exc:
                self._eviction.out_of_service(disk, exc)
                continue
            for block, length, landed_s in found:
                if not any(block in d for d in self._disks):
                    disk.found(block, length, landed_s)
            unverified = [(b, e) for b in disk.blocks() if (e := disk.entry(b)) is not None]
            log.info(
                "disk_dir_scanned",
                directory=str(disk.directory),
                blocks=len(disk),
                bytes=disk.used_bytes,
                seconds=round(time.monotonic() - started, 3),
            )
            self._io.spawn(self._verify_all(disk, unverified))

    async def _verify_all(self, disk: DiskTier, found: list[tuple[BlockId, DiskBlock]]) -> None:
        """Checks the blocks found at start against their checksums."""
        started = time.monotonic()
        gate = asyncio.Semaphore(self._parallelism)
        dropped = 0

        async def verify(block: BlockId, entry: DiskBlock) -> None:
            nonlocal dropped
            async with gate:
                if disk.entry(block) is not entry or entry.crc is not None:
                    return  # evicted, dropped or read (so verified) meanwhile
                try:
                    _, crc, offset = await self._io.run(disk.read, block, entry)
                except FileNotFoundError:
                    if disk.entry(block) is entry:
                        self._eviction.forget(disk, block)
                    return
                except DataLoss as exc:
                    if disk.entry(block) is entry:  # (not dropped already by a read)
                        dropped += 1
                        self._events.block_corrupt(block, disk.name, str(exc))
                        self._eviction.forget(disk, block)
                        await self._eviction.unlink(disk, [block])
                    return
                except OSError as exc:
                    self._eviction.out_of_service(disk, exc)
                    return
                if disk.entry(block) is entry:
                    entry.crc, entry.offset = crc, offset

        await asyncio.gather(*(verify(b, e) for b, e in found))
        log.info(
            "disk_dir_verified",
            directory=str(disk.directory),
            checked=len(found),
            dropped=dropped,
            seconds=round(time.monotonic() - started, 3),
        )


def _prepare_and_scan(disk: DiskTier) -> list[tuple[BlockId, int, float]]:
    disk.prepare()
    return disk.scan()
