"""The read planner: which routes a block read takes, in what order, and how a worker in
the penalty box moves down (the real planner and box; sources are recording fakes)."""

from __future__ import annotations

from reservoir.client.block_source import Outcome, Plan
from reservoir.client.penalty_box import PenaltyBox
from reservoir.common.models import WorkerRecord
from tests.unit.read_path_fakes import Source, View, held_by, planner, worker

NEAR = worker("near", same_host=True)
FAR = worker("far")
OTHER = worker("other")
PORTLESS = worker("portless", port=False)


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
    assert plans.plan(inode, 0, workers).port == FAR
    box.penalise("far")
    assert plans.plan(inode, 0, workers).port == OTHER
