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

A client that speaks TLS dials data ports in TLS (its CA, its certificate if any, the
server-name override of gRPC; the TLS session kept per worker to resume the next
handshake), and a client with a token presents it in an AUTH frame as each connection
opens. A worker whose record says its data port is in clear with token proofs (data
protection `integrity` or `authentication`) is dialled in plain TCP and the token proven,
never sent (`data_port_proof.py`); at `integrity` each response's tag is checked, and a
block whose tag fails is refused, its connection closed, and read the full path instead. A
worker that refuses the handshake or the token answers nothing: the read takes the full
path, which reports the error.

Sockets are not shared across a fork: a child drops the pool it inherited (closing only
its own copies of the descriptors) and connects afresh.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import propagate, trace

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.blocks import block_transfer as wire
from reservoir.common.blocks.block_file import checksum
from reservoir.common.blocks.data_protection import TAG_BYTES, Level, ResponseTag
from reservoir.common.errors import DataLoss
from reservoir.common.models import Inode, WorkerRecord, block_request
from reservoir.common.security import data_port_client_context, tls_server_name

from .block_source import Outcome
from .data_port_proof import ProofRefused, ProvenConnection
from .data_port_sealed import SealedConnection
from .data_port_tls import TlsConnection
from .hedges import Hedges
from .integrity import check_block

log = logs.get_logger(__name__)

_generation = 0  # bumped in every forked child: pools from before the fork are dropped


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# A data port connection: plain TCP, TLS over one (sealed records after its handshake, or
# TLS records with a worker that offers none), or one in clear with a token proven.
Connection = socket.socket | TlsConnection | SealedConnection | ProvenConnection
_PROVEN_LEVELS = {
    Level.INTEGRITY.value: Level.INTEGRITY,
    Level.AUTHENTICATION.value: Level.AUTHENTICATION,
}
# A sealed response's bytes go through its tag and CRC32C in pieces of this size, each
# just received: well inside one core's L2 cache, so neither pass reads from memory.
_SEALED_PIECE = 256 * 1024


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


class _Failed(Exception):
    """This connection cannot answer (closed, timed out, broken frame)."""


class _Hedged(_Failed):
    """The worker did not start to answer within the hedge budget; the read goes elsewhere."""


@dataclass(slots=True)
class _FirstByte:
    """The hedge on one connection's first response: asked at `asked`, given up at `at`
    (when a hedge token allows; otherwise the read waits out its deadline)."""

    worker_id: str
    file_id: str
    asked: float
    at: float
    hedges: Hedges

    def timeout(self, deadline: float) -> float:
        return max(0.001, min(self.at, deadline) - time.monotonic())

    def arrived(self) -> None:
        self.hedges.first_byte(self.file_id, time.monotonic() - self.asked)


class _Refused(Exception):
    """The worker answers, but not to us: the TLS handshake or the token failed."""


