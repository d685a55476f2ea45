"""The mount's readdir over a big directory, driven as the kernel drives it: buffers of a
few entries, each call resuming at the offset of the last entry taken. The namespace is a
list served a page at a time (what `Client.iter_ls` does over the master's pages)."""

from __future__ import annotations

import errno
from collections.abc import Iterator

import pytest

from reservoir.common.config import FuseConfig
from reservoir.common.errors import Unavailable
from reservoir.common.models import Inode
from reservoir.fuse.filesystem import _READDIR_RUN as READDIR_RUN
from reservoir.fuse.filesystem import ReservoirFS, mfusepy

PAGE = 100
KERNEL_BUFFER = 30  # entries one readdir reply holds


class PagedNamespace:
    """A directory of `count` files listed `PAGE` entries per (counted) fetch."""

    def __init__(self, count: int) -> None:
        self.entries = [Inode(path=f"/d/f{i:05d}", is_dir=False, size=i) for i in range(count)]
        self.pages_fetched = 0
        self.listings = 0
        self.fail_at_page: int | None = None

    def iter_ls(self, path: str) -> Iterator[Inode]:
        assert path == "/d"
        self.listings += 1
        for start in range(0, len(self.entries), PAGE):
            if self.fail_at_page == self.pages_fetched:
                self.fail_at_page = None
                raise Unavailable("ls /d: master at 127.0.0.1:1 is unreachable")
            self.pages_fetched += 1
            yield from self.entries[start : start + PAGE]

    def stat(self, path: str, *, with_locations: bool = False) -> Inode:
        raise AssertionError("readdir needs no stat")

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes:
        raise AssertionError("readdir reads nothing")


def _read_directory(fs: ReservoirFS, fh: int, offset: int = 0) -> Iterator[tuple[str, int]]:
    """(name, offset) as the kernel takes them: a buffer's worth per call, until empty."""
    while True:
        reply = fs.readdir_with_offset("/", offset, fh)[:KERNEL_BUFFER]
        if not reply:
            return
        for name, _, position in reply:
            yield name, position
        offset = reply[-1][2]


def _mounted(namespace: PagedNamespace) -> ReservoirFS:
    return ReservoirFS(namespace, "/d", FuseConfig())


def test_a_directory_of_many_pages_reads_every_entry_once_in_order_a_page_at_a_time() -> None:
    namespace = PagedNamespace(1050)
    fs = _mounted(namespace)
    fh = fs.opendir("/")
    names = []
    for name, _ in _read_directory(fs, fh):
        names.append(name)
        # What the mount has fetched runs at most a run handed to libfuse and a page
        # ahead of what the kernel took: never the whole directory.
        assert namespace.pages_fetched * PAGE <= len(names) + READDIR_RUN + PAGE
    assert names == [".", "..", *[e.path.rsplit("/", 1)[1] for e in namespace.entries]]
    assert namespace.pages_fetched == 11 and namespace.listings == 1
    fs.releasedir("/", fh)
    with pytest.raises(mfusepy.FuseOSError) as closed:
        fs.readdir_with_offset("/", 0, fh)
    assert closed.value.errno == errno.EBADF


def test_a_rewind_lists_again_from_the_start() -> None:
    namespace = PagedNamespace(250)
    fs = _mounted(namespace)
    fh = fs.opendir("/")
    reader = _read_directory(fs, fh)
    first = [next(reader) for _ in range(150)]
    again = list(_read_directory(fs, fh, 0))  # rewinddir: offset 0
    assert [n for n, _ in again][:150] == [n for n, _ in first]
    assert len(again) == 252 and namespace.listings == 2
    # A seekdir back to a position the kernel was told: the entries from there on.
    name, position = first[120]
    assert next(_read_directory(fs, fh, position))[0] == first[121][0]


def test_a_listing_that_fails_between_pages_fails_the_call_and_resumes_where_it_stood() -> None:
    namespace = PagedNamespace(250)
    fs = _mounted(namespace)
    fh = fs.opendir("/")
    offset, names = 0, []
    namespace.fail_at_page = 1  # the fetch of the second page fails once
    failed: list[int] = []
    while True:
        try:
            reply = fs.readdir_with_offset("/", offset, fh)[:KERNEL_BUFFER]
        except mfusepy.FuseOSError as exc:
            failed.append(exc.errno)
            continue  # the kernel's next getdents asks again from the same offset
        if not reply:
            break
        names.extend(name for name, _, _ in reply)
        offset = reply[-1][2]
    assert failed == [errno.EIO]
    assert names == [".", "..", *[e.path.rsplit("/", 1)[1] for e in namespace.entries]]
