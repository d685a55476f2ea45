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


def test_an_object_overwritten_under_long_lived_metadata_is_refreshed_on_the_first_conflict(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    s3 = cluster.s3_client()
    old, new = os.urandom(3 * BLOCK), os.urandom(3 * BLOCK + 7)
    s3.put_object(Bucket=bucket, Key="d/f.bin", Body=old)
    root = new_mount_path()
    client.mount(
        root,
        f"s3://{bucket}/d/",
        endpoint_url=cluster.s3_endpoint,
        block_size=BLOCK,
        metadata_sync="interval:1h",  # the stored inode is trusted for an hour
    )
    client.ls(root)
    assert client.read(f"{root}/f.bin", 0, BLOCK) == old[:BLOCK]  # block 0 now cached
    s3.put_object(Bucket=bucket, Key="d/f.bin", Body=new)
    heads = cluster.s3_counts().get("HEAD", 0)
    # Block 1 is not cached: its ranged GET names the old ETag and S3 refuses it. The
    # master re-reads this one file's metadata; the read runs again on the new object.
    assert client.read(f"{root}/f.bin") == new
    assert cluster.s3_counts().get("HEAD", 0) - heads == 1
    with Client(cluster.master_address) as fresh:
        assert fresh.stat(f"{root}/f.bin").size == len(new)
        assert fresh.read(f"{root}/f.bin") == new
    assert cluster.s3_counts().get("HEAD", 0) - heads == 1


def test_truncated_bodies_are_read_again_by_the_client_reading_s3_directly(
    own_cluster: LocalCluster,
) -> None:
    s3 = own_cluster.s3_client()
    s3.create_bucket(Bucket="direct")
    data = os.urandom(2 * BLOCK + 5)
    s3.put_object(Bucket="direct", Key="d/f.bin", Body=data)
    with Client(own_cluster.master_address) as c:
        c.mount("/d", "s3://direct/d/", endpoint_url=own_cluster.s3_endpoint, block_size=BLOCK)
        c.ls("/d")
        own_cluster.kill("worker1")
        own_cluster.kill("worker2")  # no worker left: the client reads S3 itself
        gets = own_cluster.s3_counts().get("GET", 0)
        own_cluster.s3_config(truncate_gets=2)
        assert c.read("/d/f.bin") == data
        assert own_cluster.s3_counts().get("GET", 0) - gets == 3 + 2  # 3 blocks, 2 re-reads
