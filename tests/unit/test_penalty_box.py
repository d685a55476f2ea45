"""The penalty box: one place every route puts a failing worker, which orders it last."""

from __future__ import annotations

from reservoir.client.penalty_box import PenaltyBox
from reservoir.common.models import WorkerRecord

A, B, C = (WorkerRecord(n, f"{n}:1") for n in "abc")


def test_an_empty_box_leaves_the_order_as_it_is() -> None:
    box = PenaltyBox(60.0)
    order = [A, B, C]
    assert box.empty() and box.healthy_first(order) is order


def test_a_penalised_worker_moves_last_keeping_the_others_order() -> None:
    box = PenaltyBox(60.0)
    box.penalise("a")
    assert box.holds("a") and not box.holds("b")
    assert box.healthy_first([A, B, C]) == [B, C, A]


def test_a_penalty_ends_after_its_time_and_the_worker_is_first_again() -> None:
    box = PenaltyBox(0.0)  # over as soon as it starts
    box.penalise("a")
    assert not box.holds("a")
    assert box.empty()
    assert box.healthy_first([A, B]) == [A, B]


def test_the_box_is_empty_again_once_every_penalty_ended_even_for_a_worker_never_asked_of() -> None:
    box = PenaltyBox(0.0)
    box.penalise("gone")  # a worker that left: nobody orders it again
    assert box.empty()
