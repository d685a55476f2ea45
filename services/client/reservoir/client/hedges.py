"""Hedged block reads, for every route that waits on a worker (a data port in the
caller's thread, gRPC on the event loop): how long to wait for the first byte
(`hedge_budget`), whether a hedge may go out (`hedge_tokens`), and what happened, counted
in the client's read stats.

A hedge away from a worker already in the penalty box costs no token: that is a fault
being routed around (the reads that were in flight to a hung worker when the first of
them gave it up), not the tail of a healthy cluster, which is what the bound is for."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from reservoir.common import config as cfg

from .hedge_budget import FirstByteTimes, hedge_budget
from .hedge_tokens import HedgeTokens
from .penalty_box import PenaltyBox


@dataclass(frozen=True, slots=True)
class HedgeStats:
    reads: int  # block reads from a worker that could have hedged
    hedged: int  # reads that asked elsewhere after the budget
    refused: int  # reads past the budget that could not hedge (no token): they waited
    budget_s: float | None  # the budget now (None: hedging is off)


class Hedges:
    def __init__(self, config: cfg.ClientConfig, penalties: PenaltyBox) -> None:
        self._penalties = penalties
        self._floor = config.read_hedge_floor_s
        self._ceiling = config.read_hedge_after_s
        self._times = FirstByteTimes()
        self._tokens = HedgeTokens(config.read_hedge_share, config.read_hedge_burst)
        self._lock = threading.Lock()
        self._reads = self._hedged = self._refused = 0

    def budget(self) -> float | None:
        """Seconds a read gives a worker to start answering; None: wait the read deadline."""
        return hedge_budget(self._times.p99(), self._floor, self._ceiling)

    def read_started(self) -> None:
        self._tokens.read()
        with self._lock:
            self._reads += 1

    def first_byte(self, seconds: float) -> None:
        """A worker started answering a read `seconds` after it was asked."""
        self._times.record(seconds)

    def may_hedge(self, worker_id: str) -> bool:
        """A read from `worker_id` is past its budget: True if it may ask elsewhere
        (counted as a hedge), False if it must go on waiting (hedges are spent)."""
        allowed = self._penalties.holds(worker_id) or self._tokens.take()
        with self._lock:
            if allowed:
                self._hedged += 1
            else:
                self._refused += 1
        return allowed

    def stats(self) -> HedgeStats:
        with self._lock:
            return HedgeStats(self._reads, self._hedged, self._refused, self.budget())
