"""The WebHDFS REST protocol as the webhdfs:// under-store speaks it (`webhdfs_files.py`):
requests to the namenode on kept-alive connections (`http.client`, as `http_under_store.py`),
the redirects it answers OPEN and CREATE with (to a datanode, which serves or takes the
bytes; which are followed is `webhdfs_redirects.py`'s), its JSON errors as domain errors, and
bounded attempts: every request has the settings' deadlines, and a failure worth another
attempt (a connection refused, a 5xx, a namenode in standby or safe mode, a body cut short)
gets at most `retries` attempts with backoff. Reads of a file's bytes take the GET stack
every store's reads take (`webhdfs_gets.py`); only a copy streams an OPEN here, into a
CREATE.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

from reservoir.common.errors import (
    DeadlineExceeded,
    InvalidArgument,
    Unavailable,
)
from reservoir.common.understore.request_attempts import (
    KeptConnections,
    Transient,
    with_attempts,
)
from reservoir.common.understore.store_errors import StorePlace, error_for_status, known_code
from reservoir.common.understore.under_store import UnderStoreSettings
from reservoir.common.understore.webhdfs_redirects import Endpoint, checked, on_loopback

T = TypeVar("T")
JsonObject = dict[str, Any]
_PREFIX = "/webhdfs/v1"
_CHUNK = 1 << 20
_ERROR_BODY = 64 << 10

# A namenode failing over, starting up or briefly busy: worth another attempt.
_TRANSIENT_REMOTE = frozenset({"StandbyException", "RetriableException", "SafeModeException"})


@dataclass(frozen=True, slots=True)
class _Exchange:
    endpoint: Endpoint
    conn: http.client.HTTPConnection
    response: http.client.HTTPResponse


class WebHdfsRequests:
    """Requests to one namenode as one user (`user.name`; None sends none), on kept-alive
    connections to it and to each datanode it redirects to."""

    def __init__(
        self,
        host: str,
        port: int,
        user: str | None,
        settings: UnderStoreSettings,
        credentials: str = "env",
    ) -> None:
        """`credentials`: the source `user` came from, as errors name it."""
        self.namenode = Endpoint(f"{host}:{port}", host, port)
        self.place = StorePlace(f"{host}:{port}", credentials)
        self._user = user
        self._settings = settings
        self.loopback_ok = on_loopback(host)
        self._pools: dict[Endpoint, KeptConnections] = {}
        self._lock = threading.Lock()

    # ---- the operations --------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        op: str,
        what: str,
        params: dict[str, str] | None = None,
        idempotent: bool = True,
    ) -> JsonObject:
        """One namenode operation's JSON answer ({} when it has no body). A request that
        is not `idempotent` (RENAME, CONCAT) goes on a fresh connection and is not sent
        again once it may have arrived: a second RENAME would find its source gone."""

        def once() -> JsonObject:
            target = self.target(path, op, params)
            body = self._finish(
                self._send(self.namenode, method, target, what, idempotent=idempotent), what
            )
            try:
                reply = json.loads(body) if body.strip() else {}
            except ValueError as exc:
                raise InvalidArgument(f"{what}: the server's answer is not JSON") from exc
            if not isinstance(reply, dict):
                raise InvalidArgument(f"{what}: the server's answer is not a JSON object")
            return reply

        return self.attempts(what, once)

    def create(self, path: str, data: bytes, what: str) -> None:
        """CREATE (overwriting): the namenode names a datanode, which takes the bytes."""
        self.attempts(what, lambda: self._create(path, data, len(data), what))

    def copy(self, source: str, destination: str, size: int, what: str) -> None:
        """OPEN `source` and CREATE `destination` from it, streamed: never whole in memory.
        A copy that breaks is begun again, from both ends."""

        def once() -> None:
            deadline = time.monotonic() + self._settings.request_timeout_s
            with self._opened(self.target(source, "OPEN", {}), what) as response:
                if response.length is not None and response.length != size:
                    raise Transient(f"the source is {response.length} bytes, not {size}")
                self._create(destination, _Exact(response, size, deadline, what), size, what)

        self.attempts(what, once)

    def attempts(self, what: str, call: Callable[[], T]) -> T:
        return with_attempts(what, self._settings, call)

    # ---- one exchange --------------------------------------------------------------------

    def target(self, path: str, op: str, params: dict[str, str] | None) -> str:
        query = {"op": op, **(params or {})}
        if self._user is not None:
            query["user.name"] = self._user
        return f"{_PREFIX}{quote(path, safe='/')}?{urlencode(query)}"

    def _create(self, path: str, body: bytes | _Exact, size: int, what: str) -> None:
        target = self.target(path, "CREATE", {"overwrite": "true"})
        endpoint, location = self._redirected(self._send(self.namenode, "PUT", target, what), what)
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        self._finish(self._send(endpoint, "PUT", location, what, body, headers), what)

    @contextmanager
    def _opened(self, target: str, what: str) -> Iterator[http.client.HTTPResponse]:
        """The response carrying an OPEN's bytes, from the datanode the namenode names (or
        from the namenode, if it serves them itself); its connection is kept if read out."""
        exchange = self._send(self.namenode, "GET", target, what)
        if 300 <= exchange.response.status < 400:
            endpoint, location = self._redirected(exchange, what)
            exchange = self._send(endpoint, "GET", location, what)
        if exchange.response.status >= 300:
            self._finish(exchange, what)  # raises
        try:
            yield exchange.response
        finally:
            self._give(exchange)

    def _redirected(self, exchange: _Exchange, what: str) -> tuple[Endpoint, str]:
        """The datanode a 307 names, checked (`webhdfs_redirects.py`), and the request
        target to send it."""
        response = exchange.response
        status = response.status
        if status < 300 or status >= 400:
            self._finish(exchange, what)  # raises on an error
            raise InvalidArgument(f"{what}: the namenode answered {status}, not a redirect")
        location = response.getheader("Location", "")
        response.read()
        self._give(exchange)
        redirect = checked(location, self.loopback_ok, what)
        if redirect is None:
            raise Transient("the datanode the namenode named does not resolve")
        return redirect.endpoint, redirect.target

    def _send(
        self,
        endpoint: Endpoint,
        method: str,
        target: str,
        what: str,
        body: bytes | _Exact | None = None,
        headers: dict[str, str] | None = None,
        idempotent: bool = True,
    ) -> _Exchange:
        """The response (its body unread); the caller gives the connection back (`_give`)
        or has `_finish` do it."""
        headers = {"Accept-Encoding": "identity", **(headers or {})}
        if body is None and method in ("PUT", "POST"):
            headers.setdefault("Content-Length", "0")
        # A streamed body cannot be sent twice, nor a request that must not arrive twice:
        # each gets a connection of its own, never one the server may have closed.
        fresh = not idempotent or isinstance(body, _Exact)
        pool = self._pool(endpoint)
        conn, reused = (self._connection(endpoint), False) if fresh else pool.take()
        try:
            conn.request(method, target, body=body, headers=headers)
            return _Exchange(endpoint, conn, conn.getresponse())
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            if isinstance(exc, DeadlineExceeded):
                raise
            if reused:
                # An idle connection the server closed meanwhile, not a failure of the
                # server: a fresh connection is tried without spending an attempt.
                conn = self._connection(endpoint)
                try:
                    conn.request(method, target, body=body, headers=headers)
                    return _Exchange(endpoint, conn, conn.getresponse())
                except (OSError, http.client.HTTPException) as again:
                    conn.close()
                    exc = again
            failure = f"{endpoint.name}: {type(exc).__name__}: {exc}"
            if not idempotent and not isinstance(exc, ConnectionRefusedError):
                # Sent, perhaps applied: asking again could fail where the first succeeded.
                raise Unavailable(f"{what}: {failure} (it may have been applied)") from exc
            raise Transient(failure) from exc
        except BaseException:
            conn.close()
            raise

    def _finish(self, exchange: _Exchange, what: str) -> bytes:
        """The whole body of a successful response, the connection given back; the domain
        error of a failed one."""
        response = exchange.response
        if response.status < 300:
            try:
                body = response.read()
            except (OSError, http.client.HTTPException) as exc:
                exchange.conn.close()
                raise Transient(f"the answer broke off: {type(exc).__name__}") from exc
            self._give(exchange)
            return body
        try:
            body = response.read(_ERROR_BODY)
        except (OSError, http.client.HTTPException):
            body = b""
        finally:
            exchange.conn.close()
        raise self.error_of(response.status, response.reason, body, what)

    def error_of(self, status: int, reason: str, body: bytes, what: str) -> Exception:
        name, message = _remote_exception(body)
        if self._user:
            # Never the user name in a message: HDFS quotes it ("user=alice").
            message = message.replace(self._user, "<user>")
        said = f"{name}: {message}" if name else f"{status} {reason}"
        if name in _TRANSIENT_REMOTE or status >= 500 or status == 429:
            return Transient(f"the server answered {status} ({said})")
        if name and not known_code(name) and status in (401, 403):
            status = 0  # HDFS's 403 for any IOException of its own: not a refusal
        return error_for_status(self.place, what, status, name, said)

    # ---- connections -------------------------------------------------------------------

    def _connection(self, endpoint: Endpoint) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(
            endpoint.address, endpoint.port, timeout=self._settings.timeout_s, blocksize=_CHUNK
        )

    def _pool(self, endpoint: Endpoint) -> KeptConnections:
        with self._lock:
            pool = self._pools.get(endpoint)
            if pool is None:
                limit = max(1, self._settings.max_connections)
                pool = KeptConnections(lambda: self._connection(endpoint), limit)
                self._pools[endpoint] = pool
            return pool

    def _give(self, exchange: _Exchange) -> None:
        self._pool(exchange.endpoint).give(exchange.conn, exchange.response)


def _remote_exception(body: bytes) -> tuple[str, str]:
    """A RemoteException's (exception, message), or ("", "") for another body."""
    try:
        remote = json.loads(body)["RemoteException"]
        return str(remote.get("exception", "")), str(remote.get("message", ""))[:500]
    except (ValueError, KeyError, TypeError, AttributeError):
        return "", ""


class _Exact:
    """A response body as a request body: exactly `size` bytes, else the copy fails (a
    body that ends early would leave the receiver waiting for the rest)."""

    def __init__(
        self, response: http.client.HTTPResponse, size: int, deadline: float, what: str
    ) -> None:
        self._response = response
        self._left = size
        self._deadline = deadline
        self._what = what

    def read(self, amount: int = _CHUNK) -> bytes:
        if self._left == 0:
            return b""
        if time.monotonic() > self._deadline:
            raise DeadlineExceeded(f"{self._what}: the copy took longer than its deadline")
        try:
            data = self._response.read1(
                min(amount, self._left)
            )  # the deadline, as rest_calls' bodies
        except (OSError, http.client.HTTPException) as exc:
            raise Transient(f"the source broke off: {type(exc).__name__}: {exc}") from exc
        if not data:
            raise Transient(f"the source ended {self._left} bytes early")
        self._left -= len(data)
        return data
