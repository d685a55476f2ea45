"""S3 ranged GETs received straight into the caller's buffer (`UnderStore.get_range_into`):
signed by obstore (`obstore.sign`, a presigned URL made in Rust with the store's own
credentials), sent on a kept-alive connection (`range_connections.py`), the answer read
by the one error table (`store_errors.py`) and the one retry loop (`body_retries.py`).

A key's presigned URL is reused for `presign_ttl_s` (signing is then not per GET); it is
signed to stay valid for that long plus the longest a GET may take. Range and If-Match
are plain headers beside the signature (a presigned URL signs the host alone). A body
that breaks off is resumed into the same buffer: a GET of the bytes still missing.
"""

from __future__ import annotations

import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit

from reservoir.common.errors import ReservoirError, Unavailable
from reservoir.common.understore.body_retries import BodyBrokeOff, RequestFailed, read_retrying
from reservoir.common.understore.range_connections import (
    AnswerBrokeOff,
    BadAnswer,
    RangeAnswer,
    RangeConnections,
    cafile,
    connections_to,
)
from reservoir.common.understore.store_errors import StorePlace, error_for_status
from reservoir.common.understore.under_store import UnderStoreSettings

if TYPE_CHECKING:
    from obstore.store import S3Store

# Presigned URLs kept at once (one per key read lately); the oldest goes first.
_MAX_URLS = 4096
_RETRIED_STATUS = {500, 502, 503, 504}
_CODE = re.compile(rb"<Code>([^<]{1,64})</Code>")
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class SignedGets:
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
        self._store = store
        self._bucket = bucket
        self._prefix = prefix
        self._settings = settings
        self._place = place
        self._signs = signs
        self._base = (settings.endpoint_url or f"https://s3.{region}.amazonaws.com").rstrip("/")
        self._urls: dict[str, tuple[str, float]] = {}

    async def get_into(
        self, key: str, offset: int, out: memoryview, etag: str, *, what: str
    ) -> int:
        received = 0  # by the attempts so far: a broken body is resumed, not read again

        async def attempt() -> int:
            nonlocal received
            answer = await self._get(key, offset + received, out[received:], etag, what)
            received += answer.received
            if answer.broke_off is not None:
                raise BodyBrokeOff() from answer.broke_off
            return received

        return await read_retrying(
            attempt,
            self._settings.body_retry,
            requests=max(1, self._settings.retries),
            what=what,
            endpoint=self._place.endpoint,
            offset=offset,
            length=len(out),
        )

    async def _get(
        self, key: str, start: int, out: memoryview, etag: str, what: str
    ) -> RangeAnswer:
        """One GET of `len(out)` bytes from `start` into `out`: its 2xx answer (the body
        complete or broken off), else the domain error."""
        url = urlsplit(self._url(key))
        connections = self._connections_to(f"{url.scheme}://{url.netloc}")
        headers = {"Range": f"bytes={start}-{start + len(out) - 1}"}
        if etag:
            headers["If-Match"] = etag if etag.startswith(('"', "W/")) else f'"{etag}"'
        target = url.path + (f"?{url.query}" if url.query else "")
        try:
            answer = await connections.get_into(target, headers, out)
        except (AnswerBrokeOff, OSError) as exc:
            raise RequestFailed(
                Unavailable(
                    f"{what}: cannot connect to the under-store endpoint "
                    f"{self._place.endpoint} ({type(exc).__name__}: {exc})"
                )
            ) from exc
        except BadAnswer as exc:
            raise Unavailable(f"{what}: {self._place.where}: {exc}") from exc
        if 200 <= answer.status < 300:
            self._check_range(answer, start, what)
            return answer
        error = self._error(answer, what)
        if answer.status == 403:
            self._urls.pop(key, None)  # signed with credentials since replaced, maybe
        if answer.status in _RETRIED_STATUS:
            raise RequestFailed(error)
        raise error

    def _check_range(self, answer: RangeAnswer, start: int, what: str) -> None:
        """The body is the range asked for (a server that ignores Range answers 200 with
        the whole object: not a block's bytes)."""
        if answer.status == 206:
            found = _CONTENT_RANGE.match(answer.headers.get("content-range", ""))
            if found is not None and int(found.group(1)) == start:
                return
        elif answer.status == 200 and start == 0:
            return  # the whole object, which fits the buffer: the range asked for
        raise Unavailable(
            f"{what}: {self._place.where} answered {answer.status} without the range "
            f"asked for (bytes {start}-; Content-Range "
            f"{answer.headers.get('content-range', 'none')!r})"
        )

    def _error(self, answer: RangeAnswer, what: str) -> ReservoirError:
        found = _CODE.search(answer.error_body)
        code = found.group(1).decode("utf-8", "replace") if found else ""
        return error_for_status(self._place, what, answer.status, code)

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

    def _connections_to(self, origin: str) -> RangeConnections:
        settings = self._settings
        return connections_to(
            origin,
            settings.max_connections,
            settings.timeout_s,
            settings.request_timeout_s,
            cafile(),
        )
