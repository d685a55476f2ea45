"""A data port connection's socket steps, each by the read's deadline: connect, send, and
receive with the hedge on the first byte (`hedges.py`). Shared by the reader's requests
(`data_port.py`) and the handshakes that open its connections
(`data_port_connections.py`)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

from .data_port_proof import ProvenConnection
from .data_port_sealed import SealedConnection
from .data_port_tls import TlsConnection
from .hedges import Hedges

# A data port connection: plain TCP, TLS over one (sealed records after its handshake, or
# TLS records with a worker that offers none), or one in clear with a token proven.
Connection = socket.socket | TlsConnection | SealedConnection | ProvenConnection


class PortFailed(Exception):
    """This connection cannot answer (closed, timed out, broken frame)."""


class PortHedged(PortFailed):
    """The worker did not start to answer within the hedge budget; the read goes elsewhere."""


@dataclass(slots=True)
class FirstByte:
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


class PortRefused(Exception):
    """The worker answers, but not to us: the TLS handshake or the token failed."""


def remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise PortFailed("read deadline passed")
    return left


def send(sock: Connection, data: bytes, deadline: float) -> None:
    try:
        sock.settimeout(remaining(deadline))
        sock.sendall(data)
    except OSError as exc:
        raise PortFailed(f"send: {exc}") from exc


def connect(host: str, port: int, deadline: float, first: FirstByte | None) -> socket.socket:
    """A connection within the hedge budget when one may hedge, else the read deadline (a
    hung worker's full listen backlog leaves connects hanging too)."""
    if first is not None:
        try:
            return socket.create_connection((host, port), timeout=first.timeout(deadline))
        except TimeoutError:
            if time.monotonic() >= deadline or first.hedges.may_hedge(first.worker_id):
                raise
    return socket.create_connection((host, port), timeout=max(0.001, deadline - time.monotonic()))


def receive_into(
    sock: Connection, out: memoryview, deadline: float, first: FirstByte | None = None
) -> None:
    """`out` filled from `sock` by the deadline; with `first`, the first byte by its hedge
    time too, or PortHedged when a hedge may go out then."""
    filled = 0
    try:
        # Set once: a TLS socket returns one record (16 KiB) a call, and a settimeout per
        # call would cost a third of the time. Each call still waits no longer than the
        # whole read may, and the deadline is checked between calls.
        sock.settimeout(remaining(deadline) if first is None else first.timeout(deadline))
        while filled < len(out):
            if filled:
                remaining(deadline)
            try:
                n = sock.recv_into(out[filled:])
            except TimeoutError:
                if first is None or time.monotonic() >= deadline:
                    raise
                if first.hedges.may_hedge(first.worker_id):
                    raise PortHedged("no answer within the hedge budget") from None
                first = None  # no hedge left: wait for this worker to the deadline
                sock.settimeout(remaining(deadline))
                continue
            if n == 0:
                raise PortFailed("connection closed by the worker")
            if first is not None:
                first.arrived()
                first = None
                sock.settimeout(remaining(deadline))
            filled += n
    except OSError as exc:
        raise PortFailed(f"receive: {exc}") from exc
