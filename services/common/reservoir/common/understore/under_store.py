"""Under-stores: where the data really lives. One interface for every backend: reads
(stat with a change token, one level of a listing, ranged reads), writes (whole objects,
multipart uploads whose parts any process may send, copies, deletes) and `limits()`.

Backends register their URI schemes in `store_schemes.py` (the one place a scheme is
spelled); `mounted_stores.py` opens them per mount. Keys passed to a store are relative to
the mount's root. Every backend passes the one contract suite (tests/contract). A store
that cannot write keeps the defaults here, which refuse.
"""

from __future__ import annotations

import abc
import asyncio
import random
from collections.abc import Iterator
from dataclasses import dataclass

from reservoir.common.errors import InvalidArgument, ReadOnly
from reservoir.common.object_metadata import ObjectMetadata

NO_METADATA = ObjectMetadata()
MiB = 1024 * 1024


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


@dataclass(frozen=True, slots=True)
class Part:
    """One uploaded part of a multipart upload, as its completion names it."""

    number: int  # 1-based
    etag: str


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """What a store's writes may be: S3's multipart rules by default (the strictest of
    the stores), no writes at all unless the store says so."""

    writes: bool = False
    min_part_size: int = 5 * MiB  # every part of an upload but the last
    max_part_size: int = 5 * 1024 * MiB
    max_parts: int = 10_000
    # The store moves an object in place, atomically (a file system): a rename is one
    # call, not a copy of every byte and a delete.
    renames: bool = False


# A page of a flat listing (`UnderStore.walk`); named here because inside the store
# classes `list` is their own method.
ObjectPage = list[ObjectInfo]
Parts = list[Part]
Keys = list[str]
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
    # How long a store that signs its GETs in advance (S3's presigned URLs, see
    # `get_range_into`) reuses the signature of a key: signing is per GET otherwise.
    presign_ttl_s: float = 60.0


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

    def is_directory(self, prefix: str) -> bool:
        """Whether anything lies below `prefix` (ending with '/'): how a path that is no
        object is told from nothing. By a listing of one entry; a store that cannot list
        (http) answers otherwise."""
        listing = self.list(prefix, 1)
        return bool(listing.objects or listing.prefixes)

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

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        """`get_range_async` of `len(out)` bytes, received into `out` (the caller's buffer:
        where the bytes will live): returns how many (fewer only at the object's end). This
        default copies what `get_range_async` returns; a store with a native version
        receives the body straight into `out` (no intermediate buffer). `out` may hold
        part of a body when this raises."""
        data = await self.get_range_async(key, offset, len(out), etag)
        out[: len(data)] = data
        return len(data)

    @abc.abstractmethod
    def check(self) -> None:
        """Raises a clear error when the store cannot be reached or read."""

    # ---- writes: refused unless the store takes them (`limits().writes`) -------------

    def limits(self) -> StoreLimits:
        return StoreLimits()

    def _read_only(self) -> ReadOnly:
        scheme = self.uri.split(":", 1)[0]
        return ReadOnly(f"{self.uri}: read-only: a {scheme}:// mount cannot be written")

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        """The whole object in one request; it replaces any object of that key at once."""
        raise self._read_only()

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        """A multipart upload to `key`, its id. Its state lives in the store: any process
        may upload its parts, another complete or abort it."""
        raise self._read_only()

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        raise self._read_only()

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        """Publishes the parts as the object, atomically (a reader sees the old object or
        the whole new one); the object as the store has it now. `parts` empty: an empty
        object. `metadata`: what the upload was created with."""
        raise self._read_only()

    def abort_upload(self, key: str, upload_id: str) -> None:
        """Drops the upload and its parts; one already gone is not an error."""
        raise self._read_only()

    def open_uploads(self, key: str) -> Keys:
        """The ids of the uploads to `key` neither completed nor aborted."""
        raise self._read_only()

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        """A copy inside the store; with `if_match`, only of the source with that change
        token (Conflict when it has another)."""
        raise self._read_only()

    def rename(self, source: str, destination: str) -> ObjectInfo:
        """Moves the object in place, replacing any at `destination` (`limits().renames`;
        a store without it is copied and deleted by the caller, who knows what to check)."""
        if self.limits().writes:
            raise InvalidArgument(f"{self.uri}: the store cannot rename an object in place")
        raise self._read_only()

    def delete(self, keys: Keys) -> None:
        """Deletes the objects; a missing one is not an error."""
        raise self._read_only()

    def keys_below(self, prefix: str) -> Keys:
        """Every object key below `prefix` ('' is the root, else it ends with '/')."""
        return [o.key for page in self.walk(prefix) for o in page]

    def uri_of(self, key: str) -> str:
        return self.uri + key

    def key_of(self, uri: str) -> str:
        if not uri.startswith(self.uri):
            raise InvalidArgument(f"{uri!r} is not under {self.uri!r}")
        return uri[len(self.uri) :]


