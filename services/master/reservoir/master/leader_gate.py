"""Calls a standby does not answer: every MasterService call but ListMasters needs the
leader. A standby refuses them with `NotLeader` naming the leader, and the caller goes
there (client/master_calls.py). A leader confirms it still leads before it serves a call
(`Leadership.confirm`): one woken from a pause refuses what it finds waiting."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import grpc.aio

from reservoir.common.errors import ReservoirError
from reservoir.common.rpc import abort_with, with_behaviour

from .leadership import Leadership

_SERVICE = "/reservoir.v1.MasterService/"
# Answered from etcd by any master.
_ANY_MASTER = {_SERVICE + "ListMasters"}


class LeaderGate(grpc.aio.ServerInterceptor):
    def __init__(self, leadership: Leadership) -> None:
        self._leadership = leadership

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        handler = await continuation(details)
        method = details.method
        if handler is None or not method.startswith(_SERVICE) or method in _ANY_MASTER:
            return handler
        leadership = self._leadership

        async def admit(context: grpc.aio.ServicerContext) -> None:
            try:
                await leadership.confirm()
            except ReservoirError as exc:
                await abort_with(context, exc)

        def wrap_unary(behaviour: Any) -> Any:
            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await admit(context)
                return await behaviour(request, context)

            return unary

        def wrap_stream(streaming: Any) -> Any:
            async def stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
                await admit(context)
                async for item in streaming(request, context):
                    yield item

            return stream

        return with_behaviour(handler, wrap_unary, wrap_stream)
