"""TLS of the data port without servers: the contexts both sides build from the security
settings, and the worker's TLS channel and the client's TLS connection talking over a
socket pair in this process (a header held for its body, a body larger than a chunk),
with TLS records (a reader that offers no sealed records) and with the sealed records
TLS agrees the keys of (`sealed_records.py`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import tempfile
import threading
import time

import pytest

from reservoir.client.data_port_sealed import SealedConnection
from reservoir.client.data_port_tls import TlsConnection
from reservoir.common.blocks.sealed_records import (
    RecordOpener,
    RecordRefused,
    RecordSealer,
    new_key,
)
from reservoir.common.config import SecuritySettings
from reservoir.common.security import (
    data_port_client_context,
    data_port_server_context,
    tls_server_name,
)
from reservoir.local import pki
from reservoir.worker.data_port_transport import TlsChannel
from reservoir.worker.sealed_channel import SealedChannel


@pytest.fixture(scope="module")
def creds(tmp_path_factory: pytest.TempPathFactory) -> pki.LocalCredentials:
    return pki.create(tmp_path_factory.mktemp("pki"), ["worker1"])


def _server(creds: pki.LocalCredentials, **more: object) -> SecuritySettings:
    return SecuritySettings(
        tls_ca=str(creds.ca), tls_cert=str(creds.cert), tls_key=str(creds.key), **more
    )


def test_without_tls_settings_the_data_port_is_plain_on_both_sides() -> None:
    assert data_port_server_context(SecuritySettings()) is None
    assert data_port_client_context(SecuritySettings()) is None


def test_the_server_wants_a_client_certificate_exactly_when_grpc_does(
    creds: pki.LocalCredentials,
) -> None:
    plain = data_port_server_context(_server(creds))
    mutual = data_port_server_context(_server(creds, tls_client_auth=True))
    assert plain is not None and plain.verify_mode == ssl.CERT_NONE
    assert mutual is not None and mutual.verify_mode == ssl.CERT_REQUIRED


def test_the_client_checks_the_server_name_override_when_set(
    creds: pki.LocalCredentials,
) -> None:
    assert tls_server_name(SecuritySettings(), "[::1]") == "::1"
    named = SecuritySettings(tls_ca=str(creds.ca), tls_server_name="reservoir-master.svc")
    assert tls_server_name(named, "10.0.0.7") == "reservoir-master.svc"
    client = data_port_client_context(named)
    assert client is not None and client.check_hostname


def _exchange(creds: pki.LocalCredentials, server_name: str, body: bytes) -> tuple[bytes, bytes]:
    """The client sends b"ping"; the worker's channel answers a 16-byte header (held for
    its body) and `body`. Returns what each side received."""
    worker_sock, client_sock = socket.socketpair()
    worker_sock.setblocking(False)
    context = data_port_server_context(_server(creds))
    assert context is not None
    received: dict[str, bytes] = {}

    async def worker() -> None:
        try:
            channel = await TlsChannel.open(worker_sock, context, 10, 10)
        except (OSError, ConnectionError):  # the client refused us: nothing to serve
            worker_sock.close()
            return
        # this reader offered no sealed records: its bytes stay in TLS records
        received["sealed"] = b"yes" if channel.offers_sealed_records else b""
        received["worker"] = await _receive_ping(channel)
        await channel.send(b"H" * 16, more=True)
        await channel.send(body)
        channel.close()

    thread = threading.Thread(target=lambda: asyncio.run(worker()))
    thread.start()
    try:
        client_context = data_port_client_context(SecuritySettings(tls_ca=str(creds.ca)))
        assert client_context is not None
        client_sock.settimeout(10)
        connection = TlsConnection(client_sock, client_context, server_name, None)
        connection.sendall(b"ping")
        received["client"] = _receive_up_to(connection, 16 + len(body))
        connection.close()
    finally:
        client_sock.close()
        thread.join(10)
    assert not received.get("sealed"), "sealed records chosen for a reader that offered none"
    return received["worker"], received["client"]


def test_a_tls_channel_and_a_tls_connection_carry_a_response_byte_exact(
    creds: pki.LocalCredentials,
) -> None:
    body = os.urandom(3 * (1 << 20) + 77)  # more than one of the worker's write chunks
    request, response = _exchange(creds, "127.0.0.1", body)
    assert request == b"ping"
    assert response == b"H" * 16 + body


def test_a_client_refuses_a_worker_whose_certificate_is_not_for_the_name_it_checks(
    creds: pki.LocalCredentials,
) -> None:
    with pytest.raises(ssl.SSLCertVerificationError):
        _exchange(creds, "not-this-worker.example", b"secret")


def _sealed_exchange(
    creds: pki.LocalCredentials, body: bytes, *, from_file: bool = False, flip_at: int = -1
) -> tuple[bytes, bytes]:
    """As `_exchange`, once the handshake has agreed sealed records: the client sends its
    key and b"ping" at once, the worker answers a held header and `body` (from a file with
    `from_file`). With `flip_at`, that byte of what the worker sends after the handshake
    is flipped on the way. Returns what each side received (the client's up to a refusal)."""
    worker_sock, client_sock = socket.socketpair()
    worker_sock.setblocking(False)
    context = data_port_server_context(_server(creds))
    assert context is not None
    received: dict[str, bytes] = {}

    async def worker() -> None:
        tls = await TlsChannel.open(worker_sock, context, 10, 10)
        assert tls.offers_sealed_records
        channel = await SealedChannel.agree(tls)
        received["worker"] = await _receive_ping(channel)
        await channel.send(b"H" * 16, more=True)
        if from_file:
            with tempfile.TemporaryFile() as f:
                f.write(b"x" * 5 + body)
                f.flush()
                await channel.send_file(f.fileno(), 5, len(body))
        else:
            await channel.send(body)
        if flip_at >= 0:
            await asyncio.sleep(0.2)
        channel.close()

    thread = threading.Thread(target=lambda: asyncio.run(worker()))
    thread.start()
    try:
        client_context = data_port_client_context(
            SecuritySettings(tls_ca=str(creds.ca)), sealed_records=True
        )
        assert client_context is not None
        client_sock.settimeout(10)
        handshake = TlsConnection(client_sock, client_context, "127.0.0.1", None)
        assert handshake.offers_sealed_records
        connection = SealedConnection.agree(handshake)
        connection.sendall(b"ping")
        if flip_at >= 0:
            _flip_in_flight(client_sock, flip_at)
        received["client"] = _receive_up_to(connection, 16 + len(body))
        connection.close()
    finally:
        client_sock.close()
        thread.join(10)
    return received["worker"], received["client"]


def _flip_in_flight(sock: socket.socket, at: int) -> None:
    """Flips byte `at` of what waits in `sock`'s receive queue, as a relay would: the
    queue is read out and put back through a new socket pair in its place."""
    time.sleep(0.2)  # the worker's whole answer is in
    data = bytearray()
    sock.setblocking(False)
    with contextlib.suppress(BlockingIOError):
        while chunk := sock.recv(1 << 20):
            data += chunk
    sock.setblocking(True)
    data[at] ^= 0x01
    a, b = socket.socketpair()

    def feed() -> None:  # more than a socket pair holds may wait: fed as it is read
        with a:
            a.sendall(bytes(data))

    threading.Thread(target=feed, daemon=True).start()
    os.dup2(b.fileno(), sock.fileno())
    b.close()


@pytest.mark.parametrize("from_file", [False, True], ids=["view", "block_file"])
@pytest.mark.parametrize("size", [0, 100, 3 * (1 << 20) + 77], ids=["empty", "small", "large"])
def test_sealed_records_after_tls_carry_a_response_byte_exact(
    creds: pki.LocalCredentials, from_file: bool, size: int
) -> None:
    body = os.urandom(size)
    request, response = _sealed_exchange(creds, body, from_file=from_file)
    assert request == b"ping"
    assert response == b"H" * 16 + body


def test_a_sealed_record_changed_on_the_way_is_refused(creds: pki.LocalCredentials) -> None:
    with pytest.raises(RecordRefused):
        # small enough that the worker's whole answer waits in the socket pair's buffer
        _sealed_exchange(creds, os.urandom(100_000), flip_at=1000)


def test_sealed_records_carry_nothing_of_the_block_in_clear() -> None:
    key = new_key()
    block = os.urandom(1 << 20)
    record = RecordSealer(key).seal(block)
    assert block[:64] not in record and len(record) == 4 + len(block) + 16
    out = bytearray(len(block))
    opened = RecordOpener(key).open_into(bytes(record[:4]), memoryview(record)[4:], memoryview(out))
    assert opened == len(block) and bytes(out) == block


def test_a_record_replayed_or_from_another_connection_does_not_open() -> None:
    key = new_key()
    sealer, opener = RecordSealer(key), RecordOpener(key)
    first, second = sealer.seal(b"first"), sealer.seal(b"second")
    out = memoryview(bytearray(16))
    assert opener.open_into(bytes(first[:4]), memoryview(first)[4:], out) == 5
    with pytest.raises(RecordRefused):  # the first again, where the second belongs
        opener.open_into(bytes(first[:4]), memoryview(first)[4:], out)
    other = RecordSealer(new_key()).seal(b"second")
    with pytest.raises(RecordRefused):
        RecordOpener(key).open_into(bytes(other[:4]), memoryview(other)[4:], out)
    with pytest.raises(RecordRefused):
        RecordOpener.body_size((64 << 20).to_bytes(4, "little"))
    assert len(second) == 4 + 6 + 16


def _receive_up_to(connection: TlsConnection | SealedConnection, n: int) -> bytes:
    """What the connection carries, up to `n` bytes or until the worker closes it."""
    out = memoryview(bytearray(n))
    filled = 0
    while filled < n and (got := connection.recv_into(out[filled:])):
        filled += got
    return bytes(out[:filled])


async def _receive_ping(channel: TlsChannel | SealedChannel) -> bytes:
    """The 4 bytes the client sends first, as the worker's channel receives them."""
    buffer = memoryview(bytearray(4))
    got = 0
    while got < 4:
        got += await channel.receive_into(buffer[got:])
    return bytes(buffer)
