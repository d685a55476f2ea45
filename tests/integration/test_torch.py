"""reservoir.torch against a real cluster: both datasets inside DataLoader worker
processes (fork and spawn) read every file once per epoch, byte for byte; the iterable
one splits files across ranks; the cache-aware sampler reads what is cached first and has
the cluster load the rest."""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from reservoir.client import Client  # noqa: E402
from reservoir.local.cluster import LocalCluster  # noqa: E402
from reservoir.torch import (  # noqa: E402
    CacheAwareSampler,
    ClusterCacheView,
    ReservoirIterableDataset,
    ReservoirMapDataset,
)
from tests.conftest import new_mount_path  # noqa: E402
from tests.eventually import eventually  # noqa: E402

BLOCK = 64 * 1024
START_METHODS = ["fork", "spawn"]


def _content(i: int) -> bytes:
    # Mostly small files, a few of several blocks (read whole, not batched).
    size = 3 * BLOCK + 11 if i % 17 == 5 else 100 + 37 * i
    return (i.to_bytes(4, "big") * (size // 4 + 1))[:size]


def _key(i: int) -> str:
    return f"train/c{i % 3}/s{i % 2}/x{i:03d}.bin"


COUNT = 60


@pytest.fixture(scope="module")
def data(cluster: LocalCluster) -> Iterator[tuple[str, dict[str, bytes]]]:
    """A mounted data set: its mount path and every file's Reservoir path -> bytes."""
    bucket = "torch-" + os.urandom(4).hex()
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=bucket)
    for i in range(COUNT):
        s3.put_object(Bucket=bucket, Key=_key(i), Body=_content(i))
    root = new_mount_path()
    with Client(cluster.master_address) as c:
        c.mount(root, f"s3://{bucket}/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
    yield root, {f"{root}/{_key(i)}": _content(i) for i in range(COUNT)}


def with_crc(path: str, data: bytes) -> tuple[str, int, int]:
    """A transform: what a decoder would make of the bytes (importable, for spawn)."""
    return path, len(data), zlib.crc32(data)


def _loader(dataset: object, start_method: str, **kwargs: object) -> DataLoader:  # type: ignore[type-arg]
    return DataLoader(
        dataset,  # type: ignore[arg-type]
        num_workers=2,
        multiprocessing_context=start_method,
        timeout=60,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("start_method", START_METHODS)
def test_map_dataset_in_two_worker_processes_reads_every_file_once_per_epoch_byte_exact(
    cluster: LocalCluster, data: tuple[str, dict[str, bytes]], start_method: str
) -> None:
    root, files = data
    with Client(cluster.master_address) as client:
        dataset = ReservoirMapDataset.from_prefix(f"reservoir://{root}/train", client=client)
        assert dataset.paths == sorted(files) and len(dataset) == COUNT
        # The same two worker processes for both epochs (a spawned one imports torch).
        loader = _loader(dataset, start_method, batch_size=7, shuffle=True, persistent_workers=True)
        for _ in range(2):
            seen: dict[str, bytes] = {}
            for paths, blobs in loader:  # default collate: a list of paths, one of bytes
                for path, blob in zip(paths, blobs, strict=True):
                    assert path not in seen
                    seen[path] = blob
            assert seen == files


@pytest.mark.parametrize("start_method", START_METHODS)
def test_iterable_dataset_splits_files_across_two_ranks_and_their_workers(
    cluster: LocalCluster, data: tuple[str, dict[str, bytes]], start_method: str
) -> None:
    root, files = data
    with Client(cluster.master_address) as client:
        per_rank: list[list[tuple[str, int, int]]] = []
        for rank in range(2):
            dataset = ReservoirIterableDataset.from_prefix(
                root,
                client=client,
                transform=with_crc,
                prefetch=8,
                read_batch=3,
                rank=rank,
                world_size=2,
            )
            loader = _loader(dataset, start_method, batch_size=None)
            per_rank.append(list(loader))
    seen = [item[0] for items in per_rank for item in items]
    assert sorted(seen) == sorted(files)  # each file once, over both ranks
    assert all(items for items in per_rank) and len(per_rank[0]) == COUNT // 2
    for path, size, crc in (item for items in per_rank for item in items):
        assert (size, crc) == (len(files[path]), zlib.crc32(files[path]))


def _cached(view: ClusterCacheView, paths: list[str]) -> set[str]:
    return {p for p, hit in zip(paths, view.cached(paths), strict=True) if hit}


def test_sampler_reads_the_cached_half_first_and_the_cluster_loads_the_other_half(
    cluster: LocalCluster, client: Client
) -> None:
    bucket = "torch-" + os.urandom(4).hex()
    s3 = cluster.s3_client()
    s3.create_bucket(Bucket=bucket)
    for i in range(40):
        s3.put_object(Bucket=bucket, Key=f"d/{i:02d}", Body=_content(i))
    root = new_mount_path()
    client.mount(root, f"s3://{bucket}/d/", endpoint_url=cluster.s3_endpoint, block_size=BLOCK)
    dataset = ReservoirMapDataset.from_prefix(root, client=client)
    view = ClusterCacheView(client)
    warm = dataset.paths[::2]
    client.read_many(warm)
    eventually(lambda: _cached(view, dataset.paths) == set(warm))  # workers' block reports
    assert _cached(view, dataset.paths) == set(warm)

    sampler = CacheAwareSampler(dataset, seed=4)  # a ClusterCacheView over the dataset's client
    assert isinstance(sampler.cache, ClusterCacheView)
    loader = _loader(dataset, "fork", batch_size=4, sampler=sampler)
    order = [p for paths, _ in loader for p in paths]
    assert sorted(order) == dataset.paths
    assert set(order[: len(warm)]) == set(warm) and sampler.cached_count == len(warm)
    (job_id,) = sampler.cache.jobs
    job = client.watch_job(job_id)
    assert job.state == "completed" and job.total_files == len(dataset.paths) - len(warm)
    assert _cached(view, dataset.paths) == set(dataset.paths)

    sampler.set_epoch(1)  # all cached now: no load, and a new order
    again = [p for paths, _ in loader for p in paths]
    assert sorted(again) == dataset.paths and again != order
    assert sampler.cached_count == len(dataset.paths) and sampler.cache.jobs == [job_id]
