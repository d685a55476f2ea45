"""Under-stores driven by obstore (Rust `object_store`): what Google Cloud Storage and Azure
Blob share (`gcs_under_store.py`, `azure_under_store.py` hold only what differs).

HEADs and single PUTs go through obstore; so do ranged reads, unless the store makes its
own (`_direct`: GCS and Azure do, received straight into the caller's buffer by
`direct_gets.py`, where obstore would gather each body and hand out a copy). Listings,
deletes and what obstore has no word for (conditional copies, multipart through the
store's own API) are each cloud's: obstore's listings drop GCS's generation, the change
token, and obstore cuts the trailing '/' of a directory marker from the names it lists
and deletes. Errors go through the one table of the under-stores (`store_errors.py`).

Every request has a deadline (`client_options` timeouts from the settings) and a bounded
number of attempts (`retry_config`: settings.retries in all); a body that breaks off after
its headers is read again at most `body_retry.attempts` times, as the S3 reader does.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from reservoir.common.errors import ReservoirError
from reservoir.common.object_metadata import ObjectMetadata
from reservoir.common.understore.body_retries import BodyBrokeOff, read_retrying
from reservoir.common.understore.direct_gets import DirectGets
from reservoir.common.understore.store_errors import StorePlace, error_for_obstore
from reservoir.common.understore.under_store import (
    NO_METADATA,
    ObjectInfo,
    UnderStore,
    UnderStoreSettings,
    into_new_buffer,
)

if TYPE_CHECKING:
    from obstore import ObjectMeta


# Where upload bookkeeping lives below a mount's root; never listed, walked or counted.
UPLOADS = ".reservoir-uploads/"


class _TruncatedBody(Exception):
    """A response body ended before the bytes its headers promised."""


def client_options(settings: UnderStoreSettings, endpoint_url: str) -> dict[str, Any]:
    """obstore's HTTP client options: every request bounded in time."""
    options: dict[str, Any] = {
        "connect_timeout": timedelta(seconds=settings.timeout_s),
        # A body that stalls this long is broken off (and read again).
        "read_timeout": timedelta(seconds=settings.timeout_s),
        "timeout": timedelta(seconds=settings.request_timeout_s),
        "pool_max_idle_per_host": str(settings.max_connections),
    }
    if endpoint_url.startswith("http://"):
        options["allow_http"] = True
    return options


def retry_config(settings: UnderStoreSettings) -> dict[str, Any]:
    """settings.retries attempts in all (obstore counts the retries after the first)."""
    retry = settings.body_retry
    return {
        "max_retries": max(0, settings.retries - 1),
        "backoff": {
            "init_backoff": timedelta(seconds=retry.backoff_s),
            "max_backoff": timedelta(seconds=retry.max_backoff_s),
            "base": 2,
        },
        "retry_timeout": timedelta(seconds=settings.request_timeout_s),
    }


def attributes_of(metadata: ObjectMetadata) -> dict[str, str]:
    """obstore's attributes for an object's metadata (any other name is user metadata)."""
    attributes = {
        name: value
        for name, value in (
            ("Content-Type", metadata.content_type),
            ("Content-Encoding", metadata.content_encoding),
            ("Content-Disposition", metadata.content_disposition),
            ("Cache-Control", metadata.cache_control),
            ("Content-Language", metadata.content_language),
        )
        if value
    }
    attributes.update(metadata.user)
    return attributes


def hidden(key: str) -> bool:
    return key.startswith(UPLOADS)


class _StoreGets(DirectGets):
    """GETs the store addresses and signs itself (`ObstoreUnderStore._get_request`)."""

    def __init__(self, store: ObstoreUnderStore) -> None:
        super().__init__(store.settings, store.place)
        self._store = store

    def _request(self, key: str, token: str, headers: dict[str, str]) -> str:
        return self._store._get_request(key, token, headers)


