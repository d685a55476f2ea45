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
from urllib.parse import quote, urlsplit
from xml.etree import ElementTree as ET

from reservoir.common.errors import InvalidArgument, NotFound
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.azure_blob_api import AzureBlobApi
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
        endpoint = endpoint_url or f"{account}.blob.core.windows.net"
        super().__init__(
            f"{scheme}://{parts.netloc}/{prefix}",
            self._open(base_url, settings),
            settings,
            endpoint=endpoint,
            credential_source=credential_source,
        )
        rest = RestCalls(
            base_url,
            settings,
            endpoint=endpoint,
            credential_source=credential_source,
            sign=self._key.sign if self._key is not None else None,
        )
        self._api = AzureBlobApi(rest, base_url, container, settings.request_timeout_s)
        self._blobs = f"{base_url}/{container}/"
        self._get_directly()

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

    def _get_request(self, key: str, token: str, headers: dict[str, str]) -> str:
        """A blob read with the ETag as If-Match, signed with the account key (SharedKey,
        over the Range and If-Match too), or unsigned for an anonymous store."""
        url = self._blobs + quote(self.prefix + key, safe="/")
        if token:
            headers["If-Match"] = f'"{token}"'
        if self._key is not None:
            self._key.sign("GET", urlsplit(url).path, headers)
        return url

    def limits(self) -> StoreLimits:
        # Blocks of any size down to one byte, up to Azure's block and block-count bounds.
        return StoreLimits(
            writes=True, min_part_size=1, max_part_size=MAX_BLOCK_SIZE, max_parts=MAX_BLOCKS
        )

    # ---- listings: List Blobs, whose names obstore would cut -----------------------

    def _pages(self, prefix: str, delimiter: bool, page_size: int = 5000) -> Iterator[ET.Element]:
        """List Blobs below `prefix` (a full name), a page at a time."""
        what = f"list {self.uri_of(prefix[len(self.prefix) :])}"
        return self._api.pages(prefix, delimiter, what, page_size)

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
        answer = self._api.put_blob(self.prefix + key, data, metadata, f"put {self.uri_of(key)}")
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
            self._api.delete_blob(self.prefix + key, f"delete {self.uri_of(key)}")

    # ---- copies ------------------------------------------------------------------------

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        """Copy Blob within the account; with `if_match`, only of the source with that
        ETag (Conflict when it has another)."""
        what = f"copy {self.uri_of(source)} to {self.uri_of(destination)}"
        self._api.copy_blob(self.prefix + source, self.prefix + destination, if_match, what)
        return self.head(destination)

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
        self._api.put_block(self.prefix + key, block, data, what)
        return Part(number, block)

    def complete_upload(
        self, key: str, upload_id: str, parts: Parts, metadata: ObjectMetadata = NO_METADATA
    ) -> ObjectInfo:
        what = f"complete upload of {self.uri_of(key)}"
        if not parts:
            info = self.put(key, b"", metadata)
        else:
            blocks = [
                self._block_id(upload_id, p.number) for p in sorted(parts, key=lambda p: p.number)
            ]
            self._api.put_block_list(self.prefix + key, blocks, metadata, what)
            info = self.head(key)
        self.delete([self._marker_dir(key) + upload_id])
        return info

    def abort_upload(self, key: str, upload_id: str) -> None:
        self.delete([self._marker_dir(key) + upload_id])

    def open_uploads(self, key: str) -> Keys:
        marker_dir = self._marker_dir(key)
        return sorted(name[len(marker_dir) :] for name in self._hidden_below(marker_dir))
