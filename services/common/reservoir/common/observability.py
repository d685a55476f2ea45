"""Structured logs, OpenTelemetry metrics and trace context carried across gRPC calls."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import grpc
import grpc.aio
import structlog
from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace

from . import logs
from .config import LogConfig
from .rpc import with_behaviour


def configure(service: str, config: LogConfig, *, export_metrics: bool = False) -> None:
    """Sets up logging and OpenTelemetry for a server process. Call once at start."""
    # The SDK comes with the `server` extra; clients import this module for the API alone.
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    logs.configure_output(config, processors=[_add_trace_ids])
    structlog.contextvars.bind_contextvars(service=service)
    # No span exporter is configured, so no SDK tracer provider either: the API's no-op
    # tracer still carries the caller's trace context (log lines keep their trace ids)
    # without building a span per call, which cost a busy worker a few % of its CPU.
    readers = []
    if export_metrics:
        readers.append(
            PeriodicExportingMetricReader(ConsoleMetricExporter(), export_interval_millis=60_000)
        )
    metrics.set_meter_provider(MeterProvider(metric_readers=readers))


def _add_trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    span = trace.get_current_span().get_span_context()
    if span.is_valid:
        event["trace_id"] = format(span.trace_id, "032x")
    return event


def inject_metadata() -> tuple[tuple[str, str], ...]:
    """W3C trace context of the current span, as gRPC metadata for an outgoing call."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return tuple(carrier.items())


class TraceServerInterceptor(grpc.aio.ServerInterceptor):
    """Continues the caller's trace: every handled call runs inside a server span."""

    def __init__(self, service: str) -> None:
        self._tracer = trace.get_tracer(f"reservoir.{service}")

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        carrier = {k: v for k, v in (details.invocation_metadata or ()) if isinstance(v, str)}
        parent = propagate.extract(carrier)
        name = details.method
        tracer = self._tracer

        def wrap_unary(fn: Any) -> Any:
            async def run(request: Any, context: Any) -> Any:
                token = otel_context.attach(parent)
                try:
                    with tracer.start_as_current_span(name, kind=trace.SpanKind.SERVER):
                        return await fn(request, context)
                finally:
                    otel_context.detach(token)

            return run

        def wrap_stream(fn: Any) -> Any:
            async def run(request: Any, context: Any) -> Any:
                token = otel_context.attach(parent)
                try:
                    with tracer.start_as_current_span(name, kind=trace.SpanKind.SERVER):
                        async for item in fn(request, context):
                            yield item
                finally:
                    otel_context.detach(token)

            return run

        return with_behaviour(handler, wrap_unary, wrap_stream)


meter = metrics.get_meter("reservoir")
