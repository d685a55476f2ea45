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
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .config import EtcdSettings
from .errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated, Unavailable
from .key_watch import EtcdChanges, KeyChange, KeyChanges, QueueChanges
from .logs import get_logger

log = get_logger(__name__)

# etcd's default --max-txn-ops is 128; stay under it.
MAX_TXN_OPS = 100


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
    @abc.abstractmethod
    async def get(self, key: bytes) -> bytes | None: ...

    @abc.abstractmethod
    async def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of many keys in few round trips (None where a key is absent)."""

    @abc.abstractmethod
    async def get_prefix(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """All pairs under `prefix`, sorted by key."""

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

    def __init__(self) -> None:
        self._data: dict[bytes, tuple[bytes, int | None]] = {}
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

    async def get(self, key: bytes) -> bytes | None:
        self._expire()
        entry = self._data.get(key)
        return entry[0] if entry else None

    async def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        return [await self.get(k) for k in keys]

    async def get_prefix(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        self._expire()
        return sorted((k, v[0]) for k, v in self._data.items() if k.startswith(prefix))

    async def put_many(
        self, items: Sequence[tuple[bytes, bytes]], lease: Lease | None = None
    ) -> None:
        self._expire()
        if lease is not None and lease.id not in self._leases:
            raise NotFound(f"lease {lease.id} has expired")
        for key, value in items:
            self._data[key] = (value, lease.id if lease else None)
            self._changed(key, value)

    async def delete_many(self, keys: Sequence[bytes]) -> None:
        for key in keys:
            if self._data.pop(key, None) is not None:
                self._changed(key, None)

    async def delete_prefix(self, prefix: bytes) -> None:
        for key in [k for k in self._data if k.startswith(prefix)]:
            del self._data[key]
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
    endpoints, a call that cannot reach one moves on to the next (each tried once)."""

    def __init__(
        self,
        endpoints: list[tuple[str, int]],
        timeout_s: float,
        settings: EtcdSettings | None = None,
    ) -> None:
        import aetcd

        from .etcd_client import etcd_clients

        self._aetcd = aetcd
        self._endpoints = endpoints
        self._timeout = timeout_s
        self._settings = settings or EtcdSettings()
        self._clients = etcd_clients(endpoints, timeout_s, self._settings)
        self._current = 0

    @property
    def _client(self) -> Any:
        return self._clients[self._current]

    async def _call(self, what: str, operation: Callable[[Any], Awaitable[Any]]) -> Any:
        errors = self._aetcd.exceptions
        attempts, reauthenticated = len(self._clients), False
        last = f"etcd {what}: no endpoint answered"
        while attempts > 0:
            attempts -= 1
            client = self._client
            try:
                return await asyncio.wait_for(operation(client), self._timeout)
            except (TimeoutError, errors.ConnectionTimeoutError):
                host, port = self._next_endpoint()
                last = f"etcd {what}: no answer from {host}:{port} within {self._timeout}s"
            except errors.ConnectionFailedError as exc:
                # Refused, or a TLS handshake that failed: gRPC fails the call at once.
                host, port = self._next_endpoint()
                last = f"etcd {what}: cannot reach {host}:{port}: {exc}{self._hint(exc)}"
            except errors.UnauthenticatedError as exc:
                if self._settings.user and not reauthenticated:
                    # etcd's auth token expired (idle past --auth-token-ttl): connecting
                    # again authenticates again.
                    host, port = self._endpoints[self._current]
                    log.info("etcd_reauthenticating", endpoint=f"{host}:{port}", call=what)
                    reauthenticated, attempts = True, attempts + 1
                    await client.close()
                    continue
                raise Unauthenticated(f"etcd {what}: {exc}") from exc
            except errors.ClientError as exc:
                if _status(exc) == "PERMISSION_DENIED" or "authentication failed" in str(exc):
                    raise PermissionDenied(f"etcd {what}: {exc}") from exc
                raise Unavailable(f"etcd {what}: {exc}") from exc
        raise Unavailable(last)

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

    async def get_prefix(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        result = await self._call("get_prefix", lambda c: c.get_prefix(prefix))
        return [(bytes(kv.key), bytes(kv.value)) for kv in result]  # type: ignore[attr-defined]

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
        return EtcdChanges(watch, prefix, self._aetcd.exceptions.ClientError)

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


async def _count_prefix(client: Any, prefix: bytes) -> int:
    import aetcd.client
    import aetcd.utils

    # aetcd has no count-only call; this is its get_prefix with count_only set, wrapped
    # the same way (connect first, gRPC errors mapped to aetcd's).
    @aetcd.client._handle_errors
    async def count() -> int:
        await client.connect()
        request = client._build_get_range_request(
            key=prefix, range_end=aetcd.utils.prefix_range_end(prefix), count_only=True
        )
        reply = await client.kvstub.Range(
            request, timeout=client._timeout, metadata=client.metadata
        )
        return int(reply.count)

    return await count()


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
    url: str, timeout_s: float = 5.0, etcd: EtcdSettings | None = None
) -> MetadataStore:
    """The backend a URL names: etcd://host:port[,host:port] or memory://. `etcd`: how
    to reach etcd securely (TLS, client certificate, user); plaintext when absent."""
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return MemoryMetadataStore()
    if parts.scheme == "etcd":
        endpoints = []
        for item in (parts.netloc or "").split(","):
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit():
                raise InvalidArgument(f"bad etcd endpoint {item!r} in {url!r}")
            endpoints.append((host, int(port)))
        return EtcdMetadataStore(endpoints, timeout_s, etcd)
    raise InvalidArgument(f"unknown metadata store URL {url!r} (etcd://host:port or memory://)")
