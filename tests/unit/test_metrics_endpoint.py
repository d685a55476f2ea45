"""The /metrics endpoint and the gRPC request metrics, in-process: real sockets, a real
gRPC server, the output parsed the way Prometheus's own client library parses it."""

from __future__ import annotations

import asyncio
import gzip
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator

import grpc
import grpc.aio
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from reservoir.common.config import MetricsSettings, TraceExportSettings
from reservoir.common.errors import InvalidArgument
from reservoir.common.serving.metrics_endpoint import MetricsEndpoint, split_listen
from reservoir.common.serving.rpc_metrics import RpcMetrics, RpcMetricsInterceptor

DEADLINE_S = 10.0


async def _exchange(port: int, request: bytes) -> tuple[str, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), DEADLINE_S)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines)}
    return status, headers, body


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("demo_reads", "Reads.", ["source"], registry=registry).labels("mem").inc(3)
    return registry


def test_get_metrics_returns_prometheus_text_and_other_requests_get_clear_refusals() -> None:
    async def main() -> None:
        endpoint = MetricsEndpoint(_registry(), MetricsSettings(listen="127.0.0.1:0"))
        port = await endpoint.start()
        try:
            status, headers, body = await _exchange(
                port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n"
            )
            assert status == "HTTP/1.1 200 OK"
            assert headers["content-type"].startswith("text/plain; version=")
            assert int(headers["content-length"]) == len(body)
            families = {f.name: f for f in text_string_to_metric_families(body.decode())}
            (sample,) = families["demo_reads"].samples
            assert sample.labels == {"source": "mem"} and sample.value == 3

            status, headers, body = await _exchange(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
            assert status == "HTTP/1.1 200 OK" and body == b""
            assert int(headers["content-length"]) > 0

            status, _, _ = await _exchange(port, b"GET /other HTTP/1.1\r\n\r\n")
            assert status == "HTTP/1.1 404 Not Found"
            status, headers, _ = await _exchange(port, b"POST /metrics HTTP/1.1\r\n\r\n")
            assert status == "HTTP/1.1 405 Method Not Allowed" and headers["allow"] == "GET, HEAD"
            status, _, _ = await _exchange(port, b"\x16\x03\x01 not http\r\n\r\n")
            assert status == "HTTP/1.1 400 Bad Request"
            huge = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 100_000 + b"\r\n\r\n"
            status, _, _ = await _exchange(port, huge)
            assert status == "HTTP/1.1 431 Request Header Fields Too Large"
            # Still serving after all of that.
            status, _, _ = await _exchange(port, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n")
            assert status == "HTTP/1.1 200 OK"
        finally:
            await endpoint.close()

    asyncio.run(main())


# What Prometheus 3 sends when it scrapes (its default scrape protocols, in order).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


def _get(accept: str = "", encoding: str = "", method: str = "GET") -> bytes:
    lines = [f"{method} /metrics HTTP/1.1", "Host: x"]
    lines += [f"Accept: {accept}"] if accept else []
    lines += [f"Accept-Encoding: {encoding}"] if encoding else []
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_metrics_answer_openmetrics_and_gzip_when_the_scraper_asks_and_text_otherwise() -> None:
    async def main() -> None:
        endpoint = MetricsEndpoint(_registry(), MetricsSettings(listen="127.0.0.1:0"))
        port = await endpoint.start()
        try:
            status, headers, body = await _exchange(port, _get(PROMETHEUS_ACCEPT))
            assert status == "HTTP/1.1 200 OK"
            assert headers["content-type"].startswith("application/openmetrics-text; version=1")
            assert "content-encoding" not in headers and body.endswith(b"# EOF\n")
            (family,) = openmetrics_families(body.decode())
            assert family.name == "demo_reads" and family.type == "counter"
            (sample,) = [s for s in family.samples if s.name == "demo_reads_total"]
            assert sample.labels == {"source": "mem"} and sample.value == 3

            status, headers, packed = await _exchange(port, _get(encoding="gzip, deflate, br"))
            assert headers["content-encoding"] == "gzip"
            assert headers["content-type"].startswith("text/plain; version=")
            assert int(headers["content-length"]) == len(packed)
            text = gzip.decompress(packed).decode()
            assert "demo_reads_total" in text and "# EOF" not in text

            # Both at once, the header names in another case, as a proxy may send them.
            request = _get(PROMETHEUS_ACCEPT, "gzip").replace(b"Accept", b"accept")
            _, headers, packed = await _exchange(port, request)
            assert headers["content-encoding"] == "gzip"
            assert gzip.decompress(packed).endswith(b"# EOF\n")

            _, headers, plain = await _exchange(port, _get("text/plain", "identity"))
            assert headers["content-type"].startswith("text/plain; version=")
            assert (
                "content-encoding" not in headers and b'demo_reads_total{source="mem"} 3.0' in plain
            )
            assert "Accept-Encoding" in headers["vary"] and "Accept" in headers["vary"]

            # HEAD tells the length the same GET would have.
            _, headers, none = await _exchange(port, _get(PROMETHEUS_ACCEPT, "gzip", "HEAD"))
            assert none == b"" and headers["content-encoding"] == "gzip"
            assert int(headers["content-length"]) > 0
        finally:
            await endpoint.close()

    asyncio.run(main())


def test_a_scraper_that_never_sends_its_request_is_disconnected() -> None:
    async def main() -> None:
        settings = MetricsSettings(listen="127.0.0.1:0", request_timeout_s=0.2)
        endpoint = MetricsEndpoint(_registry(), settings)
        port = await endpoint.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"GET /metr")  # and nothing more
            assert await asyncio.wait_for(reader.read(), DEADLINE_S) == b""
            writer.close()
        finally:
            await endpoint.close()

    asyncio.run(main())


def test_metrics_are_off_without_a_listen_address_and_a_bad_one_is_refused() -> None:
    async def main() -> int:
        return await MetricsEndpoint(_registry(), MetricsSettings(listen="")).start()

    assert asyncio.run(main()) == 0
    assert split_listen("0.0.0.0:9100") == ("0.0.0.0", 9100)
    assert split_listen("[::]:0") == ("::", 0)
    for bad in ("9100", "host:", "host:http", "host:70000"):
        with pytest.raises(InvalidArgument, match="RESERVOIR_METRICS_LISTEN"):
            split_listen(bad)


def test_rpc_metrics_count_each_call_by_method_and_status_and_time_it() -> None:
    registry = CollectorRegistry()

    async def ok(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def missing(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such thing")
        return b""  # pragma: no cover

    async def stream(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for _ in range(3):
            yield request

    async def main() -> None:
        server = grpc.aio.server(interceptors=[RpcMetricsInterceptor(RpcMetrics(registry))])
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    "t.Demo",
                    {
                        "Ok": grpc.unary_unary_rpc_method_handler(ok),
                        "Missing": grpc.unary_unary_rpc_method_handler(missing),
                        "Stream": grpc.unary_stream_rpc_method_handler(stream),
                    },
                )
            ]
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                for _ in range(2):
                    await channel.unary_unary("/t.Demo/Ok")(b"x", timeout=DEADLINE_S)
                with pytest.raises(grpc.aio.AioRpcError):
                    await channel.unary_unary("/t.Demo/Missing")(b"x", timeout=DEADLINE_S)
                call = channel.unary_stream("/t.Demo/Stream")(b"x", timeout=DEADLINE_S)
                assert [m async for m in call] == [b"x"] * 3
        finally:
            await server.stop(None)

    asyncio.run(main())

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"grpc_service": "t.Demo", **labels})

    assert (
        value("grpc_server_handled_total", grpc_type="unary", grpc_method="Ok", grpc_code="OK") == 2
    )
    assert (
        value(
            "grpc_server_handled_total",
            grpc_type="unary",
            grpc_method="Missing",
            grpc_code="NOT_FOUND",
        )
        == 1
    )
    assert (
        value(
            "grpc_server_handled_total",
            grpc_type="server_stream",
            grpc_method="Stream",
            grpc_code="OK",
        )
        == 1
    )
    timed = value("grpc_server_handling_seconds_count", grpc_type="unary", grpc_method="Ok")
    assert timed == 2
    assert value("grpc_server_handling_seconds_sum", grpc_type="unary", grpc_method="Ok") > 0


