"""Eviction policies, driven through the real memory tier by small simulations."""

from __future__ import annotations

import random

import pytest

from reservoir.common.errors import InvalidArgument
from reservoir.worker.eviction import LruPolicy, TinyLfuPolicy, new_policy
from reservoir.worker.memory_tier import BlockId, MemoryTier

ONE = b"x"  # every simulated block is one byte: capacities count blocks


def _tier(policy: str, capacity: int) -> MemoryTier:
    return MemoryTier(capacity, lambda b, n: None, new_policy(policy, capacity))


def _read(tier: MemoryTier, block: BlockId) -> bool:
    """One request as the worker makes it: a hit, or a miss that offers the block."""
    if tier.get(block) is not None:
        return True
    tier.put(block, ONE, 0, 0)
    return False


def shuffled_epoch_hit_ratios(
    policy: str, blocks: int, fraction: float, epochs: int
) -> list[float]:
    tier = _tier(policy, int(blocks * fraction))
    order = [("f", i) for i in range(blocks)]
    rng = random.Random(1)
    ratios = []
    for _ in range(epochs):
        rng.shuffle(order)
        ratios.append(sum(_read(tier, b) for b in order) / blocks)
    return ratios


def hot_set_hit_ratio(policy: str, capacity: int, requests: int = 40_000) -> float:
    """97 % of requests to a hot set of 80 % of the capacity, 3 % to blocks never seen
    again; the ratio over the second half (after warm-up)."""
    tier = _tier(policy, capacity)
    rng = random.Random(2)
    hits = 0
    for n in range(requests):
        block = ("hot", rng.randrange(capacity * 8 // 10)) if rng.random() < 0.97 else ("x", n)
        hit = _read(tier, block)
        hits += hit if n >= requests // 2 else 0
    return hits / (requests - requests // 2)


def test_tinylfu_keeps_half_the_hits_of_shuffled_epochs_at_half_the_data_set() -> None:
    ratios = shuffled_epoch_hit_ratios("tinylfu", 2000, 0.5, 4)
    assert min(ratios[1:]) >= 0.45, ratios


def test_lru_collapses_on_shuffled_epochs_at_half_the_data_set() -> None:
    ratios = shuffled_epoch_hit_ratios("lru", 2000, 0.5, 4)
    assert max(ratios[1:]) < 0.2, ratios


@pytest.mark.parametrize("policy", ["lru", "tinylfu"])
def test_a_hot_set_that_fits_keeps_95_percent_hits(policy: str) -> None:
    assert hot_set_hit_ratio(policy, 1000) >= 0.95


@pytest.mark.parametrize("policy", ["lru", "tinylfu"])
def test_a_data_set_that_fits_is_all_hits_after_the_first_epoch(policy: str) -> None:
    assert shuffled_epoch_hit_ratios(policy, 500, 1.0, 3)[1:] == [1.0, 1.0]


def test_tinylfu_lets_a_one_off_scan_pass_without_displacing_the_hot_set() -> None:
    tier = _tier("tinylfu", 100)
    hot = [("hot", i) for i in range(100)]
    for _ in range(3):
        for block in hot:
            _read(tier, block)
    for i in range(1000):
        assert not _read(tier, ("scan", i))
    assert all(tier.get(b) is not None for b in hot)


def test_tinylfu_admits_a_new_hot_set_once_it_is_asked_for_more_than_the_old() -> None:
    tier = _tier("tinylfu", 50)
    for _ in range(2):
        for i in range(50):
            _read(tier, ("old", i))
    for _ in range(6):
        for i in range(50):
            _read(tier, ("new", i))
    assert sum(tier.get(("new", i)) is not None for i in range(50)) == 50


def test_lru_evicts_the_least_recently_used_and_admits_everything() -> None:
    policy = LruPolicy()
    for i in range(3):
        policy.on_admit(("f", i), 1)
    policy.on_access(("f", 0))
    assert list(policy.victims()) == [("f", 1), ("f", 2), ("f", 0)]
    assert policy.admit(("g", 0), 1)
    policy.remove(("f", 1))
    assert next(policy.victims()) == ("f", 2)


def test_tinylfu_sketch_grows_past_its_expected_size_and_keeps_what_is_held() -> None:
    policy = TinyLfuPolicy(expected_blocks=16)
    tier = MemoryTier(40, lambda b, n: None, policy)
    for _ in range(2):
        for i in range(40):
            _read(tier, ("f", i))
    assert len(tier) == 40
    # Asked for twice, like every held block: not enough to displace one.
    for _ in range(2):
        _read(tier, ("g", 0))
    assert tier.get(("g", 0)) is None


def test_an_unknown_policy_name_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="lru"):
        new_policy("mru", 100)
