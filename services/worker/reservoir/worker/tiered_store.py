"""A worker's blocks across tiers: memory (or shm) on top, disk directories below.

- A fetched block is offered to memory and to one disk directory; each tier's eviction
  policy decides whether it is kept there (a block may be in both: then evicting it from
  memory costs nothing, and a restart finds it on disk).
- A block evicted from memory that no disk holds is written down to one (spilled).
- A disk hit is verified, served, and offered to memory, whose policy decides whether it
  is hot enough to move up.
- Disk I/O runs on a thread pool, never on the event loop (disk_io.py). Writes are
  write-behind within `disk_write_queue_bytes` (disk_write_down.py); eviction from disk
  runs in the background between the high and low watermarks (disk_eviction.py).
- An I/O error (or a full device) on a directory takes it out of service with one log
  line; its blocks are forgotten and the worker serves on from the other tiers.
- Pinned blocks (see cache_rules.py) are never evicted: memory lets one go only once a
  disk holds it, a disk never; a pinned block is always admitted, skips the write queue
  limit, and makes room on disk at once by evicting unpinned blocks.
- At start each directory is scanned and the blocks found verified in the background
  (disk_startup.py).

This module routes between the tiers; the disk-side machinery lives in those modules.
"""

from __future__ import annotations

import asyncio
import time

from reservoir.common.config import WorkerConfig
from reservoir.common.errors import DataLoss

from .block_events import BlockEvents
from .disk_eviction import DiskEviction
from .disk_io import DiskIO
from .disk_startup import DiskStartupScan
from .disk_tier import DiskTier
from .disk_write_down import DiskWriteDown
from .eviction import new_policy
from .memory_tier import NO_PINS, BlockData, BlockFileRef, BlockId, MemoryTier, Pins
from .shm_tier import ShmTier
from .tier_usage import TierUsage, tier_usage

# The owner's protocol and the usage report are part of the store's interface.
__all__ = ["BlockEvents", "TierUsage", "TieredStore"]


