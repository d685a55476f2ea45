"""Master election and fencing on the in-process store (memory://): several
`Leadership`s sharing one store stand for several masters sharing one etcd."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from reservoir.common.errors import NotLeader
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.fenced_store import FencedStore
from reservoir.common.metadata.memory_store import MemoryMetadataStore
from reservoir.common.metadata.metadata_store import Guard
from reservoir.common.models import MasterRecord
from reservoir.master.leadership import LEADER, STANDBY, Leadership


class Counted:
    """Duties that count how often they were started and stopped."""

    def __init__(self) -> None:
        self.led = 0
        self.stood_down = 0

    async def lead(self) -> None:
        self.led += 1

    async def stand_down(self) -> None:
        self.stood_down += 1


async def until(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    """Returns once `condition` holds (a generous bound: a hang fails, slowness does not)."""
    for _ in range(int(within_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    assert condition()


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


class Master:
    def __init__(self, store: MemoryMetadataStore, address: str, ttl_s: float = 1) -> None:
        self.leadership = Leadership(store, ttl_s)
        self.duties = Counted()
        self.task = asyncio.create_task(self.leadership.run(address, self.duties))

    async def stop(self, resign: bool = True) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        if resign:
            await self.leadership.resign()


def test_a_single_master_leads_as_soon_as_it_campaigns() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        one = Master(store, "m1:1")
        await one.leadership.first_outcome(5)
        assert one.leadership.role == LEADER and one.leadership.ready
        assert one.duties.led == 1
        assert one.leadership.term == 1
        await one.stop()
        assert one.duties.stood_down == 1

    run(scenario)


def test_the_second_master_stands_by_and_names_the_leader() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        first = Master(store, "m1:1")
        await first.leadership.first_outcome(5)
        second = Master(store, "m2:2")
        await second.leadership.first_outcome(5)
        assert second.leadership.role == STANDBY and not second.leadership.ready
        assert second.duties.led == 0
        refusal = second.leadership.not_leader()
        assert refusal.leader == "m1:1"
        assert "m1:1" in str(refusal)
        await until(lambda: len(store._data) >= 4)  # both members published
        listed = await second.leadership.masters()
        assert [(m.address, m.role) for m in listed] == [("m1:1", LEADER), ("m2:2", STANDBY)]
        await first.stop()
        await second.stop()

    run(scenario)


def test_a_standby_takes_over_at_once_when_the_leader_resigns() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        first = Master(store, "m1:1", ttl_s=30)  # a lease far longer than the test
        await first.leadership.first_outcome(5)
        second = Master(store, "m2:2", ttl_s=30)
        await second.leadership.first_outcome(5)
        await first.stop(resign=True)
        await until(lambda: second.leadership.ready, within_s=5)
        assert second.leadership.term == 2
        assert second.leadership.takeovers == 1
        assert first.duties.stood_down == 1
        await second.stop()

    run(scenario)


def test_a_standby_takes_over_when_the_dead_leaders_lease_runs_out() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        first = Master(store, "m1:1", ttl_s=1)
        await first.leadership.first_outcome(5)
        second = Master(store, "m2:2", ttl_s=1)
        await second.leadership.first_outcome(5)
        await first.stop(resign=False)  # dies: nothing refreshes its lease any more
        await until(lambda: second.leadership.ready)
        assert await store.get(keyspace.MASTER_TERM) == b"2"
        await second.stop()

    run(scenario)


def test_a_restarted_master_at_its_address_leads_without_waiting_out_the_old_lease() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        before = Master(store, "m1:1", ttl_s=60)
        await before.leadership.first_outcome(5)
        await before.stop(resign=False)  # killed: its leader key would stand for a minute
        after = Master(store, "m1:1", ttl_s=60)
        await after.leadership.first_outcome(5)
        assert after.leadership.ready and after.leadership.term == 2
        await after.stop()

    run(scenario)


def test_a_leader_whose_key_was_taken_steps_down_and_its_writes_are_refused() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        first = Master(store, "m1:1", ttl_s=30)
        await first.leadership.first_outcome(5)
        fenced = FencedStore(store, first.leadership)
        await fenced.put(b"/t/k", b"mine")
        # Its lease ends behind its back (as when a paused leader's lease expires) and
        # another master takes the key.
        lease = first.leadership._lease
        assert lease is not None
        await store.revoke_lease(lease)
        second = Master(store, "m2:2", ttl_s=30)
        await until(lambda: second.leadership.ready)
        with pytest.raises(NotLeader) as refused:
            await fenced.put(b"/t/k", b"stale")
        assert refused.value.leader in ("", "m2:2")
        assert await store.get(b"/t/k") == b"mine"
        await until(lambda: first.leadership.role == STANDBY)
        assert first.duties.stood_down == 1
        await first.stop()
        await second.stop()

    run(scenario)


def test_a_leader_woken_past_its_lease_reads_the_key_and_refuses_calls_before_acting() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        now = [0.0]
        leadership = Leadership(store, 30, clock=lambda: now[0])
        duties = Counted()
        task = asyncio.create_task(leadership.run("m1:1", duties))
        await leadership.first_outcome(5)
        await leadership.confirm()  # lease fresh: it leads
        # Paused for a TTL (its clock ran on, its lease was not renewed); meanwhile
        # another master took the key. It confirms before the key's watch tells it.
        now[0] += 30
        taken = MasterRecord("other", "m2:2", LEADER, 0, 2).to_json()
        await store.put(keyspace.MASTER_LEADER, taken)
        with pytest.raises(NotLeader):
            await leadership.confirm()
        assert not leadership.ready
        await until(lambda: leadership.role == STANDBY)
        assert duties.stood_down == 1
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run(scenario)


class FixedFence:
    """A fence whose guard is one record; counts what it is told."""

    def __init__(self, guard: Guard | None) -> None:
        self._guard = guard
        self.fenced_with: list[Guard] = []

    def guard(self) -> Guard | None:
        return self._guard

    def not_leader(self) -> NotLeader:
        return NotLeader("not the leader", "elsewhere:1")

    def fenced(self, guard: Guard) -> None:
        self.fenced_with.append(guard)


LEADER_RECORD = Guard(keyspace.MASTER_LEADER, b"record-of-this-master")


def test_fenced_store_writes_and_reads_while_the_leader_key_holds_its_record() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        await store.put(LEADER_RECORD.key, b"record-of-this-master")
        fence = FixedFence(LEADER_RECORD)
        fenced = FencedStore(store, fence)
        await fenced.put_many([(b"/t/%03d" % i, b"v") for i in range(250)])  # 3 batches
        await fenced.delete_many([b"/t/000", b"/t/001"])
        assert await fenced.count_prefix(b"/t/") == 248
        await fenced.delete_prefix(b"/t/1")
        assert await fenced.count_prefix(b"/t/") == 148
        assert await fenced.write_if([Guard(b"/t/200", b"v")], puts=[(b"/t/x", b"1")])
        assert not await fenced.write_if([Guard(b"/t/200", b"other")], puts=[(b"/t/y", b"1")])
        assert await fenced.get(b"/t/x") == b"1" and await fenced.get(b"/t/y") is None
        assert fence.fenced_with == []

    run(scenario)


@pytest.mark.parametrize(
    "write",
    [
        lambda s: s.put(b"/t/a", b"new"),
        lambda s: s.put_many([(b"/t/a", b"new")]),
        lambda s: s.delete(b"/t/a"),
        lambda s: s.delete_many([b"/t/a"]),
        lambda s: s.delete_prefix(b"/t/"),
        lambda s: s.write_if([], puts=[(b"/t/a", b"new")]),
    ],
    ids=["put", "put_many", "delete", "delete_many", "delete_prefix", "write_if"],
)
def test_fenced_store_commits_nothing_once_another_master_holds_the_leader_key(
    write: Callable[[FencedStore], Awaitable[object]],
) -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        await store.put(b"/t/a", b"old")
        await store.put(LEADER_RECORD.key, b"record-of-another-master")
        fence = FixedFence(LEADER_RECORD)
        with pytest.raises(NotLeader):
            await write(FencedStore(store, fence))
        assert await store.get(b"/t/a") == b"old"
        assert fence.fenced_with == [LEADER_RECORD]

    run(scenario)


def test_fenced_store_refuses_writes_without_asking_the_store_when_not_leading() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        fence = FixedFence(None)
        with pytest.raises(NotLeader) as refused:
            await FencedStore(store, fence).put(b"/t/a", b"new")
        assert refused.value.leader == "elsewhere:1"
        assert await store.get(b"/t/a") is None

    run(scenario)


def test_masters_campaigning_at_once_elect_exactly_one_and_never_reuse_a_term() -> None:
    async def scenario() -> None:
        store = MemoryMetadataStore()
        masters = [Master(store, f"m{i}:1", ttl_s=30) for i in range(4)]
        for m in masters:
            await m.leadership.first_outcome(5)
        await until(lambda: sum(m.leadership.ready for m in masters) == 1)
        terms_led = [m.leadership.term for m in masters if m.leadership.ready]
        for _ in range(3):
            (leader,) = [m for m in masters if m.leadership.ready]
            masters.remove(leader)
            await leader.stop(resign=True)
            await until(lambda: sum(m.leadership.ready for m in masters) == 1)
            terms_led += [m.leadership.term for m in masters if m.leadership.ready]
        assert terms_led == [1, 2, 3, 4]
        for m in masters:
            await m.stop()

    run(scenario)


class StuckOnce(Counted):
    """Duties whose first stand-down never finishes (a duty that ignores being stopped)."""

    async def stand_down(self) -> None:
        self.stood_down += 1
        if self.stood_down == 1:
            await asyncio.Event().wait()


def test_a_leader_whose_duties_hang_on_stand_down_still_stands_by_and_leads_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """...and its log says where the stand-down waited (the next such hang names itself)."""

    async def scenario() -> None:
        store = MemoryMetadataStore()
        only = Master(store, "m1:1", ttl_s=1)
        only.duties = StuckOnce()
        only.task.cancel()
        await asyncio.gather(only.task, return_exceptions=True)
        only.task = asyncio.create_task(only.leadership.run("m1:1", only.duties))
        await until(lambda: only.leadership.ready)
        # Its lease ends behind its back (a pause past the TTL): it must stand down, and,
        # being the only master, win again, however its duties behave.
        lease = only.leadership._lease
        assert lease is not None
        await store.revoke_lease(lease)
        await until(lambda: only.duties.led == 2 and only.leadership.ready)
        assert only.leadership.role == LEADER
        await only.stop()

    with caplog.at_level(logging.WARNING, logger="reservoir.master.leadership"):
        run(scenario)
    slow = [
        r.getMessage() for r in caplog.records if "leadership_stand_down_slow" in r.getMessage()
    ]
    assert slow and "StuckOnce.stand_down" in slow[0] and "Event.wait" in slow[0]
