"""The under-store budget as a decorator: `BudgetedUnderStore` wraps a budgeted mount's
store, so every GET of it (whatever route asked for it) passes the mount's `BudgetGate`;
`StoreBudgets` holds this process's gates, one per mount, across store reopenings.

A GET answered SlowDown (or cut off) is asked again through the gate, a bounded number of
times: the caller sees bytes, not the storm. That is why a budgeted store is opened with
one attempt per request (`MountedStores`): the SDK's own retries would bypass the budget.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import TypeVar

from reservoir.common import logs
from reservoir.common.config import UnderStoreCalls
from reservoir.common.errors import SlowDown, Unavailable
from reservoir.common.models import Mount
from reservoir.common.understore.budget_gate import BudgetGate, BudgetShare
from reservoir.common.understore.under_store import BodyRetry, ForwardingUnderStore, UnderStore

log = logs.get_logger(__name__)
_T = TypeVar("_T")


class StoreBudgets:
    """This process's budget gates, by mount path; with `slots`, every store's awaited
    GETs also hold one of them (the process's bound on GETs at once), inside the gate."""

    def __init__(self, calls: UnderStoreCalls, slots: asyncio.Semaphore | None = None) -> None:
        self._calls = calls
        self._slots = slots
        self._gates: dict[str, BudgetGate] = {}

    def gate(self, mount_path: str) -> BudgetGate:
        gate = self._gates.get(mount_path)
        if gate is None:
            gate = self._gates[mount_path] = BudgetGate(mount_path, self._calls)
        return gate

    def wrap(self, mount: Mount, store: UnderStore) -> UnderStore:
        """`store` (bounded by the slots) behind the mount's gate when the mount is
        budgeted."""
        if self._slots is not None:
            store = BoundedUnderStore(store, self._slots)
        if not mount.options.budgeted:
            self._gates.pop(mount.path, None)
            return store
        return BudgetedUnderStore(store, self.gate(mount.path), self._calls)

    def forget(self, mount_path: str) -> None:
        """The mount is gone: its gate no longer reports a demand to the master (GETs
        already behind it keep the gate they hold)."""
        self._gates.pop(mount_path, None)

    def apply(self, shares: Iterable[tuple[str, BudgetShare]]) -> None:
        """A lease from the master: each named mount's share for this process."""
        for mount_path, share in shares:
            self.gate(mount_path).set_share(share)

    def take_demands(self) -> list[tuple[str, float]]:
        """Each budgeted mount's recent demand here (see BudgetGate.take_demand)."""
        return [(path, gate.take_demand()) for path, gate in self._gates.items()]

    @property
    def wanting(self) -> bool:
        return any(gate.wanting for gate in self._gates.values())

    def gates(self) -> Iterator[BudgetGate]:
        return iter(list(self._gates.values()))


class BoundedUnderStore(ForwardingUnderStore):
    """An under-store whose awaited GETs hold one of a process's `slots` while they run
    (its connections). Inside any budget gate: a GET waiting for its budget holds no
    slot, so a preload held back by its lane never holds one a foreground read needs."""

    def __init__(self, inner: UnderStore, slots: asyncio.Semaphore) -> None:
        super().__init__(inner)
        self._slots = slots

    async def get_range_async(
        self, key: str, offset: int, length: int, etag: str = ""
    ) -> bytes | memoryview:
        async with self._slots:
            return await self.inner.get_range_async(key, offset, length, etag)

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        async with self._slots:
            return await self.inner.get_range_into(key, offset, out, etag)


class BudgetedUnderStore(ForwardingUnderStore):
    """An under-store whose awaited GETs are admitted by a budget gate; everything else
    passes (blocking callers, none on a worker's fetch path, too: the gate lives on the
    event loop)."""

    def __init__(self, inner: UnderStore, gate: BudgetGate, calls: UnderStoreCalls) -> None:
        super().__init__(inner)
        self.gate = gate
        self._retries = calls.slowdown_retries
        self._backoff = BodyRetry(
            calls.body_retries, calls.retry_backoff_s, calls.retry_backoff_max_s
        )

    async def get_range_async(
        self, key: str, offset: int, length: int, etag: str = ""
    ) -> bytes | memoryview:
        return await self._admitted(
            key, length, lambda: self.inner.get_range_async(key, offset, length, etag)
        )

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        # A GET asked again fills the same buffer from its start.
        return await self._admitted(
            key, len(out), lambda: self.inner.get_range_into(key, offset, out, etag)
        )

    async def _admitted(self, key: str, length: int, get: Callable[[], Awaitable[_T]]) -> _T:
        """`get()` once the gate admits a GET of `length` bytes, asked again through the
        gate (a bounded number of times) when it fails Unavailable or SlowDown."""
        for attempt in range(self._retries + 1):
            try:
                async with self.gate.admitted_get(length):
                    return await get()
            except Unavailable as exc:
                if attempt == self._retries:
                    raise
                slowdown = isinstance(exc, SlowDown)
                halved = self.gate.slowed() if slowdown else False
                log.info(
                    "under_store_get_retried",
                    mount=self.gate.mount_path,
                    uri=self.inner.uri_of(key),
                    attempt=attempt + 1,
                    slowdown=slowdown,
                    rate_halved=halved,
                    error=str(exc),
                )
                if not slowdown:  # the gate paces SlowDowns; other failures back off
                    await asyncio.sleep(self._backoff.delay_s(attempt))
        raise AssertionError("unreachable")
