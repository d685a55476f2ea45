"""The worker's calls to the master, each with its deadline."""

from __future__ import annotations

import grpc
import grpc.aio

from reservoir.common import observability
from reservoir.common.models import Mount
from reservoir.common.rpc import ChannelOpener, error_from_rpc
from reservoir.v1 import common_pb2, master_pb2, master_pb2_grpc

BlockId = tuple[str, int]


class MasterLink:
    def __init__(self, address: str, timeout_s: float, opener: ChannelOpener) -> None:
        self._channel = opener.channel(address)
        self._stub = master_pb2_grpc.MasterServiceStub(self._channel)
        self._timeout = timeout_s

    async def mounts(self) -> list[Mount]:
        try:
            response = await self._stub.ListMounts(
                master_pb2.ListMountsRequest(),
                timeout=self._timeout,
                metadata=observability.inject_metadata(),
            )
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, "list mounts from the master") from exc
        return [Mount.from_proto(m) for m in response.mounts]

    async def report(
        self, worker_id: str, full: bool, added: list[BlockId], removed: list[BlockId]
    ) -> str:
        """Sends one block report; returns the epoch of the master that took it."""
        request = master_pb2.ReportBlocksRequest(
            worker_id=worker_id,
            full=full,
            added=[common_pb2.BlockRef(file_id=f, index=i) for f, i in added],
            removed=[common_pb2.BlockRef(file_id=f, index=i) for f, i in removed],
        )
        try:
            response = await self._stub.ReportBlocks(request, timeout=self._timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, "report blocks to the master") from exc
        return response.master_epoch

    async def close(self) -> None:
        await self._channel.close()
