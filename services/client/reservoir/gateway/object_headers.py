"""What a GetObject or HeadObject answers before any byte of the body: the object's own
headers, its `Range` (RFC 9110 as S3 applies it) and the conditional headers (RFC 9110
section 13, in S3's order of precedence)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from reservoir.common.errors import InvalidArgument
from reservoir.common.models import Inode
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.write_terms import WriteTerms

from .s3_errors import S3Error, invalid_range, not_implemented, precondition_failed

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@dataclass(frozen=True)
class ByteRange:
    first: int
    last: int  # inclusive

    @property
    def length(self) -> int:
        return self.last - self.first + 1


def byte_range(header: str | None, size: int) -> ByteRange | None:
    """The range a `Range` header asks of an object of `size` bytes; None for the whole
    object (no header, or one S3 ignores: not `bytes=`, several ranges, first > last).
    InvalidRange (416) when no byte of it exists."""
    if not header:
        return None
    match = _RANGE.match(header.strip())
    if not match:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # a suffix: the last N bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise invalid_range(size, header)
        return ByteRange(max(0, size - suffix), size - 1)
    start = int(first)
    end = int(last) if last else size - 1
    if last and end < start:
        return None
    if start >= size:
        raise invalid_range(size, header)
    return ByteRange(start, min(end, size - 1))


def quoted_etag(inode: Inode) -> str:
    return f'"{inode.etag}"'


def modified(inode: Inode) -> datetime:
    # HTTP dates have whole seconds: compare at that precision.
    return datetime.fromtimestamp(inode.mtime_ms // 1000, UTC)


# The system metadata a writer sets with these headers, and a reader gets back.
_WRITTEN = (
    ("Content-Type", "content_type"),
    ("Content-Encoding", "content_encoding"),
    ("Content-Disposition", "content_disposition"),
    ("Cache-Control", "cache_control"),
    ("Content-Language", "content_language"),
)
_USER = "x-amz-meta-"


def object_headers(inode: Inode) -> dict[str, str]:
    meta = inode.metadata
    headers = {
        "ETag": quoted_etag(inode),
        "Last-Modified": format_datetime(modified(inode), usegmt=True),
        "Accept-Ranges": "bytes",
        "Content-Type": meta.content_type or "binary/octet-stream",
    }
    headers |= {header: getattr(meta, name) for header, name in _WRITTEN if getattr(meta, name)}
    headers |= {_USER + name: value for name, value in meta.user}
    return headers


def written_metadata(headers: Mapping[str, str]) -> ObjectMetadata:
    """The metadata a PutObject, CreateMultipartUpload or CopyObject (REPLACE) gives:
    `aws-chunked`, the body's framing, is no Content-Encoding of the object."""
    system = {name: headers.get(header, "").strip() for header, name in _WRITTEN}
    codings = [c.strip() for c in system["content_encoding"].split(",")]
    system["content_encoding"] = ",".join(c for c in codings if c and c != "aws-chunked")
    user = {k[len(_USER) :]: v for k, v in headers.items() if k.lower().startswith(_USER)}
    try:
        return ObjectMetadata.of(user, **system)
    except InvalidArgument as exc:
        raise S3Error(
            "MetadataTooLarge" if "bytes" in str(exc) else "InvalidArgument",
            400,
            f"Your metadata headers are not valid: {exc}",
        ) from exc


def write_terms(headers: Mapping[str, str], metadata: ObjectMetadata) -> WriteTerms:
    """A write's metadata and S3's conditional-write headers: If-None-Match (only `*`, as
    S3 takes it) and If-Match."""
    if_none_match = headers.get("If-None-Match")
    if if_none_match is not None and if_none_match.strip() != "*":
        raise not_implemented(f"If-None-Match: {if_none_match} (only * on writes)")
    return WriteTerms(
        metadata=metadata,
        if_absent=if_none_match is not None,
        if_match=headers.get("If-Match", "").strip().strip('"'),
    )


def _etag_matches(header: str, inode: Inode) -> bool:
    tags = [t.strip() for t in header.split(",")]
    return any(t == "*" or t.strip('"') == inode.etag for t in tags)


def _date(header: str | None) -> datetime | None:
    if not header:
        return None
    try:
        value = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None  # an unparsable date is ignored, as S3 and RFC 9110 do
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def check_conditions(headers: Mapping[str, str], inode: Inode) -> int | None:
    """304 when the client's copy is current, else None; PreconditionFailed (412) when a
    precondition fails. If-Match wins over If-Unmodified-Since, If-None-Match over
    If-Modified-Since, as in S3."""
    if_match = headers.get("If-Match")
    if if_match is not None:
        if not _etag_matches(if_match, inode):
            raise precondition_failed("If-Match")
    else:
        since = _date(headers.get("If-Unmodified-Since"))
        if since is not None and modified(inode) > since:
            raise precondition_failed("If-Unmodified-Since")
    if_none_match = headers.get("If-None-Match")
    if if_none_match is not None:
        return 304 if _etag_matches(if_none_match, inode) else None
    since = _date(headers.get("If-Modified-Since"))
    if since is not None and modified(inode) <= since:
        return 304
    return None


# GetObject's response-* query parameters: the header each one sets on the response.
RESPONSE_OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}


def overrides(query: Mapping[str, str]) -> dict[str, str]:
    return {header: query[name] for name, header in RESPONSE_OVERRIDES.items() if name in query}


__all__ = ["ByteRange", "S3Error", "byte_range", "check_conditions", "object_headers"]
