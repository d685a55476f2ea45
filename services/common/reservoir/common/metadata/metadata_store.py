"""The metadata store: a small key-value interface with leases, backends chosen by URL.

`etcd://host:port[,host:port…]` is the real one (etcd_store.py): plaintext, or TLS (with a
client certificate, and an etcd user) when its `EtcdSettings` set a CA or certificate.
`memory://` keeps everything in the process, for a single-process setup and unit tests
(memory_store.py). Both pass tests/contract.
Keys and values are bytes; the tables above this layer decide the encoding.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from reservoir.common.config import EtcdSettings
from reservoir.common.errors import InvalidArgument
from reservoir.common.logs import get_logger
from reservoir.common.metadata.key_watch import KeyChanges

log = get_logger(__name__)

# etcd's default --max-txn-ops is 128; stay under it.
MAX_TXN_OPS = 100
# Keys per range read: etcd answers a range in one message, which a client refuses past
# 4 MiB, so a prefix of any size is read page by page (RESERVOIR_METADATA_PAGE_KEYS).
DEFAULT_PAGE_KEYS = 1000


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with `prefix` (etcd's range_end)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\x00"  # etcd: to the end of the keyspace
    return stripped[:-1] + bytes([stripped[-1] + 1])


@dataclass(frozen=True, slots=True)
class Lease:
    id: int
    ttl_s: int


@dataclass(frozen=True, slots=True)
class Guard:
    """The condition a guarded write depends on: `key` holds exactly `value` (None: `key`
    does not exist). Master leadership and its fencing are built on it (master/leadership.py,
    fenced_store.py)."""

    key: bytes
    value: bytes | None


class MetadataStore(abc.ABC):
    # Keys per page of a prefix read (`scan_prefix`, and so `get_prefix`).
    page_keys: int = DEFAULT_PAGE_KEYS

    @abc.abstractmethod
    async def get(self, key: bytes) -> bytes | None: ...

    @abc.abstractmethod
    async def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of many keys in few round trips (None where a key is absent)."""

    @abc.abstractmethod
    async def get_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        """The first `limit` (> 0) pairs with `start <= key < end`, sorted by key: one page
        of a range, read without the rest of it (`key + b"\\0"` starts after `key`)."""

    async def first_in_ranges(
        self, ranges: Sequence[tuple[bytes, bytes]]
    ) -> list[tuple[bytes, bytes] | None]:
        """For each (start, end), the first pair with start <= key < end, or None; a
        backend may answer many in one round trip."""
        pages = await asyncio.gather(*(self.get_range(s, e, 1) for s, e in ranges))
        return [page[0] if page else None for page in pages]

    async def scan_prefix(
        self, prefix: bytes, page_keys: int | None = None
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        """The pairs under `prefix` in key order, one page (at most `page_keys`, by
        default the store's `page_keys`) at a time: memory stays bounded by two pages
        however large the prefix. Pages are read one after another, so a key written
        meanwhile may or may not be seen (as with any listing)."""
        limit = page_keys or self.page_keys
        end = prefix_end(prefix)
        # The next page is asked for before this one is handed over: the store works on
        # it while the caller works on this one (two pages in memory at most).
        ahead: asyncio.Task[list[tuple[bytes, bytes]]] | None = asyncio.ensure_future(
            self.get_range(prefix, end, limit)
        )
        try:
            while ahead is not None:
                page = await ahead
                ahead = None
                if len(page) == limit:
                    ahead = asyncio.ensure_future(self.get_range(page[-1][0] + b"\x00", end, limit))
                if page:
                    yield page
        finally:
            if ahead is not None:
                ahead.cancel()
                await asyncio.gather(ahead, return_exceptions=True)

    async def get_prefix(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """All pairs under `prefix`, sorted by key (read page by page; for a table whose
        size the caller bounds: an unbounded one is read with `scan_prefix`)."""
        found: list[tuple[bytes, bytes]] = []
        async for page in self.scan_prefix(prefix):
            found.extend(page)
        return found

    async def count_prefix(self, prefix: bytes) -> int:
        """How many keys lie under `prefix` (a backend may count them without reading them)."""
        return len(await self.get_prefix(prefix))

    @abc.abstractmethod
    async def put_many(
        self, items: Sequence[tuple[bytes, bytes]], lease: Lease | None = None
    ) -> None:
        """Writes all pairs; atomically per batch of at most MAX_TXN_OPS."""

    @abc.abstractmethod
    async def delete_many(self, keys: Sequence[bytes]) -> None: ...

    @abc.abstractmethod
    async def delete_prefix(self, prefix: bytes) -> None: ...

    @abc.abstractmethod
    async def grant_lease(self, ttl_s: int) -> Lease: ...

    @abc.abstractmethod
    async def refresh_lease(self, lease: Lease) -> None:
        """Keeps a lease alive; raises NotFound when it has already expired."""

    @abc.abstractmethod
    async def revoke_lease(self, lease: Lease) -> None:
        """Ends a lease now, deleting every key attached to it."""

    @abc.abstractmethod
    async def watch_prefix(self, prefix: bytes) -> KeyChanges:
        """Changes under `prefix` made after this call returns, in order, for as long as
        the iterator is consumed. Raises Unavailable when the store connection breaks
        (changes may then have been missed: read the prefix again and watch anew)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def health(self) -> None:
        """Returns when the store takes writes; raises what a write would meet now
        (Unavailable; ResourceExhausted when it is out of space)."""

    @abc.abstractmethod
    async def write_if(
        self,
        guards: Sequence[Guard],
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        delete_prefixes: Sequence[bytes] = (),
        lease: Lease | None = None,
    ) -> bool:
        """All the writes in one transaction (at most MAX_TXN_OPS of them, `lease` on every
        put), made only when every guard holds. False, with nothing written, when one
        does not."""

    async def put(self, key: bytes, value: bytes, lease: Lease | None = None) -> None:
        await self.put_many([(key, value)], lease)

    async def delete(self, key: bytes) -> None:
        await self.delete_many([key])


def check_limit(limit: int) -> None:
    if limit <= 0:
        raise InvalidArgument(f"a range read needs a limit above 0, not {limit}")


def check_txn_size(
    puts: Sequence[Any], deletes: Sequence[Any], delete_prefixes: Sequence[Any]
) -> None:
    if len(puts) + len(deletes) + len(delete_prefixes) > MAX_TXN_OPS:
        raise InvalidArgument(f"a guarded write takes at most {MAX_TXN_OPS} operations")


def open_metadata_store(
    url: str,
    timeout_s: float = 5.0,
    etcd: EtcdSettings | None = None,
    page_keys: int = DEFAULT_PAGE_KEYS,
) -> MetadataStore:
    """The backend a URL names: etcd://host:port[,host:port] or memory://. `etcd`: how
    to reach etcd securely (TLS, client certificate, user); plaintext when absent.
    `page_keys`: keys per range read of a prefix."""
    if page_keys < 1:
        raise InvalidArgument(f"page_keys must be at least 1 (got {page_keys})")
    # The backends import this module (the interface): imported here, not above.
    from reservoir.common.metadata.etcd_store import EtcdMetadataStore
    from reservoir.common.metadata.memory_store import MemoryMetadataStore

    parts = urlsplit(url)
    if parts.scheme == "memory":
        return MemoryMetadataStore(page_keys)
    if parts.scheme == "etcd":
        endpoints = []
        for item in (parts.netloc or "").split(","):
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit():
                raise InvalidArgument(f"bad etcd endpoint {item!r} in {url!r}")
            endpoints.append((host, int(port)))
        return EtcdMetadataStore(endpoints, timeout_s, etcd, page_keys)
    raise InvalidArgument(f"unknown metadata store URL {url!r} (etcd://host:port or memory://)")
