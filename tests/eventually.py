"""One way for a test to wait for a cluster to get somewhere: `eventually`.

A cluster converges (a lease expires, a report arrives, a job ends) in its own time; a
test asks for the state it expects until it holds or a limit passes. The limit only keeps
a broken cluster from hanging the run: it is generous, and no test asserts on time with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    condition: Callable[[], T], timeout_s: float = 30.0, interval_s: float = 0.05, what: str = ""
) -> T:
    """Calls `condition` until it returns something true, and returns that. An exception
    it raises counts as "not yet" (a server still starting); past `timeout_s` the last
    answer or error is the AssertionError's message."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            answer = condition()
        except Exception as exc:  # noqa: BLE001 - "not yet", reported if it never passes
            last = exc
        else:
            if answer:
                return answer
            last = answer
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what or 'condition'} not met within {timeout_s} s: {last!r}")
        time.sleep(interval_s)
