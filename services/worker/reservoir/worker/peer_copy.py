"""Blocks copied here from another worker that holds them (a drain, a worker that joined):
read from it with `cached_only` (it answers from its cache or NOT_FOUND, never with a GET),
checked against their CRC32C, and kept as if fetched (reported to the master)."""

from __future__ import annotations

from reservoir.common import logs
from reservoir.common.blocks.block_file import checksum
from reservoir.common.errors import (
    DataLoss,
    ReservoirError,
    ResourceExhausted,
    error_for_code_value,
)
from reservoir.common.worker_calls import WorkerCalls
from reservoir.v1 import worker_pb2

from .read_request import BlockRequest
from .service import WorkerService

log = logs.get_logger(__name__)


class PeerCopy:
    def __init__(self, service: WorkerService, calls: WorkerCalls) -> None:
        self._service = service
        self._calls = calls

    async def pull(
        self, source_id: str, source_address: str, requests: list[BlockRequest]
    ) -> list[ReservoirError | int]:
        """Per request: the bytes now held here, or why not."""
        outcomes: list[ReservoirError | int] = [0] * len(requests)
        wanted: list[int] = []
        for position, request in enumerate(requests):
            try:
                request = request.validated()
                await self._service.check_mount(request)
            except ReservoirError as exc:
                outcomes[position] = exc
                continue
            requests[position] = request
            if request.block in self._service.store:
                outcomes[position] = request.block_length  # held already
            else:
                wanted.append(position)
        if not wanted:
            return outcomes
        try:
            held = [_whole_block(requests[p]) for p in wanted]
            async for payload in self._calls.read_held(source_address, held):
                position = wanted[payload.position]
                outcomes[position] = self._keep(requests[position], payload)
        except ReservoirError as exc:
            log.warning("peer_copy_failed", source=source_id, error=str(exc))
            for position in wanted:
                if outcomes[position] == 0:
                    outcomes[position] = exc
        copied = sum(o for o in outcomes if isinstance(o, int))
        log.debug("peer_copy", source=source_id, blocks=len(wanted), bytes=copied)
        return outcomes

    def _keep(
        self, request: BlockRequest, payload: worker_pb2.BlockPayload
    ) -> ReservoirError | int:
        if payload.code:
            return error_for_code_value(payload.code, payload.message)
        data = payload.data
        if len(data) != request.block_length or checksum(data) != payload.crc32c:
            return DataLoss(
                f"block {request.index} of {request.file_id} from a peer failed its check"
            )
        if not self._service.keep(
            request.block, data, payload.crc32c, request.index * request.block_size
        ):
            return ResourceExhausted("block copied but not kept: the cache is full")
        return len(data)


def _whole_block(r: BlockRequest) -> worker_pb2.ReadBlockRequest:
    return worker_pb2.ReadBlockRequest(
        file_id=r.file_id,
        index=r.index,
        offset=0,
        length=-1,
        ufs_uri=r.ufs_uri,
        etag=r.etag,
        file_size=r.file_size,
        block_size=r.block_size,
        mount_path=r.mount_path,
    )
