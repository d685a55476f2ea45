"""The master's calls to workers (load jobs, free, stats), each with its deadline."""

from __future__ import annotations

import grpc
import grpc.aio

from reservoir.common import worker_methods
from reservoir.common.errors import ReservoirError, error_for_code_value
from reservoir.common.models import Inode, WorkerRecord, block_request
from reservoir.common.observability import inject_metadata
from reservoir.common.rpc import ChannelOpener, ChannelPool, error_from_rpc
from reservoir.v1 import worker_pb2

_LOAD_BLOCKS = worker_methods.LOAD_BLOCKS
_FREE_BLOCKS = worker_methods.FREE_BLOCKS
_GET_STATS = worker_methods.GET_STATS
_COPY_BLOCKS = worker_methods.COPY_BLOCKS
_PULL_BLOCKS = worker_methods.PULL_BLOCKS


class WorkerLink:
    def __init__(
        self, timeout_s: float, opener: ChannelOpener | None = None, rpc_timeout_s: float = 10.0
    ) -> None:
        """`timeout_s`: of a load call (it fetches blocks); `rpc_timeout_s`: of the others."""
        self._timeout = timeout_s
        self._rpc_timeout = rpc_timeout_s
        self._channels = ChannelPool(opener)

    async def stats(self, worker: WorkerRecord) -> worker_pb2.WorkerStats:
        call = self._channels.get(worker.address).unary_unary(
            _GET_STATS,
            request_serializer=worker_pb2.GetStatsRequest.SerializeToString,
            response_deserializer=worker_pb2.WorkerStats.FromString,
        )
        try:
            reply: worker_pb2.WorkerStats = await call(
                worker_pb2.GetStatsRequest(), timeout=self._rpc_timeout, metadata=inject_metadata()
            )
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"stats of worker {worker.id}") from None
        return reply

    async def free_blocks(
        self, worker: WorkerRecord, file_ids: list[str]
    ) -> worker_pb2.FreeBlocksResponse:
        call = self._channels.get(worker.address).unary_unary(
            _FREE_BLOCKS,
            request_serializer=worker_pb2.FreeBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.FreeBlocksResponse.FromString,
        )
        try:
            reply: worker_pb2.FreeBlocksResponse = await call(
                worker_pb2.FreeBlocksRequest(file_ids=file_ids),
                timeout=self._rpc_timeout,
                metadata=inject_metadata(),
            )
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"free blocks on worker {worker.id}") from None
        return reply

    async def copy_blocks(
        self, worker: WorkerRecord, source_file_id: str, file: Inode, indices: list[int]
    ) -> list[int]:
        """Asks `worker` to keep its blocks of `source_file_id` under `file` too (same
        bytes); returns the indices it now holds so."""
        call = self._channels.get(worker.address).unary_unary(
            _COPY_BLOCKS,
            request_serializer=worker_pb2.CopyBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.CopyBlocksResponse.FromString,
        )
        request = worker_pb2.CopyBlocksRequest(
            source_file_id=source_file_id, file=block_request(file, 0), indices=indices
        )
        try:
            reply = await call(request, timeout=self._rpc_timeout, metadata=inject_metadata())
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"copy blocks on worker {worker.id}") from None
        return list(reply.copied)

    async def load_blocks(
        self, worker: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        call = self._channels.get(worker.address).unary_unary(
            _LOAD_BLOCKS,
            request_serializer=worker_pb2.ReadBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.LoadBlocksResponse.FromString,
        )
        request = worker_pb2.ReadBlocksRequest(
            blocks=[block_request(i, n, length=0) for i, n in blocks]
        )
        try:
            response = await call(request, timeout=self._timeout, metadata=inject_metadata())
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"load blocks on worker {worker.id}") from None
        outcomes: list[ReservoirError | None] = [None] * len(blocks)
        for result in response.results:
            if result.code:
                outcomes[result.position] = error_for_code_value(result.code, result.message)
        return outcomes

    async def close(self) -> None:
        await self._channels.close()

    async def pull_blocks(
        self, worker: WorkerRecord, source: WorkerRecord, blocks: list[tuple[Inode, int]]
    ) -> list[ReservoirError | None]:
        """Has `worker` copy these blocks from `source`; per block, None when `worker`
        holds it afterwards, else why not."""
        call = self._channels.get(worker.address).unary_unary(
            _PULL_BLOCKS,
            request_serializer=worker_pb2.PullBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.LoadBlocksResponse.FromString,
        )
        request = worker_pb2.PullBlocksRequest(
            source_id=source.id,
            source_address=source.address,
            blocks=[block_request(inode, index) for inode, index in blocks],
        )
        try:
            reply = await call(request, timeout=self._timeout, metadata=inject_metadata())
        except grpc.RpcError as exc:
            raise error_from_rpc(
                exc, f"copy blocks to worker {worker.id} from {source.id}"
            ) from None
        return [error_for_code_value(r.code, r.message) if r.code else None for r in reply.results]
