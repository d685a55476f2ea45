"""A reader's connections to workers' data ports: opened, pooled per worker when a read is
done with them, and dropped.

A client that speaks TLS dials data ports in TLS (its CA, its certificate if any, the
server-name override of gRPC; the TLS session kept per worker to resume the next
handshake), and a client with a token presents it in an AUTH frame as each connection
opens. A worker whose record says its data port is in clear with token proofs (data
protection `integrity` or `authentication`) is dialled in plain TCP and the token proven,
never sent (`data_port_proof.py`).

A connection that failed in any way is closed, never pooled. Sockets are not shared
across a fork: a child drops the pool it inherited (closing only its own copies of the
descriptors) and connects afresh.
"""

from __future__ import annotations

import os
import socket
import ssl
import threading

from reservoir.common import config as cfg
from reservoir.common import logs
from reservoir.common.blocks import block_transfer as wire
from reservoir.common.blocks.data_protection import Level
from reservoir.common.models import WorkerRecord
from reservoir.common.security import data_port_client_context, tls_server_name

from .data_port_io import (
    Connection,
    FirstByte,
    PortFailed,
    PortHedged,
    PortRefused,
    connect,
    receive_into,
    remaining,
    send,
)
from .data_port_proof import ProofRefused, ProvenConnection
from .data_port_sealed import SealedConnection
from .data_port_tls import TlsConnection

log = logs.get_logger(__name__)

_generation = 0  # bumped in every forked child: pools from before the fork are dropped


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

_PROVEN_LEVELS = {
    Level.INTEGRITY.value: Level.INTEGRITY,
    Level.AUTHENTICATION.value: Level.AUTHENTICATION,
}


class DataPortConnections:
    def __init__(self, config: cfg.ClientConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._idle: dict[str, list[Connection]] = {}
        self._generation = _generation
        self._tls = data_port_client_context(config.security, sealed_records=True)
        self._token = config.security.presented_token() if self._tls is not None else ""
        self._sessions: dict[str, ssl.SSLSession] = {}
        self._refusals: set[str] = set()  # data ports whose refusal was logged

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for sockets in idle.values():
            for sock in sockets:
                sock.close()

    def drop_idle(self, address: str) -> None:
        with self._lock:
            idle = self._idle.pop(address, [])
        for sock in idle:
            sock.close()

    def take(
        self, worker: WorkerRecord, deadline: float, first: FirstByte | None, *, fresh: bool
    ) -> tuple[Connection | None, bool]:
        """A connection to `worker`'s data port and whether it came from the pool (a
        pooled one may have been closed by the worker meanwhile): `fresh`, a new one. None
        when nobody answers; PortRefused when the worker will not serve us."""
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
            sock = connect(host.strip("[]"), int(port), deadline, first)
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
        except PortHedged as exc:
            sock.close()
            log.info("data_port_read_hedged", worker=worker.id, error=str(exc))
            self.drop_idle(address)
            return None, False
        except BaseException:
            sock.close()
            raise

    def _proven(
        self, sock: socket.socket, worker: WorkerRecord, level: Level, deadline: float
    ) -> ProvenConnection | None:
        """`sock` with this client's token proven to the worker; PortRefused when it is not
        taken, None (unreachable) when the connection fails meanwhile."""
        try:
            return ProvenConnection.open(sock, self._token, level, deadline)
        except ProofRefused as exc:
            sock.close()
            raise PortRefused(f"data port {worker.data_address}: {exc}") from exc
        except OSError as exc:  # also a timeout: the full path tries elsewhere
            sock.close()
            log.debug("data_port_proof_failed", worker=worker.id, error=str(exc))
            return None

    def refused(self, worker: WorkerRecord, error: PortRefused) -> None:
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
        first: FirstByte | None,
    ) -> TlsConnection | SealedConnection:
        """`sock` after the TLS handshake (and the keys of sealed records, when the worker
        takes them) and, with a token, the worker's yes to it;
        PortRefused when either fails (the worker is there, but will not serve us); PortHedged
        when the handshake does not finish within the hedge budget (a handshake cannot be
        resumed, so past the budget it is given up even without a token: the full path,
        which reads elsewhere, follows)."""
        host = address.rpartition(":")[0]
        try:
            sock.settimeout(remaining(deadline) if first is None else first.timeout(deadline))
            with self._lock:
                session = self._sessions.get(address)
            name = tls_server_name(self._config.security, host)
            handshake = TlsConnection(sock, context, name, session)
            tls = (
                SealedConnection.agree(handshake) if handshake.offers_sealed_records else handshake
            )
        except TimeoutError as exc:
            if first is None:
                raise PortRefused(f"TLS handshake with data port {address}: {exc}") from exc
            first.hedges.may_hedge(first.worker_id)
            raise PortHedged(
                f"no TLS handshake with data port {address} within the budget"
            ) from exc
        except (PortFailed, OSError) as exc:
            raise PortRefused(f"TLS handshake with data port {address}: {exc}") from exc
        if not self._token:
            self._keep_session(address, tls)
            return tls
        try:
            send(tls, wire.encode_auth(self._token), deadline)
            header_buffer = bytearray(wire.RESPONSE_HEADER.size)
            receive_into(tls, memoryview(header_buffer), deadline)
            header = wire.ResponseHeader.decode(header_buffer)
        except PortFailed as exc:
            tls.close()
            raise PortRefused(f"data port {address} did not take the token: {exc}") from exc
        if header.status != 0:
            tls.close()
            raise PortRefused(f"data port {address} refused the token (status {header.status})")
        # A response read: TLS 1.3's session tickets, sent right after the handshake, are in.
        self._keep_session(address, tls)
        return tls

    def _keep_session(self, address: str, tls: TlsConnection | SealedConnection) -> None:
        """The next connection to `address` resumes this one's session (no certificate
        sent or checked again) when the worker allows it."""
        if not tls.session_reused and (session := tls.session) is not None:
            with self._lock:
                self._sessions[address] = session

    def release(self, address: str, sock: Connection) -> None:
        with self._lock:
            idle = self._idle.setdefault(address, [])
            if (
                self._generation == _generation
                and len(idle) < self._config.data_port_idle_connections
            ):
                idle.append(sock)
                return
        sock.close()
