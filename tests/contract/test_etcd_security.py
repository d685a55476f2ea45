"""The metadata store against an etcd that serves TLS with client certificate
authentication: a store that cannot prove itself (no CA, no client certificate, another
CA) is refused at once with an error that says why; etcd's own users authenticate with a
password from a file, again after their token expires, and a wrong one is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.common.config import EtcdSettings
from reservoir.common.errors import PermissionDenied, Unavailable
from reservoir.common.metadata.metadata_store import open_metadata_store
from reservoir.local import pki
from reservoir.local.cluster import etcd_binary

from .etcd_servers import EtcdServer, start_etcd

TIMEOUT_S = 2.0
PASSWORD = "etcd-root-secret-7f3a"


def _refusal(server: EtcdServer, settings: EtcdSettings) -> tuple[Exception, float]:
    """What a get through a store with `settings` raises, and how long it took."""

    async def main() -> Exception:
        store = open_metadata_store(server.url, timeout_s=TIMEOUT_S, etcd=settings)
        try:
            await store.get(b"/contract/x")
        except Exception as exc:
            return exc
        finally:
            await store.close()
        raise AssertionError("etcd answered a store it should have refused")

    start = time.monotonic()
    error = asyncio.run(asyncio.wait_for(main(), TIMEOUT_S + 5))
    return error, time.monotonic() - start


def test_a_plaintext_store_is_refused_within_its_deadline_with_a_hint_to_set_the_ca(
    tls_etcd_server: EtcdServer,
) -> None:
    error, took = _refusal(tls_etcd_server, EtcdSettings())
    assert isinstance(error, Unavailable)
    assert "RESERVOIR_ETCD_CA" in str(error)
    assert took < TIMEOUT_S + 1


def test_a_store_without_a_client_certificate_is_refused_by_client_cert_auth(
    tls_etcd_server: EtcdServer, etcd_credentials: pki.LocalCredentials
) -> None:
    error, took = _refusal(tls_etcd_server, EtcdSettings(ca=str(etcd_credentials.ca)))
    assert isinstance(error, Unavailable)
    assert "handshake" in str(error).lower()
    assert "RESERVOIR_ETCD_CERT" in str(error)
    assert took < TIMEOUT_S + 1


def test_a_store_that_trusts_another_ca_refuses_etcd(
    tls_etcd_server: EtcdServer, etcd_credentials: pki.LocalCredentials, tmp_path: Path
) -> None:
    other = pki.create(tmp_path / "other", [])
    settings = EtcdSettings(
        ca=str(other.ca), cert=str(etcd_credentials.cert), key=str(etcd_credentials.key)
    )
    error, took = _refusal(tls_etcd_server, settings)
    assert isinstance(error, Unavailable)
    assert "handshake" in str(error).lower()
    assert took < TIMEOUT_S + 1


def _etcdctl(server: EtcdServer, *args: str) -> None:
    s = server.settings
    ctl = str(Path(etcd_binary()).with_name("etcdctl"))
    endpoint = server.url.replace("etcd://", "https://")
    subprocess.run(
        [ctl, f"--endpoints={endpoint}", f"--cacert={s.ca}", f"--cert={s.cert}"]
        + [f"--key={s.key}", *args],
        check=True,
        capture_output=True,
        timeout=30,
    )


@pytest.fixture(scope="module")
def auth_etcd_server(
    tmp_path_factory: pytest.TempPathFactory, etcd_credentials: pki.LocalCredentials
) -> Iterator[EtcdServer]:
    """TLS etcd with authentication on, a `root` user, and tokens that expire after 1s idle."""
    server = start_etcd(
        tmp_path_factory.mktemp("etcd-auth"),
        etcd_credentials.directory,
        "--auth-token-ttl",
        "1",
    )
    try:
        _etcdctl(server, "user", "add", "root", f"--new-user-password={PASSWORD}")
        _etcdctl(server, "user", "grant-role", "root", "root")
        _etcdctl(server, "auth", "enable")
        yield server
    finally:
        server.cluster.down()


def _as_root(server: EtcdServer, tmp_path: Path, password: str) -> EtcdSettings:
    password_file = tmp_path / "etcd-password"
    password_file.write_text(password + "\n")
    return dataclasses.replace(server.settings, user="root", password_file=str(password_file))


def test_an_etcd_user_authenticates_with_its_password_file_and_again_after_its_token_expires(
    auth_etcd_server: EtcdServer, tmp_path: Path
) -> None:
    settings = _as_root(auth_etcd_server, tmp_path, PASSWORD)

    async def main() -> None:
        store = open_metadata_store(auth_etcd_server.url, timeout_s=TIMEOUT_S, etcd=settings)
        try:
            await store.put(b"/contract/auth", b"1")
            assert await store.get(b"/contract/auth") == b"1"
            await asyncio.sleep(3)  # idle past --auth-token-ttl: etcd forgets the token
            assert await store.get(b"/contract/auth") == b"1"
            await store.delete(b"/contract/auth")
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_wrong_etcd_password_is_permission_denied_without_echoing_it(
    auth_etcd_server: EtcdServer, tmp_path: Path
) -> None:
    wrong = "not-the-password-91c2"
    error, took = _refusal(auth_etcd_server, _as_root(auth_etcd_server, tmp_path, wrong))
    assert isinstance(error, PermissionDenied)
    assert wrong not in str(error)
    assert took < TIMEOUT_S + 1
