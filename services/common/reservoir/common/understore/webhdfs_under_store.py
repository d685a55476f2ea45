"""HDFS through its WebHDFS REST API as an under-store: `webhdfs://namenode:port/path/`, and
`hdfs://namenode:port/path/` as the same thing (the port is the namenode's HTTP port, 9870
by default, never its RPC port: only WebHDFS is spoken). The protocol, the datanode
redirects and which of them are followed are `webhdfs_requests.py`'s.

Credentials by reference, resolved when the store is opened (in each process that opens
it) and never logged: `anonymous` sends no user; `env` (and "") sends `user.name` from
`HADOOP_USER_NAME` when it is set; `file:PATH` sends the user named on the file's first
line. That is HDFS's simple authentication; Kerberos (SPNEGO) and delegation tokens are not
supported, so a secured cluster refuses these mounts.

Change token: the file's modification time and length, `f"{mtime_ms:x}-{length:x}"`.
Writes are atomic as HDFS allows: an object is written to a hidden temporary file and
renamed over its key (RENAME with OVERWRITE), so readers see the old file or the new one.
A multipart upload lives in the store, below `.reservoir-uploads/<id>/` (a JSON file naming
the key, and one file per part): any process may upload a part, and completing it CONCATs
the parts into the first and renames that onto the key. Object metadata (content type and
kin) is not kept: HDFS files have none.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from reservoir.common import logs
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
    Keys,
    Listing,
    ObjectInfo,
    Part,
    Parts,
    StoreLimits,
    UnderStore,
    UnderStoreSettings,
)
from reservoir.common.understore.webhdfs_requests import JsonObject, WebHdfsRequests

log = logs.get_logger(__name__)

HIDDEN = ".reservoir-uploads"
_MANIFEST = "upload.json"
# HDFS has no floor on a part (CONCAT joins files of any length) and no ceiling on a
# file: only the count is bounded, as S3 bounds it.
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


def _token(status: JsonObject) -> str:
    return f"{int(status['modificationTime']):x}-{int(status['length']):x}"


def _size_in(token: str) -> int | None:
    """The length a change token carries (None for a token that is not one of ours)."""
    try:
        return int(token.rpartition("-")[2], 16)
    except ValueError:
        return None


class WebHdfsUnderStore(UnderStore):
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
        self.root = parts.path.rstrip("/") + "/"
        self.uri = f"{scheme}://{parts.netloc}{self.root}"
        self.credentials = settings.credentials or "env"
        user = user_of(settings.credentials, self.uri)
        self._http = WebHdfsRequests(parts.hostname, port, user, settings)

    # ---- paths ---------------------------------------------------------------------------

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
        return (self.root + key).rstrip("/") or "/"

    def _what(self, verb: str, key: str) -> str:
        return f"{verb} {self.uri_of(key)} (credentials {self.credentials})"

    def _upload_dir(self, upload_id: str) -> str:
        if not upload_id or not all(c.isalnum() or c == "-" for c in upload_id):
            raise InvalidArgument(f"bad upload id {upload_id!r}")
        return f"{self.root}{HIDDEN}/{upload_id}"

    def _temporary(self) -> str:
        return f"{self.root}{HIDDEN}/{uuid.uuid4().hex}.tmp"

    # ---- reads ---------------------------------------------------------------------------

    def _status(self, path: str, what: str) -> JsonObject:
        status: JsonObject = self._http.call("GET", path, "GETFILESTATUS", what)["FileStatus"]
        return status

    def head(self, key: str) -> ObjectInfo:
        what = self._what("head", key)
        status = self._status(self._path(key), what)
        if status.get("type") != "FILE":
            raise NotFound(f"{what}: not a file")
        return ObjectInfo(
            key, int(status["length"]), int(status["modificationTime"]), _token(status)
        )

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        """One level, in batches (LISTSTATUS_BATCH, as large as the namenode's
        dfs.ls.limit), until `limit` entries are held or the directory ends."""
        what = self._what("list", prefix)
        path = self._path(prefix)
        entries: list[JsonObject] = []
        after = ""
        while True:
            params = {"startAfter": after} if after else {}
            try:
                reply = self._http.call("GET", path, "LISTSTATUS_BATCH", what, params)
            except NotFound:
                return Listing([], [])
            listing = reply["DirectoryListing"]
            batch: list[JsonObject] = listing["partialListing"]["FileStatuses"]["FileStatus"]
            if any(s["pathSuffix"] == "" for s in batch):
                return Listing([], [])  # a file, not a directory
            entries.extend(batch)
            if not batch or int(listing["remainingEntries"]) == 0:
                complete = True
                break
            if limit is not None and len(entries) > limit:
                complete = False
                break
            after = batch[-1]["pathSuffix"]
        if not prefix:
            entries = [s for s in entries if s["pathSuffix"] != HIDDEN]
        if limit is not None and len(entries) > limit:
            entries, complete = entries[:limit], False
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        for s in entries:
            key = prefix + s["pathSuffix"]
            if s["type"] == "DIRECTORY":
                prefixes.append(key)
            elif s["type"] == "FILE":
                objects.append(
                    ObjectInfo(key, int(s["length"]), int(s["modificationTime"]), _token(s))
                )
        return Listing(objects, prefixes, complete)

    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        """With `etag`, the file's status is checked after its bytes are read, not before:
        the caller's token was current before this call began, and a path's versions only
        move forward (each new file has a new modification time), so a status that still
        carries the token after the read proves the bytes read were of that version.
        Checked before, a file replaced between the check and the OPEN would be read
        unnoticed. The token also carries the length, so the read is clipped without
        asking (HDFS refuses an offset past the end)."""
        if length <= 0:
            return b""
        what = self._what("get", key)
        path = self._path(key)
        size = _size_in(etag) if etag else None
        if size is None:
            size = self.head(key).size
        try:
            data = (
                self._http.read(path, offset, min(length, size - offset), what)
                if offset < size
                else b""
            )
        except (OutOfRange, InvalidArgument) as exc:
            # Read as the token's length says, of a file since shortened.
            if etag and self.head(key).etag != etag:
                raise Conflict(f"{what}: the object changed") from exc
            raise
        if etag and self.head(key).etag != etag:
            raise Conflict(f"{what}: the object changed")
        return data

    def check(self) -> None:
        what = f"mount {self.uri} (credentials {self.credentials})"
        if self._status(self._path(""), what).get("type") != "DIRECTORY":
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
            self._http.call("PUT", path, "MKDIRS", what)
            return ObjectInfo(key, 0, int(self._status(path, what)["modificationTime"]), "")
        temporary = self._temporary()
        try:
            self._http.create(temporary, data, what)
        except ReservoirError:
            self._forget(temporary, what)
            raise
        self._publish(temporary, path, what)
        return self.head(key)

    def _publish(self, written: str, destination: str, what: str) -> None:
        """Moves a file this store wrote aside over `destination`; deletes it when that
        fails."""
        try:
            self._move(written, destination, what)
        except ReservoirError:
            self._forget(written, what)
            raise

    def _move(self, source: str, destination: str, what: str) -> None:
        """RENAME with OVERWRITE: one step, replacing any file at `destination`, whose
        parents are made first."""
        parent = str(PurePosixPath(destination).parent)
        params = {"destination": destination, "renameoptions": "OVERWRITE"}
        self._http.call("PUT", parent, "MKDIRS", what)
        try:
            self._http.call("PUT", source, "RENAME", what, params, idempotent=False)
        except NotFound:
            # The parent just made may have been pruned by a delete of its last file
            # meanwhile: made again once. A missing source is NotFound again.
            self._http.call("PUT", parent, "MKDIRS", what)
            self._http.call("PUT", source, "RENAME", what, params, idempotent=False)

    def _forget(self, path: str, what: str) -> None:
        """Deletes what a failed write left behind, if it can."""
        try:
            self._http.call("DELETE", path, "DELETE", what, {"recursive": "true"})
        except ReservoirError as exc:
            log.info("webhdfs_leftover_not_deleted", store=self.uri, error=str(exc))

    def _prune(self, directories: set[str], what: str) -> None:
        """Deletes the directories left empty above deleted or moved files (deepest
        first), as an object store's "directories" go with their last object. HDFS
        refuses to delete a directory that is not empty without `recursive`: a file
        written meanwhile keeps its directory."""
        root = self._path("")
        below = root.rstrip("/") + "/"
        done: set[str] = set()
        for directory in sorted(directories, key=lambda d: d.count("/"), reverse=True):
            while directory not in done and directory != root and directory.startswith(below):
                done.add(directory)
                try:
                    reply = self._http.call("DELETE", directory, "DELETE", what)
                except ReservoirError:
                    break  # not empty (or gone, or refused): the ones above are not empty
                if not reply.get("boolean"):
                    break
                directory = str(PurePosixPath(directory).parent)

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        upload_id = uuid.uuid4().hex
        manifest = json.dumps({"key": key, "created_ms": int(time.time() * 1000)}).encode()
        what = self._what("start upload of", key)
        self._http.create(f"{self._upload_dir(upload_id)}/{_MANIFEST}", manifest, what)
        return upload_id

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        what = self._what(f"upload part {number} of", key)
        if not 1 <= number <= _LIMITS.max_parts:
            raise InvalidArgument(f"{what}: part numbers are 1 to {_LIMITS.max_parts}")
        directory = self._upload_dir(upload_id)
        # CREATE makes missing parents: without this check a part sent after an abort
        # would bring the upload's directory back.
        try:
            self._status(f"{directory}/{_MANIFEST}", what)
        except NotFound as exc:
            raise NotFound(f"{what}: no upload {upload_id} (completed or aborted)") from exc
        path = f"{directory}/{number:05d}"
        self._http.create(path, data, what)
        return Part(number, _token(self._status(path, what)))

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        what = self._what("complete upload of", key)
        directory = self._upload_dir(upload_id)
        try:
            listed = self._http.call("GET", directory, "LISTSTATUS", what)
        except NotFound as exc:
            raise NotFound(f"{what}: no upload {upload_id} (completed or aborted)") from exc
        held = {s["pathSuffix"]: s for s in listed["FileStatuses"]["FileStatus"]}
        numbers = [p.number for p in parts]
        if numbers != sorted(set(numbers)):
            raise InvalidArgument(f"{what}: parts must be in ascending order, each once")
        names = [f"{p.number:05d}" for p in parts]
        if not parts:
            target = self._temporary()
            self._http.create(target, b"", what)
        elif names[1:] and all(n not in held for n in names[1:]) and names[0] in held:
            # A completion asked again after its CONCAT: the first part holds them all.
            total = sum(_size_in(p.etag) or 0 for p in parts)
            if int(held[names[0]]["length"]) != total:
                raise Conflict(f"{what}: parts of upload {upload_id} are missing")
            target = f"{directory}/{names[0]}"
        else:
            for part, name in zip(parts, names, strict=True):
                if name not in held:
                    raise InvalidArgument(f"{what}: part {part.number} was never uploaded")
                if _token(held[name]) != part.etag:
                    raise Conflict(f"{what}: part {part.number} is not the one uploaded")
            # HDFS refuses to concatenate an empty file: empty parts add nothing anyway.
            filled = [f"{directory}/{n}" for n in names if int(held[n]["length"]) > 0]
            target = filled[0] if filled else f"{directory}/{names[0]}"
            if len(filled) > 1:
                self._http.call(
                    "POST",
                    target,
                    "CONCAT",
                    what,
                    {"sources": ",".join(filled[1:])},
                    idempotent=False,
                )
        self._publish(target, self._path(key), what)
        self._forget(directory, what)
        return self.head(key)

    def abort_upload(self, key: str, upload_id: str) -> None:
        what = self._what("abort upload of", key)
        self._http.call(
            "DELETE", self._upload_dir(upload_id), "DELETE", what, {"recursive": "true"}
        )

    def open_uploads(self, key: str) -> Keys:
        what = self._what("list uploads of", key)
        try:
            listed = self._http.call("GET", self.root + HIDDEN, "LISTSTATUS", what)
        except NotFound:
            return []
        ids: Keys = []
        for status in listed["FileStatuses"]["FileStatus"]:
            if status["type"] != "DIRECTORY":
                continue
            upload_id = status["pathSuffix"]
            try:
                manifest = self._http.read(
                    f"{self._upload_dir(upload_id)}/{_MANIFEST}", 0, 1 << 16, what
                )
                named: Any = json.loads(manifest).get("key")
            except (NotFound, ValueError, AttributeError):
                continue  # being created or removed, or not ours
            if named == key:
                ids.append(upload_id)
        return ids

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        """OPEN and CREATE (HDFS has no server-side copy), into a temporary file renamed
        onto `destination`; Conflict when the source is not, or stops being during the
        copy, the version `if_match` names."""
        what = f"copy {self.uri_of(source)} to {self.uri_of(destination)} (credentials {self.credentials})"
        before = self.head(source)
        if if_match and before.etag != if_match:
            raise Conflict(f"{what}: the source changed")
        temporary = self._temporary()
        self._http.copy(self._path(source), temporary, before.size, what)
        try:
            if self.head(source).etag != before.etag:
                raise Conflict(f"{what}: the source changed while it was copied")
        except (Conflict, NotFound):
            self._forget(temporary, what)
            raise
        self._publish(temporary, self._path(destination), what)
        return self.head(destination)

    def rename(self, source: str, destination: str) -> ObjectInfo:
        what = f"rename {self.uri_of(source)} to {self.uri_of(destination)} (credentials {self.credentials})"
        path = self._path(source)
        self._move(path, self._path(destination), what)
        self._prune({str(PurePosixPath(path).parent)}, what)
        return self.head(destination)

    def delete(self, keys: Keys) -> None:
        """DELETE of each file ({"boolean": false} for one already gone) and directory
        marker (only when empty), then of the directories they leave empty."""
        what = self._what("delete from", "")
        emptied: set[str] = set()
        for key in keys:
            path = self._path(key)
            try:
                self._http.call("DELETE", path, "DELETE", self._what("delete", key))
            except InvalidArgument:
                if key.endswith("/"):
                    continue  # a directory marker over a directory that is not empty
                raise
            emptied.add(str(PurePosixPath(path).parent))
        self._prune(emptied, what)
