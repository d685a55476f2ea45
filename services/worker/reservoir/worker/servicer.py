"""WorkerService over gRPC.

ReadBlock bypasses protobuf on the payload: each response message is a `BlockChunk`
encoding built by hand around a slice of the cached block (tag, length, bytes), so the
payload is copied once — into the `bytes` gRPC requires — and never re-encoded. The
stream ends with a message that carries only the CRC32C of the bytes sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import grpc.aio

from reservoir.common import worker_methods as methods
from reservoir.common.blocks.staged_block_wire import StagedBlock, decode_stage_request, varint
from reservoir.common.errors import InvalidArgument, ReservoirError, code_value
from reservoir.common.rpc import translate_errors, translate_stream_errors
from reservoir.v1 import common_pb2, worker_pb2

from .part_uploads import PartUploads
from .peer_copy import PeerCopy
from .read_request import domain_request
from .read_trace import ReadTrace
from .service import BlockRequest, WorkerService
from .stats import worker_stats
from .written_blocks import WrittenBlocks

SERVICE = methods.SERVICE
_DATA_TAG = b"\x0a"  # field 1, wire type 2 (length-delimited)
_CRC_TAG = b"\x15"  # field 2, wire type 5 (fixed32)
_PAYLOAD_DATA_TAG = b"\x12"  # BlockPayload.data: field 2, length-delimited
_PAYLOAD_CRC_TAG = b"\x2d"  # BlockPayload.crc32c: field 5, fixed32


def encode_chunk(payload: memoryview) -> bytes:
    """The wire form of BlockChunk(data=payload), with a single copy of the payload."""
    return b"".join((_DATA_TAG, varint(len(payload)), payload))


def encode_crc(crc: int) -> bytes:
    """The wire form of BlockChunk(crc32c=crc)."""
    return _CRC_TAG + crc.to_bytes(4, "little")


def encode_payload(payload: memoryview, crc: int) -> bytes:
    """The wire form of BlockPayload(data=payload, crc32c=crc), one copy of the payload."""
    return b"".join(
        (
            _PAYLOAD_DATA_TAG,
            varint(len(payload)),
            payload,
            _PAYLOAD_CRC_TAG,
            crc.to_bytes(4, "little"),
        )
    )


class WorkerServicer:
    def __init__(
        self,
        service: WorkerService,
        written: WrittenBlocks | None = None,
        uploads: PartUploads | None = None,
        peers: PeerCopy | None = None,
    ) -> None:
        """`written`: where written files' blocks are staged and committed (absent: the
        worker refuses them); `peers`: copies blocks from other workers (absent: refused)."""
        self._service = service
        self._written = written
        self._uploads = uploads
        self._peers = peers

    @translate_stream_errors
    async def ReadBlock(
        self, request: worker_pb2.ReadBlockRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        read = await self._service.read(domain_request(request), trace=self._trace())
        view = read.view()
        step = self._service.config.chunk_size
        for pos in range(0, read.length, step):
            yield encode_chunk(view[pos : pos + step])
        yield encode_crc(read.crc)

    @translate_errors
    async def ReadSmall(
        self, request: worker_pb2.ReadBlockRequest, context: grpc.aio.ServicerContext
    ) -> bytes:
        read = await self._service.read(
            domain_request(request),
            limit=self._service.config.small_read_max_bytes,
            trace=self._trace(),
        )
        return encode_payload(read.view(), read.crc)

    def _trace(self) -> ReadTrace:
        return ReadTrace(self._service.worker_id)

    @translate_stream_errors
    async def ReadBlocks(
        self, request: worker_pb2.ReadBlocksRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[worker_pb2.BlockPayload]:
        trace = self._trace()  # one span for the call, however many blocks

        async def one(position: int, item: worker_pb2.ReadBlockRequest) -> worker_pb2.BlockPayload:
            try:
                read = await self._service.read(
                    domain_request(item), trace=trace, cached_only=item.cached_only
                )
                return worker_pb2.BlockPayload(
                    position=position, data=read.payload(), crc32c=read.crc
                )
            except ReservoirError as exc:
                return worker_pb2.BlockPayload(
                    position=position, code=code_value(exc), message=str(exc)
                )

        tasks = [asyncio.ensure_future(one(i, item)) for i, item in enumerate(request.blocks)]
        try:
            for next_done in asyncio.as_completed(tasks):
                yield await next_done
        finally:
            for task in tasks:
                task.cancel()

    @translate_errors
    async def LoadBlocks(
        self, request: worker_pb2.ReadBlocksRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.LoadBlocksResponse:
        async def one(position: int, item: worker_pb2.ReadBlockRequest) -> worker_pb2.BlockStatus:
            try:
                loaded = await self._service.load(domain_request(item))
                return worker_pb2.BlockStatus(position=position, bytes=loaded)
            except ReservoirError as exc:
                return worker_pb2.BlockStatus(
                    position=position, code=code_value(exc), message=str(exc)
                )

        results = await asyncio.gather(*(one(i, b) for i, b in enumerate(request.blocks)))
        return worker_pb2.LoadBlocksResponse(results=results)

    @translate_errors
    async def FreeBlocks(
        self, request: worker_pb2.FreeBlocksRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.FreeBlocksResponse:
        gone = self._service.free(set(request.file_ids))
        return worker_pb2.FreeBlocksResponse(
            freed=[common_pb2.BlockRef(file_id=b[0], index=b[1]) for b, _ in gone],
            freed_bytes=sum(n for _, n in gone),
        )

    @translate_errors
    async def GetStats(
        self, request: worker_pb2.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.WorkerStats:
        return worker_stats(self._service)

    @translate_errors
    async def WritePart(
        self, request: StagedBlock, context: grpc.aio.ServicerContext
    ) -> worker_pb2.WritePartResponse:
        if self._uploads is None:
            raise InvalidArgument("this worker uploads no written parts")
        etag, staged = await self._uploads.upload(request)
        return worker_pb2.WritePartResponse(etag=etag, staged=staged)

    @translate_errors
    async def CommitBlocks(
        self, request: worker_pb2.CommitBlocksRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.CommitBlocksResponse:
        if self._written is None:
            raise InvalidArgument("this worker takes no written blocks")
        f = request.file
        file = BlockRequest(
            f.file_id, 0, 0, -1, f.ufs_uri, f.etag, f.file_size, f.block_size, f.mount_path
        )
        committed, missing = await self._written.commit(
            request.write_id, file, list(request.indices)
        )
        return worker_pb2.CommitBlocksResponse(committed=committed, missing=missing)

    @translate_errors
    async def CopyBlocks(
        self, request: worker_pb2.CopyBlocksRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.CopyBlocksResponse:
        f = request.file
        file = BlockRequest(
            f.file_id, 0, 0, -1, f.ufs_uri, f.etag, f.file_size, f.block_size, f.mount_path
        )
        copied = await self._service.copy_blocks(
            request.source_file_id, file, list(request.indices)
        )
        return worker_pb2.CopyBlocksResponse(copied=copied)

    @translate_errors
    async def PullBlocks(
        self, request: worker_pb2.PullBlocksRequest, context: grpc.aio.ServicerContext
    ) -> worker_pb2.LoadBlocksResponse:
        if self._peers is None:
            raise InvalidArgument("this worker does not copy blocks from peers")
        if not request.source_address:
            raise InvalidArgument("source_address is required")
        outcomes = await self._peers.pull(
            request.source_id,
            request.source_address,
            [domain_request(b) for b in request.blocks],
        )
        return worker_pb2.LoadBlocksResponse(
            results=[
                worker_pb2.BlockStatus(position=i, bytes=o)
                if isinstance(o, int)
                else worker_pb2.BlockStatus(position=i, code=code_value(o), message=str(o))
                for i, o in enumerate(outcomes)
            ]
        )

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                methods.READ_BLOCK_NAME: grpc.unary_stream_rpc_method_handler(
                    self.ReadBlock,
                    request_deserializer=worker_pb2.ReadBlockRequest.FromString,
                    response_serializer=None,  # already wire bytes
                ),
                methods.READ_SMALL_NAME: grpc.unary_unary_rpc_method_handler(
                    self.ReadSmall,
                    request_deserializer=worker_pb2.ReadBlockRequest.FromString,
                    response_serializer=None,  # already wire bytes
                ),
                methods.READ_BLOCKS_NAME: grpc.unary_stream_rpc_method_handler(
                    self.ReadBlocks,
                    request_deserializer=worker_pb2.ReadBlocksRequest.FromString,
                    response_serializer=worker_pb2.BlockPayload.SerializeToString,
                ),
                methods.LOAD_BLOCKS_NAME: grpc.unary_unary_rpc_method_handler(
                    self.LoadBlocks,
                    request_deserializer=worker_pb2.ReadBlocksRequest.FromString,
                    response_serializer=worker_pb2.LoadBlocksResponse.SerializeToString,
                ),
                methods.FREE_BLOCKS_NAME: grpc.unary_unary_rpc_method_handler(
                    self.FreeBlocks,
                    request_deserializer=worker_pb2.FreeBlocksRequest.FromString,
                    response_serializer=worker_pb2.FreeBlocksResponse.SerializeToString,
                ),
                methods.WRITE_PART_NAME: grpc.unary_unary_rpc_method_handler(
                    self.WritePart,
                    request_deserializer=decode_stage_request,
                    response_serializer=worker_pb2.WritePartResponse.SerializeToString,
                ),
                methods.COMMIT_BLOCKS_NAME: grpc.unary_unary_rpc_method_handler(
                    self.CommitBlocks,
                    request_deserializer=worker_pb2.CommitBlocksRequest.FromString,
                    response_serializer=worker_pb2.CommitBlocksResponse.SerializeToString,
                ),
                methods.COPY_BLOCKS_NAME: grpc.unary_unary_rpc_method_handler(
                    self.CopyBlocks,
                    request_deserializer=worker_pb2.CopyBlocksRequest.FromString,
                    response_serializer=worker_pb2.CopyBlocksResponse.SerializeToString,
                ),
                methods.PULL_BLOCKS_NAME: grpc.unary_unary_rpc_method_handler(
                    self.PullBlocks,
                    request_deserializer=worker_pb2.PullBlocksRequest.FromString,
                    response_serializer=worker_pb2.LoadBlocksResponse.SerializeToString,
                ),
                methods.GET_STATS_NAME: grpc.unary_unary_rpc_method_handler(
                    self.GetStats,
                    request_deserializer=worker_pb2.GetStatsRequest.FromString,
                    response_serializer=worker_pb2.WorkerStats.SerializeToString,
                ),
            },
        )
