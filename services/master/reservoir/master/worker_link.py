"""The master's calls to workers (load jobs), each with its deadline."""

from __future__ import annotations

import grpc
import grpc.aio

from reservoir.common.errors import ReservoirError, error_for_code_value
from reservoir.common.models import Inode, WorkerRecord, block_request
from reservoir.common.observability import inject_metadata
from reservoir.common.rpc import ChannelOpener, ChannelPool, error_from_rpc
from reservoir.v1 import worker_pb2

_LOAD_BLOCKS = "/reservoir.v1.WorkerService/LoadBlocks"


class WorkerLink:
    def __init__(self, timeout_s: float, opener: ChannelOpener | None = None) -> None:
        self._timeout = timeout_s
        self._channels = ChannelPool(opener)

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
