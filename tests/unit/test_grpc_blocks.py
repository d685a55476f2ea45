"""GrpcBlocks against an in-process gRPC server that answers like a worker and counts
calls: concurrent reads share calls, each gets its own checked bytes."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest

from reservoir.client.grpc_blocks import GrpcBlocks
from reservoir.common import config as cfg
from reservoir.common.blocks.block_file import checksum
from reservoir.common.errors import DataLoss, NotFound, code_value
from reservoir.common.models import WorkerRecord
from reservoir.common.rpc import ChannelPool
from reservoir.v1 import worker_pb2


def _bytes_of(request: worker_pb2.ReadBlockRequest) -> bytes:
    return f"{request.file_id}:{request.index}".encode() * 10


class FakeWorker:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.corrupt: set[str] = set()
        self.missing: set[str] = set()

    def _payload(self, position: int, item: worker_pb2.ReadBlockRequest) -> worker_pb2.BlockPayload:
        if item.file_id in self.missing:
            return worker_pb2.BlockPayload(
                position=position, code=code_value(NotFound("gone")), message="gone"
            )
        data = _bytes_of(item)
        crc = checksum(data) ^ (1 if item.file_id in self.corrupt else 0)
        return worker_pb2.BlockPayload(position=position, data=data, crc32c=crc)

    async def read_small(
        self, request: worker_pb2.ReadBlockRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.BlockPayload:
        self.calls["ReadSmall"] += 1
        return self._payload(0, request)

    async def read_blocks(
        self, request: worker_pb2.ReadBlocksRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[worker_pb2.BlockPayload]:
        self.calls["ReadBlocks"] += 1
        for position, item in enumerate(request.blocks):
            yield self._payload(position, item)

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            "reservoir.v1.WorkerService",
            {
                "ReadSmall": grpc.unary_unary_rpc_method_handler(
                    self.read_small,
                    request_deserializer=worker_pb2.ReadBlockRequest.FromString,
                    response_serializer=worker_pb2.BlockPayload.SerializeToString,
                ),
                "ReadBlocks": grpc.unary_stream_rpc_method_handler(
                    self.read_blocks,
                    request_deserializer=worker_pb2.ReadBlocksRequest.FromString,
                    response_serializer=worker_pb2.BlockPayload.SerializeToString,
                ),
            },
        )


def _request(name: str) -> worker_pb2.ReadBlockRequest:
    return worker_pb2.ReadBlockRequest(file_id=name, index=0, length=-1)


async def _with_worker(body: object) -> None:
    fake = FakeWorker()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([fake.handler()])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channels = ChannelPool()
    try:
        worker = WorkerRecord(id="w1", address=f"127.0.0.1:{port}")
        reads = GrpcBlocks(cfg.ClientConfig(batch_files=8), channels)
        await body(fake, reads, worker)  # type: ignore[operator]
    finally:
        await channels.close()
        await server.stop(None)


def test_concurrent_small_reads_share_calls_and_each_gets_its_own_bytes() -> None:
    async def body(fake: FakeWorker, reads: GrpcBlocks, worker: WorkerRecord) -> None:
        names = [f"f{i}" for i in range(20)]
        requests = [_request(n) for n in names]
        got = await asyncio.gather(
            *(reads.read_small(worker, r, len(_bytes_of(r))) for r in requests)
        )
        assert [bytes(g) for g in got] == [_bytes_of(r) for r in requests]
        assert fake.calls == {"ReadBlocks": 3}  # 20 reads in batches of at most 8

    asyncio.run(_with_worker(body))


def test_a_lone_small_read_is_one_unary_call() -> None:
    async def body(fake: FakeWorker, reads: GrpcBlocks, worker: WorkerRecord) -> None:
        request = _request("alone")
        assert bytes(await reads.read_small(worker, request, len(_bytes_of(request)))) == _bytes_of(
            request
        )
        assert fake.calls == {"ReadSmall": 1}

    asyncio.run(_with_worker(body))


def test_a_bad_entry_fails_only_its_own_read() -> None:
    async def body(fake: FakeWorker, reads: GrpcBlocks, worker: WorkerRecord) -> None:
        fake.corrupt.add("bad")
        fake.missing.add("gone")
        requests = [_request(n) for n in ("ok1", "bad", "gone", "ok2")]
        results = await asyncio.gather(
            *(reads.read_small(worker, r, len(_bytes_of(r))) for r in requests),
            return_exceptions=True,
        )
        assert bytes(results[0]) == _bytes_of(requests[0])  # type: ignore[arg-type]
        assert isinstance(results[1], DataLoss)
        assert isinstance(results[2], NotFound)
        assert bytes(results[3]) == _bytes_of(requests[3])  # type: ignore[arg-type]

    asyncio.run(_with_worker(body))


def test_a_short_answer_is_data_loss() -> None:
    async def body(fake: FakeWorker, reads: GrpcBlocks, worker: WorkerRecord) -> None:
        request = _request("short")
        with pytest.raises(DataLoss):
            await reads.read_small(worker, request, len(_bytes_of(request)) + 1)

    asyncio.run(_with_worker(body))
