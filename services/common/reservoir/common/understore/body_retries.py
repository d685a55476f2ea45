"""The one retry loop of a ranged GET (obstore's, and the GETs received straight into a
caller's buffer): a body that breaks off once its headers arrived is read again at most
`BodyRetry.attempts` times, after a jittered, growing pause; a request that failed before
its answer (no connection, a 5xx) is sent again within the store's `retries` attempts in
all, where the GET stack has no retries of its own (obstore has).

An attempt says which by what it raises: `BodyBrokeOff` or `RequestFailed`; any other
error (a domain error from the one table, `store_errors.py`) ends the read at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from reservoir.common import logs
from reservoir.common.errors import ReservoirError, Unavailable
from reservoir.common.understore.store_errors import first_line
from reservoir.common.understore.under_store import BodyRetry

log = logs.get_logger(__name__)
_T = TypeVar("_T")


class BodyBrokeOff(Exception):
    """The body of an answered GET ended (truncated, reset, stalled) before all its bytes;
    raised `from` what broke it."""


class RequestFailed(Exception):
    """A GET that got no answer worth reading (no connection, a 5xx): `error` is what the
    caller sees once no attempt is left."""

    def __init__(self, error: ReservoirError) -> None:
        super().__init__(str(error))
        self.error = error


async def read_retrying(
    attempt: Callable[[], Awaitable[_T]],
    retry: BodyRetry,
    *,
    requests: int,
    what: str,
    endpoint: str,
    offset: int,
    length: int,
) -> _T:
    """`attempt()`'s result, asked again as the module says: at most `retry.attempts`
    broken bodies and `requests` attempts of requests that failed (1: none again)."""
    broken = failed = 0
    while True:
        try:
            return await attempt()
        except BodyBrokeOff as exc:
            cause = exc.__cause__ or exc
            if broken == retry.attempts:
                raise Unavailable(
                    f"{what}: the body from {endpoint} broke off {broken + 1} times "
                    f"({type(cause).__name__}: {first_line(cause)})"
                ) from cause
            delay = retry.delay_s(broken)
            broken += 1
            log.info(
                "under_store_body_retry",
                uri=what.removeprefix("get "),
                offset=offset,
                length=length,
                attempt=broken,
                delay_s=round(delay, 3),
                error=f"{type(cause).__name__}: {first_line(cause)}",
            )
        except RequestFailed as exc:
            failed += 1
            if failed >= requests:
                raise exc.error from exc.__cause__
            delay = retry.delay_s(failed - 1)
        await asyncio.sleep(delay)
