"""An open directory of the mount, read a page at a time as the kernel asks.

The kernel reads a directory in buffers of a few KiB: each `readdir` call carries the
offset of the last entry it took, and the next call asks for what follows. Entries carry
their position as offset ("." is 1, ".." 2, the first name 3), so the cursor resumes
from the client's listing (`iter_ls`, which fetches the next page when the one before runs
out) and holds at most about a page, however big the directory. A kernel that seeks back
(rewinddir, seekdir) gets the listing again from the start, as far as it asks.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator

from reservoir.common.models import Inode

FIRST_ENTRY = 3  # after "." (1) and ".." (2)


class DirectoryCursor:
    """Where one open directory's listing stands. Safe to call from libfuse's threads."""

    def __init__(self, listing: Callable[[], Iterator[Inode]], page_size: int) -> None:
        """`listing`: a new iterator over the directory's entries, in name order."""
        self._listing = listing
        self._page_size = page_size
        self._lock = threading.Lock()
        self._restart()

    def _restart(self) -> None:
        self._entries = self._listing()  # lazy: the first page is fetched when needed
        self._pulled = FIRST_ENTRY - 1  # offset of the last entry taken from the listing
        self._buffer: list[tuple[int, Inode]] = []  # taken, not yet past the kernel

    def after(self, offset: int) -> list[tuple[int, Inode]]:
        """The entries after `offset` (as (offset, inode)) that the cursor holds, fetching
        the next page when it holds none; [] at the end of the directory."""
        with self._lock:
            oldest = self._buffer[0][0] if self._buffer else self._pulled + 1
            if offset + 1 < max(oldest, FIRST_ENTRY):
                self._restart()
            self._buffer = [(o, e) for o, e in self._buffer if o > offset]
            while not self._buffer:
                page = self._next_page()
                if not page:
                    return []
                self._buffer = [(o, e) for o, e in page if o > offset]
            return list(self._buffer)

    def _next_page(self) -> list[tuple[int, Inode]]:
        try:
            page = list(itertools.islice(self._entries, self._page_size))
        except BaseException:
            # A listing that failed has ended: the next call lists again (and skips to
            # where the kernel stands), rather than take the end for the directory's.
            self._restart()
            raise
        first = self._pulled + 1
        self._pulled += len(page)
        return list(enumerate(page, start=first))
