"""The gateway's HTTP server (aiohttp): every request goes through `Gateway.handle`,
which names the target, checks the signature, runs the operation and turns any error
into S3's XML error (or a bare status for HEAD, whose responses have no body)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import ssl
from collections import deque

from aiohttp import web

from reservoir.client.async_client import AsyncClient
from reservoir.common import logs
from reservoir.common.config import GatewayConfig
from reservoir.common.errors import NotADirectory, NotFound, ReservoirError
from reservoir.common.models import Inode
from reservoir.common.serving.metrics_endpoint import MetricsEndpoint

from . import xml_replies
from .body_reads import BodyReads
from .bucket_listing import list_objects_v1, list_objects_v2
from .gateway_metrics import OPERATION, UNNAMED, GatewayMetrics
from .key_walk import KeyWalk
from .naming import Target, check_bucket
from .object_headers import byte_range, check_conditions, object_headers, overrides
from .routes import WRITE_METHODS, Routes
from .s3_errors import (
    REQUEST_ID,
    S3Error,
    access_denied,
    from_reservoir,
    no_such_bucket,
    no_such_key,
)
from .signatures import AccessKey, SignatureCheck, SignedRequest, query_pairs, read_keys
from .writes import GatewayWrites, Operation

log = logs.get_logger(__name__)

_XML = "application/xml"
# A body is sent in writes of at most this many bytes, each bounded by `send_timeout_s`.
_SEND_BYTES = 1 << 20


class Gateway:
    def __init__(self, config: GatewayConfig, client: AsyncClient) -> None:
        self.config = config
        self._client = client
        keys = read_keys(config.keys_file) if config.keys_file else None
        self._signatures = SignatureCheck(keys, config.clock_skew_s) if keys is not None else None
        self.writes = GatewayWrites(config, client, signatures_checked=keys is not None)
        self.bodies = BodyReads(config, client)
        self.metrics = GatewayMetrics()
        self.routes: Routes[Operation] = Routes(
            {
                "ListBuckets": self._list_buckets,
                "HeadBucket": self._head_bucket,
                "GetBucketLocation": self._bucket_location,
                "ListObjects": self._list_objects,
                "ListObjectsV2": self._list_objects,
                "GetObject": self._object,
                "HeadObject": self._object,
                **self.writes.operations,
            }
        )

    def app(self) -> web.Application:
        app = web.Application(
            handler_args={"max_field_size": 16384}, middlewares=[self.metrics.middleware]
        )
        app.router.add_route("*", "/{tail:.*}", self.handle)
        app.on_response_prepare.append(_stamp)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        request_id = secrets.token_hex(8).upper()
        request[REQUEST_ID] = request_id
        head = request.method == "HEAD"
        target = Target.of(request.raw_path, request.host, self.config.virtual_host_domain)
        try:
            signer = self._authenticate(request)
            return await self._dispatch(request, target, signer)
        except S3Error as err:
            return _error(err, request, target, head)
        except ReservoirError as exc:
            log.info("gateway_request_failed", path=request.path, error=str(exc))
            return _error(from_reservoir(exc, target.bucket, target.key), request, target, head)

    def _authenticate(self, request: web.Request) -> AccessKey | None:
        if self._signatures is None:
            return None
        raw_query = request.raw_path.partition("?")[2]
        signed = SignedRequest(
            request.method, request.raw_path, query_pairs(raw_query), request.headers
        )
        return self._signatures.signer(signed)

    async def _dispatch(
        self, request: web.Request, target: Target, signer: AccessKey | None
    ) -> web.StreamResponse:
        method, query, headers = request.method, request.query, request.headers
        shape = self.routes.operation(method, target, query, headers)
        request[OPERATION] = shape.name if shape is not None else UNNAMED
        if method in WRITE_METHODS and signer is not None and not signer.may_write:
            raise access_denied()  # before anything is read or written
        route = self.routes.handler_for(shape, method, target, query, headers)
        if target.bucket and not target.valid_bucket():
            raise no_such_bucket(target.bucket)
        return await route.handler(request, target)

    # ---- the service and buckets ----------------------------------------------------------

    async def _list_buckets(self, request: web.Request, target: Target) -> web.StreamResponse:
        """Each top-level directory, created when the first mount below it was (such a
        directory exists only through its mounts, and has no time of its own)."""
        created: dict[str, int] = {}
        for mount in await self._client.mounts():
            bucket = mount.path.split("/")[1]
            created[bucket] = min(created.get(bucket, mount.created_ms), mount.created_ms)
        names = [
            (entry.path[1:], entry.mtime_ms or created.get(entry.path[1:], 0))
            async for entry in self._client.iter_ls("/")
            if entry.is_dir
        ]
        body = b"" if request.method == "HEAD" else xml_replies.buckets(names)
        return web.Response(body=body, content_type=_XML)

    async def _head_bucket(self, request: web.Request, target: Target) -> web.StreamResponse:
        await check_bucket(self._client, target)
        return web.Response(headers={"x-amz-bucket-region": self.config.region})

    async def _bucket_location(self, request: web.Request, target: Target) -> web.StreamResponse:
        await check_bucket(self._client, target)
        return web.Response(body=xml_replies.location(self.config.region), content_type=_XML)

    async def _list_objects(self, request: web.Request, target: Target) -> web.StreamResponse:
        """ListObjects and ListObjectsV2."""
        await check_bucket(self._client, target)
        query = request.query
        walk = KeyWalk(self._client, target.bucket, self.config.client.list_page_size)
        if query.get("list-type") == "2":
            body = await list_objects_v2(walk, target.bucket, query)
        else:
            body = await list_objects_v1(walk, target.bucket, query)
        return web.Response(body=body, content_type=_XML)

    # ---- objects ------------------------------------------------------------------------

    async def _stat_object(self, target: Target) -> Inode:
        path = target.object_path()
        if path is None:
            await check_bucket(self._client, target)
            raise no_such_key(target.key)
        try:
            inode = await self._client.stat(path)
        except (NotFound, NotADirectory):
            await check_bucket(self._client, target)
            raise no_such_key(target.key) from None
        if inode.is_dir:
            raise no_such_key(target.key)
        return inode

    async def _object(self, request: web.Request, target: Target) -> web.StreamResponse:
        """GetObject and HeadObject."""
        inode = await self._stat_object(target)
        headers = object_headers(inode)
        if check_conditions(request.headers, inode) == 304:
            kept = {k: headers[k] for k in ("ETag", "Last-Modified")}
            return web.Response(status=304, headers=kept)
        wanted = byte_range(request.headers.get("Range"), inode.size)
        first, length, status = 0, inode.size, 200
        if wanted is not None:
            first, length, status = wanted.first, wanted.length, 206
            headers["Content-Range"] = f"bytes {wanted.first}-{wanted.last}/{inode.size}"
        headers |= overrides(request.query)
        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = length
        await response.prepare(request)
        if request.method == "GET" and length:
            try:
                await self._send(response, inode, first, length)
            except (ReservoirError, OSError) as exc:
                # The status line is sent: no error response can follow. The connection is
                # cut, so the client sees a short body as a failure, never as the object.
                log.warning("gateway_body_failed", path=inode.path, error=str(exc))
                raise ConnectionResetError(f"{inode.path}: {exc}") from exc
        await response.write_eof()
        return response

    async def _send(
        self, response: web.StreamResponse, inode: Inode, first: int, length: int
    ) -> None:
        """The body in pieces of `read_piece_bytes`, `read_ahead` pieces read while one is
        sent: memory per response is bounded, and the cache and the socket work at once."""
        piece = self.config.read_piece_bytes
        if length <= piece:  # one piece (every small object): no read-ahead to arrange
            pieces = await self.bodies.piece(inode, first, length)
            _check_sent(inode, await self._write(response, pieces), length)
            return
        offsets = iter(range(first, first + length, piece))
        end = first + length

        def read(offset: int) -> asyncio.Future[list[memoryview]]:
            size = min(piece, end - offset)
            return asyncio.ensure_future(self.bodies.piece(inode, offset, size))

        reading = deque(read(o) for o in itertools.islice(offsets, 1 + self.config.read_ahead))
        sent = 0
        try:
            while reading:
                pieces = await reading.popleft()
                following = next(offsets, None)
                if following is not None:
                    reading.append(read(following))
                sent += await self._write(response, pieces)
        finally:
            for pending in reading:
                pending.cancel()
        _check_sent(inode, sent, length)

    async def _write(self, response: web.StreamResponse, pieces: list[memoryview]) -> int:
        """`pieces` sent, a MiB at a time, each within `send_timeout_s`: a client that
        takes nothing for that long (TimeoutError, an OSError) has its connection cut
        instead of holding the response and its read-ahead for ever."""
        sent = 0
        for part in pieces:
            for start in range(0, len(part), _SEND_BYTES):
                async with asyncio.timeout(self.config.send_timeout_s):
                    await response.write(part[start : start + _SEND_BYTES])
            sent += len(part)
        return sent


def _check_sent(inode: Inode, sent: int, length: int) -> None:
    if sent != length:
        # The object changed under the response: the client must not take a short body
        # for the object, so the connection is cut rather than the body ended.
        raise ConnectionResetError(f"{inode.path}: sent {sent} of {length} bytes")


def _error(err: S3Error, request: web.Request, target: Target, head: bool) -> web.Response:
    resource = request.path
    headers = dict(err.headers)
    if head:
        return web.Response(status=err.status, headers=headers)
    body = xml_replies.error(err, resource, request[REQUEST_ID])
    return web.Response(status=err.status, body=body, content_type=_XML, headers=headers)


async def _stamp(request: web.Request, response: web.StreamResponse) -> None:
    request_id = request.get(REQUEST_ID, "")
    response.headers["x-amz-request-id"] = request_id
    response.headers["x-amz-id-2"] = request_id
    response.headers["Server"] = "Reservoir"


def _ssl_context(config: GatewayConfig) -> ssl.SSLContext | None:
    cert, key = config.certificate
    if not cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


async def serve(config: GatewayConfig, started: asyncio.Event | None = None) -> None:
    """Serves until cancelled (SIGTERM, Ctrl-C): logs `gateway_serving` with its address."""
    host, _, port = config.listen.rpartition(":")
    async with AsyncClient(config=config.client) as client:
        gateway = Gateway(config, client)
        runner = web.AppRunner(
            gateway.app(),
            access_log=None,
            handle_signals=False,
            keepalive_timeout=config.keepalive_timeout_s,
        )
        await runner.setup()
        metrics = MetricsEndpoint(gateway.metrics.registry, config.metrics)
        context = _ssl_context(config)
        site = web.TCPSite(runner, host.strip("[]") or "0.0.0.0", int(port), ssl_context=context)
        try:
            await site.start()
            metrics_port = await metrics.start()
            bound = runner.addresses[0]
            scheme = "https" if context else "http"
            log.info(
                "gateway_serving",
                url=f"{scheme}://{bound[0]}:{bound[1]}",
                master=config.client.master,
                signatures="checked" if config.keys_file else "not checked",
                metrics_port=metrics_port or None,
            )
            if started is not None:
                started.set()
            await asyncio.Event().wait()
        finally:
            with contextlib.suppress(Exception):
                await runner.cleanup()
            await metrics.close()
            gateway.writes.close()
            gateway.bodies.close()
