"""`reservoir://` for fsspec: what pandas, pyarrow and Hugging Face `datasets` open.

Registered through the `fsspec.specs` entry point, so a plain install makes
`fsspec.open("reservoir:///datasets/x.parquet")` work. `reservoir:///datasets/x` and
`reservoir://datasets/x` both mean `/datasets/x`: there is no host part, the master comes
from the `master` storage option or the usual resolution (`client/discovery.py`).

Reads go through one `Client` per filesystem instance: `cat` of many paths is one
`read_many` (small files batched per worker), `cat_ranges` runs its reads concurrently,
and files opened for reading fetch ahead.

Writes go to writable mounts (`reservoir mount --writable`): `open(path, "wb")`,
`pipe_file`, `put_file` write through to the under-store and publish the file whole on
close; `rm`, `mv` (a rename within a mount, atomic for readers), `makedirs`. On a read-only
mount they raise PermissionError, and nothing reaches the store.

Only "not found" reads as absence: `exists`, `isdir`, `isfile` answer False and `walk`
(so `find`, `glob`, `du`) leaves a path out only when it is missing. Any other failure
(the master unreachable, a deadline, a refusal) raises, as with s3fs and gcsfs; fsspec's
own defaults would turn it into False, [] or 0.
"""

from __future__ import annotations

import datetime
import shutil
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.utils import stringify_path

from reservoir.common.errors import InvalidArgument, NotADirectory, ReadOnly
from reservoir.common.models import Inode

from .client import Client
from .reservoir_file import joined

PROTOCOL = "reservoir"
# A sequential reader fetches this far ahead: several blocks of a 4 MiB block size in one
# read, few enough bytes that a random reader wastes little.
DEFAULT_READ_AHEAD = 8 * 1024 * 1024
# What says a path is not there (a path below a file is not there either); nothing else
# may be taken for an answer of "no".
MISSING = (FileNotFoundError, NotADirectoryError)

T = TypeVar("T")


