"""Readers that miss one path at once where a listing does not answer it (a store that
cannot list, http; a directory too big to list): one HEAD for all of them, answered as
soon as the under-store has answered, the inode stored after.

Storing it (a read and a fenced write of its directory's chunk in etcd) took two thirds of
a cold stat on an http mount; a reader need not wait for it, as a reader of a listing does
not wait for the listing to be stored (`listing_flights.py`). The flight is kept until its
inode is stored: a reader that misses the path meanwhile joins it instead of asking
again, so no later answer is stored before an earlier one.
"""

from __future__ import annotations

import asyncio

from reservoir.common import logs
from reservoir.common.errors import ReservoirError
from reservoir.common.models import Inode, Mount

from .metadata_sync import NamespaceSync

log = logs.get_logger(__name__)

_Flight = tuple[str, int, str]  # (mount path, mount created_ms, path)


def _retrieve(future: asyncio.Future[Inode]) -> None:
    if not future.cancelled():
        future.exception()  # the readers that still wait have it; none may be left


class HeadFlights:
    def __init__(self, sync: NamespaceSync) -> None:
        self._sync = sync
        self._flights: dict[_Flight, asyncio.Future[Inode]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def lookup(self, mount: Mount, path: str, stored: Inode | None) -> Inode:
        """`path` as the under-store has it (`stored`: its stored inode, None when none)."""
        flight: _Flight = (mount.path, mount.created_ms, path)
        checked = self._flights.get(flight)
        if checked is None:
            checked = asyncio.get_running_loop().create_future()
            checked.add_done_callback(_retrieve)
            self._flights[flight] = checked
            task = asyncio.create_task(self._head_once(mount, path, stored, checked))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            task.add_done_callback(lambda _: self._flights.pop(flight, None))
        # Shielded: a reader that gives up does not cancel the HEAD others wait on.
        return await asyncio.shield(checked)

    async def _head_once(
        self, mount: Mount, path: str, stored: Inode | None, checked: asyncio.Future[Inode]
    ) -> None:
        try:
            inode = await self._sync.checked_inode(mount, path, stored)
        except asyncio.CancelledError:
            checked.cancel()
            raise
        except Exception as exc:
            checked.set_exception(exc)  # every waiting reader gets it; the next miss asks again
            return
        checked.set_result(inode)
        try:
            await self._sync.store_checked(mount, stored, inode)
        except ReservoirError as exc:
            # The readers have their answer; the next miss asks the under-store again.
            log.warning("inode_not_stored", path=path, error=str(exc))
