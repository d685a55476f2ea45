"""Readers that miss one path at once where a listing does not answer it (a store that
cannot list, http; a directory too big to list): one HEAD for all of them, answered as
soon as the under-store has answered, the inode stored after.

Storing it (a read and a fenced write of its directory's chunk in etcd) took two thirds of
a cold stat on an http mount; a reader need not wait for it, as a reader of a listing does
not wait for the listing to be stored (`listing_flights.py`). The flight (`flights.py`) is
kept until its inode is stored: a reader that misses the path meanwhile joins it instead
of asking again, so no later answer is stored before an earlier one.
"""

from __future__ import annotations

from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.models import Inode, Mount

from .flights import Flights
from .metadata_sync import NamespaceSync

log = logs.get_logger(__name__)

_Flight = tuple[str, int, str]  # (mount path, mount created_ms, path)


class HeadFlights:
    def __init__(self, sync: NamespaceSync) -> None:
        self._sync = sync
        self._flights: Flights[_Flight, Inode] = Flights()

    async def lookup(self, mount: Mount, path: str, stored: Inode | None) -> Inode:
        """`path` as the under-store has it (`stored`: its stored inode, None when none)."""

        async def store(inode: Inode) -> None:
            try:
                await self._sync.store_checked(mount, stored, inode)
            except ReservoirError as exc:
                # The readers have their answer; the next miss asks the under-store again.
                log.warning("inode_not_stored", path=path, error=str(exc))

        return await self._flights.join(
            (mount.path, mount.created_ms, path),
            lambda: self._sync.checked_inode(mount, path, stored),
            store,
        )
