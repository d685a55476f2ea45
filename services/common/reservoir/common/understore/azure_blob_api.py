"""The calls of Azure Blob's REST API that az:// and abfs:// mounts make themselves (obstore
has none of them, or would cut a directory marker's trailing '/' from its name): List
Blobs, Put Blob for markers, Delete Blob, Copy Blob, Put Block and Put Block List. Names
here are the container's full blob names; `azure_under_store.py` maps keys to them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import quote, urlencode, urlsplit
from xml.etree import ElementTree as ET
from xml.sax.saxutils import escape

from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.rest_calls import Answer, RestCalls

_PAGE = 5000  # List Blobs' largest page


class AzureBlobApi:
    def __init__(self, rest: RestCalls, base_url: str, container: str, copy_wait_s: float) -> None:
        """`copy_wait_s`: how long a copy Azure finishes later is waited for."""
        self._rest = rest
        self._copy_wait_s = copy_wait_s
        self._base_url = base_url
        self._base_path = urlsplit(base_url).path.rstrip("/")
        self._container_path = f"{self._base_path}/{container}"

    def _path(self, name: str, query: str = "") -> str:
        path = f"{self._container_path}/{quote(name, safe='/')}"
        return f"{path}?{query}" if query else path

    def _ok(self, answer: Answer, what: str) -> Answer:
        if not answer.ok:
            raise self._rest.status_error(answer, what)
        return answer

    def pages(
        self, prefix: str, delimiter: bool, what: str, page_size: int = _PAGE
    ) -> Iterator[ET.Element]:
        """List Blobs below `prefix`, one level (`delimiter`) or all, a page at a time."""
        query = {"restype": "container", "comp": "list", "prefix": prefix}
        query["maxresults"] = str(min(page_size, _PAGE))
        if delimiter:
            query["delimiter"] = "/"
        while True:
            answer = self._rest.call("GET", f"{self._container_path}?{urlencode(query)}", what)
            page = ET.fromstring(self._ok(answer, what).body)
            yield page
            following = page.findtext("NextMarker") or ""
            if not following:
                return
            query["marker"] = following

    def put_blob(self, name: str, data: bytes, metadata: ObjectMetadata, what: str) -> Answer:
        """Put Blob: a block blob of `data`, whole, its name kept as given."""
        headers = {"x-ms-blob-type": "BlockBlob", **blob_headers(metadata)}
        return self._ok(self._rest.call("PUT", self._path(name), what, data, headers), what)

    def delete_blob(self, name: str, what: str) -> None:
        """Delete Blob; a missing blob is not an error."""
        answer = self._rest.call("DELETE", self._path(name), what)
        if not answer.ok and answer.status != 404:
            raise self._rest.status_error(answer, what)

    def copy_blob(self, source: str, destination: str, if_match: str, what: str) -> None:
        """Copy Blob within the account (with `if_match`, only of the source with that
        ETag), waited for within the request deadline when Azure finishes it later."""
        source_url = self._base_url + self._path(source)[len(self._base_path) :]
        headers = {"x-ms-copy-source": source_url}
        if if_match:
            headers["x-ms-source-if-match"] = f'"{if_match.strip(chr(34))}"'
        answer = self._rest.call("PUT", self._path(destination), what, headers=headers)
        if self._ok(answer, what).headers.get("x-ms-copy-status", "success") == "success":
            return
        deadline = time.monotonic() + self._copy_wait_s
        while time.monotonic() < deadline:
            answer = self._rest.call("HEAD", self._path(destination), what)
            status = answer.headers.get("x-ms-copy-status", "success")
            if status == "success":
                return
            if status != "pending":
                raise self._rest.status_error(answer, f"{what} ({status})")
            time.sleep(0.2)
        raise self._rest.status_error(answer, f"{what}: not finished in time")

    def put_block(self, name: str, block_id: str, data: bytes, what: str) -> None:
        """Put Block: one uncommitted block of the blob `name`."""
        query = f"comp=block&blockid={quote(block_id, safe='')}"
        self._ok(self._rest.call("PUT", self._path(name, query), what, body=data), what)

    def put_block_list(
        self, name: str, block_ids: list[str], metadata: ObjectMetadata, what: str
    ) -> None:
        """Put Block List: the blob made of these blocks, in order, visible whole at once."""
        blocks = "".join(f"<Latest>{escape(block)}</Latest>" for block in block_ids)
        body = f'<?xml version="1.0" encoding="utf-8"?><BlockList>{blocks}</BlockList>'
        headers = {"Content-Type": "application/xml", **blob_headers(metadata)}
        answer = self._rest.call(
            "PUT", self._path(name, "comp=blocklist"), what, body.encode(), headers
        )
        self._ok(answer, what)


def blob_headers(metadata: ObjectMetadata) -> dict[str, str]:
    """The headers of Put Blob and Put Block List that set the blob's properties and
    metadata."""
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
