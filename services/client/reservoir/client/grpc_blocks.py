"""Block ranges from workers over gRPC: the route of the asyncio read path when no block
file on this host has them (and the blocking client's, when its own thread could not).

A range larger than `small_file_bytes` streams (`ReadBlock`: chunks, then the checksum).
Smaller ones are coalesced per worker: a gRPC call costs each side a fixed amount of CPU
(a few hundred microseconds in Python) whatever it carries, and that, not bytes, bounds how
many small files a client reads per second. Reads that arrive while a call to their worker
is being prepared (all those that reach this point in the same turn of the event loop: the
threads of a DataLoader, the files of a `read_many`) ride in one `ReadBlocks` call; a read
alone goes as one unary `ReadSmall`. Nothing waits for company: a batch is whatever is
already there, so a lone reader's latency is a single call's.

A reader that gives up (a hedge won elsewhere) cancels its call: a stream's at once, a
batch's once nobody in it waits any more, so a hung worker does not keep calls open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc
import grpc.aio

from reservoir.common import config as cfg
from reservoir.common import worker_methods
from reservoir.common.errors import DataLoss, ReservoirError, Unavailable, error_for_code_value
from reservoir.common.models import Inode, WorkerRecord, block_request
from reservoir.common.observability import inject_metadata
from reservoir.common.rpc import ChannelPool, error_from_rpc
from reservoir.v1 import worker_pb2

from .integrity import check_block
from .short_circuit import range_length

_READ_BLOCK = worker_methods.READ_BLOCK
_READ_SMALL = worker_methods.READ_SMALL
_READ_BLOCKS = worker_methods.READ_BLOCKS


def chunk_payload(message: bytes) -> memoryview | int:
    """The `data` of a BlockChunk, sliced out of the received message without a copy; or,
    for the stream's last message, the `crc32c` it carries."""
    if not message:
        return memoryview(b"")
    if message[0] == 0x15 and len(message) == 5:
        return int.from_bytes(message[1:5], "little")
    if message[0] != 0x0A:
        raise Unavailable("malformed block chunk from worker")
    length = shift = 0
    pos = 1
    while True:
        byte = message[pos]
        length |= (byte & 0x7F) << shift
        pos += 1
        if not byte & 0x80:
            break
        shift += 7
    view = memoryview(message)[pos : pos + length]
    if len(view) != length:
        raise Unavailable("truncated block chunk from worker")
    return view


def _what(request: worker_pb2.ReadBlockRequest, worker: WorkerRecord) -> str:
    return f"block {request.index} of {request.file_id} from worker {worker.id}"


@dataclass
class _Pending:
    request: worker_pb2.ReadBlockRequest
    expected: int
    answer: asyncio.Future[memoryview]
    # The call it rides in and everyone in it (to cancel the call once nobody waits).
    call: asyncio.Task[None] | None = None
    batch: list[_Pending] = field(default_factory=list)

    def settle(self, result: memoryview | BaseException) -> None:
        if self.answer.done():
            return  # its reader gave up (cancelled, deadline)
        if isinstance(result, BaseException):
            self.answer.set_exception(result)
        else:
            self.answer.set_result(result)