class TieredStore:
    def __init__(
        self,
        memory: MemoryTier,
        disks: list[DiskTier],
        events: BlockEvents,
        *,
        io_threads: int,
        scan_parallelism: int,
        write_queue_bytes: int,
        pins: Pins = NO_PINS,
    ) -> None:
        self.memory = memory
        self.disks = disks
        self.pins = pins
        memory.pins = pins
        for disk in disks:
            disk.pins = pins
        self._events = events
        memory.on_evict = self._memory_evicted
        memory.below = self if disks else None
        self._io = DiskIO(io_threads)
        self._eviction = DiskEviction(memory, disks, events, self._io)
        self._write_down_queue = DiskWriteDown(
            disks, pins, self._io, self._eviction, queue_bytes=write_queue_bytes
        )
        self._startup = DiskStartupScan(
            disks, events, self._io, self._eviction, parallelism=scan_parallelism
        )

    @classmethod
    def from_config(
        cls,
        config: WorkerConfig,
        events: BlockEvents,
        *,
        unlisted_shm: bool = False,
        pins: Pins = NO_PINS,
    ) -> TieredStore:
        policy = new_policy(config.eviction, config.capacity_bytes)
        memory: MemoryTier = (
            ShmTier(
                config.shm_dir,
                config.capacity_bytes,
                None,
                policy,
                unlisted=unlisted_shm,
                spare_bytes=config.spare_limit_bytes,
            )
            if config.shm_dir
            else MemoryTier(config.capacity_bytes, None, policy)
        )
        disks = [
            DiskTier(
                directory,
                config.disk_capacity_bytes,
                new_policy(config.eviction, config.disk_capacity_bytes),
                high_watermark=config.disk_high_watermark,
                low_watermark=config.disk_low_watermark,
                fsync=config.disk_fsync,
            )
            for directory in config.disk_directories
        ]
        return cls(
            memory,
            disks,
            events,
            io_threads=config.disk_io_threads,
            scan_parallelism=config.disk_scan_parallelism,
            write_queue_bytes=config.disk_write_queue_bytes,
            pins=pins,
        )

    @property
    def disk_writes_skipped(self) -> int:
        """Blocks not written to disk because the write queue was full."""
        return self._write_down_queue.skipped

    # ---- what is held ------------------------------------------------------------------

    def __contains__(self, block: BlockId) -> bool:
        return block in self.memory or any(block in d for d in self.disks)

    def __len__(self) -> int:
        return len(self.blocks())

    def blocks(self) -> list[BlockId]:
        held = dict.fromkeys(self.memory.blocks())
        for disk in self.disks:
            held.update(dict.fromkeys(disk.blocks()))
        return list(held)

    def _on_disk(self, block: BlockId) -> DiskTier | None:
        for disk in self.disks:
            if block in disk:
                return disk
        return None

    def usage(self) -> list[TierUsage]:
        return tier_usage(self.memory, self.disks)

    # ---- start and stop ----------------------------------------------------------------

    async def start(self) -> None:
        """Scans the disk directories (the blocks found are held from now on, verified in
        the background) and starts background eviction."""
        await self._startup.scan()
        self._eviction.start()

    async def settled(self) -> None:
        """Returns once no disk I/O is in flight: writes, unlinks, start-up checks (for
        tests and an orderly stop)."""
        writes, background = self._write_down_queue.writes, self._io.background
        while True:
            while writes or background:
                await asyncio.wait([*writes, *background])
            await asyncio.sleep(0)  # the evictor's turn: it may start unlinks
            if not (writes or background):
                return

    async def close(self, timeout_s: float) -> None:
        """Lets writes in flight finish (within `timeout_s`), then stops."""
        self._eviction.stop()
        self._io.cancel_background()
        await self._write_down_queue.drain(timeout_s)
        self._io.shutdown()

    # ---- reads -------------------------------------------------------------------------

    async def get(self, block: BlockId) -> tuple[BlockData, int, str] | None:
        """The block's bytes and checksum from the highest tier that holds it, and that
        tier's name; None when no tier holds it."""
        for tier in self.disks:
            tier.policy.on_access(block)
        try:
            held = self.memory.get(block)
        except DataLoss as exc:
            self.drop_corrupt(block, str(exc))
            held = None
        if held is not None:
            if self.disks and self.pins.pinned(block) and self._on_disk(block) is None:
                self._pin_down(block, held[0])  # pinned after it landed: keep it on disk too
            return held[0], held[1], self.memory.name
        disk = self._on_disk(block)
        if disk is None:
            return None
        pending = self._write_down_queue.pending(block)
        if pending is not None:
            return (*pending, disk.name)
        entry = disk.entry(block)
        if entry is None or not entry.written:
            return None
        try:
            data, crc, offset = await self._io.run(disk.read, block, entry)
        except FileNotFoundError:
            if disk.entry(block) is entry:  # gone behind our back
                self._eviction.forget(disk, block)
            return None
        except DataLoss as exc:
            if disk.entry(block) is entry:  # (not dropped already by the verifier)
                self._events.block_corrupt(block, disk.name, str(exc))
                self._eviction.forget(disk, block)
                self._eviction.unlink_later(disk, [block])
            return None
        except OSError as exc:
            self._eviction.out_of_service(disk, exc)
            return None
        if disk.entry(block) is entry:
            entry.crc, entry.offset = crc, offset
        disk.hits += 1
        # Moves up if memory's policy admits it.
        self.memory.put(block, data, crc, offset, entry.landed_s)
        return data, crc, disk.name

    def drop_corrupt(self, block: BlockId, error: str) -> None:
        """The memory tier's copy of `block` failed its checksum when it was read: dropped
        (the next read takes a lower tier's, or fetches it again), and reported."""
        self._events.block_corrupt(block, self.memory.name, error)
        dropped = self.memory.drop_entry(block)
        if dropped is not None and self._on_disk(block) is None:
            self._events.block_gone(block, dropped.length, self.memory.name)

    def file_of(self, block: BlockId) -> tuple[BlockFileRef, str] | None:
        """The block as a file of the memory tier (shared memory) and the tier's name,
        counted as a read; None when it is not held that way."""
        if self.disks and self.pins.pinned(block) and self._on_disk(block) is None:
            return None  # `get` also writes it down to disk: let it
        ref = self.memory.file_of(block)
        if ref is None:
            return None
        for tier in self.disks:
            tier.policy.on_access(block)
        return ref, self.memory.name

    def read_directly(self, block: BlockId) -> bool:
        """Whether a same-host reader read the block's file since last asked (see
        `MemoryTier.read_directly`)."""
        return self.memory.read_directly(block)

    def landed(self, block: BlockId) -> float | None:
        """When the block landed in this worker (wall clock), or None when not held."""
        times = []
        held = self.memory.entry(block)
        if held is not None:
            times.append(held.landed_s)
        disk = self._on_disk(block)
        entry = disk.entry(block) if disk is not None else None
        if entry is not None:
            times.append(entry.landed_s)
        return min(times) if times else None

    def _pin_down(self, block: BlockId, data: bytes) -> None:
        held = self.memory.entry(block)
        if held is not None:
            self._write_down(block, data, held.crc, held.offset, held.landed_s)

    # ---- writes ------------------------------------------------------------------------

    def put(self, block: BlockId, data: bytes | memoryview, crc: int, offset: int) -> bool:
        """Offers a fetched block to every tier; True if one keeps it. `data` may be a
        view (a staged block's, into its request): copied only where bytes are held."""
        landed = time.time()
        in_memory = self.memory.put(block, data, crc, offset, landed)
        # A disk write holds (and serves) its bytes while queued: bytes, not a view.
        on_disk = bool(self.disks) and self._write_down(
            block, data if isinstance(data, bytes) else bytes(data), crc, offset, landed
        )
        return in_memory or on_disk

    def rekey(self, old: BlockId, new: BlockId, offset: int) -> bool:
        """Holds memory's block `old` as `new` without copying its bytes (see
        `MemoryTier.rekey`); any disk copy of `old` is dropped. False when memory does not
        hold `old` (the caller copies it instead)."""
        if not self.memory.rekey(old, new, offset):
            return False
        for disk in self.disks:
            if disk.forget(old) is not None:
                self._eviction.unlink_later(disk, [old])
        return True

    def evict(self, blocks: list[BlockId]) -> list[tuple[BlockId, int]]:
        """Drops blocks from every tier now (free, expiry), telling the owner each is
        gone; returns those that were held, with their lengths."""
        gone: list[tuple[BlockId, int]] = []
        for block in blocks:
            held = self.memory.entry(block)
            disk = self._on_disk(block)
            entry = disk.entry(block) if disk is not None else None
            length = held.length if held is not None else entry.length if entry else 0
            if self.drop(block):
                gone.append((block, length))
                self._events.block_gone(block, length, "freed")
        return gone

    def drop(self, block: BlockId) -> bool:
        """Forgets a block in every tier (its disk file is removed in the background)."""
        dropped = self.memory.drop(block)
        for disk in self.disks:
            if disk.forget(block) is not None:
                dropped = True
                self._eviction.unlink_later(disk, [block])
        return dropped

    def holds(self, block: BlockId) -> bool:
        """Whether a disk tier holds `block` (LowerTier, for the memory tier)."""
        return self._on_disk(block) is not None

    def spill(self, block: BlockId, data: bytes, crc: int, offset: int, landed_s: float) -> None:
        """Takes a block evicted from memory (LowerTier)."""
        self._write_down(block, data, crc, offset, landed_s)

    def _memory_evicted(self, block: BlockId, size: int) -> None:
        if self._on_disk(block) is None:
            self._events.block_gone(block, size, self.memory.name)

    def _write_down(
        self, block: BlockId, data: bytes, crc: int, offset: int, landed_s: float
    ) -> bool:
        """True if a disk holds the block or has queued its write."""
        if not self.disks:
            return False
        if self._on_disk(block) is not None:
            return True
        return self._write_down_queue.offer(block, data, crc, offset, landed_s)
