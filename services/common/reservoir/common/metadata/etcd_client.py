"""aetcd clients for the metadata store: plaintext, or TLS with an optional client
certificate and etcd user, as `EtcdSettings` say.

aetcd 1.0's `Client.connect` only opens `grpc.aio.insecure_channel`. `TlsEtcdClient`
overrides `connect` to open a secure channel instead and otherwise does what aetcd's does
(authenticate when a user is set, the stubs, the watcher), so every other method of
aetcd's client works unchanged. The contract tests run the whole store over it against a
real TLS etcd; re-check this against aetcd's `connect` when upgrading aetcd.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aetcd
import aetcd.client
import grpc
import grpc.aio
from aetcd import rpc, watcher

from reservoir.common.config import EtcdSettings
from reservoir.common.errors import InvalidArgument


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {what} {path}: {exc.strerror}") from exc


def channel_credentials(settings: EtcdSettings) -> grpc.ChannelCredentials:
    """TLS credentials for etcd: its CA (the system's roots when unset) and, for
    --client-cert-auth, this process's certificate."""
    ca = _read(settings.ca, "etcd CA bundle") if settings.ca else None
    key = _read(settings.key, "etcd client key") if settings.key else None
    cert = _read(settings.cert, "etcd client certificate") if settings.cert else None
    return grpc.ssl_channel_credentials(ca, key, cert)


class TlsEtcdClient(aetcd.Client):
    """An aetcd client whose channel is TLS."""

    # Set by aetcd's __init__ (declared here for the type checker).
    _options: dict[str, Any]
    _is_connecting: bool

    def __init__(
        self, credentials: grpc.ChannelCredentials, server_name: str = "", **kwargs: Any
    ) -> None:
        if server_name:
            kwargs["options"] = {
                **(kwargs.get("options") or {}),
                "grpc.ssl_target_name_override": server_name,
            }
        super().__init__(**kwargs)
        self._credentials = credentials

    @aetcd.client._handle_errors  # the same mapping of gRPC errors as aetcd's connect
    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:
            # Another task is establishing the connection: wait for it.
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            self.channel = grpc.aio.secure_channel(
                f"{self._host}:{self._port}", self._credentials, options=self._options.items()
            )
            if self._username is not None and self._password is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                request = rpc.AuthenticateRequest(name=self._username, password=self._password)
                reply = await self.auth_stub.Authenticate(request, timeout=self._timeout)
                self.metadata = (("token", reply.token),)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(
                rpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
            )
            self._connected.set()
        finally:
            self._is_connecting = False


def etcd_clients(
    endpoints: list[tuple[str, int]], timeout_s: float, settings: EtcdSettings
) -> list[aetcd.Client]:
    """One client per endpoint, all with the same security."""
    if not settings.tls:
        return [aetcd.Client(host=h, port=p, timeout=timeout_s) for h, p in endpoints]
    credentials = channel_credentials(settings)
    user = settings.user or None
    password = settings.password() if settings.user else None
    return [
        TlsEtcdClient(
            credentials,
            settings.server_name,
            host=h,
            port=p,
            timeout=timeout_s,
            username=user,
            password=password,
        )
        for h, p in endpoints
    ]
