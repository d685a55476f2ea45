"""A read-only HTTP(S) server as an under-store: `https://host/prefix/` (public dataset
mirrors). Files are opened by path: HTTP has no listing, so `list` is refused and a
directory cannot be browsed; `reservoir load` takes a list of files instead.

Anonymous only: no credentials are sent. `http.client` rather than urllib, because urllib
follows redirects, and a redirect could send the cluster to an address the mount policy
refused (a metadata service); a redirect here is an error. Ranged GETs take the stack every
store's reads take (`direct_gets.py`), received straight into the caller's buffer.
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from typing import TypeVar
from urllib.parse import quote, urlsplit

from reservoir.common.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ReservoirError,
    Unsupported,
)
from reservoir.common.understore.direct_gets import DirectGets
from reservoir.common.understore.range_connections import RangeAnswer
from reservoir.common.understore.request_attempts import (
    KeptConnections,
    Transient,
    with_attempts,
)
from reservoir.common.understore.store_errors import StorePlace, error_for_status
from reservoir.common.understore.under_store import (
    BufferReadStore,
    Listing,
    ObjectInfo,
    UnderStoreSettings,
)

T = TypeVar("T")
_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


class HttpUnderStore(BufferReadStore):
    """Files under one URL prefix, read with HEAD and ranged GETs. The change token is the
    server's ETag, else Last-Modified and the length together."""

    def __init__(self, uri: str, settings: UnderStoreSettings) -> None:
        parts = urlsplit(uri)
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
            raise InvalidArgument(f"an HTTP under-store URI is http(s)://host/prefix/, got {uri!r}")
        if parts.query or parts.fragment:
            raise InvalidArgument(f"an HTTP under-store URI takes no query or fragment: {uri!r}")
        if settings.credentials not in ("", "anonymous"):
            raise InvalidArgument(
                f"{uri}: http(s) mounts are anonymous only (credentials 'anonymous')"
            )
        self._https = parts.scheme.lower() == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._root = parts.path.rstrip("/") + "/"
        self._settings = settings
        self._place = StorePlace(parts.netloc, "anonymous")
        self._connections = KeptConnections(self._connection, max(1, settings.max_connections))
        self._gets = _HttpGets(self, f"{parts.scheme.lower()}://{parts.netloc}")
        self.uri = f"{parts.scheme.lower()}://{parts.netloc}{self._root}"

    # ---- requests --------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self._settings.timeout_s
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self._settings.timeout_s)

    def _path(self, key: str) -> str:
        if key.startswith("/") or any(part in (".", "..") for part in key.split("/")):
            raise InvalidArgument(f"bad key {key!r}")
        return quote(self._root + key, safe="/")

    def _attempts(self, what: str, call: Callable[[], T]) -> T:
        return with_attempts(what, self._settings, call)

    def _request(
        self, method: str, key: str, headers: dict[str, str], what: str
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """The response to one request (its body unread), or the domain error its status
        means; the caller gives the connection back (`_Connections.give`)."""
        path = self._path(key)
        conn, reused = self._connections.take()
        try:
            response = self._send(conn, method, path, headers)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            if not reused:
                raise Transient(f"{type(exc).__name__}: {exc}") from exc
            # An idle connection the server closed meanwhile: not a failure of the server,
            # so a fresh connection is tried without spending one of the attempts.
            conn = self._connection()
            try:
                response = self._send(conn, method, path, headers)
            except (OSError, http.client.HTTPException) as again:
                conn.close()
                raise Transient(f"{type(again).__name__}: {again}") from again
        status = response.status
        if status < 300:
            return conn, response
        conn.close()
        if status == 416:
            return conn, response  # a range at or past the end: the caller answers b""
        if status >= 500 or status == 429:
            raise Transient(f"the server answered {status}")
        if status < 400:
            raise InvalidArgument(
                f"{what}: the server redirects ({status} {response.reason}); redirects are "
                "not followed"
            )
        raise error_for_status(self._place, what, status)

    def _send(
        self, conn: http.client.HTTPConnection, method: str, path: str, headers: dict[str, str]
    ) -> http.client.HTTPResponse:
        conn.request(method, path, headers={"Accept-Encoding": "identity", **headers})
        return conn.getresponse()

    @staticmethod
    def _token(response: http.client.HTTPResponse, size: int) -> str:
        return change_token(
            response.getheader("ETag", ""), response.getheader("Last-Modified", ""), size
        )

    # ---- UnderStore --------------------------------------------------------------------

    def head(self, key: str) -> ObjectInfo:
        what = f"head {self.uri_of(key)}"

        def once() -> ObjectInfo:
            conn, response = self._request("HEAD", key, {}, what)
            try:
                response.read()  # empty: ends the response, so the connection can be reused
                length = response.getheader("Content-Length")
                if response.status != 200 or length is None:
                    raise InvalidArgument(f"{what}: the server gave no Content-Length")
                size = int(length)
                token = self._token(response, size)
                if not token:
                    raise InvalidArgument(
                        f"{what}: the server sends neither ETag nor Last-Modified, so a "
                        "changed file could not be told from the cached one"
                    )
                return ObjectInfo(key, size, _mtime_ms(response), token)
            finally:
                self._connections.give(conn, response)

        try:
            return self._attempts(what, once)
        except (PermissionDenied, InvalidArgument) as exc:
            # A directory answers a HEAD of its name with a refusal (403: no index) or a
            # redirect (to name/): not a file, and for a path in a tree, not an error.
            if key and self.is_directory(key + "/"):
                raise NotFound(f"{what}: a directory, not a file") from exc
            raise

    def is_directory(self, prefix: str) -> bool:
        """HTTP cannot list: a HEAD of `prefix` that is answered at all, even refused or
        redirected (an index page, or none allowed), says something lies below it."""
        what = f"head {self.uri_of(prefix)}"

        def once() -> bool:
            try:
                conn, response = self._request("HEAD", prefix, {}, what)
            except NotFound:
                return False
            except (PermissionDenied, InvalidArgument):
                return True
            response.read()
            self._connections.give(conn, response)
            return True

        return self._attempts(what, once)

    def list(self, prefix: str, limit: int | None = None) -> Listing:
        raise Unsupported(
            f"list {self.uri_of(prefix)}: an http(s) mount cannot be listed (HTTP has no "
            "listing); open files by path, and give `reservoir load` a list of files"
        )

    async def get_range_into(self, key: str, offset: int, out: memoryview, etag: str = "") -> int:
        """Received straight into `out` (`direct_gets.py`); 0 at or past the file's end."""
        if not len(out):
            return 0
        try:
            return await self._gets.get_into(key, offset, out, etag, what=f"get {self.uri_of(key)}")
        except OutOfRange:
            return 0

    def check(self) -> None:
        """Reachable is enough: a server may refuse (403, 404) a HEAD of the prefix itself,
        which has no listing to show."""
        what = f"mount {self.uri}"

        def once() -> None:
            conn = self._connection()
            try:
                conn.request("HEAD", quote(self._root, safe="/"))
                conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise Transient(f"{type(exc).__name__}: {exc}") from exc
            finally:
                conn.close()

        self._attempts(what, once)


class _HttpGets(DirectGets):
    """Ranged GETs of the server's files. HTTP has no precondition every server honours:
    the change token is checked on the answer's own headers (its ETag, else Last-Modified
    and the file's length); a server that ignores Range, or redirects, is refused."""

    def __init__(self, store: HttpUnderStore, origin: str) -> None:
        super().__init__(store._settings, store._place)
        self._store = store
        self._origin = origin

    def _request(self, key: str, token: str, headers: dict[str, str]) -> str:
        headers["Accept-Encoding"] = "identity"
        return self._origin + self._store._path(key)

    def _check_range(self, answer: RangeAnswer, start: int, what: str) -> None:
        if answer.status != 206:
            # A server that ignores Range sends whole files: refused, even a small one.
            raise InvalidArgument(
                f"{what}: the server ignores Range requests ({answer.status}); "
                "an http(s) mount needs a server that serves byte ranges"
            )
        super()._check_range(answer, start, what)

    def _accept(self, answer: RangeAnswer, token: str, what: str) -> None:
        if not token:
            return
        total = _CONTENT_RANGE.fullmatch(answer.headers.get("content-range", "").strip())
        size = int(total.group(3)) if total is not None and total.group(3) != "*" else -1
        headers = answer.headers
        if change_token(headers.get("etag", ""), headers.get("last-modified", ""), size) != token:
            raise Conflict(f"{what}: the object changed")

    def _error(self, answer: RangeAnswer, what: str) -> ReservoirError:
        if 300 <= answer.status < 400:
            return InvalidArgument(
                f"{what}: the server redirects ({answer.status}); redirects are not followed"
            )
        return super()._error(answer, what)


def change_token(etag: str, modified: str, size: int) -> str:
    """A file's change token: its ETag, else its Last-Modified and length together."""
    if etag:
        return etag
    return f"{modified}-{size:x}" if modified else ""


def _mtime_ms(response: http.client.HTTPResponse) -> int:
    modified = response.getheader("Last-Modified")
    if not modified:
        return 0
    try:
        return int(parsedate_to_datetime(modified).timestamp() * 1000)
    except (TypeError, ValueError):
        return 0
