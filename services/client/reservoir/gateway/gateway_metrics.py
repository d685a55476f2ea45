"""The gateway's Prometheus metrics: requests by S3 operation and status, bytes received
and sent, and how long requests take, served at GET /metrics on their own port
(RESERVOIR_METRICS_LISTEN, as the master's and the workers'), so no bucket's name is
taken from the S3 API."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import Counter, Histogram

from reservoir.common.serving.metrics_endpoint import server_registry

PREFIX = "reservoir_gateway_"
# Where a request keeps the S3 operation it was named (routes.py); unnamed: refused first.
OPERATION = "reservoir_operation"
UNNAMED = "Unknown"
# From a small object's first byte out of the cache to a large copy's completion.
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = server_registry()
        self._requests = Counter(
            PREFIX + "requests",
            "S3 requests answered, by operation and HTTP status (aborted: the connection "
            "was cut mid-answer).",
            ["operation", "status"],
            registry=self.registry,
        )
        self._received = Counter(
            PREFIX + "received_bytes",
            "Request body bytes read, by operation.",
            ["operation"],
            registry=self.registry,
        )
        self._sent = Counter(
            PREFIX + "sent_bytes",
            "Response body bytes sent, by operation.",
            ["operation"],
            registry=self.registry,
        )
        self._seconds = Histogram(
            PREFIX + "request_seconds",
            "Time from a request's arrival to the end of its answer, by operation.",
            ["operation"],
            buckets=_BUCKETS,
            registry=self.registry,
        )

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = "aborted"
        sent = 0
        try:
            response = await handler(request)
            status = str(response.status)
            # A streamed body has gone out by now; a plain one is sent after this returns.
            sent = response.body_length if response.prepared else response.content_length or 0
            return response
        finally:
            operation = request.get(OPERATION, UNNAMED)
            self._requests.labels(operation, status).inc()
            self._received.labels(operation).inc(request.content.total_bytes)
            self._sent.labels(operation).inc(sent)
            self._seconds.labels(operation).observe(time.perf_counter() - started)
