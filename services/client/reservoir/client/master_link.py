"""The client's calls to the leading master (common/master_calls.py follows the leader),
each with the client's deadline and the caller's trace context."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from reservoir.common import config as cfg
from reservoir.common.master_calls import MasterCalls
from reservoir.common.observability import inject_metadata
from reservoir.common.rpc import ChannelOpener
from reservoir.v1 import master_pb2_grpc


class MasterLink:
    def __init__(self, config: cfg.ClientConfig, opener: ChannelOpener) -> None:
        self._config = config
        hint = "" if config.security.tls else " (or it serves TLS: set RESERVOIR_TLS_CA)"
        self._masters = MasterCalls(
            config.master,
            opener,
            master_pb2_grpc.MasterServiceStub,
            probe_timeout_s=config.master_probe_timeout_s,
            unreachable_hint=hint,
        )

    async def close(self) -> None:
        await self._masters.close()

    async def call(self, method: str, request: Any, what: str) -> Any:
        return await self._masters.unary(
            method,
            request,
            deadline_s=self._config.rpc_timeout_s,
            what=what,
            metadata=inject_metadata(),
        )

    async def stream(self, method: str, request: Any, what: str) -> AsyncIterator[Any]:
        """A server stream, within the deadline of a job (`job_timeout_s`)."""
        async for item in self._masters.stream(
            method,
            request,
            deadline_s=self._config.job_timeout_s,
            what=what,
            metadata=inject_metadata(),
        ):
            yield item
