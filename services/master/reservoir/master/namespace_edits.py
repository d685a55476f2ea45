"""Remove, rename and make directories on writable mounts: the under-store first, then
the namespace, so that what a reader sees always exists in the store.

A rename is a server-side copy and a delete in the store (S3 has no rename), then one
namespace write that stores the destination and drops the source: readers see the old
destination or the whole new one, never a part; a directory's is a copy of every object
below it, then that one write at its root (what `torch.distributed.checkpoint`
relies on when it renames `.metadata` into place). The copy is made from the version the
workers cache, whose blocks are then kept under the new name's identity
(`RenamedBlocks`): reading a file renamed into place costs the store nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace

from reservoir.common import logs, paths
from reservoir.common.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    IsADirectory,
    NotADirectory,
    NotFound,
    ReservoirError,
)
from reservoir.common.models import Inode, Mount

from .metadata_sync import carried, dir_inode, now_ms
from .renamed_blocks import RenamedBlocks
from .write_sessions import WriteSessions, writable_mount

log = logs.get_logger(__name__)

# Server-side copies of a directory rename in flight at once.
_COPIES_AT_ONCE = 16


class NamespaceEdits:
    def __init__(
        self,
        writes: WriteSessions,
        file_info: Callable[[str], Awaitable[Inode]],
        drop_blocks: Callable[[list[str]], Awaitable[None]],
        blocks: RenamedBlocks,
    ) -> None:
        """`file_info`: a path's inode as the master answers a stat (checked against the
        store when not known); `drop_blocks`: evicts file ids' blocks from every worker;
        `blocks`: keeps a renamed file's cached blocks under its new identity."""
        self._writes = writes
        self._file_info = file_info
        self._drop_blocks = drop_blocks
        self._blocks = blocks

    async def _existing(self, path: str) -> Inode | None:
        try:
            return await self._file_info(path)
        except NotFound:
            return None

    async def remove(self, path: str, recursive: bool) -> int:
        """Deletes a file, or with `recursive` a directory and all below it; how many
        objects were deleted."""
        path, mount = writable_mount(self._writes.mounts, path)
        inode = await self._existing(path)
        if inode is None:
            raise NotFound(f"{path}: no such file or directory")
        writes = await self._writes.writes_of(mount)
        sync = self._writes.sync
        namespace = self._writes.namespace
        key = _key(mount, path)
        if not inode.is_dir:
            await sync.ufs(writes.delete, [key])
            await namespace.delete(path)
            if inode.file_id:
                await self._drop_blocks([inode.file_id])
            log.info("file_removed", path=path)
            return 1
        if not recursive:
            raise IsADirectory(f"{path}: is a directory (remove it recursively)")
        keys = await sync.ufs(writes.keys_below, key + "/")
        doomed = [f.file_id async for page in namespace.walk(path) for f in page if f.file_id]
        await sync.ufs(writes.delete, keys)
        await namespace.delete_subtree(path)
        await namespace.delete(path)
        if doomed:
            await self._drop_blocks(doomed)
        log.info("directory_removed", path=path, objects=len(keys))
        return len(keys)

    async def rename(self, source: str, destination: str) -> Inode:
        source, mount = writable_mount(self._writes.mounts, source)
        destination, dest_mount = writable_mount(self._writes.mounts, destination)
        if dest_mount.path != mount.path:
            raise InvalidArgument(
                f"{source} -> {destination}: a rename stays within one mount "
                f"({mount.path} and {dest_mount.path} are two)"
            )
        if source == destination:
            raise InvalidArgument(f"{source}: renamed onto itself")
        inode = await self._existing(source)
        if inode is None:
            raise NotFound(f"{source}: no such file")
        replaced = await self._existing(destination)
        if inode.is_dir:
            return await self._rename_directory(mount, inode, destination, replaced)
        if replaced is not None and replaced.is_dir:
            raise IsADirectory(f"{destination}: is a directory")
        writes = await self._writes.writes_of(mount)
        sync = self._writes.sync
        old_key, new_key = _key(mount, source), _key(mount, destination)
        if writes.limits().renames:
            # Moved in place: the bytes are the cached ones when the change token is.
            info = await sync.ufs(writes.rename, old_key, new_key)
            same_bytes = bool(inode.etag) and info.etag == inode.etag
        else:
            try:
                # The version the workers cache, or nothing: then its blocks are the copy's.
                info = await sync.ufs(writes.copy, old_key, new_key, inode.etag)
                same_bytes = bool(inode.etag)
            except Conflict:
                info = await sync.ufs(writes.copy, old_key, new_key)  # changed in the store
                same_bytes = False
            await sync.ufs(writes.delete, [old_key])
        ufs = await sync.under_store(mount)
        moved = sync.file_inode(mount, ufs, destination, info)
        if same_bytes:  # the store's copy keeps the object's metadata; so does the inode
            moved = replace(moved, metadata=inode.metadata)
        parents = await self._writes.missing_parents(mount, destination)
        await self._writes.namespace.write([moved, *parents], [source])
        if same_bytes and moved.file_id != inode.file_id:
            try:
                await self._blocks.carry(inode, moved)  # before the old id's blocks go below
            except ReservoirError as exc:
                # The rename stands: its blocks only come from the store on the first read.
                log.warning("renamed_blocks_not_carried", path=destination, error=str(exc))
        gone = [i.file_id for i in (inode, replaced) if i is not None and i.file_id]
        await self._drop_blocks([f for f in gone if f != moved.file_id])
        log.info("file_renamed", source=source, destination=destination)
        return moved

    async def _rename_directory(
        self, mount: Mount, inode: Inode, destination: str, replaced: Inode | None
    ) -> Inode:
        """Every object below the directory copied below `destination` (server-side, from
        the versions the workers cache), then one namespace change that shows the new tree
        where the old one was, then the old objects deleted. S3 has no rename: this costs a
        copy per object, no bytes through the cluster."""
        source = inode.path
        if paths.is_within(destination, source):
            raise InvalidArgument(f"{source} -> {destination}: a directory into itself")
        if replaced is not None and not replaced.is_dir:
            raise NotADirectory(f"{destination}: is a file")
        writes = await self._writes.writes_of(mount)
        sync = self._writes.sync
        namespace = self._writes.namespace
        old_prefix, new_prefix = _key(mount, source) + "/", _key(mount, destination) + "/"
        if replaced is not None:
            inside: list[str] = await sync.ufs(writes.keys_below, new_prefix)
            if inside:
                raise AlreadyExists(f"{destination}: a directory that is not empty")
        known = {f.path: f async for page in namespace.walk(source) for f in page}
        keys = await sync.ufs(writes.keys_below, old_prefix)
        ufs = await sync.under_store(mount)
        slots = asyncio.Semaphore(_COPIES_AT_ONCE)

        async def copy(key: str) -> tuple[Inode | None, Inode]:
            old = known.get(paths.join(source, key[len(old_prefix) :]))
            new_path = paths.join(destination, key[len(old_prefix) :])
            async with slots:
                try:
                    etag = old.etag if old is not None else ""
                    info = await sync.ufs(
                        writes.copy, key, new_prefix + key[len(old_prefix) :], etag
                    )
                except Conflict:  # changed in the store behind Reservoir: copy what is there
                    info = await sync.ufs(writes.copy, key, new_prefix + key[len(old_prefix) :])
                    old = None
            moved = carried(old, sync.file_inode(mount, ufs, new_path, info))
            return old, moved

        # Empty "directory" objects (`dir/`, left by other tools) are not carried over.
        markers = {k for k in keys if k.endswith("/")}
        copied = await asyncio.gather(*(copy(k) for k in keys if k not in markers))
        now = now_ms()
        directories = {paths.parent_of(moved.path) for _, moved in copied} | {destination}
        directories |= {
            paths.join(destination, k[len(old_prefix) :].rstrip("/"))
            for k in markers
            if k != old_prefix
        }
        for directory in list(directories):
            while directory != destination and paths.is_within(directory, destination):
                directory = paths.parent_of(directory)
                directories.add(directory)
        made = [dir_inode(d, mount, now) for d in sorted(directories)]
        await namespace.put_many([moved for _, moved in copied] + made[1:])
        parents = await self._writes.missing_parents(mount, destination)
        # The switch: the new tree's root appears and the old one's goes in one write.
        await namespace.write([made[0], *parents], [source])
        await namespace.delete_subtree(source)
        for old, moved in copied:
            if old is not None and old.file_id and moved.file_id != old.file_id:
                try:
                    await self._blocks.carry(old, moved)
                except ReservoirError as exc:
                    log.warning("renamed_blocks_not_carried", path=moved.path, error=str(exc))
        await sync.ufs(writes.delete, keys)
        gone = [f.file_id for f in known.values() if f.file_id]
        kept = {moved.file_id for _, moved in copied}
        await self._drop_blocks([f for f in gone if f not in kept])
        log.info("directory_renamed", source=source, destination=destination, objects=len(keys))
        return made[0]

    async def make_dirs(self, path: str) -> Inode:
        """The directory and its parents: an empty marker object (`dir/`) keeps it in S3
        while it is empty, and goes when its first file is published (WriteSessions), so
        none is left beside files (as s3fs leaves none). An existing directory is returned
        as it is."""
        path, mount = writable_mount(self._writes.mounts, path)
        inode = await self._existing(path)
        if inode is not None:
            if not inode.is_dir:
                raise AlreadyExists(f"{path}: is a file")
            return inode
        ufs = await self._writes.sync.under_store(mount)
        marker = _key(mount, path) + "/"
        await self._writes.sync.ufs(ufs.put, marker, b"")
        self._writes.markers.add((mount.path, marker))
        made = dir_inode(path, mount, now_ms())
        parents = await self._writes.missing_parents(mount, path)
        await self._writes.namespace.write([made, *parents], ())
        log.info("directory_made", path=path)
        return made


def _key(mount: Mount, path: str) -> str:
    if not paths.is_within(path, mount.path) or path == mount.path:
        raise InvalidArgument(f"{path} is not below the mount {mount.path}")
    return path[len(mount.path) + 1 :]
