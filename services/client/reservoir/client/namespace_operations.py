"""The namespace as a user asks for it, each call through `ClusterView` (which remembers
what the master answered): mounts, the live workers and masters, stat and listings, and
the namespace changes of writable mounts (remove, rename, make directories). A part of
`AsyncClient`, kept apart so the facade's own file holds the read and write paths."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from reservoir.common import paths
from reservoir.common.metadata.page_tokens import page_token
from reservoir.common.models import Inode, MasterRecord, Mount, MountOptions, WorkerRecord
from reservoir.v1 import master_pb2

from .cluster_view import ClusterView


class NamespaceOperations:
    _view: ClusterView  # the AsyncClient's

    async def mount(
        self,
        path: str,
        uri: str,
        *,
        endpoint_url: str = "",
        region: str = "",
        block_size: int = 0,
        credentials: str = "",
        metadata_ttl_ms: int = 0,
        metadata_sync: str = "",
        replace: bool = False,
        writable: bool = False,
        events_queue_url: str = "",
        quota_bytes: int = 0,
        priority: str = "",
        idle_ttl_ms: int = 0,
        max_requests_per_s: int = 0,
        max_bytes_per_s: int = 0,
        max_in_flight: int = 0,
    ) -> Mount:
        """Mounts `uri` at `path`; `replace` swaps out a mount already at `path`;
        `writable`: files may be written, renamed and removed through Reservoir;
        `events_queue_url`: an SQS queue of the bucket's S3 event notifications;
        `quota_bytes`, `priority` and `idle_ttl_ms`: see `Client.mount`;
        `max_requests_per_s`, `max_bytes_per_s`, `max_in_flight`: what all workers together
        may ask of the under-store (0 = unlimited)."""
        options = MountOptions(
            endpoint_url,
            region,
            block_size,
            credentials,
            metadata_ttl_ms,
            metadata_sync,
            writable,
            quota_bytes=quota_bytes,
            priority=priority,
            idle_ttl_ms=idle_ttl_ms,
            events_queue_url=events_queue_url,
            max_requests_per_s=max_requests_per_s,
            max_bytes_per_s=max_bytes_per_s,
            max_in_flight=max_in_flight,
        )
        return await self._view.mount(path, uri, options, replace=replace)

    async def unmount(self, path: str) -> None:
        """Removes the mount at `path` (the under-store keeps its objects)."""
        await self._view.unmount(path)

    async def mounts(self) -> list[Mount]:
        """Every mount, by path."""
        return await self._view.mounts()

    async def workers(self, *, fresh: bool = True) -> list[WorkerRecord]:
        """The live workers; `fresh=False` may answer from the list this client last saw."""
        return list(await self._view.workers(fresh=fresh))

    async def masters(self) -> list[MasterRecord]:
        """The cluster's masters (leader first) as etcd knows them: address, role, since
        when, and term. Any master answers, a standby too."""
        reply = await self._view.call("ListMasters", master_pb2.ListMastersRequest(), "masters")
        return [MasterRecord.from_proto(m) for m in reply.masters]

    async def stat(self, path: str, *, with_locations: bool = False, fresh: bool = False) -> Inode:
        """A file's or directory's inode (cached by this client; `fresh` asks the master
        again); `with_locations` adds the workers that hold each block."""
        return await self._view.stat(path, with_locations=with_locations, fresh=fresh)

    async def stat_many(self, many: Sequence[str], *, with_locations: bool = False) -> list[Inode]:
        """Stats of many paths, batched; `with_locations` asks the master for all of them
        now, with the workers that hold each block (what of a data set is cached)."""
        return await self._view.stat_many(many, with_locations=with_locations)

    async def ls(self, path: str, *, with_locations: bool = False) -> list[Inode]:
        """The entries of a directory in name order (NotADirectoryError for a file), all
        pages of them; remembered, so reads of them need no master call."""
        return await self._view.ls(path, with_locations=with_locations)

    async def iter_ls(
        self,
        path: str,
        *,
        page_size: int | None = None,
        with_locations: bool = False,
        start_after: str = "",
    ) -> AsyncIterator[Inode]:
        """The entries of a directory in name order, as the master sends them a page at a
        time (`page_size` entries per call; default RESERVOIR_LIST_PAGE_SIZE): the first
        arrive after one call, and the client holds one page, however big the directory.
        `start_after` (a name): only the entries whose names sort after it, found without
        listing the ones before. Errors raise where they happen, also between pages."""
        token = await self._ls_start(path, start_after)
        while True:
            entries, token = await self._view.ls_page(path, page_size, token, with_locations)
            for entry in entries:
                yield entry
            if not token:
                return

    async def _ls_start(self, path: str, start_after: str) -> str:
        """The page token a listing starts from: "" (the first page), or one that seeks
        past the names up to `start_after`, once a first page has brought the directory up
        to date with the under-store (and said it is one). Both clients' `iter_ls`."""
        if not start_after:
            return ""
        await self._view.ls_page(path, 1, "", False)
        return page_token(paths.normalize(path), start_after)

    async def _ls_page(
        self, path: str, page_size: int | None, token: str, with_locations: bool
    ) -> tuple[list[Inode], str]:
        """One page and the next page's token (for the blocking client's `iter_ls`)."""
        return await self._view.ls_page(path, page_size, token, with_locations)

    def forget(self, path: str) -> None:
        """Drops what this client remembers of `path`: the next use asks the master."""
        self._view.forget(path)

    async def refresh(self, path: str) -> Inode:
        """A file's inode as the under-store has it now, whatever the sync interval."""
        return await self._view.refresh(path)

    # ---- changes on writable mounts ------------------------------------------------------

    async def rm(self, path: str, *, recursive: bool = False) -> int:
        """Removes a file (or, `recursive`, a directory and all below it) from the store
        and the namespace; how many objects were deleted."""
        reply = await self._view.call(
            "Remove", master_pb2.RemoveRequest(path=path, recursive=recursive), f"rm {path}"
        )
        self._view.forget_below(path)
        return int(reply.removed)

    async def rename(self, source: str, destination: str) -> Inode:
        """Moves a file or a directory within its mount; readers see the destination's old
        version or the whole new one (a directory: the old tree or the new one)."""
        reply = await self._view.call(
            "Rename",
            master_pb2.RenameRequest(source=source, destination=destination),
            f"rename {source}",
        )
        self._view.forget_below(paths.normalize(source))  # a directory: all below it
        # Not remembered: the next stat learns where its blocks are (kept by the workers
        # that held the source's), which this answer does not say.
        self._view.forget_below(paths.normalize(destination))
        return Inode.from_proto(reply)

    async def makedirs(self, path: str) -> Inode:
        """The directory and its parents (an existing directory is fine)."""
        reply = await self._view.call(
            "MakeDirs", master_pb2.PathRequest(path=path), f"makedirs {path}"
        )
        return Inode.from_proto(reply)
