"""The asyncio client's read path: each block by the planner's routes (`block_source.py`)
in order — a block file of a worker on this host, each worker over gRPC, best first, and
last the under-store — until one answers. A worker that fails (unreachable, deadline,
bytes that failed their check) goes into the penalty box; any other error is the answer."""

from __future__ import annotations

import asyncio

from reservoir.common import config as cfg
from reservoir.common.errors import (
    DataLoss,
    DeadlineExceeded,
    IsADirectory,
    ReservoirError,
    Unavailable,
)
from reservoir.common.models import Inode, WorkerRecord

from .block_source import Planner
from .cluster_view import ClusterView
from .grpc_blocks import GrpcBlocks
from .short_circuit import ShortCircuit
from .under_store_blocks import UnderStoreBlocks

# Worker failures that mean "try another replica"; anything else is the answer. DataLoss:
# bytes that failed their checksum or length on the way here.
RETRY_ELSEWHERE = (Unavailable, DeadlineExceeded, DataLoss)


class BlockReader:
    def __init__(
        self,
        config: cfg.ClientConfig,
        view: ClusterView,
        planner: Planner,
        short_circuit: ShortCircuit,
        grpc_blocks: GrpcBlocks,
        under_store: UnderStoreBlocks,
    ) -> None:
        self.config = config
        self._view = view
        self._planner = planner
        self._short_circuit = short_circuit
        self._grpc = grpc_blocks
        self._under_store = under_store

    async def read_inode_pieces(self, inode: Inode, offset: int, length: int) -> list[memoryview]:
        if inode.is_dir:
            raise IsADirectory(f"{inode.path}: is a directory")
        end = inode.size if length < 0 else min(inode.size, offset + length)
        if offset >= end:
            return []
        spans = list(inode.block_spans(offset, end))
        workers = await self._view.workers(fresh=False)
        if len(spans) == 1:
            return await self._read_block(inode, *spans[0], workers)
        limit = asyncio.Semaphore(self.config.parallelism)

        async def part(index: int, start: int, length: int) -> list[memoryview]:
            async with limit:
                return await self._read_block(inode, index, start, length, workers)

        parts = await asyncio.gather(*(part(*span) for span in spans))
        return [p for ps in parts for p in ps]

    async def _read_block(
        self, inode: Inode, index: int, offset: int, length: int, workers: list[WorkerRecord]
    ) -> list[memoryview]:
        plan = self._planner.plan(inode, index, workers)
        for worker in plan.local:
            local = self._short_circuit.read(worker, inode, index, offset, length)
            if local is not None:
                return [memoryview(local)]
        last_error: ReservoirError | None = None
        for worker in plan.remote:
            try:
                return await self._grpc.fetch(worker, inode, index, offset, length)
            except RETRY_ELSEWHERE as exc:
                last_error = exc
                self._view.worker_failed(worker, exc)
        data = await self._under_store.fetch(inode, index, offset, length, last_error)
        return [memoryview(data)]
