"""A directory listed a page at a time: what the master holds for one answer is one page,
however many entries the directory has.

A directory's children are stored in name order in chunks (`NamespaceStore`), so a page
is a range read of the chunks that follow the last name of the page before. That name travels in the page token, with
the directory it belongs to; nothing is kept on the master between pages, so a listing
survives a master failover and costs nothing once its reader goes away. The first page
does what a whole listing did before: a directory not listed recently (or never) is
listed in the under-store first and stored (`NamespaceSync.sync_directory`); later pages
read the store only. Mount points below a directory are entries too, merged in name order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from reservoir.common import paths
from reservoir.common.config import MasterConfig
from reservoir.common.errors import InvalidArgument, NotADirectory
from reservoir.common.metadata.page_tokens import name_after, page_token
from reservoir.common.models import Inode

from .metadata_sync import NamespaceSync, dir_inode
from .mount_table import MountTable
from .namespace_store import NamespaceStore


@dataclass(frozen=True)
class DirectoryPage:
    entries: list[Inode]
    next_token: str  # "" when this page is the last


class DirectoryPages:
    def __init__(
        self,
        namespace: NamespaceStore,
        config: MasterConfig,
        mount_table: MountTable,
        sync: NamespaceSync,
        file_info: Callable[[str], Awaitable[Inode]],
        with_locations: Callable[[Inode], Inode],
    ) -> None:
        self._namespace = namespace
        self._config = config
        self._mounts = mount_table
        self._sync = sync
        self._file_info = file_info
        self._with_locations = with_locations

    async def page(
        self, path: str, page_size: int = 0, token: str = "", with_locations: bool = False
    ) -> DirectoryPage:
        """The page of `path`'s entries after the one `token` ends (the first without one);
        `page_size` entries at most (0: RESERVOIR_LIST_PAGE_SIZE)."""
        path = paths.normalize(path)
        size = self._size(page_size)
        if token:
            after: str | None = name_after(token, path)
        else:
            after = None
            await self._prepare(path)
        entries = await self._entries(path, after, size + 1)  # one more: is there a next page?
        more = len(entries) > size
        entries = entries[:size]
        if with_locations:
            entries = [self._with_locations(e) for e in entries]
        next_token = page_token(path, _name(entries[-1])) if more else ""
        return DirectoryPage(entries, next_token)

    async def entries(self, path: str, with_locations: bool = False) -> AsyncIterator[Inode]:
        """Every entry of `path`, page by page."""
        token = ""
        while True:
            page = await self.page(path, 0, token, with_locations)
            for entry in page.entries:
                yield entry
            token = page.next_token
            if not token:
                return

    def _size(self, page_size: int) -> int:
        if page_size < 0:
            raise InvalidArgument(f"page_size must not be negative, not {page_size}")
        if page_size > self._config.list_max_page_size:
            raise InvalidArgument(
                f"page_size {page_size} is above the master's most, "
                f"{self._config.list_max_page_size} (RESERVOIR_LIST_MAX_PAGE_SIZE)"
            )
        return page_size or self._config.list_page_size

    async def _prepare(self, path: str) -> None:
        """Before a first page: `path` is a directory, and the store holds its children as
        the under-store has them (listed there now unless a listing is recent enough)."""
        mount = self._mounts.mount_for(path)
        stored = None
        if mount is not None and path != mount.path:
            stored = await self._namespace.get(path)
            # Never seen: its own listing says it is a directory (one LIST), where a stat
            # first would list its parent too. Empty: a file, or nothing.
            if stored is None and (await self._sync.sync_directory(mount, path)).children:
                return
        info = await self._file_info(path)
        if not info.is_dir:
            raise NotADirectory(f"{info.path}: not a directory")
        if mount is None:
            return  # above every mount: its entries are mount points only
        if stored is None:
            stored = await self._namespace.get(path)
        if stored is None or not self._sync.fresh(mount, stored.listed_ms):
            await self._sync.sync_directory(mount, path)

    async def _entries(self, path: str, after: str | None, limit: int) -> list[Inode]:
        """Up to `limit` entries of `path` whose names sort after `after`, in name order:
        its stored children and the mount points below it."""
        stored = await self._namespace.children_after(path, after, limit)
        by_name = {_name(c): c for c in stored}
        for name in self._mounts.children_of(path):
            if after is None or name > after:
                by_name.setdefault(name, dir_inode(paths.join(path, name), None))
        # str order is code point order, the order of the names' UTF-8 bytes in the keys.
        return [by_name[name] for name in sorted(by_name)][:limit]


def _name(inode: Inode) -> str:
    return inode.path.rsplit("/", 1)[1]
