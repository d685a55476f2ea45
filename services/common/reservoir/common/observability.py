"""Structured logs, trace context carried across gRPC calls, and span export over OTLP."""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import grpc
import grpc.aio
import structlog
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace

from reservoir.common import logs
from reservoir.common.config import LogConfig, TraceExportSettings
from reservoir.common.rpc import with_behaviour

log = logs.get_logger(__name__)


def configure(service: str, config: LogConfig, traces: TraceExportSettings) -> None:
    """Sets up logging and tracing for a server process. Call once at start.

    Spans are exported over OTLP when OpenTelemetry's standard endpoint variable is set
    (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Without one there
    is no SDK tracer provider: the API's no-op tracer still carries the caller's trace
    context (log lines keep their trace ids) without building a span per call, which cost
    a busy worker a few % of its CPU.
    """
    logs.configure_output(config, processors=[_add_trace_ids])
    structlog.contextvars.bind_contextvars(service=service)
    if traces.exporting:
        trace.set_tracer_provider(otlp_tracer_provider(f"reservoir-{service}", traces))
        log.info(
            "traces_exporting",
            protocol=traces.wire_protocol,
            endpoint=traces.traces_endpoint or traces.endpoint,
        )


def otlp_tracer_provider(service_name: str, traces: TraceExportSettings) -> Any:
    """An SDK tracer provider that batches spans to the OTLP endpoint the OTEL_* variables
    name (the exporter reads them: endpoint, headers, timeout, compression, TLS).
    OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the process when set."""
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if traces.wire_protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[assignment]
            OTLPSpanExporter,
        )
    detected = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, SDK facts
    if str(detected.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        detected = detected.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=detected)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


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
