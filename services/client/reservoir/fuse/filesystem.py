"""The FUSE operations: a Reservoir directory as a read-only POSIX file system.

libfuse's high-level API (through mfusepy) hands each call a path below the mount point;
it becomes the Reservoir path below `root`. Names, sizes and times come from the
client's `stat` and `iter_ls` (cached by the client, and by the kernel for
`FuseConfig.attr_timeout_s`); file contents from `read`, through a `ReadAhead` per open
file. Every call that would change something fails with EROFS, and every Reservoir error
becomes the errno a program expects (`errnos.errno_for`).
"""

from __future__ import annotations

import errno
import functools
import itertools
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar, cast

from reservoir.common import paths
from reservoir.common.config import FuseConfig
from reservoir.common.models import Inode

from .directory_cursor import DirectoryCursor
from .errnos import FailureLog, errno_for, is_expected
from .inode_cache import InodeCache
from .libfuse import load_mfusepy
from .read_ahead import ReadAhead, ReadAheadBudget

mfusepy: Any = load_mfusepy()

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_DIR_MODE = stat.S_IFDIR | 0o555
_FILE_MODE = stat.S_IFREG | 0o444
# Entries offered to libfuse per readdir call: more than one kernel buffer (4 KiB to
# 128 KiB of names) takes, few enough that building the rest is cheap.
_READDIR_RUN = 256

F = TypeVar("F", bound=Callable[..., Any])


class Namespace(Protocol):
    """What the file system needs of a client: `reservoir.client.Client` is one."""

    def stat(self, path: str, *, with_locations: bool = False) -> Inode: ...

    def iter_ls(self, path: str) -> Iterator[Inode]: ...

    def read(self, path: str, offset: int = 0, length: int = -1) -> bytes: ...


def _errno_of_failures(op: F) -> F:
    """Turns what an operation raises into the errno FUSE returns, logging the failures
    a user would not expect (a cluster away, a bad block) with their fields."""

    @functools.wraps(op)
    def wrapper(self: ReservoirFS, path: str, *args: Any) -> Any:
        try:
            return op(self, path, *args)
        except mfusepy.FuseOSError:
            raise
        except Exception as exc:
            number = errno_for(exc)
            if not is_expected(number):
                self.failures.failed(op.__name__, path, number, exc)
            raise mfusepy.FuseOSError(number) from exc

    return cast(F, wrapper)


def _read_only(*_: Any) -> int:
    raise mfusepy.FuseOSError(errno.EROFS)


class ReservoirFS(mfusepy.Operations):  # type: ignore[misc]
    """The operations libfuse calls, from many threads at once."""

    use_ns = True  # times in nanoseconds

    def __init__(self, client: Namespace, root: str, config: FuseConfig) -> None:
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
            "st_mode": _DIR_MODE if inode.is_dir else _FILE_MODE,
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

    @_errno_of_failures
    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
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

    @_errno_of_failures
    def readdir_with_offset(self, path: str, offset: int, fh: int) -> list[Any]:
        """What follows `offset` in the listing: a page of it at most, so a directory of
        millions is read a page at a time (libfuse asks again from the last offset the
        kernel took; an empty answer ends the directory)."""
        cursor = self._directories.get(fh)
        if cursor is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        listing: list[Any] = []
        if offset < 1:
            listing.append((".", {"st_mode": _DIR_MODE}, 1))
        if offset < 2:
            listing.append(("..", {"st_mode": _DIR_MODE}, 2))
        for position, entry in cursor.after(offset):
            self._inodes.put(entry)  # the lookups of `ls -l` and the opens that follow
            mode = _DIR_MODE if entry.is_dir else _FILE_MODE
            listing.append((entry.path.rsplit("/", 1)[-1], {"st_mode": mode}, position))
        return listing

    def releasedir(self, path: str, fh: int) -> int:
        with self._lock:
            self._directories.pop(fh, None)
        return 0

    @_errno_of_failures
    def access(self, path: str, amode: int) -> int:
        if amode & os.W_OK:
            raise mfusepy.FuseOSError(errno.EROFS)
        self._stat(path)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        # No capacity to show (the cache is not a disk); names are S3 keys' parts.
        return {"f_bsize": 4096, "f_frsize": 4096, "f_namemax": paths.MAX_NAME_BYTES}

    # ---- reading files -----------------------------------------------------------------

    @_errno_of_failures
    def open(self, path: str, info: Any) -> int:
        if info.flags & _WRITE_FLAGS:
            raise mfusepy.FuseOSError(errno.EROFS)
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

    @_errno_of_failures
    def read(self, path: str, size: int, offset: int, info: Any) -> bytes:
        reader = self._files.get(info.fh)
        if reader is None:
            raise mfusepy.FuseOSError(errno.EBADF)
        return reader.read(offset, size)

    def release(self, path: str, info: Any) -> int:
        with self._lock:
            reader = self._files.pop(info.fh, None)
        if reader is not None:
            reader.close()
        return 0

    def init_with_config(self, conn: Any, config: Any) -> None:
        # libfuse refuses to start unless the connection asks for the mount's max_read.
        if conn is not None:
            conn.max_read = self._config.max_read_bytes
        self.started = True

    def destroy(self, path: str) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- everything that writes: a read-only file system -------------------------------

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        return _read_only()

    write = _read_only
    truncate = _read_only
    mkdir = _read_only
    mknod = _read_only
    rmdir = _read_only
    unlink = _read_only
    rename = _read_only
    symlink = _read_only
    link = _read_only
    chmod = _read_only
    chown = _read_only
    utimens = _read_only
    setxattr = _read_only
    removexattr = _read_only
    fallocate = _read_only
