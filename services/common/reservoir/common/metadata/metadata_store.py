"""The metadata store: a small key-value interface with leases, backends chosen by URL.

`etcd://host:port[,host:port…]` is the real one: plaintext, or TLS (with a client
certificate, and an etcd user) when its `EtcdSettings` set a CA or certificate.
`memory://` keeps everything in the process, for a single-process setup and unit tests.
Both pass tests/contract.
Keys and values are bytes; the tables above this layer decide the encoding.
"""

from __future__ import annotations

import abc
import asyncio
import bisect
import functools
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from reservoir.common.config import EtcdSettings
from reservoir.common.errors import (
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from reservoir.common.logs import get_logger
from reservoir.common.metadata.etcd_space import NOSPACE, is_out_of_space, out_of_space
from reservoir.common.metadata.key_watch import EtcdChanges, KeyChange, KeyChanges, QueueChanges

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


# A call that found no endpoint serving pauses this long (doubling, jittered) before the
# next round of endpoints: an etcd election takes about a second; the store's timeout
# bounds the whole call.
FAILOVER_PAUSE_S = 0.05
FAILOVER_MAX_PAUSE_S = 1.0


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
        _check_limit(limit)
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
        _check_txn_size(puts, deletes, delete_prefixes)
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


def _transaction(success: list[Any], client: Any) -> Awaitable[Any]:
    return client.transaction([], success, [])  # type: ignore[no-any-return]


class EtcdMetadataStore(MetadataStore):
    """etcd v3 through aetcd. Every call carries the configured deadline; with several
    endpoints (the members of one etcd cluster), a call that cannot reach one moves on to
    the next, and keeps going round them until the deadline (see `_call`)."""

    def __init__(
        self,
        endpoints: list[tuple[str, int]],
        timeout_s: float,
        settings: EtcdSettings | None = None,
        page_keys: int = DEFAULT_PAGE_KEYS,
    ) -> None:
        import aetcd

        from reservoir.common.metadata.etcd_client import etcd_clients

        self._aetcd = aetcd
        self._endpoints = endpoints
        self._timeout = timeout_s
        self._settings = settings or EtcdSettings()
        self._clients = etcd_clients(endpoints, timeout_s, self._settings)
        self._current = 0
        self.page_keys = page_keys

    @property
    def _client(self) -> Any:
        return self._clients[self._current]

    async def _call(self, what: str, operation: Callable[[Any], Awaitable[Any]]) -> Any:
        """`operation` on the current endpoint. A failure to reach it, or an etcd without
        a leader for the moment (a member died, an election is under way), moves on to the
        next endpoint, with a jittered pause after each round of them, until every endpoint
        has been tried and the call's deadline (the store's timeout) has passed."""
        errors = self._aetcd.exceptions
        started = time.monotonic()
        tried, reauthenticated = 0, False
        last = f"etcd {what}: no endpoint answered"
        while True:
            client = self._client
            try:
                return await asyncio.wait_for(operation(client), self._timeout)
            except (TimeoutError, errors.ConnectionTimeoutError):
                host, port = self._next_endpoint()
                last = f"etcd {what}: no answer from {host}:{port} within {self._timeout}s"
            except errors.ConnectionFailedError as exc:
                # Refused, a TLS handshake that failed, or a member without a leader
                # ("etcdserver: no leader", "leader changed"): gRPC UNAVAILABLE.
                host, port = self._next_endpoint()
                last = f"etcd {what}: cannot reach {host}:{port}: {exc}{self._hint(exc)}"
            except errors.UnauthenticatedError as exc:
                if self._settings.user and not reauthenticated:
                    # etcd's auth token expired (idle past --auth-token-ttl): connecting
                    # again authenticates again.
                    host, port = self._endpoints[self._current]
                    log.info("etcd_reauthenticating", endpoint=f"{host}:{port}", call=what)
                    reauthenticated = True
                    await client.close()
                    continue
                raise Unauthenticated(f"etcd {what}: {exc}") from exc
            except errors.ClientError as exc:
                if is_out_of_space(_status(exc), str(exc)):
                    raise out_of_space(f"etcd {what}: {exc}") from exc
                if _status(exc) == "PERMISSION_DENIED" or "authentication failed" in str(exc):
                    raise PermissionDenied(f"etcd {what}: {exc}") from exc
                raise Unavailable(f"etcd {what}: {exc}") from exc
            tried += 1
            left = started + self._timeout - time.monotonic()
            if tried >= len(self._clients) and left <= 0:
                raise Unavailable(last)
            if tried % len(self._clients) == 0:
                pause = min(
                    FAILOVER_MAX_PAUSE_S, FAILOVER_PAUSE_S * 2 ** (tried // len(self._clients))
                )
                await asyncio.sleep(min(left, pause * random.uniform(0.5, 1.0)))

    def _next_endpoint(self) -> tuple[str, int]:
        """The endpoint that just failed; the next call tries the one after it."""
        failed = self._endpoints[self._current]
        self._current = (self._current + 1) % len(self._clients)
        return failed

    def _hint(self, exc: Exception) -> str:
        text = str(exc).lower()
        if "handshake" in text:
            return " (check RESERVOIR_ETCD_CA, RESERVOIR_ETCD_CERT and RESERVOIR_ETCD_KEY)"
        if not self._settings.tls and "socket closed" in text:
            return " (if etcd serves TLS, set RESERVOIR_ETCD_CA)"
        return ""

    async def get(self, key: bytes) -> bytes | None:
        result = await self._call("get", lambda c: c.get(key))
        return None if result is None else bytes(result.value)  # type: ignore[attr-defined]

    async def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        ops = self._client.transactions
        flat = list(keys)
        values: list[bytes | None] = []
        for start in range(0, len(flat), MAX_TXN_OPS):
            batch = flat[start : start + MAX_TXN_OPS]
            outcome: Any = await self._call(
                "get_many", functools.partial(_transaction, [ops.get(k) for k in batch])
            )
            _, responses = outcome
            values.extend(bytes(r[0][0]) if r else None for r in responses)
        return values

    async def get_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        _check_limit(limit)  # etcd takes a limit of 0 for "no limit"
        found: list[tuple[bytes, bytes]] = []
        ask = limit
        while len(found) < limit:
            part: list[tuple[bytes, bytes]] | None = await self._call(
                "get_range", functools.partial(_range, start=start, end=end, limit=ask)
            )
            if part is None:
                if ask == 1:
                    raise Unavailable(f"etcd get_range: the value at {start!r} exceeds a message")
                # Values larger than a page of them can carry: the page in smaller parts.
                ask = max(1, ask // 4)
                log.debug("etcd_page_too_large", start=start, retry_limit=ask)
                continue
            found.extend(part)
            if len(part) < ask:
                break
            start = part[-1][0] + b"\x00"
            ask = min(ask, limit - len(found))
        return found

    async def first_in_ranges(
        self, ranges: Sequence[tuple[bytes, bytes]]
    ) -> list[tuple[bytes, bytes] | None]:
        """One transaction of one-key ranges per MAX_TXN_OPS ranges."""
        found: list[tuple[bytes, bytes] | None] = []
        flat = list(ranges)
        for begin in range(0, len(flat), MAX_TXN_OPS):
            batch = flat[begin : begin + MAX_TXN_OPS]
            found.extend(
                await self._call("first_in_ranges", functools.partial(_first_in, ranges=batch))
            )
        return found

    async def count_prefix(self, prefix: bytes) -> int:
        """Counted by etcd (a count-only range): no key or value crosses the network."""
        return int(await self._call("count_prefix", lambda c: _count_prefix(c, prefix)))

    async def put_many(
        self, items: Sequence[tuple[bytes, bytes]], lease: Lease | None = None
    ) -> None:
        lease_id = lease.id if lease else None
        ops = self._client.transactions
        pairs: list[tuple[bytes, bytes]] = list(items)
        for start in range(0, len(pairs), MAX_TXN_OPS):
            batch = pairs[start : start + MAX_TXN_OPS]
            success = [ops.put(k, v, lease=lease_id) for k, v in batch]
            try:
                await self._call("put", functools.partial(_transaction, success))
            except Unavailable as exc:
                if "lease" in str(exc).lower() and "not found" in str(exc).lower():
                    raise NotFound(f"lease {lease_id} has expired") from exc
                raise

    async def delete_many(self, keys: Sequence[bytes]) -> None:
        ops = self._client.transactions
        flat = list(keys)
        for start in range(0, len(flat), MAX_TXN_OPS):
            batch = flat[start : start + MAX_TXN_OPS]
            await self._call(
                "delete", functools.partial(_transaction, [ops.delete(k) for k in batch])
            )

    async def delete_prefix(self, prefix: bytes) -> None:
        await self._call("delete_prefix", lambda c: c.delete_prefix(prefix))

    async def grant_lease(self, ttl_s: int) -> Lease:
        lease = await self._call("lease", lambda c: c.lease(ttl_s))
        return Lease(int(lease.id), ttl_s)  # type: ignore[attr-defined]

    async def refresh_lease(self, lease: Lease) -> None:
        result = await self._call("refresh_lease", lambda c: c.refresh_lease(lease.id))
        if int(getattr(result, "TTL", 0)) <= 0:
            raise NotFound(f"lease {lease.id} has expired")

    async def revoke_lease(self, lease: Lease) -> None:
        await self._call("revoke_lease", lambda c: c.revoke_lease(lease.id))

    async def watch_prefix(self, prefix: bytes) -> KeyChanges:
        watch = await self._call("watch", lambda c: c.watch_prefix(prefix))
        return EtcdChanges(watch, prefix, self._aetcd.exceptions.ClientError, self._timeout)

    async def health(self) -> None:
        """etcd's alarms, whichever member answers: the NOSPACE alarm of any member stops
        every write of the cluster."""
        alarms = await self._call("alarm list", _alarms)
        if NOSPACE in alarms:
            raise out_of_space(
                "a member raised the NOSPACE alarm (etcdserver: mvcc: database space exceeded)"
            )

    async def write_if(
        self,
        guards: Sequence[Guard],
        puts: Sequence[tuple[bytes, bytes]] = (),
        deletes: Sequence[bytes] = (),
        delete_prefixes: Sequence[bytes] = (),
        lease: Lease | None = None,
    ) -> bool:
        import aetcd.utils

        _check_txn_size(puts, deletes, delete_prefixes)
        ops = self._client.transactions
        compare = [
            ops.version(g.key) == 0 if g.value is None else ops.value(g.key) == g.value
            for g in guards
        ]
        lease_id = lease.id if lease else None
        success = [
            *(ops.delete(p, range_end=aetcd.utils.prefix_range_end(p)) for p in delete_prefixes),
            *(ops.delete(k) for k in deletes),
            *(ops.put(k, v, lease=lease_id) for k, v in puts),
        ]

        def transaction(client: Any) -> Awaitable[Any]:
            return client.transaction(compare, success, [])  # type: ignore[no-any-return]

        try:
            succeeded, _ = await self._call("guarded write", transaction)
        except Unavailable as exc:
            if "lease" in str(exc).lower() and "not found" in str(exc).lower():
                raise NotFound(f"lease {lease_id} has expired") from exc
            raise
        return bool(succeeded)

    async def close(self) -> None:
        for client in self._clients:
            await client.close()


async def _alarms(client: Any) -> list[int]:
    return [int(alarm.alarm_type) async for alarm in client.list_alarms()]


def _handled(call: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`call` with aetcd's mapping of gRPC errors, after aetcd's connect."""
    import aetcd.client

    return aetcd.client._handle_errors(call)  # type: ignore[no-any-return]


def _range_request(start: bytes, end: bytes, limit: int) -> Any:
    from aetcd import rpc

    return rpc.RangeRequest(key=start, range_end=end, limit=limit)


async def _range(client: Any, start: bytes, end: bytes, limit: int) -> Any:
    """A page of a range (aetcd's get_range cannot limit one); None when etcd's answer
    would exceed the client's message size (the caller asks for fewer keys)."""
    import grpc

    @_handled
    async def page() -> list[tuple[bytes, bytes]] | None:
        await client.connect()
        try:
            reply = await client.kvstub.Range(
                _range_request(start, end, limit),
                timeout=client._timeout,
                metadata=client.metadata,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                return None
            raise
        return [(bytes(kv.key), bytes(kv.value)) for kv in reply.kvs]

    return await page()


async def _first_in(client: Any, ranges: list[tuple[bytes, bytes]]) -> Any:
    from aetcd import rpc

    @_handled
    async def first() -> list[tuple[bytes, bytes] | None]:
        await client.connect()
        request = rpc.TxnRequest(
            compare=[],
            success=[rpc.RequestOp(request_range=_range_request(s, e, 1)) for s, e in ranges],
            failure=[],
        )
        reply = await client.kvstub.Txn(request, timeout=client._timeout, metadata=client.metadata)
        found: list[tuple[bytes, bytes] | None] = []
        for response in reply.responses:
            kvs = response.response_range.kvs
            found.append((bytes(kvs[0].key), bytes(kvs[0].value)) if kvs else None)
        return found

    return await first()


async def _count_prefix(client: Any, prefix: bytes) -> int:
    from aetcd import rpc

    # aetcd has no count-only call (its request builder drops count_only).
    @_handled
    async def count() -> int:
        await client.connect()
        request = rpc.RangeRequest(key=prefix, range_end=prefix_end(prefix), count_only=True)
        reply = await client.kvstub.Range(
            request, timeout=client._timeout, metadata=client.metadata
        )
        return int(reply.count)

    return await count()


def _check_limit(limit: int) -> None:
    if limit <= 0:
        raise InvalidArgument(f"a range read needs a limit above 0, not {limit}")


def _check_txn_size(
    puts: Sequence[Any], deletes: Sequence[Any], delete_prefixes: Sequence[Any]
) -> None:
    if len(puts) + len(deletes) + len(delete_prefixes) > MAX_TXN_OPS:
        raise InvalidArgument(f"a guarded write takes at most {MAX_TXN_OPS} operations")


def _status(exc: BaseException) -> str:
    """The gRPC status name behind an aetcd error, or ''."""
    code = getattr(exc.__cause__, "code", None)
    return str(getattr(code(), "name", "")) if callable(code) else ""


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