class ObstoreUnderStore(UnderStore):
    """One bucket or container (and key prefix) through an obstore store. A subclass
    builds `store`, lists, deletes, and says what its change token is (`_token`) and how
    a read asks for that version (`_read_options`)."""

    def __init__(
        self,
        uri: str,
        store: Any,
        settings: UnderStoreSettings,
        *,
        endpoint: str,
        credential_source: str,
    ) -> None:
        self.uri = uri
        self.store = store
        self.settings = settings
        self.endpoint = endpoint
        self.credentials = credential_source
        self.place = StorePlace(endpoint, credential_source)
        # The store's GETs, received straight into the caller's buffer, where a subclass
        # addresses and signs them itself (`_get_request`); else obstore's.
        self._direct: DirectGets | None = None

    # ---- what differs per store --------------------------------------------------------

    def _token(self, meta: ObjectMeta) -> str:
        """The change token of an object as obstore describes it: its ETag."""
        return str(meta.get("e_tag") or "").strip('"')

    def _read_options(self, token: str) -> dict[str, Any]:
        """Get options that make a read fail unless the object still has `token`."""
        return {"if_match": f'"{token}"'}

    def _stale(self, key: str, token: str, error: ReservoirError, what: str) -> ReservoirError:
        """The error of a conditional read that failed with `error` (a store that names
        versions answers an overwritten one with NotFound: a subclass tells them apart)."""
        return error

    def _get_request(self, key: str, token: str, headers: dict[str, str]) -> str:
        """The URL of a ranged GET of `key` (`DirectGets._request`), for a subclass that
        makes its own: it then calls `_get_directly` once built."""
        raise NotImplementedError

    def _get_directly(self) -> None:
        """Reads go through `_get_request` from now on, not obstore's GET."""
        self._direct = _StoreGets(self)

    # ---- errors ----------------------------------------------------------------------

    def _error(self, exc: BaseException, what: str) -> ReservoirError:
        return error_for_obstore(self.place, what, exc)

    def _info(self, meta: ObjectMeta, key: str | None = None) -> ObjectInfo:
        return ObjectInfo(
            key=meta["path"] if key is None else key,
            size=int(meta["size"]),
            mtime_ms=int(meta["last_modified"].timestamp() * 1000),
            etag=self._token(meta),
        )

    # ---- reads -----------------------------------------------------------------------

    def head(self, key: str) -> ObjectInfo:
        import obstore

        try:
            meta = obstore.head(self.store, key)
        except Exception as exc:
            raise self._error(exc, f"head {self.uri_of(key)}") from exc
        return self._info(meta, key)

    def _get_options(self, offset: int, length: int, token: str) -> dict[str, Any]:
        options: dict[str, Any] = {"range": (offset, offset + length)}
        if token:
            options.update(self._read_options(token))
        return options

    def get_range(self, key: str, offset: int, length: int, etag: str = "") -> bytes:
        """Blocking callers take the awaited read on a loop of their own: one GET stack
        and one body-retry loop."""
        return bytes(asyncio.run(self.get_range_async(key, offset, length, etag)))

    async def get_range_async(
        self, key: str, offset: int, length: int, etag: str = ""
    ) -> bytes | memoryview:
        """On the event loop; a read-only view of the body received, not a copy."""
        if length <= 0:
            return b""
        if self._direct is not None:
            # One GET stack for the store: a range asked for into a buffer of its own.
            return await into_new_buffer(self, key, offset, length, etag)
        import obstore

        what = f"get {self.uri_of(key)}"
        options = self._get_options(offset, length, etag)

        async def attempt() -> memoryview:
            try:
                result = await obstore.get_async(self.store, key, options=options)  # type: ignore[arg-type]
            except Exception as exc:
                raise self._read_error(exc, key, etag, what) from exc
            try:
                body = memoryview(await result.bytes_async())
                return self._body(body, result.meta, offset, length)
            except Exception as exc:  # everything after the headers is the body breaking off
                raise BodyBrokeOff() from exc

        # obstore retries failed requests itself: only broken bodies are read again here.
        return await read_retrying(
            attempt,
            self.settings.body_retry,
            requests=1,
            what=what,
            endpoint=self.endpoint,
            offset=offset,
            length=length,
        )

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        """Received straight into `out` where the store makes its own GETs."""
        if self._direct is None or not len(out):
            return await super().get_range_into(key, offset, out, etag)
        what = f"get {self.uri_of(key)}"
        try:
            return await self._direct.get_into(key, offset, out, etag, what=what)
        except ReservoirError as exc:
            if not etag:
                raise
            stale = await asyncio.to_thread(self._stale, key, etag, exc, what)
            if stale is exc:
                raise
            raise stale from exc

    def _read_error(self, exc: BaseException, key: str, token: str, what: str) -> ReservoirError:
        error = self._error(exc, what)
        return self._stale(key, token, error, what) if token else error

    @staticmethod
    def _body(data: memoryview, meta: ObjectMeta, offset: int, length: int) -> memoryview:
        expected = max(0, min(length, int(meta["size"]) - offset))
        if len(data) < expected:
            raise _TruncatedBody(f"{len(data)} of {expected} bytes")
        return data[:expected]

    def check(self) -> None:
        import obstore

        try:
            for _ in obstore.list(self.store, None, chunk_size=1):
                break
        except Exception as exc:
            raise self._error(exc, f"list {self.uri}") from exc

    # ---- writes ----------------------------------------------------------------------

    def put(self, key: str, data: bytes, metadata: ObjectMetadata = NO_METADATA) -> ObjectInfo:
        """The whole object in one request (atomic: obstore's own multipart is off)."""
        import obstore

        try:
            obstore.put(
                self.store,
                key,
                data,
                attributes=attributes_of(metadata) or None,  # type: ignore[arg-type]
                use_multipart=False,
            )
        except Exception as exc:
            raise self._error(exc, f"put {self.uri_of(key)}") from exc
        return self.head(key)
