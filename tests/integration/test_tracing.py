"""Trace context crosses a gRPC hop: the server span continues the caller's trace."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from reservoir.common.observability import TraceServerInterceptor, inject_metadata


def test_server_span_joins_the_callers_trace() -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    seen: list[int] = []

    async def handler(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        seen.append(trace.get_current_span().get_span_context().trace_id)
        return request

    async def main() -> int:
        trace.set_tracer_provider(provider)
        server = grpc.aio.server(interceptors=[TraceServerInterceptor("test")])
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "t.Echo", {"Call": grpc.unary_unary_rpc_method_handler(handler)}
                )
            ]
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                call = channel.unary_unary("/t.Echo/Call")
                with tracer.start_as_current_span("client-op") as span:
                    await call(b"x", timeout=5, metadata=inject_metadata())
                    return int(span.get_span_context().trace_id)
        finally:
            await server.stop(None)

    caller = asyncio.run(main())
    assert seen == [caller]
