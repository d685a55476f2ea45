"""Which rank reads which sample this epoch, so that each reads what its own host holds.

A pure function of (epoch order, each sample's hosts, each rank's host): every rank that
computes it from the same inputs gets the same answer, without talking to the others."""

from __future__ import annotations

import heapq
from collections.abc import Collection, Sequence


def assign_ranks(
    order: Sequence[int],
    sample_hosts: Sequence[Collection[str]],
    rank_hosts: Sequence[str],
) -> list[list[int]]:
    """Each rank's indices from `order` (the epoch's padded permutation, `len(order)` a
    multiple of the rank count), in the order they come in `order`.

    Walking `order`, a sample goes to the rank with the most room left among the ranks on
    a host that holds it (`sample_hosts[index]`; ranks sharing a host share its samples);
    what no rank's host holds, or holds only where every rank is full, then fills the
    ranks with room, in order. Every rank so gets exactly `len(order) / ranks` entries and
    the union is `order`. When no rank's host holds anything the answer is
    `DistributedSampler`'s, `order[r::ranks]`."""
    ranks = len(rank_hosts)
    if ranks < 1:
        raise ValueError("need at least one rank")
    if len(order) % ranks:
        raise ValueError(f"{len(order)} indices do not split evenly over {ranks} ranks")
    per_rank = len(order) // ranks
    by_host: dict[str, list[int]] = {}
    for rank, host in enumerate(rank_hosts):
        by_host.setdefault(host, []).append(rank)
    if not any(any(h in by_host for h in sample_hosts[i]) for i in set(order)):
        return [list(order[r::ranks]) for r in range(ranks)]

    # Per host, its ranks by room left (most first, then the lowest rank).
    room = [per_rank] * ranks
    queues = {host: [(-per_rank, r) for r in members] for host, members in by_host.items()}
    positions: list[list[int]] = [[] for _ in range(ranks)]
    left: list[int] = []
    for position, index in enumerate(order):
        best: tuple[int, int] | None = None
        for host in sorted(sample_hosts[index]):
            queue = queues.get(host)
            if queue and (best is None or queue[0] < best):
                best = queue[0]
        if best is None:
            left.append(position)
            continue
        rank = best[1]
        heapq.heappop(queues[rank_hosts[rank]])
        room[rank] -= 1
        if room[rank]:
            heapq.heappush(queues[rank_hosts[rank]], (-room[rank], rank))
        positions[rank].append(position)
    spare = iter(left)
    for rank in range(ranks):
        positions[rank].extend(next(spare) for _ in range(room[rank]))
        positions[rank].sort()
    return [[order[p] for p in mine] for mine in positions]


def local_fraction(
    shares: Sequence[Sequence[int]],
    sample_hosts: Sequence[Collection[str]],
    rank_hosts: Sequence[str],
) -> float:
    """Of all the entries of `shares` (rank -> indices), the fraction whose sample a host
    of its own rank holds."""
    total = sum(len(s) for s in shares)
    local = sum(
        1
        for rank, share in enumerate(shares)
        for index in share
        if rank_hosts[rank] in sample_hosts[index]
    )
    return local / total if total else 0.0
