"""gRPC plumbing shared by every component: channel options, status <-> domain errors."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio

from reservoir.common import errors

MAX_MESSAGE_BYTES = 64 * 1024 * 1024

# Block streams are bulk transfers: HTTP/2 frames of up to 16 MiB instead of 16 KiB, and
# a flow-control window that starts large, roughly double what a Python peer can move per
# core on loopback (measured with one stream of 1 MiB messages: ~450 -> ~1000 MB/s).
BULK_TRANSFER_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.http2.max_frame_size", 16 * 1024 * 1024 - 1),
    ("grpc.http2.lookahead_bytes", 16 * 1024 * 1024),
]
CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    *BULK_TRANSFER_OPTIONS,
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Fail fast on a dead peer instead of waiting for TCP to notice.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.enable_retries", 0),
]
SERVER_OPTIONS: list[tuple[str, Any]] = [
    *BULK_TRANSFER_OPTIONS,
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.so_reuseport", 0),
]


class ChannelOpener(Protocol):
    """What opens a channel to a peer (see `security.Transport`: TLS and token or not)."""

    def channel(self, address: str) -> grpc.aio.Channel: ...


class PlaintextChannels:
    """Channels without TLS, for a cluster that runs without it."""

    def channel(self, address: str) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


class ChannelPool:
    """One channel per peer address, opened on first use (gRPC multiplexes calls on it)."""

    def __init__(self, opener: ChannelOpener | None = None) -> None:
        self._opener = opener or PlaintextChannels()
        self._channels: dict[str, grpc.aio.Channel] = {}

    def get(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._opener.channel(address)
            self._channels[address] = channel
        return channel

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()


async def abort_with(context: grpc.aio.ServicerContext, error: BaseException) -> None:
    """Ends the call with the status the error table chooses for `error`."""
    kind = type(error).__name__ if isinstance(error, errors.ReservoirError) else "Internal"
    trailing = [(errors.ERROR_KIND_KEY, kind)]
    if isinstance(error, errors.NotLeader) and error.leader:
        trailing.append((errors.LEADER_KEY, error.leader))
    context.set_trailing_metadata(tuple(trailing))
    await context.abort(errors.status_for(error), str(error) or kind)


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def translate_errors(method: F) -> F:
    """Servicer decorator: domain errors become gRPC statuses; nothing else leaks."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except errors.ReservoirError as exc:
            await abort_with(context, exc)
        except (grpc.aio.AbortError, grpc.aio.UsageError):
            raise
        except Exception as exc:  # a bug: report INTERNAL, keep the server up
            await abort_with(context, errors.Internal(f"{type(exc).__name__}: {exc}"))

    return wrapper  # type: ignore[return-value]


def translate_stream_errors(
    method: Callable[..., AsyncIterator[Any]],
) -> Callable[..., AsyncIterator[Any]]:
    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            async for item in method(self, request, context):
                yield item
        except errors.ReservoirError as exc:
            await abort_with(context, exc)
        except (grpc.aio.AbortError, grpc.aio.UsageError):
            raise
        except Exception as exc:
            await abort_with(context, errors.Internal(f"{type(exc).__name__}: {exc}"))

    return wrapper


def _trailing(exc: grpc.RpcError, name: str) -> str | None:
    trailing = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == name:
            return value if isinstance(value, str) else value.decode()
    return None


def error_kind(exc: grpc.RpcError) -> str | None:
    """The domain error's class name a Reservoir server sent; None from anything else."""
    return _trailing(exc, errors.ERROR_KIND_KEY)


def is_transport_failure(exc: grpc.RpcError) -> bool:
    """True when the peer could not be reached or did not answer (no domain error sent)."""
    code = exc.code() if hasattr(exc, "code") else None
    return error_kind(exc) is None and code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
    )


def unreachable(error: BaseException) -> bool:
    """True for a domain error raised from a call whose peer could not be reached or did
    not answer (`is_transport_failure` of the RpcError it was raised from)."""
    cause = error.__cause__
    return isinstance(cause, grpc.RpcError) and is_transport_failure(cause)


def error_from_rpc(exc: grpc.RpcError, what: str) -> errors.ReservoirError:
    """The domain error for a failed call, naming what was being done."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    kind = error_kind(exc)
    if kind == errors.NotLeader.__name__:
        return errors.NotLeader(details or what, _trailing(exc, errors.LEADER_KEY) or "")
    if kind is not None:
        return errors.error_for(code, details or what, kind)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return errors.DeadlineExceeded(f"{what}: deadline exceeded")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return errors.Unavailable(f"{what}: unavailable ({details})")
    return errors.error_for(code, details or what)


class _Undecodable:
    """Stands in for a request whose bytes are not the message the method takes."""

    __slots__ = ("error",)

    def __init__(self, error: str) -> None:
        self.error = error


class RequestDecodingInterceptor(grpc.aio.ServerInterceptor):
    """Undecodable requests get INVALID_ARGUMENT (gRPC's own answer is UNKNOWN with the
    parser's exception text), before any servicer sees them."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        decode = handler.request_deserializer

        def tolerant(raw: bytes) -> Any:
            try:
                return decode(raw)
            except Exception as exc:
                return _Undecodable(type(exc).__name__)

        refusal = errors.InvalidArgument(f"{details.method}: the request could not be decoded")

        def wrap_unary(behaviour: Any) -> Any:
            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if isinstance(request, _Undecodable):
                    await abort_with(context, refusal)
                return await behaviour(request, context)

            return unary

        def wrap_stream(streaming: Any) -> Any:
            async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if isinstance(request, _Undecodable):
                    await abort_with(context, refusal)
                async for item in streaming(request, context):
                    yield item

            return stream

        return with_behaviour(handler, wrap_unary, wrap_stream, request_deserializer=tolerant)


Wrap = Callable[[Any], Any]


def with_behaviour(
    handler: Any, wrap_unary: Wrap, wrap_stream: Wrap, request_deserializer: Any = None
) -> Any:
    """`handler` with its behaviour wrapped (a unary response by `wrap_unary`, a stream by
    `wrap_stream`), the way a server interceptor changes what a method does. Handlers
    that take a stream of requests are returned as they are (none of ours do)."""
    decode = request_deserializer or handler.request_deserializer
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(
            wrap_unary(handler.unary_unary),
            request_deserializer=decode,
            response_serializer=handler.response_serializer,
        )
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(
            wrap_stream(handler.unary_stream),
            request_deserializer=decode,
            response_serializer=handler.response_serializer,
        )
    return handler
