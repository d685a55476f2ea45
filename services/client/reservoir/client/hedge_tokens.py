"""The bound on hedged reads: a token bucket that every read fills by `share` of a token
(up to `burst` tokens) and every hedge empties by one. Outside a fault at most `share` of
reads hedge, plus the burst; in one (a hung worker), the first reads that meet it hedge
and the penalty box sends the rest elsewhere, so few tokens are needed."""

from __future__ import annotations

import threading


class HedgeTokens:
    def __init__(self, share: float, burst: int) -> None:
        self._share = share
        self._burst = float(burst)
        self._tokens = float(burst)  # a new client may hedge its first reads
        self._lock = threading.Lock()

    def read(self) -> None:
        """One more read: `share` of a token more, up to the burst."""
        with self._lock:
            self._tokens = min(self._burst, self._tokens + self._share)

    def take(self) -> bool:
        """Whether one hedge may go out now (it then costs a token)."""
        with self._lock:
            if self._tokens < 1.0:
                return False
            self._tokens -= 1.0
            return True
