"""The health of a server's metadata store, as a service of the standard gRPC health check.

`Check(service="reservoir.metadata")` asks the server to check its store now: SERVING when
the store takes writes, else the error a write would meet, through the one error table
(etcd out of space: RESOURCE_EXHAUSTED "etcd is out of space: …"; etcd unreachable:
UNAVAILABLE). The server's own health ("") stays what it was: a master whose etcd is full
still serves every read, so probes that restart or unroute it would only make things worse.
A server that has no such check answers NOT_FOUND, as the protocol says.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc.aio
from grpc_health.v1 import health, health_pb2

from .errors import ReservoirError
from .rpc import abort_with

METADATA_SERVICE = "reservoir.metadata"


class StoreHealthServicer(health.aio.HealthServicer):
    """The standard health servicer, plus `METADATA_SERVICE` checked on each call."""

    def __init__(self, check_store: Callable[[], Awaitable[None]]) -> None:
        super().__init__()
        self._check_store = check_store

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        if request.service != METADATA_SERVICE:
            return await super().Check(request, context)
        try:
            await self._check_store()
        except ReservoirError as exc:
            await abort_with(context, exc)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
