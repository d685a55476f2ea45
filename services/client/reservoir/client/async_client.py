"""The asyncio client: Reservoir's SDK. Path resolution and what is known of the cluster
live in `ClusterView`, the read path in `BlockReader`; this facade puts them together and
adds what a user calls: reads that refresh a changed file once, batched reads of many
files, writes and worker stats. Two parts of it live apart: the namespace calls (mounts,
stat, listings, rm, rename) are `NamespaceOperations`, what is asked of the cluster as a
whole (warm-up jobs, datasets, drains, cache rules) `ClusterOperations`."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from opentelemetry import trace

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.errors import (
    Conflict,
    DeadlineExceeded,
    InvalidArgument,
    IsADirectory,
    Unavailable,
)
from reservoir.common.malloc_tuning import tune_for_large_buffers
from reservoir.common.models import (
    Inode,
    WorkerRecord,
)
from reservoir.common.rpc import CHANNEL_OPTIONS
from reservoir.common.security import Transport
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.worker_calls import WorkerCalls, WorkerDeadlines
from reservoir.common.write_terms import WriteTerms

from . import discovery
from .block_reader import BlockReader
from .block_source import Planner
from .cache_state import WorkerStats
from .cluster_operations import ClusterOperations
from .cluster_view import ClusterView
from .data_port import DataPortReader
from .grpc_blocks import GrpcBlocks
from .hedges import Hedges, HedgeStats
from .namespace_operations import NamespaceOperations
from .read_admission import MountBudgetAdmission
from .short_circuit import ShortCircuit
from .thread_reads import ThreadReads
from .under_store_blocks import UnderStoreBlocks
from .writer import NO_TERMS, Writes, WriteSession

log = logs.get_logger(__name__)
_tracer = trace.get_tracer("reservoir.client")


class AsyncClient(NamespaceOperations, ClusterOperations):
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
