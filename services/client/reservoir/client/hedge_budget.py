"""How long a read waits for a worker's first byte before it asks elsewhere: the p99 of
this client's recent first-byte times, kept in a small ring, clamped between a floor (a
fast cluster's p99 is noise: hedging at it would ask twice for every hiccup) and a ceiling
(what a hung worker may cost a read at most)."""

from __future__ import annotations

import threading

_RING = 256  # first-byte times remembered: enough for a p99, cheap to sort
_EVERY = 16  # the p99 is worked out again after this many new times, not on each read
_TRUSTED = 32  # fewer times than this and the p99 means little: the ceiling applies


def hedge_budget(p99_s: float | None, floor_s: float, ceiling_s: float) -> float | None:
    """Seconds to wait for a first byte before hedging; None: never hedge (ceiling 0).
    Without a p99 yet (a new client), the ceiling: hedging early on a guess would send
    a cold data set's misses to S3 twice."""
    if ceiling_s <= 0:
        return None
    if p99_s is None:
        return ceiling_s
    return min(ceiling_s, max(floor_s, p99_s))


def p99(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, (len(ordered) * 99) // 100)]


class FirstByteTimes:
    """The last `_RING` first-byte times of this client's block reads, any worker, any
    route, and their p99. Many reading threads record at once."""

    def __init__(self) -> None:
        self._times: list[float] = []
        self._next = 0
        self._fresh = 0  # times recorded since the p99 was worked out
        self._p99: float | None = None
        self._lock = threading.Lock()

    def record(self, seconds: float) -> None:
        with self._lock:
            if len(self._times) < _RING:
                self._times.append(seconds)
            else:
                self._times[self._next] = seconds
                self._next = (self._next + 1) % _RING
            self._fresh += 1
            if len(self._times) >= _TRUSTED and (self._p99 is None or self._fresh >= _EVERY):
                self._p99 = p99(self._times)
                self._fresh = 0

    def p99(self) -> float | None:
        """None until enough times are known to mean something."""
        return self._p99
