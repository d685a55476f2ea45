"""Ranged GETs received straight into the caller's buffer (`UnderStore.get_range_into`)
on kept-alive connections (`range_connections.py`): the answer read by the one error
table (`store_errors.py`) and the one retry loop (`body_retries.py`). A store says how a
GET of a key is addressed, made conditional on its change token and signed
(`DirectGets._request`): S3 by a URL obstore presigned (`signed_gets.py`), GCS and Azure
by a header signed per request (`ObstoreUnderStore._get_request`), HTTP(S) unsigned, its
change token checked on the answer's headers (`_accept`).

A body that breaks off is resumed into the same buffer: a GET of the bytes still missing.
A body still arriving at the GET's deadline (`request_timeout_s`) is DeadlineExceeded, and
not asked for again: it would be as slow the next time.
A store's SDK would receive the body into buffers of its own and hand out a copy (obstore:
two); here the kernel's copy into the caller's buffer is the only one.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from reservoir.common.errors import DeadlineExceeded, ReservoirError, Unavailable
from reservoir.common.understore.body_retries import BodyBrokeOff, RequestFailed, read_retrying
from reservoir.common.understore.range_connections import (
    AnswerBrokeOff,
    BadAnswer,
    DeadlinePassed,
    RangeAnswer,
    RangeConnections,
    connections_to,
)
from reservoir.common.understore.store_errors import StorePlace, error_for_status
from reservoir.common.understore.under_store import UnderStoreSettings

_RETRIED_STATUS = {429, 500, 502, 503, 504}
_CODE = re.compile(rb"<Code>([^<]{1,64})</Code>")
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")


class DirectGets:
    """The GETs of one store (bucket or container, and prefix) into callers' buffers."""

    def __init__(self, settings: UnderStoreSettings, place: StorePlace) -> None:
        self._settings = settings
        self._place = place

    def _request(self, key: str, token: str, headers: dict[str, str]) -> str:
        """The URL of a GET of `key` that fails unless the object's change token is still
        `token` ('': any); `headers` (its Range) completed with what the store asks for
        (the precondition, a signature)."""
        raise NotImplementedError

    def _denied(self, key: str) -> None:
        """A GET of `key` was refused (403): what was kept to sign it may be stale."""

    def _accept(self, answer: RangeAnswer, token: str, what: str) -> None:
        """Raises unless a 2xx answer is the object of change token `token` (for a store
        that cannot make the GET conditional: it looks at the answer's headers)."""

    async def get_into(
        self, key: str, offset: int, out: memoryview, token: str, *, what: str
    ) -> int:
        received = 0  # by the attempts so far: a broken body is resumed, not read again

        async def attempt() -> int:
            nonlocal received
            answer = await self._get(key, offset + received, out[received:], token, what)
            received += answer.received
            if isinstance(answer.broke_off, DeadlinePassed):
                # Not read again: a body this slow would be as slow the next time.
                raise DeadlineExceeded(
                    f"{what}: the response took longer than its deadline "
                    f"({self._settings.request_timeout_s} s)"
                ) from answer.broke_off
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
        self, key: str, start: int, out: memoryview, token: str, what: str
    ) -> RangeAnswer:
        """One GET of `len(out)` bytes from `start` into `out`: its 2xx answer (the body
        complete or broken off), else the domain error."""
        headers = {"Range": f"bytes={start}-{start + len(out) - 1}"}
        url = urlsplit(self._request(key, token, headers))
        target = url.path + (f"?{url.query}" if url.query else "")
        answer = await self._exchange(f"{url.scheme}://{url.netloc}", target, headers, out, what)
        if 200 <= answer.status < 300:
            self._check_range(answer, start, what)
            if answer.unread:
                raise Unavailable(
                    f"{what}: {self._place.where} answered {answer.status} with "
                    f"{answer.length} bytes, more than the {len(out)} asked for"
                )
            self._accept(answer, token, what)
            return answer
        error = self._error(answer, what)
        if answer.status == 403:
            self._denied(key)
        if answer.status in _RETRIED_STATUS:
            raise RequestFailed(error)
        raise error

    async def _exchange(
        self,
        origin: str,
        target: str,
        headers: dict[str, str],
        out: memoryview,
        what: str,
        endpoint: str = "",
    ) -> RangeAnswer:
        """One GET of `target` at `origin` on the kept connections there: its answer (a 2xx
        body in `out`), RequestFailed when none came. `endpoint`: the name errors give the
        origin (the store's own endpoint by default)."""
        try:
            return await self._connections_to(origin).get_into(target, headers, out)
        except (AnswerBrokeOff, OSError) as exc:
            raise RequestFailed(
                Unavailable(
                    f"{what}: cannot connect to the under-store endpoint "
                    f"{endpoint or self._place.endpoint} ({type(exc).__name__}: {exc})"
                )
            ) from exc
        except BadAnswer as exc:
            raise Unavailable(f"{what}: {self._place.where}: {exc}") from exc

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

    def _ca_bundle(self) -> str:
        """The CAs this store's https connections trust instead of the system's (a file);
        "": the system's (`SSL_CERT_FILE` honoured), as the store's own client does."""
        return ""

    def _connections_to(self, origin: str, shared_threads: str = "") -> RangeConnections:
        settings = self._settings
        return connections_to(
            origin,
            settings.max_connections,
            settings.timeout_s,
            settings.request_timeout_s,
            self._ca_bundle(),
            shared_threads,
        )
