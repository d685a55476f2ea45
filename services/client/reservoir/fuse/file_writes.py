"""Files written through a writable mount (`reservoir fuse --writable`): object-store
semantics, as Mountpoint for Amazon S3 documents them.

A file opened to write is a new version written from its start: created, or opened with
O_TRUNC (an existing file is replaced, whole, when the new one is closed). Its bytes must
come in order; `close` publishes it (atomic: readers see the old version or the whole new
one, and the error of a failed publish is close's), and `fsync` waits until what was sent
is in the store. A file is published when its descriptor is closed, as on a disk what was
written stays: a process killed mid-write (its descriptors closed by the kernel) leaves
the part it wrote, whole, never a mix with the old version. What an object store cannot do
is refused with a log line saying why, never done halfway: a write at another offset
than the end (EINVAL), an append or a write into an existing file without O_TRUNC
(EPERM), a truncate to anything but 0 (EOPNOTSUPP).
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol

from reservoir.common import logs
from reservoir.common.models import Inode

log = logs.get_logger(__name__)


class Writer(Protocol):
    """A file being written: `reservoir.client.ReservoirWriter` is one."""

    inode: Inode | None

    def write(self, data: bytes) -> int: ...

    def sync(self) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


class Refused(OSError):
    """What the mount cannot do to a file, with the errno the caller gets."""

    def __init__(self, number: int, path: str, why: str) -> None:
        super().__init__(number, f"{path}: {why}")
        log.info("fuse_write_refused", path=path, errno=errno.errorcode[number], why=why)


@dataclass
class OpenWrite:
    """One open of a file for writing."""

    path: str  # the Reservoir path
    writer: Writer
    size: int = 0  # bytes written so far: the only offset a write may start at
    published: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def write(self, data: bytes, offset: int) -> int:
        with self.lock:
            if self.published:
                raise Refused(errno.EBADF, self.path, "written after it was closed")
            if offset != self.size:
                raise Refused(
                    errno.EINVAL,
                    self.path,
                    f"a write at offset {offset}, not at the end ({self.size}): files are "
                    "written from start to end (object-store semantics)",
                )
            self.writer.write(data)
            self.size += len(data)
            return len(data)

    def publish(self) -> None:
        with self.lock:
            if not self.published:
                self.published = True
                self.writer.close()

    def sync(self) -> None:
        with self.lock:
            if not self.published:
                self.writer.sync()

    def abort(self) -> None:
        with self.lock:
            if not self.published:
                self.published = True
                self.writer.abort()


class FileWrites:
    """The files being written through one mount, by path (a getattr of a file being
    written answers its size so far)."""

    def __init__(self, open_writer: Any) -> None:
        """`open_writer(path)`: a new version of the file at that Reservoir path."""
        self._open_writer = open_writer
        self._by_path: dict[str, OpenWrite] = {}
        self._lock = threading.Lock()

    def begin(self, path: str) -> OpenWrite:
        opened = OpenWrite(path, self._open_writer(path))
        with self._lock:
            self._by_path[path] = opened
        return opened

    def being_written(self, path: str) -> OpenWrite | None:
        with self._lock:
            return self._by_path.get(path)

    def end(self, opened: OpenWrite) -> None:
        with self._lock:
            if self._by_path.get(opened.path) is opened:
                del self._by_path[opened.path]

    @staticmethod
    def check_open_flags(path: str, flags: int, exists: bool) -> None:
        """Refuses the opens an object store cannot serve."""
        if flags & os.O_APPEND:
            raise Refused(errno.EPERM, path, "appends are not supported (object-store semantics)")
        if exists and not flags & os.O_TRUNC:
            raise Refused(
                errno.EPERM,
                path,
                "an existing file is only rewritten whole: open it with O_TRUNC "
                "(object-store semantics)",
            )
