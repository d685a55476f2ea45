"""S3's ranged GETs into the caller's buffer (`direct_gets.py`), signed by obstore
(`obstore.sign`, a presigned URL made in Rust with the store's own credentials).

A key's presigned URL is reused for `presign_ttl_s` (signing is then not per GET); it is
signed to stay valid for that long plus the longest a GET may take. Range and If-Match
are plain headers beside the signature (a presigned URL signs the host alone).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING
from urllib.parse import quote

from reservoir.common.understore.direct_gets import DirectGets
from reservoir.common.understore.range_connections import cafile
from reservoir.common.understore.store_errors import StorePlace
from reservoir.common.understore.under_store import UnderStoreSettings

if TYPE_CHECKING:
    from obstore.store import S3Store

# Presigned URLs kept at once (one per key read lately); the oldest goes first.
_MAX_URLS = 4096


class SignedGets(DirectGets):
    """The GETs of one S3 store (bucket and prefix) into callers' buffers."""

    def __init__(
        self,
        store: S3Store,
        bucket: str,
        prefix: str,
        settings: UnderStoreSettings,
        place: StorePlace,
        *,
        signs: bool,
        region: str,
    ) -> None:
        """`signs`: False for an anonymous store (its GETs go unsigned)."""
        super().__init__(settings, place)
        self._store = store
        self._bucket = bucket
        self._prefix = prefix
        self._signs = signs
        self._base = (settings.endpoint_url or f"https://s3.{region}.amazonaws.com").rstrip("/")
        self._urls: dict[str, tuple[str, float]] = {}

    def _request(self, key: str, token: str, headers: dict[str, str]) -> str:
        if token:
            headers["If-Match"] = token if token.startswith(('"', "W/")) else f'"{token}"'
        return self._url(key)

    def _ca_bundle(self) -> str:
        return cafile()  # boto3's override of its CAs (AWS_CA_BUNDLE), as S3 clients take it

    def _denied(self, key: str) -> None:
        self._urls.pop(key, None)  # signed with credentials since replaced, maybe

    def _url(self, key: str) -> str:
        """The key's GET URL: presigned (and reused for `presign_ttl_s`), or plain when
        the store is anonymous."""
        now = time.monotonic()
        cached = self._urls.get(key)
        if cached is not None and cached[1] > now:
            return cached[0]
        if self._signs:
            import obstore

            settings = self._settings
            valid = timedelta(seconds=settings.presign_ttl_s + settings.request_timeout_s)
            url = obstore.sign(self._store, "GET", key, valid)
        else:
            url = f"{self._base}/{self._bucket}/{quote(self._prefix + key, safe='/')}"
        if len(self._urls) >= _MAX_URLS:
            self._urls.pop(next(iter(self._urls)))
        self._urls[key] = (url, now + self._settings.presign_ttl_s)
        return url
