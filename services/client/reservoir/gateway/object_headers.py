"""What a GetObject or HeadObject answers before any byte of the body: the object's own
headers, its `Range` (RFC 9110 as S3 applies it) and the conditional headers (RFC 9110
section 13, in S3's order of precedence)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime

from reservoir.common.models import Inode

from .s3_errors import S3Error, invalid_range, precondition_failed

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


def object_headers(inode: Inode) -> dict[str, str]:
    return {
        "ETag": quoted_etag(inode),
        "Last-Modified": format_datetime(modified(inode), usegmt=True),
        "Accept-Ranges": "bytes",
        "Content-Type": "binary/octet-stream",
    }


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
