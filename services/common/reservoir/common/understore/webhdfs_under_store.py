"""HDFS through its WebHDFS REST API as an under-store: `webhdfs://namenode:port/path/`, and
`hdfs://namenode:port/path/` as the same thing (the port is the namenode's HTTP port, 9870
by default, never its RPC port: only WebHDFS is spoken). Below it: the file operations
(`webhdfs_files.py`), the protocol (`webhdfs_requests.py`), reads into the caller's buffer
(`webhdfs_gets.py`), which datanode redirects are followed (`webhdfs_redirects.py`), and
multipart uploads (`webhdfs_uploads.py`).

Credentials by reference, resolved when the store is opened (in each process that opens
it) and never logged: `anonymous` sends no user; `env` (and "") sends `user.name` from
`HADOOP_USER_NAME` when it is set; `file:PATH` sends the user named on the file's first
line. That is HDFS's simple authentication; Kerberos (SPNEGO) and delegation tokens are not
supported, so a secured cluster refuses these mounts.

Change token: the file's modification time and length, `f"{mtime_ms:x}-{length:x}"`.
Writes are atomic as HDFS allows: an object is written to a hidden temporary file and
renamed over its key (RENAME with OVERWRITE), so readers see the old file or the new one.
Multipart uploads live in the store, below `.reservoir-uploads/` in the mounted directory
(never listed), so that any process may upload a part. Object metadata (content type and
kin) is not kept: HDFS files have none.
"""

from __future__ import annotations

import asyncio
import os
from urllib.parse import urlsplit

from reservoir.common.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ReservoirError,
)
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.under_store import (
    NO_METADATA,
    BufferReadStore,
    Keys,
    Listing,
    ObjectInfo,
    Part,
    Parts,
    StoreLimits,
    UnderStoreSettings,
)
from reservoir.common.understore.webhdfs_files import (
    HdfsFiles,
    Statuses,
    parent_of,
    size_in,
    token_of,
)
from reservoir.common.understore.webhdfs_gets import HdfsGets
from reservoir.common.understore.webhdfs_requests import JsonObject, WebHdfsRequests
from reservoir.common.understore.webhdfs_uploads import HdfsUploads

HIDDEN = ".reservoir-uploads"
# HDFS has no floor on a part (CONCAT joins files of any length) and no ceiling on a
# file worth stating: only the count is bounded, as S3 bounds it.
_LIMITS = StoreLimits(writes=True, min_part_size=1, max_part_size=1 << 62, renames=True)


def user_of(credentials: str, uri: str) -> str | None:
    """The `user.name` a credential source names (None: send none)."""
    if credentials == "anonymous":
        return None
    if credentials in ("", "env"):
        return os.environ.get("HADOOP_USER_NAME") or None
    if credentials.startswith("file:"):
        path = credentials[len("file:") :]
        try:
            with open(path, encoding="utf-8") as f:
                user = f.readline().strip()
        except OSError as exc:
            raise PermissionDenied(
                f"{uri}: cannot read credentials file {path}: {exc.strerror}"
            ) from exc
        if not user:
            raise InvalidArgument(f"{uri}: credentials file {path} names no user on its first line")
        return user
    raise InvalidArgument(
        f"{uri}: unknown credential source {credentials!r} (anonymous, env or file:/path)"
    )


def _info(key: str, status: JsonObject) -> ObjectInfo:
    return ObjectInfo(key, int(status["length"]), int(status["modificationTime"]), token_of(status))


