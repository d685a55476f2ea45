"""Readers that miss in one directory at once, answered by one listing of it.

A path nobody has looked at costs one LIST of its directory, not a HEAD of its own: the
first touch of a directory lists it (once, however many readers miss in it at the same
time) and stores every child, so the next thousand reads in that directory cost the
under-store nothing but their GETs. A directory too big to list in one go
(`metadata_list_max_entries`) keeps what its first pages said and answers the rest with
a HEAD each (`head_flights.py`), until the mount's sync interval says to try a listing
again.
"""

from __future__ import annotations

from reservoir.common import logs, paths
from reservoir.common.errors import NotFound, ReservoirError
from reservoir.common.models import Inode, Mount
from reservoir.common.understore.store_schemes import scheme_of

from .flights import Flights
from .head_flights import HeadFlights
from .metadata_sync import DirectoryListing, NamespaceSync, now_ms
from .namespace_store import NamespaceStore

log = logs.get_logger(__name__)

_Flight = tuple[str, int, str]  # (mount path, mount created_ms, directory)
_MAX_TOO_BIG = 4096  # directories remembered as too big to list; past it, old ones go


class ListingFlights:
    def __init__(self, sync: NamespaceSync, namespace: NamespaceStore) -> None:
        self._sync = sync
        self._namespace = namespace
        self._heads = HeadFlights(sync)
        # Listings under way: every reader that misses in the directory meanwhile waits
        # on the same answer.
        self._listings: Flights[_Flight, DirectoryListing | None] = Flights()
        # Directories found bigger than the listing bound, and when: misses in them are
        # HEADs until the mount's sync interval says to try a listing again.
        self._too_big: dict[_Flight, int] = {}

    async def lookup(self, mount: Mount, path: str, stored: Inode | None) -> Inode:
        """The inode of a path whose stored metadata (`stored`) is missing or stale (and
        whose directory is not freshly listed), from the under-store: its directory listed
        once for every reader that misses in it, or, where a listing does not pay, a HEAD
        (once for every reader that misses the path)."""
        directory = paths.parent_of(path)
        if self._sync.ttl_ms(mount) == 0:
            # "always": a listing is stale at once, and so is a HEAD another reader asked
            # for before this one came: each reader's own, stored before it is answered.
            return await self._sync.sync_inode(mount, path)
        if not scheme_of(mount.uri).lists:
            return await self._heads.lookup(mount, path, stored)  # a HEAD alone (http)
        flight: _Flight = (mount.path, mount.created_ms, directory)
        found_big = self._too_big.get(flight)
        if found_big is not None:
            if self._sync.fresh(mount, found_big):
                return await self._heads.lookup(mount, path, stored)
            del self._too_big[flight]
        listing = await self._listings.join(
            flight,
            lambda: self._list(mount, directory),
            lambda found: self._store(mount, directory, found),
        )
        if listing is None:  # listed by an earlier flight meanwhile: etcd has the answer
            stored = await self._namespace.get(path)
            if stored is None:
                raise await self._sync.unseen(mount, path)
            return stored
        inode = listing.by_path.get(path)
        if inode is not None:
            return inode
        if listing.complete:
            raise NotFound(f"{path}: no such file or directory")
        return await self._heads.lookup(mount, path, stored)

    async def _list(self, mount: Mount, directory: str) -> DirectoryListing | None:
        """`directory` as the under-store lists it; None when an earlier flight stored a
        listing of it meanwhile (a reader that looked at etcd just before that flight
        stored it would otherwise list the directory a second time)."""
        if await self._sync.listed(mount, directory):
            return None
        bound = self._sync.list_bound
        children, complete = await self._sync.read_directory(mount, directory, bound)
        return DirectoryListing(children, complete=complete)

    async def _store(self, mount: Mount, directory: str, listing: DirectoryListing | None) -> None:
        """Stores a listing once its readers have it (readers that miss there meanwhile
        still find this flight, and its answer)."""
        if listing is None:
            return
        if not listing.complete:
            flight = (mount.path, mount.created_ms, directory)
            if len(self._too_big) >= _MAX_TOO_BIG:
                self._too_big = {
                    f: t for f, t in self._too_big.items() if self._sync.fresh(mount, t)
                }
                if len(self._too_big) >= _MAX_TOO_BIG:
                    self._too_big.clear()  # forgotten ones cost a bounded listing again
            self._too_big[flight] = now_ms()
            log.info(
                "directory_too_big_to_list",
                path=directory,
                listed=len(listing.children),
                bound=self._sync.list_bound,
            )
        try:
            await self._sync.store_directory(mount, directory, listing.children, listing.complete)
        except ReservoirError as exc:
            # The readers have their answers; the next miss there lists it again.
            log.warning("directory_listing_not_stored", path=directory, error=str(exc))
