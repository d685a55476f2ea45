"""What a client knows of the cluster, from the master: mounts, file info and the live
workers, cached, and kept while the master is away so that reads go on without it.

The file info a read asks for carries the workers holding each block (the master has
them in memory): the view keeps them beside the inode, not in it (file_infos.py), so the
read planner can go to the nearest replica while `stat` answers what it always did
(locations only when asked for). The worker list and its background renewal are
worker_list.py's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from reservoir.common import config as cfg
from reservoir.common import logs, paths
from reservoir.common.errors import (
    InvalidArgument,
    ReservoirError,
    Unavailable,
    error_for_code_value,
)
from reservoir.common.models import Inode, Mount, MountOptions, WorkerRecord
from reservoir.common.placement import Placement
from reservoir.common.rpc import ChannelOpener
from reservoir.v1 import master_pb2

from .file_infos import FileInfos
from .master_link import MasterLink
from .penalty_box import PenaltyBox
from .worker_list import WorkerList

log = logs.get_logger(__name__)

_STAT_BATCH = 1000
_LISTED_MEMORY = 10_000  # directories remembered as listed, before expired ones are dropped


class ClusterView:
    """The client's master calls, and what it remembers of their answers."""

    def __init__(self, config: cfg.ClientConfig, opener: ChannelOpener) -> None:
        self.config = config
        self._master = MasterLink(config, opener)
        self._infos = FileInfos(config.file_info_ttl_s)
        self._workers = WorkerList(config, self._master)
        self._mounts: list[Mount] | None = None  # the last list fetched, however old
        self.penalties = PenaltyBox(config.worker_penalty_s)  # one for every route
        self._listed: dict[str, float] = {}  # directory -> until when its listing counts
        self._listings: dict[str, asyncio.Future[None]] = {}

    async def close(self) -> None:
        await self._master.close()

    async def call(self, method: str, request: Any, what: str) -> Any:
        """A call to the leading master (see master_link.py)."""
        return await self._master.call(method, request, what)

    async def stream(self, method: str, request: Any, what: str) -> AsyncIterator[Any]:
        async for item in self._master.stream(method, request, what):
            yield item

    async def mount(
        self, path: str, uri: str, options: MountOptions, *, replace: bool = False
    ) -> Mount:
        """Mounts `uri` at `path`; `replace` swaps out a mount already at `path`."""
        request = master_pb2.MountRequest(
            path=path,
            uri=uri,
            options=Mount(path, uri, options).to_proto().options,
            replace=replace,
        )
        response = await self.call("Mount", request, f"mount {path}")
        self._mounts = None
        if replace:
            self.forget_below(path)
        return Mount.from_proto(response.mount)

    async def unmount(self, path: str) -> None:
        await self.call("Unmount", master_pb2.UnmountRequest(path=path), f"unmount {path}")
        self._mounts = None
        self._infos.clear()

    async def mounts(self) -> list[Mount]:
        response = await self.call("ListMounts", master_pb2.ListMountsRequest(), "list mounts")
        mounts = [Mount.from_proto(m) for m in response.mounts]
        self._mounts = mounts
        return mounts

    async def workers(self, *, fresh: bool = True) -> list[WorkerRecord]:
        """The live workers. `fresh=False` is the read path's view: the last list known,
        renewed in the background once it is older than `workers_ttl_s`, so neither a
        slow nor a dead master ever holds up a read that has workers to go to."""
        return await (self._workers.fetch() if fresh else self._workers.last())

    def known_workers(self) -> list[WorkerRecord] | None:
        """The last worker list known, without a call, from any thread (see WorkerList)."""
        return self._workers.known()

    def placement(self, workers: list[WorkerRecord]) -> Placement:
        """The placement of `workers`, built once per list fetched (see WorkerList)."""
        return self._workers.placement(workers)

    def worker_failed(self, worker: WorkerRecord, error: ReservoirError) -> None:
        """Routes around one worker for a while and asks for news of the membership,
        without forgetting the others."""
        self.penalties.penalise(worker.id)
        self._workers.expire()
        log.info("worker_failed", worker=worker.id, error=str(error))

    async def stat(self, path: str, *, with_locations: bool = False, fresh: bool = False) -> Inode:
        path = paths.normalize(path)
        hit = self._infos.last(path) if path in self._infos else None
        if not fresh and not with_locations and hit is not None and self._infos.fresh(path):
            return hit
        if not fresh and not with_locations and await self._list_parent_once(path):
            listed = self.known_inode(path)
            if listed is not None:
                return listed
        try:
            message = await self.call(
                "GetFileInfo",
                master_pb2.GetFileInfoRequest(path=path, with_locations=True),
                f"stat {path}",
            )
        except Unavailable:
            if hit is None or fresh or with_locations:
                raise
            # The master is down: what we knew still reads right, because the workers and
            # the under-store check the file's identity (ETag) on every fetch.
            return hit
        inode = Inode.from_proto(message)
        plain = self.remember(inode, located=True)
        return inode if with_locations else plain

    def replicas(self, inode: Inode) -> dict[int, list[str]]:
        """The workers known to hold each block of `inode`; safe from any thread."""
        return self._infos.replicas(inode)

    def known_inode(self, path: str) -> Inode | None:
        """A cached inode while it is fresh, without a call; safe from any thread."""
        return self._infos.known_inode(path)

    async def _list_parent_once(self, path: str) -> bool:
        """On the first miss in a directory, its listing (up to `list_on_miss_max_entries`)
        in one master call, remembered like any stat: a reader going through a directory
        file by file then asks the master once, not once per file. True when this call
        listed (or waited on a listing of) the parent now."""
        limit = self.config.list_on_miss_max_entries
        parent = paths.parent_of(path)
        if limit <= 0 or parent == path:
            return False
        pending = self._listings.get(parent)
        if pending is None:
            known = self._listed.get(parent, 0.0)
            if known > time.monotonic():
                return False  # listed lately: this miss is for the master to answer
            pending = asyncio.ensure_future(self._list_directory(parent, limit))
            self._listings[parent] = pending
            pending.add_done_callback(lambda _: self._listings.pop(parent, None))
        await asyncio.shield(pending)
        return True

    async def _list_directory(self, path: str, limit: int) -> None:
        self._listed[path] = time.monotonic() + self.config.file_info_ttl_s
        if len(self._listed) > _LISTED_MEMORY:
            now = time.monotonic()
            self._listed = {p: t for p, t in self._listed.items() if t > now}
        size, token, remembered = min(limit, self.config.list_page_size), "", 0
        while remembered < limit:
            try:
                entries, token = await self.ls_page(
                    path, min(size, limit - remembered), token, with_locations=True
                )
            except ReservoirError as exc:
                # Not a directory, gone, master away: the stat that follows says what it is.
                log.debug("list_on_miss_failed", path=path, error=str(exc))
                return
            for entry in entries:
                self.remember(entry, located=True)
            remembered += len(entries)
            if not token:
                return

    async def stat_many(self, many: Sequence[str], *, with_locations: bool = False) -> list[Inode]:
        """Stats of many paths in one master call (those not already cached).
        `with_locations`: all of them asked now, with the workers holding each block."""
        if with_locations:
            return await self._stat_batches(list(many), with_locations=True)
        normal = [paths.normalize(p) for p in many]
        missing = {p for p in normal if not self._infos.fresh(p)}
        await self._stat_batches(sorted(missing), with_locations=False)
        return [self._infos.last(p) for p in normal]

    async def _stat_batches(self, many: list[str], *, with_locations: bool) -> list[Inode]:
        """The inodes of `many`, asked with their blocks' locations and remembered, in calls
        of bounded size so each finishes well within its deadline. Unless `with_locations`,
        a batch all known already is read with what we knew while the master is down."""
        found: list[Inode] = []
        for start in range(0, len(many), _STAT_BATCH):
            chunk = many[start : start + _STAT_BATCH]
            request = master_pb2.GetFileInfosRequest(paths=chunk, with_locations=True)
            try:
                response = await self.call("GetFileInfos", request, "stat many")
            except Unavailable:
                if with_locations or any(p not in self._infos for p in chunk):
                    raise
                continue  # see `stat`
            for result in response.results:
                if result.code:
                    raise error_for_code_value(result.code, result.message)
                found.append(Inode.from_proto(result.info))
                self.remember(found[-1], located=True)
        return found

    async def ls(self, path: str, *, with_locations: bool = False) -> list[Inode]:
        """Every entry, page by page; remembered with their blocks' replicas, so a read
        that follows needs no master call and goes to the nearest replica."""
        entries: list[Inode] = []
        token = ""
        while True:
            page, token = await self.ls_page(path, None, token, with_locations=True)
            for entry in page:
                plain = self.remember(entry, located=True)
                entries.append(entry if with_locations else plain)
            if not token:
                return entries

    async def ls_page(
        self,
        path: str,
        page_size: int | None = None,
        token: str = "",
        with_locations: bool = False,
    ) -> tuple[list[Inode], str]:
        """One page of a listing and the token of the next ("" after the last); `page_size`
        None is RESERVOIR_LIST_PAGE_SIZE."""
        path = paths.normalize(path)
        size = self.config.list_page_size if page_size is None else page_size
        if size < 1:
            raise InvalidArgument(f"page_size must be at least 1, not {size}")
        request = master_pb2.ListDirectoryRequest(
            path=path, with_locations=with_locations, page_size=size, page_token=token
        )
        response = await self.call("ListDirectory", request, f"ls {path}")
        return [Inode.from_proto(e) for e in response.entries], response.next_page_token

    def remember(self, inode: Inode, *, located: bool = False) -> Inode:
        """Keeps `inode` for `file_info_ttl_s`, and returns it without locations (what
        `stat` answers unless asked for them). `located`: the master was asked for its
        blocks' locations, so no location means no worker holds the block; otherwise
        the replicas known for this version of the file stay."""
        return self._infos.remember(inode, located=located)

    def forget(self, path: str) -> None:
        self._infos.forget(path)

    async def refresh(self, path: str) -> Inode:
        """A file's inode as the under-store has it now: the master checks it (HEAD) and
        stores what it finds, whatever the mount's sync interval says."""
        path = paths.normalize(path)
        message = await self.call(
            "GetFileInfo",
            master_pb2.GetFileInfoRequest(path=path, refresh=True, with_locations=True),
            f"refresh {path}",
        )
        return self.remember(Inode.from_proto(message), located=True)

    def forget_below(self, path: str) -> None:
        self._infos.forget_below(path)

    def known_mounts(self) -> list[Mount] | None:
        """The last mount list fetched, however old (None if never fetched)."""
        return None if self._mounts is None else list(self._mounts)

    def forget_workers(self) -> None:
        """The next read asks the master who the workers are (a drain changed a state)."""
        self._workers.expire()

    def forget_all(self) -> None:
        self._infos.clear()
