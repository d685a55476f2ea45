"""A directory (local or network file system) as an under-store: `file:///dir/`."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from reservoir.common.errors import Conflict, InvalidArgument, NotFound
from reservoir.common.understore.under_store import Listing, ObjectInfo, UnderStore


class LocalUnderStore(UnderStore):
    """A directory as an under-store. The ETag is derived from mtime and size."""

    def __init__(self, uri: str) -> None:
        parts = urlsplit(uri)
        if parts.netloc not in ("", "localhost"):
            raise InvalidArgument(f"file URI must be file:///absolute/path, got {uri!r}")
        root = parts.path.rstrip("/") + "/"
        self.root = Path(root)
        self.uri = f"file://{root}"

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise InvalidArgument(f"bad key {key!r}")
        return self.root / key

    @staticmethod
    def _info(key: str, st: os.stat_result) -> ObjectInfo:
        return ObjectInfo(
            key, st.st_size, st.st_mtime_ns // 1_000_000, f"{st.st_mtime_ns:x}-{st.st_size:x}"
        )

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = path.stat()
        except FileNotFoundError as exc:
            raise NotFound(f"head {self.uri_of(key)}: not found in the under-store") from exc
        if not path.is_file():
            raise NotFound(f"head {self.uri_of(key)}: not a file")
        return self._info(key, st)

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        try:
            with os.scandir(self._path(prefix)) as it:
                entries = sorted(it, key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return Listing([], [])
        complete = limit is None or len(entries) <= limit
        for entry in entries if complete else entries[:limit]:
            if entry.is_dir():
                prefixes.append(prefix + entry.name)
            elif entry.is_file():
                objects.append(self._info(prefix + entry.name, entry.stat()))
        return Listing(objects, prefixes, complete)

    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        path = self._path(key)
        try:
            with path.open("rb") as f:
                if etag and self._info(key, os.fstat(f.fileno())).etag != etag:
                    raise Conflict(f"get {self.uri_of(key)}: the object changed")
                f.seek(offset)
                return f.read(max(0, length))
        except FileNotFoundError as exc:
            raise NotFound(f"get {self.uri_of(key)}: not found in the under-store") from exc

    def put(self, key: str, data: bytes) -> ObjectInfo:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".reservoir-tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        return self.head(key)

    def check(self) -> None:
        if not self.root.is_dir():
            raise NotFound(f"mount {self.uri}: no such directory")
