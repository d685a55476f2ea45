"""S3 misbehaving under a real cluster: bodies that break off, objects overwritten under
cached metadata. Readers get exact bytes."""

from __future__ import annotations

import os

from reservoir.client import Client
from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path

BLOCK = 64 * 1024


def test_truncated_s3_bodies_are_read_again_by_the_worker_and_bytes_are_exact(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    data = os.urandom(3 * BLOCK + 123)
    cluster.s3_client().put_object(Bucket=bucket, Key="d/big.bin", Body=data)
    root = new_mount_path()
    client.mount(root, f"s3://{bucket}/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
    client.ls(root)
    gets = cluster.s3_counts().get("GET", 0)
    cluster.s3_config(truncate_gets=3)  # within the default bound of 3 re-reads per block
    try:
        assert client.read(f"{root}/big.bin") == data
    finally:
        cluster.s3_config(truncate_gets=0)
    # 4 blocks, each fetched once by a worker, plus the 3 bodies that broke off.
    assert cluster.s3_counts().get("GET", 0) - gets == 4 + 3
