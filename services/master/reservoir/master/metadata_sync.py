"""The namespace in etcd made to agree with the under-store: a directory level per LIST,
a file per HEAD. Which of the two a reader's miss costs, and how readers that miss in one
directory at once share one listing: `listing_flights.py`.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from reservoir.common import logs, paths
from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, NotFound
from reservoir.common.models import Inode, Mount, file_id_for
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.understore.under_store import ObjectInfo, UnderStore

from .found_changes import FoundChanges
from .mount_table import MountTable
from .namespace_store import NamespaceStore

log = logs.get_logger(__name__)
T = TypeVar("T")


def now_ms() -> int:
    return int(time.time() * 1000)


def _duration(ms: int) -> str:
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms / 1000:g}s"


def dir_inode(path: str, mount: Mount | None, mtime_ms: int = 0) -> Inode:
    return Inode(
        path=path,
        is_dir=True,
        mtime_ms=mtime_ms,
        mount_path=mount.path if mount else "",
        synced_ms=now_ms(),
    )


def carried(stored: Inode | None, fresh: Inode) -> Inode:
    """`fresh` with what only a write through Reservoir told of the object (its content
    type, user metadata: a listing does not say), while it is still the same object."""
    if stored is None or not stored.metadata or fresh.is_dir or stored.etag != fresh.etag:
        return fresh
    return replace(fresh, metadata=stored.metadata)


def _same(stored: Inode | None, listed: Inode) -> bool:
    """Whether a stored inode already says what a fresh listing says."""
    if stored is None:
        return False
    if listed.is_dir:
        return stored.is_dir
    return replace(stored, synced_ms=0) == replace(listed, synced_ms=0)


@dataclass(frozen=True)
class DirectoryListing:
    """One directory level as the under-store listed it, now stored in etcd."""

    children: list[Inode]
    written: int = 0
    removed: int = 0
    # False when the listing stopped at `metadata_list_max_entries`: what is not among
    # the children may still exist.
    complete: bool = True
    by_path: dict[str, Inode] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.by_path.update((c.path, c) for c in self.children)


class NamespaceSync:
    def __init__(
        self,
        namespace: NamespaceStore,
        config: MasterConfig,
        mount_table: MountTable,
        under_stores: MountedStores,
        pool: ThreadPoolExecutor,
    ) -> None:
        self._namespace = namespace
        self._config = config
        self._mount_table = mount_table
        self._under_stores = under_stores
        self._pool = pool
        # What listings, HEADs, loads and events found changed, per mount, until a sync's
        # record takes it (master/interval_sync.py).
        self.found = FoundChanges(config.sync_found_max)

    async def ufs(self, call: Callable[..., T], *args: Any) -> T:
        """A blocking under-store call, on the pool that bounds them."""
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    async def under_store(self, mount: Mount) -> UnderStore:
        return await self._under_stores.open(mount)

    @property
    def list_bound(self) -> int:
        """Entries a directory listing stops at (`metadata_list_max_entries`)."""
        return self._config.metadata_list_max_entries

    def ttl_ms(self, mount: Mount) -> int | None:
        return mount.options.sync_ttl_ms(int(self._config.metadata_ttl_s * 1000))

    def fresh(self, mount: Mount, checked_ms: int) -> bool:
        """Whether metadata checked against the under-store at `checked_ms` is still trusted."""
        ttl = self.ttl_ms(mount)
        return checked_ms > 0 and (ttl is None or now_ms() - checked_ms < ttl)

    def file_inode(self, mount: Mount, ufs: UnderStore, path: str, obj: ObjectInfo) -> Inode:
        uri = ufs.uri_of(obj.key)
        block_size = self._mount_table.block_size(mount)
        return Inode(
            path=path,
            is_dir=False,
            size=obj.size,
            mtime_ms=obj.mtime_ms,
            etag=obj.etag,
            block_size=block_size,
            file_id=file_id_for(uri, obj.etag, obj.size, block_size),
            ufs_uri=uri,
            mount_path=mount.path,
            synced_ms=now_ms(),
        )

    async def listed(self, mount: Mount, directory: str) -> bool:
        """True when `directory` was listed recently enough that its stored children are
        the truth: what is there exists, what is not does not."""
        if not paths.is_within(directory, mount.path):
            return False
        inode = await self._namespace.get(directory)
        return inode is not None and self.fresh(mount, inode.listed_ms)

    async def unseen(self, mount: Mount, path: str) -> NotFound:
        """NotFound for a path that its directory's stored listing lacks. The listing is
        trusted until the mount's sync interval has passed, so an object added to the
        under-store since is not seen yet: the message says so, and how to see it now (a
        user who has just uploaded a file would otherwise take it for a bug)."""
        directory = paths.parent_of(path)
        stored = await self._namespace.get(directory)
        listed_ms = stored.listed_ms if stored is not None else 0
        when = ""
        if listed_ms:
            moment = datetime.datetime.fromtimestamp(listed_ms / 1000, tz=datetime.UTC)
            when = f" at {moment.isoformat(timespec='seconds')}"
        ttl = self.ttl_ms(mount)
        refresh = f"`reservoir load-metadata {directory}`"
        if ttl is None:
            later = f"only after {refresh} (the mount's --metadata-sync is never)"
        else:
            later = (
                f"once the mount's metadata sync interval ({_duration(ttl)}: the mount's "
                f"--metadata-sync, default RESERVOIR_METADATA_TTL) has passed, or at once "
                f"after {refresh}"
            )
        return NotFound(
            f"{path}: no such file or directory as of the last listing of {directory}{when}; "
            f"a file added to the under-store since shows up {later}"
        )

    # ---- one path -------------------------------------------------------------------------

    async def sync_inode(self, mount: Mount, path: str) -> Inode:
        """One path checked against the under-store with a HEAD (a LIST when it is not an
        object: a directory, or nothing) and stored."""
        stored = await self._namespace.get(path)
        inode = await self.checked_inode(mount, path, stored)
        await self.store_checked(mount, stored, inode)
        return inode

    async def checked_inode(self, mount: Mount, path: str, stored: Inode | None) -> Inode:
        """`path` as the under-store has it now (a HEAD; a LIST when it is not an object),
        with what `stored`, its stored inode, carries over; not stored yet. NotFound, and
        the stored inode deleted, when it is nothing."""
        ufs = await self.under_store(mount)
        key = path[len(mount.path) + 1 :]
        try:
            obj = await self.ufs(ufs.head, key)
            return carried(stored, self.file_inode(mount, ufs, path, obj))
        except NotFound:
            if not await self.ufs(ufs.is_directory, key + "/"):
                await self._namespace.delete(path)
                if stored is not None:
                    self.found.saw_removed(mount.path)
                raise NotFound(f"{path}: no such file or directory") from None
            return dir_inode(path, mount)

    async def store_checked(self, mount: Mount, stored: Inode | None, inode: Inode) -> None:
        """Stores what `checked_inode` found in place of `stored`."""
        await self._namespace.put(inode)
        if not _same(stored, inode):
            self.found.saw(mount.path, stored, inode)

    async def sync_object(self, mount: Mount, path: str) -> Inode | None:
        """One object checked with a HEAD alone, and stored; None when it is gone (its
        file inode removed). For a caller that knows the path names an object (an S3
        event), not possibly a directory: no LIST to tell which."""
        ufs = await self.under_store(mount)
        stored = await self._namespace.get(path)
        try:
            obj = await self.ufs(ufs.head, path[len(mount.path) + 1 :])
        except NotFound:
            if stored is not None and not stored.is_dir:
                await self._namespace.delete(path)
                self.found.saw_removed(mount.path)
            return None
        inode = carried(stored, self.file_inode(mount, ufs, path, obj))
        if not _same(stored, inode):
            await self._namespace.put(inode)
            self.found.saw(mount.path, stored, inode)
        return inode

    # ---- directories ----------------------------------------------------------------------

    async def stored_children(self, path: str) -> list[Inode]:
        return await self._namespace.children(path)

    async def sync_directory(
        self, mount: Mount, path: str, *, limit: int | None = None
    ) -> DirectoryListing:
        """Lists one directory level in the under-store and makes etcd agree with it:
        changed and new children written, vanished children (and their subtrees)
        removed, the directory marked as listed. A listing cut short at `limit` only
        writes what it saw: it cannot tell what vanished, nor vouch for what is absent."""
        children, complete = await self.read_directory(mount, path, limit)
        return await self.store_directory(mount, path, children, complete)

    async def read_directory(
        self, mount: Mount, path: str, limit: int | None
    ) -> tuple[list[Inode], bool]:
        """The children the under-store lists below `path`, sorted; and whether that is
        all of them."""
        ufs = await self.under_store(mount)
        prefix = "" if path == mount.path else path[len(mount.path) + 1 :] + "/"
        started = time.perf_counter()
        listing = await self.ufs(ufs.list, prefix, limit)
        children: list[Inode] = []
        for sub in listing.prefixes:
            children.append(dir_inode(paths.join(path, sub[len(prefix) :]), mount))
        for obj in listing.objects:
            child = paths.join(path, obj.key[len(prefix) :])
            try:
                paths.normalize(child)
            except InvalidArgument:
                continue  # an object name Reservoir paths cannot express
            children.append(self.file_inode(mount, ufs, child, obj))
        children.sort(key=lambda c: c.path)
        log.debug(
            "directory_listed",
            path=path,
            entries=len(children),
            complete=listing.complete,
            seconds=round(time.perf_counter() - started, 3),
        )
        return children, listing.complete

    async def store_directory(
        self, mount: Mount, path: str, children: list[Inode], complete: bool
    ) -> DirectoryListing:
        if not children and path != mount.path:
            # The directory is gone (or never was): no listing marker for a phantom.
            known = await self._namespace.get(path)
            if known is not None and known.is_dir:
                await self._namespace.delete_subtree(path)
                await self._namespace.delete(path)
                self.found.saw_removed(mount.path)
            return DirectoryListing([])
        if not complete:
            # Files only (a stored subdirectory keeps its own listing marker), and only
            # those that changed: the rest of the directory is not known yet.
            files = [c for c in children if not c.is_dir]
            olds = await self._namespace.get_many([c.path for c in files])
            found = [
                (old, carried(old, new))
                for old, new in zip(olds, files, strict=True)
                if not _same(old, new)
            ]
            await self._namespace.put_many(new for _, new in found)
            for old, new in found:
                self.found.saw(mount.path, old, new)
            return DirectoryListing(children, written=len(found), complete=False)
        seen = {c.path for c in children}
        stored = {c.path: c for c in await self.stored_children(path)}
        children = [carried(stored.get(c.path), c) for c in children]
        gone = [old for old in stored.values() if old.path not in seen]
        for old in gone:
            if old.is_dir:
                await self._namespace.delete_subtree(old.path)
        # Unchanged children are not rewritten (the directory's listing marker vouches for
        # them); a stored directory keeps its own listing marker.
        changed = [c for c in children if not _same(stored.get(c.path), c)]
        here = replace(dir_inode(path, mount), listed_ms=now_ms())
        await self._namespace.write(changed, [old.path for old in gone])
        # After the children: the marker vouches for what is stored.
        await self._namespace.put(here)
        for child in changed:
            self.found.saw(mount.path, stored.get(child.path), child)
        self.found.saw_removed(mount.path, len(gone))
        return DirectoryListing(children, len(changed), len(gone))
