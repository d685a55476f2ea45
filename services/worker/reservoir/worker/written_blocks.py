"""Blocks of files being written through Reservoir (checkpoints), held until publish.

A written file's identity (its file id, from the ETag) exists only once the upload is
complete. So each block is staged under the write's id on the worker its writer sent the
block's part to (part_uploads.py), as it writes; once the file is published the writer
tells each staging worker the file's identity. The
worker then keeps each block where it landed, under the real id (renamed in its tier,
never copied), and reports it to the master before it answers: readers find every block
through the block-location table, which they consult before a block's home. Reading a
file right after it was written costs the under-store nothing, and no block crosses the
network twice. Parts travel in protobuf's encoding built and read by hand
(staged_block_wire.py): the payload is copied once into the request and read on arrival
as a view into it.

Staged blocks live in the worker's ordinary tiers under a staging id, so they take room
within its capacity and are evicted like any other block: a staged block that is gone by
commit time is only a block the first reader fetches from the store. Nothing here is ever
served under a published id unless its length and checksum match what was staged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from reservoir.common.blocks.block_file import checksum
from reservoir.common.errors import DataLoss, InvalidArgument, PermissionDenied
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.metadata.write_records import WriteRecord, check_write_id, write_key

from .memory_tier import BlockId

if TYPE_CHECKING:
    from .service import BlockRequest, WorkerService

# Staged blocks' file ids: never a published file's (those are hex digests).
STAGED_PREFIX = "staged-"


def staged_id(write_id: str, index: int) -> BlockId:
    # The id names files in the disk tier: only what the master makes is taken.
    if index < 0:
        raise InvalidArgument("index must not be negative")
    return (STAGED_PREFIX + check_write_id(write_id), index)


class BlockReports(Protocol):
    """Sends the master this worker's block changes now (block_reporter.BlockReporter)."""

    async def report(self) -> None: ...


class WrittenBlocks:
    def __init__(self, service: WorkerService, store: MetadataStore, reports: BlockReports) -> None:
        """`store`: where the master records writes (a write's blocks are kept only under
        the file id it published); `reports`: tells the master what this worker holds."""
        self._service = service
        self._store = store
        self._reports = reports

    def stage(self, write_id: str, index: int, data: bytes | memoryview, crc: int) -> bool:
        """Holds a written block until its file is published; False when no tier took it
        (full of pinned or hotter blocks): the block is then read from the store later."""
        block = staged_id(write_id, index)
        if checksum(data) != crc:
            raise DataLoss(f"block {index} of write {write_id}: checksum mismatch on arrival")
        return self._service.store.put(block, data, crc, 0)

    async def commit(
        self, write_id: str, file: BlockRequest, indices: list[int]
    ) -> tuple[int, int]:
        """Keeps each staged block `indices` of the write here under the published file's
        id; returns (committed, missing)."""
        await self._service.check_mount(file)
        raw = await self._store.get(write_key(write_id))
        record = WriteRecord.from_json(raw) if raw is not None else None
        if record is None or record.published_file_id != file.file_id:
            # Staged bytes become a file's cached blocks only for the file their write
            # published: never another file's (a poisoned cache), never an unpublished one.
            raise PermissionDenied(f"write {write_id} did not publish file {file.file_id}")
        committed = missing = 0
        for index in sorted(set(indices)):
            staged = staged_id(write_id, index)
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
        if committed:
            # Before the writer's close returns, the master knows where the blocks are: a
            # reader's stat right after it names them, and reads go there, not to the
            # blocks' homes.
            await self._reports.report()
        return committed, missing


def _length(file: BlockRequest, index: int) -> int:
    """Block `index`'s length in the published file."""
    return max(0, min(file.block_size, file.file_size - index * file.block_size))
