"""Parts of files being written, uploaded to the under-store by this worker (WritePart).

A writer sends each part of a file once, to one worker, and holds no credentials of the
store: the worker stages the part's blocks where it is (they are the file's cached blocks
once it is published, as StageBlock's are) and uploads the part itself, with the mount's
credentials, from the cluster's side: as part `number` of the multipart upload the master
opened for the write, or, for a write the master began whole, as the whole object in one
PUT (its ETag its MD5) with the metadata the write asked for. It answers once the store
holds the part, so a writer keeps each part until then; a part the store failed (after
botocore's own retries) the writer sends again, to the next worker, within its bound.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from reservoir.common import logs
from reservoir.common.blocks.block_file import checksum
from reservoir.common.blocks.staged_block_wire import StagedBlock
from reservoir.common.errors import DataLoss, InvalidArgument, NotFound
from reservoir.common.metadata.metadata_store import MetadataStore
from reservoir.common.metadata.write_records import WriteRecord, write_key

from .written_blocks import WrittenBlocks

if TYPE_CHECKING:
    from .service import WorkerService

log = logs.get_logger(__name__)


class PartUploads:
    def __init__(
        self, service: WorkerService, store: MetadataStore, written: WrittenBlocks
    ) -> None:
        """`store`: where the master records writes (each part is checked against its
        write's record: the upload, the key, the mount)."""
        self._service = service
        self._store = store
        self._written = written
        self._pool = ThreadPoolExecutor(service.config.write_threads, thread_name_prefix="upload")

    async def upload(self, part: StagedBlock) -> tuple[str, int]:
        """Stages the part's blocks here and uploads it; (the store's ETag, blocks staged)."""
        if part.number < 1 or part.block_size < 1 or part.index < 0:
            raise InvalidArgument("a part's number, first block or block size is out of range")
        if checksum(part.data) != part.crc32c:
            raise DataLoss(f"part {part.number} of write {part.write_id}: checksum mismatch")
        record = await self._open_write(part.write_id)
        if record.whole and part.number != 1:
            raise InvalidArgument(f"write {part.write_id} is one PUT: it has no part {part.number}")
        ufs = await self._service.fetcher.write_store(record.mount_path)
        if part.number > ufs.limits().max_parts:
            raise InvalidArgument(
                f"part {part.number}: {ufs.uri} takes at most {ufs.limits().max_parts} parts"
            )
        staged = 0
        for n, start in enumerate(range(0, len(part.data), part.block_size)):
            block = part.data[start : start + part.block_size]
            if self._written.stage(part.write_id, part.index + n, block, checksum(block)):
                staged += 1
        data = bytes(part.data)  # boto3 takes bytes
        loop = asyncio.get_running_loop()
        if record.whole:
            metadata = record.object_metadata
            put = await loop.run_in_executor(self._pool, ufs.put, record.key, data, metadata)
            etag = put.etag
        else:
            uploaded = await loop.run_in_executor(
                self._pool, ufs.upload_part, record.key, record.upload_id, part.number, data
            )
            etag = uploaded.etag
        log.debug("part_uploaded", path=record.path, part=part.number, bytes=len(data))
        return etag, staged

    async def _open_write(self, write_id: str) -> WriteRecord:
        raw = await self._store.get(write_key(write_id))
        record = WriteRecord.from_json(raw) if raw is not None else None
        if record is None or record.published_file_id:
            raise NotFound(f"write {write_id} is not open: published, aborted or timed out")
        return record

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
