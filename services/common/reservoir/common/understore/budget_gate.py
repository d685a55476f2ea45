"""Admission to one mount's under-store under this process's share of its budget.

A mount's limits (`max_requests_per_s`, `max_bytes_per_s`, `max_in_flight`) hold for all
workers together; the leading master leases each worker a share (`BudgetShare`), and this
gate keeps the worker within it: token buckets for requests and bytes, a count of GETs in
flight, two lanes (foreground reads go first; a preload takes only what a full bucket
spares, so a foreground read never waits behind one, and at most
`budget_preload_share` of the rate), and AIMD: an S3 `503 SlowDown`
halves the rate here, which then grows back linearly to the share.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from reservoir.common.config import UnderStoreCalls
from reservoir.common.errors import Unavailable
from reservoir.common.models import MountOptions

FOREGROUND = "foreground"
PRELOAD = "preload"

# The lane of the GETs made under this context: a load job's fetch task inherits it.
_lane: ContextVar[str] = ContextVar("reservoir_ufs_lane", default=FOREGROUND)

# However many SlowDowns, the rate stays above this fraction of the share (so a storm
# cannot stop a mount for longer than its recovery).
_MIN_FACTOR = 1 / 64


@contextlib.contextmanager
def preload_lane() -> Iterator[None]:
    """GETs made inside run in the preload lane (below foreground reads)."""
    token = _lane.set(PRELOAD)
    try:
        yield
    finally:
        _lane.reset(token)


def current_lane() -> str:
    return _lane.get()


@dataclass(frozen=True, slots=True)
class BudgetShare:
    """What one worker may ask of a mount's under-store; 0 = unlimited. A negative
    `in_flight`: no GET at the moment (an idle worker when there are fewer GETs in flight
    to share than workers: it gets some once it reports demand)."""

    requests_per_s: float = 0.0
    bytes_per_s: float = 0.0
    in_flight: int = 0

    @classmethod
    def even(cls, options: MountOptions, parties: int) -> BudgetShare:
        """One of `parties` equal shares of the mount's limits (at least one GET in
        flight when those are limited)."""
        n = max(1, parties)
        in_flight = max(1, options.max_in_flight // n) if options.max_in_flight else 0
        return cls(options.max_requests_per_s / n, options.max_bytes_per_s / n, in_flight)


class TokenBucket:
    """Tokens at `rate` per second up to `capacity`; a cost larger than what is left
    is allowed once the bucket is positive (a debt paid by waiting), so a block bigger
    than the burst still passes and the average rate holds."""

    def __init__(self, now: float) -> None:
        self.tokens = 0.0
        self._at = now

    def refill(self, rate: float, capacity: float, now: float) -> None:
        self.tokens = min(capacity, self.tokens + rate * max(0.0, now - self._at))
        self._at = now

    def wait_s(self, need: float, rate: float) -> float:
        """Seconds until `need` tokens are there, at `rate`."""
        return max(0.0, need - self.tokens) / rate if rate > 0 else float("inf")


class BudgetGate:
    """One mount's admission in this process. Not thread-safe: used from one event loop."""

    def __init__(
        self, mount_path: str, calls: UnderStoreCalls, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.mount_path = mount_path
        self._calls = calls
        self._preload_share = min(1.0, max(0.0, calls.budget_preload_share))
        self._clock = clock
        now = clock()
        self.share: BudgetShare | None = None  # None: no lease yet, nothing admitted
        self._requests = TokenBucket(now)
        self._preloads = TokenBucket(now)  # the preload lane's part of the request rate
        self._bytes = TokenBucket(now)
        self.in_flight = 0
        self._waiting = {FOREGROUND: 0, PRELOAD: 0}
        self._turns = {FOREGROUND: asyncio.Lock(), PRELOAD: asyncio.Lock()}
        self._factor = 1.0
        self._factor_at = now
        self._cut_at = -float("inf")
        self._arrivals = {FOREGROUND: 0, PRELOAD: 0}
        self._demand_since = now
        self._changed = asyncio.Event()
        self.admitted = 0
        self.slowdowns = 0

    # ---- what the master says and what S3 says ------------------------------------------

    def set_share(self, share: BudgetShare) -> None:
        """The share of the latest lease; kept until the next (also when the master is
        down: the shares of one split add up to the limit)."""
        if share != self.share:
            self._refill(self._clock())
            self.share = share
            self._wake()

    def slowed(self) -> bool:
        """The store answered SlowDown: the rate here halves, once per hold period (the
        GETs already in flight answer SlowDown too; they are the same signal)."""
        now = self._clock()
        self.slowdowns += 1
        if now - self._cut_at < self._calls.slowdown_hold_s:
            return False
        self._refill(now)
        self._factor = max(_MIN_FACTOR, self.factor(now) / 2)
        self._factor_at = self._cut_at = now
        return True

    def factor(self, now: float) -> float:
        """The fraction of the share in use now: halved by SlowDowns, then growing back
        by 1/recovery_s a second (after a hold)."""
        grown = max(0.0, now - self._factor_at - self._calls.slowdown_hold_s)
        return min(1.0, self._factor + grown / max(self._calls.recovery_s, 1e-9))

    def take_demand(self) -> float:
        """What the master splits the mount's limits by: foreground GETs asked for per
        second since the last call plus those waiting now, counted double (a share sized
        to a worker's foreground alone would leave its reads queueing at every burst),
        plus preload GETs asked for per second (not those waiting: a load job queues a
        whole batch at once, and would take the shares of workers with reads to serve)."""
        now = self._clock()
        elapsed = max(now - self._demand_since, 1e-3)
        foreground = self._arrivals[FOREGROUND] / elapsed + self._waiting[FOREGROUND]
        demand = 2 * foreground + self._arrivals[PRELOAD] / elapsed
        self._arrivals = {FOREGROUND: 0, PRELOAD: 0}
        self._demand_since = now
        return demand

    @property
    def wanting(self) -> bool:
        """GETs wait for a first lease: the next report should not wait its turn."""
        return self.share is None and (self._waiting[FOREGROUND] + self._waiting[PRELOAD]) > 0

    # ---- admission ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def admitted_get(self, nbytes: int) -> AsyncIterator[None]:
        """Holds one GET of `nbytes` within the share (waits for it, at most
        `budget_wait_s`), in the caller's lane."""
        lane = current_lane()
        self._arrivals[lane] += 1
        self._waiting[lane] += 1
        try:
            async with asyncio.timeout(self._calls.budget_wait_s), self._turns[lane]:
                # One waiter of each lane at a time (in order of arrival) asks: a wake-up
                # costs two checks, not one per GET waiting (a load job queues hundreds).
                while True:
                    wait_s = self.try_admit(nbytes, lane)
                    if wait_s is None:
                        break
                    changed = self._changed
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), min(wait_s, 1.0))
        except TimeoutError as exc:
            raise Unavailable(
                f"the under-store budget of {self.mount_path} admitted no GET in "
                f"{self._calls.budget_wait_s:g} s"
                + (" (no lease from the master yet)" if self.share is None else "")
            ) from exc
        finally:
            self._waiting[lane] -= 1
        self.in_flight += 1
        self.admitted += 1
        try:
            yield
        finally:
            self.in_flight -= 1
            self._wake()

    def try_admit(self, nbytes: int, lane: str) -> float | None:
        """None when admitted (tokens taken); else how long to wait before trying again."""
        share = self.share
        if share is None:
            return 1.0
        now = self._clock()
        self._refill(now)
        factor = self.factor(now)
        preload = lane == PRELOAD
        if preload and self._waiting[FOREGROUND]:
            return 0.05  # woken sooner when a foreground GET goes
        wait_s = 0.0
        if share.in_flight:
            # A preload leaves one slot to the foreground (when there are two or more).
            cap = max(0, share.in_flight) - (1 if preload and share.in_flight > 1 else 0)
            if self.in_flight >= cap:
                wait_s = 1.0  # woken when one ends
        if share.requests_per_s:
            rate = share.requests_per_s * factor
            need = self._capacity(rate) if preload else 1.0
            wait_s = max(wait_s, self._requests.wait_s(need, rate))
            if preload:
                wait_s = max(wait_s, self._preloads.wait_s(1.0, rate * self._preload_share))
        if share.bytes_per_s:
            rate = share.bytes_per_s * factor
            # Foreground: any credit left; a preload only from a full bucket.
            need = self._capacity(rate) if preload else min(1.0, float(nbytes))
            wait_s = max(wait_s, self._bytes.wait_s(need, rate))
        if wait_s > 0:
            return wait_s
        if share.requests_per_s:
            self._requests.tokens -= 1.0
            if preload:
                self._preloads.tokens -= 1.0
        if share.bytes_per_s:
            self._bytes.tokens -= nbytes
        return None

    def _capacity(self, rate: float) -> float:
        # Two at least: a preload waits for a full bucket and takes one, so a foreground
        # GET arriving then still finds one.
        return max(2.0, rate * self._calls.budget_burst_s)

    def _refill(self, now: float) -> None:
        share = self.share
        if share is None:
            self._requests.refill(0.0, 0.0, now)
            self._preloads.refill(0.0, 0.0, now)
            self._bytes.refill(0.0, 0.0, now)
            return
        factor = self.factor(now)
        rate = share.requests_per_s * factor
        self._requests.refill(rate, self._capacity(rate), now)
        preload_rate = rate * self._preload_share
        self._preloads.refill(preload_rate, self._capacity(preload_rate), now)
        byte_rate = share.bytes_per_s * factor
        self._bytes.refill(byte_rate, self._capacity(byte_rate), now)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
