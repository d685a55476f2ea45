"""Ranged GETs from S3: each one signed by obstore (Rust `object_store`: `obstore.sign`, a
presigned URL made with the boto3 session's credentials) and its body received straight
into the caller's buffer (`signed_gets.py`): a worker's block into the block's own memory,
any other range into a new buffer. One GET stack, so one error table (`store_errors.py`)
and one body-retry loop (`body_retries.py`) for every ranged read of the store.

boto3 spends ~3 ms of CPU per small GET; this path well under 1 ms, awaited on the event
loop, not run on threads. HEAD, LIST, PUT and checks stay with boto3
(`s3_under_store.py`), and so do the credentials: both read the same sources.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from reservoir.common.errors import PermissionDenied
from reservoir.common.understore.signed_gets import SignedGets
from reservoir.common.understore.store_errors import StorePlace
from reservoir.common.understore.under_store import UnderStoreSettings

if TYPE_CHECKING:
    from obstore.store import S3Credential, S3Store

# How long obstore keeps a credential it was handed before asking the session again;
# boto3's refreshable credentials renew themselves well before they expire.
_CREDENTIAL_TTL = timedelta(minutes=5)


class _SessionCredentials:
    """The boto3 session's credentials, as obstore asks for them (refreshed as boto3 does)."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials

    def __call__(self) -> S3Credential:
        frozen = self._credentials.get_frozen_credentials()
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token,
            "expires_at": datetime.now(UTC) + _CREDENTIAL_TTL,
        }


class S3RangeReader:
    """Ranged GETs of one bucket (and key prefix) with an ETag precondition."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        settings: UnderStoreSettings,
        session: Any,
        place: StorePlace,
    ) -> None:
        """`session`: the boto3 session whose credentials sign the requests (None when
        anonymous). `place`: how errors name the store."""
        self._bucket = bucket
        self._prefix = prefix
        self._settings = settings
        self._session = session
        self._place = place
        self._store: S3Store | None = None
        self._signed: SignedGets | None = None

    def _open(self) -> S3Store:
        """The obstore store that signs the GETs (it sends none itself), built on first
        use: a store without credentials fails its reads (as boto3 does), not its mount."""
        if self._store is not None:
            return self._store
        from obstore.store import S3Store

        provider = None
        if self._session is not None:
            credentials = self._session.get_credentials()
            if credentials is None:
                raise PermissionDenied(
                    f"no credentials found for {self._place.where} "
                    f"(credential source {self._place.credentials!r}: this process has no "
                    "AWS credentials to use)"
                )
            provider = _SessionCredentials(credentials)
        config: dict[str, Any] = {
            "region": self._session_region(),
            "virtual_hosted_style_request": False,
            "skip_signature": self._session is None,
        }
        client: dict[str, Any] = {}
        if self._settings.endpoint_url:
            config["endpoint"] = self._settings.endpoint_url
            client["allow_http"] = self._settings.endpoint_url.startswith("http://")
        self._store = S3Store(
            self._bucket,
            prefix=self._prefix.rstrip("/") or None,
            config=config,  # type: ignore[arg-type]
            client_options=client,  # type: ignore[arg-type]
            credential_provider=provider,
        )
        return self._store

    def _session_region(self) -> str:
        return self._settings.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"

    async def get_range(
        self, key: str, offset: int, length: int, etag: str, *, what: str
    ) -> bytes | memoryview:
        """`length` bytes from `offset` (fewer only at the object's end); Conflict when the
        object's ETag is no longer `etag`. The same signed GET as a block's, into a new
        buffer of `length` bytes (callers ask for a block's range at most): one GET stack
        for the store, not one per way of asking."""
        if length <= 0:
            return b""
        buffer = memoryview(bytearray(length))
        got = await self.get_range_into(key, offset, buffer, etag, what=what)
        return buffer[:got].toreadonly()

    async def get_range_into(
        self, key: str, offset: int, out: memoryview, etag: str, *, what: str
    ) -> int:
        """`len(out)` bytes from `offset` received straight into `out` (fewer only at the
        object's end), by a GET presigned by obstore (`signed_gets.py`)."""
        if not len(out):
            return 0
        return await self._signed_gets().get_into(key, offset, out, etag, what=what)

    def _signed_gets(self) -> SignedGets:
        if self._signed is None:
            self._signed = SignedGets(
                self._open(),
                self._bucket,
                self._prefix,
                self._settings,
                self._place,
                signs=self._session is not None,
                region=self._session_region(),
            )
        return self._signed
