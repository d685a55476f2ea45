"""The end of a write's staging: once the file is published, each worker that staged
some of its blocks keeps them, where they landed, under the published file's id, and
reports them to the master (`CommitBlocks`), so a read right after the save costs the
store nothing. Best effort: a block not kept is read from the store on first use."""

from __future__ import annotations

import asyncio

import grpc

from reservoir.common import config as cfg
from reservoir.common import logs, worker_methods
from reservoir.common.models import Inode, WorkerRecord
from reservoir.common.observability import inject_metadata
from reservoir.common.rpc import ChannelPool, error_from_rpc
from reservoir.v1 import worker_pb2

log = logs.get_logger(__name__)

_COMMIT_BLOCKS = worker_methods.COMMIT_BLOCKS


async def commit_staged(
    channels: ChannelPool,
    config: cfg.ClientConfig,
    write_id: str,
    staged: dict[int, WorkerRecord],
    block_size: int,
    inode: Inode,
) -> None:
    """Has every worker in `staged` (block index -> the worker holding it) keep its blocks
    of the published `inode`, at once, each within `write_commit_timeout_s`."""
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
        call = channels.get(worker.address).unary_unary(
            _COMMIT_BLOCKS,
            request_serializer=worker_pb2.CommitBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.CommitBlocksResponse.FromString,
        )
        request = worker_pb2.CommitBlocksRequest(write_id=write_id, file=file, indices=indices)
        try:
            reply = await call(
                request, timeout=config.write_commit_timeout_s, metadata=inject_metadata()
            )
        except grpc.RpcError as exc:
            error = error_from_rpc(exc, f"commit blocks on worker {worker.id}")
            log.info("written_blocks_not_cached", path=inode.path, error=str(error))
            return
        if reply.missing:
            log.info("written_blocks_missing", path=inode.path, missing=reply.missing)

    await asyncio.gather(*(one(stagers[w], ix) for w, ix in indices_of.items()))
