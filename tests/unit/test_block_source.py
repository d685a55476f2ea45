"""The read planner: which routes a block read takes, in what order, and how a worker in
the penalty box moves down (the real planner and box; sources are recording fakes)."""

from __future__ import annotations

import dataclasses

from reservoir.client.block_source import Outcome, Plan, Planner
from reservoir.client.penalty_box import PenaltyBox
from reservoir.common.models import WorkerRecord
from reservoir.common.placement import block_key, placement_of
from tests.unit.read_path_fakes import Source, View, held_by, planner, worker

NEAR = worker("near", same_host=True)
FAR = worker("far")
OTHER = worker("other")
PORTLESS = worker("portless", port=False)
ZONED = worker("zoned", same_zone=True)


def _plan_of(workers: list[WorkerRecord], *holders: str, penalised: tuple[str, ...] = ()) -> Plan:
    box = PenaltyBox(60.0)
    for name in penalised:
        box.penalise(name)
    view = View(workers, box)
    plans = planner(view, Source("sc", Outcome.READ, same_host=True), Source("dp", Outcome.READ))
    return plans.plan(held_by(*holders), 0, workers)


def test_a_same_host_holder_comes_first_then_the_best_remote_holders_port_then_grpc() -> None:
    plan = _plan_of([FAR, NEAR, OTHER], "far", "near")
    assert [w.id for w in plan.local] == ["near"]
    assert plan.port is not None and plan.port.id == "far"
    # Holders nearest first, then the block's homes that do not hold it.
    assert [w.id for w in plan.remote] == ["near", "far", "other"]


def test_the_data_port_is_the_best_worker_that_has_one() -> None:
    plan = _plan_of([PORTLESS, FAR], "portless", "far")
    assert plan.local == ()
    assert plan.port is not None and plan.port.id == "far"
    assert [w.id for w in plan.remote][:2] == ["portless", "far"]


def test_a_penalised_worker_is_asked_last_and_not_over_its_data_port() -> None:
    plan = _plan_of([FAR, OTHER], "far", "other", penalised=("far",))
    assert plan.port is not None and plan.port.id == "other"
    assert [w.id for w in plan.remote] == ["other", "far"]


def test_with_every_port_penalised_the_plan_names_no_data_port_but_still_every_worker() -> None:
    plan = _plan_of([FAR, OTHER], "far", "other", penalised=("far", "other"))
    assert plan.port is None
    assert {w.id for w in plan.remote} == {"far", "other"}


def test_a_plan_made_while_nobody_was_penalised_is_not_kept_once_someone_is() -> None:
    box = PenaltyBox(60.0)
    workers = [FAR, OTHER]
    plans = planner(
        View(workers, box), Source("sc", Outcome.READ, same_host=True), Source("dp", Outcome.READ)
    )
    inode = held_by("far", "other")
    first = plans.plan(inode, 0, workers).port
    assert first is not None
    box.penalise(first.id)
    assert plans.plan(inode, 0, workers).port == (OTHER if first == FAR else FAR)


def _planner_over(workers: list[WorkerRecord]) -> tuple[View, Planner]:
    view = View(workers, PenaltyBox(60.0))
    sources = Source("sc", Outcome.READ, same_host=True), Source("dp", Outcome.READ)
    return view, planner(view, *sources)


def _homes(workers: list[WorkerRecord]) -> list[str]:
    """The block's homes (of `held_by`'s file), first home first."""
    return placement_of(workers).homes(block_key("f1", 0), len(workers))


def test_replicas_come_same_host_then_same_zone_then_the_rest_then_homes_not_holding() -> None:
    workers = [FAR, ZONED, NEAR, OTHER, PORTLESS]
    # Told farthest first; the homes are whatever placement says.
    plan = _plan_of(workers, "far", "zoned", "near")
    assert [w.id for w in plan.remote][:3] == ["near", "zoned", "far"]
    assert plan.port is not None and plan.port.id == "zoned"  # nearest one off this host
    not_holding = [w for w in _homes(workers) if w not in ("far", "zoned", "near")]
    assert [w.id for w in plan.remote][3:] == not_holding[:3]


def test_among_replicas_equally_near_the_blocks_home_comes_first() -> None:
    workers = [FAR, OTHER, PORTLESS]
    home, *others = _homes(workers)
    plan = _plan_of(workers, *others, home)  # the home told last
    assert [w.id for w in plan.remote][0] == home


def test_with_no_replica_known_the_homes_come_in_placement_order_however_near() -> None:
    # A nearer second home would fetch the block from the under-store off its first home,
    # where every other client looks for it.
    workers = [FAR, ZONED, NEAR, OTHER]
    view, plans = _planner_over(workers)
    plan = plans.plan(held_by(), 0, workers)
    assert [w.id for w in plan.remote] == _homes(workers)[:3]


def test_replicas_the_view_learns_later_replace_a_remembered_plan() -> None:
    workers = [FAR, ZONED, OTHER]
    view, plans = _planner_over(workers)
    inode = dataclasses.replace(held_by(), locations={})  # as stat answers it
    view.held["f1"] = {0: ["far"]}
    assert plans.plan(inode, 0, workers).port == FAR
    assert plans.plan(inode, 0, workers).port == FAR
    view.held["f1"] = {0: ["far", "zoned"]}  # a new answer from the master
    assert plans.plan(inode, 0, workers).port == ZONED
