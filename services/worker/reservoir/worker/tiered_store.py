"""A worker's blocks across tiers: memory (or shm) on top, disk directories below.

- A fetched block is offered to memory and to one disk directory; each tier's eviction
  policy decides whether it is kept there (a block may be in both: then evicting it from
  memory costs nothing, and a restart finds it on disk).
- A block evicted from memory that no disk holds is written down to one (spilled).
- A disk hit is verified, served, and offered to memory, whose policy decides whether it
  is hot enough to move up.
- Disk I/O runs on a thread pool, never on the event loop. Writes are write-behind
  within `disk_write_queue_bytes` (past it a block is just not written); eviction from
  disk runs in the background between the high and low watermarks.
- An I/O error (or a full device) on a directory takes it out of service with one log
  line; its blocks are forgotten and the worker serves on from the other tiers.
- Pinned blocks (see cache_rules.py) are never evicted: memory lets one go only once a
  disk holds it, a disk never; a pinned block is always admitted, skips the write queue
  limit, and makes room on disk at once by evicting unpinned blocks.
- At start each directory is scanned; the blocks found are held at once (reported to
  the master in the first full report) and verified against their checksum in the
  background, `disk_scan_parallelism` at a time. A block that fails is dropped; a read
  of a block not verified yet verifies it first (every disk read does).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from reservoir.common import logs
from reservoir.common.config import WorkerConfig
from reservoir.common.errors import DataLoss

from .disk_tier import DiskBlock, DiskTier
from .eviction import new_policy
from .memory_tier import NO_PINS, BlockData, BlockFileRef, BlockId, MemoryTier, Pins
from .shm_tier import ShmTier

log = logs.get_logger(__name__)
T = TypeVar("T")


class BlockEvents(Protocol):
    """What the store tells its owner (the worker service keeps the report and stats)."""

    def block_gone(self, block: BlockId, size: int, tier: str) -> None:
        """`block` is no longer held by any tier."""

    def block_corrupt(self, block: BlockId, tier: str, error: str) -> None:
        """`block` failed its checksum in `tier` and was dropped."""


@dataclass(frozen=True, slots=True)
class TierUsage:
    name: str
    path: str
    used_bytes: int
    capacity_bytes: int
    blocks: int
    evictions: int
    hits: int
    in_service: bool
    pinned_bytes: int


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
        self.disk_writes_skipped = 0
        self.pins = pins
        memory.pins = pins
        for disk in disks:
            disk.pins = pins
        self._events = events
        memory.on_evict = self._memory_evicted
        memory.below = self if disks else None
        self._pool = ThreadPoolExecutor(max(1, io_threads), thread_name_prefix="disk")
        self._scan_parallelism = max(1, scan_parallelism)
        self._queue_limit = write_queue_bytes
        self._queued_bytes = 0
        # Blocks on their way to disk, served from here meanwhile (a block that left
        # memory while its write was in flight is still held).
        self._writing: dict[BlockId, tuple[bytes, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # background: verification, unlinks
        self._evictor: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._evict_wanted = asyncio.Event()

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
            ShmTier(config.shm_dir, config.capacity_bytes, None, policy, unlisted=unlisted_shm)
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
        m = self.memory
        tiers = [
            TierUsage(
                m.name,
                str(m.directory) if isinstance(m, ShmTier) else "",
                m.used_bytes,
                m.capacity_bytes,
                len(m),
                m.evictions,
                m.hits,
                True,
                m.pinned_bytes(),
            )
        ]
        for d in self.disks:
            tiers.append(
                TierUsage(
                    d.name,
                    str(d.directory),
                    d.used_bytes,
                    d.capacity_bytes,
                    len(d),
                    d.evictions,
                    d.hits,
                    d.in_service,
                    d.pinned_bytes(),
                )
            )
        return tiers

    # ---- start and stop ----------------------------------------------------------------

    async def start(self) -> None:
        """Scans the disk directories (the blocks found are held from now on, verified in
        the background) and starts background eviction."""
        for disk in self.disks:
            started = time.monotonic()
            try:
                found = await self._io(_prepare_and_scan, disk)
            except OSError as exc:
                self._out_of_service(disk, exc)
                continue
            for block, length, landed_s in found:
                if self._on_disk(block) is None:
                    disk.found(block, length, landed_s)
            unverified = [(b, e) for b in disk.blocks() if (e := disk.entry(b)) is not None]
            log.info(
                "disk_dir_scanned",
                directory=str(disk.directory),
                blocks=len(disk),
                bytes=disk.used_bytes,
                seconds=round(time.monotonic() - started, 3),
            )
            self._spawn(self._verify_all(disk, unverified))
        self._evictor = asyncio.get_running_loop().create_task(self._evict_loop())
        self._evict_wanted.set()

    async def settled(self) -> None:
        """Returns once no disk I/O is in flight: writes, unlinks, start-up checks (for
        tests and an orderly stop)."""
        while True:
            while self._writes or self._tasks:
                await asyncio.wait([*self._writes, *self._tasks])
            await asyncio.sleep(0)  # the evictor's turn: it may start unlinks
            if not (self._writes or self._tasks):
                return

    async def close(self, timeout_s: float) -> None:
        """Lets writes in flight finish (within `timeout_s`), then stops."""
        if self._evictor is not None:
            self._evictor.cancel()
        for task in list(self._tasks):
            task.cancel()
        if self._writes:
            await asyncio.wait(list(self._writes), timeout=timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- reads -------------------------------------------------------------------------

    async def get(self, block: BlockId) -> tuple[BlockData, int, str] | None:
        """The block's bytes and checksum from the highest tier that holds it, and that
        tier's name; None when no tier holds it."""
        for tier in self.disks:
            tier.policy.on_access(block)
        try:
            held = self.memory.get(block)
        except DataLoss as exc:
            self._corrupt(block, self.memory.name, exc)
            dropped = self.memory.drop_entry(block)
            if dropped is not None and self._on_disk(block) is None:
                self._events.block_gone(block, dropped.length, self.memory.name)
            held = None
        if held is not None:
            if self.disks and self.pins.pinned(block) and self._on_disk(block) is None:
                self._pin_down(block, held[0])  # pinned after it landed: keep it on disk too
            return held[0], held[1], self.memory.name
        disk = self._on_disk(block)
        if disk is None:
            return None
        if block in self._writing:
            return (*self._writing[block], disk.name)
        entry = disk.entry(block)
        if entry is None or not entry.written:
            return None
        try:
            data, crc, offset = await self._io(disk.read, block, entry)
        except FileNotFoundError:
            if disk.entry(block) is entry:  # gone behind our back
                self._disk_forget(disk, block)
            return None
        except DataLoss as exc:
            if disk.entry(block) is entry:  # (not dropped already by the verifier)
                self._corrupt(block, disk.name, exc)
                self._disk_forget(disk, block)
                self._spawn(self._unlink(disk, [block]))
            return None
        except OSError as exc:
            self._out_of_service(disk, exc)
            return None
        if disk.entry(block) is entry:
            entry.crc, entry.offset = crc, offset
        disk.hits += 1
        # Moves up if memory's policy admits it.
        self.memory.put(block, data, crc, offset, entry.landed_s)
        return data, crc, disk.name

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
                self._spawn(self._unlink(disk, [old]))
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
                self._spawn(self._unlink(disk, [block]))
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
        if not self.disks:
            return False
        if self._on_disk(block) is not None:
            return True
        pinned = self.pins.pinned(block)
        if self._queued_bytes + len(data) > self._queue_limit and not pinned:
            self.disk_writes_skipped += 1
            return False
        for disk in self._ranked(block):
            reserved = disk.reserve(block, len(data), landed_s)
            if not reserved and pinned and disk.in_service:
                victims = disk.room_for(len(data))
                if victims:
                    self._evict_from_disk(disk, victims)
                    reserved = disk.reserve(block, len(data), landed_s)
            if disk.needs_eviction():
                self._evict_wanted.set()
            if reserved:
                self._queued_bytes += len(data)
                self._writing[block] = (data, crc)
                self._spawn(self._write(disk, block, data, crc, offset, landed_s), self._writes)
                return True
        return False

    def _ranked(self, block: BlockId) -> list[DiskTier]:
        """The directories in service, in the block's rendezvous order (spreads blocks
        evenly, and a block keeps its directory while the set does not change)."""
        live = [d for d in self.disks if d.in_service]
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
            await self._io(disk.write, block, data, crc, off, landed_s)
        except OSError as exc:
            self._out_of_service(disk, exc)
            return
        finally:
            self._queued_bytes -= len(data)
            self._writing.pop(block, None)
        if entry is not None and disk.entry(block) is entry:
            disk.committed(block, crc, off)
        elif disk.entry(block) is None:  # dropped while it was being written
            await self._unlink(disk, [block])

    # ---- eviction and failures ---------------------------------------------------------

    async def _evict_loop(self) -> None:
        while True:
            await self._evict_wanted.wait()
            self._evict_wanted.clear()
            for disk in self.disks:
                if not disk.in_service or not disk.needs_eviction():
                    continue
                self._evict_from_disk(disk, disk.victims_to_low_watermark())

    def _evict_from_disk(self, disk: DiskTier, victims: list[BlockId]) -> None:
        for block in victims:
            entry = disk.forget(block)
            disk.evictions += 1
            if entry is not None and block not in self.memory:
                self._events.block_gone(block, entry.length, disk.name)
        self._spawn(self._unlink(disk, victims))

    async def _unlink(self, disk: DiskTier, blocks: list[BlockId]) -> None:
        if not blocks:
            return
        try:
            await self._io(_unlink_all, disk, blocks)
        except OSError as exc:
            self._out_of_service(disk, exc)

    async def _verify_all(self, disk: DiskTier, found: list[tuple[BlockId, DiskBlock]]) -> None:
        """Checks the blocks found at start against their checksums."""
        started = time.monotonic()
        gate = asyncio.Semaphore(self._scan_parallelism)
        dropped = 0

        async def verify(block: BlockId, entry: DiskBlock) -> None:
            nonlocal dropped
            async with gate:
                if disk.entry(block) is not entry or entry.crc is not None:
                    return  # evicted, dropped or read (so verified) meanwhile
                try:
                    _, crc, offset = await self._io(disk.read, block, entry)
                except FileNotFoundError:
                    if disk.entry(block) is entry:
                        self._disk_forget(disk, block)
                    return
                except DataLoss as exc:
                    if disk.entry(block) is entry:  # (not dropped already by a read)
                        dropped += 1
                        self._corrupt(block, disk.name, exc)
                        self._disk_forget(disk, block)
                        await self._unlink(disk, [block])
                    return
                except OSError as exc:
                    self._out_of_service(disk, exc)
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

    def _disk_forget(self, disk: DiskTier, block: BlockId) -> None:
        entry = disk.forget(block)
        if entry is not None and block not in self.memory:
            self._events.block_gone(block, entry.length, disk.name)

    def _corrupt(self, block: BlockId, tier: str, exc: Exception) -> None:
        self._events.block_corrupt(block, tier, str(exc))

    def _out_of_service(self, disk: DiskTier, exc: OSError) -> None:
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
            if block not in self.memory:
                self._events.block_gone(block, 0, disk.name)

    # ---- plumbing ----------------------------------------------------------------------

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _spawn(self, coro: Any, into: set[asyncio.Task[None]] | None = None) -> None:
        tasks = self._tasks if into is None else into
        task = asyncio.get_running_loop().create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)


def _prepare_and_scan(disk: DiskTier) -> list[tuple[BlockId, int, float]]:
    disk.prepare()
    return disk.scan()


def _unlink_all(disk: DiskTier, blocks: list[BlockId]) -> None:
    for block in blocks:
        disk.unlink(block)
