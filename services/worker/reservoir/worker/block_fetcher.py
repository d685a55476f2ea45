"""The worker's side of the under-stores: each mount's store opened as the mount is known,
a block's bytes fetched from it (within the store's budgets, counted, traced, once more on
a remount the watch has not brought yet), and the one check that a request lies under its
mount with the mount's block size."""

from __future__ import annotations

import asyncio

from opentelemetry import trace
from prometheus_client import CollectorRegistry

from reservoir.common import logs
from reservoir.common.config import UnderStoreCalls
from reservoir.common.errors import InvalidArgument, ReservoirError
from reservoir.common.models import Mount
from reservoir.common.paths import shown
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.understore.store_budgets import StoreBudgets
from reservoir.common.understore.under_store import UnderStore
from reservoir.common.understore.under_store_metrics import UnderStoreMetrics

from .counters import WorkerCounters
from .mount_table import MountTable
from .read_request import BlockRequest

log = logs.get_logger(__name__)
_tracer = trace.get_tracer("reservoir.worker")


class BlockFetcher:
    def __init__(
        self,
        settings: UnderStoreCalls,
        mounts: MountTable,
        counters: WorkerCounters,
        registry: CollectorRegistry,
    ) -> None:
        self.mounts = mounts
        self.counters = counters
        # Every GET of a budgeted mount passes its gate (store_budgets.py): the limits are
        # a decorator around the store, not a step of each route.
        # Bounds the GETs this worker has in flight to the under-store at once (taken once
        # a GET passed its budget, so one waiting for it holds none).
        self.budgets = StoreBudgets(settings, asyncio.Semaphore(settings.concurrency))
        self._stores = MountedStores.from_settings(
            settings, UnderStoreMetrics(registry, "reservoir_worker_"), self.budgets
        )
        # Each mount's store opens as soon as the mount is known, not at its first miss.
        mounts.subscribe(self._stores)

    async def open_stores(self, wait_s: float) -> None:
        """Waits (at most `wait_s`) until the mount table is loaded and the store of every
        mount in it is open. A store that fails to open is left to fail its first read."""
        try:
            async with asyncio.timeout(wait_s):
                await self.mounts.loaded.wait()
                opening = [self._stores.open(m) for m in self.mounts.known()]
                await asyncio.gather(*opening, return_exceptions=True)
        except TimeoutError:
            log.info("under_stores_still_opening", waited_s=wait_s)

    async def write_store(self, mount_path: str) -> UnderStore:
        """The store of the mount at `mount_path`, for uploading a written file's parts."""
        mount = next((m for m in self.mounts.known() if m.path == mount_path), None)
        if mount is None:  # not seen yet (a mount made a moment ago): the master knows it
            mount = await self.mounts.get(mount_path, "")
        return await self._stores.open(mount)

    async def store_of(self, request: BlockRequest) -> tuple[Mount, UnderStore]:
        """The request's mount as it is now (remounts arrive by watch) and its store,
        reopened if it changed; InvalidArgument unless the file lies under the mount and
        the request has the mount's block size. Another geometry would cache bytes no
        reader of this mount asks for (and could be sized to make a worker download whole
        objects)."""
        mount = await self.mounts.get(request.mount_path, request.ufs_uri)
        if not request.ufs_uri.startswith(mount.uri):
            raise InvalidArgument(
                f"ufs_uri is not under the mount {request.mount_path}: {shown(request.ufs_uri)}"
            )
        if mount.options.block_size and request.block_size != mount.options.block_size:
            raise InvalidArgument(
                f"block_size {request.block_size} disagrees with the mount at "
                f"{mount.path} ({mount.options.block_size})"
            )
        return mount, await self._stores.open(mount)

    async def get_into(
        self, mount: Mount, ufs: UnderStore, request: BlockRequest, out: memoryview
    ) -> int:
        """The block's bytes from the mount's store, received into `out`; how many. A read
        that fails there runs once more on the new mount when the master says the mount
        was changed meanwhile (a remount the watch has not brought yet)."""
        key, start = ufs.key_of(request.ufs_uri), request.index * request.block_size
        try:
            return await self._get(ufs, key, start, out, request.etag)
        except ReservoirError as exc:
            remounted = await self.mounts.recheck(mount)
            if remounted is None or remounted.uri != mount.uri:
                raise
            log.info(
                "fetch_retried_on_remount",
                mount=mount.path,
                endpoint=remounted.options.endpoint_url,
                error=str(exc),
            )
            ufs = await self._stores.open(remounted)
            return await self._get(ufs, ufs.key_of(request.ufs_uri), start, out, request.etag)

    async def _get(self, ufs: UnderStore, key: str, start: int, out: memoryview, etag: str) -> int:
        """One ranged GET into `out`, counted (and its failure), in a span of its own."""
        attributes: dict[str, str | int] = {
            "reservoir.ufs_uri": ufs.uri_of(key),
            "reservoir.offset": start,
        }
        with _tracer.start_as_current_span("ufs_get", attributes=attributes):
            self.counters.ufs_gets += 1
            try:
                return await ufs.get_range_into(key, start, out, etag)
            except Exception:  # (not a cancellation: the worker is stopping)
                self.counters.ufs_errors += 1
                raise
