"""Azure Blob Storage: `az://container/prefix/`, and
`abfs[s]://container@account.dfs.core.windows.net/prefix/` (the same blobs, named as
Hadoop's ABFS driver names them).

Credentials: `azure_credentials.py` (the account's shared key, or none). The account is
the abfs URI's, else the endpoint URL's path (Azurite's `http://HOST:PORT/ACCOUNT`), else
the credentials'.

The change token is the blob's ETag. Multipart uploads are Azure's own block blobs: any
process puts blocks (`PUT ?comp=block`, ids prefixed by the upload id), the one that
completes commits their list (`PUT ?comp=blocklist`), which makes the blob visible whole
at once. Azure keeps no list of uploads, so `create_upload` leaves an empty marker blob
under `.reservoir-uploads/` and `open_uploads` lists those; abort and complete delete it.
(The blob's uncommitted block list would not do: it names no upload that has no block
yet, and still names an aborted one until the blocks expire.)
Uncommitted blocks need no deleting: Azure drops them after a week, or when any block
list of the blob is committed (so of two uploads to one key, the first to complete wins
and the other's parts are gone).
"""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from collections.abc import Iterator
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

from reservoir.common.errors import InvalidArgument, NotFound
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.azure_credentials import account_key_of
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

_CONTAINER = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")
_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
# Azure's block blob rules: a block of up to 4000 MiB, at most 50,000 blocks per blob.
MAX_BLOCK_SIZE = 4000 * 1024 * 1024
MAX_BLOCKS = 50_000


