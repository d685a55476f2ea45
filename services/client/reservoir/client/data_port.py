"""Block ranges from workers' data ports (`reservoir.common.blocks.block_transfer`), read with
blocking sockets in the caller's own thread, straight into the buffer the read returns.

Each reading thread takes a connection to the worker from a small pool and puts it back
when its read is done; a connection that failed in any way is closed, never reused. Every
step has the read deadline (`read_timeout_s`). Anything short of the exact bytes with the
right checksum is not READ (`block_source.Outcome`): the caller then takes the full path (gRPC, failover to
other replicas, the under-store), which also decides what error, if any, the reader sees.
A pooled connection the worker has closed meanwhile is retried once on a new one.

A worker that has not started to answer within the hedge budget (`hedges.py`; a hung
worker's kernel still accepts the connection and the request, so the budget covers the
first byte, not just the connect) is given up: its connection closed, its reads left
UNREACHABLE for the full path, which asks the next replica or the under-store while the
caller penalises the worker. Its idle pooled connections are dropped with it.

How a connection opens (TLS and the token presented, or the token proven at `integrity`
and `authentication`) and is pooled: `data_port_connections.py`. At `integrity` each
response's tag is checked as its bytes arrive, and a block whose tag fails is refused, its
connection closed, and read the full path instead. A worker that refuses the handshake or
the token answers nothing: the read takes the full path, which reports the error.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import propagate, trace

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.blocks import block_transfer as wire
from reservoir.common.blocks.data_protection import TAG_BYTES, ResponseTag
from reservoir.common.errors import DataLoss
from reservoir.common.models import Inode, WorkerRecord, block_request

from .block_source import Outcome
from .data_port_connections import DataPortConnections
from .data_port_io import (
    Connection,
    FirstByte,
    PortFailed,
    PortHedged,
    PortRefused,
    receive_into,
    send,
)
from .data_port_proof import ProvenConnection
from .hedges import Hedges
from .integrity import check_block

log = logs.get_logger(__name__)

# A sealed response's bytes go through its tag in pieces of this size, each just
# received: well inside one core's L2 cache, so the pass does not read from memory.
_SEALED_PIECE = 256 * 1024
# Below this, a sealed response's bytes and tag are received together.
_ONE_RECEIVE_BELOW = 64 * 1024


@dataclass(slots=True)
class BlockRead:
    """Bytes [offset, offset+len(out)) of block `index` of `inode`, from `worker`."""

    worker: WorkerRecord
    inode: Inode
    index: int
    offset: int
    out: memoryview
    outcome: Outcome = Outcome.UNREACHABLE

    @property
    def done(self) -> bool:
        return self.outcome is Outcome.READ


class DataPortReader:
    def __init__(self, config: cfg.ClientConfig, hedges: Hedges) -> None:
        self._config = config
        self._hedges = hedges
        self._connections = DataPortConnections(config)
        self._lock = threading.Lock()
        self.bytes_read = 0  # bytes received from data ports, checksum checked
        self.tampered = 0  # responses whose seal failed (integrity level)

    def reaches(self, worker: WorkerRecord) -> bool:
        return bool(self._config.data_port and worker.data_address)

    def read_into(
        self, worker: WorkerRecord, inode: Inode, index: int, offset: int, out: memoryview
    ) -> Outcome:
        """Bytes [offset, offset+len(out)) of block `index` into `out` (READ: `out` holds
        exactly them, checksum checked; otherwise `out` is undefined)."""
        read = BlockRead(worker, inode, index, offset, out)
        self.read_all_into([read])
        return read.outcome

    def read_all_into(self, reads: Sequence[BlockRead]) -> None:
        """Many block ranges, each into its own `out`, each marked with its outcome.
        Requests to one worker are pipelined on one connection, `data_port_pipeline` ahead
        of the response being read, so a reader of many blocks waits for one round trip,
        not one per block, and every worker works on its blocks at once. Whatever is not
        done is for the caller to read another way."""
        deadline = time.monotonic() + self._config.read_timeout_s
        stale = self._pipelined(reads, deadline, fresh=False)
        if stale:  # pooled connections most likely closed by the worker while idle
            again = [r for r in reads if r.worker.data_address in stale and not r.done]
            self._pipelined(again, deadline, fresh=True)

    def _pipelined(self, reads: Sequence[BlockRead], deadline: float, *, fresh: bool) -> set[str]:
        """One pass of `read_all_into`; returns the addresses whose pooled connection
        failed before it answered anything (worth one more try on a new one)."""
        depth = max(1, self._config.data_port_pipeline)
        unsent: dict[str, deque[BlockRead]] = {}
        workers: dict[str, WorkerRecord] = {}
        for read in reads:
            read.outcome = Outcome.UNREACHABLE if self.reaches(read.worker) else Outcome.DECLINED
            if read.outcome is Outcome.UNREACHABLE:
                unsent.setdefault(read.worker.data_address, deque()).append(read)
                workers[read.worker.data_address] = read.worker
        connections: dict[str, Connection] = {}
        in_flight: dict[str, int] = {}
        pooled: set[str] = set()  # addresses whose connection came from the pool, unanswered
        stale: set[str] = set()
        first: dict[str, FirstByte] = {}  # hedges on connections not answered yet

        def send_more(address: str) -> None:
            sock, queue = connections.get(address), unsent[address]
            batch = []
            while sock is not None and queue and in_flight[address] < depth:
                read = queue.popleft()
                body = _request(read.inode, read.index, read.offset, len(read.out))
                if isinstance(sock, ProvenConnection):
                    sock.sent(body)
                batch.append(wire.encode_request(body))
                in_flight[address] += 1
            if sock is not None and batch:
                try:
                    send(sock, b"".join(batch), deadline)
                except PortFailed:
                    broken(address)

        def broken(address: str, *, hedged: bool = False) -> None:
            sock = connections.pop(address, None)
            if sock is not None:
                sock.close()
            if hedged:
                self._connections.drop_idle(address)  # they would hang the next reads the same way
            elif address in pooled:
                stale.add(address)

        for address in unsent:
            asked = time.monotonic()
            for _ in unsent[address]:
                self._hedges.read_started()
            file_id = unsent[address][0].inode.file_id  # the first response's
            budget = self._hedges.budget(file_id)
            if budget is not None:
                first[address] = FirstByte(
                    workers[address].id, file_id, asked, asked + budget, self._hedges
                )
            try:
                sock, from_pool = self._connections.take(
                    workers[address], deadline, first.get(address), fresh=fresh
                )
            except PortRefused as exc:
                self._connections.refused(workers[address], exc)
                for read in unsent[address]:
                    read.outcome = Outcome.DECLINED  # the worker is there: gRPC will say why
                continue
            if sock is not None:
                connections[address] = sock
                in_flight[address] = 0
                if from_pool:
                    pooled.add(address)
                send_more(address)
        for read in reads:
            address = read.worker.data_address
            sock = connections.get(address)
            if sock is None or address not in in_flight:
                continue
            try:
                read.outcome = self._receive_response(
                    sock, read.out, deadline, first.pop(address, None)
                )
            except PortHedged as exc:
                log.info("data_port_read_hedged", worker=read.worker.id, error=str(exc))
                broken(address, hedged=True)
                continue
            except PortFailed as exc:
                log.debug("data_port_read_failed", worker=read.worker.id, error=str(exc))
                broken(address)
                continue
            pooled.discard(address)
            in_flight[address] -= 1
            send_more(address)
        for address, sock in connections.items():
            if in_flight[address] == 0 and not unsent[address]:
                self._connections.release(address, sock)
            else:
                sock.close()
        return stale

    def close(self) -> None:
        self._connections.close()

    def _receive_response(
        self, sock: Connection, out: memoryview, deadline: float, first: FirstByte | None
    ) -> Outcome:
        """One response into `out`. Raises PortFailed when the connection is unusable (PortHedged
        when `first` gave up on it); DECLINED for an answer that is not the bytes asked for
        (the connection stays good when the frame was complete)."""
        header_buffer = bytearray(wire.RESPONSE_HEADER.size)
        receive_into(sock, memoryview(header_buffer), deadline, first)
        header = wire.ResponseHeader.decode(header_buffer)
        sealed = sock if isinstance(sock, ProvenConnection) and sock.seal is not None else None
        if header.status != 0:
            if header.length > wire.MAX_ERROR_MESSAGE:
                raise PortFailed(f"error message of {header.length} bytes")
            message = memoryview(bytearray(header.length))
            receive_into(sock, message, deadline)
            if sealed is not None:
                running = sealed.begin(bytes(header_buffer)).update(message)
                self._check_tag(running, _receive_tag(sealed, deadline))
            return Outcome.DECLINED  # the full path asks again and reports the error properly
        if header.length != len(out):
            raise PortFailed(f"{header.length} bytes announced, {len(out)} asked for")
        if sealed is not None:
            # The tag is the block's checksum here, keyed: the worker checked the CRC32C
            # the block landed with as it sealed it (`sealed_responses.py`).
            self._receive_sealed(sealed, bytes(header_buffer), out, deadline)
        else:
            receive_into(sock, out, deadline)
            verify = self._config.verify_checksums
            try:
                check_block("data port block", out, len(out), header.crc32c, verify)
            except DataLoss as exc:
                log.warning("data_port_block_rejected", error=str(exc))
                return Outcome.DECLINED
        with self._lock:
            self.bytes_read += len(out)
        return Outcome.READ

    def _receive_sealed(
        self, sock: ProvenConnection, header: bytes, out: memoryview, deadline: float
    ) -> None:
        """`out` and its tag, each piece through the tag as soon as it arrived, while it is
        still in the CPU's cache."""
        running = sock.begin(header)
        if len(out) < _ONE_RECEIVE_BELOW:
            # Bytes and tag came in one segment: taken in one receive, the bytes then
            # moved to `out` (a copy of a few microseconds, cheaper than a system call).
            both = memoryview(bytearray(len(out) + TAG_BYTES))
            receive_into(sock, both, deadline)
            out[:] = both[: len(out)]
            self._check_tag(running.update(out), both[len(out) :])
            return
        for start in range(0, len(out), _SEALED_PIECE):
            piece = out[start : start + _SEALED_PIECE]
            receive_into(sock, piece, deadline)
            running.update(piece)
        self._check_tag(running, _receive_tag(sock, deadline))

    def _check_tag(self, running: ResponseTag, tag: memoryview | bytearray) -> None:
        """PortFailed (the connection closed, the read taken the full path) when the
        response's tag does not match: tampered with on the way."""
        if not running.matches(tag):
            with self._lock:
                self.tampered += 1
            log.warning("data_port_response_tampered")
            raise PortFailed("the response's seal does not match: tampered with on the way")


def _receive_tag(sock: ProvenConnection, deadline: float) -> bytearray:
    tag = bytearray(TAG_BYTES)
    receive_into(sock, memoryview(tag), deadline)
    return tag


def _request(inode: Inode, index: int, offset: int, length: int) -> bytes:
    request = block_request(inode, index, offset, length)
    if trace.get_current_span().get_span_context().is_valid:
        # The caller's trace goes on into the worker's span (gRPC carries it as metadata).
        propagate.inject(request.trace_context)
    return request.SerializeToString()
