"""Remove, rename and make directories on writable mounts: the under-store first, then
the namespace, so that what a reader sees always exists in the store.

A rename is a server-side copy and a delete in the store (S3 has no rename), then one
namespace write that stores the destination and drops the source: readers see the old
destination or the whole new one, never a part (what `torch.distributed.checkpoint`
relies on when it renames `.metadata` into place). The copy is made from the version the
workers cache, whose blocks are then kept under the new name's identity
(`RenamedBlocks`): reading a file renamed into place costs the store nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from reservoir.common import logs, paths
from reservoir.common.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    IsADirectory,
    NotFound,
    ReservoirError,
)
from reservoir.common.models import Inode, Mount

from .metadata_sync import dir_inode, now_ms
from .renamed_blocks import RenamedBlocks
from .write_sessions import WriteSessions, writable_mount

log = logs.get_logger(__name__)


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
        if inode.is_dir:
            raise IsADirectory(f"{source}: only files are renamed")
        replaced = await self._existing(destination)
        if replaced is not None and replaced.is_dir:
            raise IsADirectory(f"{destination}: is a directory")
        writes = await self._writes.writes_of(mount)
        sync = self._writes.sync
        old_key, new_key = _key(mount, source), _key(mount, destination)
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

    async def make_dirs(self, path: str) -> Inode:
        """The directory and its parents (an empty marker object, `dir/`, keeps an empty
        directory in S3); an existing directory is returned as it is."""
        path, mount = writable_mount(self._writes.mounts, path)
        inode = await self._existing(path)
        if inode is not None:
            if not inode.is_dir:
                raise AlreadyExists(f"{path}: is a file")
            return inode
        ufs = await self._writes.sync.under_store(mount)
        await self._writes.sync.ufs(ufs.put, _key(mount, path) + "/", b"")
        made = dir_inode(path, mount, now_ms())
        parents = await self._writes.missing_parents(mount, path)
        await self._writes.namespace.write([made, *parents], ())
        log.info("directory_made", path=path)
        return made


def _key(mount: Mount, path: str) -> str:
    if not paths.is_within(path, mount.path) or path == mount.path:
        raise InvalidArgument(f"{path} is not below the mount {mount.path}")
    return path[len(mount.path) + 1 :]
