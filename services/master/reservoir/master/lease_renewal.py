"""A master's etcd lease: granted, refreshed at a third of its TTL, and how recently etcd
renewed it.

The leader key lives under this lease (leadership.py), so the lease's last renewal bounds
how long the key is certainly still ours: etcd keeps a lease for at least a TTL from the
moment a renewal was sent. A master paused past that (SIGSTOP, a long GC) must ask etcd
before it acts as the leader again.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from reservoir.common import logs
from reservoir.common.errors import NotFound, ReservoirError
from reservoir.common.metadata.metadata_store import Lease, MetadataStore

log = logs.get_logger(__name__)


class LeaseRenewal:
    def __init__(self, store: MetadataStore, ttl_s: int, clock: Callable[[], float]) -> None:
        """`clock`: seconds that keep running while the process is paused (monotonic)."""
        self._store = store
        self._ttl = ttl_s
        self._clock = clock
        self._renewed_at = -math.inf  # when the last grant or renewal etcd took was sent

    async def grant(self) -> Lease:
        asked = self._clock()
        lease = await self._store.grant_lease(self._ttl)
        self._renewed_at = asked
        return lease

    def fresh(self) -> bool:
        """True while the lease was renewed within two thirds of a TTL (renewals come
        every third): it certainly holds, and whatever is bound to it."""
        return self._clock() - self._renewed_at < self._ttl * 2 / 3

    async def keep(self, lease: Lease, master: str) -> None:
        """Refreshes `lease` at a third of its TTL; returns when it is lost: etcd says it
        ended, or it could not be refreshed for a whole TTL."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(self._ttl / 3)
            try:
                asked = self._clock()
                await self._store.refresh_lease(lease)
                last = time.monotonic()
                self._renewed_at = asked
                continue
            except NotFound:
                log.warning("leadership_lease_expired", master=master)
            except ReservoirError as exc:
                if time.monotonic() - last < self._ttl:
                    continue
                log.warning("leadership_lease_unrenewable", master=master, error=str(exc))
            return
