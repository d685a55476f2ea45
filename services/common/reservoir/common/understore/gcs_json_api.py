"""The calls of GCS's JSON API that gs:// mounts make themselves (obstore has none of
them): listings whose items carry the generation, uploads, rewrites, compose, deletes.
Names here are the bucket's full object names; `gcs_under_store.py` maps keys to them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.rest_calls import RestCalls

Resource = dict[str, Any]  # an object resource, as the JSON API answers it
Sources = list[tuple[str, str]]  # (name, generation)
_FIELDS = "items(name,size,updated,generation),prefixes,nextPageToken"


class GcsJsonApi:
    def __init__(self, rest: RestCalls, base_url: str, bucket: str) -> None:
        root = urlsplit(base_url).path.rstrip("/")
        self._rest = rest
        self._bucket = bucket
        self._bucket_path = f"{root}/storage/v1/b/{quote(bucket, safe='')}"
        self._upload_path = f"{root}/upload/storage/v1/b/{quote(bucket, safe='')}"

    def _call(
        self,
        method: str,
        path: str,
        what: str,
        body: Any = None,
        query: dict[str, str] | None = None,
    ) -> Resource:
        data = b"" if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        full = path + ("?" + urlencode(query) if query else "")
        answer = self._rest.call(method, full, what, data, headers)
        if not answer.ok:
            raise self._rest.status_error(answer, what)
        reply: Resource = json.loads(answer.body) if answer.body else {}
        return reply

    def _object_path(self, name: str) -> str:
        return f"{self._bucket_path}/o/{quote(name, safe='')}"

    def pages(self, prefix: str, delimiter: bool, page_size: int = 1000) -> Iterator[Resource]:
        """The listing of the names below `prefix`, a page at a time."""
        query = {"prefix": prefix, "maxResults": str(page_size), "fields": _FIELDS}
        if delimiter:
            query["delimiter"] = "/"
        what = f"list gs://{self._bucket}/{prefix}"
        while True:
            page = self._call("GET", f"{self._bucket_path}/o", what, query=query)
            yield page
            token = page.get("nextPageToken")
            if not token:
                return
            query["pageToken"] = token

    def upload(self, name: str, data: bytes, metadata: ObjectMetadata, what: str) -> Resource:
        """One multipart/related upload: the object's metadata and its bytes."""
        resource = {"name": name, **resource_metadata(metadata)}
        boundary = uuid.uuid4().hex
        content_type = metadata.content_type or "application/octet-stream"
        body = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                json.dumps(resource).encode(),
                f"\r\n--{boundary}\r\nContent-Type: {content_type}\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        path = f"{self._upload_path}/o?uploadType=multipart"
        headers = {"Content-Type": f"multipart/related; boundary={boundary}"}
        answer = self._rest.call("POST", path, what, body, headers)
        if not answer.ok:
            raise self._rest.status_error(answer, what)
        reply: Resource = json.loads(answer.body)
        return reply

    def rewrite(self, source: str, destination: str, generation: str, what: str) -> Resource:
        """A copy within the bucket, in as many calls as GCS takes; with `generation`,
        of that generation only, and only while it is the live one."""
        path = (
            f"{self._object_path(source)}/rewriteTo/b/"
            f"{quote(self._bucket, safe='')}/o/{quote(destination, safe='')}"
        )
        query: dict[str, str] = {}
        if generation:
            query["sourceGeneration"] = generation
            query["ifSourceGenerationMatch"] = generation
        while True:
            reply = self._call("POST", path, what, {}, query)
            if reply.get("done", True):
                resource: Resource = reply["resource"]
                return resource
            query["rewriteToken"] = reply["rewriteToken"]

    def compose(
        self, sources: Sources, destination: str, metadata: ObjectMetadata, what: str
    ) -> Resource:
        """The sources (at most 32), each at its generation, as one object."""
        body = {
            "sourceObjects": [
                {"name": name, "objectPreconditions": {"ifGenerationMatch": generation}}
                for name, generation in sources
            ],
            "destination": resource_metadata(metadata),
        }
        return self._call("POST", f"{self._object_path(destination)}/compose", what, body)

    def delete(self, name: str, what: str) -> None:
        """Deletes the object; a missing one is not an error."""
        answer = self._rest.call("DELETE", self._object_path(name), what)
        if not answer.ok and answer.status != 404:
            raise self._rest.status_error(answer, what)


def resource_metadata(metadata: ObjectMetadata) -> Resource:
    """The object resource's fields that hold an object's metadata."""
    resource: Resource = {
        name: value
        for name, value in (
            ("contentType", metadata.content_type),
            ("contentEncoding", metadata.content_encoding),
            ("contentDisposition", metadata.content_disposition),
            ("cacheControl", metadata.cache_control),
            ("contentLanguage", metadata.content_language),
        )
        if value
    }
    if metadata.user:
        resource["metadata"] = dict(metadata.user)
    return resource
