"""A renamed file's cached blocks, kept under its new identity.

S3 has no rename: the object is copied and the copy is a new object (its own ETag), so a
new file id. Its bytes are the old file's, which the workers already hold: each holder is
asked to keep them under the new id as well, and the location table learns where they
are, so readers of the new name (a checkpoint's `.metadata`, renamed into place) read
them from the cache. The master asks only when the copy was made from the very version
the workers cache (the copy is conditional on the source's ETag)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Protocol

from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.models import Inode, WorkerRecord
from reservoir.common.placement import block_key, placement_of

from .locations import BlockLocationTable

log = logs.get_logger(__name__)


class BlockCopier(Protocol):
    """The call made to each holder (see common/worker_calls.py)."""

    async def copy_blocks(
        self, worker: WorkerRecord, source_file_id: str, file: Inode, indices: list[int]
    ) -> list[int]: ...


class LiveWorkers(Protocol):
    async def workers(self) -> list[WorkerRecord]: ...


class RenamedBlocks:
    def __init__(
        self, locations: BlockLocationTable, copier: BlockCopier, cluster: LiveWorkers
    ) -> None:
        self._locations = locations
        self._copier = copier
        self._cluster = cluster

    async def carry(self, old: Inode, new: Inode) -> int:
        """Has the workers holding blocks of `old` keep them under `new` (the same bytes);
        returns how many blocks were kept. A worker that fails is logged and left: the
        block it held is then read from the store once."""
        if (old.size, old.block_size) != (new.size, new.block_size) or not old.file_id:
            return 0
        workers = await self._cluster.workers()
        if not workers:
            return 0
        # Where the table says the blocks are, and each block's home, which holds it when
        # the file was just written (its workers' reports may not have come in yet).
        holders = self._locations.holders(old.file_id)
        table = placement_of(workers)
        by_worker: dict[str, set[int]] = defaultdict(set)
        for index in range(old.block_count):
            for worker_id in {*holders.get(index, ()), *table.homes(block_key(old.file_id, index))}:
                by_worker[worker_id].add(index)
        asked = [w for w in workers if w.id in by_worker]
        results = await asyncio.gather(
            *(
                self._copier.copy_blocks(w, old.file_id, new, sorted(by_worker[w.id]))
                for w in asked
            ),
            return_exceptions=True,
        )
        carried = 0
        for worker, result in zip(asked, results, strict=True):
            if isinstance(result, ReservoirError):
                log.warning("renamed_blocks_not_copied", worker=worker.id, error=str(result))
                continue
            if isinstance(result, BaseException):
                raise result
            for index in result:
                # Recorded now, not when the worker's report comes: the next stat of the
                # new name already points its readers at them.
                self._locations.record(worker.id, new.file_id, index)
            carried += len(result)
        log.info("renamed_blocks_carried", file=new.file_id, blocks=carried)
        return carried