class GrpcBlocks:
    def __init__(self, config: cfg.ClientConfig, channels: ChannelPool) -> None:
        self._config = config
        self._channels = channels
        self._queued: dict[str, list[_Pending]] = {}
        self._calls: set[asyncio.Task[None]] = set()
        self._batch_only: set[str] = set()  # workers from before ReadSmall

    async def fetch(
        self,
        worker: WorkerRecord,
        inode: Inode,
        index: int,
        offset: int,
        length: int,
        first_byte: Callable[[], None] | None = None,
    ) -> list[memoryview]:
        """The range's bytes, checked for length and checksum (DataLoss otherwise).
        `first_byte` is called when the worker starts to answer (the first chunk of a
        stream; a small range's whole answer)."""
        request = block_request(inode, index, offset, length)
        expected = range_length(inode, index, offset, length)
        if expected <= self._config.small_file_bytes:
            data = await self.read_small(worker, request, expected)
            if first_byte is not None:
                first_byte()
            return [data]
        return await self._stream(worker, request, expected, first_byte)

    async def _stream(
        self,
        worker: WorkerRecord,
        request: worker_pb2.ReadBlockRequest,
        expected: int,
        first_byte: Callable[[], None] | None = None,
    ) -> list[memoryview]:
        call = self._channels.get(worker.address).unary_stream(
            _READ_BLOCK,
            request_serializer=worker_pb2.ReadBlockRequest.SerializeToString,
            response_deserializer=None,
        )
        pieces: list[memoryview] = []
        crc: int | None = None
        try:
            async for message in call(
                request, timeout=self._config.read_timeout_s, metadata=inject_metadata()
            ):
                if first_byte is not None:
                    first_byte()
                    first_byte = None
                part = chunk_payload(message)
                if isinstance(part, int):
                    crc = part
                else:
                    pieces.append(part)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"read block from worker {worker.id}") from None
        check_block(_what(request, worker), pieces, expected, crc, self._config.verify_checksums)
        return pieces

    async def read_small(
        self, worker: WorkerRecord, request: worker_pb2.ReadBlockRequest, expected: int
    ) -> memoryview:
        """A small range's bytes, in the next call to `worker` (checked like any)."""
        loop = asyncio.get_running_loop()
        pending = _Pending(request, expected, loop.create_future())
        queue = self._queued.get(worker.id)
        if queue is None:
            queue = self._queued[worker.id] = []
            loop.call_soon(self._send, worker)
        queue.append(pending)
        try:
            return await pending.answer
        except asyncio.CancelledError:
            call = pending.call
            if call is not None and all(p.answer.done() for p in pending.batch):
                call.cancel()
            raise

    def _send(self, worker: WorkerRecord) -> None:
        queue = [p for p in self._queued.pop(worker.id, []) if not p.answer.done()]
        size = max(1, self._config.batch_files)
        for start in range(0, len(queue), size):
            batch = queue[start : start + size]
            call = asyncio.ensure_future(self._call(worker, batch))
            for pending in batch:
                pending.call, pending.batch = call, batch
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)

    async def _call(self, worker: WorkerRecord, batch: list[_Pending]) -> None:
        try:
            if len(batch) == 1 and worker.id not in self._batch_only:
                await self._one(worker, batch[0])
            else:
                await self._many(worker, batch)
        except ReservoirError as exc:
            for pending in batch:
                pending.settle(exc)
        except BaseException:
            for pending in batch:
                pending.settle(Unavailable(f"read from worker {worker.id} was interrupted"))
            raise

    async def _one(self, worker: WorkerRecord, pending: _Pending) -> None:
        call = self._channels.get(worker.address).unary_unary(
            _READ_SMALL,
            request_serializer=worker_pb2.ReadBlockRequest.SerializeToString,
            response_deserializer=worker_pb2.BlockPayload.FromString,
        )
        try:
            reply = await call(
                pending.request, timeout=self._config.read_timeout_s, metadata=inject_metadata()
            )
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                # A worker from before ReadSmall (a rolling upgrade): batches of one.
                self._batch_only.add(worker.id)
                await self._many(worker, [pending])
                return
            raise error_from_rpc(exc, f"read block from worker {worker.id}") from None
        pending.settle(self._checked(worker, pending, reply))

    async def _many(self, worker: WorkerRecord, batch: list[_Pending]) -> None:
        call = self._channels.get(worker.address).unary_stream(
            _READ_BLOCKS,
            request_serializer=worker_pb2.ReadBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.BlockPayload.FromString,
        )
        request = worker_pb2.ReadBlocksRequest(blocks=[p.request for p in batch])
        try:
            async for reply in call(
                request, timeout=self._config.read_timeout_s, metadata=inject_metadata()
            ):
                if not 0 <= reply.position < len(batch):
                    raise Unavailable(f"worker {worker.id} answered an entry it was not asked")
                pending = batch[reply.position]
                if reply.code:
                    pending.settle(error_for_code_value(reply.code, reply.message))
                else:
                    pending.settle(self._checked(worker, pending, reply))
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"batch read from worker {worker.id}") from None
        for pending in batch:
            pending.settle(Unavailable(f"worker {worker.id} left a block of the batch out"))

    def _checked(
        self, worker: WorkerRecord, pending: _Pending, reply: worker_pb2.BlockPayload
    ) -> memoryview | DataLoss:
        crc = reply.crc32c if reply.HasField("crc32c") else None
        try:
            check_block(
                _what(pending.request, worker),
                reply.data,
                pending.expected,
                crc,
                self._config.verify_checksums,
            )
        except DataLoss as exc:
            return exc
        return memoryview(reply.data)
