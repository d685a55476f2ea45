"""Blocks of files being written through Reservoir (checkpoints), held until publish.

A written file's identity (its file id, from the ETag) exists only once the upload is
complete, and its blocks' homes follow from that id. So a writer stages each block on
some worker under the write's id, as it writes; once the file is published it tells each
staging worker the file's identity and every block's home. The worker then keeps each
block under the real id, or sends it on to its home, which keeps it there. Readers then
find every block at its home: reading a file right after it was written costs the
under-store nothing.

A block committed where it was staged is renamed in its tier, never copied; one bound for
another worker is read only when its turn to be sent comes. StageBlock requests travel in
protobuf's encoding built and read by hand (staged_block_wire.py): the payload is copied
once into the request and read on arrival as a view into it.

Staged blocks live in the worker's ordinary tiers under a staging id, so they take room
within its capacity and are evicted like any other block: a staged block that is gone by
commit time is only a block the first reader fetches from the store. Nothing here is ever
served under a published id unless its length and checksum match what was staged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

import grpc
import grpc.aio

from reservoir.common import logs, worker_methods
from reservoir.common.block_file import checksum
from reservoir.common.errors import DataLoss, InvalidArgument, PermissionDenied
from reservoir.common.metadata_store import MetadataStore
from reservoir.common.models import WorkerRecord
from reservoir.common.observability import inject_metadata
from reservoir.common.rpc import ChannelPool, error_from_rpc
from reservoir.common.staged_block_wire import encode_stage_request
from reservoir.common.write_records import WriteRecord, check_write_id, write_key
from reservoir.v1 import worker_pb2

from .memory_tier import BlockId

if TYPE_CHECKING:
    from .service import BlockRequest, WorkerService

log = logs.get_logger(__name__)

STAGE_BLOCK = worker_methods.STAGE_BLOCK
COMMIT_BLOCKS = worker_methods.COMMIT_BLOCKS
# Staged blocks' file ids: never a published file's (those are hex digests).
STAGED_PREFIX = "staged-"
# Blocks sent to one home at once (each a unary call with one block).
_FORWARDS_IN_FLIGHT = 4


def staged_id(write_id: str, index: int) -> BlockId:
    # The id names files in the disk tier: only what the master makes is taken.
    if index < 0:
        raise InvalidArgument("index must not be negative")
    return (STAGED_PREFIX + check_write_id(write_id), index)


class BlockReports(Protocol):
    """Sends the master this worker's block changes now (block_reporter.BlockReporter)."""

    async def report(self) -> None: ...


