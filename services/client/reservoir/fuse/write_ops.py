"""The FUSE operations that change something: on a read-only mount each fails with
EROFS; on a writable one (`reservoir fuse --writable`) files are created and written in
order, published on close (file_writes.py says what writing means on an object store),
renamed (files and directories), removed, and directories made and removed.

A mixin of `ReservoirFS` (filesystem.py), which owns the state these use.
"""

from __future__ import annotations

import errno
import itertools
import threading
from collections.abc import Callable
from typing import Any, Protocol, cast

from reservoir.common.models import Inode

from .errnos import FailureLog, errno_of_failures
from .file_writes import FileWrites, OpenWrite, Refused
from .inode_cache import InodeCache
from .libfuse import load_mfusepy

mfusepy: Any = load_mfusepy()


class WritableNamespace(Protocol):
    """What a writable mount needs of a client: `reservoir.client.Client` is one."""

    def stat(self, path: str, *, with_locations: bool = False) -> Inode: ...

    def iter_ls(self, path: str) -> Any: ...

    def open(self, path: str, mode: Any) -> Any: ...

    def rm(self, path: str, *, recursive: bool = False) -> int: ...

    def rename(self, source: str, destination: str) -> Inode: ...

    def makedirs(self, path: str) -> Inode: ...


def read_only(*_: Any) -> int:
    raise mfusepy.FuseOSError(errno.EROFS)


class WriteOps:
    """The writing calls of a `ReservoirFS`."""

    _client: Any
    _writes: FileWrites | None
    _writers: dict[int, OpenWrite]
    _inodes: InodeCache
    _handles: itertools.count[int]
    _lock: threading.Lock
    failures: FailureLog
    reservoir_path: Callable[[str], str]
    _stat: Callable[[str], Inode]

    def _writable(self) -> FileWrites:
        if self._writes is None:
            raise mfusepy.FuseOSError(errno.EROFS)
        return self._writes

    def _changed(self, path: str) -> None:
        self._inodes.forget_below(self.reservoir_path(path))

    def _open_to_write(self, path: str, info: Any, *, exists: bool) -> int:
        writes = self._writable()
        reservoir_path = self.reservoir_path(path)
        writes.check_open_flags(reservoir_path, info.flags, exists)
        opened = writes.begin(reservoir_path)
        with self._lock:
            handle = next(self._handles)
            self._writers[handle] = opened
        info.fh = handle
        return 0

    @errno_of_failures
    def create(self, path: str, mode: int, info: Any = None) -> int:
        return self._open_to_write(path, info, exists=False)

    def _writer(self, info: Any) -> OpenWrite:
        opened = self._writers.get(info.fh) if info is not None else None
        if opened is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        return opened

    @errno_of_failures
    def write(self, path: str, data: bytes, offset: int, info: Any) -> int:
        return self._writer(info).write(data, offset)

    @errno_of_failures
    def flush(self, path: str, info: Any) -> int:
        """`close` of a descriptor: publishes a file written through this open, so its
        error is close's. Not before a first byte: a shell's `echo x > f` closes a copy of
        the descriptor before it writes through the other (release publishes what stays
        empty)."""
        opened = self._writers.get(info.fh) if info is not None else None
        if opened is not None and opened.size:
            self._publish(path, opened)
        return 0

    def _publish(self, path: str, opened: OpenWrite) -> None:
        try:
            opened.publish()
        finally:
            self._writable().end(opened)
            self._changed(path)

    @errno_of_failures
    def fsync(self, path: str, datasync: int, info: Any) -> int:
        opened = self._writers.get(info.fh) if info is not None else None
        if opened is not None:
            opened.sync()
        return 0

    @errno_of_failures
    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        writes = self._writable()
        reservoir_path = self.reservoir_path(path)
        opened = writes.being_written(reservoir_path)
        if length == 0 and opened is not None and opened.size == 0:
            return 0  # a file just opened to be written from its start
        if length != 0:
            raise Refused(
                errno.EOPNOTSUPP,
                reservoir_path,
                f"truncate to {length} bytes: only to 0 (object-store semantics)",
            )
        self._stat(path)  # ENOENT for a missing file
        writer = cast(WritableNamespace, self._client).open(reservoir_path, "wb")
        writer.close()  # a new, empty version
        self._changed(path)
        return 0

    @errno_of_failures
    def unlink(self, path: str) -> int:
        self._writable()
        cast(WritableNamespace, self._client).rm(self.reservoir_path(path))
        self._changed(path)
        return 0

    @errno_of_failures
    def mkdir(self, path: str, mode: int) -> int:
        self._writable()
        cast(WritableNamespace, self._client).makedirs(self.reservoir_path(path))
        self._changed(path)
        return 0

    @errno_of_failures
    def rmdir(self, path: str) -> int:
        self._writable()
        reservoir_path = self.reservoir_path(path)
        if not self._stat(path).is_dir:
            raise mfusepy.FuseOSError(errno.ENOTDIR)
        if next(iter(self._client.iter_ls(reservoir_path)), None) is not None:
            raise mfusepy.FuseOSError(errno.ENOTEMPTY)
        cast(WritableNamespace, self._client).rm(reservoir_path, recursive=True)
        self._changed(path)
        return 0

    @errno_of_failures
    def rename(self, old: str, new: str) -> int:
        self._writable()
        client = cast(WritableNamespace, self._client)
        client.rename(self.reservoir_path(old), self.reservoir_path(new))
        self._changed(old)
        self._changed(new)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        # Objects have no modes or owners: accepted and dropped on a writable mount, as
        # `cp -p`, shutil.copy2 and copytree set them after writing.
        return read_only() if self._writes is None else 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        return read_only() if self._writes is None else 0

    def utimens(self, path: str, times: Any = None) -> int:
        return read_only() if self._writes is None else 0

    mknod = read_only
    symlink = read_only
    link = read_only
    setxattr = read_only
    removexattr = read_only
    fallocate = read_only
