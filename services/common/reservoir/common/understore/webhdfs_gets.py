"""The webhdfs:// store's reads on the GET stack every store's reads take (`direct_gets.py`):
an OPEN is asked of the namenode, which answers with a redirect to a datanode (or, rarely,
with the bytes itself); the redirect is checked (`webhdfs_redirects.py`) and followed, and
the datanode's answer is received straight into the caller's buffer. Both hops go over the
process's kept-alive connections to that node; the range is in the query (offset, length),
as WebHDFS takes it, not in a Range header.

HDFS has no conditional read: the change token is checked by the store after the bytes
arrived (`WebHdfsUnderStore.get_range_into`).
"""

from __future__ import annotations

import asyncio

from reservoir.common.errors import InvalidArgument, Unavailable
from reservoir.common.understore.body_retries import RequestFailed
from reservoir.common.understore.direct_gets import DirectGets
from reservoir.common.understore.range_connections import RangeAnswer, RangeConnections
from reservoir.common.understore.request_attempts import Transient
from reservoir.common.understore.under_store import UnderStoreSettings
from reservoir.common.understore.webhdfs_redirects import Endpoint, checked
from reservoir.common.understore.webhdfs_requests import WebHdfsRequests

_HEADERS = {"Accept-Encoding": "identity"}


class HdfsGets(DirectGets):
    """OPENs of files (by absolute HDFS path) into callers' buffers."""

    def __init__(self, requests: WebHdfsRequests, settings: UnderStoreSettings) -> None:
        super().__init__(settings, requests.place)
        self._requests = requests
        self._namenode = _origin(requests.namenode)

    async def _get(
        self, key: str, start: int, out: memoryview, token: str, what: str
    ) -> RangeAnswer:
        """`key` is the file's absolute path; `token` is checked by the caller."""
        target = self._requests.target(key, "OPEN", {"offset": str(start), "length": str(len(out))})
        answer = await self._at(self._requests.namenode, target, out, what)
        if 300 <= answer.status < 400:
            location = answer.headers.get("location", "")
            # Resolving a datanode's name may block: not on the event loop.
            redirect = await asyncio.to_thread(checked, location, self._requests.loopback_ok, what)
            if redirect is None:
                raise RequestFailed(
                    Unavailable(f"{what}: the datanode the namenode named does not resolve")
                )
            answer = await self._at(redirect.endpoint, redirect.target, out, what)
        if 200 <= answer.status < 300:
            if answer.unread:
                raise InvalidArgument(
                    f"{what}: the server sent {answer.length} bytes, more than the "
                    f"{len(out)} asked for"
                )
            return answer
        if 300 <= answer.status < 400:
            raise InvalidArgument(f"{what}: a datanode redirected again ({answer.status})")
        error = self._requests.error_of(answer.status, "", answer.error_body, what)
        if isinstance(error, Transient):
            raise RequestFailed(Unavailable(f"{what}: {error}"))
        raise error

    async def _at(self, node: Endpoint, target: str, out: memoryview, what: str) -> RangeAnswer:
        return await self._exchange(_origin(node), target, dict(_HEADERS), out, what, node.name)

    def _connections_to(self, origin: str, shared_threads: str = "") -> RangeConnections:
        if origin == self._namenode:
            return super()._connections_to(origin, shared_threads)
        # A datanode: one of many, met by redirect; their GETs share one set of threads.
        return super()._connections_to(origin, shared_threads or "ufs-datanode-get")


def _origin(node: Endpoint) -> str:
    host = f"[{node.address}]" if ":" in node.address else node.address
    return f"http://{host}:{node.port}"
