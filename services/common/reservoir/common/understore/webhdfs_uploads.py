"""Multipart uploads of the webhdfs:// store, kept in HDFS so that any process may send a
part: `.reservoir-uploads/<id>/` below the mount's root holds `upload.json` (the key, and
when the upload began) and one file per part (`00001`, ...). Completing an upload CONCATs
its parts into the first (HDFS joins files of one directory in place, copying nothing),
which the store then renames onto the key; aborting deletes the directory."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from reservoir.common.errors import Conflict, InvalidArgument, NotFound
from reservoir.common.understore.under_store import Keys, Part, Parts
from reservoir.common.understore.webhdfs_files import HdfsFiles, size_in, token_of

MANIFEST = "upload.json"
_MANIFEST_BYTES = 1 << 16


class HdfsUploads:
    def __init__(self, files: HdfsFiles, directory: str, max_parts: int) -> None:
        """`directory`: the absolute path of the hidden directory the uploads are in."""
        self._files = files
        self.directory = directory
        self._max_parts = max_parts

    def path_of(self, upload_id: str) -> str:
        if not upload_id or not upload_id.isalnum():
            raise InvalidArgument(f"bad upload id {upload_id!r}")
        return f"{self.directory}/{upload_id}"

    def temporary(self) -> str:
        """A new path for a file written aside, out of every listing."""
        return f"{self.directory}/{uuid.uuid4().hex}.tmp"

    def create(self, key: str, what: str) -> str:
        upload_id = uuid.uuid4().hex
        manifest = json.dumps({"key": key, "created_ms": int(time.time() * 1000)}).encode()
        self._files.create(f"{self.path_of(upload_id)}/{MANIFEST}", manifest, what)
        return upload_id

    def upload_part(self, upload_id: str, number: int, data: bytes, what: str) -> Part:
        if not 1 <= number <= self._max_parts:
            raise InvalidArgument(f"{what}: part numbers are 1 to {self._max_parts}")
        directory = self.path_of(upload_id)
        # CREATE makes missing parents: unchecked, a part sent after an abort would bring
        # the upload's directory back.
        try:
            self._files.status(f"{directory}/{MANIFEST}", what)
        except NotFound as exc:
            raise NotFound(f"{what}: no upload {upload_id} (completed or aborted)") from exc
        path = f"{directory}/{number:05d}"
        self._files.create(path, data, what)
        return Part(number, token_of(self._files.status(path, what)))

    def join(self, key: str, upload_id: str, parts: Parts, what: str) -> str:
        """The path of one file holding the parts in order, in the upload's directory;
        Conflict or InvalidArgument when a part is not the one uploaded."""
        directory = self.path_of(upload_id)
        if self._key_of(upload_id, what) != key:
            raise NotFound(f"{what}: no upload {upload_id} of this key")
        numbers = [p.number for p in parts]
        if numbers != sorted(set(numbers)):
            raise InvalidArgument(f"{what}: parts must be in ascending order, each once")
        if not parts:
            empty = f"{directory}/00000"
            self._files.create(empty, b"", what)
            return empty
        held = {s["pathSuffix"]: s for s in self._files.children(directory, what)}
        names = [f"{p.number:05d}" for p in parts]
        first = f"{directory}/{names[0]}"
        if names[1:] and names[0] in held and all(n not in held for n in names[1:]):
            # A completion asked again after its CONCAT: the first part holds them all.
            if int(held[names[0]]["length"]) != sum(size_in(p.etag) or 0 for p in parts):
                raise Conflict(f"{what}: parts of upload {upload_id} are missing")
            return first
        for part, name in zip(parts, names, strict=True):
            if name not in held:
                raise InvalidArgument(f"{what}: part {part.number} was never uploaded")
            if token_of(held[name]) != part.etag:
                raise Conflict(f"{what}: part {part.number} is not the one uploaded")
        # HDFS refuses to CONCAT an empty file: an empty part adds nothing anyway.
        filled = [f"{directory}/{n}" for n in names if int(held[n]["length"]) > 0]
        if len(filled) > 1:
            self._files.concat(filled[0], filled[1:], what)
        return filled[0] if filled else first

    def drop(self, upload_id: str, what: str) -> None:
        """Deletes the upload's directory; one already gone is not an error."""
        self._files.delete(self.path_of(upload_id), what, recursive=True)

    def open_ids(self, key: str, what: str) -> Keys:
        try:
            entries = self._files.children(self.directory, what)
        except NotFound:
            return []
        ids: Keys = []
        for status in entries:
            upload_id = status["pathSuffix"]
            if status["type"] != "DIRECTORY" or not upload_id.isalnum():
                continue  # a file written aside
            try:
                if self._key_of(upload_id, what) == key:
                    ids.append(upload_id)
            except NotFound:
                continue  # completed or aborted meanwhile
        return ids

    def _key_of(self, upload_id: str, what: str) -> Any:
        """The key an upload's manifest names; NotFound when there is no such upload."""
        path = f"{self.path_of(upload_id)}/{MANIFEST}"
        try:
            manifest = json.loads(self._files.read(path, 0, _MANIFEST_BYTES, what))
        except NotFound as exc:
            raise NotFound(f"{what}: no upload {upload_id} (completed or aborted)") from exc
        except ValueError as exc:
            raise NotFound(f"{what}: upload {upload_id} has no readable manifest") from exc
        return manifest.get("key") if isinstance(manifest, dict) else None
