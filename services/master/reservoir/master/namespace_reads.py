"""The master's namespace reads: stats, listings, metadata loads and cache reports.

What the stored namespace answers while the mount's sync policy trusts it, and what is
checked against the under-store otherwise (`NamespaceSync`); every answer can carry the
workers holding each block (the location table, in memory).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

from reservoir.common import logs, paths
from reservoir.common.config import MasterConfig
from reservoir.common.errors import Internal, InvalidArgument, NotFound, ReservoirError
from reservoir.common.models import Inode, Mount
from reservoir.common.understore.store_schemes import scheme_of

from .directory_pages import DirectoryPages
from .listing_flights import ListingFlights
from .locality import LocalityTally, PathLocality, Place
from .locations import BlockLocationTable
from .metadata_sync import DirectoryListing, NamespaceSync, dir_inode, now_ms
from .mount_table import MountTable
from .namespace_store import NamespaceStore
from .tree_load import KeysOutOfOrder, TreeLoad

log = logs.get_logger(__name__)


class NamespaceReads:
    def __init__(
        self,
        config: MasterConfig,
        namespace: NamespaceStore,
        mounts: MountTable,
        sync: NamespaceSync,
        locations: BlockLocationTable,
    ) -> None:
        self._config = config
        self._namespace = namespace
        self._mounts = mounts
        self._sync = sync
        self._locations = locations
        self._misses = ListingFlights(sync, namespace)
        self.tree_load = TreeLoad(namespace, sync, config.metadata_load_parallelism)
        self.directories = DirectoryPages(
            namespace, config, mounts, sync, self.file_info, self.with_locations
        )

    async def load_all_metadata(self, path: str) -> None:
        if await self.tree_is_fresh(path):
            return  # loaded recently: the stored namespace is the truth
        async for _ in self.load_metadata(path, recursive=True):
            pass

    async def file_info(
        self, path: str, with_locations: bool = False, *, refresh: bool = False
    ) -> Inode:
        """A path's inode: from etcd while the mount's sync policy trusts it, else checked
        against the under-store. `refresh` checks it now, whatever the policy says."""
        path = paths.normalize(path)
        mount = self._mounts.mount_for(path)
        if mount is None:
            if path == paths.ROOT or self._mounts.children_of(path):
                return dir_inode(path, None)
            raise NotFound(f"{path}: no such file or directory (not under any mount)")
        if path == mount.path:
            return dir_inode(path, mount, mount.created_ms)
        stored = await self._namespace.get(path)
        if refresh:
            inode = await self._sync.sync_inode(mount, path)
            old = stored
            log.info(
                "inode_refreshed",
                path=path,
                changed=old is None or old.file_id != inode.file_id,
                etag=inode.etag,
                size=inode.size,
            )
            return self.with_locations(inode) if with_locations else inode
        parent = paths.parent_of(path)
        # A store that cannot list (http) has no listed directories to ask etcd about.
        lists = scheme_of(mount.uri).lists
        if stored is not None:
            inode = stored
            if self._sync.fresh(mount, inode.synced_ms) or (
                lists and await self._sync.listed(mount, parent)
            ):
                return self.with_locations(inode) if with_locations else inode
        elif lists and await self._sync.listed(mount, parent):
            # Read again: a listing stored between the two reads above wrote this path's
            # inode no later than the directory's marker.
            again = await self._namespace.get(path)
            if again is None:
                raise await self._sync.unseen(mount, path)
            return self.with_locations(again) if with_locations else again
        # Unknown or stale: one listing of the directory answers this path and its siblings.
        inode = await self._misses.lookup(mount, path, stored)
        return self.with_locations(inode) if with_locations else inode

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
            mount = self._mounts.mount_for(path)
            if mount is None or path == mount.path:
                continue  # virtual directories: answered by file_info without the store
            keyed.append((position, path))
        stored = await self._namespace.get_many([p for _, p in keyed])
        for (position, path), inode in zip(keyed, stored, strict=True):
            if inode is None:
                continue
            mount = self._mounts.mount_for(path)
            if mount is not None and self._sync.fresh(mount, inode.synced_ms):
                results[position] = self.with_locations(inode) if with_locations else inode
        # Several unknown files in one directory: one listing answers them all, where
        # a HEAD each would cost a round trip each.
        by_parent: dict[str, list[int]] = {}
        for position, path in keyed:
            if results[position] is None:
                by_parent.setdefault(paths.parent_of(path), []).append(position)
        limit = asyncio.Semaphore(self._config.metadata_load_parallelism)

        async def listed(parent: str, positions: list[int]) -> None:
            mount = self._mounts.mount_for(parent)
            if mount is None or not scheme_of(mount.uri).lists:
                return  # a store that cannot list (http) is asked file by file below
            async with limit:
                try:
                    found = (await self._sync.sync_directory(mount, parent)).by_path
                except ReservoirError:
                    return  # left to the one-by-one path below, which reports it
            for position in positions:
                path = paths.normalize(many[position])
                inode = found.get(path)
                results[position] = (
                    NotFound(f"{path}: no such file or directory")
                    if inode is None
                    else self.with_locations(inode)
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
        return self._namespace.walk(path)

    async def load_metadata(
        self, path: str, recursive: bool = True
    ) -> AsyncIterator[tuple[int, int, int, bool]]:
        """Syncs the namespace below `path` with the under-store; yields (listed, written,
        removed, done) as it goes. A tree is listed flat, subtrees side by side
        (`TreeLoad`); one level, or a store that lists keys out of order, level by level."""
        info = await self.file_info(path)
        mount = self._mounts.mount_for(info.path)
        if mount is None:
            raise InvalidArgument(f"{info.path} is above every mount; load a mount instead")
        if not info.is_dir:
            await self._sync.sync_inode(mount, info.path)
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
        stored = await self._namespace.get(path)
        if stored is not None:
            await self._namespace.put(replace(stored, tree_listed_ms=now_ms()))

    async def _load_levels(
        self, mount: Mount, top: str, recursive: bool
    ) -> AsyncIterator[tuple[int, int, int, bool]]:
        """Level by level, with bounded parallelism: a LIST per directory."""
        listed = written = removed = 0
        pending = [top]
        limit = asyncio.Semaphore(self._config.metadata_load_parallelism)

        async def one(directory: str) -> DirectoryListing:
            async with limit:
                return await self._sync.sync_directory(mount, directory)

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
        mount = self._mounts.mount_for(path)
        stored = await self._namespace.get(path)
        return (
            mount is not None
            and stored is not None
            and self._sync.fresh(mount, stored.tree_listed_ms)
        )

    async def report(self, path: str) -> dict[str, int]:
        """Files, bytes and how much of them the workers hold, for a path."""
        info = await self.file_info(path)
        if not info.is_dir:
            return self._totals([(info.size, info.block_size, info.file_id)], with_ids=True)
        totals = dict.fromkeys(("files", "bytes", "blocks", "cached_blocks", "cached_bytes"), 0)
        # Page by page, without building inodes: a data set of millions of files is never
        # in memory at once. A file's id is derived only when some block is cached at all.
        with_ids = self._locations.holds_any()
        async for page in self._namespace.walk_files(info.path, with_ids):
            for key, value in self._totals(page, with_ids).items():
                totals[key] += value
        return totals

    async def locality(self, path: str, places: dict[str, Place]) -> PathLocality:
        """Bytes of a path cached per host, zone and region (`places`: where each worker
        runs), walked as `report` walks it: a page at a time, no worker asked."""
        info = await self.file_info(path)
        tally = LocalityTally(places, self._locations)
        if not info.is_dir:
            tally.add([(info.size, info.block_size, info.file_id)])
            return tally.result(info.path)
        with_ids = self._locations.holds_any()
        async for page in self._namespace.walk_files(info.path, with_ids):
            tally.add(page)
        return tally.result(info.path)

    def _totals(self, files: list[tuple[int, int, str]], with_ids: bool) -> dict[str, int]:
        count = size_sum = blocks = cached_blocks = cached_bytes = 0
        indices = self._locations.indices
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

    def with_locations(self, inode: Inode) -> Inode:
        """`inode` with the workers holding each block: a lookup in memory. Clients ask it
        with every stat and listing they read by (to read the nearest replica), so a file
        nobody holds costs no copy."""
        if inode.is_dir or not inode.file_id:
            return inode
        held = self._locations.holders(inode.file_id)
        return inode.with_locations(held) if held else inode