class DataPortReader:
    def __init__(self, config: cfg.ClientConfig, hedges: Hedges) -> None:
        self._config = config
        self._hedges = hedges
        self._lock = threading.Lock()
        self._idle: dict[str, list[Connection]] = {}
        self._generation = _generation
        self.bytes_read = 0  # bytes received from data ports, checksum checked
        self._tls = data_port_client_context(config.security, sealed_records=True)
        self._token = config.security.presented_token() if self._tls is not None else ""
        self.tampered = 0  # responses whose seal failed (integrity level)
        self._sessions: dict[str, ssl.SSLSession] = {}
        self._refusals: set[str] = set()  # data ports whose refusal was logged

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
        first: dict[str, _FirstByte] = {}  # hedges on connections not answered yet

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
                    _send(sock, b"".join(batch), deadline)
                except _Failed:
                    broken(address)

        def broken(address: str, *, hedged: bool = False) -> None:
            sock = connections.pop(address, None)
            if sock is not None:
                sock.close()
            if hedged:
                self._drop_idle(address)  # they would hang the next reads the same way
            elif address in pooled:
                stale.add(address)

        for address in unsent:
            asked = time.monotonic()
            for _ in unsent[address]:
                self._hedges.read_started()
            file_id = unsent[address][0].inode.file_id  # the first response's
            budget = self._hedges.budget(file_id)
            if budget is not None:
                first[address] = _FirstByte(
                    workers[address].id, file_id, asked, asked + budget, self._hedges
                )
            try:
                sock, from_pool = self._connection(
                    workers[address], deadline, first.get(address), fresh=fresh
                )
            except _Refused as exc:
                self._refused(workers[address], exc)
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
            except _Hedged as exc:
                log.info("data_port_read_hedged", worker=read.worker.id, error=str(exc))
                broken(address, hedged=True)
                continue
            except _Failed as exc:
                log.debug("data_port_read_failed", worker=read.worker.id, error=str(exc))
                broken(address)
                continue
            pooled.discard(address)
            in_flight[address] -= 1
            send_more(address)
        for address, sock in connections.items():
            if in_flight[address] == 0 and not unsent[address]:
                self._release(address, sock)
            else:
                sock.close()
        return stale

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for sockets in idle.values():
            for sock in sockets:
                sock.close()

    def _drop_idle(self, address: str) -> None:
        with self._lock:
            idle = self._idle.pop(address, [])
        for sock in idle:
            sock.close()

    # ---- internals ------------------------------------------------------------------------

    def _connection(
        self, worker: WorkerRecord, deadline: float, first: _FirstByte | None, *, fresh: bool
    ) -> tuple[Connection | None, bool]:
        address = worker.data_address
        if not fresh:
            with self._lock:
                if self._generation != _generation:
                    # A forked child: these connections are the parent's too. Closing this
                    # process's descriptors leaves them open for the parent.
                    for sockets in self._idle.values():
                        for sock in sockets:
                            sock.close()
                    self._idle = {}
                    self._generation = _generation
                idle = self._idle.get(address)
                if idle:
                    return idle.pop(), True
        host, _, port = address.rpartition(":")
        try:
            sock = _connect(host.strip("[]"), int(port), deadline, first)
        except (OSError, ValueError) as exc:
            # Nobody answers there: the worker is down (or leaving); the caller penalises it.
            log.debug("data_port_connect_failed", worker=worker.id, error=str(exc))
            return None, False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        level = _PROVEN_LEVELS.get(worker.data_protection)
        if level is not None:
            return self._proven(sock, worker, level, deadline), False
        if self._tls is None:
            return sock, False
        try:
            return self._secured(self._tls, sock, address, deadline, first), False
        except _Hedged as exc:
            sock.close()
            log.info("data_port_read_hedged", worker=worker.id, error=str(exc))
            self._drop_idle(address)
            return None, False
        except BaseException:
            sock.close()
            raise

    def _proven(
        self, sock: socket.socket, worker: WorkerRecord, level: Level, deadline: float
    ) -> ProvenConnection | None:
        """`sock` with this client's token proven to the worker; _Refused when it is not
        taken, None (unreachable) when the connection fails meanwhile."""
        try:
            return ProvenConnection.open(sock, self._token, level, deadline)
        except ProofRefused as exc:
            sock.close()
            raise _Refused(f"data port {worker.data_address}: {exc}") from exc
        except OSError as exc:  # also a timeout: the full path tries elsewhere
            sock.close()
            log.debug("data_port_proof_failed", worker=worker.id, error=str(exc))
            return None

    def _refused(self, worker: WorkerRecord, error: _Refused) -> None:
        # Once per port at warning: a misconfigured client (wrong CA or token) reads
        # everything over gRPC, which reports the error itself, and an operator should
        # see why its data ports stay unused.
        with self._lock:
            first = worker.data_address not in self._refusals
            self._refusals.add(worker.data_address)
        (log.warning if first else log.debug)(
            "data_port_refused", worker=worker.id, error=str(error)
        )

    def _secured(
        self,
        context: ssl.SSLContext,
        sock: socket.socket,
        address: str,
        deadline: float,
        first: _FirstByte | None,
    ) -> TlsConnection | SealedConnection:
        """`sock` after the TLS handshake (and the keys of sealed records, when the worker
        takes them) and, with a token, the worker's yes to it;
        _Refused when either fails (the worker is there, but will not serve us); _Hedged
        when the handshake does not finish within the hedge budget (a handshake cannot be
        resumed, so past the budget it is given up even without a token: the full path,
        which reads elsewhere, follows)."""
        host = address.rpartition(":")[0]
        try:
            sock.settimeout(_remaining(deadline) if first is None else first.timeout(deadline))
            with self._lock:
                session = self._sessions.get(address)
            name = tls_server_name(self._config.security, host)
            handshake = TlsConnection(sock, context, name, session)
            tls = (
                SealedConnection.agree(handshake) if handshake.offers_sealed_records else handshake
            )
        except TimeoutError as exc:
            if first is None:
                raise _Refused(f"TLS handshake with data port {address}: {exc}") from exc
            first.hedges.may_hedge(first.worker_id)
            raise _Hedged(f"no TLS handshake with data port {address} within the budget") from exc
        except (_Failed, OSError) as exc:
            raise _Refused(f"TLS handshake with data port {address}: {exc}") from exc
        if not self._token:
            self._keep_session(address, tls)
            return tls
        try:
            _send(tls, wire.encode_auth(self._token), deadline)
            header_buffer = bytearray(wire.RESPONSE_HEADER.size)
            _receive_into(tls, memoryview(header_buffer), deadline)
            header = wire.ResponseHeader.decode(header_buffer)
        except _Failed as exc:
            tls.close()
            raise _Refused(f"data port {address} did not take the token: {exc}") from exc
        if header.status != 0:
            tls.close()
            raise _Refused(f"data port {address} refused the token (status {header.status})")
        # A response read: TLS 1.3's session tickets, sent right after the handshake, are in.
        self._keep_session(address, tls)
        return tls

    def _keep_session(self, address: str, tls: TlsConnection | SealedConnection) -> None:
        """The next connection to `address` resumes this one's session (no certificate
        sent or checked again) when the worker allows it."""
        if not tls.session_reused and (session := tls.session) is not None:
            with self._lock:
                self._sessions[address] = session

    def _release(self, address: str, sock: Connection) -> None:
        with self._lock:
            idle = self._idle.setdefault(address, [])
            if (
                self._generation == _generation
                and len(idle) < self._config.data_port_idle_connections
            ):
                idle.append(sock)
                return
        sock.close()

    def _receive_response(
        self, sock: Connection, out: memoryview, deadline: float, first: _FirstByte | None
    ) -> Outcome:
        """One response into `out`. Raises _Failed when the connection is unusable (_Hedged
        when `first` gave up on it); DECLINED for an answer that is not the bytes asked for
        (the connection stays good when the frame was complete)."""
        header_buffer = bytearray(wire.RESPONSE_HEADER.size)
        _receive_into(sock, memoryview(header_buffer), deadline, first)
        header = wire.ResponseHeader.decode(header_buffer)
        sealed = isinstance(sock, ProvenConnection) and sock.seal is not None
        if header.status != 0:
            if header.length > wire.MAX_ERROR_MESSAGE:
                raise _Failed(f"error message of {header.length} bytes")
            message = memoryview(bytearray(header.length))
            _receive_into(sock, message, deadline)
            if sealed:
                assert isinstance(sock, ProvenConnection)
                self._check_seal(sock, sock.begin(bytes(header_buffer)).update(message), deadline)
            return Outcome.DECLINED  # the full path asks again and reports the error properly
        if header.length != len(out):
            raise _Failed(f"{header.length} bytes announced, {len(out)} asked for")
        verify = self._config.verify_checksums
        computed = None
        if sealed:
            assert isinstance(sock, ProvenConnection)
            computed = self._receive_sealed(sock, bytes(header_buffer), out, deadline, verify)
        else:
            _receive_into(sock, out, deadline)
        try:
            check_block("data port block", out, len(out), header.crc32c, verify, computed=computed)
        except DataLoss as exc:
            log.warning("data_port_block_rejected", error=str(exc))
            return Outcome.DECLINED
        with self._lock:
            self.bytes_read += len(out)
        return Outcome.READ

    def _receive_sealed(
        self,
        sock: ProvenConnection,
        header: bytes,
        out: memoryview,
        deadline: float,
        verify: bool,
    ) -> int | None:
        """`out` and its tag: each piece through the tag (and its CRC32C, returned, with
        `verify`) as soon as it arrived, while it is still in the CPU's cache."""
        running = sock.begin(header)
        crc = 0
        for start in range(0, len(out), _SEALED_PIECE):
            piece = out[start : start + _SEALED_PIECE]
            _receive_into(sock, piece, deadline)
            running.update(piece)
            if verify:
                crc = checksum(piece, crc)
        self._check_seal(sock, running, deadline)
        return crc if verify else None

    def _check_seal(self, sock: ProvenConnection, running: ResponseTag, deadline: float) -> None:
        """The response's tag, received and checked; _Failed (the connection closed, the
        read taken the full path) when the response was tampered with on the way."""
        tag = bytearray(TAG_BYTES)
        _receive_into(sock, memoryview(tag), deadline)
        if not running.matches(tag):
            with self._lock:
                self.tampered += 1
            log.warning("data_port_response_tampered")
            raise _Failed("the response's seal does not match: tampered with on the way")


