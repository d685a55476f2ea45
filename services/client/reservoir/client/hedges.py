"""Hedged block reads, for every route that waits on a worker (a data port in the
caller's thread, gRPC on the event loop): how long to wait for the first byte
(`hedge_budget`), whether a hedge may go out (`hedge_tokens`), and what happened, counted
in the client's read stats.

The p99 budget is for files this client has read before, whose blocks the workers hold:
a file it has not read yet may be a miss that the worker fetches from the under-store
before its first byte, so it gets `read_hedge_cold_after_s` instead (hedging it at the
warm p99 would fetch it from the store twice), and its first-byte time is not a sample.

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

_FILES_REMEMBERED = 100_000  # files known read (the oldest forgotten first): ~10 MB


@dataclass(frozen=True, slots=True)
class HedgeStats:
    reads: int  # block reads from a worker that could have hedged
    hedged: int  # reads that asked elsewhere after the budget
    refused: int  # reads past the budget that could not hedge (no token): they waited
    budget_s: float | None  # the budget of files read before, now (None: hedging is off)


class Hedges:
    def __init__(self, config: cfg.ClientConfig, penalties: PenaltyBox) -> None:
        self._penalties = penalties
        self._floor = config.read_hedge_floor_s
        self._ceiling = config.read_hedge_after_s
        self._cold = config.read_hedge_cold_after_s
        self._read_files: dict[str, None] = {}  # file ids read before (insertion-ordered)
        self._times = FirstByteTimes()
        self._tokens = HedgeTokens(config.read_hedge_share, config.read_hedge_burst)
        self._lock = threading.Lock()
        self._reads = self._hedged = self._refused = 0

    def budget(self, file_id: str) -> float | None:
        """Seconds a read of `file_id` gives a worker to start answering; None: wait the
        read deadline."""
        if file_id in self._read_files:
            return self.warm_budget()
        if self._ceiling <= 0 or self._cold <= 0:
            return None
        return max(self._cold, self._ceiling)

    def warm_budget(self) -> float | None:
        return hedge_budget(self._times.p99(), self._floor, self._ceiling)

    def read_started(self) -> None:
        self._tokens.read()
        with self._lock:
            self._reads += 1

    def first_byte(self, file_id: str, seconds: float) -> None:
        """A worker started answering a read of `file_id` `seconds` after it was asked."""
        if file_id in self._read_files:
            self._times.record(seconds)
            return
        with self._lock:
            if len(self._read_files) >= _FILES_REMEMBERED:
                self._read_files.pop(next(iter(self._read_files)))
            self._read_files[file_id] = None

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
            return HedgeStats(self._reads, self._hedged, self._refused, self.warm_budget())
