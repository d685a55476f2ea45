"""A directory (local or network file system) as an under-store: `file:///dir/`.

Writable: an object appears by `os.replace` of a file written aside, so a reader sees the
old file or the whole new one. A multipart upload is a directory below
`.reservoir-uploads/` in the root (its parts one file each, any process may write them),
joined into one file at completion. Object metadata (content type, user metadata) is not
kept: a file has nowhere to hold it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import uuid
import zlib
from pathlib import Path
from urllib.parse import urlsplit

from reservoir.common.errors import Conflict, InvalidArgument, NotFound
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.under_store import (
    NO_METADATA,
    Keys,
    Listing,
    ObjectInfo,
    Part,
    Parts,
    StoreLimits,
    UnderStore,
)

UPLOADS = ".reservoir-uploads"
_KEY_FILE = "key"
_COPY_CHUNK = 8 << 20


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
        names = key.split("/")
        if key.startswith("/") or ".." in names or names[0] == UPLOADS:
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
            if not prefix and entry.name == UPLOADS:
                continue
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

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        """Read straight into `out` (on a thread): one copy, as `get_range`'s bytes were."""
        return await asyncio.to_thread(self._read_into, key, offset, out, etag)

    def _read_into(self, key: str, offset: int, out: memoryview, etag: str) -> int:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError as exc:
            raise NotFound(f"get {self.uri_of(key)}: not found in the under-store") from exc
        try:
            if etag and self._info(key, os.fstat(fd)).etag != etag:
                raise Conflict(f"get {self.uri_of(key)}: the object changed")
            filled = 0
            while filled < len(out):
                got = os.preadv(fd, [out[filled:]], offset + filled)
                if got == 0:
                    break  # the end of the file
                filled += got
            return filled
        finally:
            os.close(fd)

    # ---- writes ------------------------------------------------------------------------

    def limits(self) -> StoreLimits:
        return StoreLimits(writes=True, min_part_size=1, renames=True)

    def _aside(self) -> Path:
        """A new file's path beside the objects (same file system, so `os.replace` of it
        is atomic) yet out of every listing."""
        aside = self.root / UPLOADS / "tmp"
        aside.mkdir(parents=True, exist_ok=True)
        return aside / uuid.uuid4().hex

    def _publish(self, written: Path, key: str) -> ObjectInfo:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(written, path)
        return self.head(key)

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        path = self._path(key)  # a bad key is refused before anything is written
        if key.endswith("/"):  # a directory marker: here, the directory itself
            if data:
                raise InvalidArgument(f"put {self.uri_of(key)}: a directory holds no bytes")
            path.mkdir(parents=True, exist_ok=True)
            return ObjectInfo(key, 0, path.stat().st_mtime_ns // 1_000_000, "")
        aside = self._aside()
        aside.write_bytes(data)
        return self._publish(aside, key)

    def _upload(self, upload_id: str) -> Path:
        if not upload_id.isalnum():
            raise InvalidArgument(f"bad upload id {upload_id!r}")
        return self.root / UPLOADS / upload_id

    def _open_upload(self, key: str, upload_id: str) -> Path:
        upload = self._upload(upload_id)
        try:
            if (upload / _KEY_FILE).read_text() == key:
                return upload
        except FileNotFoundError:
            pass
        raise NotFound(f"upload {upload_id} of {self.uri_of(key)}: no such upload")

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        self._path(key)
        upload_id = uuid.uuid4().hex
        upload = self._upload(upload_id)
        upload.mkdir(parents=True)
        (upload / _KEY_FILE).write_text(key)
        return upload_id

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        upload = self._open_upload(key, upload_id)
        aside = upload / f"{number:05d}.{uuid.uuid4().hex}"
        aside.write_bytes(data)
        os.replace(aside, upload / f"{number:05d}")  # a part sent again replaces the first
        return Part(number, _etag_of(data))

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        upload = self._open_upload(key, upload_id)
        joined = self._aside()
        with joined.open("wb") as out:
            for part in parts:
                try:
                    data = (upload / f"{part.number:05d}").read_bytes()
                except FileNotFoundError as exc:
                    raise InvalidArgument(
                        f"complete upload of {self.uri_of(key)}: no part {part.number}"
                    ) from exc
                if _etag_of(data) != part.etag:
                    raise InvalidArgument(
                        f"complete upload of {self.uri_of(key)}: part {part.number} is not "
                        "the one named (another ETag)"
                    )
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        info = self._publish(joined, key)
        shutil.rmtree(upload, ignore_errors=True)
        return info

    def abort_upload(self, key: str, upload_id: str) -> None:
        shutil.rmtree(self._upload(upload_id), ignore_errors=True)

    def open_uploads(self, key: str) -> Keys:
        found: list[str] = []
        try:
            entries = list(os.scandir(self.root / UPLOADS))
        except FileNotFoundError:
            return found
        for entry in entries:
            try:
                if Path(entry.path, _KEY_FILE).read_text() == key:
                    found.append(entry.name)
            except (FileNotFoundError, NotADirectoryError):
                continue  # not an upload (the files written aside), or just completed
        return found

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        what = f"copy {self.uri_of(source)}"
        self._path(destination)
        aside = self._aside()
        try:
            with self._path(source).open("rb") as src, aside.open("wb") as out:
                if if_match and self._info(source, os.fstat(src.fileno())).etag != if_match:
                    raise Conflict(f"{what}: the object changed (its change token differs)")
                shutil.copyfileobj(src, out, _COPY_CHUNK)
        except FileNotFoundError as exc:
            aside.unlink(missing_ok=True)
            raise NotFound(f"{what}: not found in the under-store") from exc
        except BaseException:
            aside.unlink(missing_ok=True)
            raise
        return self._publish(aside, destination)

    def rename(self, source: str, destination: str) -> ObjectInfo:
        path, target = self._path(source), self._path(destination)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(path, target)
        except FileNotFoundError as exc:
            raise NotFound(f"rename {self.uri_of(source)}: not found in the under-store") from exc
        self._prune(path.parent)
        return self.head(destination)

    def delete(self, keys: Keys) -> None:
        for key in keys:
            path = self._path(key)
            try:
                if path.is_dir():
                    path.rmdir()  # a directory marker: only when empty
                else:
                    path.unlink()
            except (FileNotFoundError, OSError):
                continue
            self._prune(path.parent)

    def _prune(self, directory: Path) -> None:
        """Removes the directories left empty above a deleted object, as an object store's
        "directories" go with their last object."""
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent

    def check(self) -> None:
        if not self.root.is_dir():
            raise NotFound(f"mount {self.uri}: no such directory")


def _etag_of(data: bytes) -> str:
    return f"{zlib.crc32(data):08x}-{len(data):x}"
