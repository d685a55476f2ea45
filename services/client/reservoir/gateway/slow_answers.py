"""S3's answer to an operation that may outlast a client's read timeout
(CompleteMultipartUpload, CopyObject: each writes a whole object through the write path):
`200` and the XML declaration at once, a space every `progress_interval_s` while the work
runs, then the result document, or an `<Error>` document, which S3 clients read as the
failure it is (boto3 checks these operations' 200 bodies for one)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from aiohttp import web

from reservoir.common import logs
from reservoir.common.errors import ReservoirError

from . import xml_replies
from .s3_errors import REQUEST_ID, S3Error, from_reservoir

log = logs.get_logger(__name__)

_DECLARATION = b'<?xml version="1.0" encoding="UTF-8"?>\n'


async def answer_while(
    request: web.Request,
    work: Coroutine[Any, Any, bytes],
    interval_s: float,
    bucket: str,
    key: str,
) -> web.StreamResponse:
    """Runs `work` (which returns the result document) to its end whatever happens to the
    connection, answering as S3 does meanwhile."""
    task = asyncio.ensure_future(work)
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/xml"})
    try:
        await response.prepare(request)
        await response.write(_DECLARATION)
        while not (await asyncio.wait({task}, timeout=interval_s))[0]:
            await response.write(b" ")
    except (ConnectionError, OSError) as exc:
        # The client is gone: the work still ends (published or aborted, never half).
        log.info("gateway_client_left", path=request.path, error=str(exc))
        with contextlib.suppress(Exception):
            await task
        raise
    failure: S3Error | None = None
    try:
        body = task.result()
    except S3Error as err:
        failure = err
    except ReservoirError as exc:
        log.info("gateway_request_failed", path=request.path, error=str(exc))
        failure = from_reservoir(exc, bucket, key)
    if failure is not None:
        body = xml_replies.error(failure, request.path, request.get(REQUEST_ID, ""))
    await response.write(body.removeprefix(_DECLARATION))
    await response.write_eof()
    return response
