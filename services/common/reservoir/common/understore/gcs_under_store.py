"""Google Cloud Storage: `gs://bucket/prefix/`.

Credentials: `gcs_credentials.py` (a service account's self-signed tokens, or none).

The change token is the object's generation. obstore's HEAD reports it, its listing does
not (the JSON API's `etag` there is not the XML API's ETag either, so ETags would not
match between a listing and a HEAD), so listings are made here through the JSON API
(`gcs_json_api.py`), whose items carry `generation`. A read names the generation; one
that was overwritten is gone (404), which a HEAD then tells apart from a deleted object
(Conflict, not NotFound).

Writes go through the JSON API too (uploads, rewrites, compose, deletes): obstore writes
with the XML API's plain PUT, which fake-gcs-server (the tests' emulator) does not take,
and cuts a directory marker's trailing '/'. Multipart uploads
keep their parts as hidden objects `.reservoir-uploads/<key hash>/<upload id>/part-NNNNN`
(any process may upload one), with an empty `upload` marker for `open_uploads`;
completion composes them into the object with the JSON API's compose, at most 32 sources
a call, in rounds through intermediate objects beside the parts. The object appears
whole in one step (the last compose); the hidden objects are deleted after.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from reservoir.common.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    ReservoirError,
)
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.gcs_credentials import GoogleToken
from reservoir.common.understore.gcs_json_api import GcsJsonApi, Sources
from reservoir.common.understore.obstore_under_store import (
    UPLOADS,
    ObstoreUnderStore,
    client_options,
    hidden,
    retry_config,
)
from reservoir.common.understore.rest_calls import RestCalls
from reservoir.common.understore.under_store import (
    NO_METADATA,
    Keys,
    Listing,
    ObjectInfo,
    ObjectPage,
    Part,
    Parts,
    StoreLimits,
    UnderStoreSettings,
)

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._\-]{1,221}[a-z0-9]$")
# Compose takes at most 32 sources a call; an object is at most 5 TiB.
MAX_COMPOSE_SOURCES = 32
MAX_OBJECT_SIZE = 5 * 1024**4


class GcsUnderStore(ObstoreUnderStore):
    def __init__(self, uri: str, settings: UnderStoreSettings) -> None:
        parts = urlsplit(uri)
        bucket = parts.netloc
        if not _BUCKET.match(bucket):
            raise InvalidArgument(f"bad GCS bucket name in {uri!r}")
        prefix = parts.path.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        credential_source = settings.credentials or "env"
        self._tokens = GoogleToken(credential_source)
        base_url = settings.endpoint_url.rstrip("/") or "https://storage.googleapis.com"
        endpoint = settings.endpoint_url or "storage.googleapis.com"
        self.bucket = bucket
        self.prefix = prefix
        from obstore.store import GCSStore

        store = GCSStore(
            bucket,
            prefix=prefix.rstrip("/") or None,
            config={"base_url": base_url},
            client_options=client_options(settings, base_url),  # type: ignore[arg-type]
            retry_config=retry_config(settings),  # type: ignore[arg-type]
            credential_provider=self._tokens,  # type: ignore[arg-type]
        )
        super().__init__(
            f"gs://{bucket}/{prefix}",
            store,
            settings,
            endpoint=endpoint,
            credential_source=credential_source,
        )
        self._rest = RestCalls(
            base_url,
            settings,
            endpoint=endpoint,
            credential_source=credential_source,
            sign=self._authorize,
        )
        self._api = GcsJsonApi(self._rest, base_url, bucket)
        self._objects = f"{base_url}/{quote(bucket, safe='')}/"
        self._get_directly()

    def limits(self) -> StoreLimits:
        # Compose takes sources of any size; rounds of 32 lift the per-call bound.
        return StoreLimits(
            writes=True, min_part_size=1, max_part_size=MAX_OBJECT_SIZE, max_parts=10_000
        )

    def _get_request(self, key: str, token: str, headers: dict[str, str]) -> str:
        """A read as obstore makes it (the XML API: `/bucket/object`, the generation in
        the query), with the store's bearer token."""
        url = self._objects + quote(self.prefix + key, safe="/")
        if token:
            url += f"?generation={quote(token, safe='')}"
        self._authorize("GET", urlsplit(url).path, headers)
        return url

    def _authorize(self, method: str, path: str, headers: dict[str, str]) -> None:
        token = self._tokens.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"

    # ---- the change token: the generation --------------------------------------------

    def _token(self, meta: Any) -> str:
        return str(meta.get("version") or "")

    def _read_options(self, token: str) -> dict[str, Any]:
        return {"version": token}

    def _stale(self, key: str, token: str, error: ReservoirError, what: str) -> ReservoirError:
        if not isinstance(error, NotFound):
            return error
        try:
            self.head(key)
        except NotFound:
            return error
        return Conflict(f"{what}: the object changed (generation {token} is gone)")

    # ---- the JSON API ----------------------------------------------------------------

    def _item(self, item: dict[str, Any]) -> ObjectInfo:
        updated = datetime.fromisoformat(item["updated"].replace("Z", "+00:00"))
        return ObjectInfo(
            key=item["name"][len(self.prefix) :],
            size=int(item.get("size", 0)),
            # Whole seconds, as a HEAD's Last-Modified has it: one object, one mtime.
            mtime_ms=int(updated.timestamp()) * 1000,
            etag=str(item.get("generation", "")),
        )

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        complete = True
        page_size = min(1000, limit) if limit is not None else 1000
        for page in self._api.pages(self.prefix + prefix, True, page_size):
            for item in page.get("items", ()):
                info = self._item(item)
                if info.key != prefix and not hidden(info.key):
                    objects.append(info)
            for common in page.get("prefixes", ()):
                rel = common[len(self.prefix) :]
                if not hidden(rel):
                    prefixes.append(rel.rstrip("/"))
            if limit is not None and len(objects) + len(prefixes) >= limit:
                complete = not page.get("nextPageToken")
                break
        return Listing(objects, prefixes, complete)

    def walk(self, prefix: str) -> Iterator[ObjectPage]:
        for page in self._api.pages(self.prefix + prefix, False):
            infos = [self._item(item) for item in page.get("items", ())]
            kept = [info for info in infos if not hidden(info.key)]
            if kept:
                yield kept

    def check(self) -> None:
        next(self._api.pages(self.prefix, True, 1))

    # ---- writes ----------------------------------------------------------------------

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        return self._item(
            self._api.upload(self.prefix + key, data, metadata, f"put {self.uri_of(key)}")
        )

    def delete(self, keys: Keys) -> None:
        """One JSON API delete each (obstore would cut a directory marker's trailing
        '/'); a missing object is not an error."""
        for key in keys:
            self._api.delete(self.prefix + key, f"delete {self.uri_of(key)}")

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        """A rewrite within the bucket; with `if_match`, only of the source's generation
        `if_match` (Conflict when it has another)."""
        what = f"copy {self.uri_of(source)} to {self.uri_of(destination)}"
        try:
            resource = self._api.rewrite(
                self.prefix + source, self.prefix + destination, if_match, what
            )
        except (NotFound, Conflict, InvalidArgument) as exc:
            if not if_match:
                raise
            # An old generation is gone (404) or refused (412, or 400 by the emulator).
            current = self.head(source)  # NotFound when the source is gone
            if current.etag != if_match:
                raise Conflict(
                    f"{what}: the source changed (generation {if_match} is gone)"
                ) from exc
            raise
        return self._item(resource)

    # ---- multipart: hidden parts, composed -------------------------------------------

    @staticmethod
    def _uploads_of(key: str) -> str:
        return f"{UPLOADS}{hashlib.sha256(key.encode()).hexdigest()[:32]}/"

    def _upload_dir(self, key: str, upload_id: str) -> str:
        if not re.fullmatch(r"[0-9a-f]{32}", upload_id):
            raise InvalidArgument(f"{self.uri_of(key)}: bad upload id {upload_id!r}")
        return f"{self._uploads_of(key)}{upload_id}/"

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        upload_id = uuid.uuid4().hex
        self.put(self._upload_dir(key, upload_id) + "upload", b"")
        return upload_id

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        what = f"upload part {number} of {self.uri_of(key)}"
        if not 1 <= number <= 99_999:
            raise InvalidArgument(f"{what}: bad part number")
        directory = self._upload_dir(key, upload_id)
        try:
            self.head(directory + "upload")
        except NotFound:
            raise NotFound(f"{what}: no such upload (completed or aborted)") from None
        info = self.put(f"{directory}part-{number:05d}", data)
        return Part(number, info.etag)

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        directory = self._upload_dir(key, upload_id)
        stored = {info.key: info.etag for page in self._hidden_pages(directory) for info in page}
        if directory + "upload" not in stored:
            raise NotFound(f"complete upload of {self.uri_of(key)}: no such upload")
        sources: Sources = []
        for part in sorted(parts, key=lambda p: p.number):
            name = f"{directory}part-{part.number:05d}"
            # Checked before anything is composed: a part missing or sent again since
            # publishes nothing (GCS checks the generations again as it composes).
            if stored.get(name) != part.etag:
                raise Conflict(
                    f"complete upload of {self.uri_of(key)}: part {part.number} is not the "
                    "one uploaded"
                )
            sources.append((name, part.etag))
        if not parts:
            info = self.put(key, b"", metadata)
        else:
            round_number = 0
            while len(sources) > MAX_COMPOSE_SOURCES:
                round_number += 1
                sources = [
                    self._compose(
                        sources[start : start + MAX_COMPOSE_SOURCES],
                        f"{directory}round-{round_number}-{start // MAX_COMPOSE_SOURCES:05d}",
                        NO_METADATA,
                    )
                    for start in range(0, len(sources), MAX_COMPOSE_SOURCES)
                ]
            self._compose(sources, key, metadata)
            info = self.head(key)
        # The parts, the marker and any intermediate composite.
        self.delete(self._hidden_below(directory))
        return info

    def _compose(
        self, sources: Sources, destination: str, metadata: ObjectMetadata
    ) -> tuple[str, str]:
        full = [(self.prefix + name, generation) for name, generation in sources]
        what = f"compose {self.uri_of(destination)}"
        reply = self._api.compose(full, self.prefix + destination, metadata, what)
        return destination, str(reply.get("generation", ""))

    def _hidden_pages(self, directory: str) -> Iterator[ObjectPage]:
        """The objects below a hidden directory (which `walk` leaves out)."""
        for page in self._api.pages(self.prefix + directory, False):
            yield [self._item(item) for item in page.get("items", ())]

    def _hidden_below(self, directory: str) -> Keys:
        return [info.key for page in self._hidden_pages(directory) for info in page]

    def abort_upload(self, key: str, upload_id: str) -> None:
        self.delete(self._hidden_below(self._upload_dir(key, upload_id)))

    def open_uploads(self, key: str) -> Keys:
        below = self._uploads_of(key)
        found = {
            name[len(below) :].split("/", 1)[0]
            for name in self._hidden_below(below)
            if name.endswith("/upload")
        }
        return sorted(found)
