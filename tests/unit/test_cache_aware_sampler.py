"""CacheAwareSampler's promises, over an in-process cache view (no cluster): each epoch
the indices `DistributedSampler` would give this rank, cached ones first, a load asked
for the rest; seeded, and a new order each epoch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from torch.utils.data import DistributedSampler  # noqa: E402

from reservoir.common.models import Inode  # noqa: E402
from reservoir.torch import CacheAwareSampler  # noqa: E402
from reservoir.torch.cache_view import fully_cached  # noqa: E402


class SetCacheView:
    """A cache that holds a fixed set of paths, and records what it was asked to load."""

    def __init__(self, cached: set[str]) -> None:
        self.held = cached
        self.loads: list[list[str]] = []

    def cached(self, paths: Sequence[str]) -> list[bool]:
        return [p in self.held for p in paths]

    def load(self, paths: Sequence[str]) -> None:
        self.loads.append(list(paths))


def _paths(n: int) -> list[str]:
    return [f"/ds/f{i:05d}" for i in range(n)]


def _sampler(n: int, cached: set[int], **kwargs: object) -> tuple[CacheAwareSampler, SetCacheView]:
    paths = _paths(n)
    view = SetCacheView({paths[i] for i in cached})
    return CacheAwareSampler(paths, cache=view, **kwargs), view  # type: ignore[arg-type]


sizes = st.integers(min_value=0, max_value=300)
cached_fractions = st.floats(min_value=0.0, max_value=1.0)


def _cached_set(n: int, fraction: float, salt: int = 7) -> set[int]:
    return {i for i in range(n) if (i * 2654435761 + salt) % 1000 < fraction * 1000}


@settings(max_examples=60, deadline=None)
@given(n=sizes, fraction=cached_fractions, epoch=st.integers(0, 5), seed=st.integers(0, 99))
def test_one_rank_yields_a_permutation_with_the_cached_indices_first(
    n: int, fraction: float, epoch: int, seed: int
) -> None:
    cached = _cached_set(n, fraction)
    sampler, _ = _sampler(n, cached, seed=seed)
    sampler.set_epoch(epoch)
    order = list(sampler)
    assert sorted(order) == list(range(n)) and len(sampler) == n
    head = order[: len(cached)]
    assert set(head) == cached and sampler.cached_count == len(cached)


@settings(max_examples=60, deadline=None)
@given(
    n=sizes,
    replicas=st.integers(1, 5),
    drop_last=st.booleans(),
    fraction=cached_fractions,
    epoch=st.integers(0, 3),
)
def test_each_rank_gets_distributed_samplers_share_and_the_shares_cover_every_index(
    n: int, replicas: int, drop_last: bool, fraction: float, epoch: int
) -> None:
    cached = _cached_set(n, fraction)
    shares = []
    for rank in range(replicas):
        sampler, _ = _sampler(
            n, cached, num_replicas=replicas, rank=rank, drop_last=drop_last, seed=3
        )
        reference = DistributedSampler(
            range(n), num_replicas=replicas, rank=rank, drop_last=drop_last, seed=3
        )
        sampler.set_epoch(epoch)
        reference.set_epoch(epoch)
        mine = list(sampler)
        assert Counter(mine) == Counter(reference) and len(mine) == len(sampler) == len(reference)
        shares.append(mine)
    everything = Counter(i for share in shares for i in share)
    if drop_last:
        assert all(c == 1 for c in everything.values())
        assert len(everything) == n - n % replicas
    else:
        assert set(everything) == set(range(n))  # every index, and once unless padded:
        assert sum(everything.values()) - n == (-n) % replicas if n else True


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), fraction=cached_fractions, replicas=st.integers(1, 4))
def test_cached_first_is_a_stable_partition_of_the_permutation(
    n: int, fraction: float, replicas: int
) -> None:
    cached = _cached_set(n, fraction)
    for rank in range(replicas):
        sampler, view = _sampler(n, cached, num_replicas=replicas, rank=rank)
        share = sampler.share()
        order = list(sampler)
        warm = [i for i in share if i in cached]
        cold = [i for i in share if i not in cached]
        assert order == warm + cold
        # The load asks for the rest, in the order they will be read.
        paths = _paths(n)
        assert view.loads == ([list(dict.fromkeys(paths[i] for i in cold))] if cold else [])


def test_with_everything_cached_the_order_is_distributed_samplers_index_for_index() -> None:
    sampler, view = _sampler(500, set(range(500)), num_replicas=3, rank=1, seed=11)
    reference = DistributedSampler(range(500), num_replicas=3, rank=1, seed=11)
    for epoch in range(3):
        sampler.set_epoch(epoch)
        reference.set_epoch(epoch)
        assert list(sampler) == list(reference)
    assert view.loads == []


def test_the_order_changes_between_epochs_and_is_the_same_for_the_same_seed_and_epoch() -> None:
    cached = _cached_set(400, 0.5)
    first, _ = _sampler(400, cached, seed=5)
    again, _ = _sampler(400, cached, seed=5)
    other_seed, _ = _sampler(400, cached, seed=6)
    orders = []
    for epoch in range(3):
        first.set_epoch(epoch)
        again.set_epoch(epoch)
        orders.append(list(first))
        assert orders[-1] == list(again)
    assert len({tuple(o) for o in orders}) == 3
    assert list(other_seed) != orders[0]


def test_without_shuffle_each_part_keeps_index_order_and_load_false_asks_for_nothing() -> None:
    sampler, view = _sampler(10, {1, 4, 7}, shuffle=False, load=False)
    assert list(sampler) == [1, 4, 7, 0, 2, 3, 5, 6, 8, 9]
    assert view.loads == []


def test_bad_arguments_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="rank"):
        _sampler(10, set(), num_replicas=2, rank=2)
    with pytest.raises(TypeError, match="sequence of paths"):
        CacheAwareSampler("/ds", cache=SetCacheView(set()))
    with pytest.raises(ValueError, match="needs a client"):
        CacheAwareSampler(_paths(3))


def test_a_file_counts_as_cached_only_when_every_block_has_a_holder() -> None:
    inode = Inode(path="/ds/x", is_dir=False, size=10, block_size=4, file_id="x")
    assert not fully_cached(inode)
    assert not fully_cached(inode.with_locations({0: ["w1"], 2: ["w2"]}))
    assert fully_cached(inode.with_locations({0: ["w1"], 1: ["w1"], 2: ["w2", "w1"]}))
    assert fully_cached(Inode(path="/ds/empty", is_dir=False, size=0, block_size=4, file_id="e"))
