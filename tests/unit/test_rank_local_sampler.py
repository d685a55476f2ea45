"""DistributedCacheAwareSampler's promises, as pure functions of (epoch order, which hosts
hold each sample, each rank's host): every rank the same count, the ranks together a
permutation of the epoch (padded like DistributedSampler), mostly local reads when the
data is spread over the ranks' hosts, and DistributedSampler's split when nothing is."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from torch.utils.data import DistributedSampler  # noqa: E402

from reservoir.torch import DistributedCacheAwareSampler, assign_ranks  # noqa: E402
from reservoir.torch.rank_assignment import local_fraction  # noqa: E402

HOSTS = ["h1", "h2", "h3"]


def _spread(n: int, hosts: Sequence[str], salt: int = 0) -> list[frozenset[str]]:
    """Sample i on one host, as hashed placement spreads files over workers."""
    return [frozenset({hosts[(i * 2654435761 + salt) % 7919 % len(hosts)]}) for i in range(n)]


def _paths(n: int) -> list[str]:
    return [f"/ds/f{i:05d}" for i in range(n)]


def _samplers(
    n: int, where: list[frozenset[str]], rank_hosts: Sequence[str], **kwargs: object
) -> list[DistributedCacheAwareSampler]:
    return [
        DistributedCacheAwareSampler(
            _paths(n),
            num_replicas=len(rank_hosts),
            rank=r,
            hosts=rank_hosts,
            locate=lambda paths: where,
            **kwargs,  # type: ignore[arg-type]
        )
        for r in range(len(rank_hosts))
    ]


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 400),
    ranks=st.integers(1, 7),
    hosts=st.integers(1, 4),
    epoch=st.integers(0, 4),
    drop_last=st.booleans(),
)
def test_every_rank_gets_the_same_count_and_together_the_distributed_sampler_multiset(
    n: int, ranks: int, hosts: int, epoch: int, drop_last: bool
) -> None:
    names = [f"h{i}" for i in range(hosts)]
    rank_hosts = [names[r % hosts] for r in range(ranks)]
    where = _spread(n, names[: max(1, hosts - 1)])  # some hosts hold nothing
    samplers = _samplers(n, where, rank_hosts, drop_last=drop_last, seed=3)
    plain = [
        DistributedSampler(range(n), num_replicas=ranks, rank=r, seed=3, drop_last=drop_last)  # type: ignore[arg-type]
        for r in range(ranks)
    ]
    for s in samplers + plain:
        s.set_epoch(epoch)
    shares = [list(s) for s in samplers]
    expected = [list(p) for p in plain]
    assert {len(s) for s in shares} <= {len(expected[0])}
    assert all(len(s) == len(sampler) for s, sampler in zip(shares, samplers, strict=True))
    assert Counter(i for s in shares for i in s) == Counter(i for e in expected for i in e)


def test_with_one_rank_per_host_and_data_spread_over_them_nine_in_ten_reads_are_local() -> None:
    n = 3000
    where = _spread(n, HOSTS)
    samplers = _samplers(n, where, HOSTS)
    samplers[0].set_epoch(1)
    shares = samplers[0].shares()
    assert local_fraction(shares, where, HOSTS) >= 0.9
    assert samplers[0].local_fraction == local_fraction(shares, where, HOSTS)
    plain = [list(range(n))[r::3] for r in range(3)]
    assert local_fraction(plain, where, HOSTS) < 0.45  # what DistributedSampler gets: ~1/3


def test_ranks_sharing_a_host_share_its_samples_evenly() -> None:
    n = 1200
    where = _spread(n, ["a", "b"])
    rank_hosts = ["a", "a", "b", "b"]
    shares = assign_ranks(list(range(n)), where, rank_hosts)
    assert [len(s) for s in shares] == [300] * 4
    assert local_fraction(shares, where, rank_hosts) >= 0.9
    for rank, share in enumerate(shares):
        local = sum(1 for i in share if rank_hosts[rank] in where[i])
        assert local >= 0.85 * len(share)


def test_a_host_holding_more_than_its_ranks_can_take_gives_the_rest_to_other_ranks() -> None:
    n = 90
    where = [frozenset({"h1"})] * n  # everything on one host
    shares = assign_ranks(list(range(n)), where, HOSTS)
    assert [len(s) for s in shares] == [30, 30, 30]
    assert sorted(i for s in shares for i in s) == list(range(n))
    assert set(shares[0]) == set(range(30))  # h1's rank reads its first 30, all local


def test_nothing_cached_on_any_ranks_host_splits_as_distributed_sampler() -> None:
    n = 101
    for where in ([frozenset()] * n, [frozenset({"elsewhere"})] * n):
        samplers = _samplers(n, where, HOSTS, seed=5)
        for r, s in enumerate(samplers):
            s.set_epoch(2)
            plain = DistributedSampler(range(n), num_replicas=3, rank=r, seed=5)  # type: ignore[arg-type]
            plain.set_epoch(2)
            assert list(s) == list(plain)


def test_each_ranks_share_keeps_the_epochs_order_and_changes_with_the_epoch() -> None:
    n = 600
    where = _spread(n, HOSTS)
    (sampler, *_) = _samplers(n, where, HOSTS, seed=9)
    sampler.set_epoch(0)
    order = sampler.shares()
    again = sampler.shares()
    sampler.set_epoch(1)
    assert order == again  # the same inputs, the same split: no rank needs to talk
    assert sampler.shares()[0] != order[0]
    # Within a share, the epoch's permuted order (not all local ones first).
    from reservoir.torch.epoch_order import EpochShape, epoch_order

    position = {
        i: p for p, i in enumerate(epoch_order(EpochShape(n, 3), seed=9, epoch=0, shuffle=True))
    }
    assert [position[i] for i in order[0]] == sorted(position[i] for i in order[0])


def test_hosts_must_name_every_rank_and_several_ranks_need_them() -> None:
    with pytest.raises(ValueError, match="ranks' hosts"):
        DistributedCacheAwareSampler(_paths(3), 3, 0, hosts=["h1"], locate=lambda p: [])
    with pytest.raises(ValueError, match="needs `hosts`"):
        DistributedCacheAwareSampler(_paths(3), 3, 0, locate=lambda p: [])
    with pytest.raises(ValueError, match="needs a client"):
        DistributedCacheAwareSampler(_paths(3), 3, 0, hosts=HOSTS)