def _request(inode: Inode, index: int, offset: int, length: int) -> bytes:
    request = block_request(inode, index, offset, length)
    if trace.get_current_span().get_span_context().is_valid:
        # The caller's trace goes on into the worker's span (gRPC carries it as metadata).
        propagate.inject(request.trace_context)
    return request.SerializeToString()


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Failed("read deadline passed")
    return left


def _send(sock: Connection, data: bytes, deadline: float) -> None:
    try:
        sock.settimeout(_remaining(deadline))
        sock.sendall(data)
    except OSError as exc:
        raise _Failed(f"send: {exc}") from exc


def _connect(host: str, port: int, deadline: float, first: _FirstByte | None) -> socket.socket:
    """A connection within the hedge budget when one may hedge, else the read deadline (a
    hung worker's full listen backlog leaves connects hanging too)."""
    if first is not None:
        try:
            return socket.create_connection((host, port), timeout=first.timeout(deadline))
        except TimeoutError:
            if time.monotonic() >= deadline or first.hedges.may_hedge(first.worker_id):
                raise
    return socket.create_connection((host, port), timeout=max(0.001, deadline - time.monotonic()))


def _receive_into(
    sock: Connection, out: memoryview, deadline: float, first: _FirstByte | None = None
) -> None:
    """`out` filled from `sock` by the deadline; with `first`, the first byte by its hedge
    time too, or _Hedged when a hedge may go out then."""
    filled = 0
    try:
        # Set once: a TLS socket returns one record (16 KiB) a call, and a settimeout per
        # call would cost a third of the time. Each call still waits no longer than the
        # whole read may, and the deadline is checked between calls.
        sock.settimeout(_remaining(deadline) if first is None else first.timeout(deadline))
        while filled < len(out):
            if filled:
                _remaining(deadline)
            try:
                n = sock.recv_into(out[filled:])
            except TimeoutError:
                if first is None or time.monotonic() >= deadline:
                    raise
                if first.hedges.may_hedge(first.worker_id):
                    raise _Hedged("no answer within the hedge budget") from None
                first = None  # no hedge left: wait for this worker to the deadline
                sock.settimeout(_remaining(deadline))
                continue
            if n == 0:
                raise _Failed("connection closed by the worker")
            if first is not None:
                first.arrived()
                first = None
                sock.settimeout(_remaining(deadline))
            filled += n
    except OSError as exc:
        raise _Failed(f"receive: {exc}") from exc
