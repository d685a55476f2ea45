"""A bucket's keys in S3's order (UTF-8 bytes, which is code point order), walked lazily
through the namespace: a page of a listing costs in proportion to the page, not to the
directory or the tree.

The namespace lists a directory's names in order, but a directory's keys all start with
`name/`, and `/` sorts after `-`, `.` and the other characters below it: `a-b` comes
before `a/x`. So a directory met in the listing is held back (a small heap) until the
names passed it by `name/`. A walk that resumes after a key seeks straight to it in each
directory on the way down (a page token naming the last name before), and finds the few
directories that sort before the key by name but after it by key (`a` when resuming after
`a-b`) with one stat each.
"""

from __future__ import annotations

import heapq
from collections.abc import AsyncIterator
from dataclasses import dataclass

from reservoir.client.async_client import AsyncClient
from reservoir.common.errors import NotADirectory, NotFound
from reservoir.common.models import Inode

# The largest code point: `stem + _TOP` sorts after every name that starts with `stem`
# and has a next character (no name holds it in practice; one that did would be listed
# and filtered, never lost).
_TOP = "\U0010ffff"


@dataclass(frozen=True)
class Item:
    """One listed key: an object, or (`inode` None) a common prefix ending in `/`."""

    key: str
    inode: Inode | None = None

    @property
    def is_prefix(self) -> bool:
        return self.inode is None


def _name_before(name: str) -> str:
    """A name that sorts just before `name`: seeking after it finds `name` and all after."""
    last = ord(name[-1]) - 1
    if 0xD800 <= last <= 0xDFFF:  # no surrogates in a str the master can encode
        last = 0xD7FF
    return name[:-1] + chr(last) + _TOP if last > 0 else name[:-1]


def _name(inode: Inode) -> str:
    return inode.path.rsplit("/", 1)[1]


class KeyWalk:
    """The keys of one bucket (a top-level directory) in order, from a key on."""

    def __init__(self, client: AsyncClient, bucket: str, page_size: int) -> None:
        self._client = client
        self._root = "/" + bucket
        self._page_size = page_size

    async def items(self, prefix: str, delimiter: str, after: str) -> AsyncIterator[Item]:
        """Keys starting with `prefix` that sort after `after`; with `delimiter` "/" a
        directory is one common prefix (`dir/`), not its keys. Any other delimiter groups
        the keys of a full walk (correct, but not in proportion to the page)."""
        slash = prefix.rfind("/")
        base, stem = prefix[: slash + 1], prefix[slash + 1 :]
        if base and any(part in ("", ".", "..") for part in base[:-1].split("/")):
            return  # `a//`, `a/./`: no path has such a key, so no key starts with it
        folded = delimiter == "/"
        if after and not after.startswith(base):
            if after > base:
                return  # every key below `base` sorts before `after`
            after = ""
        walk = self._directory(base, stem, after[len(base) :] if after else "", folded)
        if delimiter and not folded:
            walk = _grouped(walk, prefix, delimiter)
        async for item in walk:
            if item.key.startswith(prefix) and (not after or item.key > after):
                yield item

    async def _directory(
        self, base: str, stem: str, rest: str, folded: bool
    ) -> AsyncIterator[Item]:
        """The keys of directory `base` (a key prefix ending in `/`, or "") whose names
        start with `stem` and whose keys sort after `base + rest`."""
        path = self._root + ("/" + base.rstrip("/") if base else "")
        component = rest.split("/", 1)[0]
        seek = max(stem, component) if rest else stem
        held: list[tuple[str, Inode]] = []  # directories, by key (name + "/")
        for candidate in await self._directories_before(path, seek, rest, stem):
            heapq.heappush(held, (_name(candidate) + "/", candidate))
        try:
            entries = self._client.iter_ls(
                path, page_size=self._page_size, start_after=_name_before(seek) if seek else ""
            )
            async for entry in entries:
                name = _name(entry)
                if not name.startswith(stem):
                    if name > stem:
                        break  # names that start with `stem` are contiguous
                    continue
                while held and held[0][0] < name:
                    async for item in self._emit(base, heapq.heappop(held)[1], rest, folded):
                        yield item
                if entry.is_dir:
                    heapq.heappush(held, (name + "/", entry))
                elif not rest or name > rest:
                    yield Item(base + name, entry)
        except (NotFound, NotADirectory):
            return  # no such directory: no keys
        while held:
            async for item in self._emit(base, heapq.heappop(held)[1], rest, folded):
                yield item

    async def _emit(
        self, base: str, directory: Inode, rest: str, folded: bool
    ) -> AsyncIterator[Item]:
        prefix = _name(directory) + "/"
        if rest and prefix <= rest and not rest.startswith(prefix):
            return
        if folded:
            if not rest or prefix > rest:
                yield Item(base + prefix)
            return
        inner = rest[len(prefix) :] if rest.startswith(prefix) else ""
        async for item in self._directory(base + prefix, "", inner, False):
            yield item

    async def _directories_before(self, path: str, seek: str, rest: str, stem: str) -> list[Inode]:
        """Directories whose names sort before `seek` but whose keys (`name/`) sort after
        `rest`: the prefixes of `rest`'s first component that a character below `/`
        follows (`a` for `a-b`). One stat each (a name has few such prefixes)."""
        if not rest:
            return []
        component = rest.split("/", 1)[0]
        names = [
            component[:i] for i in range(1, len(component)) if component[i] < "/"
        ]  # fmt: skip
        names = [n for n in names if n.startswith(stem) and n < seek]
        if not names:
            return []
        found = []
        for name in names:
            try:
                # fresh: one GetFileInfo. A plain stat's first miss in a directory would
                # list the directory to answer it, a cost in proportion to the directory.
                inode = await self._client.stat(f"{path}/{name}", fresh=True)
            except (NotFound, NotADirectory):
                continue
            if inode.is_dir:
                found.append(inode)
        return found


async def _grouped(items: AsyncIterator[Item], prefix: str, delimiter: str) -> AsyncIterator[Item]:
    """A full walk's keys with those that hold `delimiter` after `prefix` rolled up into
    one common prefix each (keys sharing a prefix are contiguous in key order)."""
    last = ""
    async for item in items:
        cut = item.key.find(delimiter, len(prefix))
        if cut < 0:
            yield item
            continue
        common = item.key[: cut + len(delimiter)]
        if common != last:
            last = common
            yield Item(common)
