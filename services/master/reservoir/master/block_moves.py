"""Moving cached blocks between workers, so membership changes move data rather than
misses: a drain copies every block a worker holds to the home it will have without that
worker; a fill copies onto a worker that joined the blocks it is now home of; a repair
copies again, from the copies left, the replicated blocks a lost worker held. Each copy
goes peer to peer (the receiver reads the block from a holder and checks its CRC32C,
PullBlocks), within one cluster-wide byte rate, while every holder goes on serving.

A job covers the blocks of files the namespace knows now: a block of a deleted or changed
file is not worth a copy (its reader would not ask for it). Blocks that already have the
home they need are not copied, so a resumed job (after a leader change) copies only what
is left.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from reservoir.common import logs
from reservoir.common.byte_rate import ByteRate
from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, NotFound, ReservoirError
from reservoir.common.models import DRAINED, DRAINING, Inode, WorkerRecord
from reservoir.common.placement import Placement, block_key, placement_of

from .job_records import DRAIN, REPAIR, Job, JobRecords
from .locations import BlockLocationTable
from .mount_table import MountTable
from .worker_membership import WorkerMembership

log = logs.get_logger(__name__)


class Namespace(Protocol):
    def subtree(self, path: str) -> AsyncIterator[list[Inode]]: ...


class BlockPuller(Protocol):
    """Has a worker copy blocks from another (see common/worker_calls.py)."""

    async def pull_blocks(
        self, worker: WorkerRecord, source: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]: ...


@dataclass(frozen=True, slots=True)
class _Move:
    index: int
    source: str
    target: str


class BlockMoves:
    """Runs drain and fill jobs (`run(job)`), updating their records as they go."""

    def __init__(
        self,
        records: JobRecords,
        config: MasterConfig,
        namespace: Namespace,
        mounts: MountTable,
        membership: WorkerMembership,
        puller: BlockPuller,
        locations: BlockLocationTable,
    ) -> None:
        self._records = records
        self._config = config
        self._namespace = namespace
        self._membership = membership
        self._puller = puller
        self._locations = locations
        self._rate = ByteRate(config.move_bytes_per_s)
        self._mounts = mounts
        # Repairs' blocks, by job: what a lost worker held is known only when it is lost
        # (its locations go with it), so a repair resumed by another leader has none left.
        self._owed: dict[str, dict[str, list[int]]] = {}

    def owe(self, job_id: str, blocks: dict[str, list[int]]) -> None:
        """The blocks (by file) repair job `job_id` copies again."""
        self._owed[job_id] = blocks

    async def run(self, job: Job) -> None:
        async with self._records.running(job):
            workers = {w.id: w for w in await self._membership.workers()}
            worker = workers.get(job.worker)
            if worker is None and job.kind != REPAIR:
                raise InvalidArgument(f"worker {job.worker} is not registered")
            if job.kind == DRAIN and worker is not None and worker.serving:
                workers[worker.id] = await self._membership.mark(worker, DRAINING)
            table = placement_of(list(workers.values()))
            if not len(table):
                raise InvalidArgument("no serving worker to take the blocks")
            if job.kind == DRAIN:
                moves = self._drain(job.worker, table)
            elif job.kind == REPAIR:
                moves = self._repair(self._owed.pop(job.id, {}), table)
            else:
                moves = self._fill(job.worker, table)
            await self._copy(job, moves, workers, [m.path for m in self._mounts.mounts()])
            job.state = "failed" if job.failed_blocks else "completed"
            if job.kind == DRAIN and job.state == "completed":
                await self._membership.mark(workers[job.worker], DRAINED)

    def _drain(self, worker_id: str, table: Placement) -> dict[str, list[_Move]]:
        """Each block `worker_id` holds, to the first of its homes (the worker out of the
        placement) that does not hold it: a block with two replicas keeps two."""
        moves: dict[str, list[_Move]] = defaultdict(list)
        for file_id, indices in self._locations.held_by(worker_id).items():
            holders = self._locations.holders(file_id)
            for index in indices:
                held = set(holders.get(index, ()))
                ranked = table.homes(block_key(file_id, index), len(held) + 1)
                target = next((h for h in ranked if h not in held), None)
                if target is not None:
                    moves[file_id].append(_Move(index, worker_id, target))
        return moves

    def _repair(self, owed: dict[str, list[int]], table: Placement) -> dict[str, list[_Move]]:
        """Each owed block, from a worker that still holds it to the first of its homes
        that does not."""
        moves: dict[str, list[_Move]] = defaultdict(list)
        for file_id, indices in owed.items():
            holders = self._locations.holders(file_id)
            for index in indices:
                held = holders.get(index, [])
                if not held:
                    continue  # every copy is gone: a reader fetches it again
                ranked = table.homes(block_key(file_id, index), len(held) + 1)
                target = next((h for h in ranked if h not in held), None)
                if target is not None:
                    moves[file_id].append(_Move(index, held[0], target))
        return moves

    def _fill(self, worker_id: str, table: Placement) -> dict[str, list[_Move]]:
        """Each cached block whose first home is now `worker_id` and that it lacks, from a
        holder (a serving one first: a draining one has its own copies to make)."""
        moves: dict[str, list[_Move]] = defaultdict(list)
        for file_id in self._locations.files():
            for index, held in self._locations.holders(file_id).items():
                if worker_id in held or table.homes(block_key(file_id, index))[0] != worker_id:
                    continue
                moves[file_id].append(_Move(index, held[0], worker_id))
        return moves

    async def _inodes(self, file_ids: set[str], roots: list[str]) -> AsyncIterator[list[Inode]]:
        """The files the namespace knows whose ids are among `file_ids`, a page at a time:
        the location table knows blocks by file id only."""
        left = set(file_ids)
        for root in roots:
            async for page in self._namespace.subtree(root):
                found = [i for i in page if not i.is_dir and i.file_id in left]
                if found:
                    left.difference_update(i.file_id for i in found)
                    yield found
                if not left:
                    return

    async def _copy(
        self,
        job: Job,
        moves: dict[str, list[_Move]],
        workers: dict[str, WorkerRecord],
        roots: list[str],
    ) -> None:
        queues: dict[tuple[str, str], list[tuple[Inode, int]]] = defaultdict(list)
        async for inodes in self._inodes(set(moves), roots):
            for inode in inodes:
                job.total_files += 1
                for move in moves[inode.file_id]:
                    if move.source in workers and move.target in workers:
                        queues[(move.target, move.source)].append((inode, move.index))
                        job.total_blocks += 1
                        job.total_bytes += inode.block_length(move.index)
        await self._records.save(job)
        by_target: dict[str, list[tuple[str, list[tuple[Inode, int]]]]] = defaultdict(list)
        for (target, source), blocks in queues.items():
            by_target[target].append((source, blocks))

        async def drain_queue(target: str) -> None:
            size = self._config.move_batch_blocks
            for source, blocks in by_target[target]:
                while blocks:
                    batch, blocks[:] = blocks[:size], blocks[size:]
                    await self._rate.take(sum(i.block_length(n) for i, n in batch))
                    try:
                        outcomes = await self._puller.pull_blocks(
                            workers[target], workers[source], batch
                        )
                    except ReservoirError as exc:
                        outcomes = [exc] * len(batch)
                    for (inode, index), outcome in zip(batch, outcomes, strict=True):
                        length = inode.block_length(index)
                        if outcome is None:
                            self._locations.record(target, inode.file_id, index)
                            job.done_blocks += 1
                            job.done_bytes += length
                        elif isinstance(outcome, NotFound):
                            # Evicted from the source since: nothing left to move.
                            job.total_blocks -= 1
                            job.total_bytes -= length
                        else:
                            job.fail(f"{inode.path} block {index} to {target}: {outcome}")

        calls = self._config.move_calls_per_worker
        await asyncio.gather(*(drain_queue(t) for t in by_target for _ in range(calls)))
