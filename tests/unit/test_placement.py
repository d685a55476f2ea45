from collections import Counter

from reservoir.common.placement import Candidate, block_key, rank


def _homes(workers: list[Candidate], n: int = 4000) -> dict[int, str]:
    return {i: rank(block_key("f", i), workers)[0] for i in range(n)}


def test_rank_is_deterministic_and_covers_every_worker() -> None:
    workers = [Candidate("w1"), Candidate("w2"), Candidate("w3")]
    order = rank(b"x:1", workers)
    assert order == rank(b"x:1", list(reversed(workers)))
    assert sorted(order) == ["w1", "w2", "w3"]


def test_blocks_spread_evenly_over_equal_workers() -> None:
    counts = Counter(_homes([Candidate(f"w{i}") for i in range(4)]).values())
    assert all(800 <= c <= 1200 for c in counts.values()), counts


def test_weight_attracts_proportionally_more_blocks() -> None:
    counts = Counter(_homes([Candidate("small", 1.0), Candidate("big", 3.0)]).values())
    assert 2.4 < counts["big"] / counts["small"] < 3.7, counts


def test_removing_a_worker_moves_only_its_blocks() -> None:
    before = _homes([Candidate(f"w{i}") for i in range(4)])
    after = _homes([Candidate(f"w{i}") for i in range(3)])
    moved = [i for i in before if before[i] != after[i]]
    assert all(before[i] == "w3" for i in moved)
