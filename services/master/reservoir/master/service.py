"""The master's decisions: mounts, namespace, membership and block locations.

All state lives in the metadata store; what the master keeps in memory (mount table,
location table, live workers) is a cache of it, rebuilt at start.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

from reservoir.common import keyspace, logs, paths
from reservoir.common.config import MasterConfig
from reservoir.common.errors import (
    Internal,
    InvalidArgument,
    NotADirectory,
    NotFound,
    ReservoirError,
)
from reservoir.common.metadata_store import Lease, MetadataStore
from reservoir.common.models import Inode, Mount, MountOptions, WorkerRecord, file_id_for
from reservoir.common.mounted_stores import MountedStores, open_under_store
from reservoir.common.rpc import ChannelOpener
from reservoir.common.under_store import BodyRetry, ObjectInfo, UnderStore
from reservoir.common.worker_registry import WorkerRegistry

from .cache_rules import CacheRules
from .jobs import LoadJobs
from .locations import BlockLocationTable
from .mount_policy import MountPolicy
from .mount_table import MountTable
from .worker_link import WorkerLink

log = logs.get_logger(__name__)
T = TypeVar("T")


def _now_ms() -> int:
    return int(time.time() * 1000)


def _same(stored: Inode | None, listed: Inode) -> bool:
    """Whether a stored inode already says what a fresh listing says."""
    if stored is None:
        return False
    if listed.is_dir:
        return stored.is_dir
    return replace(stored, synced_ms=0) == replace(listed, synced_ms=0)


class MasterService:
    def __init__(
        self, store: MetadataStore, config: MasterConfig, opener: ChannelOpener | None = None
    ) -> None:
        self._store = store
        self._config = config
        self.mount_table = MountTable(
            store,
            MountPolicy(config.allowed_schemes, config.allowed_endpoints),
            config.default_block_size,
        )
        self._under_stores = MountedStores(
            config.ufs_timeout_s,
            config.ufs_retries,
            config.ufs_concurrency,
            BodyRetry(
                config.ufs_body_retries, config.ufs_retry_backoff_s, config.ufs_retry_backoff_max_s
            ),
        )
        self._registry = WorkerRegistry(store)
        self.locations = BlockLocationTable(store)
        # Returned with every block report: a worker that sees a new one re-sends its
        # whole content, so a restarted master's table is exact within seconds.
        self.epoch = f"{_now_ms()}-{uuid.uuid4().hex[:8]}"
        self._leases: dict[str, Lease] = {}
        self._worker_link = WorkerLink(config.load_timeout_s, opener, config.rpc_timeout_s)
        # boto3 blocks: under-store calls run on a pool of their own, sized by a setting
        # (asyncio's default pool is small on small machines).
        self._pool = ThreadPoolExecutor(config.ufs_concurrency, thread_name_prefix="ufs")
        self.jobs = LoadJobs(
            store, config, namespace=self, loader=self._worker_link, locations=self.locations
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

    async def start(self) -> None:
        await self.mount_table.load()
        await self.locations.load()
        await self.refresh_workers()
        await self.jobs.resume()
        log.info("master_state_loaded", mounts=len(self.mount_table))

    async def close(self) -> None:
        await self.jobs.close()
        await self._worker_link.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _ufs(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    async def load_all_metadata(self, path: str) -> None:
        if await self.tree_is_fresh(path):
            return  # loaded recently: the stored namespace is the truth
        async for _ in self.load_metadata(path, recursive=True):
            pass

    # ---- mounts -------------------------------------------------------------------------

    def _under_store(self, mount: Mount) -> UnderStore:
        return self._under_stores.for_mount(mount)

    async def mount(
        self, path: str, uri: str, options: MountOptions, *, replace: bool = False
    ) -> Mount:
        """Mounts `uri` at `path`. `replace` swaps out a mount already there: the new store
        is checked first (a failing one leaves the old mount alone), then the namespace
        below `path` is dropped, to be read again from the new store. Workers follow the
        mounts in etcd, so their next request uses the new mount."""
        # Refused before anything is contacted: a refused under-store gets no request.
        path, options = self.mount_table.admit(path, uri, options)
        # Fail fast at mount time: one attempt, so a wrong endpoint is reported in seconds.
        probe = open_under_store(uri, self._under_stores.settings(options, retries=1))
        async with self.mount_table.lock:
            old = self.mount_table.check_place(path, replace)
            await self._ufs(probe.check)
            mount = Mount(path=path, uri=probe.uri, options=options, created_ms=_now_ms())
            await self.mount_table.put(mount)
            if old is not None:
                # Inodes (ETags, sizes, block sizes) and listing marks came from the old store.
                await self._store.delete(keyspace.inode_key(path))
                await self._delete_subtree(path, exhaustive=True)
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
            await self._store.delete(keyspace.inode_key(path))
            await self._delete_subtree(path, exhaustive=True)
            self._under_stores.forget(path)
        log.info("unmounted", path=path)

    def mounts(self) -> list[Mount]:
        return self.mount_table.mounts()

    # ---- namespace ----------------------------------------------------------------------

    def _fresh(self, mount: Mount, checked_ms: int) -> bool:
        """Whether metadata checked against the under-store at `checked_ms` is still trusted."""
        ttl = mount.options.sync_ttl_ms(int(self._config.metadata_ttl_s * 1000))
        return checked_ms > 0 and (ttl is None or _now_ms() - checked_ms < ttl)

    def _file_inode(self, mount: Mount, ufs: UnderStore, path: str, obj: ObjectInfo) -> Inode:
        uri = ufs.uri_of(obj.key)
        return Inode(
            path=path,
            is_dir=False,
            size=obj.size,
            mtime_ms=obj.mtime_ms,
            etag=obj.etag,
            block_size=self.mount_table.block_size(mount),
            file_id=file_id_for(uri, obj.etag, obj.size, self.mount_table.block_size(mount)),
            ufs_uri=uri,
            mount_path=mount.path,
            synced_ms=_now_ms(),
        )

    @staticmethod
    def _dir_inode(path: str, mount: Mount | None, mtime_ms: int = 0) -> Inode:
        return Inode(
            path=path,
            is_dir=True,
            mtime_ms=mtime_ms,
            mount_path=mount.path if mount else "",
            synced_ms=_now_ms(),
        )

    async def file_info(
        self, path: str, with_locations: bool = False, *, refresh: bool = False
    ) -> Inode:
        """A path's inode: from etcd while the mount's sync policy trusts it, else checked
        against the under-store. `refresh` checks it now, whatever the policy says."""
        path = paths.normalize(path)
        mount = self.mount_table.mount_for(path)
        if mount is None:
            if path == paths.ROOT or self.mount_table.children_of(path):
                return self._dir_inode(path, None)
            raise NotFound(f"{path}: no such file or directory (not under any mount)")
        if path == mount.path:
            return self._dir_inode(path, mount, mount.created_ms)
        raw = await self._store.get(keyspace.inode_key(path))
        if refresh:
            inode = await self._sync_inode(mount, path)
            old = Inode.from_json(raw) if raw is not None else None
            log.info(
                "inode_refreshed",
                path=path,
                changed=old is None or old.file_id != inode.file_id,
                etag=inode.etag,
                size=inode.size,
            )
            return self._with_locations(inode) if with_locations else inode
        if raw is not None:
            inode = Inode.from_json(raw)
            if self._fresh(mount, inode.synced_ms) or await self._parent_listed(mount, path):
                return self._with_locations(inode) if with_locations else inode
        elif await self._parent_listed(mount, path):
            raise NotFound(f"{path}: no such file or directory")
        inode = await self._sync_inode(mount, path)
        return self._with_locations(inode) if with_locations else inode

    async def _parent_listed(self, mount: Mount, path: str) -> bool:
        """True when the parent directory was listed recently enough that its stored
        children are the truth: what is there exists, what is not does not."""
        parent = paths.parent_of(path)
        if not paths.is_within(parent, mount.path):
            return False
        raw = await self._store.get(keyspace.inode_key(parent))
        return raw is not None and self._fresh(mount, Inode.from_json(raw).listed_ms)

    async def _sync_inode(self, mount: Mount, path: str) -> Inode:
        ufs = self._under_store(mount)
        key = path[len(mount.path) + 1 :]
        try:
            obj = await self._ufs(ufs.head, key)
            inode = self._file_inode(mount, ufs, path, obj)
        except NotFound:
            listing = await self._ufs(ufs.list, key + "/")
            if not listing.objects and not listing.prefixes:
                await self._store.delete(keyspace.inode_key(path))
                raise NotFound(f"{path}: no such file or directory") from None
            inode = self._dir_inode(path, mount)
        await self._store.put(keyspace.inode_key(path), inode.to_json())
        return inode

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
        raws = await self._store.get_many([keyspace.inode_key(p) for _, p in keyed])
        for (position, path), raw in zip(keyed, raws, strict=True):
            if raw is None:
                continue
            inode = Inode.from_json(raw)
            mount = self.mount_table.mount_for(path)
            if mount is not None and self._fresh(mount, inode.synced_ms):
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
                    children, _, _ = await self._sync_directory(mount, parent)
                except ReservoirError:
                    return  # left to the one-by-one path below, which reports it
            found = {c.path: c for c in children}
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
        info = await self.file_info(path)
        if not info.is_dir:
            raise NotADirectory(f"{info.path}: not a directory")
        path = info.path
        entries: dict[str, Inode] = {
            name: self._dir_inode(paths.join(path, name), None)
            for name in self.mount_table.children_of(path)
        }
        mount = self.mount_table.mount_for(path)
        if mount is not None:
            stored = await self._store.get(keyspace.inode_key(path))
            if stored is not None and self._fresh(mount, Inode.from_json(stored).listed_ms):
                children = await self._stored_children(path)
            else:
                children, _, _ = await self._sync_directory(mount, path)
            entries.update((c.path.rsplit("/", 1)[1], c) for c in children)
        result = [entries[name] for name in sorted(entries)]
        if with_locations:
            result = [self._with_locations(i) for i in result]
        return result

    async def _stored_children(self, path: str) -> list[Inode]:
        pairs = await self._store.get_prefix(keyspace.inode_children_prefix(path))
        return [Inode.from_json(v) for _, v in pairs]

    async def subtree(self, path: str) -> list[Inode]:
        """Every stored inode below `path`, level by level."""
        found: list[Inode] = []
        for level in range(keyspace.depth(path) + 1, keyspace.MAX_DEPTH):
            pairs = await self._store.get_prefix(keyspace.inode_level_prefix(path, level))
            if not pairs:
                break  # a level with nothing below this directory has no deeper levels
            found.extend(Inode.from_json(v) for _, v in pairs)
        return found

    async def _delete_subtree(self, path: str, *, exhaustive: bool = False) -> None:
        """Deletes every stored inode below `path`. `exhaustive` also reaches inodes
        stored without their parents (stat of a deep path), at the cost of a call per level."""
        for level in range(keyspace.depth(path) + 1, keyspace.MAX_DEPTH):
            prefix = keyspace.inode_level_prefix(path, level)
            if not exhaustive and not await self._store.get_prefix(prefix):
                break
            await self._store.delete_prefix(prefix)

    async def _sync_directory(self, mount: Mount, path: str) -> tuple[list[Inode], int, int]:
        """Lists one directory level in the under-store and makes etcd agree with it:
        changed and new children written, vanished children (and their subtrees)
        removed, the directory marked as listed. Returns (children, written, removed)."""
        ufs = self._under_store(mount)
        prefix = "" if path == mount.path else path[len(mount.path) + 1 :] + "/"
        listing = await self._ufs(ufs.list, prefix)
        children: list[Inode] = []
        for sub in listing.prefixes:
            children.append(self._dir_inode(paths.join(path, sub[len(prefix) :]), mount))
        for obj in listing.objects:
            child = paths.join(path, obj.key[len(prefix) :])
            try:
                paths.normalize(child)
            except InvalidArgument:
                continue  # an object name Reservoir paths cannot express
            children.append(self._file_inode(mount, ufs, child, obj))
        if not children and path != mount.path:
            # The directory is gone (or never was): no listing marker for a phantom.
            raw = await self._store.get(keyspace.inode_key(path))
            if raw is not None and Inode.from_json(raw).is_dir:
                await self._delete_subtree(path)
                await self._store.delete(keyspace.inode_key(path))
            return [], 0, 0
        seen = {c.path for c in children}
        stored = {c.path: c for c in await self._stored_children(path)}
        gone = [old for old in stored.values() if old.path not in seen]
        for old in gone:
            if old.is_dir:
                await self._delete_subtree(old.path)
        await self._store.delete_many([keyspace.inode_key(old.path) for old in gone])
        # Unchanged children are not rewritten (the directory's listing marker vouches for
        # them); a stored directory keeps its own listing marker.
        changed = [c for c in children if not _same(stored.get(c.path), c)]
        here = replace(self._dir_inode(path, mount), listed_ms=_now_ms())
        await self._store.put_many(
            [(keyspace.inode_key(i.path), i.to_json()) for i in changed]
            + [(keyspace.inode_key(path), here.to_json())]
        )
        return sorted(children, key=lambda c: c.path), len(changed), len(gone)

    async def load_metadata(
        self, path: str, recursive: bool = True
    ) -> AsyncIterator[tuple[int, int, int, bool]]:
        """Syncs the namespace below `path` with the under-store, level by level with
        bounded parallelism; yields (listed, written, removed, done) as it goes."""
        info = await self.file_info(path)
        mount = self.mount_table.mount_for(info.path)
        if mount is None:
            raise InvalidArgument(f"{info.path} is above every mount; load a mount instead")
        if not info.is_dir:
            await self._sync_inode(mount, info.path)
            yield (1, 1, 0, True)
            return
        listed = written = removed = 0
        pending = [info.path]
        limit = asyncio.Semaphore(self._config.metadata_load_parallelism)

        async def one(directory: str) -> tuple[list[Inode], int, int]:
            async with limit:
                return await self._sync_directory(mount, directory)

        while pending:
            batch, pending = pending, []
            for children, changed, gone in await asyncio.gather(*(one(d) for d in batch)):
                listed += len(children)
                written += changed
                removed += gone
                if recursive:
                    pending.extend(c.path for c in children if c.is_dir)
            yield (listed, written, removed, False)
        if recursive:
            raw = await self._store.get(keyspace.inode_key(info.path))
            if raw is not None:
                top = replace(Inode.from_json(raw), tree_listed_ms=_now_ms())
                await self._store.put(keyspace.inode_key(info.path), top.to_json())
        yield (listed, written, removed, True)

    async def tree_is_fresh(self, path: str) -> bool:
        """True when a recursive metadata load of `path` is recent enough to trust."""
        path = paths.normalize(path)
        mount = self.mount_table.mount_for(path)
        raw = await self._store.get(keyspace.inode_key(path))
        return (
            mount is not None
            and raw is not None
            and self._fresh(mount, Inode.from_json(raw).tree_listed_ms)
        )

    async def report(self, path: str) -> dict[str, int]:
        """Files, bytes and how much of them the workers hold, for a path."""
        info = await self.file_info(path)
        if info.is_dir:
            files = [i for i in await self.subtree(info.path) if not i.is_dir]
        else:
            files = [info]
        totals = {"files": 0, "bytes": 0, "blocks": 0, "cached_blocks": 0, "cached_bytes": 0}
        for inode in files:
            holders = self.locations.holders(inode.file_id)
            totals["files"] += 1
            totals["bytes"] += inode.size
            totals["blocks"] += inode.block_count
            for index in holders:
                if index < inode.block_count:
                    totals["cached_blocks"] += 1
                    totals["cached_bytes"] += inode.block_length(index)
        return totals

    def _with_locations(self, inode: Inode) -> Inode:
        if inode.is_dir or not inode.file_id:
            return inode
        return inode.with_locations(self.locations.holders(inode.file_id))

    # ---- workers and block locations ----------------------------------------------------

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
