"""The worker's decisions: serve a block from cache, or fetch it from the under-store once."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from reservoir.common import logs
from reservoir.common.blocks.block_file import checksum
from reservoir.common.config import WorkerConfig
from reservoir.common.errors import (
    InvalidArgument,
    NotFound,
    OutOfRange,
    ResourceExhausted,
)
from reservoir.common.paths import shown
from reservoir.common.understore.budget_gate import preload_lane

from .block_changes import BlockChanges
from .block_fetcher import BlockFetcher
from .block_read import BlockRead, Fetched, FileRead, range_read, window
from .cache_rules import BlockExpiry, CacheRuleTable
from .counters import UFS, WorkerCounters
from .fair_eviction import FairEviction
from .memory_tier import BlockId
from .mount_shares import MountShares
from .mount_table import MountTable
from .read_request import BlockRequest
from .read_trace import ReadTrace
from .tiered_store import TieredStore

log = logs.get_logger(__name__)


class WorkerService:
    def __init__(
        self,
        config: WorkerConfig,
        mounts: MountTable,
        rules: CacheRuleTable,
        *,
        unlisted_shm: bool = False,
        registry: CollectorRegistry | None = None,
    ) -> None:
        """`unlisted_shm`: keep shared-memory blocks where only callers the master has
        authenticated can find them (see ShmTier). `registry`: where the under-store
        request histogram goes (the one /metrics serves); by default one no one reads."""
        registry = CollectorRegistry() if registry is None else registry
        self.config = config
        self.worker_id = config.worker_id
        self.counters = WorkerCounters()
        self.rules = rules
        self.expiry = BlockExpiry()
        self.store = TieredStore.from_config(config, self, unlisted_shm=unlisted_shm, pins=rules)
        # Each mount's share of this cache (quota, priority, idle TTL), kept as mounts change.
        held_bytes = config.capacity_bytes + len(config.disk_directories) * (
            config.disk_capacity_bytes
        )
        self.shares = MountShares(rules)
        self.store.memory.order = FairEviction(self.shares, held_bytes)
        self.mounts = mounts
        mounts.subscribe(self.shares)
        self.fetcher = BlockFetcher(config.ufs, mounts, self.counters, registry)
        self._inflight: dict[BlockId, asyncio.Task[tuple[Fetched, int]]] = {}
        self.changes = BlockChanges()

    def block_gone(self, block: BlockId, size: int, tier: str) -> None:
        """No tier holds `block` any more (BlockEvents)."""
        self.counters.evictions += 1
        self.shares.gone(block)
        self.changes.gone(block)
        log.debug("block_evicted", file_id=block[0], index=block[1], bytes=size, tier=tier)

    async def read(
        self,
        request: BlockRequest,
        *,
        limit: int | None = None,
        trace: ReadTrace | None = None,
        cached_only: bool = False,
    ) -> BlockRead:
        """The one read behind every front door (gRPC ReadBlock, ReadSmall, ReadBlocks and
        the data port): the request validated (geometry, `ufs_uri` under its mount), the
        block looked up or fetched once, the range cut and its CRC32C taken, and the bytes
        counted as served (and put on `trace`, the caller's span, when given).

        `limit`: the most bytes this caller answers in one message (ReadSmall); a larger
        range is InvalidArgument before any fetch. Counted when handed over, not when the
        front door has sent it: a reader that has all it asked for may end the call at once.
        `cached_only`: NotFound rather than a fetch when the block is not held (a peer
        copying blocks from here asks so: it wants what is cached, never a GET).
        """
        request = request.validated()
        if limit is not None:
            start, end = window(request.offset, request.length, request.block_length)
            if end - start > limit:
                raise InvalidArgument(
                    f"ReadSmall answers ranges of up to {limit} bytes, not {end - start}: "
                    "use ReadBlock"
                )
        data: Fetched
        if cached_only:
            self._expire_if_stale(request)
            held = await self.store.get(request.block)
            if held is None:
                raise NotFound(f"block {request.index} of {request.file_id} is not held here")
            data, crc, source = held
        else:
            self.shares.read(request.block, request.mount_path)
            data, crc, source = await self._block(request)
        read = range_read(data, crc, request.offset, request.length, source)
        self.served(source, read.length, trace)
        return read

    def read_file(self, request: BlockRequest) -> FileRead | None:
        """The whole block as a file, when the request asks for all of it and a tier holds
        it as one (the shared-memory tier): for a front door that sends it without loading
        it (sendfile), and then calls `served`. None: use `read`. Opened by the sender, not
        here: a pipelined request may wait its turn, and a descriptor each would add up.
        The bytes are not checked here: the reader checks them against their checksum."""
        request = request.validated()
        if request.offset != 0 or 0 <= request.length < request.block_length:
            return None
        self._expire_if_stale(request)
        self.shares.read(request.block, request.mount_path)
        found = self.store.file_of(request.block)
        if found is None:
            return None
        self.counters.hits += 1
        return FileRead(*found)

    def served(self, source: str, nbytes: int, trace: ReadTrace | None = None) -> None:
        """`nbytes` from `source` went (or are going) to a reader: counted, and put on the
        caller's span when given."""
        self.counters.served(source, nbytes)
        if trace is not None:
            trace.add(source, nbytes)

    async def load(self, request: BlockRequest) -> int:
        """Makes sure the block is held (a load job's step); returns its length. Not a read:
        nothing is counted as served."""
        request = request.validated()
        with preload_lane():  # its fetch task inherits the lane: below foreground reads
            data, _, _ = await self._block(request)
        if request.block not in self.store:
            if self.shares.full(request.mount_path, len(data)):
                raise ResourceExhausted(
                    f"block fetched but not kept: {shown(request.mount_path)} is at its "
                    "quota's share on this worker"
                )
            raise ResourceExhausted("block fetched but not kept: the cache is full")
        return len(data)

    async def _block(self, request: BlockRequest) -> tuple[Fetched, int, str]:
        """The whole block, its CRC32C, and where it came from: the name of the tier that
        held it, or UFS when this call fetched it.

        A miss is fetched by one task however many callers wait for it (each of the others
        counts a hit from memory: it cost no GET); a caller that gives up does not cancel
        the fetch the others are waiting on. A held block whose bytes fail their checksum
        is dropped and fetched again, never served; so is one older than its TTL.
        """
        self._expire_if_stale(request)
        held = await self.store.get(request.block)
        if held is not None:
            self.counters.hits += 1
            self.shares.adopt(request.block, request.mount_path, len(held[0]))
            return held
        task = self._inflight.get(request.block)
        if task is None:
            task = asyncio.create_task(self._fetch(request))
            self._inflight[request.block] = task
            task.add_done_callback(self._fetch_done)
            data, crc = await asyncio.shield(task)
            return data, crc, UFS
        self.counters.hits += 1
        data, crc = await asyncio.shield(task)
        return data, crc, self.store.memory.name

    def block_corrupt(self, block: BlockId, tier: str, error: str) -> None:
        """`block` failed its checksum and was dropped from `tier` (BlockEvents)."""
        self.counters.corrupt_blocks += 1
        log.warning("block_corrupt", file_id=block[0], index=block[1], tier=tier, error=error)

    def _fetch_done(self, task: asyncio.Task[tuple[Fetched, int]]) -> None:
        for block, running in list(self._inflight.items()):
            if running is task:
                del self._inflight[block]
        if not task.cancelled():
            task.exception()  # retrieved: the callers that still wait have it

    async def _fetch(self, request: BlockRequest) -> tuple[Fetched, int]:
        mount, ufs = await self.fetcher.store_of(request)
        length = request.block_length
        self.counters.misses += 1
        # Received where the block will live (the memory tier's bytes, or its block file
        # mapped), checksummed there once, and kept without another copy.
        with self.store.memory.landing(request.block, length) as landing:
            got = await self.fetcher.get_into(mount, ufs, request, landing.buffer)
            if got != length:
                raise OutOfRange(
                    f"under-store returned {got} bytes for block {request.index}, "
                    f"expected {length}: the object changed"
                )
            data = landing.data()
            crc = checksum(data)
            self.counters.bytes_from_ufs += length
            start = request.index * request.block_size
            if self.shares.keep(self.store, request.mount_path, request.block, data, crc, start):
                self.changes.held(request.block)
                self._expire_if_stale(request)  # starts its TTL's clock, if it has one
        log.debug("block_fetched", file_id=request.file_id, index=request.index, bytes=length)
        return data, crc

    # ---- written files (written_blocks.py) ---------------------------------------------

    async def check_mount(self, request: BlockRequest) -> None:
        """Raises unless the file lies under its mount, as the mount is now, with the
        mount's block size (what a fetch checks first)."""
        await self.fetcher.store_of(request.validated())

    def keep(self, block: BlockId, data: bytes, crc: int, offset: int) -> bool:
        """Holds a block whose bytes came from its writer, as if fetched (reported to
        the master, TTL clock started); False when no tier took it."""
        if not self.store.put(block, data, crc, offset):
            return False
        self.shares.held(block, len(data))  # its mount is learnt at its first read
        self.changes.held(block)
        return True

    async def copy_blocks(
        self, source_file_id: str, file: BlockRequest, indices: list[int]
    ) -> list[int]:
        """Keeps the blocks held here of `source_file_id` under `file` as well (a renamed
        file: the same bytes under a new identity); returns the indices now held."""
        await self.check_mount(file)
        copied: list[int] = []
        for index in sorted(set(indices)):
            length = file.file_size - index * file.block_size
            held = await self.store.get((source_file_id, index)) if index >= 0 else None
            if held is None or len(held[0]) != min(file.block_size, length):
                continue  # evicted since, or not the same file's block: read from the store
            if self.keep((file.file_id, index), bytes(held[0]), held[1], index * file.block_size):
                copied.append(index)
        log.info("blocks_copied", source=source_file_id, file=file.file_id, blocks=len(copied))
        return copied

    def keep_staged(self, staged: BlockId, block: BlockId, length: int, offset: int) -> bool:
        """`keep` for a block staged here as `staged`, its bytes moved, not copied; False
        when memory does not hold it with `length` bytes (nothing changes then)."""
        held = self.store.memory.entry(staged)
        if held is None or held.length != length or not self.store.rekey(staged, block, offset):
            return False
        self.shares.held(block, length)
        self.changes.held(block)
        return True

    # ---- cache rules: TTL expiry and free (see cache_rules.py) -------------------------

    def _expire_if_stale(self, request: BlockRequest) -> None:
        """Drops the block when it is older than its TTL (it is fetched again, never
        served stale); else remembers when it expires."""
        ttl_s = self.rules.ttl_s(request.mount_path, request.ufs_uri)
        landed = self.store.landed(request.block) if ttl_s is not None else None
        if ttl_s is None or landed is None:
            return
        if time.time() - landed < ttl_s:
            self.expiry.set(request.block, landed, ttl_s)
            return
        self.store.evict([request.block])
        log.debug("block_expired", file_id=request.file_id, index=request.index, ttl_s=ttl_s)

    async def expire_due(self) -> None:
        """Drops the blocks whose TTL ran out (pinned ones are fetched again when read)."""
        due = self.expiry.due(time.time())
        stale = [b for b, landed in due if self.store.landed(b) == landed]
        gone = self.store.evict([b for b in stale if not self.rules.pinned(b)])
        if gone:
            log.info("blocks_expired", blocks=len(gone), bytes=sum(n for _, n in gone))

    def free(self, file_ids: set[str]) -> list[tuple[BlockId, int]]:
        """Drops every block of these files from every tier; returns what was held."""
        gone = self.store.evict([b for b in self.store.blocks() if b[0] in file_ids])
        log.info("blocks_freed", files=len(file_ids), blocks=len(gone))
        return gone

    def close(self) -> None:
        """Nothing of its own to release: fetches are tasks on the server's loop."""
