"""Google Cloud Storage: `gs://bucket/prefix/`.

Credentials (`--credentials`): `env` takes the service-account JSON file named by
GOOGLE_APPLICATION_CREDENTIALS in this process's environment, `file:PATH` names one
directly; `anonymous` sends no token (public buckets, emulators). A service account signs
its own short-lived tokens (self-signed JWTs), so no token endpoint is contacted; a JSON
file with `"disable_oauth": true` (an emulator's) sends none. No other source is consulted:
obstore would otherwise ask the instance metadata service.

The change token is the object's generation. obstore's HEAD reports it, its listing does
not (the JSON API's `etag` there is not the XML API's ETag either, so ETags would not
match between a listing and a HEAD), so listings are made here through the JSON API,
whose items carry `generation`. A read names the generation; one that was overwritten is
gone (404), which a HEAD then tells apart from a deleted object (Conflict, not NotFound).

Writes go through the JSON API too (uploads, rewrites, compose): obstore writes with the
XML API's plain PUT, which the emulator the tests use does not take. Multipart uploads
keep their parts as hidden objects `.reservoir-uploads/<key hash>/<upload id>/part-NNNNN`
(any process may upload one), with an empty `upload` marker for `open_uploads`;
completion composes them into the object with the JSON API's compose, at most 32 sources
a call, in rounds through intermediate objects beside the parts. The object appears
whole in one step (the last compose); the hidden objects are deleted after.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from reservoir.common.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ReservoirError,
)
from reservoir.common.object_metadata import ObjectMetadata
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

Sources = list[tuple[str, str]]  # (name, generation)

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._\-]{1,221}[a-z0-9]$")
_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
_TOKEN_LIFETIME = timedelta(hours=1)
# Compose takes at most 32 sources a call; an object is at most 5 TiB.
MAX_COMPOSE_SOURCES = 32
MAX_OBJECT_SIZE = 5 * 1024**4
_FIELDS = "items(name,size,updated,generation),prefixes,nextPageToken"


class GoogleToken:
    """Bearer tokens from a service-account JSON file (self-signed JWTs, renewed before
    they expire); none when anonymous. Also obstore's credential provider, so reads and
    the JSON API calls made here use the same tokens."""

    def __init__(self, source: str) -> None:
        self._account: dict[str, Any] | None = None
        self._token = ""
        self._expires = datetime(2000, 1, 1, tzinfo=UTC)  # long gone: the first call signs
        self._lock = threading.Lock()
        if source == "anonymous":
            return
        if source.startswith("file:"):
            path = source[len("file:") :]
        elif source in ("", "env"):
            path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
            if not path:
                raise PermissionDenied(
                    "no Google credentials in this process's environment (credential source "
                    "'env' needs GOOGLE_APPLICATION_CREDENTIALS, a service-account JSON file)"
                )
        else:
            raise InvalidArgument(
                f"unknown credential source {source!r} (env, anonymous or file:/path)"
            )
        self._account = _read_service_account(path)

    def __call__(self) -> dict[str, Any]:
        token = self.token()
        return {"token": token, "expires_at": self._expires if token else None}

    def token(self) -> str:
        account = self._account
        if account is None or account.get("disable_oauth"):
            return ""
        with self._lock:
            now = datetime.now(UTC)
            if now < self._expires - timedelta(minutes=5):
                return self._token
            self._token = _self_signed_jwt(account, now)
            self._expires = now + _TOKEN_LIFETIME
            return self._token


def _read_service_account(path: str) -> dict[str, Any]:
    try:
        account = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PermissionDenied(f"cannot read credentials file {path}: {exc.strerror}") from exc
    except ValueError:
        raise InvalidArgument(f"credentials file {path} is not JSON") from None
    if not isinstance(account, dict):
        raise InvalidArgument(f"credentials file {path} is not a service-account JSON file")
    if account.get("disable_oauth"):
        return account
    if account.get("type") != "service_account":
        raise InvalidArgument(
            f"credentials file {path} is not a service-account key (type "
            f"{account.get('type')!r}; only 'service_account' files are taken)"
        )
    missing = [f for f in ("client_email", "private_key") if not account.get(f)]
    if missing:
        raise InvalidArgument(f"credentials file {path} lacks {' and '.join(missing)}")
    return account


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _self_signed_jwt(account: dict[str, Any], now: datetime) -> str:
    """A JWT the service account signs itself (RS256), which Google's APIs take as an
    OAuth token for the scope it names."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    header = {"alg": "RS256", "typ": "JWT"}
    if account.get("private_key_id"):
        header["kid"] = account["private_key_id"]
    issued = int(now.timestamp())
    claims = {
        "iss": account["client_email"],
        "sub": account["client_email"],
        "scope": _SCOPE,
        "iat": issued,
        "exp": issued + int(_TOKEN_LIFETIME.total_seconds()),
    }
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    try:
        key = serialization.load_pem_private_key(account["private_key"].encode(), password=None)
    except ValueError:
        raise InvalidArgument(
            f"the private key of service account {account['client_email']} cannot be read"
        ) from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise InvalidArgument(f"service account {account['client_email']}: not an RSA key")
    signature = key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{signing_input}.{_b64(signature)}"


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
        self._bucket_path = f"{urlsplit(base_url).path}/storage/v1/b/{quote(bucket, safe='')}"
        self._upload_path = (
            f"{urlsplit(base_url).path}/upload/storage/v1/b/{quote(bucket, safe='')}"
        )
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

    def limits(self) -> StoreLimits:
        # Compose takes sources of any size; rounds of 32 lift the per-call bound.
        return StoreLimits(
            writes=True, min_part_size=1, max_part_size=MAX_OBJECT_SIZE, max_parts=10_000
        )

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

    def _json(
        self,
        method: str,
        path: str,
        what: str,
        body: Any = None,
        query: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        data = b"" if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        full = path + ("?" + urlencode(query) if query else "")
        answer = self._rest.call(method, full, what, data, headers)
        if not answer.ok:
            raise self._rest.status_error(answer, what)
        if not answer.body:
            return {}
        reply: dict[str, Any] = json.loads(answer.body)
        return reply

    def _object_path(self, name: str) -> str:
        return f"{self._bucket_path}/o/{quote(name, safe='')}"

    def _item(self, item: dict[str, Any]) -> ObjectInfo:
        updated = datetime.fromisoformat(item["updated"].replace("Z", "+00:00"))
        return ObjectInfo(
            key=item["name"][len(self.prefix) :],
            size=int(item.get("size", 0)),
            # Whole seconds, as a HEAD's Last-Modified has it: one object, one mtime.
            mtime_ms=int(updated.timestamp()) * 1000,
            etag=str(item.get("generation", "")),
        )

    def _pages(
        self, prefix: str, delimiter: bool, page_size: int = 1000
    ) -> Iterator[dict[str, Any]]:
        """The JSON API's listing of full names below `prefix`, a page at a time."""
        query = {"prefix": prefix, "maxResults": str(page_size), "fields": _FIELDS}
        if delimiter:
            query["delimiter"] = "/"
        what = f"list gs://{self.bucket}/{prefix}"
        while True:
            page = self._json("GET", f"{self._bucket_path}/o", what, query=query)
            yield page
            token = page.get("nextPageToken")
            if not token:
                return
            query["pageToken"] = token

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        objects: list[ObjectInfo] = []
        prefixes: list[str] = []
        complete = True
        page_size = min(1000, limit) if limit is not None else 1000
        for page in self._pages(self.prefix + prefix, True, page_size):
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
        for page in self._pages(self.prefix + prefix, False):
            infos = [self._item(item) for item in page.get("items", ())]
            kept = [info for info in infos if not hidden(info.key)]
            if kept:
                yield kept

    def check(self) -> None:
        next(self._pages(self.prefix, True, 1))

    # ---- writes ----------------------------------------------------------------------

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        """One multipart/related upload: the object's metadata and its bytes."""
        what = f"put {self.uri_of(key)}"
        resource = {"name": self.prefix + key, **_resource_metadata(metadata)}
        boundary = uuid.uuid4().hex
        body = b"".join(
            [
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                json.dumps(resource).encode(),
                f"\r\n--{boundary}\r\nContent-Type: {metadata.content_type or 'application/octet-stream'}\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        path = f"{self._upload_path}/o?uploadType=multipart"
        headers = {"Content-Type": f"multipart/related; boundary={boundary}"}
        answer = self._rest.call("POST", path, what, body, headers)
        if not answer.ok:
            raise self._rest.status_error(answer, what)
        return self._item(json.loads(answer.body))

    def delete(self, keys: Keys) -> None:
        """One JSON API delete each (obstore would cut a directory marker's trailing
        '/'); a missing object is not an error."""
        for key in keys:
            what = f"delete {self.uri_of(key)}"
            answer = self._rest.call("DELETE", self._object_path(self.prefix + key), what)
            if not answer.ok and answer.status != 404:
                raise self._rest.status_error(answer, what)

    def copy(self, source: str, destination: str, if_match: str = "") -> ObjectInfo:
        """A rewrite within the bucket (in as many calls as GCS takes); with `if_match`,
        only of the source's generation `if_match` (Conflict when it has another)."""
        what = f"copy {self.uri_of(source)} to {self.uri_of(destination)}"
        path = (
            f"{self._object_path(self.prefix + source)}/rewriteTo/b/"
            f"{quote(self.bucket, safe='')}/o/{quote(self.prefix + destination, safe='')}"
        )
        query: dict[str, str] = {}
        if if_match:
            query["sourceGeneration"] = if_match
            query["ifSourceGenerationMatch"] = if_match
        try:
            while True:
                reply = self._json("POST", path, what, {}, query)
                if reply.get("done", True):
                    return self._item(reply["resource"])
                query["rewriteToken"] = reply["rewriteToken"]
        except (NotFound, Conflict, InvalidArgument) as exc:
            if not if_match:
                raise
            current = self.head(source)  # NotFound when the source is gone
            if current.etag != if_match:
                raise Conflict(
                    f"{what}: the source changed (generation {if_match} is gone)"
                ) from exc
            raise

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
        what = f"compose {self.uri_of(destination)}"
        body = {
            "sourceObjects": [
                {
                    "name": self.prefix + name,
                    "objectPreconditions": {"ifGenerationMatch": generation},
                }
                for name, generation in sources
            ],
            "destination": _resource_metadata(metadata),
        }
        reply = self._json(
            "POST", f"{self._object_path(self.prefix + destination)}/compose", what, body
        )
        return destination, str(reply.get("generation", ""))

    def _hidden_pages(self, directory: str) -> Iterator[ObjectPage]:
        """The objects below a hidden directory (which `walk` leaves out)."""
        for page in self._pages(self.prefix + directory, False):
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


def _resource_metadata(metadata: ObjectMetadata) -> dict[str, Any]:
    """The object resource's fields that hold an object's metadata."""
    resource: dict[str, Any] = {
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
