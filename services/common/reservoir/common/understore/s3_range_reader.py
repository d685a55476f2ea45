"""Ranged GETs from S3 on the event loop, through obstore (Rust `object_store`).

The worker's block fetches are its hot path on a cold cache: boto3 spends ~3 ms of CPU per
small GET, obstore well under 1 ms, and its calls are awaited, not run on threads. HEAD,
LIST, PUT and checks stay with boto3 (`s3_under_store.py`), and so do the credentials:
they come from the same boto3 session, so both paths read the same sources.

A worker's block GETs (`get_range_into`) go further: obstore signs them (a presigned URL)
and the body is received straight into the block's own memory (`signed_gets.py`),
without the two copies obstore's client makes of a body.

A request obstore could not complete (after its own retries, as many attempts in all as
boto3 is given: 5xx answers, refused or dropped connections, timeouts) maps through the
same error table as boto3's. A body that breaks off once the headers have arrived is first
resumed by obstore (a GET of the bytes still missing, within the same retry budget), then
read again whole a bounded number of times (`BodyRetry`, the one loop of
`body_retries.py`), as with boto3: at most (body retries + 1) x retries GETs per range,
each broken body costing one GET.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reservoir.common.errors import PermissionDenied
from reservoir.common.understore.body_retries import BodyBrokeOff, read_retrying
from reservoir.common.understore.signed_gets import SignedGets
from reservoir.common.understore.store_errors import StorePlace, error_for_obstore
from reservoir.common.understore.under_store import UnderStoreSettings

if TYPE_CHECKING:
    from obstore.store import S3Credential, S3Store

# How long obstore keeps a credential it was handed before asking the session again;
# boto3's refreshable credentials renew themselves well before they expire.
_CREDENTIAL_TTL = timedelta(minutes=5)


class _TruncatedBody(Exception):
    """A response body ended before the bytes its headers promised."""


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
        """The obstore client, built on first use: a store without credentials fails its
        reads (as boto3 does), not its mount."""
        if self._store is not None:
            return self._store
        from obstore.store import S3Store

        settings = self._settings
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
        client: dict[str, Any] = {
            "connect_timeout": timedelta(seconds=settings.timeout_s),
            # Like boto3's read timeout: a body that stalls this long is broken off.
            "read_timeout": timedelta(seconds=settings.timeout_s),
            "timeout": timedelta(seconds=settings.request_timeout_s),
            "pool_max_idle_per_host": str(settings.max_connections),
        }
        if settings.endpoint_url:
            config["endpoint"] = settings.endpoint_url
            client["allow_http"] = settings.endpoint_url.startswith("http://")
        bundle = os.environ.get("AWS_CA_BUNDLE", "")  # boto3's own override of its CAs
        if bundle:
            client["root_certificate"] = Path(bundle).read_text()
        retry = settings.body_retry
        self._store = S3Store(
            self._bucket,
            prefix=self._prefix.rstrip("/") or None,
            config=config,  # type: ignore[arg-type]
            client_options=client,  # type: ignore[arg-type]
            retry_config={
                # boto3 is given `retries` attempts in all; obstore counts retries.
                "max_retries": max(0, settings.retries - 1),
                "backoff": {
                    "init_backoff": timedelta(seconds=retry.backoff_s),
                    "max_backoff": timedelta(seconds=retry.max_backoff_s),
                    "base": 2,
                },
                "retry_timeout": timedelta(seconds=settings.request_timeout_s),
            },
            credential_provider=provider,
        )
        return self._store

    def _session_region(self) -> str:
        return self._settings.region or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"

    async def get_range(
        self, key: str, offset: int, length: int, etag: str, *, what: str
    ) -> bytes | memoryview:
        """`length` bytes from `offset` (fewer only at the object's end); Conflict when the
        object's ETag is no longer `etag`. A read-only view of the body obstore received,
        not a copy: a copy of a block costs a worker a fresh allocation's page faults and
        one pass over the bytes, ~15 % of its CPU on a cold read."""
        if length <= 0:
            return b""
        import obstore

        store = self._open()
        options: dict[str, Any] = {"range": (offset, offset + length)}
        if etag:
            options["if_match"] = etag

        async def attempt() -> bytes | memoryview:
            try:
                result = await obstore.get_async(store, key, options=options)  # type: ignore[arg-type]
            except Exception as exc:
                raise error_for_obstore(self._place, what, exc) from exc
            try:
                data = memoryview(await result.bytes_async())
                expected = max(0, min(length, result.meta["size"] - offset))
                if len(data) < expected:
                    raise _TruncatedBody(f"{len(data)} of {expected} bytes")
                return data[:expected]
            except Exception as exc:  # everything after the headers is the body breaking off
                raise BodyBrokeOff() from exc

        # obstore retries failed requests itself: only broken bodies are read again here.
        return await read_retrying(
            attempt,
            self._settings.body_retry,
            requests=1,
            what=what,
            endpoint=self._place.endpoint,
            offset=offset,
            length=length,
        )

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