class AzureUnderStore(ObstoreUnderStore):
    def __init__(self, uri: str, settings: UnderStoreSettings) -> None:
        parts = urlsplit(uri)
        scheme = parts.scheme.lower()
        uri_account = ""
        if scheme in ("abfs", "abfss"):
            container, at, host = parts.netloc.partition("@")
            uri_account = host.split(".", 1)[0].lower()
            if not at or not host.lower().endswith(".dfs.core.windows.net"):
                raise InvalidArgument(
                    f"an abfs URI is abfs://container@account.dfs.core.windows.net/prefix/, got {uri!r}"
                )
        else:
            container = parts.netloc
        if not _CONTAINER.match(container):
            raise InvalidArgument(f"bad Azure container name in {uri!r}")
        prefix = parts.path.lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        credential_source = settings.credentials or "env"
        self._key = account_key_of(credential_source)
        endpoint_url = settings.endpoint_url.rstrip("/")
        endpoint_account = urlsplit(endpoint_url).path.strip("/") if endpoint_url else ""
        account = uri_account or endpoint_account or (self._key.account if self._key else "")
        if not _ACCOUNT.match(account):
            raise InvalidArgument(
                f"{uri}: no storage account (an abfs URI's, the endpoint URL's path, or the "
                "credentials' account name)"
            )
        if self._key is not None and self._key.account != account:
            raise InvalidArgument(
                f"{uri}: the credentials are for storage account {self._key.account!r}, "
                f"the mount's is {account!r}"
            )
        base_url = endpoint_url or f"https://{account}.blob.core.windows.net"
        self.account = account
        self.container = container
        self.prefix = prefix
        self._base_path = urlsplit(base_url).path.rstrip("/")
        self._base_url = base_url
        endpoint = endpoint_url or f"{account}.blob.core.windows.net"
        super().__init__(
            f"{scheme}://{parts.netloc}/{prefix}",
            self._open(base_url, settings),
            settings,
            endpoint=endpoint,
            credential_source=credential_source,
        )
        self._rest = RestCalls(
            base_url,
            settings,
            endpoint=endpoint,
            credential_source=credential_source,
            sign=self._key.sign if self._key is not None else None,
        )

    def _open(self, base_url: str, settings: UnderStoreSettings) -> Any:
        from obstore.store import AzureStore

        config: dict[str, Any] = {"account_name": self.account, "endpoint": base_url}
        if self._key is None:
            config["skip_signature"] = True
        else:
            config["account_key"] = self._key.key
        return AzureStore(
            self.container,
            prefix=self.prefix.rstrip("/") or None,
            config=config,  # type: ignore[arg-type]
            client_options=client_options(settings, base_url),  # type: ignore[arg-type]
            retry_config=retry_config(settings),  # type: ignore[arg-type]
        )

    def limits(self) -> StoreLimits:
        # Blocks of any size down to one byte, up to Azure's block and block-count bounds.
        return StoreLimits(
            writes=True, min_part_size=1, max_part_size=MAX_BLOCK_SIZE, max_parts=MAX_BLOCKS
        )

    def _path(self, key: str, query: str = "") -> str:
        path = f"{self._base_path}/{self.container}/{quote(self.prefix + key, safe='/')}"
        return f"{path}?{query}" if query else path

    # ---- listings: List Blobs, whose names obstore would cut -----------------------

    def _pages(self, prefix: str, delimiter: bool, page_size: int = 5000) -> Iterator[ET.Element]:
        """List Blobs below `prefix` (a full name), a page at a time. Made here, not by
        obstore, which cuts a directory marker's trailing '/' from the names it lists."""
        query = {"restype": "container", "comp": "list", "prefix": prefix}
        query["maxresults"] = str(page_size)
        if delimiter:
            query["delimiter"] = "/"
        what = f"list {self.uri_of(prefix[len(self.prefix) :])}"
        path = f"{self._base_path}/{self.container}"
        while True:
            answer = self._rest.call("GET", f"{path}?{urlencode(query)}", what)
            if not answer.ok:
                raise self._rest.status_error(answer, what)
            page = ET.fromstring(answer.body)
            yield page
            following = page.findtext("NextMarker") or ""
            if not following:
                return
            query["marker"] = following

    def _blob(self, blob: ET.Element) -> ObjectInfo:
        properties = blob.find("Properties")
        assert properties is not None
        modified = parsedate_to_datetime(properties.findtext("Last-Modified") or "")
        return ObjectInfo(
            key=(blob.findtext("Name") or "")[len(self.prefix) :],
            size=int(properties.findtext("Content-Length") or 0),
            mtime_ms=int(modified.timestamp() * 1000),
            etag=(properties.findtext("Etag") or "").strip('"'),
        )

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        complete = True
        page_size = min(5000, limit) if limit is not None else 5000
        for page in self._pages(self.prefix + prefix, True, page_size):
            for blob in page.iter("Blob"):
                info = self._blob(blob)
                if info.key != prefix and not hidden(info.key):
                    objects.append(info)
            for common in page.iter("BlobPrefix"):
                rel = (common.findtext("Name") or "")[len(self.prefix) :]
                if not hidden(rel):
                    prefixes.append(rel.rstrip("/"))
            if limit is not None and len(objects) + len(prefixes) >= limit:
                complete = not page.findtext("NextMarker")
                break
        return Listing(objects, prefixes, complete)

    def walk(self, prefix: str) -> Iterator[ObjectPage]:
        for page in self._pages(self.prefix + prefix, False):
            infos = [self._blob(blob) for blob in page.iter("Blob")]
            kept = [info for info in infos if not hidden(info.key)]
            if kept:
                yield kept

    def _hidden_below(self, directory: str) -> Keys:
        return [
            self._blob(blob).key
            for page in self._pages(self.prefix + directory, False)
            for blob in page.iter("Blob")
        ]

    # ---- objects named as directories, deletes ---------------------------------------

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        """Through obstore, but for a directory marker (a key ending in '/'), whose name
        obstore would cut to the directory's: that one is a Put Blob of its own."""
        if not key.endswith("/"):
            return super().put(key, data, metadata)
        what = f"put {self.uri_of(key)}"
        headers = {"x-ms-blob-type": "BlockBlob", **_blob_headers(metadata)}
        answer = self._rest.call("PUT", self._path(key), what, data, headers)
        if not answer.ok:
            raise self._rest.status_error(answer, what)
        modified = parsedate_to_datetime(answer.headers.get("last-modified", ""))
        return ObjectInfo(
            key=key,
            size=len(data),
            mtime_ms=int(modified.timestamp() * 1000),
            etag=answer.headers.get("etag", "").strip('"'),
        )

    def delete(self, keys: Keys) -> None:
        """Delete Blob, one request each (a marker's name kept whole); a missing blob is
        not an error."""
        for key in keys:
            what = f"delete {self.uri_of(key)}"
            answer = self._rest.call("DELETE", self._path(key), what)
            if not answer.ok and answer.status != 404:
                raise self._rest.status_error(answer, what)

    # ---- copies ------------------------------------------------------------------------

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        """Copy Blob within the account; with `if_match`, only of the source with that
        ETag (Conflict when it has another)."""
        what = f"copy {self.uri_of(source)} to {self.uri_of(destination)}"
        headers = {"x-ms-copy-source": self._base_url + self._path(source)[len(self._base_path) :]}
        if if_match:
            headers["x-ms-source-if-match"] = f'"{if_match.strip(chr(34))}"'
        answer = self._rest.call("PUT", self._path(destination), what, headers=headers)
        if not answer.ok:
            raise self._rest.status_error(answer, what)
        if answer.headers.get("x-ms-copy-status", "success") != "success":
            # A copy Azure finishes later: wait for it within the request deadline.
            self._await_copy(destination, what)
        return self.head(destination)

    def _await_copy(self, key: str, what: str) -> None:
        import time

        deadline = time.monotonic() + self.settings.request_timeout_s
        while time.monotonic() < deadline:
            answer = self._rest.call("HEAD", self._path(key), what)
            status = answer.headers.get("x-ms-copy-status", "success")
            if status == "success":
                return
            if status != "pending":
                raise self._rest.status_error(answer, f"{what} ({status})")
            time.sleep(0.2)
        raise self._rest.status_error(answer, f"{what}: not finished in time")

    # ---- multipart: block blobs ------------------------------------------------------

    @staticmethod
    def _marker_dir(key: str) -> str:
        return f"{UPLOADS}{hashlib.sha256(key.encode()).hexdigest()[:32]}/"

    @staticmethod
    def _block_id(upload_id: str, number: int) -> str:
        # Every block id of a blob has one length: a 32-hex upload id and 5 digits.
        return base64.b64encode(f"{upload_id}-{number:05d}".encode()).decode()

    def create_upload(self, key: str, metadata: ObjectMetadata = NO_METADATA) -> str:
        upload_id = uuid.uuid4().hex
        ObstoreUnderStore.put(self, self._marker_dir(key) + upload_id, b"")
        return upload_id

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> Part:
        what = f"upload part {number} of {self.uri_of(key)}"
        if not re.fullmatch(r"[0-9a-f]{32}", upload_id) or not 1 <= number <= MAX_BLOCKS:
            raise InvalidArgument(f"{what}: bad upload id or part number")
        # Azure would take a block for an upload aborted or completed: its marker says
        # whether the upload is still open.
        try:
            self.head(self._marker_dir(key) + upload_id)
        except NotFound:
            raise NotFound(f"{what}: no such upload (completed or aborted)") from None
        block = self._block_id(upload_id, number)
        query = f"comp=block&blockid={quote(block, safe='')}"
        answer = self._rest.call("PUT", self._path(key, query), what, body=data)
        if not answer.ok:
            raise self._rest.status_error(answer, what)
        return Part(number, block)

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        what = f"complete upload of {self.uri_of(key)}"
        if not parts:
            info = self.put(key, b"", metadata)
        else:
            blocks = "".join(
                f"<Latest>{escape(self._block_id(upload_id, p.number))}</Latest>"
                for p in sorted(parts, key=lambda p: p.number)
            )
            body = f'<?xml version="1.0" encoding="utf-8"?><BlockList>{blocks}</BlockList>'
            headers = {"Content-Type": "application/xml"}
            headers.update(_blob_headers(metadata))
            answer = self._rest.call(
                "PUT", self._path(key, "comp=blocklist"), what, body.encode(), headers
            )
            if not answer.ok:
                raise self._rest.status_error(answer, what)
            info = self.head(key)
        self.delete([self._marker_dir(key) + upload_id])
        return info

    def abort_upload(self, key: str, upload_id: str) -> None:
        self.delete([self._marker_dir(key) + upload_id])

    def open_uploads(self, key: str) -> Keys:
        marker_dir = self._marker_dir(key)
        return sorted(name[len(marker_dir) :] for name in self._hidden_below(marker_dir))


def _blob_headers(metadata: ObjectMetadata) -> dict[str, str]:
    """The headers of Put Block List that set the blob's properties and metadata."""
    headers = {
        name: value
        for name, value in (
            ("x-ms-blob-content-type", metadata.content_type),
            ("x-ms-blob-content-encoding", metadata.content_encoding),
            ("x-ms-blob-content-disposition", metadata.content_disposition),
            ("x-ms-blob-cache-control", metadata.cache_control),
            ("x-ms-blob-content-language", metadata.content_language),
        )
        if value
    }
    headers.update({f"x-ms-meta-{name}": value for name, value in metadata.user})
    return headers
