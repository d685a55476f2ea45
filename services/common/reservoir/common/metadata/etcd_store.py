"""`etcd://host:port[,host:port…]`: the metadata store in etcd, plaintext or TLS (with a
client certificate, and an etcd user), failing over between the members it is given.
Passes tests/contract."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from reservoir.common.config import EtcdSettings
from reservoir.common.errors import NotFound, PermissionDenied, Unauthenticated, Unavailable
from reservoir.common.logs import get_logger
from reservoir.common.metadata.etcd_space import NOSPACE, is_out_of_space, out_of_space
from reservoir.common.metadata.key_watch import EtcdChanges, KeyChanges
from reservoir.common.metadata.metadata_store import (
    DEFAULT_PAGE_KEYS,
    MAX_TXN_OPS,
    Guard,
    Lease,
    MetadataStore,
    check_limit,
    check_txn_size,
    prefix_end,
)

log = get_logger(__name__)

# A call that found no endpoint serving pauses this long (doubling, jittered) before the
# next round of endpoints: an etcd election takes about a second; the store's timeout
# bounds the whole call.
FAILOVER_PAUSE_S = 0.05
FAILOVER_MAX_PAUSE_S = 1.0


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
        check_limit(limit)  # etcd takes a limit of 0 for "no limit"
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

        check_txn_size(puts, deletes, delete_prefixes)
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


def _status(exc: BaseException) -> str:
    """The gRPC status name behind an aetcd error, or ''."""
    code = getattr(exc.__cause__, "code", None)
    return str(getattr(code(), "name", "")) if callable(code) else ""
