"""The asyncio client's read path: each block by the planner's routes (`block_source.py`)
in order — a block file of a worker on this host, each worker over gRPC, best first, and
last the under-store — until one answers. A worker that fails (unreachable, deadline,
bytes that failed their check) goes into the penalty box; any other error is the answer.

Reads are hedged (`hedges.py`): a worker that has not started to answer within the hedge
budget keeps its call, but the next route is asked too; the first answer wins, the others
are cancelled, and a worker that was hedged over goes into the penalty box. Whatever route
wins, its bytes passed the same check (`integrity.py`).

The under-store route passes one admission seam (`read_admission.py`): a mount's
under-store budget applies to the client's direct reads there, not in each route."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

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
from .hedges import Hedges
from .short_circuit import ShortCircuit
from .under_store_blocks import UnderStoreBlocks

# Worker failures that mean "try another replica"; anything else is the answer. DataLoss:
# bytes that failed their checksum or length on the way here.
RETRY_ELSEWHERE = (Unavailable, DeadlineExceeded, DataLoss)

_Pieces = list[memoryview]


@dataclass(slots=True)
class _Attempt:
    """One route asked for the block: a worker, or the under-store (None)."""

    worker: WorkerRecord | None
    asked: float
    answering: bool = False  # the worker started to answer: no hedge on it any more
    hedged: bool = False  # the next route was asked because this one kept silent


class BlockReader:
    def __init__(
        self,
        config: cfg.ClientConfig,
        view: ClusterView,
        planner: Planner,
        short_circuit: ShortCircuit,
        grpc_blocks: GrpcBlocks,
        under_store: UnderStoreBlocks,
        hedges: Hedges,
    ) -> None:
        self.config = config
        self._view = view
        self._planner = planner
        self._short_circuit = short_circuit
        self._grpc = grpc_blocks
        self._under_store = under_store
        self._hedges = hedges

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
        return await self._first_answer(inode, index, offset, length, plan.remote)

    async def _first_answer(
        self, inode: Inode, index: int, offset: int, length: int, remote: tuple[WorkerRecord, ...]
    ) -> _Pieces:
        """The block from the first of `remote` (then the under-store) to answer: the next
        route is asked when the last one failed, or kept silent past the hedge budget."""
        routes: list[WorkerRecord | None] = [*remote, None]
        running: dict[asyncio.Task[_Pieces], _Attempt] = {}
        newest: _Attempt | None = None
        last_error: ReservoirError | None = None

        def ask_next() -> None:
            nonlocal newest
            worker = routes.pop(0)
            attempt = newest = _Attempt(worker, time.monotonic())
            if worker is None:
                coro = self._from_under_store(inode, index, offset, length, last_error)
            else:
                self._hedges.read_started()

                def first_byte() -> None:
                    attempt.answering = True
                    self._hedges.first_byte(inode.file_id, time.monotonic() - attempt.asked)

                coro = self._grpc.fetch(worker, inode, index, offset, length, first_byte)
            running[asyncio.ensure_future(coro)] = attempt

        ask_next()
        given_up: BaseException | None = None  # the under-store's error, while workers run
        try:
            while running:
                assert newest is not None
                wait = self._hedge_wait(newest, routes, inode.file_id)
                done, _ = await asyncio.wait(
                    running, timeout=wait, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:  # the newest route kept silent past the budget
                    worker = newest.worker
                    if not newest.answering and worker is not None:
                        if self._hedges.may_hedge(worker.id):
                            newest.hedged = True
                            # Now, not when another route answers: the reads in flight
                            # to it then hedge without spending the bound's tokens.
                            self._view.worker_failed(
                                worker, DeadlineExceeded("no answer within the hedge budget")
                            )
                            ask_next()
                        else:
                            newest.answering = True  # no hedge left: it has the deadline
                    continue
                for task in done:
                    attempt = running.pop(task)
                    error = task.exception()
                    if error is None:
                        return task.result()
                    if attempt.worker is None:
                        given_up = error  # a worker hedged over may still answer
                        continue
                    if not isinstance(error, RETRY_ELSEWHERE):
                        raise error
                    last_error = error
                    self._view.worker_failed(attempt.worker, error)
                    if attempt is newest and routes:
                        ask_next()
            assert given_up is not None, "the under-store route always answers or raises"
            raise given_up
        finally:
            for task in running:
                task.cancel()

    def _hedge_wait(
        self, newest: _Attempt, routes: list[WorkerRecord | None], file_id: str
    ) -> float | None:
        """How long to wait for an answer before hedging the newest route (None: no
        hedge — it is answering, or hedging is off, or nothing is left to ask: the
        last worker of a client that may not read the under-store waits its deadline)."""
        if newest.worker is None or newest.answering or newest.hedged or not routes:
            return None
        if routes[0] is None and not self.config.ufs_fallback:
            return None
        budget = self._hedges.budget(file_id)
        if budget is None:
            return None
        return max(0.0, newest.asked + budget - time.monotonic())

    async def _from_under_store(
        self, inode: Inode, index: int, offset: int, length: int, cause: ReservoirError | None
    ) -> _Pieces:
        data = await self._under_store.fetch(inode, index, offset, length, cause)
        return [memoryview(data)]
