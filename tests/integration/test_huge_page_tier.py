"""A worker asked to (`RESERVOIR_WORKER_SHM_HUGE_PAGES=mount`) keeps its block files on a
tmpfs of its own with transparent huge pages, which same-host clients read directly; the
mount goes with the worker, or with the local cluster when the worker was killed."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reservoir.client import Client
from reservoir.common import config as cfg
from reservoir.common.tmpfs_mount import HugeTmpfs, mount_of, mount_points_below
from reservoir.local.cluster import LocalCluster
from tests.conftest import block_files

BLOCK = 4 << 20  # two huge pages
HUGE = {"RESERVOIR_WORKER_SHM_HUGE_PAGES": "mount"}


def _can_mount() -> bool:
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        probe = HugeTmpfs(Path(d) / "probe", 1 << 20)
        mounted = probe.open()
        probe.close()
        return mounted and not mount_points_below(d)


pytestmark = pytest.mark.skipif(
    not _can_mount(), reason="this host refuses tmpfs mounts (needs CAP_SYS_ADMIN)"
)


@pytest.fixture
def huge_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    cluster = LocalCluster.up(tmp_path / "c", workers=1, shm=True, capacity="64MiB", env=HUGE)
    try:
        yield cluster
    finally:
        cluster.down()
    assert not mount_points_below(cluster.shm_root)
    assert not cluster.shm_root.exists()


def _shmem_huge_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("ShmemHugePages:"):
            return int(line.split()[1]) * 1024
    return 0


def test_block_files_land_on_huge_pages_and_read_back_exactly_from_the_files(
    huge_cluster: LocalCluster,
) -> None:
    directory = huge_cluster.shm_root / "worker1"
    on = mount_of(directory)
    assert on is not None and on.mount_point == str(directory) and on.huge_pages
    s3 = huge_cluster.s3_client()
    s3.create_bucket(Bucket="huge")
    data = os.urandom(2 * BLOCK + 4097)
    s3.put_object(Bucket="huge", Key="d/x.bin", Body=data)
    config = cfg.ClientConfig(master=huge_cluster.master_address, short_circuit=True)
    with Client(config=config) as c:
        c.mount("/h", "s3://huge/d/", endpoint_url=huge_cluster.s3_endpoint, block_size=BLOCK)
        assert c.read("/h/x.bin") == data  # cold: landed in the worker's block files
        assert _shmem_huge_bytes() >= 2 * BLOCK  # the two whole blocks, at least
        assert c.read("/h/x.bin") == data
        assert c.read("/h/x.bin", BLOCK - 3, 7) == data[BLOCK - 3 : BLOCK + 4]
        assert c.aio.short_circuit_bytes >= len(data) + 7
    assert len(block_files(huge_cluster, "worker1")) == 3


def test_a_stopped_worker_unmounts_and_a_killed_ones_mount_goes_with_the_cluster(
    huge_cluster: LocalCluster,
) -> None:
    first = huge_cluster.shm_root / "worker1"
    assert mount_points_below(first) == [str(first)]
    huge_cluster.stop("worker1")
    assert mount_points_below(huge_cluster.shm_root) == []
    second = huge_cluster.shm_root / huge_cluster.start_worker(2)
    huge_cluster.kill(second.name)
    assert mount_points_below(second) == [str(second)]  # left behind: the fixture checks
