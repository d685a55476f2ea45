"""The worker's decisions: serve a block from cache, or fetch it from the under-store once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from opentelemetry import metrics

from reservoir.common import logs
from reservoir.common.config import WorkerConfig
from reservoir.common.errors import InvalidArgument, NotFound, OutOfRange
from reservoir.common.models import Mount, file_id_for
from reservoir.common.under_store import MountedStores, UnderStore

from .memory_tier import BlockData, BlockId, MemoryTier
from .shm_tier import ShmTier

log = logs.get_logger(__name__)
_meter = metrics.get_meter("reservoir.worker")
_hits = _meter.create_counter("reservoir.worker.cache_hits", description="blocks served from cache")
_misses = _meter.create_counter("reservoir.worker.cache_misses", description="blocks fetched")
_bytes = _meter.create_counter("reservoir.worker.bytes", unit="By", description="bytes by source")
_evictions = _meter.create_counter("reservoir.worker.evictions", description="blocks evicted")


@dataclass(frozen=True, slots=True)
class BlockRequest:
    file_id: str
    index: int
    offset: int
    length: int  # -1 = to the end of the block
    ufs_uri: str
    etag: str
    file_size: int
    block_size: int
    mount_path: str

    @property
    def block(self) -> BlockId:
        return (self.file_id, self.index)

    def validated(self) -> BlockRequest:
        if not self.file_id or not self.ufs_uri or not self.mount_path:
            raise InvalidArgument("file_id, ufs_uri and mount_path are required")
        if self.block_size <= 0 or self.file_size < 0 or self.index < 0:
            raise InvalidArgument("block_size must be positive; file_size and index not negative")
        if self.file_id != file_id_for(self.ufs_uri, self.etag, self.file_size):
            raise InvalidArgument("file_id does not match (ufs_uri, etag, file_size)")
        if self.index > 0 and self.index * self.block_size >= self.file_size:
            raise OutOfRange(f"block {self.index} is past the end of the file")
        if self.offset < 0 or self.length < -1:
            raise InvalidArgument("offset must not be negative; length must be >= -1")
        return self

    @property
    def block_length(self) -> int:
        return max(0, min(self.block_size, self.file_size - self.index * self.block_size))


@dataclass
class WorkerStats:
    hits: int = 0
    misses: int = 0
    bytes_from_cache: int = 0
    bytes_from_ufs: int = 0
    ufs_gets: int = 0
    evictions: int = 0


MountLookup = Callable[[], Awaitable[list[Mount]]]


class WorkerService:
    def __init__(self, config: WorkerConfig, fetch_mounts: MountLookup) -> None:
        self.config = config
        self.worker_id = config.worker_id
        self.stats = WorkerStats()
        self.tier: MemoryTier = (
            ShmTier(config.shm_dir, config.capacity_bytes, self._evicted)
            if config.shm_dir
            else MemoryTier(config.capacity_bytes, self._evicted)
        )
        self._fetch_mounts = fetch_mounts
        self._mounts: dict[str, Mount] = {}
        self._under_stores = MountedStores(
            config.ufs_timeout_s, config.ufs_retries, config.ufs_concurrency
        )
        self._inflight: dict[BlockId, asyncio.Task[bytes]] = {}
        # boto3 is blocking: its calls run on a bounded pool, which also bounds the
        # number of concurrent GETs this worker sends to the under-store.
        self._pool = ThreadPoolExecutor(config.ufs_concurrency, thread_name_prefix="ufs")
        self.added: set[BlockId] = set()
        self.removed: set[BlockId] = set()

    def _evicted(self, block: BlockId, size: int) -> None:
        self.stats.evictions += 1
        _evictions.add(1, {"tier": self.tier.name})
        self.added.discard(block)
        self.removed.add(block)
        log.debug(
            "block_evicted", file_id=block[0], index=block[1], bytes=size, tier=self.tier.name
        )

    async def _under_store(self, mount_path: str, ufs_uri: str) -> tuple[Mount, UnderStore]:
        mount = self._mounts.get(mount_path)
        if mount is None or not ufs_uri.startswith(mount.uri):
            # Unknown, or remounted elsewhere since we looked: ask the master again.
            self._mounts = {m.path: m for m in await self._fetch_mounts()}
            mount = self._mounts.get(mount_path)
            if mount is None:
                raise NotFound(f"{mount_path} is not mounted")
        return mount, self._under_stores.for_mount(mount)

    async def block(self, request: BlockRequest) -> tuple[BlockData, bool]:
        """The whole block and whether it came from cache.

        A miss is fetched by one task however many callers wait for it; a caller that
        gives up does not cancel the fetch the others are waiting on.
        """
        data = self.tier.get(request.block)
        if data is not None:
            self.stats.hits += 1
            _hits.add(1)
            return data, True
        task = self._inflight.get(request.block)
        if task is None:
            task = asyncio.create_task(self._fetch(request))
            self._inflight[request.block] = task
            task.add_done_callback(self._fetch_done)
            return await asyncio.shield(task), False
        self.stats.hits += 1
        _hits.add(1)
        return await asyncio.shield(task), True

    def _fetch_done(self, task: asyncio.Task[bytes]) -> None:
        for block, running in list(self._inflight.items()):
            if running is task:
                del self._inflight[block]
        if not task.cancelled():
            task.exception()  # retrieved: the callers that still wait have it

    async def _fetch(self, request: BlockRequest) -> bytes:
        mount, ufs = await self._under_store(request.mount_path, request.ufs_uri)
        key = ufs.key_of(request.ufs_uri)
        length = request.block_length
        self.stats.misses += 1
        self.stats.ufs_gets += 1
        _misses.add(1)
        start = request.index * request.block_size
        data = await asyncio.get_running_loop().run_in_executor(
            self._pool, ufs.get_range, key, start, length, request.etag
        )
        if len(data) != length:
            raise OutOfRange(
                f"under-store returned {len(data)} bytes for block {request.index}, "
                f"expected {length}: the object changed"
            )
        self.stats.bytes_from_ufs += length
        _bytes.add(length, {"source": "ufs"})
        if self.tier.put(request.block, data):
            self.removed.discard(request.block)
            self.added.add(request.block)
        log.debug("block_fetched", file_id=request.file_id, index=request.index, bytes=length)
        return data

    def served(self, nbytes: int, from_cache: bool) -> None:
        if from_cache:
            self.stats.bytes_from_cache += nbytes
            _bytes.add(nbytes, {"source": "cache"})

    def take_report(self) -> tuple[list[BlockId], list[BlockId]]:
        added, removed = sorted(self.added), sorted(self.removed)
        self.added, self.removed = set(), set()
        return added, removed

    def put_back_report(self, added: list[BlockId], removed: list[BlockId]) -> None:
        """A report that did not reach the master is merged into the next one."""
        for block in added:
            if block not in self.removed and block in self.tier:
                self.added.add(block)
        for block in removed:
            if block not in self.added:
                self.removed.add(block)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
