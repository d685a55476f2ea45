"""A namespace that spans many etcd pages, on a real cluster (etcd, S3, master, workers as
processes): the master reads every prefix page by page (RESERVOIR_METADATA_PAGE_KEYS=5
here, so a few thousand files are many pages), and report, a load job's file
expansion, listings and a restarted master's location table all come out whole."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.common.metadata import keyspace
from reservoir.common.metadata.metadata_store import open_metadata_store
from reservoir.local.cluster import LocalCluster
from reservoir.master.namespace_store import CHUNK_ENTRIES
from tests.eventually import eventually

FILES_PER_DIR = {"a": 1300, "b": 700, "c/d": 500}
BLOCK = 4096


@pytest.fixture(scope="module")
def paged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(
        tmp_path_factory.mktemp("paged"),
        workers=2,
        lease_ttl=3,
        env={"RESERVOIR_METADATA_PAGE_KEYS": "5"},
    )
    try:
        yield cluster
    finally:
        cluster.down()


def _upload(cluster: LocalCluster, bucket: str) -> dict[str, int]:
    """Objects of 0-9,999 bytes (one to three blocks); returns key -> size."""
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=bucket)
    sizes = {
        f"ds/{folder}/img-{i:06d}.jpg": (i * 7919) % 10_000
        for folder, count in FILES_PER_DIR.items()
        for i in range(count)
    }
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=b"x" * kv[1]),
                sizes.items(),
            )
        )
    return sizes


def _namespace_keys(cluster: LocalCluster) -> int:
    import asyncio

    async def count() -> int:
        store = open_metadata_store(cluster.metadata_url, etcd=cluster.etcd_settings())
        try:
            return await store.count_prefix(keyspace.NAMESPACE)
        finally:
            await store.close()

    return asyncio.run(count())


def test_report_load_and_listings_of_a_namespace_of_many_pages_are_whole(
    paged: LocalCluster, tmp_path: Path
) -> None:
    bucket = f"p-{uuid.uuid4().hex[:10]}"
    sizes = _upload(paged, bucket)
    total = len(sizes)
    mount = f"/paged/{bucket}"
    with Client(paged.master_address) as c:
        c.mount(mount, f"s3://{bucket}/ds/", endpoint_url=paged.s3_endpoint, block_size=BLOCK)
        c.load_metadata(mount)
        # 2,500 files in chunks of up to CHUNK_ENTRIES, read 5 chunks a page.
        keys = _namespace_keys(paged)
        assert keys >= total // CHUNK_ENTRIES and keys > 3 * 5
        before = c.report(mount)
        assert before.files == total
        assert before.bytes == sum(sizes.values())
        assert before.cached_blocks == 0
        assert len(c.ls(f"{mount}/a")) == FILES_PER_DIR["a"]

        job = c.watch_job(c.submit_load(mount).id)
        assert job.state == "completed", job.errors
        assert job.total_files == total
        blocks = sum(-(-size // BLOCK) for size in sizes.values())
        assert job.total_blocks == blocks == job.done_blocks
        after = c.report(mount)
        assert after.cached_blocks == after.blocks == blocks
        assert after.cached_bytes == after.bytes == sum(sizes.values())
        assert job.id in {j.id for j in c.jobs()}

    # A restarted master reads the location table (a key per cached file) page by page.
    paged.kill("master")
    paged.start_master()
    with Client(paged.master_address) as c:
        # Exact once the workers have re-reported to the new master (what the old one
        # had not written to etcd yet when it was killed).
        cached = sum(
            -(-size // BLOCK) for key, size in sizes.items() if key.startswith("ds/c/") and size
        )
        eventually(lambda: c.report(f"{mount}/c").cached_blocks == cached, what="exact report")
        stat = c.stat(f"{mount}/c/d/img-000042.jpg")
        assert stat.size == sizes["ds/c/d/img-000042.jpg"]
