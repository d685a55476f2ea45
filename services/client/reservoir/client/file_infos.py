"""The file info a client remembers from the master's answers, each inode for
`file_info_ttl_s`, with the workers that held each of its blocks beside it (not in it): the
read planner goes to the nearest replica while `stat` answers what it always did.

Reads are dict reads under the GIL, so the read path's threads ask without the loop."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from reservoir.common import paths
from reservoir.common.models import Inode


@dataclass
class _Remembered:
    inode: Inode  # without locations
    expires: float
    # Per block index, the workers that held it when the master last answered.
    replicas: dict[int, list[str]] = dataclasses.field(default_factory=dict)


class FileInfos:
    """Inodes by normalized path, with their blocks' replicas."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl_s = ttl_s
        self._infos: dict[str, _Remembered] = {}

    def __contains__(self, path: str) -> bool:
        return path in self._infos

    def last(self, path: str) -> Inode:
        """The inode remembered at `path`, however old (KeyError when none)."""
        return self._infos[path].inode

    def fresh(self, path: str) -> bool:
        """Whether the inode at normalized `path` is remembered and not yet expired."""
        hit = self._infos.get(path)
        return hit is not None and hit.expires > time.monotonic()

    def known_inode(self, path: str) -> Inode | None:
        """The inode at `path` while it is fresh; None otherwise."""
        # Keys are normalized paths: most callers pass one, and skip normalizing it.
        hit = self._infos.get(path) or self._infos.get(paths.normalize(path))
        if hit is None or hit.expires <= time.monotonic():
            return None
        return hit.inode

    def replicas(self, inode: Inode) -> dict[int, list[str]]:
        """The workers known to hold each block of `inode` (as the master last answered
        for this version of the file); empty when not known."""
        hit = self._infos.get(inode.path)
        if hit is None or hit.inode.file_id != inode.file_id:
            return {}
        return hit.replicas

    def remember(self, inode: Inode, *, located: bool = False) -> Inode:
        """Keeps `inode`, and returns it without locations. `located`: the master was
        asked for its blocks' locations, so no location means no worker holds the block;
        otherwise the replicas known for this version of the file stay."""
        replicas = inode.locations
        plain = dataclasses.replace(inode, locations={}) if replicas else inode
        if not located:
            old = self._infos.get(inode.path)
            if old is not None and old.inode.file_id == inode.file_id:
                replicas = old.replicas
        expires = time.monotonic() + self._ttl_s
        self._infos[inode.path] = _Remembered(plain, expires, replicas)
        return plain

    def forget(self, path: str) -> None:
        self._infos.pop(path, None)

    def forget_below(self, path: str) -> None:
        top = paths.normalize(path)
        for known in [p for p in self._infos if paths.is_within(p, top)]:
            del self._infos[known]

    def clear(self) -> None:
        self._infos.clear()