class WrittenBlocks:
    def __init__(
        self,
        service: WorkerService,
        channels: ChannelPool,
        rpc_timeout_s: float,
        live_workers: Callable[[], Awaitable[list[WorkerRecord]]],
        store: MetadataStore,
        reports: BlockReports,
    ) -> None:
        """`live_workers`: the workers registered now (where blocks may be sent); `store`:
        where the master records writes (a write's blocks are kept only under the file id
        it published); `reports`: tells the master what this worker holds."""
        self._store = store
        self._reports = reports
        self._service = service
        self._channels = channels
        self._timeout = rpc_timeout_s
        self._live_workers = live_workers

    def stage(self, write_id: str, index: int, data: bytes | memoryview, crc: int) -> bool:
        """Holds a written block until its file is published; False when no tier took it
        (full of pinned or hotter blocks): the block is then read from the store later."""
        block = staged_id(write_id, index)
        if checksum(data) != crc:
            raise DataLoss(f"block {index} of write {write_id}: checksum mismatch on arrival")
        return self._service.store.put(block, data, crc, 0)

    async def commit(
        self, write_id: str, file: BlockRequest, homes: dict[int, str]
    ) -> tuple[int, int]:
        """Keeps each staged block of the write under the published file's id, here or at
        its home (`homes[index]`: a worker id, '' for here); returns (committed, missing)."""
        await self._service.check_mount(file)
        raw = await self._store.get(write_key(write_id))
        record = WriteRecord.from_json(raw) if raw is not None else None
        if record is None or record.published_file_id != file.file_id:
            # Staged bytes become a file's cached blocks only for the file their write
            # published: never another file's (a poisoned cache), never an unpublished one.
            raise PermissionDenied(f"write {write_id} did not publish file {file.file_id}")
        addresses: dict[str, str] = {}
        if any(homes.values()):
            addresses = {w.id: w.address for w in await self._live_workers()}
        committed = missing = 0
        forwards: dict[str, list[int]] = {}
        for index, home_id in sorted(homes.items()):
            staged = staged_id(write_id, index)
            # A home not registered now (its lease lapsed under load, say) is not sent to:
            # the block stays here, where the master's table (reported below) finds it.
            home = "" if home_id in ("", self._service.worker_id) else addresses.get(home_id, "")
            if home:
                forwards.setdefault(home, []).append(index)
                continue
            length = _length(file, index)
            offset = index * file.block_size
            if self._service.keep_staged(staged, (file.file_id, index), length, offset):
                committed += 1  # renamed in place: no copy of the bytes
                continue
            held = await self._service.store.get(staged)
            self._service.store.evict([staged])
            if held is None or len(held[0]) != length:
                missing += 1
                continue
            self._service.keep((file.file_id, index), bytes(held[0]), held[1], offset)
            committed += 1
        results = await asyncio.gather(
            *(
                self._forward(address, write_id, file, indices)
                for address, indices in forwards.items()
            ),
            return_exceptions=True,
        )
        for (address, indices), result in zip(forwards.items(), results, strict=True):
            if isinstance(result, BaseException):
                log.warning("written_blocks_not_forwarded", home=address, error=str(result))
                missing += len(indices)
            else:
                committed += result[0]
                missing += len(indices) - result[0]
        if committed:
            # Before the writer's close returns, the master knows where the blocks are: a
            # reader's stat right after it names them, whatever membership it sees.
            await self._reports.report()
        return committed, missing

    async def _forward(
        self, address: str, write_id: str, file: BlockRequest, indices: list[int]
    ) -> tuple[int, int]:
        """Sends the staged blocks `indices` to their home and has it keep them; each is
        read here only when its turn to go comes, so a worker holds at most
        `_FORWARDS_IN_FLIGHT` of them in memory per home, however big the file."""
        channel = self._channels.get(address)
        stage = channel.unary_unary(
            STAGE_BLOCK,
            request_serializer=None,  # already wire bytes (staged_block_wire.py)
            response_deserializer=worker_pb2.StageBlockResponse.FromString,
        )
        commit = channel.unary_unary(
            COMMIT_BLOCKS,
            request_serializer=worker_pb2.CommitBlocksRequest.SerializeToString,
            response_deserializer=worker_pb2.CommitBlocksResponse.FromString,
        )
        slots = asyncio.Semaphore(_FORWARDS_IN_FLIGHT)

        async def one(index: int) -> bool:
            async with slots:
                staged = staged_id(write_id, index)
                held = await self._service.store.get(staged)
                self._service.store.evict([staged])
                if held is None or len(held[0]) != _length(file, index):
                    return False
                await stage(
                    encode_stage_request(write_id, index, held[0], held[1]),
                    timeout=self._timeout,
                    metadata=inject_metadata(),
                )
                return True

        try:
            sent = await asyncio.gather(*(one(index) for index in indices))
            if not any(sent):
                return 0, len(indices)
            reply = await commit(
                worker_pb2.CommitBlocksRequest(
                    write_id=write_id,
                    file=file_message(file),
                    homes=dict.fromkeys((i for i, ok in zip(indices, sent, strict=True) if ok), ""),
                ),
                # The home keeps them all before it answers: more than one call's time.
                timeout=self._timeout * 3,
                metadata=inject_metadata(),
            )
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"forward written blocks to {address}") from None
        return reply.committed, reply.missing


def _length(file: BlockRequest, index: int) -> int:
    """Block `index`'s length in the published file."""
    return max(0, min(file.block_size, file.file_size - index * file.block_size))


def file_message(file: BlockRequest) -> worker_pb2.ReadBlockRequest:
    return worker_pb2.ReadBlockRequest(
        file_id=file.file_id,
        ufs_uri=file.ufs_uri,
        etag=file.etag,
        file_size=file.file_size,
        block_size=file.block_size,
        mount_path=file.mount_path,
    )
