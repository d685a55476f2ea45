"""The inodes the mount saw lately, for as long as the kernel trusts their attributes.

The kernel looks a name up (or lists its directory) just before it opens it; asking the
client again on `open` would cost a hop to its event loop thread each time, a large part
of opening a small file. Entries live `FuseConfig.attr_timeout_s` (what the kernel
itself trusts), never longer than the client's own file info.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from reservoir.common.models import Inode


class InodeCache:
    """Path -> inode for `ttl_s`; at most `max_entries`, the least recently put dropped."""

    def __init__(self, ttl_s: float, max_entries: int) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[Inode, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, path: str) -> Inode | None:
        hit = self._entries.get(path)
        if hit is None or hit[1] <= time.monotonic():
            return None
        return hit[0]

    def put(self, inode: Inode) -> None:
        if self._max_entries <= 0:
            return
        expires = time.monotonic() + self._ttl_s
        with self._lock:
            self._entries[inode.path] = (inode, expires)
            self._entries.move_to_end(inode.path)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)

    def forget_below(self, path: str) -> None:
        """Drops `path` and everything below it (it was changed through the mount)."""
        prefix = path.rstrip("/") + "/"
        with self._lock:
            for known in [p for p in self._entries if p == path or p.startswith(prefix)]:
                del self._entries[known]
