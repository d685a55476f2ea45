"""Cluster-wide under-store budgets, leased to workers.

A budgeted mount's limits (`max_requests_per_s`, `max_bytes_per_s`, `max_in_flight`)
hold for all workers together. The leader splits each limit among the workers that
reported lately, half evenly and half by the demand they reported (GETs asked for a
second), and answers each
block report with the reporting worker's shares; the split is redone at most once per
`budget_period_s`. The shares of one split add up to the limit. A worker keeps its last
share until it hears otherwise, also while no master answers, so a split in which some
workers already hold their new share and others still their old one is the only way the
total can pass the limit, and that lasts one period at most.

In memory only: a new leader starts with no demand, splits evenly among those who report
to it, and is within a period of the old split.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping

from reservoir.common.models import Mount, MountOptions
from reservoir.common.understore.budget_gate import BudgetShare

# A worker that has not reported for this many periods has left the split.
_STALE_PERIODS = 3.0
# This part of each limit is split evenly among the workers, the rest by demand: a worker
# that asks little now still holds enough that its next reads need not wait for a
# re-split (demand is a second old when it is split by).
_EVEN_PART = 0.5


def split_budget(options: MountOptions, demands: Mapping[str, float]) -> dict[str, BudgetShare]:
    """Each worker's share of the mount's limits: half evenly, half by demand (0 =
    unlimited stays 0). GETs in flight split in whole numbers that add up to the
    limit (largest remainders), at least one for a worker with demand while there are
    enough to go round."""
    if not demands:
        return {}
    workers = sorted(demands)
    even = 1 / len(workers)
    total = sum(max(0.0, demands[w]) for w in workers)
    fractions = {
        w: _EVEN_PART * even
        + (1 - _EVEN_PART) * (max(0.0, demands[w]) / total if total > 0 else even)
        for w in workers
    }
    in_flight = _whole_shares(options.max_in_flight, fractions, demands)
    return {
        w: BudgetShare(
            requests_per_s=options.max_requests_per_s * fractions[w],
            bytes_per_s=options.max_bytes_per_s * fractions[w],
            in_flight=in_flight.get(w, 0),
        )
        for w in workers
    }


def _whole_shares(
    limit: int, fractions: Mapping[str, float], demands: Mapping[str, float]
) -> dict[str, int]:
    if limit <= 0:
        return {}
    wanting = [w for w in fractions if demands[w] > 0]
    shares = {w: math.floor(limit * f) for w, f in fractions.items()}
    if len(wanting) <= limit:
        for w in wanting:  # a worker with demand and 0 GETs at once would starve
            shares[w] = max(1, shares[w])
    over = sum(shares.values()) - limit
    by_size = sorted(shares, key=lambda w: (-shares[w], w))
    for w in by_size:  # taken back from the largest (the floors above may overshoot)
        if over <= 0:
            break
        give = min(over, shares[w] - (1 if w in wanting else 0))
        shares[w] -= max(0, give)
        over -= max(0, give)
    left = limit - sum(shares.values())
    by_remainder = sorted(fractions, key=lambda w: (-(limit * fractions[w] % 1), w))
    for w in by_remainder[: max(0, left)]:
        shares[w] += 1
    # Idle workers get 0 here; with 0 meaning "unlimited" on the wire, they wait instead.
    return {w: (n if n > 0 else -1) for w, n in shares.items()}


class BudgetLeases:
    """The leader's split of every budgeted mount's limits among the reporting workers."""

    def __init__(
        self,
        mounts: Callable[[], list[Mount]],
        period_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`mounts`: the mount table as it is now."""
        self._mounts = mounts
        self._period_s = period_s
        self._clock = clock
        self._demands: dict[str, tuple[float, dict[str, float]]] = {}
        self._shares: dict[str, dict[str, BudgetShare]] = {}
        self._split_at = -math.inf

    def report(self, worker_id: str, demands: Mapping[str, float]) -> dict[str, BudgetShare]:
        """Takes a worker's demand; returns its share of each budgeted mount."""
        now = self._clock()
        self._demands[worker_id] = (now, dict(demands))
        if now - self._split_at >= self._period_s or worker_id not in self._shares:
            self._split(now)
        return self._shares.get(worker_id, {})

    def _split(self, now: float) -> None:
        stale = now - _STALE_PERIODS * self._period_s
        for worker_id in [w for w, (seen, _) in self._demands.items() if seen < stale]:
            del self._demands[worker_id]
        shares: dict[str, dict[str, BudgetShare]] = {w: {} for w in self._demands}
        for mount in self._mounts():
            if not mount.options.budgeted:
                continue
            wanted = {w: d.get(mount.path, 0.0) for w, (_, d) in self._demands.items()}
            for worker_id, share in split_budget(mount.options, wanted).items():
                shares[worker_id][mount.path] = share
        self._shares = shares
        self._split_at = now
