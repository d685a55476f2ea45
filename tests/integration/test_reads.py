"""Reads through a real cluster: etcd, S3 server, master and 3 workers as processes."""

from __future__ import annotations

import asyncio
import io
import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reservoir.client import AsyncClient, Client
from reservoir.common.errors import Conflict
from reservoir.common.models import Inode
from reservoir.local.cluster import LocalCluster
from tests.conftest import new_mount_path
from tests.eventually import eventually

BLOCK = 64 * 1024
SIZES = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 5 * BLOCK + 123]


def _put(cluster: LocalCluster, bucket: str, key: str, data: bytes) -> None:
    cluster.s3_client().put_object(Bucket=bucket, Key=key, Body=data)


def _mount(client: Client, cluster: LocalCluster, bucket: str, **options: object) -> str:
    path = new_mount_path()
    client.mount(
        path, f"s3://{bucket}/data/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK, **options
    )
    return path


@pytest.fixture
def dataset(cluster: LocalCluster, bucket: str, client: Client) -> tuple[str, dict[str, bytes]]:
    files = {f"f{size}.bin": os.urandom(size) for size in SIZES}
    for name, data in files.items():
        _put(cluster, bucket, f"data/{name}", data)
    return _mount(client, cluster, bucket), files


def test_whole_file_reads_are_byte_exact_at_block_edges(
    client: Client, dataset: tuple[str, dict[str, bytes]]
) -> None:
    root, files = dataset
    for name, data in files.items():
        assert client.read(f"{root}/{name}") == data, name


def test_random_ranges_match_the_object_including_past_eof(
    client: Client, dataset: tuple[str, dict[str, bytes]]
) -> None:
    root, files = dataset
    data = files[f"f{5 * BLOCK + 123}.bin"]
    rng = random.Random(3)
    for _ in range(60):
        offset = rng.randrange(0, len(data) + BLOCK)
        length = rng.choice([0, 1, rng.randrange(1, 3 * BLOCK), -1])
        expected = data[offset:] if length < 0 else data[offset : offset + length]
        assert client.read(f"{root}/f{5 * BLOCK + 123}.bin", offset, length) == expected


def test_second_read_makes_no_get_at_the_s3_server(
    cluster: LocalCluster, client: Client, dataset: tuple[str, dict[str, bytes]]
) -> None:
    root, files = dataset
    for name in files:
        client.read(f"{root}/{name}")
    before = cluster.s3_counts()
    for name, data in files.items():
        assert client.read(f"{root}/{name}") == data
    after = cluster.s3_counts()
    assert after.get("GET", 0) == before.get("GET", 0)


