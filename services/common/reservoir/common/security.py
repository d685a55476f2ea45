"""Transport security: TLS on every gRPC hop, and the bearer token a process presents.

One `SecuritySettings` per process, read once from the environment; one `Transport`
built from it opens every channel that process dials (client -> master, client -> worker,
worker -> master, master -> worker) and gives the server its credentials. A token is
sent only over TLS (gRPC attaches call credentials to secure channels alone), so it never
crosses the network in clear.

A worker's data port is not gRPC: `data_port_server_context` and `data_port_client_context`
give it and its readers `ssl` contexts from the same settings (the same certificates, CA,
client-certificate rule and server-name override), so the data port is exactly as secure
as the gRPC port beside it.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from reservoir.common.blocks import sealed_records as records
from reservoir.common.blocks.data_protection import SEALED_ALPN, Level
from reservoir.common.config import SecuritySettings
from reservoir.common.errors import InvalidArgument

__all__ = [
    "SecuritySettings",
    "Transport",
    "data_port_client_context",
    "data_port_server_context",
]


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {what} {path}: {exc.strerror}") from exc


class Transport:
    """Opens this process's channels and serves its ports, with or without TLS."""

    def __init__(self, settings: SecuritySettings, channel_options: list[tuple[str, Any]]) -> None:
        self.settings = settings
        self._options = list(channel_options)
        if settings.tls_server_name:
            self._options.append(("grpc.ssl_target_name_override", settings.tls_server_name))
        self._token = settings.presented_token()
        self._credentials: grpc.ChannelCredentials | None = None
        if settings.tls:
            ca = _read(settings.tls_ca, "TLS CA bundle") if settings.tls_ca else None
            key = _read(settings.tls_key, "TLS key") if settings.tls_key else None
            cert = _read(settings.tls_cert, "TLS certificate") if settings.tls_cert else None
            credentials = grpc.ssl_channel_credentials(ca, key, cert)
            if self._token:
                credentials = grpc.composite_channel_credentials(
                    credentials, grpc.access_token_call_credentials(self._token)
                )
            self._credentials = credentials
        elif self._token:
            raise InvalidArgument(
                "a token is configured but TLS is not (set RESERVOIR_TLS_CA): "
                "a token is never sent in clear"
            )

    @property
    def secure(self) -> bool:
        return self._credentials is not None

    def channel(self, address: str) -> grpc.aio.Channel:
        if self._credentials is None:
            return grpc.aio.insecure_channel(address, options=self._options)
        return grpc.aio.secure_channel(address, self._credentials, options=self._options)

    def sync_channel(self, address: str) -> grpc.Channel:
        """A blocking channel (launcher checks, tests)."""
        if self._credentials is None:
            return grpc.insecure_channel(address, options=self._options)
        return grpc.secure_channel(address, self._credentials, options=self._options)

    def server_credentials(self) -> grpc.ServerCredentials | None:
        s = self.settings
        if not s.tls_cert:
            if s.auth_tokens_file:
                raise InvalidArgument(
                    "authentication (RESERVOIR_AUTH_TOKENS_FILE) needs TLS "
                    "(RESERVOIR_TLS_CERT and RESERVOIR_TLS_KEY): tokens are never sent in clear"
                )
            return None
        if not s.tls_key:
            raise InvalidArgument("RESERVOIR_TLS_CERT is set but RESERVOIR_TLS_KEY is not")
        if s.tls_client_auth and not s.tls_ca:
            raise InvalidArgument("RESERVOIR_TLS_CLIENT_AUTH needs RESERVOIR_TLS_CA")
        return grpc.ssl_server_credentials(
            [(_read(s.tls_key, "TLS key"), _read(s.tls_cert, "TLS certificate"))],
            root_certificates=_read(s.tls_ca, "TLS CA bundle") if s.tls_client_auth else None,
            require_client_auth=s.tls_client_auth,
        )


def _ssl_context(purpose: ssl.Purpose, settings: SecuritySettings) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(purpose, cafile=settings.tls_ca or None)
        if settings.tls_cert:
            if not settings.tls_key:
                raise InvalidArgument("RESERVOIR_TLS_CERT is set but RESERVOIR_TLS_KEY is not")
            context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidArgument(f"cannot load the TLS certificates: {exc}") from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def data_port_server_context(settings: SecuritySettings) -> ssl.SSLContext | None:
    """The data port's TLS as a server: this worker's certificate, and a client certificate
    signed by the CA required when gRPC requires one. None: the port is plain TCP (no TLS,
    or a data protection level below privacy)."""
    if not settings.tls_cert or settings.data_level is not Level.PRIVACY:
        return None
    if settings.tls_client_auth and not settings.tls_ca:
        raise InvalidArgument("RESERVOIR_TLS_CLIENT_AUTH needs RESERVOIR_TLS_CA")
    context = _ssl_context(ssl.Purpose.CLIENT_AUTH, settings)
    context.verify_mode = ssl.CERT_REQUIRED if settings.tls_client_auth else ssl.CERT_NONE
    # Chosen when the reader offers it: the bytes go in sealed records after the handshake.
    if records.AVAILABLE:
        context.set_alpn_protocols([SEALED_ALPN])
    return context


def data_port_client_context(
    settings: SecuritySettings, *, sealed_records: bool = False
) -> ssl.SSLContext | None:
    """A reader's TLS to data ports: the server checked against RESERVOIR_TLS_CA (the
    system's CAs without one, as gRPC), this process's certificate shown when it has one.
    With `sealed_records` the handshake offers them (the reader then speaks
    `sealed_records.py` after it); without, the bytes stay in TLS records. None: this
    process speaks no TLS, so it dials data ports in plain TCP."""
    if not settings.tls:
        return None
    context = _ssl_context(ssl.Purpose.SERVER_AUTH, settings)
    if sealed_records and records.AVAILABLE:
        context.set_alpn_protocols([SEALED_ALPN])
    return context


def tls_server_name(settings: SecuritySettings, host: str) -> str:
    """The name a server's certificate must carry when dialled at `host` (the override of
    RESERVOIR_TLS_SERVER_NAME, as gRPC's)."""
    return settings.tls_server_name or host.strip("[]")
