"""`memory://`: the metadata store in this process, for a single-process setup and unit
tests. Passes tests/contract as etcd does."""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Sequence

from reservoir.common.errors import NotFound
from reservoir.common.metadata.key_watch import KeyChange, KeyChanges, QueueChanges
from reservoir.common.metadata.metadata_store import (
    DEFAULT_PAGE_KEYS,
    Guard,
    Lease,
    MetadataStore,
    check_limit,
    check_txn_size,
)


class MemoryMetadataStore(MetadataStore):
    """Everything in one process's memory; leases expire on the monotonic clock."""

    def __init__(self, page_keys: int = DEFAULT_PAGE_KEYS) -> None:
        self.page_keys = page_keys
        self._data: dict[bytes, tuple[bytes, int | None]] = {}
        # Keys in order, rebuilt on the first range read after a key was added or removed.
        self._order: list[bytes] | None = None
        self._leases: dict[int, float] = {}
        self._ttl: dict[int, int] = {}
        self._next_lease = 1
        self._watchers: list[tuple[bytes, asyncio.Queue[KeyChange]]] = []

    def _changed(self, key: bytes, value: bytes | None) -> None:
        for prefix, queue in self._watchers:
            if key.startswith(prefix):
                queue.put_nowait(KeyChange(key, value))

    def _expire(self) -> None:
        now = time.monotonic()
        dead = {lid for lid, deadline in self._leases.items() if deadline <= now}
        if not dead:
            return
        for lid in dead:
            del self._leases[lid]
        gone = [k for k, v in self._data.items() if v[1] in dead]
        for key in gone:
            del self._data[key]
            self._changed(key, None)
        self._order = None

    async def get(self, key: bytes) -> bytes | None:
        self._expire()
        entry = self._data.get(key)
        return entry[0] if entry else None

    async def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [await self.get(k) for k in keys]

    async def get_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        check_limit(limit)
        self._expire()
        if self._order is None:
            self._order = sorted(self._data)
        order = self._order
        found: list[tuple[bytes, bytes]] = []
        for key in order[bisect.bisect_left(order, start) :]:
            if len(found) >= limit or (end != b"\x00" and key >= end):
                break
            found.append((key, self._data[key][0]))
        return found

    async def put_many(
        self, items: Sequence[tuple[bytes, bytes]], lease: Lease | None = None
    ) -> None:
        self._expire()
        if lease is not None and lease.id not in self._leases:
            raise NotFound(f"lease {lease.id} has expired")
        for key, value in items:
            if key not in self._data:
                self._order = None
            self._data[key] = (value, lease.id if lease else None)
            self._changed(key, value)

    async def delete_many(self, keys: Sequence[bytes]) -> None:
        for key in keys:
            if self._data.pop(key, None) is not None:
                self._order = None
                self._changed(key, None)

    async def delete_prefix(self, prefix: bytes) -> None:
        for key in [k for k in self._data if k.startswith(prefix)]:
            del self._data[key]
            self._order = None
            self._changed(key, None)

    async def watch_prefix(self, prefix: bytes) -> KeyChanges:
        queue: asyncio.Queue[KeyChange] = asyncio.Queue()
        entry = (prefix, queue)
        self._watchers.append(entry)
        return QueueChanges(queue, lambda: self._watchers.remove(entry))

    async def grant_lease(self, ttl_s: int) -> Lease:
        lease = Lease(self._next_lease, ttl_s)
        self._next_lease += 1
        self._leases[lease.id] = time.monotonic() + ttl_s
        return lease

    async def refresh_lease(self, lease: Lease) -> None:
        self._expire()
        if lease.id not in self._leases:
            raise NotFound(f"lease {lease.id} has expired")
        self._leases[lease.id] = time.monotonic() + lease.ttl_s

    async def revoke_lease(self, lease: Lease) -> None:
        self._leases[lease.id] = 0.0
        self._expire()

    async def health(self) -> None:
        pass  # the process's memory: no quota, nothing to reach

    async def write_if(
        self,
        guards: Sequence[Guard],
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        delete_prefixes: Sequence[bytes] = (),
        lease: Lease | None = None,
    ) -> bool:
        check_txn_size(puts, deletes, delete_prefixes)
        self._expire()
        for guard in guards:
            entry = self._data.get(guard.key)
            if (entry[0] if entry else None) != guard.value:
                return False
        if lease is not None and puts and lease.id not in self._leases:
            raise NotFound(f"lease {lease.id} has expired")
        # No await below: the transaction is atomic on the event loop.
        self._order = None  # keys may come and go: the sorted view is made again
        for prefix in delete_prefixes:
            for key in [k for k in self._data if k.startswith(prefix)]:
                del self._data[key]
                self._changed(key, None)
        for key in deletes:
            if self._data.pop(key, None) is not None:
                self._changed(key, None)
        for key, value in puts:
            self._data[key] = (value, lease.id if lease else None)
            self._changed(key, value)
        return True

    async def close(self) -> None:
        pass
