"""The control calls to a worker, one method each, for every caller: the master (loads,
frees, stats, copies for renames, drains and fills), clients (stats, written parts and
their blocks) and workers (blocks copied from a peer). Each has its deadline and turns a
failed call into the domain error.

Block reads for readers are not here: the read path builds them around its buffers
(client/grpc_blocks.py, the data port), with no protobuf between the bytes and the caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import grpc.aio

from reservoir.common import worker_methods as methods
from reservoir.common.errors import ReservoirError, error_for_code_value
from reservoir.common.models import Inode, WorkerRecord, block_request
from reservoir.common.observability import inject_metadata
from reservoir.common.rpc import ChannelOpener, ChannelPool, error_from_rpc
from reservoir.v1 import worker_pb2

Reply = TypeVar("Reply")


@dataclass(frozen=True, slots=True)
class WorkerDeadlines:
    """Seconds each kind of call may take."""

    rpc_s: float = 10.0  # stats, frees, copies of held blocks: no under-store in them
    load_s: float = 300.0  # blocks fetched from the under-store, or copied from a peer
    write_part_s: float = 120.0  # a part staged and uploaded to the under-store
    commit_s: float = 300.0


class WorkerCalls:
    def __init__(
        self, opener: ChannelOpener | None = None, deadlines: WorkerDeadlines | None = None
    ) -> None:
        self.channels = ChannelPool(opener)
        self._deadlines = deadlines or WorkerDeadlines()

    async def close(self) -> None:
        await self.channels.close()

    async def _unary(
        self,
        address: str,
        method: str,
        request: Any,
        parse: Callable[[bytes], Reply],
        timeout_s: float,
        what: str,
    ) -> Reply:
        serialize = None if isinstance(request, bytes) else type(request).SerializeToString
        call = self.channels.get(address).unary_unary(
            method, request_serializer=serialize, response_deserializer=parse
        )
        try:
            reply: Reply = await call(request, timeout=timeout_s, metadata=inject_metadata())
        except grpc.RpcError as exc:
            # Chained: `rpc.unreachable` tells a worker that never answered from one that
            # answered with an error.
            raise error_from_rpc(exc, what) from exc
        return reply

    async def stats(self, worker: WorkerRecord) -> worker_pb2.WorkerStats:
        return await self._unary(
            worker.address,
            methods.GET_STATS,
            worker_pb2.GetStatsRequest(),
            worker_pb2.WorkerStats.FromString,
            self._deadlines.rpc_s,
            f"stats of worker {worker.id}",
        )

    async def free_blocks(
        self, worker: WorkerRecord, file_ids: list[str]
    ) -> worker_pb2.FreeBlocksResponse:
        return await self._unary(
            worker.address,
            methods.FREE_BLOCKS,
            worker_pb2.FreeBlocksRequest(file_ids=file_ids),
            worker_pb2.FreeBlocksResponse.FromString,
            self._deadlines.rpc_s,
            f"free blocks on worker {worker.id}",
        )

    async def copy_blocks(
        self, worker: WorkerRecord, source_file_id: str, file: Inode, indices: list[int]
    ) -> list[int]:
        """Asks `worker` to keep its blocks of `source_file_id` under `file` too (same
        bytes); returns the indices it now holds so."""
        reply = await self._unary(
            worker.address,
            methods.COPY_BLOCKS,
            worker_pb2.CopyBlocksRequest(
                source_file_id=source_file_id, file=block_request(file, 0), indices=indices
            ),
            worker_pb2.CopyBlocksResponse.FromString,
            self._deadlines.rpc_s,
            f"copy blocks on worker {worker.id}",
        )
        return list(reply.copied)

    async def load_blocks(
        self, worker: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        """Per block: None when the worker holds it afterwards, else why not."""
        reply = await self._unary(
            worker.address,
            methods.LOAD_BLOCKS,
            worker_pb2.ReadBlocksRequest(blocks=[block_request(i, n, length=0) for i, n in blocks]),
            worker_pb2.LoadBlocksResponse.FromString,
            self._deadlines.load_s,
            f"load blocks on worker {worker.id}",
        )
        return _outcomes(reply, len(blocks))

    async def pull_blocks(
        self, worker: WorkerRecord, source: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        """Has `worker` copy these blocks from `source`; per block, None when `worker`
        holds it afterwards, else why not."""
        reply = await self._unary(
            worker.address,
            methods.PULL_BLOCKS,
            worker_pb2.PullBlocksRequest(
                source_id=source.id,
                source_address=source.address,
                blocks=[block_request(inode, index) for inode, index in blocks],
            ),
            worker_pb2.LoadBlocksResponse.FromString,
            self._deadlines.load_s,
            f"copy blocks to worker {worker.id} from {source.id}",
        )
        return _outcomes(reply, len(blocks))

    async def read_held(
        self, address: str, requests: list[worker_pb2.ReadBlockRequest]
    ) -> AsyncIterator[worker_pb2.BlockPayload]:
        """The whole blocks a worker holds, answered only from its cache (`cached_only`:
        NOT_FOUND for one it does not hold), in the order they come."""
        for request in requests:
            request.cached_only = True
        call = self.channels.get(address).unary_stream(
            methods.READ_BLOCKS,
            request_serializer=worker_pb2.ReadBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.BlockPayload.FromString,
        )
        stream = call(
            worker_pb2.ReadBlocksRequest(blocks=requests),
            timeout=self._deadlines.load_s,
            metadata=inject_metadata(),
        )
        try:
            async for payload in stream:
                yield payload
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"read held blocks from the worker at {address}") from None

    async def write_part(
        self, worker: WorkerRecord, wire_request: bytes
    ) -> worker_pb2.WritePartResponse:
        """A part of a file being written (its request already in wire form: one copy of
        the part), staged on `worker` and uploaded by it."""
        return await self._unary(
            worker.address,
            methods.WRITE_PART,
            wire_request,
            worker_pb2.WritePartResponse.FromString,
            self._deadlines.write_part_s,
            f"write a part through worker {worker.id}",
        )

    async def commit_blocks(
        self,
        worker: WorkerRecord,
        write_id: str,
        file: worker_pb2.ReadBlockRequest,
        indices: list[int],
    ) -> worker_pb2.CommitBlocksResponse:
        return await self._unary(
            worker.address,
            methods.COMMIT_BLOCKS,
            worker_pb2.CommitBlocksRequest(write_id=write_id, file=file, indices=indices),
            worker_pb2.CommitBlocksResponse.FromString,
            self._deadlines.commit_s,
            f"commit blocks on worker {worker.id}",
        )


def _outcomes(reply: worker_pb2.LoadBlocksResponse, count: int) -> list[ReservoirError | None]:
    outcomes: list[ReservoirError | None] = [None] * count
    for result in reply.results:
        if result.code:
            outcomes[result.position] = error_for_code_value(result.code, result.message)
    return outcomes
