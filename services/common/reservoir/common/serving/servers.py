"""Process plumbing shared by the master and worker servers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from reservoir.common import logs
from reservoir.common.observability import TraceServerInterceptor
from reservoir.common.rpc import SERVER_OPTIONS, RequestDecodingInterceptor
from reservoir.common.security import Transport
from reservoir.common.serving.auth import AuthInterceptor, TokenTable
from reservoir.common.serving.rpc_metrics import RpcMetrics, RpcMetricsInterceptor

log = logs.get_logger(__name__)


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Runs a server's main coroutine on uvloop (falling back to asyncio's loop)."""
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
    finally:
        # The server has stopped and released what it holds; what is left is the
        # interpreter tearing down its heap. Its last collections would trace every object
        # still alive (a store client per mount, tables, caches): seconds for a server that
        # served hundreds of mounts, keeping `stop` waiting. Frozen objects are not traced.
        gc.freeze()


def serve_in_foreground(serve: Callable[[], Awaitable[None]]) -> None:
    """Runs `serve()` (as `run` does) until it returns or SIGTERM or Ctrl-C cancels it: a
    server in a terminal's foreground, or a container's main process."""

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve()

    run(main)


def new_server(
    service: str,
    transport: Transport | None = None,
    rpc_metrics: RpcMetrics | None = None,
    gates: Sequence[grpc.aio.ServerInterceptor] = (),
) -> grpc.aio.Server:
    """A server whose calls are timed and counted (with `rpc_metrics`; refused ones too),
    authenticated (when the transport names a tokens file), decoded safely, passed
    through `gates` (e.g. the master's leader gate), then traced."""
    interceptors: list[grpc.aio.ServerInterceptor] = []
    if rpc_metrics is not None:
        interceptors.append(RpcMetricsInterceptor(rpc_metrics))
    settings = transport.settings if transport is not None else None
    if settings is not None and settings.auth_tokens_file:
        table = TokenTable.load(settings.auth_tokens_file)
        interceptors.append(AuthInterceptor(table))
        log.info("auth_enabled", service=service, tokens=len(table))
    interceptors += [RequestDecodingInterceptor(), *gates, TraceServerInterceptor(service)]
    return grpc.aio.server(interceptors=interceptors, options=SERVER_OPTIONS)


async def add_health_and_reflection(
    server: grpc.aio.Server,
    service_names: list[str],
    checker: health.aio.HealthServicer | None = None,
) -> health.aio.HealthServicer:
    """gRPC health (`checker`: one that checks more than the server, e.g. its store) and
    reflection for `service_names`."""
    checker = checker or health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    for name in ["", *service_names]:
        await checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(
        [*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )
    return checker


def bind(server: grpc.aio.Server, address: str, transport: Transport | None = None) -> int:
    credentials = transport.server_credentials() if transport is not None else None
    if credentials is None:
        port = server.add_insecure_port(address)
    else:
        port = server.add_secure_port(address, credentials)
        log.info("tls_enabled", address=address)
    if port == 0:
        raise SystemExit(f"cannot listen on {address}")
    return port


async def every(interval_s: float, what: str, step: Callable[[], Awaitable[Any]]) -> None:
    """Runs `step` forever at `interval_s`; a failing step is logged and retried next time."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(f"{what}_failed", error=str(exc), error_type=type(exc).__name__)


async def wait_for_signal() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
