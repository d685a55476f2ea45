"""Multipart uploads in progress at this gateway. S3 clients (boto3's TransferManager, the
AWS CLI) send parts of their own size, out of order and in parallel, possibly more than
once; the write path takes parts of its own size in order. So each part is spooled to a
local directory (its MD5 is its ETag, as in S3) and CompleteMultipartUpload streams the
chosen parts, in order, through the write path: the object is published whole or not at
all. The spool is bounded (`multipart_spool_bytes`); uploads nobody completes or aborts
are dropped after `multipart_expiry_s`. Uploads live in this process: a gateway that
restarts has none (their ids answer NoSuchUpload)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from reservoir.common import logs
from reservoir.common.object_metadata import ObjectMetadata

from .s3_errors import S3Error, invalid_argument

if TYPE_CHECKING:
    from .write_xml import UploadListingAsk

log = logs.get_logger(__name__)

MAX_PART_NUMBER = 10_000
MIN_PART_BYTES = 5 << 20  # S3's smallest part but the last
_READ_BYTES = 8 << 20


@dataclass(frozen=True)
class SpooledPart:
    number: int
    size: int
    etag: str  # the part's MD5, hex (unquoted)
    modified_ms: int


@dataclass
class Upload:
    upload_id: str
    bucket: str
    key: str
    path: str  # the Reservoir path it publishes
    directory: Path
    initiated_ms: int
    metadata: ObjectMetadata = field(default_factory=ObjectMetadata)  # stored at completion
    parts: dict[int, SpooledPart] = field(default_factory=dict)
    completing: bool = False


def no_such_upload(upload_id: str) -> S3Error:
    return S3Error(
        "NoSuchUpload",
        404,
        "The specified upload does not exist. The upload ID may be invalid, or the upload "
        "may have been aborted or completed.",
        UploadId=upload_id,
    )


def part_number(value: str | None) -> int:
    try:
        number = int(value or "")
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_PART_NUMBER:
        raise invalid_argument(
            f"Part number must be an integer between 1 and {MAX_PART_NUMBER}, inclusive",
            "partNumber",
            value or "",
        )
    return number


def _spool_full() -> S3Error:
    return S3Error("ServiceUnavailable", 503, "The gateway's multipart spool is full; retry later.")


class MultipartUploads:
    def __init__(self, spool_dir: str, limit_bytes: int, expiry_s: float) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="reservoir-gateway-", dir=spool_dir or None))
        self._limit = limit_bytes
        self._expiry_s = expiry_s
        self._uploads: dict[str, Upload] = {}
        self._spooled = 0  # bytes held (or reserved) by every part of every upload

    def create(
        self, bucket: str, key: str, path: str, metadata: ObjectMetadata | None = None
    ) -> Upload:
        self._expire()
        upload_id = secrets.token_urlsafe(32)
        directory = self._root / upload_id
        directory.mkdir()
        upload = Upload(
            upload_id,
            bucket,
            key,
            path,
            directory,
            int(time.time() * 1000),
            metadata or ObjectMetadata(),
        )
        self._uploads[upload_id] = upload
        return upload

    def get(self, upload_id: str, bucket: str, key: str) -> Upload:
        upload = self._uploads.get(upload_id)
        if upload is None or (upload.bucket, upload.key) != (bucket, key) or upload.completing:
            raise no_such_upload(upload_id)
        return upload

    async def put_part(
        self,
        upload: Upload,
        number: int,
        chunks: AsyncIterator[bytes],
        length: int | None,
        check: Callable[[], None],
    ) -> SpooledPart:
        """Spools one part (replacing an earlier part of that number once it is whole and
        `check` passed: a part whose digest does not match leaves the earlier one)."""
        reserved = length or 0
        if self._spooled + reserved > self._limit:
            raise _spool_full()
        self._spooled += reserved
        loop = asyncio.get_running_loop()
        scratch = upload.directory / f"{number}.{secrets.token_hex(4)}.part"
        md5 = hashlib.md5(usedforsecurity=False)
        size = 0
        try:
            if self._uploads.get(upload.upload_id) is not upload:
                raise no_such_upload(upload.upload_id)  # aborted while the part was on its way
            with scratch.open("wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > reserved:  # a body longer than announced, or none announced
                        grow = size - reserved
                        if self._spooled + grow > self._limit:
                            raise _spool_full()
                        self._spooled += grow
                        reserved = size
                    md5.update(chunk)
                    await loop.run_in_executor(None, out.write, chunk)
            check()
            if self._uploads.get(upload.upload_id) is not upload or upload.completing:
                raise no_such_upload(upload.upload_id)  # aborted or completed meanwhile
            os.replace(scratch, upload.directory / str(number))
        except BaseException:
            self._spooled -= reserved
            scratch.unlink(missing_ok=True)
            raise
        self._spooled -= reserved - size
        replaced = upload.parts.get(number)
        if replaced is not None:
            self._spooled -= replaced.size
        part = SpooledPart(number, size, md5.hexdigest(), int(time.time() * 1000))
        upload.parts[number] = part
        return part

    def listing(self, bucket: str, asked: UploadListingAsk) -> tuple[list[Upload], list[str], bool]:
        """ListMultipartUploads: the bucket's uploads in progress after the markers, in
        (key, initiation) order, keys below a delimiter rolled up into common prefixes;
        whether more follow."""
        self._expire()
        after = (asked.key_marker, asked.upload_id_marker)
        mine = sorted(
            (u for u in self._uploads.values() if u.bucket == bucket and not u.completing),
            key=lambda u: (u.key, u.initiated_ms, u.upload_id),
        )
        uploads: list[Upload] = []
        prefixes: list[str] = []
        for upload in mine:
            if not upload.key.startswith(asked.prefix):
                continue
            if asked.key_marker and (
                upload.key < after[0]
                or (upload.key == after[0] and (not after[1] or upload.upload_id <= after[1]))
            ):
                continue
            rest = upload.key[len(asked.prefix) :]
            if asked.delimiter and asked.delimiter in rest:
                common = asked.prefix + rest.split(asked.delimiter, 1)[0] + asked.delimiter
                if common not in prefixes:
                    if len(uploads) + len(prefixes) == asked.max_uploads:
                        return uploads, prefixes, True
                    prefixes.append(common)
                continue
            if len(uploads) + len(prefixes) == asked.max_uploads:
                return uploads, prefixes, True
            uploads.append(upload)
        return uploads, prefixes, False

    def chosen(self, upload: Upload, listed: list[tuple[int, str]]) -> list[SpooledPart]:
        """The parts a CompleteMultipartUpload names, checked as S3 checks them."""
        if not listed:
            raise S3Error(
                "MalformedXML",
                400,
                "The XML you provided was not well-formed or did not validate against our "
                "published schema",
            )
        numbers = [n for n, _ in listed]
        if numbers != sorted(set(numbers)):
            raise S3Error(
                "InvalidPartOrder",
                400,
                "The list of parts was not in ascending order. Parts must be ordered by part "
                "number.",
                UploadId=upload.upload_id,
            )
        parts = []
        for number, etag in listed:
            part = upload.parts.get(number)
            if part is None or etag.strip('"') != part.etag:
                raise S3Error(
                    "InvalidPart",
                    400,
                    "One or more of the specified parts could not be found. The part may not "
                    "have been uploaded, or the specified entity tag may not have matched the "
                    "part's entity tag.",
                    UploadId=upload.upload_id,
                    PartNumber=str(number),
                    ETag=etag,
                )
            parts.append(part)
        for part in parts[:-1]:
            if part.size < MIN_PART_BYTES:
                raise S3Error(
                    "EntityTooSmall",
                    400,
                    "Your proposed upload is smaller than the minimum allowed object size.",
                    ProposedSize=str(part.size),
                    MinSizeAllowed=str(MIN_PART_BYTES),
                    PartNumber=str(part.number),
                )
        return parts

    async def read(self, upload: Upload, parts: list[SpooledPart]) -> AsyncIterator[bytes]:
        """The bytes of `parts`, in order, from the spool."""
        loop = asyncio.get_running_loop()
        for part in parts:
            with (upload.directory / str(part.number)).open("rb") as spooled:
                while chunk := await loop.run_in_executor(None, spooled.read, _READ_BYTES):
                    yield chunk

    def discard(self, upload: Upload) -> None:
        """Forgets the upload and frees its spool (an abort, a completion, an expiry)."""
        if self._uploads.pop(upload.upload_id, None) is None:
            return
        self._spooled -= sum(p.size for p in upload.parts.values())
        shutil.rmtree(upload.directory, ignore_errors=True)

    def _expire(self) -> None:
        oldest = (time.time() - self._expiry_s) * 1000
        for upload in [u for u in self._uploads.values() if u.initiated_ms < oldest]:
            if not upload.completing:
                log.info("multipart_upload_expired", path=upload.path, upload_id=upload.upload_id)
                self.discard(upload)

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)
