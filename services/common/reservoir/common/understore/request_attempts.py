"""Requests to stores spoken over plain HTTP (http(s)://, WebHDFS): connections kept
alive, and the one bounded loop of attempts around each request."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from reservoir.common.errors import Unavailable
from reservoir.common.understore.under_store import UnderStoreSettings

T = TypeVar("T")


class Transient(Exception):
    """A failure worth another attempt: a connection error, a 5xx, a body cut short."""


def with_attempts(what: str, settings: UnderStoreSettings, call: Callable[[], T]) -> T:
    """`call` at most `settings.retries` times (at least once), backing off between as
    `settings.body_retry` says; Unavailable naming the last failure after the last."""
    attempts = max(1, settings.retries)
    for attempt in range(attempts):
        try:
            return call()
        except Transient as exc:
            if attempt + 1 >= attempts:
                raise Unavailable(f"{what}: {exc} (after {attempts} attempts)") from exc
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
