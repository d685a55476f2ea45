"""Requests to stores spoken over plain HTTP (http(s)://, WebHDFS): connections kept
alive, and the one bounded loop of attempts around each request."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from reservoir.common.errors import DeadlineExceeded, Unavailable
from reservoir.common.understore.under_store import UnderStoreSettings

T = TypeVar("T")

# A body is received in calls of at most this many bytes, the deadline checked between.
_CHUNK = 1 << 20


class Transient(Exception):
    """A failure worth another attempt: a connection error, a 5xx, a body cut short."""


def tried(attempts: int) -> str:
    """How a failure says how often it was tried: "after 3 attempts", "after 1 attempt"."""
    return f"after {attempts} attempt{'' if attempts == 1 else 's'}"


def with_attempts(what: str, settings: UnderStoreSettings, call: Callable[[], T]) -> T:
    """`call` at most `settings.retries` times (at least once), backing off between as
    `settings.body_retry` says; Unavailable naming the last failure after the last."""
    attempts = max(1, settings.retries)
    for attempt in range(attempts):
        try:
            return call()
        except Transient as exc:
            if attempt + 1 >= attempts:
                raise Unavailable(f"{what}: {exc} ({tried(attempts)})") from exc
            time.sleep(settings.body_retry.delay_s(attempt))
    raise AssertionError("unreachable")


class KeptConnections:
    """Idle keep-alive connections to one server, at most `limit` kept: a new connection
    per block read would cost a TCP (and TLS) handshake each, more than a small block."""

    def __init__(self, make: Callable[[], http.client.HTTPConnection], limit: int) -> None:
        self._make = make
        self._limit = limit
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def take(self) -> tuple[http.client.HTTPConnection, bool]:
        """A connection, and whether it was used before (the server may have closed it)."""
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._make(), False

    def give(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> None:
        """Kept for the next request when `response` was read to its end and the server
        keeps the connection open; closed otherwise."""
        if response.isclosed() and not response.will_close:
            with self._lock:
                if len(self._idle) < self._limit:
                    self._idle.append(conn)
                    return
        conn.close()


def read_body(
    response: http.client.HTTPResponse, size: int | None, deadline: float, what: str, limit: int = 0
) -> bytes:
    """The body: exactly `size` bytes, or (no Content-Length: `size` None) all of it up to
    `limit`. A body cut short is worth another attempt (Transient); one still arriving at
    `deadline` is DeadlineExceeded, not retried (which would multiply the deadline by the
    attempts)."""
    cap = limit if size is None else size
    body = bytearray() if size is None else bytearray(size)
    # A body of known length is received straight into `body`, one receive a call
    # (`readinto1` of the response's buffered socket, as `HTTPResponse.readinto` does but
    # for one receive: `readinto` waits for a whole buffer, so a body that trickles in would
    # never meet the deadline, checked between calls); any other, a piece at a time.
    into = size is not None and response.length is not None and not response.chunked
    view = memoryview(body) if into else None  # (a bytearray with a view cannot grow)
    got = 0
    try:
        while got < cap:
            if time.monotonic() > deadline:
                raise DeadlineExceeded(f"{what}: the response took longer than its deadline")
            want = min(_CHUNK, cap - got)
            if view is not None:
                n = response.fp.readinto1(view[got : got + min(want, response.length or 0)])
                response.length = (response.length or 0) - n
            else:
                piece = response.read1(want)
                n = len(piece)
                if size is None:
                    body += piece
                else:
                    body[got : got + n] = piece
            if not n:
                if size is None:
                    break
                raise Transient(f"the body ended after {got} of {size} bytes")
            got += n
        if size is not None:
            response.read()  # nothing left: marks the answer read whole (its connection kept)
    except DeadlineExceeded:
        raise
    except (OSError, http.client.HTTPException) as exc:
        raise Transient(f"the body broke off: {type(exc).__name__}: {exc}") from exc
    return bytes(body)