async def into_new_buffer(
    store: UnderStore, key: str, offset: int, length: int, etag: str = ""
) -> bytes | memoryview:
    """`length` bytes from `offset` by `store.get_range_into`, into a new buffer: the GETs
    a block's read makes (a read-only view of it; fewer bytes only at the object's end)."""
    if length <= 0:
        return b""
    buffer = memoryview(bytearray(length))
    got = await store.get_range_into(key, offset, buffer, etag)
    return buffer[:got].toreadonly()


class BufferReadStore(UnderStore):
    """A store whose own read is `get_range_into` (a GET received into the caller's
    buffer, `direct_gets.py`): the other two reads are that one, so the store has one GET
    stack and one body-retry loop; blocking callers run it on a loop of their own."""

    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        return bytes(asyncio.run(self.get_range_async(key, offset, length, etag)))

    async def get_range_async(
        self, key: str, offset: int, length: int, etag: str = ""
    ) -> bytes | memoryview:
        return await into_new_buffer(self, key, offset, length, etag)

    @abc.abstractmethod
    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        """As `UnderStore.get_range_into`, received straight into `out`."""


class ForwardingUnderStore(UnderStore):
    """A decorator's base: every call goes to `inner`; a decorator overrides the calls it
    changes (times, bounds, admits) and nothing else, so a method added to the interface
    can never be missed by one of them."""

    def __init__(self, inner: UnderStore) -> None:
        self.inner = inner
        self.uri = inner.uri

    def head(self, key: str) -> ObjectInfo:
        return self.inner.head(key)

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        return self.inner.list(prefix, limit)

    def walk(self, prefix: str) -> Iterator[ObjectPage]:
        return self.inner.walk(prefix)

    def is_directory(self, prefix: str) -> bool:
        return self.inner.is_directory(prefix)

    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        return self.inner.get_range(key, offset, length, etag)

    async def get_range_async(
        self, key: str, offset: int, length: int, etag: str = ""
    ) -> bytes | memoryview:
        return await self.inner.get_range_async(key, offset, length, etag)

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        return await self.inner.get_range_into(key, offset, out, etag)

    def check(self) -> None:
        self.inner.check()

    def limits(self) -> StoreLimits:
        return self.inner.limits()

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        return self.inner.put(key, data, metadata)

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        return self.inner.create_upload(key, metadata)

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        return self.inner.upload_part(key, upload_id, number, data)

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        return self.inner.complete_upload(key, upload_id, parts, metadata)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self.inner.abort_upload(key, upload_id)

    def open_uploads(self, key: str) -> Keys:
        return self.inner.open_uploads(key)

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        return self.inner.copy(source, destination, if_match)

    def rename(self, source: str, destination: str) -> ObjectInfo:
        return self.inner.rename(source, destination)

    def delete(self, keys: Keys) -> None:
        self.inner.delete(keys)

    def keys_below(self, prefix: str) -> Keys:
        return self.inner.keys_below(prefix)

    def uri_of(self, key: str) -> str:
        return self.inner.uri_of(key)

    def key_of(self, uri: str) -> str:
        return self.inner.key_of(uri)
