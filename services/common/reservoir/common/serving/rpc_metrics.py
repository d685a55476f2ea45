"""Per-method request counts and latency of a gRPC server, for Prometheus.

The names and labels are those of go-grpc-prometheus (`grpc_server_handled_total`,
`grpc_server_handling_seconds`), which existing dashboards and alerts already query.
A streaming call is timed until its last message is sent.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio
from prometheus_client import CollectorRegistry, Counter, Histogram

from reservoir.common.rpc import with_behaviour

# From a cached small read (~100 us) to a block fetched from a slow store (seconds).
LATENCY_BUCKETS_S = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)


class RpcMetrics:
    """The instruments, registered in one server's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.handled = Counter(
            "grpc_server_handled",
            "RPCs completed on the server, by method and status code.",
            ["grpc_type", "grpc_service", "grpc_method", "grpc_code"],
            registry=registry,
        )
        self.seconds = Histogram(
            "grpc_server_handling_seconds",
            "Time from the start of an RPC to its last response, by method.",
            ["grpc_type", "grpc_service", "grpc_method"],
            buckets=LATENCY_BUCKETS_S,
            registry=registry,
        )
        self._codes: dict[tuple[str, str, str, str], Any] = {}
        self._timers: dict[str, Any] = {}

    def record(self, kind: str, method: str, code: grpc.StatusCode, seconds: float) -> None:
        service, _, name = method.lstrip("/").rpartition("/")
        timer = self._timers.get(method)
        if timer is None:
            timer = self._timers[method] = self.seconds.labels(kind, service, name)
        key = (kind, service, name, code.name)
        counter = self._codes.get(key)
        if counter is None:
            counter = self._codes[key] = self.handled.labels(*key)
        timer.observe(seconds)
        counter.inc()


def _code(context: Any, exc: BaseException | None) -> grpc.StatusCode:
    if isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
        return grpc.StatusCode.CANCELLED  # the caller went away
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        return code
    return grpc.StatusCode.UNKNOWN if exc is not None else grpc.StatusCode.OK


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):
    """Times every call and counts it by the status it ended with."""

    def __init__(self, metrics: RpcMetrics) -> None:
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        method = details.method
        record = self._metrics.record

        def wrap_unary(fn: Any) -> Any:
            async def run(request: Any, context: Any) -> Any:
                start = time.perf_counter()
                failure: BaseException | None = None
                try:
                    return await fn(request, context)
                except BaseException as exc:
                    failure = exc
                    raise
                finally:
                    elapsed = time.perf_counter() - start
                    record("unary", method, _code(context, failure), elapsed)

            return run

        def wrap_stream(fn: Any) -> Any:
            async def run(request: Any, context: Any) -> Any:
                start = time.perf_counter()
                failure: BaseException | None = None
                try:
                    async for item in fn(request, context):
                        yield item
                except BaseException as exc:
                    failure = exc
                    raise
                finally:
                    elapsed = time.perf_counter() - start
                    record("server_stream", method, _code(context, failure), elapsed)

            return run

        return with_behaviour(handler, wrap_unary, wrap_stream)
