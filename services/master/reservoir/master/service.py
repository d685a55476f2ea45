"""The master's decisions: mounts, namespace, membership and block locations.

All state lives in the metadata store; what the master keeps in memory (mount table,
location table, live workers) is a cache of it, rebuilt at start.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from prometheus_client import CollectorRegistry

from reservoir.common import logs, paths
from reservoir.common.config import MasterConfig
from reservoir.common.errors import (
    Internal,
    InvalidArgument,
    NotFound,
    ReservoirError,
)
from reservoir.common.metadata.metadata_store import Lease, MetadataStore
from reservoir.common.metadata.worker_registry import WorkerRegistry
from reservoir.common.models import Inode, Mount, MountOptions, WorkerRecord
from reservoir.common.rpc import ChannelOpener
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.understore.under_store_metrics import UnderStoreMetrics

from .cache_rules import CacheRules
from .directory_pages import DirectoryPages
from .job_counters import LoadJobCounters
from .jobs import LoadJobs
from .locations import BlockLocationTable
from .metadata_sync import DirectoryListing, NamespaceSync, dir_inode, now_ms
from .mount_policy import MountPolicy
from .mount_table import MountTable
from .namespace_edits import NamespaceEdits
from .namespace_store import NamespaceStore
from .renamed_blocks import RenamedBlocks
from .tree_load import KeysOutOfOrder, TreeLoad
from .worker_link import WorkerLink
from .write_sessions import WriteSessions

log = logs.get_logger(__name__)


class MasterService:
    def __init__(
        self,
        store: MetadataStore,
        config: MasterConfig,
        opener: ChannelOpener | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        """`registry`: where the master's under-store and load-job instruments go (the one
        /metrics serves); by default one of their own that no one reads."""
        registry = CollectorRegistry() if registry is None else registry
        self._store = store
        self._config = config
        self.mount_table = MountTable(
            store,
            MountPolicy(config.allowed_schemes, config.allowed_endpoints),
            config.default_block_size,
        )
        self._under_stores = MountedStores.from_settings(
            config.ufs, UnderStoreMetrics(registry, "reservoir_master_")
        )
        self._registry = WorkerRegistry(store)
        self.locations = BlockLocationTable(store)
        # Returned with every block report: a worker that sees a new one re-sends its
        # whole content, so a restarted master's table is exact within seconds.
        self.epoch = f"{now_ms()}-{uuid.uuid4().hex[:8]}"
        self._leases: dict[str, Lease] = {}
        self._worker_link = WorkerLink(config.load_timeout_s, opener, config.rpc_timeout_s)
        # boto3 blocks: under-store calls run on a pool of their own, sized by a setting
        # (asyncio's default pool is small on small machines).
        self._pool = ThreadPoolExecutor(config.ufs.concurrency, thread_name_prefix="ufs")
        self.namespace = NamespaceStore(store, self.mount_table)
        self.sync = NamespaceSync(
            self.namespace, config, self.mount_table, self._under_stores, self._pool
        )
        self.tree_load = TreeLoad(self.namespace, self.sync, config.metadata_load_parallelism)
        self.directories = DirectoryPages(
            self.namespace,
            config,
            self.mount_table,
            self.sync,
            self.file_info,
            self._with_locations,
        )
        self.jobs = LoadJobs(
            store,
            config,
            namespace=self,
            loader=self._worker_link,
            locations=self.locations,
            counters=LoadJobCounters(registry),
        )
        self.cache_rules = CacheRules(
            store,
            config,
            namespace=self,
            mounts=self.mount_table,
            workers=self._worker_link,
            jobs=self.jobs,
            locations=self.locations,
        )
        self.writes = WriteSessions(
            store, config, self.mount_table, self.namespace, self.sync, self.drop_blocks
        )
        self.edits = NamespaceEdits(
            self.writes,
            self.file_info,
            self.drop_blocks,
            RenamedBlocks(self.locations, self._worker_link, self),
        )

    async def start(self) -> None:
        """Loads the state from etcd and resumes the load jobs: what a master does when it
        starts to lead. Called again after `stand_down`, it starts afresh."""
        # A new epoch: every worker re-sends its whole content to this leader.
        self.epoch = f"{now_ms()}-{uuid.uuid4().hex[:8]}"
        await self.mount_table.load()
        for mount in self.mount_table.mounts():
            self._under_stores.prepare(mount)  # before the first stat needs it
        await self.namespace.migrate_legacy()
        await self.locations.load()
        await self.refresh_workers()
        await self.jobs.resume()
        self.writes.start()  # aborts the uploads of writers that died, this master's or not
        log.info("master_state_loaded", mounts=len(self.mount_table))

    async def metadata_health(self) -> None:
        """Raises what a write to the metadata store would meet now (etcd out of space,
        unreachable); returns when it takes writes."""
        await self._store.health()

    async def stand_down(self) -> None:
        """Stops what only the leader does: load jobs stop with their records as they are,
        for the next leader to resume; the last block reports go to etcd first."""
        await self.writes.stop()
        await self.jobs.close()
        try:
            await self.flush_locations()
        except ReservoirError as exc:
            log.warning("final_location_flush_failed", error=str(exc))

    async def close(self) -> None:
        await self.writes.stop()
        await self.jobs.close()
        await self._worker_link.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def load_all_metadata(self, path: str) -> None:
        if await self.tree_is_fresh(path):
            return  # loaded recently: the stored namespace is the truth
        async for _ in self.load_metadata(path, recursive=True):
            pass

    # ---- mounts -------------------------------------------------------------------------

    async def mount(
        self, path: str, uri: str, options: MountOptions, *, replace: bool = False
    ) -> Mount:
        """Mounts `uri` at `path`. The very same mount again (same URI and options) is a
        no-op that returns the mount as it is, unless `replace`. `replace` swaps out a mount
        already there: the new store is checked first (a failing one leaves the old mount
        alone), then the namespace below `path` is dropped, to be read again from the new
        store. Workers follow the mounts in etcd, so their next request uses the new mount."""
        # Refused before anything is contacted: a refused under-store gets no request.
        path, options = self.mount_table.admit(path, uri, options)
        # Fail fast at mount time: one attempt, so a wrong endpoint is reported in seconds.
        probe = await self.sync.ufs(self._under_stores.probe, uri, options)
        async with self.mount_table.lock:
            same = None if replace else self.mount_table.already(path, probe.uri, options)
            if same is not None:
                log.info("already mounted", path=path, uri=same.uri)
                return same
            old = self.mount_table.check_place(path, replace)
            await self.sync.ufs(probe.check)
            mount = Mount(path=path, uri=probe.uri, options=options, created_ms=now_ms())
            await self.mount_table.put(mount)
            self._under_stores.prepare(mount)
            if old is not None:
                # Inodes (ETags, sizes, block sizes) and listing marks came from the old store.
                await self.namespace.delete_mount(path)
        log.info(
            "remounted" if old else "mounted",
            path=path,
            uri=mount.uri,
            endpoint=options.endpoint_url,
            block_size=options.block_size,
            was_uri=old.uri if old else None,
            was_endpoint=old.options.endpoint_url if old else None,
        )
        return mount

    async def unmount(self, path: str) -> None:
        path = paths.normalize(path)
        async with self.mount_table.lock:
            await self.mount_table.remove(path)
            await self.namespace.delete_mount(path)
            self._under_stores.forget(path)
        log.info("unmounted", path=path)

    def mounts(self) -> list[Mount]:
        return self.mount_table.mounts()

    # ---- namespace ----------------------------------------------------------------------

    async def file_info(
        self, path: str, with_locations: bool = False, *, refresh: bool = False
    ) -> Inode:
        """A path's inode: from etcd while the mount's sync policy trusts it, else checked
        against the under-store. `refresh` checks it now, whatever the policy says."""
        path = paths.normalize(path)
        mount = self.mount_table.mount_for(path)
        if mount is None:
            if path == paths.ROOT or self.mount_table.children_of(path):
                return dir_inode(path, None)
            raise NotFound(f"{path}: no such file or directory (not under any mount)")
        if path == mount.path:
            return dir_inode(path, mount, mount.created_ms)
        stored = await self.namespace.get(path)
        if refresh:
            inode = await self.sync.sync_inode(mount, path)
            old = stored
            log.info(
                "inode_refreshed",
                path=path,
                changed=old is None or old.file_id != inode.file_id,
                etag=inode.etag,
                size=inode.size,
            )
            return self._with_locations(inode) if with_locations else inode
        parent = paths.parent_of(path)
        if stored is not None:
            inode = stored
            if self.sync.fresh(mount, inode.synced_ms) or await self.sync.listed(mount, parent):
                return self._with_locations(inode) if with_locations else inode
        elif await self.sync.listed(mount, parent):
            # Read again: a listing stored between the two reads above wrote this path's
            # inode no later than the directory's marker.
            again = await self.namespace.get(path)
            if again is None:
                raise await self.sync.unseen(mount, path)
            return self._with_locations(again) if with_locations else again
        # Unknown or stale: one listing of the directory answers this path and its siblings.
        inode = await self.sync.lookup(mount, path)
        return self._with_locations(inode) if with_locations else inode

    async def file_infos(
        self, many: list[str], with_locations: bool = False
    ) -> list[Inode | ReservoirError]:
        """Many stats: cached inodes come from one batched store read; only the rest
        (missing or stale) are checked against the under-store, 16 at a time."""
        results: list[Inode | ReservoirError | None] = [None] * len(many)
        keyed: list[tuple[int, str]] = []
        for position, raw_path in enumerate(many):
            try:
                path = paths.normalize(raw_path)
            except ReservoirError as exc:
                results[position] = exc
                continue
            mount = self.mount_table.mount_for(path)
            if mount is None or path == mount.path:
                continue  # virtual directories: answered by file_info without the store
            keyed.append((position, path))
        stored = await self.namespace.get_many([p for _, p in keyed])
        for (position, path), inode in zip(keyed, stored, strict=True):
            if inode is None:
                continue
            mount = self.mount_table.mount_for(path)
            if mount is not None and self.sync.fresh(mount, inode.synced_ms):
                results[position] = self._with_locations(inode) if with_locations else inode
        # Several unknown files in one directory: one listing answers them all, where
        # a HEAD each would cost a round trip each.
        by_parent: dict[str, list[int]] = {}
        for position, path in keyed:
            if results[position] is None:
                by_parent.setdefault(paths.parent_of(path), []).append(position)
        limit = asyncio.Semaphore(self._config.metadata_load_parallelism)

        async def listed(parent: str, positions: list[int]) -> None:
            mount = self.mount_table.mount_for(parent)
            if mount is None:
                return
            async with limit:
                try:
                    found = (await self.sync.sync_directory(mount, parent)).by_path
                except ReservoirError:
                    return  # left to the one-by-one path below, which reports it
            for position in positions:
                path = paths.normalize(many[position])
                inode = found.get(path)
                results[position] = (
                    NotFound(f"{path}: no such file or directory")
                    if inode is None
                    else self._with_locations(inode)
                    if with_locations
                    else inode
                )

        await asyncio.gather(
            *(listed(parent, ps) for parent, ps in by_parent.items() if len(ps) > 1)
        )

        async def one(position: int) -> None:
            async with limit:
                try:
                    results[position] = await self.file_info(many[position], with_locations)
                except ReservoirError as exc:
                    results[position] = exc

        await asyncio.gather(*(one(i) for i, r in enumerate(results) if r is None))
        return [r if r is not None else Internal("stat lost") for r in results]

    async def list_directory(self, path: str, with_locations: bool = False) -> list[Inode]:
        """Every entry of a directory, in name order (all its pages: for callers that
        want them all; the RPC answers a page at a time, `directories.page`)."""
        return [e async for e in self.directories.entries(path, with_locations)]

    def subtree(self, path: str) -> AsyncIterator[list[Inode]]:
        """Every stored inode below `path`, a page at a time."""
        return self.namespace.walk(path)

    async def load_metadata(
        self, path: str, recursive: bool = True
    ) -> AsyncIterator[tuple[int, int, int, bool]]:
        """Syncs the namespace below `path` with the under-store; yields (listed, written,
        removed, done) as it goes. A tree is listed flat, subtrees side by side
        (`TreeLoad`); one level, or a store that lists keys out of order, level by level."""
        info = await self.file_info(path)
        mount = self.mount_table.mount_for(info.path)
        if mount is None:
            raise InvalidArgument(f"{info.path} is above every mount; load a mount instead")
        if not info.is_dir:
            await self.sync.sync_inode(mount, info.path)
            yield (1, 1, 0, True)
            return
        if recursive:
            try:
                async for counts in self.tree_load.run(mount, info.path):
                    yield (counts.listed, counts.written, counts.removed, False)
            except KeysOutOfOrder as exc:
                log.warning("metadata_load_level_by_level", path=info.path, reason=str(exc))
            else:
                await self._mark_tree_listed(info.path)
                yield (counts.listed, counts.written, counts.removed, True)
                return
        async for progress in self._load_levels(mount, info.path, recursive):
            yield progress

    async def _mark_tree_listed(self, path: str) -> None:
        stored = await self.namespace.get(path)
        if stored is not None:
            await self.namespace.put(replace(stored, tree_listed_ms=now_ms()))

    async def _load_levels(
        self, mount: Mount, top: str, recursive: bool
    ) -> AsyncIterator[tuple[int, int, int, bool]]:
        """Level by level, with bounded parallelism: a LIST per directory."""
        listed = written = removed = 0
        pending = [top]
        limit = asyncio.Semaphore(self._config.metadata_load_parallelism)

        async def one(directory: str) -> DirectoryListing:
            async with limit:
                return await self.sync.sync_directory(mount, directory)

        while pending:
            batch, pending = pending, []
            for level in await asyncio.gather(*(one(d) for d in batch)):
                listed += len(level.children)
                written += level.written
                removed += level.removed
                if recursive:
                    pending.extend(c.path for c in level.children if c.is_dir)
            yield (listed, written, removed, False)
        if recursive:
            await self._mark_tree_listed(top)
        yield (listed, written, removed, True)

    async def tree_is_fresh(self, path: str) -> bool:
        """True when a recursive metadata load of `path` is recent enough to trust."""
        path = paths.normalize(path)
        mount = self.mount_table.mount_for(path)
        stored = await self.namespace.get(path)
        return (
            mount is not None
            and stored is not None
            and self.sync.fresh(mount, stored.tree_listed_ms)
        )

    async def report(self, path: str) -> dict[str, int]:
        """Files, bytes and how much of them the workers hold, for a path."""
        info = await self.file_info(path)
        if not info.is_dir:
            return self._totals([(info.size, info.block_size, info.file_id)], with_ids=True)
        totals = dict.fromkeys(("files", "bytes", "blocks", "cached_blocks", "cached_bytes"), 0)
        # Page by page, without building inodes: a data set of millions of files is never
        # in memory at once. A file's id is derived only when some block is cached at all.
        with_ids = self.locations.holds_any()
        async for page in self.namespace.walk_files(info.path, with_ids):
            for key, value in self._totals(page, with_ids).items():
                totals[key] += value
        return totals

    def _totals(self, files: list[tuple[int, int, str]], with_ids: bool) -> dict[str, int]:
        count = size_sum = blocks = cached_blocks = cached_bytes = 0
        indices = self.locations.indices
        for size, block_size, file_id in files:
            count += 1
            size_sum += size
            n = -(-size // block_size)
            blocks += n
            if with_ids:
                for index in indices(file_id):
                    if index < n:
                        cached_blocks += 1
                        cached_bytes += min(block_size, size - index * block_size)
        return {
            "files": count,
            "bytes": size_sum,
            "blocks": blocks,
            "cached_blocks": cached_blocks,
            "cached_bytes": cached_bytes,
        }

    def _with_locations(self, inode: Inode) -> Inode:
        """`inode` with the workers holding each block: a lookup in memory. Clients ask it
        with every stat and listing they read by (to read the nearest replica), so a file
        nobody holds costs no copy."""
        if inode.is_dir or not inode.file_id:
            return inode
        held = self.locations.holders(inode.file_id)
        return inode.with_locations(held) if held else inode

    # ---- workers and block locations ----------------------------------------------------

    async def drop_blocks(self, file_ids: list[str]) -> None:
        """Evicts these files' blocks from every live worker now (an overwritten, renamed
        or removed version is never served again). A worker that cannot be reached is
        logged and left: a reader it serves meets the changed ETag and asks again."""
        if not file_ids:
            return
        workers = await self.workers()
        results = await asyncio.gather(
            *(self._worker_link.free_blocks(w, file_ids) for w in workers),
            return_exceptions=True,
        )
        for worker, result in zip(workers, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("drop_blocks_failed", worker=worker.id, error=str(result))

    async def workers(self) -> list[WorkerRecord]:
        return sorted(await self._registry.live(), key=lambda w: w.id)

    async def refresh_workers(self) -> list[WorkerRecord]:
        live = await self._registry.live()
        self._leases = {w.id: Lease(w.lease_id, 0) for w in live}
        self.locations.prune(set(self._leases))
        return live

    def report_blocks(
        self,
        worker_id: str,
        full: bool,
        added: Iterable[tuple[str, int]],
        removed: Iterable[tuple[str, int]],
    ) -> str:
        """Applies a worker's report; returns this master's epoch."""
        if not worker_id:
            raise InvalidArgument("worker_id is required")
        blocks = list(added)
        self.locations.apply(worker_id, full, blocks, list(removed))
        if full:
            log.info("full_block_report", worker=worker_id, blocks=len(blocks))
        return self.epoch

    async def flush_locations(self) -> int:
        if self.locations.pending_workers() - set(self._leases):
            await self.refresh_workers()  # a worker that joined since the last refresh
        return await self.locations.flush(self._leases)
