"""S3 and S3-compatible stores: ranged GETs signed by obstore and received into the
caller's buffer (`s3_range_reader.py`, `signed_gets.py`: one GET stack, one body-retry
loop, `body_retries.py`), listings, HEADs and writes (`s3_writes.py`) through boto3. Errors name what was refused and where: the endpoint, the credential
source (`store_errors.py`).
"""

from __future__ import annotations

import asyncio
import datetime
import os
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from reservoir.common.errors import (
    InvalidArgument,
    PermissionDenied,
    ReservoirError,
    Unavailable,
)
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.redaction import install as redact_sdk_logs
from reservoir.common.understore.s3_credentials import aws_session
from reservoir.common.understore.s3_range_reader import S3RangeReader
from reservoir.common.understore.s3_writes import S3Writes
from reservoir.common.understore.store_errors import StorePlace, error_for_status
from reservoir.common.understore.under_store import (
    NO_METADATA,
    Keys,
    Listing,
    ObjectInfo,
    ObjectPage,
    Part,
    Parts,
    StoreLimits,
    UnderStore,
    UnderStoreSettings,
)

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-_]{1,61}[a-z0-9]$")
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


def _timestamp(value: str | int | float) -> datetime.datetime:
    """A response timestamp as botocore's parser reads it (timezone-aware), fast for the
    ISO 8601 form S3 lists in."""
    from botocore.parsers import DEFAULT_TIMESTAMP_PARSER

    if isinstance(value, str):
        try:
            parsed = datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is not None:  # a zone-less time is botocore's to interpret
                return parsed
    return DEFAULT_TIMESTAMP_PARSER(value)  # type: ignore[no-any-return,arg-type]


