"""Calls to the leading master, among the several a cluster may run.

A caller knows the masters as a comma-separated list (`--master`, `$RESERVOIR_MASTER`).
It calls the one it believes leads. A standby refuses with `NotLeader` naming the
leader, and the call goes there (one extra round trip). A master that cannot be reached
is passed over for the next in the list. All of it within the call's own deadline:
with no leader to be found by then, the call fails as a call to one master does.

With a single address nothing changes: an unreachable master fails the call at once.

A master that is reachable but does not answer (paused by SIGSTOP, a long GC, a VM
migrating) is given a short first-response budget per call (`probe_timeout_s`,
`RESERVOIR_MASTER_PROBE_TIMEOUT`). When it passes, the other masters are asked who leads
(`ListMasters`, answered by any master from etcd). If another master leads, the call goes
there and the unanswered one is cancelled, but only when that is safe: a read always; a
change only when the silent master has been superseded (a newer term leads elsewhere, or
it is no leader at all), since then every write it might still make on waking is refused
by the fence on the leader key (master/leadership.py) and by its confirming it leads before
it acts. If the silent master still leads (slow, not gone), the call waits for it within
its own deadline, asking again each budget: a change is never sent twice to a live leader.
A stream that has yielded is never sent again.

An address that answers as something else (a worker, etcd, an HTTP server: a port mixed
up) fails a call with `NotAMaster`, saying what answered there rather than the gRPC
status it met; in a list of several it is passed over like an unreachable one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from reservoir.common import logs, worker_methods
from reservoir.common.errors import (
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotAMaster,
    NotLeader,
    ReservoirError,
    Unavailable,
)
from reservoir.common.rpc import ChannelOpener, error_from_rpc, error_kind, is_transport_failure
from reservoir.v1 import master_pb2

log = logs.get_logger(__name__)

# Between rounds of asking while no master leads (a takeover under way).
_FIRST_PAUSE_S = 0.05
_LONGEST_PAUSE_S = 0.5
# What a peer that is not the master it was taken for may be, each with a method only it
# serves: called with an empty request, anything but UNIMPLEMENTED means it is served
# there. A master comes first: one without the method asked is an older version.
_A_MASTER = "a Reservoir master"
_IDENTITIES = (
    ("/reservoir.v1.MasterService/ListMounts", _A_MASTER),
    (worker_methods.GET_STATS, "a Reservoir worker"),
    ("/etcdserverpb.Maintenance/Status", "etcd"),
)
# Each question to a peer being identified: it has just answered, so it answers at once.
_IDENTIFY_TIMEOUT_S = 2.0
# Calls that change nothing: sent to another leader whenever the master asked is silent.
_READS = frozenset(
    {
        "ListMounts",
        "GetFileInfo",
        "GetFileInfos",
        "ListDirectory",
        "ListWorkers",
        "ListMasters",
        "Report",
        "Locality",
        "GetJob",
        "WatchJob",
        "ListJobs",
        "ListCacheRules",
    }
)
_LEADER = "leader"

T = TypeVar("T")


class _MovedOn:
    """A call left unanswered by one master, to be sent to `calls.leader` instead."""


_MOVED_ON = _MovedOn()


def master_addresses(masters: str) -> list[str]:
    """The addresses in a comma-separated list, in order, each once."""
    found: list[str] = []
    for item in masters.split(","):
        address = item.strip()
        if address and address not in found:
            found.append(address)
    if not found:
        raise InvalidArgument(f"no master address in {masters!r} (host:port[,host:port...])")
    return found


class MasterCalls:
    """Unary calls and streams to whichever master leads."""

    def __init__(
        self,
        masters: str | Sequence[str],
        opener: ChannelOpener,
        stub: Any,
        *,
        probe_timeout_s: float,
        unreachable_hint: str = "",
    ) -> None:
        """`stub`: the generated stub class (e.g. `master_pb2_grpc.MasterServiceStub`);
        `probe_timeout_s`: how long a call waits for a master's first answer before the
        others are asked who leads (0: never); `unreachable_hint`: added to the error when
        no master answers."""
        self._hint = unreachable_hint
        self._probe_s = probe_timeout_s
        self.addresses = master_addresses(masters) if isinstance(masters, str) else list(masters)
        self._opener = opener
        self._stub_class = stub
        self._stubs: dict[str, Any] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        # The question "who leads, if not this silent master?" in flight, one per silent
        # master: many calls waiting on one master share it.
        self._asking: dict[str, asyncio.Future[list[Any]]] = {}
        self.leader = self.addresses[0]  # the master calls go to first

    def _stub(self, address: str) -> Any:
        stub = self._stubs.get(address)
        if stub is None:
            channel = self._channels[address] = self._opener.channel(address)
            stub = self._stubs[address] = self._stub_class(channel)
        return stub

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._stubs.clear()

    async def unary(
        self, method: str, request: Any, *, deadline_s: float, what: str, metadata: Any = None
    ) -> Any:
        route = _Route(self, time.monotonic() + deadline_s)
        while True:
            address = self.leader
            call = getattr(self._stub(address), method)(
                request, timeout=route.remaining(), metadata=metadata
            )
            try:
                answer = await self._answer(call, call, address, method, route)
            except grpc.RpcError as exc:
                await route.after(address, exc, what)
                continue
            if answer is not _MOVED_ON:
                return answer

    async def stream(
        self, method: str, request: Any, *, deadline_s: float, what: str, metadata: Any = None
    ) -> AsyncIterator[Any]:
        """A server stream from the leader; a call that failed (or went unanswered) before
        its first message is sent on like a unary one, one that failed later raises."""
        route = _Route(self, time.monotonic() + deadline_s)
        while True:
            address = self.leader
            call = getattr(self._stub(address), method)(
                request, timeout=route.remaining(), metadata=metadata
            )
            try:
                try:
                    item = await self._answer(call.read(), call, address, method, route)
                except grpc.RpcError as exc:
                    await route.after(address, exc, what)
                    continue
                if item is _MOVED_ON:
                    continue
                try:
                    while item is not grpc.aio.EOF:
                        yield item
                        item = await call.read()
                except grpc.RpcError as exc:
                    raise error_from_rpc(exc, what) from None
                return
            finally:
                call.cancel()  # a no-op once it ended; stops it when the reader stopped

    async def _answer(
        self, pending: Awaitable[T], call: Any, address: str, method: str, route: _Route
    ) -> T | _MovedOn:
        """What `pending` (the first answer of `call`, sent to `address`) gives; or, when
        `address` stays silent past the probe budget and another master leads to which
        the call may safely go, `_MOVED_ON` (with `call` cancelled and `leader` set)."""
        if len(self.addresses) == 1 or self._probe_s <= 0:
            return await pending
        task = asyncio.ensure_future(pending)
        # After the first budget the others are asked again more often: a takeover lands
        # at any moment, and each question is one cheap call answered from etcd.
        wait_s, pause = self._probe_s, _FIRST_PAUSE_S
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=min(wait_s, route.remaining()))
                wait_s, pause = min(self._probe_s, pause), min(pause * 2, _LONGEST_PAUSE_S)
                if done or route.remaining() <= 0.001:
                    return await task
                instead = await self._leader_instead_of(address, method in _READS)
                if task.done():
                    return task.result()  # it answered meanwhile: nothing is sent twice
                if instead is not None:
                    log.info("master_silent_moved_on", frm=address, to=instead, method=method)
                    call.cancel()
                    self.leader = instead
                    return _MOVED_ON
        finally:
            if not task.done():
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.RpcError):
                await task

    async def _leader_instead_of(self, silent: str, read: bool) -> str | None:
        """The leader the other masters name, when a call left unanswered by `silent` may
        go there: a read whenever another master leads; a change only when `silent` has
        been superseded (no leader record of its own at the named leader's term or later),
        so that nothing it does on waking can land. None: keep waiting for `silent`."""
        asking = self._asking.get(silent)
        if asking is None:
            asking = self._asking[silent] = asyncio.ensure_future(self._masters_listed(silent))
            asking.add_done_callback(lambda _: self._asking.pop(silent, None))
        masters = await asyncio.shield(asking)
        leaders = [m for m in masters if m.role == _LEADER]
        if not leaders:
            return None  # a takeover under way, or nobody else to ask
        named = max(leaders, key=lambda m: m.term)
        if named.address == silent:
            return None  # it still leads: slow, not gone
        if not read and any(
            m.address == silent and m.role == _LEADER and m.term >= named.term for m in masters
        ):
            return None
        if named.address not in self.addresses:
            self.addresses.append(named.address)
        return str(named.address)

    async def _masters_listed(self, exclude: str) -> list[Any]:
        """The masters' records as the first of the others to answer with a leader in them
        lists them (each reads them from etcd); what the others listed when none did."""
        asks = [
            asyncio.ensure_future(
                self._stub(address).ListMasters(
                    master_pb2.ListMastersRequest(), timeout=self._probe_s
                )
            )
            for address in self.addresses
            if address != exclude
        ]
        listed: list[Any] = []
        try:
            for answer in asyncio.as_completed(asks):
                try:
                    masters = list((await answer).masters)
                except grpc.RpcError:
                    continue
                if any(m.role == _LEADER for m in masters):
                    return masters
                listed.extend(masters)
            return listed
        finally:
            for ask in asks:
                ask.cancel()
            await asyncio.gather(*asks, return_exceptions=True)

    def unreachable(self, what: str) -> Unavailable:
        """The error for a call no master answered."""
        hint = self._hint
        if len(self.addresses) == 1:
            return Unavailable(f"{what}: master at {self.addresses[0]} is unreachable{hint}")
        listed = ", ".join(self.addresses)
        return Unavailable(f"{what}: no master at {listed} answered as leader{hint}")

    async def not_a_master(
        self, address: str, exc: grpc.RpcError, what: str
    ) -> ReservoirError | None:
        """What to raise when `address` answered a call as no master would (its
        UNIMPLEMENTED, or bytes that are not HTTP/2), after asking it what it is; None
        when it answered as a master does."""
        details = exc.details() if hasattr(exc, "details") else ""
        code = exc.code() if hasattr(exc, "code") else None
        if code == grpc.StatusCode.UNAVAILABLE and "Failed parsing HTTP/2" in (details or ""):
            speaks = " HTTP/1.x, not gRPC" if "http1.x server" in details else ", but not gRPC"
            return NotAMaster(f"{address} is not a Reservoir master (it answers{speaks})")
        if code == grpc.StatusCode.UNAVAILABLE and "WRONG_VERSION_NUMBER" in (details or ""):
            # What a TLS handshake meets when the other end answers in plaintext.
            return NotAMaster(f"{address} is not a Reservoir master (it answers without TLS)")
        if code != grpc.StatusCode.UNIMPLEMENTED or error_kind(exc) is not None:
            return None
        peer = await _identify(self._channels[address])
        if peer == _A_MASTER:
            return Internal(
                f"{what}: the master at {address} does not know this call (an older version "
                "of Reservoir than this client?)"
            )
        return NotAMaster(f"{address} is not a Reservoir master (it answers as {peer})")


async def _identify(channel: grpc.aio.Channel) -> str:
    """What serves at the other end of `channel`, in words."""

    def raw(data: bytes) -> bytes:
        return data

    for method, name in _IDENTITIES:
        call = channel.unary_unary(method, request_serializer=raw, response_deserializer=raw)
        try:
            await call(b"", timeout=_IDENTIFY_TIMEOUT_S)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                continue
            if is_transport_failure(exc):
                return "gRPC, then stopped answering"
        return name
    return "gRPC, but serves none of Reservoir's services"


class _Route:
    """Where one call goes next after a failure, within its deadline."""

    def __init__(self, calls: MasterCalls, deadline: float) -> None:
        self._calls = calls
        self._deadline = deadline
        self._unreachable: set[str] = set()
        self._pause = _FIRST_PAUSE_S
        self._redirects = 0

    def remaining(self) -> float:
        return max(0.001, self._deadline - time.monotonic())

    async def after(self, address: str, exc: grpc.RpcError, what: str) -> None:
        """Returns when the call should be tried again (at `calls.leader`); raises the
        call's error when it should not."""
        calls = self._calls
        wrong = await calls.not_a_master(address, exc, what)
        if wrong is not None:
            if len(calls.addresses) == 1 or not isinstance(wrong, NotAMaster):
                raise wrong from None
            await self._pass_over(address, what)  # a mistake in the list: the others may lead
            return
        error: ReservoirError = error_from_rpc(exc, what)
        if isinstance(error, DeadlineExceeded):
            if len(calls.addresses) > 1:
                # A leader that answers nothing (paused, partitioned): the next call
                # starts at another master, which names the leader if it knows one.
                calls.leader = self._next_after(address)
            raise error from None
        if isinstance(error, NotLeader):
            if error.leader and error.leader != address:
                if error.leader not in calls.addresses:
                    calls.addresses.append(error.leader)
                log.debug("master_redirect", frm=address, to=error.leader)
                calls.leader = error.leader
                self._redirects += 1
                # Standbys that disagree during a takeover: redirects, then pauses.
                if error.leader not in self._unreachable and self._redirects <= len(
                    calls.addresses
                ):
                    return  # the one extra round trip
            else:
                # A takeover under way (no leader yet, or it is still loading its state).
                calls.leader = self._next_after(address) if not error.leader else address
            await self._wait(error)
            return
        if not is_transport_failure(exc):
            raise error from None
        await self._pass_over(address, what)

    async def _pass_over(self, address: str, what: str) -> None:
        """Goes on to the next master after one that did not answer as a master."""
        calls = self._calls
        self._unreachable.add(address)
        if len(calls.addresses) == 1:
            raise calls.unreachable(what) from None
        calls.leader = self._next_after(address)
        if len(self._unreachable) >= len(calls.addresses):
            # None reachable now: the dead one's successor may be moments away.
            self._unreachable.clear()
            await self._wait(calls.unreachable(what))

    def _next_after(self, address: str) -> str:
        addresses = self._calls.addresses
        at = addresses.index(address) if address in addresses else -1
        for step in range(1, len(addresses) + 1):
            candidate = addresses[(at + step) % len(addresses)]
            if candidate not in self._unreachable:
                return candidate
        return addresses[(at + 1) % len(addresses)]

    async def _wait(self, error: ReservoirError) -> None:
        if time.monotonic() + self._pause >= self._deadline:
            raise error
        await asyncio.sleep(self._pause)
        self._pause = min(self._pause * 2, _LONGEST_PAUSE_S)
