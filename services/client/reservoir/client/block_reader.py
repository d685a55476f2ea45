"""The client's read path: blocks from the nearest replica that holds them (same-host
files first, then gRPC), failing over to the next replica and, last, to the under-store;
every block checked for length and checksum before it is returned."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.block_file import checksum, checksum_of_pieces
from reservoir.common.errors import (
    Conflict,
    DataLoss,
    DeadlineExceeded,
    IsADirectory,
    NotFound,
    ReservoirError,
    Unavailable,
    error_for_code_value,
)
from reservoir.common.models import Inode, WorkerRecord, block_request
from reservoir.common.mounted_stores import MountedStores
from reservoir.common.observability import inject_metadata
from reservoir.common.rpc import ChannelPool, error_from_rpc
from reservoir.v1 import worker_pb2

from .cluster_view import ClusterView
from .routing import candidates
from .short_circuit import ShortCircuit, range_length
from .small_reads import SmallReads

log = logs.get_logger(__name__)

_READ_BLOCK = "/reservoir.v1.WorkerService/ReadBlock"
_READ_BLOCKS = "/reservoir.v1.WorkerService/ReadBlocks"
# Worker failures that mean "try another replica"; anything else is the answer. DataLoss:
# bytes that failed their checksum or length on the way here.
RETRY_ELSEWHERE = (Unavailable, DeadlineExceeded, DataLoss)


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


def _verified_payload(
    item: worker_pb2.BlockPayload, inode: Inode, worker: WorkerRecord, verify: bool
) -> bytes | None:
    """A batch entry's bytes when their length and checksum are right; None (read again
    one by one, with failover) when not."""
    data = item.data
    intact = item.HasField("crc32c") and (not verify or checksum(data) == item.crc32c)
    if len(data) != inode.size or not intact:
        log.warning("batch_block_rejected", worker=worker.id, path=inode.path, bytes=len(data))
        return None
    return data


class BlockReader:
    def __init__(
        self,
        config: cfg.ClientConfig,
        view: ClusterView,
        channels: ChannelPool,
        under_stores: MountedStores,
    ) -> None:
        self.config = config
        self._view = view
        self._channels = channels
        self._under_stores = under_stores
        self.short_circuit = ShortCircuit(config)
        self._small = SmallReads(config, channels)

    async def read_inode(self, inode: Inode, offset: int, length: int) -> bytes:
        return b"".join(await self.read_inode_pieces(inode, offset, length))

    async def read_inode_pieces(self, inode: Inode, offset: int, length: int) -> list[memoryview]:
        if inode.is_dir:
            raise IsADirectory(f"{inode.path}: is a directory")
        end = inode.size if length < 0 else min(inode.size, offset + length)
        if offset >= end:
            return []
        first, last = offset // inode.block_size, (end - 1) // inode.block_size
        workers = await self._view.workers(fresh=False)

        async def part(index: int) -> list[memoryview]:
            block_start = index * inode.block_size
            lo = max(offset, block_start) - block_start
            hi = min(end, block_start + inode.block_length(index)) - block_start
            return await self._read_block(inode, index, lo, hi - lo, workers)

        if first == last:
            return await part(first)
        limit = asyncio.Semaphore(self.config.parallelism)

        async def bounded(index: int) -> list[memoryview]:
            async with limit:
                return await part(index)

        parts = await asyncio.gather(*(bounded(i) for i in range(first, last + 1)))
        return [p for ps in parts for p in ps]

    def ordered(self, inode: Inode, index: int, workers: list[WorkerRecord]) -> list[WorkerRecord]:
        order = candidates(
            inode.file_id,
            index,
            workers,
            inode.locations.get(index, ()),
            self.config.host,
            self.config.zone,
            self._view.placement(workers),
            self.config.failover_workers,
        )
        return self._view.healthy_first(order)

    async def _read_block(
        self, inode: Inode, index: int, offset: int, length: int, workers: list[WorkerRecord]
    ) -> list[memoryview]:
        ordered = self.ordered(inode, index, workers)
        for worker in ordered:
            local = self.short_circuit.read(worker, inode, index, offset, length)
            if local is not None:
                return [memoryview(local)]
        request = block_request(inode, index, offset, length)
        expected = range_length(inode, index, offset, length)
        last_error: ReservoirError | None = None
        small = expected <= self.config.small_file_bytes
        for worker in ordered:
            try:
                if small:
                    return [await self._small.read(worker, request, expected)]
                return await self._stream_block(worker, request, expected)
            except RETRY_ELSEWHERE as exc:
                last_error = exc
                self._view.worker_failed(worker, exc)
        return [
            memoryview(await self._read_from_under_store(inode, index, offset, length, last_error))
        ]

    async def _stream_block(
        self, worker: WorkerRecord, request: worker_pb2.ReadBlockRequest, expected: int
    ) -> list[memoryview]:
        """The range's bytes, checked for length and against the checksum that ends the
        stream; DataLoss when either disagrees."""
        call = self._channels.get(worker.address).unary_stream(
            _READ_BLOCK,
            request_serializer=worker_pb2.ReadBlockRequest.SerializeToString,
            response_deserializer=None,
        )
        pieces: list[memoryview] = []
        crc: int | None = None
        try:
            async for message in call(
                request, timeout=self.config.read_timeout_s, metadata=inject_metadata()
            ):
                part = chunk_payload(message)
                if isinstance(part, int):
                    crc = part
                else:
                    pieces.append(part)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"read block from worker {worker.id}") from None
        what = f"block {request.index} of {request.file_id} from worker {worker.id}"
        received = sum(len(p) for p in pieces)
        if received != expected:
            raise DataLoss(f"{what}: {received} bytes, expected {expected}")
        if crc is None:
            raise DataLoss(f"{what}: no checksum")
        if self.config.verify_checksums and checksum_of_pieces(pieces) != crc:
            raise DataLoss(f"{what}: checksum mismatch")
        return pieces

    async def _read_from_under_store(
        self,
        inode: Inode,
        index: int,
        offset: int,
        length: int,
        cause: ReservoirError | None,
    ) -> bytes:
        if not self.config.ufs_fallback:
            raise Unavailable(f"{inode.path}: no worker could serve block {index} ({cause})")
        try:
            mounts = await self._view.mounts()
        except Unavailable:
            known = self._view.known_mounts()
            if known is None:
                raise
            mounts = known  # the master is down too: the last list known
        mount = next((m for m in mounts if m.path == inode.mount_path), None)
        if mount is None:
            raise NotFound(f"{inode.mount_path} is no longer mounted")
        ufs = await self._under_stores.open(mount)
        log.info("read_from_under_store", path=inode.path, block=index)
        start = index * inode.block_size + min(offset, inode.block_length(index))
        want = range_length(inode, index, offset, length)
        data = await asyncio.to_thread(
            ufs.get_range, ufs.key_of(inode.ufs_uri), start, want, inode.etag
        )
        if len(data) != want:
            raise DataLoss(
                f"{inode.path}: the under-store returned {len(data)} bytes of block {index}, "
                f"expected {want}"
            )
        return data

    async def read_small(
        self,
        inodes: list[Inode],
        positions: list[int],
        results: list[bytes | None],
        limit: asyncio.Semaphore,
    ) -> None:
        """Whole contents of the small files at `positions` (each one block), in batches
        of `batch_files` per call to each file's best worker; a file a batch did not
        deliver stays None in `results`."""
        workers = await self._view.workers(fresh=False)
        if not workers:
            return
        batches: dict[str, list[int]] = {}
        for position in positions:
            home = self.ordered(inodes[position], 0, workers)[0]
            batches.setdefault(home.id, []).append(position)
        by_id = {w.id: w for w in workers}
        size = self.config.batch_files
        await asyncio.gather(
            *(
                self._read_batch(by_id[worker_id], inodes, chunk[i : i + size], results, limit)
                for worker_id, chunk in batches.items()
                for i in range(0, len(chunk), size)
            )
        )

    async def _read_batch(
        self,
        worker: WorkerRecord,
        inodes: list[Inode],
        positions: list[int],
        results: list[bytes | None],
        limit: asyncio.Semaphore,
    ) -> None:
        remote = []
        for position in positions:
            local = self.short_circuit.read(worker, inodes[position], 0, 0, -1)
            if local is None:
                remote.append(position)
            else:
                results[position] = bytes(local)  # the whole block: no copy
        if not remote:
            return
        positions = remote
        request = worker_pb2.ReadBlocksRequest(
            blocks=[block_request(inodes[p], 0, 0, -1) for p in positions]
        )
        call = self._channels.get(worker.address).unary_stream(
            _READ_BLOCKS,
            request_serializer=worker_pb2.ReadBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.BlockPayload.FromString,
        )
        async with limit:
            try:
                async for item in call(
                    request, timeout=self.config.read_timeout_s, metadata=inject_metadata()
                ):
                    position = positions[item.position]
                    if item.code == 0:
                        results[position] = _verified_payload(
                            item, inodes[position], worker, self.config.verify_checksums
                        )
                    else:
                        error = error_for_code_value(item.code, item.message)
                        if not isinstance(error, RETRY_ELSEWHERE + (Conflict,)):
                            raise error
                        # otherwise left empty: read again below, with failover
            except grpc.RpcError as exc:
                error = error_from_rpc(exc, f"batch read from worker {worker.id}")
                if not isinstance(error, RETRY_ELSEWHERE):
                    raise error from None
                self._view.worker_failed(worker, error)
        # Whatever the batch did not deliver stays None: the caller reads it on its own.
