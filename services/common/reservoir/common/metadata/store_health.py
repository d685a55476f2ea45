"""The health of a server's metadata store, as a service of the standard gRPC health check.

`Check(service="reservoir.metadata")` asks the server to check its store now: SERVING when
the store takes writes, else the error a write would meet, through the one error table
(etcd out of space: RESOURCE_EXHAUSTED "etcd is out of space: …"; etcd unreachable:
UNAVAILABLE). The server's own health ("") stays what it was: a master whose etcd is full
still serves every read, so probes that restart or unroute it would only make things worse.
A server that has no such check answers NOT_FOUND, as the protocol says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import grpc.aio
from grpc_health.v1 import health, health_pb2

from reservoir.common.errors import ReservoirError, Unavailable
from reservoir.common.rpc import abort_with

METADATA_SERVICE = "reservoir.metadata"
# Kept from the caller's deadline for the answer to travel back.
DEADLINE_MARGIN_S = 0.25


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
        # Within the caller's deadline, so that a store that does not answer is reported
        # as such rather than as the caller's own timeout.
        remaining = context.time_remaining()
        budget = None if remaining is None else max(0.05, remaining - DEADLINE_MARGIN_S)
        try:
            await asyncio.wait_for(self._check_store(), budget)
        except TimeoutError:
            await abort_with(
                context, Unavailable(f"the metadata store did not answer within {budget:.1f}s")
            )
        except ReservoirError as exc:
            await abort_with(context, exc)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
