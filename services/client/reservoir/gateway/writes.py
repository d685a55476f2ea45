"""The S3 operations that write: PutObject, multipart uploads, DeleteObject(s) and
CopyObject, all through Reservoir's write path (writable mounts): an object is published
whole when its write completes, or not at all. Every write request arrives here, and only
here, named by S3's operation table (routes.py) after the key's role is checked: a
reader's key is refused (AccessDenied) before anything is read or written. A read-only
mount refuses too (AccessDenied) and nothing reaches the store. Every other operation
(CreateBucket, PutObjectTagging, browser POST uploads...) answers NotImplemented before
it gets here (a bucket is a top-level directory of mounts, made by `reservoir mount`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from reservoir.client.async_client import AsyncClient
from reservoir.common.config import GatewayConfig
from reservoir.common.errors import (
    AlreadyExists,
    Conflict,
    IsADirectory,
    NotADirectory,
    NotFound,
    ReservoirError,
)
from reservoir.common.models import Inode
from reservoir.common.write_terms import WriteTerms

from . import write_xml
from .multipart import MultipartUploads, Upload, part_number
from .naming import Target, check_bucket
from .object_headers import check_conditions, quoted_etag, write_terms, written_metadata
from .request_body import BodyDigests, body_chunks
from .s3_errors import (
    S3Error,
    access_denied,
    from_reservoir,
    invalid_argument,
    no_such_key,
    precondition_failed,
)
from .slow_answers import answer_while
from .streamed_write import begin, write_stream

Operation = Callable[[web.Request, Target], Awaitable[web.StreamResponse]]
_XML = "application/xml"
_MAX_XML_BYTES = 2 << 20  # a DeleteObjects of 1,000 long keys, a completion of 10,000 parts
_DELETES_AT_ONCE = 16
_MAX_LIST_PARTS = 1000
# CopyObject's x-amz-copy-source-if-* conditions: the GetObject condition each one is.
_COPY_CONDITIONS = {
    "x-amz-copy-source-if-match": "If-Match",
    "x-amz-copy-source-if-none-match": "If-None-Match",
    "x-amz-copy-source-if-modified-since": "If-Modified-Since",
    "x-amz-copy-source-if-unmodified-since": "If-Unmodified-Since",
}


class GatewayWrites:
    """The write operations of one gateway, and its multipart uploads in progress."""

    def __init__(
        self, config: GatewayConfig, client: AsyncClient, signatures_checked: bool
    ) -> None:
        self._config = config
        self._client = client
        self._signed = signatures_checked
        self._uploads = MultipartUploads(
            config.spool_dir, config.spool_bytes, config.upload_expiry_s
        )
        # S3's operation names: what routes.py sends here, each in a bucket that exists.
        self.operations: dict[str, Operation] = {
            name: self._in_bucket(operation)
            for name, operation in {
                "PutObject": self._put_object,
                "DeleteObject": self._delete_object,
                "DeleteObjects": self._delete_objects,
                "CopyObject": self._copy_object,
                "CreateMultipartUpload": self._create_multipart_upload,
                "UploadPart": self._upload_part,
                "UploadPartCopy": self._upload_part_copy,
                "CompleteMultipartUpload": self._complete_multipart_upload,
                "AbortMultipartUpload": self._abort_multipart_upload,
                "ListParts": self._list_parts,
                "ListMultipartUploads": self._list_uploads,
            }.items()
        }

    def close(self) -> None:
        self._uploads.close()

    def _in_bucket(self, operation: Operation) -> Operation:
        async def checked(request: web.Request, target: Target) -> web.StreamResponse:
            await check_bucket(self._client, target)
            return await operation(request, target)

        return checked

    def _path(self, target: Target) -> str:
        path = target.object_path()
        if path is None:  # `a//b`, `a/./b`, a trailing `/`: no file of Reservoir's namespace
            raise invalid_argument("Reservoir cannot hold an object of this key", "key", target.key)
        return path

    def _body(self, request: web.Request, digests: BodyDigests) -> AsyncIterator[bytes]:
        return body_chunks(
            request.content, request.headers, digests, self._config.body_idle_timeout_s
        )

    async def _small_body(self, request: web.Request) -> bytes:
        digests = BodyDigests(request.headers, self._signed)
        body = bytearray()
        async for chunk in self._body(request, digests):
            body += chunk
            if len(body) > _MAX_XML_BYTES:
                raise write_xml.malformed()
        digests.check()
        return bytes(body)

    # ---- single objects -----------------------------------------------------------------

    async def _put_object(self, request: web.Request, target: Target) -> web.StreamResponse:
        path = self._path(target)
        terms = write_terms(request.headers, written_metadata(request.headers))
        digests = BodyDigests(request.headers, self._signed)
        with _conditions(terms):
            session = await begin(self._client, path, terms, _declared_size(request))
            inode = await write_stream(
                self._client,
                session,
                self._body(request, digests),
                digests.check,
            )
        return web.Response(headers={"ETag": quoted_etag(inode)})

    async def _delete_object(self, request: web.Request, target: Target) -> web.StreamResponse:
        path = target.object_path()
        if path is not None:
            await self._remove(path)
        return web.Response(status=204)  # also when there was nothing to delete, as in S3

    async def _remove(self, path: str) -> None:
        # No object of that key (a directory is no object): deleted already, as S3 says.
        with contextlib.suppress(NotFound, NotADirectory, IsADirectory):
            await self._client.rm(path)

    async def _delete_objects(self, request: web.Request, target: Target) -> web.StreamResponse:
        asked = write_xml.delete_request(await self._small_body(request))
        slots = asyncio.Semaphore(_DELETES_AT_ONCE)
        errors: list[tuple[str, S3Error]] = []

        async def one(key: str) -> None:
            path = Target(target.bucket, key).object_path()
            if path is None:
                return
            async with slots:
                try:
                    await self._remove(path)
                except ReservoirError as exc:
                    errors.append((key, from_reservoir(exc, target.bucket, key)))

        await asyncio.gather(*(one(key) for key in asked.keys))
        failed = {key for key, _ in errors}
        deleted = [] if asked.quiet else [k for k in asked.keys if k not in failed]
        return web.Response(body=write_xml.delete_result(deleted, errors), content_type=_XML)

    async def _copy_object(self, request: web.Request, target: Target) -> web.StreamResponse:
        path = self._path(target)
        source = await self._copy_source(request.headers)
        directive = request.headers.get("x-amz-metadata-directive", "COPY").upper()
        if source.path == path and directive != "REPLACE":
            raise S3Error(
                "InvalidRequest",
                400,
                "This copy request is illegal because it is trying to copy an object to itself "
                "without changing the object's metadata, storage class, website redirect "
                "location or encryption attributes.",
            )
        metadata = source.metadata
        if directive == "REPLACE":
            metadata = written_metadata(request.headers)
        elif directive != "COPY":
            raise invalid_argument(
                "Unknown metadata directive.", "x-amz-metadata-directive", directive
            )
        terms = WriteTerms(metadata=metadata)
        session = await begin(self._client, path, terms, source.size)

        async def copy() -> bytes:
            inode = await write_stream(self._client, session, self._read(source, 0, source.size))
            return write_xml.copy_result(quoted_etag(inode), inode.mtime_ms)

        return await self._answer_while(request, copy(), target)

    async def _answer_while(
        self, request: web.Request, work: Coroutine[Any, Any, bytes], target: Target
    ) -> web.StreamResponse:
        interval = self._config.progress_interval_s
        return await answer_while(request, work, interval, target.bucket, target.key)

    async def _copy_source(self, headers: Mapping[str, str]) -> Inode:
        """The object x-amz-copy-source names (`bucket/key`, URL-encoded, `?versionId=`
        ignored: Reservoir keeps one version), its x-amz-copy-source-if-* conditions met."""
        named = unquote(headers["x-amz-copy-source"].split("?", 1)[0]).lstrip("/")
        bucket, _, key = named.partition("/")
        source = Target(bucket, key)
        path = source.object_path() if source.valid_bucket() else None
        try:
            if path is None:
                raise NotFound(named)
            inode = await self._client.stat(path)
        except (NotFound, NotADirectory):
            await check_bucket(self._client, source)
            raise no_such_key(key) from None
        if inode.is_dir:
            raise no_such_key(key)
        conditions = {
            name: headers[field] for field, name in _COPY_CONDITIONS.items() if field in headers
        }
        if check_conditions(conditions, inode) == 304:  # for a copy, a failed precondition
            raise S3Error(
                "PreconditionFailed",
                412,
                "At least one of the pre-conditions you specified did not hold",
                Condition="x-amz-copy-source-If-None-Match",
            )
        return inode

    async def _read(self, inode: Inode, first: int, length: int) -> AsyncIterator[bytes]:
        """`length` bytes of `inode` from `first`, through the cache."""
        piece = self._config.read_piece_bytes
        for offset in range(first, first + length, piece):
            size = min(piece, first + length - offset)
            got = 0
            for part in await self._client.read_pieces(inode.path, offset, size):
                got += len(part)
                yield bytes(part)
            if got != size:  # the source was replaced meanwhile: never a mix of two versions
                raise S3Error("InternalError", 500, "The copy source changed during the copy.")

    # ---- multipart uploads ----------------------------------------------------------------

    async def _create_multipart_upload(
        self, request: web.Request, target: Target
    ) -> web.StreamResponse:
        path = self._path(target)
        # Refused now, as S3 refuses it, rather than after the parts were sent.
        mounts = [m for m in await self._client.mounts() if _below(path, m.path)]
        if not mounts or not max(mounts, key=lambda m: len(m.path)).options.writable:
            raise access_denied()
        metadata = written_metadata(request.headers)
        upload = self._uploads.create(target.bucket, target.key, path, metadata)
        return web.Response(body=write_xml.initiated(upload), content_type=_XML)

    def _upload(self, request: web.Request, target: Target) -> Upload:
        return self._uploads.get(request.query["uploadId"], target.bucket, target.key)

    async def _upload_part(self, request: web.Request, target: Target) -> web.StreamResponse:
        upload = self._upload(request, target)
        number = part_number(request.query.get("partNumber"))
        digests = BodyDigests(request.headers, self._signed)
        part = await self._uploads.put_part(
            upload,
            number,
            self._body(request, digests),
            request.content_length,
            digests.check,
        )
        return web.Response(headers={"ETag": f'"{part.etag}"'})

    async def _upload_part_copy(self, request: web.Request, target: Target) -> web.StreamResponse:
        upload = self._upload(request, target)
        number = part_number(request.query.get("partNumber"))
        source = await self._copy_source(request.headers)
        first, length = _copy_range(request.headers.get("x-amz-copy-source-range"), source.size)
        part = await self._uploads.put_part(
            upload, number, self._read(source, first, length), length, lambda: None
        )
        body = write_xml.copy_part_result(f'"{part.etag}"', part.modified_ms)
        return web.Response(body=body, content_type=_XML)

    async def _complete_multipart_upload(
        self, request: web.Request, target: Target
    ) -> web.StreamResponse:
        upload = self._upload(request, target)
        terms = write_terms(request.headers, upload.metadata)
        listed = write_xml.completed_parts(await self._small_body(request))
        parts = self._uploads.chosen(upload, listed)
        with _conditions(terms):
            session = await begin(self._client, upload.path, terms)
        upload.completing = True  # no part may change while it is written through

        async def complete() -> bytes:
            try:
                with _conditions(terms):
                    inode = await write_stream(
                        self._client, session, self._uploads.read(upload, parts)
                    )
            except BaseException:
                upload.completing = False  # S3 lets a client retry a completion that failed
                raise
            self._uploads.discard(upload)
            location = f"{request.url.origin()}/{target.bucket}/{target.key}"
            return write_xml.completed(location, target.bucket, target.key, quoted_etag(inode))

        return await self._answer_while(request, complete(), target)

    async def _abort_multipart_upload(
        self, request: web.Request, target: Target
    ) -> web.StreamResponse:
        self._uploads.discard(self._upload(request, target))
        return web.Response(status=204)

    async def _list_parts(self, request: web.Request, target: Target) -> web.StreamResponse:
        """ListParts (a GET with uploadId): the parts spooled so far, by number."""
        upload = self._upload(request, target)
        try:
            marker = int(request.query.get("part-number-marker", "0"))
            most = min(_MAX_LIST_PARTS, int(request.query.get("max-parts", _MAX_LIST_PARTS)))
        except ValueError:
            raise invalid_argument("part-number-marker and max-parts must be integers") from None
        following = sorted(n for n in upload.parts if n > marker)
        page = [upload.parts[n] for n in following[: max(0, most)]]
        truncated = len(following) > len(page)
        body = write_xml.part_listing(upload, page, marker, most, truncated)
        return web.Response(body=body, content_type=_XML)

    async def _list_uploads(self, request: web.Request, target: Target) -> web.StreamResponse:
        """ListMultipartUploads: this gateway's uploads in progress in the bucket, so a
        leaked one can be found and aborted."""
        query = request.query
        try:
            most = min(_MAX_LIST_PARTS, int(query.get("max-uploads", _MAX_LIST_PARTS)))
        except ValueError:
            raise invalid_argument("max-uploads must be an integer") from None
        encoding = query.get("encoding-type", "")
        if encoding not in ("", "url"):
            raise invalid_argument(
                "Invalid Encoding Method specified in Request", "encoding-type", encoding
            )
        asked = write_xml.UploadListingAsk(
            prefix=query.get("prefix", ""),
            delimiter=query.get("delimiter", ""),
            key_marker=query.get("key-marker", ""),
            upload_id_marker=query.get("upload-id-marker", ""),
            max_uploads=max(0, most),
            encoding=encoding,
        )
        uploads, prefixes, truncated = self._uploads.listing(target.bucket, asked)
        body = write_xml.upload_listing(target.bucket, asked, uploads, prefixes, truncated)
        return web.Response(body=body, content_type=_XML)


@contextlib.contextmanager
def _conditions(terms: WriteTerms) -> Iterator[None]:
    """A write's failed condition, as S3 answers it: 412 PreconditionFailed."""
    try:
        yield
    except AlreadyExists as exc:
        raise precondition_failed("If-None-Match") from exc
    except Conflict as exc:
        if not terms.conditional:
            raise
        raise precondition_failed("If-Match") from exc


def _declared_size(request: web.Request) -> int | None:
    """The object's size as the request announces it (an `aws-chunked` body's decoded
    length, else its Content-Length); None when it does not."""
    if "aws-chunked" in request.headers.get("Content-Encoding", ""):
        decoded = request.headers.get("x-amz-decoded-content-length", "")
        return int(decoded) if decoded.isdigit() else None
    return request.content_length


def _below(path: str, mount_path: str) -> bool:
    return path == mount_path or path.startswith(mount_path.rstrip("/") + "/")


def _copy_range(header: str | None, size: int) -> tuple[int, int]:
    """UploadPartCopy's x-amz-copy-source-range (`bytes=first-last`, both required): its
    first byte and length; the whole source without one."""
    if header is None:
        return 0, size
    first, _, last = header.removeprefix("bytes=").partition("-")
    if not (first.isdigit() and last.isdigit()) or int(first) > int(last) or int(last) >= size:
        raise invalid_argument(
            "The x-amz-copy-source-range value must be of the form bytes=first-last where "
            "first and last are the zero-based offsets of the first and last bytes to copy",
            "x-amz-copy-source-range",
            header,
        )
    return int(first), int(last) - int(first) + 1
