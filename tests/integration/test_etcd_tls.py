"""A `--secure` local cluster is TLS end to end, etcd included: master and workers reach
etcd with the cluster's CA and a client certificate, etcd refuses a plaintext client, and
the cluster keeps serving after etcd restarts."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from reservoir.client import Client
from reservoir.common import keyspace
from reservoir.common.config import EtcdSettings
from reservoir.common.errors import Unavailable
from reservoir.common.metadata_store import open_metadata_store
from reservoir.local.cluster import LocalCluster

BLOCK = 64 * 1024
T = TypeVar("T")


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


def _eventually(check: Callable[[], T], timeout_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return check()
        except ConnectionError:  # master or worker still reconnecting to etcd
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


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
        _eventually(lambda: c.mount(*mount, endpoint_url=secure.s3_endpoint, block_size=BLOCK), 15)
        assert _eventually(lambda: c.read("/etls-after/two.bin"), 15) == data
