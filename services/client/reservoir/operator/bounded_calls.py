"""A call to the cluster retried within a time budget: each try has the client's deadline,
tries are spaced by a doubling backoff with jitter, and none starts that could not end
within the budget. The first answer, or the last error once the budget is spent."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from reservoir.common.errors import ReservoirError, ResourceExhausted, Unavailable

T = TypeVar("T")

# What a later try may not meet again: the master away, slow (DeadlineExceeded is an
# Unavailable), changing leaders (NotLeader too), or busy.
RETRIABLE: tuple[type[ReservoirError], ...] = (Unavailable, ResourceExhausted)


@dataclass(frozen=True)
class Budget:
    seconds: float  # for every try and wait together
    call_s: float  # what one try may take (the client's deadline for it)
    backoff_s: float
    backoff_max_s: float


@dataclass(frozen=True)
class Outcome(Generic[T]):
    value: T | None
    error: ReservoirError | None  # the last one, when no try succeeded
    tries: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None


def call_within(
    budget: Budget,
    call: Callable[[], T],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Outcome[T]:
    """`call()` until it answers, raises an error no retry helps (returned at once), or
    the budget leaves no room for another try."""
    started = clock()
    deadline = started + budget.seconds
    backoff = budget.backoff_s
    tries = 0
    while True:
        tries += 1
        try:
            return Outcome(call(), None, tries, clock() - started)
        except RETRIABLE as exc:
            error: ReservoirError = exc
        except ReservoirError as exc:
            return Outcome(None, exc, tries, clock() - started)
        wait = random.uniform(backoff / 2, backoff)
        if clock() + wait + budget.call_s > deadline:
            return Outcome(None, error, tries, clock() - started)
        sleep(wait)
        backoff = min(backoff * 2, budget.backoff_max_s)
