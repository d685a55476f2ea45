"""The FUSE operations: a Reservoir directory as a POSIX file system, read-only unless
mounted writable (file_writes.py says what writing means there).

libfuse's high-level API (through mfusepy) hands each call a path below the mount point;
it becomes the Reservoir path below `root`. Names, sizes and times come from the
client's `stat` and `iter_ls` (cached by the client, and by the kernel for
`FuseConfig.attr_timeout_s`); file contents from `read`, through a `ReadAhead` per open
file. On a read-only mount every call that would change something fails with EROFS; on a
writable one files are created, written in order, published on close, renamed (files and
directories), removed, and directories made and removed. Every Reservoir error becomes the
errno a program expects (`errnos.errno_for`).
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, cast

from reservoir.common import paths
from reservoir.common.config import FuseConfig
from reservoir.common.models import Inode

from .directory_cursor import DirectoryCursor
from .errnos import FailureLog, errno_for, errno_of_failures
from .file_writes import FileWrites, OpenWrite
from .inode_cache import InodeCache
from .libfuse import load_mfusepy
from .read_ahead import ReadAhead, ReadAheadBudget
from .write_ops import WritableNamespace, WriteOps

mfusepy: Any = load_mfusepy()

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_DIR_MODE = stat.S_IFDIR | 0o555
_FILE_MODE = stat.S_IFREG | 0o444
_WRITABLE_DIR_MODE = stat.S_IFDIR | 0o755
_WRITABLE_FILE_MODE = stat.S_IFREG | 0o644
# libfuse's FUSE_CAP_ATOMIC_O_TRUNC: an open with O_TRUNC comes as one call, not a
# truncate to 0 first (which would publish an empty file before the new one).
_ATOMIC_O_TRUNC = 1 << 3
# Entries offered to libfuse per readdir call: more than one kernel buffer (4 KiB to
# 128 KiB of names) takes, few enough that building the rest is cheap.
_READDIR_RUN = 256


class Namespace(Protocol):
    """What the file system needs of a client: `reservoir.client.Client` is one."""

    def stat(self, path: str, *, with_locations: bool = False) -> Inode: ...

    def iter_ls(self, path: str) -> Iterator[Inode]: ...

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes: ...


class ReservoirFS(WriteOps, mfusepy.Operations):  # type: ignore[misc]
    """The operations libfuse calls, from many threads at once."""

    use_ns = True  # times in nanoseconds

    def __init__(
        self, client: Namespace, root: str, config: FuseConfig, *, writable: bool = False
    ) -> None:
        """`writable`: the mount takes writes (`client` then a WritableNamespace)."""
        self._client = client
        self._root = paths.normalize(root)
        self._config = config
        self._uid, self._gid = os.getuid(), os.getgid()
        # Directories have no time of their own in Reservoir: they show the mount's.
        self._mounted_ns = time.time_ns()
        self._pool = ThreadPoolExecutor(
            config.readahead_threads, thread_name_prefix="reservoir-fuse-readahead"
        )
        self._budget = ReadAheadBudget(config.readahead_memory_bytes)
        self._inodes = InodeCache(config.attr_timeout_s, config.inode_cache_entries)
        self._files: dict[int, ReadAhead] = {}
        self._directories: dict[int, DirectoryCursor] = {}
        self._handles = itertools.count(1)
        self._lock = threading.Lock()
        self.started = False  # libfuse called init: the mount is up
        self.failures = FailureLog()
        self._writes: FileWrites | None = None
        self._writers: dict[int, OpenWrite] = {}
        if writable:
            writer_client = cast(WritableNamespace, client)
            self._writes = FileWrites(lambda path: writer_client.open(path, "wb"))
        self._dir_mode = _WRITABLE_DIR_MODE if writable else _DIR_MODE
        self._file_mode = _WRITABLE_FILE_MODE if writable else _FILE_MODE

    @property
    def open_files(self) -> int:
        return len(self._files)

    def reservoir_path(self, path: str) -> str:
        """The Reservoir path of a path below the mount point ('/' is the root)."""
        relative = path.strip("/")
        return self._root if not relative else paths.join(self._root, relative)

    def attributes(self, inode: Inode) -> dict[str, Any]:
        mtime_ns = inode.mtime_ms * 1_000_000 if inode.mtime_ms else self._mounted_ns
        size = 0 if inode.is_dir else inode.size
        return {
            "st_mode": self._dir_mode if inode.is_dir else self._file_mode,
            "st_nlink": 2 if inode.is_dir else 1,
            "st_size": size,
            "st_blocks": (size + 511) // 512,
            # What `cat`, `cp` and stdio size their reads by: a whole block at a time.
            "st_blksize": inode.block_size,
            "st_uid": self._uid,
            "st_gid": self._gid,
            "st_mtime": mtime_ns,
            "st_atime": mtime_ns,
            "st_ctime": mtime_ns,
        }

    # ---- reading the namespace ---------------------------------------------------------

    def _stat(self, path: str) -> Inode:
        reservoir_path = self.reservoir_path(path)
        inode = self._inodes.get(reservoir_path)
        if inode is None:
            inode = self._client.stat(reservoir_path)
            self._inodes.put(inode)
        return inode

    @errno_of_failures
    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        opened = self._writes.being_written(self.reservoir_path(path)) if self._writes else None
        if opened is not None:  # not published yet: what has been written so far
            now_ms = time.time_ns() // 1_000_000
            return self.attributes(Inode(opened.path, False, opened.size, now_ms))
        return self.attributes(self._stat(path))

    def opendir(self, path: str) -> int:
        reservoir_path = self.reservoir_path(path)
        # The client fetches RESERVOIR_LIST_PAGE_SIZE entries per master call as the
        # cursor reaches them; the cursor hands libfuse a smaller run at a time.
        cursor = DirectoryCursor(lambda: self._client.iter_ls(reservoir_path), _READDIR_RUN)
        with self._lock:
            handle = next(self._handles)
            self._directories[handle] = cursor
        return handle

    @errno_of_failures
    def readdir_with_offset(self, path: str, offset: int, fh: int) -> list[Any]:
        """What follows `offset` in the listing: a page of it at most, so a directory of
        millions is read a page at a time (libfuse asks again from the last offset the
        kernel took; an empty answer ends the directory)."""
        cursor = self._directories.get(fh)
        if cursor is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        listing: list[Any] = []
        if offset < 1:
            listing.append((".", {"st_mode": self._dir_mode}, 1))
        if offset < 2:
            listing.append(("..", {"st_mode": self._dir_mode}, 2))
        for position, entry in cursor.after(offset):
            self._inodes.put(entry)  # the lookups of `ls -l` and the opens that follow
            mode = self._dir_mode if entry.is_dir else self._file_mode
            listing.append((entry.path.rsplit("/", 1)[-1], {"st_mode": mode}, position))
        return listing

    def releasedir(self, path: str, fh: int) -> int:
        with self._lock:
            self._directories.pop(fh, None)
        return 0

    @errno_of_failures
    def access(self, path: str, amode: int) -> int:
        if amode & os.W_OK and self._writes is None:
            raise mfusepy.FuseOSError(errno.EROFS)
        self._stat(path)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        # No capacity to show (the cache is not a disk); names are S3 keys' parts.
        return {"f_bsize": 4096, "f_frsize": 4096, "f_namemax": paths.MAX_NAME_BYTES}

    # ---- reading files -----------------------------------------------------------------

    @errno_of_failures
    def open(self, path: str, info: Any) -> int:
        if info.flags & _WRITE_FLAGS:
            if self._writes is None:
                raise mfusepy.FuseOSError(errno.EROFS)
            return self._open_to_write(path, info, exists=True)
        inode = self._stat(path)
        if inode.is_dir:
            raise mfusepy.FuseOSError(errno.EISDIR)
        reader = ReadAhead(
            self._client,
            inode.path,
            inode.size,
            chunk_bytes=self._config.readahead_chunk_bytes,
            depth=self._config.readahead_chunks,
            pool=self._pool,
            budget=self._budget,
        )
        with self._lock:
            handle = next(self._handles)
            self._files[handle] = reader
        info.fh = handle
        # Whether the kernel keeps this file's pages from an earlier open is libfuse's
        # `auto_cache` decision: kept while its size and mtime are unchanged.
        return 0

    @errno_of_failures
    def read(self, path: str, size: int, offset: int, info: Any) -> bytes:
        reader = self._files.get(info.fh)
        if reader is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        return reader.read(offset, size)

    def release(self, path: str, info: Any) -> int:
        with self._lock:
            reader = self._files.pop(info.fh, None)
            opened = self._writers.pop(info.fh, None)
        if reader is not None:
            reader.close()
        if opened is not None and not opened.published:
            try:
                self._publish(path, opened)  # an empty file (`touch`): its last close
            except Exception as exc:  # release answers nothing: the error is only logged
                self.failures.failed("release", path, errno_for(exc), exc)
        return 0

    def init_with_config(self, conn: Any, config: Any) -> None:
        # libfuse refuses to start unless the connection asks for the mount's max_read.
        if conn is not None:
            conn.max_read = self._config.max_read_bytes
            if self._writes is not None:
                conn.want |= conn.capable & _ATOMIC_O_TRUNC
        self.started = True

    def destroy(self, path: str) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
