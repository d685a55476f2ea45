"""Block placement: the same homes everywhere, balanced, stable under membership change,
and a lookup that costs the same at 1,000 workers as at 10."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from reservoir.client.routing import candidates
from reservoir.common.models import WorkerRecord
from reservoir.common.placement import (
    TABLE_SIZE,
    Candidate,
    Placement,
    block_key,
    placement,
    placement_of,
)


def _workers(n: int, prefix: str = "worker") -> list[Candidate]:
    return [Candidate(f"{prefix}-{i}") for i in range(n)]


def _first_homes(table: Placement, n: int = 20_000) -> list[str]:
    return [table.homes(block_key("file", i))[0] for i in range(n)]


def test_the_same_workers_in_any_order_give_the_same_homes() -> None:
    workers = _workers(7)
    shuffled = workers[:]
    random.Random(3).shuffle(shuffled)
    a, b = Placement(workers), Placement(shuffled)
    for i in range(2000):
        key = block_key("f", i)
        assert a.homes(key, 3) == b.homes(key, 3)


def test_homes_are_distinct_workers_and_as_many_as_asked_or_exist() -> None:
    table = Placement(_workers(5))
    for i in range(500):
        homes = table.homes(block_key("f", i), 3)
        assert len(homes) == len(set(homes)) == 3
    assert sorted(table.homes(b"x", 10)) == sorted(w.id for w in _workers(5))
    assert Placement([]).homes(b"x", 2) == []


@pytest.mark.parametrize("n", [3, 10, 100, 1000])
def test_every_worker_owns_its_share_of_slots_within_five_percent(n: int) -> None:
    shares = placement(_workers(n)).shares()
    assert len(shares) == n
    assert max(abs(s * n - 1) for s in shares.values()) <= 0.05


def test_blocks_spread_over_equal_workers_as_their_slots_say() -> None:
    counts = Counter(_first_homes(Placement(_workers(4))))
    assert all(4_600 <= c <= 5_400 for c in counts.values()), counts


def test_weight_attracts_proportionally_more_slots() -> None:
    shares = Placement([Candidate("small", 1.0), Candidate("big", 3.0)]).shares()
    assert shares["big"] / shares["small"] == pytest.approx(3.0, rel=0.01)


@pytest.mark.parametrize("n", [10, 100])
def test_a_worker_leaving_moves_its_own_blocks_and_at_most_one_percent_more(n: int) -> None:
    workers = _workers(n)
    gone = workers[n // 2]
    before = _first_homes(placement(workers))
    after = _first_homes(placement([w for w in workers if w != gone]))
    moved = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert all(after[i] != gone.id for i in range(len(after)))
    assert len(moved) / len(before) <= 1 / n + 0.01
    assert sum(before[i] == gone.id for i in moved) == before.count(gone.id)


@pytest.mark.parametrize("n", [10, 100])
def test_a_worker_joining_takes_its_share_and_moves_at_most_one_percent_more(n: int) -> None:
    workers = _workers(n)
    before = _first_homes(placement(workers))
    after = _first_homes(placement([*workers, Candidate("newcomer")]))
    moved = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert len(moved) / len(before) <= 1 / (n + 1) + 0.01
    expected = len(after) / (n + 1)
    assert 0.7 * expected <= after.count("newcomer") <= 1.3 * expected


def test_the_table_is_built_once_per_membership() -> None:
    workers = _workers(6)
    assert placement(workers) is placement(list(reversed(workers)))
    assert placement(workers) is not placement(workers[:5])


def test_the_client_asks_holders_first_then_a_bounded_number_of_homes() -> None:
    records = [WorkerRecord(f"w{i}", f"127.0.0.1:{i}", capacity_bytes=1 << 30) for i in range(8)]
    table = placement_of(records)
    homes = table.homes(block_key("f", 0), 8)
    order = candidates("f", 0, records, ["w7"], host="", zone="", table=table, homes=3)
    assert order[0].id == "w7"
    assert [w.id for w in order[1:]] == [h for h in homes if h != "w7"][:3]
    # No holder: the first home first, as the master's load jobs place it.
    order = candidates("f", 0, records, [], host="", zone="", table=table, homes=3)
    assert [w.id for w in order] == homes[:3]


def test_table_size_is_prime_so_every_skip_visits_every_slot() -> None:
    assert all(TABLE_SIZE % d for d in range(2, int(TABLE_SIZE**0.5) + 1))
