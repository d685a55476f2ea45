"""The end of a write's staging: once the file is published, each worker that staged
some of its blocks keeps them, where they landed, under the published file's id, and
reports them to the master (`CommitBlocks`), so a read right after the save costs the
store nothing. Best effort: a block not kept is read from the store on first use."""

from __future__ import annotations

import asyncio

from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.models import Inode, WorkerRecord
from reservoir.common.worker_calls import WorkerCalls
from reservoir.v1 import worker_pb2

log = logs.get_logger(__name__)


async def commit_staged(
    calls: WorkerCalls,
    write_id: str,
    staged: dict[int, WorkerRecord],
    block_size: int,
    inode: Inode,
) -> None:
    """Has every worker in `staged` (block index -> the worker holding it) keep its blocks
    of the published `inode`, at once, each within the calls' commit deadline."""
    if not staged or inode.block_size != block_size:
        return
    indices_of: dict[str, list[int]] = {}
    stagers: dict[str, WorkerRecord] = {}
    for index, worker in staged.items():
        if index < inode.block_count:
            indices_of.setdefault(worker.id, []).append(index)
            stagers[worker.id] = worker
    file = worker_pb2.ReadBlockRequest(
        file_id=inode.file_id,
        ufs_uri=inode.ufs_uri,
        etag=inode.etag,
        file_size=inode.size,
        block_size=inode.block_size,
        mount_path=inode.mount_path,
    )

    async def one(worker: WorkerRecord, indices: list[int]) -> None:
        try:
            reply = await calls.commit_blocks(worker, write_id, file, indices)
        except ReservoirError as error:
            log.info("written_blocks_not_cached", path=inode.path, error=str(error))
            return
        if reply.missing:
            log.info("written_blocks_missing", path=inode.path, missing=reply.missing)

    await asyncio.gather(*(one(stagers[w], ix) for w, ix in indices_of.items()))
