"""The namespace in the metadata store: each directory's children packed into chunks of
at most `chunk_entries` (common/metadata/inode_codec.py), so etcd holds ~40 bytes per file.

A chunk's key is its directory's group (keyspace.namespace_group) plus the last name it
may hold, so the chunk that holds a name is the first key at or after it: a stat is one
small range read (limit 1) computed from the path, listing a directory reads its group
page by page, and dropping a mount drops one range.

Writes read the chunks they change and write them back, one directory at a time under a
lock (the master is the only writer; the rewrite itself is `chunk_writer.py`). A chunk
that grows past `chunk_entries` is split; the new chunks are written before anything is
deleted, so a reader sees each name either before or after a change, never missing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Sequence

from reservoir.common import logs, paths
from reservoir.common.errors import InvalidArgument
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.inode_codec import (
    ChunkPlace,
    count_entries,
    decode_chunk,
    entry,
    file_facts,
    find_in_chunk,
)
from reservoir.common.metadata.metadata_store import MetadataStore, prefix_end
from reservoir.common.models import Inode

from .chunk_writer import CHUNK_BYTES, CHUNK_ENTRIES, ChunkWriter, DirectoryChanges
from .mount_table import MountTable
from .namespace_counts import NamespaceCounts

log = logs.get_logger(__name__)

# Chunks per page of a listing: ~5 KB each, so a page stays well under etcd's 4 MiB.
PAGE_CHUNKS = 200
# Directories a report reads at a time: etcd round trips overlap the decoding.
WALK_PARALLEL = 8


class NamespaceStore:
    def __init__(
        self,
        store: MetadataStore,
        mounts: MountTable,
        chunk_entries: int = CHUNK_ENTRIES,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self._store = store
        self._mounts = mounts
        self._page_chunks = min(store.page_keys, PAGE_CHUNKS)
        self._locks: dict[bytes, asyncio.Lock] = {}
        self._lock_users: dict[bytes, int] = defaultdict(int)
        self.counts = NamespaceCounts()
        self._chunks = ChunkWriter(
            store, self.counts, chunk_entries, chunk_bytes, self._page_chunks
        )

    def _where(self, path: str) -> tuple[bytes, ChunkPlace, str] | None:
        """A path's group, its chunk's place and its name; None outside every mount."""
        mount = self._mounts.mount_for(path)
        if mount is None or path == paths.ROOT:
            return None
        directory = paths.parent_of(path)
        group = keyspace.namespace_group(mount.path, directory)
        return group, ChunkPlace(directory, mount.path, mount.uri), path.rsplit("/", 1)[1]

    def _directory(self, directory: str) -> tuple[bytes, ChunkPlace] | None:
        mount = self._mounts.mount_for(directory)
        if mount is None:
            return None
        group = keyspace.namespace_group(mount.path, directory)
        return group, ChunkPlace(directory, mount.path, mount.uri)

    # ---- reads ------------------------------------------------------------------------

    async def get(self, path: str) -> Inode | None:
        return (await self.get_many([path]))[0]

    async def get_many(self, many: Sequence[str]) -> list[Inode | None]:
        """Stored inodes of many paths: one range read (limit 1) each, batched."""
        found: list[Inode | None] = [None] * len(many)
        asked: list[tuple[int, ChunkPlace, str]] = []
        ranges: list[tuple[bytes, bytes]] = []
        for position, path in enumerate(many):
            where = self._where(path)
            if where is None:
                continue
            group, place, name = where
            asked.append((position, place, name))
            ranges.append((group + name.encode(), prefix_end(group)))
        chunks = await self._store.first_in_ranges(ranges) if ranges else []
        for (position, place, name), chunk in zip(asked, chunks, strict=True):
            if chunk is not None:
                found[position] = find_in_chunk(chunk[1], name, place)
        return found

    async def children_pages(self, directory: str) -> AsyncIterator[list[Inode]]:
        """A directory's stored children in name order, a page of chunks at a time."""
        where = self._directory(directory)
        if where is None:
            return
        group, place = where
        async for page in self._store.scan_prefix(group, self._page_chunks):
            yield [inode for _, raw in page for inode in decode_chunk(raw, place)]

    async def children_after(self, directory: str, after: str | None, limit: int) -> list[Inode]:
        """Up to `limit` stored children of `directory` whose names sort after `after` (from
        the first when None), in name order: a page of a listing, read from the chunk that
        may hold the next name on, never the directory's earlier chunks."""
        where = self._directory(directory)
        if where is None or limit <= 0:
            return []
        group, place = where
        # A chunk's key is the last name it may hold: the chunks past `after` are the keys
        # after it (NUL sorts first, and no name holds it).
        start = group if after is None else group + after.encode() + b"\x00"
        end = prefix_end(group)
        per_read = max(1, min(self._page_chunks, limit // 64 + 1))
        found: list[Inode] = []
        while len(found) < limit:
            page = await self._store.get_range(start, end, per_read)
            for _, raw in page:
                found.extend(
                    inode
                    for inode in decode_chunk(raw, place)
                    if after is None or inode.path.rsplit("/", 1)[1] > after
                )
            if len(page) < per_read:
                break
            start = page[-1][0] + b"\x00"
        return found[:limit]

    async def children(self, directory: str) -> list[Inode]:
        return [i async for page in self.children_pages(directory) for i in page]

    async def walk(self, top: str) -> AsyncIterator[list[Inode]]:
        """Every stored inode below `top` (reachable through stored directories), in
        depth-first name order (a directory, then what is below it, then its next
        sibling), a run of entries at a time: memory holds a page per level."""
        async for page in self.children_pages(top):
            run: list[Inode] = []
            for inode in page:
                run.append(inode)
                if inode.is_dir:
                    yield run
                    run = []
                    async for below in self.walk(inode.path):
                        yield below
            if run:
                yield run

    async def walk_files(
        self, top: str, with_ids: bool, parallel: int = WALK_PARALLEL
    ) -> AsyncIterator[list[tuple[int, int, str]]]:
        """(size, block size, file_id) of every stored file below `top`, a page at a
        time, in no particular order, without building inodes (file_id '' unless
        `with_ids`): what a report of millions of files adds up. `parallel` directories
        are read at a time, so etcd's round trips overlap the decoding; memory holds a
        few pages and the directories still to visit."""
        out: asyncio.Queue[list[tuple[int, int, str]] | BaseException | None] = asyncio.Queue(
            2 * parallel
        )
        pending = [top]
        busy = 0
        moved = asyncio.Event()

        async def reader() -> None:
            nonlocal busy
            while True:
                while not pending:
                    if not busy:
                        return
                    moved.clear()
                    await moved.wait()
                where = self._directory(pending.pop())
                if where is None:
                    continue
                busy += 1
                try:
                    group, place = where
                    async for page in self._store.scan_prefix(group, self._page_chunks):
                        files: list[tuple[int, int, str]] = []
                        for _, raw in page:
                            found, directories = file_facts(raw, place, with_ids)
                            files.extend(found)
                            pending.extend(place.path_of(name) for name in directories)
                        moved.set()
                        await out.put(files)
                finally:
                    busy -= 1
                    moved.set()

        async def readers() -> None:
            try:
                await asyncio.gather(*(reader() for _ in range(max(1, parallel))))
            except asyncio.CancelledError:
                # The walker stopped reading: a put into its full queue would wait for good,
                # and so would the walker's close below.
                raise
            except Exception as exc:
                await out.put(exc)
                raise
            await out.put(None)

        task = asyncio.create_task(readers())
        try:
            while (item := await out.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # ---- writes -----------------------------------------------------------------------

    async def put(self, inode: Inode) -> None:
        await self.put_many([inode])

    async def put_many(self, inodes: Iterable[Inode]) -> None:
        await self.write(inodes, ())

    async def delete(self, path: str) -> None:
        await self.delete_many([path])

    async def delete_many(self, many: Iterable[str]) -> None:
        await self.write((), many)

    async def delete_subtree(self, path: str) -> None:
        """Deletes every stored inode below `path` (not `path` itself)."""
        groups: list[bytes] = []
        # What each group held, for the counts: read by the walk, as good as a count.
        held: dict[bytes, list[int]] = defaultdict(lambda: [0, 0])
        async for page in self.walk(path):
            for inode in page:
                parent = self._directory(paths.parent_of(inode.path))
                if parent is not None:
                    held[parent[0]][inode.is_dir] += 1
                if inode.is_dir:
                    where = self._directory(inode.path)
                    if where is not None:
                        groups.append(where[0])
        here = self._directory(path)
        if here is not None:
            groups.append(here[0])
        for group in groups:
            async with self._locked(group):
                await self._store.delete_prefix(group)
                files, directories = held.get(group, (0, 0))
                self.counts.add(group, -files, -directories)

    async def delete_mount(self, mount_path: str) -> None:
        """Deletes a mount's whole namespace, its own directory entry included."""
        prefix = keyspace.namespace_mount_prefix(mount_path)
        await self._store.delete_prefix(prefix)
        self.counts.drop_mount(prefix)

    async def count(self) -> None:
        """Counts the files and directories of the whole namespace into `counts`, a
        directory group at a time under its lock (see namespace_counts.py)."""
        self.counts.restart()
        start, end = keyspace.NAMESPACE, prefix_end(keyspace.NAMESPACE)
        while first := await self._store.get_range(start, end, 1):
            group = keyspace.namespace_group_of(first[0][0])
            mounted = {keyspace.namespace_mount_prefix(m.path) for m in self._mounts.mounts()}
            async with self._locked(group):
                files = directories = 0
                if keyspace.namespace_mount_of(group) in mounted:  # else left by an unmount
                    async for page in self._store.scan_prefix(group, self._page_chunks):
                        for _, raw in page:
                            more_files, more_directories = count_entries(raw)
                            files += more_files
                            directories += more_directories
                self.counts.group_counted(group, files, directories)
            start = prefix_end(group)
        self.counts.finish()
        log.info("namespace_counted", totals=self.counts.totals())

    async def migrate_legacy(self) -> int:
        """Moves inodes stored one JSON value per key (before chunks) into chunks, page
        by page, deleting each page once its inodes are written: a master that dies
        midway carries on from what is left. Inodes under no mount are dropped (their
        mount is gone). Returns how many inodes were moved."""
        moved = dropped = 0
        async for page in self._store.scan_prefix(keyspace.LEGACY_INODES):
            inodes = []
            for _, raw in page:
                inode = Inode.from_json(raw)
                if self._where(inode.path) is None:
                    dropped += 1
                else:
                    inodes.append(inode)
            await self.put_many(inodes)
            await self._store.delete_many([key for key, _ in page])
            moved += len(inodes)
        if moved or dropped:
            log.info("namespace_migrated", inodes=moved, dropped=dropped)
        return moved

    async def write(self, upserts: Iterable[Inode], deletes: Iterable[str]) -> None:
        """Stores `upserts` and deletes `deletes` (paths), each directory's changes in one
        read and one write of the chunks they touch."""
        changes: dict[bytes, DirectoryChanges] = {}
        for inode in upserts:
            where = self._where(inode.path)
            if where is None:
                raise InvalidArgument(f"{inode.path} lies under no mount: not stored")
            group, place, name = where
            change = changes.setdefault(group, DirectoryChanges(place))
            change.upserts[name] = entry(inode, place)
            change.deletes.discard(name)
        for path in deletes:
            where = self._where(path)
            if where is None:
                continue
            group, place, name = where
            change = changes.setdefault(group, DirectoryChanges(place))
            change.deletes.add(name)
            change.upserts.pop(name, None)
        for group, change in changes.items():
            async with self._locked(group):
                await self._chunks.rewrite(group, change)

    @contextlib.asynccontextmanager
    async def _locked(self, group: bytes) -> AsyncIterator[None]:
        lock = self._locks.setdefault(group, asyncio.Lock())
        self._lock_users[group] += 1
        try:
            async with lock:
                yield
        finally:
            self._lock_users[group] -= 1
            if not self._lock_users[group]:
                del self._lock_users[group], self._locks[group]
