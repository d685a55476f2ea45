"""The parts of the under-store budget that are arithmetic: the leader's split of a
mount's limits among workers, its lease table, and one worker's gate (token buckets,
lanes, AIMD), all on a fake clock; and which mounts a worker's gates report on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from reservoir.common.config import UnderStoreCalls
from reservoir.common.errors import InvalidArgument
from reservoir.common.models import Mount, MountOptions
from reservoir.common.understore.budget_gate import (
    FOREGROUND,
    PRELOAD,
    BudgetGate,
    BudgetShare,
)
from reservoir.common.understore.mounted_stores import MountedStores
from reservoir.common.understore.store_budgets import StoreBudgets
from reservoir.master.budget_leases import BudgetLeases, split_budget


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _admitted_over(gate: BudgetGate, clock: FakeClock, seconds: float, lane: str) -> int:
    """GETs the gate admits when asked every 4 ms for `seconds` of fake time."""
    admitted = 0
    for _ in range(int(seconds * 250)):
        clock.now += 0.004
        if gate.try_admit(1, lane) is None:
            admitted += 1
    return admitted


def _gate(share: BudgetShare | None, clock: FakeClock, **calls: float) -> BudgetGate:
    gate = BudgetGate("/m", UnderStoreCalls(**calls), clock)  # type: ignore[arg-type]
    if share is not None:
        gate.set_share(share)
    return gate


def test_split_rates_add_up_to_the_limit_and_follow_demand() -> None:
    options = MountOptions(max_requests_per_s=200, max_bytes_per_s=1000)
    shares = split_budget(options, {"w1": 90.0, "w2": 10.0, "w3": 0.0})
    assert sum(s.requests_per_s for s in shares.values()) == pytest.approx(200)
    assert sum(s.bytes_per_s for s in shares.values()) == pytest.approx(1000)
    assert shares["w1"].requests_per_s > shares["w2"].requests_per_s > shares["w3"].requests_per_s
    # An idle worker still holds half of an even share: its next reads need not wait.
    assert shares["w3"].requests_per_s == pytest.approx(200 / 3 / 2)


def test_split_with_no_demand_anywhere_is_even() -> None:
    shares = split_budget(MountOptions(max_requests_per_s=90), {"a": 0.0, "b": 0.0, "c": 0.0})
    assert [s.requests_per_s for s in shares.values()] == pytest.approx([30, 30, 30])


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 64, 256])
def test_split_in_flight_is_whole_gets_adding_up_to_the_limit(limit: int) -> None:
    demands = {"w1": 50.0, "w2": 30.0, "w3": 1.0, "w4": 0.0}
    shares = split_budget(MountOptions(max_in_flight=limit), demands)
    held = {w: max(0, s.in_flight) for w, s in shares.items()}
    assert sum(held.values()) == limit
    if limit >= 3:  # enough to go round: every worker with demand holds one at least
        assert min(held[w] for w in ("w1", "w2", "w3")) >= 1


def test_unlimited_dimensions_stay_unlimited_in_every_share() -> None:
    shares = split_budget(MountOptions(max_requests_per_s=10), {"w1": 1.0, "w2": 1.0})
    assert all(s.bytes_per_s == 0 and s.in_flight == 0 for s in shares.values())


def test_leases_split_once_a_period_and_forget_workers_that_stopped_reporting() -> None:
    clock = FakeClock()
    mounts = [
        Mount("/m", "s3://b/", MountOptions(max_requests_per_s=100)),
        Mount("/free", "s3://c/"),
    ]
    leases = BudgetLeases(lambda: mounts, period_s=1.0, clock=clock)
    assert leases.report("w1", {"/m": 5.0})["/m"].requests_per_s == pytest.approx(100)
    assert "/free" not in leases.report("w1", {"/m": 5.0})
    # A new worker is split in at once; the others learn theirs at their next report.
    assert leases.report("w2", {"/m": 5.0})["/m"].requests_per_s == pytest.approx(50)
    clock.now += 0.5
    assert leases.report("w1", {"/m": 50.0})["/m"].requests_per_s == pytest.approx(50)
    clock.now += 0.6  # a period since the split: w1's demand counts now
    assert leases.report("w1", {"/m": 50.0})["/m"].requests_per_s > 65  # half even, half 10:1
    clock.now += 3.0  # w2 has not reported for 3 periods: it left the split
    assert leases.report("w1", {"/m": 50.0})["/m"].requests_per_s == pytest.approx(100)


def test_gate_admits_its_share_of_gets_a_second() -> None:
    clock = FakeClock()
    gate = _gate(BudgetShare(requests_per_s=20), clock)
    assert _admitted_over(gate, clock, 10.0, FOREGROUND) in range(198, 203)


def test_gate_admits_nothing_before_its_first_lease() -> None:
    clock = FakeClock()
    gate = _gate(None, clock)
    assert _admitted_over(gate, clock, 1.0, FOREGROUND) == 0
    gate.set_share(BudgetShare(requests_per_s=10))
    assert _admitted_over(gate, clock, 1.0, FOREGROUND) in range(9, 12)


def test_a_slowdown_halves_the_rate_once_per_hold_then_it_grows_back() -> None:
    clock = FakeClock()
    gate = _gate(BudgetShare(requests_per_s=40), clock, slowdown_hold_s=1.0, recovery_s=4.0)
    _admitted_over(gate, clock, 1.0, FOREGROUND)
    assert gate.slowed() is True
    assert gate.slowed() is False  # the same storm, within the hold
    assert _admitted_over(gate, clock, 1.0, FOREGROUND) in range(19, 23)
    # Past the hold (1 s), the rate grows back by a quarter of the share a second.
    _admitted_over(gate, clock, 1.0, FOREGROUND)
    assert gate.factor(clock.now) == pytest.approx(0.75)
    clock.now += 10.0
    assert gate.factor(clock.now) == 1.0


def test_a_preload_takes_at_most_its_part_of_the_share_and_leaves_the_foreground_a_burst() -> None:
    clock = FakeClock()
    gate = _gate(BudgetShare(requests_per_s=20), clock, budget_preload_share=0.5)
    assert _admitted_over(gate, clock, 10.0, PRELOAD) in range(95, 103)
    # A preload takes only from a full bucket (half a second of the share: 10 GETs), so
    # just after it took one, a burst of foreground GETs finds the other 9.
    while gate.try_admit(1, PRELOAD) is not None:
        clock.now += 0.001
    assert [gate.try_admit(1, FOREGROUND) for _ in range(9)] == [None] * 9
    assert gate.try_admit(1, FOREGROUND) is not None
    assert gate.try_admit(1, PRELOAD) is not None


def test_a_share_of_gets_in_flight_leaves_one_of_them_to_the_foreground() -> None:
    clock = FakeClock()
    gate = _gate(BudgetShare(in_flight=2), clock)
    assert gate.try_admit(1, PRELOAD) is None
    gate.in_flight = 1
    assert gate.try_admit(1, PRELOAD) is not None
    assert gate.try_admit(1, FOREGROUND) is None
    gate.in_flight = 2
    assert gate.try_admit(1, FOREGROUND) is not None


def test_bytes_per_s_lets_a_block_larger_than_the_burst_pass_and_pays_for_it_after() -> None:
    clock = FakeClock()
    gate = _gate(BudgetShare(bytes_per_s=1000), clock)
    clock.now += 0.01
    assert gate.try_admit(5000, FOREGROUND) is None  # credit left: admitted, 5 s of debt
    wait_s = gate.try_admit(10, FOREGROUND)
    assert wait_s is not None and 4.5 < wait_s <= 5.0


@pytest.mark.parametrize(
    "options",
    [
        MountOptions(max_requests_per_s=-1),
        MountOptions(max_in_flight=-5),
        MountOptions(max_bytes_per_s=100),
    ],
)
def test_mount_budgets_must_be_positive_and_bytes_at_least_a_block(options: MountOptions) -> None:
    with pytest.raises(InvalidArgument):
        options.validated()


def test_a_removed_mount_no_longer_reports_a_demand_to_the_master(tmp_path: Path) -> None:
    budgets = StoreBudgets(UnderStoreCalls())
    stores = MountedStores(timeout_s=1, budgets=budgets)
    kept = Mount("/kept", f"file://{tmp_path}/a/", MountOptions(max_requests_per_s=10))
    gone = Mount("/gone", f"file://{tmp_path}/b/", MountOptions(max_requests_per_s=10))

    async def open_both() -> None:
        for mount in (kept, gone):
            await stores.open(mount)

    asyncio.run(open_both())
    assert sorted(path for path, _ in budgets.take_demands()) == ["/gone", "/kept"]
    stores.mount_removed("/gone")
    assert [path for path, _ in budgets.take_demands()] == ["/kept"]
