"""The asyncio client: Reservoir's SDK. Path resolution and what is known of the cluster
live in `ClusterView`, the read path in `BlockReader`; this facade puts them together and
adds what a user calls: reads that refresh a changed file once, batched reads of many
files, mounts, writes and worker stats. What is asked of the cluster as a whole (warm-up
jobs, datasets, drains, cache rules) is `ClusterOperations`, a part of it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence

from opentelemetry import trace

from reservoir.common import config as cfg
from reservoir.common import logs, paths
from reservoir.common.errors import (
    Conflict,
    DeadlineExceeded,
    InvalidArgument,
    IsADirectory,
    Unavailable,
)
from reservoir.common.malloc_tuning import tune_for_large_buffers
from reservoir.common.metadata.page_tokens import page_token
from reservoir.common.models import (
    Inode,
    MasterRecord,
    Mount,
    MountOptions,
    WorkerRecord,
)
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import Transport
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.worker_calls import WorkerCalls, WorkerDeadlines
from reservoir.common.write_terms import WriteTerms
from reservoir.v1 import master_pb2

from . import discovery
from .block_reader import BlockReader
from .block_source import Planner
from .cache_state import WorkerStats
from .cluster_operations import ClusterOperations
from .cluster_view import ClusterView
from .data_port import DataPortReader
from .grpc_blocks import GrpcBlocks
from .hedges import Hedges, HedgeStats
from .read_admission import MountBudgetAdmission
from .short_circuit import ShortCircuit
from .thread_reads import ThreadReads
from .under_store_blocks import UnderStoreBlocks
from .writer import NO_TERMS, Writes, WriteSession

log = logs.get_logger(__name__)
_tracer = trace.get_tracer("reservoir.client")


class AsyncClient(ClusterOperations):
    """Reservoir's asyncio SDK. One instance per process is enough; it is cheap to share.
    `master`: one address, or several masters' comma-separated (calls go to the leader)."""

    def __init__(self, master: str | None = None, config: cfg.ClientConfig | None = None) -> None:
        if config is None:
            config = discovery.client_config(master)
        elif master:
            config = dataclasses.replace(config, master=master)
        self.config = config
        if self.config.tune_malloc:
            tune_for_large_buffers()
        transport = Transport(self.config.security, CHANNEL_OPTIONS)
        # Control calls to workers (stats, written parts); the read path shares its channels.
        self._worker_calls = WorkerCalls(
            transport,
            WorkerDeadlines(
                rpc_s=self.config.rpc_timeout_s,
                write_part_s=self.config.write_part_timeout_s,
                commit_s=self.config.write_commit_timeout_s,
            ),
        )
        self._view = ClusterView(self.config, transport)
        under_stores = MountedStores.from_settings(self.config.ufs)
        # One planner for both read paths: this loop's and the blocking client's threads'.
        self._short_circuit = ShortCircuit(self.config)
        # One budget and bound for every route.
        self._hedges = Hedges(self.config, self._view.penalties)
        self.data_port = DataPortReader(self.config, self._hedges)
        planner = Planner(
            self.config, self._view, self._view.penalties, self._short_circuit, self.data_port
        )
        self._reader = BlockReader(
            self.config,
            self._view,
            planner,
            self._short_circuit,
            GrpcBlocks(self.config, self._worker_calls.channels),
            UnderStoreBlocks(
                self.config,
                self._view,
                under_stores,
                MountBudgetAdmission(self._view, self.config.ufs),
            ),
            self._hedges,
        )
        self.thread_reads = ThreadReads(self._view, planner, self._short_circuit, self.data_port)
        self._writes: Writes | None = None

    async def close(self) -> None:
        """Closes its channels and sockets; the client is not used after this."""
        await self._worker_calls.close()
        await self._view.close()
        self.data_port.close()
        if self._writes is not None:
            self._writes.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def short_circuit_bytes(self) -> int:
        """Bytes read from same-host workers' files."""
        return self._short_circuit.bytes_read

    @property
    def data_port_bytes(self) -> int:
        """Bytes read from workers' data ports (by the blocking client's threads)."""
        return self.data_port.bytes_read

    @property
    def hedge_stats(self) -> HedgeStats:
        """Block reads from workers, how many were hedged (asked elsewhere after the
        first-byte budget) and the budget now."""
        return self._hedges.stats()

    # ---- namespace (ClusterView) ------------------------------------------------------------

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

    # ---- reads --------------------------------------------------------------------------

    async def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        """Bytes [offset, offset+length) of a file; length -1 reads to the end.

        A range past the end is clipped, as a file read is; a negative offset is refused.
        """
        return b"".join(await self.read_pieces(path, offset, length))

    async def read_pieces(self, path: str, offset: int = 0, length: int = -1) -> list[memoryview]:
        """The same range as `read`, as the received buffers in order (no copy made).

        The blocking client joins them in the caller's thread: a large result allocated
        there can reuse freed heap memory, where the event loop thread's arena cannot."""
        if offset < 0 or length < -1:
            raise InvalidArgument("offset must be >= 0 and length >= -1")
        with _tracer.start_as_current_span("reservoir.read", attributes={"path": path}):
            return await self._read_path(path, offset, length)

    async def _read_path(self, path: str, offset: int, length: int) -> list[memoryview]:
        """A read by path meets a changed file at most once: the file is read again as the
        under-store has it now (see `_read_inode_pieces` for reads of an open file)."""
        inode = await self._view.stat(path)
        try:
            return await self._read_inode_pieces(inode, offset, length)
        except (Conflict, InvalidArgument):
            log.info("file_changed_refreshing", path=inode.path, etag=inode.etag)
            await self._view.refresh(path)
            return await self._reader.read_inode_pieces(await self._view.stat(path), offset, length)

    async def _read_inode_pieces(self, inode: Inode, offset: int, length: int) -> list[memoryview]:
        """A range of the file as `inode` has it. Conflict when the object changed since
        (or InvalidArgument: it was remounted with another block size, and a worker refused
        the old geometry); its inode is forgotten then, so the next stat or open sees the
        file as it is now. An open file never mixes two versions' bytes."""
        try:
            return await self._reader.read_inode_pieces(inode, offset, length)
        except (Conflict, InvalidArgument):
            self._view.forget(inode.path)
            raise

    async def read_ranges(
        self, ranges: Sequence[tuple[str, int, int]], *, return_exceptions: bool = False
    ) -> list[bytes | BaseException]:
        """Many `read(path, offset, length)`s at once, `parallelism` at a time; with
        `return_exceptions` a failed one gives its error in its place."""
        limit = asyncio.Semaphore(self.config.parallelism)

        async def one(path: str, offset: int, length: int) -> bytes:
            async with limit:
                return await self.read(path, offset, length)

        return await asyncio.gather(*(one(*r) for r in ranges), return_exceptions=return_exceptions)

    async def read_many(self, many: Sequence[str]) -> list[bytes]:
        """Whole contents of many files, small ones batched: one worker call per batch."""
        with _tracer.start_as_current_span("reservoir.read_many", attributes={"files": len(many)}):
            return await self._read_many(many)

    async def _read_many(self, many: Sequence[str]) -> list[bytes]:
        inodes = await self._view.stat_many(many)
        for inode in inodes:
            if inode.is_dir:
                raise IsADirectory(f"{inode.path}: is a directory")
        # Small files all start in one turn of the loop, so their gRPC reads ride in shared
        # `ReadBlocks` calls of up to `batch_files` (grpc_blocks.py), `parallelism` calls
        # at a time; larger ones `parallelism` at a time.
        small = asyncio.Semaphore(self.config.parallelism * max(1, self.config.batch_files))
        large = asyncio.Semaphore(self.config.parallelism)

        async def whole(inode: Inode) -> bytes:
            if inode.size == 0:
                return b""
            is_small = inode.size <= min(self.config.small_file_bytes, inode.block_size)
            async with small if is_small else large:
                return b"".join(await self._read_path(inode.path, 0, -1))

        return list(await asyncio.gather(*(whole(i) for i in inodes)))

    async def worker_stats(self, *, reachable_only: bool = False) -> list[WorkerStats]:
        """Every live worker's counters, asked concurrently. A worker that does not answer
        fails the call, or with `reachable_only` is left out (an operator's view of a
        degraded cluster: `workers -l`, `report`)."""

        async def one(worker: WorkerRecord) -> WorkerStats | None:
            try:
                stats = await self._worker_calls.stats(worker)
            except (Unavailable, DeadlineExceeded) as error:
                if not reachable_only:
                    raise
                log.info("worker_unreachable", worker=worker.id, error=str(error))
                return None
            return WorkerStats.from_proto(stats)

        answers = await asyncio.gather(*(one(w) for w in await self._view.workers()))
        return [a for a in answers if a is not None]

    # ---- writes to writable mounts (writer.py) -------------------------------------------

    async def begin_write(
        self, path: str, terms: WriteTerms = NO_TERMS, size: int | None = None
    ) -> WriteSession:
        """A file being written at `path` (see WriteSession): put its parts (or, begun
        with a `size` of at most one part, `put_whole`), then publish it, or abort.
        ReadOnly (a PermissionError) on a read-only mount; `terms`: its metadata and
        condition (FileExistsError or Conflict at the publish when it fails)."""
        if self._writes is None:
            self._writes = Writes(self.config, self._view, self._worker_calls)
        return await self._writes.begin(path, terms, size)

    async def write(self, path: str, data: bytes) -> Inode:
        """Writes the whole file and publishes it: readers see all of `data` or, until
        this returns, what was there before."""
        session = await self.begin_write(path, size=len(data))
        try:
            if session.whole is not None:
                await session.put_whole(data)
            else:
                await session.put_all(data)
        except BaseException:
            await session.abort()
            raise
        return await session.publish(len(data))

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