class WebHdfsUnderStore(BufferReadStore):
    """Files below one HDFS directory, through the namenode's WebHDFS API."""

    def __init__(self, uri: str, settings: UnderStoreSettings) -> None:
        parts = urlsplit(uri)
        scheme = parts.scheme.lower()
        if scheme not in ("webhdfs", "hdfs") or not parts.hostname:
            raise InvalidArgument(f"a WebHDFS URI is webhdfs://namenode:port/path/, got {uri!r}")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise InvalidArgument(f"a WebHDFS URI takes no user, query or fragment: {uri!r}")
        try:
            port = parts.port
        except ValueError as exc:
            raise InvalidArgument(f"bad port in {uri!r}") from exc
        if port is None:
            raise InvalidArgument(
                f"{uri!r} names no port: give the namenode's HTTP port (9870 by default)"
            )
        root = parts.path.rstrip("/") + "/"
        self.uri = f"{scheme}://{parts.netloc}{root}"
        self.credentials = settings.credentials or "env"
        requests = WebHdfsRequests(
            parts.hostname,
            port,
            user_of(settings.credentials, self.uri),
            settings,
            self.credentials,
        )
        self._files = HdfsFiles(requests, HdfsGets(requests, settings))
        self._root = root.rstrip("/") or "/"
        self._uploads = HdfsUploads(self._files, root + HIDDEN, _LIMITS.max_parts)

    def _path(self, key: str) -> str:
        """The absolute HDFS path of `key` ('' and keys ending in '/' are directories)."""
        names = key.split("/")
        if (
            key.startswith("/")
            or any(n in (".", "..") for n in names)
            or "" in names[:-1]
            or names[0] == HIDDEN
        ):
            raise InvalidArgument(f"bad key {key!r}")
        return (self._root.rstrip("/") + "/" + key).rstrip("/") or "/"

    def _what(self, verb: str, key: str, to: str | None = None) -> str:
        moved = "" if to is None else f" to {self.uri_of(to)}"
        return f"{verb} {self.uri_of(key)}{moved} (credentials {self.credentials})"

    # ---- reads ---------------------------------------------------------------------------

    def head(self, key: str) -> ObjectInfo:
        what = self._what("head", key)
        status = self._files.status(self._path(key), what)
        if status.get("type") != "FILE":
            raise NotFound(f"{what}: not a file")
        return _info(key, status)

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        """One level, in batches (LISTSTATUS_BATCH, as large as the namenode's
        dfs.ls.limit), until `limit` entries are held or the directory ends."""
        what = self._what("list", prefix)
        path = self._path(prefix)
        entries: Statuses = []
        after, complete = "", True
        while True:
            try:
                batch, remaining = self._files.batch(path, after, what)
            except NotFound:
                return Listing([], [])
            if any(s["pathSuffix"] == "" for s in batch):
                return Listing([], [])  # a file, not a directory
            entries.extend(batch)
            if not batch or remaining == 0:
                break
            if limit is not None and len(entries) > limit:
                complete = False
                break
            after = batch[-1]["pathSuffix"]
        if not prefix:
            entries = [s for s in entries if s["pathSuffix"] != HIDDEN]
        if limit is not None and len(entries) > limit:
            entries, complete = entries[:limit], False
        objects = [_info(prefix + s["pathSuffix"], s) for s in entries if s["type"] == "FILE"]
        prefixes = [prefix + s["pathSuffix"] for s in entries if s["type"] == "DIRECTORY"]
        return Listing(objects, prefixes, complete)

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        """Received straight into `out` (`webhdfs_gets.py`). With `etag`, the file's status
        is checked after its bytes are read, not before: the caller's token was current
        before this call began, and a path's versions only move forward (each new file has
        a new modification time), so a status that still carries the token after the read
        proves the bytes read were of that version. Checked before, a file replaced between
        the check and the OPEN would be read unnoticed. The token also carries the length,
        so the read is clipped without asking (HDFS refuses an offset past the end)."""
        if not len(out):
            return 0
        what = self._what("get", key)
        path = self._path(key)
        size = size_in(etag) if etag else None
        if size is None:
            size = (await asyncio.to_thread(self.head, key)).size
        try:
            got = 0
            if offset < size:
                got = await self._files.read_into(path, offset, out[: size - offset], what)
        except (OutOfRange, InvalidArgument) as exc:
            # Read as the token's length says, of a file since shortened.
            if etag and not await self._still(key, etag):
                raise Conflict(f"{what}: the object changed") from exc
            raise
        if etag and not await self._still(key, etag):
            raise Conflict(f"{what}: the object changed")
        return got

    async def _still(self, key: str, etag: str) -> bool:
        """Whether the file is still the version `etag` names."""
        return (await asyncio.to_thread(self.head, key)).etag == etag

    def check(self) -> None:
        what = f"mount {self.uri} (credentials {self.credentials})"
        if self._files.status(self._root, what).get("type") != "DIRECTORY":
            raise NotFound(f"{what}: not a directory")

    # ---- writes --------------------------------------------------------------------------

    def limits(self) -> StoreLimits:
        return _LIMITS

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        what = self._what("put", key)
        path = self._path(key)  # a bad key is refused before anything is written
        if key.endswith("/"):  # a directory marker: here, the directory itself
            if data:
                raise InvalidArgument(f"{what}: a directory holds no bytes")
            self._files.mkdirs(path, what)
            return ObjectInfo(key, 0, int(self._files.status(path, what)["modificationTime"]), "")
        written = self._uploads.temporary()
        try:
            self._files.create(written, data, what)
        except ReservoirError:
            self._files.forget(written, what)
            raise
        self._files.publish(written, path, what)
        return self.head(key)

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        self._path(key)
        return self._uploads.create(key, self._what("start upload of", key))

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        what = self._what(f"upload part {number} of", key)
        return self._uploads.upload_part(upload_id, number, data, what)

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        """The joined parts renamed onto the key; on a failure they stay in the upload's
        directory, for another attempt or the abort."""
        what = self._what("complete upload of", key)
        path = self._path(key)
        self._files.move(self._uploads.join(key, upload_id, parts, what), path, what)
        self._files.forget(self._uploads.path_of(upload_id), what)
        return self.head(key)

    def abort_upload(self, key: str, upload_id: str) -> None:
        self._uploads.drop(upload_id, self._what("abort upload of", key))

    def open_uploads(self, key: str) -> Keys:
        return self._uploads.open_ids(key, self._what("list uploads of", key))

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        """OPEN and CREATE (HDFS has no server-side copy), into a file written aside and
        renamed onto `destination`; Conflict when the source is not, or stops being during
        the copy, the version `if_match` names."""
        what = self._what("copy", source, to=destination)
        path = self._path(destination)
        before = self.head(source)
        if if_match and before.etag != if_match:
            raise Conflict(f"{what}: the source changed")
        written = self._uploads.temporary()
        try:
            self._files.copy(self._path(source), written, before.size, what)
            if self.head(source).etag != before.etag:
                raise Conflict(f"{what}: the source changed while it was copied")
        except ReservoirError:
            self._files.forget(written, what)
            raise
        self._files.publish(written, path, what)
        return self.head(destination)

    def rename(self, source: str, destination: str) -> ObjectInfo:
        what = self._what("rename", source, to=destination)
        path = self._path(source)
        self._files.move(path, self._path(destination), what)
        self._files.prune({parent_of(path)}, self._root, what)
        return self.head(destination)

    def delete(self, keys: Keys) -> None:
        """DELETE of each file (one already gone is no error) and directory marker (only
        when empty), then of the directories they leave empty."""
        emptied: set[str] = set()
        for key in keys:
            path = self._path(key)
            try:
                self._files.delete(path, self._what("delete", key))
            except InvalidArgument:
                if key.endswith("/"):
                    continue  # a directory marker over a directory that is not empty
                raise
            emptied.add(parent_of(path))
        self._files.prune(emptied, self._root, self._what("delete from", ""))
