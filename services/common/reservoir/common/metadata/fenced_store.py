"""A metadata store whose writes hold only while this process leads (fencing).

Several masters share one etcd; one leads (master/leadership.py). A leader that was paused
(SIGSTOP, a long GC, a partition) may wake up after its lease ran out and a standby took
over. Every write through `FencedStore` is one etcd transaction that also compares the
leader key with this master's own record, so such a write commits nothing: it raises
`NotLeader`, and the fence is told, so the master steps down.

Reads, watches and leases go to the store underneath unchanged. A method added to
`MetadataStore` later is delegated here the same way (reads) or guarded (writes); the
abstract base makes a forgotten one fail at construction rather than bypass the fence.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from reservoir.common.errors import NotLeader
from reservoir.common.metadata.key_watch import KeyChanges
from reservoir.common.metadata.metadata_store import MAX_TXN_OPS, Guard, Lease, MetadataStore


class Fence(Protocol):
    """What a `FencedStore` asks before and after each write."""

    def guard(self) -> Guard | None:
        """The condition of this leader's writes (its leader key holds its record); None
        when this process does not lead."""

    def not_leader(self) -> NotLeader:
        """The error for a write refused now (naming the leader, when known)."""

    def fenced(self, guard: Guard) -> None:
        """A write under `guard` found the leader key changed: leadership is lost."""


class FencedStore(MetadataStore):
    def __init__(self, store: MetadataStore, fence: Fence) -> None:
        self._store = store
        self._fence = fence
        self.page_keys = store.page_keys

    def _guard(self) -> Guard:
        guard = self._fence.guard()
        if guard is None:
            raise self._fence.not_leader()
        return guard

    async def _write(
        self,
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        delete_prefixes: Sequence[bytes] = (),
        lease: Lease | None = None,
    ) -> None:
        guard = self._guard()
        if not await self._store.write_if([guard], puts, deletes, delete_prefixes, lease):
            self._fence.fenced(guard)
            raise self._fence.not_leader()

    # ---- writes: each one guarded -------------------------------------------------------

    async def put_many(
        self, items: Sequence[tuple[bytes, bytes]], lease: Lease | None = None
    ) -> None:
        pairs = list(items)
        for start in range(0, len(pairs), MAX_TXN_OPS):
            await self._write(puts=pairs[start : start + MAX_TXN_OPS], lease=lease)

    async def delete_many(self, keys: Sequence[bytes]) -> None:
        flat = list(keys)
        for start in range(0, len(flat), MAX_TXN_OPS):
            await self._write(deletes=flat[start : start + MAX_TXN_OPS])

    async def delete_prefix(self, prefix: bytes) -> None:
        await self._write(delete_prefixes=[prefix])

    async def write_if(
        self,
        guards: Sequence[Guard],
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        delete_prefixes: Sequence[bytes] = (),
        lease: Lease | None = None,
    ) -> bool:
        """False when one of `guards` failed; NotLeader when leadership did."""
        mine = self._guard()
        if await self._store.write_if([mine, *guards], puts, deletes, delete_prefixes, lease):
            return True
        if await self._store.get(mine.key) != mine.value:
            self._fence.fenced(mine)
            raise self._fence.not_leader()
        return False

    # ---- everything else: as the store underneath does it -------------------------------

    async def get(self, key: bytes) -> bytes | None:
        return await self._store.get(key)

    async def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return await self._store.get_many(keys)

    async def get_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        return await self._store.get_range(start, end, limit)

    async def first_in_ranges(
        self, ranges: Sequence[tuple[bytes, bytes]]
    ) -> list[tuple[bytes, bytes] | None]:
        return await self._store.first_in_ranges(ranges)

    def scan_prefix(
        self, prefix: bytes, page_keys: int | None = None
    ) -> AsyncIterator[list[tuple[bytes, bytes]]]:
        return self._store.scan_prefix(prefix, page_keys)

    async def get_prefix(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return await self._store.get_prefix(prefix)

    async def health(self) -> None:
        await self._store.health()

    async def count_prefix(self, prefix: bytes) -> int:
        return await self._store.count_prefix(prefix)

    async def watch_prefix(self, prefix: bytes) -> KeyChanges:
        return await self._store.watch_prefix(prefix)

    async def grant_lease(self, ttl_s: int) -> Lease:
        return await self._store.grant_lease(ttl_s)

    async def refresh_lease(self, lease: Lease) -> None:
        await self._store.refresh_lease(lease)

    async def revoke_lease(self, lease: Lease) -> None:
        await self._store.revoke_lease(lease)

    async def close(self) -> None:
        await self._store.close()