class ReservoirFileSystem(AbstractFileSystem):  # type: ignore[misc]
    """Reservoir's namespace as a read-only fsspec filesystem."""

    protocol = PROTOCOL
    root_marker = "/"
    # Instances are cheap to share and fsspec caches them by their arguments (per process).
    cachable = True

    def __init__(self, master: str | None = None, client: Client | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self._master = master
        self._client = client
        self._client_lock = threading.Lock()

    @property
    def client(self) -> Client:
        """The SDK client reads go through, made on first use."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._client = Client(self._master)
        return self._client

    # ---- paths ----------------------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        for prefix in (f"{PROTOCOL}://", f"{PROTOCOL}::"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
                break
        return "/" + path.strip("/")

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> dict[str, Any]:
        return {}  # the "host" of reservoir://datasets/x is the first path segment

    def unstrip_protocol(self, name: str) -> str:
        return f"{PROTOCOL}://{self._strip_protocol(name)}"

    # ---- metadata -------------------------------------------------------------------------

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        return _info(self.client.stat(self._strip_protocol(path)))

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        try:
            entries = [_info(inode) for inode in self.client.ls(path)]
        except NotADirectory:
            entries = [self.info(path)]  # as fsspec's ls of a file: the file itself
        else:
            if not entries and not self.client.stat(path).is_dir:
                entries = [self.info(path)]
        entries.sort(key=lambda e: e["name"])
        return entries if detail else [e["name"] for e in entries]

    # ---- probes: fsspec's defaults catch OSError (exists: everything); ours only MISSING ---

    def exists(self, path: str, **kwargs: Any) -> bool:
        return _unless_missing(lambda: bool(self.info(path)), False)

    def isdir(self, path: str) -> bool:
        return _unless_missing(lambda: self.info(path)["type"] == "directory", False)

    def isfile(self, path: str) -> bool:
        return _unless_missing(lambda: self.info(path)["type"] == "file", False)

    def walk(
        self,
        path: str,
        maxdepth: int | None = None,
        topdown: bool = True,
        on_error: Any = "omit",
        **kwargs: Any,
    ) -> Iterator[tuple[str, Any, Any]]:
        """fsspec's walk, whose "omit" (the default, and what its `find`, `glob` and `du`
        use) leaves out only a directory that is missing; any other error raises.
        "raise" and a callable behave as in fsspec."""
        if on_error == "omit":
            on_error = _omit_only_missing
        return super().walk(  # type: ignore[no-any-return]
            path, maxdepth=maxdepth, topdown=topdown, on_error=on_error, **kwargs
        )

    def modified(self, path: str) -> datetime.datetime:
        mtime = self.info(path)["mtime"]
        return datetime.datetime.fromtimestamp(mtime, tz=datetime.UTC)

    def ukey(self, path: str) -> str:
        info = self.info(path)
        return str(info.get("etag") or (info["size"], info["mtime"]))

    # ---- reads ----------------------------------------------------------------------------

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        path = self._strip_protocol(path)
        if start is None and end is None:
            return self.client.read(path)
        offset, length = self._range(path, start, end)
        return self.client.read(path, offset, length) if length else b""

    def cat_ranges(
        self,
        paths: list[str],
        starts: int | None | list[int | None],
        ends: int | None | list[int | None],
        max_gap: int | None = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> list[Any]:
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        starts_list = starts if isinstance(starts, list) else [starts] * len(paths)
        ends_list = ends if isinstance(ends, list) else [ends] * len(paths)
        if len(starts_list) != len(paths) or len(ends_list) != len(paths):
            raise ValueError("paths, starts and ends must be of one length")
        ranges: list[tuple[str, int, int] | BaseException] = []
        for path, start, end in zip(paths, starts_list, ends_list, strict=True):
            stripped = self._strip_protocol(path)
            try:
                ranges.append((stripped, *self._range(stripped, start, end)))
            except Exception as exc:
                if on_error != "return":
                    raise
                ranges.append(exc)
        wanted = [r for r in ranges if isinstance(r, tuple)]
        read = iter(self.client.read_ranges(wanted, return_exceptions=on_error == "return"))
        return [next(read) if isinstance(r, tuple) else r for r in ranges]

    def cat(
        self, path: Any, recursive: bool = False, on_error: str = "raise", **kwargs: Any
    ) -> Any:
        paths = self.expand_path(path, recursive=recursive)
        if not (len(paths) > 1 or isinstance(path, list) or paths[0] != self._strip_protocol(path)):
            return self.cat_file(paths[0])
        files = [p for p in paths if not self.isdir(p)] if recursive else paths
        try:
            return dict(zip(files, self.client.read_many(files), strict=True))
        except Exception:
            if on_error == "raise":
                raise
        # One of them failed: read each alone, to tell which.
        out: dict[str, Any] = {}
        for one in files:
            try:
                out[one] = self.client.read(one)
            except Exception as exc:
                if on_error == "return":
                    out[one] = exc
        return out

    def _range(self, path: str, start: int | None, end: int | None) -> tuple[int, int]:
        """fsspec's [start, end) with negative ends counted from the file's end, as an
        offset and a length clipped to the file."""
        start = 0 if start is None else start
        if start < 0 or (end is not None and end < 0):
            size = self.client.stat(path).size
            start = max(0, size + start) if start < 0 else start
            end = None if end is None else (size + end if end < 0 else end)
        if end is None:
            return start, -1
        return start, max(0, end - start)

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ReservoirBufferedFile:
        if mode in ("wb", "xb"):
            if not autocommit:
                raise InvalidArgument(
                    f"{path}: reservoir:// files are published when closed; fsspec "
                    "transactions (autocommit=False) are not supported"
                )
            if mode == "xb" and self.exists(path):
                raise FileExistsError(f"{path}: exists")
            return self.client.open(self._strip_protocol(path), "wb")  # type: ignore[return-value]
        if mode != "rb":
            raise ReadOnly(f"{path}: mode {mode!r} is not supported (rb, wb or xb)")
        inode = self.client.stat(self._strip_protocol(path))
        return ReservoirBufferedFile(
            self,
            inode,
            block_size=block_size or DEFAULT_READ_AHEAD,
            cache_type=kwargs.get("cache_type", "readahead"),
            cache_options=cache_options,
        )

    # ---- writes (writable mounts; see client/writer.py) ------------------------------------

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        found = _unless_missing(lambda: self.info(path), None)
        if found is not None:
            if found["type"] != "directory":
                raise FileExistsError(f"{path}: is a file")
            if not exist_ok:
                raise FileExistsError(f"{path}: exists")
            return
        self.client.makedirs(path)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self.makedirs(path, exist_ok=True)

    def rm_file(self, path: str) -> None:
        self.client.rm(self._strip_protocol(path))

    _rm = rm_file

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        for one in path if isinstance(path, list) else [path]:
            self.client.rm(self._strip_protocol(one), recursive=recursive)

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        if self.client.ls(path):
            raise OSError(f"{path}: directory not empty")
        self.client.rm(path, recursive=True)

    def mv(self, path1: str, path2: str, recursive: bool = False, **kwargs: Any) -> None:
        """A rename within one mount: readers see the old destination or the whole new
        one (a copy and a delete in S3, one namespace change)."""
        self.client.rename(self._strip_protocol(path1), self._strip_protocol(path2))

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        with self.open(path1, "rb") as source, self.open(path2, "wb") as dest:
            shutil.copyfileobj(source, dest, DEFAULT_READ_AHEAD)

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        if not truncate and self.exists(path):
            return
        self.client.write(self._strip_protocol(path), b"")


class ReservoirBufferedFile(AbstractBufferedFile):  # type: ignore[misc]
    """A seekable read-only file; fsspec's cache in front of ranged `Client.read`s."""

    def __init__(
        self,
        fs: ReservoirFileSystem,
        inode: Inode,
        block_size: int,
        cache_type: str,
        cache_options: dict[str, Any] | None,
    ) -> None:
        if inode.is_dir:
            raise IsADirectoryError(f"{inode.path}: is a directory")
        self.inode = inode
        super().__init__(
            fs,
            inode.path,
            mode="rb",
            block_size=block_size,
            cache_type=cache_type,
            cache_options=cache_options,
            size=inode.size,
        )
        self.details = _info(inode)

    def _fetch_range(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if end <= start:
            return b""
        # By the inode it was opened with, as `Client.open` reads: one version of the file.
        return joined(self.fs.client._read_inode(self.inode, start, end - start))


def _unless_missing(probe: Callable[[], T], missing: T) -> T:
    """The probe's answer; `missing` when the path is not there."""
    try:
        return probe()
    except MISSING:
        return missing


def _omit_only_missing(error: OSError) -> None:
    """walk's on_error: a missing directory is left out, any other error raised."""
    if not isinstance(error, MISSING):
        raise error


def _info(inode: Inode) -> dict[str, Any]:
    info = {
        "name": inode.path,
        "size": 0 if inode.is_dir else inode.size,
        "type": "directory" if inode.is_dir else "file",
        "mtime": inode.mtime_ms / 1000,
        "etag": inode.etag,
        "block_size": inode.block_size,
    }
    if inode.metadata:  # what it was written with; s3fs's names where it has them
        written = inode.metadata.to_dict()
        if "content_type" in written:
            info["ContentType"] = written.pop("content_type")
        info["metadata"] = written.pop("user", {})
        info |= written
    return info