def test_many_concurrent_readers_of_a_cold_block_cause_one_s3_get(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    data = os.urandom(BLOCK)
    _put(cluster, bucket, "data/hot.bin", data)
    root = _mount(client, cluster, bucket)
    path = f"{root}/hot.bin"
    cluster.s3_config(latency_ms=200)  # keep the fetch in flight while the readers pile up
    try:

        async def readers() -> list[bytes]:
            clients = [AsyncClient(cluster.master_address) for _ in range(4)]
            try:
                for c in clients:
                    await c.stat(path)
                return await asyncio.gather(*(clients[i % 4].read(path) for i in range(40)))
            finally:
                for c in clients:
                    await c.close()

        before = cluster.s3_counts().get("GET", 0)
        results = asyncio.run(readers())
        after = cluster.s3_counts().get("GET", 0)
    finally:
        cluster.s3_config(latency_ms=0)
    assert all(r == data for r in results)
    assert after - before == 1


def test_read_many_returns_every_file_in_order(
    client: Client, dataset: tuple[str, dict[str, bytes]]
) -> None:
    root, files = dataset
    names = list(files) * 2
    random.Random(5).shuffle(names)
    assert client.read_many([f"{root}/{n}" for n in names]) == [files[n] for n in names]


def test_read_many_of_hundreds_of_small_files_fetches_each_from_s3_once(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    files = {f"s/{i:04d}": os.urandom(100 + i) for i in range(300)}
    for key, data in files.items():
        _put(cluster, bucket, f"data/{key}", data)
    root = _mount(client, cluster, bucket)
    client.ls(f"{root}/s")
    paths = [f"{root}/{k}" for k in files]
    gets = cluster.s3_counts().get("GET", 0)
    assert client.read_many(paths) == list(files.values())
    assert cluster.s3_counts().get("GET", 0) - gets == 300
    assert client.read_many(paths) == list(files.values())
    assert cluster.s3_counts().get("GET", 0) - gets == 300


def test_file_object_supports_seek_readinto_and_buffered_reads(
    client: Client, dataset: tuple[str, dict[str, bytes]]
) -> None:
    root, files = dataset
    data = files[f"f{5 * BLOCK + 123}.bin"]
    with client.open(f"{root}/f{5 * BLOCK + 123}.bin") as f:
        assert isinstance(f, io.BufferedReader)
        assert f.read(10) == data[:10]
        f.seek(BLOCK - 3)
        buf = bytearray(7)
        assert f.readinto(buf) == 7 and bytes(buf) == data[BLOCK - 3 : BLOCK + 4]
        f.seek(-5, io.SEEK_END)
        assert f.read() == data[-5:]
        f.seek(0)
        assert f.read() == data
        assert f.read(1) == b""


def test_changed_object_is_read_with_new_bytes_never_old_blocks(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    _put(cluster, bucket, "data/v.bin", b"old-" * 1000)
    root = _mount(client, cluster, bucket, metadata_ttl_ms=1)
    with Client(cluster.master_address) as reader:
        assert reader.read(f"{root}/v.bin") == b"old-" * 1000
    _put(cluster, bucket, "data/v.bin", b"new!" * 900)
    time.sleep(0.01)  # time passes on purpose: past the mount's 1 ms metadata TTL
    with Client(cluster.master_address) as reader:
        assert reader.read(f"{root}/v.bin") == b"new!" * 900


def test_an_open_file_whose_object_changed_raises_conflict_and_the_next_open_reads_the_new(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    old, new = os.urandom(3 * BLOCK), os.urandom(2 * BLOCK + 5)
    _put(cluster, bucket, "data/o.bin", old)
    root = _mount(client, cluster, bucket, metadata_ttl_ms=1)
    with Client(cluster.master_address) as reader:
        opened = reader.open(f"{root}/o.bin", buffering=0)  # its info only: nothing cached
        _put(cluster, bucket, "data/o.bin", new)
        # An open file reads the version it was opened with, or nothing: never a mix.
        with pytest.raises(Conflict):
            opened.read()
        with reader.open(f"{root}/o.bin") as again:
            assert again.read() == new


def test_location_table_names_the_worker_holding_each_block(
    client: Client, dataset: tuple[str, dict[str, bytes]]
) -> None:
    root, files = dataset
    path = f"{root}/f{5 * BLOCK + 123}.bin"
    client.read(path)

    def located() -> Inode | None:
        info = client.stat(path, with_locations=True)
        return info if len(info.locations) == info.block_count else None

    info = eventually(located, what="every block located")  # workers report in batches
    assert sorted(info.locations) == list(range(6))
    live = {w.id for w in client.workers()}
    assert all(holders and set(holders) <= live for holders in info.locations.values())


def test_ls_lists_files_and_subdirectories_with_sizes(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    _put(cluster, bucket, "data/a.txt", b"abc")
    _put(cluster, bucket, "data/sub/b.txt", b"de")
    root = _mount(client, cluster, bucket)
    entries = {e.path: e for e in client.ls(root)}
    assert entries[f"{root}/a.txt"].size == 3 and not entries[f"{root}/a.txt"].is_dir
    assert entries[f"{root}/sub"].is_dir
    assert [e.path for e in client.ls(f"{root}/sub")] == [f"{root}/sub/b.txt"]
    assert any(e.path == root for e in client.ls("/t"))


def test_small_cache_evicts_and_still_serves_correct_bytes(tmp_path: Path) -> None:
    # LRU admits every miss, so every miss past the capacity evicts (tinylfu would keep
    # what it holds and evict nothing here).
    cluster = LocalCluster.up(
        tmp_path / "small",
        workers=1,
        capacity=str(3 * BLOCK),
        lease_ttl=3,
        env={"RESERVOIR_WORKER_EVICTION": "lru"},
    )
    try:
        s3 = cluster.s3_client()
        s3.create_bucket(Bucket="small")
        files = {f"x{i}": os.urandom(2 * BLOCK) for i in range(4)}
        for name, data in files.items():
            s3.put_object(Bucket="small", Key=f"data/{name}", Body=data)
        with Client(cluster.master_address) as c:
            c.mount("/s", "s3://small/data/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
            for _ in range(2):
                for name, data in files.items():
                    assert c.read(f"/s/{name}") == data
            (stats,) = c.worker_stats()
            assert stats.evictions > 0
            assert stats.used_bytes <= 3 * BLOCK
    finally:
        cluster.down()


def test_cold_read_many_stats_a_directory_with_one_listing_not_a_head_per_file(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    files = {f"dir{i % 2}/{i:04d}": os.urandom(50 + i) for i in range(200)}
    for key, data in files.items():
        _put(cluster, bucket, f"data/{key}", data)
    root = _mount(client, cluster, bucket)
    before = cluster.s3_counts()
    with Client(cluster.master_address) as fresh:
        assert fresh.read_many([f"{root}/{k}" for k in files]) == list(files.values())
    after = cluster.s3_counts()
    assert after.get("HEAD", 0) == before.get("HEAD", 0)
    assert after.get("LIST", 0) - before.get("LIST", 0) <= 4


def test_cold_reads_in_a_never_listed_directory_make_one_list_no_head_and_a_get_each(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    files = {f"d/{i:03d}.bin": os.urandom(100 + i) for i in range(48)}
    for key, data in [*files.items(), ("d/sub/deeper.bin", b"x")]:
        _put(cluster, bucket, f"data/{key}", data)
    root = _mount(client, cluster, bucket)
    before = cluster.s3_counts()
    with Client(cluster.master_address) as fresh, ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda key: fresh.read(f"{root}/{key}"), files))
        assert got == list(files.values())
        with pytest.raises(FileNotFoundError):  # answered by the same listing
            fresh.stat(f"{root}/d/absent.bin")
    after = cluster.s3_counts()
    delta = {kind: after.get(kind, 0) - before.get(kind, 0) for kind in ("LIST", "HEAD", "GET")}
    assert delta == {"LIST": 1, "HEAD": 0, "GET": len(files)}


def test_s3_errors_are_retried_within_a_bound_then_reported_clearly(
    cluster: LocalCluster, bucket: str, client: Client
) -> None:
    _put(cluster, bucket, "data/flaky.bin", b"a" * 1000)
    _put(cluster, bucket, "data/down.bin", b"b" * 1000)
    root = _mount(client, cluster, bucket)
    client.ls(root)
    cluster.s3_config(fail_gets=2)  # fewer than the retry budget: nobody notices
    assert client.read(f"{root}/flaky.bin") == b"a" * 1000
    cluster.s3_config(fail_gets=1000)  # the store is down for GETs
    try:
        with Client(cluster.master_address) as c:
            start = time.monotonic()
            with pytest.raises(ConnectionError):
                c.read(f"{root}/down.bin")
            assert time.monotonic() - start < 30
    finally:
        cluster.s3_config(fail_gets=0)
    assert client.read(f"{root}/down.bin") == b"b" * 1000


def test_after_the_first_read_in_a_directory_its_other_files_need_no_master(
    own_cluster: LocalCluster,
) -> None:
    """The first miss in a directory brings the whole listing; with the master frozen,
    every other file of that directory still reads (metadata from the client's cache,
    bytes from the workers and S3)."""
    s3 = own_cluster.s3_client()
    s3.create_bucket(Bucket="listing")
    files = {f"f{i:02d}": os.urandom(1000 + i) for i in range(12)}
    for name, data in files.items():
        s3.put_object(Bucket="listing", Key=f"d/{name}", Body=data)
    config = own_cluster.client_config(rpc_timeout_s=3.0, read_timeout_s=10.0)
    with Client(config=config) as c:
        c.mount("/l", "s3://listing/", endpoint_url=own_cluster.s3_endpoint)
        c.workers()
        assert c.read("/l/d/f00") == files["f00"]
        own_cluster.kill("master", signal.SIGSTOP)
        try:
            for name, data in files.items():
                assert c.read(f"/l/d/{name}") == data
        finally:
            own_cluster.kill("master", signal.SIGCONT)
