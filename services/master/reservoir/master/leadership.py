"""Which master leads: an election through etcd, with fencing.

Every master campaigns for one key (`keyspace.MASTER_LEADER`) bound to its own lease:
one transaction creates it only if it is absent. The master that created it leads and
does what a master does (`LeaderDuties`: load jobs, block locations, ...); the others
are standbys that watch the key and campaign again the moment it disappears, which is
when the leader's lease ends: at once when it resigns (SIGTERM revokes its lease), within
the lease TTL when it dies.

The leader key's value is the leader's own record (a fresh id per process and its term),
so "this master still leads" is one comparison etcd makes in the same transaction as a
write: that is the fence `FencedStore` puts on every write. A leader that was paused past
its lease wakes up to find its writes refused (or its lease gone), and steps down.

The fence reaches etcd only; a call also acts on the under-store (an upload completed, an
object removed). So before a call is served (`confirm`, from the leader gate) a leader
whose lease it has not renewed within a TTL, as after a pause, reads the leader key first:
a woken ex-leader refuses the calls it finds waiting, and steps down, before acting on any.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from reservoir.common import logs
from reservoir.common.errors import NotLeader, ReservoirError
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.key_watch import KeyChanges
from reservoir.common.metadata.metadata_store import Guard, Lease, MetadataStore
from reservoir.common.models import MasterRecord

from .lease_renewal import LeaseRenewal

log = logs.get_logger(__name__)

LEADER, STANDBY = "leader", "standby"


class Duties(Protocol):
    """What the leader does, started when it wins and stopped when it loses."""

    async def lead(self) -> None: ...

    async def stand_down(self) -> None: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class Leadership:
    """This master's campaign, its role, and the fence on its writes."""

    def __init__(
        self, store: MetadataStore, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """`store`: the store underneath, not fenced (the campaign is what fences);
        `clock`: seconds that keep running while the process is paused (monotonic)."""
        self._store = store
        self.address = ""  # set by `run`, once the server's port is bound
        self.id = uuid.uuid4().hex[:12]
        self._ttl = max(1, math.ceil(ttl_s))
        self._renewal = LeaseRenewal(store, self._ttl, clock)
        self._duties: Duties | None = None
        self.role = STANDBY
        self.since_ms = _now_ms()
        self.term = 0
        self.takeovers = 0
        self.leader_address = ""
        self.ready = False  # leading, and its duties started: calls are served
        self._record: bytes | None = None  # the leader key's value while this one leads
        self._lease: Lease | None = None
        self._lost = asyncio.Event()
        self._decided = asyncio.Event()  # the first campaign ended (won or lost)

    # ---- the fence (see fenced_store.py) ------------------------------------------------

    def guard(self) -> Guard | None:
        return None if self._record is None else Guard(keyspace.MASTER_LEADER, self._record)

    def not_leader(self) -> NotLeader:
        leader = self.leader_address
        if self._record is not None:
            return NotLeader(f"the master at {self.address} is taking over; retry", self.address)
        if not leader:
            return NotLeader(f"the master at {self.address} is a standby; no master leads now")
        return NotLeader(
            f"the master at {self.address} is a standby; the leader is at {leader}", leader
        )

    async def confirm(self) -> None:
        """Returns if this master leads and may act; raises NotLeader otherwise. Costs
        nothing while the lease is fresh; past that, one read of the leader key decides."""
        record = self._record
        if record is None or not self.ready:
            raise self.not_leader()
        if self._renewal.fresh():
            return
        if await self._store.get(keyspace.MASTER_LEADER) != record:
            self.fenced(Guard(keyspace.MASTER_LEADER, record))
            raise self.not_leader()

    def fenced(self, guard: Guard) -> None:
        if guard.value is not None and guard.value == self._record:
            log.warning("leadership_fenced", master=self.address, term=self.term)
            self._record = None
            self.ready = False
            self._lost.set()

    # ---- the campaign -------------------------------------------------------------------

    async def run(self, address: str, duties: Duties) -> None:
        """Campaigns for as long as the process runs (cancel to stop). `address`: where
        callers reach this master; `duties`: what it does while it leads."""
        self.address, self._duties = address, duties
        while True:
            try:
                self._lease = await self._renewal.grant()
                keeper = asyncio.create_task(self._keep(self._lease))
                try:
                    await self._publish()
                    await self._campaign(self._lease)
                finally:
                    keeper.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await keeper
                # Lost (fenced, or expired): whatever still hangs on it goes now.
                lease, self._lease = self._lease, None
                if lease is not None:
                    with contextlib.suppress(ReservoirError):
                        await self._store.revoke_lease(lease)
            except asyncio.CancelledError:
                raise
            except ReservoirError as exc:
                log.warning("leadership_campaign_failed", error=str(exc))
                if self.role == LEADER or self._record is not None:
                    with contextlib.suppress(ReservoirError):
                        await self._stand_down("campaign failed")
                await asyncio.sleep(self._ttl / 3)

    async def first_outcome(self, timeout_s: float) -> None:
        """Waits (at most `timeout_s`) for the first campaign to end, won or lost."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._decided.wait(), timeout_s)

    async def resign(self) -> None:
        """Stops leading (duties first, while writes still hold) and ends the lease, which
        deletes the leader key: a standby takes over at once."""
        if self._record is not None:
            await self._stand_down("resigned")
        if self._lease is not None:
            try:
                await self._store.revoke_lease(self._lease)
            except ReservoirError as exc:
                log.warning("leadership_resign_failed", error=str(exc))
            self._lease = None

    async def _campaign(self, lease: Lease) -> None:
        """Until the lease is lost: lead when the key is free, else wait for it to be."""
        self._lost.clear()
        while not self._lost.is_set():
            # Watch first: a deletion between the read below and the wait is not missed.
            changes = await self._store.watch_prefix(keyspace.MASTER_LEADER)
            try:
                record = await self._try_to_win(lease)
                if record is None:
                    self._decided.set()
                    await self._publish()  # the leader's term, as this standby knows it
                    await self._wait_for_vacancy(changes)
                else:
                    await self._lead(record, changes)
            finally:
                await changes.aclose()

    async def _try_to_win(self, lease: Lease) -> bytes | None:
        current = await self._store.get(keyspace.MASTER_LEADER)
        if current is not None:
            holder = MasterRecord.from_json(current)
            if holder.address != self.address:
                self._follow(holder)
                return None
            # Our own address: a previous run of this master, which is gone (this process
            # holds its port), or this one's own key under a lease it gave up for lost
            # (etcd was out of reach). Either way it need not run out first.
            await self._store.write_if(
                [Guard(keyspace.MASTER_LEADER, current)], deletes=[keyspace.MASTER_LEADER]
            )
            log.info("leadership_cleared_previous_run", master=self.address, term=holder.term)
        raw_term = await self._store.get(keyspace.MASTER_TERM)
        term = (int(raw_term) if raw_term else 0) + 1
        encoded = str(term).encode()
        vacant = Guard(keyspace.MASTER_LEADER, None)
        # The term first (no lease: it outlives leaders), then the key at that term: two
        # campaigners that read the same term cannot both take it, and a master that dies
        # between the two steps leaves a term unused, never one used twice.
        record = MasterRecord(self.id, self.address, LEADER, _now_ms(), term).to_json()
        won = await self._store.write_if(
            [vacant, Guard(keyspace.MASTER_TERM, raw_term)],
            puts=[(keyspace.MASTER_TERM, encoded)],
        ) and await self._store.write_if(
            [vacant, Guard(keyspace.MASTER_TERM, encoded)],
            puts=[(keyspace.MASTER_LEADER, record)],
            lease=lease,
        )
        if not won:
            holder_raw = await self._store.get(keyspace.MASTER_LEADER)
            if holder_raw is not None:
                self._follow(MasterRecord.from_json(holder_raw))
            return None
        return record

    def _follow(self, holder: MasterRecord) -> None:
        if holder.address != self.leader_address:
            log.info(
                "leadership_follows", master=self.address, leader=holder.address, term=holder.term
            )
        self.leader_address = holder.address
        self.term = holder.term

    async def _lead(self, record: bytes, changes: KeyChanges) -> None:
        won = MasterRecord.from_json(record)
        self._record, self.term, self.leader_address = record, won.term, self.address
        self.role, self.since_ms = LEADER, _now_ms()
        self.takeovers += 1
        log.info("leadership_won", master=self.address, term=won.term)
        with contextlib.suppress(ReservoirError):  # only `reservoir masters` reads it
            await self._publish()
        try:
            assert self._duties is not None  # set by run
            await self._duties.lead()
        except Exception as exc:
            # Not fit to lead (etcd refusing, fenced already, a bug): let another try.
            log.warning("leadership_start_failed", error=str(exc), error_type=type(exc).__name__)
            await self._give_up()
            return
        if self._record != record:
            return  # fenced while starting
        self.ready = True
        self._decided.set()
        watcher = asyncio.create_task(self._watch_key(record, changes))
        try:
            await self._lost.wait()
        finally:
            watcher.cancel()
        if self.role == LEADER:
            await self._stand_down("lost")

    async def _give_up(self) -> None:
        if self._record is not None:
            with contextlib.suppress(ReservoirError):
                await self._store.write_if(
                    [Guard(keyspace.MASTER_LEADER, self._record)],
                    deletes=[keyspace.MASTER_LEADER],
                )
        await self._stand_down("gave up")
        self._decided.set()
        await asyncio.sleep(self._ttl)

    async def _watch_key(self, record: bytes, changes: KeyChanges) -> None:
        """Steps down when the leader key stops being ours (deleted by hand, or our lease
        ended while etcd could not tell us)."""
        with contextlib.suppress(ReservoirError):
            async for change in changes:
                # The watch began before this master won: an event may be older than its
                # record (the previous leader's key going). What the key holds now decides.
                if change.value != record and await self._store.get(change.key) != record:
                    if self._record == record:
                        log.warning("leadership_key_lost", master=self.address)
                        self._record = None
                        self.ready = False
                    self._lost.set()
                    return

    async def _stand_down(self, why: str) -> None:
        self._record = None
        self.ready = False
        self.leader_address = ""  # until the campaign reads who leads now
        log.info("leadership_stepping_down", master=self.address, term=self.term, why=why)
        try:
            if self._duties is not None:
                await self._stop_duties()
        finally:
            self.role, self.since_ms = STANDBY, _now_ms()
            self._lost.set()
            with contextlib.suppress(ReservoirError):
                await self._publish()

    async def _stop_duties(self) -> None:
        """Stops the leader's duties, waiting at most a lease TTL: past that another master
        leads anyway (and fencing refuses this one's writes), so a duty that does not stop
        must not keep this master from standing by and campaigning again."""
        assert self._duties is not None
        stopping = asyncio.create_task(self._duties.stand_down())
        done, _ = await asyncio.wait({stopping}, timeout=self._ttl)
        if not done:
            # Where it waits (a slow etcd under load, or a step that never ends): the
            # stack of the stand-down, so the log says which.
            frames, last = _awaited(stopping)
            where = [f"{f.f_code.co_qualname}:{f.f_lineno}" for f in frames] + [last]
            stopping.cancel()
            log.warning(
                "leadership_stand_down_slow", master=self.address, waited_s=self._ttl, at=where
            )
            return
        await stopping  # its error, if any, as before

    async def _wait_for_vacancy(self, changes: KeyChanges) -> None:
        """Returns when the leader key is deleted, or after a TTL (a check in case a
        watch missed it), or when our lease is lost."""
        lost = asyncio.create_task(self._lost.wait())

        async def deleted() -> None:
            async for change in changes:
                if change.value is None:
                    return
                self._follow(MasterRecord.from_json(change.value))

        vacancy = asyncio.create_task(deleted())
        try:
            await asyncio.wait({lost, vacancy}, timeout=self._ttl, return_when="FIRST_COMPLETED")
        finally:
            for task in (lost, vacancy):
                task.cancel()
            await asyncio.gather(lost, vacancy, return_exceptions=True)

    async def _keep(self, lease: Lease) -> None:
        """Keeps the lease; when it is lost, this master cannot be leader any more: it
        steps down."""
        await self._renewal.keep(lease, self.address)
        self._record = None
        self.ready = False
        self._lost.set()

    async def _publish(self) -> None:
        """This master's own record, for `reservoir masters` (under its own lease)."""
        if self._lease is None:
            return
        record = MasterRecord(self.id, self.address, self.role, self.since_ms, self.term)
        await self._store.put(
            keyspace.MASTER_MEMBERS + self.id.encode(), record.to_json(), self._lease
        )

    async def masters(self) -> list[MasterRecord]:
        """Every master whose lease runs, leader first."""
        found = [
            MasterRecord.from_json(v)
            for _, v in await self._store.get_prefix(keyspace.MASTER_MEMBERS)
        ]
        return sorted(found, key=lambda m: (m.role != LEADER, m.address))


def _awaited(task: asyncio.Task[None]) -> tuple[list[FrameType], str]:
    """The frames of the coroutines `task` is awaiting, outermost first, and what the
    innermost one waits on (a future, a gather): the chain `Task.get_stack` omits."""
    frames: list[FrameType] = []
    awaited: Any = task.get_coro()
    while getattr(awaited, "cr_frame", None) is not None:
        frames.append(awaited.cr_frame)
        awaited = awaited.cr_await
    return frames, repr(awaited)[:200]
