"""Real servers for the contracts: etcd for the metadata store (plaintext, and TLS with
client certificate authentication, the way `reservoir local up --secure` runs it); the
S3-compatible server, a file server, a WebHDFS server and the cloud emulators for the
under-stores."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reservoir.local import pki
from reservoir.local.cluster import LocalCluster

from ..http_files import HttpFiles
from ..webhdfs_server import WebHdfsServer
from .etcd_servers import EtcdServer, start_etcd


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The local S3-compatible server, one process for every under-store contract."""
    cluster = LocalCluster(state_dir=tmp_path_factory.mktemp("s3"))
    cluster.start_s3()
    try:
        yield cluster.s3_endpoint
    finally:
        cluster.down()


@pytest.fixture(scope="session")
def http_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpFiles]:
    server = HttpFiles(tmp_path_factory.mktemp("served"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def webhdfs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebHdfsServer]:
    """A WebHDFS server listing in batches of two, so every listing pages."""
    server = WebHdfsServer(tmp_path_factory.mktemp("hdfs"), "--batch", "2")
    try:
        yield server
    finally:
        server.stop()


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
