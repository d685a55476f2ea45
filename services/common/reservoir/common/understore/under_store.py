"""Under-stores: where the data really lives. Backends are chosen by the mount's URI.

`s3://bucket/prefix/` (S3 and S3-compatible stores through boto3, `s3_under_store.py`, whose
awaited ranged GETs go through obstore, `s3_range_reader.py`) and
`file:///dir/` (a local or network file system, `local_under_store.py`). Keys passed to a
store are relative to the mount's root. Both pass tests/contract. `mounted_stores.py`
opens them per mount.
"""

from __future__ import annotations

import abc
import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass

from reservoir.common.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str  # relative to the store's root
    size: int
    mtime_ms: int
    etag: str


@dataclass(frozen=True, slots=True)
class Listing:
    objects: list[ObjectInfo]
    prefixes: list[str]  # relative "directories", without the trailing slash
    # False when the listing stopped at the caller's bound with more entries left.
    complete: bool = True


# A page of a flat listing (`UnderStore.walk`); named here because inside the store
# classes `list` is their own method.
ObjectPage = list[ObjectInfo]
_Items = list[tuple[bytes, ObjectInfo | str]]


@dataclass(frozen=True, slots=True)
class BodyRetry:
    """How a response body that breaks off (truncated, reset) is read again: at most
    `attempts` more times, sleeping an exponentially growing, jittered delay between."""

    attempts: int = 3
    backoff_s: float = 0.05
    max_backoff_s: float = 1.0

    def delay_s(self, retry: int) -> float:
        """The pause before re-read number `retry` (0-based): full jitter in its upper half."""
        ceiling = min(self.max_backoff_s, self.backoff_s * (2**retry))
        return ceiling * random.uniform(0.5, 1.0)


@dataclass(frozen=True, slots=True)
class UnderStoreSettings:
    endpoint_url: str = ""
    region: str = ""
    credentials: str = ""  # "", "env", "anonymous" or "file:/path"
    timeout_s: float = 10.0  # to connect, and the longest a response may stall
    # The whole of one request, however large its body (obstore's reads; boto3 has none).
    request_timeout_s: float = 300.0
    retries: int = 3
    max_connections: int = 16
    body_retry: BodyRetry = BodyRetry()


class UnderStore(abc.ABC):
    uri: str

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """The object's metadata; NotFound when no object has this key."""

    @abc.abstractmethod
    def list(self, prefix: str, limit: int | None = None) -> Listing:
        """One level below `prefix` ('' is the root; otherwise it ends with '/'). With
        `limit`, the listing may stop once it holds at least that many entries (objects
        and prefixes), marked incomplete when more are left."""

    def walk(self, prefix: str) -> Iterator[ObjectPage]:
        """Every object below `prefix` ('' or ending with '/'), at any depth, a page at a
        time, in key order (UTF-8 byte order, as S3 lists). This default lists level by
        level; a store that can list a whole tree in one stream (S3 without a delimiter)
        does so, and the tree walk is the store's work."""
        listing = self.list(prefix)
        # A prefix sorts as its name followed by '/', which is how its keys sort among
        # the level's objects.
        items: _Items = [(o.key.encode(), o) for o in listing.objects]
        items.extend(((p + "/").encode(), p) for p in listing.prefixes)
        items.sort(key=lambda item: item[0])
        page: ObjectPage = []
        for _, item in items:
            if isinstance(item, ObjectInfo):
                page.append(item)
                continue
            if page:
                yield page
                page = []
            yield from self.walk(item + "/")
        if page:
            yield page

    @abc.abstractmethod
    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        """`length` bytes from `offset` (fewer only at the object's end); Conflict when the
        object's ETag is no longer `etag`."""

    async def get_range_async(
        self, key: str, offset: int, length: int, etag: str = ""
    ) -> bytes | memoryview:
        """`get_range` awaited: on a thread unless the store has a native async read (which
        may hand out a read-only view of the body it received instead of a copy)."""
        return await asyncio.to_thread(self.get_range, key, offset, length, etag)

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> ObjectInfo: ...

    @abc.abstractmethod
    def check(self) -> None:
        """Raises a clear error when the store cannot be reached or read."""

    def uri_of(self, key: str) -> str:
        return self.uri + key

    def key_of(self, uri: str) -> str:
        if not uri.startswith(self.uri):
            raise InvalidArgument(f"{uri!r} is not under {self.uri!r}")
        return uri[len(self.uri) :]
