"""Real etcd servers for the metadata-store contract: plaintext, and TLS with client
certificate authentication (the way `reservoir local up --secure` runs it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reservoir.local import pki

from .etcd_servers import EtcdServer, start_etcd


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = start_etcd(tmp_path_factory.mktemp("etcd"), None)
    try:
        yield server
    finally:
        server.cluster.down()


@pytest.fixture(scope="session")
def etcd_cluster_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """Three etcd members as one cluster."""
    server = start_etcd(tmp_path_factory.mktemp("etcd-cluster"), None, members=3)
    try:
        yield server
    finally:
        server.cluster.down()


@pytest.fixture(scope="session")
def etcd_credentials(tmp_path_factory: pytest.TempPathFactory) -> pki.LocalCredentials:
    return pki.create(tmp_path_factory.mktemp("etcd-pki"), [])


@pytest.fixture(scope="session")
def tls_etcd_server(
    tmp_path_factory: pytest.TempPathFactory, etcd_credentials: pki.LocalCredentials
) -> Iterator[EtcdServer]:
    server = start_etcd(tmp_path_factory.mktemp("etcd-tls"), etcd_credentials.directory)
    try:
        yield server
    finally:
        server.cluster.down()