class S3UnderStore(UnderStore):
    def __init__(self, uri: str, settings: UnderStoreSettings) -> None:
        parts = urlsplit(uri)
        bucket = parts.netloc
        if not _BUCKET.match(bucket):
            raise InvalidArgument(f"bad S3 bucket name in {uri!r}")
        prefix = parts.path.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        self.uri = f"s3://{bucket}/{prefix}"
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint = settings.endpoint_url or "the default AWS endpoint"
        self.credentials = settings.credentials or "env"
        self._place = StorePlace(self.endpoint, self.credentials)
        session, anonymous = self._session(settings)
        self._s3 = self._client(settings, session, anonymous)
        self._ranges = S3RangeReader(
            bucket, prefix, settings, None if anonymous else session, self._place
        )
        self._writes = S3Writes(self, self._s3)

    @staticmethod
    def _session(settings: UnderStoreSettings) -> tuple[Any, bool]:
        return aws_session(settings.credentials)

    @staticmethod
    def _client(settings: UnderStoreSettings, session: Any, anonymous: bool) -> Any:
        import botocore
        from botocore.config import Config

        config_args: dict[str, Any] = {
            "connect_timeout": settings.timeout_s,
            "read_timeout": settings.timeout_s,
            "retries": {"max_attempts": max(1, settings.retries), "mode": "standard"},
            "max_pool_connections": settings.max_connections,
            "s3": {"addressing_style": "path"},
        }
        if anonymous:
            config_args["signature_version"] = botocore.UNSIGNED
        redact_sdk_logs()
        # botocore reads every timestamp with dateutil, ~100 us apiece: most of the CPU a
        # listing costs (one LastModified per object). S3's ISO 8601 form parses in well
        # under a microsecond; anything else still goes to botocore's parser.
        factory = session._session.get_component("response_parser_factory")
        factory.set_parser_defaults(timestamp_parser=_timestamp)
        client = session.client(
            "s3",
            endpoint_url=settings.endpoint_url or None,
            region_name=settings.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            config=Config(**config_args),
        )
        redact_sdk_logs()  # the client has imported more of botocore: its loggers too
        return client

    def _error(self, exc: Exception, what: str) -> ReservoirError:
        """The domain error for a boto3 failure (the one table, `store_errors`)."""
        import botocore.exceptions as bce

        if isinstance(exc, bce.ClientError):
            error = exc.response.get("Error", {})
            code = str(error.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code.isdigit() and not status:
                status = int(code)
            return error_for_status(self._place, what, status, code)
        where = self._place.where
        if isinstance(exc, bce.NoCredentialsError):
            return PermissionDenied(
                f"{what}: no credentials found for {where} (credential source "
                f"{self.credentials!r}: this process has no AWS credentials to use)"
            )
        if isinstance(exc, bce.EndpointConnectionError | bce.ConnectTimeoutError):
            reason = exc.kwargs.get("error", "") if hasattr(exc, "kwargs") else ""
            return Unavailable(
                f"{what}: cannot connect to the under-store endpoint {self.endpoint}"
                + (f" ({reason})" if reason else "")
            )
        if isinstance(exc, bce.ReadTimeoutError):
            return Unavailable(f"{what}: {where} did not answer in time")
        return Unavailable(f"{what}: {where}: {type(exc).__name__}: {exc}")

    def head(self, key: str) -> ObjectInfo:
        try:
            r = self._s3.head_object(Bucket=self.bucket, Key=self.prefix + key)
        except Exception as exc:
            raise self._error(exc, f"head {self.uri_of(key)}") from exc
        return ObjectInfo(
            key=key,
            size=int(r["ContentLength"]),
            mtime_ms=int(r["LastModified"].timestamp() * 1000),
            etag=str(r.get("ETag", "")).strip('"'),
        )

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        complete = True
        full = self.prefix + prefix
        try:
            paging = {"PageSize": min(1000, limit)} if limit is not None else {}
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full, Delimiter="/", PaginationConfig=paging
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    rel = item["Key"][len(self.prefix) :]
                    if rel == prefix:  # a "directory marker" object
                        continue
                    objects.append(
                        ObjectInfo(
                            key=rel,
                            size=int(item["Size"]),
                            mtime_ms=int(item["LastModified"].timestamp() * 1000),
                            etag=str(item.get("ETag", "")).strip('"'),
                        )
                    )
                for common in page.get("CommonPrefixes", ()):
                    prefixes.append(common["Prefix"][len(self.prefix) :].rstrip("/"))
                if limit is not None and len(objects) + len(prefixes) >= limit:
                    # Whole pages only: the bound is reached, the next page is not asked for.
                    complete = not page.get("IsTruncated", False)
                    break
        except Exception as exc:
            raise self._error(exc, f"list {self.uri_of(prefix)}") from exc
        return Listing(objects, prefixes, complete)

    def walk(self, prefix: str) -> Iterator[ObjectPage]:
        """One listing without a delimiter: S3 walks the tree and streams every key below
        `prefix` in order, 1,000 a page, however the keys nest."""
        full = self.prefix + prefix
        strip = len(self.prefix)
        try:
            pages = self._s3.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=full
            )
            for page in pages:
                yield [
                    ObjectInfo(
                        key=item["Key"][strip:],
                        size=int(item["Size"]),
                        mtime_ms=int(item["LastModified"].timestamp() * 1000),
                        etag=str(item.get("ETag", "")).strip('"'),
                    )
                    for item in page.get("Contents", ())
                ]
        except Exception as exc:
            raise self._error(exc, f"list {self.uri_of(prefix)}") from exc

    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        """Blocking callers (tools, tests) take the awaited reads' GET stack, on a loop of
        their own: one GET stack and one body-retry loop for the store."""
        return bytes(asyncio.run(self.get_range_async(key, offset, length, etag)))

    async def get_range_async(
        self, key: str, offset: int, length: int, etag: str = ""
    ) -> bytes | memoryview:
        """On the event loop, into a new buffer (`s3_range_reader.py`)."""
        return await self._ranges.get_range(
            key, offset, length, etag, what=f"get {self.uri_of(key)}"
        )

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        """Received straight into `out`, by a GET obstore presigned (`signed_gets.py`)."""
        return await self._ranges.get_range_into(
            key, offset, out, etag, what=f"get {self.uri_of(key)}"
        )

    # ---- writes (`s3_writes.py`) --------------------------------------------------------

    def limits(self) -> StoreLimits:
        return StoreLimits(writes=True)

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        return self._writes.put(key, data, metadata)

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        return self._writes.create_upload(key, metadata)

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        return self._writes.upload_part(key, upload_id, number, data)

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        return self._writes.complete_upload(key, upload_id, parts, metadata)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self._writes.abort_upload(key, upload_id)

    def open_uploads(self, key: str) -> Keys:
        return self._writes.open_uploads(key)

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        return self._writes.copy(source, destination, if_match)

    def delete(self, keys: Keys) -> None:
        self._writes.delete(keys)

    def check(self) -> None:
        try:
            self._s3.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix, MaxKeys=1)
        except Exception as exc:
            raise self._error(exc, f"mount {self.uri}") from exc
