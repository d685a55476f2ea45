"""The block GETs of every S3 store of one endpoint in a process share one pool of kept
connections and threads: a worker that has served hundreds of mounts (or remounts) of an
endpoint holds one pool of `max_connections`, not one per store it ever opened."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid

from reservoir.common.understore.mounted_stores import open_under_store
from reservoir.common.understore.under_store import UnderStore, UnderStoreSettings
from reservoir.local.cluster import DEV_CREDENTIALS

STORES = 12


def _get_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("ufs-get")}


def test_stores_of_one_endpoint_share_one_bounded_pool_of_get_threads(s3_endpoint: str) -> None:
    os.environ.update(DEV_CREDENTIALS)
    # Settings of this test's own (no other test's pool is this one).
    settings = UnderStoreSettings(
        endpoint_url=s3_endpoint, credentials="env", timeout_s=7, max_connections=3
    )
    stores: list[tuple[UnderStore, bytes]] = []
    for _ in range(STORES):
        bucket = f"p-{uuid.uuid4().hex[:10]}"
        ufs = open_under_store(f"s3://{bucket}/r/", settings)
        ufs._s3.create_bucket(Bucket=bucket)  # type: ignore[attr-defined]
        data = os.urandom(50_000)
        ufs.put("k", data)
        stores.append((ufs, data))
    before = _get_threads()

    async def read(ufs: UnderStore) -> bytes:
        buffer = bytearray(50_000)
        got = await ufs.get_range_into("k", 0, memoryview(buffer), "")
        return bytes(buffer[:got])

    async def reads() -> list[bytes]:
        return list(await asyncio.gather(*(read(ufs) for ufs, _ in stores)))

    assert asyncio.run(reads()) == [data for _, data in stores]
    assert asyncio.run(reads()) == [data for _, data in stores]
    assert len(_get_threads() - before) <= settings.max_connections
