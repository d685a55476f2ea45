"""The few REST calls a cloud store needs that obstore does not make (Azure's blocks and
conditional copies, GCS's JSON API), each with the store's deadline and bounded attempts.

A request that cannot connect, or is answered 429 or 5xx, is tried again (settings.retries
attempts in all, with the body-retry backoff between); any other answer is the caller's
to read. `status_error` maps a final non-2xx answer through the under-stores' one
error table (`store_errors.py`).
"""

from __future__ import annotations

import http.client
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from reservoir.common.errors import DeadlineExceeded, InvalidArgument, ReservoirError, Unavailable
from reservoir.common.understore.request_attempts import Transient, read_body, tried
from reservoir.common.understore.store_errors import StorePlace, error_for_status
from reservoir.common.understore.under_store import UnderStoreSettings

# The most of an answer without a Content-Length (a chunked JSON page) that is read.
_MAX_ANSWER = 64 * 1024 * 1024

# Signs a request in place: (method, URL path with query, headers) -> None.
Signer = Callable[[str, str, dict[str, str]], None]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: dict[str, str]  # names lower case
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class RestCalls:
    """Requests to one endpoint (`base_url`: scheme://host[:port]), signed by `sign`."""

    def __init__(
        self,
        base_url: str,
        settings: UnderStoreSettings,
        *,
        endpoint: str,
        credential_source: str,
        sign: Signer | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidArgument(f"bad endpoint URL {base_url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._settings = settings
        self._sign = sign
        self.endpoint = endpoint
        self.place = StorePlace(endpoint, credential_source)

    def call(
        self,
        method: str,
        path: str,
        what: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """The answer to `method path` (path with its query, already quoted); Unavailable
        when no attempt got a final answer."""
        attempts = max(1, self._settings.retries)
        last = ""
        for attempt in range(attempts):
            sent = dict(headers or {})
            sent["Content-Length"] = str(len(body))
            if self._sign is not None:
                self._sign(method, path, sent)
            try:
                answer = self._once(method, path, body, sent, what)
            except DeadlineExceeded:
                raise
            except (OSError, http.client.HTTPException, Transient) as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if answer.status != 429 and answer.status < 500:
                    return answer
                if attempt + 1 == attempts:
                    return answer
                last = f"status {answer.status}"
            if attempt + 1 < attempts:
                time.sleep(self._settings.body_retry.delay_s(attempt))
        raise Unavailable(
            f"{what}: cannot reach the under-store endpoint {self.endpoint} ({last}; "
            f"{tried(attempts)})"
        )

    def _once(
        self, method: str, path: str, body: bytes, headers: dict[str, str], what: str
    ) -> Answer:
        deadline = time.monotonic() + self._settings.request_timeout_s
        connection_type = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        connection = connection_type(self._host, self._port, timeout=self._settings.timeout_s)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            data = read_body(response, response.length, deadline, what, limit=_MAX_ANSWER)
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
        finally:
            connection.close()

    def status_error(self, answer: Answer, what: str) -> ReservoirError:
        """The domain error for a final non-2xx answer, by its status and the store's
        error code (Azure's XML <Code>, GCS's JSON "reason")."""
        return error_for_status(self.place, what, answer.status, _code(answer.body))


_XML_CODE = re.compile(rb"<Code>([A-Za-z]{1,100})</Code>")
_JSON_REASON = re.compile(rb'"reason"\s*:\s*"([A-Za-z ]{1,100})"')


def _code(body: bytes) -> str:
    """The store's error code in an error body ("" when it names none)."""
    match = _XML_CODE.search(body) or _JSON_REASON.search(body)
    return match.group(1).decode() if match else ""