_PROVIDER_KIND = textwrap.dedent(
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from reservoir.common import config, observability
    observability.configure("worker", config.LogConfig(), config.load(config.TraceExportSettings))
    provider = trace.get_tracer_provider()
    name = provider.resource.attributes["service.name"] if isinstance(provider, TracerProvider) else ""
    print(isinstance(provider, TracerProvider), name)
    """
)


def _provider_kind(env: dict[str, str]) -> str:
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", _PROVIDER_KIND],
        env=plain | env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_spans_are_recorded_only_when_an_otlp_endpoint_is_set() -> None:
    # No endpoint: the API's no-op tracer, no span built per call.
    assert _provider_kind({}) == "False"
    # The standard variable: an SDK provider named after the process, or OTEL_SERVICE_NAME.
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert _provider_kind(endpoint) == "True reservoir-worker"
    named = endpoint | {"OTEL_SERVICE_NAME": "cache-a", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    assert _provider_kind(named) == "True cache-a"


def test_an_unknown_otlp_protocol_is_refused_at_start() -> None:
    with pytest.raises(InvalidArgument, match="http/protobuf or grpc"):
        TraceExportSettings(endpoint="http://x:4318", protocol="http/json")
    assert TraceExportSettings(endpoint="x:4317", protocol="grpc").wire_protocol == "grpc"
    assert not TraceExportSettings().exporting
