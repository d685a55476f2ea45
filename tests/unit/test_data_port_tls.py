"""TLS of the data port without servers: the contexts both sides build from the security
settings, and the worker's TLS channel and the client's TLS connection talking over a
socket pair in this process (a header held for its body, a body larger than a chunk)."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import threading

import pytest

from reservoir.client.data_port_tls import TlsConnection
from reservoir.common.config import SecuritySettings
from reservoir.common.security import (
    data_port_client_context,
    data_port_server_context,
    tls_server_name,
)
from reservoir.local import pki
from reservoir.worker.data_port_transport import TlsChannel


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
        buffer = memoryview(bytearray(4))
        got = 0
        while got < 4:
            got += await channel.receive_into(buffer[got:])
        received["worker"] = bytes(buffer)
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
        out = memoryview(bytearray(16 + len(body)))
        filled = 0
        while filled < len(out) and (n := connection.recv_into(out[filled:])):
            filled += n
        received["client"] = bytes(out[:filled])
        connection.close()
    finally:
        client_sock.close()
        thread.join(10)
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
