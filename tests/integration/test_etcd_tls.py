"""A `--secure` local cluster is TLS end to end, etcd included: master and workers reach
etcd with the cluster's CA and a client certificate, etcd refuses a plaintext client, and
the cluster keeps serving after etcd restarts."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.common.config import EtcdSettings
from reservoir.common.errors import Unavailable
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import open_metadata_store
from reservoir.local.cluster import LocalCluster
from tests.eventually import eventually

BLOCK = 64 * 1024


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(tmp_path_factory.mktemp("etcd-tls"), workers=1, secure=True)
    try:
        cluster.s3_client().create_bucket(Bucket="etls")
        yield cluster
    finally:
        cluster.down()


def _put(cluster: LocalCluster, key: str) -> bytes:
    data = os.urandom(2 * BLOCK + 17)
    cluster.s3_client().put_object(Bucket="etls", Key=key, Body=data)
    return data


def _etcd_keys(cluster: LocalCluster, settings: EtcdSettings) -> list[bytes]:
    async def main() -> list[bytes]:
        store = open_metadata_store(cluster.metadata_url, timeout_s=2, etcd=settings)
        try:
            return [key for key, _ in await store.get_prefix(keyspace.WORKERS)]
        finally:
            await store.close()

    return asyncio.run(asyncio.wait_for(main(), 10))


def test_a_secure_cluster_keeps_its_metadata_in_an_etcd_that_serves_tls_only(
    secure: LocalCluster,
) -> None:
    data = _put(secure, "a/one.bin")
    with Client(config=secure.client_config("admin")) as c:
        c.mount("/etls", "s3://etls/a/", endpoint_url=secure.s3_endpoint, block_size=BLOCK)
        assert c.read("/etls/one.bin") == data
        assert c.read("/etls/one.bin") == data  # served from the worker's cache

    keys = _etcd_keys(secure, secure.etcd_settings())
    assert keys == [keyspace.worker_key("worker1")]  # registered under its lease
    with pytest.raises(Unavailable, match="RESERVOIR_ETCD_CA"):
        _etcd_keys(secure, EtcdSettings())

    log = Path(secure.processes["master"].log).read_text().splitlines()
    master = json.loads(next(line for line in log if '"master_started"' in line))
    assert master["etcd_tls"] is True


def test_a_secure_cluster_serves_a_new_mount_after_etcd_restarts(secure: LocalCluster) -> None:
    secure.stop("etcd")
    secure.restart_etcd()
    data = _put(secure, "b/two.bin")
    with Client(config=secure.client_config("admin")) as c:
        mount = ("/etls-after", "s3://etls/b/")
        # The master and workers reconnect to etcd in their own time.
        eventually(
            lambda: c.mount(*mount, endpoint_url=secure.s3_endpoint, block_size=BLOCK) or True,
            timeout_s=15,
            what="a mount once etcd is back",
        )
        assert eventually(lambda: c.read("/etls-after/two.bin"), timeout_s=15) == data
